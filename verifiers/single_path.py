"""Single-path verifiers: token-level speculative sampling and block verification (BV).

Both read path 0 of the drafted tree (so they also serve as K-path baselines) and
return the exact law of (tau, Y) given the path (docs/theory.md sections 2.1, 2.2):

BV:   w_0 = 1, w_i = min(1, w_{i-1} p(X_i|X_<i) / q(X_i|X_<i))
      Z_i = sum_x (w_i p(x|X_1..i) - q(x|X_1..i))_+                (i < L)
      h_i = Z_i / (Z_i + 1 - w_i)  (i < L),  h_L = w_L
      P(tau = L) = h_L,  P(tau = i) = h_i prod_{j>i} (1 - h_j),
      P(tau = 0) = prod_{j>=1} (1 - h_j)
      Y ~ p(.|X_1..L) if tau = L, else proportional to (w_tau p(.|X_1..tau) - q(.|X_1..tau))_+
Token-level: a_i = min(1, p(X_i|X_<i)/q(X_i|X_<i)); P(tau = i) = a_1..a_i (1 - a_{i+1});
      Y ~ (p - q)_+ normalised at the first rejection, p(.|X_1..L) if all accepted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .law import BlockLaw, DraftTree, register
from .ops import torch  # imported on first use (ops._LazyTorch)

Array = Any


def residual_rows(weight: Array, target_rows: Array, draft_rows: Array, out: Array | None = None
                  ) -> tuple[Array, Array]:
    """Residual (w p - q)_+ and its mass Z.

    weight [...], target_rows/draft_rows [..., V] -> (normalised rows [..., V], Z [...]).
    A row whose mass is 0 is returned as zeros (it is never emitted). On torch: the raw row
    (built in place) divided by where(Z > 0, Z, 1), the same values as safe_div (a row of
    mass 0 is all zeros already) in fewer passes; out: write the rows there.
    """
    if ops.is_torch(target_rows):
        raw = (weight[..., None] * target_rows - draft_rows).clamp_min_(0)
        mass = raw.sum(-1)
        return torch.div(raw, torch.where(mass > 0, mass, 1.0)[..., None], out=out), mass
    raw = ops.positive_part(weight[..., None] * target_rows - draft_rows)
    mass = ops.total(raw, -1)
    return ops.safe_div(raw, mass[..., None]), mass


def broadcast_paths(rows: Array, paths: int) -> Array:
    """[B, ...] -> [B, K, ...] every path's copy of the rows, as a view (no copy): the law of a
    verifier that puts its mass on one path per batch row may give the other paths any rows
    (verifiers.law: a row may be anything where stop is 0)."""
    shape = (rows.shape[0], paths, *rows.shape[1:])
    if ops.is_torch(rows):
        return rows.unsqueeze(1).expand(shape)
    return np.broadcast_to(rows[:, None], shape)


def bv_path_law(tokens: Array, target_rows: Array, draft_rows: Array) -> tuple[Array, Array]:
    """Exact BV law on one path per batch row.

    tokens [B, L], target_rows [B, L+1, V], draft_rows [B, L, V] (the draft rows may be
    any 'draft' law along the path, e.g. GBV's skewed rows).
    Returns (stop [B, L+1], correction [B, L+1, V]).
    """
    depth = tokens.shape[-1]
    index = ops.index_like(draft_rows, tokens)[..., None]
    q_drafted = ops.gather(draft_rows, -1, index)[..., 0]  # [B, L]
    p_drafted = ops.gather(target_rows[:, :depth], -1, index)[..., 0]  # [B, L]
    ratio = ops.safe_div(p_drafted, q_drafted)
    weights = [ops.ones(q_drafted.shape[:1], like=q_drafted)]  # w_0 = 1
    for i in range(depth):
        weights.append(ops.minimum(weights[-1] * ratio[:, i], 1))
    stop_probs = []
    if ops.is_torch(target_rows):  # rows written in place: no stacking copy
        dtype = torch.promote_types(target_rows.dtype, draft_rows.dtype)
        correction = torch.empty(target_rows[:, : depth + 1].shape, dtype=dtype,
                                 device=target_rows.device)
    else:
        correction = None
        residuals = []
    for i in range(depth):
        if correction is None:
            row, mass = residual_rows(weights[i], target_rows[:, i], draft_rows[:, i])
            residuals.append(row)
        else:
            _, mass = residual_rows(weights[i], target_rows[:, i], draft_rows[:, i],
                                    out=correction[:, i])
        stop_probs.append(ops.safe_div(mass, mass + 1 - weights[i]))  # h_i
    if correction is None:
        residuals.append(target_rows[:, depth])
        correction = ops.stack(residuals, 1)
    else:
        correction[:, depth] = target_rows[:, depth]
    stop_probs.append(weights[depth])  # h_L = w_L
    # P(tau = i) = h_i prod_{j > i} (1 - h_j) for i >= 1, P(tau = 0) = prod_{j >= 1} (1 - h_j)
    stop = []
    survive = ops.ones(q_drafted.shape[:1], like=q_drafted)  # prod_{j > i} (1 - h_j)
    for i in range(depth, 0, -1):
        stop.append(stop_probs[i] * survive)
        survive = survive * (1 - stop_probs[i])
    stop.append(survive)
    stop.reverse()
    return ops.stack(stop, 1), correction


def token_path_law(tokens: Array, target_rows: Array, draft_rows: Array) -> tuple[Array, Array]:
    """Exact token-level law on one path per batch row (same shapes as bv_path_law)."""
    depth = tokens.shape[-1]
    index = ops.index_like(draft_rows, tokens)[..., None]
    q_drafted = ops.gather(draft_rows, -1, index)[..., 0]
    p_drafted = ops.gather(target_rows[:, :depth], -1, index)[..., 0]
    accept = ops.minimum(ops.safe_div(p_drafted, q_drafted), 1)  # [B, L]
    reached = ops.ones(q_drafted.shape[:1], like=q_drafted)
    stop, residuals = [], []
    for i in range(depth):
        stop.append(reached * (1 - accept[:, i]))
        row, _ = residual_rows(ops.ones(reached.shape, like=reached), target_rows[:, i],
                               draft_rows[:, i])
        residuals.append(row)
        reached = reached * accept[:, i]
    stop.append(reached)
    residuals.append(target_rows[:, depth])
    return ops.stack(stop, 1), ops.stack(residuals, 1)


def _on_first_path(path_law, tree: DraftTree) -> BlockLaw:
    stop0, correction0 = path_law(tree.tokens[:, 0], tree.target_rows[:, 0], tree.draft_rows[:, 0])
    batch, paths, depth = tree.tokens.shape
    stop = ops.zeros((batch, paths, depth + 1), like=stop0)
    stop[:, 0] = stop0
    return BlockLaw(stop, broadcast_paths(correction0, paths))  # stop is 0 off path 0


@register("bv", "block verification on the first drafted path (Sun et al.)", multipath=False)
def bv_law(tree: DraftTree) -> BlockLaw:
    return _on_first_path(bv_path_law, tree)


@register("token", "token-level speculative sampling on the first drafted path", multipath=False)
def token_law(tree: DraftTree) -> BlockLaw:
    return _on_first_path(token_path_law, tree)


def bv_stop_at_first_failure_path_law(tokens: Array, target_rows: Array,
                                      draft_rows: Array) -> tuple[Array, Array]:
    """A deliberately WRONG BV (docs/theory.md section 2.3): tests i = 1..L in order, stops at the
    first failure. Same h_i and residuals as BV; not lossless. Kept to prove the checks fail."""
    _, residuals = bv_path_law(tokens, target_rows, draft_rows)
    depth = tokens.shape[-1]
    index = ops.index_like(draft_rows, tokens)[..., None]
    q_drafted = ops.gather(draft_rows, -1, index)[..., 0]
    p_drafted = ops.gather(target_rows[:, :depth], -1, index)[..., 0]
    ratio = ops.safe_div(p_drafted, q_drafted)
    weight = ops.ones(q_drafted.shape[:1], like=q_drafted)
    passed = ops.ones(q_drafted.shape[:1], like=q_drafted)
    stop = []
    for i in range(1, depth + 1):
        weight = ops.minimum(weight * ratio[:, i - 1], 1)
        if i < depth:
            _, mass = residual_rows(weight, target_rows[:, i], draft_rows[:, i])
            h = ops.safe_div(mass, mass + 1 - weight)
        else:
            h = weight
        stop.append(passed * (1 - h))  # first failure at i: tau = i - 1
        passed = passed * h
    stop.append(passed)
    return ops.stack(stop, 1), residuals


@register("bv_first_failure", "BROKEN on purpose: BV that stops at the first failed test",
          multipath=False, lossless=False)
def bv_first_failure_law(tree: DraftTree) -> BlockLaw:
    return _on_first_path(bv_stop_at_first_failure_path_law, tree)
