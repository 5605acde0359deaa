"""The weak-duality bound of lp.dual_bound: valid for any multipliers, tight at the optimum's.

The optimum it is compared with is the enumerated full LP's, certified in exact rationals
(an independent solve); the bound is exact too, so every comparison is exact.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp import optimum
from speclp.lp.dual_bound import dual_upper_bound
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.tree import num_nodes


def certified_optimum(instance, paths: int) -> Fraction:
    record = optimum(instance, paths, method="full")  # the enumerated LP, certified
    assert record.certified, record.certificate
    return record.exact_value


@pytest.mark.parametrize("vocab, depth", [(2, 2), (3, 2), (2, 3)])
@pytest.mark.parametrize("paths", [1, 2, 3])
def test_duals_of_a_float_solve_give_a_tight_certified_bound(vocab, depth, paths):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=vocab * depth + paths, denominator=20)
    best = certified_optimum(inst, paths)
    record = optimum(inst, paths, method="colgen", certify=False)  # float column generation
    assert record.matching_duals.shape == (num_nodes(vocab, depth), vocab)
    bound = dual_upper_bound(inst, record.matching_duals, paths)
    assert bound >= best
    assert bound - best < Fraction(1, 10**8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vocab=st.integers(2, 3), depth=st.integers(1, 2), paths=st.integers(1, 3),
       seed=st.integers(0, 10_000), scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_any_multipliers_give_an_upper_bound(vocab, depth, paths, seed, scale):
    inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=seed, denominator=12)
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, scale, size=(num_nodes(vocab, depth), vocab))
    assert dual_upper_bound(inst, theta, paths) >= certified_optimum(inst, paths)


def test_zero_multipliers_give_the_trivial_bound_and_shapes_are_checked():
    inst = dirichlet_instance(3, 2, seed=1, denominator=10)
    assert dual_upper_bound(inst, np.zeros((13, 3)), 2) == 3  # L + 1
    with pytest.raises(ValueError, match="theta"):
        dual_upper_bound(inst, np.zeros((12, 3)), 2)
