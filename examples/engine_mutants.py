"""Losslessness bugs serving engines shipped (2025-2026), as mutants of one verifier, each with
its EXACT output law.

    speclp audit --sampler examples/engine_mutants.py:row_shift --paths 1

Every mutant is token-level speculative sampling on one draft chain (path 0 of the drafted
tree: accept X_i with probability min(1, p_i(X_i) / q_i(X_i)); at the first rejection emit a
token of the residual (p_i - q_i)^+ normalised; after L acceptances a bonus token of p_L) with
ONE change, written as a law function DraftTree -> BlockLaw (torch, float64; verifiers.law).
So `speclp.verifiers.exact.exact_result(model, MUTANTS[name], paths=1)` is the mutant's exact
output law on any instance and its TV from the target law is exact (no sampling), and
`SAMPLERS[name]` draws from that law (batched layout, examples/law_samplers.sampler_from_law).

Here p_i = p(. | the first i drafted tokens) is row i of the chain's target rows (i = 0..L),
q_i the draft row, X_i the drafted token. The patterns (the issue each is modelled on):

row_shift                   the target rows are read one position off (a wrong logits slice,
                            TensorRT-LLM #15098): position i uses p_{i+1}; the bonus p_L
no_temperature              the sampling temperature is not passed to the verifier: the target
                            law is p = softmax(z / T) (T = 0.7), the verifier uses softmax(z),
                            i.e. p^T renormalised, for the test, the residual and the bonus
topk_draft_only             top-k (k = V - 1) applied to the draft rows at verification but not
                            to the law the drafts were drawn from (SGLang #36173's pattern:
                            filters applied on one side only)
topp_target_only            top-p (0.8) applied to the target rows the verifier reads (test,
                            residual, bonus) but not to the target law
target_rows_overwritten     the residual (p - q)^+ is written into the target rows in place
                            before the acceptance test reads them (vllm-ascend #2881's pattern:
                            target probabilities zeroed in place by another step): the test
                            uses min(1, (p - q)^+(X) / q(X)); the recovery is right
draft_probs_none_one_hot    draft_probs=None on a draft-model path taken as one-hot (vLLM
                            #40149's pattern): the test accepts with p(X) (q one-hot at X) but
                            the recovery samples p itself, not p with X removed
bonus_wrong_position        off-by-one in accept / rollback: the bonus token after L acceptances
                            is drawn from p_{L-1} (the last draft position's row), not p_L
threshold_acceptance        SGLang-style thresholds (threshold_single 0.6, threshold_acc 0.8)
                            on the target-only rule: accept X when p(X) >= 0.6, else with
                            probability min(1, p(X) / 0.8); recovery from p with X removed
typical_acceptance          Medusa-style typical acceptance: accept X when
                            p(X) > min(0.09, 0.3 exp(-H(p))); at a rejection sample p
ensemble_w09                an ensemble verifier (DIVERSED): speculative sampling against
                            r = w p + (1 - w) q, w = 0.9 (each emitted token has law r; one
                            token's TV from p is (1 - w) TV(p, q)); lossy by design

And two lossless references (exact TV 0 on every instance; tests/test_testing.py):
reference                   the verifier itself
one_hot_reference           draft probabilities taken as one-hot WITH the matching recovery
                            (p with X removed): lossless for any draft law, so a missing
                            draft_probs is only a bug when the recovery does not match it
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
from speclp.proofs.config_law import chain_law
from speclp.verifiers.law import BlockLaw, DraftTree

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
from law_samplers import sampler_from_law  # noqa: E402

TEMPERATURE = 0.7
TOP_P = 0.8
THRESHOLD_SINGLE, THRESHOLD_ACC = 0.6, 0.8
TYPICAL_EPSILON, TYPICAL_DELTA = 0.09, 0.3
ENSEMBLE_W = 0.9


def _normalise(rows: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    mass = rows.sum(-1, keepdim=True)
    return torch.where(mass > 0, rows / mass.clamp_min(1e-300), fallback)


def _at(rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return rows.gather(-1, x[..., None])[..., 0]


def _top_k(rows: torch.Tensor, k: int) -> torch.Tensor:
    """rows kept on their k largest entries (ties: the lower token id first), renormalised."""
    order = torch.argsort(-rows, dim=-1, stable=True)
    keep = torch.zeros_like(rows, dtype=torch.bool).scatter(-1, order[..., :k], True)
    return _normalise(torch.where(keep, rows, torch.zeros_like(rows)), rows)


def _top_p(rows: torch.Tensor, top_p: float) -> torch.Tensor:
    """rows kept on the smallest set of largest entries whose mass reaches top_p."""
    order = torch.argsort(-rows, dim=-1, stable=True)
    sorted_rows = rows.gather(-1, order)
    before = sorted_rows.cumsum(-1) - sorted_rows  # mass of the larger entries
    keep = torch.zeros_like(rows, dtype=torch.bool).scatter(-1, order, before < top_p)
    return _normalise(torch.where(keep, rows, torch.zeros_like(rows)), rows)


def _tempered(rows: torch.Tensor, power: float) -> torch.Tensor:
    return _normalise(rows.clamp_min(0.0) ** power, rows)


def _standard(tree: DraftTree, p: torch.Tensor, q: torch.Tensor, bonus: torch.Tensor) -> BlockLaw:
    """Speculative sampling of path 0 reading target rows p [B, L, V] and draft rows q."""
    x = tree.tokens[:, 0]
    px, qx = _at(p, x), _at(q, x)
    accept = torch.where(qx > 0, torch.clamp(px / qx.clamp_min(1e-300), max=1.0),
                         torch.zeros_like(px))
    residual = _normalise(torch.clamp(p - q, min=0.0), p)
    return chain_law(tree, accept, residual, bonus)


def _rows(tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(P [B, L+1, V] target rows of path 0, Q [B, L, V] draft rows, X [B, L] tokens)."""
    return tree.target_rows[:, 0], tree.draft_rows[:, 0], tree.tokens[:, 0]


def _without_drafted(p: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """p with the drafted token's entry removed, renormalised (p itself if nothing is left)."""
    drop = torch.nn.functional.one_hot(x, p.shape[-1]).to(torch.bool)
    return _normalise(torch.where(drop, torch.zeros_like(p), p), p)


def reference(tree: DraftTree) -> BlockLaw:
    big_p, q, _ = _rows(tree)
    depth = q.shape[1]
    return _standard(tree, big_p[:, :depth], q, big_p[:, depth])


def one_hot_reference(tree: DraftTree) -> BlockLaw:
    big_p, q, x = _rows(tree)
    depth = q.shape[1]
    p = big_p[:, :depth]
    return chain_law(tree, _at(p, x), _without_drafted(p, x), big_p[:, depth])


def row_shift(tree: DraftTree) -> BlockLaw:
    big_p, q, _ = _rows(tree)
    depth = q.shape[1]
    return _standard(tree, big_p[:, 1 : depth + 1], q, big_p[:, depth])


def _target_seen_as(tree: DraftTree, seen: Callable[[torch.Tensor], torch.Tensor]) -> BlockLaw:
    """The standard law with the target rows (the bonus row too) as the engine sees them."""
    big_p, q, _ = _rows(tree)
    depth = q.shape[1]
    rows = seen(big_p)
    return _standard(tree, rows[:, :depth], q, rows[:, depth])


def no_temperature(tree: DraftTree) -> BlockLaw:
    return _target_seen_as(tree, lambda p: _tempered(p, TEMPERATURE))


def topk_draft_only(tree: DraftTree) -> BlockLaw:
    big_p, q, _ = _rows(tree)
    depth = q.shape[1]
    return _standard(tree, big_p[:, :depth], _top_k(q, q.shape[-1] - 1), big_p[:, depth])


def topp_target_only(tree: DraftTree) -> BlockLaw:
    return _target_seen_as(tree, lambda p: _top_p(p, TOP_P))


def target_rows_overwritten(tree: DraftTree) -> BlockLaw:
    big_p, q, x = _rows(tree)
    depth = q.shape[1]
    overwritten = torch.clamp(big_p[:, :depth] - q, min=0.0)  # (p - q)^+, in the rows' place
    rx, qx = _at(overwritten, x), _at(q, x)
    accept = torch.where(qx > 0, torch.clamp(rx / qx.clamp_min(1e-300), max=1.0),
                         torch.zeros_like(rx))
    return chain_law(tree, accept, _normalise(overwritten, big_p[:, :depth]), big_p[:, depth])


def draft_probs_none_one_hot(tree: DraftTree) -> BlockLaw:
    big_p, q, x = _rows(tree)
    depth = q.shape[1]
    p = big_p[:, :depth]
    return chain_law(tree, _at(p, x), p, big_p[:, depth])


def bonus_wrong_position(tree: DraftTree) -> BlockLaw:
    big_p, q, _ = _rows(tree)
    depth = q.shape[1]
    return _standard(tree, big_p[:, :depth], q, big_p[:, depth - 1])


def threshold_acceptance(tree: DraftTree) -> BlockLaw:
    big_p, q, x = _rows(tree)
    depth = q.shape[1]
    p = big_p[:, :depth]
    px = _at(p, x)
    accept = torch.where(px >= THRESHOLD_SINGLE, torch.ones_like(px),
                         torch.clamp(px / THRESHOLD_ACC, max=1.0))
    return chain_law(tree, accept, _without_drafted(p, x), big_p[:, depth])


def typical_acceptance(tree: DraftTree) -> BlockLaw:
    big_p, q, x = _rows(tree)
    depth = q.shape[1]
    p = big_p[:, :depth]
    entropy = -(torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p))).sum(-1)
    cut = torch.minimum(torch.full_like(entropy, TYPICAL_EPSILON),
                        TYPICAL_DELTA * torch.exp(-entropy))
    accept = (_at(p, x) > cut).to(p.dtype)
    return chain_law(tree, accept, p, big_p[:, depth])


def ensemble_law(w: float) -> Callable[[DraftTree], BlockLaw]:
    """The ensemble verifier's law: speculative sampling against r = w p + (1 - w) q."""

    def law(tree: DraftTree) -> BlockLaw:
        big_p, q, _ = _rows(tree)
        depth = q.shape[1]
        mixed = w * big_p[:, :depth] + (1 - w) * q
        return _standard(tree, mixed, q, big_p[:, depth])

    law.__name__ = f"ensemble(w={w:g})"
    return law


MUTANTS: dict[str, Callable[[DraftTree], BlockLaw]] = {
    "row_shift": row_shift,
    "no_temperature": no_temperature,
    "topk_draft_only": topk_draft_only,
    "topp_target_only": topp_target_only,
    "target_rows_overwritten": target_rows_overwritten,
    "draft_probs_none_one_hot": draft_probs_none_one_hot,
    "bonus_wrong_position": bonus_wrong_position,
    "threshold_acceptance": threshold_acceptance,
    "typical_acceptance": typical_acceptance,
    "ensemble_w09": ensemble_law(ENSEMBLE_W),
}
REFERENCES: dict[str, Callable[[DraftTree], BlockLaw]] = {
    "reference": reference, "one_hot_reference": one_hot_reference}
SAMPLERS = {name: sampler_from_law(law, name) for name, law in {**MUTANTS, **REFERENCES}.items()}
globals().update(SAMPLERS)  # each sampler is the module attribute of its name (for --sampler)
