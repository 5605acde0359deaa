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
    status = h.passModel(
        int(n), int(m), int(matrix.nnz), int(highspy.MatrixFormat.kColwise),
        int(highspy.ObjSense.kMaximize), float(lp.constant()),
        np.ascontiguousarray(lp.objective(), dtype=np.float64),
        np.zeros(n), np.full(n, np.inf), lower, upper,
        matrix.indptr.astype(np.int32), matrix.indices.astype(np.int32),
        np.ascontiguousarray(matrix.data, dtype=np.float64), np.zeros(n, dtype=np.int32),
    )
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
# column generation for the K-path full LP
# ---------------------------------------------------------------------------

MAX_COLGEN_COLUMNS = 100_000_000  # pi columns of the (implicit) full LP


@dataclass
class ColgenResult:
    """Column generation outcome.

    lp: the final restricted master (a LinearProgram with the rows of the full LP and a
    subset of its pi columns, all A columns); solution: its HiGHS solution (basis
    included); structure: the implicit full LP (speclp.lp.builders.FullStructure);
    certificate: from speclp.lp.certify.certify_colgen when certify=True, else None.
    history: one dict per master solve (columns, value, seconds, columns added).
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


def price_float(structure: Any, duals: np.ndarray, tolerance: float = 1e-9
                ) -> tuple[np.ndarray, np.ndarray]:
    """Best pi column of every configuration against float duals of the master rows.

    duals [m] HiGHS row duals (marginal rows, then matching rows). Reduced cost of
    pi(c, n, y) = (|n| + 1) - y_c - v(n, y) (y_c = 0 for the configuration whose marginal
    row is dropped). Returns (column ids [k], reduced costs [k]) of the configurations
    whose best reduced cost exceeds tolerance.
    """
    st = structure
    vocab = st.vocab
    n_marg = st.num_marginal_rows
    y_conf = np.zeros(len(st.configs))
    y_conf[:n_marg] = duals[:n_marg]
    keys = st.match_keys
    node, token = np.divmod(keys, vocab)
    depth_of = node_depth_array(st)
    gain = np.full((st.num_nodes, vocab), -np.inf)
    gain[node, token] = depth_of[node] + 1 - duals[n_marg:]
    best_gain = gain.max(axis=1)  # [N]
    best_token = gain.argmax(axis=1)
    rc = best_gain[st.slot_node] - y_conf[st.slot_config]  # [M]
    starts = np.searchsorted(st.slot_config, np.arange(len(st.configs)))
    config_best = np.maximum.reduceat(rc, starts)
    hit = (rc >= config_best[st.slot_config]) & (rc > tolerance)
    _, first = np.unique(st.slot_config[hit], return_index=True)
    slots = np.nonzero(hit)[0][first]
    return slots * vocab + best_token[st.slot_node[slots]], rc[slots]


def node_depth_array(structure: Any) -> np.ndarray:
    from ..verifiers.tree import node_depths

    return node_depths(structure.vocab, structure.model.depth)


def _column_entries(st: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       np.ndarray]:
    """(costs [k], starts [k], row indices, values) of pi columns for Highs.addCols."""
    vocab = st.vocab
    slot, y = np.divmod(ids, vocab)
    cfg = st.slot_config[slot]
    match_row = st.match_rows(st.slot_node[slot] * vocab + y)
    has_marg = cfg < st.num_marginal_rows
    counts = 1 + has_marg.astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    index = np.empty(int(counts.sum()), dtype=np.int64)
    index[starts] = np.where(has_marg, cfg, match_row)
    second = starts[has_marg] + 1
    index[second] = match_row[has_marg]
    costs = st.values[st.refs["depth"][st.slot_depth[slot]]]
    return costs, starts, index, np.ones(len(index))


def solve_colgen(model_or_instance: Any, paths: int = 2, draft_sampling: str = "iid",
                 exact: bool = True, tolerance: float = 1e-9, max_iterations: int = 500,
                 time_limit: float | None = None, certify: bool = True,
                 max_columns: int = MAX_COLGEN_COLUMNS) -> ColgenResult:
    """Column generation for the K-path full LP (THEORY section 6).

    Restricted master: every A(z) column plus, per configuration, a growing subset of its
    outputs (start: the root outputs pi(c, root, y), which are feasible with A = 0 and
    pi(c, root, y) = w(c) p(y)). Pricing (price_float) adds the best output of every
    configuration with reduced cost > tolerance; the master is re-solved warm (HiGHS keeps
    its basis after addCols). With certify=True the final master is certified exactly and
    every column of the full LP is priced in exact arithmetic (certify_colgen); a column
    the float pricing missed is added and the loop resumes.
    """
    from .builders import full_structure, lp_from_structure

    start = time.perf_counter()
    st = full_structure(model_or_instance, paths, draft_sampling, exact,
                        max_nonzeros=2 * max_columns + 10**6, max_bytes=64 * 2**30)
    vocab = st.vocab
    root_slots = np.nonzero(st.slot_depth == 0)[0]
    ids = (root_slots[:, None] * vocab + np.arange(vocab)[None, :]).reshape(-1)
    in_master = np.zeros(st.num_pi, dtype=bool)
    in_master[ids] = True
    order = [ids]
    lp0 = lp_from_structure(st, ids)
    notes: list[str] = [f"{len(st.configs)} configurations, {st.num_pi} pi columns in the full LP"]
    small = _small_coefficient_note(lp0, HIGHS_SMALL_MATRIX_VALUE)
    if small:
        notes.append(small)
    h = highs_model(lp0, presolve=False, method="simplex")
    n_before_a = len(ids)  # HiGHS holds [pi columns (n_before_a), A columns, added pi columns]
    history: list[dict[str, Any]] = []
    status = "unknown"
    iterations = 0
    certificate = None
    certify_seconds = None
    n_a = st.num_nodes - 1
    while True:
        while iterations < max_iterations:
            if time_limit is not None:
                left = time_limit - (time.perf_counter() - start)
                if left <= 0:
                    status = "time_limit"
                    break
                h.setOptionValue("time_limit", float(left))
            t0 = time.perf_counter()
            h.run()
            iterations += 1
            status = _status_name(h, h.getModelStatus())
            value = float(h.getInfo().objective_function_value)
            entry = {"iteration": iterations, "columns": int(in_master.sum()), "value": value,
                     "seconds": time.perf_counter() - t0, "status": status}
            history.append(entry)
            if status != "optimal":
                break
            duals = np.asarray(h.getSolution().row_dual, dtype=np.float64)
            new, rcs = price_float(st, duals, tolerance)
            new = new[~in_master[new]]
            entry["added"] = int(len(new))
            entry["max_reduced_cost"] = float(rcs.max()) if len(rcs) else 0.0
            if not len(new):
                break
            _add_columns(h, st, new, n_a, order)
            in_master[new] = True
        all_ids = np.concatenate(order)
        lp = lp_from_structure(st, all_ids)
        solution = _highs_solution(h, lp, status, time.perf_counter() - start, list(notes),
                                   column_order=_highs_columns(len(all_ids), n_before_a, n_a))
        if status != "optimal" or not certify:
            break
        from .certify import certify_colgen

        t0 = time.perf_counter()
        solution, certificate, missed = certify_colgen(st, lp, solution)
        certify_seconds = (certify_seconds or 0.0) + time.perf_counter() - t0
        missed = missed[~in_master[missed]] if len(missed) else missed
        if certificate.certified or not len(missed) or iterations >= max_iterations:
            break
        notes.append(f"exact pricing found {len(missed)} columns the float pricing missed")
        h = highs_model(lp, presolve=False, method="simplex")
        h.setBasis(_as_highs_basis(solution.basis))
        n_before_a = len(all_ids)
        _add_columns(h, st, missed, n_a, order)
        in_master[missed] = True
    seconds = time.perf_counter() - start - (certify_seconds or 0.0)
    return ColgenResult(status, solution.value, lp, solution, st, iterations, seconds, history,
                        certificate, certify_seconds, notes)


def _highs_columns(n_pi: int, n_before_a: int, n_a: int) -> np.ndarray:
    """[n_pi + n_a] HiGHS column of every LinearProgram column of the master.

    HiGHS holds [pi (n_before_a), A (n_a), later pi]; the LinearProgram [all pi, A]."""
    lp_cols = np.arange(n_pi + n_a)
    return np.where(lp_cols < n_before_a, lp_cols,
                    np.where(lp_cols < n_pi, lp_cols + n_a, lp_cols - n_pi + n_before_a))


def _add_columns(h: Any, st: Any, ids: np.ndarray, n_a: int, order: list[np.ndarray]) -> None:
    costs, starts, index, values = _column_entries(st, ids)
    h.addCols(len(ids), costs, np.zeros(len(ids)), np.full(len(ids), np.inf), len(index),
              starts.astype(np.int32), index.astype(np.int32), values)
    order.append(ids)


def _as_highs_basis(basis: tuple[np.ndarray, np.ndarray]) -> Any:
    import highspy

    out = highspy.HighsBasis()
    out.col_status = [highspy.HighsBasisStatus(int(s)) for s in basis[0]]
    out.row_status = [highspy.HighsBasisStatus(int(s)) for s in basis[1]]
    out.valid = True
    return out
