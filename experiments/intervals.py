"""Confidence intervals for Monte Carlo means and for ratios over clusters (prompts).

Two situations occur in the real-model runs:
  * i.i.d. samples of one bounded quantity (a verifier's exact conditional E[tau + 1]
    given a sampled draft tree lies in [1, L + 1]; many trees at one context):
    `betting_interval`, valid at any sample size (on peaked rows a rare low value is
    often never sampled and the t interval then collapses to a point that excludes the
    mean); `t_interval`, the Student t interval, is kept for comparison;
  * per-cluster sums (a prompt's sum over its decoding steps or contexts) and counts:
    `cluster_mean_interval`, an interval on the per-prompt means (prompts drawn at random)
    by `cluster_intervals`, whose methods (t, Hall's skew-corrected t, bootstrap-t,
    symmetric bootstrap-t, BCa, percentile) are compared on skewed, heavy-tailed, bounded
    and recorded populations at 12..96 prompts in benchmarks/interval_coverage.py; the
    default (CLUSTER_METHOD) is the one chosen there, and its method string states the
    coverage simulated at that number of prompts (or 'nominal'). Used by `bench` and
    `realgap`; a paired difference of two verifiers is the same with sums = the difference
    of their sums. `bootstrap_ratio`, the percentile bootstrap over clusters of
    sum(numerator) / sum(denominator), undercovers at few clusters (the percentile method
    of the same simulation) and is kept for comparison.
Every interval is returned with its level, the number of samples/clusters and the method.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from ..inputs import BadArgument

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
        raise BadArgument("low/high", f"need low < high, got {low}, {high}")
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


# Intervals for the mean over clusters (prompts) of the per-cluster means, one row per data set.
# Every method is equivariant under x -> a + b x (b > 0) and returns the point for constant rows.
CLUSTER_METHODS = ("t", "hall", "boot-t", "boot-t-sym", "bca", "percentile")
CLUSTER_METHOD_NAMES = {
    "t": "Student t interval",
    "hall": "Hall's skew-corrected t interval (Hall 1992)",
    "boot-t": "bootstrap-t interval (studentized, equal-tailed)",
    "boot-t-sym": "symmetric bootstrap-t interval (studentized)",
    "bca": "BCa bootstrap interval",
    "percentile": "percentile bootstrap interval",
}
CLUSTER_RESAMPLES = 999  # (B + 1) * 0.025 = 25: the 2.5% / 97.5% points are order statistics
CLUSTER_SEED = 0
# The default, chosen in benchmarks/interval_coverage.py (its json "choice"): at 24, 48 and 96
# prompts its worst coverage on the realistic populations is within Monte Carlo error of the
# best method's, and it is the shortest of those (the bootstrap-t intervals are as good but
# infinite or huge on samples tied at the top, e.g. E[tau + 1] = L + 1 on most prompts).
CLUSTER_METHOD = "hall"
# Simulated coverage of CLUSTER_METHOD at 95%, (min, max) over the realistic generative
# populations per number of clusters n (benchmarks/results/bench/interval_coverage.json;
# tests/test_intervals.py checks the two agree).
CHECKED_COVERAGE: dict[int, tuple[float, float]] = {
    12: (0.86625, 0.95575), 24: (0.92425, 0.9605), 48: (0.9425, 0.95875), 96: (0.944, 0.9595),
    164: (0.948, 0.95975)}


@lru_cache(maxsize=64)
def resample_counts(n: int, resamples: int = CLUSTER_RESAMPLES, seed: int = CLUSTER_SEED) -> np.ndarray:
    """[resamples, n] counts of a multinomial resample of n clusters (each row sums to n), from
    numpy default_rng(seed): the same resamples for every data set of n clusters (deterministic).
    Read-only (cached)."""
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=resamples)
    counts = counts.astype(np.float64)
    counts.setflags(write=False)
    return counts


def _order_statistics(values: np.ndarray, ranks: list[int]) -> list[np.ndarray]:
    """values [R, B]: per row the elements of the given 0-based ranks in ascending order (no
    interpolation: +-inf stay infinite), each [R]."""
    parted = np.partition(values, sorted(set(ranks)), axis=1)
    return [parted[:, r] for r in ranks]


def cluster_intervals(x: np.ndarray, method: str = CLUSTER_METHOD, level: float = LEVEL,
                      counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Intervals for the mean of the law of i.i.d. values, for every row of x [R, n] (n >= 2).

    method (CLUSTER_METHODS):
      t           mean -+ t_{n-1, 1-a/2} s / sqrt(n) (a = 1 - level, s the sd with ddof 1);
      hall        Hall (1992, JRSS B 54 "On the removal of skewness by transformation"): with
                  W = (mean - mu) / s, g(W) = W + g W^2 / 3 + g^2 W^3 / 27 + g / (6 n) (g the
                  sample skewness n sum (x - mean)^3 / ((n - 1)(n - 2) s^3)) is increasing
                  and sqrt(n) g(W) has a t_{n-1}-like law to second order; the interval is
                  {mu: |sqrt(n) g(W)| <= t_{n-1, 1-a/2}}, inverted in closed form
                  g^-1(y) = (3 / g)((1 + g (y - g / (6 n)))^(1/3) - 1); g = 0 gives t;
      boot-t      studentized bootstrap (Efron 1981; Hall 1988): T* = (mean* - mean) / se*
                  over the resamples, interval [mean - T*_(hi) se, mean - T*_(lo) se] with the
                  order statistics of rank (B + 1) a / 2 and (B + 1)(1 - a / 2); a resample
                  with se* = 0 has T* = -+inf (0 where mean* = mean);
      boot-t-sym  mean -+ |T*|_((B + 1)(1 - a)) se (symmetric bootstrap-t);
      bca         BCa (Efron 1987): percentile of mean* at levels corrected by the bias z0 =
                  Phi^-1(share of mean* < mean) and the jackknife acceleration
                  sum d^3 / (6 (sum d^2)^(3/2)), d = x - mean;
      percentile  order statistics of mean* (kept for comparison: short at few clusters).
    counts: [B, n] resample counts (each row sums to n); default `resample_counts(n)`, the
    same seeded resamples for every row. Rows with s = 0 get low = high = mean.
    Returns (low, high), each [R] (may be +-inf for boot-t at very few clusters).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 2:
        raise BadArgument("x", f"must be [R, n] with n >= 2, got shape {x.shape}")
    if method not in CLUSTER_METHODS:
        raise BadArgument("method", f"must be one of {', '.join(CLUSTER_METHODS)}, got {method!r}")
    if not 0 < level < 1:
        raise BadArgument("level", f"must lie in (0, 1), got {level}")
    n = x.shape[1]
    alpha = 1 - level
    mean = x.mean(axis=1)
    dev = x - mean[:, None]
    sd = np.sqrt((dev ** 2).sum(axis=1) / (n - 1))
    flat = sd <= 1e-12 * np.maximum(1.0, np.abs(mean))
    safe_sd = np.where(flat, 1.0, sd)
    se = safe_sd / np.sqrt(n)
    quantile = float(stats.t.ppf(1 - alpha / 2, n - 1))
    if method == "t":
        low, high = mean - quantile * se, mean + quantile * se
    elif method == "hall":
        skew = (n * (dev ** 3).sum(axis=1) / ((n - 1) * (n - 2) * safe_sd ** 3) if n > 2
                else np.zeros(len(x)))

        def inverse(y: float) -> np.ndarray:
            g = np.where(skew == 0, 1.0, skew)
            root = (3 / g) * (np.cbrt(1 + g * (y - g / (6 * n))) - 1)
            return np.where(skew == 0, y, root)

        low = mean - safe_sd * inverse(quantile / np.sqrt(n))
        high = mean - safe_sd * inverse(-quantile / np.sqrt(n))
    else:
        if counts is None:
            counts = resample_counts(n)
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 2 or counts.shape[1] != n:
            raise BadArgument("counts", f"must be [B, {n}], got shape {counts.shape}")
        resamples = counts.shape[0]
        shift = dev @ counts.T / n  # [R, B]: mean* - mean
        rank_low = max(int(np.floor((resamples + 1) * alpha / 2)) - 1, 0)
        rank_high = resamples - 1 - rank_low
        if method in ("boot-t", "boot-t-sym"):
            second = (dev ** 2) @ counts.T / n
            se_star = np.sqrt(np.maximum(second - shift ** 2, 0.0) * n / (n - 1) / n)
            tiny = 1e-9 * se[:, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                t_star = np.where(se_star > tiny, shift / se_star,
                                  np.where(np.abs(shift) > tiny, np.sign(shift) * np.inf, 0.0))
            if method == "boot-t":
                t_low, t_high = _order_statistics(t_star, [rank_low, rank_high])
                with np.errstate(invalid="ignore"):
                    low, high = mean - t_high * se, mean - t_low * se
            else:
                rank = min(int(np.ceil((resamples + 1) * level)) - 1, resamples - 1)
                half = _order_statistics(np.abs(t_star), [rank])[0] * se
                low, high = mean - half, mean + half
        elif method == "percentile":
            low, high = (mean + end for end in _order_statistics(shift, [rank_low, rank_high]))
        else:  # bca
            tie = np.abs(shift) <= 1e-12 * safe_sd[:, None]  # e.g. the resample of every prompt once
            below = ((shift < 0) & ~tie).sum(axis=1) + 0.5 * tie.sum(axis=1)
            below = below / resamples
            z0 = stats.norm.ppf(np.clip(below, 0.5 / resamples, 1 - 0.5 / resamples))
            squares = np.where(flat, 1.0, (dev ** 2).sum(axis=1))
            acc = np.where(flat, 0.0, (dev ** 3).sum(axis=1) / (6 * squares ** 1.5))
            ordered, ends = np.sort(shift, axis=1), []
            for tail, rounding in ((alpha / 2, np.floor), (1 - alpha / 2, np.ceil)):
                z = z0 + stats.norm.ppf(tail)
                adjusted = stats.norm.cdf(z0 + z / (1 - acc * z))
                rank = np.clip(rounding((resamples + 1) * adjusted).astype(int) - 1, 0, resamples - 1)
                ends.append(mean + ordered[np.arange(len(x)), rank])
            low, high = ends
    low = np.where(flat, mean, low)
    high = np.where(flat, mean, high)
    return low, high


def cluster_method_label(method: str, n: int, level: float = LEVEL) -> str:
    """The method string of a cluster interval: its name, resamples, and the coverage checked
    by simulation at n clusters (CHECKED_COVERAGE, for CLUSTER_METHOD at 95%), else 'nominal'
    with the reason."""
    name = CLUSTER_METHOD_NAMES[method]
    if method not in ("t", "hall"):
        name += f" ({CLUSTER_RESAMPLES} resamples of the prompts, seed {CLUSTER_SEED})"
    name += " on per-prompt means"
    checked = CHECKED_COVERAGE.get(n) if method == CLUSTER_METHOD and level == LEVEL else None
    if checked is None:
        counts = ", ".join(map(str, sorted(CHECKED_COVERAGE))) or "none"
        return (f"{name}; nominal {level:.0%} (coverage simulated at n = {counts} prompts only; "
                f"here n = {n}: benchmarks/results/bench/interval_coverage.md)")
    return (f"{name}; {level:.0%} with simulated coverage {checked[0]:.3f}-{checked[1]:.3f} at "
            f"n = {n} prompts over the realistic populations of "
            "benchmarks/results/bench/interval_coverage.md")


def cluster_mean_interval(sums: np.ndarray | list[float], counts: np.ndarray | list[float],
                          level: float = LEVEL, method: str = CLUSTER_METHOD) -> dict[str, Any]:
    """Mean over clusters of the per-cluster mean sums[i] / counts[i], with its interval.

    The clusters (prompts) are taken as an i.i.d. sample (prompts drawn at random): the
    per-cluster means m_i = sums[i] / counts[i] are i.i.d., and the interval is that of their
    expectation (the prompt-average of the per-step mean), by `cluster_intervals` with
    `method` (default CLUSTER_METHOD, chosen by the coverage simulated at the cluster counts
    used in benchmarks/interval_coverage.py, on skewed, heavy-tailed and bounded populations).
    A paired difference of two verifiers is the same with sums = the difference of their
    per-prompt sums. The `method` string names the method and states the simulated coverage
    at this n, or 'nominal' where it was not simulated. With one cluster there is no variance
    estimate: low = high = None and `note` says so (never a zero-width interval); equal
    per-cluster means give low = high = the mean with a note. Returns {estimate, low, high,
    stderr, clusters, level, method[, note]}.
    """
    s = np.asarray(sums, dtype=np.float64).reshape(-1)
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if len(s) != len(c) or len(s) == 0:
        raise ValueError(f"need equal, non-empty lengths, got {len(s)} and {len(c)}")
    if (c <= 0).any():
        raise ValueError("every cluster needs a positive count")
    if method not in CLUSTER_METHODS:
        raise BadArgument("method", f"must be one of {', '.join(CLUSTER_METHODS)}, got {method!r}")
    means = s / c
    n = len(means)
    record: dict[str, Any] = {"estimate": float(means.mean()), "low": None, "high": None,
                              "stderr": None, "clusters": n, "level": level,
                              "method": cluster_method_label(method, n, level)}
    if n == 1:
        record["note"] = "n/a (1 prompt)"
        return record
    low, high = cluster_intervals(means[None, :], method, level)
    record.update(low=float(low[0]), high=float(high[0]),
                  stderr=float(means.std(ddof=1) / np.sqrt(n)))
    if means.max() == means.min():
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
