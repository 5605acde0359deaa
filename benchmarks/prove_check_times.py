"""Time the standalone checker on every shipped proof (and the refutation).

    python benchmarks/prove_check_times.py [--out DIR] [--only STEM ...] [--timeout S]

Runs `python proofs/certificates/check.py FILE` once per shipped proof, each in its own
process (wall time and CPU time of the child, so the load of a shared machine shows as
wall > CPU), and writes DIR/check_times.{json,md} (default benchmarks/results/prove/).
Partial results are saved after every file. A proof the checker rejects or that runs past
--timeout is recorded as such (status FAIL / TIMEOUT), never as a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CERTIFICATES = ROOT / "proofs" / "certificates"
RESULTS = Path(__file__).resolve().parent / "results" / "prove"


def files(only: list[str]) -> list[Path]:
    out = sorted(CERTIFICATES.glob("*.json.gz")) + sorted((CERTIFICATES / "refuted").glob("*.json"))
    if only:
        out = [p for p in out if p.name.split(".json")[0] in only]
    return out


def check_one(path: Path, timeout: float) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(CERTIFICATES / "check.py"), str(path)],
                              capture_output=True, text=True, timeout=timeout, cwd="/")
        status = "OK" if done.returncode == 0 else "FAIL"
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    except subprocess.TimeoutExpired:
        status, line = "TIMEOUT", f"over {timeout:g} s"
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"file": str(path.relative_to(ROOT)), "status": status, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "bytes_gzipped": path.stat().st_size, "output": line[:400]}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# Checker times per shipped proof", "",
             f"`python benchmarks/prove_check_times.py` on {meta['machine']} "
             f"(load average {meta['load_before']} before the run); one process per file.", "",
             "| proof | status | wall s | CPU s | gzipped bytes |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {Path(r['file']).name.split('.json')[0]} | {r['status']} | {r['wall_s']} "
                     f"| {r['cpu_s']} | {r['bytes_gzipped']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "load_before": [round(x, 1) for x in os.getloadavg()]}
    rows: list[dict] = []
    status = 0
    for path in files(args.only):
        row = check_one(path, args.timeout)
        rows.append(row)
        status |= row["status"] != "OK"
        print(f"{row['status']:7s} {row['wall_s']:8.2f} s wall {row['cpu_s']:8.2f} s CPU  "
              f"{row['file']}", flush=True)
        (out / "check_times.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1)
                                              + "\n")
        (out / "check_times.md").write_text(markdown(rows, meta))
    return status


if __name__ == "__main__":
    sys.exit(main())
