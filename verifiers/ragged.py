"""Exact verifier laws on a ragged tree: only the nodes a drafted path can reach.

A `TreeModel` holds rows at every node of the complete V-ary tree of depth L, (V^(L+1) - 1)
/ (V - 1) of them. A coarsened kept tree (`lp.coarsen`, docs/theory.md 13.6) padded to that
layout has (W + 1)^L paths although only a few hundred of them have positive draft
probability: the other nodes are dummies of probability 0 under both rows, never drafted.
A `RaggedModel` keeps the root and the nodes of positive draft path probability only, each
with its full rows over the V tokens (so a verifier sees exactly the rows it sees on the
padded model along every path it can be given), and a child table.

Why the law is the same (docs/theory.md 13.7, Lemma 13.10): the law of a verifier under
i.i.d. drafting is a q-weighted sum over draft configurations of paths of positive draft
probability, each term computed from the rows along those paths only. The structured
evaluations of `verifiers.structure` are such sums regrouped; the versions here regroup the
same terms over the ragged nodes:

  single path  (bv, token: any verifier that reads path 0 only) its law on every positive
               leaf, weighted by q(x) (the "single path" enumeration of verifiers.exact);
  selection    (gbv, gbv_clipped, nodeopt) BV against the selection law r, read off the
               verifier's own selection function on trees whose K paths all equal one
               positive leaf (verifiers.structure.path_selection_rows), BV on every leaf
               of positive r-probability (r(x|u) = 0 wherever q(x|u) = 0);
  node rule    (specinfer, rrsw, naive_tree, spectr, nss, khisti) the (node, m) recursion
               of verifiers.structure with the child tuples of each node drawn from its
               positive-q children only (tuples with a q = 0 child have weight 0 and are
               skipped there too).

Every other verifier (traversal, bv_extended, ...) is not evaluated here (`ragged_work`
returns None). Results: the mass of the law per ragged node (P(output node = u)), checked
to sum to one (exactly in rationals, within verifiers.exact.MASS_TOLERANCE in float64).
Additive: nothing else in verifiers/ depends on this module.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .exact import MASS_TOLERANCE, LawMassError, check_block_law
from .law import DraftTree
from .registry import _SELECTIONS, block_law, get_verifier
from .single_path import bv_path_law
from .structure import CHUNK, _index, _numpy, _rows, evaluation_kind
from .tree import NodeRows

__all__ = ["RaggedModel", "ragged_node_mass", "ragged_work"]


@dataclass
class RaggedModel(NodeRows):
    """Rows at the root and at every node of positive draft path probability, depth 0..L.

    parent [n] (-1 at the root, parents before children), token [n] (the token from the
    parent, -1 at the root), level [n], target [n, V] and draft [n, V] rows (float64 or
    object arrays of Fractions; draft rows at depth L are not used), child [n, V] the node
    of every (node, token) pair with positive draft probability, else -1."""

    parent: np.ndarray
    token: np.ndarray
    level: np.ndarray
    target: np.ndarray
    draft: np.ndarray
    child: np.ndarray
    depth: int

    def __len__(self) -> int:
        return int(len(self.parent))

    def leaves(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prefix [P, L+1] the node of every prefix, tokens [P, L], q [P]) of the depth-L
        nodes (each has positive draft probability), q multiplied from the root down."""
        leaves = np.nonzero(self.level == self.depth)[0]
        prefix = np.zeros((len(leaves), self.depth + 1), dtype=np.int64)
        prefix[:, self.depth] = leaves
        for d in range(self.depth - 1, -1, -1):
            prefix[:, d] = self.parent[prefix[:, d + 1]]
        tokens = self.token[prefix[:, 1:]]
        one = self.target[0, 0] * 0 + 1
        q = np.full(len(leaves), one, dtype=self.target.dtype)
        for i in range(self.depth):
            q = q * self.draft[prefix[:, i], tokens[:, i]]
        return prefix, tokens, q


def ragged_model(parent: list[int], token: list[int], target: np.ndarray, draft: np.ndarray,
                 depth: int) -> RaggedModel:
    """A RaggedModel from parent / token lists (parents first) and rows [n, V]; checks that
    every node's draft edge is positive and that the depth-L nodes are at depth L."""
    parent_a, token_a = np.asarray(parent, dtype=np.int64), np.asarray(token, dtype=np.int64)
    count, vocab = np.shape(target)
    if np.shape(draft) != (count, vocab) or len(parent_a) != count or len(token_a) != count:
        raise ValueError(f"rows: expected [{count}, {vocab}] target and draft and {count} "
                         "parents and tokens")
    level = np.zeros(count, dtype=np.int64)
    child = np.full((count, vocab), -1, dtype=np.int64)
    for n in range(1, count):
        up, t = int(parent_a[n]), int(token_a[n])
        if not 0 <= up < n or not 0 <= t < vocab:
            raise ValueError(f"parent: node {n} needs an earlier parent and a token in 0..{vocab - 1}")
        if draft[up, t] == 0 or child[up, t] >= 0:
            raise ValueError(f"token: node {n} repeats or has draft probability 0 from its parent")
        level[n] = level[up] + 1
        child[up, t] = n
    if level.max(initial=0) > depth:
        raise ValueError(f"depth: a node lies below depth {depth}")
    return RaggedModel(parent_a, token_a, level, np.asarray(target), np.asarray(draft), child,
                       depth)


def _kind(name: str, paths: int) -> str | None:
    spec = get_verifier(name)
    if not spec.multipath:
        return "single path"
    kind = evaluation_kind(spec, paths)
    if kind == "selection law" and name in _SELECTIONS:
        return kind
    if kind == "node recursion":
        return kind
    return None


def _positive_children(model: RaggedModel, n: int) -> np.ndarray:
    return np.nonzero(model.child[n] >= 0)[0]


def ragged_work(model: RaggedModel, name: str, paths: int) -> int | None:
    """Work of ragged_node_mass (None: not evaluated here): positive leaves for a single-path
    or selection-law verifier, else the node-rule evaluations bound sum over nodes of depth
    < L of sum_(m <= K) s^m, s the node's positive-q children."""
    kind = _kind(name, paths)
    if kind is None:
        return None
    leaves = int((model.level == model.depth).sum())
    if kind != "node recursion":
        return leaves
    total = 0
    for n in np.nonzero(model.level < model.depth)[0]:
        s = len(_positive_children(model, int(n)))
        total += sum(s**m for m in range(1, paths + 1))
    return total


def _check(name: str, mass: np.ndarray, paths: int) -> np.ndarray:
    total = mass.sum()
    ok = total == 1 if mass.dtype == object else abs(float(total) - 1) <= MASS_TOLERANCE
    if not ok:
        raise LawMassError(f"{name}: ragged law at K={paths} has mass {float(total)!r}, not 1")
    return mass


def _zeros(model: RaggedModel, shape: tuple[int, ...]) -> np.ndarray:
    if model.exact:
        out = np.empty(shape, dtype=object)
        out[...] = model.target[0, 0] * 0
        return out
    return np.zeros(shape)


def ragged_node_mass(model: RaggedModel, name: str, paths: int) -> np.ndarray:
    """[n] P(output node = u) of the registered verifier `name` with K = paths i.i.d. drafted
    paths on the ragged model (module docstring), exact on exact rows, float64 otherwise.
    ValueError for a verifier not evaluated here (ragged_work is None)."""
    kind = _kind(name, paths)
    if kind is None:
        raise ValueError(f"verifier: {name} has no ragged law at K={paths}")
    if kind == "single path":
        return _check(name, _single_path(model, name), paths)
    if kind == "selection law":
        return _check(name, _selection(model, name, paths), paths)
    return _check(name, _node_recursion(model, name, paths), paths)


def _gather(model: RaggedModel, prefix: np.ndarray) -> tuple[Any, Any]:
    """Rows along the paths: target [P, L+1, V], draft [P, L, V] (numpy floats or exact)."""
    return _rows(model, model.target[prefix]), _rows(model, model.draft[prefix[:, :-1]])


def _single_path(model: RaggedModel, name: str) -> np.ndarray:
    prefix, tokens, q = model.leaves()
    target, draft = _gather(model, prefix)
    tree = DraftTree(_index(model, tokens[:, None]), target[:, None], draft[:, None])
    law = block_law(name, tree)
    check_block_law(name, model, tokens[:, None], law, q)  # type: ignore[arg-type]
    joint = _numpy(law.joint())[:, 0].sum(axis=-1)  # [P, L+1]
    mass = _zeros(model, (len(model),))
    np.add.at(mass, prefix.reshape(-1), (q[:, None] * joint).reshape(-1))
    return mass


def _selection(model: RaggedModel, name: str, paths: int) -> np.ndarray:
    spec = get_verifier(name)
    prefix, tokens, _ = model.leaves()
    depth, vocab = model.depth, model.vocab_size
    drafted = np.repeat(tokens[:, None, :], paths, axis=1)  # [P, K, L]
    every = np.repeat(prefix[:, None, :], paths, axis=1)
    target = _rows(model, model.target[every])
    draft = _rows(model, model.draft[every[..., :-1]])
    skewed = _numpy(_SELECTIONS[name](DraftTree(_index(model, drafted), target, draft),
                                      **spec.options))  # [P, L, V]
    rows = _zeros(model, (len(model), vocab))
    for i in range(depth):
        rows[prefix[:, i]] = skewed[:, i]
    path_prob = rows[prefix[:, 0], tokens[:, 0]]
    for i in range(1, depth):
        path_prob = path_prob * rows[prefix[:, i], tokens[:, i]]
    keep = np.nonzero(path_prob != 0)[0]
    prefix, tokens, path_prob = prefix[keep], tokens[keep], path_prob[keep]
    stop, correction = bv_path_law(_index(model, tokens), _rows(model, model.target[prefix]),
                                   _rows(model, rows[prefix[:, :-1]]))
    joint = (_numpy(stop)[..., None] * _numpy(correction)).sum(axis=-1)  # [P', L+1]
    mass = _zeros(model, (len(model),))
    np.add.at(mass, prefix.reshape(-1), (path_prob[:, None] * joint).reshape(-1))
    return mass


def _tuples(children: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tuples [T, m] every ordered tuple of the given children, first [T, m], count [T, m])
    as verifiers.structure._tuples over a node's own positive children."""
    tuples = np.array(list(itertools.product(children.tolist(), repeat=size)),
                      dtype=np.int64).reshape(-1, size)
    equal = tuples[:, :, None] == tuples[:, None, :]
    earlier = np.tril(np.ones((size, size), dtype=bool), -1)
    first = ~(equal & earlier[None]).any(-1)
    return tuples, first, equal.sum(-1)


def _node_recursion(model: RaggedModel, name: str, paths: int) -> np.ndarray:
    rule = get_verifier(name).node_rule
    depth = model.depth
    node_mass = _zeros(model, (len(model),))
    mass = _zeros(model, (len(model), paths + 1))  # P(walk at u, m paths through u)
    mass[0, paths] = mass[0, paths] + 1
    for d in range(depth):
        here = np.nonzero(model.level == d)[0]
        for m in range(1, paths + 1):
            slots: list[tuple[np.ndarray, ...]] = []
            for n in here:
                reach = mass[n, m]
                if reach == 0:
                    continue
                tuples, first, count = _tuples(_positive_children(model, int(n)), m)
                prob = model.draft[n][tuples[:, 0]]
                for i in range(1, m):
                    prob = prob * model.draft[n][tuples[:, i]]
                weight = reach * prob
                keep = np.nonzero(weight != 0)[0]
                slots.append((np.full(len(keep), n, dtype=np.int64), tuples[keep], first[keep],
                              count[keep], weight[keep]))
            if not slots:
                continue
            nodes, tuples, first, count, weight = (np.concatenate(x) for x in zip(*slots, strict=True))
            for lo in range(0, len(nodes), CHUNK):
                part = slice(lo, lo + CHUNK)
                _rule_step(model, rule, nodes[part], tuples[part], first[part], count[part],
                           weight[part], node_mass, mass)
    leaves = np.nonzero(model.level == depth)[0]
    node_mass[leaves] = node_mass[leaves] + mass[leaves].sum(axis=1)  # the bonus rows
    return node_mass


def _rule_step(model: RaggedModel, rule: Any, nodes: np.ndarray, children: np.ndarray,
               first: np.ndarray, count: np.ndarray, weight: np.ndarray, node_mass: np.ndarray,
               mass: np.ndarray) -> None:
    """verifiers.structure._rule_step on ragged nodes: the stop mass goes to node_mass (the
    correction rows sum to one), the moves to mass at the child of the child table."""
    batch, m = children.shape
    target = _rows(model, model.target[nodes])[:, None]
    draft = _rows(model, model.draft[nodes])[:, None]
    through = _index(model, np.ones((batch, 1, m), dtype=bool))
    accept, correction = rule(target, draft, through, _index(model, children), _index(model, first))
    accept = _numpy(accept)[:, 0]  # [B, m]
    rows = _numpy(correction)[:, 0].sum(axis=-1)  # [B]
    stop = 1 - accept.sum(axis=1)
    np.add.at(node_mass, nodes, weight * stop * rows)
    child = model.child[nodes[:, None], children]  # [B, m]
    np.add.at(mass, (child.reshape(-1), count.reshape(-1)), (weight[:, None] * accept).reshape(-1))
