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

Selection master (column generation; selection_lp)
---------------------------------------------------
The full LP has the optimum of the selection-class LP ("select one drafted path by a
priority order, then verify it single-path"): see selection_lp's docstring for the
duality argument; speclp.lp.solve.solve_colgen solves it by generating priorities and
speclp.lp.certify.certify_selection_master certifies the full LP's optimum exactly.

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
from .program import Block, LinearProgram, ValueTable, is_zero_value

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
    positive = np.nonzero(np.array([not is_zero_value(x) for x in q]) if q.dtype == object
                          else q > 0)[0]
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
    positive = (int(sum(1 for x in q if not is_zero_value(x))) if q.dtype == object
                else int((q > 0).sum()))
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
    return structure_from_slots(model, configs, cfg, node_of, dep, paths, draft_sampling, size)


def structure_from_slots(model: TreeModel, configs: Any, slot_config: np.ndarray,
                         slot_node: np.ndarray, slot_depth: np.ndarray, paths: int,
                         draft_sampling: str, size: dict[str, int]) -> FullStructure:
    """The structure of the LP for ANY family of draft configurations.

    configs: an object with len() (C), .weight [C] (float64 or exact) and .label(c);
    slot_config, slot_node, slot_depth [M]: the distinct nodes of every configuration's
    prefix tree (root included), configuration-major. full_structure passes multisets of
    K paths; lp.tree_lp passes one deterministic tree of weight 1.
    """
    vocab, depth = model.vocab_size, model.depth
    exact = model.exact
    cfg, node_of, dep = slot_config, slot_node, slot_depth
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
    nonzero_p = (np.array([[not is_zero_value(x) for x in r] for r in p_rows],
                          dtype=bool).reshape(p_rows.shape) if model.exact else p_rows != 0)
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


# ---------------------------------------------------------------------------
# selection master (column generation for the K-path full LP)
# ---------------------------------------------------------------------------

@dataclass
class SelectionStructure:
    """Data of the selection master (see selection_lp).

    path_tokens [P, L]; q_paths [P] draft path probabilities (float64) and q_exact (exact,
    or None); configs: the configurations (enumerated only for drafting without
    replacement, where selection laws are computed by enumeration; None for iid).
    """

    model: TreeModel
    paths: int
    draft_sampling: str
    path_tokens: np.ndarray
    q_paths: np.ndarray
    q_exact: np.ndarray | None
    configs: ConfigurationSet | None
    exact: bool

    @property
    def num_paths(self) -> int:
        return int(len(self.q_paths))

    def count_configurations(self) -> int:
        positive = int((self.q_paths > 0).sum())
        return count_configurations(positive, self.paths, self.draft_sampling)


def selection_structure(model_or_instance: TreeModel | Instance, paths: int = 2,
                        draft_sampling: str = "iid", exact: bool = True,
                        max_configurations: int = 20_000_000) -> SelectionStructure:
    model = as_model(model_or_instance, exact)
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    q = model.draft_path_probabilities()
    q_float = np.array([float(v) for v in q]) if q.dtype == object else q.astype(np.float64)
    q_exact = None
    if exact:
        q_exact = q if q.dtype == object else np.array([Fraction(float(v)) for v in q],
                                                       dtype=object)
    configs = None
    if draft_sampling == "without-replacement":
        count = count_configurations(int((q_float > 0).sum()), paths, draft_sampling)
        if count > max_configurations:
            raise ValueError(f"selection master without replacement enumerates {count:,} "
                             f"configurations (limit {max_configurations:,}); use iid drafting")
        configs = multiset_configurations(model, paths, draft_sampling)
    return SelectionStructure(model, paths, draft_sampling,
                              all_paths(model.vocab_size, model.depth), q_float, q_exact,
                              configs, exact)


def selection_law(st: SelectionStructure, priority: np.ndarray, exact: bool = False) -> np.ndarray:
    """[P] law of the selected path when the highest-priority drafted path is selected.

    priority [P]: a permutation; priority[0] is the best path. iid: r(x) = (q(x) +
    Q_below(x))^K - Q_below(x)^K with Q_below(x) = q-mass of the paths ranked below x
    (the law of the best of K i.i.d. draws). Without replacement: summed over the
    enumerated configurations. Float64, or exact (object array) when exact=True.
    """
    priority = np.asarray(priority, dtype=np.int64)
    count = st.num_paths
    q = st.q_exact if exact else st.q_paths
    if st.draft_sampling == "iid":
        ranked = q[priority]  # best first
        if exact:
            below = np.empty(count, dtype=object)
            acc = Fraction(0)
            for i in range(count - 1, -1, -1):
                below[i] = acc
                acc += ranked[i]
        else:
            below = np.concatenate([np.cumsum(ranked[::-1])[::-1][1:], [0.0]])
        law_ranked = (ranked + below) ** st.paths - below ** st.paths
        law = np.empty(count, dtype=object if exact else np.float64)
        law[priority] = law_ranked
        return law
    rank = np.empty(count, dtype=np.int64)
    rank[priority] = np.arange(count)
    configs = st.configs
    chosen = configs.paths[np.arange(len(configs)), rank[configs.paths].argmin(axis=1)]
    if not exact:
        weight = configs.weight
        weight = (np.array([float(v) for v in weight]) if weight.dtype == object else weight)
        return np.bincount(chosen, weights=weight, minlength=count)
    law = np.empty(count, dtype=object)
    law[:] = [Fraction(0)] * count
    weight = configs.weight if configs.weight.dtype == object else np.array(
        [Fraction(float(v)) for v in configs.weight], dtype=object)
    np.add.at(law, chosen, weight)
    return law


def selection_lp(st: SelectionStructure, priorities: list[np.ndarray],
                 exact: bool = False) -> LinearProgram:
    """Selection master of the K-path full LP (column generation; same optimum).

    A selection rule "select the highest-priority drafted path" (priority: a permutation
    of the P paths) induces a law r_k on paths (selection_law); the selected path is then
    verified by a single-path rule. Variables: rho(x, d, y) >= 0 for every path x, depth d
    in 0..L and token y (column (x (L+1) + d) V + y; output node x[:d], token y,
    objective d + 1), then A(z) for z = 1..N-1, then lambda_k >= 0 per priority.
    Rows: P path rows sum_{d,y} rho(x, d, y) - sum_k lambda_k r_k(x) = 0; then the
    matching rows (u, t) of the full LP (all N V of them) with C(u, t) = sum of
    rho(x, |u|, t) over the paths x extending u. The convexity row sum_k lambda_k = 1 is
    implied (all rows together) and dropped; it is kept in meta["dropped_eq"].

    Why it is the full LP: dual feasibility for rho makes theta(x) >= H(x) = max over
    prefixes n of x and tokens y of (|n| + 1) - v(n, y), and pricing the priorities gives
    max_k r_k . theta = E[max_k theta(X_k)] (the greedy vertex selects the best drafted
    path), so y_c = max_k theta(x_k) is a feasible dual of the full LP with the same
    objective; conversely pi(c, n, y) = sum_k lambda_k w(c) [sel_k(c) = x] rho(x, |n|, y) /
    r(x), r = sum_k lambda_k r_k, is feasible for the full LP with the same objective.
    """
    model = st.model
    vocab, depth = model.vocab_size, model.depth
    count = st.num_paths
    n_nodes = num_nodes(vocab, depth)
    n_rho = count * (depth + 1) * vocab
    n_a = n_nodes - 1
    n_pol = len(priorities)
    n_vars = n_rho + n_a + n_pol
    table = ValueTable(exact)
    zero = model.target[0, 0] * 0
    depth_refs = table.add(np.array([zero + d + 1 for d in range(depth + 1)], dtype=object)
                           if model.exact else np.arange(1, depth + 2, dtype=np.float64))
    neg_target_refs = table.add(-model.target.reshape(-1))
    root_refs = table.add(model.target[0])
    laws = [selection_law(st, pr, exact) for pr in priorities]
    law_refs = [table.add(-law) for law in laws]
    # rho columns
    path_nodes = prefix_node_indices(st.path_tokens, vocab)  # [P, L+1]
    x_idx, d_idx, y_idx = np.meshgrid(np.arange(count), np.arange(depth + 1), np.arange(vocab),
                                      indexing="ij")
    x_idx, d_idx, y_idx = x_idx.reshape(-1), d_idx.reshape(-1), y_idx.reshape(-1)
    rho_cols = np.arange(n_rho, dtype=np.int64)
    objective_refs = np.full(n_vars, table.zero, dtype=np.int64)
    objective_refs[:n_rho] = depth_refs[d_idx]
    match0 = count  # first matching row
    rows = [x_idx, match0 + path_nodes[x_idx, d_idx] * vocab + y_idx]
    cols = [rho_cols, rho_cols]
    refs = [np.full(n_rho, table.one, dtype=np.int64)] * 2
    parents, last = node_parents(vocab, depth)
    a_nodes = np.arange(1, n_nodes, dtype=np.int64)
    a_cols = n_rho + a_nodes - 1
    p_rows = model.target[a_nodes]
    nonzero_p = (np.array([[x != 0 for x in r] for r in p_rows], dtype=bool).reshape(p_rows.shape)
                 if model.exact else p_rows != 0)
    zi, zt = np.nonzero(nonzero_p)
    rows += [match0 + parents[a_nodes] * vocab + last[a_nodes], match0 + a_nodes[zi] * vocab + zt]
    cols += [a_cols, a_cols[zi]]
    refs += [np.full(n_a, table.one, dtype=np.int64), neg_target_refs[a_nodes[zi] * vocab + zt]]
    for k, law in enumerate(laws):
        nz = np.nonzero(np.array([v != 0 for v in law]) if exact else law != 0)[0]
        rows.append(nz)
        cols.append(np.full(len(nz), n_rho + n_a + k, dtype=np.int64))
        refs.append(law_refs[k][nz])
    rows_all, cols_all, refs_all = np.concatenate(rows), np.concatenate(cols), np.concatenate(refs)
    rhs = np.full(count + n_nodes * vocab, table.zero, dtype=np.int64)
    rhs[match0: match0 + vocab] = root_refs
    order = np.lexsort((cols_all, rows_all))
    eq = Block(rows_all[order], cols_all[order], refs_all[order], rhs)
    dropped = Block(np.zeros(n_pol, dtype=np.int64), n_rho + n_a + np.arange(n_pol),
                    np.full(n_pol, table.one, dtype=np.int64),
                    np.array([table.one], dtype=np.int64))
    values, exact_values = table.tables()
    path_label = lambda x: str(tuple(int(t) for t in st.path_tokens[x]))  # noqa: E731

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_rho:
            x, rest = divmod(j, (depth + 1) * vocab)
            d, y = divmod(rest, vocab)
            return f"rho[x={path_label(x)}, d={d}, y={y}]"
        if j < n_rho + n_a:
            return f"A[{_label_node(j - n_rho + 1, vocab)}]"
        return f"lambda[{j - n_rho - n_a}]"

    lp = LinearProgram(
        name=f"selection-master-V{vocab}-L{depth}-K{st.paths}-{st.draft_sampling}-{n_pol}",
        num_vars=n_vars, objective_refs=objective_refs, constant_ref=table.zero, eq=eq,
        ub=Block.empty(), table=values, exact_table=exact_values,
        variable_label=variable_label,
        eq_label=lambda i: (f"path[{path_label(int(i))}]" if i < count
                            else _match_label(int(i) - count, vocab)),
    )
    lp.notes.append("convexity row sum lambda = 1 dropped (implied by the other rows); kept in "
                    "meta['dropped_eq'] and checked by the certificate")
    lp.meta.update({"kind": "selection-master", "priorities": list(priorities),
                    "dropped_eq": dropped, "num_rho": n_rho, "num_a": n_a, "num_paths": count,
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
