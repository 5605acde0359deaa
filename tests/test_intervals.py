"""Intervals over prompts (clusters) used by `speclp bench` and `realgap` summaries."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from speclp.experiments.intervals import cluster_mean_interval, format_interval


def test_cluster_mean_interval_is_the_t_interval_of_per_cluster_means():
    sums, counts = np.array([3.0, 10.0, 4.5, 8.0]), np.array([2, 5, 3, 4])
    means = sums / counts  # 1.5, 2, 1.5, 2
    half = stats.t.ppf(0.975, 3) * means.std(ddof=1) / 2
    iv = cluster_mean_interval(sums, counts)
    assert iv["estimate"] == pytest.approx(1.75) and iv["clusters"] == 4
    assert (iv["low"], iv["high"]) == pytest.approx((1.75 - half, 1.75 + half))
    with pytest.raises(ValueError, match="positive count"):
        cluster_mean_interval([1.0], [0])
    with pytest.raises(ValueError, match="equal, non-empty"):
        cluster_mean_interval([1.0, 2.0], [1])


def test_no_degenerate_interval_is_printed():
    one = cluster_mean_interval([4.0], [2])
    assert one["low"] is None and format_interval(one) == "2.000 [n/a (1 prompt)]"
    same = cluster_mean_interval([0.0, 0.0, 0.0], [1, 2, 3])
    assert format_interval(same) == "0.000 [equal on every prompt]"
    assert format_interval({"estimate": -0.0001, "low": -0.0004, "high": 0.2}) == \
        "0.000 [0.000, 0.200]"
    tiny = format_interval({"estimate": 1e-9, "low": -2e-8, "high": 3e-8})
    assert tiny == "0.000 [-2.0e-08, 3.0e-08]"


def test_coverage_on_normal_clusters_at_eight_prompts():
    """Normal per-prompt means (the t interval's model): 95% coverage within Monte Carlo
    error over 2000 simulated runs of 8 prompts (binomial SD 0.005; bounds at 4 SD)."""
    rng = np.random.default_rng(0)
    steps = rng.integers(2, 9, size=(2000, 8)).astype(float)
    values = 3.0 + rng.standard_normal((2000, 8))
    covered = 0
    for s, v in zip(steps, values, strict=True):
        iv = cluster_mean_interval(v * s, s)
        covered += iv["low"] <= 3.0 <= iv["high"]
    assert 0.93 * 2000 <= covered <= 0.97 * 2000
