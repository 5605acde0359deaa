"""The single-path node LP (docs/theory.md sections 3.2-3.3) and its closed form (BV).

    maximise 1 + sum_z beta(z)  over beta(z) >= 0, z of depth 1..L,
    beta(z) <= r(z),  beta(u t) - p(t|u) beta(u) <= 0  (root: beta(t) <= p(t)),

where r(z) is the draft probability of node z (r = q; in the selection class r is the
node marginal of a skewed law on the leaves, see speclp.lp.class_lp). Its optimum has the
closed form beta*(z) = min(r(z), p(t|u) beta*(u)) (docs/theory.md Theorem 3.3): block
verification with r in place of q (node_optimum). node_lp builds the LP itself (an
independent check of the closed form).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..verifiers.tree import TreeModel, depth_offset, num_nodes
from .full import as_model, label_node
from .instance import Instance
from .program import Block, LinearProgram, ValueTable
from .rows import chain_rows, stack


def node_lp(model_or_instance: TreeModel | Instance, exact: bool = True) -> LinearProgram:
    """The node-budget LP of docs/theory.md section 3.2 over beta(z), z of depth 1..L
    (variable z - 1).

    Inequality rows: N-1 budget rows beta(z) <= q(z) (row z - 1), then N-1 chain rows
    beta(u t) - p(t|u) beta(u) <= 0 (root children: beta(t) <= p(t)) (row N - 2 + z).
    Objective 1 + sum beta (constant 1).
    """
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    n_vars = num_nodes(vocab, depth) - 1
    table = ValueTable(exact)
    q_refs = table.add(model.node_probabilities("draft")[1:])
    var = np.arange(n_vars, dtype=np.int64)
    c_rows, c_cols, c_refs, c_rhs = chain_rows(model, table, 0, n_vars)
    rows = stack([var] + c_rows)
    cols = stack([var] + c_cols)
    refs = stack([np.full(n_vars, table.one, dtype=np.int64)] + c_refs)
    order = np.lexsort((cols, rows))
    ub = Block(rows[order], cols[order], refs[order], np.concatenate([q_refs, c_rhs]))
    values, exact_values = table.tables()
    return LinearProgram(
        name=f"node-V{vocab}-L{depth}",
        num_vars=n_vars,
        objective_refs=np.full(n_vars, table.one, dtype=np.int64),
        constant_ref=table.one,
        eq=Block.empty(),
        ub=ub,
        table=values,
        exact_table=exact_values,
        variable_label=lambda j: f"beta[{label_node(int(j) + 1, vocab)}]",
        ub_label=lambda i: (f"budget[{label_node(int(i) + 1, vocab)}]" if i < n_vars
                            else f"chain[{label_node(int(i) - n_vars + 1, vocab)}]"),
        meta={"kind": "node", "vocab_size": vocab, "depth": depth},
    )


def node_marginals(leaf_law: np.ndarray, vocab: int, depth: int) -> np.ndarray:
    """[N] r(z) = sum of leaf_law over the leaves through node z (root: the total), for a
    law leaf_law [V^L] on the leaves in lexicographic order (float64 or exact)."""
    leaf_law = np.asarray(leaf_law)
    levels = [leaf_law]
    for _ in range(depth):
        levels.append(levels[-1].reshape(-1, vocab).sum(axis=1))
    return np.concatenate(levels[::-1])


def node_optimum(model_or_instance: TreeModel | Instance, exact: bool | None = None,
                 leaf_law: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
    """Closed-form optimum of the node LP: beta*(z) = min(r(z), p(t|u) beta*(u)).

    r(z) = q(z) (the draft's node probabilities), or the node marginals of leaf_law [V^L]
    (a skewed law on the leaves: BV run with r in place of q). Returns (beta [N] indexed by
    node, root entry 1, and value = sum(beta) = 1 + sum over depth 1..L): BV's block
    efficiency. Float64 for float models, exact (object arrays) for exact ones; with an
    Instance, exact defaults to instance.rational.
    """
    if isinstance(model_or_instance, Instance):
        model = model_or_instance.model(
            exact=model_or_instance.rational if exact is None else exact)
    else:
        want = model_or_instance.exact if exact is None else exact
        model = as_model(model_or_instance, bool(want))
    vocab, depth = model.vocab_size, model.depth
    if leaf_law is None:
        budget = model.node_probabilities("draft")
    else:
        budget = node_marginals(leaf_law, vocab, depth)
    one = model.target[0, 0] * 0 + 1 if model.exact else 1.0
    beta = [np.array([one], dtype=model.target.dtype)]
    for d in range(1, depth + 1):
        start, count = depth_offset(vocab, d - 1), vocab ** (d - 1)
        bound = (beta[-1][:, None] * model.target[start: start + count]).reshape(-1)  # [V^d]
        here = budget[depth_offset(vocab, d): depth_offset(vocab, d) + vocab**d]
        beta.append(np.minimum(here, bound))
    full = np.concatenate(beta)
    return full, full.sum()
