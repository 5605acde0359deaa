"""GapSpec in, GapResult out (issue 29): construction is the validation (BadArgument naming
the field), the result is inspectable data whose to_json() is gap()'s dict."""

from __future__ import annotations

from fractions import Fraction

import pytest
from speclp.inputs import BadArgument
from speclp.lp.instance import bv_toy, dirichlet_instance
from speclp.proofs.gap import GapResult, GapSpec, UnknownVerifier, gap


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
    assert bv.ratio == pytest.approx(bv.block_efficiency / result.optimum["value"], rel=1e-12)
    assert result.exact_value == Fraction(result.optimum["exact"])  # the exact optimum, rational
    assert bv.block_efficiency <= result.optimum["value"] + 1e-9  # BV never beats the optimum
    with pytest.raises(KeyError):
        result.row("gbv")
