"""The one-step (L = 1) closed form against the LPs, and at real-vocabulary scale.

    python benchmarks/closed_form.py [--out DIR] [--repeats R]

Writes DIR/closed_form.{json,md} (default benchmarks/results/). Measured side by side in
one run:
  * small vocabularies (V = 4, 8, 16, 64; K = 2, 4; i.i.d.; Dirichlet(0.5) rows rounded to
    multiples of 1/1000, so every method is exact): the closed form in exact rationals, the
    column-generation engine and (where it fits) the enumerated full LP, with the three
    exact values compared;
  * V = 151,936 (Qwen2.5's vocabulary), K = 8, float64 rows drawn from Dirichlet(0.1) (a
    heavy-tailed law like a language model's): one row, and a batch of 8 rows with
    K = 1..8 sharing one sort; the target is 0.5 s for one row at K = 8. Median of
    `repeats` runs.
Seconds are wall time on the machine that ran it (recorded with the figures).
"""

from __future__ import annotations

import argparse
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
from speclp.lp.instance import dirichlet_instance

RESULTS = Path(__file__).resolve().parent / "results"
SMALL = [(4, 2), (4, 4), (8, 2), (8, 4), (16, 2), (16, 4), (64, 2), (64, 4)]
FULL_LP_MAX_CONFIGURATIONS = 50_000
REAL_VOCAB = 151_936
TARGET_S = 0.5


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def small_rows() -> list[dict[str, Any]]:
    import math

    rows = []
    for vocab, paths in SMALL:
        inst = dirichlet_instance(vocab, 1, alpha=0.5, seed=vocab + paths, denominator=1000)
        closed, closed_s = timed(optimum, inst, paths, method="closed-form")
        colgen, colgen_s = timed(optimum, inst, paths, method="colgen")
        row = {"V": vocab, "K": paths, "closed_form_s": closed_s, "colgen_s": colgen_s,
               "value": closed.value, "colgen_equal_exactly": colgen.exact_value ==
               closed.exact_value, "colgen_certified": colgen.certified}
        if math.comb(vocab + paths - 1, paths) <= FULL_LP_MAX_CONFIGURATIONS:
            full, full_s = timed(optimum, inst, paths, method="full")
            row.update(full_s=full_s, full_equal_exactly=full.exact_value == closed.exact_value,
                       full_certified=full.certified)
        rows.append(row)
        print(f"V={vocab:3d} K={paths}  closed {closed_s:.4f}s  colgen {colgen_s:.3f}s  "
              f"full {row.get('full_s', float('nan')):.3f}s  equal: "
              f"{row['colgen_equal_exactly']}/{row.get('full_equal_exactly')}", flush=True)
    return rows


def real_scale(repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    batch_p = rng.dirichlet(np.full(REAL_VOCAB, 0.1), size=8)
    batch_q = rng.dirichlet(np.full(REAL_VOCAB, 0.1), size=8)
    one = [timed(one_step_optimum, batch_p[0], batch_q[0], 8)[1] for _ in range(repeats)]
    many = [timed(one_step_optimum, batch_p, batch_q, list(range(1, 9)))[1]
            for _ in range(repeats)]
    result = one_step_optimum(batch_p[0], batch_q[0], 8)
    out = {"V": REAL_VOCAB, "K": 8, "repeats": repeats,
           "one_row_K8_median_s": statistics.median(one), "one_row_K8_all_s": one,
           "batch8_K1to8_median_s": statistics.median(many),
           "value": float(result.value[0]), "threshold_set_size": int(result.size[0]),
           "target_s": TARGET_S, "meets_target": statistics.median(one) <= TARGET_S}
    print(f"V={REAL_VOCAB} K=8: one row {out['one_row_K8_median_s']:.4f}s (target {TARGET_S}s), "
          f"8 rows x K=1..8 {out['batch8_K1to8_median_s']:.3f}s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    record = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "load_average": os.getloadavg()},
              "small": small_rows(), "real_scale": real_scale(args.repeats)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "closed_form.json").write_text(json.dumps(record, indent=1))
    lines = ["# One-step closed form (L = 1, i.i.d.) against the LPs", "",
             f"Machine: {record['machine']['platform']}, {record['machine']['cpus']} CPUs, load "
             f"average at start {record['machine']['load_average'][0]:.1f}. Exact rows "
             "(multiples of 1/1000); values compared exactly.", "",
             "| V | K | closed form s | colgen s | full LP s | colgen = closed | full = closed |",
             "|---|---|---|---|---|---|---|"]
    for r in record["small"]:
        full = f"{r['full_s']:.3f}" if "full_s" in r else "(too large)"
        lines.append(f"| {r['V']} | {r['K']} | {r['closed_form_s']:.4f} | {r['colgen_s']:.3f} | "
                     f"{full} | {r['colgen_equal_exactly']} | {r.get('full_equal_exactly', '')} |")
    real = record["real_scale"]
    lines += ["", f"V = {real['V']:,}, K = 8, float64 Dirichlet(0.1) rows: one row "
              f"{real['one_row_K8_median_s']:.4f} s (median of {real['repeats']}; target "
              f"{TARGET_S} s: {'met' if real['meets_target'] else 'MISSED'}); 8 rows x K = 1..8 "
              f"in one call {real['batch8_K1to8_median_s']:.3f} s."]
    (args.out / "closed_form.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
