"""One call for a serving engine's CI: is this sampler lossless (or exactly the lossy law it
claims)?

    from speclp.testing import assert_lossless

    def test_rejection_sampler_is_lossless():
        assert_lossless(my_rejection_sampler, layout="vllm", seed=0)

`assert_lossless` runs the sampler audit (speclp.proofs.audit.audit_sampler: anytime-valid
e-process tests of the emitted block, continued by target sampling, against the exact target
law, and of its block efficiency against the certified optimum, at one family-wise error
level) on `trials` instances of the audit's families with a budget of `runs` sampler runs per
instance and NO wall-clock limit, so the verdict is a function of (sampler, seed): a rerun with
the same seed draws the same drafts and hands the sampler the same generator. It returns the
audit's report when the sampler passes and raises AssertionError naming the instance, the
position (the first token of the block whose law is furthest off) and the statistic (e-value
against its threshold, empirical TV) when it fails, or when the sampler breaks its contract
(raises, exits, returns a malformed answer).

A lossless sampler fails with probability at most `alpha` (1e-3 by default) per call, whatever
its speed. A mode meant to be lossy is checked against its stated law instead: `law=` a law
function DraftTree -> BlockLaw (verifiers.law), e.g. `ensemble_law(w)` for an ensemble
verifier that samples exactly w p + (1 - w) q at every position; the efficiency test is then
off (a lossy law may exceed the lossless optimum).

Layouts (proofs.sandbox): "batched", "unbatched", "ragged", "vllm" (flat batch, per-request
draft counts, optional draft probabilities), "sglang" (a draft tree as retrieve-index /
next-token / next-sibling arrays with threshold flags).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .proofs.audit import MIXED, SAMPLER_ALPHA, audit_sampler
from .proofs.sandbox import SamplerFailed

RUNS = 100_000  # default sampler runs per instance (the budget)
TRIALS = 6  # default instances: one of each family of the mixed family
CHAIN_LAYOUTS = ("ragged", "vllm")  # one draft chain per request (K = 1)


def ensemble_law(w: float) -> Callable[..., Any]:
    """The law of an ensemble verifier (DIVERSED): token-level speculative sampling of path 0
    against r_i = w p_i + (1 - w) q_i at each drafted position i (accept X_i with probability
    min(1, r_i(X_i) / q_i(X_i)), at the first rejection a token of (r_i - q_i)^+ normalised),
    and after L acceptances a bonus token of p_L. Each emitted token at a drafted position has
    law r_i exactly; one token's TV from p_i is (1 - w) TV(p_i, q_i). w = 1 is lossless."""
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1:
        raise ValueError(f"w: must be a number in [0, 1], got {w!r}")
    from .proofs.config_law import chain_law
    from .verifiers.ops import torch

    def law(tree: Any) -> Any:
        big_p, q, x = tree.target_rows[:, 0], tree.draft_rows[:, 0], tree.tokens[:, 0]
        batch, depth = x.shape
        r = w * big_p[:, :depth] + (1 - w) * q
        rx = r.gather(-1, x[..., None])[..., 0]
        qx = q.gather(-1, x[..., None])[..., 0]
        accept = torch.where(qx > 0, torch.clamp(rx / qx.clamp_min(1e-300), max=1.0),
                             torch.zeros_like(rx))
        residual = torch.clamp(r - q, min=0.0)
        mass = residual.sum(-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp_min(1e-300), r)
        return chain_law(tree, accept, residual, big_p[:, depth])

    law.__name__ = f"ensemble_law({w:g})"
    return law


def assert_lossless(sampler: Callable[..., Any] | str, layout: str = "batched", *,
                    runs: int = RUNS, seed: int = 0, paths: int | None = None, vocab: int = 3,
                    depth: int = 2, trials: int = TRIALS, family: str = MIXED,
                    alpha: float = SAMPLER_ALPHA, law: Callable[..., Any] | None = None,
                    instances: list[Any] | None = None, name: str | None = None,
                    verbose: bool = False) -> dict[str, Any]:
    """Fail (AssertionError) unless the sampler's blocks follow the target law (or `law`).

    sampler: a function in `layout` (called in this process) or a 'FILE.py:FUNCTION' spec (run
    in a child process). runs: the budget, sampler runs per instance (no time limit: the
    verdict is deterministic in seed). paths: drafted paths K (default 1 for the chain layouts
    ragged / vllm, 2 otherwise). law: a stated lossy law (law function) the sampler claims to
    follow exactly. Returns the audit's report (proofs.audit.audit_sampler) on a pass; its
    "max_detectable_tv" is the TV the audit would have detected with probability 0.9.
    Raises ValueError for bad arguments (naming the field)."""
    label = name or (sampler if isinstance(sampler, str) else getattr(sampler, "__name__", "sampler"))
    if paths is None:
        paths = 1 if layout in CHAIN_LAYOUTS else 2
    law_name = getattr(law, "__name__", "the stated law") if law is not None else None
    try:
        report = audit_sampler(sampler, paths=paths, vocab=vocab, depth=depth, trials=trials,
                               runs=runs, seed=seed, alpha=alpha, instances=instances,
                               name=str(label), family=family, layout=layout, time_limit=None,
                               law=law, law_name=law_name, verbose=verbose)
    except SamplerFailed as err:
        where = f" (at {err.where})" if err.where else ""
        raise AssertionError(f"sampler {label} broke its contract: {err}{where} "
                             f"[kind {err.kind}; seed {seed}]") from None
    if not report["passed"]:
        claim = "lossless" if law is None else f"exactly {law_name}"
        lines = "\n  ".join(report["failures"])
        raise AssertionError(
            f"sampler {label} is not {claim} (layout {layout}, K = {paths}, V = {vocab}, "
            f"L = {depth}, seed {seed}, {runs:,} runs per instance, family-wise level {alpha:g}):"
            f"\n  {lines}")
    return report
