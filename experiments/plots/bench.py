"""Paired decoding figures (`speclp bench`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..bench import REFERENCE, summarize_bench
from .style import pyplot

JITTER = 0.08  # horizontal offset between verifiers at one integer K or L (ticks at integers)


def plot_bench(records: list[dict[str, Any]], out: str | Path) -> list[Path]:
    """One row per (pair, T, run tree (K_max, L_max)): E[tau + 1] per step against L' at
    K' = K_max for every verifier; the paired difference verifier - bv against L' at
    K' = K_max; the same difference against K' at L' = 4 (or the largest recorded L' < 4;
    the smallest recorded when none is <= 4). Error bars: the t
    intervals of `summarize_bench` (a cell with one prompt has none: said in the title).
    Writes `out`.png and `out`.pdf (a .png/.pdf suffix on `out` is dropped first)."""
    plt = pyplot()
    rows = [r for r in summarize_bench(records) if r["drive"] != "autoregressive"]
    if not rows:
        raise ValueError("no paired bench records")
    panels = sorted({(str(r["pair"]), r["temperature"], r["tree_paths"], r["tree_depth"])
                     for r in rows})
    every = sorted({n for r in rows for n in r["verifiers"]})
    colours = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(every)}  # one per verifier
    fig, axes = plt.subplots(len(panels), 3, squeeze=False, figsize=(16, 4.6 * len(panels)))
    for pi, (pair, temperature, k_max, l_max) in enumerate(panels):
        mine = [r for r in rows if (str(r["pair"]), r["temperature"], r["tree_paths"],
                                    r["tree_depth"]) == (pair, temperature, k_max, l_max)]
        depths = sorted({r["depth"] for r in mine})
        l_cut = max([d for d in depths if d <= 4], default=depths[0])  # L' = 4 when recorded
        by_depth = sorted((r for r in mine if r["paths"] == k_max), key=lambda r: r["depth"])
        by_paths = sorted((r for r in mine if r["depth"] == l_cut), key=lambda r: r["paths"])
        names = sorted({n for r in mine for n in r["verifiers"]})
        others = [n for n in names if n != REFERENCE]
        for i, name in enumerate(names):
            shift = JITTER * (i - (len(names) - 1) / 2)
            _errorbar(axes[pi, 0], [(r["depth"] + shift, r["verifiers"][name]) for r in by_depth],
                      name, colours[name])
        for i, name in enumerate(others):
            shift = JITTER * (i - (len(others) - 1) / 2)
            _errorbar(axes[pi, 1], [(r["depth"] + shift, r["differences"][name])
                                    for r in by_depth if name in r["differences"]],
                      name, colours[name])
            _errorbar(axes[pi, 2], [(r["paths"] + shift, r["differences"][name])
                                    for r in by_paths if name in r["differences"]],
                      name, colours[name])
        prompts = min(r["prompts"] for r in mine)
        note = " (1 prompt: no interval)" if prompts == 1 else ""
        head = (f"{pair}, T={temperature}: {prompts} prompts x {mine[0]['max_new_tokens']} "
                f"new tokens{note}")
        axes[pi, 0].set(xlabel="depth L'", ylabel="E[tau+1] per step",
                        title=f"{head}\nK' = {k_max}", xticks=range(1, l_max + 1))
        axes[pi, 1].set(xlabel="depth L'", ylabel=f"verifier - {REFERENCE}",
                        title=f"paired difference at K' = {k_max}", xticks=range(1, l_max + 1))
        axes[pi, 2].set(xlabel="paths K'", ylabel=f"verifier - {REFERENCE}",
                        title=f"paired difference at L' = {l_cut}", xticks=range(1, k_max + 1))
        for ax in axes[pi]:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            else:  # a difference panel when only the reference was scored
                ax.text(0.5, 0.5, f"no verifier besides {REFERENCE}" if not others
                        else "no rows at this (K', L')", transform=ax.transAxes,
                        ha="center", va="center", fontsize=8, color="grey")
        for ax, top in zip(axes[pi], (l_max, l_max, k_max), strict=True):
            ax.set_xlim(0.5, top + 0.5)  # jittered points and their bars stay inside
        for ax in axes[pi, 1:]:
            ax.axhline(0, color="black", lw=0.8)
    fig.suptitle("exact conditional E[tau+1] of every verifier on the SAME drafted trees (full "
                 "vocabulary; one (K_max, L_max) tree per step cut to every (K', L'));\n"
                 "error bars: nominal 95% t intervals on per-prompt means (simulated coverage: "
                 "benchmarks/results/bench/interval_coverage.md)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / fig.get_figheight()))  # room for the two-line title
    out = Path(out)
    if out.suffix in (".png", ".pdf"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.parent / f"{out.name}.png", out.parent / f"{out.name}.pdf"]  # keeps "qwen2.5"
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths


def _errorbar(ax: Any, points: list[tuple[float, dict[str, Any]]], label: str,
              color: Any = None) -> None:
    """Points with their intervals; a point without an interval (one prompt) has no bar."""
    if not points:
        return
    xs = [x for x, _ in points]
    ys = [iv["estimate"] for _, iv in points]
    err = [[iv["estimate"] - iv["low"] if iv.get("low") is not None else 0.0 for _, iv in points],
           [iv["high"] - iv["estimate"] if iv.get("high") is not None else 0.0
            for _, iv in points]]
    ax.errorbar(xs, ys, yerr=err, fmt="o-", capsize=3, ms=4, lw=1, label=label, color=color)
