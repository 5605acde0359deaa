"""Console entry point `speclp`: a thin face over lp, verifiers and proofs.

Contract (DESIGN.md): `--json` prints exactly one JSON object on stdout; without it a
readable table. Exit 0 on success, 1 when a checked claim fails (the counterexample is
printed and saved), 2 on bad input with a one-line error naming the offending field.
Long work shows a progress bar on stderr.

Commands live in the cli_*.py modules next to this file; each registers itself on
`app` (or on the `check` group) when imported below.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

app = typer.Typer(
    help="speclp: speculative decoding theory turned into checked numbers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
check_app = typer.Typer(help="Check a claim of the theory; exit 1 with a counterexample if it fails.",
                        no_args_is_help=True, rich_markup_mode=None)
app.add_typer(check_app, name="check")

stderr = Console(stderr=True)
stdout = Console()

T = TypeVar("T")


class BadInput(Exception):
    """Bad user input: reported on one line, exit status 2."""


class ClaimFailed(Exception):
    """A checked claim failed: the payload (with the counterexample) is printed, exit status 1."""

    def __init__(self, message: str, payload: dict[str, Any]):
        super().__init__(message)
        self.payload = payload


def require_min(flag: str, value: float, low: float, strict: bool = False) -> None:
    """BadInput naming the flag unless value >= low (value > low when strict)."""
    if value < low or (strict and value == low):
        raise BadInput(f"{flag}: must be {'>' if strict else '>='} {low}, got {value}")


def require_choice(flag: str, value: str, choices: Iterable[str]) -> None:
    """BadInput naming the flag unless value is one of choices."""
    choices = tuple(choices)
    if value not in choices:
        raise BadInput(f"{flag}: must be one of {', '.join(choices)}, got {value!r}")


def jsonable(value: Any) -> Any:
    """Convert results to JSON types (Fractions become strings, numpy scalars numbers)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Fraction):
        return str(value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def run(body: Callable[[], dict[str, Any]], as_json: bool,
        render: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Run a command body with the CLI contract: output, errors and exit status."""
    from .lp.instance import InstanceError

    try:
        result = body()
    except (BadInput, InstanceError) as err:
        stderr.print(f"error: {err}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except ClaimFailed as failure:
        if as_json:
            print(json.dumps(jsonable(failure.payload)))
        else:
            stderr.print(f"CLAIM FAILED: {failure}", markup=False, soft_wrap=True)
            if render is not None:
                render(failure.payload)
            else:
                print(json.dumps(jsonable(failure.payload), indent=1))
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(jsonable(result)))
    elif render is not None:
        render(result)
    else:
        print(json.dumps(jsonable(result), indent=1))


def table(title: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    t = Table(title=escape(title))
    for c in columns:
        t.add_column(escape(c))
    for row in rows:
        t.add_row(*["" if v is None else escape(str(v)) for v in row])
    stdout.print(t)


def progress(items: Iterable[T], total: int | None, description: str) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=False, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


COMMAND_MODULES: tuple[str, ...] = (
    "cli_core",  # solve, check bv-optimal
    "cli_claims",  # check class-equals-full, check node-form
    "cli_audit",  # audit
    "cli_multipath",  # gap, sweep, plot
    "cli_models",  # bench
    "cli_trees",  # trees, realgap
    "cli_prove",  # prove (symbolic proofs)
)

for _module in COMMAND_MODULES:
    importlib.import_module(f"{__package__}.{_module}")
