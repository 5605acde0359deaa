"""Paired decoding figures (`speclp bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..bench import REFERENCE, summarize_bench


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


def _errorbar(ax: Any, points: list[tuple[float, dict[str, Any]]], label: str, style: str = "o-",
              color: str | None = None) -> None:
    xs = [x for x, _ in points]
    ys = [iv["estimate"] for _, iv in points]
    err = [[iv["estimate"] - iv["low"] for _, iv in points],
           [iv["high"] - iv["estimate"] for _, iv in points]]
    ax.errorbar(xs, ys, yerr=err, fmt=style, capsize=3, ms=4, lw=1, label=label, color=color)
