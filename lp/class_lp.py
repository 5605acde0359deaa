"""The selection-class LP ("select one of the K drafted paths, then run BV on it").

The object of study of `speclp check class-equals-full` and `speclp check node-form`. The
engine never solves it: by Theorem 5.5 of docs/theory.md (class LP = full LP = the
selection master) the class optimum IS the K-path optimum, which speclp.lp.engine.optimum
computes by column generation. Here it is computed independently, by cutting planes over
the polytope P_K, so that the claims can compare the two.

docs/theory.md sections 5.2-5.4, 7.2. Notation: P = V^L paths in lexicographic order (speclp.verifiers.tree
.all_paths), N = (V^(L+1) - 1)/(V - 1) nodes in shortlex order, D = the random set of
drafted paths (K i.i.d. draws, or K distinct draws without replacement).

Reachable skewed laws (speclp.lp.hitting)
------------------------------------------
A selection rule picks one drafted path; its law r on the leaves is a *skewed draft law*.
The reachable r form the polytope P_K = { r >= 0 : r(all) = 1, r(S) <= f(S) for every S },
f(S) = P(the drafted set meets S) (the hitting function); its vertices are the laws of
"select the highest-ranked drafted path" for the orders of the leaves (greedy_vertex;
docs/theory.md Theorem 5.3).

Class LP (variables r(x), x in V^L, then beta(z), z of depth 1..L; all >= 0)
----------------------------------------------------------------------------
    maximise 1 + sum_z beta(z)
    sum_x r(x) = 1
    beta(z) - r(z) <= 0                  r(z) = sum of r(x) over the paths x through z
    beta(u t) - p(t|u) beta(u) <= 0      (root children: beta(t) <= p(t))
    r(S) <= f(S)                         for the subsets S in the LP ("cuts")
For a fixed r the best beta is BV's closed form beta(z) = min(r(z), p(t|u) beta(u))
(docs/theory.md Theorem 3.3 with r in place of q), so this is "best skewed law, then BV".

(docs/theory.md Theorem 5.5: class optimum = full optimum. The node-level form of
speclp.lp.node_form is a relaxation of both, section 7.1.)

Separation: speclp.lp.hitting (the i.i.d. lemma: the most violated r(S) <= f(S) is a
prefix of one sort; without replacement, all 2^n subsets are enumerated).

Cutting planes
--------------
With method "enumerate" (default for ground sets of at most AUTO_ENUMERATED_GROUND = 10
elements; possible up to MAX_ENUMERATED_GROUND = 16) every subset constraint is in the
LP; with method "cuts" (the default above 10) the LP starts from the singleton rows and
adds, each round, the most violated prefix sets found in float64 (each one confirmed
violated in exact arithmetic by the exact binary values of the float solution). When
float separation finds nothing, the relaxation is certified exactly from its basis
(speclp.lp.certify.refine_basis, which repairs a float basis that is off in exact
arithmetic), and the exact separation is run on the certificate's exact primal point: if
it shows no violated subset, that point is feasible for the whole class LP and its
objective is the certified optimum of the relaxation, so it is the class optimum;
otherwise the exact cut is added and the loop goes on. A run that does not converge in
max_rounds rounds (or whose relaxation cannot be certified) is returned as a labelled,
NOT certified result whose value is the last relaxation's optimum (an upper bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.tree import TreeModel, depth_offset, node_prefix, num_nodes
from .certify import fmpq_to_fraction, refine_basis
from .engine import Optimum
from .full import as_model
from .hitting import MAX_ENUMERATED_GROUND, HittingFunction, hitting_function, members_of
from .instance import Instance
from .node import node_optimum
from .program import Block, LinearProgram, ValueTable
from .rows import chain_rows, finish_lp
from .solve import solve

AUTO_ENUMERATED_GROUND = 10  # method "auto" enumerates up to here: at 16 paths enumeration
# took 6-8 s per LP against 0.01-0.4 s for cutting planes, with the same certified optimum
METHODS = ("auto", "enumerate", "cuts")


# ---------------------------------------------------------------------------
# the class LP
# ---------------------------------------------------------------------------

def class_lp(model: TreeModel, hitting: HittingFunction, cuts: Sequence[tuple[int, ...]]
             ) -> LinearProgram:
    """The class LP with the subset rows r(S) <= f(S) for S in cuts (see module docstring).

    Columns: r(x) for x = 0..P-1 (lexicographic leaves), then beta(z) at column P + z - 1
    for z = 1..N-1 (shortlex). Rows: eq = [sum r = 1]; ub = N-1 budget rows
    beta(z) - r(z) <= 0, N-1 chain rows, then one row per cut.
    """
    vocab, depth = model.vocab_size, model.depth
    n_leaves = vocab**depth
    n_nodes = num_nodes(vocab, depth)
    n_vars = n_leaves + n_nodes - 1
    table = ValueTable(True)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    refs: list[np.ndarray] = []
    rhs: list[np.ndarray] = []
    # budget rows: beta(z) - sum_{x through z} r(x) <= 0
    for d in range(1, depth + 1):
        width = vocab ** (depth - d)
        codes = np.arange(vocab**d, dtype=np.int64)
        row = depth_offset(vocab, d) + codes - 1  # row index = z - 1
        rows += [row, np.repeat(row, width)]
        cols += [n_leaves + row, (codes[:, None] * width + np.arange(width)).reshape(-1)]
        refs += [np.full(len(codes), table.one), np.full(len(codes) * width, table.minus_one)]
    rhs.append(np.full(n_nodes - 1, table.zero, dtype=np.int64))
    c_rows, c_cols, c_refs, c_rhs = chain_rows(model, table, n_leaves, n_nodes - 1)
    rows += c_rows
    cols += c_cols
    refs += c_refs
    rhs.append(c_rhs)
    cut_row0 = 2 * (n_nodes - 1)
    cut_values = (table.add(np.array([hitting.exact(s) for s in cuts], dtype=object)) if cuts
                  else np.zeros(0, dtype=np.int64))
    for i, s in enumerate(cuts):
        rows.append(np.full(len(s), cut_row0 + i, dtype=np.int64))
        cols.append(np.asarray(s, dtype=np.int64))
        refs.append(np.full(len(s), table.one, dtype=np.int64))
    rhs.append(np.asarray(cut_values, dtype=np.int64))
    eq = Block(np.zeros(n_leaves, dtype=np.int64), np.arange(n_leaves, dtype=np.int64),
               np.full(n_leaves, table.one, dtype=np.int64), np.array([table.one], dtype=np.int64))
    objective = np.concatenate([np.full(n_leaves, table.zero), np.full(n_nodes - 1, table.one)])
    leaf_label = lambda x: str(tuple(int(t) for t in np.base_repr(int(x), vocab).zfill(depth)))  # noqa: E731
    cut_list = [tuple(s) for s in cuts]

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_leaves:
            return f"r[{leaf_label(j)}]"
        return f"beta[{node_prefix(j - n_leaves + 1, vocab)}]"

    def ub_label(i: int) -> str:
        i = int(i)
        if i < n_nodes - 1:
            return f"budget[{node_prefix(i + 1, vocab)}]"
        if i < cut_row0:
            return f"chain[{node_prefix(i - n_nodes + 2, vocab)}]"
        return "subset[" + ", ".join(leaf_label(x) for x in cut_list[i - cut_row0]) + "]"

    return finish_lp(
        f"class-V{vocab}-L{depth}-K{hitting.paths}", n_vars, objective.astype(np.int64), table, eq,
        rows, cols, refs, rhs, variable_label=variable_label, eq_label=lambda i: "simplex",
        ub_label=ub_label,
        meta={"kind": "class", "vocab_size": vocab, "depth": depth, "paths": hitting.paths,
              "num_leaves": n_leaves, "cuts": len(cut_list)})


# ---------------------------------------------------------------------------
# cutting planes (shared with speclp.lp.node_form)
# ---------------------------------------------------------------------------

def model_of(instance: Instance | TreeModel) -> tuple[TreeModel, bool, str]:
    """(exact model, rational, name) of an instance or model."""
    if isinstance(instance, Instance):
        return instance.model(exact=True), instance.rational, instance.name
    model = as_model(instance, exact=True)
    return model, model.exact, "model"


def choose_method(method: str, ground: int) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        return "enumerate" if ground <= AUTO_ENUMERATED_GROUND else "cuts"
    if method == "enumerate" and ground > MAX_ENUMERATED_GROUND:
        raise ValueError(f"method enumerate: 2^{ground} subsets is too many "
                         f"(limit {MAX_ENUMERATED_GROUND} elements); use method cuts")
    return method


def all_subsets(n: int, proper: bool) -> list[tuple[int, ...]]:
    top = 2**n - 1 if proper else 2**n
    return [members_of(m) for m in range(1, top)]


def float_cut_confirmed(hitting: HittingFunction, values: np.ndarray,
                        members: tuple[int, ...]) -> bool:
    """The cut is violated in exact arithmetic by the exact binary values of the float x."""
    return sum((Fraction(float(values[e])) for e in members), Fraction(0)) > hitting.exact(members)


def solve_with_cuts(build: Callable[[list[Any]], LinearProgram],
                    separate: Callable[[np.ndarray], list[Any]],
                    exact_separate: Callable[[np.ndarray], tuple[Fraction, Any]],
                    cuts: list[Any], enumerate_all: bool, rational: bool, method: str,
                    max_rounds: int) -> tuple[Optimum, np.ndarray | None]:
    """The cutting-plane loop (module docstring).

    build(cuts) -> LinearProgram; separate(x) -> new cuts from the float solution (each
    confirmed violated exactly); exact_separate(x_exact) -> (minimum Fraction, cut or None).
    Returns (record, exact primal point or None). record.details: cuts (subset rows in the
    final LP), rounds, min_subset_slack (exact minimum of f(S) - v(S) at the final point).
    A run that does not converge (or whose relaxation cannot be certified) gives a NOT
    certified record whose value is the last relaxation's optimum (an upper bound).
    """
    start = time.perf_counter()
    rounds = 0
    notes: list[str] = []
    reason = f"cutting planes did not converge in {max_rounds} rounds"
    converged = False
    lp, solution, cert, vertex, minimum = None, None, None, None, None
    while rounds < max_rounds:
        rounds += 1
        lp = build(cuts)
        solution = solve(lp)
        if not solution.optimal:
            reason = f"{lp.name}: HiGHS status {solution.status}"
            break
        if not enumerate_all:
            present = set(cuts)
            new = [c for c in separate(solution.x) if c not in present]
            if new:
                cuts = cuts + new
                continue
        solution, cert = refine_basis(lp, solution)
        if not cert.certified:
            reason = f"relaxation not certified: {cert.reason}"
            break
        vertex = np.array([fmpq_to_fraction(v) for v in cert.primal], dtype=object)
        minimum, cut = exact_separate(vertex)
        if cut is not None:
            if enumerate_all:
                raise AssertionError(f"enumerated LP solution violates subset {cut} exactly")
            notes.append(f"round {rounds}: exact separation found a cut float64 missed "
                         f"(violation {float(minimum):.3g})")
            cuts = cuts + [cut]
            continue
        converged = True
        break
    certified = bool(converged and cert is not None and cert.certified)
    value = None
    if certified:
        value = float(cert.value)
    elif solution is not None and solution.optimal:
        value = float(solution.value)
        reason += " (value: the last relaxation's optimum, an upper bound)"
    record = Optimum(
        value=value, exact_value=Fraction(cert.value) if certified else None,
        certified=certified, certificate=cert.reason if certified else reason,
        status="optimal" if certified else ("not_converged" if solution is not None
                                            and solution.optimal else "error"),
        method=method, rational=rational, seconds=time.perf_counter() - start,
        size=lp.describe() if lp is not None else {},
        notes=notes + (list(solution.notes) if solution is not None else []),
        details={"cuts": len(cuts), "rounds": rounds, "min_subset_slack": minimum})
    return record, (vertex if certified else None)


# ---------------------------------------------------------------------------
# the class optimum
# ---------------------------------------------------------------------------

def class_lp_optimum(instance: Instance | TreeModel, paths: int, draft_sampling: str = "iid",
                     method: str = "auto", max_rounds: int = 500,
                     cuts_per_round: int = 8) -> Optimum:
    """Optimum of the selection class (best skewed law r in P_K, then BV with r), computed
    independently of the engine by cutting planes (module docstring).

    record.method: "enumerate" | "cuts". record.details: cuts, rounds, min_subset_slack,
    leaf_law (the optimal r [P] as exact Fractions when certified, else None). Certified
    means: the final LP certified exactly, its exact point violating no subset constraint
    (so it is feasible for the whole class LP), and BV's closed form with that r
    (speclp.lp.node.node_optimum) equal to the optimum.
    """
    model, rational, _ = model_of(instance)
    hitting = hitting_function(model, paths, draft_sampling)
    n_leaves = hitting.size
    chosen = choose_method(method, n_leaves)
    enumerate_all = chosen == "enumerate"
    cuts = all_subsets(n_leaves, proper=True) if enumerate_all else [(x,) for x in range(n_leaves)]

    def separate(x: np.ndarray) -> list[tuple[int, ...]]:
        r = x[:n_leaves]
        found = hitting.most_violated(r, exact=False, limit=cuts_per_round)
        return [s for _, s in found if float_cut_confirmed(hitting, r, s)]

    def exact_separate(x: np.ndarray) -> tuple[Fraction, tuple[int, ...] | None]:
        value, cut = hitting.minimum(x[:n_leaves], exact=True)
        return value, (cut if value < 0 else None)

    record, vertex = solve_with_cuts(lambda c: class_lp(model, hitting, c), separate,
                                     exact_separate, cuts, enumerate_all, rational, chosen,
                                     max_rounds)
    leaf_law = vertex[:n_leaves] if vertex is not None else None
    if leaf_law is not None:
        _, closed = node_optimum(model, exact=True, leaf_law=leaf_law)
        if closed != record.exact_value:
            record.certified = False
            record.certificate = (f"BV closed form with the optimal r gives {float(closed):.17g}, "
                                  f"not the LP optimum {float(record.exact_value):.17g}")
            record.exact_value = None
    record.details["leaf_law"] = list(leaf_law) if leaf_law is not None else None
    return record


def greedy_vertex(hitting: HittingFunction, order: Sequence[int]) -> np.ndarray:
    """[n] exact vertex r(y_i) = f({y_1..y_i}) - f({y_1..y_{i-1}}) of P_K for an order
    (best first): the law of "select the highest-ranked drafted element"."""
    r = np.array([Fraction(0)] * hitting.size, dtype=object)
    previous = Fraction(0)
    for i in range(len(order)):
        current = hitting.exact(order[: i + 1])
        r[order[i]] = current - previous
        previous = current
    return r


__all__ = ["class_lp", "class_lp_optimum", "greedy_vertex", "solve_with_cuts"]
