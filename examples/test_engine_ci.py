"""What an engine's CI adds: one pytest test per sampler (copy this file next to your tests).

    pytest examples/test_engine_ci.py

`assert_lossless(sampler, layout)` audits the sampler on 6 instances of the audit's families
(100,000 runs each, no time limit: the verdict is a function of the seed), at family-wise
error level 1e-3; it raises AssertionError naming the instance, the token position and the
statistic when the sampler's blocks do not follow the target law. A mode meant to be lossy is
checked against its stated law (`law=ensemble_law(w)`: "is this exactly w p + (1 - w) q?").
Collected in this repository's suite through tests/test_testing.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from speclp.testing import assert_lossless

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_layouts  # noqa: E402  (your engine's sampler goes here)


def test_rejection_sampler_is_lossless():
    report = assert_lossless(engine_layouts.vllm_reference, layout="vllm", seed=0)
    assert report["max_detectable_tv"] < 0.05  # what a pass rules out, with probability 0.9


def test_a_wrong_logits_slice_is_caught():
    with pytest.raises(AssertionError, match="is not lossless"):
        assert_lossless(engine_layouts.vllm_row_shift, layout="vllm", seed=0)
