"""Losslessness audit of a registered verifier over random small instances.

For each trial an instance is drawn (Dirichlet rows with a random concentration, or a
`ties_instance` with many equal ratios p/q), every ordered draft configuration is
enumerated, and the verifier's exact output law, continued by target sampling to
depth L+1, is compared with the target law in total variation (verifiers.exact).
A lossless verifier has TV 0; the audit passes when the largest TV over the trials is
at most `tolerance` (1e-12; float64 rounding stays far below it on these sizes).

    audit("gbv", paths=3, vocab=3, depth=2, trials=20, ties=True)
    -> {"verifier": "gbv", ..., "max_tv": 2e-16, "passed": True, "worst_instance": {...}}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..lp.instance import Instance, dirichlet_instance, ties_instance
from ..verifiers.exact import DRAFT_SAMPLING, exact_result
from ..verifiers.law import get_verifier

TOLERANCE = 1e-12
ALPHAS = (0.2, 0.5, 1.0, 3.0)  # Dirichlet concentrations drawn per trial (ties=False)
MAX_CONFIGURATIONS = 2_000_000  # ordered draft configurations per instance


def audit_instance(vocab: int, depth: int, trial: int, ties: bool, seed: int = 0) -> Instance:
    """The instance of one audit trial (deterministic in (seed, trial))."""
    rng = np.random.default_rng([seed, trial])
    instance_seed = int(rng.integers(2**31))
    if ties:
        return ties_instance(vocab, depth, seed=instance_seed)
    alpha = float(ALPHAS[int(rng.integers(len(ALPHAS)))])
    return dirichlet_instance(vocab, depth, alpha=alpha, seed=instance_seed)


def audit(verifier: str, paths: int, vocab: int, depth: int, trials: int, ties: bool,
          seed: int = 0, draft_sampling: str = "iid",
          progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
          exact: bool = False) -> dict[str, Any]:
    """Audit a verifier's losslessness on `trials` random instances.

    paths K, vocab V, depth L: the instance sizes ((V^L)^K ordered configurations each).
    ties: use ties_instance (rational rows, many equal ratios) instead of Dirichlet rows.
    draft_sampling: "iid" or "without-replacement" (see verifiers.exact).
    progress: optional wrapper of the trial iterable (e.g. a progress bar).
    exact: run in exact rationals (ties instances are rational; Dirichlet float rows
    are then taken at their exact binary values).

    Returns {"verifier", "paths", "vocab", "depth", "trials", "ties", "seed",
    "draft_sampling", "exact", "claimed_lossless", "max_tv", "mean_tv", "worst_trial",
    "worst_instance" (Instance.to_json), "mean_block_efficiency", "configurations",
    "tolerance", "passed" (max_tv <= tolerance)}.
    Raises KeyError for an unknown verifier and ValueError for bad sizes.
    """
    spec = get_verifier(verifier)
    for name, value, low in (("paths", paths, 1), ("vocab", vocab, 2), ("depth", depth, 1),
                             ("trials", trials, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling: must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    configurations = (vocab**depth) ** paths
    if configurations > MAX_CONFIGURATIONS:
        raise ValueError(
            f"paths: (vocab^depth)^paths = {configurations} draft configurations per instance "
            f"(limit {MAX_CONFIGURATIONS}); lower paths, vocab or depth"
        )
    iterator: Iterable[int] = range(trials)
    if progress is not None:
        iterator = progress(iterator)
    tvs: list[float] = []
    efficiencies: list[float] = []
    worst_tv, worst_trial, worst_instance = -1.0, 0, None
    for trial in iterator:
        instance = audit_instance(vocab, depth, trial, ties, seed)
        result = exact_result(instance.model(exact=exact), verifier, paths=paths,
                              draft_sampling=draft_sampling)
        tv = float(result.total_variation)
        tvs.append(tv)
        efficiencies.append(float(result.block_efficiency))
        if tv > worst_tv:
            worst_tv, worst_trial, worst_instance = tv, trial, instance
    max_tv = max(tvs)
    return {
        "verifier": verifier,
        "paths": paths,
        "vocab": vocab,
        "depth": depth,
        "trials": trials,
        "ties": ties,
        "seed": seed,
        "draft_sampling": draft_sampling,
        "exact": exact,
        "claimed_lossless": spec.lossless,
        "max_tv": max_tv,
        "mean_tv": float(np.mean(tvs)),
        "worst_trial": worst_trial,
        "worst_instance": worst_instance.to_json() if worst_instance is not None else None,
        "mean_block_efficiency": float(np.mean(efficiencies)),
        "configurations": configurations,
        "tolerance": TOLERANCE,
        "passed": bool(max_tv <= TOLERANCE),
    }
