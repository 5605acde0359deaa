"""The node-level form of the K-path LP (a relaxation; docs/theory.md section 7.1).

Variables beta(z) >= 0 for the nodes z of depth 1..L only:
    maximise 1 + sum beta,  chain rows beta(u t) - p(t|u) beta(u) <= 0 (speclp.lp.rows),
    beta(S) <= f(cyl(S))  for every set S of nodes of one depth d,
where cyl(S) is the set of leaves through S and f the hitting function of the drafted set
(speclp.lp.hitting; i.i.d.: f(cyl(S)) = 1 - (1 - q(S))^K, q(S) the total draft
probability of the nodes). It is a relaxation of the class LP and of the full LP
(docs/theory.md Lemma 7.1), hence
    class optimum = full optimum <= node-form optimum,
strict in general for L >= 2 (section 7.1 has an exact instance; `speclp check node-form`
finds such instances); equal at K = 1 and at L = 1. Solved by the same
cutting planes as the class LP (speclp.lp.class_lp.solve_with_cuts), separating each
depth with the separation lemma.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..verifiers.tree import TreeModel, depth_offset, node_prefix, num_nodes
from .class_lp import (
    all_subsets,
    choose_method,
    finish_lp,
    float_cut_confirmed,
    model_of,
    solve_with_cuts,
)
from .engine import Optimum
from .hitting import HittingFunction, hitting_function
from .instance import Instance
from .program import Block, LinearProgram, ValueTable
from .rows import chain_rows


def node_form_lp(model: TreeModel, hittings: Sequence[HittingFunction],
                 cuts: Sequence[tuple[int, tuple[int, ...]]]) -> LinearProgram:
    """The node-level form with rows beta(S) <= f_d(S) for (d, S) in cuts.

    hittings[d - 1] is the hitting function on the nodes of depth d. Columns: beta(z) at
    column z - 1 (shortlex, z = 1..N-1). Rows: N-1 chain rows, then one row per cut
    (S = node codes at depth d).
    """
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    table = ValueTable(True)
    rows, cols, refs, c_rhs = chain_rows(model, table, 0, 0)
    rhs = [c_rhs]
    cut_row0 = n_nodes - 1
    if cuts:
        rhs.append(table.add(np.array([hittings[d - 1].exact(s) for d, s in cuts], dtype=object)))
    for i, (d, s) in enumerate(cuts):
        rows.append(np.full(len(s), cut_row0 + i, dtype=np.int64))
        cols.append(depth_offset(vocab, d) + np.asarray(s, dtype=np.int64) - 1)
        refs.append(np.full(len(s), table.one, dtype=np.int64))
    cut_list = list(cuts)

    def ub_label(i: int) -> str:
        i = int(i)
        if i < cut_row0:
            return f"chain[{node_prefix(i + 1, vocab)}]"
        d, s = cut_list[i - cut_row0]
        return "subset[" + ", ".join(str(node_prefix(depth_offset(vocab, d) + e, vocab))
                                     for e in s) + "]"

    return finish_lp(
        f"node-form-V{vocab}-L{depth}-K{hittings[0].paths}", n_nodes - 1,
        np.full(n_nodes - 1, table.one, dtype=np.int64), table, Block.empty(), rows, cols, refs,
        rhs, variable_label=lambda j: f"beta[{node_prefix(int(j) + 1, vocab)}]", ub_label=ub_label,
        meta={"kind": "node-form", "vocab_size": vocab, "depth": depth,
              "paths": hittings[0].paths, "cuts": len(cut_list)})


def node_form_optimum(instance: Instance | TreeModel, paths: int, draft_sampling: str = "iid",
                      method: str = "auto", max_rounds: int = 500,
                      cuts_per_round: int = 8) -> Optimum:
    """Optimum of the node-level form (module docstring), certified like the class LP.

    record.method: "enumerate" | "cuts"; record.details: cuts, rounds, min_subset_slack
    (exact minimum over depths and node sets of f_d(S) - beta(S)), beta [N-1] (exact
    Fractions of the optimal point when certified, shortlex nodes of depth 1..L).
    """
    model, rational, _ = model_of(instance)
    vocab, depth = model.vocab_size, model.depth
    hittings = [hitting_function(model, paths, draft_sampling, depth=d)
                for d in range(1, depth + 1)]
    chosen = choose_method(method, vocab**depth)
    enumerate_all = chosen == "enumerate"
    if enumerate_all:
        cuts = [(d, s) for d in range(1, depth + 1) for s in all_subsets(vocab**d, proper=False)]
    else:
        cuts = [(d, (e,)) for d in range(1, depth + 1) for e in range(vocab**d)]

    def level(x: np.ndarray, d: int) -> np.ndarray:
        start = depth_offset(vocab, d) - 1
        return x[start:start + vocab**d]

    def separate(x: np.ndarray) -> list[tuple[int, tuple[int, ...]]]:
        out = []
        for d in range(1, depth + 1):
            values = level(x, d)
            found = hittings[d - 1].most_violated(values, exact=False, limit=cuts_per_round)
            out += [(d, s) for _, s in found if float_cut_confirmed(hittings[d - 1], values, s)]
        return out

    def exact_separate(x: np.ndarray) -> tuple[Fraction, tuple[int, tuple[int, ...]] | None]:
        worst: tuple[Fraction, tuple[int, tuple[int, ...]] | None] = (Fraction(0), None)
        for d in range(1, depth + 1):
            value, cut = hittings[d - 1].minimum(level(x, d), exact=True)
            if value < worst[0]:
                worst = (value, (d, cut))
        return worst

    record, vertex = solve_with_cuts(lambda c: node_form_lp(model, hittings, c), separate,
                                     exact_separate, cuts, enumerate_all, rational, chosen,
                                     max_rounds)
    record.details["beta"] = list(vertex) if vertex is not None else None
    return record
