"""What every figure shares: the headless pyplot and saving as PNG + PDF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    matplotlib.use("Agg")
    return plt


# distinct colours for up to 20 series (tab10, then ten more far from them and each other)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#b8860b", "#4b0082", "#00ff7f",
           "#ff1493", "#556b2f", "#00008b", "#ffd700", "#8b0000", "#40e0d0")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def distinct_styles(names: list[str]) -> dict[str, tuple[str, str]]:
    """{name: (colour, marker)}: a different colour for each of up to 20 names (then the
    colours repeat with another marker), markers cycling too."""
    return {n: (PALETTE[i % len(PALETTE)], MARKERS[(i + i // len(PALETTE)) % len(MARKERS)])
            for i, n in enumerate(names)}


def save(fig: Any, out: Path, name: str) -> list[str]:
    """Write `out`/`name`.png (150 dpi) and .pdf, close the figure; returns the two paths.
    The PDF carries no creation date, so redrawing unchanged data rewrites the same bytes."""
    files = []
    for ext in ("png", "pdf"):
        path = out / f"{name}.{ext}"
        fig.savefig(path, dpi=150 if ext == "png" else None, bbox_inches="tight",
                    metadata={"CreationDate": None} if ext == "pdf" else None)
        files.append(str(path))
    pyplot().close(fig)
    return files
