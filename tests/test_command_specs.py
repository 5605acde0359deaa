"""The specs of `speclp solve`, `instance`, `check`, `lossless` and `prove` (issue 29): frozen,
construction is the validation (BadArgument naming the field), defaults are the library's, and
run gives the library's numbers."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from speclp.deadline import STOPPED, Deadline
from speclp.inputs import BadArgument
from speclp.lp.engine import Optimum, Status, optimum, program_optimum
from speclp.lp.instance import (
    Instance,
    bv_toy,
    dirichlet_instance,
    temperature_instance,
    ties_instance,
)
from speclp.lp.instance_spec import InstanceSpec
from speclp.lp.node import node_lp
from speclp.proofs import bv_optimal, class_claims
from speclp.proofs.certificates.check import check_file
from speclp.proofs.claim_specs import BV as BV_DEFAULTS
from speclp.proofs.claim_specs import CLASS as CLASS_DEFAULTS
from speclp.proofs.claim_specs import BvOptimalSpec, ClassClaimSpec, Verdict
from speclp.proofs.config_law import ZERO_TV, AcceptanceConfig, config_report
from speclp.proofs.lossless_spec import Losslessness, LosslessReport, LosslessSpec
from speclp.proofs.single_path import SolveResult, SolveSpec, solve
from speclp.proofs.symbolic.prove import prove
from speclp.proofs.symbolic.prove_spec import ProveSpec, ProveStatus
from speclp.verifiers.exact import exact_result


def default_of(function, name):
    return inspect.signature(function).parameters[name].default


def refused(make, field):
    with pytest.raises(BadArgument) as caught:
        make()
    assert caught.value.field == field, caught.value
    return caught.value.reason


# --- InstanceSpec ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"family": "uniform"}, "family"), ({"vocab": 1}, "vocab"), ({"depth": 0}, "depth"),
    ({"vocab": 1000, "depth": 3}, "vocab/depth"), ({"vocab": 3, "depth": 40}, "vocab/depth"),
    ({"family": "temperature", "alpha": 2.0}, "alpha"), ({"temperature": 2.0}, "temperature"),
    ({"family": "ties", "noise": 1.0}, "noise"), ({"alpha": 0.0}, "alpha"),
    ({"alpha": float("inf")}, "alpha"), ({"family": "temperature", "noise": -1.0}, "noise"),
    ({"seed": -1}, "seed"), ({"seed": 2**32}, "seed"), ({"denominator": 0}, "denominator"),
    ({"denominator": 10**9 + 1}, "denominator"), ({"vocab": 2.5}, "vocab"),
])
def test_instance_spec_refuses_a_wrong_field_naming_it(kwargs, field):
    refused(lambda: InstanceSpec(**kwargs), field)


def test_instance_spec_names_the_family_a_foreign_parameter_belongs_to():
    reason = refused(lambda: InstanceSpec("dirichlet", noise=0.1), "noise")
    assert reason == "does not apply to `family` dirichlet (it applies to `family` temperature)"


def test_instance_spec_defaults_are_the_generators_and_it_is_frozen():
    spec = InstanceSpec()
    assert (spec.alpha, spec.temperature, spec.noise) == (default_of(dirichlet_instance, "alpha"), None, None)
    hot = InstanceSpec("temperature")
    assert (hot.alpha, hot.temperature, hot.noise) == (
        None, default_of(temperature_instance, "temperature"), default_of(temperature_instance, "noise"))
    assert spec.seed == default_of(dirichlet_instance, "seed")
    assert InstanceSpec("ties").settings()["denominator"] == default_of(ties_instance, "denominator")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.vocab = 3


@pytest.mark.parametrize("spec, direct", [
    (InstanceSpec("dirichlet", 3, 2, alpha=0.5, seed=4),
     lambda: dirichlet_instance(3, 2, alpha=0.5, seed=4)),
    (InstanceSpec("dirichlet", 2, 2, seed=1, denominator=12),
     lambda: dirichlet_instance(2, 2, seed=1, denominator=12)),
    (InstanceSpec("temperature", 3, 1, temperature=2.0, noise=0.0, seed=2),
     lambda: temperature_instance(3, 1, temperature=2.0, noise=0.0, seed=2)),
    (InstanceSpec("ties", 3, 2, seed=5, denominator=6), lambda: ties_instance(3, 2, seed=5, denominator=6)),
], ids=["dirichlet", "dirichlet-rational", "temperature", "ties"])
def test_instance_spec_generates_the_generators_rows(spec, direct):
    got, expected = spec.generate(), direct().settled()
    assert got.rational == expected.rational and got.name == expected.name
    for a, b in ((got.target, expected.target), (got.draft, expected.draft)):
        assert np.array_equal(a, b)


def test_a_rounded_temperature_instance_has_rows_in_multiples_of_one_over_d():
    inst = InstanceSpec("temperature", 3, 2, seed=0, denominator=7).generate()
    assert inst.rational and inst.name.endswith("-d7")
    for row in inst.target_exact:
        assert sum(row) == 1 and all((Fraction(x) * 7).denominator == 1 for x in row)


# --- SolveSpec ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"backend": "glpk"}, "backend"), ({"builtin": "nope"}, "builtin"), ({"depth": 0}, "depth"),
    ({"depth": 40}, "depth"), ({"instance": bv_toy(1), "depth": 2}, "depth"),
    ({"instance": bv_toy(1), "builtin": "bv-toy"}, "builtin"),
])
def test_solve_spec_refuses_a_wrong_field_naming_it(kwargs, field):
    refused(lambda: SolveSpec(**kwargs), field)


def test_solve_spec_reads_a_given_instance_only_once_the_other_fields_are_checked():
    calls = []

    def read(spec):
        calls.append(spec.backend)
        return bv_toy(1)

    with pytest.raises(BadArgument):
        SolveSpec(read, backend="glpk")
    assert calls == []
    spec = SolveSpec(read)
    assert calls == ["highs"] and isinstance(spec.instance, Instance)
    assert spec.builtin is None and spec.depth is None


def test_solve_spec_defaults_are_the_libraries():
    from speclp.lp.instance import BUILTINS, builtin_instance
    spec = SolveSpec()
    assert spec.builtin == next(iter(BUILTINS)) and spec.depth == default_of(builtin_instance, "depth")
    assert spec.instance.depth == spec.depth


def test_solve_gives_bv_the_optimum_exactly_at_one_path():
    """docs/theory.md Theorem 3.3: BV attains the single-path optimum; the three LPs agree."""
    result = solve(SolveSpec(depth=3)).to_json()
    exact = {key: result[key]["exact"] for key in ("optimum", "lp_full", "lp_node")}
    assert len(set(exact.values())) == 1 and None not in exact.values()
    assert result["verifiers_exact"]["bv"] == exact["optimum"]
    assert result["gap_to_optimum"]["bv"] == "0"
    assert Fraction(result["gap_to_optimum"]["token"]) == (Fraction(exact["optimum"])
                                                           - Fraction(result["verifiers_exact"]["token"]))
    assert Fraction(result["gap_to_optimum"]["token"]) >= 0


# --- the claim specs ------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"trials": 0}, "trials"), ({"trials": 10**6 + 1}, "trials"), ({"vocab": 1}, "vocab"),
    ({"depth": 0}, "depth"), ({"seed": -1}, "seed"), ({"alpha": 0.0}, "alpha"),
    ({"denominator": -1}, "denominator"), ({"backend": "glpk"}, "backend"),
    ({"vocab": 1000, "depth": 9}, "vocab/depth"), ({"paths": 0}, "paths"),
    ({"draft_sampling": "x"}, "draft_sampling"), ({"against": "full"}, "against"),
    ({"vocab": 4, "depth": 3, "paths": 3}, "paths"),
    ({"paths": 30, "draft_sampling": "without-replacement"}, "paths"),
])
def test_class_claim_spec_refuses_a_wrong_field_naming_it(kwargs, field):
    refused(lambda: ClassClaimSpec("class-equals-full", **kwargs), field)


def test_node_form_compares_with_class_unless_told_and_refuses_anything_else():
    assert ClassClaimSpec("node-form").against == "class"
    assert ClassClaimSpec("node-form", against="full").against == "full"
    refused(lambda: ClassClaimSpec("node-form", against="node"), "against")
    refused(lambda: ClassClaimSpec("nope"), "claim")


@pytest.mark.parametrize("kwargs, field", [
    ({"trials": 0}, "trials"), ({"alpha": float("nan")}, "alpha"), ({"verifier": "nope"}, "verifier"),
    ({"vocab": 6, "depth": 6}, "vocab/depth"), ({"backend": "glpk"}, "backend"),
])
def test_bv_optimal_spec_refuses_a_wrong_field_naming_it(kwargs, field):
    refused(lambda: BvOptimalSpec(**kwargs), field)


def test_claim_spec_defaults_are_the_claim_settings():
    for spec, settings in ((ClassClaimSpec("class-equals-full"), class_claims.DEFAULTS),
                           (BvOptimalSpec(), bv_optimal.DEFAULTS)):
        for field in dataclasses.fields(settings):
            if hasattr(spec, field.name):
                assert getattr(spec, field.name) == getattr(settings, field.name), field.name


def test_claim_specs_run_the_library_checks(tmp_path):
    result = ClassClaimSpec("class-equals-full", trials=2, vocab=2, depth=1, paths=2,
                            save_dir=str(tmp_path)).run().to_json()
    assert result["passed"] and result["trials"] == 2 and result["paths"] == 2
    seen = []
    result = BvOptimalSpec(trials=2, vocab=2, depth=2, denominator=10, save_dir=str(tmp_path)).run(
        lambda seeds: (seen.append(s) or s for s in seeds)).to_json()
    assert result["passed"] and result["certified"] == 2 and result["rational"]
    assert seen == [0, 1]  # seeds seed .. seed + trials - 1, through the progress wrapper
    assert list(tmp_path.iterdir()) == []  # nothing failed: nothing saved


def test_check_node_form_refuses_a_bad_against_naming_it_before_any_work(tmp_path):
    reason = refused(lambda: class_claims.check_node_form(10**6, 6, 6, 9, against="nodes",
                                                          save_dir=str(tmp_path)), "against")
    assert "class, full" in reason and "'nodes'" in reason


# --- LosslessSpec ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"method": "nope"}, "method"), ({"method": "nope", "settings": {"weight": 0.5}}, "method"),
    ({"settings": {"weight": 0.5}}, "weight"),
    ({"method": "typical", "settings": {"threshold_acc": 0.5}}, "threshold_acc"),
    ({"settings": {"weight": 0.5}, "vocab": 1}, "weight"),  # a foreign setting before the instances
    ({"settings": {"nope": 1}}, "settings"), ({"settings": {"method": "typical"}}, "settings"),
    ({"vocab": 1}, "vocab"), ({"vocab": 7}, "vocab"), ({"depth": 0}, "depth"), ({"depth": 4}, "depth"),
    ({"trials": 0}, "trials"), ({"trials": 61}, "trials"), ({"seed": -1}, "seed"),
    ({"vocab": 1, "settings": {"temperature": 0}}, "vocab"),  # the instances before the configuration
    ({"settings": {"temperature": 0}}, "temperature"), ({"settings": {"target_top_k": 0}}, "target_top_k"),
    ({"settings": {"draft_top_p": 1.5}}, "draft_top_p"),
    ({"method": "threshold", "settings": {"threshold_acc": 1.5}}, "threshold_acc"),
    ({"method": "ensemble", "settings": {"weight": 2}}, "weight"),
])
def test_lossless_spec_refuses_a_wrong_field_naming_it(kwargs, field):
    refused(lambda: LosslessSpec(**kwargs), field)


def test_a_setting_of_another_method_is_refused_naming_the_method():
    reason = refused(lambda: LosslessSpec("typical", {"weight": 1.0}), "weight")
    assert reason == "does not apply to `method` typical"  # the CLI writes `method` as --method


def test_lossless_spec_defaults_are_the_libraries_and_it_is_frozen():
    spec = LosslessSpec()
    assert spec.config == AcceptanceConfig()
    for name in ("vocab", "depth", "trials", "seed"):
        assert getattr(spec, name) == default_of(config_report, name), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.vocab = 4
    given = {"weight": 0.25}
    spec = LosslessSpec("ensemble", given)
    given["weight"] = 1.0  # the spec keeps its own copy, read-only
    assert spec.config.weight == 0.25 and spec.config.method == "ensemble"
    with pytest.raises(TypeError):
        spec.settings["weight"] = 1.0


def test_lossless_spec_runs_the_report():
    """Speculative sampling is lossless (Leviathan et al.: a theorem, exact TV 0); an ensemble with
    w = 0 is speculative sampling against the draft itself, which accepts every draft: its output
    law is the draft's, away from the target's on these instances."""
    report = LosslessSpec(vocab=2, depth=1, trials=2).run().to_json()
    assert report["lossless"] and report["lossless_by_theorem"] and report["max_tv"] <= ZERO_TV
    assert len(report["instances"]) == 2 and report["vocab"] == 2 and report["depth"] == 1
    report = LosslessSpec("ensemble", {"weight": 0.0}, vocab=2, depth=1, trials=2).run().to_json()
    assert not report["lossless"] and report["max_tv"] > 1e-3
    assert report["config"]["weight"] == 0.0


# --- time limits of lossless and check (issue 29): a deadline checked between units ---------

class Ticks:
    """A clock that reads 0, 1, 2, ... (one tick a call): a deadline of L seconds, made at tick
    0, has passed at the check that reads ceil(L), whatever the speed of the machine."""

    def __init__(self) -> None:
        self.now = -1

    def __call__(self) -> float:
        self.now += 1
        return float(self.now)


def test_a_deadline_passes_at_its_end_on_its_own_clock():
    clock = Ticks()
    deadline = Deadline(2.5, clock)  # made at 0: ends at 2.5
    assert [deadline.passed for _ in range(4)] == [False, False, True, True]  # read at 1, 2, 3, 4
    assert deadline.reason == "time limit of 2.5 s"
    never = Deadline(None, Ticks())
    assert not any(never.passed for _ in range(100))
    assert not Deadline(1.0, lambda: 7.0).passed  # a clock that stands still never reaches it


TIME_LIMITED = {
    "lossless": lambda **kw: LosslessSpec(vocab=2, depth=1, trials=4, **kw),
    "class-equals-full": lambda **kw: ClassClaimSpec("class-equals-full", trials=4, vocab=2, depth=1,
                                                     paths=2, **kw),
    "node-form": lambda **kw: ClassClaimSpec("node-form", trials=4, vocab=2, depth=1, paths=2, **kw),
    "bv-optimal": lambda **kw: BvOptimalSpec(trials=4, vocab=2, depth=2, **kw),
}


@pytest.mark.parametrize("name", TIME_LIMITED)
@pytest.mark.parametrize("limit", [0, 0.0, -1.0, float("nan"), float("inf"), "5", True])
def test_a_spec_refuses_a_bad_time_limit_naming_it(name, limit):
    refused(lambda: TIME_LIMITED[name](time_limit=limit), "time_limit")


@pytest.mark.parametrize("name", TIME_LIMITED)
def test_no_time_limit_is_the_default(name):
    assert TIME_LIMITED[name]().time_limit is None


@pytest.mark.parametrize("name", TIME_LIMITED)
def test_a_time_limit_stops_between_units_keeping_those_done(name, tmp_path):
    """A limit of 2.5 ticks: the checks before units 0 and 1 read 1 and 2, the one before unit 2
    reads 3: two units done, then STOPPED (no verdict, nothing saved). Without a limit (and
    with one the clock never reaches) the run is the unlimited one, key for key."""
    extra = {} if name == "lossless" else {"save_dir": str(tmp_path / "ce")}
    make = TIME_LIMITED[name]
    full = make(**extra).run().to_json()
    assert timeless(make(time_limit=1.0, **extra).run(clock=lambda: 0.0).to_json()) == timeless(full)
    assert "status" not in full and "stopped" not in full  # an unlimited answer is as before
    result = make(time_limit=2.5, **extra).run(clock=Ticks())
    data = result.to_json()
    assert result.status == STOPPED == data["status"] == "stopped: time limit"
    assert data["stopped"] == "time limit of 2.5 s" and data["trials_run"] == 2 and data["trials"] == 4
    assert not (tmp_path / "ce").exists()
    if name == "lossless":
        assert result.status is Losslessness.STOPPED and not result.lossless and data["lossless"] is None
        assert data["instances"] == full["instances"][:2]  # the two instances done, as in a full run
        assert result.max_tv is None and result.worst_instance is None
        return
    assert result.status is Verdict.STOPPED and not result.passed and not data["passed"]
    assert result.trials_run == 2 and result.kind is None and result.counterexample is None
    if name == "bv-optimal":
        assert data["certified"] == 2  # both done certified, as in the full run (4 of 4)
        assert full["certified"] == 4
    else:
        assert sum(data["relations"]["class vs full"].values()) == 2
        assert data["relations"]["class vs full"]["="] == 2  # Theorem 5.5 on both


@pytest.mark.parametrize("name", TIME_LIMITED)
def test_an_expired_time_limit_stops_before_the_first_unit(name, tmp_path):
    extra = {} if name == "lossless" else {"save_dir": str(tmp_path / "ce")}
    times = iter([0.0, 10.0])
    data = TIME_LIMITED[name](time_limit=1.0, **extra).run(clock=lambda: next(times)).to_json()
    assert data["status"] == STOPPED and data["trials_run"] == 0 and not (tmp_path / "ce").exists()


# --- ProveSpec ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"claim": "nope"}, "claim"), ({"vocab": 1}, "vocab"), ({"vocab": 2.5}, "vocab"), ({"depth": 0}, "depth"),
    ({"vocab": 4}, "vocab/depth"), ({"vocab": 2, "depth": 4}, "vocab/depth"), ({"paths": 2}, "paths"),
    ({"claim": "l1-optimum", "depth": 2}, "depth"), ({"claim": "l1-optimum", "paths": 5}, "paths"),
    ({"claim": "l1-optimum", "paths": 3, "draft_sampling": "without-replacement"}, "paths"),
    ({"draft_sampling": "nope"}, "draft_sampling"), ({"draft_sampling": "without-replacement"},
                                                     "draft_sampling"),
    ({"seed": -1}, "seed"), ({"time_limit": 0}, "time_limit"), ({"time_limit": float("nan")}, "time_limit"),
])
def test_prove_spec_refuses_a_wrong_field_naming_it(kwargs, field):
    refused(lambda: ProveSpec(**({"claim": "bv-optimal"} | kwargs)), field)


def test_prove_spec_defaults_are_the_libraries():
    spec = ProveSpec("bv-optimal")
    for name in ("paths", "draft_sampling", "seed"):
        assert getattr(spec, name) == default_of(prove, name), name
    assert (spec.vocab, spec.depth, spec.all_cells) == (2, 1, False)
    assert spec.stem == "bv-optimal-V2-L1"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.vocab = 3


def test_prove_spec_writes_a_proof_the_standalone_checker_accepts(tmp_path):
    spec = ProveSpec("bv-optimal", out=str(tmp_path / "proofs"), save_dir=str(tmp_path / "ce"))
    result = spec.run()
    run, summary = result.proof, result.to_json()
    assert summary["status"] == "proved" and summary["proved"] and run.complete
    written = tmp_path / "proofs" / "bv-optimal-V2-L1.json"
    assert summary["json"] == str(written) and (tmp_path / "proofs" / "bv-optimal-V2-L1.md").exists()
    assert check_file(str(written))["claim"] == "bv-optimal"  # re-derived from the file alone
    assert not (tmp_path / "ce").exists()  # nothing refuted: nothing saved


def test_prove_spec_stopped_by_its_time_limit_writes_nothing(tmp_path):
    spec = ProveSpec("bv-optimal", vocab=3, depth=2, out=str(tmp_path / "proofs"), time_limit=1e-9)
    result = spec.run()
    run, summary = result.proof, result.to_json()
    assert summary["status"] == "stopped: time limit" and not summary["proved"]
    assert run.stopped.startswith("time limit") and not (tmp_path / "proofs").exists()


# --- the typed results (issue 29): to_json() is the library's dict, the fields agree with it --

def timeless(obj):
    """A JSON object without its timings (keys naming seconds): what two runs share."""
    if isinstance(obj, dict):
        return {k: timeless(v) for k, v in obj.items() if "seconds" not in k}
    if isinstance(obj, list):
        return [timeless(v) for v in obj]
    return obj


@pytest.mark.parametrize("make", [lambda: bv_toy(2), lambda: dirichlet_instance(3, 2, seed=2),
                                  lambda: dirichlet_instance(2, 2, seed=1, denominator=12)])
def test_solve_result_is_typed_and_its_json_is_the_engines_records(make):
    inst = make()
    result = solve(SolveSpec(inst))
    data = result.to_json()
    assert json.loads(json.dumps(data)) == data  # plain JSON
    assert data["instance"] == {"name": inst.name, "vocab_size": inst.vocab_size, "depth": inst.depth,
                                "rational": inst.rational, "notes": inst.notes}
    independent = {"optimum": optimum(inst, 1), "lp_full": optimum(inst, 1, method="full"),
                   "lp_node": program_optimum(node_lp(inst), "highs", rational=inst.rational)}
    for key, record in independent.items():
        assert timeless(data[key]) == timeless(record.to_json()), key
        typed = getattr(result, key)
        assert isinstance(typed, Optimum) and typed.status is Status.OPTIMAL
        assert (typed.solver_status, typed.value, typed.certified) == (
            data[key]["status"], data[key]["value"], data[key]["certified"])
        if inst.rational:
            assert typed.exact_value == Fraction(data[key]["exact"])
    model = inst.model(exact=inst.rational)
    full = independent["lp_full"]
    for name in ("bv", "token"):
        efficiency = exact_result(model, name).block_efficiency
        assert result.verifiers[name] == data["verifiers"][name] == float(efficiency)
        if inst.rational:
            assert Fraction(data["verifiers_exact"][name]) == efficiency
            assert result.exact_gap(name) == Fraction(data["gap_to_optimum"][name]) \
                == full.exact_value - efficiency
        else:
            assert data["verifiers_exact"][name] is None and result.exact_gap(name) is None
            assert data["gap_to_optimum"][name] == full.value - float(efficiency)
    assert result.rational is inst.rational
    assert SolveResult.from_json({**data, "meaning": "x"}).to_json() == data
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.optimum = None


def test_claim_check_result_is_the_library_dict_passed(tmp_path):
    kwargs = dict(trials=2, vocab=2, depth=1, paths=2)
    result = ClassClaimSpec("class-equals-full", save_dir=str(tmp_path), **kwargs).run()
    library = class_claims.check_class_equals_full(
        2, 2, 1, 2, seed=CLASS_DEFAULTS.seed, alpha=CLASS_DEFAULTS.alpha,
        denominator=CLASS_DEFAULTS.denominator or None, draft_sampling=CLASS_DEFAULTS.draft_sampling,
        backend=CLASS_DEFAULTS.backend, save_dir=str(tmp_path))
    data = result.to_json()
    assert timeless(data) == timeless(library) and data["passed"] is True
    assert result.status is Verdict.PASSED and result.status == "passed" and result.passed
    assert (result.claim, result.trials_run, result.kind, result.counterexample, result.saved) == (
        "class-equals-full", 2, None, None, None)
    data["claim"] = "changed"  # a copy: the result stays as it was
    assert result.to_json()["claim"] == "class-equals-full" and result.record["claim"] == "class-equals-full"
    bv = BvOptimalSpec(trials=2, vocab=2, depth=2, denominator=10, save_dir=str(tmp_path)).run()
    library = bv_optimal.check_bv_optimal(2, 2, 2, seed=BV_DEFAULTS.seed, alpha=BV_DEFAULTS.alpha,
                                          denominator=10, verifier="bv", backend=BV_DEFAULTS.backend,
                                          save_dir=str(tmp_path))
    assert timeless(bv.to_json()) == timeless(library)
    assert bv.passed and bv.claim == "bv-optimal" and bv.trials_run == 2 and bv.bugs == ()


def test_claim_check_result_of_a_failed_check_names_its_counterexample(tmp_path):
    """Token-level verification claimed optimal at one path (docs/theory.md Theorem 3.3 says
    BV is): it falls below the LP optimum on these Dirichlet float instances, as the
    library's own run beside it says too; the result is the library's failed dict."""
    spec = BvOptimalSpec(trials=3, vocab=2, depth=2, verifier="token", save_dir=str(tmp_path / "ce"))
    result = spec.run()
    data = result.to_json()
    library = bv_optimal.check_bv_optimal(3, 2, 2, seed=BV_DEFAULTS.seed, alpha=BV_DEFAULTS.alpha,
                                          denominator=None, verifier="token", backend=BV_DEFAULTS.backend,
                                          save_dir=str(tmp_path / "again"))
    assert data["passed"] is False and library["passed"] is False
    assert timeless({**data, "saved": None}) == timeless({**library, "saved": None})
    assert result.status is Verdict.FAILED and not result.passed and result.kind == "counterexample"
    assert result.trials_run == data["trials_run"] and result.saved == data["saved"]
    assert dict(result.counterexample) == data["counterexample"]
    assert (tmp_path / "ce").is_dir() and any((tmp_path / "ce").iterdir())


def test_lossless_report_is_config_reports_dict_with_a_typed_verdict():
    for method, settings, status in (("speculative", {}, Losslessness.THEOREM),
                                     ("ensemble", {"weight": 0.0}, Losslessness.LOSSY)):
        spec = LosslessSpec(method, settings, vocab=2, depth=1, trials=2)
        report = spec.run()
        data = report.to_json()
        assert data == config_report(AcceptanceConfig(method=method, **settings), 2, 1, 2, 0)
        assert report.status is status and report.lossless == data["lossless"]
        assert (status is Losslessness.THEOREM) == data["lossless_by_theorem"]
        assert report.config == spec.config and report.max_tv == data["max_tv"]
        assert report.worst_instance == data["worst_instance"]
        assert [dict(row) for row in report.instances] == data["instances"]
        assert LosslessReport.from_json(data).to_json() == data


def test_prove_result_is_the_summary_with_a_typed_status(tmp_path):
    spec = ProveSpec("bv-optimal", out=str(tmp_path / "proofs"), save_dir=str(tmp_path / "ce"))
    result = spec.run()
    data = result.to_json()
    library = prove("bv-optimal", 2, 1).summary()
    assert timeless(data) == timeless({**library, "status": "proved", "json": str(tmp_path / "proofs" /
                                       "bv-optimal-V2-L1.json"), "markdown": str(tmp_path / "proofs" /
                                                                                 "bv-optimal-V2-L1.md")})
    assert result.status is ProveStatus.PROVED and result.proved and data["proved"]
    assert dict(result.cells) == data["cells"] == result.proof.counts
    assert (result.json_file, result.markdown_file) == (data["json"], data["markdown"])
    assert result.counterexample is None and result.counterexample_saved is None
    stopped = ProveSpec("bv-optimal", vocab=3, depth=2, out=str(tmp_path / "p2"), time_limit=1e-9).run()
    data = stopped.to_json()
    assert stopped.status is ProveStatus.STOPPED and data["status"] == stopped.status == "stopped: time limit"
    assert not stopped.proved and not data["proved"] and stopped.json_file is None


# --- the typed results of instance, sweep, plot, bench, trees and realgap ----------------------

def test_instance_result_is_the_written_file_described(tmp_path):
    from speclp.cli.instance import write_instance
    from speclp.lp.instance import load_instance
    from speclp.lp.instance_spec import InstanceResult

    spec = InstanceSpec("dirichlet", vocab=3, depth=2, seed=4, denominator=12)
    result = write_instance(spec, tmp_path / "i.json", force=False)
    path = str(tmp_path / "i.json")
    back = load_instance(path)
    assert isinstance(result, InstanceResult)
    assert result.to_json() == {  # the dict the command built by hand before
        "path": path, "name": dirichlet_instance(3, 2, seed=4, denominator=12).name, "vocab_size": 3,
        "depth": 2, "rational": True, "rows_per_model": (3**3 - 1) // (3 - 1),  # prefixes of length 0..L
        "settings": {"family": "dirichlet", "vocab": 3, "depth": 2, "seed": 4, "denominator": 12,
                     "alpha": default_of(dirichlet_instance, "alpha")},
        "next": [f"speclp solve {path}", f"speclp gap {path} --paths 2"]}
    data = result.to_json()
    assert list(data) == ["path", "name", "vocab_size", "depth", "rational", "rows_per_model", "settings",
                          "next"]  # the order of the JSON object
    assert (result.path, result.vocab_size, result.rows_per_model, dict(result.settings)) == (
        data["path"], back.vocab_size, back.target.shape[0], data["settings"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.path = "x"  # type: ignore[misc]


def timeless_sweep(data):
    return {k: v for k, v in data.items() if k not in ("run_id", "seconds", "out", "results_file")}


def test_sweep_result_is_run_sweeps_summary_with_its_rows_summarised(tmp_path):
    from speclp.experiments.sweep import (
        SweepResult,
        SweepSpec,
        SweepStatus,
        load_results,
        run_sweep,
        summarize,
    )

    spec = SweepSpec(vocab=(2,), depth=(1,), paths=(1, 2), alpha=(1.0,), trials=2)
    raw = run_sweep(spec, tmp_path / "old")
    old = {**raw, "summary": summarize(load_results(raw["out"]))}  # the old command's object
    assert SweepResult.of_run(raw).to_json() == old
    result = spec.run(tmp_path / "new")
    data = result.to_json()
    assert timeless_sweep(data) == timeless_sweep(old) and list(data) == list(old)
    assert result.status is SweepStatus.COMPLETE and result.tasks == 4 and result.rows == data["rows"] > 0
    assert (result.complete, result.violations, result.errors) == (True, (), ())
    assert result.summary == data["summary"] and result.summary["instances"] == 4  # (instance, K) ids
    violated = dataclasses.replace(result, violations=("x: bv above the optimum",))
    assert violated.status is SweepStatus.VIOLATED
    assert violated.to_json()["violations"] == ["x: bv above the optimum"]
    assert dataclasses.replace(result, complete=False).status is SweepStatus.INCOMPLETE


def test_plot_result_keeps_either_objects_keys_in_order():
    from speclp.experiments.sweep import PlotResult

    sweep = {"out": "f", "kind": "sweep", "instances": 3, "figures": {"gap": {"files": ["a.png"]}}}
    records = {"out": "g", "kind": "bench+trees", "figures": {}, "skipped": {"x.jsonl": "why"}}
    for drawn in (sweep, records):
        data = PlotResult.of(drawn).to_json()
        assert data == drawn and list(data) == list(drawn)
    assert PlotResult.of(sweep).instances == 3 and PlotResult.of(records).skipped == {"x.jsonl": "why"}


def test_bench_result_rows_are_its_cells():
    from speclp.experiments.bench import BenchCell, BenchResult

    config = {"pair": "a,b", "drive": "bv", "paths": 2, "depth": 3, "temperature": 0.0}
    cell = BenchCell(config, 1, 2, {"bv": {"estimate": 1.5}}, {}, {}, {"prompts": 2}, None)
    result = BenchResult("f.jsonl", 1, 2, (cell,), ("fig.png",))
    assert result.to_json() == {
        "file": "f.jsonl", "computed": 1, "reused": 2,
        "runs": [{"pair": "a,b", "drive": "bv", "paths": 1, "depth": 2, "temperature": 0.0, "tree_paths": 2,
                  "tree_depth": 3, "verifiers": {"bv": {"estimate": 1.5}}, "differences": {}, "relative": {},
                  "prompts": 2, "realised": None}],
        "figures": ["fig.png"]}
    assert result.cells[0].estimate("bv") == result.to_json()["runs"][0]["verifiers"]["bv"]["estimate"]


def test_trees_and_realgap_results_are_their_objects_with_typed_fields():
    from speclp.experiments.realgap import MODE_FULL, MODE_RENORMALISED, RealgapResult, RealgapStatus
    from speclp.experiments.trees import TreesResult, TreesStatus

    trees = {"pair": "p", "file": "t.jsonl", "computed": 1, "reused": 2, "contexts": 3, "stopped": None,
             "out": "o", "figures": ["a.png"], "notes": [], "engine": {}, "summary": [{"rule": "draft"}]}
    result = TreesResult.from_json(trees)
    assert result.to_json() == trees and list(result.to_json()) == list(trees)
    assert (result.status, result.pair, result.file, result.computed, result.reused, result.contexts) == (
        TreesStatus.COMPLETE, "p", "t.jsonl", 1, 2, 3)
    assert [dict(r) for r in result.summary] == trees["summary"] and result.figures == ("a.png",)
    stopped = TreesResult.from_json({**trees, "stopped": ["contexts: time limit of 1 s"]})
    assert stopped.status is TreesStatus.STOPPED and stopped.stopped == ("contexts: time limit of 1 s",)
    result.to_json()["summary"].append("changed")  # a copy: the result is unchanged
    assert result.to_json() == trees

    full = {"pair": "p", "instances": MODE_FULL, "file": "r.jsonl", "computed": 2, "reused": 0,
            "failures": [], "records": 2, "figures": [], "contexts": [], "summary": [{"depth": 1}]}
    result = RealgapResult.from_json(full)
    assert result.to_json() == full and result.status is RealgapStatus.BRACKETED
    assert (result.mode, result.records, result.failures) == (MODE_FULL, 2, ())
    failed = RealgapResult.from_json({**full, "failures": ["p0 context 0 L=1: bv above"]})
    assert failed.status is RealgapStatus.FAILED and failed.failures == ("p0 context 0 L=1: bv above",)
    renormalised = {k: v for k, v in full.items() if k not in ("failures", "contexts")}
    renormalised = RealgapResult.from_json({**renormalised, "instances": MODE_RENORMALISED, "label": "T"})
    assert renormalised.status is RealgapStatus.UNBOUNDED and renormalised.failures == ()


# --- realgap and trees: the library returns the typed result (no CLI) -----------------------

def _tiny_loader(name, prompts, loads):
    """A loader of tiny models standing in for the pair `name` (tests/tiny_models), counting
    its calls; each prompt gets its tokens as cli.trees.load_run_pair gives them."""
    from tiny_models import tiny_loaded_pair

    def load():
        loads.append(name)
        pair = tiny_loaded_pair(name)
        for p in prompts:
            p["tokens"] = pair.target.tokenizer.encode(p["text"])
        return pair
    return load


def test_realgap_full_is_the_typed_result_of_the_library_and_resumes_without_a_model(tmp_path):
    """At L = 1, K = 1 the optimum is 1 + sum min(p, q) (closed form) and BV attains it
    (docs/theory.md Theorem 3.3): the upper bound and BV's exact value agree in every context."""
    from speclp.experiments.prompts import read_prompts
    from speclp.experiments.realgap import RealgapResult, RealgapStatus, realgap_full
    from speclp.experiments.realgap_spec import RealgapSpec

    spec = RealgapSpec(pair="smollm2-135m", prompts="humaneval:1", depths=(1,), paths=(1, 2),
                       widths=(3,), samples=8, batch=8, contexts_per_prompt=2, every=2,
                       verifiers=("bv", "gbv"))
    prompts, loads = read_prompts(spec.prompts, seed=spec.prompt_seed), []
    result = realgap_full(spec, prompts, tmp_path, _tiny_loader(spec.pair, prompts, loads))
    assert isinstance(result, RealgapResult) and result.status is RealgapStatus.BRACKETED
    assert loads == ["smollm2-135m"] and result.figures == () and result.failures == ()
    assert result.computed == result.records == 2 and result.reused == 0  # 1 prompt x 2 contexts x L = 1
    data = result.to_json()
    for context in data["contexts"]:
        upper, bv = context["by_paths"]["1"]["upper"], context["by_paths"]["1"]["verifiers"]["bv"]
        assert upper.endswith("(closed form)") and upper.split()[0] == f"{bv[0]:.4f}"
    again = realgap_full(spec, prompts, tmp_path, lambda: pytest.fail("a model was loaded"))
    assert (again.computed, again.reused) == (0, 2)
    assert again.to_json()["contexts"] == data["contexts"]


def test_trees_result_is_the_typed_result_of_the_library_and_stops_at_its_deadline(tmp_path):
    from speclp.experiments.prompts import read_prompts
    from speclp.experiments.trees import TreesResult, TreesSpec, TreesStatus, trees_result

    spec = TreesSpec(pair="smollm2-135m", prompts="humaneval:1", budgets=[1, 2], top=2, depth=2,
                     contexts_per_prompt=2, every=2, no_timing=True)
    prompts, loads = read_prompts(spec.prompts), []
    times = itertools.chain([0.0], itertools.repeat(10.0))  # made at 0, then 10: over before any context
    stopped = trees_result(spec, prompts, tmp_path / "a", _tiny_loader(spec.pair, prompts, loads),
                           Deadline(1.0, lambda: next(times)))
    assert stopped.status is TreesStatus.STOPPED and stopped.computed == stopped.contexts == 0
    assert stopped.stopped[0].startswith("contexts: time limit of 1 s (0 of 2 done")
    result = trees_result(spec, prompts, tmp_path / "b", _tiny_loader(spec.pair, prompts, loads))
    assert isinstance(result, TreesResult) and result.status is TreesStatus.COMPLETE
    assert result.computed == result.contexts == 2 and result.figures == ()
    budgets = {(row["rule"], row["budget"]) for row in result.summary}
    assert {(rule, n) for rule in spec.rules for n in (1, 2)} <= budgets
    again = trees_result(spec, prompts, tmp_path / "b", lambda: pytest.fail("a model was loaded"))
    assert (again.computed, again.reused) == (0, 2)
    assert again.to_json()["summary"] == result.to_json()["summary"]
