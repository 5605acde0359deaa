"""The one-step (L = 1) K-path optimum in closed form, at any vocabulary size.

At depth 1 the information-agnostic optimum is a minimum cut (Hu et al. 2025, "Towards
optimal multi-draft speculative decoding", arXiv 2502.18779): with D the random set of
the K drafted tokens and H ranging over the subsets of the vocabulary,

    alpha* = min_H [ p(H) + 1 - Q(H) ],     Q(H) = P(D is inside H),
    optimum E[tau + 1] = 1 + alpha*.

This is docs/theory.md Theorem 8.2 (a self-contained proof, for any draft law; the
minimum-cut formula is Hu et al.'s). tests/test_closed_form.py checks it against the
certified LP exactly, in rationals.

i.i.d. drafts: Q(H) = q(H)^K, and the minimum is attained at a THRESHOLD set: H = the
first k tokens in the order of increasing p/q (tokens with q = 0 last), k = 0..V
(docs/theory.md section 8.3: the separation lemma of speclp.lp.hitting, applied to
B = the complement of H, which is how it is computed: threshold_scores with values p).
So alpha* costs one sort and two cumulative sums: O(V log V), batched over rows [B, V] in
float64, or exact in rationals. ONE implementation:
speclp.verifiers.single_step.threshold_optimum (written against verifiers/ops.py, so the
verifiers' single-step rule runs the same code on torch rows); this module calls it on
numpy rows (torch is not imported).

Drafts without replacement (docs/theory.md section 8.4): Q(H) is NOT a function of q(H).
Whether threshold sets still attain the minimum is open (they do if an exchange inequality
holds; it held on every case of 3,000 random draft rows, and no H beating every threshold
set was found in 100,000 random instances, V = 3..6, nor by an adversarial local search:
tests/test_closed_form.py). So the exact minimum is taken over all 2^V subsets
(speclp.lp.hitting.HittingFunction), refused above MAX_ENUMERATED_VOCAB tokens, and every
result records whether a threshold set attains it (threshold_attains): a counterexample
would show there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..verifiers import single_step
from ..verifiers.drafts import DRAFT_SAMPLING
from .hitting import MAX_ENUMERATED_GROUND, HittingFunction, threshold_scores
from .program import exact_fraction

MAX_ENUMERATED_VOCAB = MAX_ENUMERATED_GROUND  # without replacement: 2^V subsets enumerated


@dataclass
class ThresholdOptimum:
    """The L = 1 optimum of a batch of rows (module docstring).

    acceptance [B]: alpha* = min_H p(H) + 1 - Q(H) (float64; exact rows: object array of
    Fractions); value [B] = 1 + acceptance (E[tau + 1]); size [B] int64: the number of
    tokens of the optimal H; order [B, V] int64 (iid): the tokens by p/q increasing (tokens
    with q = 0 = p first, tokens with q = 0 < p last), so that the optimal H of row b is
    order[b, :size[b]] (threshold_set(b)). Without replacement H need not be a threshold
    set: order is None and sets [B] holds each optimal H as a sorted tuple.
    """

    acceptance: np.ndarray
    value: np.ndarray
    size: np.ndarray
    order: np.ndarray | None
    paths: int
    draft_sampling: str
    exact: bool
    sets: list[tuple[int, ...]] | None = None
    threshold_attains: list[bool] | None = None

    def threshold_set(self, row: int = 0) -> np.ndarray:
        """[k] the tokens of the optimal H of one row."""
        if self.sets is not None:
            return np.array(self.sets[row], dtype=np.int64)
        return self.order[row, : self.size[row]]


def _as_rows(rows: Any) -> np.ndarray:
    rows = np.asarray(rows)
    return rows[None, :] if rows.ndim == 1 else rows


def one_step_optimum(target: Any, draft: Any, paths: int | Sequence[int] = 1,
                     draft_sampling: str = "iid"
                     ) -> ThresholdOptimum | list[ThresholdOptimum]:
    """alpha* and the optimal H for target rows p and draft rows q (module docstring).

    target, draft: [V] or [B, V]; float64 (numpy) or exact (object arrays of Fractions,
    then every number is exact). Rows are used as given (each should sum to 1).
    paths: K, or a sequence of K values (returns one result per K).
    draft_sampling "iid": O(B V log V) at any V. "without-replacement": exact enumeration
    of the 2^V subsets; ValueError above MAX_ENUMERATED_VOCAB tokens.
    """
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    many = not isinstance(paths, int | np.integer)
    ks = [int(k) for k in (paths if many else [paths])]
    if any(k < 1 for k in ks):
        raise ValueError(f"paths must be >= 1, got {ks}")
    p, q = _as_rows(target), _as_rows(draft)
    if p.shape != q.shape or p.ndim != 2:
        raise ValueError(f"target and draft must both be [V] or [B, V], got {p.shape} and {q.shape}")
    if p.dtype == object or q.dtype == object:
        p = np.array([[exact_fraction(x) for x in row] for row in p], dtype=object)
        q = np.array([[exact_fraction(x) for x in row] for row in q], dtype=object)
    else:
        p, q = p.astype(np.float64), q.astype(np.float64)
    if draft_sampling == "iid":
        order = None  # one sort for every K
        out = []
        for k in ks:
            out.append(_iid(p, q, k, order))
            order = out[-1].order[:, ::-1]
    else:
        out = [_without_replacement(p, q, k) for k in ks]
    return out if many else out[0]


def _iid(p: np.ndarray, q: np.ndarray, paths: int,
         order: np.ndarray | None = None) -> ThresholdOptimum:
    """alpha* = 1 + min_B [g(q(B)) - p(B)] over the prefixes B of the separation order
    (B = the complement of H: the tokens of LARGEST p/q first), g(s) = 1 - (1 - s)^K."""
    batch, vocab = p.shape
    # the one implementation of the threshold structure (the largest minimising B)
    acceptance, best, order = single_step.threshold_optimum(p, q, paths, order)
    best, exact = np.asarray(best, dtype=np.int64), p.dtype == object
    h_first = order[:, ::-1].copy()  # H = the last V - k of the separation order
    return ThresholdOptimum(acceptance, acceptance + 1, (vocab - best).astype(np.int64), h_first,
                            paths, "iid", exact)


def _without_replacement(p: np.ndarray, q: np.ndarray, paths: int) -> ThresholdOptimum:
    """alpha* = 1 + min over ALL sets B of [f(B) - p(B)] with f the hitting function of the
    K tokens drawn without replacement (2^V subsets enumerated); H = the complement of B."""
    batch, vocab = p.shape
    if vocab > MAX_ENUMERATED_VOCAB:
        raise ValueError(
            f"draft_sampling without-replacement: the one-step optimum is a submodular "
            f"minimisation over the 2^{vocab} token sets (threshold sets do not always attain "
            f"it); exact enumeration is limited to {MAX_ENUMERATED_VOCAB} tokens. Use iid "
            "drafting, or the column-generation engine (speclp.lp.optimum) for small K")
    exact = p.dtype == object
    acceptance, sets, attains = [], [], []
    orders, _ = threshold_scores(p, q, paths)  # the separation orders (values p)
    for b in range(batch):
        hitting = HittingFunction.of_token_law(q[b], paths, "without-replacement")
        masks, scores = hitting.slacks(p[b], exact)  # every B: f(B) - p(B)
        best = min(range(len(scores)), key=lambda i, scores=scores: (scores[i], -i))
        complement = [t for t in range(vocab) if not masks[best] >> t & 1]
        acceptance.append(1 + scores[best])
        sets.append(tuple(complement))
        prefix, threshold_masks = 0, [0]
        for t in orders[b]:
            prefix |= 1 << int(t)
            threshold_masks.append(prefix)
        attains.append(bool(min(scores[m] for m in threshold_masks) == scores[best]))
    acceptance_arr = np.array(acceptance, dtype=object if exact else np.float64)
    return ThresholdOptimum(acceptance_arr, acceptance_arr + 1,
                            np.array([len(h) for h in sets], dtype=np.int64), None, paths,
                            "without-replacement", exact, sets, attains)
