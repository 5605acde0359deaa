"""Exact optimality certificates from a simplex basis (python-flint rationals).

    certify(lp, solution) -> Certificate

The LP (speclp.lp.program) is   max c^T x + const,  A_eq x = b_eq,  A_ub x <= b_ub,  x >= 0.
Given a basis (HiGHS col_status / row_status; rows eq then ub):
  * basic columns B, tight rows T = rows whose status is not basic (|B| must equal |T|);
  * primal: x_N = 0 and the tight rows hold with equality: A[T, B] x_B = b_T;
  * dual:   y_i = 0 on rows whose slack is basic, and A[T, B]^T y_T = c_B.
Both square systems are solved in exact rationals. The certificate then checks, with
no reference to the basis (so any basis that passes proves optimality by weak duality):
  primal_nonnegative  x >= 0
  equality_rows       A_eq x = b_eq exactly (and the dropped redundant rows kept in
                      lp.meta["dropped_eq"], if any)
  inequality_rows     A_ub x <= b_ub exactly
  dual_sign           y_i >= 0 on every <= row (maximisation)
  reduced_costs       c_j - a_j^T y <= 0 for every column j
  objective_match     c^T x + const = b^T y + const
Float bases from HiGHS are often optimal only within its tolerances (a basic equality
slack off by 1e-11, a basic value of -1e-12: instances with tiny probabilities). certify
refuses those. refine_basis repairs them by iterative refinement (as in SoPlex): the LP
is rewritten around the exact basic point with the primal and dual residuals scaled up
to O(1), HiGHS is warm-started on it from the same basis, and the new basis is solved
exactly again; solve_exact = solve + certify + refine when needed.
Sparse solve: singleton rows and columns of the basis matrix are peeled exactly (a row
with one unknown fixes it; a column in one remaining row is set aside and back-
substituted last); only the remaining core goes to a dense flint fmpq_mat solve. The
numbers are python-flint fmpq throughout.
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import highspy
import numpy as np
import scipy.sparse as sparse
from flint import fmpq, fmpq_mat, fmpz

from .program import Block, LinearProgram, is_zero_value
from .solve import BASIC, LPSolution, new_highs, solve

MAX_DENSE_CORE = 3000
MAX_SCALE_EXPONENT = 90  # residual scale factors up to 2^90 (violations down to ~1e-27)
BOUND_CLIP = 1e14  # shifted bounds beyond this are treated as infinite by the residual LP


class SingularBasis(ValueError):
    """The basis matrix is singular (or not square)."""


@dataclass
class Certificate:
    """Outcome of certify(). value: the exact optimum (c^T x + const) when certified.

    primal [n] and dual [m_eq + m_ub]: exact fmpq solutions from the basis (None when the
    basis systems could not be solved). checks: name -> bool (or a size, for core_size).
    """

    certified: bool
    value: Fraction | None
    reason: str
    seconds: float
    checks: dict[str, Any] = field(default_factory=dict)
    primal: list | None = field(default=None, repr=False)
    dual: list | None = field(default=None, repr=False)


def to_fmpq(values: np.ndarray) -> list:
    """Object array of Fractions / ints / fmpq -> list of fmpq. Other exact number types
    (the symbolic rational functions of speclp.proofs.symbolic) are kept as they are."""
    out = []
    for v in values:
        if isinstance(v, fmpq):
            out.append(v)
        elif isinstance(v, Fraction):
            out.append(fmpq(v.numerator, v.denominator))
        elif isinstance(v, numbers.Number):
            out.append(fmpq(Fraction(v).numerator, Fraction(v).denominator))
        else:
            out.append(v)
    return out


def fmpq_to_fraction(v: fmpq) -> Fraction:
    return Fraction(int(v.p), int(v.q))


# ---------------------------------------------------------------------------
# exact sparse square solve
# ---------------------------------------------------------------------------

def _drop_entry(adj: list[dict[int, Any]], line: int, entry: int, stack: list[int],
                singular: str) -> None:
    """Remove `entry` from adj[line] (a row or a column of the elimination): the line is
    queued on `stack` when one entry is left, and the basis is singular (SingularBasis with
    the text `singular`) when none is."""
    del adj[line][entry]
    left = len(adj[line])
    if left == 1:
        stack.append(line)
    elif left == 0:
        raise SingularBasis(singular)


def solve_sparse_exact(n: int, rows: np.ndarray, cols: np.ndarray, vals: list,
                       rhs: list) -> tuple[list, int]:
    """Solve the n x n system sum_k vals[k] x[cols[k]] = rhs[rows[k]] exactly.

    rows, cols [nnz] local indices in 0..n-1; vals [nnz] fmpq (duplicates summed); rhs [n]
    fmpq. Returns (x [n] fmpq, size of the dense core). Raises SingularBasis.
    """
    row_adj: list[dict[int, Any]] = [{} for _ in range(n)]
    col_adj: list[dict[int, Any]] = [{} for _ in range(n)]
    for r, c, v in zip(rows.tolist(), cols.tolist(), vals, strict=True):
        row = row_adj[r]
        if c in row:
            v = row[c] + v
        row[c] = v
        col_adj[c][r] = v
    for r in range(n):  # drop entries that cancelled to zero
        for c in [c for c, v in row_adj[r].items() if is_zero_value(v)]:
            del row_adj[r][c]
            del col_adj[c][r]
    zero = fmpq(0)
    x: list[Any] = [None] * n
    work = list(rhs)
    alive_rows = [True] * n
    alive_cols = [True] * n
    deferred: list[tuple[int, int, Any, dict[int, Any], Any]] = []
    row_stack = [i for i in range(n) if len(row_adj[i]) == 1]
    col_stack = [j for j in range(n) if len(col_adj[j]) == 1]
    for i in range(n):
        if not row_adj[i]:
            raise SingularBasis(f"row {i} of the basis matrix is empty")
        if not col_adj[i]:
            raise SingularBasis(f"column {i} of the basis matrix is empty")
    while row_stack or col_stack:
        if row_stack:
            i = row_stack.pop()
            if not alive_rows[i] or len(row_adj[i]) != 1:
                continue
            ((j, a),) = row_adj[i].items()
            xj = work[i] / a
            x[j] = xj
            alive_rows[i] = alive_cols[j] = False
            row_adj[i].clear()
            del col_adj[j][i]
            for k, akj in col_adj[j].items():
                work[k] -= akj * xj
                _drop_entry(row_adj, k, j, row_stack,
                            "basis matrix is singular (a row lost all its unknowns)")
            col_adj[j].clear()
        else:
            j = col_stack.pop()
            if not alive_cols[j] or len(col_adj[j]) != 1:
                continue
            ((i, a),) = col_adj[j].items()
            others = {c: v for c, v in row_adj[i].items() if c != j}
            deferred.append((i, j, a, others, work[i]))
            alive_rows[i] = alive_cols[j] = False
            for c in others:
                _drop_entry(col_adj, c, i, col_stack,
                            "basis matrix is singular (a column lost all its rows)")
            row_adj[i].clear()
            col_adj[j].clear()
    core_rows = [i for i in range(n) if alive_rows[i]]
    core_cols = [j for j in range(n) if alive_cols[j]]
    if len(core_rows) != len(core_cols):
        raise SingularBasis("basis matrix is singular (core not square)")
    k = len(core_rows)
    if k:
        if k > MAX_DENSE_CORE:
            raise SingularBasis(f"dense core of size {k} exceeds {MAX_DENSE_CORE}; not certified")
        position = {c: idx for idx, c in enumerate(core_cols)}
        if not all(isinstance(v, fmpq) for r in core_rows for v in row_adj[r].values()):
            solution = _solve_dense_generic([{position[c]: v for c, v in row_adj[r].items()}
                                             for r in core_rows], [work[r] for r in core_rows])
            for idx, c in enumerate(core_cols):
                x[c] = solution[idx]
            core_rows = []
        dense = fmpq_mat(k, k)
        vector = fmpq_mat(k, 1)
        for ri, r in enumerate(core_rows):
            for c, v in row_adj[r].items():
                dense[ri, position[c]] = v
            vector[ri, 0] = work[r]
        if core_rows:
            try:
                solution = dense.solve(vector)
            except ZeroDivisionError:
                raise SingularBasis(f"basis core ({k} x {k}) is singular") from None
            for idx, c in enumerate(core_cols):
                x[c] = solution[idx, 0]
    for i, j, a, others, rhs_i in reversed(deferred):
        total = rhs_i
        for c, v in others.items():
            total = total - v * x[c]
        x[j] = total / a
        del i
    return [zero if v is None else v for v in x], k


def _known_nonzero(value: Any) -> bool:
    test = getattr(value, "known_nonzero", None)
    return bool(test()) if callable(test) else value != 0


def _solve_dense_generic(rows: list[dict[int, Any]], rhs: list) -> list:
    """Gaussian elimination for exact number types other than fmpq (rows: column -> value).

    The pivot of a column is the first remaining row whose entry is != 0 (for the symbolic
    rational functions of speclp.proofs.symbolic that test is decided by their cell; rows
    whose entry is already known to be nonzero there, ``known_nonzero()``, come first).
    """
    k = len(rows)
    rows = [dict(r) for r in rows]
    rhs = list(rhs)
    order: list[int] = []
    remaining = list(range(k))
    for col in range(k):
        candidates = [r for r in remaining if col in rows[r]]
        candidates.sort(key=lambda r: not _known_nonzero(rows[r][col]))
        pivot = next((r for r in candidates if rows[r][col] != 0), None)
        if pivot is None:
            raise SingularBasis(f"basis core ({k} x {k}) is singular")
        remaining.remove(pivot)
        order.append(pivot)
        a = rows[pivot][col]
        for r in remaining:
            factor = rows[r].pop(col, None)
            if factor is None:
                continue
            ratio = factor / a
            for c, v in rows[pivot].items():
                if c != col:
                    rows[r][c] = rows[r].get(c, 0) - ratio * v
            rhs[r] = rhs[r] - ratio * rhs[pivot]
    solution: list[Any] = [None] * k
    for col in range(k - 1, -1, -1):
        pivot = order[col]
        total = rhs[pivot]
        for c, v in rows[pivot].items():
            if c > col:
                total = total - v * solution[c]
        solution[col] = total / rows[pivot][col]
    return solution


# ---------------------------------------------------------------------------
# certificate
# ---------------------------------------------------------------------------

@dataclass
class _ExactData:
    """The LP in fmpq: stacked COO (eq rows then ub rows) and vectors."""

    table: list
    rows: np.ndarray
    cols: np.ndarray
    refs: np.ndarray
    rhs: list
    objective: list
    constant: Any
    num_eq: int
    num_rows: int


def _exact_data(lp: LinearProgram) -> _ExactData:
    table = to_fmpq(lp.exact_table)
    rows = np.concatenate([lp.eq.rows, lp.ub.rows + lp.num_eq])
    cols = np.concatenate([lp.eq.cols, lp.ub.cols])
    refs = np.concatenate([lp.eq.refs, lp.ub.refs])
    rhs_refs = np.concatenate([lp.eq.rhs_refs, lp.ub.rhs_refs])
    return _ExactData(table, rows, cols, refs, [table[r] for r in rhs_refs.tolist()],
                      [table[r] for r in lp.objective_refs.tolist()], table[lp.constant_ref],
                      lp.num_eq, lp.num_eq + lp.num_ub)


def _basis_point(data: _ExactData, n: int, basis: tuple[np.ndarray, np.ndarray]
                 ) -> tuple[list, list, int]:
    """Exact (x [n], y [m], core size) of a basis. Raises SingularBasis."""
    col_status, row_status = (np.asarray(b) for b in basis)
    m = data.num_rows
    basic_cols = np.nonzero(col_status == BASIC)[0]
    tight_rows = np.nonzero(row_status != BASIC)[0]
    if len(basic_cols) != len(tight_rows):
        raise SingularBasis(f"{len(basic_cols)} basic columns but {len(tight_rows)} nonbasic rows")
    col_pos = np.full(n, -1, dtype=np.int64)
    col_pos[basic_cols] = np.arange(len(basic_cols))
    row_pos = np.full(m, -1, dtype=np.int64)
    row_pos[tight_rows] = np.arange(len(tight_rows))
    inside = (col_pos[data.cols] >= 0) & (row_pos[data.rows] >= 0)
    b_rows, b_cols = row_pos[data.rows[inside]], col_pos[data.cols[inside]]
    b_vals = [data.table[r] for r in data.refs[inside].tolist()]
    size = len(basic_cols)
    x_basic, core_primal = solve_sparse_exact(
        size, b_rows, b_cols, b_vals, [data.rhs[i] for i in tight_rows.tolist()])
    y_tight, core_dual = solve_sparse_exact(
        size, b_cols, b_rows, b_vals, [data.objective[j] for j in basic_cols.tolist()])
    zero = fmpq(0)
    x = [zero] * n
    for j, v in zip(basic_cols.tolist(), x_basic, strict=True):
        x[j] = v
    y = [zero] * m
    for i, v in zip(tight_rows.tolist(), y_tight, strict=True):
        y[i] = v
    return x, y, max(core_primal, core_dual)


@dataclass
class _Evaluation:
    checks: dict[str, bool]
    activity: list  # [m] A x
    reduced: list  # [n] c - A^T y
    primal_value: Any
    dual_value: Any


def _over_common_denominator(values: list) -> tuple[fmpz, list[fmpz]] | None:
    """(D, [v D]) with D the lcm of the denominators of `values` (fmpq), the numerators over
    it as integers; None when a value is not an fmpq."""
    if not all(isinstance(v, fmpq) for v in values):
        return None
    common = fmpz(1)
    for q in {v.q for v in values}:
        common = common.lcm(q)
    return common, [v.p * (common // v.q) for v in values]


def _products_in_integers(data: _ExactData, x: list, y: list
                          ) -> tuple[list, list, Any, Any] | None:
    """(A x [m], c - A^T y [n], c.x + constant, b.y + constant) exactly, as _evaluate's loop
    computes them, but in integers: every entry, x and y over one common denominator each
    (a table entry a = a' / E, x_j = x'_j / D_x, y_i = y'_i / D_y), so each row's sum is
    sum a' x' (fmpz products, no gcd) divided once by E D_x. The x and y of a basis solve
    share long denominators (~34,000 bits at (V, L, K) = (4, 3, 3)); summed one fraction at a
    time every addition paid a gcd of that size. None when an entry is not an fmpq (the
    symbolic rational functions of speclp.proofs.symbolic): the loop then runs."""
    scaled = [_over_common_denominator(v) for v in (data.table, x, y, data.objective,
                                                    data.rhs)]
    if any(part is None for part in scaled) or not isinstance(data.constant, fmpq):
        return None
    (table_den, table), (x_den, x_int), (y_den, y_int) = scaled[:3]
    (objective_den, objective), (rhs_den, rhs) = scaled[3:]
    zero = fmpz(0)
    activity = [zero] * data.num_rows
    transposed = [zero] * len(x)
    for r, c, ref in zip(data.rows.tolist(), data.cols.tolist(), data.refs.tolist(), strict=True):
        a = table[ref]
        if x_int[c]:
            activity[r] += a * x_int[c]
        if y_int[r]:
            transposed[c] += a * y_int[r]
    activity_den, transposed_den = table_den * x_den, table_den * y_den
    activity_q = [fmpq(v, activity_den) for v in activity]
    reduced = [c - fmpq(t, transposed_den) for c, t in zip(data.objective, transposed, strict=True)]
    primal = sum((c * v for c, v in zip(objective, x_int, strict=True) if v), zero)
    dual = sum((b * v for b, v in zip(rhs, y_int, strict=True) if v), zero)
    return (activity_q, reduced, data.constant + fmpq(primal, objective_den * x_den),
            data.constant + fmpq(dual, rhs_den * y_den))


def _evaluate(data: _ExactData, lp: LinearProgram, x: list, y: list) -> _Evaluation:
    zero = fmpq(0)
    n, m, m_eq = lp.num_vars, data.num_rows, data.num_eq
    table = data.table
    checks: dict[str, bool] = {}
    checks["primal_nonnegative"] = all(v >= 0 for v in x)
    fast = _products_in_integers(data, x, y)
    if fast is not None:
        activity, reduced, primal_value, dual_value = fast
    else:
        activity = [zero] * m
        reduced = list(data.objective)
        for r, c, ref in zip(data.rows.tolist(), data.cols.tolist(), data.refs.tolist(),
                             strict=True):
            a = table[ref]
            if not is_zero_value(x[c]):
                activity[r] += a * x[c]
            if not is_zero_value(y[r]):
                reduced[c] -= a * y[r]
        primal_value = data.constant + sum((data.objective[j] * x[j] for j in range(n)
                                            if not is_zero_value(x[j])), zero)
        dual_value = data.constant + sum((data.rhs[i] * y[i] for i in range(m)
                                          if not is_zero_value(y[i])), zero)
    checks["equality_rows"] = all(activity[i] == data.rhs[i] for i in range(m_eq))
    dropped: Block | None = lp.meta.get("dropped_eq")
    if dropped is not None and dropped.count:
        extra = [zero] * dropped.count
        for r, c, ref in zip(dropped.rows.tolist(), dropped.cols.tolist(), dropped.refs.tolist(),
                             strict=True):
            extra[r] += table[ref] * x[c]
        checks["equality_rows"] &= all(extra[i] == table[ref]
                                       for i, ref in enumerate(dropped.rhs_refs.tolist()))
    checks["inequality_rows"] = all(activity[i] <= data.rhs[i] for i in range(m_eq, m))
    checks["dual_sign"] = all(y[i] >= 0 for i in range(m_eq, m))
    checks["reduced_costs"] = all(d <= 0 for d in reduced)
    checks["objective_match"] = primal_value == dual_value
    return _Evaluation(checks, activity, reduced, primal_value, dual_value)


def certify(lp: LinearProgram, solution: LPSolution | None = None,
            basis: tuple[np.ndarray, np.ndarray] | None = None) -> Certificate:
    """Exact certificate of optimality of the basis in solution (or the basis given).

    Strict: a basis that is optimal only within floating tolerances is refused, with the
    failing check named (see refine_basis / solve_exact to repair it).
    """
    start = time.perf_counter()
    checks: dict[str, Any] = {}

    def done(ok: bool, reason: str, value: Fraction | None = None, **kw: Any) -> Certificate:
        return Certificate(ok, value, reason, time.perf_counter() - start, checks, **kw)

    if basis is None:
        if solution is None or solution.basis is None:
            backend = solution.backend if solution is not None else "none"
            return done(False, f"no basis to certify (backend {backend} returns none)")
        basis = solution.basis
    if lp.exact_table is None:
        return done(False, "the LP carries no exact data (built with exact=False)")
    n, m = lp.num_vars, lp.num_eq + lp.num_ub
    if len(basis[0]) != n or len(basis[1]) != m:
        return done(False, f"basis shape ({len(basis[0])}, {len(basis[1])}) does not match "
                           f"the LP ({n} columns, {m} rows)")
    checks["basis_size"] = int((np.asarray(basis[0]) == BASIC).sum()) == int(
        (np.asarray(basis[1]) != BASIC).sum())
    if not checks["basis_size"]:
        return done(False, "basis_size: the numbers of basic columns and nonbasic rows differ")
    data = _exact_data(lp)
    try:
        x, y, core = _basis_point(data, n, basis)
    except SingularBasis as err:
        checks["basis_nonsingular"] = False
        return done(False, f"basis_nonsingular: {err}")
    checks["basis_nonsingular"] = True
    evaluation = _evaluate(data, lp, x, y)
    checks.update(evaluation.checks)
    checks["core_size"] = core
    failing = [name for name, ok in checks.items() if ok is False]
    if failing:
        detail = []
        if not checks["primal_nonnegative"]:
            detail.append(f"{sum(1 for v in x if v < 0)} negative basic values")
        if not checks["reduced_costs"]:
            worst = max(range(n), key=lambda j: evaluation.reduced[j])
            detail.append(f"reduced cost {float(evaluation.reduced[worst]):.3g} > 0 at "
                          f"{lp.variable_label(worst)}")
        if not checks["dual_sign"]:
            detail.append(f"{sum(1 for i in range(lp.num_eq, m) if y[i] < 0)} negative "
                          "<=-row duals")
        text = "failed: " + ", ".join(failing) + (f" ({'; '.join(detail)})" if detail else "")
        return done(False, text, primal=x, dual=y)
    value = evaluation.primal_value
    return done(True, "optimal: exact primal and dual feasible with equal objective",
                fmpq_to_fraction(value) if isinstance(value, fmpq) else value, primal=x, dual=y)


# ---------------------------------------------------------------------------
# iterative refinement of a float basis
# ---------------------------------------------------------------------------

def _float(v: Any) -> float:
    return float(v.p) / float(v.q) if abs(v.p) < 2**1000 and v.q < 2**1000 else float(
        fmpq_to_fraction(v))


def _scale(violation: float) -> float:
    if violation <= 0:
        return 1.0
    return float(2.0 ** min(MAX_SCALE_EXPONENT, max(0, round(-np.log2(violation)))))


def _clip(lower: np.ndarray) -> np.ndarray:
    return np.where(lower < -BOUND_CLIP, -np.inf, lower)


def _refinement_step(lp: LinearProgram, data: _ExactData, basis: tuple[np.ndarray, np.ndarray],
                     x: list, y: list, evaluation: _Evaluation
                     ) -> tuple[np.ndarray, np.ndarray] | None:
    """One round: warm-started HiGHS solve of the rescaled residual LP. Returns the new
    basis (None when HiGHS fails)."""
    n, m, m_eq = lp.num_vars, data.num_rows, data.num_eq
    m_ub = m - m_eq
    x_float = np.array([_float(v) for v in x])
    x_round = [fmpq(Fraction(v).numerator, Fraction(v).denominator) for v in x_float]
    slack = [data.rhs[i] - evaluation.activity[i] for i in range(m_eq, m)]
    s_float = np.array([_float(v) for v in slack])
    s_round = [fmpq(Fraction(v).numerator, Fraction(v).denominator) for v in s_float]
    # residual b - A x_round - s_round (exact), then scaled
    residual = list(data.rhs)
    for r, c, ref in zip(data.rows.tolist(), data.cols.tolist(), data.refs.tolist(), strict=True):
        if x_round[c]:
            residual[r] -= data.table[ref] * x_round[c]
    for k in range(m_ub):
        residual[m_eq + k] -= s_round[k]
    res_float = np.array([_float(v) for v in residual])
    reduced = np.array([_float(v) for v in evaluation.reduced])
    slack_reduced = np.array([-_float(y[i]) for i in range(m_eq, m)])
    primal_violation = max([0.0, *np.abs(res_float), *(-x_float), *(-s_float)])
    dual_violation = max([0.0, *reduced, *slack_reduced])
    sp_, sd_ = _scale(primal_violation), _scale(dual_violation)
    h = new_highs()
    h.setOptionValue("presolve", "off")
    h.setOptionValue("solver", "simplex")
    h.setOptionValue("small_matrix_value", 1e-12)
    matrix_rows = np.concatenate([data.rows, m_eq + np.arange(m_ub)])
    matrix_cols = np.concatenate([data.cols, n + np.arange(m_ub)])
    matrix_vals = np.concatenate([lp.table[data.refs], np.ones(m_ub)])
    matrix = sparse.csc_array((matrix_vals, (matrix_rows, matrix_cols)), shape=(m, n + m_ub))
    matrix.sort_indices()
    rhs = sp_ * res_float
    status = h.passModel(
        int(n + m_ub), int(m), int(matrix.nnz), int(highspy.MatrixFormat.kColwise),
        int(highspy.ObjSense.kMaximize), 0.0, sd_ * np.concatenate([reduced, slack_reduced]),
        _clip(-sp_ * np.concatenate([x_float, s_float])), np.full(n + m_ub, np.inf), rhs, rhs,
        matrix.indptr.astype(np.int32), matrix.indices.astype(np.int32),
        np.ascontiguousarray(matrix.data, dtype=np.float64), np.zeros(n + m_ub, dtype=np.int32))
    if status == highspy.HighsStatus.kError:  # a warning (e.g. tiny entries dropped) is fine
        return None
    col_status, row_status = basis
    warm = highspy.HighsBasis()
    lower, basic, upper = (highspy.HighsBasisStatus.kLower, highspy.HighsBasisStatus.kBasic,
                           highspy.HighsBasisStatus.kUpper)
    cols = [basic if s == BASIC else lower for s in col_status.tolist()]
    cols += [basic if s == BASIC else lower for s in row_status[m_eq:].tolist()]
    rows = [basic if s == BASIC else upper for s in row_status[:m_eq].tolist()] + [upper] * m_ub
    warm.col_status = cols
    warm.row_status = rows
    warm.valid = True
    h.setBasis(warm)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        # the warm basis can be singular or badly conditioned for HiGHS on the rescaled
        # residual LP (tiny path probabilities): solve it cold once before giving up
        h.clearSolver()
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
    new = h.getBasis()
    new_cols = np.array([s.value for s in new.col_status], dtype=np.int8)
    new_rows = np.array([s.value for s in new.row_status], dtype=np.int8)
    out_rows = np.empty(m, dtype=np.int8)
    out_rows[:m_eq] = new_rows[:m_eq]
    out_rows[m_eq:] = np.where(new_cols[n:] == BASIC, BASIC, 2)  # slack basic <=> row basic
    return new_cols[:n], out_rows


def refine_basis(lp: LinearProgram, solution: LPSolution, max_rounds: int = 6,
                 time_limit: float | None = None) -> tuple[LPSolution, Certificate]:
    """Iterative refinement of solution's basis until it certifies (or max_rounds, or
    time_limit seconds: no new round starts after it; a round under way finishes).

    Returns (solution with the last basis and notes, its certificate).
    """
    start = time.perf_counter()
    cert = certify(lp, solution)
    if cert.certified or solution.basis is None or lp.exact_table is None:
        return solution, cert
    if not cert.checks.get("basis_nonsingular", False):
        return solution, cert
    data = _exact_data(lp)
    basis = solution.basis
    notes = list(solution.notes)
    round_ = 0
    for round_ in range(1, max_rounds + 1):
        if time_limit is not None and time.perf_counter() - start > time_limit:
            notes.append(f"refinement stopped by the time limit ({time_limit:g} s) before "
                         f"round {round_}")
            cert.reason += f" (refinement stopped by the time limit {time_limit:g} s)"
            break
        x, y = cert.primal, cert.dual
        evaluation = _evaluate(data, lp, x, y)
        new_basis = _refinement_step(lp, data, basis, x, y, evaluation)
        if new_basis is None:
            notes.append(f"refinement round {round_}: HiGHS failed on the residual LP")
            break
        basis = new_basis
        cert = certify(lp, basis=basis)
        notes.append(f"refinement round {round_}: {cert.reason}")
        if cert.certified or not cert.checks.get("basis_nonsingular", False):
            break
    x_float = (np.array([_float(v) for v in cert.primal]) if cert.primal is not None
               else solution.x)
    refined = LPSolution(solution.status, float(cert.value) if cert.certified else solution.value,
                         x_float, solution.seconds + time.perf_counter() - start,
                         solution.backend, basis, solution.duals, notes, dict(solution.info))
    refined.info["refinement_rounds"] = round_
    cert.seconds = time.perf_counter() - start
    return refined, cert


def solve_exact(lp: LinearProgram, max_rounds: int = 6, **solve_options: Any
                ) -> tuple[LPSolution, Certificate]:
    """solve(lp, backend="highs", ...) then certify, refining the basis when needed."""
    solution = solve(lp, backend="highs", **solve_options)
    if not solution.optimal:
        return solution, Certificate(False, None, f"solver status {solution.status}", 0.0)
    return refine_basis(lp, solution, max_rounds)
