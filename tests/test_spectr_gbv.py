"""spectr_gbv's exact law by first-visit generating functions (verifiers/spectr_gbv.py,
first_visit_law) equals the ordered enumeration of every K-tuple of drafted paths EXACTLY.

Reference: verifiers.exact.exact_result(..., enumeration="ordered"): the rule's own batched
law (spectr_gbv_law) on every ordered K-tuple, aggregated, in exact rationals. Instances:
hypothesis rows of small integers (zeros and ties), ties_instance, rounded Dirichlet rows,
and rows where the released rule is undefined (an all-zero correction row).
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp.instance import dirichlet_instance, from_rows, ties_instance
from speclp.verifiers import spectr_gbv
from speclp.verifiers.exact import LawMassError, enumeration_size, exact_result
from speclp.verifiers.spectr_gbv import first_visit_law, first_visit_work
from speclp.verifiers.tree import TreeModel, num_nodes, ordered_tuple_count


@st.composite
def cases(draw):
    """(instance, K): V in {2, 3}, L in {1, 2, 3}, K in {1..4}, rows of integers 0..3
    normalised (zeros, many ties), at most 1024 ordered K-tuples for the reference."""
    vocab = draw(st.integers(2, 3))
    depth = draw(st.integers(1, 3))
    paths = draw(st.integers(1, 4))
    while paths > 1 and vocab ** (depth * paths) > 1024:
        paths -= 1
    count = num_nodes(vocab, depth)
    weights = st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(any)

    def rows():
        out = np.empty((count, vocab), dtype=object)
        for i in range(count):
            w = draw(weights)
            out[i] = [Fraction(x, sum(w)) for x in w]
        return out

    return from_rows(rows(), rows(), depth, "hypothesis"), paths


def assert_equals_ordered(model, paths):
    fast = exact_result(model, "spectr_gbv", paths)
    assert fast.enumeration == "first-visit recursion"
    reference = exact_result(model, "spectr_gbv", paths, enumeration="ordered")
    assert fast.emit.dtype == object
    assert all(isinstance(x, Fraction) for x in fast.emit.ravel())  # rational stays rational
    assert (fast.emit == reference.emit).all()  # entry by entry, exactly
    assert fast.block_efficiency == reference.block_efficiency
    assert fast.total_variation_exact == reference.total_variation_exact
    assert fast.undefined_mass == reference.undefined_mass == 1 - fast.emit.sum()
    assert (fast.undefined_configurations == 0) == (reference.undefined_configurations == 0)
    assert fast.configurations <= first_visit_work(model.vocab_size, model.depth, paths)
    return fast, reference


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_first_visit_law_equals_ordered_enumeration_exactly(case):
    instance, paths = case
    assert_equals_ordered(instance.model(exact=True), paths)


@pytest.mark.parametrize("inst,paths", [
    (ties_instance(3, 2, seed=2), 3), (ties_instance(2, 3, seed=1), 2),
    (ties_instance(2, 2, seed=4), 4), (dirichlet_instance(2, 3, alpha=0.7, seed=2, denominator=10), 3),
    (dirichlet_instance(3, 2, alpha=0.5, seed=3, denominator=8), 3),
    (dirichlet_instance(2, 1, alpha=0.5, seed=3, denominator=8), 4),
    (dirichlet_instance(2, 4, alpha=0.3, seed=7, denominator=6), 2)])
def test_first_visit_law_on_ties_and_dirichlet(inst, paths):
    assert_equals_ordered(inst.model(exact=True), paths)


def test_undefined_stops_are_reported_with_their_mass():
    """On ties_instance(2, 3, seed=1) with K = 2 the released rule stops at nodes whose
    correction row is all zero (every child has Q >= P): the law reports the same undefined
    mass as the enumeration (checked above), it is positive, and the emitted mass is 1 minus it."""
    model = ties_instance(2, 3, seed=1).model(exact=True)
    fast, reference = assert_equals_ordered(model, 2)
    assert fast.undefined_mass > 0
    emit, _, (nodes, mass) = first_visit_law(model, 2)
    assert nodes > 0 and mass == fast.undefined_mass and emit.sum() == 1 - mass


def test_float_law_matches_the_exact_law():
    inst = dirichlet_instance(3, 3, alpha=0.5, seed=4, denominator=8)
    exact = exact_result(inst.model(exact=True), "spectr_gbv", 3)
    floats = exact_result(inst.model(exact=False), "spectr_gbv", 3)
    assert floats.emit.dtype == np.float64
    assert np.abs(floats.emit - exact.emit.astype(np.float64)).max() <= 1e-15
    assert abs(floats.block_efficiency - float(exact.block_efficiency)) <= 1e-14


def test_tampered_order_term_is_caught(monkeypatch):
    """The check can fail: with the (1 - h(w)) factor of the nodes first visited before the
    stop dropped (keep = 1: order ignored), the outcomes no longer sum to one."""
    model = dirichlet_instance(2, 3, alpha=0.7, seed=2, denominator=10).model(exact=True)
    original = spectr_gbv._before_after
    monkeypatch.setattr(spectr_gbv, "_before_after",
                        lambda poly, keep, paths, zero: original(poly, keep * 0 + 1, paths, zero))
    with pytest.raises(LawMassError, match="spectr_gbv.*V=2, L=3, K=3"):
        spectr_gbv.first_visit_law(model, 3)  # the mass check where the law is made fires


def test_tampered_subtree_recursion_is_caught(monkeypatch):
    """Dropping the (1 - h(c)) factor of the subtree recursion breaks the law (mass check)."""
    model = dirichlet_instance(3, 3, alpha=0.5, seed=4, denominator=8).model(exact=True)
    original = spectr_gbv._product
    monkeypatch.setattr(spectr_gbv, "_product",
                        lambda a, b, zero: original(a, [b[0]] + [x * 0 for x in b[1:]], zero))
    with pytest.raises(LawMassError, match="spectr_gbv"):
        spectr_gbv.first_visit_law(model, 2)


@pytest.mark.parametrize("vocab,depth,paths", [(8, 3, 4), (4, 4, 4), (16, 2, 4), (2, 8, 3),
                                               (8, 4, 3), (8, 4, 4)])
def test_part4_shapes_are_exact_not_estimated(vocab, depth, paths):
    """gap estimates a law whose work exceeds max(--max-enumerated, MAX_STRUCTURED); at every
    shape of issue 30 part 4 (and the grid's (8, 4, 3), (8, 4, 4)) the work is far below it
    and far below the ordered tuples (the old enumeration's count, >= 20x)."""
    from speclp.proofs.gap import MAX_STRUCTURED

    rows = np.full((num_nodes(vocab, depth), vocab), 1 / vocab)
    work = enumeration_size(TreeModel(rows, rows, depth), "spectr_gbv", paths)
    assert work == first_visit_work(vocab, depth, paths) <= 10**5 < MAX_STRUCTURED
    assert 20 * work <= ordered_tuple_count(vocab, depth, paths)


def test_part4_shape_law_sums_to_one_in_float64():
    model = dirichlet_instance(8, 3, alpha=1.0, seed=0).model(exact=False)
    law = exact_result(model, "spectr_gbv", 4)
    assert law.enumeration == "first-visit recursion"
    assert abs(law.emit.sum() + float(law.undefined_mass) - 1) <= 1e-12
    assert 1 <= law.block_efficiency <= 3 + 1  # at most L + 1 tokens per block (L = 3)
    # an independent value: the released rule run on 4,000 sampled draft trees (seeded, so
    # the check is deterministic); the exact law must sit within 4 standard errors of it
    from speclp.verifiers.exact import sampled_result

    sampled = sampled_result(model, "spectr_gbv", paths=4, samples=4000, seed=1)
    assert sampled.undefined_samples == 0 and law.undefined_mass == 0
    assert abs(law.block_efficiency - sampled.block_efficiency) <= 4 * sampled.standard_error
