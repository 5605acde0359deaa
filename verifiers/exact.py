"""Exact enumeration: every draft configuration of a small instance as one batch.

A draft configuration is an ordered K-tuple of length-L paths with its probability
(speclp.verifiers.drafts, the one enumerator: prod_k q(x_k) for i.i.d. drafting,
prod_k q(x_k) / (1 - sum_{j<k} q(x_j)) without replacement). Ordered tuples (not
multisets) are enumerated because several verifiers read the paths in order (SpecInfer,
"BV on the first path").

The output law of a verifier is aggregated by node:
    emit[u, t] = P(output node = u, Y = t)           [N, V], u of depth 0..L
from which the block efficiency E[tau + 1] = sum emit[u, t] (|u| + 1) and the law of
the output continued by target sampling to depth L+1 (compared with the target law
in total variation) follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import ops
from .drafts import DRAFT_SAMPLING, Configurations, ordered_configurations
from .law import BlockLaw, DraftTree, block_law
from .tree import TreeModel, depth_offset, node_depths, num_nodes, prefix_node_indices

__all__ = ["DRAFT_SAMPLING", "Configurations", "ExactResult", "configurations", "exact_result"]


def configurations(model: TreeModel, paths: int, draft_sampling: str = "iid") -> Configurations:
    """All ordered K-tuples of drafted paths with their probabilities (tokens [C, K, L],
    probability [C]); see speclp.verifiers.drafts.ordered_configurations."""
    return ordered_configurations(model, paths, draft_sampling)


def draft_tree(model: TreeModel, tokens: np.ndarray, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float64) -> DraftTree:
    """Gather the rows along every path. tokens [C, K, L].

    Exact instances give numpy object rows; float instances give torch tensors.
    """
    nodes = prefix_node_indices(tokens, model.vocab_size)  # [C, K, L+1]
    if model.exact:
        return DraftTree(np.asarray(tokens), model.target[nodes], model.draft[nodes[..., :-1]])
    target = torch.as_tensor(model.target, dtype=dtype, device=device)
    draft = torch.as_tensor(model.draft, dtype=dtype, device=device)
    nodes_t = torch.as_tensor(nodes, device=device)
    return DraftTree(torch.as_tensor(tokens, device=device), target[nodes_t], draft[nodes_t[..., :-1]])


@dataclass
class ExactResult:
    """Exact output law of one verifier on one instance, aggregated by node."""

    emit: np.ndarray  # [N, V] P(output node = u, Y = t), float64 or exact
    block_efficiency: Any  # E[tau + 1]
    total_variation: float  # TV(output continued by target sampling, target law) at depth L+1
    configurations: int


def aggregate(model: TreeModel, configs: Configurations, law: BlockLaw) -> np.ndarray:
    """[N, V] P(node, token) from a batch law over configurations."""
    vocab, depth = model.vocab_size, model.depth
    nodes = prefix_node_indices(configs.tokens, vocab)  # [C, K, L+1]
    joint = law.joint()
    if ops.is_torch(joint):
        joint = joint.to(torch.float64).cpu().numpy()
    weights = configs.probability.reshape((-1,) + (1,) * (joint.ndim - 1))
    weighted = (joint * weights).reshape(-1, vocab)
    emit = np.zeros((num_nodes(vocab, depth), vocab), dtype=weighted.dtype)
    if weighted.dtype == object:
        emit[...] = model.target[0, 0] * 0
    np.add.at(emit, nodes.reshape(-1), weighted)
    return emit


def block_efficiency_from_emit(model: TreeModel, emit: np.ndarray) -> Any:
    depths = node_depths(model.vocab_size, model.depth)
    return (emit.sum(axis=1) * (depths + 1)).sum()


def continued_law(model: TreeModel, emit: np.ndarray) -> np.ndarray:
    """[V^(L+1)] law of the output block continued by target sampling to length L+1.

    G(s) = P(the output starts with s and the block ended within s); G(root) = 0 and
    G(s t) = G(s) p(t|s) + emit[s, t]. At length L+1 every block has ended, so the
    continued law is G over the sequences of length L+1.
    """
    vocab, depth = model.vocab_size, model.depth
    zero = model.target[0, 0] * 0
    done = np.array([zero], dtype=emit.dtype)  # G at depth 0: nothing has ended before the root
    for d in range(depth + 1):
        start, count = depth_offset(vocab, d), vocab**d
        rows = model.target[start : start + count]
        sampled = done[:, None] * rows  # [V^d, V]
        if d == depth:
            return (sampled + emit[start : start + count]).reshape(-1)
        done = (sampled + emit[start : start + count]).reshape(-1)
    raise AssertionError("unreachable")


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    diff = a - b
    if diff.dtype == object:
        return float(sum(abs(x) for x in diff) / 2)
    return float(np.abs(diff).sum() / 2)


def exact_result(model: TreeModel, verifier: str | Callable[[DraftTree], BlockLaw],
                 paths: int = 1, draft_sampling: str = "iid",
                 chunk: int = 1 << 16) -> ExactResult:
    """Exact law, block efficiency and losslessness of a verifier on an instance.

    verifier: a registered name, or a law function DraftTree -> BlockLaw (e.g. a rule that
    needs the instance, like speclp.proofs.reference.mixture_law).

    Float instances run through torch in float64 on the CPU in chunks of `chunk`
    configurations; exact instances run on numpy object arrays.
    """
    configs = configurations(model, paths, draft_sampling)
    if len(configs.probability) == 0:
        raise ValueError(f"no draft configuration of {paths} path(s) ({draft_sampling}) has "
                         "positive probability")
    emit = None
    total = len(configs.probability)
    for start in range(0, total, chunk):
        part = configs.part(start, start + chunk)
        tree = draft_tree(model, part.tokens)
        law = verifier(tree) if callable(verifier) else block_law(verifier, tree)
        piece = aggregate(model, part, law)
        emit = piece if emit is None else emit + piece
    target = model.target_path_probabilities(model.depth + 1)
    tv = total_variation(continued_law(model, emit), target)
    return ExactResult(emit, block_efficiency_from_emit(model, emit), tv, total)
