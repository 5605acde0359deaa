"""The README's findings of the recorded sweep grid, derived from its rows (issue 30 part 5).

Reads a sweep folder (default benchmarks/results/sweep_grid) with experiments.sweep.load_results (only the
rows of the folder's spec) and prints, and with --out writes as markdown:
    the state: tasks recorded of the spec's tasks, the tasks left, estimated rows, how every optimum is
        certified (exactly / within w, the largest w), claim violations;
    the mean gap to the optimum per verifier at each K (a description of the recorded instances, not a
        population estimate);
    paired counts over the (instance, K >= 2) pairs where both rows are exact: A below B means A's block
        efficiency is lower than B's by more than 1e-12 (the comparisons the README states), with the
        largest difference.
Nothing here is computed but from the rows; the README quotes this output.

    python benchmarks/sweep_grid_findings.py [FOLDER] [--out FOLDER/findings.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from speclp.experiments.sweep import folder_tasks, load_results, summarize
from speclp.inputs import BadArgument

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-12
PAIRS = [("gbv", "bv"), ("nodeopt", "gbv"), ("nodeopt", "bv"), ("traversal", "bv"),
         ("bv_extended_rrs", "bv"), ("spectr", "bv"), ("gbv_clipped", "gbv")]
SHOWN = ["gbv", "bv", "spectr", "traversal", "bv_extended_rrs", "nodeopt"]


def below(frame: pd.DataFrame, a: str, b: str) -> tuple[int, int, float, dict[int, int]]:
    """(count of pairs with a below b, pairs compared, largest b - a, count per K)."""
    rows = frame[~frame["estimate"].astype(bool)].set_index("instance_id")
    both = rows[rows["verifier"] == a][["block_efficiency", "paths"]].merge(
        rows[rows["verifier"] == b][["block_efficiency"]], left_index=True, right_index=True,
        suffixes=("", "_b"))
    both = both[both["paths"] >= 2]
    diff = both["block_efficiency_b"] - both["block_efficiency"]
    worse = diff > TOLERANCE
    per_k = {int(k): int(v) for k, v in worse.groupby(both["paths"]).sum().items()}
    return int(worse.sum()), int(len(both)), float(diff.max()) if len(diff) else float("nan"), per_k


def findings(folder: Path) -> str:
    frame = load_results(folder)
    summary = summarize(frame, tolerance=TOLERANCE)
    tasks_of_spec = folder_tasks(folder)
    if tasks_of_spec is None:
        raise SystemExit(f"{folder}: no sweep spec.json")
    wanted = [t.instance_id for t in tasks_of_spec]
    done = set(frame["instance_id"])
    left = [t for t in wanted if t not in done]
    tasks = frame.drop_duplicates("instance_id")
    exact = int(tasks["optimum_certified"].astype(bool).sum())
    within = tasks["optimum_certified_within"].dropna()
    lines = [f"# Findings of {folder.name} (benchmarks/sweep_grid_findings.py)", "",
             f"- Tasks recorded: {len(done)} of {len(wanted)}" + (
                 "" if not left else f" (left: {', '.join(left)})"),
             f"- Rows: {len(frame)}; estimated rows: {summary['estimated_rows']}; claim violations: "
             f"{summary['claim_violations']}",
             f"- Optima certified exactly: {exact}; within w by exact bounds: {len(within)}"
             + (f" (largest w {within.max():.2g})" if len(within) else "")
             + f"; neither: {len(tasks) - exact - len(within)}", "",
             "## Mean gap to the optimum per K (recorded instances)", "",
             "| verifier | " + " | ".join(f"K = {k}" for k in sorted(frame["paths"].unique())) + " |",
             "|---|" + "---|" * frame["paths"].nunique()]
    per_k = summary["mean_gap_per_verifier_per_K"]
    for verifier in per_k:
        mark = " (lossy)" if verifier in summary["lossy_verifiers"] else ""
        lines.append(f"| {verifier}{mark} | " + " | ".join(
            f"{per_k[verifier].get(int(k), float('nan')):.3f}" for k in sorted(frame["paths"].unique()))
            + " |")
    lines += ["", f"## Paired counts over (instance, K >= 2), exact rows, tolerance {TOLERANCE:g}", "",
              "| A below B | count | of | per K | largest B - A (negative: A above B on every pair) |",
              "|---|---|---|---|---|"]
    for a, b in PAIRS:
        count, of, largest, per = below(frame, a, b)
        lines.append(f"| {a} < {b} | {count} | {of} | {per} | {largest:.3g} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(ROOT / "benchmarks/results/sweep_grid"))
    parser.add_argument("--out", help="write the markdown here too")
    args = parser.parse_args()
    try:
        text = findings(Path(args.folder))
    except BadArgument as err:  # a missing or foreign folder: one line, exit 2
        parser.error(str(err))
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
