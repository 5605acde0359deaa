"""A certified upper bound on the K-path optimum from any matching-row multipliers.

Weak duality for the full K-path LP (i.i.d. drafting; the derivation is docs/theory.md
section 7.3). For ANY multipliers theta(u, t) of the matching rows (speclp.lp.rows),
    S(root) = 0,   S(u t) = S(u) + theta(u, t) - sum_s p(s|u t) theta(u t, s),
    h(n) = |n| + 1 - S(n) - min_y theta(n, y),
    g(x) = max of h over the prefixes of path x (root included),
    OPT <= sum_t p(t|root) theta(root, t) + E[ max_k g(X_k) ],   X_1..X_K i.i.d. from q.
The expectation of the maximum of K i.i.d. values is exact and cheap: sort the paths by g,
E = sum_i g_i (F_i^K - F_{i-1}^K) with F the cumulative draft probability. Everything is
evaluated in exact rationals, so the bound is certified whatever theta is; theta from a
(float) optimal solve makes it tight. This needs no enumeration of configurations and no
exact basis: it stays robust where an exact certificate of optimality is hard (tiny
probabilities, many priorities).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.tree import TreeModel, depth_offset, num_nodes
from .full import as_model
from .program import exact_fraction


def dual_upper_bound(model_or_instance: Any, theta: np.ndarray, paths: int,
                     objective: np.ndarray | None = None) -> Fraction:
    """Exact upper bound on the K-path optimum E[tau + 1] (i.i.d. drafting; module docstring).

    theta [N, V]: multipliers of the matching rows (node u in shortlex order, token t);
    floats are taken at their exact binary values. The instance's rows are used exactly
    (rational instances) or at the exact values of its floats.

    objective [N] (optional): the value c(n) of an output block ending at node n in place of
    |n| + 1; the bound is then on max over lossless verifiers of E[c(output node)]
    (docs/theory.md section 13.5: the columns' matching coefficients do not depend on the
    objective, so h(n) = c(n) - S(n) - min_y theta(n, y) keeps (y, theta) dual feasible).
    Entries are taken exactly (ints, Fractions or floats at their binary values).
    """
    model: TreeModel = as_model(model_or_instance, exact=True)
    vocab, depth = model.vocab_size, model.depth
    count = num_nodes(vocab, depth)
    theta = np.asarray(theta)
    if theta.shape != (count, vocab):
        raise ValueError(f"theta: expected shape {(count, vocab)}, got {theta.shape}")
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    if objective is None:
        credit = [Fraction(d + 1) for d in range(depth + 1)
                  for _ in range(vocab**d)]  # shortlex: vocab^d nodes of depth d
    else:
        if np.shape(objective) != (count,):
            raise ValueError(f"objective: expected shape {(count,)}, got {np.shape(objective)}")
        credit = [exact_fraction(v.item() if isinstance(v, np.generic) else v)
                  for v in np.asarray(objective).reshape(-1)]
    exact = np.empty(theta.shape, dtype=object)
    exact.reshape(-1)[:] = [exact_fraction(v) for v in theta.reshape(-1)]
    target = model.target
    weighted = np.array([sum(target[u, t] * exact[u, t] for t in range(vocab))
                         for u in range(count)], dtype=object)  # sum_s p(s|u) theta(u, s)
    smallest = np.array([min(row) for row in exact], dtype=object)
    s_node = np.empty(count, dtype=object)
    g_node = np.empty(count, dtype=object)
    s_node[0] = Fraction(0)
    g_node[0] = credit[0] - smallest[0]  # h(root)
    for d in range(1, depth + 1):
        start, size = depth_offset(vocab, d), vocab**d
        nodes = np.arange(start, start + size)
        parents, last = (nodes - 1) // vocab, (nodes - 1) % vocab
        s_node[nodes] = s_node[parents] + exact[parents, last] - weighted[nodes]
        h = np.array([credit[n] for n in nodes], dtype=object) - s_node[nodes] - smallest[nodes]
        g_node[nodes] = np.maximum(g_node[parents], h)
    leaves = g_node[depth_offset(vocab, depth):]
    q = model.draft_path_probabilities()  # [V^L] exact, lexicographic = depth-L node order
    positive = [i for i in range(len(q)) if q[i] != 0]
    positive.sort(key=lambda i: leaves[i])
    expected, cumulative, previous = Fraction(0), Fraction(0), Fraction(0)
    for i in positive:
        cumulative += q[i]
        power = cumulative**paths
        expected += leaves[i] * (power - previous)
        previous = power
    root_term = sum(target[0, t] * exact[0, t] for t in range(vocab))
    return root_term + expected
