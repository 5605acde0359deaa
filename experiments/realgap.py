"""Real-model gaps without distortion: full-vocabulary bounds on the K-path optimum.

At contexts reached by target sampling on real prompts (`decode.tree_rows
.sample_contexts`), for depth L and K = 1..K_max i.i.d. draft paths:

  verifiers   every requested lossless verifier's block efficiency E[tau + 1] on the
              FULL rows of the pair (no truncation): `samples` draft trees are drawn from
              the draft model (`decode.tree_rows.sample_trees`, K_max paths each; the
              first K paths of a tree are K i.i.d. paths, so every K uses the same trees),
              and each verifier's exact conditional E[tau + 1 | tree] is computed from its
              law (`decode.engine.score_tree`); the mean over trees is unbiased and is
              reported with a 95% interval valid for values in [1, L + 1] at any sample
              size (`experiments.intervals.betting_interval`; a t interval collapses when rare
              low values are never sampled, which happens on peaked rows).
  upper bound L = 1: the K-path optimum itself, in closed form on the full rows
              (`speclp.lp.closed_form.one_step_optimum`, O(V log V), float64).
              L >= 2 (`bracket_bounds`, docs/theory.md section 13.5): the smallest of three
              certified bounds from the kept tree (see expansion below):
              the weak-duality bound of the COARSENED instance (`lp.coarsen`: the rest lumped
              into a remainder token accepted to depth L; `lp.dual_bound`), the bound of the
              TERMINAL coarse instance (nothing accepted below the remainder) plus a certified
              tail (`lp.coarsen.tail_bound`), and the prefix bound plus tail (no LP). The LPs
              are solved by column generation in floats on their paths of positive probability
              (`lp.coarse_lp`, docs/theory.md 13.7); the bounds are exact rationals.
  lower bound certified, from the kept rows only: the largest exact value of a lossless
              verifier that needs only them: every named lossless i.i.d. verifier's exact law
              on the coarse instance credited up to the first remainder token
              (`lp.coarsen.kept_lower_values`; with the certified exit credit of Lemma 13.8,
              `lp.coarsen.exit_bonus`), token-kept and nss-kept (`kept_lower_bounds`).
              L = 1: the closed-form optimum, so lower = upper there, and bv, token, gbv, nss,
              nodeopt, specinfer, bv_extended_rrs and bv_extended take their exact L = 1
              values (`exact_one_step`) instead of sampled ones.
  expansion   "mass" (the default of `context_record`, docs/theory.md 13.6, `mass_tree_rows`):
              the kept tree grows where the mass is, every node keeping the fewest top tokens
              of p + q whose lumped weight is <= epsilon, at most its depth's cap (widest at
              the root), padded with probability-0 dummies (Lemma 13.7); caps and epsilons
              (`mass_epsilons`) tried in turn until every K's bracket is within the target
              (WIDTH_TARGETS) or the per-context time budget is spent. "uniform": top-M at
              every node, widths M tried in turn (`adaptive_bracket`).
  best estimate the best verifier's sampled E[tau + 1] with its interval (an estimate, not a
              bound: it may lie on either side of the certified lower bound).

So per context: certified lower <= optimum <= certified upper, with every verifier's interval
next to them. Claims checked: lower <= upper, and no verifier's interval lies entirely above
the upper bound (a verifier beating the optimum would be lossy, or a bound wrong); a
violation is a counterexample (the record is kept and reported as a failure). Summaries
over contexts: cluster intervals (Hall's skew-corrected t) on per-prompt means
(`intervals.cluster_mean_interval`).

The truncated instances of earlier versions (top-M of the target per node, both rows
RENORMALISED: neither an upper nor a lower bound) remain available as a labelled option
(`run_realgap_renormalised`).

Records: one JSONL line per (prompt, context, L) with every setting in its key; a rerun
skips records already present (resumable; a torn last line is ignored). The folder is opened
through `experiments.store.open_records` (one writer at a time, its run logged in spec.json).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import StrEnum
from math import comb
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from .. import inputs
from ..decode.engine import score_tree
from ..decode.models import default_device, default_dtype, pair_label, pair_names
from ..decode.tree_rows import level_rows, prefill, sample_contexts, sample_trees, tree_rows
from ..inputs import BadArgument
from ..lp import optimum, tolerances
from ..lp.closed_form import one_step_optimum
from ..lp.coarse_lp import ragged_coarse_tree, ragged_dual_bound, ragged_optimum
from ..lp.coarsen import (
    KeptTree,
    coarse_nodes,
    coarsened_instance,
    depth_caps,
    describe_coarsening,
    exit_overlap,
    kept_count,
    kept_lower_values,
    kept_tree,
    kept_tree_from_padded,
    padded_edges,
    tree_lower_values,
    tree_masses,
    tree_prefix_upper_bound,
    tree_tail_bound,
)
from ..lp.dual_bound import dual_upper_bound
from ..lp.instance import from_rows
from ..rationals import fraction_text
from ..verifiers.bv_extended import DEFAULT_SUPPORT as EXTENDED_SUPPORT
from ..verifiers.exact import exact_result
from ..verifiers.gbv import below_mass
from ..verifiers.ops import safe_div
from ..verifiers.registry import get_verifier, verifier_names
from ..verifiers.single_step import nested_partitions_for, ratio_cells
from .intervals import betting_interval, cluster_mean_interval
from .store import (  # noqa: F401 - load_jsonl re-exported
    KeyedRecords,
    load_jsonl,
    open_records,
    record_key,
    select_records,
    slug,
)

MODE_FULL = "full-vocabulary"
MODE_RENORMALISED = "renormalised"
BOUNDS_VERSION = 4  # 4: + exit credit (13.6, Lemma 13.8); 3: mass trees (13.6); 2: uniform M (13.5)
MAX_COARSE_PATHS = 40_000  # (M + 1)^L paths in the coarse LP at most
LP_PATHS = ("ragged", "padded")  # the coarse LPs' path sets (bracket_bounds, section 13.7)
CERTIFIED_TOLERANCE = tolerances.CERTIFIED  # a verifier beats a certified bound by more: failure
UNCERTIFIED_TOLERANCE = tolerances.UNCERTIFIED


# ---------------------------------------------------------------------------------------
# one context


def coarse_upper_bounds(target: Any, draft: Any, context: list[int], depth: int, width: int,
                        paths: list[int], temperature: float, draft_temperature: float | None,
                        prefilled: Any = None, verifiers: list[str] | None = None,
                        time_limit: float | None = None) -> dict[str, Any]:
    """The bracket at one kept width M for L >= 2 (docs/theory.md sections 13.3-13.5).

    The kept tree is the complete M-ary tree of the top-M tokens of p + q at every kept node
    (`decode.tree_rows.tree_rows`, select "mix": expanded where the mass of either model is);
    `bracket_bounds` turns its full-vocabulary edge probabilities into certified bounds.
    Returns {"coarsening": {...remainder masses, rows seconds}, "bounds": {K: upper record},
    "lower": {K: lower record}}.
    """
    rows = tree_rows(target, draft, context, width, depth - 1, temperature, draft_temperature,
                     select="mix", row_dtype=_float64(), prefilled=prefilled)
    coarsening = {"width": width, "select": "top-M of p + q per node",
                  "rows_seconds": rows.seconds,
                  **describe_coarsening(rows.target_edge, rows.draft_edge)}
    found = bracket_bounds(rows.target_edge, rows.draft_edge, width, depth, paths, verifiers,
                           time_limit=time_limit, skip_late_laws=False)  # LPs only are limited
    return {"coarsening": coarsening, **found}


@torch.no_grad()
def mass_tree_rows(prefilled: Any, depth: int, cap: int, epsilon: float, paths: list[int],
                   kept_limit: int | None = None) -> dict[str, Any]:
    """The mass-driven kept tree below a prefilled context (docs/theory.md section 13.6).

    Level by level from the root: every kept node u of depth d < L keeps the top tokens of
    p + q, as many as `lp.coarsen.kept_count` asks (the fewest whose lumped weight
    (L - d) min(p(u) p(rest|u), K q(u) q(rest|u)) is <= epsilon, K = max(paths), at most
    `lp.coarsen.depth_caps(cap, L)[d]`: cap 2^(L-1-d)); the kept tokens' children are
    the kept nodes of depth d + 1, and only they get model rows (one tree-masked forward
    per level and model, the caches of `prefilled`).
    kept_limit (None: the caps are also bounded by the padded layout, (W + 1)^L <=
    MAX_COARSE_PATHS, as before): the caps are cap 2^(L-1-d) unbounded, and the tree keeps at
    most kept_limit tokens in all (level by level, nodes in order: once the limit is reached
    the remaining nodes keep fewer tokens, or none; any choice keeps the bounds valid).
    Returns "tree" (`lp.coarsen.KeptTree`: float64 full-vocabulary probabilities, overlaps
    `lp.coarsen.exit_overlap`), "width", "nodes" (kept nodes with rows), "kept_tokens",
    "seconds" (forward passes per model) and, without kept_limit, "target_edge",
    "draft_edge", "tokens", "overlap" in the padded complete-tree layout of
    `lp.coarsen.padded_edges`.
    """
    prefilled.rewind()
    tgt, drf = prefilled.target, prefilled.draft
    most = max(paths)
    seconds = {"target": 0.0, "draft": 0.0}
    nodes: list[dict[str, Any]] = []
    p_rows, q_rows = tgt.root_row[None], drf.root_row[None]
    level = [(None, 0, 1.0, 1.0)]  # (parent, slot, p(u), q(u)) of this level's nodes
    masks = torch.zeros(1, 0, dtype=torch.bool)  # [n_level, tree slots] each node sees
    caps = depth_caps(cap, depth, MAX_COARSE_PATHS if kept_limit is None else None)
    left = kept_limit
    for d in range(depth):
        cap_here = min(caps[d], p_rows.shape[-1])
        top = torch.topk(p_rows + q_rows, cap_here, dim=-1).indices.cpu().numpy()  # [n, cap]
        p_np, q_np = p_rows.cpu().numpy(), q_rows.cpu().numpy()
        children, child_tokens, parent_local = [], [], []
        for i, (parent, slot, reach_p, reach_q) in enumerate(level):
            k = kept_count(p_np[i], q_np[i], top[i], reach_p, reach_q, depth - d, cap_here,
                           epsilon, most)
            if left is not None:
                k = min(k, left)
                left -= k
            chosen = top[i, :k]
            nodes.append({"parent": parent, "slot": slot, "tokens": [int(t) for t in chosen],
                          "p": p_np[i, chosen].tolist(), "q": q_np[i, chosen].tolist(),
                          "overlap": exit_overlap(p_np[i], q_np[i], chosen)})
            if d + 1 < depth:
                here = len(nodes) - 1
                for j, t in enumerate(chosen):
                    children.append((here, j, reach_p * float(p_np[i, t]),
                                     reach_q * float(q_np[i, t])))
                    child_tokens.append(int(t))
                    parent_local.append(i)
        if not children:
            break
        p_rows, q_rows, masks = level_rows(tgt, drf, torch.tensor(child_tokens), masks, len(level),
                                           torch.tensor(parent_local), d, seconds)
        level = children
    tree = kept_tree(nodes, depth)
    out = {"tree": tree, "width": tree.width, "nodes": len(nodes),
           "kept_tokens": int(sum(len(n["tokens"]) for n in nodes)), "seconds": seconds}
    if kept_limit is None:
        te, de, tokens, _, overlap = padded_edges(nodes, depth)
        out.update(target_edge=te, draft_edge=de, tokens=tokens, overlap=overlap)
    return out


def lumped_mass(tree: KeptTree) -> dict[str, float]:
    """The probability that a target (draft) sequence of length L leaves the kept tree:
    sum over kept nodes u of p(u) (1 - p(S(u)|u)) (and q), float64; with
    `lp.coarsen.describe_coarsening` over the kept nodes of positive path probability."""
    count = len(tree)
    reach_p, reach_q = np.zeros(count), np.zeros(count)
    reach_p[0] = reach_q[0] = 1.0
    raw_p, raw_q = np.ones(count), np.ones(count)  # 1 - kept mass, unclipped
    for n in range(count):
        pe = np.asarray(tree.p[n], dtype=np.float64)
        qe = np.asarray(tree.q[n], dtype=np.float64)
        raw_p[n], raw_q[n] = 1.0 - pe.sum(), 1.0 - qe.sum()
        for j, c in enumerate(tree.child[n]):
            if c >= 0:
                reach_p[c], reach_q[c] = reach_p[n] * pe[j], reach_q[n] * qe[j]
    real = (reach_p > 0) | (reach_q > 0)
    rest_p, rest_q = np.maximum(raw_p, 0.0), np.maximum(raw_q, 0.0)
    t, d = raw_p[real], raw_q[real]
    return {"lumped_target": float((rest_p * reach_p).sum()),
            "lumped_draft": float((rest_q * reach_q).sum()),
            "remainder_target_mean": float(t.mean()), "remainder_target_max": float(t.max()),
            "remainder_draft_mean": float(d.mean()), "remainder_draft_max": float(d.max()),
            "remainder_target_root": float(raw_p[0]), "remainder_draft_root": float(raw_q[0])}


MAX_LAW_EVALUATIONS = 2_000_000  # a verifier's exact law on the coarse instance: at most this
# the work of a ragged law (law_sizes "ragged"): node-rule evaluations cost about 35 us each in
# float64 (measured at L = 4 on synthetic rows: 14,386 in 0.5-0.9 s), the other laws' work is
# the drafted leaves; at most this many (node-rule verifiers at K = 4 then are skipped on large
# trees: they never gave the largest recorded lower value)
MAX_RAGGED_WORK = 100_000


def lower_verifiers(names: list[str] | None) -> list[str]:
    """The named verifiers that are lossless under i.i.d. drafting (default: all of them,
    from the registry): only those give lower bounds (section 13.5, Lemma 13.3)."""
    if names is None:
        return verifier_names(draft_sampling="iid")
    return [n for n in names if get_verifier(n).lossless and "iid" in get_verifier(n).draft_sampling]


def bracket_bounds(target_edge: np.ndarray | None, draft_edge: np.ndarray | None, width: int,
                   depth: int, paths: list[int], verifiers: list[str] | None = None,
                   max_evaluations: int = MAX_LAW_EVALUATIONS,
                   time_limit: float | None = None, overlap: np.ndarray | None = None,
                   skip_late_laws: bool = True, lp_paths: str = "ragged",
                   tree: KeptTree | None = None, law_sizes: str = "padded") -> dict[str, Any]:
    """Certified lower and upper bounds on the fine K-path optimum from the kept rows only.

    target_edge, draft_edge [N, M]: the FULL-vocabulary probabilities of the M kept children
    of every kept node of depth 0..L-1 (shortlex over the child slots; float64 or Fractions);
    or tree (`lp.coarsen.KeptTree`, the same kept tree without padding; then the edges may
    be None, and width is tree.width): every bound below is computed on the ragged tree
    (docs/theory.md 13.7), the padded layout only where asked for (lp_paths "padded") or
    for the verifiers without a ragged law when the padded instance has at most
    MAX_COARSE_PATHS paths (today: traversal, bv_extended, bv_extended_rrs; else skipped).
    law_sizes "padded" (default): a verifier's law is skipped when its size on the padded
    instance exceeds max_evaluations, as before (the same verifiers, so the same values, as
    the padded computation); "ragged": when the work of its ragged law does (trees whose
    padded instance is out of reach: `mass_tree_rows(kept_limit=...)`).

    upper (the smallest of, docs/theory.md section 13.5):
      coarse LP          weak-duality bound of the coarse instance (R accepted to depth L),
                         Theorem 13.1 and section 7.3;
      terminal LP + tail weak-duality bound of the terminal-R coarse instance (nothing below R
                         is accepted) plus tail_bound(skip=1) (Theorem 13.6);
      prefix + tail      1 + sum over kept z of min(p(z), 1 - (1 - q(z))^K) plus tail_bound
                         (Theorem 13.5; no LP).
    lower (the largest of): every lossless i.i.d. verifier's exact law on the coarse instance,
    credited up to the first R (Lemma 13.3; lp.coarsen.tree_lower_values on the coarse nodes
    of positive draft probability, Lemma 13.10), and token-kept / nss-kept
    (`tree_kept_lower_bounds`). Exact numbers are stored as rationals.fraction_text.
    overlap [n kept nodes] (optional; `lp.coarsen.exit_overlap` of every kept node, from
    its full rows; a tree carries its own): the registered verifiers' kept values also
    credit an accepted remainder token with it (section 13.6, Lemma 13.8; recorded as
    "exit_credit").
    time_limit: seconds for all the LP solves together (each gets an equal share of what is
    left); an LP stopped by it gives no candidate unless its master has duals (weak duality
    holds for any multipliers), and the prefix bound always remains; past it (skip_late_laws)
    the registered verifiers' laws are skipped too (token-kept / nss-kept remain).
    lp_paths "ragged" (default): both coarse LPs on their paths of positive probability
    (`lp.coarse_lp`, section 13.7, Lemma 13.9: the same optima as the padded instances,
    whose dummy slots it drops); "padded": `lp.optimum` on the padded instances.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    solves_left = 2 * len(paths)
    inputs.choice("lp_paths", lp_paths, LP_PATHS)
    if tree is None:
        te, de = np.asarray(target_edge), np.asarray(draft_edge)
        tree = kept_tree_from_padded(te, de, width, depth, overlap)
    else:
        width, te, de = tree.width, None, None
    exact = tree.exact
    padded_paths = (width + 1) ** depth

    def padded_rows() -> tuple[np.ndarray, np.ndarray]:
        nonlocal te, de
        if te is None:
            te, de, _ = tree.padded()
        return te, de

    if lp_paths == "padded":
        masters = {label: coarsened_instance(*padded_rows(), width, depth, name=f"{label}-M{width}"
                                             f"-L{depth}", below_r=below)
                   for label, below in (("terminal LP + tail", "terminal"), ("coarse LP", "again"))}
    else:  # the same optima on the paths of positive probability only (section 13.7)
        masters = {"terminal LP + tail": ragged_coarse_tree(tree, "terminal"),
                   "coarse LP": ragged_coarse_tree(tree, "again")}
    masses = tree_masses(tree)  # exact path masses, shared by the tails
    lp_sizes = {label: (m.size() if lp_paths == "ragged" else {"padded_paths": padded_paths})
                for label, m in masters.items()}
    classic = tree_kept_lower_bounds(tree, paths)
    names = lower_verifiers(verifiers)
    laws = coarse_nodes(tree)  # the coarse instance on its nodes of positive draft probability
    padded_laws: dict[str, Any] = {}  # the padded coarse instance, for verifiers without ragged laws
    bounds: dict[str, Any] = {}
    lowers: dict[str, Any] = {}
    warm: dict[str, list[Any]] = {label: [] for label in masters}  # priorities of the last K
    for k in paths:
        start = time.perf_counter()
        candidates: dict[str, Any] = {}
        lp_values: dict[str, Any] = {}
        lp_seconds = 0.0
        for label, inst in masters.items():
            share = (None if deadline is None
                     else max(1.0, (deadline - time.perf_counter()) / solves_left))
            solves_left -= 1
            lp_start = time.perf_counter()
            if lp_paths == "padded":
                result = optimum(inst, k, method="colgen", certify=False, time_limit=share)
            else:
                result = ragged_optimum(inst, k, time_limit=share, priorities=warm[label])
                warm[label] = result.priorities[1:]
            lp_seconds += time.perf_counter() - lp_start
            lp_values[label] = result.value
            if result.matching_duals is None:
                continue
            bound = (dual_upper_bound(inst, result.matching_duals, k) if lp_paths == "padded"
                     else ragged_dual_bound(inst, result.matching_duals, k))
            if label != "coarse LP":
                bound += tree_tail_bound(tree, k, skip=1, masses=masses)
            candidates[label] = bound
        candidates["prefix + tail"] = tree_prefix_upper_bound(tree, k, masses=masses)
        best = min(candidates, key=candidates.get)
        value = candidates[best]
        bounds[str(k)] = {
            "value": float(value), "exact": fraction_text(value), "certified": True,
            "method": best, "lp_value": lp_values.get(best),
            "bound_minus_lp": (float(value) - lp_values[best]
                               if lp_values.get(best) is not None else None),
            "candidates": {n: float(v) for n, v in candidates.items()},
            "certificate": "the smallest of: weak duality on the coarse and terminal coarse "
                           "instances (exact rationals), the prefix bound with its tail "
                           "(docs/theory.md section 13.5)",
            "status": "certified", "seconds": round(time.perf_counter() - start, 3),
            "lp_seconds": round(lp_seconds, 3), "lp_paths": lp_paths,
            "lp_size": lp_sizes.get(best)}
        start = time.perf_counter()
        late = skip_late_laws and deadline is not None and time.perf_counter() > deadline
        found = tree_lower_values(tree, k, [] if late else names,
                                  max_evaluations if law_sizes == "padded"
                                  else min(max_evaluations, MAX_RAGGED_WORK), laws,
                                  sizes=law_sizes)
        rest = found.pop("unsupported")
        if rest and padded_paths <= MAX_COARSE_PATHS:  # their laws on the padded instance
            if "instance" not in padded_laws:
                padded_laws["instance"] = coarsened_instance(*padded_rows(), width, depth,
                                                             name=f"coarse-M{width}-L{depth}")
                padded_laws["overlap"] = (tree.padded()[2] if tree.overlap is not None
                                          else None)
            more = kept_lower_values(padded_laws["instance"], width, k, rest, max_evaluations,
                                     padded_laws["overlap"])
            found["values"].update(more["values"])
            found["skipped"] += more["skipped"]
        else:
            found["skipped"] += rest
        if late:  # out of time: the cheap token-kept / nss-kept values only
            found["skipped"] = list(names)
        values = {f"{n}-kept": v for n, v in found["values"].items()}
        values.update(classic[str(k)]["values"])
        best_low = max(values, key=lambda n: values[n])
        lowers[str(k)] = {
            "value": float(values[best_low]), "verifier": best_low,
            "exact": fraction_text(values[best_low]) if exact else None,
            "values": {n: float(v) for n, v in values.items()}, "skipped": found["skipped"],
            "certified": True, "seconds": round(time.perf_counter() - start, 3),
            "exit_credit": tree.overlap is not None,
            "method": "exact value of a lossless verifier that uses only the kept rows: a "
                      "registered verifier's law on the coarse instance credited up to the "
                      "first lumped token, or token-kept / nss-kept (docs/theory.md 13.4-13.5)"}
    return {"bounds": bounds, "lower": lowers, "lp_sizes": lp_sizes, "law_nodes": len(laws.model)}


def tree_kept_lower_bounds(tree: KeptTree, paths: list[int]) -> dict[str, Any]:
    """`kept_lower_bounds` on a ragged kept tree (the same two verifiers and formulas, summed
    over its kept nodes and slots; float64)."""
    most = max(paths)
    count = len(tree)
    reach = np.zeros(count)
    reach[0] = 1.0
    token = 1.0
    f = np.zeros((count, most + 1))  # f[n, m]
    for n in range(count):
        pe = np.asarray(tree.p[n], dtype=np.float64)
        qe = np.asarray(tree.q[n], dtype=np.float64)
        step = reach[n] * np.minimum(pe, qe)
        token += float(step.sum())
        for j, c in enumerate(tree.child[n]):
            if c >= 0:
                reach[c] = step[j]
    for n in range(count - 1, -1, -1):  # children after parents
        pe = np.asarray(tree.p[n], dtype=np.float64)
        qe = np.asarray(tree.q[n], dtype=np.float64)
        if len(pe) == 0:
            continue
        below = np.array([f[c] if c >= 0 else np.zeros(most + 1) for c in tree.child[n]])
        for m in range(1, most + 1):
            j = np.arange(1, m + 1)
            binom = (np.array([comb(m, int(i)) for i in j])[None]
                     * qe[:, None] ** j[None] * (1 - qe[:, None]) ** (m - j)[None])
            f[n, m] = float((pe * (binom * (1 + below[:, 1 : m + 1])).sum(1)).sum())
    out = {}
    for k in paths:
        values = {"token-kept": token, "nss-kept": 1.0 + f[0, k]}
        best = max(values, key=values.get)
        out[str(k)] = {"value": values[best], "verifier": best, "values": values,
                       "certified": True, "method": "exact value of a lossless verifier that "
                       "uses only the kept rows (experiments.realgap.kept_lower_bounds)"}
    return out


def kept_lower_bounds(target_edge: np.ndarray, draft_edge: np.ndarray, width: int, depth: int,
                      paths: list[int]) -> dict[str, Any]:
    """Certified LOWER bounds on the K-path optimum from the kept rows only (docs/theory.md
    section 13.4): the exact values of two lossless verifiers that end the block at any node
    outside the kept tree (they may still emit that node's token, at its kept parent).

    target_edge, draft_edge [N, M]: the FULL-vocabulary probabilities p(c|u), q(c|u) of the
    M kept children of every kept node u of depth 0..L-1 (N = (M^L - 1)/(M - 1), shortlex,
    `decode.tree_rows.TreeRows`).

      token-kept  token-level sampling on path 0; an accepted drafted token outside the kept
                  set is emitted as the block's last token. Every emitted token has law
                  p(.|u) and the decision to stop depends only on that token, so it is
                  lossless; E[tau + 1] = 1 + sum over kept nodes z (depth 1..L) of
                  prod_j min(p, q)(z_j | z_<j). A K = 1 verifier: a lower bound for every K.
      nss-kept    naive sampling at K paths: Y ~ p(.|u); move down into Y when Y is a kept
                  drafted child, else end the block with Y. By the multinomial branching of
                  i.i.d. paths (section 12.2), with f = 0 at depth L,
                      f(u, m) = sum_(kept c) p(c|u) sum_(j=1..m) Bin(j; m, q(c|u)) (1 + f(uc, j)),
                  E[tau + 1] = 1 + f(root, K).
    Both are exact (float64 sums and products of the recorded probabilities, relative
    rounding below 1e-12), need no sampling, and are <= OPT_K (every lossless verifier is
    a feasible point; OPT_K >= OPT_1). Returns {K: {value, verifier, values, method}}.
    """
    te = np.asarray(target_edge, dtype=np.float64)
    de = np.asarray(draft_edge, dtype=np.float64)
    count = (width**depth - 1) // (width - 1) if width > 1 else depth
    if te.shape != (count, width) or de.shape != (count, width):
        raise BadArgument("target_edge/draft_edge", f"need edges [{count}, {width}] for M = {width}, "
                                                    f"L = {depth}, got {te.shape}, {de.shape}")
    return tree_kept_lower_bounds(kept_tree_from_padded(te, de, width, depth), paths)


# rounding of a scored law's E[tau + 1] in its score dtype: a float32 sum over a tree's nodes can
# land a few ulps of L + 1 outside [1, L + 1] (seen on qwen2.5-coder at T = 0.6, L = 2)
SCORE_ROUNDING = {torch.float32: 1e-4, torch.float64: 1e-9}


def in_range(values: list[float], depth: int, slack: float) -> np.ndarray:
    """values clipped into [1, L + 1] where they are outside by at most `slack` (rounding of the
    score dtype); a value further out is left as it is (betting_interval then refuses it)."""
    x = np.asarray(values, dtype=np.float64)
    near = (x >= 1.0 - slack) & (x <= depth + 1.0 + slack)
    return np.where(near, np.clip(x, 1.0, depth + 1.0), x)


def verifier_intervals(target: Any, draft: Any, context: list[int], depth: int, paths: list[int],
                       samples: int, batch: int, verifiers: list[str], temperature: float,
                       draft_temperature: float | None, generator: Any,
                       score_dtype: Any = None, prefilled: Any = None) -> dict[str, Any]:
    """Each verifier's E[tau + 1] on full rows: mean over `samples` sampled trees, 95% interval.

    Trees are drawn `batch` at a time with max(paths) paths; K uses their first K paths.
    Trees with equal tokens (frequent on peaked rows) are scored once. Returns
    {"by_paths": {K: {name: betting_interval}}, "trees": {...}, "values": {K: {name: list}}}.
    """


    dtype = score_dtype or torch.float64
    most = max(paths)
    values: dict[int, dict[str, list[float]]] = {k: {n: [] for n in verifiers} for k in paths}
    info: dict[str, Any] = {"samples": 0, "distinct_nodes": [],
                            "distinct_trees": {str(k): 0 for k in paths},
                            "seconds": {"draft": 0.0, "target": 0.0, "score": 0.0}}
    while info["samples"] < samples:
        count = min(batch, samples - info["samples"])
        trees = sample_trees(target, draft, context, most, depth, count, temperature,
                             draft_temperature, generator, prefilled)
        info["distinct_nodes"].append(trees.distinct_nodes)
        for part in ("draft", "target"):
            info["seconds"][part] += trees.seconds[part]
        start = time.perf_counter()
        for k in paths:  # one law per distinct tree (equal token arrays have equal laws)
            first, inverse = trees.distinct(k)
            info["distinct_trees"][str(k)] += len(first)
            tree = trees.tree(first, dtype, paths=k)
            scores = score_tree(verifiers, tree.tokens, tree.target_rows, tree.draft_rows, dtype)
            for name, v in scores.items():
                values[k][name].extend(v[inverse].tolist())
            del tree
        info["seconds"]["score"] += time.perf_counter() - start
        info["samples"] += count
        del trees
    label = {"exact": False, "estimate": f"mean of {samples} sampled draft trees' exact "
             "conditional values, with its 95% interval (an estimate, not a bound)"}
    slack = SCORE_ROUNDING.get(dtype, 0.0)
    by_paths = {str(k): {n: {**betting_interval(in_range(values[k][n], depth, slack), 1.0,
                                                depth + 1.0), **label}
                         for n in verifiers} for k in paths}
    return {"by_paths": by_paths, "trees": info,
            "values": {str(k): values[k] for k in paths}}


EXACT_AT_ONE = ("bv", "token", "gbv", "nss", "nodeopt", "specinfer", "bv_extended_rrs",
                "bv_extended")  # exact L = 1 forms (exact_one_step)


def specinfer_one_step(p: np.ndarray, q: np.ndarray, paths: int) -> float:
    """SpecInfer's exact E[tau + 1] at L = 1 with K i.i.d. drafts: round j tests a fresh
    X_j ~ q against the residual r_(j-1) (r_0 = p, r_j = (r_(j-1) - q)_+ normalised), so it
    accepts with probability sum min(r_(j-1), q) independently of the rounds before, and
    E = 2 - prod_j (1 - sum min(r_(j-1), q)). float64, O(K V)."""
    residual, rejected = p.astype(np.float64), 1.0
    for _ in range(paths):
        accept = float(np.minimum(residual, q).sum())
        rejected *= max(0.0, 1.0 - accept)
        rest = np.maximum(residual - q, 0.0)
        total = rest.sum()
        if total <= 0:
            break
        residual = rest / total
    return 2.0 - rejected


def rule_acceptance(target: np.ndarray, q: np.ndarray, draws: int, support: int | None) -> float:
    """sum_x min(a(x), r_n(x)): the acceptance of the single-step rule the registered laws use
    (the nested-partition rule for n i.i.d. draws, `verifiers.single_step`, built on the
    ratio cells of `support`: one cell per token when V <= support, else pooled cells, so it
    may stay below the optimum min_H [a(H) + 1 - q(H)^n] there) followed by token-level
    sampling of its returned token (law r_n) against a. Built as the laws build it, on torch
    float64 rows on the CPU. n = 0: no draw, acceptance 0."""
    if draws == 0:
        return 0.0
    rows = torch.as_tensor(np.asarray(target, dtype=np.float64))[None]
    draft = torch.as_tensor(np.asarray(q, dtype=np.float64))[None]
    cells = ratio_cells(rows, draft, support)
    rule = nested_partitions_for(rows, draft, [draws], cells=cells)[0]
    return float(torch.minimum(rows, rule.law()).sum())


def extended_bv_one_step(p: np.ndarray, q: np.ndarray, paths: int, fallback: str) -> float:
    """The exact E[tau + 1] of extended BV ("bv_extended": fallback "optimal";
    "bv_extended_rrs": "specinfer"; `verifiers.bv_extended`) at L = 1 with K i.i.d. drafts.

    Derivation from the rule's definition (verifiers/bv_extended.py, docs/theory.md 19).
    At L = 1 BV on path 0 is token-level speculative sampling: weight w_1 = min(1, p/q)(X_0)
    and the last test accepts with probability h_1 = w_1, so it accepts X_0 with probability
    s = sum_x q(x) min(1, p(x)/q(x)) = sum min(p, q), and on rejection its correction would be
    drawn from res = (p - q)_+ / Z, Z = sum (p - q)_+ (its depth-0 weight is 1). There the
    rule draws that correction instead by the fallback step with target res and draft q over
    the children of the OTHER paths through the root: all K - 1 of them, i.i.d. q and
    independent of X_0 (i.i.d. drafting). A child equal to the rejected X_0 is never taken
    (the law sets its acceptance to 0) and could not be: a rejection has positive
    probability only where p(X_0) < q(X_0), where res(X_0) = 0. If the step takes a child c,
    the block is (c) and ends (c is at depth L = 1: the fresh start below c has no token left
    to test), so tau = 1; else Y ~ the step's correction and tau = 0. Hence
        E[tau + 1] = 1 + s + (1 - s) A_(K-1),
    A_n the step's acceptance with n i.i.d. draws against res:
      - "specinfer" (recursive rejection, with replacement): draw j of n tests a fresh X_j ~ q
        against the current residual and accepts with probability sum min(r_(j-1), q), r_0 =
        res, r_j = (r_(j-1) - q)_+ normalised; so 1 - A_n = prod_j (1 - sum min(r_(j-1), q)).
        As r_0 = res = (p - q)_+ / Z is SpecInfer's own residual after its first round on p,
        1 + s + (1 - s) A_(K-1) = 2 - (1 - s) prod_(j=1..K-1) (...) is SpecInfer's K-draft
        value: bv_extended_rrs = specinfer at L = 1 (specinfer_one_step; proved here,
        checked against the enumerated law in tests/test_realgap.py).
      - "optimal": the nested-partition rule on n draws returns a child with law r_n (built on
        (res, q), pooled cells above the registered support) and tests it token-level against
        res, so A_n = sum min(res, r_n) (`rule_acceptance`).
    K = 1: no other path, E = 1 + s (BV). Z = 0 means p <= q everywhere, so s = sum p = 1
    (normalised rows) and the fallback is never reached. float64, O(K V)."""
    p64, q64 = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if fallback == "specinfer":
        return specinfer_one_step(p64, q64, paths)
    if fallback != "optimal":
        raise BadArgument("fallback", f"'specinfer' or 'optimal', got {fallback!r}")
    accept = float(np.minimum(p64, q64).sum())
    rest = np.maximum(p64 - q64, 0.0)
    total = float(rest.sum())
    if paths == 1 or total <= 0:
        return 1.0 + accept
    step = rule_acceptance(rest / total, q64, paths - 1, EXTENDED_SUPPORT)
    return 1.0 + accept + max(0.0, 1.0 - accept) * step


def nodeopt_one_step(p: np.ndarray, q: np.ndarray, paths: int) -> float:
    """The registered nodeopt's exact E[tau + 1] at L = 1: at the root all K paths pass
    (N = K), its rule for K draws returns a child with law r_K and BV at L = 1 tests it
    token-level against p with r_K as the draft (verifiers/nodeopt.py), so E = 1 + sum
    min(p, r_K) (`rule_acceptance` on (p, q), the registered support). It equals the K-path
    optimum where V <= support (one cell per token: the single-step optimum, docs/theory.md
    8.5); above it the pooled cells may stay below the optimum (by 1.7e-3 at K = 4 on the
    smollm2 root row of benchmarks/results/gpu/trees)."""
    return 1.0 + rule_acceptance(p, q, paths, get_verifier("nodeopt").options.get("support"))


def exact_one_step(by_paths: dict[str, dict[str, Any]], p: np.ndarray, q: np.ndarray,
                   paths: list[int], optima: dict[str, Any]) -> None:
    """At L = 1 replace the sampled values of the verifiers with an exact full-vocabulary
    form (in place): bv and token, 1 + sum min(p, q) (path 0 only); nss,
    1 + sum_c p(c) (1 - (1 - q(c))^K) (Y ~ p, accepted when drafted); gbv, BV against its
    selection law r(x) = (B(x) + q(x))^K - B(x)^K (the drafted token of largest key (p/q,
    id) is selected; B(x): q-mass of the keys below x, `verifiers.gbv.below_mass`), i.e.
    1 + sum min(p, r) (docs/theory.md sections 9, 12.3); nodeopt, its rule's acceptance
    (`nodeopt_one_step`: the K-path optimum `optima` where V <= its support, docs/theory.md
    section 8; pooled cells above); specinfer, `specinfer_one_step`; bv_extended_rrs and
    bv_extended, `extended_bv_one_step` (bv_extended_rrs = specinfer at L = 1, proved there).
    float64 on the full rows. The other verifiers keep their sampled values (labelled
    estimates with intervals)."""
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    below = below_mass(q64[None], safe_div(p64, q64)[None])[0][0]
    support = get_verifier("nodeopt").options.get("support")
    for k in paths:
        selection = (below + q64) ** k - below**k
        exact = {"bv": 1.0 + float(np.minimum(p64, q64).sum()),
                 "gbv": 1.0 + float(np.minimum(p64, selection).sum()),
                 "nss": 1.0 + float((p64 * (1.0 - (1.0 - q64) ** k)).sum()),
                 "specinfer": specinfer_one_step(p64, q64, k)}
        wanted = by_paths[str(k)]
        if "nodeopt" in wanted:
            exact["nodeopt"] = (optima[str(k)]["value"] if support is None
                                or p64.shape[-1] <= support else nodeopt_one_step(p64, q64, k))
        if "bv_extended" in wanted:
            exact["bv_extended"] = extended_bv_one_step(p64, q64, k, "optimal")
        exact["token"] = exact["bv"]
        exact["bv_extended_rrs"] = exact["specinfer"]  # extended_bv_one_step(.., "specinfer")
        for name, value in exact.items():
            if name in wanted:
                wanted[name] = {"mean": value, "low": value, "high": value, "n": 0,
                                "exact": True, "method": "exact (closed form, full "
                                "rows, float64)"}


WIDTH_TARGETS = {1: 0.0, 2: 0.02, 3: 0.05, 4: 0.10}  # issue 33: mean bracket width per L


def width_schedule(width: int, depth: int, widths: list[int] | None = None,
                   padded: bool = True) -> list[int]:
    """The kept widths tried in turn: `widths` when given, else [width]; with padded (the
    padded layout bounds the trees: no kept_limit), widths whose coarse LP would exceed
    MAX_COARSE_PATHS ((M + 1)^L paths) are dropped (the first is kept)."""
    chosen = sorted(set(widths)) if widths else [width]
    fits = [m for m in chosen if not padded or (m + 1) ** depth <= MAX_COARSE_PATHS]
    return fits or chosen[:1]


EXPANSIONS = ("mass", "uniform")  # the kept tree of adaptive_bracket (docs/theory.md 13.5-13.6)


def mass_epsilons(count: int, width_target: float | None) -> list[float]:
    """The lumped-weight thresholds of the mass-driven trees tried in turn: epsilon_i =
    max(target, 0.01) / 4^(i + 1), i = 0..count-1 (each tree refines the last)."""
    base = max(width_target or 0.0, 0.01)
    return [base / 4 ** (i + 1) for i in range(count)]


def adaptive_bracket(target: Any, draft: Any, context: list[int], depth: int, paths: list[int],
                     temperature: float, draft_temperature: float | None, prefilled: Any,
                     verifiers: list[str] | None, widths: list[int],
                     width_target: float | None, time_budget: float | None,
                     expansion: str = "uniform", lp_paths: str = "ragged",
                     kept_limit: int | None = None) -> dict[str, Any]:
    """Expand the kept tree until every K's bracket is at most width_target wide or
    time_budget seconds are spent (checked between trees; the LPs of one tree get the
    budget left as their time limit). expansion "uniform": the complete M-ary tree of the
    top-M of p + q, M in `widths` order (section 13.5); "mass": the mass-driven tree of
    `mass_tree_rows` with cap M in `widths` order and threshold `mass_epsilons` (section
    13.6). The bracket per K is [largest lower, smallest upper] over the trees tried (each
    is certified for the same fine instance). lp_paths: of the mass-driven trees' coarse LPs
    (`bracket_bounds`). kept_limit: of the mass-driven trees (`mass_tree_rows`; None: the
    padded layout bounds their caps, as before).
    Returns {"bounds", "lower", "coarsening" (of the last tree), "expansion": [...]}."""
    inputs.choice("expansion", expansion, EXPANSIONS)
    start = time.perf_counter()
    bounds: dict[str, Any] = {}
    lowers: dict[str, Any] = {}
    steps = []
    coarsening: dict[str, Any] = {}
    epsilons = mass_epsilons(len(widths), width_target)
    for i, m in enumerate(widths):
        left = None if time_budget is None else max(1.0, time_budget - (time.perf_counter() - start))
        if expansion == "uniform":
            found = coarse_upper_bounds(target, draft, context, depth, m, paths, temperature,
                                        draft_temperature, prefilled, verifiers, left)
            coarsening = found["coarsening"]
            step = {"width": m}
        else:
            tree = mass_tree_rows(prefilled, depth, m, epsilons[i], paths, kept_limit)
            w = tree["width"]
            found = bracket_bounds(None, None, w, depth, paths, verifiers, time_limit=left,
                                   skip_late_laws=i > 0,  # the first tree: every law
                                   lp_paths=lp_paths, tree=tree["tree"],
                                   law_sizes="padded" if kept_limit is None else "ragged")
            coarsening = {"select": "mass-driven: top of p + q per node until the lumped "
                                    "weight is <= epsilon (docs/theory.md section 13.6)",
                          "cap": m, "epsilon": epsilons[i], "width": w, "nodes": tree["nodes"],
                          "kept_tokens": tree["kept_tokens"], "rows_seconds": tree["seconds"],
                          **lumped_mass(tree["tree"])}
            step = {"width": w, "cap": m, "epsilon": epsilons[i], "nodes": tree["nodes"],
                    "kept_tokens": tree["kept_tokens"], "padded_paths": (w + 1) ** depth,
                    "coarse_lp_size": found["lp_sizes"]["coarse LP"],
                    "law_nodes": found["law_nodes"],
                    "rows_seconds": tree["seconds"], "lumped_target": coarsening["lumped_target"]}
        step["upper_seconds"] = round(sum(b["seconds"] for b in found["bounds"].values()), 3)
        step["lp_seconds"] = round(sum(b["lp_seconds"] for b in found["bounds"].values()), 3)
        step["lower_seconds"] = round(sum(b["seconds"] for b in found["lower"].values()), 3)
        for k in paths:
            key = str(k)
            up, low = found["bounds"][key], found["lower"][key]
            if key not in bounds or up["value"] < bounds[key]["value"]:
                bounds[key] = {**up, "width": step["width"], "cap": m}
            if key not in lowers or low["value"] > lowers[key]["value"]:
                lowers[key] = {**low, "width": step["width"], "cap": m}
        gaps = {str(k): bounds[str(k)]["value"] - lowers[str(k)]["value"] for k in paths}
        if expansion == "uniform":
            step["remainder_target_mean"] = coarsening["remainder_target_mean"]
        steps.append({**step, "seconds": round(time.perf_counter() - start, 3),
                      "bracket_width": gaps})
        if width_target is not None and max(gaps.values()) <= width_target:
            break
        if time_budget is not None and time.perf_counter() - start > time_budget:
            break
    return {"bounds": bounds, "lower": lowers, "coarsening": coarsening, "expansion": steps}


def context_record(target: Any, draft: Any, context: list[int], depth: int, paths: list[int],
                   samples: int, batch: int, width: int, verifiers: list[str], temperature: float,
                   draft_temperature: float | None, generator: Any, score_dtype: Any = None,
                   widths: list[int] | None = None, width_target: float | None = None,
                   time_budget: float | None = None, expansion: str = "mass",
                   kept_limit: int | None = None) -> dict[str, Any]:
    """Bounds and verifier intervals at one context (module docstring); no I/O.

    widths / width_target / time_budget / expansion: the adaptive expansion of
    `adaptive_bracket` (default: the one width `width` (the cap of the mass-driven tree);
    width_target defaults to WIDTH_TARGETS[depth]); kept_limit: of the mass-driven trees
    (`mass_tree_rows`; None: bounded by the padded layout, as before)."""
    start = time.perf_counter()
    record: dict[str, Any] = {}
    ready = prefill(target, draft, context, temperature, draft_temperature)  # once per context
    record["prefill_seconds"] = ready.seconds
    if depth == 1:
        p, q = ready.target.root_row.cpu().numpy(), ready.draft.root_row.cpu().numpy()
        closed = one_step_optimum(p.astype(np.float64), q.astype(np.float64), paths)
        bounds = {str(k): {"value": float(c.value[0]), "certified": False, "closed_form": True,
                           "threshold_set_size": int(c.size[0]),
                           "certificate": "closed form (threshold sets, float64 on the full rows)",
                           "method": "K-path optimum at L = 1, closed form "
                                     "(speclp.lp.closed_form.one_step_optimum)"}
                  for k, c in zip(paths, closed, strict=True)}
        record["rows"] = {"sum_min_pq": float(np.minimum(p, q).sum())}
        lowers = {k: {**b, "verifier": "optimum (closed form)", "certified": False}
                  for k, b in bounds.items()}
    else:
        target_width = WIDTH_TARGETS.get(depth) if width_target is None else width_target
        coarse = adaptive_bracket(target, draft, context, depth, paths, temperature,
                                  draft_temperature, ready, verifiers,
                                  width_schedule(width, depth, widths, kept_limit is None),
                                  target_width, time_budget, expansion, kept_limit=kept_limit)
        bounds, lowers = coarse["bounds"], coarse["lower"]
        record["coarsening"] = coarse["coarsening"]
        record["expansion"] = coarse["expansion"]
    found = verifier_intervals(target, draft, context, depth, paths, samples, batch, verifiers,
                               temperature, draft_temperature, generator, score_dtype, ready)
    if depth == 1:
        exact_one_step(found["by_paths"], p, q, paths, bounds)
    record["trees"] = found["trees"]
    by_paths: dict[str, Any] = {}
    failures: list[str] = []
    for k in paths:
        key = str(k)
        upper = bounds[key]
        intervals = found["by_paths"][key]
        best = max(intervals, key=lambda n: intervals[n]["mean"])
        tolerance = (CERTIFIED_TOLERANCE if upper["certified"] or upper.get("closed_form")
                     else UNCERTIFIED_TOLERANCE)
        gaps = {n: {"mean": upper["value"] - iv["mean"], "low": upper["value"] - iv["high"],
                    "high": upper["value"] - iv["low"]} for n, iv in intervals.items()}
        for n, iv in intervals.items():
            if iv["low"] > upper["value"] + tolerance:
                failures.append(f"K={k}: {n} E[tau+1] {iv['low']:.6f}..{iv['high']:.6f} lies above "
                                f"the upper bound {upper['value']:.6f}")
        lower = lowers[key]
        if lower["value"] > upper["value"] + tolerance:
            failures.append(f"K={k}: certified lower bound {lower['value']:.6f} lies above the "
                            f"upper bound {upper['value']:.6f}")
        by_paths[key] = {"upper": upper, "lower": lower,
                         "best_estimate": {"verifier": best, **intervals[best]},
                         "verifiers": intervals, "gaps": gaps}
    record["by_paths"] = by_paths
    record["values"] = found["values"]
    record["failures"] = failures
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


def _float64() -> Any:

    return torch.float64


# ---------------------------------------------------------------------------------------
# runs over prompts and contexts (resumable)


def realgap_key(settings: dict[str, Any]) -> str:
    """Key of a full-vocabulary record: every setting that changes it (store.record_key)."""
    return record_key(settings)


def run_realgap(target: Any, draft: Any, prompts: list[dict[str, Any]], depths: list[int],
                paths: list[int], out_file: Path, *, samples: int = 64, batch: int = 16,
                width: int = 8, verifiers: list[str] | None = None, contexts_per_prompt: int = 2,
                every: int = 8, temperature: float = 1.0, draft_temperature: float | None = None,
                seed: int = 0, label: str = "", eos: set[int] | None = None,
                score_dtype: Any = None,
                progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
                widths: list[int] | None = None, width_target: float | None = None,
                time_budget: float | None = None, model_dtype: str | None = None,
                kept_limit: int | None = None) -> dict[str, Any]:
    """Compute (or resume) full-vocabulary realgap records; returns {file, computed, reused,
    failures, keys} (keys: this call's records, so that summaries count only what was asked).
    prompts: [{"id", "tokens"[, "text"]}]. Contexts: prompt + k*every target-sampled tokens.
    widths, width_target, time_budget: the adaptive expansion at L >= 2 (`adaptive_bracket`;
    default: the one width `width`, stopping early at WIDTH_TARGETS[L]); kept_limit: at most
    this many kept tokens per mass-driven tree, whose caps are then not bounded by the padded
    layout (None: bounded, as before; the key has it only when set). model_dtype (None:
    str(target.dtype)): the weights' dtype in the keys. The models are used only for records
    not yet in out_file: a fully resumed run may pass target = draft = None (realgap_keys
    says which keys a run asks for, without a model).
    """

    names = verifiers or verifier_names(draft_sampling="iid")
    dtype = score_dtype or torch.float64
    failures: list[str] = []
    settings = _full_settings(label, every, temperature, draft_temperature, seed, paths, samples,
                              batch, names, dtype, model_dtype or str(getattr(target, "dtype", "")),
                              width, widths, width_target, time_budget, kept_limit)

    def keys_of(prompt: dict[str, Any]) -> list[str]:
        return [realgap_key(settings(prompt, c, d))
                for c in range(contexts_per_prompt) for d in depths]

    with open_records(out_file, "realgap") as run:
        for prompt, contexts in prompt_contexts(run, target, progress(prompts), keys_of,
                                                contexts_per_prompt, every, temperature, eos,
                                                seed):
            for c, context in enumerate(contexts):
                for d in depths:
                    key = realgap_key(settings(prompt, c, d))
                    if key in run.done:
                        continue
                    tree_gen = torch.Generator().manual_seed(
                        seed + _stable_hash(f"{prompt['id']}|{c}|L{d}|trees"))
                    body = context_record(target, draft, context, d, sorted(paths), samples,
                                          batch, width, names, temperature, draft_temperature,
                                          tree_gen, dtype, widths, width_target, time_budget,
                                          kept_limit=kept_limit)
                    record = {"key": key, **settings(prompt, c, d),
                              "context_tokens": len(context),
                              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **body}
                    run.write(record)
                    failures += [f"{prompt['id']} context {c} L={d}: {f}"
                                 for f in body["failures"]]
    return {"file": str(out_file), "computed": run.computed, "reused": run.reused,
            "failures": failures, "keys": run.wanted}


def _full_settings(label: str, every: int, temperature: float, draft_temperature: float | None,
                   seed: int, paths: list[int], samples: int, batch: int, names: list[str],
                   score_dtype: Any, model_dtype: str, width: int, widths: list[int] | None,
                   width_target: float | None, time_budget: float | None,
                   kept_limit: int | None = None,
                   ) -> Callable[[dict[str, Any], int, int], dict[str, Any]]:
    """settings(prompt, context, depth): every setting of a full-vocabulary record (its key)."""
    common = {"mode": MODE_FULL, "pair": label, "every": every, "temperature": temperature,
              "draft_temperature": draft_temperature, "seed": seed, "paths": sorted(paths),
              "samples": samples, "batch": batch, "verifiers": sorted(names),
              "score_dtype": str(score_dtype), "model_dtype": model_dtype,
              "bounds_version": BOUNDS_VERSION}
    if widths or width_target is not None or time_budget is not None:
        common.update(widths=sorted(set(widths or [width])), width_target=width_target,
                      time_budget=time_budget)
    if kept_limit is not None:  # only when set: the keys of earlier settings are unchanged
        common["kept_limit"] = kept_limit

    def settings(prompt: dict[str, Any], c: int, d: int) -> dict[str, Any]:
        drawn = {} if prompt.get("prompt_seed") is None else {"prompt_seed": prompt["prompt_seed"]}
        return {**common, "prompt": prompt["id"], "prompt_digest": prompt_digest(prompt), **drawn,
                "context": c, "depth": d, "width": width if d > 1 else None}

    return settings


def realgap_keys(prompts: list[dict[str, Any]], depths: list[int], paths: list[int], *,
                 model_dtype: str, samples: int = 64, batch: int = 16, width: int = 8,
                 verifiers: list[str] | None = None, contexts_per_prompt: int = 2, every: int = 8,
                 temperature: float = 1.0, draft_temperature: float | None = None, seed: int = 0,
                 label: str = "", score_dtype: Any = None, widths: list[int] | None = None,
                 width_target: float | None = None, time_budget: float | None = None,
                 kept_limit: int | None = None, **_: Any) -> list[str]:
    """The record keys run_realgap asks for with the same arguments (other run_realgap
    arguments, eos and progress, are ignored), computed without a model: prompts need
    "id" and "text" (or "tokens")."""
    names = verifiers or verifier_names(draft_sampling="iid")
    settings = _full_settings(label, every, temperature, draft_temperature, seed, paths, samples,
                              batch, names, score_dtype or torch.float64, model_dtype, width,
                              widths, width_target, time_budget, kept_limit)
    return [realgap_key(settings(p, c, d)) for p in prompts for c in range(contexts_per_prompt)
            for d in depths]


def prompt_contexts(run: KeyedRecords, target: Any, prompts: Iterable[dict[str, Any]],
                    keys_of: Callable[[dict[str, Any]], list[str]], contexts_per_prompt: int,
                    every: int, temperature: float, eos: set[int] | None, seed: int,
                    ) -> Iterator[tuple[dict[str, Any], list[list[int]]]]:
    """(prompt, its target-sampled contexts) for every prompt with a record key
    (keys_of(prompt)) not yet in `run` (store.KeyedRecords.want counts the others as reused);
    nothing is sampled for a prompt whose keys are all done. The contexts' generator is
    seeded by seed and the prompt id."""
    for prompt in prompts:
        if not run.want(keys_of(prompt)):
            continue
        gen = torch.Generator().manual_seed(seed + _stable_hash(prompt["id"]))
        yield prompt, sample_contexts(target, prompt["tokens"], contexts_per_prompt, every,
                                      temperature, eos, gen)


def prompt_digest(prompt: dict[str, Any]) -> str:
    """Short sha256 of a prompt (an edited prompt changes the key): of its text when it has
    one, so that a key is known before the tokenizer is loaded (the pair, also in the key,
    fixes the tokenization), else of its token ids."""
    if "text" in prompt:
        return hashlib.sha256(("text:" + prompt["text"]).encode()).hexdigest()[:16]
    return hashlib.sha256(json.dumps([int(t) for t in prompt["tokens"]]).encode()).hexdigest()[:16]


def full_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("mode") == MODE_FULL]


def summarize_realgap(records: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Per (pair, T, L, K): means over contexts with 95% cluster intervals on per-prompt means.

    upper / lower: mean certified bounds (lower None for records made before it existed;
    how many uppers certified / closed form); bracket_width: mean upper - lower (against
    width_target, WIDTH_TARGETS); verifiers: mean E[tau+1] (and "exact": True when every
    context's value is exact, False when any is a sampled estimate); gap: mean (upper -
    verifier); best_verifier_counts: how often each verifier had the best estimate.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in full_records(records):  # one group per run settings (never mixed across runs)
        for k in r["by_paths"]:
            groups.setdefault((r["pair"], r["temperature"], r.get("draft_temperature"),
                               r["depth"], int(k), r.get("width"), r.get("samples"),
                               tuple(sorted(r["by_paths"][k]["verifiers"]))), []).append(r)
    out = []
    for (pair, temperature, _, depth, k, width, _, _), recs in sorted(groups.items(),
                                                                     key=lambda g: str(g[0])):
        key = str(k)
        prompts = sorted({r["prompt"] for r in recs})

        def cluster(values: list[tuple[str, float]], prompts: list[str] = prompts
                    ) -> dict[str, Any]:
            return _cluster_mean(values, prompts, seed)

        upper = cluster([(r["prompt"], r["by_paths"][key]["upper"]["value"]) for r in recs])
        names = sorted(recs[0]["by_paths"][key]["verifiers"])
        verifiers = {n: {**cluster([(r["prompt"], r["by_paths"][key]["verifiers"][n]["mean"])
                                    for r in recs]),
                         # exact in every context (L = 1 closed forms), else a sampled estimate
                         "exact": all(r["by_paths"][key]["verifiers"][n].get("exact") is True
                                      for r in recs)} for n in names}
        gaps = {n: cluster([(r["prompt"], r["by_paths"][key]["gaps"][n]["mean"]) for r in recs])
                for n in names}
        best: dict[str, int] = {}
        for r in recs:
            block = r["by_paths"][key]
            name = (block.get("best_estimate") or block["lower"])["verifier"]
            best[name] = best.get(name, 0) + 1
        certified_lower = [(r["prompt"], r["by_paths"][key]["lower"]["value"]) for r in recs
                           if "value" in r["by_paths"][key]["lower"]]
        bounds = [r["by_paths"][key]["upper"] for r in recs]
        out.append({
            "pair": pair, "temperature": temperature, "depth": depth, "paths": k,
            "width": width, "draft_temperature": recs[0].get("draft_temperature"),
            "contexts": len(recs), "prompts": len(prompts),
            "upper": upper,
            "lower": cluster(certified_lower) if len(certified_lower) == len(recs) else None,
            "bracket_width": (cluster([(r["prompt"], r["by_paths"][key]["upper"]["value"]
                                        - r["by_paths"][key]["lower"]["value"]) for r in recs])
                              if len(certified_lower) == len(recs) else None),
            "width_target": WIDTH_TARGETS.get(depth),
            "upper_kind": "closed-form optimum" if depth == 1 else "coarsened LP bound",
            "upper_certified": sum(bool(b["certified"]) for b in bounds),
            "upper_closed_form": sum(bool(b.get("closed_form")) for b in bounds),
            "verifiers": verifiers, "gaps": gaps, "best_verifier_counts": best,
            "failures": sum(len(r["failures"]) for r in recs),
        })
    return out


def _cluster_mean(values: list[tuple[str, float]], prompts: list[str], seed: int) -> dict[str, Any]:
    """Mean over prompts of the per-prompt mean of per-context values, with the cluster interval on
    the per-prompt means (n/a with one prompt). `seed` is unused (kept for callers)."""
    index = {p: i for i, p in enumerate(prompts)}
    sums, counts = np.zeros(len(prompts)), np.zeros(len(prompts))
    for prompt, v in values:
        sums[index[prompt]] += v
        counts[index[prompt]] += 1
    keep = counts > 0
    return cluster_mean_interval(sums[keep], counts[keep])





# ---------------------------------------------------------------------------------------
# records I/O and the labelled renormalised option (truncated instances)


def renormalised_key(prompt: dict[str, Any], context: int, width: int, depth: int, paths: int,
                     **settings: Any) -> str:
    """Key of a renormalised record: the instance and every other setting (store.record_key)."""
    return record_key({"mode": MODE_RENORMALISED, "prompt": prompt["id"],
                       "prompt_digest": prompt_digest(prompt), "context": context,
                       "width": width, "depth": depth, "paths": paths, **settings})


def renormalised_keys(prompts: list[dict[str, Any]], widths: list[int], depths: list[int],
                      paths: list[int], contexts_per_prompt: int, **fixed: Any) -> list[str]:
    """The keys run_realgap_renormalised asks for (fixed: pair, every, temperature,
    draft_temperature, seed, dtype), computed without a model."""
    return [renormalised_key(prompt, c, m, d, k, **fixed) for prompt in prompts
            for c in range(contexts_per_prompt) for m in widths for d in depths for k in paths]


def renormalised_gap_record(instance: Any, paths: int, verifiers: list[str]) -> dict[str, Any]:
    """LP optimum (certified) and every verifier's exact E[tau + 1] on one instance."""
    start = time.perf_counter()
    record = optimum(instance, paths)
    values = {}
    for name in verifiers:
        values[name] = float(exact_result(instance.model(), name, paths=paths).block_efficiency)
    return {
        "optimum": record.value,
        "optimum_certified": bool(record.certified),
        "certificate": record.certificate,
        "verifiers": values,
        "gaps": {n: record.value - v for n, v in values.items()},
        "seconds": round(time.perf_counter() - start, 3),
    }


def run_realgap_renormalised(target: Any, draft: Any, prompts: list[dict[str, Any]],
                             widths: list[int], depths: list[int], paths: list[int], out_file: Path,
                             contexts_per_prompt: int = 2, every: int = 8, temperature: float = 1.0,
                             draft_temperature: float | None = None, seed: int = 0, label: str = "",
                             eos: set[int] | None = None,
                             progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
                             model_dtype: str | None = None,
                             ) -> dict[str, Any]:
    """LABELLED OPTION, not the default: gaps on TRUNCATED instances (top-M of the target
    per node, both rows renormalised over them; neither an upper nor a lower bound on the
    real pair). Compute (or resume) the records; returns {"file", "computed", "reused", "keys"}.

    prompts: [{"id", "tokens"[, "text"]}]. Contexts: prompt + k*every target-sampled tokens.
    model_dtype (None: str(target.dtype)): the weights' dtype in the keys; the models are
    used only for records not yet in out_file (renormalised_keys: the keys, without a model).
    """

    verifiers = verifier_names(draft_sampling="iid")  # contexts are drafted i.i.d.
    fixed = {"pair": label, "every": every, "temperature": temperature,
             "draft_temperature": draft_temperature, "seed": seed,
             "dtype": model_dtype or str(getattr(target, "dtype", ""))}

    def keys_of(prompt: dict[str, Any]) -> list[str]:
        return renormalised_keys([prompt], widths, depths, paths, contexts_per_prompt, **fixed)

    with open_records(out_file, "realgap") as run:
        for prompt, contexts in prompt_contexts(run, target, progress(prompts), keys_of,
                                                contexts_per_prompt, every, temperature, eos,
                                                seed):
            for c, context in enumerate(contexts):
                for m in widths:
                    for d in depths:
                        todo = [k for k in paths
                                if renormalised_key(prompt, c, m, d, k, **fixed) not in run.done]
                        if not todo:
                            continue
                        rows = tree_rows(target, draft, context, m, d, temperature, draft_temperature,
                                         select="target")
                        inst = from_rows(rows.target, rows.draft, d, name=f"{prompt['id']}-c{c}")
                        for k in todo:
                            record = {
                                "key": renormalised_key(prompt, c, m, d, k, **fixed), "pair": label,
                                "prompt": prompt["id"], "context": c, "context_tokens": len(context),
                                "width": m, "depth": d, "paths": k, "selection": "target top-M per node",
                                "mode": MODE_RENORMALISED, "renormalised": True, "every": every,
                                "seed": seed, "prompt_seed": prompt.get("prompt_seed"),
                                "covered_target_root": float(rows.covered_target[0]),
                                "covered_target_mean": float(np.mean(rows.covered_target)),
                                "covered_draft_mean": float(np.mean(rows.covered_draft)),
                                "temperature": temperature, "draft_temperature": draft_temperature,
                                "rows_seconds": rows.seconds,
                                **renormalised_gap_record(inst, k, verifiers),
                            }
                            run.write(record)
    return {"file": str(out_file), "computed": run.computed, "reused": run.reused,
            "keys": run.wanted}


def summarize_renormalised(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean optimum and mean gap per verifier, per (M, L, K), of renormalised records."""
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for r in records:
        if not r.get("renormalised"):
            continue
        groups.setdefault((r["width"], r["depth"], r["paths"]), []).append(r)
    out = []
    for (m, d, k), recs in sorted(groups.items()):
        names = sorted(recs[0]["gaps"])
        out.append({
            "width": m, "depth": d, "paths": k, "contexts": len(recs),
            "certified": sum(r["optimum_certified"] for r in recs),
            "mean_optimum": float(np.mean([r["optimum"] for r in recs])),
            "mean_gap": {n: float(np.mean([r["gaps"][n] for r in recs])) for n in names},
            "max_gap": {n: float(np.max([r["gaps"][n] for r in recs])) for n in names},
            "mean_covered_target": float(np.mean([r["covered_target_mean"] for r in recs])),
        })
    return out




def _stable_hash(text: str) -> int:

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


class RealgapStatus(StrEnum):
    """The outcome of a realgap run (a StrEnum: equal to its word)."""

    BRACKETED = "bracketed"  # full-vocabulary: every interval and lower bound <= the certified upper
    FAILED = "bracket failed"  # full-vocabulary: some interval or lower bound above it (exit 1)
    UNBOUNDED = "renormalised"  # renormalised rows bound nothing: no bracket to check


@dataclasses.dataclass(frozen=True)
class RealgapResult:
    """One `speclp realgap` invocation, inspectable without the CLI. mode: MODE_FULL or
    MODE_RENORMALISED (the JSON's "instances"); pair: the run's label; file: the records
    (JSONL); computed / reused: records computed now / found recorded; records: this
    invocation's records (summarised); failures: the bracket failures (full mode; empty
    otherwise); summary: summarize_realgap or summarize_renormalised of the records; figures:
    files drawn. record: the command's --json object, read-only; to_json() gives a copy."""

    status: RealgapStatus
    mode: str
    pair: str
    file: str
    computed: int
    reused: int
    records: int
    failures: tuple[str, ...]
    summary: tuple[Mapping[str, Any], ...]
    figures: tuple[str, ...]
    record: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RealgapResult:
        """The result of the command's object (realgap_full / realgap_renormalised build it)."""
        record = copy.deepcopy(dict(data))
        failures = tuple(record.get("failures") or ())
        status = (RealgapStatus.UNBOUNDED if record["instances"] == MODE_RENORMALISED
                  else RealgapStatus.FAILED if failures else RealgapStatus.BRACKETED)
        return cls(status, record["instances"], record["pair"], record["file"], record["computed"],
                   record["reused"], record["records"], failures,
                   tuple(MappingProxyType(row) for row in record["summary"]), tuple(record["figures"]),
                   MappingProxyType(record))

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.record))


# ---------------------------------------------------------------------------
# a run as its typed result (what `speclp realgap` prints; `speclp trees` shares the helpers)
# ---------------------------------------------------------------------------

SELF_DRAFT_TEMPERATURE = 1.5  # a single model drafts for itself at this temperature by default
RENORMALISED_LABEL = ("TRUNCATED: top-M of the TARGET row per node, rows RENORMALISED over the M "
                      "tokens (neither an upper nor a lower bound on the real pair)")
Loader = Callable[[], Any]
"""Loads the pair (decode.models.ModelPair), each prompt given its "tokens"; called only when a
record asked for is missing (a fully recorded run loads no model)."""
Plotter = Callable[[list[dict[str, Any]], Path], list[Path]]
"""(records, folder) -> the figures written (experiments.plots; None: no figures)."""
Progress = Callable[[Iterable[Any]], Iterable[Any]]


def run_identity(pair_name: str, draft_temperature: float | None) -> tuple[str, float | None]:
    """(label, draft temperature) of a run on the pair `pair_name`, from the name alone: a
    single model drafts for itself at SELF_DRAFT_TEMPERATURE unless a draft temperature is given."""
    if pair_names(pair_name) is not None:
        return pair_label(pair_name), draft_temperature
    if draft_temperature is None:
        draft_temperature = SELF_DRAFT_TEMPERATURE
    return f"{pair_label(pair_name)}, draft temperature {draft_temperature}", draft_temperature


def planned_dtype() -> str:
    """The dtype of the weights a run loads (the default device's), as the record keys name
    it: known before anything is loaded."""
    return str(default_dtype(default_device()))


def recorded(out_file: Path, keys: list[str]) -> bool:
    """Every one of `keys` is already in out_file: the run has nothing to compute (and loads
    no model)."""
    done = KeyedRecords(out_file).done
    return all(k in done for k in keys)


def realgap_full(spec: Any, prompts: list[dict[str, Any]], out: Path, load: Loader,
                 progress: Progress | None = None, plot: Plotter | None = None) -> RealgapResult:
    """The full-vocabulary run of `spec` (an experiments.realgap_spec.RealgapSpec, instances
    MODE_FULL) on `prompts` into out/SLUG.jsonl (run_realgap, resumable), as its RealgapResult:
    status FAILED when a bracket fails (a verifier interval or the lower bound above the upper
    bound), else COMPLETE. The pair is loaded (`load`) only when a record asked for is missing
    (realgap_keys); only this run's records are summarised and plotted."""
    label, draft_t = run_identity(spec.pair, spec.draft_temperature)
    out_file = out / f"{slug(spec.pair)}.jsonl"
    depths, ks = list(spec.depths), list(spec.paths)
    schedule = {"widths": list(spec.widths)} if len(spec.widths) > 1 else {}  # one M: the old keys
    args = dict(samples=spec.samples, batch=spec.batch, width=spec.widths[0], **schedule,
                width_target=spec.width_target, time_budget=spec.context_budget,
                kept_limit=spec.kept_limit, verifiers=list(spec.verifiers),
                contexts_per_prompt=spec.contexts_per_prompt,
                every=spec.every, temperature=spec.temperature, draft_temperature=draft_t,
                seed=spec.seed, label=label, model_dtype=planned_dtype(),
                score_dtype=torch.float64 if spec.score_dtype == "fp64" else torch.float32)
    pair = None if recorded(out_file, realgap_keys(prompts, depths, ks, **args)) else load()
    status = run_realgap(pair and pair.target.model, pair and pair.draft.model, prompts, depths, ks,
                         out_file, eos=pair and set(pair.target.eos_token_ids),
                         progress=progress or (lambda it: it), **args)
    records = full_records(select_records(load_jsonl(out_file), status.pop("keys")))
    figures = plot(records, out) if plot is not None else []
    return RealgapResult.from_json({
        "pair": label, "instances": MODE_FULL, **status, "records": len(records),
        "figures": [str(f) for f in figures], "contexts": [context_view(r) for r in records],
        "summary": summarize_realgap(records)})


def realgap_renormalised(spec: Any, prompts: list[dict[str, Any]], out: Path, load: Loader,
                         progress: Progress | None = None, plot: Plotter | None = None) -> RealgapResult:
    """The labelled renormalised run of `spec` (instances MODE_RENORMALISED) into
    out/SLUG_renormalised.jsonl (run_realgap_renormalised, resumable), as its RealgapResult;
    the pair is loaded only when a record asked for is missing (renormalised_keys)."""
    label, draft_t = run_identity(spec.pair, spec.draft_temperature)
    out_file = out / f"{slug(spec.pair)}_renormalised.jsonl"
    widths, depths, ks = list(spec.widths), list(spec.depths), list(spec.paths)
    fixed = {"pair": label, "every": spec.every, "temperature": spec.temperature,
             "draft_temperature": draft_t, "seed": spec.seed, "dtype": planned_dtype()}
    keys = renormalised_keys(prompts, widths, depths, ks, spec.contexts_per_prompt, **fixed)
    pair = None if recorded(out_file, keys) else load()
    status = run_realgap_renormalised(
        pair and pair.target.model, pair and pair.draft.model, prompts, widths, depths, ks,
        out_file, spec.contexts_per_prompt, spec.every, spec.temperature, draft_t, spec.seed, label,
        pair and set(pair.target.eos_token_ids), progress=progress or (lambda it: it),
        model_dtype=fixed["dtype"])
    records = select_records(load_jsonl(out_file), status.pop("keys"))
    figures = plot(records, out) if plot is not None else []
    return RealgapResult.from_json({
        "pair": label, "instances": MODE_RENORMALISED, **status, "records": len(records),
        "figures": [str(f) for f in figures], "label": RENORMALISED_LABEL,
        "summary": summarize_renormalised(records)})


def context_view(record: dict[str, Any]) -> dict[str, Any]:
    """Per-context statement: certified lower <= optimum <= certified upper, and the best
    verifier's estimate with its interval (an estimate: it may lie either side of lower)."""
    view: dict[str, Any] = {"prompt": record["prompt"], "context": record["context"],
                            "depth": record["depth"], "by_paths": {}}
    for k, block in record["by_paths"].items():
        upper, lower = block["upper"], block["lower"]
        best = block.get("best_estimate") or lower  # records made before the certified lower
        tag = ("closed form" if upper.get("closed_form")
               else "certified" if upper["certified"] else "NOT certified")
        exact = best.get("exact")
        view["by_paths"][k] = {
            "lower": (f"{lower['value']:.4f} ({lower['verifier']})" if "value" in lower
                      else "n/a (older record)"),
            "upper": f"{upper['value']:.4f} ({tag})",
            "best": best["verifier"],
            "estimate": (f"{best['mean']:.4f} (exact)" if exact else
                         f"{best['mean']:.4f} [{best['low']:.4f}, {best['high']:.4f}]"),
            "verifiers": {n: [iv["mean"], iv["low"], iv["high"]]
                          for n, iv in block["verifiers"].items()},
        }
    return view
