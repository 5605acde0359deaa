"""Shared torch fixtures of the tests that run tiny models (tests/test_engine.py,
tests/test_realgap.py). A test module applies `one_thread` by importing it (it is autouse)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models: one intra-op thread (no OpenMP spin-waits on a shared 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
