"""realgap figures: bounds and every verifier's interval per context."""

from __future__ import annotations

import json
from itertools import product
from pathlib import Path
from typing import Any

from ..realgap import full_records, summarize_renormalised
from ..store import slug
from .style import distinct_styles, pyplot


def plot_realgap(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Per context, one panel per (T, L, K): the certified bracket [lower, upper] of the
    optimum as a grey bar (only the upper bound as a dark dash where the records have no
    certified lower) and every verifier's E[tau + 1] with its 95% betting interval (exact
    values at L = 1 as plain markers) next to it; a colour and marker of its own per verifier,
    the y axis fitted to everything drawn (no bar cut at its base). One PNG per pair and run
    (realgap_PAIR.png; realgap_PAIR_runN.png when the records hold several runs of the pair,
    with other settings: their contexts are never mixed in one panel)."""
    plt = pyplot()
    records = full_records(records)
    if not records:
        return []
    paths_out = []
    runs = sorted({(str(r["pair"]), _run_key(r)) for r in records})
    for pair, key in runs:
        mine = [r for r in records if (str(r["pair"]), _run_key(r)) == (pair, key)]
        several = sum(1 for p, _ in runs if p == pair) > 1
        number = [k for p, k in runs if p == pair].index(key) + 1
        panels = sorted({(r["temperature"], r["depth"]) for r in mine})
        ks = sorted({int(k) for r in mine for k in r["by_paths"]})
        names = sorted({n for r in mine for b in r["by_paths"].values() for n in b["verifiers"]})
        styles = distinct_styles(names)
        fig, axes = plt.subplots(len(panels), len(ks), squeeze=False,
                                 figsize=(4.2 * len(ks), 3.4 * len(panels)))
        no_lower = with_lower = False
        for (pi, (temperature, depth)), (ki, k) in product(enumerate(panels), enumerate(ks)):
            ax = axes[pi, ki]
            here = [r for r in mine if (r["temperature"], r["depth"]) == (temperature, depth)
                    and str(k) in r["by_paths"]]
            span = _panel_columns(ax, [r["by_paths"][str(k)] for r in here], names, styles)
            for r in here:
                missing = r["by_paths"][str(k)]["lower"].get("value") is None
                no_lower, with_lower = no_lower or missing, with_lower or not missing
            if span:
                low, high = min(span), max(span)
                pad = 0.06 * max(high - low, 0.01)
                ax.set_ylim(low - pad, high + pad)
            ax.set_xlim(-0.6, len(here) - 0.4)
            prefix = {str(r["prompt"]).rpartition("/")[0] for r in here}
            ax.set_xticks(range(len(here)), [f"{str(r['prompt']).rpartition('/')[2]}\nc{r['context']}"
                                             for r in here], fontsize=6)
            ax.set_xlabel(f"{prefix.pop() + ' ' if len(prefix) == 1 else ''}prompt, context (c)",
                          fontsize=7)
            ax.set_title(f"T={temperature} L={depth} K={k}: {len(here)} context"
                         f"{'s' if len(here) != 1 else ''}", fontsize=8)
            ax.set_ylabel("E[tau+1]", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3, axis="y")
        handles = [plt.Line2D([], [], color=styles[n][0], marker=styles[n][1], ls="", label=n)
                   for n in names]
        if with_lower:
            handles.append(plt.Rectangle((0, 0), 1, 1, color="0.8", label="certified [lower, upper]"))
        if no_lower:
            handles.append(plt.Line2D([], [], color="0.3", lw=2.5,
                                      label="certified upper (no certified lower recorded)"))
        fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 8), fontsize=7,
                   bbox_to_anchor=(0.5, 1.0))
        run = (f" run {number} ({len(names)} verifiers, {mine[0].get('samples')} sampled trees, "
               f"draft T {mine[0].get('draft_temperature')})" if several else "")
        fig.suptitle(f"{pair}{run}: full-vocabulary rows; grey: certified lower (exact value of a "
                     "lossless verifier on the kept rows) to upper (coarsened LP bound; L = 1: "
                     "the closed-form optimum, float64); dark dash: the upper alone;\n"
                     "points: each verifier's E[tau+1] with its 95% betting interval over sampled "
                     "trees (L = 1: exact where a closed form exists)", fontsize=8, y=1.035)
        fig.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"realgap_{slug(pair)}{f'_run{number}' if several else ''}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths_out.append(path)
    return paths_out


def _run_key(record: dict[str, Any]) -> str:
    """The settings of the run that wrote a record (the width is left out: L = 1 records have
    none)."""
    return json.dumps([record.get(k) for k in ("draft_temperature", "samples", "seed",
                                               "score_dtype", "temperature")]
                      + [sorted(record.get("verifiers") or [])], default=str)


def _panel_columns(ax: Any, blocks: list[dict[str, Any]], names: list[str],
                   styles: dict[str, tuple[str, str]]) -> list[float]:
    """One column per context (x = its index): the bracket and every verifier's point, drawn
    with one call per kind of mark and verifier (not per context: a panel has up to 48
    contexts); returns the y values drawn."""
    drawn: list[float] = []
    bars: list[tuple[int, float, float]] = []  # (x, height, bottom)
    dashes: list[tuple[int, float]] = []  # (x, upper): a record made before the certified lower
    for x, block in enumerate(blocks):
        upper = block["upper"]["value"]
        lower = block["lower"].get("value")
        drawn.append(upper)
        if lower is not None:
            bars.append((x, max(upper - lower, 0.004), min(lower, upper - 0.002)))
            drawn.append(lower)
        else:
            dashes.append((x, upper))
    if bars:
        xs, heights, bottoms = zip(*bars, strict=True)
        ax.bar(xs, heights, bottom=bottoms, width=0.8, color="0.8", zorder=1)
    if dashes:
        xs, uppers = zip(*dashes, strict=True)
        ax.hlines(uppers, [x - 0.4 for x in xs], [x + 0.4 for x in xs], color="0.3", lw=2.5, zorder=1)
    for i, name in enumerate(names):
        shift = 0.7 * (i - (len(names) - 1) / 2) / max(len(names), 1)
        exact: list[tuple[float, float]] = []
        interval: list[tuple[float, float, float, float]] = []
        for x, block in enumerate(blocks):
            iv = block["verifiers"].get(name)
            if iv is None:
                continue
            if iv.get("exact"):
                exact.append((x + shift, iv["mean"]))
                drawn.append(iv["mean"])
            else:
                interval.append((x + shift, iv["mean"], iv["mean"] - iv["low"], iv["high"] - iv["mean"]))
                drawn += [iv["low"], iv["high"]]
        colour, marker = styles[name]
        if exact:
            xs, ys = zip(*exact, strict=True)
            ax.errorbar(xs, ys, fmt=marker, ms=3, capsize=2, lw=0.8, color=colour, zorder=2)
        if interval:
            xs, ys, below, above = zip(*interval, strict=True)
            ax.errorbar(xs, ys, yerr=[below, above], fmt=marker, ms=3, capsize=2, lw=0.8,
                        color=colour, zorder=2)
    return drawn


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
