"""nodeopt's node rules side by side on the recorded sweep tasks (issue 20, part 0).

Reads the tasks of benchmarks/results/beyond/sweep/rows.jsonl (528 (instance, K) tasks of the
recorded sweep, with their certified optimum and the nodeopt value recorded then), regenerates
every instance from its seed and computes nodeopt's exact block efficiency (float64) with each
node rule: "nested" (registered), "merged" and "closer" (studied in issue 20), plus
BV, by BV against the selected path's law (benchmarks/nodeopt_adversarial.py: path_rows,
class_values; checked there against enumeration). The recorded nodeopt value must equal the
"nested" value recomputed here (a consistency check of the regeneration, reported).

    nice -n 15 python benchmarks/nodeopt_rules_sweep.py --out benchmarks/results/beyond/rules_sweep.json

--extended (issue 31, part 2): instead, the variants of extended BV (verifiers/bv_extended.py,
docs/theory.md section 19) on the same tasks with K >= 2, exactly in float64 by the fresh-start
recursion (extended_bv_structured, equal to the enumeration in tests/test_bv_extended.py):
the step at the fallback node (EXTENDED_STEPS) with extended BV again below it, and the rule
run below the first fallback (EXTENDED_BELOW) with recursive rejection as the step. Gaps to
the recorded certified optimum, counts below BV, and the recorded values of the other
verifiers on the same tasks, over all tasks and over the shapes (2..3, 2..3, 2..3).

    nice -n 15 python benchmarks/nodeopt_rules_sweep.py --extended \
        --out benchmarks/results/beyond/bv_extended_sweep.json

--ceiling (issue 31, part 2): the ceiling of that whole family (verifiers.bv_extended.
family_ceiling, docs/theory.md Proposition 19.5) beside the registered bv_extended, on the
same tasks: if the ceiling's mean gap is above the target, no member of the family meets it.

    nice -n 15 python benchmarks/nodeopt_rules_sweep.py --ceiling \
        --out benchmarks/results/beyond/bv_extended_ceiling.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from speclp.experiments.sweep import Task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nodeopt_adversarial import class_values, path_rows  # noqa: E402

ROWS = Path(__file__).resolve().parent / "results" / "beyond" / "sweep" / "rows.jsonl"
RULES = ("nested", "merged", "closer")


def task_values(record: dict) -> dict:
    task = Task(record["family"], int(record["vocab"]), int(record["depth"]),
                int(record["paths"]), int(record["seed"]), record["alpha"],
                record["temperature"], record["draft_sampling"])
    model = task.instance().model()
    target = torch.as_tensor(np.asarray(model.target, dtype=np.float64))[None]
    draft = torch.as_tensor(np.asarray(model.draft, dtype=np.float64))[None]
    depth, paths = model.depth, int(record["paths"])
    out = {"bv": float(class_values(target, draft, depth)[0])}
    for rule in RULES:
        rows = path_rows(target, draft, depth, paths, rule)
        out[rule] = float(class_values(target, rows, depth)[0])
    return out


EXTENDED_STEPS = ("specinfer", "rrsw", "optimal", "spectr", "khisti")
EXTENDED_BELOW = ("nodeopt", "gbv")
RECORDED = ("bv", "gbv", "nodeopt", "spectr", "traversal")


def extended_values(record: dict) -> dict:
    """Exact (float64) block efficiency of every extended-BV variant on one task."""
    from speclp.verifiers.bv_extended import extended_bv_structured
    from speclp.verifiers.exact import block_efficiency_from_emit, exact_result

    task = Task(record["family"], int(record["vocab"]), int(record["depth"]),
                int(record["paths"]), int(record["seed"]), record["alpha"],
                record["temperature"], record["draft_sampling"])
    model = task.instance().model()
    paths = int(record["paths"])
    out = {}
    for step in EXTENDED_STEPS:
        emit = extended_bv_structured(model, paths, step)
        out[f"step={step}"] = float(block_efficiency_from_emit(model, emit))
    for below in EXTENDED_BELOW:
        emit = extended_bv_structured(
            model, paths, "specinfer",
            lambda submodel, m, name=below: exact_result(submodel, name, m).emit)
        out[f"below={below}"] = float(block_efficiency_from_emit(model, emit))
    return out


def extended_summary(records: list[dict]) -> dict:
    """Part 2 of issue 31: gaps and counts of the extended-BV variants (module docstring)."""
    records = [r for r in records if int(r["paths"]) >= 2]
    start = time.perf_counter()
    rows = []
    for record in records:
        values = extended_values(record) | {name: record[name] for name in RECORDED}
        rows.append((record, values))
    names = list(rows[0][1])

    def stats(part: list) -> dict:
        out = {}
        for name in names:
            gaps = [r["optimum"] - v[name] for r, v in part]
            margin = [v[name] - v["bv"] for _, v in part]
            out[name] = {"mean_gap": round(float(np.mean(gaps)), 6),
                         "below_bv": int(sum(m < -1e-12 for m in margin)),
                         "min_margin_over_bv": round(float(min(margin)), 9)}
        return out | {"tasks": len(part)}

    small = [(r, v) for r, v in rows if int(r["vocab"]) <= 3 and 2 <= int(r["depth"]) <= 3
             and int(r["paths"]) <= 3]
    return {
        "benchmark": "extended BV variants on the recorded sweep tasks with K >= 2 "
                     "(gap = certified optimum - E[tau+1], exact float64)",
        "variants": {"step=S": "step S at the fallback node, extended BV below it",
                     "below=X": "recursive rejection as the step, X on the subtree below the "
                                "first fallback"},
        "all_tasks": stats(rows),
        "shapes_2to3": stats(small),
        "seconds": round(time.perf_counter() - start, 1),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def ceiling_summary(records: list[dict]) -> dict:
    """Issue 31, part 2: the ceiling of the extended-BV family (family_ceiling, docs/theory.md
    Proposition 19.5: an upper bound on every verifier that keeps BV's block on path 1 and
    draws its next token by a lossless step at BV's end node) on the sweep tasks with K >= 2,
    beside the registered bv_extended (single-step-optimal step) and the recorded values."""
    from speclp.verifiers.bv_extended import extended_bv_structured, family_ceiling
    from speclp.verifiers.exact import block_efficiency_from_emit

    records = [r for r in records if int(r["paths"]) >= 2]
    start = time.perf_counter()
    rows = []
    for record in records:
        task = Task(record["family"], int(record["vocab"]), int(record["depth"]),
                    int(record["paths"]), int(record["seed"]), record["alpha"],
                    record["temperature"], record["draft_sampling"])
        model = task.instance().model()
        paths = int(record["paths"])
        values = {"ceiling": float(family_ceiling(model, paths)),
                  "bv_extended": float(block_efficiency_from_emit(
                      model, extended_bv_structured(model, paths, "optimal")))}
        rows.append((record, values | {name: record[name] for name in RECORDED}))
    gbv_gap = float(np.mean([r["optimum"] - v["gbv"] for r, v in rows]))
    nodeopt_gap = float(np.mean([r["optimum"] - v["nodeopt"] for r, v in rows]))
    target = min(gbv_gap / 2, 2 * nodeopt_gap)
    out = {}
    for name in rows[0][1]:
        gaps = np.array([r["optimum"] - v[name] for r, v in rows])
        out[name] = {"mean_gap": round(float(gaps.mean()), 6),
                     "tasks_with_gap_above_target_mean": int((gaps > target).sum())}
    above = [v["ceiling"] - v["bv_extended"] for _, v in rows]
    below_nodeopt = sum(v["ceiling"] < v["nodeopt"] - 1e-12 for _, v in rows)
    return {
        "benchmark": "ceiling of the extended-BV family on the recorded sweep tasks with K >= 2 "
                     "(gap = certified optimum - E[tau+1], exact float64)",
        "tasks": len(rows),
        "target_mean_gap": {"value": round(target, 6), "rule": "min(GBV's mean gap / 2, "
                            "2 x nodeopt's mean gap) on these tasks"},
        "mean_gap": out,
        "ceiling_minus_bv_extended": {"min": round(min(above), 9), "max": round(max(above), 6),
                                      "mean": round(float(np.mean(above)), 6)},
        "tasks_with_ceiling_below_nodeopt": int(below_nodeopt),
        "seconds": round(time.perf_counter() - start, 1),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=ROWS)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--extended", action="store_true",
                        help="the extended-BV variants (issue 31) instead of nodeopt's rules")
    parser.add_argument("--ceiling", action="store_true",
                        help="the ceiling of the extended-BV family (issue 31) and bv_extended")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    records = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["draft_sampling"] == "iid"]
    if args.extended or args.ceiling:
        summary = ceiling_summary(records) if args.ceiling else extended_summary(records)
        print(json.dumps(summary, indent=1))
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(summary, indent=1) + "\n")
        return summary
    start = time.perf_counter()
    per_k: dict[int, dict[str, list[float]]] = {}
    below = {rule: 0 for rule in RULES}
    worst = {rule: 0.0 for rule in RULES}
    regenerated = 0.0
    for record in records:
        values = task_values(record)
        regenerated = max(regenerated, abs(values["nested"] - record["nodeopt"]))
        entry = per_k.setdefault(int(record["paths"]), {name: [] for name in (*RULES, "bv")})
        for name in (*RULES, "bv"):
            entry[name].append(record["optimum"] - values[name])
        for rule in RULES:
            below[rule] += int(values[rule] < values["bv"] - 1e-12)
            worst[rule] = max(worst[rule], values["bv"] - values[rule])
    summary = {
        "benchmark": "nodeopt node rules on the recorded sweep tasks (gap = optimum - E[tau+1])",
        "tasks": len(records), "seconds": round(time.perf_counter() - start, 1),
        "recorded_nodeopt_vs_nested_recomputed_max_abs": regenerated,
        "mean_gap_per_K": {k: {name: round(float(np.mean(v)), 6) for name, v in e.items()}
                           | {"tasks": len(e["bv"])} for k, e in sorted(per_k.items())},
        "below_bv": below, "worst_below_bv": {k: round(v, 9) for k, v in worst.items()},
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    main()
