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
from .single_step import nested_partitions_for, ratio_cells, single_step_optimum
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
    if ops.is_torch(flat_target):  # the same values in fewer [R, V] passes
        return _optimal_step_torch(flat_target, flat_draft, present, drafted, count, cells,
                                   rules, (batch, slots, paths, vocab))
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


def _optimal_step_torch(target: Array, draft: Array, present: Array, drafted: Array,
                        count: Array, cells: Any, rules: list, shape: tuple[int, ...]
                        ) -> tuple[Array, Array]:
    """optimal_step_rule on tensors: each row's rule (n = its number of draws) is picked at the
    cell level ([R, C] rates), so the law r_n(x) = q(x) rate[cell(x)] is expanded to [R, V]
    once, inside the residual (a - r_n)_+ = (a - q rate[cell])_+ (one addcmul)."""
    batch, slots, paths, vocab = shape
    torch = ops.torch
    chosen = torch.zeros(present.shape, dtype=target.dtype, device=target.device)
    rate = rules[0].rate * 0  # rows with no draw: r = 0, so the residual row is the target
    for n, rule in enumerate(rules, 1):
        used = count == n
        chosen = torch.where(used[:, None], rule.select(drafted, present, None), chosen)
        rate = torch.where(used[:, None], rule.rate, rate)
    p_c = target.gather(-1, drafted)
    r_c = draft.gather(-1, drafted) * ops.take_rows(rate, cells.cell_at(drafted))
    accept = torch.where(present, chosen * torch.clamp_max(ops.safe_div(p_c, r_c), 1), 0)
    raw = torch.addcmul(target, draft, cells.per_token(rate), value=-1).clamp_min_(0)
    mass = raw.sum(-1, keepdim=True)
    residual = raw.div_(torch.where(mass > 0, mass, 1))
    return accept.reshape(batch, slots, paths), residual.reshape(batch, slots, vocab)


def recursive_rejection_step(target: Array, draft: Array, through: Array, children: Array,
                             first: Array) -> tuple[Array, Array]:
    """SpecInfer's node rule (recursive rejection with replacement, the paths' children tried
    in path order against the current residual; verifiers.multipath) with fewer [R, V]
    passes on tensors: a path not tried subtracts 0 * q, so no where over rows is needed
    (on a tried row (r - q)_+ / Z, on the others r / sum r = r: the residual rows are laws).
    Exact (numpy) rows go to the registered rule itself."""
    if not ops.is_torch(target):
        return REGISTRY["specinfer"].node_rule(target, draft, through, children, first)
    torch = ops.torch
    residual = target
    remaining = torch.ones(target.shape[:2], dtype=target.dtype, device=target.device)
    accepts = []
    for j in range(children.shape[1]):
        tried = through[:, :, j]
        index = children[:, None, j, None].expand(-1, target.shape[1], 1)
        p_c = residual.gather(-1, index)[..., 0]
        q_c = draft.gather(-1, index)[..., 0]
        a = torch.where(tried, torch.clamp_max(ops.safe_div(p_c, q_c), 1), 0)
        accepts.append(remaining * a)
        remaining = remaining * (1 - a)
        raw = torch.addcmul(residual, draft, tried[..., None].to(draft.dtype), value=-1)
        raw.clamp_min_(0)
        mass = raw.sum(-1, keepdim=True)
        residual = raw.div_(torch.where(mass > 0, mass, 1))
    return torch.stack(accepts, 2), residual


def fallback_rule(name: str) -> Any:
    """The node rule of the fallback step: "optimal" (optimal_step_rule) or the node rule of
    the registered verifier `name` (verifiers.multipath.NodeRule)."""
    if name == "optimal":
        return optimal_step_rule
    if name == "specinfer":
        return recursive_rejection_step
    spec = REGISTRY.get(name)
    if spec is None or spec.node_rule is None:
        known = sorted(n for n, s in REGISTRY.items() if s.node_rule is not None)
        raise ValueError(f"fallback must name a verifier with a node rule ({', '.join(known)}), "
                         f"got {name!r}")
    return spec.node_rule


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

def _residuals_into(weight: Array, target: Array, draft: Array, out: Array) -> Array:
    """residual_rows on tensors, written into out, in 4 [.., V] passes instead of 5: one
    addcmul gives q - w p, clamp_max_ keeps its negative part -(w p - q)_+, whose sum is -Z,
    and the division by -Z (by -1 where Z = 0: the row is all zeros) gives (w p - q)_+ / Z.
    Returns Z."""
    torch = ops.torch
    raw = torch.addcmul(draft, target, weight[..., None].to(target.dtype), value=-1, out=out)
    negative = raw.clamp_max_(0).sum(-1)
    raw.div_(torch.where(negative < 0, negative, -1)[..., None])
    return -negative


def _fresh_starts(same: Array) -> Array:
    """start [B, K]: the only depth at which path k can take a fresh start (docs/theory.md
    section 19.7): 0 for path 0; for k >= 1, 1 + the deepest depth at which path k shares its
    node with a lower path (L + 1: never, path k repeats a lower path). Shared prefixes are
    nested, so it is the number of depths 0..L at which a lower path shares path k's node."""
    paths = same.shape[1]
    lower = ops.arange(paths, same)[:, None] > ops.arange(paths, same)[None, :]  # [k, j]: j < k
    shared = ops.total(ops.where(same & lower[None, :, :, None], 1, 0), 2) > 0  # [B, K(k), L+1]
    return ops.total(ops.where(shared, 1, 0), -1)


def _owner_slots(same: Array, depth: int) -> tuple[Array, Array, Array]:
    """The fallback nodes, compacted. A node at depth i < L is a fallback node when the lowest
    path through it (its owner j) has a higher path through it too; a depth has at most
    C = floor(K/2) of them (each holds 2 paths). Returns owner [B, C, L] (path K-1, which
    never owns one, on empty slots), valid [B, C, L] and slot [B, C, K, L] (slot c holds
    path j's node at depth i)."""
    paths = same.shape[1]
    index = ops.arange(paths, same)
    earlier = index[:, None] < index[None, :]  # [j', j]: j' < j
    levels = same[..., :depth]  # [B, K, K, L]
    lowest = ops.total(ops.where(levels & earlier[None, :, :, None], 1, 0), 1) == 0  # [B, K, L]
    higher = ops.total(ops.where(levels & earlier[None, :, :, None], 1, 0), 2) > 0  # [B, K, L]
    owns = lowest & higher
    rank = ops.cumsum(ops.where(owns, 1, 0), 1) - 1  # [B, K, L]
    slots = max(1, paths // 2)
    slot = owns[:, None] & (rank[:, None] == ops.arange(slots, same)[None, :, None, None])
    valid = ops.total(ops.where(slot, 1, 0), 2) > 0  # [B, C, L]
    owner = ops.where(valid, ops.argmax(slot, 2), paths - 1)
    return owner, valid, slot


def _bv_from_starts(target: Array, draft: Array, tokens: Array, start: Array
                    ) -> tuple[Array, Array, Array, Array]:
    """BV on every path from its start depth (weights reset to 1 at depths <= start):
    (one [B, K], weight [B, K, L+1], mass Z [B, K, L], correction [B, K, L+1, V]: the
    residual rows at depths < L, the target row at L). The weights and masses at depths
    <= l read the path up to depth l only (verifiers.grid)."""
    batch, paths, depth = tokens.shape
    vocab = target.shape[-1]
    drafted = tokens[..., None]
    ratio = ops.safe_div(ops.gather(target[:, :, :depth], -1, drafted)[..., 0],
                         ops.gather(draft, -1, drafted)[..., 0])  # [B, K, L]
    one = ops.ones((batch, paths), like=ratio)
    weights = [one]
    for i in range(depth):
        weights.append(ops.where(start >= i + 1, one, ops.minimum(weights[-1] * ratio[:, :, i], 1)))
    weight = ops.stack(weights, -1)  # [B, K, L+1]
    if ops.is_torch(target):
        dtype = ops.torch.promote_types(target.dtype, draft.dtype)
        correction = ops.torch.empty((batch, paths, depth + 1, vocab), dtype=dtype,
                                     device=target.device)
        mass = _residuals_into(weight[..., :depth], target[:, :, :depth], draft,
                               correction[:, :, :depth])
        correction[:, :, depth] = target[:, :, depth]
    else:
        rows, mass = residual_rows(weight[..., :depth], target[:, :, :depth], draft)
        correction = ops.concat([rows, target[:, :, depth:]], 2)
    return one, weight, mass, correction


def _path_stops(one: Array, weight: Array, mass: Array, start: Array, tokens: Array) -> Array:
    """[B, K, l+1] P(BV from the path's start ends at depth i) on the paths cut to depth
    l = mass.shape[-1] (weight [B, K, l+1], start [B, K] at most l + 1)."""
    depth = mass.shape[-1]
    h = ops.safe_div(mass, mass + 1 - weight[..., :depth])  # [B, K, l]
    h = ops.concat([h, weight[..., depth:depth + 1]], -1)  # h_l = w_l
    depths = ops.arange(depth + 1, tokens)
    h = ops.where(depths[None, None, :] <= start[..., None], one[..., None], h)  # h_start = 1
    survive = [one]  # prod_{t > i} (1 - h_t), i = l, l-1, ..., 0
    for i in range(depth, 0, -1):
        survive.append(survive[-1] * (1 - h[..., i]))
    return h * ops.stack(survive[::-1], -1)


def _fallback_steps(rule: Any, fallback: str, tokens: Array, same: Array, correction: Array,
                    draft: Array) -> tuple[Array, ...]:
    """The fallback step at the compacted fallback nodes of the paths of tokens [B, K, L]
    (K >= 2; correction [B, K, L+1, V] from _bv_from_starts, not modified). Returns
    (owner, valid, slot, residual, stepped, taken, moved_to): taken[j] [B, L, K-1]
    P(the step at path j's depth-i node takes column k, i.e. path k + 1), moved_to[j] the
    path that column's child hands the fresh start to. The step at depth i reads the rows
    and paths up to depth i + 1 only (verifiers.grid)."""
    batch, paths, depth = tokens.shape
    vocab = correction.shape[-1]
    index = ops.arange(paths, tokens)
    owner, valid, slot = _owner_slots(same, depth)  # [B, C, L], [B, C, L], [B, C, K, L]
    slots = owner.shape[1]
    b = ops.arange(batch, tokens)[:, None, None]
    at = ops.arange(depth, tokens)[None, None, :]
    others = paths - 1  # columns: paths 1..K-1 (path 0 is never through another's node)
    higher = index[None, None, None, 1:] > owner[..., None]  # [B, C, L, J]
    # through [B, C, L, J]: path k > owner through the owner's depth-i node
    through = same[b[..., None], owner[..., None], index[None, None, None, 1:], at[..., None]]
    through = through & higher & valid[..., None]
    children = tokens[b[..., None], index[None, None, None, 1:] + 0 * owner[..., None],
                      at[..., None]]  # [B, C, L, J]
    own = children == tokens[b, owner, at][..., None]  # BV's drafted child: residual 0 there
    equal = children[..., :, None] == children[..., None, :]  # [.., J(k), J(k')]
    earlier = index[1:, None] > index[None, 1:]  # [J(k), J(k')]: k' < k
    first = through & (ops.total(ops.where(equal & earlier & through[..., None, :], 1, 0), -1) == 0)
    flat = batch * slots * depth
    residual = correction[b, owner, at]  # [B, C, L, V] (a copy)
    accept, stepped = _step(rule, residual.reshape(flat, vocab),
                            draft[b, owner, at].reshape(flat, vocab),
                            through.reshape(flat, others), children.reshape(flat, others),
                            first.reshape(flat, others), fallback in EMPTY_SAFE)
    accept = ops.where(own, 0, accept.reshape(batch, slots, depth, others))
    # destination of an accepted column: the lowest path through it with the same child
    dest = ops.argmax(equal & through[..., None, :], -1) + 1  # [B, C, L, J] path index
    taken = [ops.total(ops.where(slot[:, :, j, :, None], accept, 0), 1) for j in range(paths)]
    moved_to = [ops.total(ops.where(slot[:, :, j, :, None], dest, 0), 1) for j in range(paths)]
    return owner, valid, slot, residual, stepped, taken, moved_to


def _flow(one: Array, path_stop: Array, taken: list[Array], moved_to: list[Array]) -> list[Array]:
    """[B, l+1] per path: P(the block ends on path j at depth i), the masses flowing from
    lower to higher paths (path_stop [B, K, l+1]; taken, moved_to at depths < l)."""
    paths, depth = path_stop.shape[1], path_stop.shape[2] - 1
    fresh = [one[:, 0]] + [one[:, 0] * 0] * (paths - 1)  # P(fresh start of path k)
    stops = []
    for j in range(paths):
        f = fresh[j][:, None] * path_stop[:, j]  # [B, L+1]
        stops.append(ops.concat([f[:, :depth] * (1 - ops.total(taken[j], -1)), f[:, depth:]], -1))
        moved = f[:, :depth, None] * taken[j]  # [B, L, J]
        for k in range(j + 1, paths):
            fresh[k] = fresh[k] + ops.total(ops.total(ops.where(moved_to[j] == k, moved, 0), -1), -1)
    return stops


@register("bv_extended", "BV on path 1; where it ends, its correction is drawn by the "
          "single-step-optimal rule over the other paths' children, continuing below a drafted "
          "child (never below BV, run by run)", multipath=True, draft_sampling=("iid",),
          fallback="optimal")
def extended_bv_law(tree: DraftTree, fallback: str = DEFAULT_FALLBACK) -> BlockLaw:
    """Exact law of extended BV on one drafted tree (module docstring), batched.

    Every path has at most one fresh start (docs/theory.md section 19.7: a fresh start is at
    a node no lower path passes through, and the fallback never takes BV's own rejected
    child, whose residual is 0), so BV on the K paths runs once, each path with its weights
    reset at its own start depth (K L residual rows, as BV on K paths), and the fallback step
    runs once per fallback node, at most floor(K/2) per depth (compacted slots). The masses
    then flow from lower to higher paths in a loop over K on [B, L] scalars. Loops over K and
    L only; no host synchronisation."""
    rule = fallback_rule(fallback)
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    batch, depth = tree.batch, tree.depth
    same = shared_prefix(tokens)  # [B, K, K, L+1]
    start = _fresh_starts(same)  # [B, K]
    one, weight, mass, correction = _bv_from_starts(target, draft, tokens, start)
    path_stop = _path_stops(one, weight, mass, start, tokens)  # [B, K, L+1]
    if tree.paths == 1:  # no fallback step: BV itself
        return BlockLaw(path_stop, correction)
    owner, valid, _, residual, stepped, taken, moved_to = _fallback_steps(
        rule, fallback, tokens, same, correction, draft)
    b = ops.arange(batch, tokens)[:, None, None]
    at = ops.arange(depth, tokens)[None, None, :]
    correction[b, owner, at] = ops.where(valid[..., None], stepped.reshape(residual.shape), residual)
    return BlockLaw(ops.stack(_flow(one, path_stop, taken, moved_to), 1), correction)


@register("bv_extended_rrs", "BV on path 1; where it ends, its correction is drawn by recursive "
          "rejection (SpecInfer's step) over the other paths' children, continuing below a drafted "
          "child (never below BV, run by run; the cheaper step)", multipath=True,
          draft_sampling=("iid",), fallback="specinfer")
def extended_bv_rrs_law(tree: DraftTree, fallback: str = "specinfer") -> BlockLaw:
    """extended_bv_law with recursive rejection as the fallback step (its own function so that
    its grid law, verifiers.grid's hook, knows its fallback)."""
    return extended_bv_law(tree, fallback)


def extended_bv_grid(tree: DraftTree, cells: list[tuple[int, int]],
                     fallback: str = DEFAULT_FALLBACK) -> dict[tuple[int, int], Array]:
    """E[tau + 1] [B] of extended BV on the first K' paths cut to depth L', for every (K', L')
    in cells (verifiers.grid's hook), from one pass over the whole tree plus one fallback
    pass per K'. Everything extended_bv_law computes at depth i reads the tree up to depth
    i + 1 only, and its lower-path relations read lower paths only:
      - the start depth of path k in the cut tree is min(start, L' + 1) (it counts the depths
        0..L' at which a lower path shares path k's node; L' + 1: path k repeats a lower path
        there and gets no mass), so BV's weights, residual rows and masses on all K paths at
        full depth serve every cell (depths < L'); only the last test h_L' = w_L' and the
        survival products depend on L' (scalars [B, K, L'+1] per cell);
      - the fallback steps of K' paths at full depth serve every L' (their depths < L'): one
        step pass per K' >= 2;
      - the flow of masses is a loop over K' on [B, L'] scalars per cell.
    Equal to extended_bv_law on each cut tree (tests/test_bv_extended.py): exactly on
    rational rows, to rounding on float rows."""
    rule = fallback_rule(fallback)
    target, draft = tree.target_rows, tree.draft_rows
    tokens = ops.index_like(target, tree.tokens)
    same = shared_prefix(tokens)  # [B, K, K, L+1]
    start = _fresh_starts(same)  # [B, K]: lower paths only, so the same for every K'
    one, weight, mass, correction = _bv_from_starts(target, draft, tokens, start)
    out: dict[tuple[int, int], Array] = {}
    for paths in sorted({k for k, _ in cells}):
        if not 1 <= paths <= tree.paths:
            raise ValueError(f"cells: K' must lie in [1, {tree.paths}], got {paths}")
        if paths > 1:
            steps = _fallback_steps(rule, fallback, tokens[:, :paths], same[:, :paths, :paths],
                                    correction[:, :paths], draft[:, :paths])
            taken, moved_to = steps[5], steps[6]
        for k, length in cells:
            if k != paths:
                continue
            if not 1 <= length <= tree.depth:
                raise ValueError(f"cells: L' must lie in [1, {tree.depth}], got {length}")
            cut_start = ops.where(start[:, :paths] > length + 1, length + 1, start[:, :paths])
            path_stop = _path_stops(one[:, :paths], weight[:, :paths, :length + 1],
                                    mass[:, :paths, :length], cut_start, tokens)
            if paths == 1:
                stops = path_stop
            else:
                stops = ops.stack(_flow(one[:, :paths], path_stop, [t[:, :length] for t in taken],
                                        [m[:, :length] for m in moved_to]), 1)
            if ops.is_torch(stops):
                steps_l = ops.torch.arange(length + 1, dtype=stops.dtype, device=stops.device)
            else:
                steps_l = np.arange(length + 1)
            out[(k, length)] = ops.total(ops.total(stops * steps_l, -1), -1) + 1
    return out


extended_bv_law.grid = extended_bv_grid
extended_bv_rrs_law.grid = lambda tree, cells: extended_bv_grid(tree, cells, "specinfer")


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

    Evaluation, per depth d of fresh starts: BV's law once on every path y below every
    fresh-start node u of depth d (whatever m: BV on a path reads the path's rows only), and
    the fallback step once per NODE v below u, not once per (path through v, m). Exact
    because what the step at v reads is a function of v alone (given d): its target is BV's
    residual at v, (w_i p(.|v) - q(.|v))_+ / Z_i with w_i = min(1, w_(i-1) p/q) along u..v
    (verifiers.single_path.bv_path_law: the residual and weight at depth i read tokens and
    rows of depths < i only, and u is v's ancestor of depth d), its draft q(.|v), and the
    number n of other paths through v, Binomial(m - 1, q(v|u)). So the mass reaching the
    step at v with n others is the sum over m and over the paths y through v of
    fresh(u, m) P(BV on y stops at v) q(y|u) Binomial(n; m - 1, q(v|u)), and the step's
    output is linear in it: summing that mass first (exactly, in rationals) gives the same
    law with one rule call per (v, ordered tuple of n children), chunked (CHUNK_ELEMENTS).

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
        active = np.nonzero((fresh[start:start + width] != 0).any(axis=1))[0]
        if len(active) == 0:
            continue
        suffixes = all_paths(vocab, depth - d)  # [P, L-d] every path below a depth-d node
        codes = [np.zeros(len(suffixes), dtype=np.int64)]
        for i in range(depth - d):
            codes.append(codes[-1] * vocab + suffixes[:, i])
        # absolute node of u y[:i] for every (active u, path y below), [A P, L-d+1]
        nodes = np.stack([depth_offset(vocab, d + i) + active[:, None] * vocab**i
                          + codes[i][None, :] for i in range(depth - d + 1)], -1)
        nodes = nodes.reshape(-1, depth - d + 1)
        tokens = np.broadcast_to(suffixes[None], (len(active), *suffixes.shape)).reshape(
            -1, depth - d)
        reach = [np.full(len(nodes), one, dtype=object) if model.exact else np.ones(len(nodes))]
        for i in range(depth - d):  # q(y[:i] | u), i = 0..L-d
            reach.append(reach[-1] * model.draft[nodes[:, i], tokens[:, i]])
        keep = np.nonzero(reach[-1] != 0)[0]
        nodes, tokens = nodes[keep], tokens[keep]
        reach = [r[keep] for r in reach]
        index = tokens if model.exact else ops.host_index(tokens)
        path_stop, path_rows = bv_path_law(index, _as_rows(model, model.target[nodes]),
                                           _as_rows(model, model.draft[nodes[:, :-1]]))
        stop = _as_numpy(path_stop) * reach[-1][:, None]  # [P', L-d+1] P(y, BV stops at i)
        path_rows = _as_numpy(path_rows)
        mass = fresh[nodes[:, 0]]  # [P', K+1] fresh(u, m) of each path's start
        leaf = nodes[:, -1]
        np.add.at(emit, leaf, (mass.sum(axis=1) * stop[:, -1])[:, None] * model.target[leaf])
        for i in range(depth - d):
            v, first, group = np.unique(nodes[:, i], return_index=True, return_inverse=True)
            ends = _zeros(model, (len(v),))  # sum over the paths y through v of P(y, stop at v)
            np.add.at(ends, group.reshape(-1), stop[:, i])
            u_mass = mass[first]  # [S, K+1]: u is v's ancestor, the same for every y through v
            q_v = reach[i][first]  # q(v | u)
            chance = _zeros(model, (len(v), paths))  # [S, n]: mass reaching v with n others
            for m in range(1, paths + 1):
                if not (u_mass[:, m] != 0).any():
                    continue
                for n in range(m):
                    chance[:, n] = chance[:, n] + (u_mass[:, m] * ends * comb(m - 1, n)
                                                   * q_v**n * (one - q_v) ** (m - 1 - n))
            _fallback(model, rule, fallback, v, d + i, chance, path_rows[first, i], emit, fresh)
    return emit


CHUNK_ELEMENTS = 1 << 21  # (node, ordered tuple) rows x V per rule call: about 16 MB per float array


def _optimal_step_grouped(residual: np.ndarray, draft: np.ndarray, node: np.ndarray,
                          children: np.ndarray, support: int | None = DEFAULT_SUPPORT
                          ) -> tuple[np.ndarray, np.ndarray]:
    """optimal_step_rule on numpy rows (exact or float64) for many ordered child tuples at few
    nodes: residual, draft [S, V] the nodes' rows, node [R] the node of each tuple row,
    children [R, n] the n drafted children (every one a draw). Returns (accept [R, n],
    correction [S, V]). The same values as optimal_step_rule on the rows expanded to R
    (tests/test_bv_extended_aggregated.py, exactly in rationals): everything but the
    selection is a function of the node (the ratio cells, the nested partitions for n draws
    and their law r_n, the residual (a - r_n)_+ / Z), so it is built once per node, and the
    selection reads it through rows = node (NestedPartitions.select)."""
    n = children.shape[1]
    cells = ratio_cells(residual, draft, support)
    rule = nested_partitions_for(residual, draft, [n], cells=cells)[0]
    chosen = rule.select(children, np.ones(children.shape, dtype=bool), node)
    law = rule.law()  # [S, V]
    p_c = residual[node[:, None], children]
    r_c = law[node[:, None], children]
    accept = chosen * ops.minimum(ops.safe_div(p_c, r_c), 1)
    correction, _ = residual_rows(ops.ones((len(residual),), like=residual), residual, law)
    return accept, correction


def _fallback(model: TreeModel, rule: Any, fallback: str, v: np.ndarray, depth_v: int,
              chance: np.ndarray, residual: np.ndarray, emit: np.ndarray, fresh: np.ndarray) -> None:
    """The step at the distinct fallback nodes v [S] (target residual [S, V]): chance [S, n]
    is the mass reaching the step at v with n other paths through v, whose children are
    i.i.d. q(.|v) (extended_bv_structured's docstring). One rule evaluation per (v, ordered
    child tuple of positive probability), in chunks of at most CHUNK_ELEMENTS row entries;
    the "optimal" step on numpy rows builds its per-node parts once per node
    (_optimal_step_grouped), any other rule runs on the rows expanded per tuple (_step)."""
    vocab = model.vocab_size
    np.add.at(emit, v, chance[:, 0][:, None] * residual)
    code = v - depth_offset(vocab, depth_v)
    grouped = fallback == "optimal" and not ops.is_torch(_as_rows(model, residual[:1]))
    for n in range(1, chance.shape[1]):
        live = np.nonzero(chance[:, n] != 0)[0]
        if len(live) == 0:
            continue
        tuples, first, count = _ordered_tuples(vocab, n)
        per_chunk = max(1, CHUNK_ELEMENTS // (len(tuples) * max(n, vocab)))
        for lo in range(0, len(live), per_chunk):
            rows = live[lo:lo + per_chunk]
            q = model.draft[v[rows]][:, tuples]  # [S', T, n]
            prob = q[..., 0]
            for i in range(1, n):
                prob = prob * q[..., i]
            weight = chance[rows, n][:, None] * prob  # [S', T]
            local, which = np.nonzero(weight != 0)
            if len(local) == 0:
                continue
            slot = rows[local]
            children = tuples[which]
            w = weight[local, which]
            if grouped:
                accept, correction = _optimal_step_grouped(
                    _as_rows(model, residual[rows]), _as_rows(model, model.draft[v[rows]]), local,
                    children)
                stopped = _zeros(model, (len(rows),))  # per node: sum of w (1 - accepted)
                np.add.at(stopped, local, w * (1 - accept.sum(axis=1)))
                np.add.at(emit, v[rows], stopped[:, None] * correction)
            else:
                through = np.ones(children.shape, dtype=bool)
                firsts = first[which]
                children_t = children
                if not model.exact:
                    through, children_t, firsts = (ops.host_index(through),
                                                   ops.host_index(children),
                                                   ops.host_index(firsts))
                accept, correction = _step(rule, _as_rows(model, residual[slot]),
                                           _as_rows(model, model.draft[v[slot]]), through,
                                           children_t, firsts, fallback in EMPTY_SAFE)
                accept, correction = _as_numpy(accept), _as_numpy(correction)
                np.add.at(emit, v[slot], (w * (1 - accept.sum(axis=1)))[:, None] * correction)
            child = depth_offset(vocab, depth_v + 1) + code[slot][:, None] * vocab + children
            np.add.at(fresh, (child.reshape(-1), count[which].reshape(-1)),
                      (w[:, None] * accept).reshape(-1))


# ---------------------------------------------------------------------------
# the hook of structure-aware exact evaluation (VerifierSpec.exact_law, verifiers.structure)
# ---------------------------------------------------------------------------

def fresh_start_work(vocab: int, depth: int, paths: int) -> int:
    """Upper bound on the work of extended_bv_structured: for every depth d of fresh starts,
    BV's law on the V^L paths below the depth-d nodes (L - d + 1 rows each), and the fallback
    step at each of the sum_(e=d..L-1) V^e nodes below them on at most sum_(n<K) V^n ordered
    child tuples (the step runs once per node, whatever the number of paths through u)."""
    tuples = sum(vocab**n for n in range(paths))
    return sum(vocab**depth * (depth - d + 1)
               + (num_nodes(vocab, depth - 1) - num_nodes(vocab, d - 1)) * tuples
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


# ---------------------------------------------------------------------------
# the ceiling of the family (docs/theory.md section 19.8)
# ---------------------------------------------------------------------------

def family_ceiling(model: TreeModel, paths: int) -> Any:
    """An upper bound on E[tau + 1] of EVERY member of the extended-BV family on K = paths
    i.i.d. paths (docs/theory.md Proposition 19.5): BV on path 1 from the root; where it ends
    at v (depth i < L) any lossless step against res_v over the n ~ Binomial(K - 1, q(v))
    other paths through v, whose acceptance is at most the L = 1 optimum
    alpha*_n(res_v, q(.|v)) = min_H [res_v(H) + 1 - q(H|v)^n] (section 8.2), and anything below
    an accepted child, which emits at most L - i tokens more. So
    ceiling = sum_v P(BV ends at v) [i + 1 + (L - i) sum_n P(n) alpha*_n] + P(BV accepts L) (L + 1).
    Exact on rational rows, float64 otherwise."""
    vocab, depth = model.vocab_size, model.depth
    suffixes = all_paths(vocab, depth)  # [P, L]
    codes = [np.zeros(len(suffixes), dtype=np.int64)]
    for i in range(depth):
        codes.append(codes[-1] * vocab + suffixes[:, i])
    nodes = np.stack([depth_offset(vocab, i) + codes[i] for i in range(depth + 1)], -1)  # [P, L+1]
    one = model.target[0, 0] * 0 + 1
    reach = [np.full(len(nodes), one, dtype=object) if model.exact else np.ones(len(nodes))]
    for i in range(depth):
        reach.append(reach[-1] * model.draft[nodes[:, i], suffixes[:, i]])
    index = suffixes if model.exact else ops.torch.as_tensor(suffixes)
    stop, rows = bv_path_law(index, _as_rows(model, model.target[nodes]),
                             _as_rows(model, model.draft[nodes[:, :-1]]))
    stop, rows = _as_numpy(stop) * reach[-1][:, None], _as_numpy(rows)  # [P, L+1] with q(y)
    value = (stop[:, depth] * (depth + 1)).sum()
    others = paths - 1
    for i in range(depth):
        q_v = reach[i]  # q(v | root), v = y[:i]
        gain = q_v * 0
        for n in range(1, others + 1):
            chance = comb(others, n) * one * q_v**n * (one - q_v) ** (others - n)
            alpha, _ = single_step_optimum(rows[:, i], model.draft[nodes[:, i]], n)
            gain = gain + chance * np.asarray(alpha)
        value = value + (stop[:, i] * (i + 1 + (depth - i) * gain)).sum()
    return value
