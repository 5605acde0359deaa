"""Claims on the selection class (docs/theory.md sections 5.5, 7.1), checked on random instances.

class-equals-full:  is the optimum of the selection class ("select one drafted path, then
    BV on it"; speclp.lp.class_lp.class_lp_optimum, cutting planes over P_K) equal to the
    K-path optimum (speclp.lp.optimum: column generation, or the enumerated full LP with
    method="full")? docs/theory.md Theorem 5.5 (with section 6.3) proves it; this check
    tests the proof and both programs on random instances, each optimum computed
    independently.
node-form:          is the node-level form (per-depth set constraints on beta only;
    speclp.lp.node_form.node_form_optimum) equal to the class optimum (or, with
    against="full", to the full optimum)? (It is not: counterexamples are found.)

A failing trial is saved as a counterexample. What is a theorem, and reported as a bug
when violated (a failure flagged ``bug``): class <= full <= node-form, class >= the exact
block efficiency of GBV when the verifier "gbv" is registered (GBV selects one path and
runs BV on it), and class = BV at K = 1.

Comparisons: when both optima are certified they are compared exactly (any difference
fails; on a float instance the exact data are the binary values of its rows, the same for
every LP); otherwise they fail when they differ by more than FLOAT_TOLERANCE. The
relation observed on every trial (<, =, >) is recorded either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from .. import inputs
from ..deadline import STOPPED, Deadline
from ..lp import tolerances
from ..lp.class_lp import class_lp_optimum
from ..lp.engine import BACKENDS, Optimum, optimum
from ..lp.instance import Instance, dirichlet_instance
from ..lp.node_form import node_form_optimum
from ..rationals import fraction_text
from ..verifiers.drafts import DRAFT_SAMPLING
from ..verifiers.exact import exact_result
from ..verifiers.registry import verifier_names

FLOAT_TOLERANCE = tolerances.FLOAT_AGREEMENT


@dataclass(frozen=True)
class ClaimSettings:
    """The settings of a randomized claim check, with their defaults (the CLI's flags read
    them): `trials` Dirichlet(alpha) instances with seeds seed .. seed + trials - 1, of
    vocabulary V, depth L and K paths, rows rounded to multiples of 1/denominator (0:
    floats), the draft law, the LP backend, and the folder a counterexample is saved in."""

    trials: int = 100
    vocab: int = 2
    depth: int = 2
    paths: int = 2
    seed: int = 0
    alpha: float = 1.0
    denominator: int = 0
    draft_sampling: str = DRAFT_SAMPLING[0]
    backend: str = BACKENDS[0]
    save_dir: str = "counterexamples"


DEFAULTS = ClaimSettings()
AGAINST = ("class", "full")  # what check_node_form compares the node form with


Record = Optimum | dict[str, Any]  # an optimum, or a verifier's exact block efficiency


def _value(record: Record) -> tuple[Fraction | None, float]:
    """(exact value when certified, float value)."""
    if isinstance(record, Optimum):
        exact = record.exact_value if record.certified else None
        return exact, float(record.value) if record.value is not None else float("nan")
    exact = record.get("exact_value") if record.get("certified") else None
    value = record.get("value")
    return exact, float(value) if value is not None else float("nan")


def compare(a: Record, b: Record) -> dict[str, Any]:
    """Relation between two optimum records: a - b, exactly when both are certified (exact
    optima of the same exact data: the rows of a rational instance, or the exact binary
    values of a float one), else in float64 with FLOAT_TOLERANCE.

    Returns relation ("<", "=", ">", or "?" when either optimum was not found, e.g. a
    time limit), difference (float a - b), exact_difference (fraction string or None),
    exact (bool: the comparison was exact).
    """
    ea, fa = _value(a)
    eb, fb = _value(b)
    if ea is not None and eb is not None:
        diff = ea - eb
        relation = "<" if diff < 0 else (">" if diff > 0 else "=")
        return {"relation": relation, "difference": float(diff), "exact_difference": str(diff),
                "exact": True}
    diff_f = fa - fb
    if math.isnan(diff_f):
        return {"relation": "?", "difference": diff_f, "exact_difference": None, "exact": False}
    relation = "=" if abs(diff_f) <= FLOAT_TOLERANCE else ("<" if diff_f < 0 else ">")
    return {"relation": relation, "difference": diff_f, "exact_difference": None, "exact": False}


def _public(record: Record) -> dict[str, Any]:
    if isinstance(record, Optimum):
        out = record.to_json()
        out.pop("size", None)
        return out
    return {k: v for k, v in record.items() if k not in ("exact_value", "size")}


def _verifier_record(instance: Instance, name: str, paths: int) -> dict[str, Any]:
    """Exact block efficiency of a registered verifier as a record like an optimum's."""
    result = exact_result(instance.model(exact=instance.rational), name, paths=paths)
    value = Fraction(result.block_efficiency) if instance.rational else None
    return {"value": float(result.block_efficiency), "exact_value": value,
            "exact": fraction_text(value) if value is not None else None, "certified": instance.rational,
            "total_variation": result.total_variation}


def _optima(instance: Instance, paths: int, draft_sampling: str, method: str, backend: str,
            node_form: bool) -> dict[str, Any]:
    full = optimum(instance, paths, draft_sampling, method=method, backend=backend)
    out: dict[str, Any] = {"full": full,
                           "class": class_lp_optimum(instance, paths, draft_sampling=draft_sampling)}
    if node_form:
        out["node_form"] = node_form_optimum(instance, paths, draft_sampling=draft_sampling)
    # GBV's skewed rows are derived for i.i.d. drafting only
    gbv = draft_sampling == "iid" and "gbv" in verifier_names()
    out["gbv"] = _verifier_record(instance, "gbv", paths) if gbv else None
    out["bv"] = _verifier_record(instance, "bv", 1) if paths == 1 else None
    return out


def _bugs(optima: dict[str, Any]) -> list[str]:
    """Violations of the theorems class <= full <= node-form, class >= GBV."""
    bugs = []
    if compare(optima["class"], optima["full"])["relation"] == ">":
        bugs.append("class optimum above the full LP optimum (the class is a subset of verifiers)")
    if "node_form" in optima and compare(optima["full"], optima["node_form"])["relation"] == ">":
        bugs.append("full LP optimum above the node-form optimum (the node form is a relaxation)")
    gbv = optima.get("gbv")
    if gbv is not None:
        if compare(gbv, optima["class"])["relation"] == ">":
            bugs.append("GBV block efficiency above the class optimum (GBV is in the class)")
        if gbv["total_variation"] > 1e-9:
            bugs.append(f"GBV not lossless: TV {gbv['total_variation']:.3g}")
    if optima.get("bv") is not None and compare(optima["class"], optima["bv"])["relation"] != "=":
        bugs.append("K = 1 class optimum differs from BV's block efficiency (P_1 = {q})")
    for name in ("full", "class", "node_form"):
        if name in optima and optima[name].value is None:
            bugs.append(f"{name} optimum not found")
    return bugs


def _trial_summary(instance: Instance, optima: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"instance": instance.name, "rational": instance.rational}
    for name, rec in optima.items():
        if rec is not None:
            out[name] = _public(rec)
    return out


def _run(claim: str, left: str, right: str, trials: int, vocab: int, depth: int, paths: int,
         seed: int, alpha: float, denominator: int | None, draft_sampling: str, method: str,
         backend: str, save_dir: str | Path,
         progress: Callable[[Iterable[int]], Iterable[int]] | None,
         node_form: bool, deadline: Deadline | None) -> dict[str, Any]:
    seeds: Iterable[int] = range(seed, seed + trials)
    if progress is not None:
        seeds = progress(seeds)
    relations: dict[str, dict[str, int]] = {}
    max_gap: dict[str, float] = {}
    certified = {"full": 0, "class": 0, **({"node_form": 0} if node_form else {})}
    gbv_checked = 0
    gbv_gap_min = None
    for s in seeds:
        if deadline is not None and deadline.passed:
            return stopped_record(claim, trials, s - seed, deadline.reason, vocab=vocab, depth=depth,
                                  paths=paths, seed=seed, draft_sampling=draft_sampling,
                                  relations=relations)
        inst = dirichlet_instance(vocab, depth, alpha=alpha, seed=s, denominator=denominator)
        optima = _optima(inst, paths, draft_sampling, method, backend, node_form)
        for name in certified:
            if name in optima:
                certified[name] += bool(optima[name].certified)
        pairs = [("class", "full")] + ([("node_form", "class"), ("node_form", "full")]
                                       if node_form else [])
        if optima["gbv"] is not None:
            pairs.append(("class", "gbv"))
        comparisons = {}
        for a, b in pairs:
            key = f"{a} vs {b}"
            comp = compare(optima[a], optima[b])
            comparisons[key] = comp
            relations.setdefault(key, {"<": 0, "=": 0, ">": 0, "?": 0})[comp["relation"]] += 1
            max_gap[key] = max(max_gap.get(key, 0.0), abs(comp["difference"]))
        if optima["gbv"] is not None:
            gbv_checked += 1
            gap = comparisons["class vs gbv"]["difference"]
            gbv_gap_min = gap if gbv_gap_min is None else min(gbv_gap_min, gap)
        bugs = _bugs(optima)
        claimed = comparisons[f"{left} vs {right}"]
        difference = f"{claimed['difference']:.6g}" + (" exactly" if claimed["exact"] else "")
        if bugs or claimed["relation"] != "=":
            kind = ("bug" if bugs else "undecided: an optimum was not found"
                    if claimed["relation"] == "?" else "counterexample")
            path = inst.save(Path(save_dir) / f"{claim}-{inst.name}-K{paths}-{draft_sampling}.json")
            trial = _trial_summary(inst, optima)
            trial["comparisons"] = comparisons
            return {"claim": claim, "passed": False, "kind": kind, "bugs": bugs,
                    "trials_run": s - seed + 1, "seed": s, "vocab": vocab, "depth": depth,
                    "paths": paths, "draft_sampling": draft_sampling,
                    "message": (f"{left} {claimed['relation']} {right}: "
                                f"{_value(optima[left])[1]:.15g} vs "
                                f"{_value(optima[right])[1]:.15g} (difference {difference})"),
                    "counterexample": trial, "saved": str(path), "instance_json": inst.to_json(),
                    "relations": relations}
    return {"claim": claim, "passed": True, "trials": trials, "vocab": vocab, "depth": depth,
            "paths": paths, "seed": seed, "alpha": alpha, "rational": bool(denominator),
            "denominator": denominator, "draft_sampling": draft_sampling, "method": method,
            "certified": certified,
            "relations": relations, "max_abs_difference": max_gap,
            "gbv_checked": gbv_checked, "min_class_minus_gbv": gbv_gap_min,
            "gbv_note": None if gbv_checked else "gbv not registered or not iid: not compared"}


def check_class_equals_full(trials: int, vocab: int, depth: int, paths: int, seed: int = DEFAULTS.seed,
                            alpha: float = DEFAULTS.alpha, progress: Callable[[Iterable[int]], Iterable[int]]
                            | None = None, denominator: int | None = None,
                            draft_sampling: str = DEFAULTS.draft_sampling, method: str = "auto",
                            backend: str = DEFAULTS.backend, save_dir: str | Path = DEFAULTS.save_dir,
                            deadline: Deadline | None = None) -> dict[str, Any]:
    """Class optimum = K-path optimum on `trials` Dirichlet(alpha) instances (seeds
    seed..seed+trials-1; rational with rows in multiples of 1/denominator when given).
    method / backend: how the K-path optimum is computed (speclp.lp.optimum).

    Returns passed, relations (per pair: counts of <, =, >), max_abs_difference, certified
    counts, GBV comparison; on the first failing trial: kind ("counterexample" for the
    open claim, "bug" for a violated theorem), the trial's optima, saved (JSON path).
    deadline (None: none): checked before each trial; once it has passed, stopped_record.
    """
    return _run("class-equals-full", "class", "full", trials, vocab, depth, paths, seed, alpha,
                denominator, draft_sampling, method, backend, save_dir, progress,
                node_form=False, deadline=deadline)


def check_node_form(trials: int, vocab: int, depth: int, paths: int, seed: int = DEFAULTS.seed,
                    alpha: float = DEFAULTS.alpha, progress: Callable[[Iterable[int]], Iterable[int]]
                    | None = None, denominator: int | None = None,
                    draft_sampling: str = DEFAULTS.draft_sampling, method: str = "auto",
                    backend: str = DEFAULTS.backend, against: str = "class",
                    save_dir: str | Path = DEFAULTS.save_dir,
                    deadline: Deadline | None = None) -> dict[str, Any]:
    """Node-form optimum = class optimum (against="class") or = full optimum
    (against="full"); all three optima are computed and their relations recorded. deadline
    as check_class_equals_full's."""
    inputs.choice("against", against, AGAINST)
    return _run(f"node-form-vs-{against}", "node_form", against, trials, vocab, depth, paths, seed,
                alpha, denominator, draft_sampling, method, backend, save_dir, progress,
                node_form=True, deadline=deadline)


def stopped_record(claim: str, trials: int, trials_run: int, reason: str, **done: Any) -> dict[str, Any]:
    """A claim check's answer when its deadline stopped it after `trials_run` of `trials`
    trials (all of which held): neither passed nor failed ("passed" False, "status"
    "stopped: time limit", "stopped" why); `done`: what the check reports of them."""
    return {"claim": claim, "passed": False, "status": STOPPED, "stopped": reason, "trials": trials,
            "trials_run": trials_run, **done}
