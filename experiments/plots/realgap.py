"""realgap figures: bounds and every verifier's interval per context."""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import Any

from ..realgap import full_records, summarize_renormalised
from ..store import slug
from .style import pyplot


def plot_realgap(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Per context, one panel per (T, L, K): the certified bracket [lower, upper] of the
    optimum as a grey bar and every verifier's E[tau + 1] with its 95% betting interval
    (exact values at L = 1 as plain markers) next to it. One PNG per pair."""
    plt = pyplot()
    records = full_records(records)
    if not records:
        return []
    paths_out = []
    for pair in sorted({r["pair"] for r in records}):
        mine = [r for r in records if r["pair"] == pair]
        panels = sorted({(r["temperature"], r["depth"]) for r in mine})
        ks = sorted({int(k) for r in mine for k in r["by_paths"]})
        names = sorted({n for r in mine for b in r["by_paths"].values() for n in b["verifiers"]})
        colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
        fig, axes = plt.subplots(len(panels), len(ks), squeeze=False,
                                 figsize=(4.2 * len(ks), 3.2 * len(panels)))
        for (pi, (temperature, depth)), (ki, k) in product(enumerate(panels), enumerate(ks)):
            ax = axes[pi, ki]
            here = [r for r in mine if (r["temperature"], r["depth"]) == (temperature, depth)
                    and str(k) in r["by_paths"]]
            for ci, r in enumerate(here):
                _context_column(ax, ci, r["by_paths"][str(k)], names, colours)
            ax.set_xticks(range(len(here)), [f"{r['prompt'].split('/')[-1]}:{r['context']}"
                                            for r in here], fontsize=6, rotation=45)
            ax.set_title(f"T={temperature} L={depth} K={k}: {len(here)} context"
                         f"{'s' if len(here) != 1 else ''}", fontsize=8)
            ax.set_ylabel("E[tau+1]", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3, axis="y")
        handles = [plt.Line2D([], [], color=colours[n], marker="o", ls="", label=n) for n in names]
        handles.append(plt.Rectangle((0, 0), 1, 1, color="0.8", label="certified [lower, upper]"))
        fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 8), fontsize=7,
                   bbox_to_anchor=(0.5, 1.0))
        fig.suptitle(f"{pair}: full-vocabulary rows; grey: certified lower (exact value of a "
                     "lossless verifier on the kept rows) to upper (coarsened LP bound; L = 1: "
                     "the closed-form optimum, float64);\npoints: each verifier's E[tau+1] with "
                     "its 95% betting interval over sampled trees (L = 1: exact where a closed "
                     "form exists)", fontsize=8, y=1.06)
        fig.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"realgap_{slug(pair)}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths_out.append(path)
    return paths_out


def _context_column(ax: Any, x: int, block: dict[str, Any], names: list[str],
                    colours: dict[str, Any]) -> None:
    upper = block["upper"]["value"]
    lower = block["lower"].get("value")  # None: a record made before the certified lower
    bottom = lower if lower is not None else 1.0
    ax.bar(x, max(upper - bottom, 0.004), bottom=bottom if upper > bottom else upper - 0.002,
           width=0.8, color="0.8", zorder=1)
    for i, name in enumerate(names):
        iv = block["verifiers"].get(name)
        if iv is None:
            continue
        shift = 0.7 * (i - (len(names) - 1) / 2) / max(len(names), 1)
        err = [[iv["mean"] - iv["low"]], [iv["high"] - iv["mean"]]]
        ax.errorbar(x + shift, iv["mean"], yerr=None if iv.get("exact") else err, fmt="o",
                    ms=3, capsize=2, lw=0.8, color=colours[name], zorder=2)


def plot_renormalised(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Bar chart of the mean gap to the certified optimum per verifier, one panel per (M, L, K)."""
    plt = pyplot()

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
