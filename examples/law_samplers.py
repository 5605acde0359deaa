"""Samplers built from the registered laws, in the audit's sampler signature.

    speclp audit --sampler examples/law_samplers.py:gbv

Every registered verifier NAME is available as the attribute NAME of this module
(`sampler_for(NAME)`): the sampler computes the verifier's exact law on the batch of
drafted trees (torch, float64) and draws one block from it (verifiers.law.sample_block).
These are the samplers the audit must pass (tests/test_sampler_audit.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from speclp.verifiers.law import DraftTree, sample_block
from speclp.verifiers.registry import block_law, get_verifier


def sampler_for(name: str) -> Callable[..., np.ndarray]:
    """Batched sampler of the registered verifier `name`:
    (target [B, K, L+1, V], draft [B, K, L, V], paths [B, K, L], rng) -> blocks [B, L+1]."""
    get_verifier(name)  # KeyError for an unknown name
    return sampler_from_law(lambda tree: block_law(name, tree), name)


def sampler_from_law(law: Callable[[DraftTree], Any], name: str) -> Callable[..., np.ndarray]:
    """Batched sampler drawing one block per configuration from a law function
    DraftTree -> BlockLaw (torch rows, float64)."""

    def sample(target_rows: np.ndarray, draft_rows: np.ndarray, paths: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
        tree = DraftTree(torch.as_tensor(paths), torch.as_tensor(target_rows, dtype=torch.float64),
                         torch.as_tensor(draft_rows, dtype=torch.float64))
        generator = torch.Generator().manual_seed(int(rng.integers(2**63 - 1)))
        path, accepted, token = sample_block(law(tree), generator)
        batch, depth = paths.shape[0], paths.shape[2]
        blocks = np.full((batch, depth + 1), -1, dtype=np.int64)
        rows = np.arange(batch)
        chosen = paths[rows, path.numpy()]  # [B, L] the path carrying the output node
        accepted = accepted.numpy()
        for i in range(depth):
            blocks[:, i] = np.where(accepted > i, chosen[:, i], blocks[:, i])
        blocks[rows, accepted] = token.numpy()
        return blocks

    sample.__name__ = name
    return sample


def __getattr__(name: str) -> Any:  # module attribute NAME -> sampler_for(NAME)
    try:
        return sampler_for(name)
    except KeyError:
        raise AttributeError(name) from None
