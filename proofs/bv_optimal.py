"""Claim: block verification is optimal for one draft path (docs/theory.md section 3.3).

For an instance: the K = 1 optimum of the engine (speclp.lp.optimum, column generation) =
the enumerated full information-agnostic LP optimum (method "full") = node-budget LP
optimum = closed-form node optimum = exact block efficiency of BV, and BV is lossless.
The three LP optima must be certified in exact rationals; the comparisons are exact (the
exact law of BV is computed on the instance's exact data), and the float64 law (the code
that runs in the engine) must agree within 1e-9 with TV <= 1e-12.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..deadline import Deadline
from ..lp import tolerances
from ..lp.engine import optimum, program_optimum
from ..lp.instance import Instance, dirichlet_instance
from ..lp.node import node_lp, node_optimum
from ..rationals import fraction_text
from ..verifiers.exact import exact_result
from .class_claims import ClaimSettings, stopped_record

FLOAT_TOLERANCE = tolerances.FLOAT_AGREEMENT
TV_TOLERANCE = tolerances.TOTAL_VARIATION
DEFAULTS = ClaimSettings(trials=200, vocab=3, depth=3, paths=1)  # `speclp check bv-optimal`


def check_instance(instance: Instance, verifier: str = "bv",
                   backend: str = DEFAULTS.backend) -> dict[str, Any]:
    """All numbers of the claim on one instance, plus `failures` (empty when it holds)."""
    exact_model = instance.model(exact=True)
    float_model = instance.model(exact=False)
    engine = optimum(instance, 1)
    full = optimum(instance, 1, method="full", backend=backend)
    node = program_optimum(node_lp(instance), backend, rational=instance.rational)
    _, closed_form = node_optimum(exact_model)
    law_exact = exact_result(exact_model, verifier)
    law_float = exact_result(float_model, verifier)
    failures: list[str] = []
    records = (("engine (column generation)", engine), ("full LP", full), ("node LP", node))
    for name, rec in records:
        if not rec.certified:
            failures.append(f"{name} optimum not certified ({rec.certificate})")
    exact_efficiency = Fraction(law_exact.block_efficiency)
    comparisons = {"closed-form node optimum": Fraction(closed_form)}
    for name, rec in records:
        if rec.exact_value is not None:
            comparisons[name] = rec.exact_value
    for name, value in comparisons.items():
        if value != exact_efficiency:
            failures.append(f"{name} optimum {float(value):.15g} != {verifier} block efficiency "
                            f"{float(exact_efficiency):.15g} (exact difference "
                            f"{float(value - exact_efficiency):.3g})")
    if law_exact.total_variation != 0:
        failures.append(f"{verifier} not lossless in exact arithmetic: TV {law_exact.total_variation:.3g}")
    if law_float.total_variation > TV_TOLERANCE:
        failures.append(f"{verifier} float64 law TV {law_float.total_variation:.3g} > {TV_TOLERANCE:g}")
    if abs(float(law_float.block_efficiency) - float(exact_efficiency)) > FLOAT_TOLERANCE:
        failures.append(f"{verifier} float64 block efficiency {float(law_float.block_efficiency):.15g} "
                        f"differs from exact {float(exact_efficiency):.15g} by more than {FLOAT_TOLERANCE:g}")
    return {
        "instance": instance.name,
        "rational": instance.rational,
        "optimum": engine.to_json(),
        "lp_full": full.to_json(),
        "lp_node": node.to_json(),
        "closed_form": str(closed_form) if instance.rational else float(closed_form),
        "block_efficiency": float(exact_efficiency),
        "exact_efficiency": fraction_text(exact_efficiency) if instance.rational else None,
        "tv_exact": float(law_exact.total_variation),
        "tv_float64": law_float.total_variation,
        "failures": failures,
    }


def check_bv_optimal(trials: int, vocab: int, depth: int, seed: int = DEFAULTS.seed,
                     alpha: float = DEFAULTS.alpha, denominator: int | None = None,
                     verifier: str = "bv", backend: str = DEFAULTS.backend,
                     save_dir: str | Path = DEFAULTS.save_dir,
                     progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
                     deadline: Deadline | None = None) -> dict[str, Any]:
    """Run the claim on `trials` random Dirichlet(alpha) instances (seeds seed..seed+trials-1).

    The first failing instance is saved as JSON under save_dir and returned in
    `counterexample`; `passed` is False then. deadline (None: none): checked before each
    trial; once it has passed, class_claims.stopped_record (nothing saved).
    """
    seeds: Iterable[int] = range(seed, seed + trials)
    if progress is not None:
        seeds = progress(seeds)
    worst_gap = 0.0
    worst_tv = 0.0
    certified = 0
    for s in seeds:
        if deadline is not None and deadline.passed:
            return stopped_record("bv-optimal", trials, s - seed, deadline.reason, vocab=vocab,
                                  depth=depth, seed=seed, verifier=verifier, certified=certified)
        inst = dirichlet_instance(vocab, depth, alpha=alpha, seed=s, denominator=denominator)
        result = check_instance(inst, verifier=verifier, backend=backend)
        certified += (result["optimum"]["certified"] and result["lp_full"]["certified"]
                      and result["lp_node"]["certified"])
        worst_gap = max(worst_gap, abs(result["lp_full"]["value"] - result["block_efficiency"]))
        worst_tv = max(worst_tv, result["tv_float64"])
        if result["failures"]:
            path = inst.save(Path(save_dir) / f"bv-optimal-{verifier}-{inst.name}.json")
            return {"claim": "bv-optimal", "passed": False, "trials_run": s - seed + 1,
                    "verifier": verifier, "counterexample": result, "saved": str(path),
                    "instance_json": inst.to_json()}
    return {"claim": "bv-optimal", "passed": True, "trials": trials, "vocab": vocab, "depth": depth,
            "seed": seed, "alpha": alpha, "rational": bool(denominator), "verifier": verifier,
            "certified": certified, "max_float_gap_lp_vs_bv": worst_gap, "max_tv_float64": worst_tv}
