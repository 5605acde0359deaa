"""Known failure modes of public speculative-decoding code, as samplers the audit must fail.

    speclp audit --sampler examples/broken_samplers.py:gbv_first_child_on_ties --unbatched --ties
    speclp audit --sampler examples/broken_samplers.py:traversal_path_order --unbatched --ties --paths 3
    speclp audit --sampler examples/broken_samplers.py:residual_at_drafted_only

The first two are plain per-draw samplers written from the published rules (docs/theory.md
sections 9.2, 10.8), independently of speclp's law functions, and each has a correct twin
built from the same code
(`gbv_token_id_ties`, `traversal_dfs_order`) that the audit passes, so a failure is the
bug, not the harness:

gbv_first_child_on_ties   GBV with the reference code's clipped key min(1, p/q); the
    greedy selection takes the FIRST drafted child (lowest path index) among the children
    of maximal ratio, while the skewed rows' CDF orders equal ratios by token id
    (docs/theory.md section 9.2, last paragraph: the two orders disagree on ties).
traversal_path_order      Traversal verification that takes the leaves in PATH order
    (path 0's leaf, then path 1's, ...), deleting upward after each rejection, instead of
    the post-order depth-first order (finish a subtree before leaving it).

Signature (unbatched): (target [K, L+1, V], draft [K, L, V], paths [K, L], rng) -> tokens.

Three more (PUBLIC_BUGS, at the end: residual_at_drafted_only, bonus_wrong_slice,
low_precision_ratio) are bugs of the kinds found in serving engines, written as exact laws,
so that each one's TV on an instance is exact; they are batched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from speclp.proofs.config_law import chain_law
from speclp.verifiers.law import BlockLaw, DraftTree

# ---------------------------------------------------------------------------
# GBV: select a path greedily, then block verification with the skewed rows
# ---------------------------------------------------------------------------


def _gbv(target: np.ndarray, draft: np.ndarray, paths: np.ndarray, rng: np.random.Generator,
         first_child_on_ties: bool) -> list[int]:
    count, depth = paths.shape
    vocab = target.shape[-1]
    alive = list(range(count))
    chosen = 0
    lam, mass = 0.0, 1.0  # q-mass of the paths ranked below the prefix, q-mass of the prefix
    skewed = []
    for i in range(depth):
        p, q = target[chosen, i], draft[chosen, i]
        ratio = np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)

        def below(x: int, q: np.ndarray = q, ratio: np.ndarray = ratio) -> float:
            """q-mass of the tokens whose (ratio, token id) key is lower than x's."""
            return float(sum(q[t] for t in range(vocab) if (ratio[t], t) < (ratio[x], x)))

        if first_child_on_ties:
            best = max(ratio[paths[k, i]] for k in alive)
            choice = next(k for k in alive if ratio[paths[k, i]] == best)
        else:
            choice = max(alive, key=lambda k: (ratio[paths[k, i]], paths[k, i]))
        token = int(paths[choice, i])
        top = (lam + mass) ** count - lam**count
        skewed.append(np.array([((lam + mass * (below(x) + q[x])) ** count
                                 - (lam + mass * below(x)) ** count) / top for x in range(vocab)]))
        lam += mass * below(token)
        mass *= q[token]
        alive = [k for k in alive if paths[k, i] == token]
        chosen = choice
    path = paths[chosen]
    # block verification of `path` against the skewed rows (docs/theory.md section 2.2)
    weights = [1.0]
    for i in range(depth):
        x = path[i]
        weights.append(min(1.0, weights[-1] * target[chosen, i, x] / skewed[i][x]))
    accepted = 0
    for i in range(1, depth + 1):
        if i < depth:
            residual = np.maximum(weights[i] * target[chosen, i] - skewed[i], 0.0)
            mass_z = residual.sum()
            h = mass_z / (mass_z + 1 - weights[i]) if mass_z + 1 - weights[i] > 0 else 0.0
        else:
            h = weights[depth]
        if rng.random() <= h:
            accepted = i
    if accepted == depth:
        row = target[chosen, depth]
    else:
        row = np.maximum(weights[accepted] * target[chosen, accepted] - skewed[accepted], 0.0)
    token = int(rng.choice(vocab, p=row / row.sum()))
    return [int(t) for t in path[:accepted]] + [token]


def gbv_first_child_on_ties(target, draft, paths, rng):
    """BROKEN: clipped-key GBV whose selection takes the first child among equal ratios."""
    return _gbv(target, draft, paths, rng, first_child_on_ties=True)


def gbv_token_id_ties(target, draft, paths, rng):
    """Correct twin: selection and CDF both use the (min(1, p/q), token id) key."""
    return _gbv(target, draft, paths, rng, first_child_on_ties=False)


# ---------------------------------------------------------------------------
# traversal verification
# ---------------------------------------------------------------------------


class _Node:
    def __init__(self, prefix: tuple, parent: _Node | None, p: np.ndarray, q: np.ndarray | None):
        self.prefix, self.parent = prefix, parent
        self.p = p.astype(np.float64).copy()
        self.q = None if q is None else q.astype(np.float64).copy()
        self.children: list[_Node] = []  # in order of first appearance
        self.weight: float | None = 1.0 if parent is None else None


def _tree(target: np.ndarray, draft: np.ndarray, paths: np.ndarray) -> tuple[_Node, dict]:
    count, depth = paths.shape
    root = _Node((), None, target[0, 0], draft[0, 0])
    nodes = {(): root}
    for k in range(count):
        for i in range(1, depth + 1):
            prefix = tuple(int(t) for t in paths[k, :i])
            if prefix not in nodes:
                parent = nodes[prefix[:-1]]
                node = _Node(prefix, parent, target[k, i], draft[k, i] if i < depth else None)
                parent.children.append(node)
                nodes[prefix] = node
    return root, nodes


def _enter(node: _Node) -> None:
    """Set the weights on the way down from the parents' current rows."""
    chain = []
    while node.parent is not None and node.weight is None:
        chain.append(node)
        node = node.parent
    for child in reversed(chain):
        parent, token = child.parent, child.prefix[-1]
        child.weight = min(1.0, parent.weight * parent.p[token] / parent.q[token])


def _test(node: _Node, rng: np.random.Generator) -> list[int] | None:
    """Accept w.p. the node's weight (emit it + Y ~ its current row); else delete it."""
    if node.parent is None or rng.random() < node.weight:
        row = node.p / node.p.sum()
        return list(node.prefix) + [int(rng.choice(len(row), p=row))]
    parent, token = node.parent, node.prefix[-1]
    raw = np.maximum(parent.weight * parent.p - parent.q, 0.0)
    mass = raw.sum()
    if mass > 0:
        parent.p = raw / mass
    parent.weight = mass / (mass + 1 - parent.weight) if mass + 1 - parent.weight > 0 else 0.0
    q = parent.q.copy()
    q[token] = 0.0
    parent.q = q / q.sum() if q.sum() > 0 else q
    parent.children.remove(node)
    return None


def _first_leaf(node: _Node) -> _Node:
    while node.children:
        node = node.children[0]
    return node


def _traversal(target, draft, paths, rng, path_order: bool) -> list[int]:
    root, nodes = _tree(target, draft, paths)
    if not path_order:  # post-order DFS: always the first leaf of the remaining tree
        while True:
            leaf = _first_leaf(root)
            _enter(leaf)
            out = _test(leaf, rng)
            if out is not None:
                return out
    for k in range(paths.shape[0]):  # BROKEN: leaves in path order
        node = nodes[tuple(int(t) for t in paths[k])]
        if node.parent is not None and node not in node.parent.children:
            continue  # this path's leaf was deleted already (a duplicate path)
        while True:
            if node.children:
                break
            _enter(node)
            parent = node.parent
            out = _test(node, rng)
            if out is not None:
                return out
            node = parent
    return _test(root, rng)


def traversal_path_order(target, draft, paths, rng):
    """BROKEN: traversal verification residualising nodes in path order."""
    return _traversal(target, draft, paths, rng, path_order=True)


def traversal_dfs_order(target, draft, paths, rng):
    """Correct twin: post-order depth-first (the first leaf of the remaining tree)."""
    return _traversal(target, draft, paths, rng, path_order=False)


# ---------------------------------------------------------------------------
# three bugs of public serving code, written as exact laws (their TV is exact)
# ---------------------------------------------------------------------------
#
# Each is token-level speculative sampling on path 0 of the drafted tree (accept X_i with
# probability min(1, p(X_i)/q(X_i)); on rejection emit a token of the residual
# (p - q)^+ / sum; after L acceptances a bonus token of p(.|X_1..X_L)) with ONE bug. They are
# written as law functions DraftTree -> BlockLaw (torch, float64), so that
# speclp.verifiers.exact.exact_result gives each one's exact output law and TV on any
# instance, and their samplers draw from that law (law_samplers.sampler_from_law, batched).
# With the bug switched off each law is the registered `token` verifier (TV exactly 0; tests).

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
from law_samplers import sampler_from_law  # noqa: E402


def _round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to `bits` significant bits (a low-precision float; fp8 e4m3 keeps 4)."""
    mantissa, exponent = torch.frexp(x)
    return torch.ldexp(torch.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


def token_level_law(tree: DraftTree, bug: str | None = None) -> BlockLaw:
    """Token-level speculative sampling on path 0 as a law, with an optional bug:

    "residual_at_drafted_only"  the residual subtracts q only at the drafted token:
        r(t) = p(t) for t != X_i, (p(X_i) - q(X_i))^+ at X_i (instead of (p - q)^+ everywhere)
    "bonus_wrong_slice"  the bonus token after L acceptances is drawn from the target row of the
        LAST drafted path (tree row K-1, depth L) instead of path 0's: a wrong logits slice of
        a flattened tree (harmless where the paths agree)
    "low_precision_ratio"  the acceptance test reads p and q rounded to 3 significant bits (a
        low-precision float, coarser than fp8 e4m3), the residual is computed in float64
    """
    p_all, q_all = tree.target_rows[:, 0], tree.draft_rows[:, 0]  # [B, L+1, V], [B, L, V]
    x = tree.tokens[:, 0]  # [B, L]
    batch, depth = x.shape
    px = p_all[:, :depth].gather(-1, x[..., None])[..., 0]
    qx = q_all.gather(-1, x[..., None])[..., 0]
    if bug == "low_precision_ratio":
        px_test, qx_test = _round_mantissa(px, 3), _round_mantissa(qx, 3)
    else:
        px_test, qx_test = px, qx
    accept = torch.where(qx_test > 0, torch.clamp(px_test / qx_test.clamp_min(1e-300), max=1.0),
                         torch.zeros_like(px))
    residual = torch.clamp(p_all[:, :depth] - q_all, min=0.0)
    if bug == "residual_at_drafted_only":
        at_x = torch.nn.functional.one_hot(x, p_all.shape[-1]).to(residual.dtype)
        residual = p_all[:, :depth] * (1 - at_x) + residual * at_x
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-300), p_all[:, :depth])
    bonus = tree.target_rows[:, -1 if bug == "bonus_wrong_slice" else 0, depth]
    return chain_law(tree, accept, residual, bonus)


PUBLIC_BUGS = ("residual_at_drafted_only", "bonus_wrong_slice", "low_precision_ratio")


def public_bug_law(bug: str):
    """The law function of one of PUBLIC_BUGS (for exact_result)."""
    if bug not in PUBLIC_BUGS:
        raise KeyError(bug)
    return lambda tree: token_level_law(tree, bug)


residual_at_drafted_only = sampler_from_law(public_bug_law("residual_at_drafted_only"),
                                            "residual_at_drafted_only")
bonus_wrong_slice = sampler_from_law(public_bug_law("bonus_wrong_slice"), "bonus_wrong_slice")
low_precision_ratio = sampler_from_law(public_bug_law("low_precision_ratio"),
                                       "low_precision_ratio")
token_level_fixed = sampler_from_law(token_level_law, "token_level_fixed")  # the correct twin
