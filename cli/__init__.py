"""Console entry point `speclp`: a thin face over lp, verifiers and proofs.

Contract (DESIGN.md): `--json` prints exactly one JSON object on stdout; without it a
readable table. Exit statuses:
    0    success
    1    a checked claim failed (the counterexample is printed and saved)
    2    bad input: ONE line on stderr, ``error: FLAG-or-PATH: what is wrong`` (usage errors
         of the parser included); checked before any expensive work (cli/validate.py)
    3    internal error (a bug): one line ``internal error: ...; please report`` (set
         SPECLP_DEBUG=1 for the traceback)
    130  interrupted (Ctrl-C / SIGTERM); resumable commands keep what they finished
Long work shows a progress bar on stderr.

Commands live in the modules of this package, one per command group; each registers
itself on `app` (or on the `check` group) when imported. COMMANDS below is the map from
every command to its module (tests/test_cli_core.py checks it against what is registered).
Their inputs are checked by the shared validation layer, cli/validate.py.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any, TypeVar

import typer
import typer.core
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .validate import BadInput

INTERNAL_ERROR = 3
INTERRUPTED = 130


class OneLineErrors(typer.core.TyperGroup):
    """The top-level command group: every error ends as one line on stderr and an exit status
    of the contract (module docstring), usage errors of the parser included."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except typer.Exit as done:
            code = done.exit_code
        except (typer.Abort, KeyboardInterrupt):
            stderr.print("interrupted", markup=False, highlight=False)
            code = INTERRUPTED
        except Exception as err:
            if hasattr(err, "exit_code") and hasattr(err, "format_message"):  # a parser error
                code = parser_error(err)
            else:  # a bug outside a command body
                code = internal_error(err)
        if standalone_mode:
            sys.exit(code)
        return code


def parser_error(err: Any) -> int:
    """One line for an error of the command-line parser (click's exceptions, vendored by
    typer): unknown option, missing or unparsable value; returns its exit status (2)."""
    if type(err).__name__ == "NoArgsIsHelpError":  # `speclp` alone prints the help
        err.show()
        return int(err.exit_code)
    ctx = getattr(err, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    stderr.print(f"error: {_one_line(err.format_message())}{hint}", markup=False, highlight=False,
                 soft_wrap=True)
    return int(err.exit_code)


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def internal_error(err: BaseException) -> int:
    """Report an unexpected exception on one line (traceback with SPECLP_DEBUG=1); exit 3."""
    if os.environ.get("SPECLP_DEBUG"):
        import traceback

        traceback.print_exception(err)
    from .. import __version__

    stderr.print(f"internal error: {type(err).__name__}: {_one_line(err)[:300]}; please report "
                 f"it with the command line (speclp {__version__}; SPECLP_DEBUG=1 shows the "
                 "traceback)", markup=False, highlight=False, soft_wrap=True)
    return INTERNAL_ERROR


app = typer.Typer(
    cls=OneLineErrors,
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
# Tables are never cut: off a terminal (a file, a pipe) they keep their natural width.
stdout = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=100_000)

T = TypeVar("T")


class ClaimFailed(Exception):
    """A checked claim failed: the payload (with the counterexample) is printed, exit status 1."""

    def __init__(self, message: str, payload: dict[str, Any]):
        super().__init__(message)
        self.payload = payload


def require_min(flag: str, value: float, low: float, strict: bool = False) -> None:
    """BadInput naming the flag unless value >= low (value > low when strict); NaN and
    infinities are refused. Kept for callers of the earlier helper: it is
    validate.number, which new code calls directly."""
    from . import validate

    validate.number(flag, value, low, low_open=strict)


def require_choice(flag: str, value: str, choices: Iterable[str]) -> None:
    """BadInput naming the flag unless value is one of choices (validate.choice)."""
    from . import validate

    validate.choice(flag, value, choices)


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
    from ..lp.instance import InstanceError

    try:
        result = body()
    except (BadInput, InstanceError) as err:
        stderr.print(f"error: {_one_line(err)}", markup=False, highlight=False, soft_wrap=True)
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
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as err:
        raise typer.Exit(internal_error(err)) from None
    if as_json:
        print(json.dumps(jsonable(result)))
    elif render is not None:
        render(result)
    else:
        print(json.dumps(jsonable(result), indent=1))


def table(title: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    """A titled table on stdout; the title is a line of its own (never wrapped to the
    table's width)."""
    stdout.print(title, markup=False, highlight=False, soft_wrap=True)
    t = Table()
    for c in columns:
        t.add_column(escape(c))
    for row in rows:
        t.add_row(*["" if v is None else escape(str(v)) for v in row])
    stdout.print(t)


@contextlib.contextmanager
def working(description: str) -> Iterator[Callable[[str], None]]:
    """A progress line on stderr for work of unknown length (elapsed time shown); yields a
    function that replaces the description with the current stage."""
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=False, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=None)
        yield lambda stage: bar.update(task, description=f"{description}: {stage}")


def progress(items: Iterable[T], total: int | None, description: str) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=False, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


COMMANDS: dict[str, str] = {
    "solve": "core",
    "check bv-optimal": "core",
    "check class-equals-full": "claims",
    "check node-form": "claims",
    "audit": "audit",
    "gap": "multipath",
    "sweep": "multipath",
    "plot": "multipath",
    "bench": "bench",
    "trees": "trees",
    "realgap": "trees",
    "prove": "prove",
}
"""Every command (as typed after `speclp`) -> the module of this package that defines it."""

for _module in dict.fromkeys(COMMANDS.values()):
    importlib.import_module(f"{__name__}.{_module}")
