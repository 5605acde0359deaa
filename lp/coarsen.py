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

from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.tree import all_paths, depth_offset, num_nodes
from .instance import Instance, from_rows

SELECT = ("mix", "target", "draft")  # how a fine instance's kept tokens are chosen


def coarsened_rows(target_kept: np.ndarray, draft_kept: np.ndarray, width: int, depth: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Rows [N', M + 1] of the coarse instance (N' = num_nodes(M + 1, L), shortlex).

    target_kept, draft_kept: [(M^L - 1)/(M - 1), M] the fine probabilities p(t | u),
    q(t | u) of the M kept children of every kept node u of depth 0..L-1, in shortlex
    order over the M child slots (float64, or object arrays of Fractions for exact rows).
    Slot M of the coarse vocabulary is the remainder R.
    """
    if width < 1 or depth < 1:
        raise ValueError(f"need width >= 1 and depth >= 1, got {width}, {depth}")
    kept_nodes = sum(width**d for d in range(depth))
    for name, rows in (("target", target_kept), ("draft", draft_kept)):
        if rows.shape != (kept_nodes, width):
            raise ValueError(f"{name}_kept: expected shape {(kept_nodes, width)}, got {rows.shape}")
    exact = target_kept.dtype == object
    vocab = width + 1
    one = Fraction(1) if exact else 1.0
    zero = Fraction(0) if exact else 0.0
    rows_t = np.full((num_nodes(vocab, depth), vocab), zero, dtype=object if exact else np.float64)
    rows_d = rows_t.copy()
    rows_t[:, width] = one  # every row defaults to "R" (below R, and the bonus rows at depth L)
    rows_d[:, width] = one
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
                       name: str = "coarsened") -> Instance:
    """The coarse instance (vocabulary M + 1, depth L) of `coarsened_rows`."""
    rows_t, rows_d = coarsened_rows(target_kept, draft_kept, width, depth)
    inst = from_rows(rows_t, rows_d, depth, name=name)
    inst.notes.append(f"coarsened: top-{width} tokens kept per node, the rest lumped into a "
                      "remainder token accepted to depth L (upper bound on the fine optimum)")
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
                     exact: bool | None = None) -> tuple[Instance, np.ndarray]:
    """Coarsen a (small) fine instance: returns (coarse instance, kept tokens [n, M]) (the
    kept tree of `kept_edges`)."""
    target_kept, draft_kept, tokens = kept_edges(instance, width, select, exact)
    coarse = coarsened_instance(target_kept, draft_kept, width, instance.depth,
                                name=f"{instance.name}-coarse{width}")
    return coarse, tokens


def describe_coarsening(target_kept: np.ndarray, draft_kept: np.ndarray) -> dict[str, Any]:
    """Lumped mass summary: mean / max remainder target and draft mass over kept nodes."""
    rest_t = 1 - np.asarray(target_kept, dtype=np.float64).sum(axis=1)
    rest_d = 1 - np.asarray(draft_kept, dtype=np.float64).sum(axis=1)
    return {"remainder_target_mean": float(rest_t.mean()), "remainder_target_max": float(rest_t.max()),
            "remainder_draft_mean": float(rest_d.mean()), "remainder_draft_max": float(rest_d.max()),
            "remainder_target_root": float(rest_t[0]), "remainder_draft_root": float(rest_d[0])}
