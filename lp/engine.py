"""THE optimum entry point: the certified K-path optimum of an instance, as one record.

    optimum(instance, paths=K, draft_sampling="iid", method="auto") -> Optimum

Every command asks this function for the K-path optimum (K = 1 included); none builds its
own LP. Methods:
    "colgen"  column generation over the selection master (speclp.lp.colgen), certified by
              exact pricing; also returns the optimal selection mixture (record.mixture).
              The engine.
    "full"    the enumerated full LP (speclp.lp.full.full_lp) solved by HiGHS (or cvxpy) and
              certified from its basis (speclp.lp.certify). The test oracle: exponentially
              many configurations, small instances only.
    "closed-form"  depth L = 1 with i.i.d. drafts: alpha* = min over the V + 1 threshold
              sets H of p(H) + 1 - Q(H) (speclp.lp.closed_form), evaluated in exact
              rationals; O(V log V) at any vocabulary. The optimal H is in
              details["threshold_set"].
    "auto"    "closed-form" where it applies (L = 1, i.i.d.), else "colgen": the default
              for every K and every caller.
With tree_nodes (a fixed, deterministic draft tree) the optimum is that of the tree's LP
(speclp.lp.full.tree_lp; method "tree").

program_optimum(lp) solves and certifies ONE LinearProgram (node LP, class LP, node form,
tree LP) and returns the same record.

The record (Optimum)
--------------------
    value            float: the optimum E[tau + 1] (tokens per target call); the exact
                     optimum converted to float when certified, else the solver's value
    exact_value      Fraction or None: the exact optimum of the exact data when certified
                     (for a float instance: of its binary values renormalised exactly)
    exact            fraction string of exact_value when certified AND the instance is
                     rational (given in exact numbers), else None
    certified        bool: exact primal and dual certificate checked (else the value is
                     labelled NOT certified wherever it is shown, or "certified within w"
                     when details["certified_within"] is set)
    details["certified_within"], ["lower_bound_exact"], ["upper_bound_exact"] (colgen,
                     i.i.d. drafts, where the exact certificate was skipped or failed): exact
                     bounds lower <= optimum <= upper with upper - lower = w <= 1e-9, from
                     the node-budget master (details["master"] "node-budget";
                     speclp.lp.colgen.node_master_bounds): lower = the exact value of the
                     float master's mixture (weights rationalised and renormalised, BV
                     against the mixture's skewed law r: a lossless verifier); upper = weak
                     duality with the rationalised float duals and every priority priced
                     exactly. Or, at depth <= 3 where the node master has not converged in
                     100 solves, from the antichain form (details["master"] "antichain
                     form"; docs/theory.md 7.5, speclp.lp.antichain.antichain_bounds):
                     lower = 1 + sum of a point made exactly feasible for every antichain
                     row, upper = weak duality with its rationalised row duals (both bound
                     the K-path optimum by Theorem 7.5); where that fails to certify within
                     1e-9 the node-budget master runs on. "certified within w" is labelled
                     apart from "certified" (exactly); value is then the exact lower bound.
    certificate      text: what was checked, or why it failed
    status           Status ("optimal", "time_limit", ...: a str Enum; OTHER for a solver
                     word not listed, kept in solver_status, which to_json prints)
    method           "colgen" | "full" | "closed-form" | "tree" | "lp" | a cutting-plane
                     label
    seconds          wall time of the whole computation (solve + certificate)
    solve_seconds    the solver part;  certify_seconds: the certificate part (None: none)
    size             dict: what was solved (variables, rows, configurations, ...)
    notes            list of strings: every retry, refinement, restriction worth knowing
    mixture          colgen only, else None (the closed form gives details["threshold_set"]
                     instead): the optimal selection mixture
                     (speclp.lp.colgen.SelectionMixture): the priorities with positive
                     weight, their weights lambda and the optimal skewed law r on the
                     leaves, exact Fractions when certified. "Draw a priority with
                     probability lambda, select the highest-priority drafted path, run BV
                     on it with r in place of q" attains the optimum.
    details          dict of method-specific numbers (iterations, cuts, rounds, ...)
    matching_duals   colgen only, else None: [N, V] float64 duals of the target-matching
                     rows (node u in shortlex order, token t) of the final float master
                     solve; any multipliers give a certified upper bound by weak duality
                     (speclp.lp.dual_bound.dual_upper_bound), tight when they are optimal.
                     Not in to_json().
to_json() gives the JSON object the CLI prints (exact numbers as fraction strings);
Optimum.from_json(data, rational) rebuilds the record from it (the mixture and the duals left
out); .bounds gives the exact bounds (lower, upper) as Fractions of a record certified within w.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

import numpy as np

from .. import inputs
from ..inputs import BadArgument
from ..rationals import fraction_text, parse_fraction
from ..verifiers.drafts import check_draft_sampling
from ..verifiers.tree import TreeModel, num_nodes
from .antichain import antichain_bounds, antichain_inout
from .certify import refine_basis
from .closed_form import one_step_optimum
from .colgen import (
    SelectionMixture,
    master_data,
    node_master_bounds,
    selection_mixture,
    solve_colgen,
    solve_node_master,
)
from .full import full_lp, tree_lp
from .instance import Instance
from .node import node_optimum
from .program import LinearProgram
from .solve import solve

METHODS = ("auto", "colgen", "full", "closed-form")
BOUNDS_WIDTH = Fraction(1, 10**9)  # "certified within w" needs exact bounds at most this apart
EXACT_PHASE_MAX_LEAVES = 128  # i.i.d. instances with more leaves V^L are solved on the node-budget
# master and certified by exact bounds (colgen.solve_node_master, node_master_bounds) instead
# of the selection master's exact basis certificate (its dense core exceeded
# certify.MAX_DENSE_CORE after minutes at V = 8, L = 3, K = 4; 15 min did not finish at
# V = 4, L = 4, K = 4); a failed exact certificate also falls back to the bounds
ANTICHAIN_MAX_DEPTH = 3  # past EXACT_PHASE_MAX_LEAVES, i.i.d. instances of at most this depth
NODE_MASTER_FIRST_SOLVES = 100  # run the node-budget master for at most this many solves; if
# it has not converged, the antichain form (antichain.antichain_inout; docs/theory.md 7.5), and
# the node-budget master again, uncapped, where that does not certify within BOUNDS_WIDTH (not
# for lack of time). Side by side on the grid's 16 instances at V = 8, L = 3
# (benchmarks/results/gap_speed/antichain_lp.md): the node master converges in 1 to 49 solves
# (at most 2.3 s with its bounds) on 9 of them, in 111 to 308 solves (2.9 to 23 s) on 4, in 782
# (249 s) and 1,378 (875 s in the grid) on 2, and not in 300 s on 1; the antichain form takes 5
# to 31 s on the 12 at K >= 2, its bounds 9e-16 to 4.8e-10 apart on the 7 where the node master
# needs more than 100 solves (up to 7e-7 apart where it needs fewer: not the route there). It does not
# converge in 900 s at V = 8, L = 4 (depth 4), hence the depth limit.
DEFAULT_TIME_LIMIT = 600.0  # seconds: column generation and the full LP never run on unbounded
BACKENDS = ("highs", "cvxpy")


class Status(StrEnum):
    """The typed status of an optimum record (a StrEnum: equal to its word, printed as it).
    Optimum.status is one of these; the solver's own word is kept in Optimum.solver_status
    (what to_json prints as "status"): a word outside this list (a rare HiGHS or cvxpy
    status) is Status.OTHER."""

    OPTIMAL = "optimal"
    TIME_LIMIT = "time_limit"
    ITERATION_LIMIT = "iteration_limit"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    NOT_CONVERGED = "not_converged"  # a cutting-plane loop stopped before convergence
    ERROR = "error"
    OTHER = "other"

    @classmethod
    def of(cls, word: str | Status) -> Status:
        """The member for a solver's status word (OTHER for a word not listed)."""
        try:
            return cls(word)
        except ValueError:
            return cls.OTHER


@dataclass
class Optimum:
    """The optimum record (module docstring). status: a Status (constructed from the solver's
    word, which stays in solver_status)."""

    value: float | None
    exact_value: Fraction | None
    certified: bool
    certificate: str
    status: Status | str
    method: str
    rational: bool
    seconds: float
    solve_seconds: float | None = None
    certify_seconds: float | None = None
    size: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mixture: SelectionMixture | None = None
    details: dict[str, Any] = field(default_factory=dict)
    matching_duals: np.ndarray | None = None
    solver_status: str | None = None  # the solver's own word (default: the status given)

    def __post_init__(self) -> None:
        if self.solver_status is None:
            self.solver_status = str(self.status)
        self.status = Status.of(self.status)

    @property
    def exact(self) -> str | None:
        """Fraction string of the certified optimum of a rational instance, else None."""
        if self.certified and self.rational and self.exact_value is not None:
            return fraction_text(self.exact_value)
        return None

    @property
    def certified_within(self) -> float | None:
        """w when the optimum is certified within w by exact bounds (not exactly), else None."""
        return self.details.get("certified_within")

    @property
    def label(self) -> str:
        """'certified', 'certified within w' or 'NOT certified: reason'."""
        if self.certified:
            return "certified"
        if self.certified_within is not None:
            return f"certified within {self.certified_within:.3g} (exact bounds)"
        return f"NOT certified: {self.certificate}"

    @property
    def bounds(self) -> tuple[Fraction, Fraction] | None:
        """(lower, upper): the exact bounds lower <= optimum <= upper of a record certified by
        exact bounds (details["lower_bound_exact"], ["upper_bound_exact"]), else None."""
        lower, upper = self.details.get("lower_bound_exact"), self.details.get("upper_bound_exact")
        if lower is None or upper is None:
            return None
        return parse_fraction(lower), parse_fraction(upper)

    @classmethod
    def from_json(cls, data: dict[str, Any], rational: bool,
                  exact_value: Fraction | None = None) -> Optimum:
        """The record of a to_json() object (rational: whether the instance was given in exact
        numbers, which to_json does not say). exact_value: the exact optimum when known (a
        float instance's exact binary optimum is not in the JSON), else read from "exact".
        Every key to_json does not name is a detail, in its order, so that to_json() gives
        the object back; the mixture and the matching duals are not rebuilt (None)."""
        if exact_value is None and data.get("exact"):
            exact_value = parse_fraction(data["exact"])
        details = {k: v for k, v in data.items() if k not in JSON_FIELDS}
        return cls(value=data["value"], exact_value=exact_value, certified=data["certified"],
                   certificate=data["certificate"], status=data["status"], method=data["method"],
                   rational=rational, seconds=data["seconds"], solve_seconds=data.get("solve_seconds"),
                   certify_seconds=data.get("certify_seconds"), size=dict(data.get("size", {})),
                   notes=list(data.get("notes", [])), details=details, solver_status=data["status"])

    def to_json(self, mixture: bool = False) -> dict[str, Any]:
        """JSON object (the mixture only when asked: it has P entries per priority)."""
        out = {"value": self.value, "exact": self.exact, "certified": self.certified,
               "certificate": self.certificate, "status": self.solver_status, "method": self.method,
               "seconds": round(self.seconds, 6),
               "solve_seconds": _round(self.solve_seconds),
               "certify_seconds": _round(self.certify_seconds),
               "size": self.size, "notes": list(self.notes), **self.details}
        if mixture and self.mixture is not None:
            out["mixture"] = self.mixture.to_json()
        return out


JSON_FIELDS = ("value", "exact", "certified", "certificate", "status", "method", "seconds",
               "solve_seconds", "certify_seconds", "size", "notes", "mixture", "exact_value")
"""The keys of Optimum.to_json that are not details (and "exact_value", which proofs.gap adds)."""


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


# ---------------------------------------------------------------------------
# one LinearProgram
# ---------------------------------------------------------------------------

def program_optimum(lp: LinearProgram, backend: str = "highs", certify: bool = True,
                    rational: bool = True, method: str = "lp",
                    time_limit: float | None = None) -> Optimum:
    """Solve `lp` and certify its optimum in exact arithmetic (when certify and lp carries
    exact data). A float basis that is optimal only within tolerances is repaired by
    iterative refinement first (speclp.lp.certify.refine_basis); cvxpy returns no basis, so
    its optimum is certified through a HiGHS basis of the same LP and the distance of
    cvxpy's value from the exact optimum is recorded (details["backend_error"]).
    time_limit: seconds for the solver (None: none); a solve stopped by it gives a record
    with value None, status "time_limit", NOT certified."""
    inputs.choice("backend", backend, BACKENDS)
    start = time.perf_counter()
    solution = solve(lp, backend=backend, time_limit=time_limit)
    record = Optimum(
        value=float(solution.value) if solution.optimal else None, exact_value=None,
        certified=False, certificate="not requested", status=solution.status, method=method,
        rational=rational, seconds=0.0, solve_seconds=solution.seconds,
        size=lp.describe(), notes=list(lp.notes) + list(solution.notes),
        details={"backend": backend})
    if certify and lp.exact_table is not None and solution.optimal:
        basis_source = solution if solution.basis is not None else solve(lp, backend="highs")
        refined, cert = refine_basis(lp, basis_source)
        record.certify_seconds = cert.seconds
        record.certified = bool(cert.certified)
        record.certificate = cert.reason
        record.notes += [n for n in refined.notes if n.startswith("refinement")]
        if solution.basis is None:
            record.certificate += " (basis from HiGHS; the backend returns none)"
        if cert.certified and cert.value is not None:
            record.exact_value = Fraction(cert.value)
            record.details["backend_error"] = abs(float(solution.value) - float(cert.value))
            record.value = float(record.exact_value)
    elif not solution.optimal:
        record.certificate = (f"time limit {time_limit:g} s hit by the solver"
                              if solution.status == "time_limit"
                              else f"solver status {solution.status}")
    record.seconds = time.perf_counter() - start
    return record


# ---------------------------------------------------------------------------
# the K-path optimum
# ---------------------------------------------------------------------------

def _model_and_rational(instance: Instance | TreeModel, exact: bool) -> tuple[TreeModel, bool]:
    if isinstance(instance, Instance):
        return instance.model(exact=exact), instance.rational
    if not isinstance(instance, TreeModel):
        raise TypeError(f"expected an Instance or TreeModel, got {type(instance).__name__}")
    rational = instance.exact
    if exact or not instance.exact:
        return instance, rational
    return instance.to_float(), rational


def optimum(instance: Instance | TreeModel, paths: int = 1, draft_sampling: str = "iid",
            method: str = "auto", certify: bool = True, backend: str = "highs",
            time_limit: float | None = DEFAULT_TIME_LIMIT,
            tree_nodes: np.ndarray | None = None) -> Optimum:
    """The optimum of the information-agnostic LP over K = paths drafted paths (module
    docstring): the best block efficiency E[tau + 1] of any lossless prefix-matching
    verifier that sees the K drafts.

    instance: an Instance (a rational one is certified in its own numbers; a float one in
    the exact binary values of its rows) or a TreeModel (exact rows: rational). certify:
    False skips the exact certificate (the record says "not requested"). backend: "highs"
    or "cvxpy" (method "full" only). time_limit: seconds (methods "colgen" and "full"; None:
    none): when it is hit the record has value None, certified False, status "time_limit",
    a certificate text saying so and (colgen) details["lower_bound"], a lower bound on the
    optimum; it never raises for it. tree_nodes:
    [T] node indices of a fixed draft tree (then paths must be 1 and draft_sampling is
    ignored). Raises ValueError on bad arguments or an LP over the size limits.
    """
    inputs.choice("method", method, METHODS)  # BadArgument(field, "must be one of ...")
    inputs.choice("backend", backend, BACKENDS)
    if paths < 1:
        raise BadArgument("paths", f"must be >= 1, got {paths}")
    model, rational = _model_and_rational(instance, certify)
    if tree_nodes is not None:
        if paths != 1:
            raise BadArgument("tree_nodes", "a fixed draft tree has no K (paths must be 1)")
        return program_optimum(tree_lp(model, tree_nodes, exact=certify), backend, certify,
                               rational, method="tree")
    check_draft_sampling(draft_sampling)
    if method == "full":
        lp = full_lp(model, paths=paths, draft_sampling=draft_sampling, exact=certify)
        return program_optimum(lp, backend, certify, rational, method="full",
                               time_limit=time_limit)
    one_step = model.depth == 1 and draft_sampling == "iid"
    if method == "closed-form" or (method == "auto" and one_step):
        if not one_step:
            raise BadArgument("method", "the closed form applies at depth 1 with iid drafts only")
        return _closed_form_optimum(model, paths, certify, rational)
    if backend != "highs":
        raise BadArgument("backend", "column generation runs on HiGHS only; use method 'full' "
                         "for cvxpy")
    return _colgen_optimum(model, paths, draft_sampling, certify, rational, time_limit)


def _closed_form_optimum(model: TreeModel, paths: int, exact: bool,
                         rational: bool) -> Optimum:
    start = time.perf_counter()
    result = one_step_optimum(model.target[0], model.draft[0], paths)
    members = sorted(int(t) for t in result.threshold_set(0))
    value = result.value[0]
    record = Optimum(
        value=float(value), exact_value=Fraction(value) if exact else None, certified=exact,
        certificate=(
            f"exact closed form (L = 1, iid): min over the {model.vocab_size + 1} threshold sets "
            f"of p(H) + 1 - Q(H), attained at H of {len(members)} tokens; the bound holds for "
            "every H (weak duality), the minimum is attained (max-flow/min-cut, Hu et al. 2025; "
            "checked against the certified LP in tests/test_closed_form.py)")
        if exact else "not requested",
        status="optimal", method="closed-form", rational=rational, seconds=0.0,
        solve_seconds=None, size={"vocabulary": model.vocab_size, "threshold_sets":
                                  model.vocab_size + 1},
        details={"threshold_set": members})
    record.seconds = time.perf_counter() - start
    return record


def _colgen_optimum(model: TreeModel, paths: int, draft_sampling: str, certify: bool,
                    rational: bool, time_limit: float | None) -> Optimum:
    start = time.perf_counter()
    leaves = model.vocab_size ** model.depth
    if certify and draft_sampling == "iid" and leaves > EXACT_PHASE_MAX_LEAVES:
        return _bounded_optimum(model, paths, rational, time_limit, start,
                                f"{leaves:,} leaves > {EXACT_PHASE_MAX_LEAVES}: the exact "
                                "basis certificate is not attempted")
    result = solve_colgen(model, paths=paths, draft_sampling=draft_sampling, exact=certify,
                          certify=certify, time_limit=time_limit)
    cert = result.certificate
    certified = bool(cert is not None and cert.certified)
    mixture = selection_mixture(result) if result.status == "optimal" else None
    record = Optimum(
        value=float(result.value) if result.status == "optimal" else None, exact_value=None,
        certified=certified,
        certificate=cert.reason if cert is not None else (
            "not requested" if not certify else f"solver status {result.status}"),
        status=result.status, method="colgen", rational=rational, seconds=0.0,
        solve_seconds=result.seconds, certify_seconds=result.certify_seconds,
        size={"configurations": result.master.count_configurations(),
              "master_columns": result.lp.num_vars, "master_rows": result.lp.num_eq,
              "priorities": len(result.lp.meta["priorities"])},
        notes=list(result.notes), mixture=mixture,
        details={"iterations": result.iterations, "exact_rounds": result.exact_rounds})
    if result.status == "time_limit":
        record.details["lower_bound"] = (None if result.value != result.value
                                         else float(result.value))
        if cert is None or "time limit" not in cert.reason:
            record.certificate = (f"time limit {time_limit:g} s hit after {result.iterations} "
                                  "master solves (float phase)")
    duals = result.solution.duals if result.solution is not None else None
    if duals is not None:  # path rows first, then the N V matching rows (colgen.master_lp)
        record.matching_duals = np.asarray(duals[result.master.num_leaves:],
                                           dtype=np.float64).reshape(-1, model.vocab_size)
    if certified:
        record.exact_value = Fraction(cert.value)
        record.value = float(record.exact_value)
        # the mixture read off the exact point must realise the optimum: BV with r
        _, bv_value = node_optimum(model, exact=True, leaf_law=mixture.leaf_law)
        record.details["mixture_value_matches"] = bool(bv_value == record.exact_value)
        if bv_value != record.exact_value:
            record.certificate = (f"failed: mixture_value_matches (BV with the optimal skewed "
                                  f"law gives {float(bv_value):.17g}, the master "
                                  f"{float(record.exact_value):.17g})")
            record.certified = False
            record.exact_value = None
    if (certify and not record.certified and result.status == "optimal"
            and draft_sampling == "iid" and "time limit" not in record.certificate):
        # the exact certificate failed (not for lack of time): certify by exact bounds
        left = None if time_limit is None else time_limit - (time.perf_counter() - start)
        if left is None or left > 0:
            return _bounded_optimum(model, paths, rational, left, start,
                                    f"exact certificate failed ({record.certificate})")
    record.seconds = time.perf_counter() - start
    return record


def _bounded_optimum(model: TreeModel, paths: int, rational: bool, time_limit: float | None,
                     start: float, why: str) -> Optimum:
    """The optimum certified within w by exact bounds when they are at most BOUNDS_WIDTH apart
    (the Optimum docstring), from the node-budget master; at depth <= ANTICHAIN_MAX_DEPTH, if
    that has not converged in NODE_MASTER_FIRST_SOLVES solves, from the antichain form, and
    where that does not certify (not for lack of time), from the node-budget master again
    without the cap. Model exact, i.i.d. drafts."""
    notes = [why]
    if model.depth <= ANTICHAIN_MAX_DEPTH:
        if NODE_MASTER_FIRST_SOLVES:
            record = _node_master_optimum(model, paths, rational, time_limit, start, notes,
                                          NODE_MASTER_FIRST_SOLVES)
            if record.status != Status.ITERATION_LIMIT:
                return record
        notes = notes + [f"node-budget master: not converged in {NODE_MASTER_FIRST_SOLVES} "
                         "solves; the antichain form instead"]
        record = _antichain_optimum(model, paths, rational, _left(time_limit, start), start,
                                    notes)
        if record.status == Status.TIME_LIMIT:
            record.certificate = (f"time limit {time_limit:g} s hit: the node-budget master not "
                                  f"converged in {NODE_MASTER_FIRST_SOLVES} solves, then the "
                                  f"antichain form after {record.details['iterations']} rounds")
        if record.certified_within is not None or record.status == Status.TIME_LIMIT:
            return record
        notes = notes + [f"antichain form: {record.certificate}; the node-budget master "
                         "again, without a cap on its solves"]
    return _node_master_optimum(model, paths, rational, _left(time_limit, start), start, notes)


def _left(time_limit: float | None, start: float) -> float | None:
    """Seconds left of time_limit since perf_counter() start (None: no limit)."""
    return None if time_limit is None else time_limit - (time.perf_counter() - start)


def _antichain_optimum(model: TreeModel, paths: int, rational: bool, time_limit: float | None,
                       start: float, notes: list[str]) -> Optimum:
    """The optimum from the antichain form by in-out cutting planes, with exact bounds
    (speclp.lp.antichain.antichain_inout, antichain_bounds); model exact, i.i.d. drafts."""
    why = notes[0]
    run = antichain_inout(model, paths, time_limit)
    record = Optimum(
        value=None, exact_value=None, certified=False, certificate="", status=run.status,
        method="colgen", rational=rational, seconds=0.0, solve_seconds=run.seconds,
        size={"antichain_rows": run.cut_rows,
              "chain_rows": num_nodes(model.vocab_size, model.depth) - 1},
        notes=notes + [f"antichain form: {run.rounds} rounds, {run.cut_rows} antichain rows "
                       f"({run.stop})"] + run.notes,
        details={"iterations": run.rounds, "exact_rounds": 0, "master": "antichain form"})
    if run.status != "optimal":
        record.certificate = (f"time limit hit after {run.rounds} rounds"
                              if run.status == "time_limit" else f"HiGHS status {run.status}")
        if run.rounds:  # a point of the antichain form, feasible up to float error
            record.details["lower_bound"] = run.lower_float
        record.seconds = time.perf_counter() - start
        return record
    return _with_bounds(record, start, lambda: antichain_bounds(model, paths, run), lambda lo, up: (
        f"exact lower bound {lo:.15g} = 1 + sum of the final point made exactly feasible for "
        f"every antichain row, exact upper bound {up:.15g} = weak duality of the "
        f"{run.cut_rows} rows' rationalised duals (the antichain form, whose optimum is the "
        f"K-path optimum: docs/theory.md Theorem 7.5); {why}"), why)


def _with_bounds(record: Optimum, start: float, bounds: Callable[[], tuple[Fraction, Fraction]],
                 how: Callable[[float, float], str], why: str) -> Optimum:
    """Compute a route's exact bounds (timed as the certificate), put them on the record
    (_set_bounds, with the text how(lower, upper)) and finish it."""
    t0 = time.perf_counter()
    lower, upper = bounds()
    record.certify_seconds = time.perf_counter() - t0
    _set_bounds(record, lower, upper, how(float(lower), float(upper)), why)
    record.seconds = time.perf_counter() - start
    return record


def _set_bounds(record: Optimum, lower: Fraction, upper: Fraction, how: str, why: str) -> None:
    """Put exact bounds on a record: "certified within w" when 0 <= w <= BOUNDS_WIDTH."""
    width = upper - lower
    record.value = float(lower)
    record.details.update({"lower_bound_exact": fraction_text(lower),
                           "upper_bound_exact": fraction_text(upper), "bounds_width": float(width)})
    if 0 <= width <= BOUNDS_WIDTH:
        record.details["certified_within"] = float(width)
        record.certificate = f"certified within {float(width):.3g} (not exactly): {how}"
    else:
        record.certificate = (f"{why}; exact bounds [{float(lower):.15g}, {float(upper):.15g}] "
                              f"are {float(width):.3g} apart (> {float(BOUNDS_WIDTH):g}): NOT "
                              "certified")


def _node_master_optimum(model: TreeModel, paths: int, rational: bool, time_limit: float | None,
                         start: float, notes: list[str], max_iterations: int = 20_000
                         ) -> Optimum:
    """The optimum from the node-budget master with its exact bounds (node_master_bounds);
    status "iteration_limit" (no bounds) when max_iterations solves did not converge."""
    why = notes[0]
    master = master_data(model, paths, "iid", exact=True)
    result = solve_node_master(master, time_limit=time_limit, max_iterations=max_iterations)
    record = Optimum(
        value=None, exact_value=None, certified=False, certificate="", status=result.status,
        method="colgen", rational=rational, seconds=0.0, solve_seconds=result.seconds,
        size={"configurations": master.count_configurations(),
              "node_master_rows": 2 * (num_nodes(model.vocab_size, model.depth) - 1) + 1,
              "priorities": len(result.priorities)},
        notes=notes + [f"node-budget master: {result.iterations} solves"] + list(result.notes),
        details={"iterations": result.iterations, "exact_rounds": 0,
                 "master": "node-budget"})
    if result.status != "optimal":
        record.certificate = (f"time limit {time_limit:g} s hit after {result.iterations} "
                              "node-master solves" if result.status == "time_limit"
                              else f"node master: solver status {result.status}")
        if result.status == "time_limit" and result.value == result.value:
            record.details["lower_bound"] = result.value
        record.seconds = time.perf_counter() - start
        return record
    return _with_bounds(record, start, lambda: node_master_bounds(model, master, result),
                        lambda lo, up: (
        f"exact lower bound {lo:.15g} = BV against the node master's mixture of "
        f"{len(result.priorities)} priorities (weights rationalised), exact upper bound "
        f"{up:.15g} = weak duality of the rationalised duals with every priority priced exactly; "
        f"{why}"), why)
