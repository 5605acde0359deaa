"""The specs of `speclp solve`, `instance` and `check` (issue 29): frozen, construction is the
validation (BadArgument naming the field), defaults are the library's, and run gives the
library's numbers."""

from __future__ import annotations

import dataclasses
import inspect
from fractions import Fraction

import numpy as np
import pytest
from speclp.inputs import BadArgument
from speclp.lp.instance import (
    Instance,
    bv_toy,
    dirichlet_instance,
    temperature_instance,
    ties_instance,
)
from speclp.lp.instance_spec import InstanceSpec
from speclp.proofs import bv_optimal, class_claims
from speclp.proofs.claim_specs import BvOptimalSpec, ClassClaimSpec
from speclp.proofs.single_path import SolveSpec, solve


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
    result = solve(SolveSpec(depth=3))
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
                            save_dir=str(tmp_path)).run()
    assert result["passed"] and result["trials"] == 2 and result["paths"] == 2
    seen = []
    result = BvOptimalSpec(trials=2, vocab=2, depth=2, denominator=10, save_dir=str(tmp_path)).run(
        lambda seeds: (seen.append(s) or s for s in seeds))
    assert result["passed"] and result["certified"] == 2 and result["rational"]
    assert seen == [0, 1]  # seeds seed .. seed + trials - 1, through the progress wrapper
    assert list(tmp_path.iterdir()) == []  # nothing failed: nothing saved
