"""Reference samplers in the engines' own layouts, and every mutant of engine_mutants.py
written again in each layout (numpy, vectorised over the batch, per draw: a second
implementation, independent of the exact laws).

    speclp audit --sampler examples/engine_layouts.py:vllm_reference --layout vllm --paths 1
    speclp audit --sampler examples/engine_layouts.py:sglang_reference --layout sglang

Layouts (speclp.proofs.layouts):

vllm     sampler(draft_token_ids [T], num_draft_tokens [B], draft_probs [T, V] or None,
         target_probs [T + B, V], rng) -> [B, max n + 1]. The reference is vLLM's documented
         rule: accept draft token x with probability min(1, p(x) / q(x)) (q one-hot at x when
         draft_probs is None), at the first rejection a token of (p - q)^+ normalised (p with x
         removed when draft_probs is None), after n acceptances the bonus token drawn from the
         request's last target row.
sglang   sampler(candidates, retrive_index, retrive_next_token, retrive_next_sibling,
         target_probs [B, N, V], draft_probs, threshold_single, threshold_acc, rng)
         -> [B, L + 1]. The reference is SGLang's documented target-only tree rule: at node
         `cur` draw one coin u; walk its children in sibling order accumulating their target
         probabilities; accept the first child with u <= acc / threshold_acc or
         p(token) >= threshold_single and descend; when none is accepted emit a token of
         p(. | cur) with the children's tokens removed (relu(p - q) with q holding the rejected
         children's p), and stop. With both thresholds 1 (the audit's flags) every emitted
         token has law p exactly, whatever the tree: lossless.

Mutants (MUTANT_NAMES, as in engine_mutants.py; the name in a layout is vllm_NAME and
sglang_NAME): row_shift, no_temperature, topk_draft_only (sglang: top-k on the acceptance
only, not the final sampling: per-path filters), topp_target_only, target_rows_overwritten
(vllm: the residual written into the caller's target rows before the test reads them;
sglang: a rejected child's probability zeroed in the caller's row before the next sibling's
accumulated probability is read from it), draft_probs_none_one_hot (vllm: only on the
draft-free batches; sglang: the rejected children not removed at recovery),
bonus_wrong_position, threshold_acceptance (the thresholds 0.6 / 0.8 used instead of the flags
given), typical_acceptance, ensemble_w09.
"""

from __future__ import annotations

import numpy as np

MUTANT_NAMES = ("row_shift", "no_temperature", "topk_draft_only", "topp_target_only",
                "target_rows_overwritten", "draft_probs_none_one_hot", "bonus_wrong_position",
                "threshold_acceptance", "typical_acceptance", "ensemble_w09")
TEMPERATURE, TOP_P, THRESHOLDS, W = 0.7, 0.8, (0.6, 0.8), 0.9
TYPICAL_EPSILON, TYPICAL_DELTA = 0.09, 0.3


def _normalise(rows: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    mass = rows.sum(-1, keepdims=True)
    return np.where(mass > 0, rows / np.where(mass > 0, mass, 1.0), fallback)


def _draw(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row (inverse CDF on the row's own total)."""
    cdf = np.cumsum(rows, -1)
    u = rng.random(len(rows))[:, None] * cdf[:, -1:]
    token = np.minimum((cdf <= u).sum(-1), rows.shape[-1] - 1)
    bad = rows[np.arange(len(rows)), token] <= 0  # rounding: move to the last positive entry
    last = rows.shape[-1] - 1 - np.argmax((rows > 0)[:, ::-1], -1)
    return np.where(bad, last, token)


def _top_k(rows: np.ndarray, k: int) -> np.ndarray:
    order = np.argsort(-rows, -1, kind="stable")
    keep = np.zeros(rows.shape, dtype=bool)
    np.put_along_axis(keep, order[..., :k], True, -1)
    return _normalise(np.where(keep, rows, 0.0), rows)


def _top_p(rows: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-rows, -1, kind="stable")
    ordered = np.take_along_axis(rows, order, -1)
    keep = np.zeros(rows.shape, dtype=bool)
    np.put_along_axis(keep, order, np.cumsum(ordered, -1) - ordered < top_p, -1)
    return _normalise(np.where(keep, rows, 0.0), rows)


def _tempered(rows: np.ndarray) -> np.ndarray:
    return _normalise(np.clip(rows, 0.0, None) ** TEMPERATURE, rows)


def _entropy(rows: np.ndarray) -> np.ndarray:
    safe = np.where(rows > 0, rows, 1.0)
    return -(np.where(rows > 0, rows * np.log(safe), 0.0)).sum(-1)


# ---------------------------------------------------------------------------
# vllm layout
# ---------------------------------------------------------------------------

def _vllm(draft_token_ids, num_draft_tokens, draft_probs, target_probs, rng, bug=None):
    counts = np.asarray(num_draft_tokens, dtype=np.int64)
    x = np.asarray(draft_token_ids, dtype=np.int64)
    target = np.asarray(target_probs, dtype=np.float64)  # the caller's array (not copied)
    batch, total = len(counts), len(x)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])  # first draft index of each request
    request = np.repeat(np.arange(batch), counts)
    position = np.arange(total) - starts[request]
    row = starts[request] + request + position  # target row of each draft position
    bonus_row = starts + np.arange(batch) + counts
    if bug == "row_shift":
        row, bonus_row = np.minimum(row + 1, len(target) - 1), np.minimum(bonus_row + 1,
                                                                          len(target) - 1)
    if bug == "bonus_wrong_position":
        bonus_row = bonus_row - 1
    p_all = target
    if bug == "no_temperature":
        p_all = _tempered(target)
    elif bug == "topp_target_only":
        p_all = _top_p(target, TOP_P)
    p = p_all[row]
    idx = np.arange(total)
    one_hot = draft_probs is None
    q = np.zeros_like(p) if one_hot else np.asarray(draft_probs, dtype=np.float64)
    if one_hot:
        q[idx, x] = 1.0
    if bug == "topk_draft_only" and not one_hot:
        q = _top_k(q, q.shape[-1] - 1)
    if bug == "ensemble_w09" and not one_hot:
        p = W * p + (1 - W) * q
    if bug == "target_rows_overwritten":
        target[row] = np.maximum(target[row] - q, 0.0)  # in place, in the caller's rows
        p = target[row]
    px, qx = p[idx, x], q[idx, x]
    ratio = np.where(qx > 0, np.minimum(1.0, px / np.where(qx > 0, qx, 1.0)), 0.0)
    if bug == "threshold_acceptance":
        ratio = np.where(px >= THRESHOLDS[0], 1.0, np.minimum(1.0, px / THRESHOLDS[1]))
    if bug == "typical_acceptance":
        ratio = (px > np.minimum(TYPICAL_EPSILON, TYPICAL_DELTA * np.exp(-_entropy(p)))) * 1.0
    accepted = rng.random(total) < ratio
    first_reject = counts.copy()
    rejected = np.flatnonzero(~accepted)
    np.minimum.at(first_reject, request[rejected], position[rejected])
    out = np.full((batch, int(counts.max()) + 1 if batch else 1), -1, dtype=np.int64)
    keep = position < first_reject[request]
    out[request[keep], position[keep]] = x[keep]
    stopped = first_reject < counts
    at = starts[stopped] + first_reject[stopped]
    if bug == "target_rows_overwritten":
        residual = _normalise(p[at], p_all[row[at]])
    elif bug == "typical_acceptance" or (bug == "draft_probs_none_one_hot" and one_hot):
        residual = p[at]
    elif bug == "threshold_acceptance":
        residual = p[at].copy()
        residual[np.arange(len(at)), x[at]] = 0.0
        residual = _normalise(residual, p[at])
    else:
        residual = _normalise(np.maximum(p[at] - q[at], 0.0), p[at])
    out[np.flatnonzero(stopped), first_reject[stopped]] = _draw(residual, rng)
    done = np.flatnonzero(~stopped)
    out[done, counts[done]] = _draw(p_all[bonus_row[done]], rng)
    return out


def vllm_reference(draft_token_ids, num_draft_tokens, draft_probs, target_probs, rng):
    """vLLM's rejection rule in its flat layout (lossless)."""
    return _vllm(draft_token_ids, num_draft_tokens, draft_probs, target_probs, rng)


# ---------------------------------------------------------------------------
# sglang layout
# ---------------------------------------------------------------------------

def _sglang(candidates, retrive_index, retrive_next_token, retrive_next_sibling, target_probs,
            draft_probs, threshold_single, threshold_acc, rng, bug=None):
    del retrive_index  # the arrays are per tree here; the flat index is not needed
    target = np.asarray(target_probs, dtype=np.float64)  # the caller's array (not copied)
    batch, size, vocab = target.shape
    if bug == "threshold_acceptance":
        threshold_single, threshold_acc = THRESHOLDS
    rows = np.arange(batch)
    cur = np.zeros(batch, dtype=np.int64)
    parent = np.zeros(batch, dtype=np.int64)
    depth = 0
    out = np.full((batch, size + 1), -1, dtype=np.int64)  # trimmed to the depth reached
    active = np.ones(batch, dtype=bool)
    while active.any():
        b = rows[active]
        node = cur[b]
        read = np.minimum(node + 1, size - 1) if bug == "row_shift" else node
        p = target[b, read]
        if bug == "no_temperature":
            p = _tempered(p)
        elif bug == "topp_target_only":
            p = _top_p(p, TOP_P)
        elif bug == "ensemble_w09":
            q = np.asarray(draft_probs, dtype=np.float64)[b, node]
            p = np.where(q.sum(-1, keepdims=True) > 0, W * p + (1 - W) * q, p)
        test = _top_k(p, vocab - 1) if bug == "topk_draft_only" else p
        u = rng.random(len(b))
        acc = np.zeros(len(b))
        chosen = np.full(len(b), -1, dtype=np.int64)
        removed = np.zeros((len(b), vocab), dtype=bool)
        child = np.asarray(retrive_next_token)[b, node]
        cut = np.minimum(TYPICAL_EPSILON, TYPICAL_DELTA * np.exp(-_entropy(p)))
        while (child >= 0).any():
            live = (child >= 0) & (chosen < 0)
            token = np.where(child >= 0, np.asarray(candidates)[b, np.maximum(child, 0)], 0)
            single = test[np.arange(len(b)), token]
            if bug == "target_rows_overwritten":  # acc re-read from the zeroed caller's row
                acc = np.where(live, single, acc)
            else:
                acc = acc + np.where(live, single, 0.0)
            if bug == "typical_acceptance":
                hit = live & (single > cut)
            else:
                hit = live & ((u <= acc / threshold_acc) | (single >= threshold_single))
            chosen = np.where(hit, child, chosen)
            miss = live & ~hit
            removed[np.flatnonzero(miss), token[miss]] = True
            if bug == "target_rows_overwritten":
                target[b[miss], node[miss], token[miss]] = 0.0  # in place
            child = np.where(child >= 0, np.asarray(retrive_next_sibling)[b, np.maximum(child, 0)],
                             -1)
        go = chosen >= 0
        out[b[go], depth] = np.asarray(candidates)[b[go], chosen[go]]
        stop = b[~go]
        if len(stop):
            final = p[~go]
            if bug == "bonus_wrong_position":
                leaf = np.asarray(retrive_next_token)[stop, cur[stop]] < 0
                final = np.where(leaf[:, None], target[stop, parent[stop]], final)
            if bug not in ("draft_probs_none_one_hot", "typical_acceptance"):
                final = _normalise(np.where(removed[~go], 0.0, final), final)
            out[stop, depth] = _draw(final, rng)
        parent[b[go]] = cur[b[go]]
        cur[b[go]] = chosen[go]
        active[stop] = False
        depth += 1
    return out[:, :depth]


def sglang_reference(candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                     target_probs, draft_probs, threshold_single, threshold_acc, rng):
    """SGLang's target-only tree rule in its layout (lossless with thresholds 1)."""
    return _sglang(candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                   target_probs, draft_probs, threshold_single, threshold_acc, rng)


def _make(layout: str, bug: str):
    if layout == "vllm":
        def sampler(draft_token_ids, num_draft_tokens, draft_probs, target_probs, rng):
            return _vllm(draft_token_ids, num_draft_tokens, draft_probs, target_probs, rng, bug)
    else:
        def sampler(candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                    target_probs, draft_probs, threshold_single, threshold_acc, rng):
            return _sglang(candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                           target_probs, draft_probs, threshold_single, threshold_acc, rng, bug)
    sampler.__name__ = f"{layout}_{bug}"
    sampler.__doc__ = f"BROKEN: {bug} in the {layout} layout (see the module docstring)."
    return sampler


MUTANTS = {(layout, bug): _make(layout, bug) for layout in ("vllm", "sglang")
           for bug in MUTANT_NAMES}
globals().update({f"{layout}_{bug}": fn for (layout, bug), fn in MUTANTS.items()})
