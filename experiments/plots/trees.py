"""Tree-selection figures (`speclp trees`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...proofs.tree_selection import RULES
from ..trees import summarize_trees


def plot_trees(records: list[dict[str, Any]], out_dir: Any, title: str = "") -> list[Any]:
    """Two figures: expected tokens per round vs budget per rule; modelled s/token vs budget."""

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
