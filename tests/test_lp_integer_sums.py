"""The exact certificate's sums over one common denominator (issue 30 part 4, speed at (4, 3, 3)).

certify._evaluate computes A x, c - A^T y and both objective values in integers over common
denominators (_products_in_integers), and colgen.selection_mixture sums lambda_k r_k the same
way (common_denominator_sum). Both are checked here against plain Fraction arithmetic (a
second implementation: Python's fractions, one term at a time), on random data with mixed
signs, zeros and unrelated denominators, and on the exact point of real certified LPs.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from flint import fmpq
from speclp.lp import certify, colgen
from speclp.lp.certify import _exact_data, _products_in_integers, fmpq_to_fraction
from speclp.lp.colgen import common_denominator_sum, priority_law, solve_colgen
from speclp.lp.instance import dirichlet_instance
from speclp.lp.solve import solve


def _fractions_loop(data, x: list, y: list):
    """A x, c - A^T y, c.x + constant and b.y + constant in Fractions, one term at a time."""
    table = [fmpq_to_fraction(v) for v in data.table]
    xs, ys = [fmpq_to_fraction(v) for v in x], [fmpq_to_fraction(v) for v in y]
    activity = [Fraction(0)] * data.num_rows
    reduced = [fmpq_to_fraction(v) for v in data.objective]
    for r, c, ref in zip(data.rows.tolist(), data.cols.tolist(), data.refs.tolist(), strict=True):
        activity[r] += table[ref] * xs[c]
        reduced[c] -= table[ref] * ys[r]
    constant = fmpq_to_fraction(data.constant)
    primal = constant + sum(fmpq_to_fraction(c) * v for c, v in zip(data.objective, xs,
                                                                     strict=True))
    dual = constant + sum(fmpq_to_fraction(b) * v for b, v in zip(data.rhs, ys, strict=True))
    return activity, reduced, primal, dual


def _as_fractions(values):
    return [fmpq_to_fraction(v) for v in values]


def _check_against_fractions(data, x, y):
    activity, reduced, primal, dual = _products_in_integers(data, x, y)
    ref_activity, ref_reduced, ref_primal, ref_dual = _fractions_loop(data, x, y)
    assert _as_fractions(activity) == ref_activity
    assert _as_fractions(reduced) == ref_reduced
    assert fmpq_to_fraction(primal) == ref_primal and fmpq_to_fraction(dual) == ref_dual


def _random_fmpq(rng: np.random.Generator, size: int, zeros: float) -> list:
    out = []
    for _ in range(size):
        if rng.random() < zeros:
            out.append(fmpq(0))
        else:  # unrelated denominators: small primes, powers of two, a long odd one
            den = int(rng.choice([1, 3, 7, 2 ** 61, 10 ** 30 + 7, 2 ** 200 * 3]))
            out.append(fmpq(int(rng.integers(-10 ** 6, 10 ** 6)), den))
    return out


def test_products_in_integers_equal_fractions_on_random_data():
    rng = np.random.default_rng(3)
    for _ in range(5):
        rows, cols, nnz = 7, 11, 40
        table = _random_fmpq(rng, 9, 0.1)
        data = certify._ExactData(
            table=table, rows=rng.integers(0, rows, nnz), cols=rng.integers(0, cols, nnz),
            refs=rng.integers(0, len(table), nnz), rhs=_random_fmpq(rng, rows, 0.3),
            objective=_random_fmpq(rng, cols, 0.3), constant=fmpq(5, 3), num_eq=rows - 2,
            num_rows=rows)
        _check_against_fractions(data, _random_fmpq(rng, cols, 0.4), _random_fmpq(rng, rows, 0.4))


def test_products_in_integers_on_a_certified_master():
    """The exact point of a real selection master (float instance: long dyadic data, basis
    solves with long denominators): the integer sums equal the Fraction ones, and the
    certificate built on them holds."""
    result = solve_colgen(dirichlet_instance(3, 2, seed=1).model(exact=True), paths=2,
                          time_limit=120)
    assert result.certificate.certified
    lp = result.lp  # the exact master the certificate was made on
    _check_against_fractions(_exact_data(lp), result.certificate.primal, result.certificate.dual)
    _, cert = certify.refine_basis(lp, solve(lp))
    assert cert.certified and cert.value == result.certificate.value


def test_products_in_integers_refuse_other_number_types():
    """A value that is not an fmpq (the symbolic functions of proofs.symbolic) sends _evaluate
    back to its term-by-term loop."""
    data = certify._ExactData(table=[fmpq(1), Fraction(1, 2)], rows=np.array([0]),
                              cols=np.array([0]), refs=np.array([1]), rhs=[fmpq(1)],
                              objective=[fmpq(1)], constant=fmpq(0), num_eq=1, num_rows=1)
    assert _products_in_integers(data, [fmpq(1)], [fmpq(1)]) is None


def test_common_denominator_sum_equals_fractions():
    rng = np.random.default_rng(5)
    weights = _random_fmpq(rng, 6, 0.0)
    laws = [_random_fmpq(rng, 9, 0.3) for _ in weights]
    got = common_denominator_sum(weights, laws, 9)
    want = [sum((fmpq_to_fraction(w) * fmpq_to_fraction(law[x]) for w, law in
                 zip(weights, laws, strict=True)), Fraction(0)) for x in range(9)]
    assert _as_fractions(got) == want
    assert common_denominator_sum([], [], 3) == [fmpq(0)] * 3


def test_selection_mixture_leaf_law_equals_fraction_sum():
    """The exact mixture's skewed law r = sum_k lambda_k r_k equals the same sum in Fractions
    (exact priority laws, weights from the certificate), and BV with it reproduces the
    certified optimum (the engine's mixture_value_matches, checked here directly)."""
    from speclp.lp.node import node_optimum

    model = dirichlet_instance(3, 2, seed=2).model(exact=True)
    result = solve_colgen(model, paths=3, time_limit=120)
    assert result.certificate.certified
    mixture = colgen.selection_mixture(result)
    assert mixture.exact and all(isinstance(v, Fraction) for v in mixture.leaf_law)
    want = [Fraction(0)] * result.master.num_leaves
    for weight, priority in zip(mixture.weights, mixture.priorities, strict=True):
        law = priority_law(result.master, priority, exact=True)
        want = [w + weight * v for w, v in zip(want, law, strict=True)]
    assert list(mixture.leaf_law) == want
    _, value = node_optimum(model, exact=True, leaf_law=mixture.leaf_law)
    assert value == result.certificate.value
