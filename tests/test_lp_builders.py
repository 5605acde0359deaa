"""Full LP (K paths, lp/full.py) and node LP (lp/node.py): structure, anchors, equalities with BV.

Expected values come from docs/theory.md anchors (sections 2.4, 10.11) or are computed
independently in the test (brute force over subsets / orderings, the BV exact law); none is
copied from the LP code.
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from speclp.lp.certify import certify, solve_exact
from speclp.lp.full import estimate_full_lp, full_lp
from speclp.lp.instance import bv_toy, dirichlet_instance, from_rows
from speclp.lp.node import node_lp, node_optimum
from speclp.lp.solve import solve
from speclp.verifiers.drafts import multiset_configurations
from speclp.verifiers.exact import exact_result
from speclp.verifiers.tree import TreeModel, num_nodes

TOY_BE = {2: Fraction(20, 9), 3: Fraction(8, 3), 4: Fraction(247, 81)}  # 1 + 11/9, 5/3, 166/81


def certified_value(lp):
    solution, cert = solve_exact(lp)
    assert solution.status == "optimal", solution.notes
    assert cert.certified, cert.reason
    assert abs(float(cert.value) - solution.value) <= 1e-7
    return cert.value


def one_step_instance(p, q):
    """L = 1 rational instance with root rows p, q (depth-1 rows uniform, unused by the optimum)."""
    vocab = len(p)
    uniform = [Fraction(1, vocab)] * vocab
    target = np.array([list(map(Fraction, p))] + [uniform] * vocab, dtype=object)
    draft = np.array([list(map(Fraction, q))] + [uniform] * vocab, dtype=object)
    return from_rows(target, draft, 1)


def some_draft_in(B, q, paths, draft_sampling):
    """P(at least one of the K drafts lies in B), by brute force over ordered draws."""
    outside = Fraction(0)
    tokens = range(len(q))
    if draft_sampling == "iid":
        for seq in itertools.product(tokens, repeat=paths):
            if not any(t in B for t in seq):
                outside += math.prod((q[t] for t in seq), start=Fraction(1))
    else:
        for seq in itertools.permutations(tokens, paths):
            prob, used = Fraction(1), Fraction(0)
            for t in seq:
                prob *= q[t] / (1 - used) if used != 1 else 0
                used += q[t]
            if not any(t in B for t in seq):
                outside += prob
    return 1 - outside


def hu_optimum(p, q, paths, draft_sampling):
    """Hu et al. single-step optimum alpha* = 1 - max_B [p(B) - P(some draft in B)]."""
    best = Fraction(0)
    for size in range(len(p) + 1):
        for B in itertools.combinations(range(len(p)), size):
            gap = sum((p[t] for t in B), Fraction(0)) - some_draft_in(set(B), q, paths,
                                                                        draft_sampling)
            best = max(best, gap)
    return 1 - best


# ---------------------------------------------------------------------------
# structure
# ---------------------------------------------------------------------------

def test_configuration_counts_and_weights():
    inst = dirichlet_instance(3, 2, seed=4, denominator=12)
    model = inst.model(exact=True)
    q = model.draft_path_probabilities()
    positive = sum(1 for x in q if x != 0)
    iid = multiset_configurations(model, 3, "iid")
    assert len(iid) == math.comb(positive + 2, 3)
    assert sum(iid.weight, Fraction(0)) == 1
    # the weight of a multiset = sum of the ordered-tuple probabilities
    for c in range(0, len(iid), 17):
        tup = iid.paths[c]
        ordered = set(itertools.permutations(tup.tolist()))
        assert iid.weight[c] == sum(math.prod((q[i] for i in o), start=Fraction(1))
                                    for o in ordered)
    wor = multiset_configurations(model, 2, "without-replacement")
    assert len(wor) == math.comb(positive, 2)
    assert sum(wor.weight, Fraction(0)) == 1
    a, b = wor.paths[0]
    assert wor.weight[0] == q[a] * q[b] / (1 - q[a]) + q[b] * q[a] / (1 - q[b])


def test_single_path_sizes_and_labels():
    inst = dirichlet_instance(3, 2, seed=1)  # Dirichlet draws: every path has q > 0
    lp = full_lp(inst, paths=1)
    V, L = 3, 2
    assert lp.num_vars == V**L * (L + 1) * V + num_nodes(V, L) - 1
    assert lp.num_eq == (V**L - 1) + num_nodes(V, L) * V  # one marginal row dropped
    assert any("dropped" in note for note in lp.notes)
    toy = full_lp(bv_toy(2), paths=2)
    assert toy.variable_label(0) == "pi[c=((0, 0), (0, 0)), node=(), y=0]"
    assert toy.variable_label(toy.num_vars - 1) == "A[(1, 1)]"
    labels = [toy.variable_label(j) for j in range(toy.num_vars)]
    assert "pi[c=((0, 1), (1, 1)), node=(0,), y=1]" in labels
    assert len(set(labels)) == toy.num_vars


def test_float_only_build():
    inst = dirichlet_instance(2, 3, seed=3)
    lp = full_lp(inst, paths=2, exact=False)
    assert lp.exact_table is None
    cert = certify(lp, solve(lp))
    assert not cert.certified and "exact" in cert.reason
    assert node_lp(inst, exact=False).exact_table is None


def test_refuses_too_large():
    inst = dirichlet_instance(4, 4, seed=0)
    size = estimate_full_lp(inst.model(), 4)
    assert size["nonzeros"] > 2e7
    with pytest.raises(ValueError, match="nonzeros"):
        full_lp(inst, paths=4)


def test_without_replacement_needs_enough_paths():
    target = np.array([[Fraction(1, 2)] * 2] * 3, dtype=object)
    draft = np.array([[Fraction(1), Fraction(0)]] + [[Fraction(1, 2)] * 2] * 2, dtype=object)
    inst = from_rows(target, draft, 1)
    with pytest.raises(ValueError, match="distinct"):
        full_lp(inst, paths=2, draft_sampling="without-replacement")


# ---------------------------------------------------------------------------
# single path: anchors and equalities
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [2, 3, 4])
def test_bv_toy_anchors(depth):
    inst = bv_toy(depth)
    assert certified_value(full_lp(inst, paths=1)) == TOY_BE[depth]
    assert certified_value(node_lp(inst)) == TOY_BE[depth]
    assert node_optimum(inst)[1] == TOY_BE[depth]


@pytest.mark.parametrize("vocab,depth,seed", [(2, 2, 0), (2, 4, 1), (3, 2, 2), (3, 3, 3),
                                              (4, 2, 4), (2, 3, 5)])
def test_single_path_equalities_exact(vocab, depth, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=seed, denominator=12)
    bv = exact_result(inst.model(exact=True), "bv").block_efficiency
    beta, closed = node_optimum(inst)
    assert closed == bv
    assert beta[0] == 1 and all(b >= 0 for b in beta)
    assert certified_value(full_lp(inst, paths=1)) == bv
    assert certified_value(node_lp(inst)) == bv


@pytest.mark.parametrize("vocab,depth,seed", [(2, 3, 0), (3, 2, 1), (3, 3, 2), (5, 2, 3)])
def test_single_path_equalities_float(vocab, depth, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.5, seed=seed)
    model = inst.model()
    bv = float(exact_result(model, "bv").block_efficiency)
    beta, closed = node_optimum(model)
    assert beta.dtype == np.float64
    assert abs(closed - bv) <= 1e-9
    assert abs(solve(full_lp(model, paths=1, exact=False)).value - bv) <= 1e-9
    assert abs(solve(node_lp(model, exact=False)).value - bv) <= 1e-9


def test_node_optimum_scale():
    """A million nodes (its speed is measured by benchmarks/lp_scale.py, not here)."""
    rng = np.random.default_rng(0)
    count = num_nodes(2, 19)  # 2^20 - 1 nodes
    model = TreeModel(rng.dirichlet([1, 1], count), rng.dirichlet([1, 1], count), 19)
    beta, value = node_optimum(model)
    assert len(beta) >= 1_000_000
    assert 1.0 <= value <= 20.0


# ---------------------------------------------------------------------------
# K paths
# ---------------------------------------------------------------------------

P_ANCHOR = (Fraction(1, 2), Fraction(3, 10), Fraction(1, 5))
Q_ANCHOR = (Fraction(1, 5), Fraction(3, 10), Fraction(1, 2))


def test_k_path_anchor_iid():
    p, q = P_ANCHOR, Q_ANCHOR
    khisti = min(sum((p[t] for t in S), Fraction(0)) + 1 - sum((q[t] for t in S), Fraction(0)) ** 2
                 for size in range(4) for S in itertools.combinations(range(3), size))
    assert abs(float(khisti) - 0.86) < 5e-5
    value = certified_value(full_lp(one_step_instance(p, q), paths=2))
    assert value - 1 == khisti
    assert round(float(value - 1), 4) == pytest.approx(0.86, abs=1e-12)


def test_k_path_anchor_without_replacement():
    inst = one_step_instance(P_ANCHOR, Q_ANCHOR)
    value = certified_value(full_lp(inst, paths=2, draft_sampling="without-replacement"))
    assert abs(float(value - 1) - 0.9857) < 5e-5
    assert value - 1 == hu_optimum(P_ANCHOR, Q_ANCHOR, 2, "without-replacement")


@pytest.mark.parametrize("vocab,paths,draft_sampling,seed", [
    (2, 2, "iid", 0), (3, 2, "iid", 1), (3, 3, "iid", 2), (4, 2, "iid", 3),
    (3, 2, "without-replacement", 4), (4, 3, "without-replacement", 5), (4, 2, "iid", 6),
])
def test_one_step_equals_hu(vocab, paths, draft_sampling, seed):
    inst = dirichlet_instance(vocab, 1, alpha=0.6, seed=seed, denominator=20)
    model = inst.model(exact=True)
    p, q = list(model.target[0]), list(model.draft[0])
    value = certified_value(full_lp(inst, paths=paths, draft_sampling=draft_sampling))
    assert value - 1 == hu_optimum(p, q, paths, draft_sampling)


@pytest.mark.parametrize("vocab,depth,paths,draft_sampling,seed", [
    (2, 2, 2, "iid", 0), (2, 3, 2, "iid", 1), (3, 2, 2, "iid", 2), (2, 2, 3, "iid", 3),
    (3, 2, 2, "without-replacement", 4), (2, 3, 3, "without-replacement", 5),
])
def test_k_paths_at_least_bv(vocab, depth, paths, draft_sampling, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=seed, denominator=12)
    bv = exact_result(inst.model(exact=True), "bv").block_efficiency
    assert certified_value(full_lp(inst, paths=paths, draft_sampling=draft_sampling)) >= bv


@settings(max_examples=12, deadline=None)
@given(vocab=st.integers(2, 3), depth=st.integers(1, 2), seed=st.integers(0, 10**6),
       alpha=st.sampled_from([0.3, 1.0, 3.0]))
def test_monotone_in_paths(vocab, depth, seed, alpha):
    inst = dirichlet_instance(vocab, depth, alpha=alpha, seed=seed)
    values = [solve(full_lp(inst, paths=k, exact=False)).value for k in (1, 2, 3)]
    assert values[0] <= values[1] + 1e-9 <= values[2] + 2e-9
