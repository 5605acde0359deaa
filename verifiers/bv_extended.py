"""Extended block verification: BV on path 1 with a multi-draft fallback (docs/theory.md section 19).

The rule ("bv_extended", issue 31). Run BV on path 0 from the root. If it accepts all L
tokens, emit its block. Otherwise BV ends at node v (depth i < L) and would draw its
correction Y from its residual res = (w_i p(.|v) - q(.|v))_+ / Z_i. Draw that Y instead by a
lossless multi-draft step with target res and draft q(.|v) over the children at v of the
OTHER available paths through v (the fallback rule: the single-step optimum "optimal" in
"bv_extended", recursive rejection "specinfer" in "bv_extended_rrs", or any registered node
rule). If Y is the child c of such a path, continue below vc with
the available paths through vc: BV afresh (weights reset to 1 at vc) on the lowest of them,
and the same fallback where it ends, recursively; else end the block with Y.

Available paths. A fresh start at node u with BV path j uses the paths k >= j through u
(every BV path used above u has a lower index: each fresh start takes the lowest available
path through a descendant of the previous start). So a fresh start is the slot (j, s) =
path j's depth-s node, and its fallback at depth i uses the paths k > j through path j's
depth-i node; moving through path k's child gives the fresh start (j', i + 1) with
j' = the lowest k' > j through that child.

Guarantees (docs/theory.md section 19): lossless for i.i.d. drafts (Theorem 19.1) and,
run by run, its block contains BV's block on path 0, so its block efficiency is never below
BV's (Theorem 19.2) -- for every fallback rule.

Two exact laws, one rule:
- extended_bv_law (registered): the law on a given drafted tree, batched (torch, any
  dtype, or rational numpy object arrays), what the engine, the audit and the enumeration
  call. Loops over L and K only; no host synchronisation.
- extended_bv_structured (the i.i.d. structure, THEORY.md section 4b): a recursion over fresh
  starts (node u, m available paths through u): BV on every path below u with its own rows,
  and below each fallback node v the number of other paths through v is Binomial(m - 1,
  q(v|u)) with i.i.d. q(.|v) children, on which the same node rule is called. Exact in
  rationals, float64 otherwise; tests/test_bv_extended.py checks it against the enumeration
  and an independent tree walk.

Shapes: tokens [B, K, L], target rows [B, K, L+1, V], draft rows [B, K, L, V];
law.stop [B, K, L+1], law.correction [B, K, L+1, V].
"""

from __future__ import annotations

from math import comb
from typing import Any

import numpy as np

from . import ops
from .law import REGISTRY, BlockLaw, DraftTree, register
from .multipath import shared_prefix
from .single_path import bv_path_law, residual_rows
from .single_step import nested_partitions_for, ratio_cells
from .tree import TreeModel, all_paths, depth_offset, num_nodes

Array = Any

__all__ = ["extended_bv_law", "extended_bv_structured", "fallback_rule"]

DEFAULT_FALLBACK = "optimal"  # the best step measured (docs/theory.md section 19.6)
DEFAULT_SUPPORT = 64  # ratio cells of the optimal step above this vocabulary (as nodeopt)


def optimal_step_rule(target: Array, draft: Array, through: Array, children: Array,
                      first: Array, support: int | None = DEFAULT_SUPPORT) -> tuple[Array, Array]:
    """A node rule (verifiers.multipath.NodeRule) attaining the single-step (L = 1) optimum
    for the n i.i.d. draws marked in through (docs/theory.md sections 8.2, 8.5, 19.5): select a
    draw by the nested-partition rule for n draws (its returned token has the law r_n), then
    token-level speculative sampling of the selected child against r_n: accept it w.p.
    min(1, a(c)/r_n(c)), else Y ~ (a - r_n)_+ normalised. Lossless for any target a:
    P(Y = y) = min(a, r_n)(y) + (a - r_n)_+(y) = a(y); acceptance sum min(a, r_n) = the L = 1
    optimum min_H [a(H) + 1 - q(H)^n] (Section 8.5). Shapes as NodeRule: target, draft
    [B, K0, V], through [B, K0, J], children [B, J]; `first` is not needed (a token drafted by
    several paths is selected through any of them)."""
    batch, slots, vocab = target.shape
    paths = children.shape[1]
    rows = batch * slots
    flat_target, flat_draft = target.reshape(rows, vocab), draft.reshape(rows, vocab)
    present = through.reshape(rows, paths)
    count = ops.total(ops.where(present, 1, 0), -1)  # [R] draws at the node
    if ops.is_torch(children):
        drafted = children[:, None, :].expand(batch, slots, paths).reshape(rows, paths)
    else:
        drafted = np.broadcast_to(children[:, None, :], (batch, slots, paths)).reshape(rows, paths)
    cells = ratio_cells(flat_target, flat_draft, support)
    rules = nested_partitions_for(flat_target, flat_draft, list(range(1, paths + 1)),
                                  cells=cells)
    chosen = ops.zeros((rows, paths), like=flat_target)
    law = flat_draft * 0  # rows with no draw: law 0, so the residual row is the target
    for n, rule in enumerate(rules, 1):
        used = count == n  # rule n serves the rows with n draws (others are discarded)
        chosen = ops.where(used[:, None], rule.select(drafted, present, None), chosen)
        law = ops.where(used[:, None], rule.law(), law)
    p_c = ops.gather(flat_target, -1, drafted)  # [R, J]
    r_c = ops.gather(law, -1, drafted)
    accept = ops.where(present, chosen * ops.minimum(ops.safe_div(p_c, r_c), 1), 0)
    residual, _ = residual_rows(ops.ones((rows,), like=flat_target), flat_target, law)
    return accept.reshape(batch, slots, paths), residual.reshape(batch, slots, vocab)


def fallback_rule(name: str) -> Any:
    """The node rule of the fallback step: "optimal" (optimal_step_rule) or the node rule of
    the registered verifier `name` (verifiers.multipath.NodeRule)."""
    if name == "optimal":
        return optimal_step_rule
    spec = REGISTRY.get(name)
    if spec is None or spec.node_rule is None:
        known = sorted(n for n, s in REGISTRY.items() if s.node_rule is not None)
        raise ValueError(f"fallback must name a verifier with a node rule ({', '.join(known)}), "
                         f"got {name!r}")
    return spec.node_rule


def _last_to(a: Array, dim: int) -> Array:
    """Move the last axis of a to position dim (a view on torch, numpy)."""
    if ops.is_torch(a):
        return a.movedim(-1, dim)
    return np.moveaxis(a, -1, dim)


# node rules that, with no drafted child, accept nothing and return the target row itself
EMPTY_SAFE = {"optimal", "specinfer", "rrsw"}


def _step(rule: Any, residual: Array, draft: Array, through: Array, children: Array,
          first: Array, empty_safe: bool = False) -> tuple[Array, Array]:
    """One multi-draft step with target `residual` [S, V] and draft [S, V] over the children
    [S, J] of the paths marked in through [S, J] (first [S, J]: the path is the first of
    them with its child). Returns (accept [S, J], correction [S, V]). With no path, Y ~
    residual (some rules assume at least one path: unless empty_safe, those rows are
    overwritten)."""
    accept, correction = rule(residual[:, None], draft[:, None], through[:, None], children,
                              first)
    accept, correction = accept[:, 0], correction[:, 0]
    if not empty_safe:
        some = ops.total(ops.where(through, 1, 0), -1) > 0  # [S]
        accept = ops.where(some[:, None], accept, 0)
        correction = ops.where(some[:, None], correction, residual)
    return accept, correction


# ---------------------------------------------------------------------------
# the law on a drafted tree (batched)
# ---------------------------------------------------------------------------

@register("bv_extended", "BV on path 1; where it ends, its correction is drawn by the "
          "single-step-optimal rule over the other paths' children, continuing below a drafted "
          "child (never below BV, run by run)", multipath=True, draft_sampling=("iid",),
          fallback="optimal")
def extended_bv_law(tree: DraftTree, fallback: str = DEFAULT_FALLBACK) -> BlockLaw:
    """Exact law of extended BV on one drafted tree (module docstring)."""
    rule = fallback_rule(fallback)
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    same = shared_prefix(tokens)  # [B, K, K, L+1]
    index = ops.arange(paths, tokens)  # [K]
    fresh = ops.zeros((batch, paths, depth + 1), like=target)  # P(fresh start at slot (j, s))
    fresh[:, 0, 0] = target[:, 0, 0, 0] * 0 + 1  # exact 1 on rational rows
    stop = ops.zeros((batch, paths, depth + 1), like=target)
    joint = ops.zeros((batch, paths, depth + 1, vocab), like=target)  # P(node (j, i), Y)
    for s in range(depth):
        starts = [0] if s == 0 else list(range(1, paths))  # path 0 starts only at the root
        if not starts:
            break
        lo, hi = starts[0], starts[-1] + 1
        count = hi - lo
        path_stop, path_rows = bv_path_law(
            tokens[:, lo:hi, s:].reshape(batch * count, depth - s),
            target[:, lo:hi, s:].reshape(batch * count, depth - s + 1, vocab),
            draft[:, lo:hi, s:].reshape(batch * count, depth - s, vocab))
        mass = fresh[:, lo:hi, s, None] * path_stop.reshape(batch, count, depth - s + 1)
        path_rows = path_rows.reshape(batch, count, depth - s + 1, vocab)
        stop[:, lo:hi, depth] = stop[:, lo:hi, depth] + mass[:, :, -1]
        joint[:, lo:hi, depth] = joint[:, lo:hi, depth] + mass[:, :, -1, None] * target[:, lo:hi, depth]
        width = depth - s  # fallback depths i = s..L-1, handled together
        for j in range(lo, hi):
            f = mass[:, j - lo, :width]  # [B, I] P(fresh start (j, s), BV ends at depth i)
            residual = path_rows[:, j - lo, :width]  # [B, I, V]
            if j == paths - 1:  # no other path: Y ~ residual
                stop[:, j, s:depth] = stop[:, j, s:depth] + f
                joint[:, j, s:depth] = joint[:, j, s:depth] + f[..., None] * residual
                continue
            others = paths - 1 - j  # paths k = j+1..K-1
            # through [B, I, J]: path k > j passes through path j's depth-i node
            through = _last_to(same[:, j, j + 1:, s:depth], 1)
            # below [B, I, J(k), J(k')]: k' through the node and through k's child there
            below = _last_to(same[:, j + 1:, j + 1:, s + 1:depth + 1], 1) & through[:, :, None, :]
            earlier = index[j + 1:, None] > index[None, j + 1:]  # [J(k), J(k')]: k' < k
            first = through & (ops.total(ops.where(below & earlier, 1, 0), -1) == 0)
            children = _last_to(tokens[:, j + 1:, s:depth], 1)  # [B, I, J]
            flat = batch * width
            accept, correction = _step(rule, residual.reshape(flat, vocab),
                                       draft[:, j, s:depth].reshape(flat, vocab),
                                       through.reshape(flat, others),
                                       children.reshape(flat, others), first.reshape(flat, others),
                                       fallback in EMPTY_SAFE)
            accept = accept.reshape(batch, width, others)
            kept = f * (1 - ops.total(accept, -1))
            stop[:, j, s:depth] += kept
            joint[:, j, s:depth] += kept[..., None] * correction.reshape(batch, width, vocab)
            # through path k's child: the fresh start (j', i + 1), j' the lowest k' > j there
            lowest = ops.argmax(below, -1) + (j + 1)  # [B, I, J(k)]
            for k in range(others):
                moved = f * accept[..., k]  # [B, I]
                hit = lowest[..., k, None] == index  # [B, I, K]
                fresh[:, :, s + 1:] = fresh[:, :, s + 1:] + _last_to(
                    ops.where(hit, moved[..., None], 0), 1)
    # fresh starts at depth L: the bonus token
    stop[:, :, depth] = stop[:, :, depth] + fresh[:, :, depth]
    joint[:, :, depth] = joint[:, :, depth] + fresh[:, :, depth, None] * target[:, :, depth]
    return BlockLaw(stop, ops.safe_div(joint, stop[..., None]))


register("bv_extended_rrs", "BV on path 1; where it ends, its correction is drawn by recursive "
         "rejection (SpecInfer's step) over the other paths' children, continuing below a drafted "
         "child (never below BV, run by run; the cheaper step)", multipath=True,
         draft_sampling=("iid",), fallback="specinfer")(extended_bv_law)


# ---------------------------------------------------------------------------
# the exact law through the structure of i.i.d. drafting
# ---------------------------------------------------------------------------

def _as_rows(model: TreeModel, rows: np.ndarray) -> Any:
    return rows if model.exact else ops.host_rows(rows)  # numpy float64: no torch


def _as_numpy(values: Any) -> np.ndarray:
    return ops.as_float64(values) if ops.is_torch(values) else np.asarray(values)


def _zeros(model: TreeModel, shape: tuple[int, ...]) -> np.ndarray:
    if model.exact:
        out = np.empty(shape, dtype=object)
        out[...] = model.target[0, 0] * 0
        return out
    return np.zeros(shape)


def _ordered_tuples(vocab: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tuples [T, n], first [T, n] (x_j appears first at j), count [T, n] (#x_j in x))."""
    tuples = all_paths(vocab, size)
    equal = tuples[:, :, None] == tuples[:, None, :]
    earlier = np.tril(np.ones((size, size), dtype=bool), -1)
    return tuples, ~(equal & earlier[None]).any(-1), equal.sum(-1)


def _subtree_nodes(vocab: int, depth: int, node: int, node_depth: int) -> np.ndarray:
    """Indices (shortlex) of the nodes of the subtree below `node` (itself first), in the
    subtree's own shortlex order."""
    code = node - depth_offset(vocab, node_depth)
    return np.concatenate([depth_offset(vocab, node_depth + e) + code * vocab**e
                           + np.arange(vocab**e) for e in range(depth - node_depth + 1)])


def extended_bv_structured(model: TreeModel, paths: int, fallback: str = DEFAULT_FALLBACK,
                           below: Any = "extended") -> np.ndarray:
    """emit [N, V] P(output node = u, Y = t) of extended BV on K = paths i.i.d. paths, by the
    recursion over fresh starts (u, m) (module docstring; docs/theory.md section 19.4).

    below: what runs at a fresh start below the root: "extended" (this rule again, the
    registered verifier) or a function (submodel: TreeModel, m) -> emit giving the exact law
    of another verifier on the subtree's m paths (e.g. through verifiers.exact.exact_result,
    which this module cannot import: it lives above the laws; a design-space probe,
    docs/theory.md section 19.5)."""
    rule = fallback_rule(fallback)
    vocab, depth = model.vocab_size, model.depth
    nodes_total = num_nodes(vocab, depth)
    emit = _zeros(model, (nodes_total, vocab))
    fresh = _zeros(model, (nodes_total, paths + 1))  # P(fresh start at u with m paths)
    fresh[0, paths] = fresh[0, paths] + 1
    one = model.target[0, 0] * 0 + 1
    for d in range(depth + 1):
        start, width = depth_offset(vocab, d), vocab**d
        if d == depth:  # the bonus token at a leaf
            leaves = slice(start, start + width)
            emit[leaves] = emit[leaves] + fresh[leaves].sum(axis=1)[:, None] * model.target[leaves]
            break
        if d > 0 and below != "extended":
            for u, m in zip(*np.nonzero(fresh[start:start + width] != 0), strict=True):
                sub = _subtree_nodes(vocab, depth, start + u, d)
                submodel = TreeModel(model.target[sub], model.draft[sub], depth - d)
                law = below(submodel, int(m))
                emit[sub] = emit[sub] + fresh[start + u, m] * law
            continue
        suffixes = all_paths(vocab, depth - d)  # [P, L-d] every path below a depth-d node
        codes = [np.zeros(len(suffixes), dtype=np.int64)]
        for i in range(depth - d):
            codes.append(codes[-1] * vocab + suffixes[:, i])
        for m in range(1, paths + 1):
            active = np.nonzero(fresh[start:start + width, m] != 0)[0]
            if len(active) == 0:
                continue
            # absolute node of u y[:i] for every (active u, path y below), [A, P, L-d+1]
            nodes = np.stack([depth_offset(vocab, d + i) + active[:, None] * vocab**i
                              + codes[i][None, :] for i in range(depth - d + 1)], -1)
            nodes = nodes.reshape(-1, depth - d + 1)
            tokens = np.broadcast_to(suffixes[None], (len(active), *suffixes.shape)).reshape(
                -1, depth - d)
            # q(y[:i] | u), i = 0..L-d
            reach = [np.full(len(nodes), one, dtype=object) if model.exact
                     else np.ones(len(nodes))]
            for i in range(depth - d):
                reach.append(reach[-1] * model.draft[nodes[:, i], tokens[:, i]])
            keep = np.nonzero(reach[-1] != 0)[0]
            nodes, tokens = nodes[keep], tokens[keep]
            reach = [r[keep] for r in reach]
            mass = np.repeat(fresh[start + active, m], len(suffixes))[keep]  # [P']
            index = tokens if model.exact else ops.host_index(tokens)
            path_stop, path_rows = bv_path_law(index, _as_rows(model, model.target[nodes]),
                                               _as_rows(model, model.draft[nodes[:, :-1]]))
            weight = mass[:, None] * _as_numpy(path_stop) * reach[-1][:, None]  # [P', L-d+1]
            path_rows = _as_numpy(path_rows)
            leaf = nodes[:, -1]
            np.add.at(emit, leaf, weight[:, -1, None] * model.target[leaf])
            for i in range(depth - d):
                v = nodes[:, i]
                f = weight[:, i]
                residual = path_rows[:, i]
                _fallback(model, rule, fallback, v, d + i, f, residual, reach[i], m - 1, emit, fresh, one)
    return emit


def _fallback(model: TreeModel, rule: Any, fallback: str, v: np.ndarray, depth_v: int, f: np.ndarray,
              residual: np.ndarray, q_v: np.ndarray, others: int, emit: np.ndarray,
              fresh: np.ndarray, one: Any) -> None:
    """The step at fallback nodes v [S] (mass f, target residual [S, V]); the n other paths
    through v are Binomial(others, q(v|u)), their children i.i.d. q(.|v)."""
    vocab = model.vocab_size
    live = np.nonzero(f != 0)[0]
    v, f, residual, q_v = v[live], f[live], residual[live], q_v[live]
    if len(v) == 0:
        return
    for n in range(others + 1):
        chance = comb(others, n) * one * q_v**n * (one - q_v) ** (others - n)  # [S]
        if n == 0:
            np.add.at(emit, v, (f * chance)[:, None] * residual)
            continue
        tuples, first, count = _ordered_tuples(vocab, n)
        q = model.draft[v][:, tuples]  # [S, T, n]
        prob = q[..., 0]
        for i in range(1, n):
            prob = prob * q[..., i]
        weight = (f * chance)[:, None] * prob  # [S, T]
        slot, which = np.nonzero(weight != 0)
        if len(slot) == 0:
            continue
        children = tuples[which]
        through = np.ones(children.shape, dtype=bool)
        firsts = first[which]
        res = _as_rows(model, residual[slot])
        drafts = _as_rows(model, model.draft[v[slot]])
        children_t = children
        if not model.exact:
            through, children_t, firsts = (ops.host_index(through), ops.host_index(children),
                                           ops.host_index(firsts))
        accept, correction = _step(rule, res, drafts, through, children_t, firsts,
                                   fallback in EMPTY_SAFE)
        accept, correction = _as_numpy(accept), _as_numpy(correction)
        w = weight[slot, which]
        np.add.at(emit, v[slot], (w * (1 - accept.sum(axis=1)))[:, None] * correction)
        code = v[slot] - depth_offset(vocab, depth_v)
        child = depth_offset(vocab, depth_v + 1) + code[:, None] * vocab + children  # [S', n]
        np.add.at(fresh, (child.reshape(-1), count[which].reshape(-1)),
                  (w[:, None] * accept).reshape(-1))


# ---------------------------------------------------------------------------
# the hook of structure-aware exact evaluation (VerifierSpec.exact_law, verifiers.structure)
# ---------------------------------------------------------------------------

def fresh_start_work(vocab: int, depth: int, paths: int) -> int:
    """Upper bound on the work of extended_bv_structured: every fresh start (node u of depth
    d, m <= K paths) runs BV on the V^(L-d) paths below u and the fallback step on at most
    V^(K-1) ordered child tuples at each of their L - d nodes."""
    return sum(vocab**d * paths * vocab ** (depth - d) * max(1, depth - d) * vocab ** (paths - 1)
               for d in range(depth + 1))


def _structured_exact(fallback: str) -> Any:
    def exact(model: TreeModel, paths: int) -> tuple[np.ndarray, int]:
        return (extended_bv_structured(model, paths, fallback),
                fresh_start_work(model.vocab_size, model.depth, paths))

    exact.kind = "fresh-start recursion"
    exact.work = fresh_start_work
    return exact


for _name in ("bv_extended", "bv_extended_rrs"):
    REGISTRY[_name].exact_law = _structured_exact(REGISTRY[_name].options["fallback"])
