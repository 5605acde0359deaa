"""Solve a LinearProgram with HiGHS (highspy, directly) or cvxpy.

    solve(lp, backend="highs" | "cvxpy", presolve=True, time_limit=None) -> LPSolution

HiGHS: the LP is passed as one column-wise sparse matrix (equality rows first, then
the <= rows), maximised, output silenced. Two pitfalls of docs/theory.md section 16.1 are
handled here:
  * a bare "infeasible" / "unbounded" from presolve is never trusted: the solve is
    retried without presolve and the retry is recorded in notes;
  * HiGHS drops matrix values at or below small_matrix_value (default 1e-9). It is
    lowered to 1e-12, the smallest value HiGHS accepts; if any |coefficient| is still
    at or below it, a note says so (the exact certificate is the safety net).
The optimal basis (col_status, row_status: HighsBasisStatus values, rows in the order
eq then ub) is returned for the exact certificate (speclp.lp.certify).

cvxpy: the same LinearProgram data as cp.Variable(n, nonneg=True) with sparse
constraints. Solver: CLARABEL (interior point) with tolerances tightened to 1e-12,
which agrees with HiGHS to better than 1e-9 on the test instances (tests/test_lp_solve.py);
solver="HIGHS" can be passed through. It returns no basis, so its solutions cannot be
certified.

Column generation for the K-path LP lives in speclp.lp.colgen (it uses highs_model and
highs_solution from here).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sp

from .program import LinearProgram

HIGHS_SMALL_MATRIX_VALUE = 1e-12  # the smallest small_matrix_value HiGHS 1.16 accepts
BASIC = 1  # HighsBasisStatus.kBasic
IPM_NONZEROS = 50_000  # method="auto": interior point (with crossover) from this many nonzeros
FEASIBILITY_TOLERANCE = 1e-10  # HiGHS default 1e-7 left bases 1e-7 infeasible after postsolve


@dataclass
class LPSolution:
    """Result of one solve.

    x [n] float64 primal values; value = c^T x + constant as reported by the solver;
    basis = (col_status [n], row_status [m_eq + m_ub]) int arrays of HighsBasisStatus
    values (1 = basic) or None; duals [m_eq + m_ub] row duals (solver convention) or None.
    """

    status: str
    value: float
    x: np.ndarray
    seconds: float
    backend: str
    basis: tuple[np.ndarray, np.ndarray] | None = None
    duals: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"


def solve(lp: LinearProgram, backend: str = "highs", presolve: bool = True,
          time_limit: float | None = None, method: str = "auto",
          solver: str | None = None) -> LPSolution:
    """Solve lp (maximise).

    backend "highs": method "auto" (dual simplex below IPM_NONZEROS nonzeros, else the IPX
    interior point method with crossover, which still returns a basis; ~4-7x faster on
    these degenerate LPs at 1e5 variables), "simplex", "ipm" or "choose" (HiGHS decides).
    backend "cvxpy": solver "CLARABEL" (default), "HIGHS" or "SCIPY".
    """
    if method == "auto":
        method = "simplex" if lp.nnz < IPM_NONZEROS else "ipm"
    if backend == "highs":
        return _solve_highs(lp, presolve, time_limit, method)
    if backend == "cvxpy":
        return _solve_cvxpy(lp, time_limit, solver or "CLARABEL")
    raise ValueError(f"backend must be 'highs' or 'cvxpy', got {backend!r}")


# ---------------------------------------------------------------------------
# HiGHS
# ---------------------------------------------------------------------------

_BANNER_SHOWN = False


def new_highs() -> Any:
    """A silent highspy.Highs (the first construction prints a banner on stdout: hidden)."""
    global _BANNER_SHOWN
    if _BANNER_SHOWN:
        h = highspy.Highs()
    else:
        with _quiet_stdout():
            h = highspy.Highs()
        _BANNER_SHOWN = True
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    return h


@contextlib.contextmanager
def _quiet_stdout() -> Any:
    """Redirect file descriptor 1 (C-level stdout) to /dev/null."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def stacked_matrix(lp: LinearProgram) -> tuple[sp.csc_array, np.ndarray, np.ndarray]:
    """(A [m_eq + m_ub, n] CSC, row_lower [m], row_upper [m]) with eq rows first."""
    blocks = [lp.matrix("eq"), lp.matrix("ub")]
    matrix = sp.vstack(blocks, format="csc") if lp.num_ub and lp.num_eq else (
        blocks[0].tocsc() if lp.num_eq else blocks[1].tocsc())
    b_eq, b_ub = lp.rhs("eq"), lp.rhs("ub")
    lower = np.concatenate([b_eq, np.full(lp.num_ub, -np.inf)])
    upper = np.concatenate([b_eq, b_ub])
    return sp.csc_array(matrix), lower, upper


def _small_coefficient_note(lp: LinearProgram, threshold: float) -> str | None:
    values = np.abs(lp.table[np.concatenate([lp.eq.refs, lp.ub.refs])])
    small = int(((values > 0) & (values <= threshold)).sum())
    if small:
        return (f"{small} matrix coefficients have |a| <= {threshold:g}, which HiGHS drops "
                "(small_matrix_value); rescale the instance or rely on the exact certificate")
    return None


def status_name(h: Any, status: Any) -> str:
    names = {
        highspy.HighsModelStatus.kOptimal: "optimal",
        highspy.HighsModelStatus.kInfeasible: "infeasible",
        highspy.HighsModelStatus.kUnbounded: "unbounded",
        highspy.HighsModelStatus.kUnboundedOrInfeasible: "infeasible_or_unbounded",
        highspy.HighsModelStatus.kTimeLimit: "time_limit",
        highspy.HighsModelStatus.kIterationLimit: "iteration_limit",
        highspy.HighsModelStatus.kModelEmpty: "optimal",
    }
    return names.get(status, h.modelStatusToString(status).lower().replace(" ", "_"))


def highs_model(lp: LinearProgram, presolve: bool = True, time_limit: float | None = None,
                method: str = "choose") -> Any:
    """A silent Highs object loaded with lp (maximise), options set, not yet run."""
    h = new_highs()
    h.setOptionValue("small_matrix_value", HIGHS_SMALL_MATRIX_VALUE)
    h.setOptionValue("presolve", "on" if presolve else "off")
    h.setOptionValue("solver", method)
    if method in ("ipm", "ipx"):
        h.setOptionValue("run_crossover", "on")  # a basis for the certificate
    h.setOptionValue("primal_feasibility_tolerance", FEASIBILITY_TOLERANCE)
    h.setOptionValue("dual_feasibility_tolerance", FEASIBILITY_TOLERANCE)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    matrix, lower, upper = stacked_matrix(lp)
    n, m = lp.num_vars, matrix.shape[0]
    matrix.sort_indices()
    model = highspy.HighsLp()
    model.num_col_ = int(n)
    model.num_row_ = int(m)
    model.sense_ = highspy.ObjSense.kMaximize
    model.offset_ = float(lp.constant())
    model.col_cost_ = np.ascontiguousarray(lp.objective(), dtype=np.float64)
    model.col_lower_ = np.zeros(n)
    model.col_upper_ = np.full(n, np.inf)
    model.row_lower_ = lower
    model.row_upper_ = upper
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.num_col_ = int(n)
    model.a_matrix_.num_row_ = int(m)
    model.a_matrix_.start_ = matrix.indptr.astype(np.int32)
    model.a_matrix_.index_ = matrix.indices.astype(np.int32)
    model.a_matrix_.value_ = np.ascontiguousarray(matrix.data, dtype=np.float64)
    status = h.passModel(model)
    if status == highspy.HighsStatus.kError:
        raise RuntimeError(f"HiGHS refused the model of LP {lp.name!r} ({status})")
    return h


def _solve_highs(lp: LinearProgram, presolve: bool, time_limit: float | None,
                 method: str) -> LPSolution:
    start = time.perf_counter()
    notes: list[str] = []
    note = _small_coefficient_note(lp, HIGHS_SMALL_MATRIX_VALUE)
    if note:
        notes.append(note)
    h = highs_model(lp, presolve, time_limit, method)
    h.run()
    status = status_name(h, h.getModelStatus())
    if status in ("infeasible", "unbounded", "infeasible_or_unbounded") and presolve:
        notes.append(f"HiGHS reported {status} with presolve; retried without presolve")
        h.setOptionValue("presolve", "off")
        h.clearSolver()
        h.run()
        status = status_name(h, h.getModelStatus())
        notes.append(f"retry without presolve: {status}")
    solution = highs_solution(h, lp, status, time.perf_counter() - start, notes)
    solution.info["solve_s"] = solution.seconds  # the solve alone (refinement adds to seconds)
    solution.info["method"] = method
    return solution


def highs_solution(h: Any, lp: LinearProgram, status: str, seconds: float,
                    notes: list[str], column_order: np.ndarray | None = None) -> LPSolution:
    """LPSolution from a run Highs object; column_order [n]: HiGHS column of each LP column."""
    solution = h.getSolution()
    info = h.getInfo()
    x = np.asarray(solution.col_value, dtype=np.float64)
    if column_order is not None and len(x) == len(column_order):
        x = x[column_order]
    if len(x) != lp.num_vars:
        x = np.full(lp.num_vars, np.nan)
    basis = None
    highs_basis = h.getBasis()
    if highs_basis.valid:
        col_status = np.array([s.value for s in highs_basis.col_status], dtype=np.int8)
        if column_order is not None:
            col_status = col_status[column_order]
        basis = (col_status, np.array([s.value for s in highs_basis.row_status], dtype=np.int8))
    duals = np.asarray(solution.row_dual, dtype=np.float64) if solution.dual_valid else None
    value = float(info.objective_function_value) if status == "optimal" else float("nan")
    return LPSolution(
        status=status, value=value, x=x, seconds=seconds, backend="highs", basis=basis,
        duals=duals, notes=notes,
        info={"simplex_iterations": int(info.simplex_iteration_count),
              "ipm_iterations": int(info.ipm_iteration_count),
              "max_primal_infeasibility": float(info.max_primal_infeasibility),
              "max_dual_infeasibility": float(info.max_dual_infeasibility)},
    )


# ---------------------------------------------------------------------------
# cvxpy
# ---------------------------------------------------------------------------

CLARABEL_OPTIONS = {
    "tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12, "tol_ktratio": 1e-10,
    "max_iter": 500,
}


def _solve_cvxpy(lp: LinearProgram, time_limit: float | None, solver: str) -> LPSolution:
    import cvxpy as cp  # lazy: heavy (about 1 s), needed only by --backend cvxpy

    start = time.perf_counter()
    x = cp.Variable(lp.num_vars, nonneg=True)
    constraints = []
    if lp.num_eq:
        constraints.append(sp.csr_matrix(lp.matrix("eq")) @ x == lp.rhs("eq"))
    if lp.num_ub:
        constraints.append(sp.csr_matrix(lp.matrix("ub")) @ x <= lp.rhs("ub"))
    problem = cp.Problem(cp.Maximize(lp.objective() @ x + lp.constant()), constraints)
    options: dict[str, Any] = {}
    if solver == "CLARABEL":
        options.update(CLARABEL_OPTIONS)
        if time_limit is not None:
            options["time_limit"] = float(time_limit)
    elif solver == "HIGHS" and time_limit is not None:
        options["time_limit"] = float(time_limit)
    notes = [f"cvxpy {solver}" + (" with tolerances 1e-12" if solver == "CLARABEL" else "")]
    try:
        problem.solve(solver=solver, **options)
    except cp.error.SolverError as err:
        return LPSolution("error", float("nan"), np.full(lp.num_vars, np.nan),
                          time.perf_counter() - start, "cvxpy", notes=notes + [str(err)])
    status = {"optimal": "optimal", "optimal_inaccurate": "optimal_inaccurate",
              "infeasible": "infeasible", "unbounded": "unbounded"}.get(problem.status,
                                                                       str(problem.status))
    value = float(problem.value) if status.startswith("optimal") else float("nan")
    xv = (np.asarray(x.value, dtype=np.float64) if x.value is not None
          else np.full(lp.num_vars, np.nan))
    duals = None
    if status.startswith("optimal") and constraints:
        parts = []
        if lp.num_eq:
            parts.append(np.asarray(constraints[0].dual_value, dtype=np.float64).reshape(-1))
        if lp.num_ub:
            parts.append(np.asarray(constraints[-1].dual_value, dtype=np.float64).reshape(-1))
        duals = np.concatenate(parts)
    return LPSolution(status, value, xv, time.perf_counter() - start, "cvxpy", None, duals, notes)
