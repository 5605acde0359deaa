"""Coarsened instances: a certified UPPER bound on the K-path optimum of a huge vocabulary.

The K-path optimum of a real pair (docs/theory.md section 4.1; the bound: section 13.1)
lives on V^L paths with V = 151,936: no LP can hold it for L >= 2. A coarsened instance
keeps, at every *kept* node u, a set S(u) of M tokens (chosen from the real rows, e.g. the
top-M of p + q) and lumps every other token into one remainder token R:

    p'(t | u) = p(t | u),  q'(t | u) = q(t | u)        for t in S(u)
    p'(R | u) = 1 - p(S(u) | u),  q'(R | u) = 1 - q(S(u) | u)
    below R: target = draft = "R again" (one-hot), to depth L.

The kept nodes are the prefixes made of kept tokens only (M^d of them at depth d); the
model's rows are needed at the kept nodes of depth 0..L-1 only (rows at depth L give the
bonus token, which the optimum of E[tau + 1] does not depend on; they are set to R).
The coarse instance has vocabulary M + 1 (slot M is R) and depth L.

Claim: for K i.i.d. drafted paths, OPT(coarse) >= OPT(fine).

Proof. Let phi map a fine sequence to its coarse image: kept tokens stay while the prefix
is kept; the first token outside S(prefix) and everything after it become R. phi maps
prefixes to prefixes, and by construction the coarse rows are the push-forward of the
fine rows: for every coarse node c, the law of phi(next token) under the fine rows at any
fine node u with phi(u) = c is p'(. | c) (and q'(. | c)). At a kept node this is the
definition; below R both sides are "R" with probability 1. Hence phi(X) ~ q' when X ~ q
(paths of length L), and phi(Z) ~ p' when Z ~ p (sequences of length L + 1).
Take any lossless prefix-matching verifier F of the fine instance with K i.i.d. drafts.
Build a verifier F' of the coarse instance: given coarse drafts X'_1..X'_K (i.i.d. q'),
draw fine drafts X_k from q conditioned on phi(X_k) = X'_k, independently (the fine
drafts are then K i.i.d. draws from q); run F on them, which outputs an accepted prefix
(X_k1..X_ktau) of some drafted path and a correction Y; output phi of that block. It is
an accepted prefix of the coarse draft X'_k = phi(X_k) with the same tau, plus one token.
Losslessness: let O be F's output block and Z = O continued by fine target sampling to
length L + 1, so Z ~ p. Given O, phi(Z) is phi(O) continued by the push-forward of the
fine continuation, which is the coarse continuation from phi(O) (at kept nodes by the
push-forward property, below R deterministically). So phi(O) continued by coarse target
sampling has the law of phi(Z), i.e. p': F' is lossless and valid for the coarse LP, with
E'[tau + 1] = E[tau + 1]. The coarse optimum is therefore at least every fine verifier's
block efficiency, hence at least the fine optimum. (F' may read all rows and use extra
randomness: the information-agnostic LP allows both.) When nothing is lumped (p and q
put no mass outside S(u) anywhere) the coarse instance is the fine one with a token of
probability 0, and the optima are equal. The argument needs i.i.d. drafting: distinct
fine paths may share a coarse image, so drafting WITHOUT replacement does not map to
drafting without replacement.

Functions here build coarse instances from kept-node rows (real models:
``decode.tree_rows.tree_rows``) or from a small fine instance (tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.drafts import count_configurations
from ..verifiers.exact import enumeration_size, exact_result
from ..verifiers.ragged import ragged_model, ragged_node_mass, ragged_work
from ..verifiers.registry import get_verifier
from ..verifiers.structure import evaluation_kind, rule_evaluations
from ..verifiers.tree import all_paths, depth_offset, num_nodes
from .instance import Instance, from_rows

SELECT = ("mix", "target", "draft")  # how a fine instance's kept tokens are chosen


BELOW_R = ("again", "terminal")  # the draft below R: "R again" (Theorem 13.1) or slot 0


def check_kept_rows(target_kept: Any, draft_kept: Any, width: int, depth: int, below_r: str) -> int:
    """The checks of a kept tree's rows (coarsened_rows, lp.coarse_lp.ragged_coarse): below_r
    known, width and depth >= 1, both rows [kept nodes, width]; returns the kept node count."""
    if below_r not in BELOW_R:
        raise ValueError(f"below_r must be one of {BELOW_R}, got {below_r!r}")
    if width < 1 or depth < 1:
        raise ValueError(f"need width >= 1 and depth >= 1, got {width}, {depth}")
    kept_nodes = sum(width**d for d in range(depth))
    for name, rows in (("target", target_kept), ("draft", draft_kept)):
        if np.shape(rows) != (kept_nodes, width):
            raise ValueError(f"{name}_kept: expected shape {(kept_nodes, width)}, got {np.shape(rows)}")
    return kept_nodes


def coarsened_rows(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
                   below_r: str = "again") -> tuple[np.ndarray, np.ndarray]:
    """Rows [N', M + 1] of the coarse instance (N' = num_nodes(M + 1, L), shortlex).

    target_kept, draft_kept: [(M^L - 1)/(M - 1), M] the fine probabilities p(t | u),
    q(t | u) of the M kept children of every kept node u of depth 0..L-1, in shortlex
    order over the M child slots (float64, or object arrays of Fractions for exact rows).
    Slot M of the coarse vocabulary is the remainder R. below_r "again": below R both rows
    are R (one-hot, Theorem 13.1); "terminal": the target row is R and the draft row is
    slot 0 (one-hot), so no lossless verifier accepts a token below R (docs/theory.md
    section 13.5, Lemma 13.4).
    """
    check_kept_rows(target_kept, draft_kept, width, depth, below_r)
    exact = target_kept.dtype == object
    vocab = width + 1
    one = Fraction(1) if exact else 1.0
    zero = Fraction(0) if exact else 0.0
    rows_t = np.full((num_nodes(vocab, depth), vocab), zero, dtype=object if exact else np.float64)
    rows_d = rows_t.copy()
    rows_t[:, width] = one  # every row defaults to "R" (below R, and the bonus rows at depth L)
    rows_d[:, width] = one
    if below_r == "terminal" and width > 0:
        rows_d[:, width] = zero
        rows_d[:, 0] = one
    for d in range(depth):
        prefixes = all_paths(vocab, d) if d else np.zeros((1, 0), dtype=np.int64)  # [V'^d, d]
        kept = ~(prefixes == width).any(axis=1)
        code = np.zeros(len(prefixes), dtype=np.int64)
        for i in range(d):
            code = code * width + prefixes[:, i]
        fine_index = (sum(width**j for j in range(d)) + code)[kept]  # kept-node index
        coarse_index = depth_offset(vocab, d) + np.nonzero(kept)[0]
        for rows, source in ((rows_t, target_kept), (rows_d, draft_kept)):
            block = source[fine_index]  # [n, M]
            rest = one - block.sum(axis=1)
            if not exact:
                rest = np.maximum(rest, 0.0)  # rounding of a row that is fully kept
            rows[coarse_index, :width] = block
            rows[coarse_index, width] = rest
    return rows_t, rows_d


def coarsened_instance(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
                       name: str = "coarsened", below_r: str = "again") -> Instance:
    """The coarse instance (vocabulary M + 1, depth L) of `coarsened_rows`."""
    rows_t, rows_d = coarsened_rows(target_kept, draft_kept, width, depth, below_r)
    inst = from_rows(rows_t, rows_d, depth, name=name)
    if below_r == "again":
        inst.notes.append(f"coarsened: top-{width} tokens kept per node, the rest lumped into a "
                          "remainder token accepted to depth L (upper bound on the fine optimum)")
    else:
        inst.notes.append(f"coarsened (terminal R): top-{width} tokens kept per node, the rest "
                          "lumped into a remainder token below which nothing is accepted "
                          "(upper bound on the fine optimum after adding tail_bound)")
    return inst


def kept_tokens(target: np.ndarray, draft: np.ndarray, width: int, select: str = "mix"
                ) -> np.ndarray:
    """[n, M] the M kept tokens of every row (rows [n, V]): top-M of p + q ("mix"), of p
    ("target") or of q ("draft"); ties by token id. Works on float or exact rows."""
    if select not in SELECT:
        raise ValueError(f"select must be one of {SELECT}, got {select!r}")
    score = {"mix": target + draft, "target": target, "draft": draft}[select]
    score = np.asarray(score, dtype=np.float64) if score.dtype != object else score
    out = np.empty((len(score), width), dtype=np.int64)
    for i, row in enumerate(score):
        out[i] = sorted(range(len(row)), key=lambda t: (-row[t], t))[:width]
    return out


def kept_edges(instance: Instance, width: int, select: str = "mix", exact: bool | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept tree of a (small) fine instance: (target_kept, draft_kept, tokens), each
    [n, M] over the n = sum_(d < L) M^d kept nodes in shortlex order over the child slots:
    the fine probabilities p(t|u), q(t|u) of the M kept tokens t of every kept node u (as
    `decode.tree_rows.TreeRows.target_edge` / `draft_edge` on a real pair), and the tokens.

    The kept tokens at every kept node are chosen by `kept_tokens`; kept nodes are the
    fine prefixes of kept tokens. exact (default: the instance is rational) takes the
    probabilities from the fine instance's exact rows.
    """
    vocab, depth = instance.vocab_size, instance.depth
    if not 1 <= width <= vocab:
        raise ValueError(f"width must be in 1..{vocab}, got {width}")
    exact = instance.rational if exact is None else exact
    target = instance.target_exact if exact else instance.target
    draft = instance.draft_exact if exact else instance.draft
    kept_nodes = sum(width**d for d in range(depth))
    tokens = np.zeros((kept_nodes, width), dtype=np.int64)
    fine_node = np.zeros(kept_nodes, dtype=np.int64)  # fine node of every kept node
    level = [0]  # kept-node indices of the current depth
    next_index = 1
    for d in range(depth):
        children = []
        for k in level:
            u = fine_node[k]
            choice = kept_tokens(instance.target[u : u + 1], instance.draft[u : u + 1], width,
                                 select)[0]
            tokens[k] = choice
            if d + 1 < depth:
                for t in choice:
                    fine_node[next_index] = u * vocab + 1 + t  # shortlex child index
                    children.append(next_index)
                    next_index += 1
        level = children
    rows = np.arange(kept_nodes)[:, None]
    return target[fine_node[rows], tokens], draft[fine_node[rows], tokens], tokens


def coarsen_instance(instance: Instance, width: int, select: str = "mix",
                     exact: bool | None = None, below_r: str = "again"
                     ) -> tuple[Instance, np.ndarray]:
    """Coarsen a (small) fine instance: returns (coarse instance, kept tokens [n, M]) (the
    kept tree of `kept_edges`)."""
    target_kept, draft_kept, tokens = kept_edges(instance, width, select, exact)
    coarse = coarsened_instance(target_kept, draft_kept, width, instance.depth,
                                name=f"{instance.name}-coarse{width}", below_r=below_r)
    return coarse, tokens


def describe_coarsening(target_kept: np.ndarray, draft_kept: np.ndarray) -> dict[str, Any]:
    """Lumped mass summary: mean / max remainder target and draft mass over kept nodes."""
    rest_t = 1 - np.asarray(target_kept, dtype=np.float64).sum(axis=1)
    rest_d = 1 - np.asarray(draft_kept, dtype=np.float64).sum(axis=1)
    return {"remainder_target_mean": float(rest_t.mean()), "remainder_target_max": float(rest_t.max()),
            "remainder_draft_mean": float(rest_d.mean()), "remainder_draft_max": float(rest_d.max()),
            "remainder_target_root": float(rest_t[0]), "remainder_draft_root": float(rest_d[0])}


# ---------------------------------------------------------------------------------------
# kept credit: the bracket of docs/theory.md section 13.5


def kept_credit(width: int, depth: int) -> np.ndarray:
    """[num_nodes(M + 1, L)] int: 1 + the number of leading kept tokens of every coarse node
    (shortlex; slot M is R). An output block ending at coarse node n is credited this many
    tokens by the kept-credit objective (the tokens after the first R are not counted)."""
    vocab = width + 1
    parts = [np.ones(1, dtype=np.int64)]
    for d in range(1, depth + 1):
        prefixes = all_paths(vocab, d)  # [V'^d, d] lexicographic = shortlex order of depth d
        is_r = prefixes == width
        leading = np.where(is_r.any(axis=1), is_r.argmax(axis=1), d)
        parts.append(1 + leading)
    return np.concatenate(parts)


def kept_value(emit: np.ndarray, width: int, depth: int, overlap: np.ndarray | None = None) -> Any:
    """E[kept credit of the output node] from a coarse law aggregated by node (emit [N', M+1],
    verifiers.exact.ExactResult.emit): the block efficiency of the fine verifier that runs
    the coarse one and ends its block at the first R (section 13.5, Lemma 13.3).

    overlap [n kept nodes] (optional, `exit_overlap` of every kept node): also credit an
    accepted R at kept node u with overlap[u], the probability that the maximal coupling of
    the lumped draft token with a fresh lumped target token keeps the drafted one (section
    13.6, Lemma 13.8)."""
    credit = kept_credit(width, depth)
    mass = emit.sum(axis=1)
    value = (mass * credit).sum()
    if overlap is not None:
        bonus = exit_bonus(overlap, width, depth)
        if emit.dtype != object:
            bonus = bonus.astype(np.float64)
        value = value + (mass * bonus).sum()
    return value


def exit_bonus(overlap: np.ndarray, width: int, depth: int) -> np.ndarray:
    """[num_nodes(M + 1, L)]: overlap[u] for every coarse node whose first R follows the kept
    node u (u in the complete M-ary layout: children of n are M n + 1 + j), 0 for the
    nodes without R."""
    overlap = np.asarray(overlap)
    vocab = width + 1
    parts = [np.zeros(1, dtype=overlap.dtype)]
    for d in range(1, depth + 1):
        prefixes = all_paths(vocab, d)
        index = np.zeros(len(prefixes), dtype=np.int64)  # kept node of the prefix so far
        exit_at = np.full(len(prefixes), -1, dtype=np.int64)
        for i in range(d):
            token = prefixes[:, i]
            fresh = (exit_at < 0) & (token == width)
            exit_at[fresh] = index[fresh]
            going = (exit_at < 0) & (token != width)
            index[going] = width * index[going] + 1 + token[going]
        part = np.zeros(len(prefixes), dtype=overlap.dtype)
        if overlap.dtype == object:
            part[:] = 0
        has = exit_at >= 0
        part[has] = overlap[exit_at[has]]
        parts.append(part)
    return np.concatenate(parts)


EXIT_MARGIN = 1e-9  # relative: a float64 overlap is lowered by this (section 13.6)


def exit_overlap(target_row: np.ndarray, draft_row: np.ndarray, kept: Any) -> Any:
    """beta(u) = sum over tokens x outside the kept set of min(p(x|u) / P, q(x|u) / Q), with P,
    Q the rows' masses outside it: the probability that a maximal coupling of a lumped draft
    token (law q restricted outside, renormalised) with a fresh lumped target token (p, the
    same) gives the same token (0 when P or Q is 0). Exact on rows of Fractions; on float64
    rows it is lowered by the relative EXIT_MARGIN, which covers the rounding of the sums
    (at most V 2^-53 relative) so it stays a certified lower bound (section 13.6)."""
    outside = np.ones(len(target_row), dtype=bool)
    outside[np.asarray(list(kept), dtype=np.int64)] = False
    p_out, q_out = target_row[outside], draft_row[outside]
    if np.asarray(target_row).dtype == object:
        big_p, big_q = sum(p_out, Fraction(0)), sum(q_out, Fraction(0))
        if big_p == 0 or big_q == 0:
            return Fraction(0)
        return sum((min(a * big_q, b * big_p) for a, b in zip(p_out, q_out, strict=True)),
                   Fraction(0)) / (big_p * big_q)
    p_out, q_out = np.asarray(p_out, np.float64), np.asarray(q_out, np.float64)
    big_p, big_q = float(p_out.sum()), float(q_out.sum())
    if big_p <= 0 or big_q <= 0:
        return 0.0
    beta = float(np.minimum(p_out / big_p, q_out / big_q).sum())
    return max(0.0, min(1.0, beta) * (1.0 - EXIT_MARGIN))


def _check_kept(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int) -> None:
    kept_nodes = sum(width**d for d in range(depth))
    for name, rows in (("target_kept", target_kept), ("draft_kept", draft_kept)):
        if np.shape(rows) != (kept_nodes, width):
            raise ValueError(f"{name}: expected shape {(kept_nodes, width)}, got {np.shape(rows)}")


def _exact_row(rows: np.ndarray, n: int) -> list[Fraction]:
    """Row n as Fractions (floats at their exact binary values)."""
    return [x if isinstance(x, Fraction) else Fraction(x) for x in np.asarray(rows)[n]]


def kept_masses(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p(z), q(z), |z|) of every kept node z of depth 0..L (M-ary shortlex over the child
    slots; children of node n are M n + 1 + j), exact Fractions (floats at their binary
    values): the fine path probabilities, products of the kept edges. Below a node of
    probability 0 under both rows (a dummy of a padded tree) everything is 0 without
    being multiplied out."""
    _check_kept(target_kept, draft_kept, width, depth)
    count = sum(width**d for d in range(depth + 1))
    zero = Fraction(0)
    p = np.full(count, zero, dtype=object)
    q = np.full(count, zero, dtype=object)
    level = np.zeros(count, dtype=np.int64)
    start = 0
    for d in range(depth + 1):
        level[start : start + width**d] = d
        start += width**d
    p[0], q[0] = Fraction(1), Fraction(1)
    for n in range(len(target_kept)):
        if p[n] == 0 and q[n] == 0:
            continue
        row_p, row_q = _exact_row(target_kept, n), _exact_row(draft_kept, n)
        for j in range(width):
            child = width * n + 1 + j
            p[child], q[child] = p[n] * row_p[j], q[n] * row_q[j]
    return p, q, level


def tail_bound(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
               paths: int, skip: int = 0, masses: Any = None) -> Fraction:
    """Certified bound on the expected number of accepted fine nodes outside the kept tree
    at least `skip` + 1 levels below their last kept ancestor (section 13.5, Lemma 13.2),
    exact:

        T_K = sum over kept nodes u of depth d < L of
              (L - d - skip)_+ min( p(u) (1 - p(S(u)|u)),  K q(u) (1 - q(S(u)|u)) ),

    a negative remainder (rounding of a fully kept float row) counted as 0. skip 0: every
    node outside the kept tree (Theorem 13.5); skip 1: the first-exit nodes are left out
    (they are counted by the terminal coarse LP, Theorem 13.6). masses: `kept_masses` of
    the same rows when already computed."""
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    p, q, level = masses if masses is not None else kept_masses(target_kept, draft_kept, width,
                                                                  depth)
    total = Fraction(0)
    for n in range(len(target_kept)):
        if p[n] == 0 and q[n] == 0:  # its term is min(0, 0)
            continue
        levels = max(0, depth - int(level[n]) - skip)
        if levels == 0:
            continue
        rest_p = max(Fraction(0), 1 - sum(_exact_row(target_kept, n)))
        rest_q = max(Fraction(0), 1 - sum(_exact_row(draft_kept, n)))
        total += levels * min(p[n] * rest_p, paths * q[n] * rest_q)
    return total


def prefix_upper_bound(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
                       paths: int, masses: Any = None) -> Fraction:
    """Certified upper bound on the fine K-path optimum without any LP (section 13.5,
    Theorem 13.5): 1 + sum over kept nodes z of depth 1..L of min(p(z), 1 - (1 - q(z))^K),
    plus tail_bound. Exact (floats at their binary values). masses: as tail_bound."""
    if masses is None:
        masses = kept_masses(target_kept, draft_kept, width, depth)
    p, q, _ = masses
    head = Fraction(1)
    for z in range(1, len(p)):
        if p[z] != 0:  # min(0, 1 - (1 - q)^K) = 0
            head += min(p[z], 1 - (1 - q[z]) ** paths)
    return head + tail_bound(target_kept, draft_kept, width, depth, paths, masses=masses)


def kept_lower_values(coarse: Instance, width: int, paths: int, names: list[str],
                      max_size: int = 2_000_000, overlap: np.ndarray | None = None
                      ) -> dict[str, Any]:
    """{verifier: kept value} for every named lossless i.i.d. verifier whose exact law on the
    coarse instance costs at most max_size evaluations (verifiers.exact.enumeration_size):
    the exact block efficiency of a lossless FINE verifier (section 13.5, Lemma 13.3), so a
    lower bound on the fine optimum. Exact on a rational coarse instance, float64 otherwise.
    Verifiers too costly to evaluate are left out (listed under "skipped"). overlap: the
    exit credit of `kept_value` (section 13.6, Lemma 13.8)."""
    model = coarse.model(exact=coarse.rational)
    values: dict[str, Any] = {}
    skipped = []
    for name in names:
        if enumeration_size(model, name, paths) > max_size:
            skipped.append(name)
            continue
        values[name] = kept_value(exact_result(model, name, paths=paths).emit, width, coarse.depth,
                                  overlap)
    return {"values": values, "skipped": skipped}


# ---------------------------------------------------------------------------------------
# mass-driven (non-uniform) kept trees: docs/theory.md section 13.6


def kept_count(target_row: np.ndarray, draft_row: np.ndarray, order: np.ndarray, reach_p: float,
               reach_q: float, levels: int, cap: int, epsilon: float, paths: int) -> int:
    """How many of the tokens `order` (best first, at most cap) a kept node keeps: the fewest
    k such that its lumped weight levels * min(p(u) p(rest_k|u), K q(u) q(rest_k|u)) (its
    share of the tail of Lemma 13.2) is at most epsilon, else cap. reach_p, reach_q: p(u),
    q(u); rows: the node's full rows (float64). Any choice keeps every bound valid (the kept
    sets only have to be fixed before the bounds are computed); this one expands the tree
    where the lumped mass is, and keeps nothing at a node of small path mass."""
    top_p = np.concatenate([[0.0], np.cumsum(np.asarray(target_row, np.float64)[order[:cap]])])
    top_q = np.concatenate([[0.0], np.cumsum(np.asarray(draft_row, np.float64)[order[:cap]])])
    weight = levels * np.minimum(reach_p * np.maximum(1.0 - top_p, 0.0),
                                 paths * reach_q * np.maximum(1.0 - top_q, 0.0))
    small = np.nonzero(weight <= epsilon)[0]
    return int(small[0]) if len(small) else min(cap, len(order))


def depth_caps(cap: int, depth: int, max_paths: int | None = 40_000) -> list[int]:
    """Per-depth caps of a mass-driven tree: cap 2^(L-1-d) at depth d (the root widest: its
    lumped mass has the most levels below it), each at most the largest W with
    (W + 1)^L <= max_paths (the padded coarse LP's paths; None: no such bound, for trees
    that are never padded: docs/theory.md 13.7)."""
    if cap < 1 or depth < 1:
        raise ValueError(f"need cap >= 1 and depth >= 1, got {cap}, {depth}")
    if max_paths is None:
        return [cap * 2 ** (depth - 1 - d) for d in range(depth)]
    top = 1
    while (top + 2) ** depth <= max_paths:
        top += 1
    return [max(1, min(cap * 2 ** (depth - 1 - d), top)) for d in range(depth)]


def padded_edges(nodes: list[dict[str, Any]], depth: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """A non-uniform kept tree in the complete-tree layout of `coarsened_rows`.

    nodes: the kept nodes of depth 0..L-1 (root first), each {"parent": index in nodes or
    None, "slot": its slot under the parent, "tokens": [k] kept tokens, "p", "q": [k] their
    full-vocabulary edge probabilities}. The slot width W is the largest k (at least 1); a
    node keeping k < W tokens gets W - k dummy slots of probability 0 under both rows, and
    slots below a dummy (or below a node of depth L - 1) are dummies too. Returns
    (target_edge, draft_edge, tokens (-1 for dummies), W), each [sum_(d<L) W^d, W], and
    overlap [sum_(d<L) W^d]: every node's "overlap" (`exit_overlap`; 0 where not given).
    Dummy tokens change no optimum and no verifier's value (docs/theory.md section 13.6)."""
    width = max([1] + [len(n["tokens"]) for n in nodes])
    count = sum(width**d for d in range(depth))
    exact = any(isinstance(x, Fraction) for n in nodes for x in list(n["p"]) + list(n["q"]))
    zero = Fraction(0) if exact else 0.0
    te = np.full((count, width), zero, dtype=object if exact else np.float64)
    de = te.copy()
    tokens = np.full((count, width), -1, dtype=np.int64)
    index = np.zeros(len(nodes), dtype=np.int64)  # complete-tree index of every kept node
    overlap = np.full(count, zero, dtype=object if exact else np.float64)
    for i, node in enumerate(nodes):
        if node["parent"] is not None:
            index[i] = width * index[node["parent"]] + 1 + node["slot"]
        k = len(node["tokens"])
        te[index[i], :k], de[index[i], :k] = node["p"], node["q"]
        tokens[index[i], :k] = node["tokens"]
        overlap[index[i]] = node.get("overlap", zero)
    return te, de, tokens, width, overlap


def mass_kept_edges(instance: Instance, cap: int, epsilon: float, paths: int,
                    exact: bool | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]:
    """The mass-driven kept tree of a (small) fine instance: at every kept node the top
    tokens of p + q (ties by id), as many as `kept_count` asks; the children of kept tokens
    are kept nodes. Returns `padded_edges` (exact Fractions on a rational instance unless
    exact is False). The same rule as `experiments.realgap.mass_tree_rows` on a real pair:
    at depth d at most `depth_caps(cap, L)[d]` tokens."""
    vocab, depth = instance.vocab_size, instance.depth
    exact = instance.rational if exact is None else exact
    target = instance.target_exact if exact else instance.target
    draft = instance.draft_exact if exact else instance.draft
    nodes: list[dict[str, Any]] = []
    caps = depth_caps(cap, depth)
    level = [(None, 0, 0, 1.0, 1.0)]  # (parent, slot, fine node, p(u), q(u))
    for d in range(depth):
        children = []
        for parent, slot, u, reach_p, reach_q in level:
            order = kept_tokens(instance.target[u : u + 1], instance.draft[u : u + 1], vocab)[0]
            k = kept_count(instance.target[u], instance.draft[u], order, reach_p, reach_q,
                           depth - d, caps[d], epsilon, paths)
            chosen = [int(t) for t in order[:k]]
            nodes.append({"parent": parent, "slot": slot, "tokens": chosen,
                          "p": [target[u, t] for t in chosen], "q": [draft[u, t] for t in chosen],
                          "overlap": exit_overlap(target[u], draft[u], chosen)})
            here = len(nodes) - 1
            if d + 1 < depth:
                children += [(here, j, u * vocab + 1 + t, reach_p * float(instance.target[u, t]),
                              reach_q * float(instance.draft[u, t])) for j, t in enumerate(chosen)]
        level = children
    return padded_edges(nodes, depth)


# ---------------------------------------------------------------------------------------
# ragged kept trees: the same bounds without the complete W-ary layout (docs/theory.md 13.7)


@dataclass
class KeptTree:
    """A kept tree without padding: every kept node of depth 0..L-1 with its own kept slots.

    parent [n] (-1 at the root; parents before children), slot [n] (its slot under the
    parent), level [n]; p[n], q[n]: the full-vocabulary probabilities of node n's kept
    tokens (slot order; floats or Fractions); child[n]: the kept node of every slot (-1 at
    depth L - 1, whose kept children are depth-L leaves without rows); overlap[n]:
    `exit_overlap` of every node (None: no exit credit). width: the widest kept set (the
    coarse vocabulary is width + 1, slot width being the remainder R), at least 1."""

    depth: int
    width: int
    parent: np.ndarray
    slot: np.ndarray
    level: np.ndarray
    p: list[list[Any]]
    q: list[list[Any]]
    child: list[list[int]]
    overlap: list[Any] | None = None

    @property
    def exact(self) -> bool:
        return any(isinstance(x, Fraction) for row in self.p + self.q for x in row)

    def __len__(self) -> int:
        return int(len(self.parent))

    def kept_tokens(self) -> int:
        return int(sum(len(row) for row in self.p))

    def padded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(target_edge, draft_edge, overlap) in the complete W-ary layout of `padded_edges`
        (tokens omitted): for the padded computations, on small trees only."""
        nodes = [{"parent": None if self.parent[n] < 0 else int(self.parent[n]),
                  "slot": int(self.slot[n]), "tokens": list(range(len(self.p[n]))),
                  "p": self.p[n], "q": self.q[n],
                  **({} if self.overlap is None else {"overlap": self.overlap[n]})}
                 for n in range(len(self))]
        te, de, _, width, overlap = padded_edges(nodes, self.depth)
        if width != self.width:  # a tree whose widest node was cut: pad to self.width
            raise ValueError(f"width: the tree is {width} wide, not {self.width}")
        return te, de, overlap


def kept_tree(nodes: list[dict[str, Any]], depth: int) -> KeptTree:
    """The KeptTree of `padded_edges`'s nodes (root first, parents before children; each
    {"parent", "slot", "tokens", "p", "q"[, "overlap"]}). Children of the kept tokens of a
    node of depth < L - 1 that are not listed keep no token (a row of R only)."""
    if not nodes or nodes[0]["parent"] is not None:
        raise ValueError("nodes: the root (parent None) must come first")
    if depth < 1:
        raise ValueError(f"depth: need >= 1, got {depth}")
    count = len(nodes)
    parent = np.full(count, -1, dtype=np.int64)
    slot = np.zeros(count, dtype=np.int64)
    level = np.zeros(count, dtype=np.int64)
    p, q, child = [], [], []
    for i, node in enumerate(nodes):
        k = len(node["tokens"])
        if len(node["p"]) != k or len(node["q"]) != k:
            raise ValueError(f"nodes[{i}]: p and q need one value per kept token")
        p.append(list(node["p"]))
        q.append(list(node["q"]))
        child.append([-1] * k)
        if i:
            up = node["parent"]
            if up is None or not 0 <= up < i or not 0 <= node["slot"] < len(child[up]):
                raise ValueError(f"nodes[{i}]: parent must be an earlier node with that slot")
            if child[up][node["slot"]] >= 0:
                raise ValueError(f"nodes[{i}]: slot {node['slot']} of node {up} listed twice")
            parent[i], slot[i], level[i] = up, node["slot"], level[up] + 1
            if level[i] >= depth:
                raise ValueError(f"nodes[{i}]: kept nodes lie at depth 0..{depth - 1}")
            child[up][node["slot"]] = i
    zero = Fraction(0) if any(isinstance(x, Fraction) for row in p + q for x in row) else 0.0
    has_overlap = any("overlap" in node for node in nodes)
    overlap_list = [node.get("overlap", zero) for node in nodes]
    extra_parent, extra_slot, extra_level = [], [], []
    for n in range(count):  # kept children never listed: nodes keeping nothing
        if level[n] + 1 < depth:
            for j in range(len(child[n])):
                if child[n][j] < 0:
                    extra_parent.append(n)
                    extra_slot.append(j)
                    extra_level.append(level[n] + 1)
                    p.append([])
                    q.append([])
                    child.append([])
                    child[n][j] = len(p) - 1
                    overlap_list.append(zero)
    parent = np.concatenate([parent, np.array(extra_parent, dtype=np.int64)])
    slot = np.concatenate([slot, np.array(extra_slot, dtype=np.int64)])
    level = np.concatenate([level, np.array(extra_level, dtype=np.int64)])
    overlap = overlap_list if has_overlap else None
    width = max([1] + [len(row) for row in p])
    return KeptTree(depth, width, parent, slot, level, p, q, child, overlap)


def kept_tree_from_padded(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int,
                          overlap: np.ndarray | None = None) -> KeptTree:
    """The KeptTree of a kept tree in the complete W-ary layout of `coarsened_rows` (every
    node keeps all W slots, dummies included; nodes below a slot of probability 0 under both
    rows are left out: they have probability 0 under both)."""
    kept_nodes = check_kept_rows(target_kept, draft_kept, width, depth, "again")
    te, de = np.asarray(target_kept), np.asarray(draft_kept)
    nodes: list[dict[str, Any]] = []
    index = {0: 0}  # layout index -> position in nodes
    frontier = [(0, None, 0)]
    while frontier:
        n, up, j = frontier.pop(0)
        index[n] = len(nodes)
        node = {"parent": up, "slot": j, "tokens": list(range(width)), "p": list(te[n]),
                "q": list(de[n])}
        if overlap is not None:
            node["overlap"] = overlap[n]
        nodes.append(node)
        for s in range(width):
            c = width * n + 1 + s
            if c < kept_nodes and (te[n, s] != 0 or de[n, s] != 0):
                frontier.append((c, index[n], s))
    return kept_tree(nodes, depth)


def tree_masses(tree: KeptTree) -> tuple[list[Fraction], list[Fraction]]:
    """(p(u), q(u)) of every kept node, exact Fractions (floats at their binary values)."""
    p = [Fraction(0)] * len(tree)
    q = [Fraction(0)] * len(tree)
    p[0] = q[0] = Fraction(1)
    for n in range(len(tree)):
        if p[n] == 0 and q[n] == 0:
            continue
        for j, c in enumerate(tree.child[n]):
            if c >= 0:
                p[c], q[c] = p[n] * _frac(tree.p[n][j]), q[n] * _frac(tree.q[n][j])
    return p, q


def _frac(x: Any) -> Fraction:
    return x if isinstance(x, Fraction) else Fraction(x)


def tree_tail_bound(tree: KeptTree, paths: int, skip: int = 0, masses: Any = None) -> Fraction:
    """`tail_bound` on a KeptTree (the same sum, over its kept nodes)."""
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    p, q = masses if masses is not None else tree_masses(tree)
    total = Fraction(0)
    for n in range(len(tree)):
        if p[n] == 0 and q[n] == 0:
            continue
        levels = max(0, tree.depth - int(tree.level[n]) - skip)
        if levels == 0:
            continue
        rest_p = max(Fraction(0), 1 - sum((_frac(x) for x in tree.p[n]), Fraction(0)))
        rest_q = max(Fraction(0), 1 - sum((_frac(x) for x in tree.q[n]), Fraction(0)))
        total += levels * min(p[n] * rest_p, paths * q[n] * rest_q)
    return total


def tree_prefix_upper_bound(tree: KeptTree, paths: int, masses: Any = None) -> Fraction:
    """`prefix_upper_bound` on a KeptTree: 1 + sum over kept nodes z of depth 1..L of
    min(p(z), 1 - (1 - q(z))^K), plus tree_tail_bound."""
    if masses is None:
        masses = tree_masses(tree)
    p, q = masses
    head = Fraction(1)
    for n in range(len(tree)):
        if p[n] == 0 and q[n] == 0:
            continue
        for j in range(len(tree.p[n])):
            pz = p[n] * _frac(tree.p[n][j])
            if pz != 0:
                head += min(pz, 1 - (1 - q[n] * _frac(tree.q[n][j])) ** paths)
    return head + tree_tail_bound(tree, paths, masses=masses)


def _coarse_row(values: list[Any], width: int, exact: bool) -> np.ndarray:
    """The coarse row of a kept node (`coarsened_rows`: the kept slots, then R = the rest,
    clipped at 0 for floats, summed over the W-wide padded row as there)."""
    if exact:
        row = np.full(width + 1, Fraction(0), dtype=object)
        row[: len(values)] = [_frac(x) for x in values]
        row[width] = Fraction(1) - row[:width].sum()
        return row
    block = np.zeros((1, width))
    block[0, : len(values)] = values
    row = np.zeros(width + 1)
    row[:width] = block[0]
    row[width] = np.maximum(1.0 - block.sum(axis=1), 0.0)[0]
    return row


def _as_instance_rows(row: np.ndarray, exact: bool) -> np.ndarray:
    """A float row as `from_rows` stores it in a coarse instance (lp.instance._normalise: the
    binary values renormalised exactly to sum to 1, then rounded), so that the laws see
    bitwise the rows of the padded coarse instance; exact rows unchanged."""
    if exact:
        return row
    values = [Fraction(float(x)) for x in row]
    total = sum(values, Fraction(0))
    if total != 1:
        values = [x / total for x in values]
    return np.array([float(x) for x in values], dtype=np.float64)


@dataclass
class CoarseNodes:
    """The coarse ("again") instance of a KeptTree on its nodes of positive draft path
    probability (verifiers.ragged.RaggedModel), with every node's kept credit (1 + its
    leading kept tokens, `kept_credit`) and exit bonus (`exit_bonus`; 0 without overlap)."""

    model: Any
    credit: np.ndarray
    bonus: np.ndarray | None


def coarse_nodes(tree: KeptTree) -> CoarseNodes:
    """The coarse instance of `coarsened_instance` ("again": below R both rows are R) on the
    root and the coarse nodes of positive draft path probability, rows as in that instance's
    float or exact model (module section docstring; docs/theory.md 13.7, Lemma 13.10)."""
    width, depth, exact = tree.width, tree.depth, tree.exact
    vocab = width + 1
    one_hot = np.zeros(vocab, dtype=object if exact else np.float64)
    if exact:
        one_hot[:] = Fraction(0)
        one_hot[width] = Fraction(1)
    else:
        one_hot[width] = 1.0
    zero = Fraction(0) if exact else 0.0
    parent, token, target, draft, credit, bonus = [], [], [], [], [], []
    # frontier entries: (ragged node, kept node or -1 below R, kept tokens so far, exit kept node)
    frontier = [(-1, -1, 0, 0, -1)]
    for d in range(depth + 1):
        nxt = []
        for up, t, kept, lead, exit_at in frontier:
            here = len(parent)
            parent.append(up)
            token.append(t)
            credit.append(1 + lead)
            bonus.append(zero if exit_at < 0 or tree.overlap is None else tree.overlap[exit_at])
            if d == depth:
                target.append(one_hot)
                draft.append(one_hot)
                continue
            if kept >= 0:
                row_t = _coarse_row(tree.p[kept], width, exact)
                row_d = _coarse_row(tree.q[kept], width, exact)
            else:
                row_t = row_d = one_hot
            target.append(_as_instance_rows(row_t, exact))
            draft.append(_as_instance_rows(row_d, exact))
            for s in range(vocab):
                if row_d[s] == 0:
                    continue
                if kept >= 0 and s < width:
                    below = tree.child[kept][s] if s < len(tree.child[kept]) else -1
                    if d + 1 < depth and below < 0:
                        raise AssertionError("a kept slot without its kept node")
                    nxt.append((here, s, below, lead + 1, -1))
                else:  # the first R (exit after this kept node) or R again
                    nxt.append((here, s, -1, lead, kept if kept >= 0 else exit_at))
        frontier = nxt
    model = ragged_model(parent, token, np.array(target), np.array(draft), depth)
    bonus_a = None
    if tree.overlap is not None:
        bonus_a = np.array(bonus, dtype=object if exact else np.float64)
    return CoarseNodes(model, np.array(credit, dtype=np.int64), bonus_a)


def padded_law_size(name: str, width: int, depth: int, paths: int, leaves: int) -> int:
    """`verifiers.exact.enumeration_size` of a verifier on the padded coarse instance of a
    kept tree of width W (vocabulary W + 1, depth L, `leaves` paths of positive draft
    probability), without building it: the size `kept_lower_values` compares with its
    max_size."""
    spec, vocab = get_verifier(name), width + 1
    kind = evaluation_kind(spec, paths)
    if kind == "node recursion":
        return rule_evaluations(vocab, depth, paths)
    if kind == "selection law":
        return vocab**depth
    if kind is not None and spec.exact_law is not None:
        return spec.exact_law.work(vocab, depth, paths)
    if not spec.multipath:
        return leaves
    return count_configurations(leaves, paths, "iid", ordered=not spec.order_invariant)


def tree_lower_values(tree: KeptTree, paths: int, names: list[str], max_size: int = 2_000_000,
                      coarse: CoarseNodes | None = None, exit_credit: bool = True,
                      sizes: str = "ragged") -> dict[str, Any]:
    """`kept_lower_values` on a KeptTree, without the padded instance: every named verifier
    with a ragged law (verifiers.ragged) of work <= max_size, its law on the coarse nodes of
    positive draft probability credited as `kept_value` (with the exit credit when the tree
    has overlaps and exit_credit). sizes "ragged": the work of the ragged law is compared
    with max_size; "padded": the size of the law on the padded instance (`padded_law_size`,
    as `kept_lower_values`: the same verifiers are evaluated, so the same values result).
    Returns {"values", "skipped", "unsupported"}: skipped the verifiers over max_size,
    unsupported those without a ragged law (the caller may evaluate them on the padded
    instance)."""
    if sizes not in ("ragged", "padded"):
        raise ValueError(f"sizes must be 'ragged' or 'padded', got {sizes!r}")
    coarse = coarse or coarse_nodes(tree)
    leaves = int((coarse.model.level == tree.depth).sum())
    values: dict[str, Any] = {}
    skipped, unsupported = [], []
    for name in names:
        work = ragged_work(coarse.model, name, paths)
        if work is None:
            unsupported.append(name)
            continue
        if sizes == "padded":
            work = padded_law_size(name, tree.width, tree.depth, paths, leaves)
        if work > max_size:
            skipped.append(name)
            continue
        mass = ragged_node_mass(coarse.model, name, paths)
        value = (mass * coarse.credit).sum()
        if exit_credit and coarse.bonus is not None:
            value = value + (mass * coarse.bonus).sum()
        values[name] = value
    return {"values": values, "skipped": skipped, "unsupported": unsupported}
