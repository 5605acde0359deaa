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
from .builders import as_model
from .instance import Instance
from .program import Block, LinearProgram, ValueTable


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


def tree_lp(model_or_instance: TreeModel | Instance, tree_nodes: np.ndarray,
            exact: bool = True) -> LinearProgram:
    """The information-agnostic LP of one deterministic draft tree (module docstring).

    tree_nodes: [T] shortlex node indices (1..N-1) of a prefix-closed tree. Exact data are
    the instance's exact rows (rational instances) or the binary values of float rows.
    """
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    tree = check_tree_nodes(tree_nodes, vocab, depth)
    n_nodes = num_nodes(vocab, depth)
    outputs = np.concatenate([[0], tree])  # [1 + T] output nodes, root first
    depths = node_depths(vocab, depth)
    n_pi = len(outputs) * vocab
    n_vars = n_pi + n_nodes - 1

    table = ValueTable(exact)
    neg_target = table.add(-model.target.reshape(-1))  # ref of -p(t|u) at u * V + t
    root_target = table.add(model.target[0])
    depth_refs = table.add(np.array([Fraction(i + 1) for i in range(depth + 1)], dtype=object))
    one, zero = table.one, table.zero

    # entries keyed by matching row (u, t) -> key u * V + t
    keys, cols, refs = [], [], []
    # C(u, t) = pi(u, t)
    out_rep = np.repeat(outputs, vocab)
    tok = np.tile(np.arange(vocab), len(outputs))
    keys.append(out_rep * vocab + tok)
    cols.append(np.arange(n_pi))
    refs.append(np.full(n_pi, one, dtype=np.int64))
    # A(z) enters the row of its parent (u, t) with +1 ...
    z = np.arange(1, n_nodes, dtype=np.int64)
    parent, last = (z - 1) // vocab, (z - 1) % vocab
    keys.append(parent * vocab + last)
    cols.append(n_pi + z - 1)
    refs.append(np.full(len(z), one, dtype=np.int64))
    # ... and the rows (z, t) of its own children with -p(t|z)
    zz = np.repeat(z, vocab)
    tt = np.tile(np.arange(vocab), len(z))
    p_edge = model.target[zz, tt]
    nonzero = np.array([x != 0 for x in p_edge], dtype=bool) if model.exact else p_edge != 0
    keys.append((zz * vocab + tt)[nonzero])
    cols.append((n_pi + zz - 1)[nonzero])
    refs.append(neg_target[(zz * vocab + tt)[nonzero]])
    keys_all = np.concatenate(keys)
    cols_all = np.concatenate(cols)
    refs_all = np.concatenate(refs)
    row_keys = np.unique(keys_all)  # non-empty matching rows, in order u * V + t
    rows_all = np.searchsorted(row_keys, keys_all)
    rhs = np.full(len(row_keys), zero, dtype=np.int64)
    root_rows = row_keys < vocab
    rhs[root_rows] = root_target[row_keys[root_rows]]
    order = np.lexsort((cols_all, rows_all))
    eq = Block(rows_all[order], cols_all[order], refs_all[order], rhs)
    dropped = Block(np.zeros(n_pi, dtype=np.int64), np.arange(n_pi, dtype=np.int64),
                    np.full(n_pi, one, dtype=np.int64), np.array([one], dtype=np.int64))
    objective = np.concatenate([np.repeat(depth_refs[depths[outputs]], vocab),
                                np.full(n_nodes - 1, zero, dtype=np.int64)])
    values, exact_values = table.tables()

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_pi:
            o, y = divmod(j, vocab)
            return f"pi[n={node_prefix(int(outputs[o]), vocab)}, y={y}]"
        return f"A[{node_prefix(j - n_pi + 1, vocab)}]"

    def eq_label(i: int) -> str:
        u, t = divmod(int(row_keys[int(i)]), vocab)
        return f"match[u={node_prefix(u, vocab)}, t={t}]"

    lp = LinearProgram(
        name=f"tree-V{vocab}-L{depth}-T{len(tree)}",
        num_vars=n_vars,
        objective_refs=objective,
        constant_ref=zero,
        eq=eq,
        ub=Block.empty(),
        table=values,
        exact_table=exact_values,
        variable_label=variable_label,
        eq_label=eq_label,
    )
    lp.notes.append("C = 1 case of full_lp: one deterministic draft tree of weight 1; its marginal "
                    "row sum pi = 1 is implied by the matching rows, dropped and kept in "
                    "meta['dropped_eq'] (checked by the certificate)")
    lp.meta.update({"kind": "tree", "vocab_size": vocab, "depth": depth, "tree_nodes": tree,
                    "pi_variables": n_pi, "dropped_eq": dropped, "match_keys": row_keys})
    return lp
