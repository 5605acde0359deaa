"""Every figure of the project (PNG + PDF): one module per experiment, shared style in
style.py, and `speclp plot`'s dispatch here.

    plot_results(RESULTS, out) -> {"out": dir, "kind": "sweep", "figures": {name: {...}}}

A folder of JSONL records (e.g. benchmarks/results/bench/, realgap/, trees/) is recognised by
is_bench_results; record_kind says which command wrote each file: bench records are drawn by
plot_bench, realgap records by plot_realgap, trees records by plot_trees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..realgap import full_records
from ..sweep import load_results
from .bench import NotBenchRecords, bench_rows, plot_bench
from .realgap import plot_realgap, plot_renormalised
from .sweep import gap_heatmap, gap_scale, gaps_by_verifier, gbv_vs_bv, ratio_by_verifier
from .trees import plot_trees, plot_trees_file, trees_title

__all__ = ["NotBenchRecords", "NotSweepResults", "bench_rows", "gap_heatmap", "gap_scale",
           "gaps_by_verifier", "gbv_vs_bv", "is_bench_results",
           "plot_bench", "plot_realgap", "plot_renormalised", "plot_results", "plot_trees",
           "plot_trees_file", "ratio_by_verifier", "record_kind", "trees_title"]


class NotSweepResults(ValueError):
    """RESULTS is not a readable sweep (bad input; an error while drawing is not this one)."""


def is_bench_results(path: Path) -> bool:
    """A benchmark results directory: JSONL files and no sweep parts."""
    if path.is_file():
        return path.suffix == ".jsonl"
    return (path.is_dir() and not (path / "parts").is_dir()
            and any(path.glob("*.jsonl")))


def record_kind(records: list[dict[str, Any]]) -> str | None:
    """Which command wrote these records: "bench" (paired scores), "realgap" (full-vocabulary
    bounds per K), "trees" (tree-selection values), or None (another kind, e.g. a benchmark
    script's rows, drawn by that script)."""
    records = [r for r in records if isinstance(r, dict)]
    if any("scores" in r and "drive" in r for r in records):
        return "bench"
    if any("by_paths" in r for r in full_records(records)):
        return "realgap"
    if any("renormalised_values" in r and "walltime" in r for r in records):
        return "trees"
    return None


def plot_results(results: str | Path, out: str | Path | None = None) -> dict[str, Any]:
    """Write the figures of a sweep to `out` (default: RESULTS_figures next to RESULTS).

    Returns {"out", "kind": "sweep", "instances", "figures": {name: {"files", "note", ...}}}.
    """
    path = Path(results)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    target = Path(out) if out else path.with_name(path.stem + "_figures")
    if is_bench_results(path):
        raise NotSweepResults(f"{path} holds benchmark results (JSONL), not a sweep: use "
                         "`speclp plot` (plot_bench below)")
    try:
        frame = load_results(path)
    except (FileNotFoundError, ValueError) as err:
        raise NotSweepResults(str(err)) from None
    target.mkdir(parents=True, exist_ok=True)  # only once the results are read: no empty folder
    # one gap heatmap per multi-path verifier the rows hold (whatever --verifiers chose);
    # GBV against BV only when both are there
    present = [v for v in dict.fromkeys(frame["verifier"])
               if "multipath" not in frame.columns
               or bool(frame.loc[frame["verifier"] == v, "multipath"].iloc[0])]
    scale = gap_scale(frame)  # one colour scale for every heatmap and the comparison
    figures = {f"{v}_gap_heatmap": gap_heatmap(frame, target, verifier=v, scale=scale)
               for v in present}
    figures["gaps_by_verifier"] = gaps_by_verifier(frame, target)  # every verifier, bv too
    figures["ratio_by_verifier"] = ratio_by_verifier(frame, target)
    if {"gbv", "bv"} <= set(frame["verifier"]):
        figures["gbv_vs_bv"] = gbv_vs_bv(frame, target)
    return {"out": str(target), "kind": "sweep", "instances": int(frame["instance_id"].nunique()),
            "figures": figures}
