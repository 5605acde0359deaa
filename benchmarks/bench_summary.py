"""Summary, tables and figure of the recorded grid bench runs (`speclp bench`, one tree per step).

Reads benchmarks/results/bench/<pair>.jsonl (records of runs with score_grid), and writes
  bench_<pair>_grid_summary.json  every (T, K', L') cell: intervals, cost split, prompts/hour
  bench_<pair>_grid.png/.pdf      the figure of experiments/plots/bench.py
  bench_<pair>_grid.md            tables: verifier - bv at every K', L' in (1, 2, 4, 8), cost
It computes nothing new: a recording still running keeps appending records, and this script
can be rerun at any time (what it reports is what was recorded so far).

    python benchmarks/bench_summary.py [--pair qwen2.5-coder]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent.parent))

from speclp.experiments.bench import load_records, summarize_bench  # noqa: E402
from speclp.experiments.intervals import format_interval  # noqa: E402
from speclp.experiments.plots import plot_bench  # noqa: E402

RESULTS = ROOT / "results" / "bench"
SHOWN_DEPTHS = (1, 2, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen2.5-coder")
    args = parser.parse_args()
    records = [r for r in load_records(RESULTS) if r.get("pair") == args.pair
               and r.get("score_grid")]
    if not records:
        raise SystemExit(f"no grid records for {args.pair} under {RESULTS}")
    rows = summarize_bench(records)
    stem = f"bench_{args.pair}_grid"
    figures = [str(p.relative_to(ROOT.parent)) for p in plot_bench(records, RESULTS / stem)]
    (RESULTS / f"{stem}_summary.json").write_text(json.dumps(
        {"pair": args.pair, "records": len(records), "figures": figures, "runs": rows}, indent=1))
    text = markdown(rows)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


def markdown(rows: list[dict]) -> str:
    names = sorted({n for r in rows for n in r["differences"]})
    lines = []
    for temperature in sorted({r["temperature"] for r in rows}):
        mine = [r for r in rows if r["temperature"] == temperature]
        run = next(r for r in mine if r["realised"] is not None)
        cost = run["cost_per_step"]
        lines += [f"## T = {temperature}: {run['prompts']} prompts (seeds {run['prompt_seeds']}), "
                  f"{run['row_steps']} steps, one (K, L) = ({run['tree_paths']}, "
                  f"{run['tree_depth']}) tree per step", "",
                  "| L' | K' | bv E[tau+1] | " + " | ".join(f"{n} - bv" for n in names) + " |",
                  "|---|---|---|" + "---|" * len(names)]
        for r in sorted(mine, key=lambda r: (r["depth"], r["paths"])):
            if r["depth"] not in SHOWN_DEPTHS:
                continue
            lines.append(f"| {r['depth']} | {r['paths']} | {format_interval(r['verifiers']['bv'])} | "
                         + " | ".join(format_interval(r["differences"][n]) for n in names) + " |")
        four = next((r for r in mine if (r["paths"], r["depth"]) == (4, 4)), None)
        if four is not None:
            halves = {n: half_width(four["differences"][n]) for n in ("gbv", "nodeopt")
                      if n in four["differences"]}
            lines += ["", "Half-widths at (K', L') = (4, 4): " + ", ".join(
                f"{n} - bv {h:.3f}" if h is not None else f"{n} - bv n/a"
                for n, h in halves.items())]
        laws = ", ".join(f"{n} {s:.2f}" for n, s in cost["laws_s"].items())
        lines += ["", f"Seconds per step (batch of {cost['rows_per_step']:.2f} rows on average, "
                  f"{cost['nodes_per_step']:.1f} tree nodes): draft {cost['draft_s']:.2f}, target "
                  f"tree pass {cost['target_s']:.2f}, driver's law {cost['verifier_s']:.3f}; "
                  f"scored laws over all {run['tree_paths'] * run['tree_depth']} cells: {laws}. "
                  f"Prompts per hour (batch wall time, prefill included): "
                  f"{run['prompts_per_hour']:.1f}.", ""]
    return "\n".join(lines) + "\n"


def half_width(iv: dict) -> float | None:
    if iv.get("low") is None:
        return None
    return (iv["high"] - iv["low"]) / 2


if __name__ == "__main__":
    main()
