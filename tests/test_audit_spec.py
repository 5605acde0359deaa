"""The audit as data (issue 29): VerifierAuditSpec / SamplerAuditSpec validate on construction
(BadArgument naming the field), carry the CLI's defaults, and run(spec) returns an AuditReport
with a typed status whose to_json() is the payload of `speclp audit --json`."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from speclp.cli import app
from speclp.cli import audit as cli_audit
from speclp.inputs import BadArgument
from speclp.proofs.audit import (
    MIXED,
    AuditStatus,
    SamplerAuditSpec,
    VerifierAuditSpec,
    audit,
    family_instance,
    run,
)
from typer.testing import CliRunner


@pytest.mark.parametrize("kwargs, field", [
    ({"verifier": "no_such"}, "verifier"),
    ({"verifier": "bv", "paths": 0}, "paths"),
    ({"verifier": "bv", "vocab": 1}, "vocab"),
    ({"verifier": "bv", "trials": True}, "trials"),
    ({"verifier": "bv", "seed": -1}, "seed"),
    ({"verifier": "bv", "draft_sampling": "nope"}, "draft_sampling"),
    ({"verifier": "bv", "family": "nope"}, "family"),
    ({"verifier": "bv", "family": "tiny", "ties": True}, "ties"),
])
def test_verifier_spec_refuses_naming_the_field(kwargs, field):
    with pytest.raises(BadArgument) as caught:
        VerifierAuditSpec(**kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("kwargs, field", [
    ({"sampler": 3}, "sampler"),
    ({"layout": "nope"}, "layout"),
    ({"layout": ""}, "layout"),  # not None: no default
    ({"layout": "ragged", "paths": 2}, "paths"),
    ({"runs": 1}, "runs"),
    ({"runs": 10**10}, "runs"),
    ({"alpha": 1.0}, "alpha"),
    ({"alpha": 0.0}, "alpha"),
    ({"time_limit": 0}, "time_limit"),
    ({"call_timeout": math.nan}, "call_timeout"),
    ({"load_timeout": -1.0}, "load_timeout"),
    ({"search": 3, "trials": 4}, "search"),
    ({"family": "tiny", "ties": True}, "ties"),
    ({"instances": ()}, "instances"),
    ({"seed": -2}, "seed"),
])
def test_sampler_spec_refuses_naming_the_field(kwargs, field):
    with pytest.raises(BadArgument) as caught:
        SamplerAuditSpec(**({"sampler": "m:f"} | kwargs))
    assert caught.value.field == field


def test_sampler_spec_resolves_its_defaults_and_is_frozen():
    spec = SamplerAuditSpec("m:f")
    assert (spec.layout, spec.paths, spec.family, spec.name) == ("batched", 2, MIXED, "m:f")
    assert SamplerAuditSpec("m:f", layout="ragged").paths == 1  # one chain per request
    assert SamplerAuditSpec("m:f", layout="vllm").paths == 1
    assert SamplerAuditSpec("m:f", ties=True).family == "ties"
    assert SamplerAuditSpec(len).name == "sampler"
    assert VerifierAuditSpec("bv").family == "dirichlet"
    assert VerifierAuditSpec("bv", ties=True).family == "ties"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.paths = 3  # type: ignore[misc]


def _spec_the_cli_builds(monkeypatch, args):
    """The spec `speclp audit ARGS` hands to run (run replaced: nothing is audited)."""
    seen = []

    def capture(spec, progress=None):
        seen.append(spec)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_audit, "run_audit", capture)
    CliRunner().invoke(app, ["audit", *args])
    assert len(seen) == 1
    return seen[0]


def test_the_cli_defaults_are_the_specs(monkeypatch, tmp_path):
    sampler = tmp_path / "s.py"
    sampler.write_text("def f(target_rows, draft_rows, paths, rng):\n    return None\n")
    assert _spec_the_cli_builds(monkeypatch, ["--verifier", "bv"]) == VerifierAuditSpec("bv")
    spec = f"{sampler}:f"
    assert _spec_the_cli_builds(monkeypatch, ["--sampler", spec]) == SamplerAuditSpec(spec)
    assert (_spec_the_cli_builds(monkeypatch, ["--sampler", spec, "--unbatched"])
            == SamplerAuditSpec(spec, layout="unbatched"))
    assert (_spec_the_cli_builds(monkeypatch, ["--sampler", spec, "--layout", "ragged", "--max-runs", "50"])
            == SamplerAuditSpec(spec, layout="ragged", runs=50))


def test_verifier_report_passes_a_lossless_verifier_and_matches_audit():
    spec = VerifierAuditSpec("bv", paths=1, vocab=2, depth=1, trials=2)
    report = run(spec)
    assert report.status is AuditStatus.PASSED and report.passed and report.failures == ()
    assert report.record["max_tv"] <= 1e-12  # BV is lossless (a theorem: its law is the target's)
    direct = audit("bv", 1, 2, 1, 2, False, family="dirichlet")  # the library call, made directly
    assert report.to_json() == direct | {"lossless_claimed": True}
    assert report.save("unused") is report and "saved" not in report.to_json()


def test_verifier_report_of_a_broken_verifier_saves_its_worst_instance(tmp_path):
    report = VerifierAuditSpec("gbv_broken", paths=2, vocab=3, depth=2, trials=10, ties=True).run()
    assert report.status is AuditStatus.FAILED and not report.passed
    assert report.record["max_tv"] > 1e-3 and report.failures[0].startswith("gbv_broken is not lossless")
    saved = report.save(tmp_path)
    assert saved.status is AuditStatus.FAILED and len(saved.saved) == 1
    out = saved.to_json()
    assert out["saved"] == saved.saved[0] and list(out)[-1] == "saved"  # the path, last, as before
    assert json.loads(open(out["saved"]).read()) == report.record["worst_instance"]


def _first_token_sampler(target_rows, draft_rows, paths, rng):
    """Lossless by construction: accepts no draft token and draws the first token from the
    target's root row, so every block has one token (E[tau+1] = 1 exactly)."""
    roots = target_rows[:, 0, 0, :]  # [B, V]
    blocks = np.full((roots.shape[0], paths.shape[2] + 1), -1, dtype=np.int64)
    for b, row in enumerate(roots):
        blocks[b, 0] = rng.choice(row.shape[0], p=row / row.sum())
    return blocks


def test_sampler_report_of_an_in_process_lossless_sampler():
    instance = family_instance("dirichlet", 2, 1, 5)
    spec = SamplerAuditSpec(_first_token_sampler, paths=1, vocab=2, depth=1, runs=400,
                            instances=(instance,), time_limit=None, name="first-token")
    report = run(spec)
    assert report.status is AuditStatus.PASSED, report.failures
    (record,) = report.record["instances"]
    assert record["runs"] == 400 and record["block_efficiency"] == 1.0 and record["malformed"] == 0
    assert report.to_json()["sampler"] == "first-token" and report.to_json()["passed"]


def test_sampler_that_raises_is_a_broken_report():
    def raising(target_rows, draft_rows, paths, rng):
        raise RuntimeError("no blocks today")

    spec = SamplerAuditSpec(raising, paths=1, vocab=2, depth=1, trials=1, runs=10, time_limit=None,
                            name="raising")
    report = run(spec)
    assert report.status is AuditStatus.BROKEN and len(report.failures) == 1
    assert report.failures[0].startswith("sampler raising ") and "no blocks today" in report.failures[0]
    out = report.to_json()
    assert out["passed"] is False and out["failures"] == list(report.failures)
    assert out["sampler_failure"]["kind"] == "exception"
    assert report.save("unused") is report  # a broken sampler saves nothing


def test_a_spec_naming_nothing_callable_is_a_bad_sampler(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    spec = SamplerAuditSpec(f"{module}:nothing", vocab=2, depth=1, trials=1, runs=10, time_limit=None)
    with pytest.raises(BadArgument) as caught:
        run(spec)
    assert caught.value.field == "sampler" and "nothing" in caught.value.reason


@pytest.mark.parametrize("kwargs", [
    {"layout": "ragged", "paths": 2}, {"runs": 1}, {"runs": 10**10}, {"alpha": 1.0},
    {"time_limit": 0}, {"call_timeout": math.nan}, {"search": 3, "trials": 4},
    {"draft_sampling": "sometimes"}, {"vocab": 1}, {"seed": -2},
])
def test_audit_sampler_refuses_by_the_specs_rules(kwargs):
    """audit_sampler called directly (no spec) refuses a wrong argument with the very
    BadArgument SamplerAuditSpec raises: the rules are written once, in the spec."""
    from speclp.proofs.audit import audit_sampler

    with pytest.raises(BadArgument) as from_spec:
        SamplerAuditSpec(_first_token_sampler, **kwargs)
    with pytest.raises(BadArgument) as direct:
        audit_sampler(_first_token_sampler, **kwargs)
    assert (direct.value.field, direct.value.reason) == (from_spec.value.field, from_spec.value.reason)
