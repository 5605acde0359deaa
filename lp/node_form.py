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

The antichain form (docs/theory.md section 7.5; speclp.lp.antichain) has the rows
beta(Z) <= f(cyl(Z)) for every antichain Z, nodes of mixed depths allowed, and is EXACT:
its optimum is the K-path optimum (Theorem 7.5, by Frank's discrete sandwich theorem).
antichain_form_optimum here certifies it from an exact basis like the class LP (small
trees); speclp.lp.antichain holds its rows, its hull separation, and the in-out cutting
planes with exact bounds that the engine runs past 128 leaves at depth <= 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ..inputs import BadArgument
from ..verifiers.tree import TreeModel, depth_offset, num_nodes
from .antichain import antichain_violations, node_set_lp, path_masses
from .class_lp import (
    METHODS,
    all_subsets,
    choose_method,
    float_cut_confirmed,
    model_of,
    solve_with_cuts,
)
from .engine import Optimum
from .hitting import HittingFunction, g_exact, hitting_function
from .instance import Instance
from .program import LinearProgram


def node_form_lp(model: TreeModel, hittings: Sequence[HittingFunction],
                 cuts: Sequence[tuple[int, tuple[int, ...]]]) -> LinearProgram:
    """The node-level form with rows beta(S) <= f_d(S) for (d, S) in cuts.

    hittings[d - 1] is the hitting function on the nodes of depth d. Columns: beta(z) at
    column z - 1 (shortlex, z = 1..N-1). Rows: N-1 chain rows, then one row per cut
    (S = node codes at depth d).
    """
    vocab = model.vocab_size
    return node_set_lp(model, [tuple(depth_offset(vocab, d) + e for e in s) for d, s in cuts],
                       [hittings[d - 1].exact(s) for d, s in cuts], "node-form", "subset",
                       hittings[0].paths)


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


# ---------------------------------------------------------------------------
# the antichain form (exact for i.i.d. drafts; docs/theory.md section 7.5)
# ---------------------------------------------------------------------------

AUTO_ENUMERATED_ANTICHAINS = 1024  # method "auto" lists every antichain up to this many


def all_antichains(vocab: int, depth: int, limit: int) -> list[tuple[int, ...]] | None:
    """Every nonempty antichain of the nodes of depth 1..L, or None when there are more than
    `limit` (A(n) = 1 + prod over children A(c) antichains in a subtree, the empty one counted)."""
    n_nodes = num_nodes(vocab, depth)
    first_leaf = num_nodes(vocab, depth - 1)
    per_node: list[int] = [0] * n_nodes
    for n in range(n_nodes - 1, -1, -1):
        below = 1
        if n < first_leaf:
            for t in range(vocab):
                below *= per_node[n * vocab + 1 + t]
        per_node[n] = below + (1 if n > 0 else 0)
    if per_node[0] - 1 > limit:
        return None
    lists: list[list[tuple[int, ...]]] = [[] for _ in range(n_nodes)]
    for n in range(n_nodes - 1, -1, -1):
        combos: list[tuple[int, ...]] = [()]
        if n < first_leaf:
            for t in range(vocab):
                combos = [a + b for a in combos for b in lists[n * vocab + 1 + t]]
        lists[n] = combos + ([(n,)] if n > 0 else [])
    return sorted((tuple(sorted(z)) for z in lists[0] if z), key=lambda z: (len(z), z))


def antichain_form_optimum(instance: Instance | TreeModel, paths: int, method: str = "auto",
                           max_rounds: int = 500, cuts_per_round: int = 16) -> Optimum:
    """Optimum of the antichain form (i.i.d. drafts; docs/theory.md section 7.5), which equals
    the K-path optimum (Theorem 7.5):

        maximise 1 + sum beta  over beta(z) >= 0 (depth 1..L), the chain rows, and
        beta(Z) <= 1 - (1 - Q(Z))^K  for every antichain Z of nodes (mixed depths allowed).

    It differs from the node form (section 7.1) only in allowing antichains of mixed depth,
    which is exactly what makes it tight. method "enumerate" lists every antichain (auto: up
    to AUTO_ENUMERATED_ANTICHAINS), "cuts" starts from the single nodes and the full levels
    and adds, each round, the most violated antichains of the float solution found by the
    hull separation (antichain_violations, each confirmed violated exactly); the relaxation
    is certified from its basis and exact separation on its exact point ends the loop
    (speclp.lp.class_lp.solve_with_cuts). record.details: cuts, rounds, min_subset_slack
    (exact minimum of g(Q(Z)) - beta(Z) over all antichains at the final point), beta."""
    model, rational, _ = model_of(instance)
    vocab, depth = model.vocab_size, model.depth
    if method not in METHODS:
        raise BadArgument("method", f"must be one of {', '.join(METHODS)}, got {method!r}")
    mass = path_masses(model)
    mass_float = [float(m) for m in mass]
    listed = None if method == "cuts" else all_antichains(
        vocab, depth, AUTO_ENUMERATED_ANTICHAINS if method == "auto" else 2**16)
    if method == "enumerate" and listed is None:
        raise BadArgument("method", "enumerate: more than 65536 antichains; use cuts")
    enumerate_all = listed is not None
    bound = {}

    def g_of(members: tuple[int, ...]) -> Fraction:
        if members not in bound:
            bound[members] = g_exact(sum((mass[z] for z in members), Fraction(0)), paths)
        return bound[members]

    if enumerate_all:
        cuts = list(listed)
    else:
        n_nodes = num_nodes(vocab, depth)
        cuts = [tuple(range(depth_offset(vocab, d), depth_offset(vocab, d + 1)))
                for d in range(1, depth + 1)] + [(z,) for z in range(1, n_nodes)]

    def build(sets: list[tuple[int, ...]]) -> LinearProgram:
        return node_set_lp(model, sets, [g_of(z) for z in sets], "antichain-form", "antichain",
                           paths)

    def separate(x: np.ndarray) -> list[tuple[int, ...]]:
        beta = [0.0] + [float(v) for v in x]
        out = []
        for _, members in antichain_violations(beta, mass_float, paths, vocab, depth, False):
            if sum((Fraction(beta[z]) for z in members), Fraction(0)) > g_of(members):
                out.append(members)
                if len(out) == cuts_per_round:
                    break
        return out

    def exact_separate(x: np.ndarray) -> tuple[Fraction, tuple[int, ...] | None]:
        beta = [Fraction(0)] + list(x)
        found = antichain_violations(beta, mass, paths, vocab, depth, True, every_node=False)
        if not found:
            return Fraction(0), None
        return -found[0][0], found[0][1]

    record, vertex = solve_with_cuts(build, separate, exact_separate, cuts, enumerate_all,
                                     rational, "enumerate" if enumerate_all else "cuts",
                                     max_rounds)
    record.details["beta"] = list(vertex) if vertex is not None else None
    return record
