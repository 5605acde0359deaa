"""Structure-aware exact laws (verifiers/structure.py) equal the enumeration EXACTLY.

Reference: the same verifier's law enumerated over every ordered K-tuple of drafted paths
(verifiers.exact, enumeration="ordered"), in exact rationals, on random small instances
with zeros in the draft and target rows and ties among the ratios p/q (hypothesis).
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp.instance import dirichlet_instance, ties_instance
from speclp.verifiers.exact import enumeration_size, exact_result
from speclp.verifiers.multipath import _naive_tree_rule
from speclp.verifiers.registry import get_verifier, verifier_names
from speclp.verifiers.spectr_gbv import first_visit_work
from speclp.verifiers.structure import (
    evaluation_kind,
    rule_evaluations,
    sibling_evaluations_bound,
    structured_law,
)
from strategies import rational_instance, rational_instances

STRUCTURED = [n for n in verifier_names(include_broken=True)
              if evaluation_kind(get_verifier(n), 2) is not None]


def assert_structure_equals_enumeration(model, name, paths):
    fast = exact_result(model, name, paths)
    spec = get_verifier(name)
    assert fast.enumeration == evaluation_kind(spec, paths)
    reference = exact_result(model, name, paths, enumeration="ordered")
    assert (fast.emit == reference.emit).all(), name  # exact rationals, entry by entry
    assert fast.block_efficiency == reference.block_efficiency
    assert fast.total_variation_exact == reference.total_variation_exact
    return fast


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=rational_instances(), paths=st.integers(1, 3))
def test_structure_equals_ordered_enumeration_exactly(instance, paths):
    model = instance.model(exact=True)
    for name in STRUCTURED:
        if paths == 3 and model.vocab_size ** model.depth > 4 and name == "spectr":
            continue  # rational K-SEQ rho search is slow; covered at smaller sizes
        assert_structure_equals_enumeration(model, name, paths)


@pytest.mark.parametrize("name", STRUCTURED)
def test_structure_on_ties_and_dirichlet(name):
    for inst, paths in ((ties_instance(3, 2, seed=2), 3),
                        (dirichlet_instance(2, 3, alpha=0.5, seed=5, denominator=8), 2)):
        result = assert_structure_equals_enumeration(inst.model(exact=True), name, paths)
        if get_verifier(name).lossless:
            assert result.total_variation_exact == 0  # exactly lossless, exactly 0


def test_every_multipath_lossless_verifier_has_structure():
    """Which verifiers keep the enumeration (stated in verifiers/structure.py): no lossless
    multi-path one; traversal by the sibling recursion."""
    enumerated = {n for n in verifier_names() if get_verifier(n).multipath
                  and evaluation_kind(get_verifier(n), 3) is None}
    assert enumerated == set()
    assert evaluation_kind(get_verifier("traversal"), 3) == "sibling recursion"
    assert evaluation_kind(get_verifier("bv_extended"), 3) == "fresh-start recursion"
    assert evaluation_kind(get_verifier("gbv"), 3, "without-replacement") is None
    assert evaluation_kind(get_verifier("bv"), 1) is None  # single path: K = 1 enumeration


def test_float_structure_matches_exact():
    inst = dirichlet_instance(3, 2, alpha=0.8, seed=4, denominator=16)
    for name in STRUCTURED:
        exact = exact_result(inst.model(exact=True), name, 3)
        floats = exact_result(inst.model(exact=False), name, 3)
        assert floats.enumeration == exact.enumeration
        difference = np.abs(floats.emit - exact.emit.astype(np.float64)).max()
        assert difference < 1e-13, (name, difference)


def test_counts_of_the_node_recursion():
    """At V = 3, L = 2, K = 2 the bound counts 3 + 9 tuples at each of the 4 nodes of depth
    < 2 (48); the walk holds exactly K = 2 paths at the root (9 tuples) and 1 or 2 at each
    depth-1 node (3 + 9; Dirichlet rows are positive, so all of them happen): 45."""
    assert rule_evaluations(3, 2, 2) == 4 * 12
    model = dirichlet_instance(3, 2, seed=0).model(exact=False)
    result = structured_law(model, get_verifier("specinfer"), 2)
    assert result.evaluations == 45  # the root has K = 2 paths only: 9 + 3 * 12
    assert enumeration_size(model, "specinfer", 2) == 48
    assert enumeration_size(model, "gbv", 2) == 9


def test_a_wrong_node_rule_is_caught():
    """The comparison can fail: SpecInfer's walk evaluated with NaiveTree's node rule."""
    model = dirichlet_instance(3, 2, alpha=0.7, seed=1, denominator=12).model(exact=True)
    spec = dataclasses.replace(get_verifier("specinfer"), node_rule=_naive_tree_rule)
    wrong = structured_law(model, spec, 2)
    reference = exact_result(model, "specinfer", 2, enumeration="ordered")
    assert not (wrong.emit == reference.emit).all()


def test_a_wrong_selection_law_is_caught():
    """BV against the draft law q instead of GBV's selection law is not GBV's law."""
    model = dirichlet_instance(2, 2, alpha=0.7, seed=3, denominator=10).model(exact=True)
    spec = dataclasses.replace(get_verifier("gbv"),
                               selection_rows=lambda m, paths, **options: m.draft)
    wrong = structured_law(model, spec, 3)
    reference = exact_result(model, "gbv", 3, enumeration="ordered")
    assert not (wrong.emit == reference.emit).all()


# ---------------------------------------------------------------------------
# traversal: the (node, paths, entry weight) sibling recursion
# ---------------------------------------------------------------------------

@st.composite
def traversal_cases(draw):
    """(instance, K) with V, L, K in {2, 3} (K = 1 too, and L = 1), ties and zeros in the rows,
    at most 4096 ordered K-tuples for the reference."""
    vocab = draw(st.integers(2, 3))
    depth = draw(st.integers(1, 3))
    paths = draw(st.integers(1, 3))
    if vocab ** (depth * paths) > 4096:
        paths = max(p for p in (1, 2, 3) if vocab ** (depth * p) <= 4096)
    return rational_instance(draw, vocab, depth), paths


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=traversal_cases())
def test_traversal_recursion_equals_ordered_enumeration_exactly(case):
    instance, paths = case
    model = instance.model(exact=True)
    fast = assert_structure_equals_enumeration(model, "traversal", paths)
    assert fast.configurations <= sibling_evaluations_bound(model.vocab_size, model.depth, paths)
    assert fast.total_variation_exact == 0  # traversal is lossless, exactly


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=traversal_cases())
def test_spectr_gbv_recursion_equals_ordered_enumeration_exactly(case):
    """spectr_gbv's first-visit law: the same law (also where the rule is undefined: the
    same zero rows, the same undefined mass) as every ordered K-tuple."""
    instance, paths = case
    model = instance.model(exact=True)
    fast = assert_structure_equals_enumeration(model, "spectr_gbv", paths)
    reference = exact_result(model, "spectr_gbv", paths, enumeration="ordered")
    assert fast.undefined_mass == reference.undefined_mass == 1 - fast.emit.sum()
    assert (fast.undefined_configurations == 0) == (reference.undefined_configurations == 0)
    assert fast.configurations <= first_visit_work(model.vocab_size, model.depth, paths)


@pytest.mark.parametrize("vocab,depth,paths", [(2, 2, 2), (2, 3, 3), (3, 2, 2), (3, 2, 3),
                                               (3, 3, 2), (2, 2, 3)])
def test_traversal_recursion_on_ties_and_dirichlet(vocab, depth, paths):
    for inst in (ties_instance(vocab, depth, seed=3),
                 dirichlet_instance(vocab, depth, alpha=0.4, seed=7, denominator=6)):
        result = assert_structure_equals_enumeration(inst.model(exact=True), "traversal", paths)
        assert result.total_variation_exact == 0
        floats = exact_result(inst.model(exact=False), "traversal", paths)
        assert np.abs(floats.emit - result.emit.astype(np.float64)).max() < 1e-13


def test_sibling_evaluation_bound_closed_form():
    """V = 2, L = 1, K = 2: the ordered pairs 00, 11, 01, 10 are 4 groups (first-appearance
    sequence, counts) at the root: 4 pairs; V = 2, L = 2, K = 1: one path, 2 groups (its child)
    at the root, then 2 groups at each of the 2 children: 2 + 2 * 2. On positive rows every
    group happens and no two keys merge (distinct nodes), so the recursion does exactly that."""
    assert sibling_evaluations_bound(2, 1, 2) == 4
    assert sibling_evaluations_bound(2, 2, 1) == 6
    model = dirichlet_instance(2, 2, seed=0).model(exact=False)
    assert exact_result(model, "traversal", 1).configurations == 6


def test_a_wrong_traversal_step_is_caught():
    """The comparison can fail: the child weight set from the parent's ORIGINAL weight 1 (the
    sibling-blind rule) is not traversal's law."""
    from speclp.verifiers.multipath import traversal_delete
    from speclp.verifiers.structure import sibling_recursion

    model = dirichlet_instance(3, 2, alpha=0.7, seed=1, denominator=12).model(exact=True)
    reference = exact_result(model, "traversal", 2, enumeration="ordered")

    def blind(weight, p_child, q_child):
        from speclp.verifiers import ops
        return ops.minimum(ops.safe_div(p_child, q_child), 1)

    wrong, _ = sibling_recursion(model, 2, blind, traversal_delete)
    assert not (wrong == reference.emit).all()


# ---------------------------------------------------------------------------
# float64 laws on numpy (no torch) equal the same laws on torch float64 tensors
# ---------------------------------------------------------------------------

def _numpy_and_torch(model, name, paths):
    """(numpy run, torch run of the structure, torch run of the ordered enumeration)."""
    from speclp.verifiers import ops

    fast = exact_result(model, name, paths)
    with ops.torch_float64():
        torch_structure = exact_result(model, name, paths)
    torch_ordered = exact_result(model, name, paths, enumeration="ordered")  # torch float64 rows
    return fast, torch_structure, torch_ordered


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=rational_instances(), paths=st.integers(1, 3))
def test_numpy_float_laws_equal_torch_float_laws(instance, paths):
    """Every structure-aware verifier in float64 on numpy arrays (what `speclp gap` runs) equals
    the same code on CPU torch float64 tensors (ops.torch_float64) and the torch ordered
    enumeration, to 1e-13, on rows with zeros and ties (traversal and spectr_gbv run on numpy
    in both: the enumeration is their torch reference)."""
    model = instance.model(exact=False)
    for name in STRUCTURED:
        fast, torch_structure, torch_ordered = _numpy_and_torch(model, name, paths)
        assert fast.emit.dtype == np.float64
        for other in (torch_structure, torch_ordered):
            difference = np.abs(fast.emit - other.emit).max()
            assert difference <= 1e-13, (name, paths, difference)
            assert abs(fast.block_efficiency - other.block_efficiency) <= 1e-13, name


@pytest.mark.parametrize("inst,paths", [(dirichlet_instance(3, 2, alpha=0.3, seed=11), 3),
                                        (ties_instance(3, 2, seed=5), 3),
                                        (dirichlet_instance(2, 3, alpha=1.0, seed=12), 2),
                                        (dirichlet_instance(4, 2, alpha=0.5, seed=13), 2)])
def test_numpy_float_laws_equal_torch_on_dirichlet_and_ties(inst, paths):
    model = inst.model(exact=False)
    for name in STRUCTURED:
        fast, torch_structure, torch_ordered = _numpy_and_torch(model, name, paths)
        for other in (torch_structure, torch_ordered):
            assert np.abs(fast.emit - other.emit).max() <= 1e-13, name


def test_float_rules_get_numpy_rows_and_torch_only_when_asked():
    """The comparison above compares two number systems: the node rule and the selection law
    see numpy float64 arrays by default and torch float64 tensors within ops.torch_float64()
    (a rule that sees tensors in the default run would import torch in `speclp gap`)."""
    import torch
    from speclp.verifiers import ops

    model = dirichlet_instance(3, 2, seed=1).model(exact=False)
    seen = []

    def spy(rule):
        def wrapped(target, draft, *rest):
            seen.append(type(target))
            return rule(target, draft, *rest)
        return wrapped

    spec = get_verifier("specinfer")
    spied = dataclasses.replace(spec, node_rule=spy(spec.node_rule))
    plain = structured_law(model, spied, 2)
    assert set(seen) == {np.ndarray}
    seen.clear()
    with ops.torch_float64():
        tensors = structured_law(model, spied, 2)
    assert set(seen) == {torch.Tensor}
    assert np.abs(plain.emit - tensors.emit).max() <= 1e-15
    exact = structured_law(dirichlet_instance(2, 2, seed=1, denominator=8).model(exact=True),
                           get_verifier("specinfer"), 2)
    assert exact.emit.dtype == object  # rationals untouched by the float switch


def test_kseq_rho_numpy_bisection_equals_torch():
    """SpecTr's rho* search on numpy rows (no torch) equals the torch bisection, on random rows
    with zeros and ties, n = 0..4; and the bracket end it returns has h(rho) >= 0."""
    import torch
    from speclp.verifiers.multipath import _kseq_gap, _kseq_rho_bisection, kseq_rho

    rng = np.random.default_rng(0)
    raw = rng.integers(0, 4, size=(2, 400, 5)).astype(np.float64)
    raw[..., 0] += 1  # no all-zero row
    target, draft = raw / raw.sum(-1, keepdims=True)
    count = rng.integers(0, 5, size=400)
    numpy_rho = kseq_rho(target, draft, count, 4)
    torch_rho = _kseq_rho_bisection(torch.as_tensor(target), torch.as_tensor(draft),
                                    torch.as_tensor(count), 4, None).numpy()
    assert isinstance(numpy_rho, np.ndarray)
    assert np.abs(numpy_rho - torch_rho).max() <= 1e-13
    assert (_kseq_gap(target, draft, numpy_rho, count, 4) >= -1e-15).all()
