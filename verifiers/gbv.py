"""Greedy multi-path block verification (GBV; THEORY.md section 4), law first.

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

Cost: one stable sort of a [B, V] row per depth, O(B L V log V).

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .law import BlockLaw, DraftTree, register
from .ops import torch  # imported on first use (ops._LazyTorch)
from .single_path import bv_path_law

Array = Any


def power_difference_sum(a: Array, c: Array, paths: int) -> Array:
    """S(a, c) = sum_{j<K} (a + c)^j a^(K-1-j), so (a+c)^K - a^K = c S(a, c).

    Horner form S_1 = 1, S_{m+1} = (a+c)^m + a S_m; elementwise, any shape.
    """
    total = a * 0 + 1
    power = a * 0 + 1
    for _ in range(1, paths):
        power = power * (a + c)
        total = power + a * total
    return total


_PACKABLE = ("torch.float32", "torch.float16", "torch.bfloat16")  # dtypes by name: no torch import


def key_order(ratio: Array) -> Array:
    """[B, V] token ids in ascending key order, key = (ratio, token id).

    Generic: a stable ascending argsort of the ratio. Fast path for torch rows in
    float32/float16/bfloat16: the ratio (>= 0) as float32 bits and the token id are
    packed into one int64 (bits << id_bits | id), whose plain sort IS the key order (the
    bit pattern of a non-negative float is monotone in its value); on the CPU the sort of
    those int64 values runs in numpy, which is about 2x faster here than torch's sort.
    """
    vocab = ratio.shape[-1]
    if not (ops.is_torch(ratio) and str(ratio.dtype) in _PACKABLE):
        return ops.argsort(ratio, -1)
    id_bits = max(1, (vocab - 1).bit_length())
    bits = (ratio.float() + 0.0).view(torch.int32).to(torch.int64)  # + 0.0: no -0.0
    packed = (bits << id_bits) | torch.arange(vocab, device=ratio.device)
    if packed.device.type == "cpu":
        ordered = torch.from_numpy(np.sort(packed.numpy(), axis=-1))
    else:
        ordered = torch.sort(packed, dim=-1).values
    return ordered & ((1 << id_bits) - 1)


def below_mass(draft_row: Array, ratio: Array) -> tuple[Array, Array]:
    """(below [B, V], rank [B, V]): q-mass of tokens ranked strictly below each token."""
    order = key_order(ratio)  # [B, V] token ids, lowest key first
    rank = ops.inverse_permutation(order, -1)
    q_sorted = ops.gather(draft_row, -1, order)
    cumulative = ops.cumsum(q_sorted, -1)
    exclusive = ops.concat([cumulative[..., :1] * 0, cumulative[..., :-1]], -1)
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
    """
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)  # [B, K, L]
    batch, paths, depth = tree.batch, tree.paths, tree.depth
    rows = ops.arange(batch, tokens)
    selected = tokens[:, 0, 0] * 0  # [B] path carrying the current prefix
    alive = tokens[:, :, 0] == tokens[:, :, 0]  # [B, K] paths through the current prefix
    mu = ops.zeros((batch,), like=target)
    nu = ops.ones((batch,), like=target)
    skewed = []
    for i in range(depth):
        p_row = target[rows, selected, i]  # [B, V]
        q_row = draft[rows, selected, i]
        ratio = ops.safe_div(p_row, q_row)
        if clip:
            ratio = ops.minimum(ratio, 1)
        below, rank = below_mass(q_row, ratio)
        children = tokens[:, :, i]  # [B, K]
        if first_child_wins:
            child_ratio = ops.gather(ratio, -1, children)
            masked = ops.where(alive, child_ratio, -1)
            best = masked.max(-1).values if ops.is_torch(masked) else masked.max(axis=-1)
            choice = ops.argmax(alive & (masked == best[:, None]), 1)
        else:
            child_rank = ops.gather(rank, -1, children)
            choice = ops.argmax(ops.where(alive, child_rank, -1), 1)
        token = children[rows, choice]  # [B]
        skewed.append(skewed_row(q_row, below, mu, nu, paths))
        below_y = below[rows, token]
        q_y = q_row[rows, token]
        scale = mu + nu * (below_y + q_y)
        mu, nu = (mu + nu * below_y) / scale, nu * q_y / scale
        alive = alive & (children == token[:, None])
        selected = choice
    return selected, ops.stack(skewed, 1)


def gbv_law(tree: DraftTree, clip: bool = False, first_child_wins: bool = False) -> BlockLaw:
    """Exact GBV law: BV on the greedy path with the skewed rows (see module docstring)."""
    selected, skewed = gbv_selection(tree, clip, first_child_wins)
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    rows = ops.arange(batch, ops.index_like(tree.target_rows, tree.tokens))
    path_tokens = ops.index_like(tree.target_rows, tree.tokens)[rows, selected]  # [B, L]
    stop_path, correction_path = bv_path_law(path_tokens, tree.target_rows[rows, selected],
                                             skewed)
    stop = ops.zeros((batch, paths, depth + 1), like=stop_path)
    correction = ops.zeros((batch, paths, depth + 1, vocab), like=correction_path)
    stop[rows, selected] = stop_path
    correction[rows, selected] = correction_path
    return BlockLaw(stop, correction)


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
