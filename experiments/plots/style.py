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
