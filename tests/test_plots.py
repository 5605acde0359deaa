"""The figures' content decisions (experiments/plots): which panels are drawn, the fitted y
axis, lossy verifiers marked, estimated rows kept apart; on small frames built by hand
(values chosen here, not read back from the code)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from speclp.experiments.plots import plot_trees_file, trees_title
from speclp.experiments.plots.sweep import (
    _gap_scale,
    _informative_panels,
    _lossy,
    _ratio_limits,
    gap_heatmap,
    gbv_vs_bv,
    ratio_by_verifier,
)


def frame_of(rows: list[dict]) -> pd.DataFrame:
    base = {"vocab": 2, "depth": 1, "draft_sampling": "iid", "tv": 0.0, "estimate": False,
            "block_efficiency": 1.5}
    out = pd.DataFrame([{**base, **r} for r in rows])
    out["optimum"] = out["block_efficiency"] / out["ratio"]
    return out


def sweep_like() -> pd.DataFrame:
    rows = []
    for i, k in enumerate([1, 1, 2, 2, 3]):
        gap = 0.0 if k == 1 else 0.1 * k
        for name, ratio in (("gbv", 1 - gap), ("bv", 0.85), ("spectr_gbv", 1.2),
                            ("nss", 0.8)):
            rows.append({"instance_id": i, "paths": k, "verifier": name, "ratio": ratio,
                         "gap": gap if name == "gbv" else 0.05, "block_efficiency": 1.5 * ratio})
    rows.append({"instance_id": 9, "paths": 3, "verifier": "gbv", "ratio": 1.01, "gap": -0.01,
                 "estimate": True})
    rows.append({"instance_id": 9, "paths": 3, "verifier": "bv", "ratio": 0.85, "gap": 0.1})
    return frame_of(rows)


def test_zero_gap_panels_are_named_not_drawn():
    frame = sweep_like()
    gbv = frame[frame.verifier == "gbv"]
    assert _informative_panels(gbv) == ([2, 3], {1: 2})
    only_zero = gbv[gbv.paths == 1]
    assert _informative_panels(only_zero) == ([1], {})  # nothing else: draw it


def test_lossy_from_the_registry_and_from_tv():
    frame = frame_of([
        {"verifier": "gbv", "paths": 2, "ratio": 1.0},
        {"verifier": "spectr_gbv", "paths": 2, "ratio": 1.1},
        {"verifier": "rrsw", "paths": 2, "ratio": 1.0, "draft_sampling": "without-replacement"},
        {"verifier": "gbv_clipped", "paths": 2, "ratio": 1.0, "draft_sampling": "without-replacement"},
        {"verifier": "someone_elses", "paths": 2, "ratio": 1.0, "tv": 0.01},
        {"verifier": "another_one", "paths": 2, "ratio": 1.0, "tv": 0.0},
    ])
    # gbv_clipped is declared lossless for i.i.d. drafts only (docs/theory.md section 9.2)
    assert _lossy(frame) == {"spectr_gbv", "gbv_clipped", "someone_elses"}


def test_ratio_axis_fitted_to_the_data_not_from_zero():
    low, high = _ratio_limits(np.array([0.9, 0.95, 1.0]))
    assert 0.85 < low < 0.9 and 1.0 < high < 1.02
    low, high = _ratio_limits(np.array([0.5, 1.2]))
    assert low < 0.5 and high > 1.2


def test_ratio_figure_orders_lossy_last_and_counts_estimates(tmp_path: Path):
    made = ratio_by_verifier(sweep_like(), tmp_path)
    assert made["order"][-1] == "spectr_gbv" and made["lossy"] == ["spectr_gbv"]
    assert made["order"][:3] == ["gbv", "bv", "nss"]  # lossless by median ratio
    assert made["estimated_rows"] == 1
    assert all(0.5 < low < 0.8 for low, _ in made["y_limits"].values())
    assert all(Path(f).stat().st_size > 0 for f in made["files"])


def test_heatmap_and_scatter_on_the_same_frame(tmp_path: Path):
    frame = sweep_like()
    heat = gap_heatmap(frame, tmp_path)
    assert heat["panels"] == [2, 3] and heat["not_drawn"] == {1: 2}
    pairs = gbv_vs_bv(frame, tmp_path)
    # instance 9 (an estimated GBV value) is left out; GBV (1 - 0.1 K) < BV (0.85) at K = 2, 3
    assert pairs["pairs"] == 5 and pairs["gbv_below_bv"] == 3


def test_trees_figures_redrawn_from_a_recorded_file(tmp_path: Path):
    recorded = Path(__file__).resolve().parents[1] / "benchmarks/results/trees/smollm2-135m.jsonl"
    lines = [json.loads(line) for line in recorded.read_text().splitlines() if line.strip()]
    title = trees_title(lines)
    assert title.startswith(lines[0]["pair"]) and f": {len(lines)} contexts, M=4, L=4" in title
    files = plot_trees_file(recorded, tmp_path)
    assert sorted(Path(f).name for f in files) == sorted(
        f"{name}.{ext}" for name in ("trees_acceptance", "trees_walltime_modelled")
        for ext in ("png", "pdf"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no trees records"):
        plot_trees_file(empty, tmp_path)


def test_redrawing_the_same_data_writes_the_same_bytes(tmp_path: Path):
    """No creation date in the PDF: a redraw of unchanged data leaves recorded figures as
    they are (no churn in benchmarks/results)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = ratio_by_verifier(sweep_like(), tmp_path / "a")["files"]
    second = ratio_by_verifier(sweep_like(), tmp_path / "b")["files"]
    assert [Path(f).read_bytes() for f in first] == [Path(f).read_bytes() for f in second]
    pdf = next(Path(f) for f in first if f.endswith(".pdf")).read_bytes()
    assert pdf.startswith(b"%PDF") and b"/CreationDate" not in pdf


def test_negative_gaps_get_a_diverging_scale(tmp_path: Path):
    """A lossy verifier can sit above the optimum (negative gap): it must not share the
    colour of a zero gap; float noise (|gap| < 1e-7) keeps the plain scale."""
    assert _gap_scale(pd.Series([0.0, 0.2, -1e-13]))[0] == "viridis"
    cmap, norm = _gap_scale(pd.Series([-0.1, 0.0, 0.2]))
    assert cmap == "RdBu_r" and float(norm(0.0)) == 0.5 and float(norm(-0.1)) == 0.0
    heat = gap_heatmap(sweep_like(), tmp_path, verifier="spectr_gbv")  # gap 0.05 everywhere
    assert heat["lossy"] and heat["colour_map"] == "viridis"
    frame = sweep_like()
    frame.loc[frame.verifier == "spectr_gbv", "gap"] = -0.2
    heat = gap_heatmap(frame, tmp_path, verifier="spectr_gbv")
    assert heat["lossy"] and heat["colour_map"] == "RdBu_r"
    assert not gap_heatmap(frame, tmp_path, verifier="gbv")["lossy"]


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
# folders of records that other scripts draw (benchmarks/*.py): `speclp plot` refuses them
# (exit 2, naming what it reads); every other recorded folder is redrawn
NOT_PLOT_RECORDS = {"beyond/adversarial", "beyond/adversarial_bv_extended", "beyond/realgap",
                    "beyond/sweep", "gap_robustness", "gap_speed", "realgap/l3"}


def recorded_folders() -> list[str]:
    """Every folder under benchmarks/results that `speclp plot` reads: a sweep (parts/) or
    JSONL records (found by walking, so a new recorded folder is covered without an edit)."""
    found = {p.parent for p in RESULTS.rglob("*.jsonl")} | {p.parent for p in RESULTS.rglob("parts")}
    return sorted(str(p.relative_to(RESULTS)) for p in found if p != RESULTS)


def test_the_walk_finds_the_known_folders():
    folders = set(recorded_folders())
    assert {"bench", "realgap", "trees", "sweep", "sweep_L4"} <= folders
    assert NOT_PLOT_RECORDS <= folders


@pytest.mark.slow
@pytest.mark.parametrize("folder", recorded_folders())
def test_plot_redraws_every_recorded_folder(folder: str, tmp_path: Path):
    from speclp.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["plot", str(RESULTS / folder), "--out", str(tmp_path),
                                      "--json"])
    if folder in NOT_PLOT_RECORDS:
        assert result.exit_code == 2 and "no bench, realgap or trees records" in result.output
        return
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    files = [Path(f) for fig in out["figures"].values() for f in fig["files"]]
    assert files and all(f.is_file() and f.stat().st_size > 1000 for f in files)
    assert all(tmp_path in f.parents for f in files)  # the recorded figures are not touched


def bench_record(prompt: str, scores: dict[str, float]) -> dict:
    """A paired bench record with the fields summarize_bench reads (values chosen here)."""
    return {"pair": "p", "drive": "gbv", "paths": 2, "depth": 2, "temperature": 1.0,
            "scored": sorted(scores), "prompt_id": prompt, "row_steps": 2, "generated_tokens": 4,
            "accepted_plus_one": 4, "scores": scores, "batch_id": prompt,
            "batch_metrics": {f"{p}_s": 1.0 for p in ("decode", "prefill", "draft", "target",
                                                     "verifier", "other", "score")}}


def test_runs_with_other_verifier_sets_are_separate_rows(tmp_path: Path):
    """The recorded bench folder holds runs on the same tree that scored different verifiers
    (spectr only in the older ones): each run gets its own row (the KeyError 'spectr' of
    issue 28), and a verifier is drawn only where it was scored."""
    from speclp.experiments.plots import bench_rows, plot_bench

    old = [bench_record(p, {"bv": 5.0, "gbv": 6.0, "spectr": 4.0}) for p in "ab"]
    new = [{**bench_record(p, {"bv": 5.0, "gbv": 5.8}), "score_grid": True} for p in "ab"]
    assert len(bench_rows(old + new)) == 2
    files = plot_bench(old + new, tmp_path / "bench")
    assert all(f.stat().st_size > 1000 for f in files)


def test_bench_interval_clipped_to_what_the_quantity_can_take():
    from speclp.experiments.plots.bench import _clip

    iv = {"estimate": 1.2, "low": 0.7, "high": 3.4}
    assert _clip(iv, 1.0, 3.0) == {"estimate": 1.2, "low": 1.0, "high": 3.0}
    assert _clip({"estimate": 1.5, "low": None, "high": None}, 1.0, 3.0)["low"] is None
    assert _clip({"estimate": 3.2, "low": 2.0, "high": 4.0}, 1.0, 3.0)["high"] == 3.2


def test_a_drawing_error_is_internal_not_bad_input(tmp_path: Path, monkeypatch):
    """Readable records that fail to draw: exit 3 with the traceback under SPECLP_DEBUG=1;
    records that cannot be read: exit 2 naming RESULTS."""
    from speclp.cli import app
    from speclp.experiments.plots import bench as bench_plot
    from typer.testing import CliRunner

    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "p.jsonl").write_text("".join(json.dumps(bench_record(p, {"bv": 5.0, "gbv": 6.0}))
                                            + "\n" for p in "ab"))

    def broken(*args, **kwargs):
        raise KeyError("a plotting bug")

    monkeypatch.setattr(bench_plot, "_errorbar", broken)
    monkeypatch.setenv("SPECLP_DEBUG", "1")
    result = CliRunner().invoke(app, ["plot", str(folder), "--out", str(tmp_path / "f")])
    assert result.exit_code == 3, result.output
    assert "internal error: KeyError" in result.output and "Traceback" in result.output
    monkeypatch.delenv("SPECLP_DEBUG")
    (folder / "p.jsonl").write_text(json.dumps({**bench_record("a", {"bv": 5.0}), "row_steps": None})
                                    + "\n")
    result = CliRunner().invoke(app, ["plot", str(folder), "--out", str(tmp_path / "f")])
    assert result.exit_code == 2 and "RESULTS:" in result.output
    assert "not readable bench records" in result.output


def test_sweep_summary_separates_lossy_and_zeroes_float_noise():
    """spectr_gbv (lossy, registry) is listed after every lossless verifier even with the
    smallest mean gap; a mean gap of 8.3e-17 (issue 28) is written 0, a real 1e-3 is kept."""
    from speclp.experiments.sweep import GAP_ZERO, summarize

    rows = []
    for i, k in enumerate([1, 1, 2]):
        for name, gap in (("gbv", 8.327e-17 if k == 1 else 0.1), ("bv", 1e-3 if k == 1 else 0.3),
                          ("spectr_gbv", -0.05)):
            rows.append({"instance_id": i, "paths": k, "verifier": name, "gap": gap,
                         "ratio": 1.0, "block_efficiency": 1.0, "optimum_certified": True,
                         "claim_ok": True})
    s = summarize(frame_of(rows))
    assert s["lossy_verifiers"] == ["spectr_gbv"] and s["gap_zero_tolerance"] == GAP_ZERO
    assert list(s["mean_gap_per_verifier"]) == ["gbv", "bv", "spectr_gbv"]
    assert s["mean_gap_per_verifier_per_K"]["gbv"][1] == 0.0
    assert s["mean_gap_per_verifier_per_K"]["bv"][1] == pytest.approx(1e-3)
    assert s["mean_gap_per_verifier"]["gbv"] == pytest.approx(0.1 / 3)
    assert s["gbv_mean_gap_per_K"] == {1: 0.0, 2: pytest.approx(0.1)}


def test_one_colour_scale_for_every_heatmap_and_one_y_range(tmp_path: Path):
    """plot_results gives every verifier's heatmap the scale of the whole sweep (gbv's cell
    means alone span 0..0.2: K = 2 0.2, K = 3 (0.3 - 0.01) / 2; spectr_gbv sits at -0.2:
    both heatmaps span -0.2..0.2); the ratio figure
    has one y range for all K; the comparison figure lists lossless before lossy."""
    from speclp.experiments.plots import gap_scale, gaps_by_verifier

    frame = sweep_like()
    frame.loc[frame.verifier == "spectr_gbv", "gap"] = -0.2
    assert gap_scale(frame) == pytest.approx((-0.2, 0.2))
    own = gap_heatmap(frame, tmp_path, verifier="gbv")
    shared = gap_heatmap(frame, tmp_path, verifier="gbv", scale=gap_scale(frame))
    other = gap_heatmap(frame, tmp_path, verifier="spectr_gbv", scale=gap_scale(frame))
    assert own["colour_range"] == pytest.approx((0.0, 0.2))
    assert shared["colour_range"] == other["colour_range"] == pytest.approx((-0.2, 0.2))
    limits = ratio_by_verifier(frame, tmp_path)["y_limits"]
    assert len(set(limits.values())) == 1
    made = gaps_by_verifier(frame, tmp_path)
    # overall mean gaps: nss 0.05, bv (5 x 0.05 + 0.1) / 6, gbv (0.4 + 0.3 - 0.01) / 6; lossy last
    assert made["order"] == ["nss", "bv", "gbv", "spectr_gbv"] and made["lossy"] == ["spectr_gbv"]
    assert all(Path(f).stat().st_size > 1000 for f in made["files"])


def test_realgap_runs_of_one_pair_get_their_own_figures(tmp_path: Path):
    """The recorded smollm2-135m.jsonl holds two runs (11 verifiers at L <= 2; 6 verifiers at
    L <= 4): two figures, never one with both runs' contexts side by side; one run keeps the
    plain name that `speclp realgap` writes."""
    from speclp.experiments.plots import plot_realgap
    from speclp.experiments.store import load_jsonl

    records = load_jsonl(RESULTS / "realgap" / "smollm2-135m.jsonl")
    sizes = {len(r["verifiers"]) for r in records if r.get("mode") == "full-vocabulary"}
    assert sizes == {11, 6}
    files = plot_realgap(records, tmp_path)
    assert [f.name for f in files] == ["realgap_smollm2-135m_run1.png",
                                       "realgap_smollm2-135m_run2.png"]
    six = [r for r in records if len(r.get("verifiers") or []) == 6]
    assert [f.name for f in plot_realgap(six, tmp_path / "one")] == ["realgap_smollm2-135m.png"]
