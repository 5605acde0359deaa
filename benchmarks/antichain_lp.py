"""The antichain form (docs/theory.md section 7.5) as an optimum engine past 128 leaves: an exploration
for issue 30 part 4, side by side with the engine's node-budget master on the same sweep-grid instance.

Both are timed in this process (CPU seconds, one thread); both end with exact bounds lower <= OPT_K <= upper:
    node master  lp.colgen.solve_node_master, then lp.colgen.node_master_bounds (as the engine runs them);
    antichain    lp.antichain.antichain_inout, then lp.antichain.antichain_bounds (as the engine runs them
                 at depth <= 3 since 2026-12-08, where the node master has not converged in 100
                 solves; before, this file held them):
                 cutting planes on the antichain form with in-out separation: each round separates first
                 at the midpoint of the LP point and a feasible "core" point, and at the LP point only
                 when the midpoint is feasible (the midpoint then becomes the core); cuts = the most
                 violated antichains of every subtree's hull (lp.antichain.antichain_violations), added to
                 the warm HiGHS model. It stops when no antichain is violated by more than 1e-13 at the LP
                 point, when the LP value and the core's value are 1e-10 apart, or at the time limit.
                 Exact bounds: upper = weak duality with the LP's row duals rationalised (the chain duals
                 recomputed bottom-up as the smallest that keep every beta column dual feasible);
                 lower = 1 + sum of the core (or the last LP point) made exactly feasible (rationalised,
                 chain rows clipped top-down, then subtrees scaled down: lp.antichain.antichain_feasible).

    OMP_NUM_THREADS=1 python benchmarks/antichain_lp.py V L K ALPHA SEED [--time-limit S] [--skip-master]
        [--out FILE.jsonl]

Recorded results: benchmarks/results/gap_speed/antichain_lp.md (with the commands).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from speclp.experiments.sweep import SweepSpec, plan
from speclp.lp.antichain import antichain_bounds, antichain_inout
from speclp.lp.colgen import master_data, node_master_bounds, solve_node_master
from speclp.lp.engine import _model_and_rational
from speclp.verifiers.tree import TreeModel


def grid_model(vocab: int, depth: int, paths: int, alpha: float, seed: int) -> TreeModel:
    """The exact model of the sweep grid's instance (V, L, alpha, seed)."""
    spec = SweepSpec(vocab=(vocab,), depth=(depth,), paths=(paths,), alpha=(alpha,), trials=seed + 1, seed=0)
    task = [t for t in plan(spec)[0] if t.seed == seed][0]
    return _model_and_rational(task.instance(), True)[0]


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
    run = antichain_inout(model, args.K, args.time_limit, drop_every=args.drop_every,
                          clock=time.process_time)
    t0 = time.process_time()
    lower, upper = antichain_bounds(model, args.K, run)
    record["antichain"] = {k: getattr(run, k) for k in ("rounds", "cut_rows", "seconds", "stop",
                                                        "value", "lower_float", "dropped_rows")}
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
