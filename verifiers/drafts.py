"""Draft configurations: the K drafted paths of a small instance, enumerated with their weights.

The one enumerator of the project (the LPs in speclp.lp and the exact verifier laws in
speclp.verifiers.exact both use it). Numpy only: importing it does not import torch.

Paths are the P = V^L leaves of the complete V-ary tree of depth L, numbered
lexicographically (speclp.verifiers.tree.all_paths); q(x) is the draft probability of
leaf x. Only leaves with q(x) > 0 are ever drafted, so only they are enumerated.

Two draft laws (DRAFT_SAMPLING):
    "iid"                  K paths drawn independently from q;
    "without-replacement"  K distinct paths drawn one after another from q renormalised
                           over the paths not yet drawn.
The probability of an ORDERED tuple (x_1..x_K) is
    iid:                   prod_k q(x_k)
    without replacement:   prod_k q(x_k) / (1 - q(x_1) - ... - q(x_{k-1}))
and the weight of an UNORDERED configuration (a multiset for iid, a set without
replacement) is the sum of its orderings' probabilities: multinomial(K; multiplicities)
prod_k q(x_k) for iid, the sum over the K! orders for drafting without replacement.
A verifier whose law depends only on the set of drafted paths (or any rule that may read
the whole configuration, like the LP's) needs only the unordered configurations.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..inputs import BadArgument
from .tree import SIZE_CAP, TreeModel, all_paths, capped_comb, capped_power

DRAFT_SAMPLING = ("iid", "without-replacement")


@dataclass
class Configurations:
    """Draft configurations of one instance.

    paths [C, K] int64 leaf indices into path_tokens: ordered tuples (ordered=True), or
    sorted tuples (non-decreasing for iid multisets, increasing for sets drawn without
    replacement; ordered=False). weight [C] float64, or exact (object array) on exact
    models: the probability of the ordered tuple, or the weight of the unordered
    configuration (the sum over its orderings). path_tokens [P, L] token ids of every leaf.
    """

    paths: np.ndarray
    weight: np.ndarray
    path_tokens: np.ndarray
    draft_sampling: str
    ordered: bool

    def __len__(self) -> int:
        return int(len(self.paths))

    @property
    def tokens(self) -> np.ndarray:
        """[C, K, L] token ids of every drafted path."""
        return self.path_tokens[self.paths]

    @property
    def probability(self) -> np.ndarray:
        """[C] the weights (for ordered tuples: the probability of each tuple)."""
        return self.weight

    def part(self, start: int, stop: int) -> Configurations:
        """The configurations start..stop-1 (same leaves)."""
        return Configurations(self.paths[start:stop], self.weight[start:stop], self.path_tokens,
                              self.draft_sampling, self.ordered)

    def label(self, c: int) -> str:
        return str(tuple(tuple(int(t) for t in self.path_tokens[p]) for p in self.paths[c]))


def check_draft_sampling(draft_sampling: str) -> None:
    if draft_sampling not in DRAFT_SAMPLING:
        raise BadArgument("draft_sampling", f"must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")


def count_configurations(leaves: int, paths: int, draft_sampling: str,
                         ordered: bool = False) -> int:
    """Number of configurations of K = paths drafts over `leaves` leaves with q > 0, capped at
    verifiers.tree.SIZE_CAP so that absurd sizes are never computed."""
    if draft_sampling == "iid":
        return capped_power(leaves, paths) if ordered else capped_comb(leaves + paths - 1, paths)
    if ordered:
        if paths > leaves:
            return 0
        return min(capped_comb(leaves, paths) * math.factorial(paths), SIZE_CAP) if paths < 21 \
            else SIZE_CAP
    return capped_comb(leaves, paths)


def positive_leaves(model: TreeModel) -> tuple[np.ndarray, np.ndarray]:
    """(q [P] draft probability of every leaf, indices [P+] of the leaves with q > 0)."""
    q = model.draft_path_probabilities()
    mask = np.array([x != 0 for x in q], dtype=bool) if q.dtype == object else q > 0
    return q, np.nonzero(mask)[0]


def sorted_tuples(count: int, size: int, strict: bool) -> np.ndarray:
    """[C, size] all non-decreasing (strict: increasing) tuples over range(count), lexicographic."""
    combos = np.arange(count, dtype=np.int64)[:, None]
    for _ in range(1, size):
        start = combos[:, -1] + (1 if strict else 0)
        counts = np.maximum(count - start, 0)
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(combos)), counts)
        offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        combos = np.concatenate([combos[owner], (start[owner] + offset)[:, None]], axis=1)
    return combos


def ordered_probability(q_columns: list[Any], draft_sampling: str) -> Any:
    """Probability of ordered tuples from the draft probabilities of their K paths.

    q_columns: K arrays [C] (q of the k-th path of every tuple). iid: prod_k q_k; without
    replacement: prod_k q_k / (1 - sum_{j<k} q_j) (the tuples' paths must be distinct).
    """
    probability = q_columns[0]
    used = q_columns[0]
    for q_k in q_columns[1:]:
        if draft_sampling == "iid":
            probability = probability * q_k
        else:
            probability = probability * q_k / (1 - used)
            used = used + q_k
    return probability


def check_enough_paths(positive: int, paths: int, draft_sampling: str) -> None:
    """ValueError unless K = paths >= 1 drafts can be drawn from `positive` leaves."""
    if paths < 1:
        raise BadArgument("paths", f"must be >= 1, got {paths}")
    if draft_sampling == "without-replacement" and paths > positive:
        raise BadArgument("paths", f"cannot draw {paths} distinct paths: only {positive} paths have draft "
                         "probability > 0")


def ordered_configurations(model: TreeModel, paths: int,
                           draft_sampling: str = "iid") -> Configurations:
    """Every ordered K-tuple of drafted paths (leaves with q > 0) with its probability."""
    check_draft_sampling(draft_sampling)
    q, positive = positive_leaves(model)
    check_enough_paths(len(positive), paths, draft_sampling)
    grid = np.stack(np.meshgrid(*[positive] * paths, indexing="ij"), -1).reshape(-1, paths)
    if draft_sampling == "without-replacement":
        distinct = np.ones(len(grid), dtype=bool)
        for a, b in itertools.combinations(range(paths), 2):
            distinct &= grid[:, a] != grid[:, b]
        grid = grid[distinct]
    probability = ordered_probability([q[grid[:, k]] for k in range(paths)], draft_sampling)
    return Configurations(grid, probability, all_paths(model.vocab_size, model.depth),
                          draft_sampling, ordered=True)


def unordered_configurations(q: np.ndarray, paths: int, draft_sampling: str = "iid"
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Every multiset (iid) or set (without replacement) of K draws from the law q [n] (only
    the elements with q > 0), with its weight (the total probability of its orderings).

    Returns (sets [C, K] sorted element indices, weight [C]; float64 or exact like q).
    """
    check_draft_sampling(draft_sampling)
    q = np.asarray(q)
    positive = np.nonzero(np.array([x != 0 for x in q], dtype=bool) if q.dtype == object
                          else q > 0)[0]
    check_enough_paths(len(positive), paths, draft_sampling)
    strict = draft_sampling == "without-replacement"
    combos = positive[sorted_tuples(len(positive), paths, strict)]  # [C, K]
    columns = [q[combos[:, k]] for k in range(paths)]
    if not strict:
        # multinomial coefficient K! / prod(multiplicity!) from run lengths of the sorted tuple
        # (Python integers: K! and the products of factorials overflow int64 beyond K = 20)
        run = np.ones(len(combos), dtype=np.int64)
        denominator = np.ones(len(combos), dtype=object)
        for k in range(1, paths):
            run = np.where(combos[:, k] == combos[:, k - 1], run + 1, 1)
            denominator = denominator * run.astype(object)
        coefficient = math.factorial(paths) // denominator  # object array of Python ints
        weight = ordered_probability(columns, "iid") * (
            coefficient if q.dtype == object else coefficient.astype(np.float64))
    else:
        weight = None
        for order in itertools.permutations(range(paths)):
            term = ordered_probability([columns[k] for k in order], draft_sampling)
            weight = term if weight is None else weight + term
    return combos, weight


def multiset_configurations(model: TreeModel, paths: int,
                            draft_sampling: str = "iid") -> Configurations:
    """Every multiset (iid) or set (without replacement) of K drafted paths, with its weight
    (the total probability of its orderings)."""
    combos, weight = unordered_configurations(model.draft_path_probabilities(), paths,
                                              draft_sampling)
    return Configurations(combos, weight, all_paths(model.vocab_size, model.depth),
                          draft_sampling, ordered=False)
