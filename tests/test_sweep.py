"""speclp.experiments.sweep / plots and `speclp sweep` / `speclp plot`: resumability (injected
interrupt and a real signal), Dask, size guard, formats, figures."""

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
from speclp.experiments.plots import plot_results
from speclp.experiments.sweep import (
    ResultStore,
    SweepSpec,
    SweepTooLarge,
    estimate_cell,
    load_results,
    plan,
    run_sweep,
    summarize,
)
from speclp.proofs.gap import DEFAULT_VERIFIERS
from typer.testing import CliRunner

runner = CliRunner()
VERIFIERS = ["bv", "gbv", "specinfer"]


def tiny_spec(**kw):
    base = dict(vocab=[2], depth=[1, 2], paths=[1, 2], alpha=[1.0], trials=2,
                verifiers=VERIFIERS)
    base.update(kw)
    return SweepSpec(**base)


class Stop(Exception):
    pass


def test_plan_grid_and_ids():
    spec = tiny_spec(temperature=[2.0])
    tasks, skipped = plan(spec)
    assert skipped == []
    # 2 depths x 2 K x (1 alpha + 1 temperature) x 2 trials
    assert len(tasks) == 16
    ids = [t.instance_id for t in tasks]
    assert len(set(ids)) == 16
    assert "dirichlet-V2-L2-a1-s1-K2-iid" in ids
    assert "temperature-V2-L1-T2-s0-K1-iid" in ids


def test_size_guard():
    # V=4, L=3, K=3: C(64 + 2, 3) = 45,760 multisets x 10 nodes x 4 tokens + 84 A(z)
    assert estimate_cell(4, 3, 3)["variables"] == 45_760 * 10 * 4 + 84
    spec = tiny_spec(vocab=[2, 4], depth=[3], paths=[1, 3], method="full")
    with pytest.raises(SweepTooLarge, match=r"V=4 L=3 K=3: full LP about 1,830,484 variables"):
        plan(spec)
    tasks, skipped = plan(spec, skip_large=True)
    assert [(c["vocab"], c["depth"], c["paths"]) for c in skipped] == [(4, 3, 3)]
    assert {(t.vocab, t.paths) for t in tasks} == {(2, 1), (2, 3), (4, 1)}


def test_interrupted_sweep_resumes_without_recomputing(tmp_path):
    """An exception after 3 finished tasks: those 3 are saved; the rerun computes only the
    other 5, keeps the first run's rows untouched, and nothing is duplicated or lost."""
    spec = tiny_spec()
    tasks, _ = plan(spec)
    seen = []

    def stop_after_three(result):
        seen.append(result["instance_id"])
        if len(seen) == 3:
            raise Stop

    with pytest.raises(Stop):
        run_sweep(spec, tmp_path, batch=100, flush_seconds=1e9, on_result=stop_after_three)
    store = ResultStore(tmp_path)
    assert store.done() == set(seen)
    first = store.load()
    assert len(first) == 3 * len(VERIFIERS)
    assert not (tmp_path / "results.parquet").exists()
    assert not [p for p in (tmp_path / "parts").iterdir() if p.name.startswith(".")]

    computed_again = []
    summary = run_sweep(spec, tmp_path, batch=2,
                        on_result=lambda r: computed_again.append(r["instance_id"]))
    assert summary["done_before"] == 3
    assert summary["computed"] == len(tasks) - 3
    assert set(computed_again) == {t.instance_id for t in tasks} - set(seen)
    assert summary["complete"] is True
    final = load_results(tmp_path)
    assert len(final) == len(tasks) * len(VERIFIERS)
    assert not final.duplicated(["instance_id", "verifier"]).any()
    assert set(final["instance_id"]) == {t.instance_id for t in tasks}
    # the first run's rows are the same rows (same run id and timestamps), not recomputed
    kept = final[final["instance_id"].isin(seen)].sort_values(["instance_id", "verifier"])
    first = first.sort_values(["instance_id", "verifier"])
    assert kept["run_id"].tolist() == first["run_id"].tolist()
    assert kept["computed_at"].tolist() == first["computed_at"].tolist()
    assert final["run_id"].nunique() == 2
    # a third run has nothing to do
    again = run_sweep(spec, tmp_path)
    assert again["computed"] == 0 and again["done_before"] == len(tasks)
    assert pd.read_parquet(tmp_path / "results.parquet").shape[0] == len(final)


def test_rows_agree_with_theory(tmp_path):
    """K = 1: the optimum is BV's block efficiency and GBV = BV (THEORY sections 3, 4)."""
    run_sweep(tiny_spec(paths=[1]), tmp_path)
    frame = load_results(tmp_path)
    assert frame["optimum_certified"].all()
    assert frame["claim_ok"].all()
    bv = frame[frame["verifier"].isin(["bv", "gbv"])]
    assert (bv["gap"].abs() < 1e-9).all()
    assert ((frame["ratio"] - frame["block_efficiency"] / frame["optimum"]).abs() < 1e-12).all()


def test_summary_counts_gbv_below_bv():
    frame = pd.DataFrame({
        "instance_id": ["a", "a", "b", "b", "c", "c"],
        "verifier": ["gbv", "bv"] * 3,
        "paths": [2, 2, 2, 2, 3, 3],
        "block_efficiency": [1.5, 1.6, 2.0, 1.9, 1.7, 1.7 + 1e-13],
        "gap": [0.3, 0.2, 0.0, 0.1, 0.1, 0.1],
        "optimum_certified": [True] * 6,
        "ratio": [0.8] * 6,
        "claim_ok": [True] * 6,
    })
    s = summarize(frame)
    assert s["gbv_below_bv"]["count"] == 1  # c: below by 1e-13 only, within tolerance
    assert s["gbv_below_bv"]["of"] == 3
    assert s["gbv_mean_gap_per_K"] == {2: pytest.approx(0.15), 3: pytest.approx(0.1)}


def test_dask_local_cluster_matches_in_process(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    spec = tiny_spec(depth=[1], paths=[2])
    run_sweep(spec, tmp_path / "local")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    try:
        # by address, as `speclp sweep --cluster ADDRESS` does
        summary = run_sweep(spec, tmp_path / "dask", cluster=cluster.scheduler_address)
        with distributed.Client(cluster) as client:  # and with a Client object
            again = run_sweep(spec, tmp_path / "dask2", cluster=client)
    finally:
        cluster.close()
    assert summary["computed"] == 2 and summary["complete"]
    assert again["computed"] == 2 and again["complete"]
    a = load_results(tmp_path / "local").sort_values(["instance_id", "verifier"])
    b = load_results(tmp_path / "dask").sort_values(["instance_id", "verifier"])
    assert a["instance_id"].tolist() == b["instance_id"].tolist()
    assert (a["block_efficiency"].to_numpy() == b["block_efficiency"].to_numpy()).all()


def test_csv_format_and_cli_json(tmp_path):
    out = tmp_path / "csv"
    result = runner.invoke(app, ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1,2",
                                 "--alpha", "1", "--temperature", "2", "--trials", "2",
                                 "--format", "csv", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["tasks"] == 8 and summary["computed"] == 8
    assert summary["summary"]["instances"] == 8
    assert (out / "results.csv").exists()
    assert all(p.suffix == ".csv" for p in (out / "parts").iterdir())
    frame = load_results(out / "results.csv")
    assert set(frame["family"]) == {"dirichlet", "temperature"}
    assert frame.loc[frame["family"] == "temperature", "temperature"].eq(2.0).all()
    assert frame["optimum_certified"].all() and set(frame["optimum_method"]) == {"closed-form"}


@pytest.mark.parametrize("args,field", [
    (["--vocab", "1"], "--vocab"),
    (["--vocab", "2,x"], "--vocab"),
    (["--format", "xml"], "--format"),
    (["--trials", "0"], "--trials"),
    (["--alpha", "-1"], "--alpha"),
    (["--method", "simplex"], "--method"),
    (["--samples", "1"], "--samples"),
    (["--max-enumerated", "0"], "--max-enumerated"),
    (["--verifiers", "bv,nope"], "--verifiers"),
    (["--time-limit", "0"], "--time-limit"),
    (["--time-limit", "-1"], "--time-limit"),
    (["--time-limit", "nan"], "--time-limit"),
])
def test_cli_sweep_bad_input_exit_2(tmp_path, args, field):
    base = ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1", "--alpha", "1",
            "--out", str(tmp_path / "o")]
    result = runner.invoke(app, base + args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {field}"), result.output


@pytest.mark.slow
def test_real_interrupt_by_signal_then_resume(tmp_path):
    """`speclp sweep` in a subprocess with 2 worker processes gets SIGTERM once part files
    exist; it exits 130 after saving; the rerun finishes and keeps every saved row."""
    out = tmp_path / "sweep"
    command = [sys.executable, "-c", "from speclp.cli import app; app()", "sweep",
               "--vocab", "2,3", "--depth", "1,2", "--paths", "1,2,3", "--alpha", "1",
               "--trials", "3", "--workers", "2", "--out", str(out),
               "--json"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # guards against a hang only
    parts = out / "parts"
    while time.monotonic() < deadline and proc.poll() is None:
        if parts.is_dir() and any(p.suffix == ".parquet" for p in parts.iterdir()):
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep finished before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert "rerun the same command to resume" in err
    saved = load_results(out)
    saved_ids = set(saved["instance_id"])
    assert 0 < len(saved_ids) < 36
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "COLUMNS": "200"})
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["done_before"] == len(saved_ids)
    assert summary["computed"] == 36 - len(saved_ids)
    final = load_results(out)
    rows_per_instance = len(DEFAULT_VERIFIERS)  # one row per (instance, default verifier)
    assert len(final) == 36 * rows_per_instance
    assert not final.duplicated(["instance_id", "verifier"]).any()
    before = saved.set_index(["instance_id", "verifier"])["computed_at"]
    after = final.set_index(["instance_id", "verifier"]).loc[before.index, "computed_at"]
    assert (before == after).all()


def test_plots_written_and_counted(tmp_path):
    run_sweep(tiny_spec(vocab=[2, 3], depth=[1], paths=[1, 2]), tmp_path / "s")
    made = plot_results(tmp_path / "s", tmp_path / "figs")
    frame = load_results(tmp_path / "s")
    for figure in made["figures"].values():
        assert len(figure["files"]) == 2
        for f in figure["files"]:
            head = Path(f).read_bytes()[:8]
            assert head.startswith(b"\x89PNG") or head.startswith(b"%PDF")
    gbv = frame[frame.verifier == "gbv"].set_index("instance_id")["block_efficiency"]
    bv = frame[frame.verifier == "bv"].set_index("instance_id")["block_efficiency"]
    below = sum(1 for i in gbv.index if gbv[i] < bv[i] - 1e-12)
    assert made["figures"]["gbv_vs_bv"]["gbv_below_bv"] == below
    assert made["figures"]["gbv_vs_bv"]["pairs"] == len(gbv)


def test_cli_plot_bad_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default figure folder is ./speclp-results/NAME_figures
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["plot", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no such file" in result.output
    result = runner.invoke(app, ["plot", str(empty)])
    assert result.exit_code == 2 and "no sweep results" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # a refusal writes nothing


def test_bench_results_are_dispatched(tmp_path, monkeypatch):
    """A folder of JSONL bench records goes to the real-model benchmark's plot_bench."""
    from speclp.cli import sweep as bench_module  # the plot command binds plot_bench

    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "pair.jsonl").write_text('{"verifier": "bv"}\n')
    calls = []

    def fake_plot_bench(records, out):
        calls.append((records, Path(out)))
        return [Path(str(out) + ".png"), Path(str(out) + ".pdf")]

    monkeypatch.setattr(bench_module, "plot_bench", fake_plot_bench)
    result = runner.invoke(app, ["plot", str(bench), "--out", str(tmp_path / "f"), "--json"])
    assert result.exit_code == 0, result.output
    assert calls == [([{"verifier": "bv"}], tmp_path / "f" / "bench")]
    out = json.loads(result.stdout)
    assert out["kind"] == "bench" and len(out["figures"]["bench"]["files"]) == 2
    with pytest.raises(ValueError, match="benchmark results"):
        plot_results(bench, tmp_path / "g")


def test_cli_method_and_estimated_rows(tmp_path):
    # V=2, L=2, K=3 drafted without replacement: traversal's enumeration needs 4*3*2 = 24
    # ordered tuples (no structure off i.i.d. drafts); --max-enumerated 10 makes it an
    # estimate (labelled in the rows and the summary); BV (4 paths) stays exact
    out = tmp_path / "est"
    result = runner.invoke(app, ["sweep", "--vocab", "2", "--depth", "2", "--paths", "3",
                                 "--alpha", "1", "--trials", "1", "--method", "full",
                                 "--max-enumerated", "10", "--samples", "300",
                                 "--draft-sampling", "without-replacement",
                                 "--verifiers", "bv,traversal", "--out", str(out),
                                 "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["summary"]["estimated_rows"] == 1
    assert summary["summary"]["estimated_cells"] == ["V2-L2-K3"]
    frame = load_results(out)
    assert set(frame["optimum_method"]) == {"full"} and frame["optimum_certified"].all()
    estimated = frame[frame["estimate"]]
    assert set(estimated["verifier"]) == {"traversal"}
    assert set(estimated["evaluation"]) == {"estimate"}
    assert (estimated["samples"] == 300).all() and estimated["tv"].isna().all()
    assert ((estimated["ci_low"] < estimated["block_efficiency"])
            & (estimated["block_efficiency"] < estimated["ci_high"])).all()
    exact = frame[~frame["estimate"]]
    assert list(exact["verifier"]) == ["bv"] and (exact["samples"] == 0).all()
    assert list(exact["evaluation"]) == ["single path"]  # (structure vs its cap: test_gap.py)
    assert json.loads((out / "spec.json").read_text())["spec"]["method"] == "full"


def test_sweep_of_bv_and_nodeopt_plots_and_summarises_both(tmp_path):
    """issue 19: `--verifiers bv,nodeopt` could not be plotted ("no rows for verifier 'gbv'")
    and the summary reported GBV's gap only."""
    run_sweep(tiny_spec(verifiers=["bv", "nodeopt"], depth=[2], paths=[2]), tmp_path / "s")
    frame = load_results(tmp_path / "s")
    summary = summarize(frame)
    assert set(summary["mean_gap_per_verifier"]) == {"bv", "nodeopt"}
    assert set(summary["mean_gap_per_verifier_per_K"]["nodeopt"]) == {2}
    made = plot_results(tmp_path / "s", tmp_path / "figs")
    assert "nodeopt_gap_heatmap" in made["figures"] and "gbv_vs_bv" not in made["figures"]
    assert (tmp_path / "figs" / "nodeopt_gap_heatmap.png").exists()
    assert set(frame["evaluation"]) == {"single path", "selection law"}


def test_task_past_its_time_limit_is_an_error_left_for_a_rerun(tmp_path):
    """--time-limit bounds each task's optimum: a task past it (here a limit no solve can
    meet: 1e-9 s) is said on stderr, counted as an error and left unfinished, the other
    tasks (L = 1: the closed form, no time limit) are saved; a rerun with the default limit
    computes only the unfinished task, and its rows are those of a run that never stopped."""
    args = ["sweep", "--vocab", "2", "--depth", "1,2", "--paths", "2", "--alpha", "1",
            "--trials", "1", "--verifiers", "bv,gbv", "--json"]
    out = tmp_path / "o"
    first = runner.invoke(app, args + ["--out", str(out), "--time-limit", "1e-9"])
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    assert summary["computed"] == 1 and summary["complete"] is False
    assert [e["instance_id"] for e in summary["errors"]] == ["dirichlet-V2-L2-a1-s0-K2-iid"]
    assert "time limit" in summary["errors"][0]["error"]
    assert "task dirichlet-V2-L2-a1-s0-K2-iid not finished: OptimumNotFound" in first.stderr
    assert ResultStore(out, "parquet").done() == {"dirichlet-V2-L1-a1-s0-K2-iid"}
    second = runner.invoke(app, args + ["--out", str(out)])
    assert second.exit_code == 0, second.output
    resumed = json.loads(second.stdout)
    assert resumed["done_before"] == 1 and resumed["computed"] == 1 and resumed["complete"]
    fresh = runner.invoke(app, args + ["--out", str(tmp_path / "fresh")])
    assert fresh.exit_code == 0, fresh.output
    columns = ["instance_id", "verifier", "block_efficiency", "optimum_exact"]
    resumed_rows = load_results(out)[columns].sort_values(columns[:2]).reset_index(drop=True)
    fresh_rows = load_results(tmp_path / "fresh")[columns].sort_values(columns[:2])
    pd.testing.assert_frame_equal(resumed_rows, fresh_rows.reset_index(drop=True))
