"""The one refusal type (speclp.inputs.BadArgument) and the CLI's error contract (issue 29):
a wrong argument the library finds is exit 2 naming its flag (mapped in one place,
cli.common.flag_of); any other exception inside a command is exit 3 with its own message,
never a flag error (the (8, 3, 4) '--paths: Exceeds the limit (4300 digits)' of issue 29)."""

from __future__ import annotations

import json

import pytest
from speclp.cli import app
from speclp.cli import audit as cli_audit
from speclp.cli.common import flag_of
from speclp.experiments import sweep as experiments_sweep
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
        "sweep": (experiments_sweep, "run_sweep", ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1",
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



def _experiment_refusals():
    """(call, field, reason start) of each experiment refusal that was a plain ValueError before
    issue 29's last seams; the argument it names is the field."""
    import numpy as np
    from speclp.experiments import intervals, prompts, realgap, trees

    ones = np.ones((3, 4))
    return [
        (lambda: intervals.cluster_intervals(np.ones((3, 1))), "x",
         "must be [R, n] with n >= 2, got shape (3, 1)"),
        (lambda: intervals.cluster_intervals(ones, method="normal"), "method",
         "must be one of t, hall, boot-t, boot-t-sym, bca, percentile, got 'normal'"),
        (lambda: intervals.cluster_intervals(ones, level=1.0), "level", "must lie in (0, 1), got 1.0"),
        (lambda: intervals.cluster_intervals(ones, method="bca", counts=np.ones((5, 3))), "counts",
         "must be [B, 4], got shape (5, 3)"),
        (lambda: intervals.cluster_mean_interval([1.0, 2.0], [1, 1], method="normal"), "method",
         "must be one of t, hall, boot-t, boot-t-sym, bca, percentile, got 'normal'"),
        (lambda: intervals.betting_interval([1.5], low=2.0, high=1.0), "low/high",
         "need low < high, got 2.0, 1.0"),
        (lambda: realgap.kept_lower_bounds(np.ones((2, 3)) / 3, np.ones((2, 3)) / 3, 3, 2, [1]),
         "target_edge/draft_edge", "need edges [4, 3] for M = 3, L = 2, got (2, 3), (2, 3)"),
        (lambda: realgap.extended_bv_one_step(np.ones(2) / 2, np.ones(2) / 2, 2, "nope"), "fallback",
         "'specinfer' or 'optimal', got 'nope'"),
        (lambda: prompts.random_prompts([{"id": "a", "text": "x"}], 2, 0), "count",
         "need 1 <= count <= 1, got 2"),
        (lambda: trees.run_engine_reuse(_unchecked_trees_spec(engine_budgets=(9,)), None, [],
                                        "/nonexistent/engine.jsonl", dtype="float32"),
         "engine_budgets", "9 has no K x L shape; known: 8, 16, 32, 64"),
    ]


def _unchecked_trees_spec(**fields):
    """A TreesSpec with `fields` set after construction (the run's own guard, behind the spec's)."""
    from speclp.experiments.trees import TreesSpec

    spec = TreesSpec(engine_budgets=(8,), engine_verifiers=("bv",))
    for name, value in fields.items():
        object.__setattr__(spec, name, value)
    return spec


@pytest.mark.parametrize("index", range(10))
def test_experiment_refusals_are_bad_arguments_naming_the_argument(index):
    call, field, reason = _experiment_refusals()[index]
    with pytest.raises(BadArgument) as caught:
        call()
    assert caught.value.field == field, caught.value
    if reason is not None:
        assert caught.value.reason == reason
        assert str(caught.value) == f"{field}: {reason}"
    assert isinstance(caught.value, ValueError)  # callers catching ValueError keep working


def test_the_experiment_field_the_cli_can_reach_maps_to_its_flag():
    """Of the fields above only trees' engine_budgets has a flag (TreesSpec refuses it first);
    the others are arrays, a fallback or a count the commands compute themselves."""
    from speclp.cli import load_command

    flags = {opt for p in load_command("trees").params for opt in getattr(p, "opts", [])}
    assert flag_of("engine_budgets") == "--engine-budgets" and "--engine-budgets" in flags
    result = invoke(["trees", "--engine-budgets", "9", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["field"] == "--engine-budgets"


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
    # --time-limit of lossless and the claim checks (seconds > 0, finite)
    (["lossless", "--time-limit", "0"], "--time-limit"),
    (["lossless", "--time-limit", "inf"], "--time-limit"),
    (["check", "class-equals-full", "--time-limit", "-1"], "--time-limit"),
    (["check", "node-form", "--time-limit", "nan"], "--time-limit"),
    (["check", "bv-optimal", "--time-limit", "0"], "--time-limit"),
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
    monkeypatch.setattr(experiments_sweep, "run_sweep", boom)
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
