"""`speclp lossless` and `speclp prove` are flags -> spec -> library -> JSON: the --json
payload is the library's own result, computed here a second way (the library called
directly with the arguments written out by hand), and every refusal is one JSON object
naming its flag."""

import json
from pathlib import Path

import pytest
from speclp.cli import app
from speclp.cli.common import jsonable
from speclp.proofs.config_law import AcceptanceConfig, config_report
from speclp.proofs.symbolic.export import strict_document
from speclp.proofs.symbolic.prove import prove
from typer.testing import CliRunner

runner = CliRunner()


def _json(value):
    return json.loads(json.dumps(jsonable(value)))


@pytest.mark.parametrize("flags,settings", [
    ([], {}),
    (["--method", "one-hot", "--temperature", "0.7"], {"method": "one-hot", "temperature": 0.7}),
    (["--method", "threshold", "--threshold-single", "0.5", "--threshold-acc", "0.8"],
     {"method": "threshold", "threshold_single": 0.5, "threshold_acc": 0.8}),
    (["--method", "typical", "--typical-delta", "0.2", "--target-top-k", "2"],
     {"method": "typical", "typical_delta": 0.2, "target_top_k": 2}),
    (["--method", "ensemble", "--weight", "0.5", "--draft-top-p", "0.8",
      "--verify-draft-top-p", "0.9", "--verify-temperature", "2"],
     {"method": "ensemble", "weight": 0.5, "draft_top_p": 0.8, "verify_draft_top_p": 0.9,
      "verify_temperature": 2.0}),
])
def test_lossless_json_is_the_library_report(flags, settings):
    result = runner.invoke(app, ["lossless", *flags, "--vocab", "2", "--depth", "2", "--trials",
                                 "2", "--seed", "3", "--json"])
    report = config_report(AcceptanceConfig(**settings), vocab=2, depth=2, trials=2, seed=3)
    assert result.exit_code == (0 if report["lossless"] else 1), result.output
    assert json.loads(result.stdout) == _json(report)


OWN = {"threshold": ("--threshold-single", "--threshold-acc"),
       "typical": ("--typical-epsilon", "--typical-delta"), "ensemble": ("--weight",)}


@pytest.mark.parametrize("method", ["speculative", "one-hot", "threshold", "typical", "ensemble"])
@pytest.mark.parametrize("flag", ["--threshold-single", "--threshold-acc", "--typical-epsilon",
                                  "--typical-delta", "--weight"])
def test_lossless_refuses_the_setting_of_another_method(method, flag):
    result = runner.invoke(app, ["lossless", "--method", method, flag, "0.5", "--vocab", "2",
                                 "--depth", "1", "--trials", "1", "--json"])
    if flag in OWN.get(method, ()):
        assert result.exit_code in (0, 1), result.output
        return
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": f"{flag}: does not apply to --method {method}",
                                         "exit_status": 2, "field": flag}


@pytest.mark.parametrize("flags,error", [
    (["--verify-draft-top-p", "0"], "--verify-draft-top-p: must be in (0, 1], got 0.0"),
    (["--verify-target-top-k", "0"], "--verify-target-top-k: must be an integer >= 1, got 0"),
    (["--method", "typical", "--typical-delta", "0"], "--typical-delta: must be a number > 0, got 0.0"),
    (["--method", "ensemble", "--weight", "1.5"], "--weight: must be in [0, 1], got 1.5"),
    (["--vocab", "1", "--temperature", "-1"], "--vocab: must be >= 2, got 1"),  # flags first
])
def test_lossless_bad_setting_names_its_flag(flags, error):
    result = runner.invoke(app, ["lossless", *flags, "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": error, "exit_status": 2,
                                         "field": error.split(":")[0]}


def _without_seconds(value):
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k != "seconds"}
    return value


@pytest.mark.parametrize("claim,flags,shape", [
    ("gbv-l1-closed-form", ["--vocab", "2", "--paths", "2"], (2, 1, 2, "iid")),
    ("l1-optimum", ["--paths", "2", "--draft-sampling", "without-replacement"],
     (2, 1, 2, "without-replacement")),
])
def test_prove_json_and_files_are_the_library_run(tmp_path, claim, flags, shape):
    result = runner.invoke(app, ["prove", claim, *flags, "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    run = prove(claim, *shape, seed=0, stop_at_first_failure=True, time_limit=3600.0)
    stem = f"{claim}-V{shape[0]}-L{shape[1]}-K{shape[2]}" + (
        "" if shape[3] == "iid" else "-" + shape[3])
    expected = run.summary() | {"status": "proved", "json": str(tmp_path / f"{stem}.json"),
                                "markdown": str(tmp_path / f"{stem}.md")}
    assert _without_seconds(payload) == _without_seconds(_json(expected))
    written = json.loads(Path(payload["json"]).read_text())
    assert _without_seconds(written) == _without_seconds(_json(strict_document(run.document)))


@pytest.mark.parametrize("argv,error", [
    (["bv-optimal", "--paths", "1"],
     "--paths: bv-optimal is a single-path claim (K = 1); it takes no --paths"),
    (["gbv-l1-closed-form", "--draft-sampling", "iid"],
     "--draft-sampling: gbv-l1-closed-form is stated for i.i.d. drafts; only l1-optimum takes "
     "--draft-sampling"),
    (["l1-optimum", "--vocab", "2", "--depth", "2"], "--depth: l1-optimum is a statement about L = 1, got 2"),
])
def test_prove_refusal_is_one_json_object_naming_the_flag(tmp_path, argv, error):
    result = runner.invoke(app, ["prove", *argv, "--out", str(tmp_path / "x"), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": error, "exit_status": 2, "field": error.split(":")[0]}
    assert not (tmp_path / "x").exists()


# --time-limit of `lossless` and the claim checks (issue 29): a limit already over when the
# work starts stops it before its first unit (1e-9 s is over before any instance or trial on
# any machine): exit 4, one STOPPED line saying how far it got, nothing saved, and with --json
# the payload's status says stopped.
STOPPABLE = [
    (["lossless", "--vocab", "2", "--depth", "1", "--trials", "3"], "instances"),
    (["check", "class-equals-full", "--trials", "3", "--vocab", "2", "--depth", "1"], "trials"),
    (["check", "node-form", "--trials", "3", "--vocab", "2", "--depth", "1"], "trials"),
    (["check", "bv-optimal", "--trials", "3", "--vocab", "2", "--depth", "2"], "trials"),
]


@pytest.mark.parametrize("argv,unit", STOPPABLE, ids=[" ".join(a[:2]) for a, _ in STOPPABLE])
def test_an_expired_time_limit_is_exit_4_with_one_stopped_line(tmp_path, argv, unit):
    save = [] if argv[0] == "lossless" else ["--save-dir", str(tmp_path / "ce")]
    result = runner.invoke(app, [*argv, *save, "--time-limit", "1e-9"])
    assert result.exit_code == 4, (result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("STOPPED: "), result.stderr
    assert f"stopped at the time limit of 1e-09 s after 0 of 3 {unit}" in lines[0]
    assert result.stdout == ""  # no table, no verdict
    as_json = runner.invoke(app, [*argv, *save, "--time-limit", "1e-9", "--json"])
    payload = json.loads(as_json.stdout)
    assert as_json.exit_code == 4 and payload["status"] == "stopped: time limit"
    assert payload["trials_run"] == 0 and payload["stopped"] == "time limit of 1e-09 s"
    assert payload.get("lossless", False) is None if argv[0] == "lossless" else payload["passed"] is False
    assert not (tmp_path / "ce").exists()


@pytest.mark.parametrize("argv,unit", STOPPABLE, ids=[" ".join(a[:2]) for a, _ in STOPPABLE])
def test_a_time_limit_the_work_does_not_reach_changes_nothing(tmp_path, argv, unit):
    save = [] if argv[0] == "lossless" else ["--save-dir", str(tmp_path / "ce")]
    plain = runner.invoke(app, [*argv, *save, "--json"])
    limited = runner.invoke(app, [*argv, *save, "--time-limit", "3600", "--json"])
    assert plain.exit_code == limited.exit_code == 0, plain.output
    assert _without_seconds(json.loads(limited.stdout)) == _without_seconds(json.loads(plain.stdout))
