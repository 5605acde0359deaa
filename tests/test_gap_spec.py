"""GapSpec in, GapResult out (issue 29): construction is the validation (BadArgument naming
the field), the result is inspectable data whose to_json() is gap()'s dict."""

from __future__ import annotations

from fractions import Fraction

import pytest
from speclp.inputs import BadArgument
from speclp.lp.engine import Optimum, Status, optimum
from speclp.lp.instance import bv_toy, dirichlet_instance
from speclp.proofs.gap import CLASS_SOURCE, GapResult, GapSpec, UnknownVerifier, gap


@pytest.mark.parametrize("changes, field", [
    ({"paths": 0}, "paths"), ({"paths": 1.5}, "paths"), ({"draft_sampling": "x"}, "draft_sampling"),
    ({"backend": "glpk"}, "backend"), ({"method": "simplex"}, "method"),
    ({"max_enumerated": 0}, "max_enumerated"), ({"samples": 1}, "samples"), ({"seed": -1}, "seed"),
    ({"time_limit": 0.0}, "time_limit"), ({"time_limit": float("nan")}, "time_limit"),
    ({"verifiers": ("bv", "nope")}, "verifiers"),
])
def test_a_wrong_field_is_refused_at_construction(changes, field):
    with pytest.raises(BadArgument) as caught:
        GapSpec(bv_toy(1), **changes)
    assert caught.value.field == field
    if field == "verifiers":
        assert isinstance(caught.value, UnknownVerifier) and "'nope'" in caught.value.reason


def test_an_empty_verifier_list_is_refused_once_by_the_spec():
    """No verifier to compare: refused by the spec (the one check; the CLI parses only)."""
    with pytest.raises(BadArgument) as caught:
        GapSpec(bv_toy(1), verifiers=())
    assert (caught.value.field, caught.value.reason) == ("verifiers", "give at least one verifier name")
    from speclp.cli.gap import parse_verifiers
    assert parse_verifiers("--verifiers", " , ") == []


def test_defaults_are_gaps_defaults():
    import inspect
    defaults = {k: v.default for k, v in inspect.signature(gap).parameters.items()
                if v.default is not inspect.Parameter.empty}
    spec = GapSpec(bv_toy(1))
    for name, value in defaults.items():
        assert getattr(spec, name) == value, name


def test_result_is_gaps_dict_with_typed_rows():
    inst = dirichlet_instance(2, 2, seed=3, denominator=12)
    spec = GapSpec(inst, paths=2, verifiers=("bv", "nss"))
    result = spec.run()
    assert isinstance(result, GapResult)
    direct = gap(inst, 2, verifiers=["bv", "nss"])
    direct["optimum"].pop("exact_value")
    got = result.to_json()
    for record in (direct, got):  # wall times differ between the two runs
        record.pop("seconds")
        for key in ("seconds", "solve_seconds", "certify_seconds"):
            record["optimum"].pop(key, None)
        for row in record["verifiers"].values():
            row.pop("seconds")
    assert got == direct
    assert [r.name for r in result.rows] == ["bv", "nss"]
    bv = result.row("bv")
    assert bv.block_efficiency == bv.record["block_efficiency"]
    assert bv.ratio == pytest.approx(bv.block_efficiency / result.optimum.value, rel=1e-12)
    assert result.exact_value == Fraction(result.optimum.exact)  # the exact optimum, rational
    assert bv.block_efficiency <= result.optimum.value + 1e-9  # BV never beats the optimum
    with pytest.raises(KeyError):
        result.row("gbv")


# --- the optimum is the engine's typed record (issue 29, item 2) ---------------------------

def test_the_optimum_is_a_typed_record_equal_to_the_enumerated_lp():
    """result.optimum is an lp.engine.Optimum (status a Status, certified, exact_value), and
    its exact value is the enumerated full LP's (a second implementation of the optimum)."""
    inst = dirichlet_instance(2, 2, seed=3, denominator=12)
    result = GapSpec(inst, paths=2, verifiers=("bv",)).run()
    record = result.optimum
    assert isinstance(record, Optimum) and record.status is Status.OPTIMAL
    assert record.certified and record.certified_within is None and record.bounds is None
    assert record.exact_value == optimum(inst, 2, method="full").exact_value
    assert result.class_optimum == {"value": record.value, "exact": record.exact,
                                    "certified": True, "source": CLASS_SOURCE}
    assert result.method == record.method == result.to_json()["optimum"]["method"]


def test_a_bounded_optimum_shows_its_exact_bounds_as_attributes():
    """V^L = 144 leaves > 128: certified within w by exact bounds, not exactly. The bounds are
    Fractions lower <= upper, w = upper - lower, and no lossless verifier's exact block
    efficiency exceeds the upper bound (the verifier laws are a second computation)."""
    inst = dirichlet_instance(12, 2, seed=3)
    result = GapSpec(inst, paths=2, verifiers=("bv", "nss")).run()
    record = result.optimum
    assert record.status is Status.OPTIMAL and not record.certified
    lower, upper = record.bounds
    assert isinstance(lower, Fraction) and lower <= upper
    assert record.certified_within == float(upper - lower) <= 1e-9
    assert record.value == float(lower)
    for row in result.rows:
        assert row.block_efficiency <= float(upper) + 1e-12, row.name
    assert result.to_json()["optimum"]["certified_within"] == record.certified_within


@pytest.mark.parametrize("inst", [dirichlet_instance(2, 2, seed=3, denominator=12),
                                  dirichlet_instance(3, 2, seed=1)], ids=["rational", "float"])
def test_from_json_gives_back_the_same_result(inst):
    """A result rebuilt from its JSON (resume) has the same JSON, a typed optimum, and (on a
    rational instance) the same exact optimum."""
    spec = GapSpec(inst, paths=2, verifiers=("bv", "specinfer"))
    result = spec.run()
    back = GapResult.from_json(spec, result.to_json())
    assert back.to_json() == result.to_json()
    assert isinstance(back.optimum, Optimum) and back.optimum.status is Status.OPTIMAL
    assert back.exact_value == (result.exact_value if inst.rational else None)
    assert [row.name for row in back.rows] == ["bv", "specinfer"]


def test_an_optimum_record_round_trips_through_its_json():
    """Optimum.from_json: every detail kept in order, the solver's word kept, an unknown word
    typed OTHER."""
    data = {"value": 2.5, "exact": "5/2", "certified": True, "certificate": "c", "status": "weird",
            "method": "colgen", "seconds": 0.1, "solve_seconds": None, "certify_seconds": 0.05,
            "size": {"x": 1}, "notes": ["n"], "iterations": 3, "lower_bound_exact": "1/3",
            "upper_bound_exact": "1/2"}
    record = Optimum.from_json(data, rational=True)
    assert record.status is Status.OTHER and record.solver_status == "weird"
    assert record.exact_value == Fraction(5, 2) and record.exact == "5/2"
    assert record.bounds == (Fraction(1, 3), Fraction(1, 2))
    assert record.to_json() == data and list(record.to_json()) == list(data)
    assert Optimum.from_json(data, rational=False).exact is None  # a float instance prints no fraction
