"""Builders of the information-agnostic LPs of speculative decoding (THEORY.md sections 3-4).

Full LP over K draft paths (one builder for K = 1 and K > 1)
-----------------------------------------------------------
A *draft configuration* c is a multiset of K length-L paths (i.i.d. drafting; weight
w(c) = multinomial(K; multiplicities) prod_k q(x_k)) or a set of K distinct paths
(drafting without replacement: K distinct paths drawn sequentially from q
renormalised; w(c) = sum over the K! orderings of prod_k q(x_k) / (1 - sum_{j<k} q(x_j))).
Configurations of weight 0 are dropped (paths with q(x) = 0 are never drafted). The
verifier may read the whole configuration, so a multiset is all it needs to know: any
rule reading the ordered tuple can be averaged over orderings without changing its
output law, and the optimum over multisets equals the optimum over ordered tuples.

Variables (all >= 0):
    pi(c, n, y)   for every configuration c, every DISTINCT node n of c's prefix tree
                  (root included, depth 0..L) and token y: P(config = c, output = (n, y));
                  objective coefficient |n| + 1.
    A(z)          for every node z of depth 1..L (all V + ... + V^L of them), objective 0.
Rows (sparse formulation; every pi enters exactly two rows):
    (i)  draft marginal, one per configuration:  sum_{n, y} pi(c, n, y) = w(c)
    (ii) target matching, one per node u of depth 0..L and token t:
             A(u t) + C(u, t) - p(t|u) A(u) = 0,   C(u, t) = sum_c pi(c, u, t),
         where A(u t) is absent when |u| = L and A(root) = 1 is a constant (the root
         rows read A(t) + C(root, t) = p(t)).
By induction from depth L upward the rows (ii) force A(z) = sum of pi over outputs whose
node extends z = P(tau >= |z|, prefix = z), so this LP is THEORY's LP with the A(z)
written as auxiliary variables instead of dense sums (the dense form has O(L) entries
per pi). Summing all rows (ii) gives sum pi = 1, and summing all rows (i) gives the
same (exact row sums 1 make the weights sum to 1): the rows have exactly one linear
dependency. One marginal row (the last configuration's) is dropped at build time
(THEORY section 6: HiGHS presolve can call the LP with the redundant row infeasible);
the dropped row is kept in ``lp.meta["dropped_eq"]`` so that the exact certificate
still checks it. Matching rows with no entry at all (a node nobody drafts whose target
row has t at probability 0) are omitted.

Node LP (THEORY section 3, reduced form)
----------------------------------------
    maximise 1 + sum_z beta(z)  over beta(z) >= 0, z of depth 1..L,
    beta(z) <= q(z),  beta(u t) - p(t|u) beta(u) <= 0  (root: beta(t) <= p(t)).
Its optimum has the closed form beta*(z) = min(q(z), p(t|u) beta*(u)) (node_optimum).

Shapes: N = (V^(L+1) - 1)/(V - 1) nodes in shortlex order (speclp.verifiers.tree);
P = V^L paths in lexicographic order; C configurations.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.tree import (
    TreeModel,
    all_paths,
    depth_offset,
    node_parents,
    node_prefix,
    num_nodes,
    prefix_node_indices,
)
from .instance import Instance
from .program import Block, LinearProgram, ValueTable

DRAFT_SAMPLING = ("iid", "without-replacement")
MAX_NONZEROS = 20_000_000
MAX_BYTES = 8 * 2**30
BYTES_PER_NONZERO = 120  # COO refs, CSC copy for the solver, solver workspace (measured order)
BYTES_PER_EXACT_VALUE = 160  # one Fraction object plus its float copy


# ---------------------------------------------------------------------------
# models and configurations
# ---------------------------------------------------------------------------

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


def sorted_tuples(count: int, size: int, strict: bool) -> np.ndarray:
    """[C, size] all non-decreasing (strict: increasing) tuples over range(count), lexicographic."""
    combos = np.arange(count, dtype=np.int64)[:, None]
    for _ in range(1, size):
        start = combos[:, -1] + (1 if strict else 0)
        counts = np.maximum(count - start, 0)
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(combos)), counts)
        offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        combos = np.concatenate([combos[owner], (start[owner] + offset)[:, None]], axis=1)
    return combos


def count_configurations(positive_paths: int, paths: int, draft_sampling: str) -> int:
    if draft_sampling == "iid":
        return math.comb(positive_paths + paths - 1, paths)
    return math.comb(positive_paths, paths)


@dataclass
class ConfigurationSet:
    """Draft configurations as sorted tuples of path indices.

    paths [C, K] int64 indices into all_paths(V, L) (non-decreasing; strictly increasing
    without replacement); weight [C] float64 or object (exact); path_tokens [P, L].
    """

    paths: np.ndarray
    weight: np.ndarray
    path_tokens: np.ndarray
    draft_sampling: str

    def __len__(self) -> int:
        return int(len(self.paths))

    def label(self, c: int) -> str:
        return str(tuple(tuple(int(t) for t in self.path_tokens[p]) for p in self.paths[c]))


def multiset_configurations(model: TreeModel, paths: int, draft_sampling: str = "iid",
                            exact: bool | None = None) -> ConfigurationSet:
    """Every multiset (iid) or set (without replacement) of K drafted paths of weight > 0."""
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    q = model.draft_path_probabilities()  # [P]
    positive = np.nonzero(np.array([x != 0 for x in q]) if q.dtype == object else q > 0)[0]
    strict = draft_sampling == "without-replacement"
    if strict and paths > len(positive):
        raise ValueError(
            f"cannot draw {paths} distinct paths: only {len(positive)} paths have draft "
            "probability > 0"
        )
    combos = positive[sorted_tuples(len(positive), paths, strict)]  # [C, K]
    qk = [q[combos[:, k]] for k in range(paths)]
    if not strict:
        # multinomial coefficient K! / prod(multiplicity!) from run lengths of the sorted tuple
        run = np.ones(len(combos), dtype=np.int64)
        denom = np.ones(len(combos), dtype=np.int64)
        for k in range(1, paths):
            run = np.where(combos[:, k] == combos[:, k - 1], run + 1, 1)
            denom *= run
        coef = math.factorial(paths) // denom
        weight = qk[0]
        for k in range(1, paths):
            weight = weight * qk[k]
        weight = weight * (coef.astype(object) if q.dtype == object else coef)
    else:
        weight = None
        for order in itertools.permutations(range(paths)):
            term = qk[order[0]]
            used = qk[order[0]]
            for k in order[1:]:
                term = term * qk[k] / (1 - used)
                used = used + qk[k]
            weight = term if weight is None else weight + term
    tokens = all_paths(model.vocab_size, model.depth)
    return ConfigurationSet(combos, weight, tokens, draft_sampling)


# ---------------------------------------------------------------------------
# size estimate
# ---------------------------------------------------------------------------

def estimate_full_lp(model: TreeModel, paths: int, draft_sampling: str = "iid",
                     exact: bool = True) -> dict[str, int]:
    """Upper bounds on the size of full_lp without building it (configurations, variables,
    nonzeros, bytes)."""
    vocab, depth = model.vocab_size, model.depth
    q = model.draft_path_probabilities()
    positive = int(sum(1 for x in q if x != 0)) if q.dtype == object else int((q > 0).sum())
    configs = count_configurations(positive, paths, draft_sampling)
    nodes = num_nodes(vocab, depth)
    per_config = min(1 + paths * depth, nodes)
    pi_vars = configs * per_config * vocab
    variables = pi_vars + nodes - 1
    nonzeros = 2 * pi_vars + (nodes - 1) * (vocab + 1)
    exact_values = (configs + nodes * vocab) if exact else 0
    enumeration = configs * paths * (depth + 1) * 8 * 4
    memory = nonzeros * BYTES_PER_NONZERO + exact_values * BYTES_PER_EXACT_VALUE + enumeration
    return {"configurations": configs, "variables": variables, "nonzeros": nonzeros,
            "bytes": memory}


def _refuse_if_too_large(size: dict[str, int], what: str, max_nonzeros: int,
                         max_bytes: int) -> None:
    if size["nonzeros"] > max_nonzeros or size["bytes"] > max_bytes:
        raise ValueError(
            f"{what} too large: about {size['variables']:,} variables, {size['nonzeros']:,} "
            f"nonzeros, {size['bytes'] / 2**30:.1f} GiB (limits {max_nonzeros:,} nonzeros, "
            f"{max_bytes / 2**30:.0f} GiB; {size['configurations']:,} draft configurations); "
            "use fewer paths, a smaller vocabulary or depth, or column generation "
            "(speclp.lp.solve.solve_colgen)"
        )


# ---------------------------------------------------------------------------
# full LP
# ---------------------------------------------------------------------------

def _label_node(index: int, vocab: int) -> str:
    return str(node_prefix(int(index), vocab))


@dataclass
class FullStructure:
    """Everything about the full LP except its matrix: configurations, the pi column
    space, the row set and the value table. lp_from_structure builds the LP on any subset
    of the pi columns (column generation) with exactly the rows of the full LP.

    slot_config, slot_node, slot_depth [M]: the distinct nodes of every configuration's
    tree ("slots"); pi column id = slot * V + y (M * V ids), then A(z) for z = 1..N-1.
    match_keys [R]: u * V + t of the non-empty matching rows (sorted).
    """

    model: TreeModel
    paths: int
    draft_sampling: str
    configs: ConfigurationSet
    slot_config: np.ndarray
    slot_node: np.ndarray
    slot_depth: np.ndarray
    match_keys: np.ndarray
    values: np.ndarray
    exact_values: np.ndarray | None
    refs: dict[str, Any]
    estimate: dict[str, int]

    @property
    def vocab(self) -> int:
        return self.model.vocab_size

    @property
    def num_pi(self) -> int:
        return int(len(self.slot_node)) * self.vocab

    @property
    def num_nodes(self) -> int:
        return num_nodes(self.vocab, self.model.depth)

    @property
    def num_marginal_rows(self) -> int:
        return len(self.configs) - 1

    def column_label(self, pi_id: int) -> str:
        slot, y = divmod(int(pi_id), self.vocab)
        node = _label_node(self.slot_node[slot], self.vocab)
        return f"pi[c={self.configs.label(int(self.slot_config[slot]))}, node={node}, y={y}]"

    def match_rows(self, keys: np.ndarray) -> np.ndarray:
        """Row index (within the LP) of matching-row keys u * V + t."""
        return self.num_marginal_rows + np.searchsorted(self.match_keys, keys)


def full_structure(model_or_instance: TreeModel | Instance, paths: int = 1,
                   draft_sampling: str = "iid", exact: bool = True,
                   max_nonzeros: int = MAX_NONZEROS, max_bytes: int = MAX_BYTES) -> FullStructure:
    """Enumerate configurations and slots and fill the value table (no matrix)."""
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    size = estimate_full_lp(model, paths, draft_sampling, exact)
    _refuse_if_too_large(size, f"full LP (V={vocab}, L={depth}, K={paths})", max_nonzeros,
                         max_bytes)
    configs = multiset_configurations(model, paths, draft_sampling)
    path_nodes = prefix_node_indices(configs.path_tokens, vocab)  # [P, L+1]
    nodes = path_nodes[configs.paths]  # [C, K, L+1]
    first = np.ones(nodes.shape, dtype=bool)  # first occurrence of a node within its tree
    first[:, 1:] = nodes[:, 1:] != nodes[:, :-1]  # paths sorted => equal prefixes adjacent
    cfg, _, dep = np.nonzero(first)  # [M] configuration, path, depth of each distinct node
    node_of = nodes[first]  # [M]
    n_nodes = num_nodes(vocab, depth)

    table = ValueTable(exact)
    zero = model.target[0, 0] * 0
    refs: dict[str, Any] = {
        "depth": table.add(np.array([zero + d + 1 for d in range(depth + 1)], dtype=object)
                           if model.exact else np.arange(1, depth + 2, dtype=np.float64)),
        "neg_target": table.add(-model.target.reshape(-1)),  # [N*V] -p(t|u)
        "root_target": table.add(model.target[0]),  # [V] p(t)
        "weight": table.add(configs.weight),  # [C]
        "zero": table.zero, "one": table.one,
    }
    parents, last = node_parents(vocab, depth)
    a_nodes = np.arange(1, n_nodes, dtype=np.int64)
    p_rows = model.target[a_nodes]  # [N-1, V]
    nonzero_p = (np.array([[x != 0 for x in r] for r in p_rows], dtype=bool).reshape(p_rows.shape)
                 if model.exact else p_rows != 0)
    zi, zt = np.nonzero(nonzero_p)
    pi_keys = np.unique(node_of)[:, None] * vocab + np.arange(vocab)[None, :]
    keys = np.unique(np.concatenate([
        pi_keys.reshape(-1), parents[a_nodes] * vocab + last[a_nodes], a_nodes[zi] * vocab + zt]))
    values, exact_values = table.tables()
    refs["a_p_nodes"], refs["a_p_tokens"] = a_nodes[zi], zt
    return FullStructure(model, paths, draft_sampling, configs, cfg, node_of, dep, keys, values,
                         exact_values, refs, size)


def lp_from_structure(st: FullStructure, pi_columns: np.ndarray | None = None) -> LinearProgram:
    """The full LP restricted to the given pi column ids (all when None), in that order,
    followed by every A(z) column. Rows are always those of the full LP."""
    vocab, depth = st.vocab, st.model.depth
    n_nodes = st.num_nodes
    n_configs = len(st.configs)
    full = pi_columns is None
    ids = np.arange(st.num_pi, dtype=np.int64) if full else np.asarray(pi_columns, dtype=np.int64)
    n_pi = len(ids)
    n_vars = n_pi + n_nodes - 1
    slot, y = np.divmod(ids, vocab)
    pi_cfg = st.slot_config[slot]
    pi_node = st.slot_node[slot]
    one, zero = st.refs["one"], st.refs["zero"]

    objective_refs = np.full(n_vars, zero, dtype=np.int64)
    objective_refs[:n_pi] = st.refs["depth"][st.slot_depth[slot]]

    pi_cols = np.arange(n_pi, dtype=np.int64)
    n_marg = n_configs - 1
    keep_marg = pi_cfg < n_marg
    parents, last = node_parents(vocab, depth)
    a_nodes = np.arange(1, n_nodes, dtype=np.int64)
    a_cols = n_pi + a_nodes - 1
    zn, zt = st.refs["a_p_nodes"], st.refs["a_p_tokens"]
    match_key = np.concatenate([
        pi_node * vocab + y,  # C(u, t)
        parents[a_nodes] * vocab + last[a_nodes],  # A(u t) in row (u, t)
        zn * vocab + zt,  # -p(t|z) A(z) in row (z, t)
    ])
    match_cols = np.concatenate([pi_cols, a_cols, n_pi + zn - 1])
    match_refs = np.concatenate([np.full(n_pi + len(a_nodes), one, dtype=np.int64),
                                 st.refs["neg_target"][zn * vocab + zt]])
    rows = np.concatenate([pi_cfg[keep_marg], st.match_rows(match_key)])
    cols = np.concatenate([pi_cols[keep_marg], match_cols])
    refs = np.concatenate([np.full(int(keep_marg.sum()), one, dtype=np.int64), match_refs])
    keys = st.match_keys
    match_rhs = np.full(len(keys), zero, dtype=np.int64)
    root_rows = keys < vocab  # node 0 = root
    match_rhs[root_rows] = st.refs["root_target"][keys[root_rows]]
    rhs_refs = np.concatenate([st.refs["weight"][:n_marg], match_rhs])
    order = np.lexsort((cols, rows))
    eq = Block(rows[order], cols[order], refs[order], rhs_refs)
    dropped_mask = ~keep_marg
    dropped = Block(np.zeros(int(dropped_mask.sum()), dtype=np.int64), pi_cols[dropped_mask],
                    np.full(int(dropped_mask.sum()), one, dtype=np.int64),
                    st.refs["weight"][n_configs - 1:])
    config_label = st.configs.label

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_pi:
            return st.column_label(ids[j])
        if j < n_vars:
            return f"A[{_label_node(j - n_pi + 1, vocab)}]"
        raise IndexError(j)

    def eq_label(i: int) -> str:
        i = int(i)
        if i < n_marg:
            return f"marginal[c={config_label(i)}]"
        u, t = divmod(int(keys[i - n_marg]), vocab)
        return f"match[u={_label_node(u, vocab)}, t={t}]"

    name = f"full-V{vocab}-L{depth}-K{st.paths}-{st.draft_sampling}"
    lp = LinearProgram(
        name=name if full else name + f"-restricted{n_pi}",
        num_vars=n_vars,
        objective_refs=objective_refs,
        constant_ref=zero,
        eq=eq,
        ub=Block.empty(),
        table=st.values,
        exact_table=st.exact_values,
        variable_label=variable_label,
        eq_label=eq_label,
    )
    lp.notes.append(
        f"dropped the marginal row of configuration {config_label(n_configs - 1)}: the "
        "matching rows and the marginal rows have exactly one linear dependency (both sum to "
        "sum pi = 1); it is kept in meta['dropped_eq'] and checked by the certificate"
    )
    if not full:
        lp.notes.append(f"restricted to {n_pi} of {st.num_pi} pi columns (column generation)")
    lp.meta.update({
        "kind": "full" if full else "restricted", "vocab_size": vocab, "depth": depth,
        "paths": st.paths, "draft_sampling": st.draft_sampling, "configurations": n_configs,
        "pi_variables": n_pi, "pi_ids": ids, "dropped_eq": dropped, "estimate": st.estimate,
        "num_marginal_rows": n_marg, "match_keys": keys,
    })
    return lp


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
    st = full_structure(model_or_instance, paths, draft_sampling, exact, max_nonzeros, max_bytes)
    return lp_from_structure(st)


def _match_label(key: int, vocab: int) -> str:
    return f"match[u={_label_node(key // vocab, vocab)}, t={key % vocab}]"


def policy_columns(st: FullStructure, policy: np.ndarray, exact: bool = False
                   ) -> tuple[np.ndarray, np.ndarray, Any]:
    """Matching-row entries of one policy column (column generation master).

    policy [C]: one pi column id per configuration (its output (n, y)). Returns (rows [k]
    indices into the matching rows, values [k] summed weights w(c), objective
    sum_c w(c)(|n_c| + 1)); values and objective are exact (Fractions) when exact=True,
    float64 otherwise.
    """
    slot, y = np.divmod(np.asarray(policy, dtype=np.int64), st.vocab)
    keys = st.slot_node[slot] * st.vocab + y
    rows, inverse = np.unique(np.searchsorted(st.match_keys, keys), return_inverse=True)
    if not exact:
        weight = st.values[st.refs["weight"]]
        values = np.bincount(inverse, weights=weight, minlength=len(rows))
        objective = float(weight @ (st.slot_depth[slot] + 1))
        return rows, values, objective
    from flint import fmpq

    weight = np.array([fmpq(v.numerator, v.denominator)
                       for v in st.exact_values[st.refs["weight"]]], dtype=object)
    sums = np.empty(len(rows), dtype=object)
    sums[:] = [fmpq(0)] * len(rows)
    np.add.at(sums, inverse, weight)
    objective = (weight * (st.slot_depth[slot] + 1).astype(object)).sum()
    to_fraction = lambda v: Fraction(int(v.p), int(v.q))  # noqa: E731
    return (rows, np.array([to_fraction(v) for v in sums], dtype=object),
            to_fraction(objective))


def policy_lp(st: FullStructure, policies: list[np.ndarray], exact: bool = False) -> LinearProgram:
    """Column-generation master over policies (Dantzig-Wolfe form of the full LP).

    A policy picks one output (n, y) for every configuration; the full LP's pi satisfying
    the marginal rows are exactly the convex combinations of policies (the marginal rows
    make pi a product of scaled simplices). Variables: lambda_k >= 0 for the policies
    (column k), then A(z) for z = 1..N-1. Rows: the matching rows of the full LP (policy
    k contributes sum of w(c) over the configurations whose output is (u, t)). The
    convexity row sum_k lambda_k = 1 is implied by the matching rows (they sum to the
    total mass) and is dropped; it is kept in meta["dropped_eq"] and checked by the
    certificate.
    """
    vocab, depth = st.vocab, st.model.depth
    n_pol = len(policies)
    n_nodes = st.num_nodes
    n_vars = n_pol + n_nodes - 1
    keys = st.match_keys
    parents, last = node_parents(vocab, depth)
    a_nodes = np.arange(1, n_nodes, dtype=np.int64)
    zn, zt = st.refs["a_p_nodes"], st.refs["a_p_tokens"]
    a_rows = np.concatenate([np.searchsorted(keys, parents[a_nodes] * vocab + last[a_nodes]),
                             np.searchsorted(keys, zn * vocab + zt)])
    a_cols = np.concatenate([n_pol + a_nodes - 1, n_pol + zn - 1])
    a_refs = np.concatenate([np.full(len(a_nodes), st.refs["one"], dtype=np.int64),
                             st.refs["neg_target"][zn * vocab + zt]])
    base = len(st.values)
    float_parts: list[np.ndarray] = []
    exact_parts: list[np.ndarray] = []
    rows_list, cols_list, refs_list = [a_rows], [a_cols], [a_refs]
    objective_refs = np.full(n_vars, st.refs["zero"], dtype=np.int64)
    offset = base
    for k, policy in enumerate(policies):
        rows, values, objective = policy_columns(st, policy, exact)
        entries = np.append(np.asarray(values, dtype=object if exact else np.float64),
                            np.array([objective], dtype=object if exact else np.float64))
        if exact:
            float_parts.append(np.array([float(v) for v in entries]))
            exact_parts.append(entries)
        else:
            float_parts.append(entries.astype(np.float64))
        rows_list.append(rows)
        cols_list.append(np.full(len(rows), k, dtype=np.int64))
        refs_list.append(offset + np.arange(len(rows), dtype=np.int64))
        objective_refs[k] = offset + len(rows)
        offset += len(entries)
    table = np.concatenate([st.values, *float_parts]) if float_parts else st.values
    exact_table = None
    if exact:
        if st.exact_values is None:
            raise ValueError("policy_lp(exact=True) needs a structure built with exact data")
        exact_table = np.concatenate([st.exact_values, *exact_parts]) if exact_parts else (
            st.exact_values)
    rows = np.concatenate(rows_list)
    cols = np.concatenate(cols_list)
    refs = np.concatenate(refs_list)
    match_rhs = np.full(len(keys), st.refs["zero"], dtype=np.int64)
    root_rows = keys < vocab
    match_rhs[root_rows] = st.refs["root_target"][keys[root_rows]]
    order = np.lexsort((cols, rows))
    eq = Block(rows[order], cols[order], refs[order], match_rhs)
    convexity = Block(np.zeros(n_pol, dtype=np.int64), np.arange(n_pol, dtype=np.int64),
                      np.full(n_pol, st.refs["one"], dtype=np.int64),
                      np.array([st.refs["one"]], dtype=np.int64))
    lp = LinearProgram(
        name=f"policy-master-V{vocab}-L{depth}-K{st.paths}-{st.draft_sampling}-{n_pol}",
        num_vars=n_vars, objective_refs=objective_refs, constant_ref=st.refs["zero"], eq=eq,
        ub=Block.empty(), table=table, exact_table=exact_table,
        variable_label=lambda j: (f"lambda[{int(j)}]" if j < n_pol
                                  else f"A[{_label_node(int(j) - n_pol + 1, vocab)}]"),
        eq_label=lambda i: _match_label(int(keys[i]), vocab),
    )
    lp.notes.append("convexity row sum lambda = 1 dropped (implied by the matching rows); "
                    "kept in meta['dropped_eq'] and checked by the certificate")
    lp.meta.update({"kind": "policy-master", "policies": list(policies), "dropped_eq": convexity,
                    "vocab_size": vocab, "depth": depth, "paths": st.paths,
                    "draft_sampling": st.draft_sampling})
    return lp


# ---------------------------------------------------------------------------
# node LP and closed form
# ---------------------------------------------------------------------------

def node_lp(model_or_instance: TreeModel | Instance, exact: bool = True) -> LinearProgram:
    """THEORY section 3's reduced LP over beta(z), z of depth 1..L (variable z - 1).

    Inequality rows: N-1 budget rows beta(z) <= q(z) (row z - 1), then N-1 chain rows
    beta(u t) - p(t|u) beta(u) <= 0 (root children: beta(t) <= p(t)) (row N - 2 + z).
    Objective 1 + sum beta (constant 1).
    """
    model = as_model(model_or_instance, exact)
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    n_vars = n_nodes - 1
    table = ValueTable(exact)
    q_node = model.node_probabilities("draft")  # [N]
    q_refs = table.add(q_node[1:])
    neg_target_refs = table.add(-model.target.reshape(-1))
    root_refs = table.add(model.target[0])
    parents, last = node_parents(vocab, depth)
    z = np.arange(1, n_nodes, dtype=np.int64)
    var = z - 1
    inner = parents[z] > 0  # parent is not the root
    p_edge = model.target[parents[z], last[z]]
    nonzero = np.array([x != 0 for x in p_edge], dtype=bool) if model.exact else p_edge != 0
    coupled = inner & nonzero
    rows = np.concatenate([var, n_vars + var, n_vars + var[coupled]])
    cols = np.concatenate([var, var, parents[z][coupled] - 1])
    refs = np.concatenate([
        np.full(2 * n_vars, table.one, dtype=np.int64),
        neg_target_refs[parents[z][coupled] * vocab + last[z][coupled]],
    ])
    chain_rhs = np.where(inner, table.zero, root_refs[last[z]])
    order = np.lexsort((cols, rows))
    ub = Block(rows[order], cols[order], refs[order], np.concatenate([q_refs, chain_rhs]))
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
        variable_label=lambda j: f"beta[{_label_node(int(j) + 1, vocab)}]",
        ub_label=lambda i: (f"budget[{_label_node(int(i) + 1, vocab)}]" if i < n_vars
                            else f"chain[{_label_node(int(i) - n_vars + 1, vocab)}]"),
        meta={"kind": "node", "vocab_size": vocab, "depth": depth},
    )


def node_optimum(model_or_instance: TreeModel | Instance,
                 exact: bool | None = None) -> tuple[np.ndarray, Any]:
    """Closed-form optimum of the node LP: beta*(z) = min(q(z), p(t|u) beta*(u)).

    Returns (beta [N] indexed by node, root entry 1, and value = sum(beta) = 1 + sum over
    depth 1..L). Float64 for float models, exact (object arrays) for exact ones; with an
    Instance, exact defaults to instance.rational.
    """
    if isinstance(model_or_instance, Instance):
        model = model_or_instance.model(
            exact=model_or_instance.rational if exact is None else exact)
    else:
        want = model_or_instance.exact if exact is None else exact
        model = as_model(model_or_instance, bool(want))
    vocab, depth = model.vocab_size, model.depth
    one = model.target[0, 0] * 0 + 1 if model.exact else 1.0
    beta = [np.array([one], dtype=model.target.dtype)]
    q_rows = model.draft
    prev_q = beta[0]  # q(u) at depth d-1
    for d in range(1, depth + 1):
        start, count = depth_offset(vocab, d - 1), vocab ** (d - 1)
        p_rows = model.target[start : start + count]  # [V^(d-1), V]
        q_here = (prev_q[:, None] * q_rows[start : start + count]).reshape(-1)  # [V^d]
        bound = (beta[-1][:, None] * p_rows).reshape(-1)
        beta.append(np.minimum(q_here, bound))
        prev_q = q_here
    full = np.concatenate(beta)
    return full, full.sum()


def exact_fraction(value: Any) -> Fraction:
    """Fraction of a Fraction / fmpq / int (exact) value."""
    if isinstance(value, Fraction):
        return value
    if hasattr(value, "p") and hasattr(value, "q"):
        return Fraction(int(value.p), int(value.q))
    return Fraction(value)
