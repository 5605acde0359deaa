"""A serving-engine rejection sampler in the flat ragged layout, audited with no adapter.

    speclp audit --sampler examples/ragged_sampler.py:rejection_sample --layout ragged
    speclp audit --sampler examples/ragged_sampler.py:rejection_sample_fp8_ratio --layout ragged

The layout is the one serving engines use for the rejection sampler of a batch of requests,
each with its own number of draft tokens (one draft chain per request):

    draft_token_ids   int64  [T]      the draft tokens of all requests, concatenated
    num_draft_tokens  int64  [B]      draft tokens per request (T = their sum; may differ)
    draft_probs       float  [T, V]   q(. | the request's context and its earlier draft tokens)
    target_probs      float  [T, V]   p(. | the same prefix), one row per draft position
    bonus_token_ids   int64  [B]      a token drawn from p(. | all of the request's draft
                                      tokens), emitted when every draft token is accepted
    rng               numpy.random.Generator
    returns           int64  [B, max(num_draft_tokens) + 1]: the accepted draft tokens, then
                      the recovered (or bonus) token, padded with -1

`rejection_sample` is standard speculative sampling, vectorised over the flat arrays (no loop
over requests). `rejection_sample_fp8_ratio` has one bug of the kind serving code has had:
the acceptance ratio is computed from probabilities rounded to 3 significant bits
(a low-precision float, coarser than fp8 e4m3), while the recovery uses full precision.
"""

from __future__ import annotations

import numpy as np

PLACEHOLDER = -1


def _round(x: np.ndarray, bits: int) -> np.ndarray:
    mantissa, exponent = np.frexp(x)
    return np.ldexp(np.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


def _sample(draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, rng,
            ratio_bits=None):
    counts = np.asarray(num_draft_tokens, dtype=np.int64)
    batch, total = len(counts), len(draft_token_ids)
    width = int(counts.max()) + 1 if batch else 1
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    request = np.repeat(np.arange(batch), counts)  # [T] request of each draft position
    position = np.arange(total) - starts[request]  # [T] index within its request
    rows = np.arange(total)
    p = target_probs[rows, draft_token_ids]
    q = draft_probs[rows, draft_token_ids]
    if ratio_bits is not None:
        p, q = _round(p, ratio_bits), _round(q, ratio_bits)
    ratio = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)
    accepted = rng.random(total) < ratio
    # the first rejected position of each request (its count when none is rejected)
    first_reject = counts.copy()
    rejected = np.flatnonzero(~accepted)
    np.minimum.at(first_reject, request[rejected], position[rejected])
    out = np.full((batch, width), PLACEHOLDER, dtype=np.int64)
    keep = position < first_reject[request]
    out[request[keep], position[keep]] = draft_token_ids[keep]
    # recovered token at the first rejection: a draw from (p - q)^+ normalised
    stopped = first_reject < counts
    at = starts[stopped] + first_reject[stopped]
    residual = np.maximum(target_probs[at] - draft_probs[at], 0.0)
    mass = residual.sum(-1, keepdims=True)
    residual = np.where(mass > 0, residual / np.where(mass > 0, mass, 1.0), target_probs[at])
    cdf = np.cumsum(residual, -1)
    recovered = (cdf <= rng.random(len(at))[:, None] * cdf[:, -1:]).sum(-1)
    recovered = np.minimum(recovered, residual.shape[-1] - 1)
    out[np.flatnonzero(stopped), first_reject[stopped]] = recovered
    done = ~stopped
    out[np.flatnonzero(done), counts[done]] = np.asarray(bonus_token_ids)[done]
    return out


def rejection_sample(draft_token_ids, num_draft_tokens, draft_probs, target_probs,
                     bonus_token_ids, rng):
    """Standard speculative sampling over the flat ragged layout (lossless)."""
    return _sample(draft_token_ids, num_draft_tokens, draft_probs, target_probs,
                   bonus_token_ids, rng)


def rejection_sample_fp8_ratio(draft_token_ids, num_draft_tokens, draft_probs, target_probs,
                                bonus_token_ids, rng):
    """BROKEN: the acceptance ratio reads probabilities rounded to 3 significant bits."""
    return _sample(draft_token_ids, num_draft_tokens, draft_probs, target_probs,
                   bonus_token_ids, rng, ratio_bits=3)
