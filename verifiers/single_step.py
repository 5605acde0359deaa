"""The single-step (L = 1) optimum of K i.i.d. drafts, and a selection rule that attains it.

Setting (one node, batched over rows). n draws X_1..X_n i.i.d. from a draft row q [R, V];
a target row a [R, V] (the target p, or any non-negative row of mass <= 1). A selection rule
returns one of the draws; the law r of the returned token lies in
    P_n = { r : r(S) <= g(q(S)) for every token set S },   g(s) = 1 - (1 - s)^n,
and "select, then accept/correct against r" accepts with probability sum_x min(a(x), r(x)).

The optimum (Hu et al. 2025; docs/theory.md sections 8.2, 8.3; single_step_optimum)
    alpha* = max_{r in P_n} sum_x min(a(x), r(x)) = min_H [a(H) + 1 - q(H)^n]
with H ranging over the prefixes of the tokens sorted by ratio a/q ASCENDING (<= is the
weak duality a(H) + r(H^c) <= a(H) + g(q(H^c)); the rule below attains it). The threshold
structure is computed ONCE, here (separation_order, threshold_scores, threshold_optimum);
speclp.lp.hitting (separation of the LP) and speclp.lp.closed_form (the L = 1 optimum)
call these functions on numpy rows. Importing this module does not import torch.

The rule: nested partitions of the ratio order (NestedPartitions)
-----------------------------------------------------------------
Sort the tokens by ratio a/q DESCENDING (tokens with q = 0 first: they are never drafted).
Boundary b = 0..V sits after the first b tokens, at the point
    x_b = q(first b tokens),  A_b = a(first b tokens),  G_b = g(x_b).
A is concave in x (ratios decrease) and g is strictly concave (n >= 2). For U in [0, 1] let
E_U = A - U G. Define for every inner boundary (clamped to [0, 1])
    theta_b = min over boundaries i < b < k with x_i < x_b < x_k of
              [A_b (x_k - x_i) - A_i (x_k - x_b) - A_k (x_b - x_i)]
            / [G_b (x_k - x_i) - G_i (x_k - x_b) - G_k (x_b - x_i)],
(theta_0 = theta_V = 1): b is a vertex of the concave majorant of E_U exactly for U < theta_b
(each triple condition E_U(b) > chord_ik(b) is linear in U), so the vertex sets are nested.
    Draw U ~ Uniform(0, 1); cut the sorted tokens at the boundaries with theta_b > U;
    return a uniformly random DRAW of the first group that holds a draw.
Tokens of equal ratio are never separated (theta = 0 between them), so no tie rule is needed.

Law. A group [lo, hi) is the first group holding a draw with probability G_hi - G_lo, and
then returns each of its tokens in proportion to q (the draws in it are i.i.d. q restricted
to it), so at level U the law is r_U(x) = q(x) (G_hi - G_lo) / (x_hi - x_lo), a vertex-like
point of P_n; r = integral of r_U dU over the finitely many levels between the sorted theta
(law). Everything is rational in the rows: exact on rationals, no roots.

Why it is optimal. Let S_mu(b) = A_b - integral_0^mu R_U(b) dU (R_U the cumulative of r_U).
S_0 = A, and both S_mu and the concave majorant LCM(E_mu) equal E_mu at the vertices of
LCM(E_mu) and are linear between them with derivative -R_U in mu, so S_mu = LCM(E_mu): the
cumulative law is R = A - LCM(A - G). The majorant of E_1 = A - G rises up to its maximum at
the boundary b* (the best split: A_b* - G_b* is maximal, i.e. H* = the tokens after b*) and
falls after it; where it rises r = a - (slope) <= a, where it falls r >= a, and
R_b* = G_b* = g(q(first b* tokens)). Hence sum_x min(a, r) = g(q(G)) + a(H*) = alpha*.

Coarse cells (support). The rule only needs the tokens in ratio order. With support M and
V > M, the SINGLETONS tokens of largest max(a, q) keep their own cells and the other tokens
are pooled by the half-octave bucket of their ratio (ratio_cells); a cell is one
"super-token": its tokens share a group at every level and are returned in proportion to q.
The rule stays lossless (its law is computed exactly); exactly optimal when V <= M (Theorem
8.5 of docs/theory.md proves the CELL-level acceptance optimal; section 8.6). Cells: [R, C],
C = V (no pooling) or SINGLETONS + 2 OCTAVES BUCKETS_PER_OCTAVE + 3 = 35.

Merged tail (merge_tail=True; tail_boundaries). Let T be the longest suffix of the cell order
(lowest ratios) whose first cell t (largest ratio in T) has a_t <= q(T)^(n-1) q_t, so every
token of T has a(x) <= q(T)^(n-1) q(x). Never cutting inside T (theta = 0 there; the other
boundaries' times are those of the majorant of the remaining points) keeps the rule optimal:
T lies inside an optimal H (for an optimal suffix H inside T, q(T)^n - q(H)^n >= q(T)^(n-1)
q(T - H) >= a(T - H)), T's cell is last, its rate is the integral of (1 - x_lo(U))^(n-1) >=
q(T)^(n-1), so r >= a on T, and the cell-level optimum (Theorem 8.5) is the token-level one.

Closer to the draft (closer_to_draft; CloserToDraft). Run the merged-tail rule; when it
returns a draw of the optimal low-ratio cells H* (after the last minimiser b* of G - A, a cut
at every level: theta_b* = 1, checked, else weight 0), with probability w return a uniformly
random draw instead (all n draws lie in H* then). The law is unchanged on B* and becomes
(1 - w) r + w q(H*)^(n-1) q on H*; w is the largest value in [0, 1] keeping r >= a on H*
(one closed form per cell), so the rule stays single-step optimal and moves its H* mass
towards q. Both rules are lossless for any w (their laws and count laws are computed exactly)
and are tested against their own selection step by enumeration.

Counts (count_law). For the lexicographic multi-path rule (verifiers.nodeopt) the number of
draws equal to the returned token matters: rho[m, y] = P(return y and exactly m of the n
draws are y) = integral over U of
    C(n, m) m q_y^m  int_0^1 t^(m-1) (t (q_G - q_y) + 1 - x_hi)^(n-m) dt
for y's group G = [lo, hi) at level U (m/(m + i) = m int t^(m+i-1) dt); sum_m rho[m, y] = r(y).

Shapes: rows [R, V] (torch, any float dtype and device, or numpy object arrays of exact
rationals); cells [R, C]; boundaries [R, C+1]; levels [R, T] with T = C; draws [R, J].
Cost per row: one sort O(V log V) (or O(V log M) to place the pooled tokens), O(C^3) for
theta, O(C^2) for the levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ops
from .ops import torch  # imported on first use (ops._LazyTorch)

Array = Any


def capacity(mass: Array, paths: int) -> Array:
    """g(s) = 1 - (1 - s)^n elementwise (integer power: exact on rationals)."""
    return 1 - (1 - mass) ** paths


def separation_order(values: Array, draft: Array) -> Array:
    """[R, V] token ids in the separation order: q = 0 < v first, then q > 0 by ratio v/q
    DEscending (ties by token id), then the rest (q = 0 and v <= 0).

    values, draft [R, V] (torch, numpy float64, or numpy object arrays of rationals). The
    one order of the threshold structure: the optimal sets below are its prefixes (the
    separation lemma, speclp.lp.hitting), and the nested-partition rule cuts it."""
    ratio = ops.safe_div(values, draft)
    by_ratio = ops.argsort(-ratio, -1)  # stable: ties by id
    kind = ops.where(draft == 0, ops.where(values > 0, 0, 2), 1)
    second = ops.argsort(ops.gather(kind, -1, by_ratio), -1)  # stable: keeps the ratio order
    return ops.gather(by_ratio, -1, second)


def _descending_ratio_order(target: Array, draft: Array) -> Array:
    """[R, V] token ids for the rule's cells: the separation order with EVERY q = 0 token
    moved first (stable), so that the never-drafted tokens sit at x = 0, before every cut."""
    order = separation_order(target, draft)
    never = ops.where(draft == 0, 0, 1)
    return ops.gather(order, -1, ops.argsort(ops.gather(never, -1, order), -1))


def threshold_scores(values: Array, draft: Array, paths: int, order: Array | None = None
                     ) -> tuple[Array, Array]:
    """The separation lemma, batched: (order [R, V], scores [R, V+1]).

    order = separation_order(values, draft) (or the order of a previous call on the same
    rows, another n); scores[:, k] = g(q(T_k)) - v(T_k) for the prefix T_k of the first k
    tokens of the order, g(s) = 1 - (1 - s)^n. min_k scores = min over ALL token sets S of
    g(q(S)) - v(S) (speclp.lp.hitting states and proves the lemma; this is its one
    implementation, used by the LP's separation and closed form and by the rule here).
    Exact on rationals; floats: g = -expm1(n log(1 - s)) with 1 - s from the tail sums when
    s >= 1/2. O(V log V) per row."""
    if order is None:
        order = separation_order(values, draft)
    q_sorted, v_sorted = ops.gather(draft, -1, order), ops.gather(values, -1, order)
    zero = q_sorted[..., :1] * 0
    inside = ops.concat([zero, ops.cumsum(q_sorted, -1)], -1)  # [R, V+1] q(T_k)
    outside = ops.concat([ops.flip(ops.cumsum(ops.flip(q_sorted, -1), -1), -1), zero], -1)
    if ops.is_exact(inside):
        g = 1 - (1 - inside) ** paths
    elif ops.is_torch(inside):
        log_miss = ops.torch.where(inside < 0.5, ops.torch.log1p(-inside.clamp(0.0, 1.0)),
                                   ops.torch.log(outside.clamp(0.0, 1.0)))
        g = -ops.torch.expm1(paths * log_miss)
    else:
        with np.errstate(divide="ignore"):
            log_miss = np.where(inside < 0.5, np.log1p(-np.clip(inside, 0.0, 1.0)),
                                np.log(np.clip(outside, 0.0, 1.0)))
        g = -np.expm1(paths * log_miss)
    return order, g - ops.concat([zero, ops.cumsum(v_sorted, -1)], -1)


# ---------------------------------------------------------------------------
# the optimum (closed form)
# ---------------------------------------------------------------------------

def threshold_optimum(target: Array, draft: Array, paths: int, order: Array | None = None
                      ) -> tuple[Array, Array, Array]:
    """(alpha* [R], high [R] int, order [R, V]): the L = 1 optimum as a threshold set.

    alpha* = a(all) + min_k scores[:, k] = min_H [a(H) + 1 - q(H)^n] (threshold_scores with
    values a; H = the complement of the prefix B = order[:, :high], the LARGEST minimising
    prefix, i.e. the smallest optimal H). The one implementation of the L = 1 threshold
    structure: speclp.lp.closed_form.one_step_optimum calls it (numpy rows)."""
    order, scores = threshold_scores(target, draft, paths, order)
    best = ops.amin(scores, -1)
    points = scores.shape[-1]
    last = points - 1 - ops.argmax(ops.flip(scores, -1) == best[:, None], -1)
    return ops.total(target, -1) + best, last, order


def single_step_optimum(target: Array, draft: Array, paths: int) -> tuple[Array, Array]:
    """alpha* = min_H [a(H) + 1 - q(H)^n] and the optimal low-ratio set H*.

    target, draft [R, V] (rows of mass 1 for q; a may be a sub-probability). H ranges over the
    prefixes of the tokens sorted by ratio a/q ascending (the reversed separation order);
    the smallest minimiser is returned (threshold_optimum). Returns (alpha* [R], low [R, V]
    bool: token in H*). Cost O(V log V)."""
    value, high, order = threshold_optimum(target, draft, paths)
    rank = ops.inverse_permutation(order, -1)
    return value, rank >= high[:, None]


# ---------------------------------------------------------------------------
# cells in ratio order
# ---------------------------------------------------------------------------

@dataclass
class Cells:
    """Tokens grouped into cells listed in descending ratio order.

    width [R, C] q-mass and height [R, C] a-mass of every cell (in that order). The cell of
    every token is cell_of [R, V] = relabel[raw] (relabel None: raw itself): the pooled layout
    keeps its unordered cell ids `raw` and the small map `relabel` [R, C] to the order, so
    that per-token values (per_token) cost one gather of a [R, V] row and no [R, V] integer
    row is ever built for the order. Tokens of one cell are always returned together (in
    proportion to q)."""

    raw: Array
    width: Array
    height: Array
    relabel: Array | None = None

    @property
    def count(self) -> int:
        return int(self.width.shape[-1])

    @property
    def cell_of(self) -> Array:
        """[R, V] the (ordered) cell of every token."""
        raw = self._index(self.raw)
        return raw if self.relabel is None else ops.take_rows(self.relabel, raw)

    @staticmethod
    def _index(raw: Array) -> Array:
        return raw.long() if ops.is_torch(raw) and raw.dtype != torch.int64 else raw

    def per_token(self, values: Array, rows: Array | None = None) -> Array:
        """values[cell_of] per token: [R, C] -> [R, V] (rows [Q]: the rows' values [Q, C] read
        through the cells of rows `rows`, [Q, V]). Torch int32 ids: one index_select of the
        flattened values (no int64 copy of the ids)."""
        raw = self.raw if rows is None else self.raw[rows]
        if self.relabel is not None:
            values = ops.take_rows(values, self.relabel if rows is None else self.relabel[rows])
        if ops.is_torch(raw) and raw.dtype == torch.int32:
            count = values.shape[-1]
            return values.reshape(-1).index_select(0, _flat_cells(raw, count)).reshape(raw.shape)
        return ops.take_rows(values, raw)

    def cell_at(self, tokens: Array, rows: Array | None = None) -> Array:
        """[Q, J] the cells of tokens [Q, J] in rows `rows` [Q] (None: Q = R)."""
        if rows is None:
            raw = self._index(ops.take_rows(self.raw, tokens))
            return raw if self.relabel is None else ops.take_rows(self.relabel, raw)
        raw = self._index(self.raw[rows[:, None], tokens])
        return raw if self.relabel is None else self.relabel[rows[:, None], raw]


SINGLETONS = 8  # pooled layout: the tokens of largest max(a, q) that keep their own cell
OCTAVES = 6  # pooled layout: other ratios bucketed over about [2^-6, 2^6), one bucket each side
BUCKETS_PER_OCTAVE = 2  # fixed by the float32 bit pattern used (ratio_bucket)


def ratio_bucket(target: Array, draft: Array, buckets: int) -> Array:
    """[R, V] int: the half-octave bucket of every ratio a/q, descending ratio = ascending
    bucket, clamped to 0..buckets-1 (ratio 0 last; q = 0 tokens get 0, they are set apart).

    The bucket is read off the float32 bit pattern of the ratio: bits >> 22 = 2 (exponent +
    127) + (leading mantissa bit), i.e. half octaves [2^e, 1.5 2^e), [1.5 2^e, 2^(e+1)); the
    same integer on torch (any dtype, any device) and on numpy (exact rationals are rounded to
    float32 first), with no logarithm. Bucket = OCTAVES * 2 + 1 + 254 - (bits >> 22)."""
    offset = 2 * OCTAVES + 1 + 254
    if ops.is_torch(target):
        ratio = (target.float() / draft.float()).nan_to_num(nan=0.0)
        half_octave = ratio.view(torch.int32) >> 22
        return (offset - half_octave).clamp(0, buckets - 1).long()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.nan_to_num(ops.as_float64(target) / ops.as_float64(draft), nan=0.0)
        half_octave = ratio.astype(np.float32).view(np.int32) >> 22
    return np.clip(offset - half_octave.astype(np.int64), 0, buckets - 1)


def _flat_cells(raw: Array, count: int) -> Array:
    """[R V] int32 cell ids of a torch int32 raw [R, C-cell ids] with row offsets r C."""
    offsets = torch.arange(raw.shape[0], device=raw.device, dtype=raw.dtype)[:, None] * count
    return (raw + offsets).reshape(-1)


def _cell_sums(draft: Array, target: Array, raw: Array, count: int) -> tuple[Array, Array]:
    """(q-mass, a-mass) [R, C] of every cell. Torch int32 ids with float32/float64 rows: one
    bincount each over the rows with offsets (no int64 copy of the ids; the same sums as
    scatter_add, which also adds in token order); otherwise scatter sums."""
    if ops.is_torch(raw) and raw.dtype == torch.int32 and draft.dtype == target.dtype and \
            draft.dtype in (torch.float32, torch.float64):
        flat, size = _flat_cells(raw, count), raw.shape[0] * count
        sums = [torch.bincount(flat, weights=rows.reshape(-1), minlength=size).reshape(-1, count)
                for rows in (draft, target)]
        return sums[0], sums[1]
    index = raw.long() if ops.is_torch(raw) else raw
    return ops.scatter_sum(draft, index, count), ops.scatter_sum(target, index, count)


def ratio_cells(target: Array, draft: Array, support: int | None = None,
                singletons: int = SINGLETONS) -> Cells:
    """One cell per token (support None or V <= support), else singletons and ratio buckets.

    Pooled layout (V > support): the `singletons` tokens of largest max(a, q) keep their own
    cells; every other token with q > 0 goes to the half-octave bucket of its ratio
    (ratio_bucket: 2 buckets per octave on about [2^-6, 2^6), one bucket above and one below;
    ratio 0 in the last); the tokens with q = 0 share cell 0. The cells are then
    ordered by their own ratio (a-mass / q-mass, descending; empty cells last), so the rule
    runs on a concave A at the cell level: C = singletons + 2 OCTAVES BUCKETS_PER_OCTAVE + 3
    = 35 cells by default. Cost O(V) (a top-k, elementwise bucketing, two scatter sums) plus a sort of
    the C cells. Which of several tied scores becomes a singleton is the backend's choice
    (torch.topk; numpy: lowest token id); any choice gives a lossless rule."""
    rows, vocab = target.shape
    if support is None or vocab <= support:
        order = _descending_ratio_order(target, draft)
        return Cells(ops.inverse_permutation(order, -1), ops.gather(draft, -1, order),
                     ops.gather(target, -1, order))
    singles = min(singletons, vocab)
    score = ops.maximum(target, draft)
    buckets = 2 * OCTAVES * BUCKETS_PER_OCTAVE + 2
    if ops.is_torch(score):
        chosen = torch.topk(score, singles, dim=-1).indices  # [R, M]
        # ratio_bucket folded into the cell index: 1 + M + clamp(offset - bits >> 22); q = 0
        # (ratio inf or nan) -> cell 0; the same cells in fewer passes
        first = 1 + singles
        if score.dtype == torch.float32:  # in place in the score's buffer (no fresh rows)
            ratio = torch.div(target, draft, out=score)
        else:
            ratio = target.float() / draft.float()
        half_octave = ratio.view(torch.int32).bitwise_right_shift_(22)
        raw = half_octave.neg_().add_(first + 2 * OCTAVES + 1 + 254)
        raw = raw.clamp_(first, first + buckets - 1).masked_fill_(draft == 0, 0)  # int32
        ids = torch.arange(1, singles + 1, device=raw.device, dtype=raw.dtype).expand(rows,
                                                                                  singles)
        raw.scatter_(-1, chosen, torch.where(ops.take_rows(draft, chosen) == 0, 0, ids))
    else:
        chosen = ops.argsort(-score, -1)[:, :singles]
        bucket = ratio_bucket(target, draft, buckets)
        raw = 1 + singles + bucket  # [R, V] cell: 0 never, 1..M singletons, buckets
        ids = ops.arange(singles, chosen)[None, :] + 1 + chosen * 0
        np.put_along_axis(raw, chosen, ids, axis=-1)
        raw = ops.where(draft == 0, 0, raw)
    count = 1 + singles + buckets
    width, height = _cell_sums(draft, target, raw, count)
    # cell order: never-drafted first, then by cell ratio descending, empty cells last
    cell_ratio = ops.safe_div(height, width)
    top = ops.amax(cell_ratio, -1)[:, None] + 1
    key = ops.where(width == 0, -1 + top * 0, cell_ratio)
    key = ops.concat([top + 1, key[:, 1:]], -1)  # cell 0 before all
    order = ops.argsort(-key, -1)
    rank = ops.inverse_permutation(order, -1)
    return Cells(raw, ops.gather(width, -1, order), ops.gather(height, -1, order), rank)


# ---------------------------------------------------------------------------
# the rule
# ---------------------------------------------------------------------------

def _bend(mass: Array, values: Array, left: Array, right: Array) -> Array:
    """values_b (x_k - x_i) - values_i (x_k - x_b) - values_k (x_b - x_i) for i = left[b],
    k = right[b] ([R, P] each): (x_k - x_i) times the height of point b above the chord."""
    x_i, x_k = ops.take_rows(mass, left), ops.take_rows(mass, right)
    return (values * (x_k - x_i) - ops.take_rows(values, left) * (x_k - mass)
            - ops.take_rows(values, right) * (mass - x_i))


def _none_left(active: Array) -> bool:
    """True when no row has an event left: read on the host for numpy and CPU tensors (no
    device to wait for); on an accelerator always False (every round runs: asking would be a
    host synchronisation)."""
    if not ops.is_torch(active):
        return not active.any()
    return active.device.type == "cpu" and not active.numpy().any()


def boundary_times(mass: Array, target: Array, capacity_: Array, never: Array | None = None
                   ) -> Array:
    """theta [R, C+1] (module docstring): when each boundary leaves the concave majorant of
    E_U = A - U G. mass x, target A, capacity_ G: [R, C+1] at the boundaries.

    Kinetic: the majorant's vertices only disappear as U grows (module docstring), and a
    vertex disappears exactly when it falls onto the chord of its two neighbouring vertices,
    at U = bend(A)/bend(G) for that triple. Starting from every point (at U = 0 the points
    are on the concave curve A; points on a straight piece leave at U = 0), repeatedly remove
    the vertex with the earliest such time, until every remaining time is >= 1: C rounds of
    O(C) each, batched over the rows. This equals the closed form min over all triples
    i < b < k (tested). Boundaries at x = 0 (before every drafted token) and at the end get 1;
    boundaries of zero-width cells share the time of the point they coincide with.
    never [R, C+1] bool (optional): boundaries that are never cuts (theta = 0); the others'
    times are those of the majorant of the remaining points (merged cells, tail_boundaries)."""
    rows, points = mass.shape
    ids = ops.arange(points, mass)[None, :]
    last = mass[:, 1:] != mass[:, :-1]
    last = ops.concat([last, last[:, :1] | True], -1)  # last boundary of its x
    alive = (last | False) if never is None else (last & ~never)
    zero = mass * 0
    theta = zero + 1
    late = zero + 2  # "no event before U = 1"
    now = zero[:, 0]
    row_ids = ops.arange(rows, ids)
    for _ in range(points):
        before = ops.cummax(ops.where(alive, ids, -1), -1)
        after = ops.flip(ops.cummin(ops.flip(ops.where(alive, ids, points), -1), -1), -1)
        prev = ops.concat([before[:, :1] * 0 - 1, before[:, :-1]], -1)
        succ = ops.concat([after[:, 1:], after[:, :1] * 0 + points], -1)
        inner = alive & (prev >= 0) & (succ < points)
        left, right = ops.maximum(prev, 0), ops.minimum(succ, points - 1)
        numerator = _bend(mass, target, left, right)
        denominator = _bend(mass, capacity_, left, right)
        valid = inner & (denominator > 0)
        event = ops.where(valid, numerator / ops.where(valid, denominator, late), late)
        event = ops.where(valid, ops.maximum(event, now[:, None]), late)
        first = ops.argmin(event, -1)
        time = ops.take_rows(event, first[:, None])[:, 0]
        active = time < 1
        if _none_left(active):
            break
        theta[row_ids, first] = ops.where(active, time, theta[row_ids, first])
        alive[row_ids, first] = alive[row_ids, first] & ~active
        now = ops.where(active, time, now)
    owner = ops.flip(ops.cummin(ops.flip(ops.where(last, ids, points - 1), -1), -1), -1)
    theta = ops.take_rows(theta, owner)  # zero-width boundaries: the time of their point
    if never is not None:
        theta = ops.where(never, zero, theta)
    theta = ops.minimum(ops.maximum(theta, zero), zero + 1)
    return ops.where((mass == 0) | (ids == points - 1), zero + 1, theta)


@dataclass
class NestedPartitions:
    """The nested-partition rule for n draws at a batch of nodes (module docstring).

    draft [R, V]; cells; mass, target, capacity, theta [R, C+1] at the boundaries;
    lengths [R, T] the lengths of the U-levels (T = C); low, high [R, T, C] the boundaries
    of the group of every cell at every level; rate [R, C] the law of a cell per unit q
    (r(x) = q(x) rate[cell(x)])."""

    paths: int
    draft: Array
    cells: Cells
    mass: Array
    target: Array
    capacity: Array
    theta: Array
    lengths: Array
    low: Array
    high: Array
    rate: Array

    def law(self) -> Array:
        """r [R, V]: the law of the returned token."""
        return self.draft * self.cells.per_token(self.rate)

    def _token_cells(self, rows: Array | None, tokens: Array) -> tuple[Array, Array]:
        """(cell [Q, J], q [Q, J]) of tokens [Q, J] read in rule rows `rows` [Q] (None: Q = R)."""
        if rows is None:
            return self.cells.cell_at(tokens), ops.take_rows(self.draft, tokens)
        return self.cells.cell_at(tokens, rows), self.draft[rows[:, None], tokens]

    def count_law(self, token: Array, rows: Array | None = None) -> Array:
        """rho [Q, n+1]: rho[:, m] = P(return token and exactly m draws equal it), m = 1..n
        (rho[:, 0] = 0), for the tokens [Q] read in rule rows `rows` [Q] (None: row q)."""
        n = self.paths
        cell, q_y = self._token_cells(rows, token[:, None])  # [Q, 1]
        low_all, high_all = ((self.low, self.high) if rows is None
                             else (self.low[rows], self.high[rows]))  # [Q, T, C]
        mass = self.mass if rows is None else self.mass[rows]
        lengths = self.lengths if rows is None else self.lengths[rows]
        levels = lengths.shape[-1]
        index = cell[:, None, :]
        if ops.is_torch(index):
            index = index.expand(-1, levels, 1)
        else:
            index = np.broadcast_to(index, (index.shape[0], levels, 1))
        low = ops.gather(low_all, -1, index)[..., 0]  # [Q, T]
        high = ops.gather(high_all, -1, index)[..., 0]
        group = ops.take_rows(mass, high) - ops.take_rows(mass, low)
        after = 1 - ops.take_rows(mass, high)
        others = group - q_y
        out = [ops.zeros(token.shape, like=self.draft)]
        for m in range(1, n + 1):
            inner = others * 0
            for i in range(n - m + 1):
                inner = inner + (math.comb(n - m, i) * others ** i * after ** (n - m - i)) / (m + i)
            per_level = math.comb(n, m) * m * q_y ** m * inner
            out.append(ops.total(lengths * per_level, -1))
        return ops.stack(out, -1)

    def select(self, tokens: Array, present: Array, rows: Array | None = None) -> Array:
        """[Q, J] P(the rule returns draw j) given the drafted tokens [Q, J] read in rule rows
        `rows` [Q] (None: row q); draw j is present where present [Q, J] is True (the number
        of present draws must equal paths).

        Draw j shares the first group (the group of the lowest drafted cell) from the level
        joins_j = max theta over the boundaries between the two cells on; at a level U the
        rule returns each of the draws of that group with equal probability."""
        count = self.cells.count
        theta = self.theta if rows is None else self.theta[rows]
        cell, _ = self._token_cells(rows, tokens)
        cell = ops.where(present, cell, count)  # [Q, J]
        first = ops.amin(cell, -1)[:, None, None]
        ids = ops.arange(count + 1, cell)[None, None, :]
        between = (ids > first) & (ids <= cell[:, :, None])  # [Q, J, C+1]
        zero = theta[:, :1] * 0  # [Q, 1] in the rows' number type
        joins = ops.amax(ops.where(between, theta[:, None, :], 0), -1) + zero  # [Q, J]
        one = zero + 1
        joins = ops.where(present, joins, one)
        level = ops.gather(joins, -1, ops.argsort(joins, -1))  # [Q, J] sorted
        width = ops.concat([level[:, 1:], one], -1) - level  # [Q, J] level lengths
        member = (joins[:, None, :] <= level[:, :, None]) & present[:, None, :]  # [Q, t, j]
        size = ops.total(ops.where(member, 1, 0), -1)  # [Q, t] >= 1 (the first draw)
        share = ops.safe_div(width, size * one)
        return ops.total(ops.where(member, share[:, :, None], 0), 1)


def tail_boundaries(cells: Cells, paths: int) -> Array:
    """[R, C+1] bool: the boundaries strictly inside the merged tail T (module docstring).

    T = cells t..C-1 for the smallest t with width_t > 0 and
    height_t <= width_t q(T)^(n-1), q(T) = width_t + ... + width_(C-1) (the suffix sum: no
    cancellation); cell t has the largest ratio in T, so every token of T has
    a(x) <= q(T)^(n-1) q(x). No such t: nothing is merged (all False)."""
    width, height = cells.width, cells.height
    count = width.shape[-1]
    tail = ops.flip(ops.cumsum(ops.flip(width, -1), -1), -1)  # [R, C] q(cells t..C-1)
    fits = (width > 0) & (height <= width * tail ** (paths - 1))
    ids = ops.arange(count, fits)[None, :] + 0 * ops.where(fits, 1, 0)
    start = ops.amin(ops.where(fits, ids, count), -1)  # [R]; count: no tail
    boundary = ops.arange(count + 1, fits)[None, :]
    return (boundary > start[:, None]) & (boundary < count)


def nested_partitions(target: Array, draft: Array, paths: int, support: int | None = None,
                      cells: Cells | None = None, merge_tail: bool = False) -> NestedPartitions:
    """Build the rule for n = paths draws at every row (module docstring). target, draft [R, V];
    cells: ratio_cells(target, draft, support) when already computed (they do not depend on n);
    merge_tail: never cut inside the low-ratio tail T of tail_boundaries (the rule returns T's
    tokens in proportion to q; still single-step optimal, module docstring)."""
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    return nested_partitions_for(target, draft, [paths], support, cells, merge_tail)[0]


def nested_partitions_for(target: Array, draft: Array, counts: list[int],
                          support: int | None = None, cells: Cells | None = None,
                          merge_tail: bool = False) -> list[NestedPartitions]:
    """nested_partitions for every n in counts, built in ONE batched pass: the rows of all n
    are stacked (they share the cells, x and A; only G = g_n(x) differs), so the boundary
    times and the levels cost one call for all n instead of one per n."""
    if cells is None:
        cells = ratio_cells(target, draft, support)
    rows, count = cells.width.shape[0], cells.count
    zero = cells.width[:, :1] * 0
    mass1 = ops.concat([zero, ops.cumsum(cells.width, -1)], -1)  # [R, C+1]
    height1 = ops.concat([zero, ops.cumsum(cells.height, -1)], -1)
    stack = len(counts)
    mass = ops.concat([mass1] * stack, 0)  # [S R, C+1], S = len(counts)
    height = ops.concat([height1] * stack, 0)
    cap = ops.concat([capacity(mass1, n) for n in counts], 0)
    curved = [n for n in counts if n > 1]
    theta = mass * 0 + 1  # n = 1: g is linear, every grouping gives r = q
    if curved:
        pick = [j for j, n in enumerate(counts) if n > 1]
        index = ops.arange(rows, mass)
        chosen = ops.concat([index + j * rows for j in pick], 0)
        never = (ops.concat([tail_boundaries(cells, n) for n in curved], 0) if merge_tail
                 else None)
        theta[chosen] = boundary_times(mass[chosen], height[chosen], cap[chosen], never)
    zero = mass[:, :1] * 0
    # levels: [edge_t, edge_t+1) between the sorted inner theta values (and 0, 1)
    inner = theta[:, 1:count]
    edges = ops.concat([zero, ops.gather(inner, -1, ops.argsort(inner, -1)), zero + 1], -1)
    lengths = edges[:, 1:] - edges[:, :-1]  # [S R, T = C]
    cut = theta[:, None, :] > edges[:, :-1, None]  # [S R, T, C+1]
    ids = ops.arange(count + 1, cut)
    low_all = ops.cummax(ops.where(cut, ids[None, None, :], 0), -1)  # last cut at or before b
    high_all = ops.flip(ops.cummin(ops.flip(ops.where(cut, ids[None, None, :], count), -1), -1),
                        -1)  # first cut at or after b
    low, high = low_all[..., :count], high_all[..., 1:]  # cell c: [low, high) around it
    levels = lengths.shape[-1]
    g_low = ops.take_rows(cap, low.reshape(-1, levels * count)).reshape(low.shape)
    g_high = ops.take_rows(cap, high.reshape(-1, levels * count)).reshape(high.shape)
    x_low = ops.take_rows(mass, low.reshape(-1, levels * count)).reshape(low.shape)
    x_high = ops.take_rows(mass, high.reshape(-1, levels * count)).reshape(high.shape)
    slope = ops.safe_div(g_high - g_low, x_high - x_low)  # [S R, T, C]
    rate = ops.total(lengths[:, :, None] * slope, 1)  # [S R, C]
    out = []
    for j, n in enumerate(counts):
        part = slice(j * rows, (j + 1) * rows)
        out.append(NestedPartitions(n, draft, cells, mass1, height1, cap[part], theta[part],
                                    lengths[part], low[part], high[part], rate[part]))
    return out


@dataclass
class CloserToDraft:
    """The nested-partition rule moved towards the draft on the low-ratio side (module
    docstring, "Closer to the draft"): run `base` (merge_tail=True); when it returns a draw
    of the optimal low-ratio cells H* (cells split..C-1), with probability `weight` return a
    uniformly random draw instead. split [R], weight [R], tail [R] = q(H*)."""

    base: NestedPartitions
    split: Array
    weight: Array
    tail: Array

    @property
    def paths(self) -> int:
        return self.base.paths

    @property
    def cells(self) -> Cells:
        return self.base.cells

    @property
    def rate(self) -> Array:
        """[R, C] the law per unit q of every cell."""
        ids = ops.arange(self.cells.count, self.split)[None, :]
        low = ids >= self.split[:, None]
        uniform = self.tail[:, None] ** (self.paths - 1) + self.base.rate * 0
        mixed = self.base.rate + self.weight[:, None] * (uniform - self.base.rate)
        return ops.where(low, mixed, self.base.rate)

    def law(self) -> Array:
        return self.base.draft * self.cells.per_token(self.rate)

    def _rows(self, rows: Array | None) -> tuple[Array, Array, Array]:
        if rows is None:
            return self.split, self.weight, self.tail
        return self.split[rows], self.weight[rows], self.tail[rows]

    def count_law(self, token: Array, rows: Array | None = None) -> Array:
        """[Q, n+1] as NestedPartitions.count_law; on H* mixed with the uniform draw's
        C(n-1, m-1) q_y^m (q(H*) - q_y)^(n-m) (all n draws in H*, m of them equal y)."""
        n = self.paths
        base = self.base.count_law(token, rows)
        cell, q_y = self.base._token_cells(rows, token[:, None])
        split, weight, tail = self._rows(rows)
        low = cell[:, 0] >= split
        others = tail - q_y[:, 0]
        uniform = [q_y[:, 0] * 0]
        for m in range(1, n + 1):
            uniform.append(math.comb(n - 1, m - 1) * q_y[:, 0] ** m * others ** (n - m))
        uniform = ops.stack(uniform, -1)
        mixed = base + weight[:, None] * (uniform - base)
        return ops.where(low[:, None], mixed, base)

    def select(self, tokens: Array, present: Array, rows: Array | None = None) -> Array:
        """[Q, J] as NestedPartitions.select; when every present draw is in H*, mixed with
        the uniform choice 1/n."""
        base = self.base.select(tokens, present, rows)
        cell, _ = self.base._token_cells(rows, tokens)
        split, weight, _ = self._rows(rows)
        low = ops.where(present, ops.where(cell >= split[:, None], 1, 0), 1)
        all_low = ops.amin(low, -1) == 1  # [Q]
        uniform = ops.where(present, base * 0 + 1, base * 0) / self.paths  # no int64 * Fraction
        mixed = base + weight[:, None] * (uniform - base)
        return ops.where(all_low[:, None], mixed, base)


def closer_to_draft(target: Array, draft: Array, paths: int, cells: Cells | None = None,
                    support: int | None = None) -> CloserToDraft:
    """The closer-to-the-draft rule at a batch of nodes (CloserToDraft; module docstring)."""
    if cells is None:
        cells = ratio_cells(target, draft, support)
    base = nested_partitions(target, draft, paths, cells=cells, merge_tail=True)
    count = cells.count
    score = base.capacity - base.target  # [R, C+1] G_b - A_b
    best = ops.amin(score, -1)
    split = count - ops.argmax(ops.flip(score, -1) == best[:, None], -1)  # last minimiser
    one = base.theta[:, :1] * 0 + 1
    always_cut = ops.take_rows(base.theta, split[:, None])[:, 0] == one[:, 0]  # [R]
    ids = ops.arange(count, split)[None, :]
    low = ids >= split[:, None]  # [R, C] cells of H*
    tail = ops.total(ops.where(low, cells.width, 0), -1)
    r0 = base.rate * cells.width
    u = tail[:, None] ** (paths - 1) * cells.width
    slack, drop = r0 - cells.height, r0 - u
    bound = ops.where(low & (drop > 0), ops.safe_div(slack, drop), one + 1)
    weight = ops.minimum(ops.maximum(ops.amin(bound, -1), 0), 1)
    weight = ops.where(always_cut & (split < count), weight, 0 * weight)
    if paths == 1:
        weight = 0 * weight
    return CloserToDraft(base, split, weight, tail)
