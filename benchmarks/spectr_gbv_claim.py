"""SpecTr-GBV (Lin et al. 2026): its claimed optimal E[tau] against the certified K-path
optimum and against the released rule's exact law, on small random instances.

    python benchmarks/spectr_gbv_claim.py [--out FILE.json]

Instances: rational Dirichlet(1) rows rounded to multiples of 1/20 (exact arithmetic
throughout), seeds 0..9, V in {2, 3}, L in {1, 2}, K in {1, 2, 3}. For each: the
certified optimum of the full K-path LP (exact rational), the claimed value
1 + sum_{t=1..L} sum_{|z|=t} P(z)[1 - (1 - min(1, Q(z)/P(z)))^K] (exact), and the exact
block efficiency and TV of `spectr_gbv` (every draft configuration enumerated).
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

from speclp.lp import optimum as lp_optimum
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.exact import exact_result
from speclp.verifiers.spectr_gbv import claimed_expected_accepted
from speclp.verifiers.tree import node_depths

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_and_save  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    start = time.perf_counter()
    for vocab in (2, 3):
        for depth in (1, 2):
            for paths in (1, 2, 3):
                for seed in range(10):
                    inst = dirichlet_instance(vocab, depth, alpha=1.0, seed=seed, denominator=20)
                    model = inst.model(exact=True)
                    record = lp_optimum(inst, paths=paths)
                    claimed = 1 + claimed_expected_accepted(
                        model.node_probabilities("target"), model.node_probabilities("draft"),
                        node_depths(vocab, depth), paths)
                    law = exact_result(model, "spectr_gbv", paths=paths)
                    optimum = record.exact_value
                    rows.append({"vocab": vocab, "depth": depth, "paths": paths, "seed": seed,
                                 "optimum": str(optimum), "certified": record.certified,
                                 "claimed": str(Fraction(claimed)), "law": str(law.block_efficiency),
                                 "tv": float(law.total_variation),
                                 "claimed_minus_optimum": float(claimed - optimum),
                                 "law_minus_optimum": float(law.block_efficiency - optimum)})
    summary = {}
    for depth in (1, 2):
        for paths in (1, 2, 3):
            cell = [r for r in rows if r["depth"] == depth and r["paths"] == paths]
            summary[f"L={depth} K={paths}"] = {
                "instances": len(cell),
                "all_certified": all(r["certified"] for r in cell),
                "claimed_above_optimum": sum(r["claimed_minus_optimum"] > 0 for r in cell),
                "claimed_below_optimum": sum(r["claimed_minus_optimum"] < 0 for r in cell),
                "max_claimed_minus_optimum": max(r["claimed_minus_optimum"] for r in cell),
                "lossy": sum(r["tv"] > 0 for r in cell),
                "max_tv": max(r["tv"] for r in cell),
                "law_above_optimum": sum(r["law_minus_optimum"] > 0 for r in cell),
                "law_equals_claim": sum(r["law"] == r["claimed"] for r in cell),
            }
    summary["seconds"] = round(time.perf_counter() - start, 1)
    print_and_save(summary, rows, args.out)


if __name__ == "__main__":
    main()
