"""Confidence intervals for Monte Carlo means and for ratios over clusters (prompts).

Two situations occur in the real-model runs:
  * i.i.d. samples of one quantity (a verifier's exact conditional E[tau + 1] given a
    sampled draft tree, many trees at one context): `t_interval`, the Student t interval
    of the mean;
  * per-cluster sums (a prompt's sum over its decoding steps, or over its contexts) whose
    ratio estimates a mean per step: `bootstrap_ratio`, the percentile bootstrap over
    clusters of sum(numerator) / sum(denominator); a paired difference of two verifiers
    is the same with numerator = the difference of their sums.
Every interval is returned with its level, the number of samples/clusters and the method.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LEVEL = 0.95
RESAMPLES = 4000


def t_interval(values: np.ndarray | list[float], level: float = LEVEL) -> dict[str, Any]:
    """Mean of i.i.d. samples with its standard error and the Student t interval.

    One sample gives an infinite interval (no variance estimate). Returns {mean, stderr,
    low, high, n, level, method}.
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64).reshape(-1)
    n = len(x)
    if n == 0:
        raise ValueError("t_interval needs at least one value")
    mean = float(x.mean())
    if n == 1:
        return {"mean": mean, "stderr": float("inf"), "low": float("-inf"), "high": float("inf"),
                "n": 1, "level": level, "method": "t"}
    stderr = float(x.std(ddof=1) / np.sqrt(n))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * stderr
    return {"mean": mean, "stderr": stderr, "low": mean - half, "high": mean + half, "n": n,
            "level": level, "method": "t"}


def bootstrap_ratio(numerator: np.ndarray | list[float], denominator: np.ndarray | list[float],
                    level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
                    ) -> dict[str, Any]:
    """sum(numerator) / sum(denominator) over clusters, with a percentile bootstrap interval.

    numerator, denominator: [C] per-cluster sums (e.g. a prompt's sum of E[tau + 1] over its
    steps, and its number of steps). Clusters are resampled with replacement `resamples`
    times (numpy default_rng(seed)). Returns {estimate, low, high, clusters, level,
    resamples, method}; with one cluster the interval is the point.
    """
    num = np.asarray(numerator, dtype=np.float64).reshape(-1)
    den = np.asarray(denominator, dtype=np.float64).reshape(-1)
    if len(num) != len(den) or len(num) == 0:
        raise ValueError(f"need equal, non-empty lengths, got {len(num)} and {len(den)}")
    if den.sum() <= 0:
        raise ValueError("the denominators sum to <= 0")
    estimate = float(num.sum() / den.sum())
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(num), size=(resamples, len(num)))
    den_b = den[picks].sum(axis=1)
    ratios = num[picks].sum(axis=1) / np.where(den_b > 0, den_b, np.nan)
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - level) / 2
    low, high = (np.quantile(ratios, [tail, 1 - tail]) if len(ratios) else (estimate, estimate))
    return {"estimate": estimate, "low": float(low), "high": float(high), "clusters": len(num),
            "level": level, "resamples": resamples, "method": "percentile bootstrap over clusters"}


def bootstrap_relative(numerator: np.ndarray | list[float], reference: np.ndarray | list[float],
                       level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0
                       ) -> dict[str, Any]:
    """sum(numerator) / sum(reference) - 1 over clusters (paired), percentile bootstrap.

    E.g. numerator = a prompt's sum of GBV's E[tau + 1] over its steps, reference = BV's on
    the same steps: the relative gain of GBV over BV with its interval.
    """
    out = bootstrap_ratio(numerator, reference, level, resamples, seed)
    for key in ("estimate", "low", "high"):
        out[key] -= 1.0
    return out


def format_interval(record: dict[str, Any], digits: int = 3) -> str:
    """'m [lo, hi]' for a t_interval or bootstrap record."""
    centre = record.get("mean", record.get("estimate"))
    return f"{centre:.{digits}f} [{record['low']:.{digits}f}, {record['high']:.{digits}f}]"
