"""Structure-aware exact laws on i.i.d. drafts (docs/theory.md sections 12.2, 12.3).

With K i.i.d. draft paths the drafted prefix tree is a multinomial branching process:
given that m paths pass through node u, their next tokens are m i.i.d. draws from q(.|u),
and given those, the n_c paths through child c are n_c i.i.d. paths below c, independent
across children. Two kinds of verifiers use it; both CALL the verifier's own code (the
node rule of a walk, or the selection law of a select-then-BV verifier), so the exact law
is the law of the very code that runs on real models, never a second copy.

Node-local verifiers (VerifierSpec.node_rule; specinfer, rrsw, naive_tree, nss, khisti,
spectr in verifiers.multipath). Their walk (multipath.walk_tree) moves from a node to a
drafted child or stops, and what it does at a node depends only on the node's rows and the
ordered children of the paths through it. So the law of the walk is a Markov chain on
(node u, number m of paths through u):
    mass(root, K) = 1;
    for each ordered child tuple x in V^m with q(x|u) = prod_i q(x_i|u) > 0, the node rule
    on (rows of u, children x, every path through u) gives accept_j (move down through
    path j's child) and the correction row c of a stop:
        emit[u, .]            += mass(u, m) q(x|u) (1 - sum_j accept_j) c
        mass(u x_j, #x_j in x) += mass(u, m) q(x|u) accept_j
    at depth L: emit[u, .] += sum_m mass(u, m) p(.|u) (the bonus token).
Exact because, given the walk reached u with m paths, the suffixes of those paths below u
are i.i.d. q-paths in their original order (the decision to reach u read only tokens at
u's ancestors and coins), which is exactly how the tuple x is weighted. Cost: about
sum_u sum_{m <= K} V^m rule evaluations (e.g. 3.4e5 at V = 8, L = 3, K = 4) instead of
V^(K L) ordered K-tuples (6.9e10).

Select-then-BV verifiers (VerifierSpec.selection_rows; gbv, gbv_clipped, nodeopt): the
output given the draft configuration is BV's law on the selected path y* with the skewed
rows r along y*, and r(.|u) is the conditional law of the next selected token given that
the selected prefix is u. Hence the exact law is BV's law with r in place of q:
    emit = sum over the V^L paths y of r(y) * BV's law on y against r,
O(V^L L V) once r is known. selection_rows(model, paths) gives r at every node; the
adapter path_selection_rows builds it from the verifier's own selection function applied
to trees whose K paths all equal one path y (the skewed rows along y depend only on y).

Verifiers with their own recursion (VerifierSpec.exact_law): traversal (sibling_recursion
below: the (node, m, entry weight) recursion of a post-order walk whose parent state after
a deleted child depends only on the child) and spectr_gbv (spectr_gbv.first_visit_law:
every node is tested at most once, at its first visit; multinomial generating functions per
subtree and the order of first visits at the stop's depth). Each
docstring says why it is exact; both call the rule's own steps.

Everything else (single-path verifiers at K = 1, the deliberately broken variants, drafts
without replacement) keeps the enumeration of verifiers.exact.

Every evaluation here runs in float64 on float models, on numpy arrays (ops.host_rows: the
laws' ops have a numpy branch, so `speclp gap` never imports torch; within
ops.torch_float64() on CPU torch tensors, the engine's arrays, which the tests compare with),
and in exact rationals (numpy object arrays through verifiers.ops) on exact models;
tests/test_structure.py checks it against the enumeration exactly, in rationals, for every
registered verifier, and the numpy floats against the torch ones.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ops
from .law import DraftTree, VerifierSpec
from .single_path import bv_path_law
from .tree import TreeModel, all_paths, depth_offset, num_nodes, prefix_node_indices

__all__ = ["StructuredLaw", "evaluation_kind", "path_selection_rows", "rule_evaluations",
           "structured_law"]

CHUNK = 1 << 15  # rule evaluations (node, child tuple) per batched call


@dataclass
class StructuredLaw:
    """emit [N, V] P(output node = u, Y = t) and how it was obtained.

    kind: "node recursion", "selection law" or the kind of a verifier's own exact_law hook
    ("sibling recursion", "first-visit recursion"); evaluations: node-rule evaluations (node
    recursion) or paths evaluated by BV (selection law)."""

    emit: np.ndarray
    kind: str
    evaluations: int
    # (nodes at which the rule stops with an all-zero correction row, the probability of
    # stopping there) for a rule registered may_be_undefined; the law's mass is 1 - that
    undefined: tuple[int, Any] = (0, 0)


def evaluation_kind(spec: VerifierSpec, paths: int, draft_sampling: str = "iid") -> str | None:
    """"node recursion", "selection law" or None (enumerate) for a verifier and draft law."""
    if draft_sampling != "iid" or not spec.multipath:
        return None
    if spec.node_rule is not None:
        return "node recursion"
    if spec.exact_law is not None:
        return getattr(spec.exact_law, "kind", "recursion")
    if spec.selection_rows is not None:
        return "selection law"
    return None


def rule_evaluations(vocab: int, depth: int, paths: int) -> int:
    """Upper bound on the node-rule evaluations of the node recursion: every node of depth
    < L with every m <= K, V^m tuples each (zero-probability ones are skipped)."""
    per_node = sum(vocab**m for m in range(1, paths + 1))
    return num_nodes(vocab, depth - 1) * per_node if depth >= 1 else 0


def structured_law(model: TreeModel, spec: VerifierSpec, paths: int,
                   draft_sampling: str = "iid") -> StructuredLaw | None:
    """The exact node-aggregated law by structure (module docstring), or None when the
    verifier admits none (then enumerate)."""
    kind = evaluation_kind(spec, paths, draft_sampling)
    if kind == "node recursion":
        return _node_recursion(model, spec, paths)
    if kind == "selection law":
        rows = spec.selection_rows(model, paths, **spec.options)
        emit, count = bv_against(model, rows)
        return StructuredLaw(emit, kind, count)
    if spec.exact_law is not None and kind is not None:
        emit, count, *undefined = spec.exact_law(model, paths)
        return StructuredLaw(emit, kind, count, *undefined)
    return None


# ---------------------------------------------------------------------------
# number systems
# ---------------------------------------------------------------------------

def _zero(model: TreeModel) -> Any:
    return model.target[0, 0] * 0


def _zeros(model: TreeModel, shape: tuple[int, ...]) -> np.ndarray:
    if model.exact:
        out = np.empty(shape, dtype=object)
        out[...] = _zero(model)
        return out
    return np.zeros(shape)


def _rows(model: TreeModel, rows: np.ndarray) -> Any:
    """Rows as the law functions take them: exact rows as they are; float rows as numpy
    float64 (ops.host_rows: no torch; CPU torch float64 within ops.torch_float64())."""
    if model.exact:
        return rows
    return ops.host_rows(rows)


def _index(model: TreeModel, values: np.ndarray) -> Any:
    """Token ids and masks beside _rows (ops.host_index)."""
    return values if model.exact else ops.host_index(values)


def _numpy(values: Any) -> np.ndarray:
    return ops.as_float64(values) if ops.is_torch(values) else np.asarray(values)


# ---------------------------------------------------------------------------
# node-local verifiers: the (node, m) recursion
# ---------------------------------------------------------------------------

def _tuples(vocab: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tuples [T, m] every ordered child tuple, first [T, m] bool (x_j appears first at j),
    count [T, m] number of entries equal to x_j)."""
    tuples = all_paths(vocab, size)
    equal = tuples[:, :, None] == tuples[:, None, :]  # [T, m, m]
    earlier = np.tril(np.ones((size, size), dtype=bool), -1)  # [j, i]: i < j
    first = ~(equal & earlier[None]).any(-1)
    return tuples, first, equal.sum(-1)


def _node_recursion(model: TreeModel, spec: VerifierSpec, paths: int) -> StructuredLaw:
    vocab, depth = model.vocab_size, model.depth
    rule: Callable[..., Any] = spec.node_rule
    emit = _zeros(model, (num_nodes(vocab, depth), vocab))
    mass = _zeros(model, (num_nodes(vocab, depth), paths + 1))  # P(walk at u, m paths)
    mass[0, paths] = mass[0, paths] + 1
    evaluations = 0
    for d in range(depth):
        start, width = depth_offset(vocab, d), vocab**d
        for m in range(1, paths + 1):
            tuples, first, count = _tuples(vocab, m)
            reach = mass[start:start + width, m]
            active = np.nonzero(reach != 0)[0]
            if len(active) == 0:
                continue
            nodes = start + active  # [A]
            # q(x|u) for every (active node, tuple): [A, T]
            q = model.draft[nodes][:, tuples]  # [A, T, m]
            prob = q[..., 0]
            for i in range(1, m):
                prob = prob * q[..., i]
            weight = reach[active][:, None] * prob  # [A, T]
            slot_node, slot_tuple = np.nonzero(weight != 0)
            for lo in range(0, len(slot_node), CHUNK):
                part = slice(lo, lo + CHUNK)
                evaluations += _rule_step(model, rule, nodes[slot_node[part]],
                                          tuples[slot_tuple[part]], first[slot_tuple[part]],
                                          count[slot_tuple[part]],
                                          weight[slot_node[part], slot_tuple[part]], d, emit,
                                          mass)
    leaves = slice(depth_offset(vocab, depth), num_nodes(vocab, depth))
    emit[leaves] = emit[leaves] + mass[leaves].sum(axis=1)[:, None] * model.target[leaves]
    return StructuredLaw(emit, "node recursion", evaluations)


def _rule_step(model: TreeModel, rule: Callable[..., Any], nodes: np.ndarray,
               children: np.ndarray, first: np.ndarray, count: np.ndarray, weight: np.ndarray,
               depth: int, emit: np.ndarray, mass: np.ndarray) -> int:
    """One batch of rule evaluations: B = len(nodes) slots (node u, child tuple x [B, m]),
    weight [B] = mass(u, m) q(x|u). Adds the stop mass to emit and the moves to mass."""
    batch, m = children.shape
    vocab = model.vocab_size
    target = _rows(model, model.target[nodes])[:, None]  # [B, 1, V]: one slot per node
    draft = _rows(model, model.draft[nodes])[:, None]
    through = _index(model, np.ones((batch, 1, m), dtype=bool))
    tokens, first_mask = _index(model, children), _index(model, first)
    accept, correction = rule(target, draft, through, tokens, first_mask)
    accept = _numpy(accept)[:, 0]  # [B, m]
    correction = _numpy(correction)[:, 0]  # [B, V]
    stop = 1 - accept.sum(axis=1)  # [B]
    np.add.at(emit, nodes, (weight * stop)[:, None] * correction)
    code = nodes - depth_offset(vocab, depth)
    child = depth_offset(vocab, depth + 1) + code[:, None] * vocab + children  # [B, m]
    np.add.at(mass, (child.reshape(-1), count.reshape(-1)), (weight[:, None] * accept).reshape(-1))
    return batch


# ---------------------------------------------------------------------------
# select-then-BV verifiers: BV against the selection law
# ---------------------------------------------------------------------------

def bv_against(model: TreeModel, rows: np.ndarray) -> tuple[np.ndarray, int]:
    """(emit [N, V], paths evaluated): BV's exact law when the drafted path has the law
    given by the rows r [N, V] (r(.|u) at every node, shortlex; depth-L rows unused)."""
    vocab, depth = model.vocab_size, model.depth
    tokens = all_paths(vocab, depth)  # [P, L]
    nodes = prefix_node_indices(tokens, vocab)  # [P, L+1]
    rows = np.asarray(rows)
    path_prob = rows[nodes[:, 0], tokens[:, 0]]
    for i in range(1, depth):
        path_prob = path_prob * rows[nodes[:, i], tokens[:, i]]
    keep = np.nonzero(path_prob != 0)[0]
    tokens, nodes, path_prob = tokens[keep], nodes[keep], path_prob[keep]
    target = _rows(model, model.target[nodes])  # [P', L+1, V]
    skewed = _rows(model, rows[nodes[:, :-1]])  # [P', L, V]
    stop, correction = bv_path_law(_index(model, tokens), target, skewed)
    joint = _numpy(stop)[..., None] * _numpy(correction)  # [P', L+1, V]
    emit = _zeros(model, (num_nodes(vocab, depth), vocab))
    np.add.at(emit, nodes.reshape(-1), (path_prob[:, None, None] * joint).reshape(-1, vocab))
    return emit, len(keep)


def path_selection_rows(selection: Callable[[DraftTree], Any]
                        ) -> Callable[..., np.ndarray]:
    """A selection_rows hook from a verifier's own selection function.

    selection(tree) -> [B, L, V] the skewed rows along the selected path. The hook builds,
    for every path y of the complete tree, the tree whose K paths all equal y (so y is
    selected), reads the skewed rows along y, and writes r(.|u) at every node u of depth
    < L (all paths through u give the same rows: they depend only on the prefix). Only
    paths with q(y) > 0 are built (no other path is ever drafted); nodes off them and the
    depth-L rows stay 0."""

    def rows(model: TreeModel, paths: int, **options: Any) -> np.ndarray:
        vocab, depth = model.vocab_size, model.depth
        tokens = all_paths(vocab, depth)  # [P, L]
        # only paths the draft can draw (q(y) > 0) can be selected; nodes off them keep
        # zero rows (their r-probability is 0: r(x|u) = 0 wherever q(x|u) = 0)
        tokens = tokens[np.nonzero(model.draft_path_probabilities() != 0)[0]]
        nodes = prefix_node_indices(tokens, vocab)  # [P, L+1]
        drafted = np.repeat(tokens[:, None, :], paths, axis=1)  # [P, K, L]
        all_nodes = np.repeat(nodes[:, None, :], paths, axis=1)
        target = _rows(model, model.target[all_nodes])
        draft = _rows(model, model.draft[all_nodes[..., :-1]])
        skewed = _numpy(selection(DraftTree(_index(model, drafted), target, draft),
                                  **options))  # [P, L, V]
        out = _zeros(model, (num_nodes(vocab, depth), vocab))
        if not model.exact:
            out = out.astype(np.float64)
        for i in range(depth):
            out[nodes[:, i]] = skewed[:, i]
        return out

    return rows


# ---------------------------------------------------------------------------
# sibling-dependent verifiers (traversal): the (node, m, entry weight) recursion
# ---------------------------------------------------------------------------

@functools.cache
def _sibling_groups(vocab: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ordered child tuples x in V^m grouped by what a post-order walk sees of them:
    (sequence [G, m] the distinct children in order of first appearance, padded with 0,
    counts [G, m] the number of paths through each (0 = padding), multiplicity [G] the
    number of ordered tuples in the group; all of them have q(x|u) = prod_i q(c_i|u)^n_i)."""
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for tup in itertools.product(range(vocab), repeat=size):
        order = tuple(dict.fromkeys(tup))
        key = (order, tuple(tup.count(c) for c in order))
        groups[key] = groups.get(key, 0) + 1
    sequence = np.zeros((len(groups), size), dtype=np.int64)
    counts = np.zeros((len(groups), size), dtype=np.int64)
    for g, (order, count) in enumerate(groups):
        sequence[g, :len(order)] = order
        counts[g, :len(count)] = count
    return sequence, counts, np.array(list(groups.values()), dtype=np.int64)


def sibling_evaluations_bound(vocab: int, depth: int, paths: int) -> int:
    """Upper bound on the (key, child group) pairs of sibling_recursion, counting keys
    without merging equal entry weights. A key with m paths meets every group (the distinct
    children c_1..c_r in order of first appearance, V!/(V-r)! of them, with counts a
    composition of m into r parts, C(m-1, r-1) of them). The child keys it makes are at most
    the distinct (c_1..c_j deleted before, child c, its n paths): the entry weight of c is a
    function of the parent's key and c_1..c_j only (the state after deleting them), whatever
    follows c or how many paths the deleted siblings had; j + n <= m, so
    V!/(V-j-1)! such keys with n paths for each j <= m - n."""
    keys = {paths: 1}
    pairs = 0
    for _ in range(depth):
        nxt: dict[int, int] = {}
        for m, count in keys.items():
            pairs += count * sum(math.perm(vocab, r) * math.comb(m - 1, r - 1)
                                 for r in range(1, m + 1))
            for n in range(1, m + 1):
                nxt[n] = nxt.get(n, 0) + count * sum(math.perm(vocab, j + 1)
                                                     for j in range(m - n + 1))
        keys = nxt
    return pairs


@dataclass
class _Level:
    """The keys (node, m paths through it, entry weight w) of one depth."""

    index: dict[tuple[int, int, Any], int]
    node: list[int]
    paths: list[int]
    weight: list[Any]

    def key(self, node: int, paths: int, weight: Any) -> int:
        k = (node, paths, weight)
        found = self.index.get(k)
        if found is None:
            found = self.index[k] = len(self.node)
            self.node.append(node)
            self.paths.append(paths)
            self.weight.append(weight)
        return found


def _distinct_pairs(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first [D], inverse [P]): the distinct (int key, float value) pairs, as the index of
    one row of each and every row's pair id (equal floats by ==, as dict keys merge them).
    One lexsort instead of np.unique(axis=0), which sorts structured rows far slower."""
    order = np.lexsort((value, key))
    k, v = key[order], value[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (v[1:] != v[:-1])
    ids = np.cumsum(new) - 1
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = ids
    return order[new], inverse


def sibling_recursion(model: TreeModel, paths: int, child_weight: Callable[..., Any],
                      delete: Callable[..., Any]) -> tuple[np.ndarray, int]:
    """(emit [N, V], pairs evaluated): the exact law on i.i.d. drafts of a post-order walk
    whose subtrees are entered with a weight from the parent's CURRENT state (traversal).

    The rule's own steps are passed in: child_weight(w [P], p_c [P], q_c [P]) -> [P], the
    weight of a child entered from a parent of weight w and current rows p, q; delete(w,
    p [P, V], q [P, V], onehot [P, V]) -> (w, p, q), the parent after a rejected child.

    Why this is exact. Given m i.i.d. paths through u, their children x ~ q(.|u)^m and, given
    x, the paths through the distinct children c_1..c_r (order of first appearance) are
    n_i i.i.d. q-paths below c_i, independent across children. The walk tests c_1's whole
    subtree, then c_2's, ..., then u. Entering c_i's subtree sets its weight from u's state
    after deleting c_1..c_{i-1}, and that state is a deterministic function of (u's entry
    weight, the sequence c_1..c_{i-1}): deleting c_j depends only on that c_j's subtree was
    rejected entirely, not on what was tested inside it. So a subtree's behaviour depends on
    its past only through (node, paths through it, entry weight w); with
        R(u, m, w) = P(u's subtree rejects every node | entered with weight w)
                   = sum_x q(x|u) prod_i R(c_i, n_i, w_i(x)) (1 - w_final(x))   (leaves: 1 - w)
    (independence across children makes the expectation of the product the product of
    expectations), the mass entering c_i is mass(u, m, w) q(x|u) prod_{j<i} R(c_j, n_j, w_j),
    and u emits that times prod_j R_j w_final(x) with u's current row. Keys with equal
    (node, m, w) are merged (exact values in rationals, bitwise floats in float64: merging
    is only a saving). Three passes: keys and states top-down, R bottom-up, mass top-down.
    The parent's state after deleting c_1..c_i is computed once per distinct (key, c_1..c_i)
    and shared by every child group that starts with those siblings (the same function of
    the same arguments: equal values, fewer [., V] rows), and u's final row is emitted once
    per final state with the summed mass of its groups (a sum of equal rows times masses).
    """
    vocab, depth = model.vocab_size, model.depth
    target = model.target if model.exact else np.asarray(model.target, dtype=np.float64)
    draft = model.draft if model.exact else np.asarray(model.draft, dtype=np.float64)
    one = target[0, 0] * 0 + 1
    kind = object if model.exact else np.float64
    levels = [_Level({}, [], [], [])]
    levels[0].key(0, paths, one)
    blocks: list[list[tuple[np.ndarray, ...]]] = []
    evaluations = 0
    for d in range(depth):
        level, nxt = levels[d], _Level({}, [], [], [])
        levels.append(nxt)
        blocks.append([])
        counts_of = np.asarray(level.paths)
        for m in range(1, paths + 1):
            ids = np.nonzero(counts_of == m)[0]
            if len(ids) == 0:
                continue
            sequence, counts, multiplicity = _sibling_groups(vocab, m)
            nodes = np.asarray(level.node)[ids]
            q = draft[nodes]  # [A, V]
            prob = multiplicity[None, :] * one
            for i in range(m):
                prob = prob * np.power(q[:, sequence[:, i]], counts[:, i][None, :])
            a_idx, g_idx = np.nonzero(prob != 0)
            evaluations += len(a_idx)
            node = nodes[a_idx]
            code = node - depth_offset(vocab, d)
            child = np.full((len(a_idx), m), -1, dtype=np.int64)
            # the parent's state after deleting its first i children is a function of (key,
            # the i deleted tokens): one state per distinct such prefix, `state` [pair]
            # indexing it (the pairs sharing a prefix share the deletions)
            keys, state = np.unique(a_idx, return_inverse=True)
            state = state.reshape(-1)
            weight = np.array([level.weight[k] for k in ids[keys]], dtype=kind)
            p_rows, q_rows = target[nodes[keys]], draft[nodes[keys]]
            owner = nodes[keys]  # the node of every state
            for i in range(m):
                active = counts[g_idx, i] > 0
                token = sequence[g_idx, i]
                entry = child_weight(weight[state], p_rows[state, token], q_rows[state, token])
                child_node = depth_offset(vocab, d + 1) + code * vocab + token
                size = counts[g_idx, i]
                live = np.nonzero(active)[0]
                if model.exact:
                    entry_list = entry.tolist()
                    for r in live.tolist():
                        child[r, i] = nxt.key(int(child_node[r]), int(size[r]), entry_list[r])
                elif len(live):  # float64: merge equal (node, m, w) rows first, vectorised
                    pair = child_node[live] * (paths + 1) + size[live]
                    entry_live = np.asarray(entry, dtype=np.float64)[live]
                    first, inverse = _distinct_pairs(pair, entry_live)
                    found = np.array([nxt.key(int(n), int(c), float(w)) for n, c, w in
                                      zip((pair[first] // (paths + 1)).tolist(),
                                          (pair[first] % (paths + 1)).tolist(),
                                          entry_live[first].tolist(), strict=True)],
                                     dtype=np.int64)
                    child[live, i] = found[inverse]
                if not active.any():
                    break
                # the next prefixes: (state, token) for an active child, the state itself
                # (code vocab) for a pair whose children are all walked
                after, state = np.unique(state * (vocab + 1) + np.where(active, token, vocab),
                                         return_inverse=True)
                state = state.reshape(-1)
                before, deleted = after // (vocab + 1), after % (vocab + 1)
                w_new, p_new, q_new = delete(weight[before], p_rows[before], q_rows[before],
                                             deleted[:, None] == np.arange(vocab)[None, :])
                kept = deleted == vocab
                owner = owner[before]
                weight = np.where(kept, weight[before], w_new)
                p_rows = np.where(kept[:, None], p_rows[before], p_new)
                q_rows = np.where(kept[:, None], q_rows[before], q_new)
            # the parent's final state: accepted w.p. its weight (the root w.p. 1), row p
            accept = weight if d > 0 else weight * 0 + one
            blocks[d].append((ids[a_idx], prob[a_idx, g_idx], child, accept[state], state,
                              p_rows, owner))
    # R bottom-up
    leaves = levels[depth]
    reject = [None] * (depth + 1)
    reject[depth] = one - np.array(leaves.weight, dtype=object if model.exact else np.float64)
    for d in range(depth - 1, -1, -1):
        out = _zeros(model, (len(levels[d].node),))
        for key, prob, child, accept, *_ in blocks[d]:
            term = prob * (one - accept)
            for i in range(child.shape[1]):
                term = term * np.where(child[:, i] >= 0, reject[d + 1][child[:, i]], one)
            np.add.at(out, key, term)
        reject[d] = out
    # mass top-down, emit
    emit = _zeros(model, (num_nodes(vocab, depth), vocab))
    mass = _zeros(model, (1,))
    mass[0] = mass[0] + one
    for d in range(depth):
        nxt_mass = _zeros(model, (len(levels[d + 1].node),))
        for key, prob, child, accept, state, p_rows, owner in blocks[d]:
            reach = mass[key] * prob
            for i in range(child.shape[1]):
                active = child[:, i] >= 0
                np.add.at(nxt_mass, child[active, i], reach[active])
                reach = reach * np.where(active, reject[d + 1][child[:, i]], one)
            stopped = _zeros(model, (len(p_rows),))  # per final state: its row is emitted
            np.add.at(stopped, state, reach * accept)
            np.add.at(emit, owner, stopped[:, None] * p_rows)
        mass = nxt_mass
    leaf_nodes = np.asarray(leaves.node, dtype=np.int64)
    leaf_weight = np.array(leaves.weight, dtype=object if model.exact else np.float64)
    np.add.at(emit, leaf_nodes, (mass * leaf_weight)[:, None] * target[leaf_nodes])
    return emit, evaluations
