"""Optimality gaps of multi-path verifiers (THEORY.md section 4).

For one instance and K draft paths:
    optimum        the K-path information-agnostic optimum (every prefix-matching verifier
                   that sees the K drafts) from THE entry point speclp.lp.optimum: column
                   generation by default, the enumerated full LP with method="full";
                   certified in exact rationals unless certify=False (then labelled so);
    class_optimum  the optimum of the selection class ("select one path, then BV"). By the
                   theorem of speclp.lp.colgen (class LP = full LP = selection master) it
                   IS the optimum: it is reported from the same solve, and says so. (The
                   class LP is computed independently, by cutting planes, only where it is
                   the object of study: `speclp check class-equals-full` / `node-form`.)
    verifiers      exact block efficiency E[tau + 1] (tokens per target call) and total
                   variation to the target law of every registered verifier among
                   DEFAULT_VERIFIERS, with gap = optimum - BE and ratio = BE / optimum.

Claims checked (a violation is reported in ``failures``, never dropped):
    * every verifier's BE <= optimum + tolerance, tolerance 1e-9 when the optimum is
      certified and 1e-7 otherwise (direct HiGHS solves are accurate to about 1e-10,
      THEORY.md section 6);
    * every verifier is lossless: TV(float64 law continued by target sampling, target)
      <= 1e-12 (verifiers designed for i.i.d. drafts are reported, not held to the
      claims, under drafting without replacement).
Verifier laws are computed in float64 on the float rows (the engine's code path).
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

from ..lp import tolerances
from ..lp.engine import BACKENDS, DEFAULT_TIME_LIMIT, METHODS, optimum
from ..lp.instance import Instance
from ..verifiers.drafts import DRAFT_SAMPLING
from ..verifiers.exact import enumeration_size, exact_result, sampled_result
from ..verifiers.registry import get_verifier, verifier_names
from ..verifiers.tree import ESTIMATE_SAMPLES, MAX_TUPLES

DEFAULT_VERIFIERS: tuple[str, ...] = (
    "token", "bv", "gbv", "gbv_clipped", "specinfer", "rrsw", "naive_tree", "khisti", "spectr",
    "spectr_gbv", "nss", "traversal",
)
CERTIFIED_TOLERANCE = tolerances.CERTIFIED
UNCERTIFIED_TOLERANCE = tolerances.UNCERTIFIED
TV_TOLERANCE = tolerances.TOTAL_VARIATION
EXACT_CONFIGURATIONS = 5_000  # rational instances up to this many ordered draft tuples also
# get every verifier's block efficiency in exact rationals ("exact")
MAX_ENUMERATED = MAX_TUPLES  # configurations one verifier's exact law may enumerate; above
# it the block efficiency is ESTIMATED from sampled configurations (labelled "estimate")
SAMPLES = ESTIMATE_SAMPLES  # sampled draft configurations per estimated verifier
ESTIMATE_CLAIM_Z = 5.0  # an estimate fails "BE <= optimum" only when mean - 5 SE > optimum + tol


class OptimumNotFound(RuntimeError):
    """The K-path optimum was not found (time limit, solver failure): gap cannot check its
    claims. The message is one line; the record is in .record."""

    def __init__(self, message: str, record: dict[str, Any]):
        super().__init__(message)
        self.record = record


def available_verifiers(requested: tuple[str, ...] | list[str] | None = None
                        ) -> tuple[list[str], list[str]]:
    """(registered, missing) among `requested` (default DEFAULT_VERIFIERS), in order.

    A deliberately broken verifier (kept for audits) counts as registered when it is
    requested by name.
    """
    wanted = list(DEFAULT_VERIFIERS if requested is None else requested)
    registered = set(verifier_names(include_broken=True))
    return [n for n in wanted if n in registered], [n for n in wanted if n not in registered]


CLASS_SOURCE = ("equal to the K-path optimum by the theorem class LP = full LP = selection "
                "master (speclp.lp.colgen); reported from the same solve, not computed apart")


def gap(instance: Instance, paths: int, draft_sampling: str = "iid", backend: str = "highs",
        verifiers: list[str] | tuple[str, ...] | None = None, certify: bool = True,
        method: str = "auto", time_limit: float | None = DEFAULT_TIME_LIMIT,
        max_enumerated: int = MAX_ENUMERATED, samples: int = SAMPLES, seed: int = 0
        ) -> dict[str, Any]:
    """Optimum and every verifier's exact block efficiency on one instance.

    Returns a dict with keys
        instance       {name, vocab_size, depth, rational}
        paths, draft_sampling, backend, method
        optimum        the optimum record as JSON (speclp.lp.engine.Optimum.to_json: value,
                       exact, certified, certificate, status, method, seconds, size, notes,
                       ...), plus exact_value (Fraction or None; dropped by the CLI)
        class_optimum  {value, exact, certified, source}: the same number (CLASS_SOURCE)
        verifiers      {name: {block_efficiency, exact (fraction string on rational instances
                       of at most EXACT_CONFIGURATIONS ordered draft tuples, else None), gap,
                       ratio, tv, lossless_claimed, estimate, seconds}}; estimate is None for
                       an exact law, else {samples, seed, standard_error, ci_low, ci_high}:
                       the verifier's law would enumerate more than max_enumerated
                       configurations, so block_efficiency is the mean over `samples`
                       sampled draft configurations of the exact conditional law
                       (speclp.verifiers.exact.sampled_result), with its 95% confidence
                       interval; tv is None (not checked) and the claim BE <= optimum fails
                       only when mean - ESTIMATE_CLAIM_Z standard errors > optimum + tolerance
        missing        requested verifiers that are not registered
        tolerance      the tolerance used for BE <= optimum
        failures       list of violated claims (empty when every claim holds)
        seconds        wall time of the whole computation
    Raises ValueError for bad arguments (unknown draft sampling or method, K too large for
    drafting without replacement, an enumerated LP over the builder's size limit), and
    OptimumNotFound (one line) when the optimum is not found, e.g. time_limit (seconds) hit.
    """
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {', '.join(DRAFT_SAMPLING)}, "
                         f"got {draft_sampling!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    start = time.perf_counter()
    names, missing = available_verifiers(verifiers)
    record = optimum(instance, paths, draft_sampling, method=method, certify=certify,
                     backend=backend, time_limit=time_limit)
    if record.value is None:
        bound = record.details.get("lower_bound")
        raise OptimumNotFound(
            f"K-path optimum of {instance.name} (K={paths}) not found: {record.status} "
            f"({record.certificate})" + (f"; lower bound {bound:.12g}" if bound is not None
                                          else ""), record.to_json())
    value = record.value
    tolerance = CERTIFIED_TOLERANCE if record.certified else UNCERTIFIED_TOLERANCE
    model = instance.model(exact=False)
    failures: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        t0 = time.perf_counter()
        spec = get_verifier(name)
        if enumeration_size(model, name, paths, draft_sampling) > max_enumerated:
            estimate = sampled_result(model, name, paths=paths, draft_sampling=draft_sampling,
                                      samples=samples, seed=seed)
            block_efficiency = estimate.block_efficiency
            claimed = draft_sampling in spec.draft_sampling
            results[name] = {
                "block_efficiency": block_efficiency, "exact": None,
                "gap": value - block_efficiency, "exact_gap": None,
                "ratio": block_efficiency / value, "tv": None, "lossless_claimed": claimed,
                "estimate": {"samples": estimate.samples, "seed": estimate.seed,
                             "standard_error": estimate.standard_error,
                             "ci_low": estimate.ci_low, "ci_high": estimate.ci_high},
                "seconds": round(time.perf_counter() - t0, 6),
            }
            margin = ESTIMATE_CLAIM_Z * estimate.standard_error
            if claimed and block_efficiency - margin > value + tolerance:
                failures.append(
                    f"{name}: ESTIMATED block efficiency {block_efficiency:.15g} (standard error "
                    f"{estimate.standard_error:.3g}, {samples} sampled configurations) exceeds "
                    f"the {'certified' if record.certified else 'NOT certified'} optimum "
                    f"{value:.15g} by more than {ESTIMATE_CLAIM_Z:g} standard errors")
            continue
        law = exact_result(model, name, paths=paths, draft_sampling=draft_sampling)
        block_efficiency = float(law.block_efficiency)
        # a verifier designed for i.i.d. drafts is reported, not held to the claims, under
        # drafting without replacement (where it is lossy: GBV, SpecTr, SpecInfer); a
        # deliberately broken verifier requested by name is held to them (and fails)
        claimed = draft_sampling in spec.draft_sampling
        exact_be = None
        if instance.rational and (instance.vocab_size ** instance.depth) ** paths <= EXACT_CONFIGURATIONS:
            exact_be = Fraction(exact_result(instance.model(exact=True), name, paths=paths,
                                             draft_sampling=draft_sampling).block_efficiency)
        exact_gap = (record.exact_value - exact_be
                     if exact_be is not None and record.exact_value is not None else None)
        results[name] = {
            "block_efficiency": block_efficiency,
            "exact": None if exact_be is None else str(exact_be),
            "gap": float(exact_gap) if exact_gap is not None else value - block_efficiency,
            "exact_gap": None if exact_gap is None else str(exact_gap),
            "ratio": block_efficiency / value,
            "tv": float(law.total_variation),
            "lossless_claimed": claimed,
            "estimate": None,
            "seconds": round(time.perf_counter() - t0, 6),
        }
        if not claimed:
            continue
        if exact_gap is not None and exact_gap < 0:
            failures.append(
                f"{name}: exact block efficiency {exact_be} exceeds the "
                f"{'certified' if record.certified else 'NOT certified'} exact optimum "
                f"{record.exact_value} by {-exact_gap}")
        elif exact_gap is None and block_efficiency > value + tolerance:
            failures.append(
                f"{name}: block efficiency {block_efficiency:.15g} exceeds the "
                f"{'certified' if record.certified else 'NOT certified'} optimum {value:.15g} "
                f"by {block_efficiency - value:.3g} (tolerance {tolerance:g})")
        if law.total_variation > TV_TOLERANCE:
            failures.append(f"{name}: lossy, TV {law.total_variation:.3g} > {TV_TOLERANCE:g}")
    return {
        "instance": {"name": instance.name, "vocab_size": instance.vocab_size,
                     "depth": instance.depth, "rational": instance.rational},
        "paths": paths,
        "draft_sampling": draft_sampling,
        "backend": backend,
        "method": record.method,
        "optimum": {**record.to_json(), "exact_value": record.exact_value},
        "class_optimum": {"value": record.value, "exact": record.exact,
                          "certified": record.certified, "source": CLASS_SOURCE},
        "verifiers": results,
        "missing": missing,
        "tolerance": tolerance,
        "failures": failures,
        "seconds": round(time.perf_counter() - start, 6),
    }
