"""The selection-class LP ("select one of the K drafted paths, then run BV on it").

THEORY.md section 4. Notation: P = V^L paths in lexicographic order (speclp.verifiers.tree
.all_paths), N = (V^(L+1) - 1)/(V - 1) nodes in shortlex order, D = the random set of
drafted paths (K i.i.d. draws, or K distinct draws without replacement).

Reachable skewed laws: the hitting function
--------------------------------------------
A selection rule picks one drafted path; its law r on V^L is the *skewed draft law*.
Let f(S) = P(D intersects S) for a set S of paths (the hitting function of D).
  * i.i.d. drafting:        f(S) = g(q(S)),  g(s) = 1 - (1 - s)^K.
  * without replacement:    f(S) = 1 - P(all K distinct draws avoid S)
                                 = 1 - sum over K-sets D inside S^c of w(D),
    w(D) = sum over the K! orders of prod_k q(x_k) / (1 - sum_{j<k} q(x_j)).
    f is NOT a function of q(S) alone (for K = 2 the miss probability is
    sum_{x in S^c} q(x) (q(S^c) - q(x)) / (1 - q(x))).
Claim (both schemes): the reachable r are exactly
    P_K = { r >= 0 : r(all) = 1, r(S) <= f(S) for every S }.
Proof. Necessity: the selected path lies in D, so r(S) <= P(D meets S) = f(S).
Sufficiency: f is a coverage function (a mixture over outcomes D of the submodular
indicators S -> [D meets S]), monotone, f(empty) = 0, f(all) = 1, so P_K is the base
polytope of the polymatroid f. Its vertices are the greedy vectors
r(y_i) = f({y_1..y_i}) - f({y_1..y_{i-1}}) of the orders y_1 > y_2 > ..., and the greedy
vector of an order is exactly the law of "select the highest-ranked drafted path" (that
path is y_i iff D meets {y_1..y_i} but not {y_1..y_{i-1}}). A point of P_K is a convex
combination of vertices, i.e. the law of a randomised choice of order. (For i.i.d. this
is THEORY's r(y) = F(y)^K - F(y^-)^K.) tests/test_selection_lp.py checks both
directions by enumeration.

Class LP (variables r(x), x in V^L, then beta(z), z of depth 1..L; all >= 0)
----------------------------------------------------------------------------
    maximise 1 + sum_z beta(z)
    sum_x r(x) = 1
    beta(z) - r(z) <= 0                  r(z) = sum of r(x) over the paths x through z
    beta(u t) - p(t|u) beta(u) <= 0      (root children: beta(t) <= p(t))
    r(S) <= f(S)                         for the subsets S in the LP ("cuts")
For a fixed r the best beta is BV's closed form beta(z) = min(r(z), p(t|u) beta(u))
(THEORY section 3 with r in place of q), so this is "best skewed law, then BV".

Node-level form (variables beta(z) only)
----------------------------------------
    maximise 1 + sum beta,  chain rows as above,
    beta(S) <= f(cyl(S))  for every set S of nodes of one depth d,
where cyl(S) is the set of paths through S (i.i.d.: f(cyl(S)) = g(q(S)), q(S) the total
draft probability of the nodes). It is a relaxation of the class LP
(beta(S) <= r(cyl(S)) <= f(cyl(S))) and also of the full LP (the output's depth-d prefix,
when it exists, is a drafted node, so sum_{z in S} A(z) <= P(D meets cyl(S))). Hence
    class optimum <= full optimum <= node-form optimum      (theorems);
whether either inequality is an equality is what speclp.proofs.class_claims checks.

Separation lemma (i.i.d.; exact, O(n log n))
--------------------------------------------
Ground set E (paths, or the nodes of one depth), weights q(e) >= 0, any real values
v(e) (r, or beta), g concave on [0, 1]. F(S) = g(q(S)) - v(S). Then
    min over all S of F(S)  =  min over the prefixes T_k (k = 0..n) of the order
        "q(e) = 0 and v(e) > 0 first, then q(e) > 0 by v(e)/q(e) descending, the rest last".
Proof. Let S* minimise F, s* = q(S*), b >= 0 a supergradient of g at s*
(g(s) = 1 - (1 - s)^K: b = K (1 - s*)^(K-1)), so g(s) <= g(s*) + b (s - s*) on [0, 1].
For every T:  F(T) <= F(S*) + [b q(T) - v(T)] - [b q(S*) - v(S*)].
The modular function T -> b q(T) - v(T) = sum_{e in T} (b q(e) - v(e)) is minimised by
T_b = {e : v(e) > b q(e)}, so F(T_b) <= F(S*): T_b is a minimiser too. T_b contains
every e with q(e) = 0 < v(e) (ratio +inf) and, among q(e) > 0, exactly those with
v(e)/q(e) > b, i.e. whole tie classes from the top: it is a prefix of the order (any
order consistent with the ratio, ties in any order, includes all such prefixes),
and it excludes the elements with q(e) = 0 = v(e) or v(e) <= 0 = q(e). QED.
So the most violated constraint r(S) <= f(S) is found by one sort and a scan of
cumulative sums, in exact rationals for the final check. The paths with q(x) = 0 get
r(x) <= f({x}) = 0 (their singleton rows are always in the LP).
Without replacement f is not a function of q(S); separation there is by enumeration of
all 2^n subsets (a subset-sum transform of the outcome weights), so it is limited to
n <= MAX_ENUMERATED_GROUND elements.

Cutting planes
--------------
With method "enumerate" (default for ground sets of at most AUTO_ENUMERATED_GROUND = 10
elements; possible up to MAX_ENUMERATED_GROUND = 16) every subset constraint is in the
LP; with method "cuts" (the default above 10) the LP starts from the singleton rows and
adds, each round, the most violated prefix sets found in float64 (each one confirmed
violated in exact arithmetic by the exact binary values of the float solution). When
float separation finds nothing, the LP is certified (speclp.lp.report.optimum_record;
if that fails, the basis is repaired by speclp.lp.certify.solve_exact), its basic
solution is taken in exact rationals (``exact_vertex`` or the certificate's primal), and
the exact separation is run on it: if it shows no violated subset, the exact point is
feasible for the whole class LP and its objective equals the certified optimum of the
relaxation, so it is the class optimum; otherwise the exact cut is added and the loop goes on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.tree import TreeModel, depth_offset, node_parents, node_prefix, num_nodes
from .builders import as_model, exact_fraction, multiset_configurations
from .certify import fmpq_to_fraction, solve_exact
from .instance import Instance
from .program import Block, LinearProgram, ValueTable
from .report import optimum_record
from .solve import LPSolution, solve

DRAFT_SAMPLING = ("iid", "without-replacement")
MAX_ENUMERATED_GROUND = 16  # 2^16 - 2 subset rows at most
AUTO_ENUMERATED_GROUND = 10  # method "auto" enumerates up to here: at 16 paths enumeration
# took 6-8 s per LP against 0.01-0.4 s for cutting planes, with the same certified optimum
FLOAT_VIOLATION = 1e-12  # a float cut is added when f(S) - v(S) < -FLOAT_VIOLATION
METHODS = ("auto", "enumerate", "cuts")


# ---------------------------------------------------------------------------
# hitting functions f(S) = P(D meets S)
# ---------------------------------------------------------------------------

def g_exact(s: Fraction, paths: int) -> Fraction:
    """g(s) = 1 - (1 - s)^K in exact rationals."""
    return 1 - (1 - s) ** paths


def g_float(s: np.ndarray | float, paths: int) -> np.ndarray:
    """g(s) = 1 - (1 - s)^K in float64 without cancellation for small s: -expm1(K log1p(-s))."""
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        return -np.expm1(paths * np.log1p(-s))


@dataclass
class HittingFunction:
    """f(S) = P(the random drafted set D meets S) on a ground set of n elements.

    kind "iid": D = K i.i.d. draws from q; f(S) = g(q(S)). q_exact [n] Fractions,
    q_float [n] float64.
    kind "outcomes": D takes finitely many values; masks [C] Python ints (bit e = element
    e in D), weights_exact [C] Fractions, weights_float [C] float64.
    """

    kind: str
    size: int
    paths: int
    q_exact: np.ndarray
    q_float: np.ndarray
    masks: list[int] | None = None
    weights_exact: np.ndarray | None = None
    weights_float: np.ndarray | None = None
    _table_cache: dict[bool, np.ndarray] = field(default_factory=dict, repr=False)

    # ---- single sets ------------------------------------------------------
    def exact(self, members: Sequence[int]) -> Fraction:
        """f(S) exactly for S = members (element indices)."""
        if self.kind == "iid":
            return g_exact(sum((self.q_exact[e] for e in members), Fraction(0)), self.paths)
        return self.table(exact=True)[_mask(members)]  # outcomes: n <= MAX_ENUMERATED_GROUND

    # ---- all subsets --------------------------------------------------------
    def table(self, exact: bool) -> np.ndarray:
        """[2^n] f(S) for every S, indexed by the bit mask of S (bit e = element e)."""
        if self.size > MAX_ENUMERATED_GROUND:
            raise ValueError(f"cannot enumerate the 2^{self.size} subsets of {self.size} elements "
                             f"(limit {MAX_ENUMERATED_GROUND})")
        cache = self._table_cache
        if exact in cache:
            return cache[exact]
        if self.kind == "iid":
            q = self.q_exact if exact else self.q_float
            sums = np.array([Fraction(0)], dtype=object) if exact else np.zeros(1)
            for e in range(self.size):  # new half = masks with bit e set
                sums = np.concatenate([sums, sums + q[e]])
            if exact:
                out = np.array([g_exact(s, self.paths) for s in sums], dtype=object)
            else:
                out = g_float(sums, self.paths)
        else:
            weights = self.weights_exact if exact else self.weights_float
            miss = np.zeros(2**self.size, dtype=object if exact else np.float64)
            if exact:
                miss[:] = Fraction(0)
            for m, w in zip(self.masks, weights, strict=True):
                miss[m] = miss[m] + w
            for e in range(self.size):  # subset-sum (zeta) transform: miss[T] = sum_{D in T} w
                view = miss.reshape(-1, 2, 2**e)
                view[:, 1, :] = view[:, 1, :] + view[:, 0, :]
            total = miss[-1]
            full = 2**self.size - 1
            out = total - miss[full ^ np.arange(2**self.size)]
        cache[exact] = out
        return out

    # ---- separation ------------------------------------------------------------
    def slacks(self, values: np.ndarray, exact: bool) -> tuple[list[Any], list[Any]]:
        """Candidate sets and their slacks F(S) = f(S) - values(S) (values [n]: Fractions when
        exact, else float64); the minimum over the candidates is the minimum over all S.

        i.i.d.: the n prefixes of the separation-lemma order (a tuple of elements each);
        outcomes: all 2^n subsets (bit masks; n <= MAX_ENUMERATED_GROUND).
        """
        if self.kind == "iid":
            order = separation_order(values, self.q_exact if exact else self.q_float)
            sets = [tuple(sorted(int(e) for e in order[: k + 1])) for k in range(len(order))]
            if exact:
                scores: list[Any] = []
                cum_q, cum_v = Fraction(0), Fraction(0)
                for e in order:
                    cum_q += self.q_exact[e]
                    cum_v += values[e]
                    scores.append(g_exact(cum_q, self.paths) - cum_v)
                return sets, scores
            cum_q = np.cumsum(self.q_float[order])
            cum_v = np.cumsum(np.asarray(values, dtype=np.float64)[order])
            return sets, list(g_float(cum_q, self.paths) - cum_v)
        vals = values if exact else np.asarray(values, dtype=np.float64)
        sums = np.array([Fraction(0)], dtype=object) if exact else np.zeros(1)
        for e in range(self.size):
            sums = np.concatenate([sums, sums + vals[e]])
        return list(range(2**self.size)), list(self.table(exact) - sums)

    def most_violated(self, values: np.ndarray, exact: bool,
                      limit: int = 1) -> list[tuple[Any, tuple[int, ...]]]:
        """Up to `limit` pairs (F(S), S), most negative first, with F(S) < 0 (exact) or
        F(S) < -FLOAT_VIOLATION (float); S as a sorted tuple of elements."""
        sets, scores = self.slacks(values, exact)
        threshold = 0 if exact else -FLOAT_VIOLATION
        found: list[tuple[Any, tuple[int, ...]]] = []
        for i in sorted(range(len(scores)), key=lambda i: scores[i]):
            if not scores[i] < threshold or len(found) >= limit:
                break
            members = sets[i] if isinstance(sets[i], tuple) else _members(sets[i])
            found.append((scores[i], members))
        return found

    def minimum(self, values: np.ndarray, exact: bool) -> tuple[Any, tuple[int, ...]]:
        """(min over all S of f(S) - values(S), a minimiser); the empty set gives 0."""
        sets, scores = self.slacks(values, exact)
        i = min(range(len(scores)), key=lambda i: scores[i])
        if scores[i] < 0:
            return scores[i], (sets[i] if isinstance(sets[i], tuple) else _members(sets[i]))
        return (Fraction(0) if exact else 0.0), ()


def separation_order(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    """[n] the separation-lemma order: q = 0 < v first, then q > 0 by v/q descending
    (ties by index), then the rest. Exact when values and q are Fractions."""
    n = len(q)
    head = [e for e in range(n) if q[e] == 0 and values[e] > 0]
    middle = sorted((e for e in range(n) if q[e] > 0), key=lambda e: (-(values[e] / q[e]), e))
    tail = [e for e in range(n) if q[e] == 0 and not values[e] > 0]
    return np.array(head + middle + tail, dtype=np.int64)


def _mask(members: Sequence[int]) -> int:
    mask = 0
    for e in members:
        mask |= 1 << int(e)
    return mask


def _members(mask: int) -> tuple[int, ...]:
    return tuple(e for e in range(mask.bit_length()) if mask >> e & 1)


def _to_exact(values: np.ndarray) -> np.ndarray:
    return np.array([exact_fraction(v) for v in values], dtype=object)


def hitting_function(model: TreeModel, paths: int, draft_sampling: str = "iid",
                     depth: int | None = None) -> HittingFunction:
    """f on the nodes of one depth d (default L: the paths) for K drafted paths.

    Element e = node code at depth d (lexicographic); f(S) = P(some drafted path passes
    through a node of S). model must be exact (Fraction rows; float instances: the exact
    binary values).
    """
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    vocab, full_depth = model.vocab_size, model.depth
    d = full_depth if depth is None else depth
    q_exact = _to_exact(model.draft_path_probabilities(d))
    q_float = np.array([float(x) for x in q_exact])
    size = len(q_exact)
    if draft_sampling == "iid":
        return HittingFunction("iid", size, paths, q_exact, q_float)
    if size > MAX_ENUMERATED_GROUND:
        raise ValueError(
            f"draft_sampling without-replacement: the hitting function on {size} nodes is "
            f"separated by enumerating 2^{size} subsets (limit {MAX_ENUMERATED_GROUND}); "
            "use a smaller vocabulary or depth, or iid drafting")
    configs = multiset_configurations(model, paths, draft_sampling)
    shift = vocab ** (full_depth - d)
    masks = [_mask({int(x) // shift for x in row}) for row in configs.paths]
    weights = _to_exact(configs.weight)
    return HittingFunction("outcomes", size, paths, q_exact, q_float, masks, weights,
                           np.array([float(w) for w in weights]))


# ---------------------------------------------------------------------------
# LP builders
# ---------------------------------------------------------------------------

def _chain_rows(model: TreeModel, table: ValueTable, beta_col0: int, row0: int
                ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], np.ndarray]:
    """beta(u t) - p(t|u) beta(u) <= 0 (root children: beta(t) <= p(t)), one row per node
    z = 1..N-1 starting at row0; beta(z) is column beta_col0 + z - 1.
    Returns (rows, cols, refs) pieces and rhs refs [N-1]."""
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    parents, last = node_parents(vocab, depth)
    z = np.arange(1, n_nodes, dtype=np.int64)
    neg_target_refs = table.add(-model.target.reshape(-1))
    root_refs = table.add(model.target[0])
    inner = parents[z] > 0
    p_edge = model.target[parents[z], last[z]]
    coupled = inner & np.array([x != 0 for x in p_edge], dtype=bool)
    rows = [row0 + z - 1, row0 + z[coupled] - 1]
    cols = [beta_col0 + z - 1, beta_col0 + parents[z][coupled] - 1]
    refs = [np.full(len(z), table.one, dtype=np.int64),
            neg_target_refs[parents[z][coupled] * vocab + last[z][coupled]]]
    rhs = np.where(inner, table.zero, root_refs[last[z]]).astype(np.int64)
    return rows, cols, refs, rhs


def _finish(name: str, n_vars: int, objective_refs: np.ndarray, table: ValueTable,
            eq: Block, rows: list[np.ndarray], cols: list[np.ndarray], refs: list[np.ndarray],
            rhs: list[np.ndarray], **kwargs: Any) -> LinearProgram:
    r = np.concatenate(rows).astype(np.int64)
    c = np.concatenate(cols).astype(np.int64)
    f = np.concatenate(refs).astype(np.int64)
    order = np.lexsort((c, r))
    ub = Block(r[order], c[order], f[order], np.concatenate(rhs).astype(np.int64))
    values, exact_values = table.tables()
    return LinearProgram(name=name, num_vars=n_vars, objective_refs=objective_refs,
                         constant_ref=table.one, eq=eq, ub=ub, table=values,
                         exact_table=exact_values, **kwargs)


def class_lp(model: TreeModel, hitting: HittingFunction, cuts: Sequence[tuple[int, ...]]
             ) -> LinearProgram:
    """The class LP with the subset rows r(S) <= f(S) for S in cuts (see module docstring).

    Columns: r(x) for x = 0..P-1 (lexicographic paths), then beta(z) at column P + z - 1
    for z = 1..N-1 (shortlex). Rows: eq = [sum r = 1]; ub = N-1 budget rows
    beta(z) - r(z) <= 0, N-1 chain rows, then one row per cut.
    """
    vocab, depth = model.vocab_size, model.depth
    n_paths = vocab**depth
    n_nodes = num_nodes(vocab, depth)
    n_vars = n_paths + n_nodes - 1
    table = ValueTable(True)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    refs: list[np.ndarray] = []
    rhs: list[np.ndarray] = []
    # budget rows: beta(z) - sum_{x through z} r(x) <= 0
    for d in range(1, depth + 1):
        width = vocab ** (depth - d)
        codes = np.arange(vocab**d, dtype=np.int64)
        row = depth_offset(vocab, d) + codes - 1  # row index = z - 1
        rows += [row, np.repeat(row, width)]
        cols += [n_paths + row, (codes[:, None] * width + np.arange(width)).reshape(-1)]
        refs += [np.full(len(codes), table.one), np.full(len(codes) * width, table.minus_one)]
    rhs.append(np.full(n_nodes - 1, table.zero, dtype=np.int64))
    c_rows, c_cols, c_refs, c_rhs = _chain_rows(model, table, n_paths, n_nodes - 1)
    rows += c_rows
    cols += c_cols
    refs += c_refs
    rhs.append(c_rhs)
    cut_row0 = 2 * (n_nodes - 1)
    cut_values = table.add(np.array([hitting.exact(s) for s in cuts], dtype=object)) if cuts else \
        np.zeros(0, dtype=np.int64)
    for i, s in enumerate(cuts):
        rows.append(np.full(len(s), cut_row0 + i, dtype=np.int64))
        cols.append(np.asarray(s, dtype=np.int64))
        refs.append(np.full(len(s), table.one, dtype=np.int64))
    rhs.append(np.asarray(cut_values, dtype=np.int64))
    eq = Block(np.zeros(n_paths, dtype=np.int64), np.arange(n_paths, dtype=np.int64),
               np.full(n_paths, table.one, dtype=np.int64), np.array([table.one], dtype=np.int64))
    objective = np.concatenate([np.full(n_paths, table.zero), np.full(n_nodes - 1, table.one)])
    paths_label = lambda x: str(tuple(int(t) for t in np.base_repr(int(x), vocab).zfill(depth)))  # noqa: E731
    cut_list = [tuple(s) for s in cuts]

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_paths:
            return f"r[{paths_label(j)}]"
        return f"beta[{node_prefix(j - n_paths + 1, vocab)}]"

    def ub_label(i: int) -> str:
        i = int(i)
        if i < n_nodes - 1:
            return f"budget[{node_prefix(i + 1, vocab)}]"
        if i < cut_row0:
            return f"chain[{node_prefix(i - n_nodes + 2, vocab)}]"
        return "subset[" + ", ".join(paths_label(x) for x in cut_list[i - cut_row0]) + "]"

    return _finish(
        f"class-V{vocab}-L{depth}-K{hitting.paths}", n_vars, objective.astype(np.int64), table, eq,
        rows, cols, refs, rhs, variable_label=variable_label, eq_label=lambda i: "simplex",
        ub_label=ub_label,
        meta={"kind": "class", "vocab_size": vocab, "depth": depth, "paths": hitting.paths,
              "num_paths": n_paths, "cuts": len(cut_list)})


def node_form_lp(model: TreeModel, hittings: Sequence[HittingFunction],
                 cuts: Sequence[tuple[int, tuple[int, ...]]]) -> LinearProgram:
    """The node-level form with rows beta(S) <= f_d(S) for (d, S) in cuts.

    hittings[d - 1] is the hitting function on the nodes of depth d. Columns: beta(z) at
    column z - 1 (shortlex, z = 1..N-1). Rows: N-1 chain rows, then one row per cut
    (S = node codes at depth d).
    """
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    table = ValueTable(True)
    rows, cols, refs, c_rhs = _chain_rows(model, table, 0, 0)
    rhs = [c_rhs]
    cut_row0 = n_nodes - 1
    if cuts:
        rhs.append(table.add(np.array([hittings[d - 1].exact(s) for d, s in cuts], dtype=object)))
    for i, (d, s) in enumerate(cuts):
        rows.append(np.full(len(s), cut_row0 + i, dtype=np.int64))
        cols.append(depth_offset(vocab, d) + np.asarray(s, dtype=np.int64) - 1)
        refs.append(np.full(len(s), table.one, dtype=np.int64))
    cut_list = list(cuts)

    def ub_label(i: int) -> str:
        i = int(i)
        if i < cut_row0:
            return f"chain[{node_prefix(i + 1, vocab)}]"
        d, s = cut_list[i - cut_row0]
        return "subset[" + ", ".join(str(node_prefix(depth_offset(vocab, d) + e, vocab))
                                     for e in s) + "]"

    return _finish(
        f"node-form-V{vocab}-L{depth}-K{hittings[0].paths}", n_nodes - 1,
        np.full(n_nodes - 1, table.one, dtype=np.int64), table, Block.empty(), rows, cols, refs,
        rhs, variable_label=lambda j: f"beta[{node_prefix(int(j) + 1, vocab)}]", ub_label=ub_label,
        meta={"kind": "node-form", "vocab_size": vocab, "depth": depth,
              "paths": hittings[0].paths, "cuts": len(cut_list)})


# ---------------------------------------------------------------------------
# exact basic solution
# ---------------------------------------------------------------------------

def exact_vertex(lp: LinearProgram, solution: LPSolution) -> np.ndarray | None:
    """[n] the basic solution of `solution`'s basis in exact rationals (Fractions), or None.

    Nonbasic columns are 0, nonbasic rows are tight (eq rows and the <= rows, in the
    solver's row order eq then ub); the basic columns solve that square system in
    python-flint fmpq_mat. Returns None when there is no basis or the system is not
    square / singular. Feasibility is NOT checked here (see check_feasible_exact).
    """
    if solution.basis is None:
        return None
    import flint

    col_status, row_status = solution.basis
    basic_cols = np.nonzero(col_status == 1)[0]
    tight_rows = np.nonzero(row_status != 1)[0]
    if len(basic_cols) != len(tight_rows):
        return None
    ex = lp.exact()
    n_eq = lp.num_eq
    x = np.array([Fraction(0)] * lp.num_vars, dtype=object)
    if len(basic_cols) == 0:
        return x
    position = {int(c): i for i, c in enumerate(basic_cols)}
    row_position = {int(r): i for i, r in enumerate(tight_rows)}
    size = len(basic_cols)
    matrix = flint.fmpq_mat(size, size)
    rhs = flint.fmpq_mat(size, 1)
    for offset, (rr, cc, vv), b in ((0, ex.eq, ex.b_eq), (n_eq, ex.ub, ex.b_ub)):
        for r, c, v in zip(rr, cc, vv, strict=True):
            i = row_position.get(int(r) + offset)
            j = position.get(int(c))
            if i is not None and j is not None:
                matrix[i, j] = matrix[i, j] + flint.fmpq(v.numerator, v.denominator)
        for r in range(len(b)):
            i = row_position.get(r + offset)
            if i is not None:
                rhs[i, 0] = flint.fmpq(b[r].numerator, b[r].denominator)
    try:
        solved = matrix.solve(rhs)
    except (ZeroDivisionError, ValueError):
        return None
    for c, i in position.items():
        value = solved[i, 0]
        x[c] = Fraction(int(value.p), int(value.q))
    return x


def check_feasible_exact(lp: LinearProgram, x: np.ndarray) -> str | None:
    """None when x (Fractions) satisfies every row and x >= 0 exactly, else a reason."""
    if any(v < 0 for v in x):
        return "negative variable in the exact basic solution"
    ex = lp.exact()
    for name, (rr, cc, vv), b in (("eq", ex.eq, ex.b_eq), ("ub", ex.ub, ex.b_ub)):
        activity = [Fraction(0)] * len(b)
        for r, c, v in zip(rr, cc, vv, strict=True):
            activity[int(r)] += v * x[int(c)]
        for i, (a, bound) in enumerate(zip(activity, b, strict=True)):
            if (name == "eq" and a != bound) or (name == "ub" and a > bound):
                label = lp.eq_label(i) if name == "eq" else lp.ub_label(i)
                return (f"exact basic solution violates {label}: "
                        f"{float(a):.17g} vs {float(bound):.17g}")
    return None


def exact_objective(lp: LinearProgram, x: np.ndarray) -> Fraction:
    ex = lp.exact()
    pairs = zip(ex.objective, x, strict=True)
    return Fraction(ex.constant) + sum((Fraction(c) * v for c, v in pairs if c != 0), Fraction(0))


def bv_value_of_law(model: TreeModel, r: np.ndarray) -> Fraction:
    """1 + sum beta for BV's closed form with the skewed law r [P] (exact) in place of q:
    beta(z) = min(r(z), p(t|u) beta(u)) (root: min(r(t), p(t)))."""
    vocab, depth = model.vocab_size, model.depth
    total = Fraction(1)
    beta_prev = np.array([Fraction(1)], dtype=object)
    for d in range(1, depth + 1):
        width = vocab ** (depth - d)
        mass = np.array([sum(r[c * width:(c + 1) * width], Fraction(0)) for c in range(vocab**d)],
                        dtype=object)
        start = depth_offset(vocab, d - 1)
        rows = _to_exact(model.target[start:start + vocab ** (d - 1)].reshape(-1))
        rows = rows.reshape(-1, vocab)
        bound = (beta_prev[:, None] * rows).reshape(-1)
        beta_prev = np.array([min(a, b) for a, b in zip(mass, bound, strict=True)], dtype=object)
        total += sum(beta_prev, Fraction(0))
    return total


# ---------------------------------------------------------------------------
# drivers
# ---------------------------------------------------------------------------

def _model_of(instance: Instance | TreeModel) -> tuple[TreeModel, bool, str]:
    if isinstance(instance, Instance):
        return instance.model(exact=True), instance.rational, instance.name
    model = as_model(instance, exact=True)
    return model, model.exact, "model"


def _choose(method: str, ground: int) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "enumerate" if ground <= AUTO_ENUMERATED_GROUND else "cuts"
    if method == "enumerate" and ground > MAX_ENUMERATED_GROUND:
        raise ValueError(f"method enumerate: 2^{ground} subsets is too many "
                         f"(limit {MAX_ENUMERATED_GROUND} elements); use method cuts")
    return method


def _all_subsets(n: int, proper: bool) -> list[tuple[int, ...]]:
    top = 2**n - 1 if proper else 2**n
    return [_members(m) for m in range(1, top)]


def _float_cut_confirmed(hitting: HittingFunction, values: np.ndarray,
                         members: tuple[int, ...]) -> bool:
    """The cut is violated in exact arithmetic by the exact binary values of the float x."""
    return sum((Fraction(float(values[e])) for e in members), Fraction(0)) > hitting.exact(members)


def _solve_with_cuts(build: Any, separate: Any, exact_separate: Any, cuts: list[Any],
                     enumerate_all: bool, backend: str, rational: bool, max_rounds: int
                     ) -> dict[str, Any]:
    """The cutting-plane loop shared by the class LP and the node form.

    build(cuts) -> LinearProgram; separate(x) -> new cuts from the float solution (each
    confirmed violated exactly); exact_separate(x_exact) -> (minimum Fraction, cut or None).
    """
    start = time.perf_counter()
    rounds = 0
    notes: list[str] = []
    while True:
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(f"cutting planes did not converge in {max_rounds} rounds")
        lp = build(cuts)
        solution = solve(lp, backend="highs")
        if solution.status != "optimal":
            raise RuntimeError(f"{lp.name}: HiGHS status {solution.status} ({solution.notes})")
        if not enumerate_all:
            new = [c for c in separate(solution.x) if c not in set(cuts)]
            if new:
                cuts = cuts + new
                continue
        record = optimum_record(lp, backend, rational=rational)
        vertex = exact_vertex(lp, solution)
        reason = None if vertex is not None else "no exact basic solution (singular basis)"
        if vertex is not None:
            reason = check_feasible_exact(lp, vertex)
        if not record["certified"] or reason is not None:
            # the float basis is slightly off in exact arithmetic (tiny probabilities):
            # repair it by iterative refinement (speclp.lp.certify.solve_exact)
            refined, cert = solve_exact(lp)
            notes.append(f"round {rounds}: optimum_record: {record['certificate']}; exact basic "
                         f"solution: {reason or 'feasible'}; basis refinement: {cert.reason}")
            if cert.certified and cert.primal is not None:
                record = dict(record, certified=True, certificate=cert.reason + " (refined basis)",
                              exact_value=Fraction(cert.value),
                              exact=str(Fraction(cert.value)) if rational else None)
                vertex = np.array([fmpq_to_fraction(v) for v in cert.primal], dtype=object)
                reason = check_feasible_exact(lp, vertex)
        minimum = None
        if vertex is not None and reason is None:
            minimum, cut = exact_separate(vertex)
            if cut is not None:
                if enumerate_all:
                    raise AssertionError(f"enumerated LP solution violates subset {cut} exactly")
                notes.append(f"round {rounds}: exact separation found a cut float64 missed "
                             f"(violation {float(minimum):.3g})")
                cuts = cuts + [cut]
                continue
        break
    vertex_value = exact_objective(lp, vertex) if vertex is not None and reason is None else None
    certified = bool(record["certified"] and vertex_value is not None
                     and vertex_value == record["exact_value"])
    if record["certified"] and vertex_value is not None and vertex_value != record["exact_value"]:
        reason = (f"exact vertex objective {float(vertex_value):.17g} != certified optimum "
                  f"{float(record['exact_value']):.17g}")
    return {
        "lp": lp, "record": record, "vertex": vertex, "certified": certified,
        "reason": reason or record["certificate"], "rounds": rounds, "cuts": cuts,
        "min_slack": minimum, "seconds": time.perf_counter() - start, "notes": notes,
    }


def class_lp_optimum(instance: Instance | TreeModel, paths: int, draft_sampling: str = "iid",
                     backend: str = "highs", method: str = "auto", max_rounds: int = 500,
                     cuts_per_round: int = 8) -> dict[str, Any]:
    """Optimum of the selection class (best skewed law r in P_K, then BV with r).

    Returns value (float), exact (fraction string when certified and rational), exact_value
    (Fraction or None), certified (certificate of the final LP AND the exact basic solution
    feasible for every subset constraint with the same objective), certificate (reason),
    method ("enumerate" | "cuts"), cuts (subset rows in the final LP), rounds, seconds,
    r [P] (float list, lexicographic paths), r_exact [P] (fraction strings) and
    min_subset_slack (exact min_S f(S) - r(S) of the final r, >= 0 when certified).
    """
    model, rational, name = _model_of(instance)
    hitting = hitting_function(model, paths, draft_sampling)
    n_paths = hitting.size
    chosen = _choose(method, n_paths)
    enumerate_all = chosen == "enumerate"
    cuts = _all_subsets(n_paths, proper=True) if enumerate_all else [(x,) for x in range(n_paths)]

    def separate(x: np.ndarray) -> list[tuple[int, ...]]:
        r = x[:n_paths]
        found = hitting.most_violated(r, exact=False, limit=cuts_per_round)
        return [s for _, s in found if _float_cut_confirmed(hitting, r, s)]

    def exact_separate(x: np.ndarray) -> tuple[Fraction, tuple[int, ...] | None]:
        value, cut = hitting.minimum(x[:n_paths], exact=True)
        return value, (cut if value < 0 else None)

    out = _solve_with_cuts(lambda c: class_lp(model, hitting, c), separate, exact_separate, cuts,
                           enumerate_all, backend, rational, max_rounds)
    record, vertex = out["record"], out["vertex"]
    r_exact = vertex[:n_paths] if vertex is not None else None
    notes = list(out["notes"])
    if r_exact is not None and out["certified"]:
        closed = bv_value_of_law(model, r_exact)
        if closed != record["exact_value"]:
            out["certified"] = False
            out["reason"] = (f"BV closed form with the optimal r gives {float(closed):.17g}, not "
                             f"the LP optimum {float(record['exact_value']):.17g}")
    return {
        **_optimum_summary(out, name, model.vocab_size, model.depth, paths, draft_sampling, chosen,
                           rational),
        "r": [float(v) for v in r_exact] if r_exact is not None else None,
        "r_exact": [str(v) for v in r_exact] if r_exact is not None else None,
        "notes": notes + list(record["notes"]),
    }


def _optimum_summary(out: dict[str, Any], name: str, vocab: int, depth: int, paths: int,
                     draft_sampling: str, method: str, rational: bool) -> dict[str, Any]:
    """The keys shared by class_lp_optimum and node_form_optimum (from _solve_with_cuts)."""
    record = out["record"]
    return {
        "instance": name, "vocab_size": vocab, "depth": depth, "paths": paths,
        "draft_sampling": draft_sampling, "method": method,
        "value": record["value"],
        "exact": str(record["exact_value"]) if out["certified"] and rational else None,
        "exact_value": record["exact_value"] if out["certified"] else None,
        "certified": out["certified"], "certificate": out["reason"],
        "cuts": len(out["cuts"]), "rounds": out["rounds"], "seconds": round(out["seconds"], 6),
        "min_subset_slack": out["min_slack"], "size": out["lp"].describe(),
    }


def node_form_optimum(instance: Instance | TreeModel, paths: int, draft_sampling: str = "iid",
                      backend: str = "highs", method: str = "auto", max_rounds: int = 500,
                      cuts_per_round: int = 8) -> dict[str, Any]:
    """Optimum of the node-level form (per-depth set constraints on beta; module docstring).

    Returns value, exact, exact_value, certified, certificate, method, cuts, rounds, seconds,
    beta [N-1] (float list, shortlex nodes of depth 1..L), min_subset_slack (exact minimum
    over depths and node sets of f_d(S) - beta(S)).
    """
    model, rational, name = _model_of(instance)
    vocab, depth = model.vocab_size, model.depth
    hittings = [hitting_function(model, paths, draft_sampling, depth=d)
                for d in range(1, depth + 1)]
    chosen = _choose(method, vocab**depth)
    enumerate_all = chosen == "enumerate"
    if enumerate_all:
        cuts = [(d, s) for d in range(1, depth + 1) for s in _all_subsets(vocab**d, proper=False)]
    else:
        cuts = [(d, (e,)) for d in range(1, depth + 1) for e in range(vocab**d)]

    def level(x: np.ndarray, d: int) -> np.ndarray:
        start = depth_offset(vocab, d) - 1
        return x[start:start + vocab**d]

    def separate(x: np.ndarray) -> list[tuple[int, tuple[int, ...]]]:
        out = []
        for d in range(1, depth + 1):
            values = level(x, d)
            found = hittings[d - 1].most_violated(values, exact=False, limit=cuts_per_round)
            out += [(d, s) for _, s in found if _float_cut_confirmed(hittings[d - 1], values, s)]
        return out

    def exact_separate(x: np.ndarray) -> tuple[Fraction, tuple[int, tuple[int, ...]] | None]:
        worst: tuple[Fraction, tuple[int, tuple[int, ...]] | None] = (Fraction(0), None)
        for d in range(1, depth + 1):
            value, cut = hittings[d - 1].minimum(level(x, d), exact=True)
            if value < worst[0]:
                worst = (value, (d, cut))
        return worst

    out = _solve_with_cuts(lambda c: node_form_lp(model, hittings, c), separate, exact_separate,
                           cuts, enumerate_all, backend, rational, max_rounds)
    record, vertex = out["record"], out["vertex"]
    return {
        **_optimum_summary(out, name, vocab, depth, paths, draft_sampling, chosen, rational),
        "beta": [float(v) for v in vertex] if vertex is not None else None,
        "notes": list(out["notes"]) + list(record["notes"]),
    }


def greedy_vertex(hitting: HittingFunction, order: Sequence[int]) -> np.ndarray:
    """[n] exact vertex r(y_i) = f({y_1..y_i}) - f({y_1..y_{i-1}}) of P_K for an order
    (best first): the law of "select the highest-ranked drafted element"."""
    r = np.array([Fraction(0)] * hitting.size, dtype=object)
    previous = Fraction(0)
    for i in range(len(order)):
        current = hitting.exact(order[: i + 1])
        r[order[i]] = current - previous
        previous = current
    return r


def gbv_order(model: TreeModel) -> list[int]:
    """Paths (lexicographic indices) best first in GBV's lexicographic order: at every node
    the children rank by key_u(x) = (p(x|u)/q(x|u), x), higher first (q = 0: ratio +inf)."""
    vocab, depth = model.vocab_size, model.depth
    exact_target = _to_exact(model.target.reshape(-1)).reshape(model.target.shape)
    exact_draft = _to_exact(model.draft.reshape(-1)).reshape(model.draft.shape)

    def key(path: int) -> tuple:
        tokens = [path // vocab ** (depth - 1 - i) % vocab for i in range(depth)]
        node, out = 0, []
        for t in tokens:
            p, q = exact_target[node, t], exact_draft[node, t]
            out.append((0, -t) if q == 0 else (1, -(p / q), -t))
            node = node * vocab + t + 1  # shortlex child index
        return tuple(out)

    return sorted(range(vocab**depth), key=key)


def gbv_skewed_law(model: TreeModel, paths: int) -> np.ndarray:
    """[P] exact law r_GBV of the path GBV selects (i.i.d. drafting): the vertex of P_K of
    GBV's order (greedy_vertex). BV run with r_GBV in place of q is GBV, so
    bv_value_of_law(model, r_GBV) is GBV's block efficiency."""
    model = as_model(model, exact=True)
    return greedy_vertex(hitting_function(model, paths, "iid"), gbv_order(model))


__all__ = [
    "HittingFunction", "bv_value_of_law", "class_lp", "class_lp_optimum", "exact_vertex",
    "gbv_order", "gbv_skewed_law", "greedy_vertex",
    "hitting_function", "node_form_lp", "node_form_optimum", "separation_order",
]
