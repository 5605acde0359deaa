"""Paired decoding figures (`speclp bench`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..bench import CONFIG_KEYS, REFERENCE, summarize_bench
from .style import distinct_styles, pyplot

JITTER = 0.08  # horizontal offset between verifiers at one integer K or L (ticks at integers)
# one panel row per run: every setting of the run but the cell (K', L'), which the panels vary
RUN_KEYS = tuple(k for k in CONFIG_KEYS if k not in ("paths", "depth")) + ("tree_paths", "tree_depth")


class NotBenchRecords(ValueError):
    """The records cannot be summarised as paired bench records (bad input, not a plotting
    error: `speclp plot` reports this one as exit 2 and every other error as internal)."""


def bench_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The paired (not autoregressive) rows of `summarize_bench`; NotBenchRecords when the
    records are not paired bench records (a missing or mistyped field)."""
    try:
        rows = [r for r in summarize_bench(records) if r["drive"] != "autoregressive"]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise NotBenchRecords(f"{type(err).__name__}: {err}") from err
    if not rows:
        raise NotBenchRecords("no paired bench records")
    return rows


def plot_bench(records: list[dict[str, Any]], out: str | Path) -> list[Path]:
    """One row per (pair, T, run tree (K_max, L_max)): E[tau + 1] per step against L' at
    K' = K_max for every verifier; the paired difference verifier - bv against L' at
    K' = K_max; the same difference against K' at L' = 4 (or the largest recorded L' < 4;
    the smallest recorded when none is <= 4). Error bars: the t
    intervals of `summarize_bench` (a cell with one prompt has none: said in the title).
    Writes `out`.png and `out`.pdf (a .png/.pdf suffix on `out` is dropped first)."""
    rows = bench_rows(records)
    plt = pyplot()
    panels = sorted({_run_key(r) for r in rows})
    every = sorted({n for r in rows for n in r["verifiers"]})
    colours = {n: c for n, (c, _) in distinct_styles(every).items()}  # one per verifier
    fig, axes = plt.subplots(len(panels), 3, squeeze=False, figsize=(16, 4.6 * len(panels)))
    for pi, key in enumerate(panels):
        mine = [r for r in rows if _run_key(r) == key]
        pair, temperature = str(mine[0]["pair"]), mine[0]["temperature"]
        k_max, l_max = mine[0]["tree_paths"], mine[0]["tree_depth"]
        depths = sorted({r["depth"] for r in mine})
        l_cut = max([d for d in depths if d <= 4], default=depths[0])  # L' = 4 when recorded
        by_depth = sorted((r for r in mine if r["paths"] == k_max), key=lambda r: r["depth"])
        by_paths = sorted((r for r in mine if r["depth"] == l_cut), key=lambda r: r["paths"])
        names = sorted({n for r in mine for n in r["verifiers"]})
        others = [n for n in names if n != REFERENCE]
        for i, name in enumerate(names):
            shift = JITTER * (i - (len(names) - 1) / 2)
            _errorbar(axes[pi, 0], [(r["depth"] + shift, _clip(r["verifiers"][name], 1.0, r["depth"] + 1.0))
                                    for r in by_depth if name in r["verifiers"]],
                      name, colours[name])
        for i, name in enumerate(others):
            shift = JITTER * (i - (len(others) - 1) / 2)
            _errorbar(axes[pi, 1], [(r["depth"] + shift, _clip(r["differences"][name], -r["depth"],
                                                               r["depth"]))
                                    for r in by_depth if name in r["differences"]],
                      name, colours[name])
            _errorbar(axes[pi, 2], [(r["paths"] + shift, _clip(r["differences"][name], -r["depth"],
                                                               r["depth"]))
                                    for r in by_paths if name in r["differences"]],
                      name, colours[name])
        prompts = min(r["prompts"] for r in mine)
        note = " (1 prompt: no interval)" if prompts == 1 else ""
        grid = "every (K', L') scored" if mine[0].get("score_grid") else "one cell per run"
        head = (f"{pair}, T={temperature}, {mine[0]['drive']} drives a ({k_max}, {l_max}) tree, "
                f"{grid}: {prompts} prompts x {mine[0]['max_new_tokens']} new tokens{note}")
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
    fig.tight_layout()
    renderer = fig.canvas.get_renderer()  # the title sits right above the top row's titles
    top = max(ax.get_tightbbox(renderer).y1 for ax in axes[0]) / fig.bbox.height + 0.004
    fig.suptitle("exact conditional E[tau+1] of every verifier on the SAME drafted trees (full "
                 "vocabulary; one (K_max, L_max) tree per step cut to every (K', L'));\n"
                 "error bars: 95% Hall skew-corrected t intervals on per-prompt means (simulated coverage: "
                 "benchmarks/results/bench/interval_coverage.md), clipped to the possible range: "
                 "[1, L' + 1] for E[tau+1], [-L', L'] for a difference", fontsize=9, y=top, va="bottom")
    out = Path(out)
    if out.suffix in (".png", ".pdf"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.parent / f"{out.name}.png", out.parent / f"{out.name}.pdf"]  # keeps "qwen2.5"
    for p in paths:
        fig.savefig(p, dpi=130, bbox_inches="tight", pad_inches=0.15,  # title just above the axes
                    metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    plt.close(fig)
    return paths


def _run_key(row: dict[str, Any]) -> str:
    return json.dumps([row.get(k) for k in RUN_KEYS], default=str)


def _clip(interval: dict[str, Any], low: float, high: float) -> dict[str, Any]:
    """The interval cut to [low, high], the values the quantity can take (a t interval on few
    prompts can reach past them); never cut past the estimate itself."""
    out = dict(interval)
    if out.get("low") is not None:
        out["low"] = min(max(out["low"], low), out["estimate"])
    if out.get("high") is not None:
        out["high"] = max(min(out["high"], high), out["estimate"])
    return out


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
