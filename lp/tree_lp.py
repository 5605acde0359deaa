"""The information-agnostic LP for ONE deterministic draft tree (THEORY.md section 5).

This is the C = 1 case of ``lp.builders.full_lp``: a single draft configuration of weight
1 whose prefix tree is the given tree T (no sampling of drafts; the tree is fixed). Same
variables and rows as full_lp's docstring, with the configuration index dropped:

Variables (all >= 0):
    pi(n, y)   for every output node n in {root} + T and token y: P(output = (n, y));
               objective coefficient |n| + 1 (block = n plus the correction token y).
    A(z)       for every node z of depth 1..L of the instance (shortlex), objective 0.
Rows:
    (i)  draft marginal: sum_{n, y} pi(n, y) = 1. It is the single configuration's row,
         linearly dependent on the matching rows (both give sum pi = 1), so it is dropped
         at build time and kept in ``lp.meta["dropped_eq"]`` for the exact certificate,
         exactly as full_lp drops its last marginal row.
    (ii) target matching, one per node u of depth 0..L and token t (empty rows omitted):
             A(u t) + C(u, t) - p(t|u) A(u) = 0,  C(u, t) = pi(u, t) if u in {root} + T,
         A(u t) absent when |u| = L, A(root) = 1 a constant (root rows: A(t) + C(root, t)
         = p(t)).
The optimum is 1 + sum_{n in T} p(n) (p(n) the target path probability): verification by
target sampling (walk down while the sampled token is a child in T) attains it, and no
valid verifier can do better because A(n) <= p(n) is forced by the rows. The check is in
proofs.trees / tests/test_trees.py.

Shapes: N = (V^(L+1) - 1)/(V - 1) instance nodes; T = len(tree_nodes) tree nodes (node
indices 1..N-1, prefix-closed); pi has (1 + T) * V columns (output-node-major, then token),
followed by the N - 1 A columns.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..verifiers.tree import TreeModel, node_depths, node_prefix, num_nodes
from .builders import as_model, lp_from_structure, structure_from_slots
from .instance import Instance
from .program import LinearProgram


def check_tree_nodes(tree_nodes: np.ndarray, vocab: int, depth: int) -> np.ndarray:
    """Validate a tree (node indices, root excluded): in range, distinct, prefix-closed.

    Returns the sorted int64 array [T]. Raises ValueError naming the first bad node.
    """
    nodes = np.asarray(tree_nodes, dtype=np.int64).reshape(-1)
    total = num_nodes(vocab, depth)
    if len(np.unique(nodes)) != len(nodes):
        raise ValueError("tree_nodes: repeated node index")
    bad = nodes[(nodes < 1) | (nodes >= total)]
    if len(bad):
        raise ValueError(f"tree_nodes: node {int(bad[0])} is not a non-root node of depth 1..{depth}")
    present = set(nodes.tolist())
    for n in nodes.tolist():
        parent = (n - 1) // vocab
        if parent != 0 and parent not in present:
            raise ValueError(f"tree_nodes: node {node_prefix(n, vocab)} lacks its parent "
                             f"{node_prefix(parent, vocab)} (trees must be prefix-closed)")
    return np.sort(nodes)


class _SingleTree:
    """The draft-configuration family of one deterministic tree: one configuration, weight 1."""

    def __init__(self, tree: np.ndarray, vocab: int, weight: np.ndarray):
        self.tree, self.vocab, self.weight = tree, vocab, weight

    def __len__(self) -> int:
        return 1

    def label(self, c: int) -> str:
        return f"tree of {len(self.tree)} nodes"


def tree_lp(model_or_instance: TreeModel | Instance, tree_nodes: np.ndarray,
            exact: bool = True) -> LinearProgram:
    """The information-agnostic LP of one deterministic draft tree (module docstring).

    Built by the same code as full_lp (lp.builders.structure_from_slots and
    lp_from_structure) with one configuration of weight 1 whose slots are the root and
    the tree's nodes. tree_nodes: [T] shortlex node indices (1..N-1) of a prefix-closed
    tree. Exact data are the instance's exact rows (rational instances) or the binary
    values of float rows.
    """
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    tree = check_tree_nodes(tree_nodes, vocab, depth)
    outputs = np.concatenate([[0], tree]).astype(np.int64)  # [1 + T] output nodes, root first
    one = np.empty(1, dtype=object) if model.exact else np.ones(1)
    if model.exact:
        one[0] = Fraction(1)
    configs = _SingleTree(tree, vocab, one)
    pi_vars = len(outputs) * vocab
    size = {"configurations": 1, "variables": pi_vars + num_nodes(vocab, depth) - 1,
            "nonzeros": 2 * pi_vars + (num_nodes(vocab, depth) - 1) * (vocab + 1), "bytes": 0}
    structure = structure_from_slots(model, configs, np.zeros(len(outputs), dtype=np.int64), outputs,
                                     node_depths(vocab, depth)[outputs], 1, "deterministic-tree", size)
    lp = lp_from_structure(structure)
    lp.name = f"tree-V{vocab}-L{depth}-T{len(tree)}"
    lp.notes.append("C = 1 case of full_lp: one deterministic draft tree of weight 1")
    lp.meta.update({"kind": "tree", "tree_nodes": tree})
    return lp
