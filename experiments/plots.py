"""Figures of a sweep's optimality gaps (PNG and PDF), and dispatch to benchmark plots.

    plot_results(RESULTS, out) -> {"out": dir, "figures": {name: {"files": [...], "note"}}}

Sweep figures (speclp.experiments.sweep rows):
    gbv_gap_heatmap   GBV's mean gap to the K-path optimum (optimum - E[tau + 1]) per
                      (V, L), one panel per K;
    ratio_by_verifier distribution of BE / optimum per verifier (box plots), one panel per K;
    gbv_vs_bv         GBV's against BV's block efficiency on the same (instance, K), with
                      the diagonal; points where GBV < BV - 1e-12 highlighted and counted.
Rows whose block efficiency is an ESTIMATE (sampled draft configurations, column estimate)
are labelled on every figure: "est." in the heatmap cells, a count in the titles; gbv_vs_bv
plots exact rows only.
A benchmark results directory (JSONL files, e.g. benchmarks/results/bench/) is recognised
by is_bench_results; `speclp plot` hands it to the real-model benchmark's plot_bench
(speclp.experiments.bench).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..proofs.tree_selection import RULES
from .bench import REFERENCE, summarize_bench
from .realgap import summarize_realgap, summarize_renormalised
from .store import slug
from .sweep import load_results
from .trees import summarize_trees

GBV_BELOW_BV_TOLERANCE = 1e-12


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path, name: str) -> list[str]:
    files = []
    for ext in ("png", "pdf"):
        path = out / f"{name}.{ext}"
        fig.savefig(path, dpi=150 if ext == "png" else None, bbox_inches="tight")
        files.append(str(path))
    _pyplot().close(fig)
    return files


def _estimated(frame: pd.DataFrame) -> pd.Series:
    """Boolean per row: block efficiency estimated from sampled configurations."""
    if "estimate" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["estimate"].fillna(False).astype(bool)


def gap_heatmap(frame: pd.DataFrame, out: Path, verifier: str = "gbv") -> dict[str, Any]:
    """Mean gap of `verifier` to the optimum per (V, L), one panel per K; cells with
    estimated rows say "est." (mean of estimates)."""
    plt = _pyplot()
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
    return {"files": _save(fig, out, f"{verifier}_gap_heatmap"),
            "note": f"max cell mean {float(means.max()):.4g}"}


def ratio_by_verifier(frame: pd.DataFrame, out: Path) -> dict[str, Any]:
    """Box plots of BE / optimum per verifier, one panel per K."""
    plt = _pyplot()
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
    return {"files": _save(fig, out, "ratio_by_verifier"),
            "note": "verifiers ordered by median ratio"}


def gbv_vs_bv(frame: pd.DataFrame, out: Path,
              tolerance: float = GBV_BELOW_BV_TOLERANCE) -> dict[str, Any]:
    """Scatter of GBV's against BV's block efficiency on the same (instance, K)."""
    plt = _pyplot()
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
    return {"files": _save(fig, out, "gbv_vs_bv"),
            "note": f"GBV < BV on {int(worse.sum())} of {len(both)} (tolerance {tolerance:g})",
            "gbv_below_bv": int(worse.sum()), "pairs": int(len(both))}


def is_bench_results(path: Path) -> bool:
    """A benchmark results directory: JSONL files and no sweep parts."""
    if path.is_file():
        return path.suffix == ".jsonl"
    return (path.is_dir() and not (path / "parts").is_dir()
            and any(path.glob("*.jsonl")))


def plot_results(results: str | Path, out: str | Path | None = None) -> dict[str, Any]:
    """Write the figures of a sweep to `out` (default: RESULTS_figures next to RESULTS).

    Returns {"out", "kind": "sweep", "instances", "figures": {name: {"files", "note", ...}}}.
    """
    path = Path(results)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    target = Path(out) if out else path.with_name(path.stem + "_figures")
    target.mkdir(parents=True, exist_ok=True)
    if is_bench_results(path):
        raise ValueError(f"{path} holds benchmark results (JSONL), not a sweep: use "
                         "`speclp plot` (plot_bench below)")
    frame = load_results(path)
    figures = {
        "gbv_gap_heatmap": gap_heatmap(frame, target),
        "ratio_by_verifier": ratio_by_verifier(frame, target),
        "gbv_vs_bv": gbv_vs_bv(frame, target),
    }
    return {"out": str(target), "kind": "sweep", "instances": int(frame["instance_id"].nunique()),
            "figures": figures}


# --- moved from experiments/trees.py ---

def plot_trees(records: list[dict[str, Any]], out_dir: Any, title: str = "") -> list[Any]:
    """Two figures: expected tokens per round vs budget per rule; modelled s/token vs budget."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize_trees(records)
    if not summary:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    colors = {rule: f"C{i}" for i, rule in enumerate(RULES + ("oracle",))}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for rule in dict.fromkeys(s["rule"] for s in summary):
        pts = [s for s in summary if s["rule"] == rule]
        style = "--" if rule == "oracle" else "-"
        axes[0].plot([s["budget"] for s in pts], [s["tokens_per_round"] for s in pts], style,
                     marker="o", label=rule, color=colors.get(rule))
        ok = [s for s in pts if s["tokens_per_round_candidate_exact"] is not None]
        if ok:
            axes[1].plot([s["budget"] for s in ok], [s["tokens_per_round_candidate_exact"] for s in ok],
                         style, marker="o", label=rule, color=colors.get(rule))
    axes[0].set_title("renormalised top-M instance (exact); target-first rules: +1 target pass",
                      fontsize=9)
    axes[1].set_title("real probabilities on candidate tree (exact, lower bound)", fontsize=9)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget N (drafted nodes)")
        ax.set_ylabel("E[tokens per round] = E[accepted] + 1")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    paths.append(out_dir / "trees_acceptance.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    timed = [s for s in summary if s["sequential_s_per_token"] is not None]
    if timed:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for rule in dict.fromkeys(s["rule"] for s in timed):
            pts = [s for s in timed if s["rule"] == rule]
            line = ax.plot([s["budget"] for s in pts], [1000 * s["sequential_s_per_token"] for s in pts],
                           marker="o", label=f"{rule} sequential", color=colors.get(rule))
            ax.plot([s["budget"] for s in pts],
                    [1000 * s["overlapped_s_per_token_modelled"] for s in pts], ":", marker="x",
                    color=line[0].get_color(), label=f"{rule} overlapped (modelled)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget N")
        ax.set_ylabel("MODELLED ms per token")
        ax.set_title("modelled from measured draft / tree-pass / extra-pass times", fontsize=9)
        ax.legend(fontsize=6)
        fig.tight_layout()
        paths.append(out_dir / "trees_walltime_modelled.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# --- moved from experiments/realgap.py ---

def plot_realgap(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """E[tau + 1] per verifier with 95% intervals and the upper bound, one panel per (L, K)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize_realgap(records)
    if not summary:
        return []
    paths_out = []
    for pair in sorted({s["pair"] for s in summary}):
        mine = [s for s in summary if s["pair"] == pair]
        panels = sorted({(s["temperature"], s["depth"]) for s in mine})
        ks = sorted({s["paths"] for s in mine})
        fig, axes = plt.subplots(len(panels), len(ks), figsize=(3.3 * len(ks), 3.0 * len(panels)),
                                 squeeze=False)
        for ax in axes.reshape(-1):
            ax.set_visible(False)
        for s in mine:
            ax = axes[panels.index((s["temperature"], s["depth"])), ks.index(s["paths"])]
            ax.set_visible(True)
            names = sorted(s["verifiers"], key=lambda n: s["verifiers"][n]["estimate"])
            centre = [s["verifiers"][n]["estimate"] for n in names]
            err = [[c - s["verifiers"][n]["low"] for n, c in zip(names, centre, strict=True)],
                   [s["verifiers"][n]["high"] - c for n, c in zip(names, centre, strict=True)]]
            ax.barh(names, centre, xerr=err, color="tab:blue", alpha=0.8, capsize=2)
            up = s["upper"]
            ax.axvline(up["estimate"], color="tab:red", lw=1.2,
                       label=("optimum (closed form, float64)" if s["depth"] == 1
                              else f"upper bound ({s['upper_certified']}/{s['contexts']} cert.)"))
            ax.axvspan(up["low"], up["high"], color="tab:red", alpha=0.12)
            low = min(s["verifiers"][n]["low"] for n in names if s["verifiers"][n]["estimate"] > 1.0
                      ) if any(s["verifiers"][n]["estimate"] > 1.0 for n in names) else 1.0
            ax.set_xlim(max(1.0, low - 0.1 * (up["high"] - low + 1e-9)), up["high"] * 1.02)
            ax.set_title(f"T={s['temperature']} L={s['depth']} K={s['paths']}: "
                         f"{s['contexts']} contexts", fontsize=8)
            ax.set_xlabel("E[tau+1] (mean over contexts, 95% CI)", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6, loc="lower right")
        fig.suptitle(f"{pair}: full-vocabulary rows (no truncation); verifiers exact given sampled "
                     "trees, averaged over trees;\nL = 1 bound: the optimum by its closed form (float64, NOT "
                     "certified in exact arithmetic); L >= 2: "
                     "certified optimum of the coarsened instance (top-M of p+q, rest lumped)",
                     fontsize=8)
        fig.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"realgap_{slug(pair)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths_out.append(path)
    return paths_out


# --- moved from experiments/realgap.py ---

def plot_renormalised(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Bar chart of the mean gap to the certified optimum per verifier, one panel per (M, L, K)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize_renormalised(records)
    if not summary:
        return []
    shapes = sorted({(s["width"], s["depth"]) for s in summary})
    ks = sorted({s["paths"] for s in summary})
    fig, axes = plt.subplots(len(shapes), len(ks), figsize=(3.6 * len(ks), 2.8 * len(shapes)),
                             squeeze=False)
    for ax in axes.reshape(-1):
        ax.set_visible(False)
    for s in summary:
        ax = axes[shapes.index((s["width"], s["depth"])), ks.index(s["paths"])]
        ax.set_visible(True)
        names = sorted(s["mean_gap"], key=lambda n: s["mean_gap"][n])
        ax.barh(names, [s["mean_gap"][n] for n in names], color="tab:blue")
        ax.set_title(f"M={s['width']} L={s['depth']} K={s['paths']}: {s['contexts']} ctx, "
                     f"{s['certified']} certified", fontsize=8)
        ax.set_xlabel("mean gap to LP optimum, E[tau+1]", fontsize=8)
        ax.tick_params(labelsize=7)
    pair = records[0].get("pair", "")
    fig.suptitle(f"{pair}\nTRUNCATED instances: top-M of the target per node, rows RENORMALISED "
                 "(neither an upper nor a lower bound on the real pair)", fontsize=8)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "realgap_renormalised_gaps.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


# --- moved from experiments/bench.py ---

def plot_bench(records: list[dict[str, Any]], out: str | Path) -> list[Path]:
    """Per (pair, T): E[tau + 1] against K per verifier with 95% intervals (one column per
    L), and below it the paired difference verifier - bv. Writes `out`.png and `out`.pdf
    (a .png/.pdf suffix on `out` is dropped first); returns the two paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summarize_bench(records) if r["drive"] != "autoregressive"]
    if not rows:
        raise ValueError("no paired bench records")
    panels = sorted({(str(r["pair"]), r["temperature"]) for r in rows})
    depths = sorted({r["depth"] for r in rows})
    every = sorted({n for r in rows for n in r["verifiers"]})
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(every)}  # one per verifier
    fig, axes = plt.subplots(2 * len(panels), len(depths), squeeze=False,
                             figsize=(5.2 * len(depths), 6.4 * len(panels)))
    for pi, (pair, temperature) in enumerate(panels):
        for di, depth in enumerate(depths):
            ax_be, ax_diff = axes[2 * pi, di], axes[2 * pi + 1, di]
            mine = sorted((r for r in rows if str(r["pair"]) == pair
                           and r["temperature"] == temperature and r["depth"] == depth),
                          key=lambda r: r["paths"])
            if not mine:
                ax_be.set_visible(False)
                ax_diff.set_visible(False)
                continue
            names = sorted({n for r in mine for n in r["verifiers"]})
            for i, name in enumerate(names):
                pts = [(r["paths"] + 0.04 * (i - len(names) / 2), r["verifiers"][name])
                       for r in mine if name in r["verifiers"]]
                _errorbar(ax_be, pts, name, color=colours[name])
                diff = [(r["paths"] + 0.04 * (i - len(names) / 2), r["differences"][name])
                        for r in mine if name in r["differences"]]
                if diff:
                    _errorbar(ax_diff, diff, name, color=colours[name])
            realised = [(r["paths"] + 0.3, r["realised"]) for r in mine]
            _errorbar(ax_be, realised, f"realised ({mine[0]['drive']} drives)", style="s--",
                      color="gray")
            ax_diff.axhline(0, color="black", lw=0.8)
            prompts = min(r["prompts"] for r in mine)
            ax_be.set(xlabel="paths K", ylabel="E[tau+1] per step",
                      title=f"{pair}, T={temperature}, L={depth}: {prompts} prompts x "
                            f"{mine[0]['max_new_tokens']} new tokens")
            ax_diff.set(xlabel="paths K", ylabel=f"paired difference vs {REFERENCE}",
                        title="same drafted trees, 95% bootstrap CI over prompts")
            for ax in (ax_be, ax_diff):
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
    fig.suptitle("exact conditional E[tau+1] of every verifier on the SAME drafted trees\n"
                 "(full vocabulary); error bars: 95% percentile bootstrap over prompts", fontsize=9)
    fig.tight_layout()
    out = Path(out)
    if out.suffix in (".png", ".pdf"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.parent / f"{out.name}.png", out.parent / f"{out.name}.pdf"]  # keeps "qwen2.5"
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths


# --- moved from experiments/bench.py ---

def _errorbar(ax: Any, points: list[tuple[float, dict[str, Any]]], label: str, style: str = "o-",
              color: str | None = None) -> None:
    xs = [x for x, _ in points]
    ys = [iv["estimate"] for _, iv in points]
    err = [[iv["estimate"] - iv["low"] for _, iv in points],
           [iv["high"] - iv["estimate"] for _, iv in points]]
    ax.errorbar(xs, ys, yerr=err, fmt=style, capsize=3, ms=4, lw=1, label=label, color=color)
