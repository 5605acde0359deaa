"""Tree-selection figures (`speclp trees`): tokens per round per rule and budget (with the
references that bound them), and the modelled walltime."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...proofs.tree_selection import REFERENCES, RULES
from ..store import load_jsonl
from ..trees import summarize_trees
from .style import pyplot, save

# one colour and marker per rule and reference (target-first-oracle no longer shares
# target-first's green); draft is drawn wide and pale under the others, since rerank often
# lies on it
COLORS = {name: f"C{i}" for i, name in enumerate(RULES)} | {"oracle": "0.35",
                                                            "target-first-oracle": "C4"}
MARKERS = {"draft": "s", "rerank": "o", "target-first": "^", "target-first-gbv": "D",
           "oracle": "v", "target-first-oracle": "P"}
UNDERNEATH = {"draft": {"lw": 4.0, "alpha": 0.45, "ms": 8, "zorder": 1}}
LABELS = {
    "oracle": "oracle (reference: best fixed N-node tree; bounds draft, rerank)",
    "target-first-oracle": "target-first-oracle (reference: best tree below the drawn token)",
}


def _label(name: str) -> str:
    return LABELS.get(name, name + (" (+1 target pass)" if name != "draft" else ""))


def _acceptance_panel(ax: Any, summary: list[dict[str, Any]], key: str) -> None:
    """One panel: mean tokens per round vs budget, +- 1 s.e. over prompts (left panel only:
    the candidate-exact means have no s.e. column; no bar with one prompt), references
    dashed; target-first-gbv's K x L' written at its points, hollow where saturated."""
    for name in dict.fromkeys(s["rule"] for s in summary):
        pts = [s for s in summary if s["rule"] == name and s[key] is not None]
        if not pts:
            continue
        xs, ys = [s["budget"] for s in pts], [s[key] for s in pts]
        errors = ([math.nan if s["tokens_per_round_se"] is None else s["tokens_per_round_se"]
                   for s in pts] if key == "tokens_per_round" else None)
        style = {"lw": 1.2, "ms": 4, "zorder": 2} | UNDERNEATH.get(name, {})
        ax.errorbar(xs, ys, yerr=errors, fmt="--" if name in REFERENCES else "-",
                    marker=MARKERS.get(name, "o"), capsize=2, color=COLORS.get(name),
                    label=_label(name), **style)
        if name == "target-first-gbv":
            _shape_marks(ax, pts, key)
    _budget_axis(ax, sorted({s["budget"] for s in summary}))


def _shape_marks(ax: Any, pts: list[dict[str, Any]], key: str) -> None:
    """target-first-gbv's K x L' written above left of the point where the shape changes (not
    repeated at every budget), and a hollow marker where the shape is capped (saturated)."""
    colour = COLORS["target-first-gbv"]
    previous = None
    for s in pts:
        if s["saturated"]:
            ax.plot(s["budget"], s[key], "o", ms=7, mfc="white", color=colour)
        if s["shape"] and s["shape"] != previous:
            ax.annotate("x".join(map(str, s["shape"])), (s["budget"], s[key]),
                        textcoords="offset points", xytext=(-4, 3), ha="right", va="bottom",
                        fontsize=7, color=colour)
        previous = s["shape"]


def _budget_axis(ax: Any, budgets: list[int]) -> None:
    """Log-2 budget axis labelled with the budgets themselves."""
    ax.set_xscale("log", base=2)
    ax.set_xlim(budgets[0] / 1.5, budgets[-1] * 1.3)  # room for the K x L' label left of 2
    ax.set_xticks(budgets, [str(n) for n in budgets])
    ax.minorticks_off()
    ax.set_xlabel("budget N (drafted nodes per round)")
    ax.grid(alpha=0.3)


def trees_title(records: list[dict[str, Any]]) -> str:
    """The figures' title line: the pair, the contexts, the candidate tree's M and L (read
    from the records, so a redraw from a JSONL file says the same as the run)."""
    pairs = ", ".join(dict.fromkeys(str(r.get("pair", "")) for r in records))
    shapes = ", ".join(dict.fromkeys(f"M={r.get('width')}, L={r.get('depth')}" for r in records))
    return f"{pairs}: {len(records)} contexts, {shapes}"


def plot_trees_file(path: str | Path, out_dir: str | Path) -> list[str]:
    """Redraw the trees figures from a recorded JSONL file (no recomputation)."""
    records = load_jsonl(path)
    if not records:
        raise ValueError(f"{path}: no trees records")
    return plot_trees(records, out_dir, title=trees_title(records))


def plot_trees(records: list[dict[str, Any]], out_dir: Any, title: str = "") -> list[str]:
    """trees_acceptance (two panels, shared y: the renormalised top-M instance, and the real
    probabilities on the candidate tree) and trees_walltime_modelled, each PNG + PDF."""
    summary = summarize_trees(records)
    if not summary:
        return []
    plt = pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    contexts = max(s["contexts"] for s in summary)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    _acceptance_panel(axes[0], summary, "tokens_per_round")
    _acceptance_panel(axes[1], summary, "tokens_per_round_candidate_exact")
    prompts = max(s["prompts"] for s in summary)
    axes[0].set_title("exact on the top-M instance, rows RENORMALISED over the M tokens\n"
                      f"mean over {contexts} contexts; bars +- 1 standard error over {prompts} "
                      "prompts", fontsize=9)
    axes[1].set_title("exact with the real probabilities, trees inside the candidate tree\n"
                      "(a lower bound on each rule; target-first-gbv needs an instance: absent)",
                      fontsize=9)
    axes[0].set_ylabel("E[tokens per round] = E[accepted] + 1")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(f"{title}\ntarget-first-gbv: K x L' paths below the drawn token, written where "
                 "the shape changes (hollow: shape capped by exact enumeration, value repeats)",
                 fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    files = save(fig, out_dir, "trees_acceptance")
    timed = [s for s in summary if s["sequential_s_per_token"] is not None]
    if timed:
        files += _walltime(plt, timed, out_dir, title)
    return files


def _walltime(plt: Any, timed: list[dict[str, Any]], out_dir: Path, title: str) -> list[str]:
    """Modelled ms per token: sequential (solid) and with the extra target pass overlapped
    with drafting (dotted; not drawn for draft ranking, which has no extra pass)."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name in dict.fromkeys(s["rule"] for s in timed):
        pts = [s for s in timed if s["rule"] == name]
        xs = [s["budget"] for s in pts]
        seq = [1000 * s["sequential_s_per_token"] for s in pts]
        ax.plot(xs, seq, "-", marker=MARKERS.get(name, "o"), ms=4, color=COLORS.get(name),
                label=f"{name}: sequential")
        if name != "draft":
            ax.plot(xs, [1000 * s["overlapped_s_per_token_modelled"] for s in pts], ":", marker="x",
                    ms=4, color=COLORS.get(name), label=f"{name}: extra pass overlapped")
        capped = [(x, y) for x, y, s in zip(xs, seq, pts, strict=True) if s.get("saturated")]
        if capped:
            ax.plot(*zip(*capped, strict=True), "o", ms=7, mfc="white", color=COLORS.get(name))
    _budget_axis(ax, sorted({s["budget"] for s in timed}))
    ax.set_ylabel("MODELLED ms per generated token")
    gbv_note = ("\ntarget-first-gbv drafts only K x L' <= N nodes but is timed with the N-node "
                "tree's passes (hollow: its shape is capped)"
                if any(s["rule"] == "target-first-gbv" for s in timed) else "")
    ax.set_title(f"{title}\nMODELLED from measured draft / tree-pass / extra-pass times of the "
                 "draft-ranked N-node tree\n(the same passes for every rule; one measurement per "
                 f"context and budget, shared CPU; mean over contexts){gbv_note}", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return save(fig, out_dir, "trees_walltime_modelled")
