"""The coarse LP on its ragged path set: the upper bound of docs/theory.md 13.3 / 13.5 without
the dummy tokens of a padded kept tree (docs/theory.md section 13.7, Lemma 13.9).

A mass-driven kept tree (`lp.coarsen.padded_edges`) is stored in the layout of the complete
W-ary tree, W its widest kept set, and the coarse instance of `lp.coarsen.coarsened_instance`
then has (W + 1)^L paths and (W + 1)^L (L + 1) (W + 1) output columns, most of them on dummy
tokens of probability 0 under both rows. Here the same selection master (docs/theory.md 6.1)
is built on the coarse nodes of positive target OR draft path probability only:

    leaves        the coarse paths of length L with q > 0 (one path row each);
    rho(x, d, y)  for such a leaf x, a prefix n = x[:d] and a token y with p(n y) > 0
                  (y the bonus token R at d = L), objective d + 1;
    A(z)          for every node z of depth 1..L with p(z) > 0;
    matching rows one per (n, y) with p(n y) > 0: A(n y) + C(n, y) - p(y|n) A(n) = [n root] p(y);
    lambda_k      selection priorities over the leaves, priced as in `lp.colgen`.

Every variable left out is 0 in every feasible point of the padded master and every row
left out reads 0 = 0 there, so the two masters have the same optimum (Lemma 13.9). The bound
is the weak-duality bound of docs/theory.md 7.3 on this master, evaluated in exact rationals
with the float master's matching duals (`ragged_dual_bound`): certified whatever the duals are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import highspy
import numpy as np

from .coarsen import BELOW_R, KeptTree, check_kept_rows, kept_tree_from_padded
from .colgen import _add_column, _clock, _column_loop, _recover_warm_start
from .program import exact_fraction
from .solve import FEASIBILITY_TOLERANCE, HIGHS_SMALL_MATRIX_VALUE, new_highs


@dataclass
class RaggedCoarse:
    """The coarse instance's nodes of positive target or draft path probability.

    parent [n] (-1 at the root), level [n], p_edge / q_edge [n] exact Fractions (p(token |
    parent), root 1), p_pos / q_pos [n] bool (path probability > 0); edges: the (node,
    child) pairs with positive target path probability, edge_node [E], edge_child [E] (-1:
    the bonus token R below a depth-L node), edge_p [E] Fractions; leaves [P]: the depth-L
    nodes with q > 0, leaf_q [P] Fractions, leaf_prefix [P, L + 1] the node of every prefix.
    padded_paths: (W + 1)^L, the path count of the padded coarse instance."""

    depth: int
    parent: np.ndarray
    level: np.ndarray
    p_edge: list[Fraction]
    q_edge: list[Fraction]
    p_pos: np.ndarray
    q_pos: np.ndarray
    edge_node: np.ndarray
    edge_child: np.ndarray
    edge_p: list[Fraction]
    leaves: np.ndarray
    leaf_q: list[Fraction]
    leaf_prefix: np.ndarray
    padded_paths: int
    out_edges: list[list[int]] = field(default_factory=list)  # edges of every node

    @property
    def num_leaves(self) -> int:
        return len(self.leaves)

    def size(self) -> dict[str, int]:
        rho = int(sum(len(self.out_edges[n]) for row in self.leaf_prefix for n in row
                      if self.p_pos[n]))
        return {"nodes": len(self.parent), "leaves": self.num_leaves, "rho_columns": rho,
                "matching_rows": len(self.edge_node), "padded_paths": self.padded_paths}


def _fraction(x: Any) -> Fraction:
    return x if isinstance(x, Fraction) else exact_fraction(float(x))


def ragged_coarse(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
                  below_r: str = "again") -> RaggedCoarse:
    """The ragged coarse tree of a kept tree in the complete W-ary layout (`lp.coarsen.
    coarsened_rows` conventions: kept node n's slot j is its child W n + 1 + j; the remainder
    R takes the rest of each row, clipped at 0 for float rows; below R "again": R with
    probability 1 under both rows; "terminal": the target R and the draft slot 0, a node of
    target probability 0; the rows at depth L are R). Floats are taken at their exact binary
    values. Nodes of probability 0 under both rows are left out (Lemma 13.9)."""
    check_kept_rows(target_kept, draft_kept, width, depth, below_r)
    return ragged_coarse_tree(kept_tree_from_padded(target_kept, draft_kept, width, depth), below_r)


def ragged_coarse_tree(tree: KeptTree, below_r: str = "again") -> RaggedCoarse:
    """`ragged_coarse` of a ragged kept tree (lp.coarsen.KeptTree: every kept node with its
    own kept slots, no padding; the same nodes in the same order as the padded layout of
    the same tree, whose dummy slots have probability 0 under both rows)."""
    if below_r not in BELOW_R:
        raise ValueError(f"below_r must be one of {BELOW_R}, got {below_r!r}")
    depth, width = tree.depth, tree.width
    te = [[_fraction(x) for x in row] for row in tree.p]
    de = [[_fraction(x) for x in row] for row in tree.q]
    one, zero = Fraction(1), Fraction(0)
    parent, level, p_edge, q_edge, p_pos, q_pos = [-1], [0], [one], [one], [True], [True]
    kind: list[tuple[str, int]] = [("kept", 0)]  # ("kept", kept node) or ("rest", 0)
    frontier = [0]
    for d in range(depth):
        nxt = []
        for n in frontier:
            what, k = kind[n]
            if what == "kept":
                rest_p, rest_q = one - sum(te[k], zero), one - sum(de[k], zero)
                kids = [(te[k][j], de[k][j], ("kept", tree.child[k][j])) for j in range(len(te[k]))]
                kids.append((max(rest_p, zero), max(rest_q, zero), ("rest", 0)))
            elif below_r == "again":
                kids = [(one, one, ("rest", 0))]
            else:  # terminal: the target stays at R, the draft moves to slot 0 (p = 0)
                kids = [(one, zero, ("rest", 0)), (zero, one, ("rest", 0))]
            for pe, qe, child_kind in kids:
                pp, qp = bool(p_pos[n] and pe > 0), bool(q_pos[n] and qe > 0)
                if not (pp or qp):
                    continue
                parent.append(n)
                level.append(d + 1)
                p_edge.append(pe)
                q_edge.append(qe)
                p_pos.append(pp)
                q_pos.append(qp)
                kind.append(child_kind if d + 1 < depth else ("leaf", 0))
                nxt.append(len(parent) - 1)
        frontier = nxt
    count = len(parent)
    parent_a, level_a = np.array(parent, dtype=np.int64), np.array(level, dtype=np.int64)
    p_pos_a, q_pos_a = np.array(p_pos), np.array(q_pos)
    out_edges: list[list[int]] = [[] for _ in range(count)]
    edge_node, edge_child, edge_p = [], [], []
    for z in range(1, count):
        if p_pos_a[z]:
            out_edges[parent[z]].append(len(edge_node))
            edge_node.append(parent[z])
            edge_child.append(z)
            edge_p.append(p_edge[z])
    for z in np.nonzero((level_a == depth) & p_pos_a)[0]:  # the bonus row at depth L: R
        out_edges[int(z)].append(len(edge_node))
        edge_node.append(int(z))
        edge_child.append(-1)
        edge_p.append(one)
    leaves = np.nonzero((level_a == depth) & q_pos_a)[0]
    prefix = np.zeros((len(leaves), depth + 1), dtype=np.int64)
    prefix[:, depth] = leaves
    for d in range(depth - 1, -1, -1):
        prefix[:, d] = parent_a[prefix[:, d + 1]]
    leaf_q = []
    for row in prefix:
        value = one
        for n in row[1:]:
            value *= q_edge[n]
        leaf_q.append(value)
    return RaggedCoarse(depth, parent_a, level_a, p_edge, q_edge, p_pos_a, q_pos_a,
                        np.array(edge_node, dtype=np.int64), np.array(edge_child, dtype=np.int64),
                        edge_p, leaves, leaf_q, prefix, (width + 1) ** depth, out_edges)


def _leaf_law(q: np.ndarray, priority: np.ndarray, paths: int) -> np.ndarray:
    """Law of the selected leaf when the drafted leaf of best priority is selected (K i.i.d.
    draws): r(x) = (q(x) + Q_below(x))^K - Q_below(x)^K (`lp.colgen.priority_law`)."""
    ranked = q[priority]
    below = np.concatenate([np.cumsum(ranked[::-1])[::-1][1:], [0.0]])
    law = np.empty(len(q))
    law[priority] = (ranked + below) ** paths - below**paths
    return law


@dataclass
class RaggedResult:
    """status, value (the last float master value), the float matching duals [E] (None when
    no master was solved), master solves, columns and seconds."""

    status: str
    value: float
    matching_duals: np.ndarray | None
    iterations: int
    size: dict[str, int]
    seconds: float
    notes: list[str] = field(default_factory=list)
    priorities: list[np.ndarray] = field(default_factory=list)  # the master's columns


@dataclass
class _RaggedPricing:
    h: Any
    q: np.ndarray
    paths: int
    tolerance: float
    notes: list[str]
    priorities: list[np.ndarray]
    value: float = float("nan")

    def recover(self, iteration: int, status: str) -> str:
        return _recover_warm_start(self.h, self.notes, iteration, status)

    def price(self, iteration: int, started: float) -> bool:
        self.value = float(self.h.getInfo().objective_function_value)
        theta = np.asarray(self.h.getSolution().row_dual, dtype=np.float64)[: len(self.q)]
        priority = np.argsort(-theta, kind="stable")
        law = _leaf_law(self.q, priority, self.paths)
        if float(law @ theta) <= self.tolerance:
            return True
        nz = np.nonzero(law)[0]
        _add_column(self.h, nz, -law[nz])
        self.priorities.append(priority)
        return False


def ragged_optimum(tree: RaggedCoarse, paths: int, time_limit: float | None = None,
                   tolerance: float = 1e-9, max_iterations: int = 5_000,
                   priorities: list[np.ndarray] | None = None) -> RaggedResult:
    """The coarse K-path optimum on the ragged master (module docstring), in floats, by
    column generation (the loop of `lp.colgen`; first priority: leaves by q, descending,
    then `priorities` (e.g. those of a run at another K: a warm start; any set of priorities
    leaves the optimum unchanged, the pricing adds what is missing)).
    time_limit stops it (status "time_limit"; the duals of the last solve are still returned:
    weak duality holds for any multipliers)."""
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    start = time.perf_counter()
    n_leaves, n_edges = tree.num_leaves, len(tree.edge_node)
    edge_pf = np.array([float(v) for v in tree.edge_p])
    q = np.array([float(v) for v in tree.leaf_q])
    rows, cols, vals, cost = [], [], [], []
    col = 0
    # rho(x, d, y): path row x and matching row P + e
    for x, prefix in enumerate(tree.leaf_prefix):
        for d, n in enumerate(prefix):
            if not tree.p_pos[n]:
                break
            for e in tree.out_edges[n]:
                rows += [x, n_leaves + e]
                cols += [col, col]
                vals += [1.0, 1.0]
                cost.append(float(d + 1))
                col += 1
    n_rho = col
    # A(z): +1 in the row of the edge into z, -p(y|z) in the rows of z's edges
    into = {int(c): e for e, c in enumerate(tree.edge_child) if c >= 0}
    for z in range(1, len(tree.parent)):
        if not tree.p_pos[z]:
            continue
        rows.append(n_leaves + into[z])
        cols.append(col)
        vals.append(1.0)
        for e in tree.out_edges[z]:
            rows.append(n_leaves + e)
            cols.append(col)
            vals.append(-edge_pf[e])
        cost.append(0.0)
        col += 1
    start_with = [np.argsort(-q, kind="stable")] + list(priorities or [])
    for priority in start_with:
        if len(priority) != n_leaves:
            raise ValueError(f"priorities: expected permutations of {n_leaves} leaves")
        law = _leaf_law(q, priority, paths)
        nz = np.nonzero(law)[0]
        rows += list(nz)
        cols += [col] * len(nz)
        vals += list(-law[nz])
        cost.append(0.0)
        col += 1
    n_rows = n_leaves + n_edges
    rhs = np.zeros(n_rows)
    root_edges = np.array(tree.out_edges[0], dtype=np.int64)
    rhs[n_leaves + root_edges] = edge_pf[root_edges]
    import scipy.sparse as sp  # lazy: scipy is a dependency of the LP layer already

    matrix = sp.csc_array((np.array(vals), (np.array(rows), np.array(cols))), shape=(n_rows, col))
    matrix.sort_indices()
    h = new_highs()
    h.setOptionValue("small_matrix_value", HIGHS_SMALL_MATRIX_VALUE)
    h.setOptionValue("presolve", "off")
    h.setOptionValue("solver", "simplex")
    h.setOptionValue("primal_feasibility_tolerance", FEASIBILITY_TOLERANCE)
    h.setOptionValue("dual_feasibility_tolerance", FEASIBILITY_TOLERANCE)
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = int(col), int(n_rows)
    model.sense_ = highspy.ObjSense.kMaximize
    model.col_cost_ = np.array(cost)
    model.col_lower_ = np.zeros(col)
    model.col_upper_ = np.full(col, np.inf)
    model.row_lower_ = rhs
    model.row_upper_ = rhs.copy()
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.num_col_, model.a_matrix_.num_row_ = int(col), int(n_rows)
    model.a_matrix_.start_ = matrix.indptr.astype(np.int32)
    model.a_matrix_.index_ = matrix.indices.astype(np.int32)
    model.a_matrix_.value_ = np.ascontiguousarray(matrix.data, dtype=np.float64)
    if h.passModel(model) == highspy.HighsStatus.kError:
        raise RuntimeError("HiGHS refused the ragged coarse master")
    size = {**tree.size(), "rho_columns": n_rho}
    notes = [f"ragged master: {col} columns x {n_rows} rows ({n_leaves} leaves with q > 0 of "
             f"{tree.padded_paths} padded paths)"]
    pricing = _RaggedPricing(h, q, paths, tolerance, notes, list(start_with))
    status, iterations = _column_loop(pricing, max_iterations, _clock(time_limit, start))
    duals = None
    if iterations and status in ("optimal", "time_limit"):
        solved = np.asarray(h.getSolution().row_dual, dtype=np.float64)
        if len(solved) == n_rows and np.all(np.isfinite(solved)):
            duals = solved[n_leaves:]
    size["priorities"] = len(pricing.priorities)
    return RaggedResult(status, pricing.value, duals, iterations, size,
                        time.perf_counter() - start, notes, pricing.priorities)


def ragged_dual_bound(tree: RaggedCoarse, theta: np.ndarray, paths: int) -> Fraction:
    """Exact upper bound on the coarse K-path optimum from ANY multipliers theta [E] of the
    matching rows (docs/theory.md 7.3 on the ragged master, section 13.7):
        S(root) = 0,  S(z) = S(parent) + theta(edge into z) - sum_(e out of z) p_e theta(e),
        h(n) = |n| + 1 - S(n) - min_(e out of n) theta(e)   (nodes with p(n) > 0),
        g(x) = max of h over the prefixes of leaf x with p > 0,
        bound = sum_(e out of root) p_e theta(e) + E[max_k g(X_k)],  X_k i.i.d. leaves by q.
    Floats are taken at their exact binary values."""
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    theta = np.asarray(theta)
    if theta.shape != (len(tree.edge_node),):
        raise ValueError(f"theta: expected shape {(len(tree.edge_node),)}, got {theta.shape}")
    t = [exact_fraction(v.item() if isinstance(v, np.generic) else v) for v in theta]
    count = len(tree.parent)
    weighted = [sum((tree.edge_p[e] * t[e] for e in tree.out_edges[n]), Fraction(0))
                for n in range(count)]
    into = {int(c): e for e, c in enumerate(tree.edge_child) if c >= 0}
    s = [Fraction(0)] * count
    g: list[Fraction | None] = [None] * count
    for z in range(count):  # parents come before children
        if not tree.p_pos[z]:
            g[z] = g[tree.parent[z]] if z else None
            continue
        if z:
            s[z] = s[tree.parent[z]] + t[into[z]] - weighted[z]
        h = Fraction(int(tree.level[z]) + 1) - s[z] - min(t[e] for e in tree.out_edges[z])
        above = g[tree.parent[z]] if z else None
        g[z] = h if above is None else max(above, h)
    leaf_g = [g[int(x)] for x in tree.leaves]
    order = sorted(range(len(leaf_g)), key=lambda i: leaf_g[i])
    expected, cumulative, previous = Fraction(0), Fraction(0), Fraction(0)
    for i in order:
        if tree.leaf_q[i] == 0:
            continue
        cumulative += tree.leaf_q[i]
        power = cumulative**paths
        expected += leaf_g[i] * (power - previous)
        previous = power
    return weighted[0] + expected


def ragged_upper_bound(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
                       paths: int, below_r: str = "again", time_limit: float | None = None
                       ) -> tuple[Fraction | None, RaggedResult]:
    """(certified bound on the coarse optimum, or None when no master was solved; the float
    run). below_r "again": bounds OPT_K(coarse) >= OPT_K(fine) (Theorem 13.1); "terminal":
    OPT_K(terminal), to which tail_bound(skip=1) is added (Theorem 13.6)."""
    tree = ragged_coarse(target_kept, draft_kept, width, depth, below_r)
    result = ragged_optimum(tree, paths, time_limit)
    if result.matching_duals is None:
        return None, result
    return ragged_dual_bound(tree, result.matching_duals, paths), result
