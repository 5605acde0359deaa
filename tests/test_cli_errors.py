"""The one refusal type (speclp.inputs.BadArgument) and the CLI's error contract (issue 29):
a wrong argument the library finds is exit 2 naming its flag (mapped in one place,
cli.common.flag_of); any other exception inside a command is exit 3 with its own message,
never a flag error (the (8, 3, 4) '--paths: Exceeds the limit (4300 digits)' of issue 29)."""

from __future__ import annotations

import json

import pytest
from speclp.cli import app
from speclp.cli import audit as cli_audit
from speclp.cli import sweep as cli_sweep
from speclp.cli.common import flag_of
from speclp.inputs import BadArgument
from speclp.lp.instance import InstanceError, dirichlet_instance
from speclp.proofs import audit as proofs_audit
from speclp.proofs import gap as proofs_gap
from typer.testing import CliRunner

DIGITS = "Exceeds the limit (4300 digits) for integer string conversion"


def invoke(args: list[str]):
    return CliRunner().invoke(app, args)


@pytest.fixture
def instance_file(tmp_path):
    return str(dirichlet_instance(2, 1, seed=0, denominator=10).save(tmp_path / "inst.json"))


def boom(*args, **kwargs):
    raise ValueError(DIGITS)


def crash_cases(instance_file, tmp_path):
    return {
        "gap": (proofs_gap, "optimum", ["gap", instance_file, "--paths", "1"]),  # inside the library
        "sweep": (cli_sweep, "run_sweep", ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1",
                                           "--trials", "1", "--out", str(tmp_path / "sw")]),
        "audit": (cli_audit, "run_audit", ["audit", "--verifier", "bv", "--trials", "1"]),
        "audit-sampler": (proofs_audit, "audit_sampler",  # inside the library's run(spec)
                          ["audit", "--sampler", "speclp.verifiers:nothing", "--trials", "1"]),
    }


@pytest.mark.parametrize("case", ["gap", "sweep", "audit", "audit-sampler"])
@pytest.mark.parametrize("as_json", [False, True])
def test_unexpected_exception_is_exit_3_with_its_own_message(case, as_json, instance_file,
                                                              tmp_path, monkeypatch):
    module, name, args = crash_cases(instance_file, tmp_path)[case]
    monkeypatch.setattr(module, name, boom)
    if case == "audit-sampler":  # the spec names a module that exists: checked before the call
        monkeypatch.setattr(proofs_audit, "split_spec", lambda spec: ("m", "f"))
    result = invoke(args + (["--json"] if as_json else []))
    assert result.exit_code == 3, result.output
    text = result.stderr if hasattr(result, "stderr") else result.output
    assert "internal error: ValueError: " + DIGITS in " ".join(text.split())
    assert "error: --" not in text  # never a flag error
    if as_json:
        record = json.loads(result.stdout.strip().splitlines()[-1])
        assert record["exit_status"] == 3 and record["field"] is None


@pytest.mark.parametrize("case", ["gap", "audit"])
def test_a_library_bad_argument_is_exit_2_naming_the_mapped_flag(case, instance_file, tmp_path,
                                                                 monkeypatch):
    module, name, args = crash_cases(instance_file, tmp_path)[case]

    def refuse(*a, **k):
        raise BadArgument("max_enumerated", "too small for this instance")

    monkeypatch.setattr(module, name, refuse)
    result = invoke(args + ["--json"])
    assert result.exit_code == 2, result.output
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record == {"error": "--max-enumerated: too small for this instance", "exit_status": 2,
                      "field": "--max-enumerated"}


def test_flag_of_maps_in_one_place():
    assert flag_of("paths") == "--paths"
    assert flag_of("draft_sampling") == "--draft-sampling"
    assert flag_of("runs") == "--max-runs"  # the audit's --max-runs is the library's runs
    assert flag_of("results") == "RESULTS"
    for verbatim in ("--out", "target[3]", "/tmp/x.json", None):
        assert flag_of(verbatim) == verbatim


def test_bad_argument_carries_its_field():
    err = BadArgument("paths", "must be >= 1, got 0")
    assert isinstance(err, ValueError)
    assert (err.field, err.reason, str(err)) == ("paths", "must be >= 1, got 0",
                                                 "paths: must be >= 1, got 0")
    inst = InstanceError("target[3]: row sums to 0.9, not 1")
    assert isinstance(inst, BadArgument) and inst.field == "target[3]"
    assert str(inst) == "target[3]: row sums to 0.9, not 1"


def test_library_refusals_are_bad_arguments():
    from speclp.lp.engine import optimum
    from speclp.proofs.gap import gap
    inst = dirichlet_instance(2, 1, seed=0, denominator=10)
    with pytest.raises(BadArgument) as caught:
        optimum(inst, 0)
    assert caught.value.field == "paths"
    with pytest.raises(BadArgument) as caught:
        gap(inst, 1, draft_sampling="nope")
    assert caught.value.field == "draft_sampling"
    with pytest.raises(BadArgument) as caught:
        gap(inst, 1, verifiers=["no_such_verifier"])
    assert caught.value.field == "verifiers"


# Bad input (issue 28): each case is exit 2 with ONE stderr line naming the flag, no
# traceback, and with --json one JSON object naming the same field. "@inst" is a small valid
# instance file, "@out" a fresh folder. Flags a mode does not use are refused, not ignored.
BAD_INPUTS = [
    # audit --verifier: the sampler-only flags (the file of --instance is never audited)
    (["audit", "--verifier", "bv", "--search", "5"], "--search"),
    (["audit", "--verifier", "bv", "--layout", "ragged"], "--layout"),
    (["audit", "--verifier", "bv", "--max-runs", "100"], "--max-runs"),
    (["audit", "--verifier", "bv", "--runs", "100"], "--max-runs"),
    (["audit", "--verifier", "bv", "--call-timeout", "5"], "--call-timeout"),
    (["audit", "--verifier", "bv", "--time-limit", "60"], "--time-limit"),
    (["audit", "--verifier", "bv", "--alpha", "0.05"], "--alpha"),
    (["audit", "--verifier", "bv", "--unbatched"], "--unbatched"),
    (["audit", "--verifier", "bv", "--instance", "@inst"], "--instance"),
    (["audit", "--sampler", "x.py:f", "--exact"], "--exact"),
    (["audit", "--verifier", "bv", "--sampler", "x.py:f"], "--verifier"),
    (["audit", "--verifier", "no_such"], "--verifier"),
    (["audit", "--sampler", "nocolon"], "--sampler"),
    (["audit", "--sampler", "missing_file.py:f"], "--sampler"),
    (["audit", "--verifier", "bv", "--paths", "0"], "--paths"),
    # gap
    (["gap", "@inst", "--paths", "0"], "--paths"),
    (["gap", "@inst", "--paths", "99"], "--paths"),
    (["gap", "@inst", "--backend", "cvxpy"], "--backend"),
    (["gap", "@inst", "--verifiers", "bv,nope"], "--verifiers"),
    (["gap", "@inst", "--method", "simplex"], "--method"),
    (["gap", "@inst", "--samples", "1"], "--samples"),
    # sweep: --max-variables guards --method full only; an address brings its own workers
    (["sweep", "--max-variables", "10", "--out", "@out"], "--max-variables"),
    (["sweep", "--method", "colgen", "--max-variables", "10", "--out", "@out"], "--max-variables"),
    (["sweep", "--workers", "2", "--cluster", "tcp://127.0.0.1:1", "--out", "@out"], "--workers"),
    (["sweep", "--paths", "99", "--out", "@out"], "--paths"),
    (["sweep", "--vocab", "1", "--out", "@out"], "--vocab"),
    (["sweep", "--backend", "cvxpy", "--out", "@out"], "--backend"),
    (["sweep", "--alpha", "0", "--out", "@out"], "--alpha"),
]


@pytest.mark.parametrize("args, field", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_naming_the_flag(args, field, instance_file, tmp_path):
    args = [instance_file if a == "@inst" else str(tmp_path / "out") if a == "@out" else a
            for a in args]
    result = invoke(args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), result.stderr
    assert "Traceback" not in result.output
    as_json = invoke(args + ["--json"])
    record = json.loads(as_json.stdout)
    assert as_json.exit_code == 2 and record["exit_status"] == 2 and record["field"] == field


def test_sweep_flags_of_their_mode_are_accepted(tmp_path, monkeypatch):
    """--max-variables with --method full, --workers with --cluster local: not refused (the
    sweep itself is replaced: only the refusal is tested)."""
    monkeypatch.setattr(cli_sweep, "run_sweep", boom)
    for extra in (["--method", "full", "--max-variables", "10"], ["--cluster", "local",
                                                                  "--workers", "2"]):
        result = invoke(["sweep", "--vocab", "2", "--depth", "1", "--paths", "1", "--trials", "1",
                         "--out", str(tmp_path / "o"), *extra])
        assert result.exit_code == 3, result.output  # reached the (replaced) sweep


def test_sweep_too_large_names_the_guard_it_hit():
    """A full LP over --max-variables names --max-variables (and says to raise it); the
    refusal is a BadArgument, so the CLI needs no mapping of its own."""
    from speclp.experiments.sweep import SweepSpec, SweepTooLarge, plan
    spec = SweepSpec(vocab=[4], depth=[3], paths=[3], alpha=[1.0], temperature=[], trials=1,
                     method="full")
    with pytest.raises(SweepTooLarge) as caught:
        plan(spec)
    assert isinstance(caught.value, BadArgument) and caught.value.field == "max_variables"
    assert "raise --max-variables" in caught.value.reason
