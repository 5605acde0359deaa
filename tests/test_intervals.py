"""Intervals over prompts (clusters) used by `speclp bench` and `realgap` summaries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from speclp.experiments import intervals
from speclp.experiments.intervals import (
    CLUSTER_METHOD,
    CLUSTER_METHODS,
    cluster_intervals,
    cluster_mean_interval,
    format_interval,
    resample_counts,
)

COVERAGE_JSON = Path(__file__).resolve().parents[1] / "benchmarks/results/bench/interval_coverage.json"


def test_t_method_is_the_t_interval_of_per_cluster_means():
    sums, counts = np.array([3.0, 10.0, 4.5, 8.0]), np.array([2, 5, 3, 4])
    means = sums / counts  # 1.5, 2, 1.5, 2
    half = stats.t.ppf(0.975, 3) * means.std(ddof=1) / 2
    iv = cluster_mean_interval(sums, counts, method="t")
    assert iv["estimate"] == pytest.approx(1.75) and iv["clusters"] == 4
    assert (iv["low"], iv["high"]) == pytest.approx((1.75 - half, 1.75 + half))
    assert iv["method"].startswith("Student t interval")
    with pytest.raises(ValueError, match="positive count"):
        cluster_mean_interval([1.0], [0])
    with pytest.raises(ValueError, match="equal, non-empty"):
        cluster_mean_interval([1.0, 2.0], [1])
    with pytest.raises(ValueError, match="method: must be one of"):
        cluster_mean_interval([1.0, 2.0], [1, 1], method="normal")
    with pytest.raises(ValueError, match=r"x: must be \[R, n\]"):
        cluster_intervals(np.ones((3, 1)))


def test_hall_equals_t_on_symmetric_data_and_inverts_its_transformation():
    x = np.array([[1.0, 2.0, 4.0, 6.0, 7.0]])  # sample skewness exactly 0
    assert np.allclose(cluster_intervals(x, "hall"), cluster_intervals(x, "t"), rtol=0, atol=1e-12)
    # a right-skewed sample: the endpoints solve sqrt(n) g(W) = -+q with g evaluated forward
    y = np.array([0.1, 0.2, 0.2, 0.4, 0.5, 0.9, 2.5, 4.0])
    n, mean, sd = len(y), y.mean(), y.std(ddof=1)
    skew = n * ((y - mean) ** 3).sum() / ((n - 1) * (n - 2) * sd ** 3)
    q = stats.t.ppf(0.975, n - 1)

    def forward(mu: float) -> float:
        w = (mean - mu) / sd
        return np.sqrt(n) * (w + skew * w ** 2 / 3 + skew ** 2 * w ** 3 / 27 + skew / (6 * n))

    low, high = (float(v[0]) for v in cluster_intervals(y[None], "hall"))
    assert forward(low) == pytest.approx(q, rel=1e-9) and forward(high) == pytest.approx(-q, rel=1e-9)
    assert high - mean > mean - low  # right skew: the interval reaches further up than t


def test_bootstrap_methods_match_a_loop_over_the_same_resamples():
    """A second implementation: each resample built explicitly, T* = (mean* - mean) / se*, the
    order statistics of rank 25 and 975 of 999 (0-based 24 and 974)."""
    x = np.array([2.0, 2.5, 3.1, 4.0, 7.5, 3.3])
    n, counts = len(x), resample_counts(6)
    assert counts.shape == (999, 6) and (counts.sum(axis=1) == 6).all()
    mean, se = x.mean(), x.std(ddof=1) / np.sqrt(n)
    t_star, shift = [], []
    for row in counts.astype(int):
        sample = np.repeat(x, row)
        s = sample.std(ddof=1) / np.sqrt(n)
        d = sample.mean() - mean
        t_star.append(d / s if s > 1e-12 else (np.sign(d) * np.inf if abs(d) > 1e-12 else 0.0))
        shift.append(d)
    t_sorted, s_sorted = np.sort(t_star), np.sort(shift)
    abs_sorted = np.sort(np.abs(t_star))
    expected = {"boot-t": (mean - t_sorted[974] * se, mean - t_sorted[24] * se),
                "boot-t-sym": (mean - abs_sorted[949] * se, mean + abs_sorted[949] * se),
                "percentile": (mean + s_sorted[24], mean + s_sorted[974])}
    for method, (low, high) in expected.items():
        got = cluster_intervals(x[None], method)
        assert (got[0][0], got[1][0]) == pytest.approx((low, high), rel=1e-9), method
    # BCa with no skew in the resamples' balance and no acceleration is the percentile interval
    sym = np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    z0 = stats.norm.ppf(np.mean(sym[0] @ counts.T / 6 < 3.5) + 0.5 * np.mean(sym[0] @ counts.T / 6 == 3.5))
    if z0 == 0:
        assert np.allclose(cluster_intervals(sym, "bca"), cluster_intervals(sym, "percentile"))


@pytest.mark.parametrize("method", CLUSTER_METHODS)
def test_equivariance_and_constant_rows(method):
    rng = np.random.default_rng(3)
    x = np.exp(rng.standard_normal((5, 9)))
    low, high = cluster_intervals(x, method)
    assert (low <= x.mean(axis=1)).all() and (x.mean(axis=1) <= high).all()
    low2, high2 = cluster_intervals(3.0 + 2.5 * x, method)  # affine: x -> a + b x, b > 0
    assert np.allclose(low2, 3.0 + 2.5 * low) and np.allclose(high2, 3.0 + 2.5 * high)
    if method != "bca":  # reflection x -> -x mirrors the interval (BCa's rounding is one-sided)
        low3, high3 = cluster_intervals(-x, method)
        assert np.allclose(low3, -high) and np.allclose(high3, -low)
    flat = np.full((2, 4), 1.75)
    assert np.array_equal(cluster_intervals(flat, method)[0], [1.75, 1.75])
    same = cluster_mean_interval([1.0, 2.0, 3.0], [1, 2, 3], method=method)
    assert (same["low"], same["high"], same["note"]) == (1.0, 1.0, "equal on every prompt")
    assert format_interval(same) == "1.000 [equal on every prompt]"


def test_no_degenerate_interval_is_printed():
    one = cluster_mean_interval([4.0], [2])
    assert one["low"] is None and format_interval(one) == "2.000 [n/a (1 prompt)]"
    same = cluster_mean_interval([0.0, 0.0, 0.0], [1, 2, 3])
    assert format_interval(same) == "0.000 [equal on every prompt]"
    assert format_interval({"estimate": -0.0001, "low": -0.0004, "high": 0.2}) == \
        "0.000 [0.000, 0.200]"
    tiny = format_interval({"estimate": 1e-9, "low": -2e-8, "high": 3e-8})
    assert tiny == "0.000 [-2.0e-08, 3.0e-08]"


def test_default_is_deterministic_and_the_record_path_matches_the_batch():
    rng = np.random.default_rng(5)
    steps = rng.integers(2, 41, size=24).astype(float)
    means = 1 + 2 * rng.beta(8.6, 1.6, size=24)
    first = cluster_mean_interval(means * steps, steps)
    assert first == cluster_mean_interval(means * steps, steps)
    low, high = cluster_intervals(means[None], CLUSTER_METHOD)
    assert (first["low"], first["high"]) == pytest.approx((low[0], high[0]), rel=1e-12)


def test_coverage_on_normal_clusters_at_eight_prompts():
    """Normal per-prompt means: the default's coverage is 95% within Monte Carlo error over
    2000 simulated runs of 8 prompts (binomial SD 0.005; bounds at 4 SD)."""
    rng = np.random.default_rng(0)
    values = 3.0 + rng.standard_normal((2000, 8))
    low, high = cluster_intervals(values, CLUSTER_METHOD)
    covered = int(((low <= 3.0) & (3.0 <= high)).sum())
    assert 0.93 * 2000 <= covered <= 0.97 * 2000


def test_labels_state_the_checked_coverage_as_recorded():
    """The checked coverage in the code is the simulation's (benchmarks/interval_coverage.py);
    a label says '95%' with a coverage range only at a simulated n, else 'nominal'."""
    recorded = json.loads(COVERAGE_JSON.read_text())
    assert recorded["choice"]["method"] == CLUSTER_METHOD
    checked = {int(n): tuple(v) for n, v in recorded["choice"]["checked_coverage"].items()}
    assert checked == intervals.CHECKED_COVERAGE
    for n, (lo, hi) in checked.items():
        label = cluster_mean_interval(np.arange(n, dtype=float), np.ones(n))["method"]
        assert f"simulated coverage {lo:.3f}-{hi:.3f} at n = {n} prompts" in label
        assert "nominal" not in label
    unchecked = max(checked) + 1
    label = cluster_mean_interval(np.arange(unchecked, dtype=float), np.ones(unchecked))["method"]
    assert "nominal 95%" in label and f"here n = {unchecked}" in label
    other = cluster_mean_interval([1.0, 2.0, 4.0], [1, 1, 1], method="percentile")["method"]
    assert "nominal 95%" in other
