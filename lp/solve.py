"""Solve a LinearProgram with HiGHS (highspy, directly) or cvxpy.

    solve(lp, backend="highs" | "cvxpy", presolve=True, time_limit=None) -> LPSolution

HiGHS: the LP is passed as one column-wise sparse matrix (equality rows first, then
the <= rows), maximised, output silenced. Two pitfalls of THEORY.md section 6 are
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

Column generation for the K-path full LP (solve_colgen) is at the end of this module.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

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
    import highspy

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
    import sys

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


def _status_name(h: Any, status: Any) -> str:
    import highspy

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
    import highspy

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
    status = _status_name(h, h.getModelStatus())
    if status in ("infeasible", "unbounded", "infeasible_or_unbounded") and presolve:
        notes.append(f"HiGHS reported {status} with presolve; retried without presolve")
        h.setOptionValue("presolve", "off")
        h.clearSolver()
        h.run()
        status = _status_name(h, h.getModelStatus())
        notes.append(f"retry without presolve: {status}")
    solution = _highs_solution(h, lp, status, time.perf_counter() - start, notes)
    solution.info["solve_s"] = solution.seconds  # the solve alone (refinement adds to seconds)
    solution.info["method"] = method
    return solution


def _highs_solution(h: Any, lp: LinearProgram, status: str, seconds: float,
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
    import cvxpy as cp

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


# ---------------------------------------------------------------------------
# column generation for the K-path full LP (selection master)
# ---------------------------------------------------------------------------

@dataclass
class ColgenResult:
    """Column generation outcome.

    value: optimum of the full K-path LP (float; certificate.value is exact when certified).
    lp: the final selection master (speclp.lp.builders.selection_lp; exact data when
    certified); solution: its solution (basis included); structure: the
    SelectionStructure; certificate: from speclp.lp.certify.certify_selection_master
    (certify=True), else None. history: one dict per master solve (columns, value,
    max reduced cost, seconds). seconds: column generation; certify_seconds: certificate.
    """

    status: str
    value: float
    lp: LinearProgram
    solution: LPSolution
    structure: Any
    iterations: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    certificate: Any = None
    certify_seconds: float | None = None
    notes: list[str] = field(default_factory=list)


def price_selection(structure: Any, duals: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Best selection priority against float master duals.

    duals [m]: the first P are theta(x) of the path rows. The lambda column of a priority
    has reduced cost r . theta (r its selection law), maximised by ranking the paths by
    theta (the selected path is then the drafted path of largest theta). Returns
    (priority [P], law [P], reduced cost).
    """
    from .builders import selection_law

    theta = duals[: structure.num_paths]
    priority = np.argsort(-theta, kind="stable")
    law = selection_law(structure, priority)
    return priority, law, float(law @ theta)


def solve_colgen(model_or_instance: Any, paths: int = 2, draft_sampling: str = "iid",
                 exact: bool = True, tolerance: float = 1e-9, max_iterations: int = 5_000,
                 time_limit: float | None = None, certify: bool = True) -> ColgenResult:
    """Column generation for the K-path full LP (THEORY sections 4 and 6).

    The full LP's configurations are priced through selection rules: the master
    (speclp.lp.builders.selection_lp) holds every single-path output variable rho(x, d, y)
    (P (L+1) V of them), every A(z), and one column per generated selection priority;
    its rows are P path rows plus the N V matching rows, whatever the number of draft
    configurations. Pricing (price_selection) sorts the P paths by their dual and adds
    the greedy selection law while its reduced cost exceeds tolerance; HiGHS re-solves
    warm. With certify=True the master (restricted to its basic priorities) is rebuilt
    with exact data, certified (refine_basis), and priced exactly: theta(x) >= H(x) for
    every path (all rho columns are in the master) plus max_k r_k . theta <= 0 make
    y_c = max_k theta(x_k) an exact dual of the full LP with the master's value, i.e. no
    column of the full LP has positive reduced cost (speclp.lp.certify
    .certify_selection_master). A priority the float pricing missed is added and the loop
    resumes.
    """
    from .builders import selection_lp, selection_structure

    start = time.perf_counter()
    st = selection_structure(model_or_instance, paths, draft_sampling, exact)
    priorities = [np.argsort(-st.q_paths, kind="stable")]
    master = selection_lp(st, priorities)
    notes = [f"{st.count_configurations():,} draft configurations; master {master.num_vars} "
             f"columns x {master.num_eq} rows"]
    h = highs_model(master, presolve=False, method="simplex")
    history: list[dict[str, Any]] = []
    iterations = 0
    status = "unknown"
    certificate = None
    certify_seconds = 0.0
    value = float("nan")

    def add_priority(priority: np.ndarray, law: np.ndarray) -> None:
        nz = np.nonzero(law)[0]
        h.addCols(1, np.zeros(1), np.zeros(1), np.full(1, np.inf), len(nz),
                  np.zeros(1, dtype=np.int32), nz.astype(np.int32), -law[nz])
        priorities.append(priority)

    while True:
        while iterations < max_iterations:
            if time_limit is not None:
                left = time_limit - (time.perf_counter() - start - certify_seconds)
                if left <= 0:
                    status = "time_limit"
                    break
                # HiGHS compares time_limit with its run clock, which accumulates over runs
                h.setOptionValue("time_limit", float(h.getRunTime() + left))
            t0 = time.perf_counter()
            h.run()
            iterations += 1
            status = _status_name(h, h.getModelStatus())
            if status == "not_set":  # warm start failed: solve cold
                notes.append(f"iteration {iterations}: warm start failed, solved cold")
                h.clearSolver()
                h.run()
                status = _status_name(h, h.getModelStatus())
            if status != "optimal":
                break
            value = float(h.getInfo().objective_function_value)
            duals = np.asarray(h.getSolution().row_dual, dtype=np.float64)
            priority, law, reduced = price_selection(st, duals)
            history.append({"iteration": iterations, "columns": len(priorities), "value": value,
                            "max_reduced_cost": reduced, "seconds": time.perf_counter() - t0})
            if reduced <= tolerance:
                break
            add_priority(priority, law)
        lp = selection_lp(st, priorities)
        solution = _highs_solution(h, lp, status, time.perf_counter() - start, list(notes))
        if status != "optimal" or not certify or not st.exact:
            break
        from .certify import certify_selection_master

        t0 = time.perf_counter()
        lp, solution, certificate, missed = certify_selection_master(st, priorities, solution)
        certify_seconds += time.perf_counter() - t0
        if certificate.certified or missed is None or iterations >= max_iterations:
            break
        notes.append("exact pricing found an improving priority the float pricing missed")
        from .builders import selection_law

        add_priority(missed, selection_law(st, missed))
    seconds = time.perf_counter() - start - certify_seconds
    return ColgenResult(status, value, lp, solution, st, iterations, seconds, history,
                        certificate, certify_seconds if certify else None, notes)
