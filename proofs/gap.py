"""Optimality gaps of multi-path verifiers (docs/theory.md sections 4.1, 5.5, 6).

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
                   variation to the target law of every verifier the registry compares by
                   default (verifiers.registry.compared_verifiers: every lossless one,
                   nodeopt included, and those registered as not claimed lossless, e.g.
                   spectr_gbv) or of the requested ones, with gap = optimum - BE and
                   ratio = BE / optimum. Exact laws come from verifiers.exact.exact_result:
                   the structure of i.i.d. drafting where the verifier admits it
                   (verifiers.structure), else the enumeration.

Claims checked (a violation is reported in ``failures``, never dropped):
    * every verifier's BE <= optimum + tolerance, tolerance 1e-9 when the optimum is
      certified (1e-9 + w when certified within w by exact bounds) and 1e-7 otherwise
      (direct HiGHS solves are accurate to about 1e-10, docs/theory.md section 16.2);
    * every verifier is lossless: TV(law continued by target sampling, target) exactly 0
      when the law is computed in rationals, else TV(float64 law) <= 1e-12 (verifiers
      designed for i.i.d. drafts are reported, not held to the claims, under drafting
      without replacement; those registered as not claimed lossless are reported only).
Verifier laws are computed in float64 on the float rows (the engine's code path), and also
in exact rationals on rational instances whose exact law is small (EXACT_WORK).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .. import inputs
from ..inputs import BadArgument
from ..lp import tolerances
from ..lp.engine import BACKENDS, DEFAULT_TIME_LIMIT, METHODS, Optimum, optimum
from ..lp.instance import Instance
from ..rationals import fraction_text
from ..verifiers.drafts import DRAFT_SAMPLING
from ..verifiers.exact import enumeration_size, exact_result, sampled_result
from ..verifiers.registry import (
    claimed_lossless,
    compared_verifiers,
    get_verifier,
    unknown_verifiers,
    verifier_names,
)
from ..verifiers.structure import evaluation_kind
from ..verifiers.tree import ESTIMATE_SAMPLES, MAX_TUPLES

CERTIFIED_TOLERANCE = tolerances.CERTIFIED
UNCERTIFIED_TOLERANCE = tolerances.UNCERTIFIED
TV_TOLERANCE = tolerances.TOTAL_VARIATION
EXACT_WORK = 5_000  # rational instances whose exact law costs at most this many node-rule
# evaluations, paths or configurations (verifiers.exact.enumeration_size) also get every
# verifier's block efficiency and TV in exact rationals ("exact", "tv_exact")
MAX_ENUMERATED = MAX_TUPLES  # configurations one verifier's exact law may ENUMERATE; above it
# the block efficiency is ESTIMATED from sampled configurations (labelled "estimate")
MAX_STRUCTURED = 50_000_000  # node-rule evaluations (or paths) of a structure-aware exact law
# (verifiers.structure; about 1e6 per second in float64) above which it is estimated too
ENUMERATED_KINDS = ("ordered", "multisets", "single path")  # ExactResult.enumeration by enumeration
SAMPLES = ESTIMATE_SAMPLES  # sampled draft configurations per estimated verifier
MAX_SAMPLES = 10_000_000  # the most sampled draft configurations a gap spec may ask for
MAX_GAP_PATHS = 32  # paths K of a gap spec: every verifier's law holds [configurations, K, L+1, V] rows
GAP_METHODS = tuple(m for m in METHODS if m != "closed-form")  # a gap spec's engines (auto picks
# the closed form where it applies)
ESTIMATE_CLAIM_Z = 5.0  # an estimate fails "BE <= optimum" only when mean - 5 SE > optimum + tol


class OptimumNotFound(RuntimeError):
    """The K-path optimum was not found (time limit, solver failure): gap cannot check its
    claims. The message is one line; the record is in .record."""

    def __init__(self, message: str, record: dict[str, Any]):
        super().__init__(message)
        self.record = record


# the default comparison, computed from the registry (no list of names to edit anywhere)
DEFAULT_VERIFIERS: tuple[str, ...] = tuple(compared_verifiers())


class UnknownVerifier(BadArgument):
    """A requested verifier name is not registered (field "verifiers"; the reason names it)."""

    def __init__(self, reason: str):
        super().__init__("verifiers", reason)


def available_verifiers(requested: tuple[str, ...] | list[str] | None = None) -> list[str]:
    """The verifiers to compare, in order: `requested`, or by default every verifier of
    verifiers.registry.compared_verifiers (every lossless one, nodeopt included, and the
    published rules registered as not claimed lossless, e.g. spectr_gbv; a deliberately
    broken variant only when requested by name). Raises BadArgument("verifiers") for an empty
    list, and UnknownVerifier naming the first requested name that is not registered."""
    if requested is None:
        return compared_verifiers()
    if not requested:
        raise BadArgument("verifiers", "give at least one verifier name")
    unknown = unknown_verifiers(list(requested))
    if unknown:
        raise UnknownVerifier(f"unknown verifier {unknown[0]!r}; known: "
                              f"{', '.join(verifier_names(include_broken=True))}")
    return list(dict.fromkeys(requested))


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
                       whose exact law costs at most EXACT_WORK, else None), gap, exact_gap,
                       ratio, tv, tv_exact (fraction string where exact), tv_kind ("exact",
                       "float64" or None), lossless_claimed, evaluation (how the exact law was
                       computed: "node recursion", "selection law", "sibling recursion" (traversal),
                       "first-visit recursion" (spectr_gbv), "single path", "ordered",
                       "multisets", or "estimate"), estimate, undefined, seconds}};
                       undefined is None unless the rule as published is undefined on some
                       configurations (spectr_gbv: an all-zero correction row), then
                       {count, unit, mass, mass_exact} (count configurations where the law is
                       enumerated, nodes where it stops with an all-zero row where it is
                       computed by structure; mass: the probability of an undefined step)
                       and block_efficiency, exact, gap,
                       exact_gap and ratio are None (a law of mass < 1 has no block
                       efficiency); estimate is None for
                       an exact law, else {samples, seed, standard_error, ci_low, ci_high}:
                       the verifier's exact law would enumerate more than max_enumerated
                       configurations (or, by structure, take more than MAX_STRUCTURED
                       evaluations; verifiers.exact.enumeration_size), so block_efficiency is
                       the mean over `samples`
                       sampled draft configurations of the exact conditional law
                       (speclp.verifiers.exact.sampled_result), with its 95% confidence
                       interval; tv is None (not checked) and the claim BE <= optimum fails
                       only when mean - ESTIMATE_CLAIM_Z standard errors > optimum + tolerance
        tolerance      the tolerance used for BE <= optimum
        failures       list of violated claims (empty when every claim holds)
        seconds        wall time of the whole computation
    Raises UnknownVerifier (a ValueError naming it) for a requested verifier that is not
    registered, ValueError for bad arguments (unknown draft sampling or method, K too large for
    drafting without replacement, an enumerated LP over the builder's size limit), and
    OptimumNotFound (one line) when the optimum is not found, e.g. time_limit (seconds) hit.
    """
    return _gap(instance, paths, draft_sampling, backend, verifiers, certify, method, time_limit,
                max_enumerated, samples, seed)[1]


def _gap(instance: Instance, paths: int, draft_sampling: str, backend: str,
         verifiers: list[str] | tuple[str, ...] | None, certify: bool, method: str,
         time_limit: float | None, max_enumerated: int, samples: int, seed: int
         ) -> tuple[Optimum, dict[str, Any]]:
    """gap(): the optimum record (typed) and gap()'s dict."""
    inputs.choice("draft_sampling", draft_sampling, DRAFT_SAMPLING)
    inputs.choice("backend", backend, BACKENDS)
    inputs.choice("method", method, METHODS)
    if paths < 1:
        raise BadArgument("paths", f"must be >= 1, got {paths}")
    start = time.perf_counter()
    names = available_verifiers(verifiers)
    record = optimum(instance, paths, draft_sampling, method=method, certify=certify,
                     backend=backend, time_limit=time_limit)
    if record.value is None:
        bound = record.details.get("lower_bound")
        raise OptimumNotFound(
            f"K-path optimum of {instance.name} (K={paths}) not found: {record.status} "
            f"({record.certificate})" + (f"; lower bound {bound:.12g}" if bound is not None
                                          else ""), record.to_json())
    within = record.certified_within  # certified within w by exact bounds (not exactly)
    tolerance = (CERTIFIED_TOLERANCE if record.certified else
                 CERTIFIED_TOLERANCE + within if within is not None else UNCERTIFIED_TOLERANCE)
    failures: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        t0 = time.perf_counter()
        results[name], problems = _compare(instance, name, paths, draft_sampling, record,
                                           tolerance, max_enumerated, samples, seed)
        results[name]["seconds"] = round(time.perf_counter() - t0, 6)
        failures += problems
    return record, {
        "instance": {"name": instance.name, "vocab_size": instance.vocab_size,
                     "depth": instance.depth, "rational": instance.rational},
        "paths": paths,
        "draft_sampling": draft_sampling,
        "backend": backend,
        "method": record.method,
        "optimum": {**record.to_json(), "exact_value": record.exact_value},
        "class_optimum": class_optimum(record),
        "verifiers": results,
        "tolerance": tolerance,
        "failures": failures,
        "seconds": round(time.perf_counter() - start, 6),
    }


def class_optimum(record: Optimum) -> dict[str, Any]:
    """The selection-class optimum of a gap: the K-path optimum's own numbers (CLASS_SOURCE:
    by the theorem class LP = full LP = selection master, the same solve; not a record of
    its own)."""
    return {"value": record.value, "exact": record.exact, "certified": record.certified,
            "source": CLASS_SOURCE}


def _estimated(model: Any, name: str, paths: int, draft_sampling: str, record: Any,
               tolerance: float, samples: int, seed: int) -> tuple[dict[str, Any], list[str]]:
    """The row of a verifier whose exact law is over the work limit: an ESTIMATE."""
    value = record.value
    estimate = sampled_result(model, name, paths=paths, draft_sampling=draft_sampling,
                              samples=samples, seed=seed)
    block_efficiency = estimate.block_efficiency
    claimed = claimed_lossless(name, draft_sampling)
    row = {"block_efficiency": block_efficiency, "exact": None,
           "gap": value - block_efficiency, "exact_gap": None,
           "ratio": block_efficiency / value, "tv": None, "tv_exact": None, "tv_kind": None,
           "lossless_claimed": claimed, "evaluation": "estimate",
           "estimate": {"samples": estimate.samples, "seed": estimate.seed,
                        "standard_error": estimate.standard_error,
                        "ci_low": estimate.ci_low, "ci_high": estimate.ci_high},
           "undefined": None}
    if estimate.undefined_samples:
        row.update({"block_efficiency": None, "gap": None, "ratio": None, "undefined": {
            "count": estimate.undefined_samples, "unit": "sampled configurations",
            "mass": estimate.undefined_mass, "mass_exact": None}})
        if not claimed:
            return row, []
        return row, [f"{name}: undefined on {estimate.undefined_samples} sampled configurations "
                     f"of estimated mass {estimate.undefined_mass:.6g}"]
    margin = ESTIMATE_CLAIM_Z * estimate.standard_error
    if claimed and block_efficiency - margin > value + tolerance:
        return row, [
            f"{name}: ESTIMATED block efficiency {block_efficiency:.15g} (standard error "
            f"{estimate.standard_error:.3g}, {samples} sampled configurations) exceeds "
            f"the {'certified' if record.certified else 'NOT certified exactly'} optimum "
            f"{value:.15g} by more than {ESTIMATE_CLAIM_Z:g} standard errors"]
    return row, []


def _compare(instance: Instance, name: str, paths: int, draft_sampling: str, record: Any,
             tolerance: float, max_enumerated: int, samples: int, seed: int
             ) -> tuple[dict[str, Any], list[str]]:
    """One verifier's row of the gap result and the claims it violates.

    The exact law (verifiers.exact.exact_result: the structure-aware evaluation on i.i.d.
    drafts, else the enumeration) in float64; on a rational instance whose exact law costs
    at most EXACT_WORK, also in exact rationals (block efficiency, gap and TV exact: an
    exactly lossless law has TV exactly 0). A verifier designed for i.i.d. drafts is
    reported, not held to the claims, under drafting without replacement, and so is one
    registered as claimed lossless under no draft law (spectr_gbv); a deliberately broken
    one requested by name is held to them (and fails)."""
    model = instance.model(exact=False)
    work = enumeration_size(model, name, paths, draft_sampling)
    structured = evaluation_kind(get_verifier(name), paths, draft_sampling) is not None
    if work > (max(max_enumerated, MAX_STRUCTURED) if structured else max_enumerated):
        return _estimated(model, name, paths, draft_sampling, record, tolerance, samples, seed)
    value = record.value
    law = exact_result(model, name, paths=paths, draft_sampling=draft_sampling)
    block_efficiency = float(law.block_efficiency)
    claimed = claimed_lossless(name, draft_sampling)
    exact_law = None
    if instance.rational and work <= EXACT_WORK:
        exact_law = exact_result(instance.model(exact=True), name, paths=paths,
                                 draft_sampling=draft_sampling)
    exact_be = None if exact_law is None else Fraction(exact_law.block_efficiency)
    exact_gap = (record.exact_value - exact_be
                 if exact_be is not None and record.exact_value is not None else None)
    tv_exact = None if exact_law is None else Fraction(exact_law.total_variation_exact)
    tv = float(tv_exact) if tv_exact is not None else float(law.total_variation)
    row = {"block_efficiency": block_efficiency,
           "exact": None if exact_be is None else fraction_text(exact_be),
           "gap": float(exact_gap) if exact_gap is not None else value - block_efficiency,
           "exact_gap": None if exact_gap is None else fraction_text(exact_gap),
           "ratio": block_efficiency / value, "tv": tv,
           "tv_exact": None if tv_exact is None else fraction_text(tv_exact),
           "tv_kind": "exact" if tv_exact is not None else "float64",
           "lossless_claimed": claimed, "evaluation": law.enumeration, "estimate": None,
           "undefined": None}
    undefined_law = exact_law if exact_law is not None else law
    if undefined_law.undefined_configurations:
        # the rule as published is undefined on some configurations (an all-zero correction
        # row): its law has mass < 1, so no block efficiency, gap or ratio is reported for it
        mass = undefined_law.undefined_mass
        unit = "configurations" if undefined_law.enumeration in ENUMERATED_KINDS else "nodes"
        row.update({"block_efficiency": None, "exact": None, "gap": None, "exact_gap": None,
                    "ratio": None, "undefined": {
                        "count": undefined_law.undefined_configurations, "unit": unit,
                        "mass": float(mass),
                        "mass_exact": fraction_text(mass) if exact_law is not None else None}})
    if not claimed:
        return row, []
    if row["undefined"] is not None:
        return row, [f"{name}: undefined on {row['undefined']['count']} {unit} of mass "
                     f"{row['undefined']['mass']:.6g}"]
    problems = []
    certified = ("certified" if record.certified else "NOT certified" if
                 record.certified_within is None else
                 f"certified-within-{record.certified_within:.2g}")
    if exact_gap is not None and exact_gap < 0:
        problems.append(f"{name}: exact block efficiency {fraction_text(exact_be)} exceeds the "
                        f"{certified} exact optimum {fraction_text(record.exact_value)} by "
                        f"{fraction_text(-exact_gap)}")
    elif exact_gap is None and block_efficiency > value + tolerance:
        problems.append(f"{name}: block efficiency {block_efficiency:.15g} exceeds the "
                        f"{certified} optimum {value:.15g} by {block_efficiency - value:.3g} "
                        f"(tolerance {tolerance:g})")
    if tv_exact is not None and tv_exact != 0:
        problems.append(f"{name}: lossy, exact TV {float(tv_exact):.3g} > 0")
    elif tv_exact is None and tv > TV_TOLERANCE:
        problems.append(f"{name}: lossy, TV {tv:.3g} > {TV_TOLERANCE:g}")
    return row, problems


# ---------------------------------------------------------------------------
# a gap computation as data: GapSpec in, GapResult out (issue 29)
# ---------------------------------------------------------------------------

def check_gap_paths(paths: object) -> int:
    """The paths K of a gap computation (gap and sweep specs): an integer in 1..MAX_GAP_PATHS
    (BadArgument naming `paths`)."""
    paths = inputs.integer("paths", paths, 1)
    if paths > MAX_GAP_PATHS:
        raise BadArgument("paths", f"K = {paths} is over the limit of {MAX_GAP_PATHS} paths (every "
                                   "verifier's law holds K paths per draft configuration); use fewer paths")
    return paths


def check_estimation(max_enumerated: object, samples: object) -> None:
    """max_enumerated >= 1 and 2 <= samples <= MAX_SAMPLES (gap and sweep specs)."""
    inputs.integer("max_enumerated", max_enumerated, 1)
    inputs.integer("samples", samples, 2, MAX_SAMPLES)


@dataclass(frozen=True)
class GapSpec:
    """One gap computation as data (a problem is data before it is solved): the arguments of
    gap(), with its defaults. Construction is the validation: a wrong field raises
    BadArgument naming it (verifiers: UnknownVerifier), in the order the fields are listed;
    run() computes it.

    instance: an Instance, or a function spec -> Instance called once every other field is
    checked (the CLI reads the instance file there, refusing it by the checked paths,
    draft_sampling and method before any row is parsed); the field then holds the Instance."""

    instance: Instance | Callable[[GapSpec], Instance]
    paths: int = 2
    draft_sampling: str = "iid"
    backend: str = "highs"
    verifiers: tuple[str, ...] | None = None  # None: DEFAULT_VERIFIERS
    certify: bool = True
    method: str = "auto"
    time_limit: float | None = DEFAULT_TIME_LIMIT
    max_enumerated: int = MAX_ENUMERATED
    samples: int = SAMPLES
    seed: int = 0

    def __post_init__(self) -> None:
        check_gap_paths(self.paths)
        inputs.choice("draft_sampling", self.draft_sampling, DRAFT_SAMPLING)
        if self.verifiers is not None:
            object.__setattr__(self, "verifiers", tuple(available_verifiers(self.verifiers)))
        inputs.choice("backend", self.backend, BACKENDS)
        inputs.choice("method", self.method, GAP_METHODS)
        if self.backend != "highs" and self.method != "full":
            raise BadArgument("backend", f"{self.backend} solves the enumerated LP only; add `method` full")
        if self.time_limit is not None:
            inputs.number("time_limit", self.time_limit, 0, low_open=True)
        check_estimation(self.max_enumerated, self.samples)
        inputs.seed("seed", self.seed)
        if not isinstance(self.instance, Instance):
            object.__setattr__(self, "instance", self.instance(self))

    def run(self) -> GapResult:
        """The computation (gap()); OptimumNotFound when the optimum is not found."""
        record, data = _gap(self.instance, self.paths, self.draft_sampling, self.backend,
                            self.verifiers, self.certify, self.method, self.time_limit,
                            self.max_enumerated, self.samples, self.seed)
        return GapResult.from_json(self, data, record)


@dataclass(frozen=True)
class GapRow:
    """One verifier's row: the fields every row has, typed; `record` is the whole row as gap()
    reports it (exact fractions, TV, estimate, seconds, ...)."""

    name: str
    block_efficiency: float
    gap: float
    ratio: float
    lossless_claimed: bool
    evaluation: str | None
    record: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class GapResult:
    """The result of a GapSpec, inspectable like scipy's OptimizeResult: the optimum as the
    typed record of the one optimum engine (lp.engine.Optimum: .status a Status, .certified,
    .certified_within, .bounds, .exact_value, .value), one GapRow per verifier, the tolerance
    and the violated claims. class_optimum is the optimum's own numbers (the theorem class =
    full: the same solve, not a second record). to_json() is gap()'s dict without the
    optimum's exact_value (a Fraction; its text is optimum["exact"] on a rational instance)."""

    spec: GapSpec
    instance: dict[str, Any]
    optimum: Optimum
    rows: tuple[GapRow, ...]
    tolerance: float
    failures: tuple[str, ...]
    seconds: float

    @classmethod
    def from_json(cls, spec: GapSpec, data: dict[str, Any], optimum: Optimum | None = None) -> GapResult:
        """The result of gap()'s dict or of a to_json() object; optimum: the record itself when
        at hand (GapSpec.run), else rebuilt from data["optimum"] (Optimum.from_json, with
        gap()'s exact_value when the dict has it)."""
        if optimum is None:
            record = data["optimum"]
            optimum = Optimum.from_json(record, data["instance"]["rational"], record.get("exact_value"))
        rows = tuple(GapRow(name, row["block_efficiency"], row["gap"], row["ratio"],
                            row["lossless_claimed"], row.get("evaluation"), row)
                     for name, row in data["verifiers"].items())
        return cls(spec, data["instance"], optimum, rows, data["tolerance"], tuple(data["failures"]),
                   data["seconds"])

    @property
    def method(self) -> str:
        return self.optimum.method

    @property
    def exact_value(self) -> Fraction | None:
        """The exact optimum (a float instance's: of its exact binary rows), None if not certified."""
        return self.optimum.exact_value

    @property
    def class_optimum(self) -> dict[str, Any]:
        return class_optimum(self.optimum)

    def row(self, name: str) -> GapRow:
        """The row of verifier `name` (KeyError if it was not compared)."""
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "paths": self.spec.paths,
                "draft_sampling": self.spec.draft_sampling, "backend": self.spec.backend,
                "method": self.method, "optimum": self.optimum.to_json(),
                "class_optimum": self.class_optimum,
                "verifiers": {row.name: row.record for row in self.rows},
                "tolerance": self.tolerance, "failures": list(self.failures),
                "seconds": self.seconds}
