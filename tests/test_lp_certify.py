"""Exact certificates: they certify optima and refuse bases that are not optimal."""

from fractions import Fraction

import numpy as np
import pytest
from speclp.lp.certify import certify, refine_basis, solve_exact, solve_sparse_exact
from speclp.lp.full import full_lp
from speclp.lp.instance import bv_toy, dirichlet_instance, from_rows
from speclp.lp.node import node_lp
from speclp.lp.solve import BASIC, highs_model, solve


def test_sparse_exact_solver_against_dense():
    from flint import fmpq, fmpq_mat

    rng = np.random.default_rng(0)
    n = 40
    dense = np.zeros((n, n), dtype=np.int64)
    dense[np.arange(n), np.arange(n)] = rng.integers(1, 5, n)  # nonsingular: triangular part
    lower = np.tril(rng.integers(-3, 4, (n, n)) * (rng.random((n, n)) < 0.1), -1)
    dense += lower
    block = slice(10, 16)  # a dense coupled core
    dense[block, block] += rng.integers(-2, 3, (6, 6))
    while np.linalg.matrix_rank(dense) < n:
        dense[block, block] += np.eye(6, dtype=np.int64)
    perm = rng.permutation(n)
    dense = dense[perm][:, rng.permutation(n)]
    rows, cols = np.nonzero(dense)
    vals = [fmpq(int(dense[r, c])) for r, c in zip(rows, cols, strict=True)]
    rhs = [fmpq(int(v), 3) for v in rng.integers(-9, 10, n)]
    x, core = solve_sparse_exact(n, rows, cols, vals, rhs)
    expected = fmpq_mat(n, n, [int(v) for v in dense.reshape(-1)]).solve(fmpq_mat(n, 1, rhs))
    assert [expected[i, 0] for i in range(n)] == x
    assert core < n


@pytest.mark.parametrize("depth,value", [(2, Fraction(20, 9)), (3, Fraction(8, 3)),
                                         (4, Fraction(247, 81))])
def test_toy_certified(depth, value):
    for lp in (full_lp(bv_toy(depth), paths=1), node_lp(bv_toy(depth))):
        cert = certify(lp, solve(lp))
        assert cert.certified, cert.reason
        assert cert.value == value
        assert all(ok for name, ok in cert.checks.items() if name != "core_size")


def test_cvxpy_solution_not_certified():
    lp = node_lp(bv_toy(2))
    cert = certify(lp, solve(lp, backend="cvxpy"))
    assert not cert.certified and cert.value is None
    assert "no basis" in cert.reason


def suboptimal_basis(lp):
    """A feasible basis of lp that minimises instead of maximising (so it is not optimal)."""
    import highspy

    h = highs_model(lp)
    h.changeObjectiveSense(highspy.ObjSense.kMinimize)
    h.run()
    basis = h.getBasis()
    value = h.getInfo().objective_function_value
    return (np.array([s.value for s in basis.col_status], dtype=np.int8),
            np.array([s.value for s in basis.row_status], dtype=np.int8)), value


@pytest.mark.parametrize("builder", ["full", "node"])
def test_refuses_suboptimal_basis(builder):
    inst = dirichlet_instance(3, 2, seed=3, denominator=12)
    lp = full_lp(inst, paths=2) if builder == "full" else node_lp(inst)
    basis, low = suboptimal_basis(lp)
    assert low < solve(lp).value - 1e-6  # genuinely suboptimal
    cert = certify(lp, basis=basis)
    assert not cert.certified and cert.value is None
    assert cert.checks["primal_nonnegative"] and cert.checks["equality_rows"]
    assert not cert.checks["reduced_costs"]
    assert "reduced_costs" in cert.reason


def test_refuses_perturbed_basis():
    lp = full_lp(dirichlet_instance(2, 3, seed=1, denominator=12), paths=2)
    solution = solve(lp)
    cols, rows = (a.copy() for a in solution.basis)
    basic = np.nonzero(cols == BASIC)[0]
    # swap one basic column for a nonbasic one with a different objective coefficient
    nonbasic = np.nonzero(cols != BASIC)[0]
    cols[basic[0]], cols[nonbasic[-1]] = 0, BASIC
    cert = certify(lp, basis=(cols, rows))
    assert not cert.certified
    cols2 = solution.basis[0].copy()
    cols2[basic[0]] = 0  # basis no longer square
    cert2 = certify(lp, basis=(cols2, rows))
    assert not cert2.certified and "basis_size" in cert2.reason


def test_refuses_basis_of_another_instance():
    toy = bv_toy(3)
    swapped = from_rows(toy.draft_exact, toy.target_exact, 3)  # p and q exchanged
    lp_a, lp_b = full_lp(toy), full_lp(swapped)
    assert lp_a.num_vars == lp_b.num_vars and lp_a.num_eq == lp_b.num_eq
    solution_a = solve(lp_a)
    assert certify(lp_a, solution_a).certified
    cert = certify(lp_b, solution_a)
    assert not cert.certified and cert.reason.startswith("failed")
    assert certify(lp_b, solve(lp_b)).certified


@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 5, 2, 0), (3, 3, 2, 2), (2, 5, 2, 4),
                                                    (2, 4, 3, 5)])
def test_refinement_certifies_float_instances(vocab, depth, paths, seed):
    """Float instances with small probabilities: HiGHS bases are often optimal only within
    its tolerances; refinement repairs them and the repaired basis certifies."""
    lp = full_lp(dirichlet_instance(vocab, depth, alpha=0.5, seed=seed), paths=paths)
    plain = solve(lp)
    solution, cert = solve_exact(lp)
    assert cert.certified, (cert.reason, solution.notes)
    assert abs(float(cert.value) - plain.value) <= 1e-9
    assert certify(lp, solution).certified  # the returned basis certifies on its own
    again, cert2 = refine_basis(lp, solution)
    assert cert2.certified and cert2.value == cert.value


def test_certificate_of_1e4_variables():
    """Its speed (target: within 5 s) is measured by benchmarks/lp_scale.py, not here."""
    lp = full_lp(dirichlet_instance(2, 5, seed=0, alpha=2.0, denominator=24), paths=2)
    assert lp.num_vars >= 10_000
    solution = solve(lp)
    cert = certify(lp, solution)
    assert cert.certified, cert.reason
