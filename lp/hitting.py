"""Reachable skewed laws: the hitting function of the drafted set, and its separation.

docs/theory.md sections 5.2, 5.3, 8.1. Notation: P = V^L leaves (complete paths) in lexicographic order
(speclp.verifiers.tree.all_paths), D = the random set of drafted paths (K i.i.d. draws, or
K distinct draws without replacement). Used by the class LP (speclp.lp.class_lp), the node
form (speclp.lp.node_form) and the one-step closed form (speclp.lp.closed_form).

Reachable skewed laws: the hitting function
--------------------------------------------
A selection rule picks one drafted path; its law r on V^L is the *skewed draft law*.
Let f(S) = P(D intersects S) for a set S of paths (the hitting function of D).
  * i.i.d. drafting:        f(S) = g(q(S)),  g(s) = 1 - (1 - s)^K.
  * without replacement:    f(S) = 1 - P(all K distinct draws avoid S)
                                 = 1 - sum over K-sets D inside S^c of w(D),
    w(D) = sum over the K! orders of prod_k q(x_k) / (1 - sum_{j<k} q(x_j)).
    f is NOT a function of q(S) alone (for K = 2 the miss probability is
    sum_{x in S^c} q(x) (q(S^c) - q(x)) / (1 - q(x))).
Claim (both schemes; proof: docs/theory.md Theorem 5.3): the reachable r are exactly
    P_K = { r >= 0 : r(all) = 1, r(S) <= f(S) for every S },
the base polytope of the coverage function f. Its vertices are the greedy vectors
r(y_i) = f({y_1..y_i}) - f({y_1..y_{i-1}}) of the orders y_1 > y_2 > ..., i.e. the laws of
"select the highest-ranked drafted path" (for i.i.d. r(y) = F(y)^K - F(y^-)^K); a point of
P_K is the law of a randomised choice of order. tests/test_class_lp.py checks both
directions by enumeration. greedy_vertex computes the vertices exactly; the
column-generation master (speclp.lp.colgen.priority_law) uses the same laws.

Separation lemma (i.i.d.; exact, O(n log n))
--------------------------------------------
Ground set E (paths, or the nodes of one depth), weights q(e) >= 0, any real values
v(e) (r, or beta), g concave on [0, 1]. F(S) = g(q(S)) - v(S). Then
    min over all S of F(S)  =  min over the prefixes T_k (k = 0..n) of the order
        "q(e) = 0 and v(e) > 0 first, then q(e) > 0 by v(e)/q(e) descending, the rest last".
(Proof: docs/theory.md Lemma 8.1.)
So the most violated constraint r(S) <= f(S) is found by one sort and a scan of
cumulative sums, in exact rationals for the final check. The paths with q(x) = 0 get
r(x) <= f({x}) = 0 (their singleton rows are always in the LP).
Without replacement f is not a function of q(S); separation there is by enumeration of
all 2^n subsets (a subset-sum transform of the outcome weights), so it is limited to
n <= MAX_ENUMERATED_GROUND elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers import single_step
from ..verifiers.drafts import (
    check_draft_sampling,
    multiset_configurations,
    unordered_configurations,
)
from ..verifiers.tree import TreeModel
from .program import exact_fraction

MAX_ENUMERATED_GROUND = 16  # 2^16 - 2 subset rows at most
FLOAT_VIOLATION = 1e-12  # a float cut is added when f(S) - v(S) < -FLOAT_VIOLATION


# ---------------------------------------------------------------------------
# hitting functions f(S) = P(D meets S)
# ---------------------------------------------------------------------------

def g_exact(s: Fraction, paths: int) -> Fraction:
    """g(s) = 1 - (1 - s)^K in exact rationals."""
    return 1 - (1 - s) ** paths


def g_float(s: np.ndarray | float, paths: int) -> np.ndarray:
    """g(s) = 1 - (1 - s)^K in float64 without cancellation for small s: -expm1(K log1p(-s))."""
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        return -np.expm1(paths * np.log1p(-s))


@dataclass
class HittingFunction:
    """f(S) = P(the random drafted set D meets S) on a ground set of n elements.

    kind "iid": D = K i.i.d. draws from q; f(S) = g(q(S)). q_exact [n] Fractions,
    q_float [n] float64.
    kind "outcomes": D takes finitely many values; masks [C] Python ints (bit e = element
    e in D), weights_exact [C] Fractions, weights_float [C] float64.
    """

    kind: str
    size: int
    paths: int
    q_exact: np.ndarray
    q_float: np.ndarray
    masks: list[int] | None = None
    weights_exact: np.ndarray | None = None
    weights_float: np.ndarray | None = None
    _table_cache: dict[bool, np.ndarray] = field(default_factory=dict, repr=False)

    @staticmethod
    def of_token_law(q: np.ndarray, paths: int, draft_sampling: str) -> HittingFunction:
        """The hitting function on the n tokens of one draft row q [n] (exact Fractions or
        float64; a one-step draft): "iid", or "outcomes" over the K-sets drawn without
        replacement (n <= MAX_ENUMERATED_GROUND)."""
        q_exact = _to_exact(q)
        q_float = np.array([float(x) for x in q_exact])
        if draft_sampling == "iid":
            return HittingFunction("iid", len(q_exact), paths, q_exact, q_float)
        if len(q_exact) > MAX_ENUMERATED_GROUND:
            raise ValueError(f"the hitting function of {len(q_exact)} tokens without replacement "
                             f"needs 2^{len(q_exact)} subsets (limit {MAX_ENUMERATED_GROUND})")
        sets, weights = unordered_configurations(q_exact, paths, draft_sampling)
        masks = [mask_of(row) for row in sets]
        return HittingFunction("outcomes", len(q_exact), paths, q_exact, q_float, masks, weights,
                               np.array([float(w) for w in weights]))

    # ---- single sets ------------------------------------------------------
    def exact(self, members: Sequence[int]) -> Fraction:
        """f(S) exactly for S = members (element indices)."""
        if self.kind == "iid":
            return g_exact(sum((self.q_exact[e] for e in members), Fraction(0)), self.paths)
        return self.table(exact=True)[mask_of(members)]  # outcomes: n <= MAX_ENUMERATED_GROUND

    # ---- all subsets --------------------------------------------------------
    def table(self, exact: bool) -> np.ndarray:
        """[2^n] f(S) for every S, indexed by the bit mask of S (bit e = element e)."""
        if self.size > MAX_ENUMERATED_GROUND:
            raise ValueError(f"cannot enumerate the 2^{self.size} subsets of {self.size} elements "
                             f"(limit {MAX_ENUMERATED_GROUND})")
        cache = self._table_cache
        if exact in cache:
            return cache[exact]
        if self.kind == "iid":
            q = self.q_exact if exact else self.q_float
            sums = np.array([Fraction(0)], dtype=object) if exact else np.zeros(1)
            for e in range(self.size):  # new half = masks with bit e set
                sums = np.concatenate([sums, sums + q[e]])
            if exact:
                out = np.array([g_exact(s, self.paths) for s in sums], dtype=object)
            else:
                out = g_float(sums, self.paths)
        else:
            weights = self.weights_exact if exact else self.weights_float
            miss = np.zeros(2**self.size, dtype=object if exact else np.float64)
            if exact:
                miss[:] = Fraction(0)
            for m, w in zip(self.masks, weights, strict=True):
                miss[m] = miss[m] + w
            for e in range(self.size):  # subset-sum (zeta) transform: miss[T] = sum_{D in T} w
                view = miss.reshape(-1, 2, 2**e)
                view[:, 1, :] = view[:, 1, :] + view[:, 0, :]
            total = miss[-1]
            full = 2**self.size - 1
            out = total - miss[full ^ np.arange(2**self.size)]
        cache[exact] = out
        return out

    # ---- separation ------------------------------------------------------------
    def slacks(self, values: np.ndarray, exact: bool) -> tuple[list[Any], list[Any]]:
        """Candidate sets and their slacks F(S) = f(S) - values(S) (values [n]: Fractions when
        exact, else float64); the minimum over the candidates is the minimum over all S.

        i.i.d.: the n prefixes of the separation-lemma order (a tuple of elements each);
        outcomes: all 2^n subsets (bit masks; n <= MAX_ENUMERATED_GROUND).
        """
        if self.kind == "iid":
            q = self.q_exact if exact else self.q_float
            row = np.asarray(values, dtype=object if exact else np.float64)
            order, scores = threshold_scores(row[None, :], q[None, :], self.paths)
            order = order[0]
            sets = [tuple(sorted(int(e) for e in order[: k + 1])) for k in range(len(order))]
            return sets, list(scores[0, 1:])
        vals = values if exact else np.asarray(values, dtype=np.float64)
        sums = np.array([Fraction(0)], dtype=object) if exact else np.zeros(1)
        for e in range(self.size):
            sums = np.concatenate([sums, sums + vals[e]])
        return list(range(2**self.size)), list(self.table(exact) - sums)

    def most_violated(self, values: np.ndarray, exact: bool,
                      limit: int = 1) -> list[tuple[Any, tuple[int, ...]]]:
        """Up to `limit` pairs (F(S), S), most negative first, with F(S) < 0 (exact) or
        F(S) < -FLOAT_VIOLATION (float); S as a sorted tuple of elements."""
        sets, scores = self.slacks(values, exact)
        threshold = 0 if exact else -FLOAT_VIOLATION
        found: list[tuple[Any, tuple[int, ...]]] = []
        for i in sorted(range(len(scores)), key=lambda i: scores[i]):
            if not scores[i] < threshold or len(found) >= limit:
                break
            members = sets[i] if isinstance(sets[i], tuple) else members_of(sets[i])
            found.append((scores[i], members))
        return found

    def minimum(self, values: np.ndarray, exact: bool) -> tuple[Any, tuple[int, ...]]:
        """(min over all S of f(S) - values(S), a minimiser); the empty set gives 0."""
        sets, scores = self.slacks(values, exact)
        i = min(range(len(scores)), key=lambda i: scores[i])
        if scores[i] < 0:
            return scores[i], (sets[i] if isinstance(sets[i], tuple) else members_of(sets[i]))
        return (Fraction(0) if exact else 0.0), ()


def separation_order(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    """[n] the separation-lemma order: q = 0 < v first, then q > 0 by v/q descending
    (ties by index), then the rest. Exact when values and q are Fractions."""
    return threshold_scores(np.asarray(values)[None, :], np.asarray(q)[None, :], 1)[0][0]


def threshold_scores(values: np.ndarray, q: np.ndarray, paths: int,
                     order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The separation lemma, batched: (order [B, n], scores [B, n + 1]).

    values, q: [B, n] (float64, or object arrays of Fractions: then everything is exact).
    order[b] is the separation order of row b (q = 0 < v first, then q > 0 by v/q
    descending with ties by index, then the rest); scores[b, k] = g(q(T_k)) - v(T_k) for
    the prefix T_k of its first k elements, g(s) = 1 - (1 - s)^K. By the lemma, min_k
    scores[b, k] = min over ALL subsets S of g(q(S)) - v(S). O(B n log n); pass the order of
    a previous call to reuse the sort (another K, same rows). One implementation:
    speclp.verifiers.single_step.threshold_scores (torch-free on numpy rows), which the
    verifiers' single-step rule uses as well.
    """
    values, q = np.asarray(values), np.asarray(q)
    if q.dtype == object or values.dtype == object:
        values, q = values.astype(object), q.astype(object)
    else:
        values, q = values.astype(np.float64), q.astype(np.float64)
    return single_step.threshold_scores(values, q, paths, order)


def mask_of(members: Sequence[int]) -> int:
    mask = 0
    for e in members:
        mask |= 1 << int(e)
    return mask


def members_of(mask: int) -> tuple[int, ...]:
    return tuple(e for e in range(mask.bit_length()) if mask >> e & 1)


def _to_exact(values: np.ndarray) -> np.ndarray:
    return np.array([exact_fraction(v) for v in values], dtype=object)


def hitting_function(model: TreeModel, paths: int, draft_sampling: str = "iid",
                     depth: int | None = None) -> HittingFunction:
    """f on the nodes of one depth d (default L: the paths) for K drafted paths.

    Element e = node code at depth d (lexicographic); f(S) = P(some drafted path passes
    through a node of S). model must be exact (Fraction rows; float instances: the exact
    binary values).
    """
    check_draft_sampling(draft_sampling)
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    vocab, full_depth = model.vocab_size, model.depth
    d = full_depth if depth is None else depth
    q_exact = _to_exact(model.draft_path_probabilities(d))
    q_float = np.array([float(x) for x in q_exact])
    size = len(q_exact)
    if draft_sampling == "iid":
        return HittingFunction("iid", size, paths, q_exact, q_float)
    if size > MAX_ENUMERATED_GROUND:
        raise ValueError(
            f"draft_sampling without-replacement: the hitting function on {size} nodes is "
            f"separated by enumerating 2^{size} subsets (limit {MAX_ENUMERATED_GROUND}); "
            "use a smaller vocabulary or depth, or iid drafting")
    configs = multiset_configurations(model, paths, draft_sampling)
    shift = vocab ** (full_depth - d)
    masks = [mask_of({int(x) // shift for x in row}) for row in configs.paths]
    weights = _to_exact(configs.weight)
    return HittingFunction("outcomes", size, paths, q_exact, q_float, masks, weights,
                           np.array([float(w) for w in weights]))


