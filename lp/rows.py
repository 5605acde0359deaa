"""Row families shared by the LPs of speclp.lp (docs/theory.md sections 1.4, 3.1, 3.2).

Target matching (full LP, tree LP, column-generation master)
-------------------------------------------------------------
One row per node u of depth 0..L and token t, keyed u * V + t:
    A(u t) + C(u, t) - p(t|u) A(u) = 0,
where A(z) (z of depth 1..L) is an auxiliary column per node, C(u, t) is the sum of the
output columns that stop at node u with correction token t (each LP brings its own), A(u t)
is absent when |u| = L, and A(root) = 1 is a constant, so the root rows read
A(t) + C(root, t) = p(t). matching_a_entries gives the A(z) entries, matching_rhs the
right-hand sides; the LP places key u * V + t on a row of its choice.

Chain rows (node LP, class LP, node form)
------------------------------------------
One row per node z = u t of depth 1..L on columns beta(z):
    beta(u t) - p(t|u) beta(u) <= 0          (root children: beta(t) <= p(t)).

Objective
---------
An output at node n (block = n plus one correction token) has objective |n| + 1:
depth_values gives [L + 1] the values 1..L+1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..verifiers.tree import TreeModel, node_parents, num_nodes
from .program import Block, LinearProgram, ValueTable


def nonzero(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the entries != 0 (float64 or exact object arrays, any shape)."""
    values = np.asarray(values)
    if values.dtype == object:
        return np.array([v != 0 for v in values.reshape(-1)], dtype=bool).reshape(values.shape)
    return values != 0


def depth_values(model: TreeModel) -> np.ndarray:
    """[L + 1] objective |n| + 1 of an output at depth |n| = 0..L (exact on exact models)."""
    depth = model.depth
    if model.exact:
        zero = model.target[0, 0] * 0
        return np.array([zero + d + 1 for d in range(depth + 1)], dtype=object)
    return np.arange(1, depth + 2, dtype=np.float64)


def target_refs(model: TreeModel, table: ValueTable) -> tuple[np.ndarray, np.ndarray]:
    """(refs [N * V] of -p(t|u) at u * V + t, refs [V] of the root row p(t))."""
    return table.add(-model.target.reshape(-1)), table.add(model.target[0])


def matching_a_entries(model: TreeModel, a_col0: int, neg_target_refs: np.ndarray,
                       one_ref: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries of the A(z) columns in the matching rows: (keys, cols, refs) [E].

    A(z) (z = 1..N-1 shortlex, column a_col0 + z - 1) enters row (parent(z), last token of
    z) with +1 and every row (z, t) with p(t|z) != 0 with -p(t|z).
    """
    vocab, depth = model.vocab_size, model.depth
    parents, last = node_parents(vocab, depth)
    a_nodes = np.arange(1, num_nodes(vocab, depth), dtype=np.int64)
    a_cols = a_col0 + a_nodes - 1
    zi, zt = np.nonzero(nonzero(model.target[a_nodes]))
    keys = np.concatenate([parents[a_nodes] * vocab + last[a_nodes], a_nodes[zi] * vocab + zt])
    cols = np.concatenate([a_cols, a_cols[zi]])
    refs = np.concatenate([np.full(len(a_nodes), one_ref, dtype=np.int64),
                           neg_target_refs[a_nodes[zi] * vocab + zt]])
    return keys, cols, refs


def matching_rhs(keys: np.ndarray, vocab: int, root_refs: np.ndarray, zero_ref: int) -> np.ndarray:
    """[R] right-hand side refs of the matching rows with the given keys: p(t) on the root
    rows (key t < V), 0 elsewhere."""
    keys = np.asarray(keys, dtype=np.int64)
    rhs = np.full(len(keys), zero_ref, dtype=np.int64)
    root = keys < vocab
    rhs[root] = root_refs[keys[root]]
    return rhs


def chain_rows(model: TreeModel, table: ValueTable, beta_col0: int, row0: int
               ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], np.ndarray]:
    """beta(u t) - p(t|u) beta(u) <= 0 (root children: beta(t) <= p(t)), one row per node
    z = 1..N-1 at row row0 + z - 1; beta(z) is column beta_col0 + z - 1.

    Returns (rows, cols, refs) lists of COO pieces and the rhs refs [N - 1].
    """
    vocab, depth = model.vocab_size, model.depth
    parents, last = node_parents(vocab, depth)
    z = np.arange(1, num_nodes(vocab, depth), dtype=np.int64)
    neg_target, root = target_refs(model, table)
    inner = parents[z] > 0  # parent is not the root
    coupled = inner & nonzero(model.target[parents[z], last[z]])
    rows = [row0 + z - 1, row0 + z[coupled] - 1]
    cols = [beta_col0 + z - 1, beta_col0 + parents[z][coupled] - 1]
    refs = [np.full(len(z), table.one, dtype=np.int64),
            neg_target[parents[z][coupled] * vocab + last[z][coupled]]]
    rhs = np.where(inner, table.zero, root[last[z]]).astype(np.int64)
    return rows, cols, refs, rhs


def stack(pieces: list[Any]) -> np.ndarray:
    """Concatenate COO pieces as int64."""
    return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)


def finish_lp(name: str, n_vars: int, objective_refs: np.ndarray, table: ValueTable, eq: Block,
              rows: list[np.ndarray], cols: list[np.ndarray], refs: list[np.ndarray],
              rhs: list[np.ndarray], **kwargs: Any) -> LinearProgram:
    """A LinearProgram with <= rows from COO pieces (the class LP, the node form, the
    antichain form)."""
    r, c, f = stack(rows), stack(cols), stack(refs)
    order = np.lexsort((c, r))
    ub = Block(r[order], c[order], f[order], stack(rhs))
    values, exact_values = table.tables()
    return LinearProgram(name=name, num_vars=n_vars, objective_refs=objective_refs,
                         constant_ref=table.one, eq=eq, ub=ub, table=values,
                         exact_table=exact_values, **kwargs)
