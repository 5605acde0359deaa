"""`speclp gap` on random instances: no crash, no false failure (issue 30, part 3).

For every shape (V, L, K) of SHAPES (those of benchmarks/gap_speed.py), every alpha in ALPHAS
and seeds 0..N-1, a Dirichlet(alpha) instance with rational rows (denominator DENOMINATOR, so
the exact laws and the exact TV run where they are cheap) is checked with
`speclp gap INSTANCE --paths K --json` in a fresh process. Recorded per task: exit code
(0 = every claim holds; 1 = a failure or the optimum not found; 2 = refused as bad input;
anything else = a crash), wall seconds, the failures and every verifier reported as an
estimate or as undefined. A run is resumable: tasks already in the results file are skipped,
and each finished task is appended at once (JSON lines).

    nice -n 15 python benchmarks/gap_robustness.py [--shapes 3,2,3 ...] [--instances 20]
        [--alphas 0.3 0.7 1.0] [--float] [--out FILE]

--float: float64 Dirichlet rows instead (no rounding; the laws are then checked in float64 and
the optimum in the exact binary values of the rows), the harder case for the optimum past 128
leaves; its tasks are named with a "-float" suffix.

Writes benchmarks/results/gap_robustness/runs.jsonl (or --out) and prints the summary:
tasks, crashes, exit-1 tasks with their failures (each a false failure unless shown
otherwise: every verifier here but spectr_gbv is proven lossless and below the optimum).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "gap_robustness" / "runs.jsonl"
SHAPES = [(3, 2, 3), (2, 3, 3), (3, 3, 2), (4, 3, 3), (8, 2, 3), (2, 6, 3),
          (8, 3, 4), (4, 4, 4), (2, 8, 3), (16, 2, 4)]
ALPHAS = (0.3, 0.7, 1.0)
DENOMINATOR = 12
TIME_LIMIT = 600
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def run_task(instance: Path, paths: int) -> dict:
    env = {**os.environ, **THREADS, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "speclp", "gap", str(instance), "--paths",
                           str(paths), "--json", "--time-limit", str(TIME_LIMIT)],
                          capture_output=True, text=True, env=env)
    record = {"exit": proc.returncode, "seconds": round(time.perf_counter() - start, 3)}
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        record["error"] = (proc.stderr or proc.stdout)[-800:]
        return record
    record["failures"] = result.get("failures", [])
    if "error" in result:
        record["error"] = result["error"]
    rows = result.get("verifiers", {})
    record["estimates"] = [n for n, v in rows.items() if v.get("evaluation") == "estimate"]
    record["undefined"] = {n: v["undefined"] for n, v in rows.items() if v.get("undefined")}
    opt = result.get("optimum", {})
    record["certified"] = opt.get("certified")
    record["certified_within"] = opt.get("certified_within")
    record["master"] = opt.get("master")  # past 128 leaves: "node-budget" or "antichain form"
    return record


def summary(records: list[dict]) -> str:
    crashes = [r for r in records if r["exit"] not in (0, 1)]
    failed = [r for r in records if r["exit"] == 1]
    estimated = [r for r in records if r.get("estimates")]
    lines = [f"tasks {len(records)}, exit 0: {sum(r['exit'] == 0 for r in records)}, "
             f"exit 1: {len(failed)}, crashes/refusals (exit not 0/1): {len(crashes)}, "
             f"with an estimate: {len(estimated)}, "
             f"with an undefined verifier: {sum(bool(r.get('undefined')) for r in records)}"]
    for r in crashes + failed:
        lines.append(f"  {r['task']}: exit {r['exit']}: "
                     f"{'; '.join(r.get('failures') or []) or r.get('error', '')[:300]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=None, help="V,L,K triples")
    parser.add_argument("--instances", type=int, default=20, help="seeds per shape and alpha")
    parser.add_argument("--alphas", nargs="*", type=float, default=list(ALPHAS))
    parser.add_argument("--float", action="store_true", help="float64 rows (no denominator)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    try:
        shapes = ([tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes
                  else SHAPES)
    except ValueError:
        parser.error(f"--shapes: V,L,K triples of integers, got {args.shapes}")
    if any(len(s) != 3 or min(s) < 1 or s[0] < 2 for s in shapes):
        parser.error(f"--shapes: V,L,K triples with V >= 2, L >= 1, K >= 1, got {args.shapes}")
    if args.instances < 1 or any(not a > 0 for a in args.alphas):
        parser.error("--instances must be >= 1 and every --alphas value > 0")
    from speclp.lp.instance import dirichlet_instance

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {r["task"] for r in records}
    with tempfile.TemporaryDirectory() as tmp:
        for vocab, depth, paths in shapes:
            for alpha in args.alphas:
                for seed in range(args.instances):
                    task = (f"V{vocab}-L{depth}-K{paths}-a{alpha:g}-s{seed}"
                            + ("-float" if args.float else ""))
                    if task in done:
                        continue
                    instance = dirichlet_instance(vocab, depth, alpha=alpha, seed=seed,
                                                  denominator=None if args.float
                                                  else DENOMINATOR).save(
                        Path(tmp) / f"{task}.json")
                    record = {"task": task, "shape": [vocab, depth, paths], "alpha": alpha,
                              "seed": seed, **run_task(instance, paths)}
                    records.append(record)
                    with out.open("a") as handle:
                        handle.write(json.dumps(record) + "\n")
                    print(task, record["exit"], record["seconds"], flush=True)
    print(summary(records))


if __name__ == "__main__":
    main()
