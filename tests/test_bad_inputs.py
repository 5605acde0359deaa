"""benchmarks/bad_inputs.py (issue 28): the list covers every command, its classifier flags
each kind of contract violation, and a fixed sample of its cases passes through the same
runner (a subprocess per case).

The sample has no sampler that must be stopped by a clock (no --call-timeout or
--load-timeout verdict, no time-limited audit that must pass): every verdict here is the
same on any machine; the runner's timeout is a hang guard only (GUARD_S)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bad_inputs", ROOT / "benchmarks" / "bad_inputs.py")
bad = importlib.util.module_from_spec(_spec)
sys.modules["bad_inputs"] = bad  # dataclasses look their module up by name
_spec.loader.exec_module(bad)

GUARD_S = 300.0  # a hang guard, not a speed test
SAMPLE = [  # across commands and classes; none depends on a clock
    "solve/file:missing",
    "solve/ok:file-json",
    "gap/file:zero-denominator",
    "gap/file:deep-list",
    "instance/vocab=1",
    "instance/ok:dirichlet-V3-L3-s1-float",  # issue 28: float instances failed their read-back
    "check-bv-optimal/unknown-option",
    "lossless/method=nope",
    "audit/verifier-unused:search",
    "audit/sampler-spec:syntax-error",
    "audit/sampler-does:raises:json",
    "audit/sampler-does:returns-none",
    "plot/results:empty-dir",
    "prove/claim=nope",
    "trees/budgets=0",
]
CASES = {case.id: case for case in bad.build_cases()}


def test_the_list_covers_every_command_and_class():
    assert len(CASES) >= 360
    commands = {"-".join(path) for path, _ in bad.leaf_commands()}
    covered = {case.id.split("/", 1)[0] for case in CASES.values()}
    assert commands <= covered, commands - covered
    per_class = {expect: sum(c.expect == expect for c in CASES.values()) for expect in bad.EXPECTED_EXIT}
    assert per_class[bad.REFUSE] >= 300
    assert per_class[bad.SAMPLER_FAIL] >= 10 and per_class[bad.OK_ACCEPT] >= 10
    files = {case.id.rsplit(":", 1)[1] for case in CASES.values() if case.id.startswith("gap/file:")}
    assert files == {what for what, _ in bad.BAD_FILES}


def test_no_case_can_load_a_model():
    for case in CASES.values():
        if case.command in bad.MODEL_COMMANDS:
            argv = list(case.argv)
            assert argv.count("--pair") == 1, case.id
            pair = argv[argv.index("--pair") + 1]
            assert pair in ("", ",", "a,b", "@dir", "../../etc", bad.NO_MODEL, "x" * 300,
                            "nosuchmodel,nosuchmodel2"), (case.id, pair)


def _case(expect=bad.REFUSE, argv=("gap", "x"), field=(), says="", pidfile=""):
    return bad.Case("gap/t", tuple(argv), expect, field, (), 0.0, says, pidfile)


@pytest.mark.parametrize("kwargs, code, stdout, stderr, hung, outcome", [
    ({}, 2, "", "error: --paths: must be >= 1, got 0\n", False, "pass"),
    ({}, None, "", "", True, "hang"),
    ({}, 3, "", "Traceback (most recent call last):\nValueError\n", False, "traceback"),
    ({}, 0, "ok\n", "", False, "wrong_acceptance"),
    ({"expect": bad.SAMPLER_FAIL}, 0, "", "", False, "wrong_acceptance"),
    ({}, 3, "", "internal error: x; please report it\n", False, "wrong_exit"),
    ({}, 2, "", "error: --paths: bad\nmore\n", False, "multi_line_error"),
    ({}, 2, "", "usage: no error prefix\n", False, "multi_line_error"),
    ({"argv": ("gap", "x", "--json")}, 2, "not json", "error: --paths: bad\n", False, "invalid_json"),
    ({"argv": ("gap", "x", "--json")}, 2, json.dumps({"error": "other", "exit_status": 2}),
     "error: --paths: bad\n", False, "invalid_json"),
    ({"argv": ("gap", "x", "--json")}, 2, json.dumps({"error": "--paths: bad", "exit_status": 2}),
     "error: --paths: bad\n", False, "pass"),
    ({"argv": ("gap", "x", "--json"), "expect": bad.OK_ACCEPT}, 0, "{}\n{}\n", "", False, "invalid_json"),
    ({"field": ("--paths",)}, 2, "", "error: --depth: bad\n", False, "wrong_field"),
    ({"expect": bad.SAMPLER_FAIL}, 1, "", "FAILED: the law test rejected\n", False, "no_blame"),
    ({"expect": bad.SAMPLER_FAIL, "says": "ValueError"}, 1, "", "sampler s.py:g raised KeyError\n", False,
     "no_blame"),
    ({"expect": bad.SAMPLER_FAIL, "says": "ValueError"}, 1, "", "sampler s.py:g raised ValueError\n", False,
     "pass"),
])
def test_classify(kwargs, code, stdout, stderr, hung, outcome):
    case = _case(**kwargs)
    assert bad.classify(case, list(case.argv), code, stdout, stderr, hung, [])[0] == outcome


def test_a_model_command_refused_only_for_its_model_accepted_the_bad_flag():
    case = bad.Case("bench/batch=0", ("bench", "--pair", "nosuchmodel", "--batch", "0"), bad.REFUSE,
                    ("--batch",))
    line = "error: --pair: unknown model 'nosuchmodel'\n"
    outcome, detail = bad.classify(case, list(case.argv), 2, "", line, False, [])
    assert outcome == "wrong_field" and "accepted" in detail


def test_a_process_left_running_is_an_orphan():
    case = _case(expect=bad.OK_ACCEPT, pidfile="children.pid")
    assert bad.classify(case, list(case.argv), 0, "", "", False, [12345])[0] == "orphan"


def test_materialise_replaces_tokens_and_makes_the_special_files(tmp_path):
    case = bad.Case("x/y", ("solve", "@inst.json", "--out", "@dir/sub", "file:@fifo", "@missing", "@repo/x"),
                    bad.REFUSE, (), (("inst.json", b"{}"), ("dir", bad.DIR), ("fifo", bad.FIFO),
                                     ("sparse", bad.SPARSE)))
    argv = bad.materialise(case, tmp_path)
    assert argv == ["solve", str(tmp_path / "inst.json"), "--out", str(tmp_path / "dir") + "/sub",
                    f"file:{tmp_path / 'fifo'}", str(tmp_path / "missing"), f"{ROOT}/x"]
    assert (tmp_path / "dir").is_dir() and (tmp_path / "fifo").is_fifo()
    assert (tmp_path / "sparse").stat().st_size == 200 * 2**20 and not (tmp_path / "missing").exists()


@pytest.mark.parametrize("case_id", SAMPLE)
def test_sample_case_passes(case_id):
    assert case_id in CASES, f"{case_id} is no longer in the list"
    record = bad.run_case(CASES[case_id], margin_s=GUARD_S)
    assert record["outcome"] == "pass", json.dumps(record, indent=1)


def test_the_runner_resumes_and_writes_its_report(tmp_path, capsys):
    only = "check-bv-optimal/unknown-option,prove/claim=nope"  # each a prefix of no other id
    assert bad.main(["--only", only, "--out", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "results.json").read_text())["records"]
    assert sorted(records) == ["check-bv-optimal/unknown-option", "prove/claim=nope"]
    assert all(r["outcome"] == "pass" for r in records.values())
    capsys.readouterr()
    assert bad.main(["--only", only, "--out", str(tmp_path)]) == 0  # resumed: nothing left to run
    assert "2 cases selected, 0 to run" in capsys.readouterr().err
    readme = (tmp_path / "README.md").read_text()
    assert "| check-bv-optimal | REFUSE | 1 |" in readme and "| prove | REFUSE | 1 |" in readme
