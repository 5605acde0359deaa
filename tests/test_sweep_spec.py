"""SweepSpec (issue 29, step 2): a frozen dataclass whose construction is the only validation
(BadArgument naming the field, in the wording `speclp sweep` prints), list fields kept as
tuples and written as lists, and the recorded sweep folder benchmarks/results/sweep_grid still
resumes: the spec built from its recorded flags equals its stored spec.json (the bytes, and the
way experiments.store compares specs)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import typer
from speclp.cli import app
from speclp.cli import sweep as cli_sweep
from speclp.experiments.store import open_folder, spec_differences
from speclp.experiments.sweep import SweepSpec, folder_spec
from speclp.inputs import BadArgument
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "benchmarks" / "results" / "sweep_grid" / "spec.json"
GRID = {"vocab": [2], "depth": [1], "paths": [1], "alpha": [1.0], "trials": 1}


def _spec(**kwargs):
    return SweepSpec(**{**GRID, **kwargs})


@pytest.mark.parametrize("kwargs, field, reason", [
    ({"vocab": [2, 1]}, "vocab", "must be >= 2, got 1"),
    ({"vocab": [2.0]}, "vocab", "must be an integer, got 2.0"),
    ({"vocab": "23"}, "vocab", "must be a list, got '23'"),
    ({"vocab": []}, "vocab", "give at least one value"),
    ({"depth": [0]}, "depth", "must be >= 1, got 0"),
    ({"paths": [1, 0]}, "paths", "must be >= 1, got 0"),
    ({"paths": [1, 33]}, "paths", "K = 33 is over the limit of 32 paths (every verifier's law holds K "
                                  "paths per draft configuration); use fewer paths"),
    ({"alpha": [0.0]}, "alpha", "must be > 0, got 0"),
    ({"alpha": [float("nan")]}, "alpha", "must be a finite number, got nan"),
    ({"alpha": [], "temperature": [-1.0]}, "temperature", "must be > 0, got -1"),
    ({"alpha": [], "temperature": []}, "alpha", "give --alpha and/or --temperature values (no family "
                                                "chosen)"),
    ({"trials": 0}, "trials", "must be >= 1, got 0"),
    ({"trials": 1_000_001}, "trials", "the grid has 1,000,001 tasks (cells x alpha/temperature values x "
                                      "trials; limit 1,000,000); use fewer values or trials"),
    ({"seed": -1}, "seed", "must be >= 0, got -1"),
    ({"seed": 2**32}, "seed", "must be <= 4,294,967,295, got 4294967296"),
    ({"draft_sampling": "x"}, "draft_sampling", "must be one of iid, without-replacement, got 'x'"),
    ({"backend": "x"}, "backend", "must be one of highs, cvxpy, got 'x'"),
    ({"method": "closed-form"}, "method", "must be one of auto, colgen, full, got 'closed-form'"),
    ({"backend": "cvxpy"}, "backend", "cvxpy solves the enumerated LP only (method full)"),
    ({"max_variables": 0, "method": "full"}, "max_variables", "must be >= 1, got 0"),
    ({"max_enumerated": 0}, "max_enumerated", "must be >= 1, got 0"),
    ({"samples": 1}, "samples", "must be >= 2, got 1"),
    ({"samples": 10**8}, "samples", "must be <= 10,000,000, got 100000000"),
    ({"verifiers": []}, "verifiers", "give at least one verifier name"),
])
def test_construction_refuses_a_wrong_field_naming_it(kwargs, field, reason):
    with pytest.raises(BadArgument) as caught:
        _spec(**kwargs)
    assert (caught.value.field, caught.value.reason) == (field, reason)


def test_seeds_past_the_largest_seed_are_refused_naming_seed_and_trials():
    """The seeds are seed .. seed + trials - 1: the last one must be a seed numpy and torch take
    (2^32 - 1 = 4,294,967,295), not only the first."""
    largest = 2**32 - 1
    assert _spec(seed=largest, trials=1).seed == largest  # the last seed is the largest: fine
    assert _spec(seed=largest - 3, trials=4).trials == 4
    with pytest.raises(BadArgument) as caught:
        _spec(seed=largest - 2, trials=4)
    assert caught.value.field == "seed/trials" and "4,294,967,296" in caught.value.reason
    result = CliRunner().invoke(app, ["sweep", "--seed", str(largest), "--trials", "2", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["field"] == "--seed/--trials"


def test_an_unknown_verifier_is_refused_as_verifiers():
    with pytest.raises(BadArgument) as caught:
        _spec(verifiers=["bv", "nope"])
    assert caught.value.field == "verifiers" and "unknown verifier 'nope'" in caught.value.reason


def test_the_spec_is_frozen_holds_tuples_and_writes_lists():
    spec = _spec(vocab=[2, 3], temperature=[2.0], verifiers=["bv", "gbv"])
    assert (spec.vocab, spec.alpha, spec.temperature, spec.verifiers) == ((2, 3), (1.0,), (2.0,),
                                                                         ("bv", "gbv"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.trials = 2  # type: ignore[misc]
    with pytest.raises(BadArgument) as caught:  # replace() constructs, so it validates too
        dataclasses.replace(spec, depth=(0,))
    assert caught.value.field == "depth"
    written = spec.as_dict()
    assert written["vocab"] == [2, 3] and written["verifiers"] == ["bv", "gbv"]
    assert list(written) == [f.name for f in dataclasses.fields(SweepSpec)]
    assert SweepSpec(**written) == spec  # a stored spec (lists) reads back as the same spec
    # 2 vocab x 1 depth x 1 paths cells, 2 families, 1 trial each
    assert len(spec.cells()) * len(spec.shapes()) * spec.trials == 4


def _recorded_flags(argv: list[str], out: Path) -> dict:
    """The values `speclp sweep` gets from a recorded command line (click parses it)."""
    command = typer.main.get_command(cli_sweep.commands).commands["sweep"]
    params = command.make_context("sweep", list(argv[1:])).params
    params["out"] = str(out)
    names = cli_sweep.sweep_spec.__code__.co_varnames[:cli_sweep.sweep_spec.__code__.co_kwonlyargcount]
    return {name: params[name] for name in names}


def test_the_recorded_sweep_folder_resumes_with_the_spec_of_its_flags(tmp_path):
    stored = json.loads(RECORDED.read_text())
    assert stored["runs"]
    for run in stored["runs"]:  # every resumed run's command line gives the folder's spec
        flags = _recorded_flags(run["argv"], tmp_path / "grid")
        spec, _ = cli_sweep.sweep_spec(**flags)
        assert spec.vocab == (2, 3, 4, 8) and spec.alpha == (0.5, 1.0) and spec.max_enumerated == 100_000
        wanted = folder_spec(spec, flags["fmt"], skip_large=False)
        assert spec_differences(stored["spec"], wanted) == []  # store's own comparison
        assert json.dumps(wanted, indent=1) == json.dumps(stored["spec"], indent=1)  # same bytes and order
    folder = tmp_path / "grid"
    folder.mkdir()
    shutil.copy(RECORDED, folder / "spec.json")
    with open_folder(folder, "sweep", wanted) as opened:  # SpecMismatch if anything differed
        assert opened.path == folder
    other = folder_spec(dataclasses.replace(spec, trials=3), flags["fmt"], skip_large=False)
    assert spec_differences(stored["spec"], other) == ["--trials 2 in the folder, 3 now"]


@pytest.mark.parametrize("args, line", [
    (["--vocab", "2,1"], "error: --vocab: must be >= 2, got 1"),
    (["--paths", "1,40"], "error: --paths: K = 40 is over the limit of 32 paths (every verifier's law "
                          "holds K paths per draft configuration); use fewer paths"),
    (["--temperature", "inf"], "error: --temperature: must be a finite number, got inf"),
    (["--seed", "-1"], "error: --seed: must be >= 0, got -1"),
    (["--backend", "cvxpy"], "error: --backend: cvxpy solves the enumerated LP only (method full)"),
    (["--method", "full", "--max-variables", "0"], "error: --max-variables: must be >= 1, got 0"),
    (["--draft-sampling", "x"], "error: --draft-sampling: must be one of iid, without-replacement, got 'x'"),
    (["--verifiers", " , "], "error: --verifiers: give at least one verifier name"),
])
def test_the_cli_prints_the_specs_refusal_as_its_flag(args, line, tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1",
                                      "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2, result.output
    assert [x for x in result.stderr.splitlines() if x.strip()] == [line]
    assert not (tmp_path / "o").exists()  # refused before any work
