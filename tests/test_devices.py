"""CUDA readiness of the select-then-BV laws (issue 20, part 4).

1. The same law on "cpu" and on every other available device (float64 rows, every draft
   configuration of small instances, aggregated by node: emit and TV to the target), for BV,
   GBV, nodeopt and SpecInfer. Without a second device that test is skipped with its reason;
   what always runs is the float32-versus-float64 comparison on the CPU (within 1e-5), which
   fails on a dtype bug, and the exact losslessness of the device law (TV <= 1e-12).
2. No host synchronisation inside a step of gbv, nodeopt or bv: torch.Tensor.item, tolist,
   __bool__, __int__, __float__ and __index__ are counted while block_law runs on a float32
   tree above nodeopt's support (the pooled layout, as on a real vocabulary); the count must
   be 0. The counter itself is checked on a function that calls .item() (it must count 1).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.exact import (
    aggregate,
    block_efficiency_from_emit,
    continued_law,
    draft_tree,
    enumerated_configurations,
    total_variation,
)
from speclp.verifiers.law import DraftTree, sample_block
from speclp.verifiers.registry import block_law

VERIFIERS = ["bv", "gbv", "nodeopt", "specinfer"]
SHAPES = [(3, 2, 3), (4, 2, 2), (2, 3, 3)]  # (V, L, K)


def other_devices() -> list[str]:
    out = []
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def device_law(model, verifier: str, paths: int, device: str, dtype: torch.dtype):
    """(emit [N, V] float64 numpy, E[tau + 1], TV to the target) of the verifier's law computed
    on `device` in `dtype`, over every draft configuration."""
    configs, _ = enumerated_configurations(model, verifier, paths)
    law = block_law(verifier, draft_tree(model, configs.tokens, device=device, dtype=dtype))
    emit = aggregate(model, configs, law)
    target = model.target_path_probabilities(model.depth + 1)
    return emit, block_efficiency_from_emit(model, emit), total_variation(
        continued_law(model, emit), target)


def every_law_case(test):
    """Parametrise `test` over VERIFIERS x SHAPES (its arguments verifier, shape; the
    instance of a shape is case_model's)."""
    return pytest.mark.parametrize("verifier", VERIFIERS)(pytest.mark.parametrize("shape", SHAPES)(test))


def case_model(shape: tuple[int, int, int]):
    """(model, paths) of a (V, L, K) shape: the Dirichlet(0.7) instance of seed 5."""
    vocab, depth, paths = shape
    return dirichlet_instance(vocab, depth, alpha=0.7, seed=5).model(), paths


@every_law_case
def test_float32_law_matches_float64_on_the_cpu(verifier, shape):
    model, paths = case_model(shape)
    emit64, value64, tv64 = device_law(model, verifier, paths, "cpu", torch.float64)
    emit32, value32, _ = device_law(model, verifier, paths, "cpu", torch.float32)
    assert tv64 <= 1e-12
    assert np.abs(emit32 - emit64).max() <= 1e-5
    assert abs(value32 - value64) <= 1e-5


@pytest.mark.skipif(not other_devices(), reason="no device other than the CPU here (no CUDA, "
                    "no MPS): the cpu-vs-device law comparison needs one")
@every_law_case
def test_same_law_on_every_device(verifier, shape):
    model, paths = case_model(shape)
    emit_cpu, value_cpu, _ = device_law(model, verifier, paths, "cpu", torch.float64)
    for device in other_devices():
        emit, value, tv = device_law(model, verifier, paths, device, torch.float64)
        assert tv <= 1e-12, device
        assert np.abs(emit - emit_cpu).max() <= 1e-12, device
        assert abs(value - value_cpu) <= 1e-12, device


SYNCING = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def counted_syncs():
    """Count the calls of the Tensor methods that wait for the device (SYNCING)."""
    calls = {"count": 0, "where": []}
    saved = {name: getattr(torch.Tensor, name) for name in SYNCING}

    def wrap(name, original):
        def method(self, *args, **kwargs):
            calls["count"] += 1
            calls["where"].append(name)
            return original(self, *args, **kwargs)
        return method

    try:
        for name, original in saved.items():
            setattr(torch.Tensor, name, wrap(name, original))
        yield calls
    finally:
        for name, original in saved.items():
            setattr(torch.Tensor, name, original)


def _big_tree(paths: int = 3, depth: int = 4, vocab: int = 5000) -> DraftTree:
    """A float32 tree above nodeopt's support (the pooled layout); paths that share a prefix
    share its rows (the DraftTree contract), drafted depth by depth; two paths are made equal
    on their first two tokens so that shared nodes occur."""
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(1, paths, depth + 1, vocab, generator=generator)
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits[:, :, :depth] / 1.3
                          + 0.5 * torch.randn(1, paths, depth, vocab, generator=generator), -1)
    tokens = torch.zeros(1, paths, depth, dtype=torch.long)
    for i in range(depth + 1):
        for k in range(1, paths):
            for j in range(k):
                if bool((tokens[0, j, :i] == tokens[0, k, :i]).all()):
                    target[0, k, i] = target[0, j, i]
                    if i < depth:
                        draft[0, k, i] = draft[0, j, i]
                    break
        if i < depth:
            tokens[0, :, i] = torch.multinomial(draft[0, :, i], 1, generator=generator)[:, 0]
            if i < 2:
                tokens[0, 1, i] = tokens[0, 0, i]
    return DraftTree(tokens, target, draft)


def test_the_sync_counter_counts():
    tree = _big_tree()
    with counted_syncs() as calls:
        tree.target_rows.sum().item()
        bool(tree.tokens.max() > 0)
    assert calls["count"] == 2


@pytest.mark.parametrize("verifier", ["bv", "gbv", "nodeopt"])
def test_no_host_synchronisation_inside_a_step(verifier):
    tree = _big_tree()
    block_law(verifier, tree)  # first call outside: lazy imports, caches
    with counted_syncs() as calls:
        law = block_law(verifier, tree)
    assert calls["count"] == 0, calls["where"]
    path, accepted, token = sample_block(law, torch.Generator().manual_seed(1))
    assert 0 <= int(path[0]) < tree.paths and 0 <= int(accepted[0]) <= tree.depth
    assert law.stop[0, int(path[0]), int(accepted[0])] > 0
    assert abs(float(law.joint().double().sum()) - 1) <= 1e-4
