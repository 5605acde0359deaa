"""The antichain form of the K-path LP (i.i.d. drafts; docs/theory.md section 7.5): its rows,
its separation, the exact repair of a point, and the in-out cutting planes with exact bounds
that the optimum engine runs (speclp.lp.engine: past 128 leaves at depth <= 3, where the
node-budget master has not converged in 100 solves).

    maximise 1 + sum beta  over beta(z) >= 0 (nodes of depth 1..L), the chain rows, and
    beta(Z) <= g(Q(Z)) = 1 - (1 - Q(Z))^K  for every antichain Z (nodes of mixed depths, none
    a prefix of another), Q(Z) the total draft probability of the paths to Z's nodes.

Its optimum is the K-path optimum (Theorem 7.5, by Frank's discrete sandwich theorem). The
most violated row sits at a vertex of the upper concave hull of the points (Q(Z), beta(Z)),
built bottom-up as Minkowski sums (antichain_hulls). node_set_lp is the exact LP over given
node sets, shared with the node form (speclp.lp.node_form, which also certifies the antichain
form from an exact basis on small trees: antichain_form_optimum). Nothing here imports the
engine, which imports this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..verifiers.tree import TreeModel, depth_offset, node_prefix, num_nodes
from .hitting import g_exact
from .program import Block, LinearProgram, ValueTable
from .rows import chain_rows, finish_lp
from .solve import highs_model


def node_set_lp(model: TreeModel, sets: Sequence[tuple[int, ...]], bounds: Sequence[Fraction],
                kind: str, row_word: str, paths: int) -> LinearProgram:
    """max 1 + sum beta over the chain rows and one row beta(S) <= bound per node set S
    (node indices 1..N-1, shortlex): the LP of the node form (sets of one depth) and of the
    antichain form (antichains). Columns: beta(z) at column z - 1."""
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    table = ValueTable(True)
    rows, cols, refs, c_rhs = chain_rows(model, table, 0, 0)
    rhs = [c_rhs]
    cut_row0 = n_nodes - 1
    if sets:
        rhs.append(table.add(np.array(list(bounds), dtype=object)))
    for i, members in enumerate(sets):
        rows.append(np.full(len(members), cut_row0 + i, dtype=np.int64))
        cols.append(np.asarray(members, dtype=np.int64) - 1)
        refs.append(np.full(len(members), table.one, dtype=np.int64))
    set_list = list(sets)

    def ub_label(i: int) -> str:
        i = int(i)
        if i < cut_row0:
            return f"chain[{node_prefix(i + 1, vocab)}]"
        return f"{row_word}[" + ", ".join(str(node_prefix(z, vocab))
                                          for z in set_list[i - cut_row0]) + "]"

    return finish_lp(
        f"{kind}-V{vocab}-L{depth}-K{paths}", n_nodes - 1,
        np.full(n_nodes - 1, table.one, dtype=np.int64), table, Block.empty(), rows, cols, refs,
        rhs, variable_label=lambda j: f"beta[{node_prefix(int(j) + 1, vocab)}]", ub_label=ub_label,
        meta={"kind": kind, "vocab_size": vocab, "depth": depth, "paths": paths,
              "cuts": len(set_list)})


@dataclass
class AntichainHulls:
    """For every node n (0 = the root): the upper concave hull, from the origin, of the points
    (Q(Z), beta(Z)) over the antichains Z of nodes of depth >= 1 inside n's subtree (n itself
    included, except the root), Q(Z) the total draft probability of the paths to Z's nodes.

    vertices[n]: [(x, y)] left to right, origin excluded, slopes decreasing and positive;
    made[n][k]: how vertex k was made: -1 = the antichain {n}, else m >= 1 = the sum of the
    first m edges of the merged children's hulls (owner[n][i] = the child token of edge i)."""

    vertices: list[list[tuple[Any, Any]]]
    made: list[list[int]]
    owner: list[list[int]]
    scale: list[Any] | None = None  # antichain_hulls(..., repair=K): each subtree's factor


def _g(x: Any, paths: int) -> Any:
    """g(x) = 1 - (1 - x)^K: exact for a Fraction, float64 (no cancellation) for a float."""
    if isinstance(x, Fraction):
        return g_exact(x, paths)
    return 1.0 if x >= 1 else -math.expm1(paths * math.log1p(-x))


def antichain_hulls(beta: Sequence[Any], mass: Sequence[Any], vocab: int, depth: int,
                    repair: int | None = None) -> AntichainHulls:
    """The hulls of AntichainHulls, bottom-up: a node's hull is the Minkowski sum of its
    children's (their edges merged by slope), with the point (Q(n), beta(n)) added on top
    (it has the largest abscissa; the vertices it leaves below the hull are dropped).
    beta, mass: [N] per node (index 0, the root, unused), floats or Fractions alike; the
    hulls have O(N L) edges in all, each node sorting its children's. repair=K: each
    subtree's hull is scaled, as it is built, by the largest factor <= 1 that puts its
    vertices under g_K (kept in .scale; antichain_feasible)."""
    n_nodes = num_nodes(vocab, depth)
    first_leaf = num_nodes(vocab, depth - 1)
    vertices: list[list[tuple[Any, Any]]] = [[] for _ in range(n_nodes)]
    made: list[list[int]] = [[] for _ in range(n_nodes)]
    owner: list[list[int]] = [[] for _ in range(n_nodes)]
    scale: list[Any] = [1] * n_nodes
    for n in range(n_nodes - 1, -1, -1):
        points: list[tuple[Any, Any]] = []
        kinds: list[int] = []
        if n < first_leaf:
            edges = []
            for t in range(vocab):
                px, py = 0, 0
                for x, y in vertices[n * vocab + 1 + t]:
                    # slope key: an edge of no width (a node of draft mass 0) comes first
                    dx, dy = x - px, y - py
                    edges.append(((0, 0) if dx == 0 else (1, -(dy / dx)), t, dx, dy))
                    px, py = x, y
            edges.sort(key=lambda e: e[0])  # stable: each child's edges stay in order
            x = y = 0
            for i, (_, t, dx, dy) in enumerate(edges):
                x, y = x + dx, y + dy
                points.append((x, y))
                kinds.append(i + 1)
                owner[n].append(t)
        if n > 0 and beta[n] > (points[-1][1] if points else 0):
            top_x, top_y = mass[n], beta[n]
            while points:
                ox, oy = points[-2] if len(points) >= 2 else (0, 0)
                ax, ay = points[-1]
                if (ay - oy) * (top_x - ox) <= (top_y - oy) * (ax - ox):  # on or below the chord
                    points.pop()
                    kinds.pop()
                else:
                    break
            points.append((top_x, top_y))
            kinds.append(-1)
        if repair is not None:  # scale the subtree so that every antichain row inside it holds
            factor = min([1] + [_g(x, repair) / y for x, y in points if y > 0])
            if factor < 1:
                points = [(x, factor * y) for x, y in points]
                scale[n] = factor
        vertices[n], made[n] = points, kinds
    return AntichainHulls(vertices, made, owner, scale if repair is not None else None)


def antichain_feasible(beta: Sequence[Any], mass: Sequence[Any], paths: int, vocab: int,
                       depth: int) -> list[Any]:
    """[N] a point that satisfies every antichain row beta(Z) <= g(Q(Z)), obtained from beta by
    scaling subtrees down (bottom-up, each by the least factor its own rows need: the hull's
    min g(x)/y): chain rows that beta satisfies still hold (a subtree scaled as a whole, by a
    factor <= 1), and a point already feasible is returned unchanged. Exact for Fractions."""
    hulls = antichain_hulls(beta, mass, vocab, depth, repair=paths)
    assert hulls.scale is not None
    factor = list(hulls.scale)
    out = list(beta)
    for n in range(1, len(out)):  # shortlex: every parent before its children
        parent = (n - 1) // vocab
        factor[n] = factor[n] * factor[parent]
        out[n] = out[n] * factor[n]
    return out


def antichain_of(hulls: AntichainHulls, node: int, vertex: int, vocab: int) -> tuple[int, ...]:
    """The antichain (node indices, sorted) of vertex `vertex` (0-based) of node's hull."""
    out: list[int] = []
    stack_ = [(node, vertex)]
    while stack_:
        n, k = stack_.pop()
        how = hulls.made[n][k]
        if how == -1:
            out.append(n)
            continue
        counts = np.bincount(np.asarray(hulls.owner[n][:how], dtype=np.int64), minlength=vocab)
        stack_ += [(n * vocab + 1 + t, int(c) - 1) for t, c in enumerate(counts) if c]
    return tuple(sorted(out))


def path_masses(model: TreeModel) -> list[Fraction]:
    """[N] Q(z): the draft probability of the path to node z (root: 1), exact (model exact)."""
    out = [Fraction(1)]
    for d in range(1, model.depth + 1):
        out += [Fraction(x) for x in model.draft_path_probabilities(d)]
    return out


def antichain_violations(beta: Sequence[Any], mass: Sequence[Any], paths: int, vocab: int,
                         depth: int, exact: bool, every_node: bool = True
                         ) -> list[tuple[Any, tuple[int, ...]]]:
    """[(beta(Z) - g(Q(Z)), Z)] for the hull vertices violating beta(Z) <= g(Q(Z)), g(s) = 1 -
    (1 - s)^K, most violated first: those of the root's hull (which include a most violated
    antichain of the whole tree: beta(Z) - g(Q(Z)) is convex in (Q(Z), beta(Z)), so it is
    largest at a vertex of the hull), and with every_node those of every subtree's hull."""
    hulls = antichain_hulls(beta, mass, vocab, depth)
    found = []
    for n in (range(len(hulls.vertices)) if every_node else [0]):
        for k, (x, y) in enumerate(hulls.vertices[n]):
            excess = y - (g_exact(x, paths) if exact else _g(float(x), paths))
            if excess > 0:
                found.append((excess, n, k))
    found.sort(key=lambda f: -f[0])
    out, seen = [], set()
    for excess, n, k in found:
        members = antichain_of(hulls, n, k, vocab)
        if members not in seen:
            seen.add(members)
            out.append((excess, members))
    return out


# ---------------------------------------------------------------------------
# in-out cutting planes with exact bounds (the engine's route at depth <= 3:
# speclp.lp.engine._bounded_optimum; benchmarks/antichain_lp.py)
# ---------------------------------------------------------------------------

INOUT_TOLERANCE = 1e-13  # an antichain is cut when violated by more (the lower bound's repair
# scales subtrees: violations of 1e-10 left it 2e-8 below at (8, 3, 4))
INOUT_MARGIN = 1.2e-10  # the rows' tightening for the lower bound's point (HiGHS meets rows to 1e-10)
INOUT_POLISH_ROUNDS = 50  # at most this many rounds of cuts on the tightened LP
INOUT_GAP = 1e-10  # stop when the LP value and the core's value are this close


@dataclass
class AntichainRun:
    """A run of antichain_inout. status: "optimal" (stopped by its test, `stop` says which),
    "time_limit", or HiGHS's word for a solve that did not end optimal; value: the last LP
    value (float, an upper bound up to float error); lower_float: 1 + sum of `core`, the
    point the lower bound starts from (the tightened LP's point after a stop by the test);
    raw: the last untightened LP point (None before any solve), a second start for the lower
    bound; duals: [rows] the row duals (absolute values) of the last untightened solve, for
    the rows `cuts` (after the N - 1 chain rows)."""

    status: str
    stop: str
    rounds: int
    seconds: float
    value: float
    lower_float: float
    core: np.ndarray
    duals: np.ndarray
    cuts: list[tuple[int, ...]]
    dropped_rows: int = 0
    notes: list[str] = field(default_factory=list)
    raw: np.ndarray | None = None

    @property
    def cut_rows(self) -> int:
        return len(self.cuts)


def antichain_inout(model: TreeModel, paths: int, time_limit: float | None = None,
                    cuts_per_round: int = 200, alpha: float = 0.5, drop_every: int = 0,
                    clock: Callable[[], float] = time.perf_counter) -> AntichainRun:
    """The antichain form (i.i.d. drafts) by in-out cutting planes, float64 on a warm HiGHS
    model: it starts from the full levels and the single nodes; each round separates first at
    the midpoint (weight alpha) of the LP point and a feasible "core" point, and at the LP
    point only when the midpoint is feasible (the midpoint then becomes the core); the cuts are
    the most violated antichains of every subtree's hull (antichain_violations) not yet in the
    LP. It stops when no antichain outside the LP is violated by more than INOUT_TOLERANCE at
    the LP point, when the LP value and the core's value are INOUT_GAP apart, or at the time
    limit (seconds of `clock`). At a stop by its test, every row is then tightened by
    INOUT_MARGIN and cut again (HiGHS meets rows only to 1e-10) for the point of the lower
    bound. drop_every = N > 0: every N rounds, delete the antichain rows with no dual and a
    slack over 1e-9 that are at least N rounds old. antichain_bounds turns a run into exact
    bounds, valid whatever the run's numbers (a run stopped early gives a wider bracket)."""
    start = clock()
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    mass = path_masses(model)
    mass_float = [float(m) for m in mass]
    cuts = [tuple(range(depth_offset(vocab, d), depth_offset(vocab, d + 1)))
            for d in range(1, depth + 1)] + [(z,) for z in range(1, n_nodes)]
    bounds: dict[tuple[int, ...], Fraction] = {}

    def bound(members: tuple[int, ...]) -> Fraction:
        if members not in bounds:
            bounds[members] = g_exact(sum((mass[z] for z in members), Fraction(0)), paths)
        return bounds[members]

    h = highs_model(node_set_lp(model, cuts, [bound(c) for c in cuts], "antichain-form",
                                "antichain", paths), presolve=False, method="simplex")
    present = set(cuts)
    initial = len(cuts)
    born = [0] * initial
    rounds = dropped = 0

    def add_rows(found: list[tuple[int, ...]], margin: float) -> None:
        starts = np.cumsum([0] + [len(m) for m in found[:-1]]).astype(np.int32)
        index = np.concatenate([np.asarray(m, dtype=np.int32) - 1 for m in found])
        h.addRows(len(found), np.full(len(found), -np.inf),
                  np.array([max(float(bound(m)) - margin, 0.0) for m in found]), len(index),
                  starts, index, np.ones(len(index)))
        cuts.extend(found)
        present.update(found)
        born.extend([rounds] * len(found))

    def drop_slack_rows() -> int:
        solution = h.getSolution()
        row_value = np.asarray(solution.row_value, dtype=np.float64)
        row_dual = np.asarray(solution.row_dual, dtype=np.float64)
        gone = [i for i in range(initial, len(cuts))  # old rows only: the last solve saw them
                if rounds - born[i] >= drop_every and row_dual[n_nodes - 1 + i] == 0
                and float(bound(cuts[i])) - row_value[n_nodes - 1 + i] > 1e-9]
        if gone:
            h.deleteRows(len(gone), np.asarray([n_nodes - 1 + i for i in gone], dtype=np.int32))
            keep = sorted(set(range(len(cuts))) - set(gone))
            for i in gone:
                present.discard(cuts[i])
            cuts[:] = [cuts[i] for i in keep]
            born[:] = [born[i] for i in keep]
        return len(gone)

    def left() -> float | None:
        return None if time_limit is None else time_limit - (clock() - start)

    def run_lp() -> str:
        remaining = left()
        h.setOptionValue("time_limit", float("inf") if remaining is None else max(remaining, 1e-3))
        h.run()
        status = h.modelStatusToString(h.getModelStatus()).lower()
        if status != "optimal" and "time limit" not in status:  # a warm solve lost: cold
            h.clearSolver()
            h.run()
            status = h.modelStatusToString(h.getModelStatus()).lower()
        return "optimal" if status == "optimal" else (
            "time_limit" if "time limit" in status else status)

    def point() -> np.ndarray:
        return np.concatenate([[0.0], np.asarray(h.getSolution().col_value, dtype=np.float64)])

    core: np.ndarray | None = None
    last: np.ndarray | None = None
    lower, value, status, stop = 1.0, float("nan"), "time_limit", "time limit"
    duals, dual_cuts = np.zeros(0), []
    while (remaining := left()) is None or remaining > 0:
        solved = run_lp()
        if solved != "optimal":
            status, stop = solved, f"HiGHS ended {solved} in round {rounds + 1}"
            break
        rounds += 1
        x = last = point()
        duals = np.abs(np.asarray(h.getSolution().row_dual, dtype=np.float64))[n_nodes - 1:]
        dual_cuts = list(cuts)  # the rows of these duals (rows are added and dropped below)
        value = 1.0 + float(x[1:].sum())
        if core is None:
            core = np.asarray(antichain_feasible(list(x), mass_float, paths, vocab, depth))
            lower = 1.0 + float(core[1:].sum())
        found: list[tuple[int, ...]] = []
        for candidate, at_lp in ((alpha * x + (1 - alpha) * core, False), (x, True)):
            violated = [m for e, m in antichain_violations(list(candidate), mass_float, paths,
                                                           vocab, depth, False)
                        if e > INOUT_TOLERANCE and m not in present]  # in the LP: HiGHS's part
            if violated:
                found = violated[:cuts_per_round]
                break
            if not at_lp:
                core, lower = candidate, 1.0 + float(candidate[1:].sum())
        if not found:
            core, lower = x, value
            status, stop = "optimal", "no antichain outside the LP violated at the LP point"
            break
        if value - lower <= INOUT_GAP:
            status, stop = "optimal", f"LP value and core value {INOUT_GAP:g} apart"
            break
        add_rows(found, 0.0)
        if drop_every and rounds % drop_every == 0:
            dropped += drop_slack_rows()
    notes: list[str] = []
    raw = last  # the untightened LP's point, before the polish below
    if status == "optimal":
        # a point strictly inside the rows for the lower bound: HiGHS meets a row only to its
        # 1e-10 feasibility tolerance, and the repair's scaling turns such excesses over rows
        # of small bound into a far larger loss; so every row is tightened by INOUT_MARGIN and
        # the tightened LP is cut again until its point violates no antichain outside it
        rows = np.arange(n_nodes - 1, n_nodes - 1 + len(cuts), dtype=np.int32)
        tightened = [max(float(bound(m)) - INOUT_MARGIN, 0.0) for m in cuts]  # beta >= 0
        h.changeRowsBounds(len(rows), rows, np.full(len(rows), -np.inf), np.array(tightened))
        for _ in range(INOUT_POLISH_ROUNDS):
            if run_lp() != "optimal":
                notes.append("the tightened LP did not end optimal: the lower bound keeps the "
                             "untightened point")
                break
            x = point()
            core, lower = x, 1.0 + float(x[1:].sum())
            found = [m for e, m in antichain_violations(list(x), mass_float, paths, vocab,
                                                         depth, False)
                     if e > -INOUT_MARGIN / 2 and m not in present][:cuts_per_round]
            if not found:
                break
            add_rows(found, INOUT_MARGIN)
    if core is None:
        core = np.zeros(n_nodes)
    return AntichainRun(status, stop, rounds, clock() - start, value, lower, core, duals,
                        dual_cuts, dropped, notes, raw)


def antichain_bounds(model: TreeModel, paths: int, run: AntichainRun) -> tuple[Fraction, Fraction]:
    """Exact (lower, upper) bounds on the K-path optimum (i.i.d.) from a run of
    antichain_inout, trusting none of its numbers (model exact):

    upper: weak duality of the antichain form with the antichain rows' duals y(Z) >= 0
    rationalised from the run's floats and the chain duals recomputed bottom-up as the
    smallest that keep every beta column dual feasible, nu(z) = max(0, 1 + sum_t p(t|z)
    nu(z t) - sum_{Z containing z} y(Z)): upper = 1 + sum_Z y(Z) g(Q(Z)) + sum_t p(t) nu(t).
    Valid for any y >= 0; the antichain form's optimum is the K-path optimum (Theorem 7.5).
    lower: 1 + sum of a point made exactly feasible (rationalised, clipped to beta >= 0 and
    to the chain rows top-down, then subtrees scaled down until every antichain row holds:
    antichain_feasible), the better of the run's core point and its last untightened LP point
    (whose rows HiGHS meets to 1e-10: the repair's loss is then sometimes smaller, sometimes
    larger than the tightening's); a feasible point of the antichain form is at most its
    optimum, the K-path optimum (Theorem 7.5)."""
    vocab, depth = model.vocab_size, model.depth
    n_nodes, first_leaf = num_nodes(vocab, depth), num_nodes(vocab, depth - 1)
    target, mass = model.target, path_masses(model)
    covered = [Fraction(0)] * n_nodes
    upper = Fraction(1)
    for members, dual in zip(run.cuts, run.duals, strict=True):
        if dual > 0:
            y = Fraction(float(dual))
            upper += y * g_exact(sum((mass[z] for z in members), Fraction(0)), paths)
            for z in members:
                covered[z] += y
    chain = [Fraction(0)] * n_nodes
    for z in range(n_nodes - 1, 0, -1):  # deepest first (shortlex)
        below = Fraction(0)
        if z < first_leaf:
            below = sum((target[z, t] * chain[z * vocab + 1 + t] for t in range(vocab)),
                        Fraction(0))
        chain[z] = max(Fraction(0), 1 + below - covered[z])
    upper += sum((target[0, t] * chain[1 + t] for t in range(vocab)), Fraction(0))
    lower = Fraction(1)
    for start in [run.core] + ([] if run.raw is None else [run.raw]):
        beta = [Fraction(0)] + [max(Fraction(0), Fraction(float(v))) for v in start[1:]]
        for n in range(1, n_nodes):  # chain rows, top-down
            parent, token = (n - 1) // vocab, (n - 1) % vocab
            beta[n] = min(beta[n], target[parent, token] * (1 if parent == 0 else beta[parent]))
        beta = antichain_feasible(beta, mass, paths, vocab, depth)
        lower = max(lower, 1 + sum(beta[1:], Fraction(0)))
    return lower, upper
