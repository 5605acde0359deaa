"""Figures of a sweep's optimality gaps (speclp.experiments.sweep rows), PNG and PDF.

    gbv_gap_heatmap   GBV's mean gap to the K-path optimum (optimum - E[tau + 1]) per
                      (V, L), one panel per K;
    ratio_by_verifier distribution of BE / optimum per verifier (box plots), one panel per K;
    gbv_vs_bv         GBV's against BV's block efficiency on the same (instance, K), with
                      the diagonal; points where GBV < BV - 1e-12 highlighted and counted.
Rows whose block efficiency is an ESTIMATE (sampled draft configurations, column estimate)
are labelled on every figure: "est." in the heatmap cells, a count in the titles; gbv_vs_bv
plots exact rows only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...lp import tolerances
from .style import pyplot, save

GBV_BELOW_BV_TOLERANCE = tolerances.ORDER


def _estimated(frame: pd.DataFrame) -> pd.Series:
    """Boolean per row: block efficiency estimated from sampled configurations."""
    if "estimate" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["estimate"].fillna(False).astype(bool)


def gap_heatmap(frame: pd.DataFrame, out: Path, verifier: str = "gbv") -> dict[str, Any]:
    """Mean gap of `verifier` to the optimum per (V, L), one panel per K; cells with
    estimated rows say "est." (mean of estimates)."""
    plt = pyplot()
    rows = frame[frame["verifier"] == verifier]
    estimated_cells = set(rows[_estimated(rows)].groupby(["paths", "vocab", "depth"]).size().index)
    if rows.empty:
        raise ValueError(f"no rows for verifier {verifier!r}")
    vocabs = sorted(frame["vocab"].unique())
    depths = sorted(frame["depth"].unique())
    ks = sorted(rows["paths"].unique())
    means = rows.groupby(["paths", "vocab", "depth"])["gap"].mean()
    counts = rows.groupby(["paths", "vocab", "depth"])["gap"].size()
    vmax = max(float(means.max()), 1e-12)
    fig, axes = plt.subplots(1, len(ks), figsize=(3.2 * len(ks) + 1.2, 3.4), squeeze=False)
    image = None
    for ax, k in zip(axes[0], ks, strict=True):
        grid = np.full((len(vocabs), len(depths)), np.nan)
        for i, v in enumerate(vocabs):
            for j, d in enumerate(depths):
                if (k, v, d) in means.index:
                    grid[i, j] = means[(k, v, d)]
        image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=vmax, origin="lower",
                          aspect="auto")
        for i, v in enumerate(vocabs):
            for j, d in enumerate(depths):
                if np.isnan(grid[i, j]):
                    ax.text(j, i, "not run", ha="center", va="center", fontsize=8, color="0.4")
                else:
                    dark = grid[i, j] < 0.6 * vmax
                    shown = 0.0 if abs(grid[i, j]) < 5e-4 else grid[i, j]  # no "-0.000"
                    mark = " est." if (k, v, d) in estimated_cells else ""
                    ax.text(j, i, f"{shown:.3f}{mark}\nn={counts[(k, v, d)]}", ha="center",
                            va="center", fontsize=8, color="white" if dark else "black")
        ax.set_xticks(range(len(depths)), [str(d) for d in depths])
        ax.set_yticks(range(len(vocabs)), [str(v) for v in vocabs])
        ax.set_xlabel("depth L")
        if k == ks[0]:
            ax.set_ylabel("vocabulary V")
        ax.set_title(f"K = {k}")
    fig.colorbar(image, ax=axes[0].tolist(), label="mean gap (optimum - E[tau+1])")
    title = f"{verifier.upper()}: mean gap to the K-path LP optimum"
    if estimated_cells:
        title += ("\n(est. = ESTIMATED from sampled draft configurations, exact law per sample; "
                  "95% CIs in the rows)")
    fig.suptitle(title, y=1.06 if estimated_cells else 1.02)
    return {"files": save(fig, out, f"{verifier}_gap_heatmap"),
            "note": f"max cell mean {float(means.max()):.4g}"}


def ratio_by_verifier(frame: pd.DataFrame, out: Path) -> dict[str, Any]:
    """Box plots of BE / optimum per verifier, one panel per K."""
    plt = pyplot()
    order = (frame.groupby("verifier")["ratio"].median().sort_values(ascending=False)
             .index.tolist())
    ks = sorted(frame["paths"].unique())
    fig, axes = plt.subplots(len(ks), 1, figsize=(max(6.0, 0.8 * len(order) + 2), 2.4 * len(ks)),
                             squeeze=False, sharex=True)
    for ax, k in zip(axes[:, 0], ks, strict=True):
        part = frame[frame["paths"] == k]
        data = [part.loc[part["verifier"] == v, "ratio"].to_numpy() for v in order]
        ax.boxplot(data, showfliers=True, flierprops={"markersize": 2})
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_ylabel(f"K = {k}\nBE / optimum")
        ax.set_ylim(0.0, 1.05)
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xticks(range(1, len(order) + 1), order, rotation=30, ha="right")
    count = int(_estimated(frame).sum())
    fig.suptitle("Block efficiency as a fraction of the K-path LP optimum" + (
        f"\n({count} of {len(frame)} rows ESTIMATED from sampled draft configurations)"
        if count else ""))
    fig.tight_layout()
    return {"files": save(fig, out, "ratio_by_verifier"),
            "note": "verifiers ordered by median ratio"}


def gbv_vs_bv(frame: pd.DataFrame, out: Path,
              tolerance: float = GBV_BELOW_BV_TOLERANCE) -> dict[str, Any]:
    """Scatter of GBV's against BV's block efficiency on the same (instance, K)."""
    plt = pyplot()
    frame = frame[~_estimated(frame)]  # a 1e-12 comparison needs exact block efficiencies
    gbv = frame[frame["verifier"] == "gbv"].set_index("instance_id")
    bv = frame[frame["verifier"] == "bv"].set_index("instance_id")
    if gbv.empty or bv.empty:
        raise ValueError("gbv_vs_bv needs rows of both verifiers gbv and bv")
    both = gbv[["block_efficiency", "paths"]].merge(
        bv[["block_efficiency"]], left_index=True, right_index=True, suffixes=("", "_bv"))
    worse = (both["block_efficiency"] < both["block_efficiency_bv"] - tolerance).to_numpy()
    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    ks = sorted(both["paths"].unique())
    colours = plt.get_cmap("viridis")(np.linspace(0.1, 0.85, len(ks)))
    for colour, k in zip(colours, ks, strict=True):
        sel = (both["paths"] == k).to_numpy() & ~worse
        ax.scatter(both["block_efficiency_bv"][sel], both["block_efficiency"][sel], s=9,
                   color=colour, alpha=0.6, label=f"K = {k}")
    ax.scatter(both["block_efficiency_bv"][worse], both["block_efficiency"][worse], s=28,
               facecolors="none", edgecolors="red", linewidths=1.2,
               label=f"GBV < BV: {int(worse.sum())}/{len(both)}")
    low = float(min(both["block_efficiency_bv"].min(), both["block_efficiency"].min()))
    high = float(max(both["block_efficiency_bv"].max(), both["block_efficiency"].max()))
    ax.plot([low, high], [low, high], color="0.3", lw=0.8, ls="--", label="GBV = BV")
    ax.set_xlabel("BV block efficiency E[tau + 1]")
    ax.set_ylabel("GBV block efficiency E[tau + 1]")
    ax.set_title(f"GBV vs BV on the same instance ({int(worse.sum())} of {len(both)} "
                 f"below BV, tol {tolerance:g})", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return {"files": save(fig, out, "gbv_vs_bv"),
            "note": f"GBV < BV on {int(worse.sum())} of {len(both)} (tolerance {tolerance:g})",
            "gbv_below_bv": int(worse.sum()), "pairs": int(len(both))}
