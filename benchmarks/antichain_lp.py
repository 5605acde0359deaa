"""The antichain form (docs/theory.md section 7.5) as an optimum engine past 128 leaves: an exploration
for issue 30 part 4, side by side with the engine's node-budget master on the same sweep-grid instance.

Both are timed in this process (CPU seconds, one thread); both end with exact bounds lower <= OPT_K <= upper:
    node master  lp.colgen.solve_node_master, then lp.colgen.node_master_bounds (as the engine runs them);
    antichain    cutting planes on the antichain form with in-out separation: each round separates first
                 at the midpoint of the LP point and a feasible "core" point, and at the LP point only
                 when the midpoint is feasible (the midpoint then becomes the core); cuts = the most
                 violated antichains of every subtree's hull (lp.node_form.antichain_violations), added to
                 the warm HiGHS model. It stops when no antichain is violated by more than 1e-13 at the LP
                 point, when the LP value and the core's value are 1e-10 apart, or at the time limit.
                 Exact bounds: upper = weak duality with the LP's row duals rationalised (the chain duals
                 recomputed bottom-up as the smallest that keep every beta column dual feasible);
                 lower = 1 + sum of the core (or the last LP point) made exactly feasible (rationalised,
                 chain rows clipped top-down, then subtrees scaled down: lp.node_form.antichain_feasible).

    OMP_NUM_THREADS=1 python benchmarks/antichain_lp.py V L K ALPHA SEED [--time-limit S] [--skip-master]
        [--out FILE.jsonl]

Recorded results: benchmarks/results/gap_speed/antichain_lp.md (with the commands).
"""

from __future__ import annotations

import argparse
import json
import time
from fractions import Fraction
from typing import Any

import numpy as np
from speclp.experiments.sweep import SweepSpec, plan
from speclp.lp.colgen import master_data, node_master_bounds, solve_node_master
from speclp.lp.engine import _model_and_rational
from speclp.lp.hitting import g_exact
from speclp.lp.node_form import (
    antichain_feasible,
    antichain_violations,
    node_set_lp,
    path_masses,
)
from speclp.lp.solve import highs_model
from speclp.verifiers.tree import TreeModel, depth_offset, num_nodes

TOLERANCE = 1e-13  # a cut is added when violated by more (the lower bound's repair scales subtrees:
# violations of 1e-10 left it 2e-8 below at (8, 3, 4))
MARGIN = 1.2e-10  # the rows' tightening for the lower bound's point (HiGHS meets rows to 1e-10)
POLISH_ROUNDS = 50  # at most this many rounds of cuts on the tightened LP
GAP = 1e-10  # stop when the LP value and the core's value are this close


def grid_model(vocab: int, depth: int, paths: int, alpha: float, seed: int) -> TreeModel:
    """The exact model of the sweep grid's instance (V, L, alpha, seed)."""
    spec = SweepSpec(vocab=(vocab,), depth=(depth,), paths=(paths,), alpha=(alpha,), trials=seed + 1, seed=0)
    task = [t for t in plan(spec)[0] if t.seed == seed][0]
    return _model_and_rational(task.instance(), True)[0]


def antichain_inout(model: TreeModel, paths: int, time_limit: float, cuts_per_round: int = 200,
                    alpha: float = 0.5, drop_every: int = 0) -> dict[str, Any]:
    vocab, depth = model.vocab_size, model.depth
    n_nodes = num_nodes(vocab, depth)
    mass = path_masses(model)
    mass_float = [float(m) for m in mass]
    cuts = [tuple(range(depth_offset(vocab, d), depth_offset(vocab, d + 1))) for d in range(1, depth + 1)]
    cuts += [(z,) for z in range(1, n_nodes)]

    def bound(members: tuple[int, ...]) -> float:
        return float(g_exact(sum((mass[z] for z in members), Fraction(0)), paths))

    lp = node_set_lp(model, cuts, [g_exact(sum((mass[z] for z in c), Fraction(0)), paths) for c in cuts],
                     "antichain-form", "antichain", paths)
    h = highs_model(lp, presolve=False, method="simplex")
    present = set(cuts)
    initial = len(cuts)
    born = [0] * initial
    dropped = 0

    def add_rows(found: list[tuple[int, ...]], margin: float) -> None:
        starts = np.cumsum([0] + [len(m) for m in found[:-1]]).astype(np.int32)
        index = np.concatenate([np.asarray(m, dtype=np.int32) - 1 for m in found])
        h.addRows(len(found), np.full(len(found), -np.inf),
                  np.array([bound(m) for m in found]) - margin, len(index), starts, index,
                  np.ones(len(index)))
        cuts.extend(found)
        present.update(found)
        born.extend([rounds] * len(found))

    def drop_slack_rows() -> int:
        """Delete the antichain rows (not the levels and single nodes) with no dual and a slack
        over 1e-9 that are at least drop_every rounds old; they are separated again if needed."""
        solution = h.getSolution()
        row_value = np.asarray(solution.row_value, dtype=np.float64)
        row_dual = np.asarray(solution.row_dual, dtype=np.float64)
        gone = [i for i in range(initial, len(cuts))  # old rows only: the last solve saw them
                if rounds - born[i] >= drop_every and row_dual[n_nodes - 1 + i] == 0
                and bound(cuts[i]) - row_value[n_nodes - 1 + i] > 1e-9]
        if gone:
            h.deleteRows(len(gone), np.asarray([n_nodes - 1 + i for i in gone], dtype=np.int32))
            keep = sorted(set(range(len(cuts))) - set(gone))
            for i in gone:
                present.discard(cuts[i])
            cuts[:] = [cuts[i] for i in keep]
            born[:] = [born[i] for i in keep]
        return len(gone)

    start = time.process_time()
    rounds, core, lower, value, stop = 0, None, 1.0, float("nan"), "time limit"
    while time.process_time() - start < time_limit:
        h.run()
        rounds += 1
        x = np.concatenate([[0.0], np.asarray(h.getSolution().col_value, dtype=np.float64)])
        value = float(h.getInfo().objective_function_value)
        if core is None:
            core = np.asarray(antichain_feasible(list(x), mass_float, paths, vocab, depth))
            lower = 1 + float(core[1:].sum())
        found: list[tuple[int, ...]] = []
        for point, at_lp in ((alpha * x + (1 - alpha) * core, False), (x, True)):
            violated = [m for e, m in antichain_violations(list(point), mass_float, paths, vocab,
                                                           depth, False)
                        if e > TOLERANCE and m not in present]  # a row in the LP: solver tolerance
            if violated:
                found = violated[:cuts_per_round]
                break
            if not at_lp:
                core, lower = point, 1 + float(point[1:].sum())
        if not found:
            core, lower, stop = x, value, "no violated antichain outside the LP at the LP point"
            break
        if value - lower <= GAP:
            stop = "LP value and core value 1e-10 apart"
            break
        add_rows(found, 0.0)
        if drop_every and rounds % drop_every == 0:
            dropped += drop_slack_rows()
    duals = np.abs(np.asarray(h.getSolution().row_dual, dtype=np.float64))
    dual_cuts = list(cuts)
    if stop != "time limit":
        # a point strictly inside the rows for the lower bound: HiGHS meets a row only to its 1e-10
        # feasibility tolerance, and the repair's scaling turns such excesses over rows of small
        # bound into a loss far larger; so every row is tightened by MARGIN, and the tightened LP
        # is cut again until its point violates no antichain outside it (the upper bound keeps
        # the duals of the untightened LP)
        rows = np.arange(n_nodes - 1, n_nodes - 1 + len(cuts), dtype=np.int32)
        h.changeRowsBounds(len(rows), rows, np.full(len(rows), -np.inf),
                           np.array([bound(m) for m in cuts]) - MARGIN)
        for _ in range(POLISH_ROUNDS):
            h.run()
            x = np.concatenate([[0.0], np.asarray(h.getSolution().col_value, dtype=np.float64)])
            found = [m for e, m in antichain_violations(list(x), mass_float, paths, vocab, depth, False)
                     if e > -MARGIN / 2 and m not in present][:cuts_per_round]
            if not found:
                break
            add_rows(found, MARGIN)
        core, lower = x, 1 + float(x[1:].sum())
    seconds = time.process_time() - start
    return {"duals": duals, "cuts": dual_cuts, "core": core, "value": value, "lower_float": lower,
            "rounds": rounds, "cut_rows": len(cuts), "seconds": seconds, "stop": stop,
            "dropped_rows": dropped}


def antichain_bounds(model: TreeModel, paths: int, run: dict[str, Any]) -> tuple[Fraction, Fraction]:
    """Exact (lower, upper) from a run of antichain_inout (module docstring)."""
    vocab, depth = model.vocab_size, model.depth
    n_nodes, first_leaf = num_nodes(vocab, depth), num_nodes(vocab, depth - 1)
    target, mass, cuts = model.target, path_masses(model), run["cuts"]
    duals = run["duals"][n_nodes - 1:]
    covered = [Fraction(0)] * n_nodes
    upper = Fraction(1)
    for members, dual in zip(cuts, duals, strict=True):
        if dual > 0:
            y = Fraction(float(dual))
            upper += y * g_exact(sum((mass[z] for z in members), Fraction(0)), paths)
            for z in members:
                covered[z] += y
    chain = [Fraction(0)] * n_nodes
    for z in range(n_nodes - 1, 0, -1):  # the smallest chain duals that keep beta(z) dual feasible
        below = Fraction(0)
        if z < first_leaf:
            below = sum((target[z, t] * chain[z * vocab + 1 + t] for t in range(vocab)), Fraction(0))
        chain[z] = max(Fraction(0), 1 + below - covered[z])
    upper += sum((target[0, t] * chain[1 + t] for t in range(vocab)), Fraction(0))
    beta = [Fraction(0)] + [max(Fraction(0), Fraction(float(v))) for v in run["core"][1:]]
    for n in range(1, n_nodes):  # chain rows, top-down
        parent, token = (n - 1) // vocab, (n - 1) % vocab
        beta[n] = min(beta[n], target[0, token] if parent == 0 else target[parent, token] * beta[parent])
    beta = antichain_feasible(beta, mass, paths, vocab, depth)
    return 1 + sum(beta[1:], Fraction(0)), upper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("V", "L", "K"):
        parser.add_argument(name, type=int)
    parser.add_argument("alpha", type=float)
    parser.add_argument("seed", type=int)
    parser.add_argument("--time-limit", type=float, default=1800.0)
    parser.add_argument("--skip-master", action="store_true")
    parser.add_argument("--drop-every", type=int, default=0,
                        help="every N rounds delete old slack antichain rows (0: never)")
    parser.add_argument("--out")
    args = parser.parse_args()
    if not (2 <= args.V and 1 <= args.L and 1 <= args.K and args.seed >= 0 and args.alpha > 0
            and args.V ** (args.L + 1) <= 10**6 and args.time_limit > 0):
        parser.error("need V >= 2, L >= 1, K >= 1, seed >= 0, alpha > 0, time limit > 0 and at most "
                     "10^6 nodes (V^(L+1))")
    model = grid_model(args.V, args.L, args.K, args.alpha, args.seed)
    record: dict[str, Any] = {"shape": [args.V, args.L, args.K], "alpha": args.alpha, "seed": args.seed}
    run = antichain_inout(model, args.K, args.time_limit, drop_every=args.drop_every)
    t0 = time.process_time()
    lower, upper = antichain_bounds(model, args.K, run)
    record["antichain"] = {k: run[k] for k in ("rounds", "cut_rows", "seconds", "stop", "value",
                                               "lower_float", "dropped_rows")}
    record["drop_every"] = args.drop_every
    record["antichain"].update({"bounds_seconds": time.process_time() - t0, "lower": float(lower),
                                "upper": float(upper), "width": float(upper - lower)})
    print(json.dumps(record["antichain"]), flush=True)
    if not args.skip_master:
        t0 = time.process_time()
        master = master_data(model, args.K, "iid", exact=True)
        result = solve_node_master(master, time_limit=args.time_limit)
        solve_seconds = time.process_time() - t0
        t0 = time.process_time()
        low, up = node_master_bounds(model, master, result) if result.status == "optimal" else (None, None)
        record["node_master"] = {"status": result.status, "solves": result.iterations,
                                 "seconds": solve_seconds,
                                 "bounds_seconds": time.process_time() - t0,
                                 "lower": None if low is None else float(low),
                                 "upper": None if up is None else float(up),
                                 "width": None if low is None else float(up - low)}
        print(json.dumps(record["node_master"]), flush=True)
        if low is not None:  # both brackets hold the same optimum
            record["brackets_overlap"] = bool(max(low, lower) <= min(up, upper))
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
