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
