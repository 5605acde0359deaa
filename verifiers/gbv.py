"""Greedy multi-path block verification (GBV; docs/theory.md section 9), law first.

GBV = "select one path with a strict greedy order, then run BV on it with the skewed
draft law of the selected path in place of q".

Key. At a node u every token x gets the key
    key_u(x) = (ratio_u(x), x),   ratio_u(x) = p(x|u)/q(x|u)   (min(1, p/q) when clipped),
higher is better, ties broken by the token id. The key is turned into ONE injective
integer, the rank of x in a stable ascending sort of ratio_u over the whole vocabulary
(stable: equal ratios keep token-id order). Selection (best drafted child) and the CDF
(below_u) both read that rank, so they cannot disagree (pitfall (a)). Tokens with
q(x|u) = 0 get ratio 0 (they are never drafted and carry no q-mass, so their place in
the order changes nothing).

Selection. From the root, move to the drafted child of highest rank among the paths
still through the current node: y* = y*_1..y*_L.

Skewed rows. With Lam (q-mass of the paths ranked below the current prefix) and Q (the
q-mass of the prefix), the law of the maximum of K i.i.d. paths gives
    r(x|u) = [(Lam + Q(b(x) + q(x)))^K - (Lam + Q b(x))^K] / [(Lam + Q)^K - Lam^K]
           = q(x) S(a(x), c(x)) / S(mu, nu),
    S(a, c) = sum_{j<K} (a + c)^j a^(K-1-j)           (factored power difference, pitfall (b))
with everything scaled by Lam + Q: mu = Lam/(Lam+Q), nu = Q/(Lam+Q) (mu + nu = 1, both
in [0, 1], neither under- nor overflows), a(x) = mu + nu b(x), c(x) = nu q(x), and
b(x) = below_u(x) the q-mass of tokens ranked below x. After choosing y*_i:
    mu' = (mu + nu b(y)) / (mu + nu (b(y) + q(y))),   nu' = nu q(y) / (mu + nu (b(y) + q(y))).
With K = 1, S = 1 and r = q exactly, so GBV is BV (bit for bit in floats).

Verification. `bv_path_law(y*, p rows along y*, r rows)`; the output mass is put on the
selected path k (whose prefix is y*). Lossless for i.i.d. drafting (the r rows are the
conditional law of y* under i.i.d. paths); NOT for drafting without replacement.

Why the rows are the law of y* and why BV against them is lossless: docs/theory.md Lemma 9.1
and Lemma 5.1; the scaled factored power difference: section 9.3.

Cost per depth, on the selected node's rows: ONE sort of the key (on the CPU a 1-D radix
sort per batch row), a gather of q into key order, its prefix sum, the skewed row evaluated
in key order and scattered back, and a few elementwise passes (gbv_selection); no host
synchronisation; the K path's correction rows are views of the selected path's.

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .law import BlockLaw, DraftTree, register
from .ops import torch  # imported on first use (ops._LazyTorch)
from .single_path import broadcast_paths, bv_path_law

Array = Any


def power_difference_sum(a: Array, c: Array, paths: int) -> Array:
    """S(a, c) = sum_{j<K} (a + c)^j a^(K-1-j), so (a+c)^K - a^K = c S(a, c).

    Horner form S_1 = 1, S_{m+1} = (a+c)^m + a S_m; elementwise, any shape. (a + c) is formed
    once, and S_2 = (a + c) + a directly (the same bits as 1 * (a + c) + a * 1).
    """
    if paths == 1:
        return a * 0 + 1
    step = a + c
    power = step
    total = step + a
    for _ in range(2, paths):
        power = power * step
        total = power + a * total
    return total


_PACKABLE = ("torch.float32", "torch.float16", "torch.bfloat16")  # dtypes by name: no torch import


def ratio_row(target_row: Array, draft_row: Array, clip: bool = False) -> Array:
    """p/q (0 where q = 0), min(1, p/q) when clipped; [B, V]. One fused pass on torch."""
    if ops.is_torch(draft_row):
        ratio = torch.where(draft_row > 0, target_row / draft_row, 0.0)
    else:
        ratio = ops.safe_div(target_row, draft_row)
    return ops.minimum(ratio, 1) if clip else ratio


def key_order(ratio: Array) -> Array:
    """[B, V] token ids in ascending key order, key = (ratio, token id).

    Generic: a stable ascending argsort of the ratio. Torch rows in float32/float16/bfloat16:
    the stable argsort of the ratio's float32 bit pattern (for a non-negative float the bit
    pattern is monotone in the value; + 0.0 turns -0.0 into 0.0), the same order, in one
    sort: on the CPU one 1-D sort of each row's bits as int64 (torch's 1-D stable integer
    sort is a radix sort, about 10x faster there than its batched sort of the same rows),
    elsewhere one batched sort.
    """
    if not (ops.is_torch(ratio) and str(ratio.dtype) in _PACKABLE):
        return ops.argsort(ratio, -1)
    bits = (ratio.float() + 0.0).view(torch.int32)
    if bits.device.type != "cpu":
        return torch.sort(bits, dim=-1, stable=True).indices
    wide = bits.to(torch.int64)
    if wide.shape[0] == 1:  # no stacking copy
        return _row_order(wide[0]).unsqueeze(0)
    return torch.stack([_row_order(row) for row in wide])


_SHARED_ORDERS: dict[tuple[int, ...], list[tuple[Any, Any]]] | None = None


class shared_key_orders:  # noqa: N801 - used as a context manager, like torch.no_grad
    """Within the block, key_order on the CPU sorts each distinct packed row once: a row
    equal (compared in full, so the order is the same bit for bit) to one sorted before in
    the block reuses its order. For callers that evaluate many laws on rows they share (the
    (K', L') cells of decode.scoring.score_grid). Not re-entrant across threads."""

    def __enter__(self) -> shared_key_orders:
        global _SHARED_ORDERS
        self.previous, _SHARED_ORDERS = _SHARED_ORDERS, {}
        return self

    def __exit__(self, *exc: Any) -> None:
        global _SHARED_ORDERS
        _SHARED_ORDERS = self.previous


def _row_order(row: Any) -> Any:
    """Stable ascending order of a packed row [..., V] (int64 bits) along its last dimension,
    through _SHARED_ORDERS."""
    memo = _SHARED_ORDERS
    if memo is None:
        return torch.sort(row, stable=True).indices
    if row.dim() > 1:  # rows of more than two dimensions: one order per innermost row
        return torch.stack([_row_order(part) for part in row])
    key = (int(row.shape[0]), int(row[0]), int(row[-1]), int(row.sum()))
    narrow = row.to(torch.int32)  # the float32 bits themselves (kept in the memo: 4 bytes each)
    for seen, order in memo.get(key, ()):
        if torch.equal(seen, narrow):
            return order
    order = torch.sort(row, stable=True).indices
    memo.setdefault(key, []).append((narrow, order))
    return order


def path_rows(rows: Array, batch_rows: Array, path: Array, i: int | None = None) -> Array:
    """rows[b, path[b], i] ([B, V]; i None: [B, L', V]) for rows [B, K, L', V]. Contiguous torch
    rows: one index_select of whole rows (a memcpy per row) instead of advanced indexing."""
    if ops.is_torch(rows) and rows.is_contiguous():
        batch, paths, length, vocab = rows.shape
        if i is None:
            return rows.reshape(batch * paths, length, vocab).index_select(
                0, batch_rows * paths + path)
        return rows.reshape(-1, vocab).index_select(0, (batch_rows * paths + path) * length + i)
    return rows[batch_rows, path] if i is None else rows[batch_rows, path, i]


def _unsort(values: Array, order: Array, out: Array) -> None:
    """out[b, order[b, j]] = values[b, j] (back from key order to token order), in place."""
    if ops.is_torch(values):
        out.scatter_(-1, order, values)
    else:
        np.put_along_axis(out, order, values, axis=-1)


def _exclusive_cumsum(sorted_row: Array) -> Array:
    """[B, V] sum of the entries before each position (0 first)."""
    if ops.is_torch(sorted_row):  # the prefix sums written in place, one position on
        out = torch.empty_like(sorted_row)
        out[:, 0] = 0
        if sorted_row.shape[0] == 1:
            torch.cumsum(sorted_row[:, :-1], -1, out=out[:, 1:])
        else:
            out[:, 1:] = torch.cumsum(sorted_row[:, :-1], -1)
        return out
    cumulative = ops.cumsum(sorted_row, -1)
    return ops.concat([cumulative[..., :1] * 0, cumulative[..., :-1]], -1)


def below_mass(draft_row: Array, ratio: Array) -> tuple[Array, Array]:
    """(below [B, V], rank [B, V]): q-mass of tokens ranked strictly below each token."""
    order = key_order(ratio)  # [B, V] token ids, lowest key first
    rank = ops.inverse_permutation(order, -1)
    exclusive = _exclusive_cumsum(ops.gather(draft_row, -1, order))
    return ops.gather(exclusive, -1, rank), rank


def skewed_row(draft_row: Array, below: Array, mu: Array, nu: Array, paths: int) -> Array:
    """r(.|u) [B, V] from q(.|u) [B, V], below_u [B, V] and the scaled state mu, nu [B]."""
    numerator = power_difference_sum(mu[:, None] + nu[:, None] * below, nu[:, None] * draft_row,
                                     paths)
    denominator = power_difference_sum(mu, nu, paths)
    return draft_row * numerator / denominator[:, None]


def gbv_selection(tree: DraftTree, clip: bool = False,
                  first_child_wins: bool = False) -> tuple[Array, Array]:
    """Greedy path and skewed rows.

    Returns (selected path index [B] (a path whose prefix is y*), r rows [B, L, V]).
    first_child_wins: the broken public-code rule (lowest path index among the children
    of maximal ratio), while the CDF still uses the token-id tie-break.

    Per depth, on the selected node's rows: one pass for the ratio, ONE sort of the key, a
    gather of q into key order, its exclusive prefix sum, the skewed row in key order (the
    factored power difference, K - 1 Horner steps) scattered back to token order, and one
    comparison pass for the chosen child's position (torch rows in 32-bit or narrower floats;
    other rows: the ranks by one scatter); no host synchronisation (the choice is an argmax
    on the device). Values are those of the per-token formula (elementwise, so computing it
    in key order changes no bit).
    """
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)  # [B, K, L]
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    rows = ops.arange(batch, tokens)
    id_bits = max(1, (vocab - 1).bit_length())
    selected = tokens[:, 0, 0] * 0  # [B] path carrying the current prefix
    alive = tokens[:, :, 0] == tokens[:, :, 0]  # [B, K] paths through the current prefix
    mu = ops.zeros((batch,), like=target)
    nu = ops.ones((batch,), like=target)
    skewed = ops.zeros((batch, depth, vocab), like=target)
    for i in range(depth):
        q_row = path_rows(draft, rows, selected, i)  # [B, V]
        ratio = ratio_row(path_rows(target, rows, selected, i), q_row, clip)
        order = key_order(ratio)  # [B, V] token ids, lowest key first
        q_sorted = ops.gather(q_row, -1, order)
        below_sorted = _exclusive_cumsum(q_sorted)
        children = tokens[:, :, i]  # [B, K]
        packed = ops.is_torch(ratio) and str(ratio.dtype) in _PACKABLE
        rank = None if packed else ops.inverse_permutation(order, -1)
        if first_child_wins:
            child_ratio = ops.gather(ratio, -1, children)
            masked = ops.where(alive, child_ratio, -1)
            best = masked.max(-1).values if ops.is_torch(masked) else masked.max(axis=-1)
            choice = ops.argmax(alive & (masked == best[:, None]), 1)
        elif packed:  # the key (ratio bits, id) of the children only, as one int64
            bits = (ops.gather(ratio, -1, children).float() + 0.0).view(torch.int32)
            key = (bits.to(torch.int64) << id_bits) | children
            choice = ops.argmax(ops.where(alive, key, -1), 1)
        else:
            child_rank = ops.gather(rank, -1, children)
            choice = ops.argmax(ops.where(alive, child_rank, -1), 1)
        token = children[rows, choice]  # [B]
        _unsort(skewed_row(q_sorted, below_sorted, mu, nu, paths), order, skewed[:, i])
        if packed:  # the chosen token's position in key order: one comparison pass
            place = ops.argmax(order == token[:, None], -1)[:, None]
        else:
            place = ops.take_rows(rank, token[:, None])  # [B, 1]
        below_y = ops.take_rows(below_sorted, place)[:, 0]
        q_y = ops.take_rows(q_sorted, place)[:, 0]
        scale = mu + nu * (below_y + q_y)
        mu, nu = (mu + nu * below_y) / scale, nu * q_y / scale
        alive = alive & (children == token[:, None])
        selected = choice
    return selected, skewed


def gbv_law(tree: DraftTree, clip: bool = False, first_child_wins: bool = False) -> BlockLaw:
    """Exact GBV law: BV on the greedy path with the skewed rows (see module docstring)."""
    selected, skewed = gbv_selection(tree, clip, first_child_wins)
    batch, paths, depth = tree.batch, tree.paths, tree.depth
    rows = ops.arange(batch, ops.index_like(tree.target_rows, tree.tokens))
    path_tokens = ops.index_like(tree.target_rows, tree.tokens)[rows, selected]  # [B, L]
    stop_path, correction_path = bv_path_law(path_tokens, path_rows(tree.target_rows, rows,
                                                                    selected), skewed)
    stop = ops.zeros((batch, paths, depth + 1), like=stop_path)
    stop[rows, selected] = stop_path
    # every path's rows are the selected path's (a view, no copy): a row may be anything where
    # stop is 0 (verifiers.law), and stop is 0 off the selected path
    return BlockLaw(stop, broadcast_paths(correction_path, paths))


@register("gbv", "greedy multi-path block verification, key (p/q, token id)", multipath=True,
          draft_sampling=("iid",), order_invariant=True)
def gbv(tree: DraftTree) -> BlockLaw:
    return gbv_law(tree, clip=False)


@register("gbv_clipped", "GBV with the key (min(1, p/q), token id) of the reference code",
          multipath=True, draft_sampling=("iid",), order_invariant=True)
def gbv_clipped(tree: DraftTree) -> BlockLaw:
    return gbv_law(tree, clip=True)


@register("gbv_broken", "BROKEN on purpose: clipped GBV whose selection takes the first "
          "drafted child among maximal ratios while the CDF breaks ties by token id",
          multipath=True, lossless=False)
def gbv_broken(tree: DraftTree) -> BlockLaw:
    return gbv_law(tree, clip=True, first_child_wins=True)
