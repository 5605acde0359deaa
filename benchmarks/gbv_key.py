"""GBV key: exact block efficiency of `gbv` (key (p/q, token id)) minus `gbv_clipped`
(key (min(1, p/q), token id), the public reference's) on the sweep's instance grid.

    python benchmarks/gbv_key.py [--out FILE.json]

Grid (like the recorded sweep): Dirichlet(alpha) instances, alpha in {0.5, 1}, seeds
0..7, V in {2, 3, 4}, L in {1, 2, 3}, K in {2, 3, 4}; cells whose exact enumeration is
over 1,000,000 ordered draft tuples are skipped (as the sweep does). Laws are exact
(every draft configuration enumerated, float64; differences below 1e-12 count as ties).
Prints a summary and saves every row with --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.exact import exact_result

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_and_save  # noqa: E402

TIE = 1e-12


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON file for the rows (default: print only)")
    parser.add_argument("--max-tuples", type=int, default=1_000_000)
    args = parser.parse_args()
    rows, skipped = [], []
    start = time.perf_counter()
    for vocab in (2, 3, 4):
        for depth in (1, 2, 3):
            for paths in (2, 3, 4):
                if (vocab**depth) ** paths > args.max_tuples:
                    skipped.append((vocab, depth, paths))
                    continue
                for alpha in (0.5, 1.0):
                    for seed in range(8):
                        inst = dirichlet_instance(vocab, depth, alpha=alpha, seed=seed)
                        model = inst.model()
                        a = float(exact_result(model, "gbv", paths=paths).block_efficiency)
                        b = float(exact_result(model, "gbv_clipped", paths=paths).block_efficiency)
                        rows.append({"vocab": vocab, "depth": depth, "paths": paths, "alpha": alpha,
                                     "seed": seed, "gbv": a, "gbv_clipped": b, "difference": a - b})
                print(f"V={vocab} L={depth} K={paths} done ({time.perf_counter() - start:.0f}s)",
                      flush=True)
    diff = np.array([r["difference"] for r in rows])
    summary = {
        "instances": len(rows), "skipped_cells": skipped,
        "unclipped_better": int((diff > TIE).sum()), "clipped_better": int((diff < -TIE).sum()),
        "ties": int((np.abs(diff) <= TIE).sum()),
        "mean_difference": float(diff.mean()), "max_difference": float(diff.max()),
        "min_difference": float(diff.min()),
        "by_paths": {k: float(np.mean([r["difference"] for r in rows if r["paths"] == k]))
                     for k in (2, 3, 4)},
        "seconds": round(time.perf_counter() - start, 1),
    }
    print_and_save(summary, rows, args.out)


if __name__ == "__main__":
    main()
