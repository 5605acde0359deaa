"""realgap figures: bounds and every verifier's interval per context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..realgap import summarize_realgap, summarize_renormalised
from ..store import slug


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
