"""Simulated coverage of the real-model intervals over prompts (clusters), at the prompt counts used.

`speclp bench` reports, per verifier and cell, the mean over prompts of the per-prompt mean
E[tau + 1] per step and the paired difference to bv, with a nominal 95% t interval on the
per-prompt means (experiments/intervals.py: cluster_mean_interval). This script checks how
often such an interval covers the true mean at n = 3, 8, 16, 32, 48 prompts (and the counts
recorded), and compares the percentile bootstrap over prompts used before.

Populations (the unit is one prompt's per-step mean, or paired difference):
  recorded   every recorded (run, cell, verifier - bv) with at least 8 prompts in
             benchmarks/results/bench/*.jsonl: n prompts are drawn with replacement from the
             recorded ones; the truth is their mean (the empirical law as the population);
  skewed     a generative model fitted to the recorded paired differences: per-prompt effect
             mean + sd * (lognormal(0, 0.75) standardised), plus within-prompt noise
             sd_w / sqrt(steps), steps ~ 2 + Poisson(3) (few steps per prompt, as recorded);
  outliers   a mixture: 85% of prompts near 0, 15% with a large effect (a skewed two-point
             law, the hardest case for a t interval at small n).
Per (population, n): `reps` simulated data sets; coverage with its Monte Carlo standard
error. Writes benchmarks/results/bench/interval_coverage.json and .md.

    nice -n 15 python benchmarks/interval_coverage.py [--reps 4000] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "bench"
COUNTS = (3, 8, 16, 32, 48)
LEVEL = 0.95
BOOT_REPS = 400  # simulated data sets per row for the (slower) bootstrap


def t_cover(samples: np.ndarray, truth: float) -> np.ndarray:
    """[reps] bool: the t interval on each row of samples [reps, n] covers truth."""
    n = samples.shape[1]
    mean = samples.mean(1)
    half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * samples.std(1, ddof=1) / np.sqrt(n)
    return (mean - half <= truth) & (truth <= mean + half)


def bootstrap_cover(samples: np.ndarray, truth: float, resamples: int,
                    rng: np.random.Generator) -> np.ndarray:
    """[reps] bool: the percentile bootstrap over the n prompts covers truth."""
    reps, n = samples.shape
    out = np.empty(reps, dtype=bool)
    tail = (1 - LEVEL) / 2
    for start in range(0, reps, 256):
        block = samples[start : start + 256]  # [b, n]
        picks = rng.integers(0, n, size=(block.shape[0], resamples, n))
        means = np.take_along_axis(block[:, None, :].repeat(resamples, 1), picks, 2).mean(2)
        low, high = np.quantile(means, [tail, 1 - tail], axis=1)
        out[start : start + 256] = (low <= truth) & (truth <= high)
    return out


def recorded_populations(min_prompts: int = 8) -> list[dict]:
    """Per-prompt paired differences (verifier - bv) per recorded run and cell."""
    sys.path.insert(0, str(ROOT.parent.parent))
    from speclp.experiments.bench import (
        CONFIG_KEYS,
        load_records,
        paired_records,
        record_cells,
    )

    groups: dict[str, list[dict]] = {}
    for r in paired_records(load_records(RESULTS)):
        groups.setdefault(json.dumps([r.get(k) for k in CONFIG_KEYS]), []).append(r)
    out = []
    for key, recs in groups.items():
        if len(recs) < min_prompts:
            continue
        config = dict(zip(CONFIG_KEYS, json.loads(key), strict=True))
        cells = [record_cells(r) for r in recs]
        steps = np.array([r["row_steps"] for r in recs], dtype=np.float64)
        for cell in sorted(set.intersection(*(set(c) for c in cells))):
            if config.get("score_grid") and not (cell[0] in (2, config["paths"])
                                                 and cell[1] in (1, 2, 4, config["depth"])):
                continue  # grid runs: K' in {2, K_max}, L' in {1, 2, 4, L_max}
            for name in sorted(cells[0][cell]):
                if name == "bv" or "bv" not in cells[0][cell]:
                    continue
                diff = np.array([c[cell][name] - c[cell]["bv"] for c in cells]) / steps
                if diff.std() == 0:
                    continue  # identically equal (e.g. K' = 1): nothing to cover
                out.append({"name": f"T={config['temperature']} K={cell[0]} L={cell[1]} "
                                    f"{name}-bv (max_new_tokens {config['max_new_tokens']})",
                            "values": diff, "steps": steps})
    return out


def skewed_sampler(mean: float, sd_between: float, sd_within: float):
    z = np.exp(0.75 * np.random.default_rng(0).standard_normal(1_000_000))
    centre, scale = z.mean(), z.std()

    def draw(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        effect = mean + sd_between * (np.exp(0.75 * rng.standard_normal((reps, n))) - centre) / scale
        steps = 2 + rng.poisson(3, size=(reps, n))
        return effect + sd_within * rng.standard_normal((reps, n)) / np.sqrt(steps)

    return draw, mean


def outlier_sampler(rare: float = 0.15, big: float = 1.5, sd: float = 0.1):
    def draw(rng: np.random.Generator, reps: int, n: int) -> np.ndarray:
        hit = rng.random((reps, n)) < rare
        return np.where(hit, big, 0.0) + sd * rng.standard_normal((reps, n))

    return draw, rare * big


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--counts", default=",".join(map(str, COUNTS)))
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    rng = np.random.default_rng(args.seed)
    started = time.time()
    rows = []
    populations = recorded_populations()
    pooled = np.concatenate([p["values"] - p["values"].mean() for p in populations]) \
        if populations else np.array([0.2, -0.1, 0.3])
    between = float(pooled.std(ddof=1))
    generative = {"skewed": skewed_sampler(0.2, between, 2 * between),
                  "outliers": outlier_sampler()}
    for n in counts:
        for pop in populations:
            values = pop["values"]
            samples = values[rng.integers(0, len(values), size=(args.reps, n))]
            rows.append(row("recorded", pop["name"], len(values), n, samples, values.mean(),
                            args.resamples, rng))
        for name, (draw, truth) in generative.items():
            rows.append(row(name, name, None, n, draw(rng, args.reps, n), truth, args.resamples,
                            rng))
        print(f"n = {n}: done ({time.time() - started:.0f} s)", flush=True)
    summary = summarise(rows, counts)
    out = {"reps": args.reps, "resamples": args.resamples, "seed": args.seed, "level": LEVEL,
           "counts": counts, "between_prompt_sd_of_recorded_differences": between,
           "summary": summary, "rows": rows, "seconds": time.time() - started}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "interval_coverage.json").write_text(json.dumps(out, indent=1))
    (RESULTS / "interval_coverage.md").write_text(markdown(out))
    print(markdown(out))


def row(kind: str, name: str, population: int | None, n: int, samples: np.ndarray, truth: float,
        resamples: int, rng: np.random.Generator) -> dict:
    reps = samples.shape[0]
    t = float(t_cover(samples, truth).mean())
    boot = float(bootstrap_cover(samples[: min(reps, BOOT_REPS)], truth, resamples, rng).mean())
    return {"kind": kind, "population": name, "population_prompts": population, "n": n,
            "t_coverage": t, "t_mc_se": float(np.sqrt(t * (1 - t) / reps)),
            "bootstrap_coverage": boot,
            "bootstrap_mc_se": float(np.sqrt(boot * (1 - boot) / min(reps, BOOT_REPS)))}


def summarise(rows: list[dict], counts: list[int]) -> list[dict]:
    out = []
    for n in counts:
        for kind in ("recorded", "skewed", "outliers"):
            mine = [r for r in rows if r["n"] == n and r["kind"] == kind]
            if not mine:
                continue
            out.append({"n": n, "kind": kind, "populations": len(mine),
                        "t_min": min(r["t_coverage"] for r in mine),
                        "t_median": float(np.median([r["t_coverage"] for r in mine])),
                        "bootstrap_min": min(r["bootstrap_coverage"] for r in mine),
                        "bootstrap_median": float(np.median([r["bootstrap_coverage"]
                                                             for r in mine]))})
    return out


def markdown(out: dict) -> str:
    lines = ["# Simulated coverage of nominal 95% intervals over prompts", "",
             f"{out['reps']} simulated data sets per row (bootstrap: at most {BOOT_REPS}, "
             f"{out['resamples']} resamples each); seed {out['seed']}. recorded = resampling the "
             "recorded per-prompt paired differences (each run/cell/verifier with >= 8 prompts "
             "is one population, min and median over them); skewed / outliers = generative "
             "models (benchmarks/interval_coverage.py docstring).", "",
             "| prompts n | population | populations | t interval: min | median | "
             "percentile bootstrap: min | median |", "|---|---|---|---|---|---|---|"]
    for s in out["summary"]:
        lines.append(f"| {s['n']} | {s['kind']} | {s['populations']} | {s['t_min']:.3f} | "
                     f"{s['t_median']:.3f} | {s['bootstrap_min']:.3f} | "
                     f"{s['bootstrap_median']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
