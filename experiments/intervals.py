"""Confidence intervals for Monte Carlo means and for ratios over clusters (prompts).

Two situations occur in the real-model runs:
  * i.i.d. samples of one bounded quantity (a verifier's exact conditional E[tau + 1]
    given a sampled draft tree lies in [1, L + 1]; many trees at one context):
    `betting_interval`, valid at any sample size (on peaked rows a rare low value is
    often never sampled and the t interval then collapses to a point that excludes the
    mean); `t_interval`, the Student t interval, is kept for comparison;
  * per-cluster sums (a prompt's sum over its decoding steps) and counts:
    `cluster_mean_interval`, the t interval on the per-prompt means (prompts drawn at
    random; its coverage at 3..48 prompts is simulated in benchmarks/interval_coverage.py),
    used by `bench`; a paired difference of two verifiers is the same with sums = the
    difference of their sums. `bootstrap_ratio`, the percentile bootstrap over clusters
    of sum(numerator) / sum(denominator), undercovers at few clusters (same simulation)
    and is kept for realgap's pooled summaries and for comparison.
Every interval is returned with its level, the number of samples/clusters and the method.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

LEVEL = 0.95
RESAMPLES = 4000


def t_interval(values: np.ndarray | list[float], level: float = LEVEL) -> dict[str, Any]:
    """Mean of i.i.d. samples with its standard error and the Student t interval.

    One sample gives an infinite interval (no variance estimate). Returns {mean, stderr,
    low, high, n, level, method}.
    """
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


def betting_interval(values: np.ndarray | list[float], low: float, high: float,
                     level: float = LEVEL, grid: int = 2001) -> dict[str, Any]:
    """Confidence interval for the mean of i.i.d. values known to lie in [low, high].

    Valid at every sample size and for every law on [low, high] (no normal approximation):
    the hedged-capital interval of Waudby-Smith & Ramdas (JRSS B 2024, "Estimating means
    of bounded random variables by betting"), evaluated at the final sample. For a
    candidate mean m (values rescaled to [0, 1]) two bettors' wealth
        K+(m) = prod_i (1 + l+_i (x_i - m)),  K-(m) = prod_i (1 - l-_i (x_i - m)),
    with predictable bets l_i = min(sqrt(2 log(2/a) / (n s2_{i-1})), c/m or c/(1-m)),
    c = 1/2 (s2: running variance estimate started at 1/4), are nonnegative martingales
    when m is the true mean, so by Markov's inequality P(max(K+, K-)/2 >= 1/a) <= a; the
    interval is the set of m on a grid of `grid` points whose hedged wealth stays below
    1/a (a = 1 - level), widened by one grid step. Unlike the t interval it cannot
    collapse to a point when a rare value was never sampled: with n equal values it still
    has width ~ log(1/a)/n times the range. The samples are used in the given order.
    Returns {mean, stderr, low, high, n, level, method}.
    """
    x = (np.asarray(values, dtype=np.float64).reshape(-1) - low) / (high - low)
    n = len(x)
    if n == 0:
        raise ValueError("betting_interval needs at least one value")
    if high <= low:
        raise ValueError(f"need low < high, got {low}, {high}")
    if x.min() < -1e-9 or x.max() > 1 + 1e-9:
        raise ValueError(f"values outside [{low}, {high}]")
    x = np.clip(x, 0.0, 1.0)
    alpha = 1 - level
    steps = np.arange(1, n + 1)
    mean_run = (0.5 + np.cumsum(x)) / (steps + 1)  # mu_i, i = 1..n
    spread = (0.25 + np.cumsum((x - mean_run) ** 2)) / (steps + 1)  # s2_i
    previous = np.concatenate([[0.25], spread[:-1]])  # s2_{i-1}: predictable
    raw = np.sqrt(2 * np.log(2 / alpha) / (n * previous))  # [n]
    m = np.linspace(0.0, 1.0, grid)[:, None]  # [G, 1]
    with np.errstate(divide="ignore"):
        bet_up = np.minimum(raw[None], np.where(m > 0, 0.5 / np.where(m > 0, m, 1.0), np.inf))
        bet_down = np.minimum(raw[None], np.where(m < 1, 0.5 / np.where(m < 1, 1 - m, 1.0), np.inf))
    log_up = np.log1p(bet_up * (x[None] - m)).sum(axis=1)
    log_down = np.log1p(-bet_down * (x[None] - m)).sum(axis=1)
    hedged = np.logaddexp(log_up, log_down) - np.log(2)  # log of (K+ + K-)/2 >= log max/2
    inside = np.nonzero(hedged < np.log(1 / alpha))[0]
    step = 1.0 / (grid - 1)
    mean = float(np.asarray(values, dtype=np.float64).mean())
    if len(inside) == 0:  # cannot happen for the sample mean's own cell; keep the point
        lo = hi = (mean - low) / (high - low)
    else:
        lo = max(0.0, inside[0] * step - step)
        hi = min(1.0, inside[-1] * step + step)
    stderr = float(np.std(values, ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    return {"mean": mean, "stderr": stderr, "low": float(low + lo * (high - low)),
            "high": float(low + hi * (high - low)), "n": n, "level": level,
            "method": "betting (hedged capital), valid for values in "
                      f"[{low:g}, {high:g}]"}


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


def cluster_mean_interval(sums: np.ndarray | list[float], counts: np.ndarray | list[float],
                          level: float = LEVEL) -> dict[str, Any]:
    """Mean over clusters of the per-cluster mean sums[i] / counts[i], with a t interval.

    The clusters (prompts) are taken as an i.i.d. sample (prompts drawn at random): the
    per-cluster means m_i = sums[i] / counts[i] are i.i.d., and the Student t interval on
    them is the interval of their expectation (the prompt-average of the per-step mean). A
    paired difference of two verifiers is the same with sums = the difference of their
    per-prompt sums. Coverage at the cluster counts used is simulated in
    benchmarks/interval_coverage.py (docs/theory.md section 15.3). With one cluster there
    is no variance estimate: low = high = None and `note` says so (never a zero-width
    interval). Returns {estimate, low, high, stderr, clusters, level, method[, note]}.
    """
    s = np.asarray(sums, dtype=np.float64).reshape(-1)
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if len(s) != len(c) or len(s) == 0:
        raise ValueError(f"need equal, non-empty lengths, got {len(s)} and {len(c)}")
    if (c <= 0).any():
        raise ValueError("every cluster needs a positive count")
    means = s / c
    out = t_interval(means, level)
    record = {"estimate": out["mean"], "low": out["low"], "high": out["high"],
              "stderr": out["stderr"], "clusters": len(means), "level": level,
              "method": "t interval on per-prompt means"}
    if len(means) == 1:
        record.update(low=None, high=None, stderr=None, note="n/a (1 prompt)")
    elif means.max() == means.min():
        record.update(note="equal on every prompt")  # e.g. gbv - bv at K = 1: identically 0
    return record


def _number(value: float, digits: int) -> str:
    """A float with `digits` decimals, never "-0.000"."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def format_interval(record: dict[str, Any], digits: int = 3) -> str:
    """'m [lo, hi]' for a t_interval, cluster or bootstrap record; 'm [n/a (1 prompt)]'
    where the record has no interval (one cluster)."""
    centre = _number(record.get("mean", record.get("estimate")), digits)
    if record.get("low") is None or record.get("high") is None:
        return f"{centre} [{record.get('note', 'n/a')}]"
    if record["low"] == record["high"]:  # no spread: say so rather than print [x, x]
        return f"{centre} [{record.get('note', 'zero width')}]"
    low, high = _number(record["low"], digits), _number(record["high"], digits)
    if low == high:  # narrower than the digits shown: show it in scientific notation
        low, high = f"{record['low']:.1e}", f"{record['high']:.1e}"
    return f"{centre} [{low}, {high}]"
