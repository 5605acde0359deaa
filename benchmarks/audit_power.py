"""Power and false-alarm rate of the sampler audit (issue 18).

    nice -n 15 python benchmarks/audit_power.py --out benchmarks/results/audit --budget 2400

Detection: every deliberately broken sampler is audited on one fixed instance (its exact TV,
where an exact law exists, from speclp.verifiers.exact) with the audit's defaults (family-wise
level 1e-3, 60 s time limit, at most 10^6 runs), once per seed (the seed changes the draws,
not the instance); the detection rate is the fraction of seeds that fail the audit.
False alarms: every registered lossless verifier's sampler (examples/law_samplers.py) is
audited on 2 instances of the mixed family per seed, at most 20,000 runs each (the level
holds at every stopping time, so a short audit is a valid check of it, with less power to
reveal a violation than a long one); the false-alarm rate is the fraction of seeds that fail.

Seeds are interleaved (seed 0 of every sampler, then seed 1, ...) and the results are saved
after every audit (audit_power.json, audit_power.md), so a run stopped by --budget (seconds)
keeps a table over the seeds it finished; a rerun resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import broken_samplers  # noqa: E402
import law_samplers  # noqa: E402
import ragged_sampler  # noqa: E402
from speclp.proofs.audit import audit_instance, audit_sampler  # noqa: E402
from speclp.verifiers.exact import exact_result  # noqa: E402
from speclp.verifiers.registry import verifier_names  # noqa: E402

# name -> (sampler, layout, paths, instance, exact law for the TV or None)
BROKEN = {
    "gbv_first_child_on_ties": (broken_samplers.gbv_first_child_on_ties, "unbatched", 2,
                                ("ties", 2), None),
    "traversal_path_order": (broken_samplers.traversal_path_order, "unbatched", 3,
                             ("ties", 2), None),
    "spectr_gbv (law)": (law_samplers.sampler_for("spectr_gbv"), "batched", 2, ("dirichlet", 2),
                         "spectr_gbv"),
    "residual_at_drafted_only": (broken_samplers.residual_at_drafted_only, "batched", 2,
                                 ("dirichlet", 2),
                                 broken_samplers.public_bug_law("residual_at_drafted_only")),
    "bonus_wrong_slice": (broken_samplers.bonus_wrong_slice, "batched", 2, ("dirichlet", 2),
                          broken_samplers.public_bug_law("bonus_wrong_slice")),
    "low_precision_ratio": (broken_samplers.low_precision_ratio, "batched", 2, ("dirichlet", 0),
                            broken_samplers.public_bug_law("low_precision_ratio")),
    "ragged fp8 ratio": (ragged_sampler.rejection_sample_fp8_ratio, "ragged", 1,
                         ("dirichlet", 0), None),
}


def _instance(spec):
    family, trial = spec
    return audit_instance(3, 2, trial, family=family, seed=0)


def _exact_tv(name: str) -> float | None:
    _, _, paths, spec, law = BROKEN[name]
    if law is None:
        return None
    return float(exact_result(_instance(spec).model(), law, paths=paths).total_variation)


def detect(name: str, seed: int) -> dict:
    sampler, layout, paths, spec, _ = BROKEN[name]
    start = time.perf_counter()
    report = audit_sampler(sampler, paths=paths, instances=[_instance(spec)], seed=seed,
                           layout=layout, time_limit=60.0, name=name)
    inst = report["instances"][0]
    return {"kind": "detect", "sampler": name, "seed": seed, "detected": not report["passed"],
            "runs": inst["runs"], "seconds": round(time.perf_counter() - start, 2)}


def false_alarm(name: str, seed: int) -> dict:
    start = time.perf_counter()
    report = audit_sampler(law_samplers.sampler_for(name), trials=2, runs=20_000, seed=seed,
                           family="mixed", name=name)
    return {"kind": "false_alarm", "sampler": name, "seed": seed, "alarm": not report["passed"],
            "failures": report["failures"], "seconds": round(time.perf_counter() - start, 2)}


def table(records: list[dict], tvs: dict) -> str:
    lines = ["# Sampler audit: detection and false alarms", "",
             "Family-wise level 1e-3 (every test of an audit). Detection: default settings "
             "(60 s time limit, at most 10^6 runs), one fixed instance per broken sampler, seeds "
             "vary the draws. False alarms: 2 mixed-family instances, at most 20,000 runs each.",
             "", "| broken sampler | exact TV | seeds | detected | rate | median runs | "
             "max seconds |", "|---|---|---|---|---|---|---|"]
    for name in BROKEN:
        rows = [r for r in records if r["kind"] == "detect" and r["sampler"] == name]
        if not rows:
            continue
        hits = sum(r["detected"] for r in rows)
        tv = tvs.get(name)
        lines.append(f"| {name} | {'n/a (no exact law)' if tv is None else f'{tv:.4f}'} | "
                     f"{len(rows)} | {hits} | {hits / len(rows):.3f} | "
                     f"{int(np.median([r['runs'] for r in rows])):,} | "
                     f"{max(r['seconds'] for r in rows):.1f} |")
    lines += ["", "| lossless sampler | seeds | false alarms | rate |", "|---|---|---|---|"]
    for name in verifier_names():
        rows = [r for r in records if r["kind"] == "false_alarm" and r["sampler"] == name]
        if rows:
            alarms = sum(r["alarm"] for r in rows)
            lines.append(f"| {name} | {len(rows)} | {alarms} | {alarms / len(rows):.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="benchmarks/results/audit")
    parser.add_argument("--detect-seeds", type=int, default=100)
    parser.add_argument("--alarm-seeds", type=int, default=200)
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds; no new audit after")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "audit_power.json"
    data = json.loads(path.read_text()) if path.exists() else {"records": []}
    data["exact_tv"] = {name: _exact_tv(name) for name in BROKEN}
    done = {(r["kind"], r["sampler"], r["seed"]) for r in data["records"]}
    start = time.perf_counter()
    for seed in range(max(args.detect_seeds, args.alarm_seeds)):
        jobs = ([("detect", n) for n in BROKEN] if seed < args.detect_seeds else []) + \
               ([("false_alarm", n) for n in verifier_names()] if seed < args.alarm_seeds else [])
        for kind, name in jobs:
            if (kind, name, seed) in done:
                continue
            if time.perf_counter() - start > args.budget:
                print("budget spent; partial results saved", flush=True)
                return
            record = detect(name, seed) if kind == "detect" else false_alarm(name, seed)
            data["records"].append(record)
            path.write_text(json.dumps(data, indent=1))
            (out / "audit_power.md").write_text(table(data["records"], data["exact_tv"]))
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
