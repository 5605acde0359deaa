"""Where a symbolic proof spends its time (issue 17, part 3: profile before optimising).

    python benchmarks/prove_profile.py [--out DIR] [CLAIM V L K SAMPLING ...]

Runs `speclp.proofs.symbolic.prove.prove` under cProfile for each shape (default: two
small ones that take seconds) and reports the cumulative time inside a few entry points:
polynomial factoring (python-flint), sign proofs (the positivity LP search, scipy HiGHS),
witness search (random lattice points and their exact tests), exact evaluation at points,
the verifier laws on cells, the LP basis on cells, and the export. The entries overlap
(factoring happens inside the laws, for example), so they do not sum to the total. CPU
seconds (process time) are the measure; the wall time of a loaded machine is not.
Writes DIR/profile.json (default benchmarks/results/prove/).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

from speclp.proofs.symbolic.prove import prove

RESULTS = Path(__file__).resolve().parent / "results" / "prove"
DEFAULT = [("gbv-l1-closed-form", 3, 1, 1, "iid"), ("l1-optimum", 2, 1, 3, "iid")]
ENTRIES = {
    "factoring (flint)": ("symbolic/algebra.py", "factor"),
    "sign proofs (positivity LP)": ("symbolic/positivity.py", "nonnegative_combination"),
    "witness search": ("symbolic/cells.py", "find_samples"),
    "exact evaluation at points": ("symbolic/algebra.py", "evaluate"),
    "verifier laws on cells": ("symbolic/claims.py", "_law"),
    "LP basis on cells": ("symbolic/lp_side.py", "symbolic_optimum"),
    "export": ("symbolic/prove.py", "_document"),
}


def profile_one(claim: str, vocab: int, depth: int, paths: int, sampling: str) -> dict:
    profiler = cProfile.Profile(time.process_time)
    start = time.process_time()
    profiler.enable()
    run = prove(claim, vocab, depth, paths, sampling)
    profiler.disable()
    total = time.process_time() - start
    stats = pstats.Stats(profiler).stats
    parts = {}
    for name, (path, function) in ENTRIES.items():
        parts[name] = round(sum(v[3] for (file, _, fn), v in stats.items()
                                if file.endswith(path) and fn == function), 2)
    return {"claim": claim, "vocab": vocab, "depth": depth, "paths": paths,
            "draft_sampling": sampling, "proved": run.holds and run.complete,
            "cells": run.counts, "cpu_s": round(total, 2), "cumulative_cpu_s": parts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("shape", nargs="*", help="CLAIM V L K SAMPLING (repeated)")
    args = parser.parse_args(argv)
    if len(args.shape) % 5:
        parser.error("shapes are given as CLAIM V L K SAMPLING")
    shapes = [(args.shape[i], int(args.shape[i + 1]), int(args.shape[i + 2]),
               int(args.shape[i + 3]), args.shape[i + 4]) for i in range(0, len(args.shape), 5)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for shape in shapes or DEFAULT:
        row = profile_one(*shape)
        rows.append(row)
        print(f"{shape}: {row['cpu_s']} s CPU, cells {row['cells']['kept']} kept", flush=True)
        for name, seconds in row["cumulative_cpu_s"].items():
            print(f"    {name:30s} {seconds:8.2f} s ({seconds / max(row['cpu_s'], 1e-9):.0%})")
        (out / "profile.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
