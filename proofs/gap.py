"""Optimality gaps of multi-path verifiers (THEORY.md section 4).

For one instance and K draft paths:
    optimum        the full K-path information-agnostic LP (every prefix-matching
                   verifier that sees the K drafts), solved and, on request, certified
                   in exact rationals (speclp.lp.report.optimum_record; a float basis
                   that is optimal only within tolerances is refined first);
    class_optimum  the "select one path, then BV" class LP (speclp.lp.selection), when
                   that module is present;
    verifiers      exact block efficiency E[tau + 1] (tokens per target call) and total
                   variation to the target law of every registered verifier among
                   DEFAULT_VERIFIERS, with gap = optimum - BE and ratio = BE / optimum.

Claims checked (a violation is reported in ``failures``, never dropped):
    * every verifier's BE <= optimum + tolerance, tolerance 1e-9 when the optimum is
      certified and 1e-7 otherwise (direct HiGHS solves are accurate to about 1e-10,
      THEORY.md section 6);
    * every verifier is lossless: TV(float64 law continued by target sampling, target)
      <= 1e-12;
    * the class optimum is <= the full optimum + tolerance (the class is a subset of
      all verifiers), and BV and GBV (both "select one path, then BV" rules) are <= the
      class optimum + tolerance.
Verifier laws are computed in float64 on the float rows (the engine's code path).
"""

from __future__ import annotations

import time
from typing import Any

from ..lp.builders import DRAFT_SAMPLING, full_lp
from ..lp.instance import Instance
from ..lp.report import optimum_record
from ..verifiers.exact import exact_result
from ..verifiers.law import get_verifier, verifier_names

DEFAULT_VERIFIERS: tuple[str, ...] = (
    "token", "bv", "gbv", "gbv_clipped", "specinfer", "rrsw", "naive_tree", "khisti", "spectr",
    "spectr_gbv", "nss", "traversal",
)
SELECTION_CLASS_VERIFIERS = ("bv", "gbv")  # members of the "select, then BV" class
BACKENDS = ("highs", "cvxpy")
CERTIFIED_TOLERANCE = 1e-9
UNCERTIFIED_TOLERANCE = 1e-7
TV_TOLERANCE = 1e-12
EXACT_CONFIGURATIONS = 5_000  # rational instances up to this many ordered draft tuples also
# get every verifier's block efficiency in exact rationals ("exact")


def available_verifiers(requested: tuple[str, ...] | list[str] | None = None
                        ) -> tuple[list[str], list[str]]:
    """(registered, missing) among `requested` (default DEFAULT_VERIFIERS), in order.

    A deliberately broken verifier (kept for audits) counts as registered when it is
    requested by name.
    """
    wanted = list(DEFAULT_VERIFIERS if requested is None else requested)
    registered = set(verifier_names(include_broken=True))
    return [n for n in wanted if n in registered], [n for n in wanted if n not in registered]


def class_optimum_record(instance: Instance, paths: int, draft_sampling: str = "iid",
                         backend: str = "highs", method: str = "auto") -> dict[str, Any]:
    """Optimum of the selection-class LP (speclp.lp.selection.class_lp_optimum).

    Keys: available (True), value, exact, exact_value, certified, certificate, method, cuts,
    rounds, seconds, min_subset_slack, notes (speclp.lp.selection.class_lp_optimum without
    its per-path law r). method: "auto" | "enumerate" | "cuts" (cutting planes are much
    faster from about 16 paths on; both are certified).
    """
    from ..lp.selection import class_lp_optimum

    start = time.perf_counter()
    record = dict(class_lp_optimum(instance, paths, draft_sampling=draft_sampling,
                                   backend=backend, method=method))
    for bulky in ("r", "r_exact", "size", "instance"):
        record.pop(bulky, None)
    record.setdefault("seconds", round(time.perf_counter() - start, 6))
    record["available"] = True
    return record


def gap(instance: Instance, paths: int, draft_sampling: str = "iid", backend: str = "highs",
        verifiers: list[str] | tuple[str, ...] | None = None, certify: bool = True,
        class_optimum: bool = True, class_method: str = "auto") -> dict[str, Any]:
    """Optimum, class optimum and every verifier's exact block efficiency on one instance.

    Returns a dict with keys
        instance       {name, vocab_size, depth, rational}
        paths, draft_sampling, backend
        optimum        optimum_record of the full K-path LP (value, exact, exact_value,
                       certified, certificate, status, seconds, size, ...)
        class_optimum  class_optimum_record(...) or {"available": False, "reason": ...}
        verifiers      {name: {block_efficiency, exact (fraction string on rational instances
                       of at most EXACT_CONFIGURATIONS ordered draft tuples, else None), gap,
                       ratio, tv, lossless_claimed, seconds}}
        missing        requested verifiers that are not registered
        tolerance      the tolerance used for BE <= optimum
        failures       list of violated claims (empty when every claim holds)
        seconds        wall time of the whole computation
    Raises ValueError for bad arguments (unknown draft sampling, K too large for drafting
    without replacement, an LP over the builder's size limit).
    """
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling must be one of {', '.join(DRAFT_SAMPLING)}, "
                         f"got {draft_sampling!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if paths < 1:
        raise ValueError(f"paths must be >= 1, got {paths}")
    start = time.perf_counter()
    names, missing = available_verifiers(verifiers)
    # The exact table is only needed for the certificate; a float build is much cheaper.
    lp = full_lp(instance, paths=paths, draft_sampling=draft_sampling, exact=certify)
    optimum = optimum_record(lp, backend, want_certificate=certify, rational=instance.rational)
    if optimum["value"] is None or optimum["status"] != "optimal":
        raise RuntimeError(f"full LP of {instance.name} (K={paths}) not solved: "
                           f"{optimum['status']}")
    if optimum["exact_value"] is not None:  # certified: compare with the exact optimum
        optimum["value"] = float(optimum["exact_value"])
    value = optimum["value"]
    tolerance = CERTIFIED_TOLERANCE if optimum["certified"] else UNCERTIFIED_TOLERANCE
    klass = (class_optimum_record(instance, paths, draft_sampling, backend, class_method)
             if class_optimum
             else {"available": False, "value": None, "certified": False,
                   "reason": "not requested"})

    model = instance.model(exact=False)
    failures: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        t0 = time.perf_counter()
        spec = get_verifier(name)
        law = exact_result(model, name, paths=paths, draft_sampling=draft_sampling)
        be = float(law.block_efficiency)
        # a verifier designed for i.i.d. drafts is reported, not held to the claims, under
        # drafting without replacement (where it is lossy: GBV, SpecTr, SpecInfer); a
        # deliberately broken verifier requested by name is held to them (and fails)
        claimed = draft_sampling in spec.draft_sampling
        exact_be = None
        if instance.rational and (instance.vocab_size ** instance.depth) ** paths <= EXACT_CONFIGURATIONS:
            exact_be = str(exact_result(instance.model(exact=True), name, paths=paths,
                                        draft_sampling=draft_sampling).block_efficiency)
        results[name] = {
            "block_efficiency": be,
            "exact": exact_be,
            "gap": value - be,
            "ratio": be / value,
            "tv": float(law.total_variation),
            "lossless_claimed": claimed,
            "seconds": round(time.perf_counter() - t0, 6),
        }
        if not claimed:
            continue
        if be > value + tolerance:
            failures.append(
                f"{name}: block efficiency {be:.15g} exceeds the "
                f"{'certified' if optimum['certified'] else 'NOT certified'} optimum {value:.15g} "
                f"by {be - value:.3g} (tolerance {tolerance:g})")
        if law.total_variation > TV_TOLERANCE:
            failures.append(f"{name}: lossy, TV {law.total_variation:.3g} > {TV_TOLERANCE:g}")
    if klass.get("available") and klass.get("value") is not None:
        class_value = float(klass["value"])
        if class_value > value + tolerance:
            failures.append(f"class optimum {class_value:.15g} exceeds the full optimum "
                            f"{value:.15g} (tolerance {tolerance:g})")
        # BV (r = q) and GBV (a greedy vertex of P_K) are "select one path, then BV" rules.
        class_tolerance = (CERTIFIED_TOLERANCE if klass.get("certified")
                           else UNCERTIFIED_TOLERANCE)
        for name in SELECTION_CLASS_VERIFIERS:
            be = results[name]["block_efficiency"] if name in results else None
            if be is not None and be > class_value + class_tolerance:
                failures.append(
                    f"{name}: block efficiency {be:.15g} exceeds "
                    f"the class optimum {class_value:.15g} (tolerance {class_tolerance:g})")
    return {
        "instance": {"name": instance.name, "vocab_size": instance.vocab_size,
                     "depth": instance.depth, "rational": instance.rational},
        "paths": paths,
        "draft_sampling": draft_sampling,
        "backend": backend,
        "optimum": optimum,
        "class_optimum": klass,
        "verifiers": results,
        "missing": missing,
        "tolerance": tolerance,
        "failures": failures,
        "seconds": round(time.perf_counter() - start, 6),
    }
