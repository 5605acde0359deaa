"""Solvers: HiGHS and cvxpy agree; pitfalls of docs/theory.md section 16.1 are reported."""

from fractions import Fraction

import numpy as np
import pytest
from speclp.lp.certify import solve_exact
from speclp.lp.colgen import solve_colgen
from speclp.lp.full import full_lp
from speclp.lp.instance import dirichlet_instance, temperature_instance
from speclp.lp.node import node_lp
from speclp.lp.program import Block, LinearProgram, ValueTable
from speclp.lp.solve import solve


@pytest.mark.parametrize("vocab,depth,paths,draft_sampling,seed", [
    (2, 2, 1, "iid", 0), (3, 2, 1, "iid", 1), (2, 4, 1, "iid", 2), (4, 2, 1, "iid", 3),
    (2, 2, 2, "iid", 4), (3, 2, 2, "iid", 5), (2, 3, 3, "iid", 6),
    (3, 2, 2, "without-replacement", 7), (2, 3, 2, "without-replacement", 8),
])
def test_backends_agree(vocab, depth, paths, draft_sampling, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=seed)
    lp = full_lp(inst, paths=paths, draft_sampling=draft_sampling, exact=False)
    highs = solve(lp, backend="highs")
    cvx = solve(lp, backend="cvxpy")
    assert highs.status == "optimal" and cvx.status == "optimal", (highs.notes, cvx.notes)
    assert abs(highs.value - cvx.value) <= 1e-9
    assert highs.basis is not None and cvx.basis is None
    # the reported value is the objective of the returned point
    assert abs(lp.objective() @ highs.x + lp.constant() - highs.value) <= 1e-9
    assert np.abs(lp.matrix("eq") @ highs.x - lp.rhs("eq")).max() <= 1e-9


@pytest.mark.parametrize("seed", [0, 1])
def test_backends_agree_node_lp(seed):
    lp = node_lp(temperature_instance(3, 3, seed=seed), exact=False)
    assert abs(solve(lp).value - solve(lp, backend="cvxpy").value) <= 1e-9


def test_cvxpy_highs_solver_option():
    lp = full_lp(dirichlet_instance(2, 2, seed=3), paths=2, exact=False)
    assert abs(solve(lp, backend="cvxpy", solver="HIGHS").value - solve(lp).value) <= 1e-9


def tiny_lp(coefficient: float, rhs: float, sign_le: bool = True) -> LinearProgram:
    """max x  s.t.  coefficient * x <= rhs  (x >= 0), as a one-row LinearProgram."""
    table = ValueTable(exact=True)
    refs = table.add(np.array([coefficient, rhs]))
    block = Block(np.array([0]), np.array([0]), refs[:1], refs[1:])
    values, exact = table.tables()
    return LinearProgram("tiny", 1, np.array([table.one]), table.zero,
                         Block.empty() if sign_le else block, block if sign_le else Block.empty(),
                         values, exact)


def test_small_coefficient_noted():
    lp = tiny_lp(1e-13, 1.0)
    solution = solve(lp)
    assert any("small_matrix_value" in note for note in solution.notes)
    fine = solve(tiny_lp(1e-11, 1.0))  # above the lowered threshold: solved correctly
    assert fine.status == "optimal" and abs(fine.value - 1e11) <= 1e-3 * 1e11
    assert not any("small_matrix_value" in note for note in fine.notes)


def test_infeasible_is_retried():
    lp = tiny_lp(1.0, -1.0, sign_le=False)  # x = -1 with x >= 0: infeasible
    solution = solve(lp)
    assert solution.status in ("infeasible", "infeasible_or_unbounded")
    assert any("retried without presolve" in note for note in solution.notes)
    assert solve(lp, presolve=False).notes == []


def test_bad_backend():
    with pytest.raises(ValueError, match="backend"):
        solve(node_lp(dirichlet_instance(2, 1, seed=0)), backend="glpk")


def test_exact_value_matches_fraction_data():
    lp = tiny_lp(0.5, 0.25)
    assert lp.exact_table[lp.ub.refs[0]] == Fraction(1, 2)
    assert abs(solve(lp).value - 0.5) <= 1e-12


# ---------------------------------------------------------------------------
# column generation (selection master) against the full LP
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("vocab,depth,paths,draft_sampling,seed", [
    (2, 2, 1, "iid", 0), (2, 2, 2, "iid", 1), (3, 2, 2, "iid", 2), (2, 3, 3, "iid", 3),
    (3, 1, 3, "iid", 4), (2, 3, 2, "without-replacement", 5),
    (3, 2, 3, "without-replacement", 6), (3, 3, 2, "iid", 7),
])
def test_colgen_equals_full_lp_exactly(vocab, depth, paths, draft_sampling, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=seed, denominator=24)
    result = solve_colgen(inst, paths=paths, draft_sampling=draft_sampling)
    assert result.status == "optimal"
    assert result.certificate.certified, result.certificate.reason
    full = full_lp(inst, paths=paths, draft_sampling=draft_sampling)
    solution, cert = solve_exact(full)
    assert cert.certified, cert.reason
    assert result.certificate.value == cert.value
    assert abs(result.value - solution.value) <= 1e-9


def test_colgen_float_instance():
    inst = dirichlet_instance(3, 2, alpha=0.5, seed=11)
    result = solve_colgen(inst, paths=3, exact=False)
    assert result.certificate is None and result.status == "optimal"
    direct = solve(full_lp(inst, paths=3, exact=False))
    assert abs(result.value - direct.value) <= 1e-9


def test_colgen_certificate_fails_when_stopped_early():
    inst = dirichlet_instance(2, 3, alpha=0.8, seed=3, denominator=24)
    full = solve_colgen(inst, paths=3)
    assert full.iterations >= 3  # the first master is not optimal for this instance
    early = solve_colgen(inst, paths=3, max_iterations=1)
    assert not early.certificate.certified and early.certificate.value is None
    assert "all_configurations_priced" in early.certificate.reason
    assert early.value < full.value - 1e-9
