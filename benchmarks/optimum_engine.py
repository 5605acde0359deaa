"""The speed targets of the optimum engine (issue 8), measured side by side in one run.

    python benchmarks/optimum_engine.py [--out DIR] [--repeats R] [--quick]

Writes DIR/optimum_engine.{json,csv,md,png} (default benchmarks/results/engine/).

Three parts, every instance Dirichlet(0.7) float rows, seed 0 (speclp.lp.instance.
dirichlet_instance, as `speclp sweep` builds them):
  * gap: `speclp gap`'s computation (speclp.proofs.gap.gap) end to end with every default
    verifier, optimum certified, at (V, L, K) = (4, 3, 3), (8, 2, 3), (2, 6, 3) (target 5 s)
    and (3, 2, 3), (2, 3, 3), (3, 3, 2) (target 1 s): once with every verifier's law exact
    (the default, max_enumerated = 1,000,000 configurations) and once with the verifiers
    over 10,000 configurations ESTIMATED from 4,096 sampled configurations (the recorded
    sweep's setting); seconds split into optimum and verifier laws;
  * optimum: speclp.lp.optimum certified (target 60 s) at (8, 3, 4) and (4, 4, 4), and at
    every gap shape; side by side with the enumerated full LP (method "full") wherever its
    estimated size is at most FULL_LP_MAX_VARIABLES variables, the two exact values compared;
  * closed form: L = 1, i.i.d., V = 151,936, K = 8, float64 Dirichlet(0.1) rows (target
    0.5 s), median of `repeats` runs (default 3).
Seconds are wall time on the machine that ran it (host and load recorded with the figures:
the project's machine is shared, so a loaded run is slower than the code).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from speclp.lp import optimum
from speclp.lp.closed_form import one_step_optimum
from speclp.lp.full import full_lp_size
from speclp.lp.instance import dirichlet_instance
from speclp.proofs.gap import gap

RESULTS = Path(__file__).resolve().parent / "results" / "engine"
GAP_SHAPES = [((4, 3, 3), 5.0), ((8, 2, 3), 5.0), ((2, 6, 3), 5.0),
              ((3, 2, 3), 1.0), ((2, 3, 3), 1.0), ((3, 3, 2), 1.0)]
OPTIMUM_SHAPES = [((8, 3, 4), 60.0), ((4, 4, 4), 60.0)]
FULL_LP_MAX_VARIABLES = 400_000
ESTIMATE_MAX_ENUMERATED = 10_000
ESTIMATE_SAMPLES = 4096
REAL_VOCAB, REAL_PATHS, CLOSED_FORM_TARGET = 151_936, 8, 0.5
ALPHA, SEED = 0.7, 0
TIME_LIMIT = 300.0  # seconds per optimum (the targets are 60 s and less)


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def gap_rows(shapes: list[tuple[tuple[int, int, int], float]]) -> list[dict[str, Any]]:
    rows = []
    for (vocab, depth, paths), target in shapes:
        inst = dirichlet_instance(vocab, depth, alpha=ALPHA, seed=SEED)
        for label, max_enumerated in (("exact laws", 1_000_000),
                                      ("estimated laws", ESTIMATE_MAX_ENUMERATED)):
            result, seconds = timed(gap, inst, paths, max_enumerated=max_enumerated,
                                    samples=ESTIMATE_SAMPLES, time_limit=TIME_LIMIT)
            verifiers = result["verifiers"]
            row = {"part": "gap", "V": vocab, "L": depth, "K": paths, "variant": label,
                   "seconds": seconds, "target_s": target, "meets_target": seconds <= target,
                   "optimum_seconds": result["optimum"]["seconds"],
                   "verifier_seconds": sum(v["seconds"] for v in verifiers.values()),
                   "slowest_verifier": max(verifiers, key=lambda n: verifiers[n]["seconds"]),
                   "estimated_verifiers": sum(v["estimate"] is not None for v in verifiers.values()),
                   "verifiers": len(verifiers), "certified": result["optimum"]["certified"],
                   "value": result["optimum"]["value"], "failures": len(result["failures"])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def optimum_rows(shapes: list[tuple[tuple[int, int, int], float]]) -> list[dict[str, Any]]:
    rows = []
    for (vocab, depth, paths), target in shapes:
        inst = dirichlet_instance(vocab, depth, alpha=ALPHA, seed=SEED)
        record, seconds = timed(optimum, inst, paths, time_limit=TIME_LIMIT)
        row = {"part": "optimum", "V": vocab, "L": depth, "K": paths, "variant": record.method,
               "seconds": seconds, "target_s": target,
               "meets_target": bool(record.certified and seconds <= target),
               "certified": record.certified, "status": record.status, "value": record.value,
               "solve_seconds": record.solve_seconds, "certify_seconds": record.certify_seconds,
               "iterations": record.details.get("iterations"),
               "exact_rounds": record.details.get("exact_rounds"),
               "priorities": record.size.get("priorities")}
        size = full_lp_size(vocab, depth, paths, "iid")
        row["full_lp_variables"] = size["variables"]
        if size["variables"] <= FULL_LP_MAX_VARIABLES:
            full, full_seconds = timed(optimum, inst, paths, method="full", time_limit=TIME_LIMIT)
            row.update(full_seconds=full_seconds, full_certified=full.certified,
                       full_equal_exactly=(full.exact_value is not None
                                           and full.exact_value == record.exact_value),
                       speedup=full_seconds / seconds)
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    return rows


def closed_form_rows(repeats: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(SEED)
    target = rng.dirichlet(np.full(REAL_VOCAB, 0.1))
    draft = rng.dirichlet(np.full(REAL_VOCAB, 0.1))
    times = []
    for _ in range(repeats):
        result, seconds = timed(one_step_optimum, target, draft, REAL_PATHS)
        times.append(seconds)
    seconds = statistics.median(times)
    row = {"part": "closed form", "V": REAL_VOCAB, "L": 1, "K": REAL_PATHS,
           "variant": "float64 rows, Dirichlet(0.1)", "seconds": seconds,
           "target_s": CLOSED_FORM_TARGET, "meets_target": seconds <= CLOSED_FORM_TARGET,
           "value": float(result.value[0]), "repeats": repeats, "all_seconds": times}
    print(json.dumps(row), flush=True)
    return [row]


def figure(rows: list[dict[str, Any]], path: Path, host: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, seconds, targets, colours = [], [], [], []
    for row in rows:
        labels.append(f"{row['part']} ({row['V']},{row['L']},{row['K']})"
                      + (f"\n{row['variant']}" if row["part"] == "gap" else ""))
        seconds.append(row["seconds"])
        targets.append(row["target_s"])
        colours.append("tab:green" if row["meets_target"] else "tab:red")
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(rows) + 2), 4.8))
    x = np.arange(len(rows))
    # points, not bars: a bar's length means nothing on a log axis
    for met, colour, word in ((True, "tab:green", "met"), (False, "tab:red", "missed")):
        sel = [i for i, c in enumerate(colours) if (c == "tab:green") == met]
        if sel:
            ax.scatter(sel, [seconds[i] for i in sel], marker="D", s=36, color=colour,
                       label=f"measured (target {word})", zorder=4)
    ax.scatter(x, targets, marker="_", s=400, color="black", label="target", zorder=3)
    full = [(i, r["full_seconds"]) for i, r in enumerate(rows) if "full_seconds" in r]
    if full:
        ax.scatter([i for i, _ in full], [s for _, s in full], marker="o", color="tab:blue",
                   label="enumerated full LP (method full)", zorder=3)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("seconds (wall)")
    ax.set_title(f"Optimum engine speed targets (green: met, red: missed); {host}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.grid(axis="x", alpha=0.15)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="only the 1 s gap shapes and the closed form (a smoke run)")
    parser.add_argument("--figure-only", action="store_true",
                        help="redraw optimum_engine.png from optimum_engine.json (no run)")
    args = parser.parse_args()
    if args.figure_only:
        recorded = json.loads((Path(args.out) / "optimum_engine.json").read_text())
        meta = recorded["meta"]
        host = f"{meta['host']}, {meta['cpus']} cores, load {meta['load_average_before'][0]:.1f}"
        figure(recorded["rows"], Path(args.out) / "optimum_engine.png", host)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load_before = os.getloadavg()
    gap_shapes = [s for s in GAP_SHAPES if not args.quick or s[1] <= 1.0]
    parts = [lambda: closed_form_rows(args.repeats), lambda: optimum_rows(gap_shapes),
             lambda: gap_rows(gap_shapes),
             lambda: optimum_rows([] if args.quick else OPTIMUM_SHAPES)]
    rows: list[dict[str, Any]] = []
    for index, part in enumerate(parts):  # the files are rewritten after every part
        rows += part()
        write(out, rows, started, load_before, args.quick, done=index == len(parts) - 1)


def write(out: Path, rows: list[dict[str, Any]], started: float, load_before: tuple,
          quick: bool, done: bool) -> None:
    """optimum_engine.{json,csv,md,png} from the rows so far (meta says whether complete)."""
    host = f"{platform.node()}, {os.cpu_count()} cores, load {load_before[0]:.1f}"
    meta = {"command": "python benchmarks/optimum_engine.py" + (" --quick" if quick else ""),
            "complete": done, "host": platform.node(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "load_average_before": load_before,
            "load_average_after": os.getloadavg(), "started_unix": started,
            "wall_seconds": time.time() - started,
            "instances": f"dirichlet_instance(V, L, alpha={ALPHA}, seed={SEED}) float rows"}
    (out / "optimum_engine.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1,
                                                        default=str))
    columns = sorted({k for r in rows for k in r if k != "all_seconds"},
                     key=lambda k: (k not in ("part", "V", "L", "K", "variant", "seconds",
                                              "target_s", "meets_target"), k))
    with open(out / "optimum_engine.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# Optimum engine speed targets ({meta['command']})", "",
             f"Host {host}; wall {meta['wall_seconds']:.0f} s"
             + ("." if done else " (INCOMPLETE: the run was still going)."), "",
             "| part | (V, L, K) | variant | seconds | target | met | notes |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        notes = []
        if r["part"] == "gap":
            notes.append(f"optimum {r['optimum_seconds']:.2f} s, laws {r['verifier_seconds']:.1f} s "
                         f"(slowest {r['slowest_verifier']}), {r['estimated_verifiers']}/"
                         f"{r['verifiers']} estimated")
        if r["part"] in ("gap", "optimum"):
            notes.append("certified" if r["certified"] else "NOT certified")
        if "full_seconds" in r:
            notes.append(f"full LP {r['full_seconds']:.2f} s, equal exactly: "
                         f"{r['full_equal_exactly']}")
        lines.append(f"| {r['part']} | ({r['V']}, {r['L']}, {r['K']}) | {r['variant']} | "
                     f"{r['seconds']:.3g} | {r['target_s']:g} | {'yes' if r['meets_target'] else 'NO'} "
                     f"| {'; '.join(notes)} |")
    (out / "optimum_engine.md").write_text("\n".join(lines) + "\n")
    figure(rows, out / "optimum_engine.png", host)
    if done:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
