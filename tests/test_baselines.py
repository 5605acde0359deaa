"""Published baselines as their authors define them (NSS, NaiveTree, RRSw, Khisti, SpecTr-GBV).

Every law is checked against an independent brute-force walk (tests/brute_force.py: a
plain Python simulation of the published rule, enumerated exactly on rational
instances) and, at L = 1, against its closed form. Expected values are derived here or
in THEORY.md, never copied from the program's output.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from brute_force import importance_selection_law, law_blocks, walk_law
from speclp.cli import app
from speclp.lp import optimum as lp_optimum
from speclp.lp.instance import dirichlet_instance, from_rows, ties_instance
from speclp.proofs.gap import gap
from speclp.verifiers.exact import exact_result
from speclp.verifiers.registry import get_verifier, verifier_names
from speclp.verifiers.spectr_gbv import claimed_expected_accepted
from speclp.verifiers.tree import node_depths
from typer.testing import CliRunner

F = Fraction
WALKED = ["nss", "naive_tree", "rrsw", "khisti", "spectr_gbv"]
SIZES = [(1, 2, 2), (2, 2, 2), (2, 3, 1), (3, 2, 1), (2, 3, 2), (3, 2, 2)]  # (K, V, L)


def _instance(rows_p, rows_q, depth, name="handmade"):
    target = np.array([[F(x) for x in row] for row in rows_p], dtype=object)
    draft = np.array([[F(x) for x in row] for row in rows_q], dtype=object)
    return from_rows(target, draft, depth, name)


def anchor_instance():
    """THEORY anchor: p = (.5, .3, .2), q = (.2, .3, .5) at the root (L = 1)."""
    p, q = ["1/2", "3/10", "1/5"], ["1/5", "3/10", "1/2"]
    return _instance([p] * 4, [q] * 4, 1, "anchor")


@pytest.mark.parametrize("name", WALKED)
@pytest.mark.parametrize("paths,vocab,depth", SIZES)
def test_law_equals_brute_force_walk(name, paths, vocab, depth):
    """The law's exact block distribution equals the enumerated walk of the rule."""
    for inst in (dirichlet_instance(vocab, depth, alpha=1.0, seed=paths + depth, denominator=8),
                 ties_instance(vocab, depth, seed=paths)):
        walked = {k: v for k, v in walk_law(name, inst, paths).items() if v}
        law = law_blocks(exact_result(inst.model(exact=True), name, paths=paths).emit, vocab)
        assert walked == law, (name, inst.name)


def _single_step_rows(seed, vocab, denominator=12):
    inst = dirichlet_instance(vocab, 1, alpha=0.7, seed=seed, denominator=denominator)
    return inst, [F(x) for x in inst.model(exact=True).target[0]], \
        [F(x) for x in inst.model(exact=True).draft[0]]


@pytest.mark.parametrize("paths", [1, 2, 3, 4])
@pytest.mark.parametrize("vocab", [2, 3, 4])
def test_single_step_closed_forms(paths, vocab):
    """L = 1 acceptance E[tau], exact:
    NSS        sum_t p(t) (1 - (1 - q(t))^K)                 (Miao et al.; GBV paper)
    NaiveTree  sum_t min(p, q)(t) + sum_t (p - q)_+(t) (1 - (1 - q(t))^(K-1))
               (first child c ~ q accepted w.p. min(1, p/q); otherwise the residual
               sample Y ~ (p - q)_+ / Z continues iff one of the other K - 1 drafts is Y,
               and P(reject) Z-weights cancel: sum_c (q - p)_+(c) = Z)
    Khisti     sum_t min(p(t), r_K(t)), r_K = law of the p/q-importance-selected draft
               (enumerated over all K-tuples)."""
    for seed in range(3):
        inst, p, q = _single_step_rows(100 * vocab + 10 * paths + seed, vocab)
        model = inst.model(exact=True)
        nss = sum(p[t] * (1 - (1 - q[t]) ** paths) for t in range(vocab))
        naive = (sum(min(p[t], q[t]) for t in range(vocab))
                 + sum(max(p[t] - q[t], F(0)) * (1 - (1 - q[t]) ** (paths - 1))
                       for t in range(vocab)))
        r = importance_selection_law(p, q, paths)
        khisti = sum(min(p[t], r[t]) for t in range(vocab))
        for name, expected in (("nss", nss), ("naive_tree", naive), ("khisti", khisti)):
            result = exact_result(model, name, paths=paths)
            assert result.block_efficiency - 1 == expected, (name, seed)
            assert result.total_variation == 0
            floats = exact_result(inst.model(), name, paths=paths)
            assert abs(float(floats.block_efficiency) - 1 - float(expected)) <= 1e-12


def test_khisti_single_step_at_most_optimum():
    """Importance selection then speculative sampling is one token-level scheme: at L = 1
    it cannot beat the single-step optimum min_H [p(H) + 1 - q(H)^K] (Hu et al.)."""
    for vocab, paths in ((3, 2), (4, 3)):
        inst, p, q = _single_step_rows(7 * vocab + paths, vocab)
        best = min(sum(p[t] for t in h) + 1 - sum(q[t] for t in h) ** paths
                   for size in range(vocab + 1) for h in itertools.combinations(range(vocab), size))
        value = exact_result(inst.model(exact=True), "khisti", paths=paths).block_efficiency - 1
        assert value <= best


def test_gap_anchor_shows_nss_closed_form(tmp_path):
    """Done-when: `speclp gap` on the L = 1 anchor, K = 2: NSS = 1 + sum_t p(t)(1-(1-q(t))^2)."""
    path = anchor_instance().save(tmp_path / "anchor.json")
    result = CliRunner().invoke(app, ["gap", str(path), "--paths", "2", "--json",
                                      "--save-dir", str(tmp_path / "ce")])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    expected = (1 + F(1, 2) * (1 - F(4, 5) ** 2) + F(3, 10) * (1 - F(7, 10) ** 2)
                + F(1, 5) * (1 - F(1, 2) ** 2))
    assert expected == F(1483, 1000)
    assert abs(out["verifiers"]["nss"]["block_efficiency"] - float(expected)) <= 1e-12
    assert out["verifiers"]["nss"]["exact"] == "1483/1000"  # exact rational law
    assert out["verifiers"]["nss"]["tv"] <= 1e-12
    for name in ("rrsw", "naive_tree", "khisti", "spectr_gbv", "gbv_clipped"):
        assert name in out["verifiers"]
    # SpecTr-GBV is reported (lossy), not held to the claims: gap still exits 0
    assert out["verifiers"]["spectr_gbv"]["lossless_claimed"] is False
    assert out["verifiers"]["spectr_gbv"]["tv"] > 1e-3


def test_registry_flags():
    names = verifier_names()
    for name in ("nss", "naive_tree", "rrsw", "khisti"):
        assert name in names
    spec = get_verifier("spectr_gbv")
    assert spec.lossless is False and spec.draft_sampling == ()
    assert "spectr_gbv" not in names
    assert get_verifier("rrsw").draft_sampling == ("iid", "without-replacement")
    assert get_verifier("nss").draft_sampling == ("iid", "without-replacement")


@pytest.mark.parametrize("name", ["nss", "rrsw"])
def test_lossless_without_replacement(name):
    """NSS only reads which children were drafted; RRSw removes tried children: both stay
    lossless when the paths are drafted without replacement."""
    for inst in (ties_instance(3, 2, seed=1), dirichlet_instance(2, 2, alpha=1.0, seed=2,
                                                                  denominator=10)):
        result = exact_result(inst.model(exact=True), name, paths=2,
                              draft_sampling="without-replacement")
        assert result.total_variation == 0


# ---------------------------------------------------------------------------
# SpecTr-GBV (Lin et al. 2026): the released rule against its claims
# ---------------------------------------------------------------------------

def spectr_gbv_instance():
    """V = 2, L = 2 (hand-made): root p = (9/10, 1/10), q = (1/2, 1/2); below token 0
    p = (1/2, 1/2), q = (4/5, 1/5); below token 1 p = q = (1/2, 1/2)."""
    half = ["1/2", "1/2"]
    target = [["9/10", "1/10"], half, half, half, half, half, half]
    draft = [half, ["4/5", "1/5"], half, half, half, half, half]
    return _instance(target, draft, 2, "spectr-gbv-V2-L2")


def _claimed(inst, paths):
    model = inst.model(exact=True)
    return claimed_expected_accepted(model.node_probabilities("target"),
                                     model.node_probabilities("draft"),
                                     node_depths(model.vocab_size, model.depth), paths)


def test_spectr_gbv_claim_at_k1_by_hand():
    """K = 1: the claimed E[tau] is sum_z min(P(z), Q(z)) = .6 + .6 = 1.2 here, while the
    node-budget LP (THEORY section 3) gives BV's beta: beta(0) = .5, beta(1) = .1,
    beta(00) = min(.4, .5 * .5) = .25, beta(01) = .1, beta(10) = beta(11) = .05: 1.05."""
    inst = spectr_gbv_instance()
    assert _claimed(inst, 1) == F(6, 5)
    record = lp_optimum(inst, paths=1)
    assert record.certified and record.exact_value == 1 + F(105, 100)
    assert exact_result(inst.model(exact=True), "bv", paths=1).block_efficiency == F(205, 100)
    law = exact_result(inst.model(exact=True), "spectr_gbv", paths=1)
    assert law.block_efficiency - 1 == F(6, 5)  # the rule attains the claim ...
    assert law.total_variation > 0  # ... by being lossy


def test_spectr_gbv_claim_is_not_the_certified_optimum():
    """K = 2: the claimed 'optimal' E[tau] is ABOVE the certified K-path optimum (no
    lossless verifier can reach it); K = 3 on the same instance: BELOW it (so not optimal
    either). In both cases the released rule's exact E[tau] is neither, and it is lossy."""
    inst = spectr_gbv_instance()
    for paths, above in ((2, True), (3, False)):
        record = lp_optimum(inst, paths=paths)
        assert record.certified
        optimum, claimed = record.exact_value, 1 + _claimed(inst, paths)
        assert (claimed > optimum) if above else (claimed < optimum)
        law = exact_result(inst.model(exact=True), "spectr_gbv", paths=paths)
        assert law.block_efficiency not in (claimed, optimum)
        assert law.total_variation > 0


def test_spectr_gbv_smallest_lossy_instances():
    """K = 1, L = 1 it is token-level speculative sampling (lossless); it is lossy already
    at (K = 2, L = 1) and at (K = 1, L = 2) on V = 2."""
    for seed in range(5):
        inst = dirichlet_instance(2, 1, alpha=1.0, seed=seed, denominator=10)
        model = inst.model(exact=True)
        assert exact_result(model, "spectr_gbv", paths=1).total_variation == 0
        assert (exact_result(model, "spectr_gbv", paths=1).block_efficiency
                == exact_result(model, "token", paths=1).block_efficiency)
    lossy_k2 = dirichlet_instance(2, 1, alpha=1.0, seed=0, denominator=10)
    assert exact_result(lossy_k2.model(exact=True), "spectr_gbv", paths=2).total_variation > 0
    assert exact_result(spectr_gbv_instance().model(exact=True), "spectr_gbv",
                        paths=1).total_variation > 0


def test_spectr_gbv_claim_never_above_optimum_at_depth_one():
    """At L = 1 the claimed value sum_t p (1 - (1 - min(1, q/p))^K) is a valid
    token-level acceptance bound (checked against min_H [p(H) + 1 - q(H)^K])."""
    for vocab, paths, seed in itertools.product((2, 3), (2, 3), range(4)):
        inst, p, q = _single_step_rows(seed, vocab, denominator=10)
        best = min(sum(p[t] for t in h) + 1 - sum(q[t] for t in h) ** paths
                   for size in range(vocab + 1) for h in itertools.combinations(range(vocab), size))
        assert _claimed(inst, paths) <= best


def test_gap_reports_spectr_gbv_without_failing():
    result = gap(spectr_gbv_instance(), 2, verifiers=["bv", "gbv", "spectr_gbv"])
    assert result["failures"] == []
    row = result["verifiers"]["spectr_gbv"]
    assert row["lossless_claimed"] is False and row["tv"] > 1e-3
