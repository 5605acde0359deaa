"""Issue 9, results integrity: no result is ever stale, duplicated or written where the user
did not ask (speclp.experiments.store, applied to sweep, trees, realgap, bench)."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from speclp.cli import app
from speclp.experiments import store
from speclp.experiments.sweep import ROW_COLUMNS, SweepSpec, load_results, plan, run_sweep
from speclp.proofs.gap import DEFAULT_VERIFIERS
from tiny_models import tiny_llama_pair
from typer.testing import CliRunner

runner = CliRunner()
SPEC = {"vocab": [2], "trials": 3, "temperature": 1.0}


# --- the store ------------------------------------------------------------------------------

def test_spec_mismatch_names_every_difference(tmp_path):
    with store.open_folder(tmp_path / "r", "sweep", SPEC):
        pass
    with pytest.raises(store.SpecMismatch) as err:
        store.open_folder(tmp_path / "r", "sweep", {**SPEC, "trials": 4, "vocab": [2, 3]})
    assert err.value.differences == ["--vocab [2] in the folder, [2, 3] now",
                                     "--trials 3 in the folder, 4 now"]
    assert "--new-out" in str(err.value)
    with pytest.raises(store.SpecMismatch, match="kind"):
        store.open_folder(tmp_path / "r", "trees", SPEC)
    # the same spec reopens it, and the run is logged
    with store.open_folder(tmp_path / "r", "sweep", {"temperature": 1.0, "trials": 3, "vocab": (2,)}):
        pass
    assert len(store.read_spec(tmp_path / "r")["runs"]) == 2


def test_new_folder_goes_next_to_it_and_resumes_there(tmp_path):
    with store.open_folder(tmp_path / "r", "sweep", SPEC):
        pass
    other = {**SPEC, "trials": 5}
    with store.open_folder(tmp_path / "r", "sweep", other, new_folder=True) as folder:
        assert folder.path == tmp_path / "r-2"
    with store.open_folder(tmp_path / "r", "sweep", other, new_folder=True) as folder:
        assert folder.path == tmp_path / "r-2"  # same spec: resumed, not a third folder
    with store.open_folder(tmp_path / "r", "sweep", {**SPEC, "trials": 6}, new_folder=True) as folder:
        assert folder.path == tmp_path / "r-3"


def test_second_writer_is_refused_until_the_first_closes(tmp_path):
    first = store.open_folder(tmp_path / "r", "sweep", SPEC)
    with pytest.raises(store.FolderBusy, match=f"pid {os.getpid()}"):
        store.open_folder(tmp_path / "r", "sweep", SPEC)
    first.close()
    store.open_folder(tmp_path / "r", "sweep", SPEC).close()


def test_lock_is_released_when_the_writer_is_killed(tmp_path):
    code = ("import sys, time; from speclp.experiments import store; "
            f"held = store.open_folder({str(tmp_path / 'r')!r}, 'sweep', {SPEC!r}); "
            "print('locked', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(store.FolderBusy):
            store.open_folder(tmp_path / "r", "sweep", SPEC)
    finally:
        proc.kill()
        proc.wait()
    store.open_folder(tmp_path / "r", "sweep", SPEC).close()


def test_torn_last_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / "r.jsonl"
    store.append_jsonl(path, {"key": "a"})
    with open(path, "a") as handle:
        handle.write('{"key": "b", "val')  # a writer killed mid-line
    store.append_jsonl(path, {"key": "c"})
    assert [r["key"] for r in store.load_jsonl(path)] == ["a", "c"]


def test_record_keys_and_selection():
    assert store.record_key({"b": 1, "a": (1, 2)}) == store.record_key({"a": [1, 2], "b": 1})
    assert store.record_key({"t": 1.0}) != store.record_key({"t": 0.5})
    records = [{"key": "x", "v": 1}, {"key": "y", "v": 2}, {"key": "x", "v": 3}]
    assert store.select_records(records, ["y", "x", "z"]) == [{"key": "y", "v": 2},
                                                              {"key": "x", "v": 1}]


def test_default_outputs_are_in_the_current_directory():
    assert store.default_out("sweep") == Path("speclp-results") / "sweep"
    root = Path(__file__).resolve().parents[1]
    help_text = runner.invoke(app, ["bench", "--help"]).output + runner.invoke(
        app, ["trees", "--help"]).output + runner.invoke(app, ["realgap", "--help"]).output
    assert "benchmarks/results" not in help_text and "speclp-results" in help_text
    for module in ("cli/bench.py", "cli/trees.py", "cli/realgap.py", "cli/gap.py", "cli/sweep.py"):
        assert 'Path("benchmarks' not in (root / module).read_text()


# --- sweep ----------------------------------------------------------------------------------

def tiny(**kw):
    base = dict(vocab=[2], depth=[1], paths=[1, 2], alpha=[1.0], trials=2,
                verifiers=["bv", "gbv"])
    base.update(kw)
    return SweepSpec(**base)


def test_different_grid_into_an_existing_folder_is_refused(tmp_path):
    out = tmp_path / "s"

    def sweep(trials, *extra):
        return runner.invoke(app, ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1",
                                   "--trials", str(trials),
                                   "--out", str(out), "--json", *extra])

    first = sweep(1)
    assert first.exit_code == 0, first.output
    before = (out / "spec.json").read_text()
    refused = sweep(2)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("error: --out: ")
    assert "--trials 1 in the folder, 2 now" in refused.stderr
    assert (out / "spec.json").read_text() == before  # nothing rewritten
    moved = sweep(2, "--new-out")
    assert moved.exit_code == 0, moved.output
    summary = json.loads(moved.stdout)
    assert summary["out"] == str(tmp_path / "s-2") and summary["computed"] == 2
    rows = len(DEFAULT_VERIFIERS)  # one row per (instance, verifier)
    assert len(load_results(out)) == rows and len(load_results(tmp_path / "s-2")) == 2 * rows


def test_legacy_sweep_json_grid_is_compared(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"spec": {"vocab": [3], "trials": 2}}))
    with pytest.raises(store.SpecMismatch, match=r"--vocab \[3\] in the folder, \[2\] now"):
        run_sweep(tiny(), out)


def test_counts_and_plots_only_see_the_folder_spec(tmp_path):
    """Rows of another grid (and duplicates) in the parts are never counted."""
    out = tmp_path / "s"
    run_sweep(tiny(), out)
    rows = load_results(out)
    tasks = {t.instance_id for t in plan(tiny())[0]}
    assert set(rows["instance_id"]) == tasks and len(rows) == len(tasks) * 2
    stray = rows.copy()
    stray.loc[:, "instance_id"] = stray["instance_id"] + "-other"
    both = pd.concat([rows, stray, rows.iloc[:3]])[list(ROW_COLUMNS)]
    both.to_parquet(out / "parts" / "part-foreign-00000.parquet", index=False)
    again = load_results(out)
    assert set(again["instance_id"]) == tasks and len(again) == len(rows)
    summary = run_sweep(tiny(), out)
    assert summary["rows"] == len(rows) and summary["computed"] == 0


def sweep_command(out, trials=3, workers=1):
    return [sys.executable, "-m", "speclp", "sweep", "--vocab", "2,3", "--depth", "1,2",
            "--paths", "1,2", "--trials", str(trials),
            "--workers", str(workers), "--out", str(out), "--json"]


@pytest.mark.slow
def test_two_concurrent_sweeps_into_one_folder_give_no_duplicates(tmp_path):
    out = tmp_path / "s"
    procs = [subprocess.Popen(sweep_command(out, trials=2), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path) for _ in range(2)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    tasks = 2 * 2 * 2 * 2  # V x L x K x trials
    frame = load_results(out)
    parts = pd.concat([pd.read_parquet(p) for p in (out / "parts").glob("*.parquet")])
    assert not parts.duplicated(["instance_id", "verifier"]).any()  # not even in the raw parts
    assert frame["instance_id"].nunique() == tasks
    if codes == [0, 2]:  # the usual case: the second writer was refused at once
        refusal = next(err for code, _, err in results if code == 2)
        assert refusal.startswith("error: --out: ") and "being written by another speclp run" in refusal
    else:  # the second started after the first had finished: it resumed and computed nothing
        assert codes == [0, 0]
        assert sorted(json.loads(out_)["computed"] for _, out_, _ in results) == [0, tasks]


# A sweep whose pool workers each write a file once die_with_parent has armed them: the test
# below waits on those files, not on CPU time (which depends on how busy the machine is).
ANNOUNCING_SWEEP = """
import os, sys
from pathlib import Path
from speclp.experiments import store

def die_with_parent_then_announce(parent_pid):
    store.die_with_parent(parent_pid)
    (Path(os.environ["SPECLP_TEST_READY"]) / str(os.getpid())).touch()

if __name__ == "__main__":
    from speclp.cli import app
    from speclp.experiments import sweep
    sweep.die_with_parent = die_with_parent_then_announce  # the pool's initializer
    app(sys.argv[1:])
"""


@pytest.mark.slow
def test_killed_parent_leaves_no_worker_alive(tmp_path):
    psutil = pytest.importorskip("psutil", reason="psutil lists the worker processes")
    script, ready = tmp_path / "announcing_sweep.py", tmp_path / "ready"
    script.write_text(ANNOUNCING_SWEEP)
    ready.mkdir()
    command = [sys.executable, str(script), *sweep_command(tmp_path / "s", trials=40, workers=2)[3:]]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=tmp_path, env={**os.environ, "SPECLP_TEST_READY": str(ready)})
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 600  # only guards against a hang
    while time.monotonic() < deadline and proc.poll() is None and len(list(ready.iterdir())) < 2:
        time.sleep(0.2)
    armed = {int(p.name) for p in ready.iterdir()}
    assert proc.poll() is None and len(armed) >= 2, "no two armed workers to orphan"
    everyone = parent.children(recursive=True)
    assert armed <= {p.pid for p in everyone}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(everyone, timeout=60)
    assert not alive, [p.cmdline() for p in alive]


def test_die_with_parent_exits_when_the_parent_is_gone():
    """A worker whose parent is already gone exits at once (before any work)."""
    code = "from speclp.experiments import store; store.die_with_parent(1); print('alive')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 1 and "alive" not in result.stdout


# --- trees and realgap: records keyed on every setting ------------------------------------

def tiny_models():
    return tiny_llama_pair(vocab=40, seed=0)


def test_trees_changed_temperature_seed_or_every_recomputes(tmp_path):
    from speclp.experiments.trees import TreesSpec, run_trees

    target, draft = tiny_models()
    prompts = [{"id": "p0", "tokens": [1, 2, 3, 4]}]
    out = tmp_path / "trees.jsonl"
    base = TreesSpec(budgets=[2], top=2, depth=2, contexts_per_prompt=1, draft_temperature=1.5,
                     no_timing=True, every=2, temperature=1.0)
    first = run_trees(base, target, draft, prompts, out)
    assert first["computed"] == 1
    for change in ({"temperature": 0.5}, {"temperature": 1.0, "seed": 7},
                   {"temperature": 1.0, "every": 3}):
        run = run_trees(dataclasses.replace(base, **change), target, draft, prompts, out)
        assert run["computed"] == 1 and run["reused"] == 0, change
    again = run_trees(base, target, draft, prompts, out)
    assert again["computed"] == 0 and again["keys"] == first["keys"]
    records = store.load_jsonl(out)
    assert len(records) == 4 and len({r["key"] for r in records}) == 4
    assert {r["temperature"] for r in records} == {1.0, 0.5}


def test_realgap_changed_temperature_recomputes_and_summary_counts_only_the_run(tmp_path):
    from speclp.experiments.realgap import run_realgap, summarize_realgap

    target, draft = tiny_models()
    prompts = [{"id": "p0", "tokens": [5, 6, 7]}]
    out = tmp_path / "gap.jsonl"
    common = dict(contexts_per_prompt=1, every=2, draft_temperature=1.5, samples=4, batch=4)
    hot = run_realgap(target, draft, prompts, [1], [1], out, temperature=1.0, **common)
    cold = run_realgap(target, draft, prompts, [1], [1], out, temperature=0.5, **common)
    assert hot["computed"] == cold["computed"] == 1 and cold["reused"] == 0
    records = store.load_jsonl(out)
    assert len(records) == 2
    mine = store.select_records(records, cold["keys"])
    assert [r["temperature"] for r in mine] == [0.5]
    assert summarize_realgap(mine)[0]["contexts"] == 1


def test_trees_cli_refuses_another_spec_before_loading_a_model(tmp_path, monkeypatch):
    from speclp.cli import trees as cli_trees
    from speclp.decode import models

    def loader(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_pair", loader)
    monkeypatch.setattr(cli_trees, "load_pair", loader)  # imported at its top
    out = tmp_path / "t"
    with store.open_folder(out, "trees", {"pair": "smollm2-135m", "temperature": 1.0}):
        pass
    result = runner.invoke(app, ["trees", "--pair", "smollm2-135m", "--temperature", "0.5",
                                 "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --out: ")
    assert "--temperature 1.0 in the folder, 0.5 now" in result.stderr


BENCH_METRICS = {"generated_tokens": 4, "row_steps": 2, "accepted_plus_one": 4,
                 "expected_block_efficiency_sum": 4.0, "scores": {"bv": 4.0}, "batch_id": "b0",
                 "batch_metrics": {"decode_s": 1.0, "prefill_s": 0.1, "draft_s": 0.5,
                                   "target_s": 0.3, "verifier_s": 0.1, "other_s": 0.1,
                                   "score_s": 0.1, "score_seconds": {"bv": 0.1}}}


class Loaded(Exception):
    pass


@pytest.mark.parametrize("stored_dtype, reused", [("float32", True), ("auto", False)])
def test_bench_keys_record_the_dtype_actually_used(tmp_path, monkeypatch, stored_dtype, reused):
    """"auto" is resolved (fp32 on the CPU) before keying: a record keyed "auto" (made when
    auto could mean bf16) is recomputed, one keyed float32 is reused."""
    from speclp.experiments.bench import load_records, run_bench, summarize_bench, text_digest

    def loader():
        raise Loaded

    prompts = [{"id": "prompts.txt:0", "text": "def f():\n"}]
    out = tmp_path / "bench"
    record = {"pair": "t,d", "drive": "gbv", "paths": 1, "depth": 2, "temperature": 1.0,
              "top_p": 1.0, "draft_temperature": None, "max_new_tokens": 4, "dtype": stored_dtype,
              "device": "cpu", "seed": 0, "batch": 8, "scored": ["bv"], "score_dtype": "fp32",
              "prompt_id": "prompts.txt:0", "prompt_digest": text_digest(prompts[0]["text"]),
              **BENCH_METRICS}
    store.append_jsonl(out / "t_d.jsonl", record)
    call = lambda: run_bench(loader, "t,d", prompts, [1], [2], [1.0], ["bv"],  # noqa: E731
                             out / "t_d.jsonl", drive="gbv", max_new_tokens=4, device="cpu")
    if reused:
        result = call()
        assert result["computed"] == 0 and result["reused"] == 1
        assert [c["prompts"] for c in summarize_bench(load_records(out))] == [1]
    else:
        with pytest.raises(Loaded):
            call()
