"""Verifier step times (benchmarks/verifier_step.py): median step per verifier and its ratio
to BV's, per (K, L), one panel pair per (threads, dtype)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .style import pyplot, save


def plot_steps(result: dict[str, Any], out: str | Path, name: str = "verifier_step") -> list[str]:
    """Two rows of panels (median ms with min-max bars; ratio to BV, log scale) per
    (threads, dtype) column; returns the PNG and PDF paths."""
    plt = pyplot()
    configs = result["configs"]
    columns = sorted({(c["threads"], c["dtype"]) for c in configs})
    verifiers = list(configs[0]["verifiers"])
    fig, axes = plt.subplots(2, len(columns), figsize=(4.6 * len(columns), 7), squeeze=False)
    for col, (threads, dtype) in enumerate(columns):
        part = [c for c in configs if (c["threads"], c["dtype"]) == (threads, dtype)]
        labels = [f"K={c['paths']}\nL={c['depth']}" for c in part]
        width = 0.8 / len(verifiers)
        for j, verifier in enumerate(verifiers):
            xs = [i + j * width for i in range(len(part))]
            med = [c["verifiers"][verifier]["median_ms"] for c in part]
            low = [m - c["verifiers"][verifier]["min_ms"] for m, c in zip(med, part, strict=True)]
            high = [c["verifiers"][verifier]["max_ms"] - m for m, c in zip(med, part, strict=True)]
            axes[0, col].bar(xs, med, width, yerr=[low, high], capsize=2, label=verifier)
            ratio = [c["over_bv"][verifier]["median"] for c in part]
            axes[1, col].bar(xs, ratio, width, label=verifier)
        for row in (0, 1):
            axes[row, col].set_xticks([i + width * (len(verifiers) - 1) / 2
                                       for i in range(len(part))], labels, fontsize=8)
        axes[0, col].set_title(f"{threads} thread(s), {dtype}", fontsize=10)
        axes[0, col].set_ylabel("median step (ms), bars: min..max")
        axes[1, col].set_ylabel("step / BV's step (median of rounds)")
        axes[1, col].set_yscale("log")
        axes[1, col].axhline(2.0, color="k", ls=":", lw=0.8)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Verifier step (block_law + sample_block), V = {result['vocab']}, "
                 f"{result['device_name']} ({result['device']}); dotted: 2x BV", fontsize=10)
    fig.tight_layout()
    return save(fig, Path(out), name)
