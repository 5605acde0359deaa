"""The enumerated information-agnostic LPs: the full K-path LP and the LP of one fixed tree.

Both are "output" LPs over an explicit family of draft configurations; they differ only in
the family. speclp.lp.engine.optimum(method="full") solves the full LP; it is the test
oracle of the column-generation engine (speclp.lp.colgen), which reaches the same optimum
without enumerating configurations.

Full LP over K draft paths (docs/theory.md section 4.1; one builder for K = 1 and K > 1)
-----------------------------------------------------------------------------------------
A draft configuration c is a multiset of K length-L paths (i.i.d. drafting) or a set of K
distinct paths (drafting without replacement), with weight w(c) = the probability of its
orderings (speclp.verifiers.drafts.multiset_configurations). The optimum over multisets
equals the optimum over ordered tuples (docs/theory.md Lemma 4.1).

Variables (all >= 0):
    pi(c, n, y)   for every configuration c, every DISTINCT node n of c's prefix tree
                  (root included, depth 0..L) and token y: P(config = c, output = (n, y));
                  objective coefficient |n| + 1.
    A(z)          for every node z of depth 1..L (all V + ... + V^L of them), objective 0.
Rows (every pi enters exactly two rows):
    (i)  draft marginal, one per configuration:  sum_{n, y} pi(c, n, y) = w(c)
    (ii) target matching (speclp.lp.rows), one per node u of depth 0..L and token t, with
         C(u, t) = sum_c pi(c, u, t).
The rows (ii) force A(z) = P(tau >= |z|, prefix = z) (docs/theory.md Lemma 3.2), so the
A(z) are auxiliary variables in place of dense sums. The rows have a linear dependency
(Lemma 4.2: rows (ii) and rows (i) both sum to sum pi = 1). One marginal row (the last
configuration's) is dropped at build time (section 16.1: HiGHS presolve can call the LP
with the redundant row infeasible) and kept in ``lp.meta["dropped_eq"]`` so that the exact
certificate still checks it. Matching rows with no entry at all are omitted.

LP of one deterministic draft tree (docs/theory.md section 4.2)
----------------------------------------------------------------
The C = 1 case: one configuration of weight 1 whose prefix tree is the given tree T (node
indices 1..N-1, prefix-closed). Its marginal row is the dropped one. Its optimum is
1 + sum_{n in T} p(n) (p(n) the target path probability), attained by verification by
target sampling (Theorem 4.3; checked in tests/test_trees.py).

Shapes: N = (V^(L+1) - 1)/(V - 1) nodes in shortlex order (speclp.verifiers.tree);
P = V^L leaves (complete paths) in lexicographic order; C configurations; M slots (the
distinct nodes of all configurations' trees).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from ..inputs import BadArgument
from ..verifiers.drafts import (
    DRAFT_SAMPLING,
    count_configurations,
    multiset_configurations,
    positive_leaves,
)
from ..verifiers.tree import (
    SIZE_CAP,
    TreeModel,
    capped_num_nodes,
    capped_power,
    node_depths,
    node_prefix,
    num_nodes,
    prefix_node_indices,
)
from .instance import Instance, format_count
from .program import Block, LinearProgram, ValueTable
from .rows import depth_values, matching_a_entries, matching_rhs, target_refs

__all__ = ["DRAFT_SAMPLING", "MAX_BYTES", "MAX_NONZEROS", "as_model", "check_distinct_paths",
           "check_full_lp_size", "check_tree_nodes", "estimate_full_lp", "full_lp", "tree_lp"]

MAX_VARIABLES = 400_000  # default refusal limit of the commands (V=3, L=3, K=4 is ~1.07M: minutes)
MAX_NONZEROS = 20_000_000
MAX_BYTES = 8 * 2**30
BYTES_PER_NONZERO = 120  # COO refs, CSC copy for the solver, solver workspace (measured order)
BYTES_PER_EXACT_VALUE = 160  # one Fraction object plus its float copy


def as_model(model_or_instance: TreeModel | Instance, exact: bool) -> TreeModel:
    """TreeModel from an Instance (exact rows when exact=True) or a TreeModel.

    A float TreeModel asked for exact data keeps its float rows; the LP's exact table then
    holds the exact binary values of the floats (rows need not sum to exactly 1).
    """
    if isinstance(model_or_instance, Instance):
        return model_or_instance.model(exact=exact)
    if not isinstance(model_or_instance, TreeModel):
        raise TypeError(f"expected a TreeModel or Instance, got {type(model_or_instance).__name__}")
    if not exact and model_or_instance.exact:
        return model_or_instance.to_float()
    return model_or_instance


def label_node(index: int, vocab: int) -> str:
    return str(node_prefix(int(index), vocab))


# ---------------------------------------------------------------------------
# size estimate
# ---------------------------------------------------------------------------

def full_lp_size(vocab: int, depth: int, paths: int, draft_sampling: str = "iid",
                 positive_paths: int | None = None, exact: bool = True) -> dict[str, int]:
    """Upper bounds on the size of full_lp from the shape alone (nothing is built).

    positive_paths: paths with q(x) > 0 (default all V^L). Returns configurations,
    variables, nonzeros and bytes (memory of the build, the solve and, when exact, the
    exact table); every count is capped at verifiers.tree.SIZE_CAP, so this is safe to call
    on any input before anything is allocated.
    """
    if positive_paths is None:
        positive_paths = capped_power(vocab, depth)
    configs = count_configurations(positive_paths, paths, draft_sampling)
    nodes = capped_num_nodes(vocab, depth)
    per_config = min(1 + paths * depth, nodes)
    pi_vars = min(configs * per_config * vocab, SIZE_CAP)
    variables = min(pi_vars + nodes - 1, SIZE_CAP)
    nonzeros = min(2 * pi_vars + (nodes - 1) * (vocab + 1), SIZE_CAP)
    exact_values = (configs + nodes * vocab) if exact else 0
    enumeration = configs * paths * (depth + 1) * 8 * 4
    memory = min(nonzeros * BYTES_PER_NONZERO + exact_values * BYTES_PER_EXACT_VALUE + enumeration,
                 SIZE_CAP)
    return {"configurations": configs, "variables": variables, "nonzeros": nonzeros,
            "bytes": memory}


def check_distinct_paths(field: str, vocab: int, depth: int, paths: int, draft_sampling: str) -> None:
    """BadArgument(field) for K paths drafted without replacement when there are fewer than
    K distinct paths (V^L, capped)."""
    if draft_sampling == "without-replacement":
        distinct = capped_power(vocab, depth)
        if paths > distinct:
            raise BadArgument(field, f"cannot draft {paths} distinct paths out of {distinct:,} "
                                     f"(V={vocab}, L={depth}, without replacement)")


def check_full_lp_size(field: str, vocab: int, depth: int, paths: int, draft_sampling: str = "iid",
                       limit: int | None = None, suggestion: str = "use a smaller V, L or K"
                       ) -> dict[str, int]:
    """The size estimate of the K-path LP (full_lp_size) after refusing, with
    BadArgument(field), paths that cannot be drafted (check_distinct_paths) and an LP over
    `limit` variables (default MAX_VARIABLES): the one wording of the commands' size refusal."""
    limit = MAX_VARIABLES if limit is None else limit
    check_distinct_paths(field, vocab, depth, paths, draft_sampling)
    size = full_lp_size(vocab, depth, paths, draft_sampling)
    if size["variables"] > limit:
        raise BadArgument(field, f"the K-path LP at V={vocab}, L={depth}, K={paths} would have "
                                 f"about {format_count(size['variables'])} variables "
                                 f"({format_count(size['configurations'])} draft configurations; "
                                 f"limit {limit:,}); {suggestion}")
    return size


def estimate_full_lp(model: TreeModel, paths: int, draft_sampling: str = "iid",
                     exact: bool = True) -> dict[str, int]:
    """Upper bounds on the size of full_lp without building it (configurations, variables,
    nonzeros, bytes), counting only the paths the draft can produce (q(x) > 0)."""
    _, positive = positive_leaves(model)
    return full_lp_size(model.vocab_size, model.depth, paths, draft_sampling, len(positive), exact)


def _refuse_if_too_large(size: dict[str, int], what: str, max_nonzeros: int,
                         max_bytes: int) -> None:
    if size["nonzeros"] > max_nonzeros or size["bytes"] > max_bytes:
        raise ValueError(
            f"{what} too large: about {size['variables']:,} variables, {size['nonzeros']:,} "
            f"nonzeros, {size['bytes'] / 2**30:.1f} GiB (limits {max_nonzeros:,} nonzeros, "
            f"{max_bytes / 2**30:.0f} GiB; {size['configurations']:,} draft configurations); "
            "use fewer paths, a smaller vocabulary or depth, or the column-generation engine "
            "(speclp.lp.optimum with method='colgen')"
        )


# ---------------------------------------------------------------------------
# the LP over explicit output slots
# ---------------------------------------------------------------------------

def outputs_lp(model: TreeModel, weight: np.ndarray, config_label: Any, slot_config: np.ndarray,
               slot_node: np.ndarray, slot_depth: np.ndarray, name: str) -> LinearProgram:
    """The output LP of an explicit family of draft configurations (module docstring).

    weight [C] (float64 or exact) and config_label(c) describe the configurations;
    slot_config, slot_node, slot_depth [M]: the distinct nodes of every configuration's
    prefix tree (root included), configuration-major. Columns: pi(slot, y) at slot * V + y
    (M V of them), then A(z) for z = 1..N-1. Equality rows: C - 1 marginal rows (the last
    one dropped, kept in meta["dropped_eq"]), then the non-empty matching rows in key order.
    """
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    n_configs = len(weight)
    n_slots = len(slot_node)
    n_pi = n_slots * vocab
    n_vars = n_pi + n_nodes - 1
    table = ValueTable(model.exact)
    depth_refs = table.add(depth_values(model))
    neg_target, root_target = target_refs(model, table)
    weight_refs = table.add(weight)
    one, zero = table.one, table.zero

    slot = np.repeat(np.arange(n_slots, dtype=np.int64), vocab)  # [M V]
    token = np.tile(np.arange(vocab, dtype=np.int64), n_slots)
    pi_config, pi_node = slot_config[slot], slot_node[slot]
    pi_cols = np.arange(n_pi, dtype=np.int64)
    objective_refs = np.full(n_vars, zero, dtype=np.int64)
    objective_refs[:n_pi] = depth_refs[slot_depth[slot]]

    a_keys, a_cols, a_refs = matching_a_entries(model, n_pi, neg_target, one)
    match_key = np.concatenate([pi_node * vocab + token, a_keys])  # C(u, t), then A entries
    keys = np.unique(match_key)  # the non-empty matching rows
    n_marginal = n_configs - 1
    keep = pi_config < n_marginal
    rows = np.concatenate([pi_config[keep], n_marginal + np.searchsorted(keys, match_key)])
    cols = np.concatenate([pi_cols[keep], pi_cols, a_cols])
    refs = np.concatenate([np.full(int(keep.sum()), one, dtype=np.int64),
                           np.full(n_pi, one, dtype=np.int64), a_refs])
    rhs = np.concatenate([weight_refs[:n_marginal], matching_rhs(keys, vocab, root_target, zero)])
    order = np.lexsort((cols, rows))
    eq = Block(rows[order], cols[order], refs[order], rhs)
    dropped = Block(np.zeros(int((~keep).sum()), dtype=np.int64), pi_cols[~keep],
                    np.full(int((~keep).sum()), one, dtype=np.int64), weight_refs[n_configs - 1:])
    values, exact_values = table.tables()

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_pi:
            s, y = divmod(j, vocab)
            return (f"pi[c={config_label(int(slot_config[s]))}, "
                    f"node={label_node(slot_node[s], vocab)}, y={y}]")
        return f"A[{label_node(j - n_pi + 1, vocab)}]"

    def eq_label(i: int) -> str:
        i = int(i)
        if i < n_marginal:
            return f"marginal[c={config_label(i)}]"
        u, t = divmod(int(keys[i - n_marginal]), vocab)
        return f"match[u={label_node(u, vocab)}, t={t}]"

    lp = LinearProgram(
        name=name, num_vars=n_vars, objective_refs=objective_refs, constant_ref=zero, eq=eq,
        ub=Block.empty(), table=values, exact_table=exact_values,
        variable_label=variable_label, eq_label=eq_label)
    lp.notes.append(
        f"dropped the marginal row of configuration {config_label(n_configs - 1)}: the "
        "matching rows and the marginal rows have exactly one linear dependency (both sum to "
        "sum pi = 1); it is kept in meta['dropped_eq'] and checked by the certificate")
    lp.meta.update({"vocab_size": vocab, "depth": depth, "configurations": n_configs,
                    "pi_variables": n_pi, "dropped_eq": dropped,
                    "num_marginal_rows": n_marginal, "match_keys": keys})
    return lp


# ---------------------------------------------------------------------------
# full LP
# ---------------------------------------------------------------------------

def full_lp(model_or_instance: TreeModel | Instance, paths: int = 1, draft_sampling: str = "iid",
            exact: bool = True, max_nonzeros: int = MAX_NONZEROS,
            max_bytes: int = MAX_BYTES) -> LinearProgram:
    """The information-agnostic LP over K draft paths (see the module docstring).

    Variables: pi (configuration-major; within a configuration, distinct nodes by
    (path, depth), then token y), then A(z) for z = node 1..N-1 (shortlex).
    Equality rows: C - 1 marginal rows (last one dropped), then the non-empty matching
    rows (u, t) in order u * V + t. Refuses (ValueError) LPs whose estimated size is over
    max_nonzeros or max_bytes.
    """
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    size = estimate_full_lp(model, paths, draft_sampling, exact)
    _refuse_if_too_large(size, f"full LP (V={vocab}, L={depth}, K={paths})", max_nonzeros,
                         max_bytes)
    configs = multiset_configurations(model, paths, draft_sampling)
    leaf_nodes = prefix_node_indices(configs.path_tokens, vocab)  # [P, L+1]
    nodes = leaf_nodes[configs.paths]  # [C, K, L+1]
    first = np.ones(nodes.shape, dtype=bool)  # first occurrence of a node within its tree
    first[:, 1:] = nodes[:, 1:] != nodes[:, :-1]  # paths sorted => equal prefixes adjacent
    slot_config, _, slot_depth = np.nonzero(first)  # [M] configuration, path, depth
    lp = outputs_lp(model, configs.weight, configs.label, slot_config, nodes[first], slot_depth,
                    f"full-V{vocab}-L{depth}-K{paths}-{draft_sampling}")
    lp.meta.update({"kind": "full", "paths": paths, "draft_sampling": draft_sampling,
                    "estimate": size, "configurations_set": configs,
                    "slots": (slot_config, nodes[first], slot_depth)})
    return lp


# ---------------------------------------------------------------------------
# LP of one deterministic tree
# ---------------------------------------------------------------------------

def check_tree_nodes(tree_nodes: np.ndarray, vocab: int, depth: int) -> np.ndarray:
    """Validate a tree (node indices, root excluded): in range, distinct, prefix-closed.

    Returns the sorted int64 array [T]. Raises ValueError naming the first bad node.
    """
    nodes = np.asarray(tree_nodes, dtype=np.int64).reshape(-1)
    total = num_nodes(vocab, depth)
    if len(np.unique(nodes)) != len(nodes):
        raise BadArgument("tree_nodes", "repeated node index")
    bad = nodes[(nodes < 1) | (nodes >= total)]
    if len(bad):
        raise BadArgument("tree_nodes", f"node {int(bad[0])} is not a non-root node of depth 1..{depth}")
    present = set(nodes.tolist())
    for n in nodes.tolist():
        parent = (n - 1) // vocab
        if parent != 0 and parent not in present:
            raise BadArgument("tree_nodes", f"node {node_prefix(n, vocab)} lacks its parent "
                              f"{node_prefix(parent, vocab)} (trees must be prefix-closed)")
    return np.sort(nodes)


def tree_lp(model_or_instance: TreeModel | Instance, tree_nodes: np.ndarray,
            exact: bool = True) -> LinearProgram:
    """The information-agnostic LP of one deterministic draft tree (module docstring).

    tree_nodes: [T] shortlex node indices (1..N-1) of a prefix-closed tree. Columns: pi of
    the root and the T tree nodes ((1 + T) V, output-node-major), then the N - 1 A columns.
    Exact data are the instance's exact rows (rational instances) or the binary values of
    float rows.
    """
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    tree = check_tree_nodes(tree_nodes, vocab, depth)
    outputs = np.concatenate([[0], tree]).astype(np.int64)  # [1 + T] output nodes, root first
    weight = np.array([Fraction(1)], dtype=object) if model.exact else np.ones(1)
    lp = outputs_lp(model, weight, lambda c: f"tree of {len(tree)} nodes",
                    np.zeros(len(outputs), dtype=np.int64), outputs,
                    node_depths(vocab, depth)[outputs], f"tree-V{vocab}-L{depth}-T{len(tree)}")
    lp.notes.append("C = 1 case of full_lp: one deterministic draft tree of weight 1")
    lp.meta.update({"kind": "tree", "tree_nodes": tree, "paths": 1,
                    "draft_sampling": "deterministic-tree"})
    return lp
