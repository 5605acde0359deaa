"""One-pass laws of every (K', L') cell of a drafted tree (issue 33, part 1).

The first K' of K i.i.d. drafted paths, cut to depth L', are a drafted tree of the (K', L')
setting at the same context (docs/theory.md section 12), so one drafted tree answers every
cell; decode.scoring.score_grid scores them all. Evaluating each cell's law on its own cut
tree repeats work: every verifier below decides at depth i from the tokens and rows up to
depth i only, so ONE pass over the first K' paths at full depth L serves every L', and the
per-node work that does not depend on K' is done once for the whole tree:

    bv, token          one pass over path 0 (BV's tests h_i, i < L', are those of the full
                       path; only the last test h_L' = w_L' depends on L')
    gbv, gbv_clipped   one greedy selection per K' (gbv_selection), BV's tests shared as above
    nodeopt            the node rules built once (nodeopt.node_rule_tables), one selection
                       pass per K' (nodeopt_grid)
    spectr             rho of every node for every n = 1..K from one sorted pass per node row
                       (kseq_rho_counts), one walk per K' of the acceptances only
    other node rules   (specinfer, rrsw, naive_tree, nss, khisti) one walk per K' with the
                       registered rule (walk_grid)

Only E[tau + 1] is computed (no correction rows). Values equal the per-cell laws' E[tau + 1]
(`registry.block_law(name, cut tree).block_efficiency()`): exactly on rational rows, to
rounding (sums taken in another order) on float rows (tests/test_grid.py). The gbv and nodeopt
grids read the rows of the selected path, so they assume what every drafted tree satisfies:
paths with a common prefix carry the same rows along it.

grid_values(name, tree, cells) -> {cell: [B]} or None when the verifier has no grid law
(then decode.scoring evaluates each cell's law).

The hook for other verifiers (e.g. bv_extended, not served here): its module sets an attribute
on its registered law function, `law_function.grid = fn(tree, cells) -> {cell: [B]}`, which
grid_values uses. It may import this module's pieces at module level (this module imports
gbv, multipath, nodeopt, law and ops, none of which imports registry or bv_extended: no
cycle; tests/test_layout.py checks): bv_prefix_accepted (BV's E[tau] on every prefix of a
path, against any draft law along it), _walk (a top-down walk's E[tau] on every prefix, given
its acceptances), _sub_tree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import gbv as _gbv
from . import ops
from .law import REGISTRY, DraftTree
from .multipath import canonical_paths, kseq_rho, shared_prefix, spectr_accepts
from .nodeopt import DEFAULT_SUPPORT, node_rule_tables, selection_pass
from .ops import torch  # imported on first use (ops._LazyTorch)

Array = Any
Cell = tuple[int, int]


def _sub_tree(tree: DraftTree, paths: int) -> DraftTree:
    """The first `paths` paths at full depth."""
    return DraftTree(tree.tokens[:, :paths], tree.target_rows[:, :paths],
                     tree.draft_rows[:, :paths])


def _residual_mass(weight: Array, target_rows: Array, draft_rows: Array) -> Array:
    """Z = sum_x (w p(x) - q(x))_+ as single_path.residual_rows computes it (no rows)."""
    if ops.is_torch(target_rows):
        return (weight[..., None] * target_rows - draft_rows).clamp_min_(0).sum(-1)
    return ops.total(ops.positive_part(weight[..., None] * target_rows - draft_rows), -1)


def bv_prefix_accepted(tokens: Array, target_rows: Array, draft_rows: Array) -> list[Array]:
    """[A_0, A_1, ..., A_L]: A_l [R] = E[tau] of BV on the path cut to depth l (A_0 = 0).

    tokens [R, L], target_rows [R, L+1, V], draft_rows [R, L, V] (any draft law along the
    path, as single_path.bv_path_law). BV's tests h_i = Z_i / (Z_i + 1 - w_i), i < l, read
    the path up to depth i only; the last h_l = w_l: one residual mass per node serves every l.
    """
    depth = tokens.shape[-1]
    index = ops.index_like(draft_rows, tokens)[..., None]
    q_drafted = ops.gather(draft_rows, -1, index)[..., 0]  # [R, L]
    p_drafted = ops.gather(target_rows[:, :depth], -1, index)[..., 0]
    ratio = ops.safe_div(p_drafted, q_drafted)
    one = ops.ones(q_drafted.shape[:1], like=q_drafted)
    weights = [one]
    for i in range(depth):
        weights.append(ops.minimum(weights[-1] * ratio[:, i], 1))
    tests = [one * 0]  # h_0 is never used
    if depth > 1:
        inner = ops.stack(weights[1:depth], 1)  # [R, L-1]
        mass = _residual_mass(inner, target_rows[:, 1:depth], draft_rows[:, 1:depth])
        tests += [ops.safe_div(mass[:, i - 1], mass[:, i - 1] + 1 - weights[i])
                  for i in range(1, depth)]
    out = [one * 0]
    for length in range(1, depth + 1):
        # P(tau = i) = h_i prod_{i < j <= l} (1 - h_j), with h_l = w_l
        survive, accepted = one, one * 0
        for i in range(length, 0, -1):
            h = weights[length] if i == length else tests[i]
            accepted = accepted + h * survive * i
            survive = survive * (1 - h)
        out.append(accepted)
    return out


def token_prefix_accepted(tokens: Array, target_rows: Array, draft_rows: Array) -> list[Array]:
    """[A_0, ..., A_L]: E[tau] of token-level speculative sampling on the path cut to depth l."""
    depth = tokens.shape[-1]
    index = ops.index_like(draft_rows, tokens)[..., None]
    q_drafted = ops.gather(draft_rows, -1, index)[..., 0]
    p_drafted = ops.gather(target_rows[:, :depth], -1, index)[..., 0]
    accept = ops.minimum(ops.safe_div(p_drafted, q_drafted), 1)  # [R, L]
    reached = ops.ones(q_drafted.shape[:1], like=q_drafted)
    out = [reached * 0]
    for length in range(1, depth + 1):
        reached = reached * accept[:, length - 1]
        out.append(out[-1] + reached)  # E[tau] = sum_i P(tau >= i)
    return out


def _lengths(cells: list[Cell], paths: int) -> list[int]:
    return sorted({d for k, d in cells if k == paths})


def _single_path_grid(prefix: Callable[..., list[Array]], tree: DraftTree,
                      cells: list[Cell]) -> dict[Cell, Array]:
    """A verifier of path 0 alone: every K' has the value of K' = 1."""
    accepted = prefix(ops.index_like(tree.target_rows, tree.tokens)[:, 0], tree.target_rows[:, 0],
                      tree.draft_rows[:, 0])
    return {(k, d): accepted[d] + 1 for k, d in cells}


def bv_grid(tree: DraftTree, cells: list[Cell]) -> dict[Cell, Array]:
    return _single_path_grid(bv_prefix_accepted, tree, cells)


def token_grid(tree: DraftTree, cells: list[Cell]) -> dict[Cell, Array]:
    return _single_path_grid(token_prefix_accepted, tree, cells)


def gbv_grid(tree: DraftTree, cells: list[Cell], clip: bool = False) -> dict[Cell, Array]:
    """GBV (gbv.gbv_law) at every cell: one greedy selection per K' at full depth (the
    selection and the skewed rows at depth i read depths <= i only), BV's tests shared."""
    out: dict[Cell, Array] = {}
    for paths in sorted({k for k, _ in cells}):
        if paths == 1:  # one path: the skewed rows are q exactly and GBV is BV (gbv.py)
            out.update(bv_grid(tree, [cell for cell in cells if cell[0] == 1]))
            continue
        sub = _sub_tree(tree, paths)
        selected, skewed = _gbv.gbv_selection(sub, clip=clip)
        tokens = ops.index_like(tree.target_rows, tree.tokens)
        rows = ops.arange(tree.batch, tokens)
        accepted = bv_prefix_accepted(tokens[rows, selected],
                                      _gbv.path_rows(sub.target_rows, rows, selected), skewed)
        for length in _lengths(cells, paths):
            out[(paths, length)] = accepted[length] + 1
    return out


def nodeopt_grid(tree: DraftTree, cells: list[tuple[int, int]], support: int | None = DEFAULT_SUPPORT,
                 rule: str = "nested") -> dict[tuple[int, int], Array]:
    """E[tau + 1] [B] of nodeopt on the first K' paths cut to depth L', for every (K', L') in
    cells, from one pass per K' (verifiers.grid): the node rules are built once for the whole
    tree; the selection pass on the first K' paths serves every depth L' (its first L' depths
    are the pass on the cut tree); BV's tests along each path are shared by its prefixes
    (grid.bv_prefix_accepted). Equal to nodeopt_law on each cut tree (tests/test_grid.py) for
    trees whose paths with a common prefix carry the same rows there (every drafted tree)."""
    tables = node_rule_tables(tree, support, rule)
    batch, depth, vocab = tree.batch, tree.depth, tree.vocab_size
    out: dict[tuple[int, int], Array] = {}
    for paths in sorted({k for k, _ in cells}):
        selection = selection_pass(tree, tables, paths)
        tokens = ops.index_like(tree.target_rows, tree.tokens)[:, :paths].reshape(batch * paths,
                                                                                 depth)
        target = tree.target_rows[:, :paths].reshape(batch * paths, depth + 1, vocab)
        accepted = bv_prefix_accepted(tokens, target,
                                      selection.skewed.reshape(batch * paths, depth, vocab))
        for k, length in cells:
            if k == paths:
                chosen = selection.chosen(length)
                out[(k, length)] = ops.total(chosen * accepted[length].reshape(batch, paths), -1) + 1
    return out


# ---------------------------------------------------------------------------
# walk verifiers (multipath.walk_tree): one walk per K'
# ---------------------------------------------------------------------------

# accept(i, paths, target [B, K', V], draft, through [B, K', K'], children [B, K'], first [B, K'])
# -> [B, K'(k0), K'(j)] P(the node rule at slot (k0, i) moves down through path j's child)
Acceptance = Callable[[int, int, Array, Array, Array, Array, Array], Array]


def _walk(tree: DraftTree, paths: int, accept: Acceptance) -> list[Array]:
    """[A_0, ..., A_L]: A_l [B] = E[tau] of the walk on the first `paths` paths cut to depth l
    (multipath.walk_tree's recursion; at depth l the cut tree stops with the reach there)."""
    target, draft = tree.target_rows[:, :paths], tree.draft_rows[:, :paths]
    tokens = ops.index_like(target, tree.tokens)[:, :paths]
    depth = tree.depth
    same = shared_prefix(tokens)  # [B, K', K', L+1]
    canon = canonical_paths(same)  # [B, K', L+1]
    reach = ops.zeros((tree.batch, paths), like=target)
    reach[:, 0] = 1
    slots = ops.arange(paths, canon)
    stopped = reach[:, 0] * 0  # sum_{i < l} i P(stop at depth i)
    out = [stopped]
    for i in range(depth):
        first = canon[:, :, i + 1] == slots[None, :]
        accepted = accept(i, paths, target[:, :, i], draft[:, :, i], same[:, :, :, i],
                          tokens[:, :, i], first)
        stopped = stopped + ops.total(reach * (1 - ops.total(accepted, -1)), -1) * i
        moved = ops.total(reach[:, :, None] * accepted, 1)  # [B, J] mass leaving via path j
        next_reach = reach * 0
        for j in range(paths):
            hit = canon[:, j, i + 1][..., None] == slots
            next_reach = next_reach + ops.where(hit, moved[:, j : j + 1], 0)
        reach = next_reach
        out.append(stopped + ops.total(reach, -1) * (i + 1))
    return out


def walk_grid(tree: DraftTree, cells: list[Cell], rule: Callable[..., Any]) -> dict[Cell, Array]:
    """A node-rule verifier (VerifierSpec.node_rule) at every cell: one walk per K'."""
    def accept(i, paths, target, draft, through, children, first):
        return rule(target, draft, through, children, first)[0]

    out: dict[Cell, Array] = {}
    for paths in sorted({k for k, _ in cells}):
        accepted = _walk(tree, paths, accept)
        for length in _lengths(cells, paths):
            out[(paths, length)] = accepted[length] + 1
    return out


def kseq_rho_counts(target: Array, draft: Array, counts: Array) -> Array:
    """rho [..., C] of SpecTr's K-SEQ for rows [..., V] and every count counts [..., C]:
    multipath._kseq_rho_bisection with the row's sort, gathers and prefix sums done once for
    all C counts (the same arithmetic per (row, count), so the same values). Torch rows."""
    positive = draft > 0
    ratio = torch.where(positive, target / torch.where(positive, draft, torch.ones_like(draft)),
                        torch.full_like(draft, float("inf")))
    order = _gbv.key_order(ratio)
    ratio_sorted = torch.gather(ratio, -1, order).contiguous()
    p_sorted, q_sorted = torch.gather(target, -1, order), torch.gather(draft, -1, order)
    zero = torch.zeros_like(p_sorted[..., :1])
    p_below = torch.cat([zero, torch.cumsum(p_sorted, -1)], -1)
    q_above = torch.cat([torch.flip(torch.cumsum(torch.flip(q_sorted, (-1,)), -1), (-1,)), zero],
                        -1)
    count_f = counts.to(target.dtype)
    mass = target.sum(-1)[..., None]

    def gap(rho: Array) -> Array:
        below = torch.searchsorted(ratio_sorted, rho.contiguous())  # [..., C]
        beta = torch.gather(p_below, -1, below) / rho + torch.gather(q_above, -1, below)
        return rho * beta - mass + torch.pow(mass - beta, count_f)

    one = torch.ones(counts.shape, dtype=target.dtype, device=target.device)
    low, high = one, torch.clamp_min(count_f, 1)
    high = torch.where(gap(one) >= 0, one, high)
    for _ in range(48 if target.dtype == torch.float64 else 26):
        middle = (low + high) / 2
        ok = gap(middle) >= 0
        high = torch.where(ok, middle, high)
        low = torch.where(ok, low, middle)
    return high


def spectr_grid(tree: DraftTree, cells: list[Cell]) -> dict[Cell, Array]:
    """SpecTr (multipath._spectr_rule) at every cell: rho of every slot's node row for every
    count n_K'(slot) = #{j < K' through the slot} in one bisection per depth (torch rows;
    exact rows: kseq_rho per K', as the rule), then one walk per K' of the acceptances."""
    target_all = tree.target_rows
    tokens = ops.index_like(target_all, tree.tokens)
    same = shared_prefix(tokens)  # [B, K, K, L+1]
    paths_all = tree.paths
    if ops.is_torch(target_all):
        counts = torch.cumsum(same[..., :-1].to(torch.int64), 2)  # [B, K0, K', L]: n for K'
        rho_all = [kseq_rho_counts(target_all[:, :, i], tree.draft_rows[:, :, i],
                                   counts[..., i]) for i in range(tree.depth)]  # [B, K0, K']

    def accept(i, paths, target, draft, through, children, first):
        if ops.is_torch(target):
            rho = rho_all[i][:, :paths, paths - 1]
        else:
            count = ops.total(ops.where(through, 1, 0), -1)
            rho = kseq_rho(target, draft, count, paths)
        return spectr_accepts(target, draft, through, children, rho, paths)

    out: dict[Cell, Array] = {}
    for paths in sorted({k for k, _ in cells}):
        if not 1 <= paths <= paths_all:
            raise ValueError(f"cells: K' must lie in [1, {paths_all}], got {paths}")
        accepted = _walk(tree, paths, accept)
        for length in _lengths(cells, paths):
            out[(paths, length)] = accepted[length] + 1
    return out


def grid_values(name: str, tree: DraftTree, cells: list[Cell]) -> dict[Cell, Array] | None:
    """{(K', L'): E[tau + 1] [B]} of the registered verifier `name` on the first K' paths of
    `tree` cut to depth L', for every cell, by its one-pass grid law; None when it has none."""
    spec = REGISTRY.get(name)
    if spec is None:  # unknown here: the caller's per-cell law names the known ones
        return None
    if getattr(spec.law, "grid", None) is not None:
        return spec.law.grid(tree, cells)
    if name == "nodeopt":
        return nodeopt_grid(tree, cells, **spec.options)
    if name in ("gbv", "gbv_clipped"):
        return gbv_grid(tree, cells, clip=name == "gbv_clipped")
    if name in GRIDS:
        return GRIDS[name](tree, cells)
    if spec.node_rule is not None and not spec.options:
        return walk_grid(tree, cells, spec.node_rule)
    return None


GRIDS: dict[str, Callable[[DraftTree, list[Cell]], dict[Cell, Array]]] = {
    "bv": bv_grid, "token": token_grid, "spectr": spectr_grid}
