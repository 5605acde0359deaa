"""The LP's optimal rule as a verifier (small instances): what the practical rules leave out.

The certified K-path optimum (speclp.lp.optimum, column generation) comes with an optimal
selection mixture (speclp.lp.colgen.SelectionMixture): priorities pi_k (strict orders of the
P = V^L leaves, best first) with weights lambda_k, and the skewed law r = sum_k lambda_k r_k
of the selected leaf. The reference verifier is that mixture, run:

    draw a priority k with probability lambda_k; select the drafted path whose leaf comes
    first in pi_k; run BV on it with r (its node conditionals r(t|u) = r(u t) / r(u)) in
    place of q.

Its exact law on a drafted tree (mixture_law): path j is selected with probability
    sum_k lambda_k [leaf(j) is the best drafted leaf under pi_k] / #(paths equal to path j)
and its output is BV's law on path j with the rows r(.|prefix). It is lossless (for i.i.d.
drafting, and without replacement with that scheme's greedy laws: docs/theory.md Lemma 5.1
and section 6.4); its block efficiency is BV's closed form with r, which the optimum certificate
already checked equals the optimum (mixture_value_matches). The law here is computed
independently of that certificate, configuration by configuration (verifiers.exact), so
TV = 0 and E[tau + 1] = optimum is a real check (reference_check).

Not a registered verifier: it needs the instance's optimum, i.e. rows off the drafted tree.
Exact (Fractions) when the mixture is exact and the tree is rational; float64 otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from ..lp.colgen import SelectionMixture
from ..lp.engine import Optimum, optimum
from ..lp.instance import Instance
from ..rationals import fraction_text
from ..verifiers import ops
from ..verifiers.exact import exact_result
from ..verifiers.law import BlockLaw, DraftTree
from ..verifiers.ops import torch  # imported on first use (ops._LazyTorch)
from ..verifiers.registry import get_verifier
from ..verifiers.single_path import bv_path_law
from ..verifiers.tree import TreeModel, node_parents, num_nodes, prefix_node_indices

LawFunction = Callable[[DraftTree], BlockLaw]


def conditional_rows(mixture: SelectionMixture, vocab: int, depth: int) -> np.ndarray:
    """[N, V] r(t | u) = r(u t) / r(u) at every node u of depth < L (0 where r(u) = 0);
    r(node) = the mixture's leaf law summed over the leaves below the node."""
    exact = mixture.exact
    nodes = num_nodes(vocab, depth)
    parents, last = node_parents(vocab, depth)
    mass = np.empty(nodes, dtype=object if exact else np.float64)
    mass[:] = Fraction(0) if exact else 0.0
    leaves = prefix_node_indices(mixture.path_tokens, vocab)[:, -1]  # [P] node of every leaf
    mass[leaves] = mixture.leaf_law
    for node in range(nodes - 1, 0, -1):  # children come after their parent (shortlex)
        mass[parents[node]] += mass[node]
    rows = np.empty((nodes, vocab), dtype=mass.dtype)
    rows[:] = Fraction(0) if exact else 0.0
    for node in range(1, nodes):
        parent = parents[node]
        if mass[parent] != 0:
            rows[parent, last[node]] = mass[node] / mass[parent]
    return rows


def mixture_law(mixture: SelectionMixture, vocab: int, depth: int) -> LawFunction:
    """The law function of the reference verifier (module docstring).

    The returned function maps a DraftTree (tokens [B, K, L], torch rows or exact numpy
    rows) to its BlockLaw: stop [B, K, L+1], correction [B, K, L+1, V]."""
    leaves = len(mixture.leaf_law)
    ranks = np.empty((len(mixture.priorities), leaves), dtype=np.int64)
    for k, priority in enumerate(mixture.priorities):
        ranks[k, np.asarray(priority, dtype=np.int64)] = np.arange(leaves)
    rows_exact = conditional_rows(mixture, vocab, depth)

    def law(tree: DraftTree) -> BlockLaw:
        tokens = np.asarray(tree.tokens.cpu().numpy() if ops.is_torch(tree.tokens)
                            else tree.tokens, dtype=np.int64)  # [B, K, L]
        batch, paths = tokens.shape[:2]
        weights = [w for w in mixture.weights]
        if ops.is_torch(tree.target_rows):
            weights = [float(w) for w in weights]
        leaf = prefix_node_indices(tokens, vocab)[..., -1] - num_nodes(vocab, depth - 1)
        chosen = np.zeros((batch, paths), dtype=object if not ops.is_torch(tree.target_rows)
                          else np.float64)
        chosen[:] = 0
        for k, weight in enumerate(weights):
            rank = ranks[k][leaf]  # [B, K]
            best = rank == rank.min(axis=1, keepdims=True)  # identical best leaves share
            chosen = chosen + np.where(best, 1, 0) * weight / best.sum(axis=1, keepdims=True)
        nodes = prefix_node_indices(tokens, vocab)[..., :depth]  # [B, K, L]
        rows = rows_exact[nodes]  # [B, K, L, V]
        if ops.is_torch(tree.target_rows):
            like = tree.target_rows
            rows = torch.as_tensor(np.asarray(rows, dtype=np.float64), dtype=like.dtype,
                                   device=like.device)
            chosen = torch.as_tensor(chosen.astype(np.float64), dtype=like.dtype,
                                     device=like.device)
            path_tokens: Any = torch.as_tensor(tokens, device=like.device)
        else:
            path_tokens = tokens
        vocab_ = tree.vocab_size
        stop, correction = bv_path_law(path_tokens.reshape(batch * paths, depth),
                                       tree.target_rows.reshape(batch * paths, depth + 1, vocab_),
                                       rows.reshape(batch * paths, depth, vocab_))
        stop = stop.reshape(batch, paths, depth + 1) * chosen[:, :, None]
        return BlockLaw(stop, correction.reshape(batch, paths, depth + 1, vocab_))

    return law


def reference_check(instance: Instance | TreeModel, paths: int,
                    verifiers: tuple[str, ...] = ("nodeopt", "gbv", "bv"),
                    draft_sampling: str = "iid") -> dict[str, Any]:
    """Certified optimum, the reference verifier's exact law, and the practical rules.

    Returns {"optimum": Optimum.to_json(), "certified", "priorities" (mixture size),
    "reference": {"block_efficiency", "total_variation", "equals_optimum"},
    "verifiers": {name: {"block_efficiency", "gap"}}, "passed": reference lossless (TV = 0
    in exact arithmetic, <= 1e-12 in floats) and equal to the optimum (exactly when
    certified, within 1e-9 otherwise)}. draft_sampling "iid" or "without-replacement": the
    master's priorities select the best drafted leaf under either scheme and r is the law of
    that selection for the scheme; the practical verifiers are scored only under the schemes
    their registry entries allow. The optimum comes from column generation (method "colgen")
    at every depth, L = 1 included: the closed form has no mixture."""
    record: Optimum = optimum(instance, paths=paths, draft_sampling=draft_sampling,
                               method="colgen")  # the mixture: colgen only
    if record.mixture is None:
        raise ValueError(f"no optimal mixture: optimum status {record.status}")
    exact_rows = record.certified and record.mixture.exact  # exact on the rows' own values
    model = instance.model(exact=exact_rows) if isinstance(instance, Instance) else instance
    law = mixture_law(record.mixture, model.vocab_size, model.depth)
    exact = model.exact and record.mixture.exact
    result = exact_result(model, law, paths=paths, draft_sampling=draft_sampling)
    value = result.block_efficiency
    if exact:
        equals = value == record.exact_value
        lossless = result.total_variation == 0
    else:
        equals = abs(float(value) - float(record.value)) <= 1e-9
        lossless = result.total_variation <= 1e-12
    others = {}
    for name in verifiers:
        if draft_sampling not in get_verifier(name).draft_sampling:
            continue
        other = exact_result(model, name, paths=paths, draft_sampling=draft_sampling)
        others[name] = {"block_efficiency": _number(other.block_efficiency),
                        "gap": float(record.value) - float(other.block_efficiency)}
    return {"optimum": record.to_json(), "certified": record.certified,
            "priorities": len(record.mixture.priorities),
            "reference": {"block_efficiency": _number(value),
                          "total_variation": float(result.total_variation),
                          "equals_optimum": bool(equals)},
            "verifiers": others, "passed": bool(equals and lossless)}


def _number(value: Any) -> Any:
    return fraction_text(value) if isinstance(value, Fraction) else float(value)
