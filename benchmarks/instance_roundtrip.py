"""`speclp instance` without --denominator on the whole grid of issue 28: every family, V <= 8,
L <= 4, 20 seeds each: generate -> settle -> JSON -> read back (the command's path through the
library), bit for bit. The suite keeps the shapes with V^L <= 64 (20 seeds) and one seed per
float family above that (tests/test_cli_instance.py); this script is the whole grid, resumable.

    python benchmarks/instance_roundtrip.py [--seeds 20] [--out benchmarks/results/instance_roundtrip.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from speclp.cli.instance import same_rows
from speclp.lp.instance import instance_from_json
from speclp.lp.instance_spec import InstanceSpec

FAMILIES = ("dirichlet", "temperature", "ties")
OUT = Path(__file__).resolve().parent / "results" / "instance_roundtrip.json"


def one(family: str, vocab: int, depth: int, seed: int) -> bool:
    inst = InstanceSpec(family, vocab, depth, seed=seed).generate()  # the defaults, settled
    back = instance_from_json(json.loads(json.dumps(inst.to_json())))
    return bool(same_rows(back, inst))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    out = Path(args.out)
    done = json.loads(out.read_text())["cells"] if out.exists() else {}
    for family in FAMILIES:
        for vocab in range(2, 9):
            for depth in range(1, 5):
                key = f"{family} V={vocab} L={depth}"
                if key in done and done[key]["seeds"] >= args.seeds:
                    continue
                start = time.perf_counter()
                failed = [s for s in range(args.seeds) if not one(family, vocab, depth, s)]
                done[key] = {"seeds": args.seeds, "failed_seeds": failed,
                             "seconds": round(time.perf_counter() - start, 2)}
                print(f"{key}: {args.seeds - len(failed)}/{args.seeds} read back bit for bit "
                      f"({done[key]['seconds']} s)", flush=True)
                total = sum(len(c["failed_seeds"]) for c in done.values())
                out.write_text(json.dumps({
                    "command": "python benchmarks/instance_roundtrip.py " + " ".join(sys.argv[1:]),
                    "cells": done, "cells_done": len(done),
                    "cells_total": len(FAMILIES) * 7 * 4, "failures": total,
                    "numpy": np.__version__}, indent=1))
    print(f"{len(done)} cells, {sum(len(c['failed_seeds']) for c in done.values())} failures")


if __name__ == "__main__":
    main()
