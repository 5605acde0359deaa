"""What several benchmark scripts share: their command line, their record files, their figures.

Not a benchmark. The scripts run as `python benchmarks/NAME.py`, so this folder is on
sys.path and they import it as `_common` (they also put the folder there themselves, as
verifier_step.py does for beyond_step). No torch here: the LP benchmarks import it too.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def print_and_save(summary: dict[str, Any], rows: list[dict[str, Any]], out: str | None) -> None:
    """Print the summary; with --out, save {"summary", "rows"} there as JSON."""
    print(json.dumps(summary, indent=1))
    if out:
        with open(out, "w") as fh:
            json.dump({"summary": summary, "rows": rows}, fh, indent=1)


def ladder_args(doc: str, results: Path, argv: list[str] | None) -> argparse.Namespace:
    """The command line of a resumable ladder benchmark: --quick, --resume, --out DIR."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", type=Path, default=results)
    return parser.parse_args(argv)


def resumed_records(out: Path, name: str, resume: bool, key: Callable[[dict[str, Any]], str]
                    ) -> tuple[Path, list[dict[str, Any]], set[str]]:
    """The record file OUT/NAME.json (OUT created), the records an earlier run left there
    when resuming (none otherwise) and their keys, the instances not to run again."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    records = json.loads(path.read_text()).get("records", []) if resume and path.exists() else []
    return path, records, {key(r) for r in records}


def save_records(path: Path, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    path.write_text(json.dumps({"records": records, "summary": summary}, indent=1))


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, imported only when a figure is drawn."""
    import matplotlib  # lazy: matplotlib is needed only for the figures, not to run or --help

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after matplotlib.use("Agg"), as above

    return plt


def seconds_log_axes(ax: Any, xlabel: str, title: str) -> None:
    """Log-log axes of seconds against a size, with grid and legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def save_figure(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
