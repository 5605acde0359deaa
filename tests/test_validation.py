"""Issue 9: every bad input found by the outside tester exits 2 before any work (no LP, law,
model or sweep code runs: tests/work_guard.py; no clock, issue 19) with ONE line on stderr
naming the flag or the path; no traceback, no model loaded, no network. Plus the
defaults/help fixes and the exit statuses of the contract."""

import json
import os
import socket
import subprocess
import sys

import pytest
from speclp.cli import app
from speclp.cli import validate as cli_validate
from speclp.lp.instance import InstanceError, dirichlet_instance, load_instance
from typer.testing import CliRunner
from work_guard import deadline, watch_work

runner = CliRunner()
HANG_S = 300.0  # guards against a hang only; how fast a refusal is, is not tested here




@pytest.fixture(scope="module", autouse=True)
def warm_imports():
    """Import what the commands import lazily (torch, the verifiers) once for the module."""
    import speclp.decode.models  # noqa: F401
    import speclp.experiments.sweep  # noqa: F401
    import speclp.proofs.tree_selection  # noqa: F401
    import torch  # noqa: F401


def refused(args, field):
    """Run the command in-process; exit 2 before any work, one stderr line naming `field`."""
    with deadline(HANG_S), watch_work() as work:
        result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {field}"), lines[0]
    assert "Traceback" not in result.output
    assert not work, f"refused after work started ({work[0]})"
    return lines[0]


def test_work_guard_sees_work():
    """The guard of refused() is not blind: a command that solves is seen working."""
    with watch_work() as work:
        result = runner.invoke(app, ["solve", "--depth", "1", "--json"])
    assert result.exit_code == 0 and work and work[0].split(":")[0].startswith(("lp/", "verifiers/"))
    with watch_work() as work:
        assert runner.invoke(app, ["solve", "--depth", "99"]).exit_code == 2
    assert not work


@pytest.fixture
def instance_file(tmp_path):
    return dirichlet_instance(2, 2, seed=0).save(tmp_path / "inst.json")


# --- sizes refused before any work ----------------------------------------------------------

@pytest.mark.parametrize("depth", [16, 22, 30, 64, 100])
def test_solve_depth_refused_with_size_limit_and_suggestion(depth):
    line = refused(["solve", "--depth", depth], "--depth")
    assert "limit" in line and ("--depth 13 or less" in line or "smaller" in line)


def test_solve_depth_16_names_the_lp_size():
    line = refused(["solve", "--depth", 16], "--depth")
    # V=2, L=16, K=1: 2^16 paths x (1 + 16) nodes x 2 tokens + (2^17 - 2) A(z) variables
    assert f"{2**16 * 17 * 2 + 2**17 - 2:,} variables" in line and "limit 400,000" in line


@pytest.mark.parametrize("command", ["solve", "gap"])
def test_instance_of_depth_20000_refused(tmp_path, command):
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"vocab_size": 2, "depth": 20000, "target": [], "draft": []}))
    line = refused([command, path], str(path))
    assert "depth" in line and "more than 9.2e+18 rows" in line


def test_check_bv_optimal_huge_vocabulary_refused():
    refused(["check", "bv-optimal", "--vocab", 1_000_000, "--depth", 5], "--vocab/--depth")


@pytest.mark.parametrize("paths", [50, 1000])
def test_gap_too_many_paths_refused(instance_file, paths):
    line = refused(["gap", instance_file, "--paths", paths], "--paths")
    assert "limit" in line


# --- unreadable input -----------------------------------------------------------------------

@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_endless_device_refused(device):
    line = refused(["solve", device], device)
    assert "not a regular file" in line


def test_named_pipe_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    line = refused(["solve", fifo], str(fifo))
    assert "named pipe" in line


def test_json_nested_100000_deep_refused(tmp_path):
    path = tmp_path / "nested.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in refused(["solve", path], str(path))


@pytest.mark.parametrize("text, message", [
    ('{"vocab_size": ' + "9" * 5000 + ', "depth": 1, "target": [], "draft": []}', "5,000 digits"),
    (json.dumps({"vocab_size": 2, "depth": 1, "target": [["1e-999999999", "1"]] * 3,
                 "draft": [["1/2", "1/2"]] * 3}), "exponent"),
    (json.dumps({"vocab_size": 2, "depth": 1, "target": [["1/" + "3" * 5000, "1"]] * 3,
                 "draft": [["1/2", "1/2"]] * 3}), "characters"),
])
def test_huge_integers_and_fractions_refused(tmp_path, text, message):
    path = tmp_path / "huge.json"
    path.write_text(text)
    assert message in refused(["solve", path], str(path))


def test_reading_limits_in_the_library(tmp_path):
    """lp.instance refuses the same inputs (InstanceError naming the path or the field)."""
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(300 * 2**20)  # sparse: larger than MAX_FILE_BYTES, no disk used
    with pytest.raises(InstanceError, match="over the limit"):
        load_instance(big)
    with pytest.raises(InstanceError, match="not a regular file"):
        load_instance("/dev/zero")


@pytest.mark.parametrize("kind", ["binary", "malformed", "directory", "empty", "no-prompt"])
def test_bench_bad_prompt_files_refused(tmp_path, kind):
    path = tmp_path / "prompts"
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "malformed":
        path.write_text('{"prompt": "a"}\n{"prompt": \n')
    elif kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_text("\n\n")
    else:
        path.write_text('{"text": "no prompt field"}\n')
    refused(["bench", "--prompts", f"file:{path}", "--out", tmp_path / "o"], "--prompts")


# --- output paths ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["plot", "bench", "realgap", "trees", "sweep"])
def test_out_naming_an_existing_file_refused(tmp_path, instance_file, command):
    taken = tmp_path / "taken"
    taken.write_text("x")
    args = [command] + ([instance_file] if command == "plot" else []) + ["--out", taken]
    assert "exists and is not a folder" in refused(args, "--out")


def test_out_below_a_file_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    refused(["check", "bv-optimal", "--save-dir", tmp_path / "f" / "sub"], "--save-dir")


# --- numbers --------------------------------------------------------------------------------

@pytest.mark.parametrize("args, field", [
    (["bench", "--temperature", "nan"], "--temperature"),
    (["bench", "--temperature", "1,inf"], "--temperature"),
    (["realgap", "--temperature", "-1"], "--temperature"),
    (["trees", "--temperature", "-1"], "--temperature"),
    (["trees", "--temperature", "nan"], "--temperature"),
    (["check", "bv-optimal", "--denominator", "-1"], "--denominator"),
    (["check", "bv-optimal", "--alpha", "nan"], "--alpha"),
    (["check", "class-equals-full", "--alpha", "inf"], "--alpha"),
    (["check", "class-equals-full", "--against", "full"], "--against"),  # node-form only
    (["check", "node-form", "--against", "neither"], "--against"),
    (["check", "node-form", "--draft-sampling", "poisson"], "--draft-sampling"),
    (["audit", "--verifier", "bv", "--seed", "-1"], "--seed"),
    (["sweep", "--alpha", "nan"], "--alpha"),
    (["sweep", "--workers", "100000"], "--workers"),
    (["sweep", "--trials", "1000000000"], "--trials"),
])
def test_numbers_refused(tmp_path, args, field):
    writes = args[0] in ("bench", "realgap", "trees", "sweep")
    refused(args + (["--out", tmp_path / "o"] if writes else []), field)


# --- devices and services -------------------------------------------------------------------

def test_unknown_device_refused(tmp_path):
    refused(["bench", "--device", "tpu", "--out", tmp_path / "o"], "--device")


def test_cuda_without_cuda_refused(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "no CUDA" in refused(["bench", "--device", "cuda", "--out", tmp_path / "o"], "--device")


def test_unreachable_cluster_refused(tmp_path):
    pytest.importorskip("distributed", reason="--cluster needs dask[distributed] (test extra)")
    line = refused(["sweep", "--cluster", "tcp://127.0.0.1:1", "--out", tmp_path / "o"],
                   "--cluster")
    assert "cannot reach" in line


@pytest.mark.parametrize("command", ["bench", "realgap", "trees"])
def test_unknown_pair_fails_fast_without_network(tmp_path, monkeypatch, command):
    def no_network(*args, **kwargs):
        raise AssertionError("the validation tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    line = refused([command, "--pair", "no-such-org/no-such-model", "--out", tmp_path / "o"],
                   "--pair")
    assert "no download is attempted" in line


def test_model_validation_happens_before_loading(tmp_path, monkeypatch):
    """A bad flag listed after --pair is still refused before any model is loaded."""
    from speclp.cli import trees as cli_trees
    from speclp.decode import models

    def loader(*args, **kwargs):
        raise AssertionError("a model was loaded before validation finished")

    monkeypatch.setattr(models, "load_pair", loader)
    monkeypatch.setattr(models, "load_model", loader)
    monkeypatch.setattr(cli_trees, "load_pair", loader)  # imported at its top
    refused(["realgap", "--pair", "smollm2-135m", "--every", "0", "--out", tmp_path / "o"], "--every")
    refused(["trees", "--pair", "smollm2-135m", "--engine-budgets", "8", "--engine-verifiers", "nope",
             "--out", tmp_path / "o"], "--engine-verifiers")


# --- parser errors, internal errors ---------------------------------------------------------

@pytest.mark.parametrize("args, field", [
    (["solve", "--depth", "abc"], "Invalid value for '--depth'"),
    (["solve", "--bogus"], "No such option: --bogus"),
    (["audit"], "--verifier: give exactly one of --verifier and --sampler"),
    (["check", "nothing"], "No such command 'nothing'"),
])
def test_parser_errors_are_one_line(args, field):
    refused(args, field)


def test_internal_error_is_one_line_exit_3(monkeypatch):
    from speclp.proofs import single_path as core  # where `speclp solve` builds its built-in

    def broken(*args, **kwargs):
        raise RuntimeError("simulated bug\nsecond line")

    monkeypatch.setattr(core, "builtin_instance", broken)
    result = runner.invoke(app, ["solve", "--json"])
    assert result.exit_code == 3
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("internal error: RuntimeError: simulated bug")
    assert "please report" in lines[0]
    assert json.loads(result.stdout) == {"error": lines[0], "exit_status": 3, "field": None}


# --- defaults and help ----------------------------------------------------------------------

def test_audit_help_names_no_missing_option():
    result = runner.invoke(app, ["audit", "--help"])
    assert result.exit_code == 0 and "--list" not in result.output


def test_auto_dtype_is_float32_on_cpu():
    import torch
    from speclp.decode.models import default_dtype

    assert default_dtype(torch.device("cpu")) is torch.float32
    assert default_dtype(torch.device("cuda")) is torch.bfloat16


def test_tables_are_not_cut_off_a_terminal(tmp_path):
    """stdout to a pipe (no COLUMNS): the table keeps its natural width."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "speclp", "solve"], capture_output=True,
                            text=True, env=env, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    widths = [len(line) for line in result.stdout.splitlines()]
    assert max(widths) > 80
    assert "total " in result.stdout and "certificate " in result.stdout  # the times column is whole
    assert "…" not in result.stdout


def test_class_equals_full_title_has_no_raw_dict(tmp_path):
    result = runner.invoke(app, ["check", "class-equals-full", "--trials", "1", "--vocab", "2",
                                 "--depth", "1", "--paths", "2", "--save-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    title = result.stdout.splitlines()[0]
    assert "{" not in result.stdout and "certified: full 1/1" in title


def test_validation_helpers_name_the_flag():
    with pytest.raises(cli_validate.BadInput, match=r"^--x: must be a finite number, got nan$"):
        cli_validate.number("--x", float("nan"))
    with pytest.raises(cli_validate.BadInput, match=r"^--k: must be >= 1, got 0$"):
        cli_validate.int_list("--k", "1,0", 1)
    assert cli_validate.int_list("--k", "2, 3,2", 1) == [2, 3]
    with pytest.raises(cli_validate.BadInput, match=r"^--o: .* exists and is not a folder$"):
        cli_validate.output_dir("--o", __file__)


def test_cluster_address_forms():
    pytest.importorskip("distributed", reason="--cluster needs dask[distributed] (test extra)")
    from speclp.experiments.sweep import check_cluster
    from speclp.inputs import BadArgument
    assert check_cluster("local") == "local"
    for bad in ("tcp://host:notaport", "udp://127.0.0.1:1", "nonsense"):
        with pytest.raises(BadArgument, match="^cluster: expected local or") as caught:
            check_cluster(bad)
        assert caught.value.field == "cluster"


@pytest.mark.parametrize("args, field", [
    (["sweep", "--vocab", "2", "--depth", "1", "--paths", "100000"], "--paths"),
    (["prove", "l1-optimum", "--vocab", "3", "--paths", "99"], "--paths"),
])
def test_huge_path_counts_refused_before_any_work(tmp_path, args, field):
    refused(args + ["--out", tmp_path / "o"], field)


# --- --json on errors: one JSON object on stdout, for every command ------------------------

def leaf_commands():
    """Every command path (`check` expanded to its subcommands), from the registry."""
    from speclp.cli import COMMANDS, load_command

    out = []
    for name in COMMANDS:
        sub = getattr(load_command(name), "commands", None)
        out += [(name, s) for s in sub] if sub else [(name,)]
    return out


BAD_VALUE = {  # one flag of each command refused by the validation layer (exit 2)
    ("solve",): ["--depth", "0"],
    ("instance",): ["--vocab", "1", "--out", "@out/i.json"],
    ("check", "class-equals-full"): ["--trials", "0"],
    ("check", "node-form"): ["--trials", "0"],
    ("check", "bv-optimal"): ["--trials", "0"],
    ("audit",): ["--verifier", "bv", "--seed", "-1"],
    ("lossless",): ["--vocab", "1"],
    ("gap",): ["@inst", "--paths", "0"],
    ("sweep",): ["--trials", "0", "--out", "@out"],
    ("plot",): ["@out/missing"],
    ("bench",): ["--temperature", "nan", "--out", "@out"],
    ("trees",): ["--temperature", "-1", "--out", "@out"],
    ("realgap",): ["--temperature", "-1", "--out", "@out"],
    ("prove",): ["l1-optimum", "--paths", "99", "--out", "@out"],
}


def test_bad_value_cases_cover_every_command():
    assert sorted(BAD_VALUE) == sorted(leaf_commands())


@pytest.mark.parametrize("path", sorted(BAD_VALUE), ids=" ".join)
def test_json_error_object_for_a_refused_flag(tmp_path, instance_file, path):
    args = [str(a).replace("@out", str(tmp_path / "o")).replace("@inst", str(instance_file))
            for a in BAD_VALUE[path]]
    with watch_work() as work:
        result = runner.invoke(app, [*path, *args, "--json"])
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = [x for x in result.stderr.splitlines() if x.strip()]
    error = json.loads(result.stdout)
    assert error == {"error": line.removeprefix("error: "), "exit_status": 2,
                     "field": line.removeprefix("error: ").split(": ", 1)[0]}
    assert error["field"]  # the flag, path or argument the line names
    assert not work, work


@pytest.mark.parametrize("path", leaf_commands(), ids=" ".join)
def test_json_error_object_for_a_parser_error(path):
    result = runner.invoke(app, [*path, "--no-such-flag", "--json"])
    assert result.exit_code == 2
    (line,) = [x for x in result.stderr.splitlines() if x.strip()]
    assert json.loads(result.stdout) == {"error": line.removeprefix("error: "), "exit_status": 2,
                                         "field": "--no-such-flag"}
    plain = runner.invoke(app, [*path, "--no-such-flag"])  # without --json: nothing on stdout
    assert plain.exit_code == 2 and plain.stdout == ""


def test_json_error_object_for_a_missing_value_and_an_unknown_command():
    missing = runner.invoke(app, ["solve", "--json", "--depth"])
    assert missing.exit_code == 2 and json.loads(missing.stdout)["field"] == "--depth"
    unknown = runner.invoke(app, ["check", "nothing", "--json"])
    assert unknown.exit_code == 2
    assert json.loads(unknown.stdout) == {"error": unknown.stderr.strip().removeprefix("error: "),
                                          "exit_status": 2, "field": None}
    after_separator = runner.invoke(app, ["solve", "--bogus", "--", "--json"])
    assert after_separator.exit_code == 2 and after_separator.stdout == ""


def test_interrupt_with_json_is_one_object_exit_130(monkeypatch):
    from speclp.proofs import single_path as core  # where `speclp solve` builds its built-in

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(core, "builtin_instance", interrupted)
    result = runner.invoke(app, ["solve", "--json"])
    assert result.exit_code == 130 and result.stderr.strip() == "interrupted"
    assert json.loads(result.stdout) == {"error": "interrupted", "exit_status": 130, "field": None}


@pytest.mark.parametrize("call, field, reason", [
    (lambda m: m.optimum(dirichlet_instance(2, 1, seed=0), 1, method="simplex"), "method",
     "must be one of auto, colgen, full, closed-form, got 'simplex'"),
    (lambda m: m.optimum(dirichlet_instance(2, 1, seed=0), 1, backend="glpk"), "backend",
     "must be one of highs, cvxpy, got 'glpk'"),
])
def test_the_lp_engine_refuses_a_choice_with_the_one_wording(call, field, reason):
    """lp.engine checks its choices with speclp.inputs.choice (no second copy of the check)."""
    import speclp.lp.engine as engine
    from speclp.inputs import BadArgument
    from speclp.proofs import gap
    assert not hasattr(engine, "check_choice") and not hasattr(gap, "check_choice")
    with pytest.raises(BadArgument) as caught:
        call(engine)
    assert (caught.value.field, caught.value.reason) == (field, reason)
    with pytest.raises(BadArgument) as caught:
        gap.gap(dirichlet_instance(2, 1, seed=0), 1, draft_sampling="sorted")
    assert (caught.value.field, caught.value.reason) == (
        "draft_sampling", "must be one of iid, without-replacement, got 'sorted'")
