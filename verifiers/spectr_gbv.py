"""SpecTr-GBV (Lin, Sheng, Cai, Zhou, arXiv 2604.25925, 2026), law first.

Source: the paper's claim and the released code (github junemily/SpecTr-GBV,
src/engine.py, `Decoding.speculative_decoding`); the rule below is the code's behaviour,
re-derived and written here from its description (no code copied). "GBV" there is Sun et
al.'s greedy block verification, not this toolkit's `gbv`.

Notation (target P, draft Q; the code's "b" = big = target and "s" = small = draft):
for a node z, P(z) and Q(z) are its target and draft path probabilities,
    rho(z) = min(1, Q(z)/P(z))   (1 when P(z) = 0 and Q(z) > 0, 0 when Q(z) = 0),
    phi(z) = P(z) (1 - rho(z))^K,     psi(z) = P(z) (1 - (1 - rho(z))^K),
with K the number of drafted paths ("candidates").
Tests. A prefix z of length l < L is accepted w.p.
    h(z) = [sum_t phi(z t) - phi(z)] / [1 - (1 - Q(z))^K - sum_t psi(z t)]   (clipped to [0, 1];
           a zero denominator gives 1 when the numerator is > 0, else 0),
a full path z (l = L) w.p.  h_L(z) = psi(z) / (1 - (1 - Q(z))^K).
Order. Candidates j = 0..K-1 in turn; a = current accepted length (0 at the start).
Candidate j tests its own prefixes of lengths a+1, ..., L-1 in increasing order (a moves
up on every acceptance, the selected candidate becomes j), skipping a prefix that an
earlier candidate already tested (the code's `seen_prefixes`; an earlier candidate with
the same prefix of that length always tested and rejected it, so the skip is "j is not
the lowest path with this prefix"); then it tests its full path (never skipped): on
acceptance the block is that path and verification ends. The accepted prefix of a later
candidate need not extend an earlier one: the block is the selected candidate's prefix.
Correction. If the accepted length a < L, with z the selected candidate's prefix of
length a (the root when nothing was accepted), Y ∝ P(z t) (1 - rho(z t)^K) (the code's
`1 - min(.,1) ** K`: the power binds before the minus); if a = L, Y ~ p(.|z) (bonus).

The paper claims this attains the optimal expected acceptance length under i.i.d.
drafting, E[tau] = sum_{t=1..L} sum_{|z|=t} psi(z) (`claimed_expected_accepted`). Both the
losslessness and that value are checked by this toolkit, not assumed: the audit and the
gap command report what they find (README findings). Registered with lossless=False and
no draft law it is lossless under (draft_sampling=()), because the exact law is lossy,
already with K = 1 at L = 2 and with K = 2 at L = 1 (tests/test_baselines.py): `gap`
reports it without holding it to the claims, and `audit` fails it.

Undefined steps. Where every child z t has Q(z t) >= P(z t) (rho = 1), the correction row
P(z t)(1 - rho^K) is all zero: the released rule has no token to emit when it stops at z
(the code would sample from a zero vector). The law function returns a zero correction row
there, so the law has mass < 1; it is registered may_be_undefined, and the exact law reports
the configurations and the mass where it is undefined (verifiers.exact.ExactResult), which
`gap` prints instead of a block efficiency.

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .law import BlockLaw, DraftTree, register
from .multipath import canonical_paths, shared_prefix

Array = Any


def _power(base: Array, exponent: int) -> Array:
    out = base * 0 + 1
    for _ in range(exponent):
        out = out * base
    return out


def _capped_ratio(draft_mass: Array, target_mass: Array) -> Array:
    """rho = min(1, Q/P); 1 where P = 0 < Q, 0 where Q = 0."""
    ratio = ops.minimum(ops.safe_div(draft_mass, target_mass), 1)
    return ops.where((target_mass == 0) & (draft_mass > 0), ratio * 0 + 1, ratio)


def _clip_unit(a: Array) -> Array:
    return ops.minimum(ops.maximum(a, 0), 1)


def spectr_gbv_tests(tree: DraftTree) -> tuple[Array, Array, Array]:
    """(h [B, K, L+1], residual [B, K, L+1, V], path mass P [B, K, L+1]).

    h[:, k, l] is the acceptance probability of path k's prefix of length l (l = 1..L;
    h[:, :, 0] = 0); residual[:, k, l] the correction row at that prefix (l < L), the
    target row at l = L.
    """
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    paths, depth = tree.paths, tree.depth
    p_drafted, q_drafted = tree.drafted_probabilities()  # [B, K, L]
    one = ops.ones(p_drafted.shape[:2], like=p_drafted)  # [B, K]
    target_mass, draft_mass = [one], [one]
    for i in range(depth):
        target_mass.append(target_mass[-1] * p_drafted[:, :, i])
        draft_mass.append(draft_mass[-1] * q_drafted[:, :, i])
    tests = [one * 0]
    residuals = []
    for length in range(depth + 1):
        big, small = target_mass[length], draft_mass[length]  # [B, K]
        if length < depth:
            child_big = big[..., None] * target[:, :, length]  # [B, K, V]
            child_small = small[..., None] * draft[:, :, length]
            child_rho = _capped_ratio(child_small, child_big)
            raw = ops.positive_part(child_big * (1 - _power(child_rho, paths)))
            residuals.append(ops.safe_div(raw, ops.total(raw, -1, keepdim=True)))
        else:
            residuals.append(target[:, :, depth])
        if length == 0:
            continue
        rho = _capped_ratio(small, big)
        drafted_somewhere = 1 - _power(1 - small, paths)
        if length == depth:
            tests.append(_clip_unit(ops.safe_div(big * (1 - _power(1 - rho, paths)),
                                                 drafted_somewhere)))
            continue
        numerator = (ops.total(child_big * _power(1 - child_rho, paths), -1)
                     - big * _power(1 - rho, paths))
        denominator = drafted_somewhere - ops.total(child_big * (1 - _power(1 - child_rho, paths)),
                                                    -1)
        h = ops.where(denominator > 0, ops.safe_div(numerator, denominator),
                      ops.where(numerator > 0, one, one * 0))
        tests.append(_clip_unit(h))
    del tokens
    return ops.stack(tests, 2), ops.stack(residuals, 2), ops.stack(target_mass, 2)


def spectr_gbv_law(tree: DraftTree) -> BlockLaw:
    """Exact law of the released SpecTr-GBV rule (module docstring)."""
    tokens = ops.index_like(tree.target_rows, tree.tokens)
    batch, paths, depth = tree.batch, tree.paths, tree.depth
    tests, residuals, _ = spectr_gbv_tests(tree)
    canon = canonical_paths(shared_prefix(tokens))  # [B, K, L+1]
    lowest = canon == ops.arange(paths, canon)[None, :, None]  # path k is the lowest with its prefix
    # state[l][k]: P(still verifying, accepted length l, selected candidate k), l < L
    zero = tests[:, 0, 0] * 0
    state = [[zero for _ in range(paths)] for _ in range(depth)]
    state[0][0] = zero + 1
    full = [zero for _ in range(paths)]  # P(block = full path k)
    for j in range(paths):
        for length in range(1, depth):
            h = ops.where(lowest[:, j, length], tests[:, j, length], zero)
            moved = zero
            for a in range(length):
                for k in range(paths):
                    moved = moved + state[a][k] * h
                    state[a][k] = state[a][k] * (1 - h)
            state[length][j] = state[length][j] + moved
        h_full = tests[:, j, depth]
        for a in range(depth):
            for k in range(paths):
                full[j] = full[j] + state[a][k] * h_full
                state[a][k] = state[a][k] * (1 - h_full)
    stop = ops.stack([ops.stack([state[a][k] for a in range(depth)] + [full[k]], 1)
                      for k in range(paths)], 1)  # [B, K, L+1]
    del batch
    return BlockLaw(stop, residuals)


def claimed_expected_accepted(target_nodes: np.ndarray, draft_nodes: np.ndarray,
                              depths: np.ndarray, paths: int) -> Any:
    """The paper's claimed optimum E[tau] = sum over nodes z of depth 1..L of psi(z).

    target_nodes, draft_nodes: [N] path probabilities P(z), Q(z) of every node (shortlex,
    root included; float64 or exact); depths [N]. Exact when the inputs are.
    """
    keep = depths >= 1
    big, small = target_nodes[keep], draft_nodes[keep]
    rho = _capped_ratio(small, big)
    return ops.total(big * (1 - _power(1 - rho, paths)), 0)


@register("spectr_gbv", "SpecTr-GBV (Lin et al. 2026) as released: multi-draft greedy block "
          "verification with path-probability tests (LOSSY by the audit)", multipath=True,
          lossless=False, draft_sampling=(), may_be_undefined=True)
def spectr_gbv(tree: DraftTree) -> BlockLaw:
    return spectr_gbv_law(tree)
