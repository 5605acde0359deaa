"""Figures of a sweep's optimality gaps (speclp.experiments.sweep rows), PNG and PDF.

    gbv_gap_heatmap   GBV's mean gap to the K-path optimum (optimum - E[tau + 1]) per
                      (V, L), one panel per K; a K whose every gap is 0 (K = 1: GBV is BV,
                      which attains the single-path optimum, docs/theory.md Theorem 3.3 and
                      section 9.3) is named in the title instead of drawn as a blank panel;
    ratio_by_verifier distribution of BE / optimum per verifier (box plots of the exactly
                      evaluated rows), one panel per K, y axis fitted to the data; rows
                      ESTIMATED from sampled draft configurations drawn as separate points;
                      verifiers that are not lossless under the rows' draft law (registry)
                      drawn in red at the right and labelled LOSSY: the optimum does not
                      bound them;
    gbv_vs_bv         GBV's against BV's block efficiency on the same (instance, K), with
                      the diagonal; points where GBV < BV - 1e-12 ringed and counted.
Rows whose block efficiency is an ESTIMATE (sampled draft configurations, column estimate)
are labelled on every figure: "est." in the heatmap cells, their own markers and a count in
the ratio figure; gbv_vs_bv plots exact rows only and says how many it left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...lp import tolerances
from ..sweep import lossy_verifiers
from .style import pyplot, save

GBV_BELOW_BV_TOLERANCE = tolerances.ORDER
ZERO_GAP = tolerances.UNCERTIFIED  # a K panel whose every |gap| is below it says nothing


def _estimated(frame: pd.DataFrame) -> pd.Series:
    """Boolean per row: block efficiency estimated from sampled configurations."""
    if "estimate" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["estimate"].fillna(False).astype(bool)


def pooled(frame: pd.DataFrame) -> str:
    """What a figure pools over: the families and their parameters (alpha, temperature) and
    the seeds, said in the title (a box or a cell mixes them)."""
    parts = []
    for column, name in (("family", "family"), ("alpha", "alpha"), ("temperature", "T"),
                         ("seed", "seeds")):
        if column in frame.columns:
            values = sorted({v for v in frame[column].dropna().unique()}, key=str)
            if len(values) > 1 or column == "alpha" and values:
                parts.append(f"{name} " + ", ".join(f"{v:g}" if isinstance(v, float) else str(v)
                                                     for v in values))
    return "pooled over " + "; ".join(parts) if parts else ""


def gap_scale(frame: pd.DataFrame) -> tuple[float, float]:
    """(lowest, highest) mean gap over every (verifier, K, V, L) cell of `frame`: one colour
    scale for every verifier's heatmap, so two heatmaps can be compared cell by cell."""
    means = frame.groupby(["verifier", "paths", "vocab", "depth"])["gap"].mean()
    return float(means.min()), float(means.max())


def _informative_panels(rows: pd.DataFrame) -> tuple[list[Any], dict[Any, int]]:
    """The K values worth a panel, and {K: rows} of those whose every |gap| < ZERO_GAP
    (all of them if every K is zero: the figure must show something)."""
    ks = sorted(rows["paths"].unique())
    worst = rows.groupby("paths")["gap"].apply(lambda g: float(g.abs().max()))
    zero = {k: int((rows["paths"] == k).sum()) for k in ks if worst[k] < ZERO_GAP}
    if len(zero) == len(ks):
        return ks, {}
    return [k for k in ks if k not in zero], zero


def _gap_scale(means: pd.Series) -> tuple[str, Any]:
    """Colour map and norm of the gap heatmap: viridis from 0 when no mean is below
    -ZERO_GAP (float noise); otherwise (a lossy verifier above the optimum, or estimates
    above it by sampling error) a diverging map centred on 0, so that a negative cell does
    not look like a zero one."""
    colors = pyplot().matplotlib.colors
    low, high = float(means.min()), max(float(means.max()), 1e-12)
    if low >= -ZERO_GAP:
        return "viridis", colors.Normalize(vmin=0.0, vmax=high)
    return "RdBu_r", colors.TwoSlopeNorm(vmin=low, vcenter=0.0, vmax=high)


def gap_heatmap(frame: pd.DataFrame, out: Path, verifier: str = "gbv",
                scale: tuple[float, float] | None = None) -> dict[str, Any]:
    """Mean gap of `verifier` to the optimum per (V, L), one panel per K; cells with
    estimated rows say "est." (mean of estimates). scale: the (lowest, highest) mean the
    colour scale spans (gap_scale of the whole sweep: the same colours on every verifier's
    heatmap); None: this verifier's own."""
    plt = pyplot()
    rows = frame[frame["verifier"] == verifier]
    estimated_cells = set(rows[_estimated(rows)].groupby(["paths", "vocab", "depth"]).size().index)
    if rows.empty:
        raise ValueError(f"no rows for verifier {verifier!r}")
    vocabs = sorted(frame["vocab"].unique())
    depths = sorted(frame["depth"].unique())
    ks, zero = _informative_panels(rows)
    means = rows.groupby(["paths", "vocab", "depth"])["gap"].mean()
    counts = rows.groupby(["paths", "vocab", "depth"])["gap"].size()
    lossy = verifier in _lossy(rows)
    cmap, norm = _gap_scale(pd.Series(scale) if scale is not None else means)
    fig, axes = plt.subplots(1, len(ks), figsize=(3.2 * len(ks) + 1.2, 3.4), squeeze=False)
    image = None
    for ax, k in zip(axes[0], ks, strict=True):
        grid = np.full((len(vocabs), len(depths)), np.nan)
        for i, v in enumerate(vocabs):
            for j, d in enumerate(depths):
                if (k, v, d) in means.index:
                    grid[i, j] = means[(k, v, d)]
        image = ax.imshow(grid, cmap=cmap, norm=norm, origin="lower", aspect="auto")
        for i, v in enumerate(vocabs):
            for j, d in enumerate(depths):
                if np.isnan(grid[i, j]):
                    ax.text(j, i, "not run", ha="center", va="center", fontsize=8, color="0.4")
                else:
                    level = float(norm(grid[i, j]))  # dark cells: viridis low, RdBu_r both ends
                    dark = level < 0.6 if cmap == "viridis" else abs(level - 0.5) > 0.3
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
    fig.colorbar(image, ax=axes[0].tolist(), label="mean gap (optimum - E[tau+1])" + (
        "\nnegative: above the optimum" if cmap != "viridis" else "") + (
        "\none scale for every verifier" if scale is not None else ""))
    title = f"{verifier.upper()}: mean gap to the K-path LP optimum" + (
        "\nLOSSY (not lossless under this draft law): the optimum does not bound it, and a "
        "negative gap is not a better verifier" if lossy else "") + "".join(
        f"\nK = {k} not drawn: gap 0 (below {ZERO_GAP:.0e}) on all {n} rows".replace("e-0", "e-") + (
            ";\nthere GBV is BV, which attains the single-path optimum" if k == 1 and
            verifier.startswith("gbv") else "") for k, n in zero.items())
    if estimated_cells:
        title += "\nest. = mean of ESTIMATES (sampled draft configurations, exact law per sample)"
    if pooled(rows):
        title += f"\nn = rows per cell, {pooled(rows)}"
    fig.suptitle(title, y=1.0 + 0.055 * title.count("\n") + 0.03, fontsize=10)
    return {"files": save(fig, out, f"{verifier}_gap_heatmap"),
            "note": f"max cell mean {float(means.max()):.4g}", "panels": [int(k) for k in ks],
            "not_drawn": {int(k): n for k, n in zero.items()}, "lossy": lossy, "colour_map": cmap,
            "colour_range": (float(norm.vmin), float(norm.vmax))}


def _lossy(frame: pd.DataFrame) -> set[str]:
    """Verifiers not lossless under the draft law of their rows (experiments.sweep)."""
    return lossy_verifiers(frame)


def _ratio_limits(values: np.ndarray) -> tuple[float, float]:
    """y limits fitted to the ratios drawn (and the line at 1), with a 6% margin."""
    low, high = min(float(values.min()), 1.0), max(float(values.max()), 1.0)
    pad = 0.06 * max(high - low, 0.02)
    return low - pad, high + pad


def ratio_by_verifier(frame: pd.DataFrame, out: Path) -> dict[str, Any]:
    """Box plots of BE / optimum per verifier (exact rows), one panel per K; estimated rows
    as points; lossy verifiers in red at the right."""
    plt = pyplot()
    estimated = _estimated(frame)
    lossy = _lossy(frame)
    medians = frame.groupby("verifier")["ratio"].median().sort_values(ascending=False)
    order = [v for v in medians.index if v not in lossy] + [v for v in medians.index if v in lossy]
    ks = sorted(frame["paths"].unique())
    fig, axes = plt.subplots(len(ks), 1, figsize=(max(6.0, 0.8 * len(order) + 2), 2.4 * len(ks)),
                             squeeze=False, sharex=True, sharey=True)
    positions = range(1, len(order) + 1)
    shared = _ratio_limits(frame["ratio"].to_numpy())  # one y range for every K row
    shared = (shared[0] - 0.07 * (shared[1] - shared[0]), shared[1])  # room for the n labels
    limits = {}
    for ax, k in zip(axes[:, 0], ks, strict=True):
        part = frame[frame["paths"] == k]
        exact = part[~estimated[part.index]]
        guessed = part[estimated[part.index]]
        data = [exact.loc[exact["verifier"] == v, "ratio"].to_numpy() for v in order]
        boxes = ax.boxplot(data, positions=list(positions), showfliers=True,
                           flierprops={"markersize": 2}, patch_artist=True)
        for box, name in zip(boxes["boxes"], order, strict=True):
            box.set(facecolor="#f4c7c3" if name in lossy else "white",
                    edgecolor="C3" if name in lossy else "black")
        for i, name in enumerate(order, start=1):
            values = guessed.loc[guessed["verifier"] == name, "ratio"].to_numpy()
            ax.scatter(np.full(len(values), i + 0.28), values, s=7, marker="x", color="C0",
                       linewidths=0.8, label="ESTIMATED rows" if i == 1 else None)
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_ylabel(f"K = {k}\nBE / optimum")
        for i, (name, values) in enumerate(zip(order, data, strict=True), start=1):
            extra = int((guessed["verifier"] == name).sum())
            ax.text(i, 0.02, f"n={len(values)}" + (f"+{extra}x" if extra else ""),
                    transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=6,
                    color="0.35")
        limits[int(k)] = shared
        ax.set_ylim(*shared)
        ax.grid(axis="y", alpha=0.3)
    labels = [f"{v}\n(LOSSY)" if v in lossy else v for v in order]
    axes[-1, 0].set_xticks(list(positions), labels, rotation=30, ha="right")
    for tick, name in zip(axes[-1, 0].get_xticklabels(), order, strict=True):
        if name in lossy:
            tick.set_color("C3")
    count = int(estimated.sum())
    lines = ["Block efficiency as a fraction of the K-path LP optimum (dashed: 1 = the optimum); "
             "boxes: exactly evaluated rows (n per box; +m x: estimated rows)"]
    if pooled(frame):
        lines.append(f"every box pools V, L and instances: {pooled(frame)}; one y range for all K")
    if count:
        lines.append(f"x: the {count} of {len(frame)} rows ESTIMATED from sampled draft "
                     "configurations (sampling error can put them above 1)")
    if lossy:
        lines.append(f"red, LOSSY: {', '.join(v for v in order if v in lossy)} is not lossless, "
                     "so the optimum of lossless verifiers does not bound it")
    fig.suptitle("\n".join(lines), fontsize=10)
    fig.tight_layout()
    return {"files": save(fig, out, "ratio_by_verifier"),
            "note": "lossless verifiers ordered by median ratio, then the lossy ones",
            "order": order, "lossy": sorted(lossy), "estimated_rows": count, "y_limits": limits}


def gaps_by_verifier(frame: pd.DataFrame, out: Path) -> dict[str, Any]:
    """Every verifier's mean gap per (V, L, K) in one figure: one panel per K, a row per
    verifier (lossless by overall mean gap, then the lossy ones), a column per (V, L); the
    colour scale of gap_scale (shared with the heatmaps)."""
    plt = pyplot()
    lossy = _lossy(frame)
    overall = frame.groupby("verifier")["gap"].mean()
    order = sorted(overall.index, key=lambda v: (v in lossy, float(overall[v])))
    shapes = sorted({(int(v), int(d)) for v, d in frame[["vocab", "depth"]].itertuples(index=False)})
    ks = sorted(int(k) for k in frame["paths"].unique())
    means = frame.groupby(["paths", "verifier", "vocab", "depth"])["gap"].mean()
    estimated = set(frame[_estimated(frame)].groupby(["paths", "verifier", "vocab", "depth"])
                    .size().index)
    cmap, norm = _gap_scale(pd.Series(gap_scale(frame)))
    fig, axes = plt.subplots(len(ks), 1, squeeze=False, layout="constrained",
                             figsize=(0.62 * len(shapes) + 2.6, 0.3 * len(order) * len(ks) + 1.6))
    image = None
    for ax, k in zip(axes[:, 0], ks, strict=True):
        grid = np.full((len(order), len(shapes)), np.nan)
        for i, name in enumerate(order):
            for j, (v, d) in enumerate(shapes):
                if (k, name, v, d) in means.index:
                    grid[i, j] = means[(k, name, v, d)]
        image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        for i, j in zip(*np.nonzero(~np.isnan(grid)), strict=True):
            level = float(norm(grid[i, j]))
            dark = level < 0.6 if cmap == "viridis" else abs(level - 0.5) > 0.3
            shown = 0.0 if abs(grid[i, j]) < 5e-3 else grid[i, j]
            mark = "*" if (k, order[i], *shapes[j]) in estimated else ""
            ax.text(j, i, f"{shown:.2f}{mark}", ha="center", va="center", fontsize=5.5,
                    color="white" if dark else "black")
        ax.set_yticks(range(len(order)), [f"{n} (LOSSY)" if n in lossy else n for n in order],
                      fontsize=7)
        for tick, name in zip(ax.get_yticklabels(), order, strict=True):
            if name in lossy:
                tick.set_color("C3")
        ax.set_xticks(range(len(shapes)), [f"V{v} L{d}" for v, d in shapes], fontsize=7,
                      rotation=45, ha="right")
        ax.set_ylabel(f"K = {k}")
    fig.colorbar(image, ax=axes[:, 0].tolist(), label="mean gap (optimum - E[tau+1]), "
                 "the scale of every gap heatmap", shrink=0.6)
    lines = ["Mean gap to the K-path LP optimum of every verifier per (V, L, K); blank: not run",
             "rows: lossless verifiers by overall mean gap, then the LOSSY ones (red: the optimum "
             "does not bound them)"]
    if estimated:
        lines.append("*: the cell holds ESTIMATED rows (sampled draft configurations)")
    if pooled(frame):
        lines.append(f"each cell {pooled(frame)}")
    fig.suptitle("\n".join(lines), fontsize=9)
    return {"files": save(fig, out, "gaps_by_verifier"),
            "note": "every verifier's mean gap per (V, L, K), one colour scale",
            "order": order, "lossy": sorted(lossy)}


def gbv_vs_bv(frame: pd.DataFrame, out: Path,
              tolerance: float = GBV_BELOW_BV_TOLERANCE) -> dict[str, Any]:
    """Scatter of GBV's against BV's block efficiency on the same (instance, K)."""
    plt = pyplot()
    pairs = frame[frame["verifier"].isin(["gbv", "bv"])]
    left_out = int(pairs.loc[_estimated(pairs), "instance_id"].nunique())
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
        sel = (both["paths"] == k).to_numpy()
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
    shown = f"{len(both)} exactly evaluated (instance, K) pairs" + (
        f"; {left_out} with an estimated value left out" if left_out else "")
    ax.set_title(f"GBV vs BV on the same instance: {int(worse.sum())} of {len(both)} below BV "
                 f"(tol {tolerance:g})\n{shown}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return {"files": save(fig, out, "gbv_vs_bv"),
            "note": f"GBV < BV on {int(worse.sum())} of {len(both)} (tolerance {tolerance:g})",
            "gbv_below_bv": int(worse.sum()), "pairs": int(len(both))}
