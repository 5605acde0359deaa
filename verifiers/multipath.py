"""Multi-path verifiers on the drafted prefix tree, law first (docs/theory.md section 10).

The K drafted paths (i.i.d. from q unless stated) form a prefix tree. A node of depth i
is named by its *canonical* slot (k, i): k is the lowest path index whose first i
tokens are the node. Every law below walks the tree depth by depth (loops over L and
K only, everything else batched) and puts its stop mass on canonical slots.

Registered here (GBV and its variants live in `gbv.py`, imported below):

"specinfer"  SpecInfer / recursive rejection sampling WITH replacement. At the current
             node u (paths A through u, in path order) the children are tried once per
             path: for j in A in increasing order, c = path j's token at u,
             accept c w.p. min(1, p'(c)/q(c|u)); on rejection p' <- norm((p' - q)_+).
             (A token drafted by several paths is tried once per path that drafted it.)
             Acceptance moves to c together with ALL paths through c (also paths whose
             earlier try of c was rejected: their suffixes are still i.i.d. q(.|c)). If
             every try fails, Y ~ p'. At depth L, Y ~ p(.|node) (bonus).
             Lossless for i.i.d. drafts: the tries at u are i.i.d. q(.|u) draws.
"rrsw"       Recursive rejection sampling WITHOUT replacement (RRSw) over the DISTINCT
             children of the node, in order of first appearance (lowest path index):
             accept c w.p. min(1, p'(c)/q'(c)); on rejection p' <- norm((p' - q')_+) and
             q' <- q' with c removed, renormalised. If every distinct child fails, Y ~ p'.
             With K = 1 this is token-level speculative sampling. Lossless for i.i.d.
             drafts: given the tries so far, the next new child (if any) is distributed as
             q restricted to the untried tokens, and whether it exists depends on draws
             independent of the coins. (Registered as "naive_tree" before; renamed because
             the GBV authors' NaiveTree is a different rule, below.)
"naive_tree" NaiveTree, the baseline of the GBV authors (Thomas & Pal, arXiv 2602.16961;
             docs/theory.md section 10.4): at node u test ONLY the first drafted child c (the child
             of the lowest path through u) w.p. min(1, p(c|u)/q(c|u)); on acceptance move
             to c. On rejection draw Y ~ (p - q)_+ normalised; if Y is another drafted child,
             move to it and repeat there; otherwise emit Y. Lossless for i.i.d. drafts (the
             first child is a q-draw; the token leaving u is p-distributed; the suffixes of
             the paths through the new node are i.i.d. q). L = 1 acceptance (derived in
             tests/test_baselines.py):
                 sum_t min(p, q)(t) + sum_t (p - q)_+(t) (1 - (1 - q(t))^(K-1)).
"nss"        Naive sampling (NSS; Miao et al., SpecInfer, arXiv 2305.09781; the GBV paper's
             NSS baseline): at the current node draw Y ~ p(.|u); if Y is a drafted child,
             move to it and repeat; otherwise emit Y. At depth L, Y ~ p(.|leaf) (bonus).
             L = 1 acceptance: sum_t p(t) (1 - (1 - q(t))^K).
"khisti"     The canonical two-step rule of Khisti et al. (arXiv 2410.18234, "Multi-draft
             speculative sampling: canonical decomposition and theoretical limits") at every
             node, with the importance weights w = p/q: among the n paths through the node,
             select path j with probability w(c_j) / sum_j' w(c_j') (uniformly when every
             weight is 0), then single-draft speculative sampling of the selected child c
             against r_n, the exact law of the selected child under n i.i.d. q-draws: accept
             c w.p. min(1, p(c)/r_n(c)) and move to c; else emit Y ~ (p - r_n)_+ normalised.
             L = 1 acceptance: sum_t min(p(t), r_K(t)). r_n is computed by enumerating the
             V^(n-1) companions of a draw: small vocabularies only (KHISTI_MAX_COMPANIONS).
             This is the fixed-weight member of the paper's IS family, not its LP-optimal
             selection (which needs an LP per node).
"spectr"     SpecTr K-SEQ at every node, with n = number of paths through the node:
             beta(rho) = sum_x min(q(x), p(x)/rho), rho* in [1, n] solves
             1 - (1 - beta)^n = rho beta (bisection; the upper end of the bracket is
             used: any rho >= rho* keeps the residual below >= 0, hence losslessness);
             for the n paths in order accept c w.p. min(1, p(c)/(rho q(c))), moving to c
             with the paths through c; else Y ∝ (p - min(q, p/rho)(1 - (1-beta)^n)/beta)_+.
             n = 1 gives rho = 1 (token level). Exact rows: rho is chosen in float64,
             converted to a rational and checked exactly (fallback rho = n).
"traversal"  Traversal verification (arXiv 2505.12398, docs/theory.md section 10.8): nodes are
             tested in post-order DFS (children in order of first appearance), i.e.
             repeatedly the first leaf of the remaining tree. Weights
             w(child) = min(1, w(u) p_u(c)/q_u(c)) are set from the parent's CURRENT
             rows when the child's subtree is entered. A tested node is accepted w.p.
             its weight (the root w.p. 1): output = the node, Y ~ its current target
             row. On rejection the node is deleted and its parent u updated:
             Z = sum (w_u p_u - q_u)_+, p_u <- (w_u p_u - q_u)_+ / Z,
             w_u <- Z/(Z + 1 - w_u), q_u <- q_u without the deleted token, renormalised.
             On a chain (K = 1) this is BV.

Losslessness of all of these is claimed for i.i.d. drafting only (the default of
`exact_result` and of the audit); drafting without replacement is not covered.

Exact laws (verifiers.exact.exact_result). The walk verifiers (specinfer, rrsw, naive_tree,
nss, khisti, spectr) register their node rule (VerifierSpec.node_rule); on i.i.d. drafts
their exact law is the (node, m) recursion of verifiers.structure, which calls that same
rule on every ordered child tuple at a node (exact: given the walk at u with m paths, the
paths' continuations are i.i.d. q-paths in their original order, docs/theory.md section
12.2). A rule may be called with one slot per node (K0 = 1); naive_tree reads its first
drafted child from the lowest path through the node for that reason. nss and khisti are
order-invariant (their law given the drafts depends only on the multiset of paths; tests/
test_exact_enumeration.py checks the declaration). Traversal is not node-local: a child's
subtree is entered with a weight set from its parent's rows AFTER the earlier siblings'
subtrees were deleted, and its law depends on the order of first appearance of the children
(not order-invariant: 162 of the configurations of three small instances change under a
permutation of the paths). But the parent's state after deleting a sibling depends only on
which sibling was deleted, not on what happened inside its subtree, so a subtree's
behaviour depends on its past only through (node, paths through it, entry weight): its
exact law on i.i.d. drafts is the sibling recursion of verifiers.structure
(sibling_recursion, docstring there), which calls the walker's own two steps
(traversal_child_weight, traversal_delete); on other draft laws it enumerates the ordered
K-tuples.

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from ..inputs import BadArgument
from . import gbv as _gbv
from . import ops
from .law import BlockLaw, DraftTree, register
from .ops import torch  # imported on first use (ops._LazyTorch)
from .single_path import residual_rows
from .structure import sibling_evaluations_bound, sibling_recursion

Array = Any


# ---------------------------------------------------------------------------
# tree structure
# ---------------------------------------------------------------------------

def shared_prefix(tokens: Array) -> Array:
    """same [B, K, K, L+1] bool: same[b, a, c, i] = paths a and c agree on their first i tokens."""
    equal = tokens[:, :, None, :] == tokens[:, None, :, :]  # [B, K, K, L]
    levels = [equal[..., 0] | True]
    for i in range(tokens.shape[-1]):
        levels.append(levels[-1] & equal[..., i])
    return ops.stack(levels, -1)


def canonical_paths(same: Array) -> Array:
    """canon [B, K, L+1]: lowest path index sharing the first i tokens of path k."""
    return ops.argmax(same, 1)


def _one_hot(index: Array, size: int) -> Array:
    """[..., size] bool: index[..., None] == arange(size)."""
    return index[..., None] == ops.arange(size, index)


def _gather_tokens(rows: Array, token: Array) -> Array:
    """rows [B, S, V], token [B] -> [B, S] rows[b, s, token[b]]."""
    index = token[:, None, None]
    if ops.is_torch(rows):
        index = index.expand(rows.shape[0], rows.shape[1], 1)
    else:
        index = np.broadcast_to(index, (rows.shape[0], rows.shape[1], 1))
    return ops.gather(rows, -1, index)[..., 0]


# ---------------------------------------------------------------------------
# walking the tree node by node (specinfer, rrsw, naive_tree, nss, khisti, spectr)
# ---------------------------------------------------------------------------

# A node rule gets, at depth i, for every slot (k0, i) of the batch (non-canonical slots
# are computed too, with zero reach):
#   target [B, K, V], draft [B, K, V]  the rows of node (k0, i)
#   through [B, K(k0), K(j)] bool      path j passes through node (k0, i)
#   children [B, K] tokens at depth i; first [B, K] bool: path j is the first drafter
#   of its child (canonical at depth i+1)
# and returns (accept [B, K(k0), K(j)] = P(the node's rule moves down through path j's
# child), correction [B, K, V] the row of Y when no child is accepted; the stop mass is
# 1 - sum_j accept).
NodeRule = Callable[[Array, Array, Array, Array, Array], tuple[Array, Array]]


def walk_tree(tree: DraftTree, rule: NodeRule) -> BlockLaw:
    """Exact law of a top-down verifier that moves from node to child or stops."""
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    batch, paths, depth = tree.batch, tree.paths, tree.depth
    same = shared_prefix(tokens)  # [B, K, K, L+1]
    canon = canonical_paths(same)  # [B, K, L+1]
    reach = ops.zeros((batch, paths), like=target)  # P(current node = canonical slot (k, i))
    reach[:, 0] = 1  # the root's canonical slot is path 0
    stops, corrections = [], []
    for i in range(depth):
        through = same[:, :, :, i]  # [B, K0, J] (symmetric): path j passes through (k0, i)
        first = canon[:, :, i + 1] == ops.arange(paths, canon)[None, :]  # [B, J]
        accept, correction = rule(target[:, :, i], draft[:, :, i], through, tokens[:, :, i], first)
        stops.append(reach * (1 - ops.total(accept, -1)))
        corrections.append(correction)
        moved = ops.total(reach[:, :, None] * accept, 1)  # [B, J] mass leaving via path j
        next_reach = reach * 0
        for j in range(paths):
            next_reach = next_reach + ops.where(_one_hot(canon[:, j, i + 1], paths),
                                                moved[:, j : j + 1], 0)
        reach = next_reach
    stops.append(reach)
    corrections.append(target[:, :, depth])
    return BlockLaw(ops.stack(stops, 2), ops.stack(corrections, 2))


def _recursive_rejection(target: Array, draft: Array, through: Array, children: Array,
                         first: Array, distinct: bool) -> tuple[Array, Array]:
    """Recursive rejection sampling at a node, the paths' children tested in path order
    against the current residual row. distinct=False (SpecInfer): every path's child, the
    proposal stays the draft row; distinct=True (RRSw): each distinct child once (its first
    path), the tried token then removed from the proposal, which is renormalised."""
    residual, proposal = target, draft
    vocab = target.shape[-1]
    remaining = ops.ones(target.shape[:2], like=target)  # [B, K0]
    accepts = []
    for j in range(children.shape[1]):
        tried = through[:, :, j]
        if distinct:
            tried = tried & first[:, j : j + 1]  # a new distinct child at the node
        p_c = _gather_tokens(residual, children[:, j])
        q_c = _gather_tokens(proposal, children[:, j])
        a = ops.where(tried, ops.minimum(ops.safe_div(p_c, q_c), 1), 0)
        accepts.append(remaining * a)
        remaining = remaining * (1 - a)
        rejected, _ = residual_rows(ops.ones(remaining.shape, like=remaining), residual, proposal)
        residual = ops.where(tried[..., None], rejected, residual)
        if distinct:
            removed = ops.where(_one_hot(children[:, j], vocab)[:, None, :], 0, proposal)
            removed = ops.safe_div(removed, ops.total(removed, -1, keepdim=True))
            proposal = ops.where(tried[..., None], removed, proposal)
    return ops.stack(accepts, 2), residual


def _specinfer_rule(target: Array, draft: Array, through: Array, children: Array,
                    first: Array) -> tuple[Array, Array]:
    return _recursive_rejection(target, draft, through, children, first, distinct=False)


def _rrsw_rule(target: Array, draft: Array, through: Array, children: Array,
               first: Array) -> tuple[Array, Array]:
    return _recursive_rejection(target, draft, through, children, first, distinct=True)


def _drafted_mask(through: Array, children: Array, vocab: int) -> Array:
    """[B, K0, V] bool: token t is the child of some path through node (k0, i)."""
    mask = None
    for j in range(children.shape[1]):
        hit = through[:, :, j][..., None] & _one_hot(children[:, j], vocab)[:, None, :]
        mask = hit if mask is None else mask | hit
    return mask


def _emit_outside(row: Array, drafted: Array) -> Array:
    """row restricted to the tokens that are not drafted children, renormalised [B, K0, V]."""
    outside = ops.where(drafted, 0, row)
    return ops.safe_div(outside, ops.total(outside, -1, keepdim=True))


def _nss_rule(target: Array, draft: Array, through: Array, children: Array,
              first: Array) -> tuple[Array, Array]:
    drafted = _drafted_mask(through, children, target.shape[-1])
    accepts = []
    for j in range(children.shape[1]):
        new = through[:, :, j] & first[:, j : j + 1]  # path j brings a new distinct child
        accepts.append(ops.where(new, _gather_tokens(target, children[:, j]), 0))
    return ops.stack(accepts, 2), _emit_outside(target, drafted)


def _naive_tree_rule(target: Array, draft: Array, through: Array, children: Array,
                     first: Array) -> tuple[Array, Array]:
    paths = children.shape[1]
    drafted = _drafted_mask(through, children, target.shape[-1])
    # the first drafted child of node (k0, i) is the child of the lowest path through it
    # (for a canonical slot k0 that is path k0 itself)
    lowest = ops.argmax(through, -1)  # [B, K0]
    first_child = ops.gather(children, 1, lowest)  # [B, K0]
    p_first = ops.gather(target, -1, first_child[..., None])[..., 0]
    q_first = ops.gather(draft, -1, first_child[..., None])[..., 0]
    keep = ops.minimum(ops.safe_div(p_first, q_first), 1)  # [B, K0]
    residual, _ = residual_rows(ops.ones(keep.shape, like=keep), target, draft)
    accepts = []
    for j in range(paths):
        new = through[:, :, j] & first[:, j : j + 1]
        is_first = children[:, j][:, None] == first_child
        moved = (1 - keep) * _gather_tokens(residual, children[:, j])
        accepts.append(ops.where(new, ops.where(is_first, keep, moved), 0))
    return ops.stack(accepts, 2), _emit_outside(residual, drafted)


# --- Khisti et al.: importance-weighted selection, then speculative sampling ------

KHISTI_MAX_COMPANIONS = 1 << 16  # V^(K-1) companion tuples enumerated per node row


def _selection_laws(target: Array, draft: Array, paths: int) -> list[Array]:
    """[r_1, ..., r_K], r_n [..., V]: law of the child selected with probability
    proportional to w = p/q among n i.i.d. q-draws (uniformly when all weights are 0).

    r_n(y) = n q(y) E[sel(first draw | draws)], first draw = y, over the V^(n-1)
    companion tuples (enumerated; exact on rational rows).
    """
    vocab = target.shape[-1]
    if vocab ** (paths - 1) > KHISTI_MAX_COMPANIONS:
        raise BadArgument("paths", f"khisti: V^(K-1) = {vocab}^{paths - 1} companion tuples per node exceed "
                         f"{KHISTI_MAX_COMPANIONS}; use a smaller vocabulary or fewer paths")
    weight = ops.safe_div(target, draft)  # [..., V]; tokens with q = 0 are never drafted
    laws = [draft * 1]  # n = 1: the draw itself
    for n in range(2, paths + 1):
        companions = np.stack(np.meshgrid(*[np.arange(vocab)] * (n - 1), indexing="ij"), -1)
        companions = companions.reshape(-1, n - 1)  # [T, n-1]
        index = ops.index_like(target, companions)
        prob = None
        total_w = None
        for m in range(n - 1):
            q_m = draft[..., index[:, m]]  # [..., T]
            w_m = weight[..., index[:, m]]
            prob = q_m if prob is None else prob * q_m
            total_w = w_m if total_w is None else total_w + w_m
        columns = []
        for y in range(vocab):
            w_y = weight[..., y : y + 1]  # [..., 1]
            denominator = w_y + total_w  # [..., T]
            share = ops.safe_div(w_y + total_w * 0, denominator)
            unit = ops.ones(total_w.shape, like=target)  # exact 1 (not int) on rational rows
            uniform = ops.safe_div(unit, unit * n)  # all weights 0: uniform over the n draws
            share = ops.where(denominator == 0, uniform, share)
            columns.append(ops.total(prob * share, -1))
        laws.append(draft * n * ops.stack(columns, -1))
    return laws


def _distinct_selection_laws(target: Array, draft: Array, paths: int) -> list[Array]:
    """_selection_laws computed once per distinct (target, draft) row pair of [..., V] rows
    (the node recursion of verifiers.structure and the walk repeat a node's rows for every
    slot and every child tuple; the laws depend on the rows only)."""
    vocab = target.shape[-1]
    flat_target, flat_draft = target.reshape(-1, vocab), draft.reshape(-1, vocab)
    if flat_target.shape[0] < 16:
        return _selection_laws(target, draft, paths)
    distinct, inverse = ops.distinct_rows(ops.concat([flat_target, flat_draft], -1))
    laws = _selection_laws(distinct[:, :vocab], distinct[:, vocab:], paths)
    return [law[inverse].reshape(target.shape) for law in laws]


def _khisti_rule(target: Array, draft: Array, through: Array, children: Array,
                 first: Array) -> tuple[Array, Array]:
    paths = children.shape[1]
    count = ops.total(ops.where(through, 1, 0), -1)  # [B, K0] paths through the node
    laws = _distinct_selection_laws(target, draft, paths)
    selected_law = laws[0]
    for n in range(2, paths + 1):
        selected_law = ops.where((count == n)[..., None], laws[n - 1], selected_law)
    weight = ops.safe_div(target, draft)
    child_weight = [ops.where(through[:, :, j], _gather_tokens(weight, children[:, j]), 0)
                    for j in range(paths)]
    total_weight = child_weight[0]
    for w in child_weight[1:]:
        total_weight = total_weight + w
    accepts = []
    for j in range(paths):
        new = through[:, :, j] & first[:, j : j + 1]
        same = [through[:, :, m] & (children[:, m] == children[:, j])[:, None] for m in range(paths)]
        multiplicity = ops.total(ops.stack([ops.where(s, 1, 0) for s in same], -1), -1)
        chosen = ops.safe_div(multiplicity * _gather_tokens(weight, children[:, j]), total_weight)
        unit = ops.ones(count.shape, like=target)  # exact 1 (not int) on rational rows
        chosen = ops.where(total_weight == 0, ops.safe_div(unit * multiplicity, unit * count),
                           chosen)
        p_c = _gather_tokens(target, children[:, j])
        r_c = _gather_tokens(selected_law, children[:, j])
        accepts.append(ops.where(new, chosen * ops.minimum(ops.safe_div(p_c, r_c), 1), 0))
    residual, _ = residual_rows(ops.ones(count.shape, like=target), target, selected_law)
    return ops.stack(accepts, 2), residual


# --- SpecTr K-SEQ ---------------------------------------------------------------

def _kseq_beta(target: Array, draft: Array, rho: Array) -> Array:
    return ops.total(ops.minimum(draft, target / rho[..., None]), -1)


def _power_count(base: Array, count: Array, most: int) -> Array:
    """base ** count elementwise for integer counts 0..most (no float pow of exact values)."""
    if ops.is_torch(base):
        return torch.pow(base, count.to(base.dtype))
    if isinstance(base, np.ndarray | np.floating) and not ops.is_exact(base):
        return np.power(base, np.asarray(count, dtype=base.dtype))  # numpy floats: torch's pow
    out = base * 0 + 1
    for m in range(1, most + 1):
        out = ops.where(count >= m, out * base, out)
    return out


def _kseq_gap(target: Array, draft: Array, rho: Array, count: Array, most: int) -> Array:
    """h(rho) = rho beta(rho) - (1 - (1 - beta(rho))^n); h >= 0 iff rho >= rho*."""
    beta = _kseq_beta(target, draft, rho)
    mass = ops.total(target, -1)  # 1 (exactly for rational rows)
    return rho * beta - mass + _power_count(mass - beta, count, most)


def kseq_rho(target: Array, draft: Array, count: Array, most: int,
             iterations: int | None = None) -> Array:
    """rho [...] >= rho* (tight to bisection precision) for rows [..., V] and n = count [...].

    torch rows: bisection in their dtype (48 steps in float64, 26 otherwise: the bracket
    [1, n] shrinks below 1e-14 resp. 3e-8 of its width).
    Exact rows (no torch, no floats): rho = 1 if h(1) >= 0, else the upper end of 48
    bisection steps of [1, n] on the exact sign of h (exact_kseq_rho_row): an exact
    rational with h(rho) >= 0, within (n - 1) / 2^48 of rho*.
    rho is a function of (row, n) alone: computed once per distinct (row, n),
    each on its own (a batched float bisection can end a bit apart for equal rows in
    different batches, and SpecTr is lossless only when every draft tuple at a node uses
    the same rho: mixed rhos gave TV 5e-14 in exact arithmetic).
    """
    if ops.is_exact(target):
        return _exact_kseq_rho(target, draft, count, most)
    if not ops.is_torch(target):
        return _kseq_rho_bisection_numpy(target, draft, count, most, iterations)
    return _kseq_rho_bisection(target, draft, count, most, iterations)


EXACT_RHO_STEPS = 48  # as the float64 bisection: the same grid of midpoints of [1, n]


def _exact_kseq_rho(target: np.ndarray, draft: np.ndarray, count: np.ndarray,
                    most: int) -> np.ndarray:
    """kseq_rho on exact rows [..., V] (docstring there): once per distinct (row, n)."""
    vocab = target.shape[-1]
    shape = target.shape[:-1]
    counts = np.asarray(count).reshape(-1, 1)
    keys = np.concatenate([target.reshape(-1, vocab), draft.reshape(-1, vocab),
                           counts.astype(object)], -1)
    distinct, inverse = ops.distinct_rows(keys)
    rho = np.empty(len(distinct), dtype=object)
    for r, row in enumerate(distinct):
        rho[r] = exact_kseq_rho_row(row[:vocab], row[vocab:2 * vocab], int(row[-1]))
    return rho[np.asarray(inverse)].reshape(shape)


def exact_kseq_rho_row(target: Any, draft: Any, count: int,
                       steps: int = EXACT_RHO_STEPS) -> Fraction:
    """SpecTr's rho for one exact row pair and n = count paths, in exact rationals.

    h(rho) = rho beta(rho) - m + (m - beta(rho))^n with beta(rho) = sum min(q, p / rho) and
    m = sum p (1 for a distribution) is nondecreasing in rho (THEORY.md, SpecTr K-SEQ:
    rho* solves 1 - (1 - beta)^n = rho beta), so h(rho) >= 0 iff rho >= rho*.
    rho = 1 if h(1) >= 0; else, from [low, high] = [1, max(n, 1)], `steps` halvings keep
    h(high) >= 0 > h(low), decided on the exact sign of h at the midpoint (a dyadic rational:
    the same midpoints as the float64 bisection, which agrees wherever its rounded h has the
    exact sign). Returns high (n if h(n) < 0, possible only for rows that are not
    distributions: by Bernoulli, 1 - (1 - beta)^n <= n beta gives h(n) >= 0 when m = 1).

    beta(rho) = A / rho + B with A = sum of p over tokens with p / q < rho and B = sum of q over
    the others (q = 0 counts as ratio infinity), read from the tokens sorted by p / q once.
    """
    p = [Fraction(v) for v in target]
    q = [Fraction(v) for v in draft]
    mass = sum(p, Fraction(0))
    finite = sorted((pv / qv, pv, qv) for pv, qv in zip(p, q, strict=True) if qv > 0)
    ratios = [r for r, _, _ in finite]
    p_below = [Fraction(0)]
    for _, pv, _ in finite:
        p_below.append(p_below[-1] + pv)
    q_above = [Fraction(0)]
    for _, _, qv in reversed(finite):
        q_above.append(q_above[-1] + qv)
    q_above.reverse()  # q_above[k]: sum of q over the sorted tokens k, k+1, ...

    def gap(rho: Fraction) -> Fraction:
        below = bisect_left(ratios, rho)  # #{ratio < rho}
        a, b = p_below[below], q_above[below]
        return a + b * rho - mass + (mass - a / rho - b) ** count

    low, high = Fraction(1), Fraction(max(count, 1))
    if gap(low) >= 0:
        return low
    for _ in range(steps):
        middle = (low + high) / 2
        if gap(middle) >= 0:
            high = middle
        else:
            low = middle
    return high


def _kseq_rho_bisection(target: torch.Tensor, draft: torch.Tensor, count: torch.Tensor,
                        most: int, iterations: int | None) -> torch.Tensor:
    """Bisection for rho* on torch rows [..., V]; returns the upper end of the bracket.

    beta(rho) is read in O(log V) per step from the rows sorted by p/q once:
    beta(rho) = (sum of p over ratios < rho) / rho + (sum of q over ratios >= rho).
    (A secant/Illinois variant was tried and crawls when h is nearly flat, p close to q.)
    """
    positive = draft > 0
    ratio = torch.where(positive, target / torch.where(positive, draft, torch.ones_like(draft)),
                        torch.full_like(draft, float("inf")))
    order = _gbv.key_order(ratio)  # ascending ratio (packed int64 sort for float32 rows)
    ratio_sorted = torch.gather(ratio, -1, order).contiguous()
    p_sorted, q_sorted = torch.gather(target, -1, order), torch.gather(draft, -1, order)
    zero = torch.zeros_like(p_sorted[..., :1])
    p_below = torch.cat([zero, torch.cumsum(p_sorted, -1)], -1)  # [..., V+1]
    q_above = torch.cat([torch.flip(torch.cumsum(torch.flip(q_sorted, (-1,)), -1), (-1,)), zero],
                        -1)
    count_f = count.to(target.dtype)

    def gap(rho: torch.Tensor) -> torch.Tensor:
        below = torch.searchsorted(ratio_sorted, rho[..., None].contiguous())  # #{ratio < rho}
        beta = (torch.gather(p_below, -1, below) / rho[..., None]
                + torch.gather(q_above, -1, below))[..., 0]
        return rho * beta - mass + torch.pow(mass - beta, count_f)

    mass = target.sum(-1)  # 1 up to rounding; with it, p == q gives h(1) = 0 exactly
    one = torch.ones(count.shape, dtype=target.dtype, device=target.device)
    low, high = one, torch.clamp_min(count_f, 1)
    high = torch.where(gap(one) >= 0, one, high)
    steps = iterations or (48 if target.dtype == torch.float64 else 26)
    for _ in range(steps):
        middle = (low + high) / 2
        ok = gap(middle) >= 0
        high = torch.where(ok, middle, high)
        low = torch.where(ok, low, middle)
    return high


def _kseq_rho_bisection_numpy(target: np.ndarray, draft: np.ndarray, count: np.ndarray,
                              most: int, iterations: int | None) -> np.ndarray:
    """_kseq_rho_bisection on numpy float rows (the float64 exact laws run without torch):
    the same steps, searchsorted (left) as the count of sorted ratios < rho."""
    positive = draft > 0
    ratio = np.where(positive, target / np.where(positive, draft, 1.0), np.inf)
    order = np.argsort(ratio, axis=-1, kind="stable")
    ratio_sorted = np.take_along_axis(ratio, order, -1)
    p_sorted, q_sorted = np.take_along_axis(target, order, -1), np.take_along_axis(draft, order, -1)
    zero = np.zeros_like(p_sorted[..., :1])
    p_below = np.concatenate([zero, np.cumsum(p_sorted, -1)], -1)  # [..., V+1]
    q_above = np.concatenate([np.flip(np.cumsum(np.flip(q_sorted, -1), -1), -1), zero], -1)
    count_f = np.asarray(count, dtype=target.dtype)
    mass = target.sum(-1)

    def gap(rho: np.ndarray) -> np.ndarray:
        below = (ratio_sorted < rho[..., None]).sum(-1, keepdims=True)  # #{ratio < rho}
        beta = (np.take_along_axis(p_below, below, -1) / rho[..., None]
                + np.take_along_axis(q_above, below, -1))[..., 0]
        return rho * beta - mass + np.power(mass - beta, count_f)

    one = np.ones(count_f.shape, dtype=target.dtype)
    low, high = one, np.maximum(count_f, 1)
    high = np.where(gap(one) >= 0, one, high)
    for _ in range(iterations or (48 if target.dtype == np.float64 else 26)):
        middle = (low + high) / 2
        ok = gap(middle) >= 0
        high = np.where(ok, middle, high)
        low = np.where(ok, low, middle)
    return high


def spectr_accepts(target: Array, draft: Array, through: Array, children: Array, rho: Array,
                   paths: int) -> Array:
    """SpecTr's k-sequential acceptances [B, K0, paths] at its rho [B, K0]: child j is tried in
    order and accepted with min(p / (rho q), 1) among the paths through the node."""
    remaining = ops.ones(target.shape[:2], like=target)
    accepts = []
    for j in range(paths):
        alive = through[:, :, j]
        p_c = _gather_tokens(target, children[:, j])
        q_c = _gather_tokens(draft, children[:, j])
        a = ops.where(alive, ops.minimum(ops.safe_div(p_c, rho * q_c), 1), 0)
        accepts.append(remaining * a)
        remaining = remaining * (1 - a)
    return ops.stack(accepts, 2)


def _spectr_rule(target: Array, draft: Array, through: Array, children: Array,
                 first: Array) -> tuple[Array, Array]:
    paths = children.shape[1]
    count = ops.total(ops.where(through, 1, 0), -1)  # [B, K0] paths through the node
    rho = kseq_rho(target, draft, count, paths)
    accepted = spectr_accepts(target, draft, through, children, rho, paths)
    capped = ops.minimum(draft, target / rho[..., None])
    beta = ops.total(capped, -1)
    accepted_mass = 1 - _power_count(1 - beta, count, paths)
    raw = ops.positive_part(target - capped * ops.safe_div(accepted_mass, beta)[..., None])
    residual = ops.safe_div(raw, ops.total(raw, -1, keepdim=True))
    return accepted, residual


@register("specinfer", "SpecInfer recursive rejection sampling with replacement on the tree",
          multipath=True, draft_sampling=("iid",),
          node_rule=_specinfer_rule)
def specinfer_law(tree: DraftTree) -> BlockLaw:
    return walk_tree(tree, _specinfer_rule)


@register("rrsw", "recursive rejection sampling without replacement over the distinct "
          "children (RRSw)", multipath=True,
          node_rule=_rrsw_rule)
def rrsw_law(tree: DraftTree) -> BlockLaw:
    return walk_tree(tree, _rrsw_rule)


@register("naive_tree", "NaiveTree of the GBV authors: test the first drafted child, on "
          "rejection follow the residual sample if it is another drafted child", multipath=True,
          draft_sampling=("iid",),
          node_rule=_naive_tree_rule)
def naive_tree_law(tree: DraftTree) -> BlockLaw:
    return walk_tree(tree, _naive_tree_rule)


@register("spectr", "SpecTr K-SEQ at every node of the tree", multipath=True,
          draft_sampling=("iid",),
          node_rule=_spectr_rule)
def spectr_law(tree: DraftTree) -> BlockLaw:
    return walk_tree(tree, _spectr_rule)


@register("nss", "naive sampling: Y ~ p at the node, move down while Y is a drafted child",
          multipath=True, order_invariant=True, node_rule=_nss_rule)
def nss_law(tree: DraftTree) -> BlockLaw:
    return walk_tree(tree, _nss_rule)


@register("khisti", "Khisti et al. two-step: importance-weighted (p/q) selection of a drafted "
          "child, then speculative sampling against its law, at every node", multipath=True,
          draft_sampling=("iid",), order_invariant=True, node_rule=_khisti_rule)
def khisti_law(tree: DraftTree) -> BlockLaw:
    return walk_tree(tree, _khisti_rule)


# ---------------------------------------------------------------------------
# traversal verification
# ---------------------------------------------------------------------------

def postorder(canon: Array) -> Array:
    """[B, K(L+1)] slot ids k (L+1) + i of the canonical nodes in post-order DFS, children
    in order of first appearance; non-canonical slots follow at the end.

    Node (k, i) gets the key sum_{j=1..L} c_j (K+1)^(L-j), c_j = canon[k, j] for j <= i and
    K (after every child) for j > i: ascending keys list every subtree before its root.
    """
    batch, paths, levels = canon.shape
    depth = levels - 1
    key = canon[:, :, 0] * 0  # [B, K]
    keys = []
    for i in range(levels):
        key_i = key * 0
        for j in range(1, levels):
            digit = canon[:, :, j] if j <= i else canon[:, :, 0] * 0 + paths
            key_i = key_i * (paths + 1) + digit
        is_canon = canon[:, :, i] == ops.arange(paths, canon)[None, :]
        keys.append(ops.where(is_canon, key_i, (paths + 1) ** depth))
    return ops.argsort(ops.stack(keys, 2).reshape(batch, paths * levels), -1)


def traversal_child_weight(weight: Array, p_child: Array, q_child: Array) -> Array:
    """Weight of a child when its subtree is entered: min(1, w(u) p_u(c) / q_u(c)) from the
    parent's CURRENT weight and rows (after its earlier children were deleted)."""
    return ops.minimum(weight * ops.safe_div(p_child, q_child), 1)


def traversal_delete(weight: Array, p_row: Array, q_row: Array, deleted: Array
                     ) -> tuple[Array, Array, Array]:
    """The parent u's (weight [B], target row [B, V], draft row [B, V]) after a rejected child
    (deleted [B, V] one-hot of its token) is deleted: Z = sum (w p - q)_+, p <- (w p - q)_+ / Z,
    w <- Z / (Z + 1 - w), q <- q without the token, renormalised."""
    if isinstance(p_row, np.ndarray) and p_row.dtype == np.float64:  # the exact law's floats
        return _traversal_delete_float(weight, p_row, q_row, deleted)
    raw = ops.positive_part(weight[:, None] * p_row - q_row)
    mass = ops.total(raw, -1)
    removed = ops.where(deleted, 0, q_row)
    return (ops.safe_div(mass, mass + 1 - weight), ops.safe_div(raw, mass[:, None]),
            ops.safe_div(removed, ops.total(removed, -1, keepdim=True)))


def _traversal_delete_float(weight: np.ndarray, p_row: np.ndarray, q_row: np.ndarray,
                            deleted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """traversal_delete on numpy float64 rows in fewer [P, V] passes, the same values: a
    quotient with a zero denominator is 0 there as in ops.safe_div (the row (w p - q)_+ of
    mass 0 is all zeros, a q row of mass 0 after the deletion too, and mass + 1 - w = 0 only
    where mass = 0), so dividing by the denominator or 1 gives it."""
    raw = weight[:, None] * p_row
    raw -= q_row
    np.maximum(raw, 0.0, out=raw)
    mass = raw.sum(-1)
    raw /= np.where(mass != 0, mass, 1.0)[:, None]
    removed = np.where(deleted, 0.0, q_row)
    left = removed.sum(-1)
    removed /= np.where(left != 0, left, 1.0)[:, None]
    below = mass + 1 - weight
    return np.where(below != 0, mass / np.where(below != 0, below, 1.0), 0.0), raw, removed


def _traversal_exact(model: Any, paths: int) -> Any:
    return sibling_recursion(model, paths, traversal_child_weight, traversal_delete)


_traversal_exact.kind = "sibling recursion"
_traversal_exact.work = sibling_evaluations_bound


@register("traversal", "traversal verification (leaf-to-root, post-order DFS)", multipath=True,
          exact_law=_traversal_exact)
def traversal_law(tree: DraftTree) -> BlockLaw:
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    levels = depth + 1
    slots = paths * levels
    rows = ops.arange(batch, tokens)
    canon = canonical_paths(shared_prefix(tokens))  # [B, K, L+1]
    order = postorder(canon)  # [B, S]
    is_canon = (canon == ops.arange(paths, canon)[None, :, None]).reshape(batch, slots)
    # state of every slot (k, i) -> k (L+1) + i
    p_rows = target.reshape(batch, slots, vocab) * 1  # current target (residual) rows
    q_rows = ops.concat([draft, ops.zeros((batch, paths, 1, vocab), like=draft)], 2)
    q_rows = q_rows.reshape(batch, slots, vocab)
    is_root = (ops.arange(slots, tokens) % levels == 0)[None, :] & is_canon
    weight = ops.where(is_root, ops.ones((batch, slots), like=target),
                       ops.zeros((batch, slots), like=target))  # exact zeros on exact rows
    entered = is_root | False  # weight of the slot has been set
    stop = ops.zeros((batch, slots), like=target)
    correction = ops.zeros((batch, slots, vocab), like=target)
    reach = ops.ones((batch,), like=target)
    for step in range(slots):
        node = order[:, step]  # [B]
        path, level = node // levels, node % levels
        valid = is_canon[rows, node]
        # enter the subtrees on the way down: set weights from the parents' current rows
        for j in range(1, levels):
            child = canon[rows, path, j] * levels + j
            parent = canon[rows, path, j - 1] * levels + (j - 1)
            token = tokens[rows, path, j - 1]
            new = valid & (level >= j) & ~entered[rows, child]
            w = traversal_child_weight(weight[rows, parent], p_rows[rows, parent, token],
                                       q_rows[rows, parent, token])
            weight[rows, child] = ops.where(new, w, weight[rows, child])
            entered[rows, child] = entered[rows, child] | new
        # test the node
        a = ops.where(level == 0, ops.ones((batch,), like=target), weight[rows, node])
        a = ops.where(valid, a, 0)
        stop[rows, node] = ops.where(valid, reach * a, stop[rows, node])
        correction[rows, node] = ops.where(valid[:, None], p_rows[rows, node],
                                           correction[rows, node])
        reach = reach * (1 - a)
        # delete a rejected node: update its parent
        update = valid & (level >= 1)
        up = ops.maximum(level - 1, 0)
        parent = canon[rows, path, up] * levels + up
        token = tokens[rows, path, ops.minimum(up, depth - 1)]
        w_parent = weight[rows, parent]
        p_parent, q_parent = p_rows[rows, parent], q_rows[rows, parent]
        w_new, p_new, q_new = traversal_delete(w_parent, p_parent, q_parent, _one_hot(token, vocab))
        p_rows[rows, parent] = ops.where(update[:, None], p_new, p_parent)
        weight[rows, parent] = ops.where(update, w_new, w_parent)
        q_rows[rows, parent] = ops.where(update[:, None], q_new, q_parent)
    return BlockLaw(stop.reshape(batch, paths, levels),
                    correction.reshape(batch, paths, levels, vocab))
