"""Selection-class LP (lp/class_lp.py), node form (lp/node_form.py), their claims
(proofs/class_claims.py) and CLI."""

import dataclasses
import itertools
import json
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from speclp.cli import app
from speclp.lp import optimum
from speclp.lp.class_lp import class_lp_optimum, greedy_vertex
from speclp.lp.hitting import HittingFunction, hitting_function
from speclp.lp.instance import bv_toy, dirichlet_instance, from_rows, ties_instance
from speclp.lp.node_form import node_form_optimum
from speclp.proofs import class_claims
from speclp.verifiers.exact import configurations, exact_result
from typer.testing import CliRunner

runner = CliRunner()


def rational(vocab, depth, seed, denominator=16):
    return dirichlet_instance(vocab, depth, seed=seed, denominator=denominator)


# ---------------------------------------------------------------------------
# separation lemma
# ---------------------------------------------------------------------------

def brute_force_minimum(q, values, paths):
    """min over all subsets S (empty included) of 1 - (1 - q(S))^K - values(S)."""
    best = Fraction(0)
    n = len(q)
    for size in range(1, n + 1):
        for subset in itertools.combinations(range(n), size):
            qs = sum((q[e] for e in subset), Fraction(0))
            vs = sum((values[e] for e in subset), Fraction(0))
            best = min(best, 1 - (1 - qs) ** paths - vs)
    return best


def random_law(rng, n, zeros, denominator):
    weights = [0 if rng.random() < zeros else rng.randint(1, denominator) for _ in range(n)]
    if sum(weights) == 0:
        weights[rng.randrange(n)] = 1
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


@pytest.mark.parametrize("seed", range(60))
def test_separation_lemma_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    paths = rng.randint(1, 4)
    q = random_law(rng, n, zeros=0.25, denominator=6)
    # arbitrary values: a law, a scaled law (not summing to 1), with ties and zeros
    values = random_law(rng, n, zeros=0.3, denominator=4)
    values = [v * Fraction(rng.randint(1, 7), 4) for v in values]
    hit = hitting_function_from(q, paths)
    value, members = hit.minimum(np.array(values, dtype=object), exact=True)
    expected = brute_force_minimum(q, values, paths)
    assert value == expected
    if members:  # the reported set attains the minimum
        qs = sum((q[e] for e in members), Fraction(0))
        assert 1 - (1 - qs) ** paths - sum((values[e] for e in members), Fraction(0)) == value
    float_value, _ = hit.minimum(np.array([float(v) for v in values]), exact=False)
    assert abs(float_value - float(expected)) < 1e-12


def hitting_function_from(q, paths):
    q_exact = np.array(q, dtype=object)
    return HittingFunction("iid", len(q), paths, q_exact, np.array([float(x) for x in q]))


# ---------------------------------------------------------------------------
# P_K: the hitting function and the reachable skewed laws
# ---------------------------------------------------------------------------

def hit_by_enumeration(model, paths, draft_sampling, members):
    """P(some drafted path lies in `members`) from the ordered configurations of verifiers.exact."""
    configs = configurations(model, paths, draft_sampling)
    vocab, depth = model.vocab_size, model.depth
    codes = (configs.tokens * vocab ** np.arange(depth - 1, -1, -1)).sum(-1)  # [C, K]
    hit = np.isin(codes, list(members)).any(axis=1)
    return sum((p for p, h in zip(configs.probability, hit, strict=True) if h), Fraction(0))


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
@pytest.mark.parametrize("paths", [2, 3])
def test_hitting_function_is_the_hitting_probability(draft_sampling, paths):
    model = rational(2, 2, seed=3).model(exact=True)
    hit = hitting_function(model, paths, draft_sampling)
    table = hit.table(exact=True)
    for mask in range(1, 16):
        members = [e for e in range(4) if mask >> e & 1]
        expected = hit_by_enumeration(model, paths, draft_sampling, members)
        assert hit.exact(members) == expected
        assert table[mask] == expected


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
def test_selection_rules_land_in_p_k_and_greedy_rules_are_vertices(draft_sampling):
    model = rational(2, 2, seed=5).model(exact=True)
    paths = 2
    hit = hitting_function(model, paths, draft_sampling)
    table = hit.table(exact=True)
    configs = configurations(model, paths, draft_sampling)
    codes = (configs.tokens * np.array([2, 1])).sum(-1)  # [C, K] path index
    rng = random.Random(0)
    for _ in range(20):  # random deterministic rules: the induced law satisfies r(S) <= f(S)
        r = [Fraction(0)] * 4
        for prob, drafted in zip(configs.probability, codes, strict=True):
            r[int(rng.choice(list(drafted)))] += prob
        assert sum(r) == 1
        for mask in range(1, 16):
            assert sum((r[e] for e in range(4) if mask >> e & 1), Fraction(0)) <= table[mask]
    for order in itertools.permutations(range(4)):  # "highest-ranked drafted path" = greedy vertex
        rank = {x: i for i, x in enumerate(order)}
        r = [Fraction(0)] * 4
        for prob, drafted in zip(configs.probability, codes, strict=True):
            r[min((int(x) for x in drafted), key=rank.__getitem__)] += prob
        assert list(greedy_vertex(hit, list(order))) == r


# ---------------------------------------------------------------------------
# class LP and node form
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 1), (3, 2, 2, 2), (2, 3, 3, 4)])
def test_enumeration_and_cutting_planes_agree(vocab, depth, paths, seed):
    inst = rational(vocab, depth, seed)
    for solve in (class_lp_optimum, node_form_optimum):
        enumerated = solve(inst, paths, method="enumerate")
        cuts = solve(inst, paths, method="cuts")
        assert enumerated.certified and cuts.certified, (enumerated, cuts)
        assert enumerated.exact_value == cuts.exact_value
        assert cuts.details["cuts"] < enumerated.details["cuts"]
        assert enumerated.details["min_subset_slack"] >= 0 <= cuts.details["min_subset_slack"]


def test_cutting_planes_beyond_enumeration_limit():
    inst = rational(2, 5, seed=0)  # 32 paths: 2^32 subsets are never enumerated
    result = class_lp_optimum(inst, 2)
    assert result.method == "cuts" and result.certified
    assert result.details["min_subset_slack"] >= 0
    node = node_form_optimum(inst, 2)
    assert node.certified and node.exact_value >= result.exact_value


def test_optimal_skewed_law_is_in_p_k():
    inst = rational(3, 2, seed=7)
    result = class_lp_optimum(inst, 3)
    r = list(result.details["leaf_law"])
    assert sum(r) == 1 and min(r) >= 0
    hit = hitting_function(inst.model(exact=True), 3)
    assert hit.minimum(np.array(r, dtype=object), exact=True)[0] == 0


@pytest.mark.parametrize("seed", range(4))
def test_one_path_class_is_block_verification(seed):
    inst = rational(3, 2, seed) if seed % 2 else ties_instance(2, 3, seed=seed)
    result = class_lp_optimum(inst, 1)
    bv = exact_result(inst.model(exact=True), "bv").block_efficiency
    assert result.certified and result.exact_value == Fraction(bv)


def test_one_path_anchor_bv_toy():
    # docs/theory.md section 2.4: BV accepts 11/9 tokens on the toy at L = 2, so E[tau + 1] = 20/9
    assert class_lp_optimum(bv_toy(2), 1).exact == "20/9"


def test_single_step_anchor():
    # docs/theory.md sections 8.3, 10.11 (Hu et al.): p = (.5,.3,.2), q = (.2,.3,.5), K = 2 iid: optimal
    # acceptance .86. At L = 1 the class reaches it: E[tau + 1] = 1.86 = 93/50.
    p = [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]
    q = [Fraction(1, 5), Fraction(3, 10), Fraction(1, 2)]
    target = np.array([p] * 4, dtype=object)
    draft = np.array([q] * 4, dtype=object)
    inst = from_rows(target, draft, depth=1)
    assert class_lp_optimum(inst, 2).exact == "93/50"
    assert optimum(inst, 2, method="full").exact == "93/50"


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 11), (3, 2, 2, 12), (2, 3, 3, 13)])
def test_class_below_full_below_node_form(vocab, depth, paths, seed, draft_sampling):
    inst = rational(vocab, depth, seed)
    full = optimum(inst, paths, draft_sampling, method="full")
    cls = class_lp_optimum(inst, paths, draft_sampling=draft_sampling)
    node = node_form_optimum(inst, paths, draft_sampling=draft_sampling)
    assert full.certified and cls.certified and node.certified
    # theorem (lp/colgen.py): class = full; the node form is a relaxation
    assert cls.exact_value == full.exact_value <= node.exact_value


@pytest.mark.parametrize("seed", range(3))
def test_class_at_least_gbv(seed):
    inst = rational(2, 3, seed)
    for paths in (2, 3):
        gbv = exact_result(inst.model(exact=True), "gbv", paths=paths)
        cls = class_lp_optimum(inst, paths)
        assert gbv.total_variation == 0
        assert cls.certified and cls.exact_value >= Fraction(gbv.block_efficiency)


# ---------------------------------------------------------------------------
# the checks can fail
# ---------------------------------------------------------------------------

def shifted(real, shift):
    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        return dataclasses.replace(out, value=out.value + float(shift),
                                   exact_value=out.exact_value + shift)
    return wrapper


def test_class_check_holds_on_small_run(tmp_path):
    result = class_claims.check_class_equals_full(3, 2, 2, 2, denominator=16, save_dir=tmp_path)
    assert result["passed"], result
    assert sum(result["relations"]["class vs full"].values()) == 3
    assert not list(tmp_path.iterdir())


def test_class_check_fails_on_a_wrong_class_optimum(tmp_path, monkeypatch):
    monkeypatch.setattr(class_claims, "class_lp_optimum",
                        shifted(class_lp_optimum, Fraction(-1, 1000)))
    result = class_claims.check_class_equals_full(3, 2, 2, 2, denominator=16, save_dir=tmp_path)
    assert not result["passed"] and result["kind"] == "counterexample"
    assert result["counterexample"]["comparisons"]["class vs full"]["exact_difference"] == "-1/1000"
    saved = json.loads(Path(result["saved"]).read_text())
    assert saved["vocab_size"] == 2 and saved["depth"] == 2


def test_class_above_full_is_reported_as_a_bug(tmp_path, monkeypatch):
    monkeypatch.setattr(class_claims, "class_lp_optimum",
                        shifted(class_lp_optimum, Fraction(1, 1000)))
    result = class_claims.check_class_equals_full(2, 2, 2, 2, denominator=16, save_dir=tmp_path)
    assert not result["passed"] and result["kind"] == "bug"
    assert any("above the full" in bug for bug in result["bugs"])


def test_node_form_check_fails_on_a_wrong_node_optimum(tmp_path, monkeypatch):
    # node form lowered below the class: both the open claim and a theorem (full <= node) fail
    monkeypatch.setattr(class_claims, "node_form_optimum",
                        shifted(node_form_optimum, Fraction(-1)))
    result = class_claims.check_node_form(2, 2, 2, 2, denominator=16, save_dir=tmp_path)
    assert not result["passed"] and result["kind"] == "bug"


def test_cli_exit_codes(tmp_path, monkeypatch):
    ok = runner.invoke(app, ["check", "class-equals-full", "--trials", "2", "--denominator", "16",
                             "--save-dir", str(tmp_path), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["passed"] is True
    bad = runner.invoke(app, ["check", "node-form", "--paths", "0"])
    assert bad.exit_code == 2 and "--paths" in bad.output
    # node-form runs its own claim through the shared command function (at L = 1 the node
    # form is the class LP itself, docs/theory.md section 7.1: it holds)
    node = runner.invoke(app, ["check", "node-form", "--trials", "1", "--depth", "1", "--against",
                               "full", "--denominator", "16", "--save-dir", str(tmp_path), "--json"])
    assert node.exit_code == 0, node.output
    assert json.loads(node.stdout)["claim"] == "node-form-vs-full"
    monkeypatch.setattr(class_claims, "class_lp_optimum",
                        shifted(class_lp_optimum, Fraction(-1, 1000)))
    failed = runner.invoke(app, ["check", "class-equals-full", "--trials", "2", "--denominator",
                                 "16", "--save-dir", str(tmp_path), "--json"])
    assert failed.exit_code == 1, failed.output
    payload = json.loads(failed.stdout)
    assert payload["passed"] is False and Path(payload["saved"]).exists()
    table = runner.invoke(app, ["check", "class-equals-full", "--trials", "1", "--denominator",
                                "16", "--save-dir", str(tmp_path)])
    assert table.exit_code == 1 and "counterexample" in table.output


def test_exact_separation_catches_what_float_missed():
    # tiny probabilities (alpha = 0.3): the float64 separation misses a cut violated by
    # about 1e-13 and the float basis is off in exact arithmetic; the exact stage repairs both
    inst = dirichlet_instance(2, 2, alpha=0.3, seed=18)
    cuts = class_lp_optimum(inst, 2, method="cuts")
    enumerated = class_lp_optimum(inst, 2, method="enumerate")
    assert cuts.certified and enumerated.certified
    assert cuts.exact_value == enumerated.exact_value
    assert cuts.details["min_subset_slack"] >= 0


def test_cutting_planes_that_do_not_converge_give_a_labelled_uncertified_result():
    inst = rational(2, 3, seed=4)
    converged = class_lp_optimum(inst, 3, method="cuts")
    stopped = class_lp_optimum(inst, 3, method="cuts", max_rounds=1)
    assert converged.certified and converged.details["rounds"] > 1
    assert not stopped.certified and stopped.exact_value is None and stopped.exact is None
    assert "did not converge in 1 rounds" in stopped.certificate
    assert "upper bound" in stopped.certificate
    assert stopped.value >= converged.value - 1e-12  # a relaxation: never below the optimum


def test_compare_with_an_optimum_not_found_is_undecided():
    """A time-limited solve without a value is '?' (undecided), never a crash or a relation."""
    from speclp.proofs.class_claims import compare

    missing = {"value": None, "certified": False}
    found = {"value": 1.5, "certified": False}
    assert compare(missing, found)["relation"] == "?"
    assert compare(found, missing)["relation"] == "?"
    assert compare(found, {"value": 1.5, "certified": False})["relation"] == "="
