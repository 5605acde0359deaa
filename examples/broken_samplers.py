"""Two known failure modes of public multi-path code, written as plain per-draw samplers.

    speclp audit --sampler examples/broken_samplers.py:gbv_first_child_on_ties --unbatched --ties
    speclp audit --sampler examples/broken_samplers.py:traversal_path_order --unbatched --ties --paths 3

Both are written here from the published rules (THEORY.md section 4), independently of
speclp's law functions, and each has a correct twin built from the same code
(`gbv_token_id_ties`, `traversal_dfs_order`) that the audit passes, so a failure is the
bug, not the harness:

gbv_first_child_on_ties   GBV with the reference code's clipped key min(1, p/q); the
    greedy selection takes the FIRST drafted child (lowest path index) among the children
    of maximal ratio, while the skewed rows' CDF orders equal ratios by token id
    (pitfall (a) of THEORY.md: the two orders disagree on ties).
traversal_path_order      Traversal verification that takes the leaves in PATH order
    (path 0's leaf, then path 1's, ...), deleting upward after each rejection, instead of
    the post-order depth-first order (finish a subtree before leaving it).

Signature (unbatched): (target [K, L+1, V], draft [K, L, V], paths [K, L], rng) -> tokens.
"""

from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------------------
# GBV: select a path greedily, then block verification with the skewed rows
# ---------------------------------------------------------------------------


def _gbv(target: np.ndarray, draft: np.ndarray, paths: np.ndarray, rng: np.random.Generator,
         first_child_on_ties: bool) -> list[int]:
    count, depth = paths.shape
    vocab = target.shape[-1]
    alive = list(range(count))
    chosen = 0
    lam, mass = 0.0, 1.0  # q-mass of the paths ranked below the prefix, q-mass of the prefix
    skewed = []
    for i in range(depth):
        p, q = target[chosen, i], draft[chosen, i]
        ratio = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)

        def below(x: int, q: np.ndarray = q, ratio: np.ndarray = ratio) -> float:
            """q-mass of the tokens whose (ratio, token id) key is lower than x's."""
            return float(sum(q[t] for t in range(vocab) if (ratio[t], t) < (ratio[x], x)))

        if first_child_on_ties:
            best = max(ratio[paths[k, i]] for k in alive)
            choice = next(k for k in alive if ratio[paths[k, i]] == best)
        else:
            choice = max(alive, key=lambda k: (ratio[paths[k, i]], paths[k, i]))
        token = int(paths[choice, i])
        top = (lam + mass) ** count - lam**count
        skewed.append(np.array([((lam + mass * (below(x) + q[x])) ** count
                                 - (lam + mass * below(x)) ** count) / top for x in range(vocab)]))
        lam += mass * below(token)
        mass *= q[token]
        alive = [k for k in alive if paths[k, i] == token]
        chosen = choice
    path = paths[chosen]
    # block verification of `path` against the skewed rows (THEORY.md section 2)
    weights = [1.0]
    for i in range(depth):
        x = path[i]
        weights.append(min(1.0, weights[-1] * target[chosen, i, x] / skewed[i][x]))
    accepted = 0
    for i in range(1, depth + 1):
        if i < depth:
            residual = np.maximum(weights[i] * target[chosen, i] - skewed[i], 0.0)
            mass_z = residual.sum()
            h = mass_z / (mass_z + 1 - weights[i]) if mass_z + 1 - weights[i] > 0 else 0.0
        else:
            h = weights[depth]
        if rng.random() <= h:
            accepted = i
    if accepted == depth:
        row = target[chosen, depth]
    else:
        row = np.maximum(weights[accepted] * target[chosen, accepted] - skewed[accepted], 0.0)
    token = int(rng.choice(vocab, p=row / row.sum()))
    return [int(t) for t in path[:accepted]] + [token]


def gbv_first_child_on_ties(target, draft, paths, rng):
    """BROKEN: clipped-key GBV whose selection takes the first child among equal ratios."""
    return _gbv(target, draft, paths, rng, first_child_on_ties=True)


def gbv_token_id_ties(target, draft, paths, rng):
    """Correct twin: selection and CDF both use the (min(1, p/q), token id) key."""
    return _gbv(target, draft, paths, rng, first_child_on_ties=False)


# ---------------------------------------------------------------------------
# traversal verification
# ---------------------------------------------------------------------------


class _Node:
    def __init__(self, prefix: tuple, parent: _Node | None, p: np.ndarray, q: np.ndarray | None):
        self.prefix, self.parent = prefix, parent
        self.p = p.astype(np.float64).copy()
        self.q = None if q is None else q.astype(np.float64).copy()
        self.children: list[_Node] = []  # in order of first appearance
        self.weight: float | None = 1.0 if parent is None else None


def _tree(target: np.ndarray, draft: np.ndarray, paths: np.ndarray) -> tuple[_Node, dict]:
    count, depth = paths.shape
    root = _Node((), None, target[0, 0], draft[0, 0])
    nodes = {(): root}
    for k in range(count):
        for i in range(1, depth + 1):
            prefix = tuple(int(t) for t in paths[k, :i])
            if prefix not in nodes:
                parent = nodes[prefix[:-1]]
                node = _Node(prefix, parent, target[k, i], draft[k, i] if i < depth else None)
                parent.children.append(node)
                nodes[prefix] = node
    return root, nodes


def _enter(node: _Node) -> None:
    """Set the weights on the way down from the parents' current rows."""
    chain = []
    while node.parent is not None and node.weight is None:
        chain.append(node)
        node = node.parent
    for child in reversed(chain):
        parent, token = child.parent, child.prefix[-1]
        child.weight = min(1.0, parent.weight * parent.p[token] / parent.q[token])


def _test(node: _Node, rng: np.random.Generator) -> list[int] | None:
    """Accept w.p. the node's weight (emit it + Y ~ its current row); else delete it."""
    if node.parent is None or rng.random() < node.weight:
        row = node.p / node.p.sum()
        return list(node.prefix) + [int(rng.choice(len(row), p=row))]
    parent, token = node.parent, node.prefix[-1]
    raw = np.maximum(parent.weight * parent.p - parent.q, 0.0)
    mass = raw.sum()
    if mass > 0:
        parent.p = raw / mass
    parent.weight = mass / (mass + 1 - parent.weight) if mass + 1 - parent.weight > 0 else 0.0
    q = parent.q.copy()
    q[token] = 0.0
    parent.q = q / q.sum() if q.sum() > 0 else q
    parent.children.remove(node)
    return None


def _first_leaf(node: _Node) -> _Node:
    while node.children:
        node = node.children[0]
    return node


def _traversal(target, draft, paths, rng, path_order: bool) -> list[int]:
    root, nodes = _tree(target, draft, paths)
    if not path_order:  # post-order DFS: always the first leaf of the remaining tree
        while True:
            leaf = _first_leaf(root)
            _enter(leaf)
            out = _test(leaf, rng)
            if out is not None:
                return out
    for k in range(paths.shape[0]):  # BROKEN: leaves in path order
        node = nodes[tuple(int(t) for t in paths[k])]
        if node.parent is not None and node not in node.parent.children:
            continue  # this path's leaf was deleted already (a duplicate path)
        while True:
            if node.children:
                break
            _enter(node)
            parent = node.parent
            out = _test(node, rng)
            if out is not None:
                return out
            node = parent
    return _test(root, rng)


def traversal_path_order(target, draft, paths, rng):
    """BROKEN: traversal verification residualising nodes in path order."""
    return _traversal(target, draft, paths, rng, path_order=True)


def traversal_dfs_order(target, draft, paths, rng):
    """Correct twin: post-order depth-first (the first leaf of the remaining tree)."""
    return _traversal(target, draft, paths, rng, path_order=False)
