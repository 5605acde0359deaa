"""Prefix trees over a small vocabulary: shortlex node indexing and model rows.

A *node* is a prefix x = (x_1..x_d) of length d in 0..L. Nodes are numbered in
shortlex order: (), (0), ..., (V-1), (0,0), (0,1), ...; the node of x has index
    (V^d - 1)/(V - 1) + sum_i x_i V^(d-1-i).
A `TreeModel` holds the target and draft next-token rows at every node of depth
0..L (shape [N, V], N = (V^(L+1) - 1)/(V - 1)), as float64 or as exact rationals
(numpy object arrays). Draft rows at depth L are never used; target rows at depth L
give the bonus token.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

SIZE_CAP = 2**63  # sizes above this are reported as "more than 9.2e18" (never computed)


def capped_power(base: int, exponent: int, cap: int = SIZE_CAP) -> int:
    """min(base ** exponent, cap) for base >= 1, exponent >= 0, without computing a huge power.

    Size estimates call this before anything is allocated, so that absurd inputs (depth
    20000, vocabulary 10^6) are refused at once instead of computing numbers with millions
    of digits.
    """
    if base <= 1 or exponent <= 0:
        return 1 if exponent <= 0 or base == 1 else 0
    if exponent * math.log2(base) > math.log2(cap) + 1:
        return cap
    return min(base**exponent, cap)


def capped_comb(n: int, k: int, cap: int = SIZE_CAP) -> int:
    """min(comb(n, k), cap), estimating the logarithm first (math.lgamma) so that a huge
    binomial coefficient is never computed."""
    if k < 0 or k > n:
        return 0
    k = min(k, n - k)
    if k == 0:
        return 1
    log2_comb = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)
    if log2_comb > math.log2(cap) + 1:
        return cap
    return min(math.comb(n, k), cap)


MAX_TUPLES = 1_000_000  # default limit on the ordered draft tuples one exact law enumerates
# (speclp gap / sweep: above it a verifier's block efficiency is estimated, not enumerated)
ESTIMATE_SAMPLES = 4096  # default sampled draft configurations of one estimated law


def ordered_tuple_count(vocab: int, depth: int, paths: int) -> int:
    """Ordered K-tuples of length-L paths that verifiers.exact.configurations enumerates,
    (V^L)^K, capped at SIZE_CAP (safe on any shape; kept here, free of torch, so that a size
    check runs before torch is imported)."""
    return capped_power(capped_power(vocab, depth), paths)


def capped_num_nodes(vocab_size: int, depth: int, cap: int = SIZE_CAP) -> int:
    """min(num_nodes(vocab_size, depth), cap), safe for any size (see capped_power)."""
    top = capped_power(vocab_size, depth + 1, cap)
    return cap if top >= cap else num_nodes(vocab_size, depth)


def depth_offset(vocab_size: int, depth: int) -> int:
    """Index of the first node of the given depth: (V^d - 1)/(V - 1)."""
    return (vocab_size**depth - 1) // (vocab_size - 1)


def num_nodes(vocab_size: int, depth: int) -> int:
    """Number of nodes of depth 0..depth."""
    return depth_offset(vocab_size, depth + 1)


def node_index(prefix: tuple[int, ...] | list[int], vocab_size: int) -> int:
    d = len(prefix)
    code = 0
    for token in prefix:
        code = code * vocab_size + int(token)
    return depth_offset(vocab_size, d) + code


def node_prefix(index: int, vocab_size: int) -> tuple[int, ...]:
    """Inverse of node_index."""
    d = 0
    while num_nodes(vocab_size, d) <= index:
        d += 1
    code = index - depth_offset(vocab_size, d)
    out = []
    for _ in range(d):
        out.append(code % vocab_size)
        code //= vocab_size
    return tuple(reversed(out))


def node_depths(vocab_size: int, depth: int) -> np.ndarray:
    """[N] depth of every node."""
    return np.concatenate(
        [np.full(vocab_size**d, d, dtype=np.int64) for d in range(depth + 1)]
    )


def node_parents(vocab_size: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """([N] parent index (-1 for the root), [N] last token (-1 for the root))."""
    parents = [np.array([-1])]
    last = [np.array([-1])]
    for d in range(1, depth + 1):
        code = np.arange(vocab_size**d)
        parents.append(depth_offset(vocab_size, d - 1) + code // vocab_size)
        last.append(code % vocab_size)
    return np.concatenate(parents).astype(np.int64), np.concatenate(last).astype(np.int64)


def all_paths(vocab_size: int, depth: int) -> np.ndarray:
    """[V^L, L] every path of length L, in lexicographic order (row j = base-V digits of j)."""
    code = np.arange(vocab_size**depth, dtype=np.int64)
    digits = [(code // vocab_size ** (depth - 1 - i)) % vocab_size for i in range(depth)]
    return np.stack(digits, axis=1) if depth else np.zeros((1, 0), dtype=np.int64)


def prefix_node_indices(tokens: Any, vocab_size: int) -> Any:
    """[..., L] token ids -> [..., L+1] node index of every prefix (length 0..L).

    Works on numpy int arrays and torch long tensors (this module does not import torch:
    a tensor can only come from code that already did).
    """
    torch = sys.modules.get("torch")
    is_tensor = torch is not None and isinstance(tokens, torch.Tensor)
    if is_tensor:
        codes = [torch.zeros(tokens.shape[:-1], dtype=torch.long, device=tokens.device)]
    else:
        tokens = np.asarray(tokens, dtype=np.int64)
        codes = [np.zeros(tokens.shape[:-1], dtype=np.int64)]
    for i in range(tokens.shape[-1]):
        codes.append(codes[-1] * vocab_size + tokens[..., i])
    out = [depth_offset(vocab_size, d) + c for d, c in enumerate(codes)]
    if is_tensor:
        return torch.stack(out, dim=-1)
    return np.stack(out, axis=-1)


class NodeRows:
    """What a model with a `target` [n, V] row per node knows of itself (TreeModel and
    verifiers.ragged.RaggedModel): its vocabulary size and whether it is exact."""

    target: np.ndarray

    @property
    def vocab_size(self) -> int:
        return int(self.target.shape[1])

    @property
    def exact(self) -> bool:
        """Rows of exact rationals (a numpy object array), else float64."""
        return self.target.dtype == object


@dataclass(frozen=True)
class TreeModel(NodeRows):
    """Target and draft rows at every node of depth 0..depth, shortlex order.

    target, draft: [N, V] arrays, float64 or numpy object arrays of exact rationals.
    """

    target: np.ndarray
    draft: np.ndarray
    depth: int

    def draft_path_probabilities(self, depth: int | None = None) -> np.ndarray:
        """[V^d] draft probability q(x) of every path of length d (default L), lexicographic."""
        d = self.depth if depth is None else depth
        return _path_probabilities(self.draft, self.vocab_size, d)

    def target_path_probabilities(self, depth: int | None = None) -> np.ndarray:
        """[V^d] target probability p(x) of every sequence of length d (d may be L+1)."""
        d = self.depth if depth is None else depth
        return _path_probabilities(self.target, self.vocab_size, d)

    def node_probabilities(self, which: str = "draft") -> np.ndarray:
        """[N] path probability of every node (root = 1) under the draft or the target."""
        rows = self.draft if which == "draft" else self.target
        parts = [_path_probabilities(rows, self.vocab_size, d) for d in range(self.depth + 1)]
        return np.concatenate(parts)

    def to_float(self) -> TreeModel:
        if not self.exact:
            return self
        to64 = np.vectorize(float, otypes=[np.float64])
        return TreeModel(to64(self.target), to64(self.draft), self.depth)


def _path_probabilities(rows: np.ndarray, vocab_size: int, depth: int) -> np.ndarray:
    """Probability of every length-`depth` path under rows (needs depth-1 <= tree depth)."""
    if rows.dtype == object:
        probs = np.array([Fraction(1)], dtype=object) * (rows[0, 0] * 0 + 1)
    else:
        probs = np.ones(1, dtype=rows.dtype)
    for d in range(depth):
        start = depth_offset(vocab_size, d)
        block = rows[start : start + vocab_size**d]  # [V^d, V]
        probs = (probs[:, None] * block).reshape(-1)
    return probs
