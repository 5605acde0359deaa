"""`speclp solve` and `speclp check bv-optimal`: anchors, JSON contract, exit codes."""

import json
import subprocess
import sys
from fractions import Fraction

import pytest
from speclp.cli import app
from speclp.lp.instance import bv_toy, dirichlet_instance
from typer.testing import CliRunner

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("depth,bv,token", [
    (2, "20/9", "19/9"), (3, "8/3", "65/27"), (4, "247/81", "211/81")])
def test_solve_bv_toy_anchors(depth, bv, token):
    result = invoke("solve", "--builtin", "bv-toy", "--depth", str(depth), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("lp_full", "lp_node"):
        rec = out[key]
        assert rec["certified"] is True
        assert rec["exact"] == bv
        assert rec["status"] == "optimal"
        assert rec["seconds"] >= 0
        assert abs(rec["value"] - float(Fraction(bv))) < 1e-9
    assert abs(out["verifiers"]["bv"] - float(Fraction(bv))) < 1e-12
    assert abs(out["verifiers"]["token"] - float(Fraction(token))) < 1e-12
    assert out["verifiers_exact"] == {"bv": bv, "token": token}
    assert out["gap_to_optimum"]["bv"] == "0"


def test_solve_default_prints_table():
    result = invoke("solve")
    assert result.exit_code == 0, result.output
    assert "20/9" in result.stdout and "certified" in result.stdout
    # and a sentence saying what the table means (docs/theory.md section 2.4 anchors: 20/9, 19/9)
    meaning = result.stdout.strip().splitlines()[-1]
    assert meaning.startswith("What this means:") and "is 20/9" in meaning
    assert "agree on it, each certified exactly" in meaning
    assert "Block verification (BV) gets 20/9, the optimum exactly: it is optimal here." in meaning
    assert "Token-level verification gets 19/9, 1/9 below the optimum." in meaning


def test_solve_meaning_follows_the_numbers():
    """The sentence is derived from the result: a gap, a missing certificate or a float
    instance change it (never fixed text)."""
    from speclp.cli.core import meaning

    def optimum(exact, value, certified=True):
        return {"exact": exact, "value": value, "certified": certified}

    rational = {"instance": {"vocab_size": 2, "depth": 2, "rational": True},
                "optimum": optimum("2", 2.0), "lp_full": optimum("2", 2.0), "lp_node": optimum("2", 2.0),
                "verifiers": {"bv": 1.9, "token": 1.5}, "verifiers_exact": {"bv": "19/10", "token": "3/2"},
                "gap_to_optimum": {"bv": "1/10", "token": "1/2"}}
    text = meaning(rational)
    assert "BV) gets 19/10, 1/10 below the optimum." in text and "optimal here" not in text
    rational["lp_node"] = optimum("2", 2.0, certified=False)
    assert "NOT all certified" in meaning(rational)
    rational["lp_full"] = optimum("9/4", 2.25)
    assert "DISAGREE" in meaning(rational)
    floats = {**rational, "instance": {"vocab_size": 3, "depth": 1, "rational": False},
              "lp_full": optimum(None, 2.0), "lp_node": optimum(None, 2.0 + 1e-12),
              "optimum": optimum(None, 2.0), "verifiers_exact": {"bv": None, "token": None},
              "gap_to_optimum": {"bv": 1e-13, "token": 0.25}}
    text = meaning(floats)
    assert "agree on it" in text and "exact binary values of its float rows" in text
    assert "the optimum to float precision: it is optimal here" in text and "0.25 below" in text


def test_solve_file_and_cvxpy_backend(tmp_path):
    inst = dirichlet_instance(3, 2, alpha=0.7, seed=4)
    path = inst.save(tmp_path / "inst.json")
    highs = json.loads(invoke("solve", str(path), "--json").stdout)
    cvx = json.loads(invoke("solve", str(path), "--backend", "cvxpy", "--json").stdout)
    assert highs["lp_full"]["certified"]
    assert abs(highs["lp_full"]["value"] - cvx["lp_full"]["value"]) <= 1e-9
    assert abs(highs["lp_node"]["value"] - cvx["lp_node"]["value"]) <= 1e-9
    assert highs["lp_full"]["exact"] is None  # float instance: certified, no fraction printed


BAD_FILES = {
    "vocab": {"vocab_size": 1, "depth": 1, "target": [], "draft": []},
    "depth": {"vocab_size": 2, "depth": 0, "target": [], "draft": []},
    "rowsum": {"vocab_size": 2, "depth": 1, "target": [[0.5, 0.6], [0.5, 0.5], [0.5, 0.5]],
               "draft": [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]},
    "negative": {"vocab_size": 2, "depth": 1, "target": [[1.5, -0.5], [0.5, 0.5], [0.5, 0.5]],
                 "draft": [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]},
    "nan": {"vocab_size": 2, "depth": 1, "target": [["nan", 1], [0.5, 0.5], [0.5, 0.5]],
            "draft": [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]},
    "length": {"vocab_size": 2, "depth": 1, "target": [[0.5, 0.5], [0.5, 0.5]],
               "draft": [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]},
}
FIELDS = {"vocab": "vocab_size", "depth": "depth", "rowsum": "target[0]", "negative": "target[0][1]",
          "nan": "target[0][0]", "length": "target"}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_instance_exits_2_with_one_line(tmp_path, case):
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(BAD_FILES[case]))
    result = invoke("solve", str(path), "--json")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and FIELDS[case] in lines[0]
    # --json: the same error as one JSON object on stdout, naming the file
    assert json.loads(result.stdout) == {"error": lines[0].removeprefix("error: "), "exit_status": 2,
                                         "field": str(path)}


def test_missing_and_malformed_files_exit_2(tmp_path):
    result = invoke("solve", str(tmp_path / "nope.json"))
    assert result.exit_code == 2 and "no such file" in result.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"vocab_size": 2,')
    result = invoke("solve", str(bad))
    assert result.exit_code == 2 and "malformed JSON" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = invoke("solve", "--backend", "glpk")
    assert result.exit_code == 2 and "--backend" in result.stderr


def test_check_bv_optimal_holds():
    result = invoke("check", "bv-optimal", "--trials", "5", "--vocab", "3", "--depth", "2", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] and out["certified"] == 5


def test_check_bv_optimal_rational_exact():
    result = invoke("check", "bv-optimal", "--trials", "4", "--vocab", "2", "--depth", "3",
                    "--denominator", "12", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rational"]


def test_check_fails_on_wrong_verifier_and_saves_instance(tmp_path):
    """Handed a deliberately wrong BV (stops at the first failed test) the check must fail."""
    result = invoke("check", "bv-optimal", "--trials", "3", "--vocab", "3", "--depth", "2",
                    "--verifier", "bv_first_failure", "--save-dir", str(tmp_path), "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["passed"] is False
    saved = list(tmp_path.glob("*.json"))
    assert len(saved) == 1 and out["saved"] == str(saved[0])
    assert json.loads(saved[0].read_text())["vocab_size"] == 3
    assert any("not lossless" in f or "!=" in f for f in out["counterexample"]["failures"])


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "speclp", "solve", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lp_full"]["exact"] == "20/9"


def test_toy_instance_file_roundtrip(tmp_path):
    path = bv_toy(3).save(tmp_path / "toy.json")
    out = json.loads(invoke("solve", str(path), "--json").stdout)
    assert out["lp_full"]["exact"] == "8/3" and out["instance"]["rational"]


def test_command_map_matches_the_registered_commands():
    """cli.COMMANDS names every command once, with the module that defines it and the summary
    `speclp --help` shows (the first line of the command's help), and nothing else is
    registered by those modules."""
    import importlib

    import typer
    from speclp import cli

    for name, (_module, summary) in cli.COMMANDS.items():
        command = cli.load_command(name)
        assert command.name == name
        assert " ".join((command.help or "").split("\n\n")[0].split()) == summary, name
    modules = {module for module, _ in cli.COMMANDS.values()}
    defined = set()
    for module in modules:
        built = typer.main.get_command(importlib.import_module(f"speclp.cli.{module}").commands)
        defined |= set(built.commands) if isinstance(built, typer.core.TyperGroup) else {built.name}
    assert defined == set(cli.COMMANDS)


def test_help_is_light():
    """`speclp --help` imports no command module, hence no torch, scipy or sympy."""
    code = ("import sys; from speclp.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n"
            "    pass\nheavy = [m for m in ('torch', 'scipy', 'sympy', 'speclp.lp') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_solve_optimum_not_found_is_one_line_exit_1(monkeypatch):
    import speclp.proofs.single_path as core  # where `speclp solve` asks for its optima

    real = core.optimum

    def stopped(instance, paths=1, *args, **kwargs):
        if kwargs.get("method", "auto") == "auto":
            return real(instance, paths, *args, **{**kwargs, "time_limit": 0.0,
                                                   "method": "colgen"})
        return real(instance, paths, *args, **kwargs)

    monkeypatch.setattr(core, "optimum", stopped)
    result = CliRunner().invoke(app, ["solve", "--builtin", "bv-toy"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "optimum: optimum not found: time_limit" in lines[0], result.output


def test_a_table_wider_than_the_terminal_folds_its_cells_never_cuts_them(monkeypatch):
    """Issue 28: the audit's table was cut at 100 columns and e-values lost their exponent."""
    import io

    from rich.console import Console
    from speclp.cli import common

    narrow = Console(file=io.StringIO(), width=60)
    monkeypatch.setattr(common, "stdout", narrow)
    value = "1.2345678e-123"
    common.table("t", [f"column {k}" for k in range(8)], [[value] * 8])
    text = narrow.file.getvalue()
    assert "…" not in text
    assert text.count("e") >= 8  # every exponent kept
    assert sum(ch.isdigit() for ch in text) >= 8 * sum(ch.isdigit() for ch in value)


def test_progress_bar_shows_the_time_left_to_a_known_time_limit():
    """Issue 28: the audit's bar counted instances and never showed the time left although
    --time-limit was known."""
    from speclp.cli.common import TimeLimitColumn, _bar

    assert not any(isinstance(c, TimeLimitColumn) for c in _bar(6).columns)
    column = next(c for c in _bar(6, time_limit=60.0).columns if isinstance(c, TimeLimitColumn))
    assert str(column.render(None)).startswith("limit in ")
    column.deadline -= 120.0  # the limit has passed: never a negative time
    assert str(column.render(None)) == "limit in 0s"
