"""What every command module shares: output, errors and exit statuses of the CLI contract
(speclp.cli), progress bars, tables, and the Typer object each command module registers on.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from typing import Any, TypeVar

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ..inputs import BadArgument
from ..lp.instance import InstanceError
from ..rationals import fraction_text
from . import error_json, internal_error, one_line, stderr, stdout
from .validate import BadInput

__all__ = ["BadArgument", "BadInput", "ClaimFailed", "PlainProgress", "STOPPED_EXIT", "Stopped", "counting",
           "counting_lines", "flag_of", "given", "jsonable", "new_commands", "progress", "refusal",
           "refuse_given", "reporting", "run", "stderr", "stdout", "table", "working"]


def new_commands(help: str | None = None) -> typer.Typer:
    """The Typer object of one command module (or of a command group such as `check`)."""
    return typer.Typer(help=help, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None, no_args_is_help=help is not None)


T = TypeVar("T")

FIELD_FLAGS = {"runs": "--max-runs", "results": "RESULTS", "fmt": "--format", "depths": "--depth",
               "temperatures": "--temperature", "widths": "--top", "context_budget": "--context-budget",
               "claim": "CLAIM"}
"""Library parameters whose flag is not ``--`` + the name with dashes (flag_of)."""
REFERENCE = re.compile(r"`([A-Za-z_]\w*)`")  # a parameter named inside a reason: `family`


def flag_of(field: str | None) -> str | None:
    """The flag of a library parameter named by a BadArgument (the ONE place a field becomes
    a flag): FIELD_FLAGS, else ``--`` + the name with dashes; fields joined by "/" (a rule on
    two parameters, ``top/depth``) each; a field that is not a Python name (a path,
    ``--flag``, ``target[3]``) is returned as it is."""
    if field is None:
        return field
    if "/" in field and all(part.isidentifier() for part in field.split("/")):
        return "/".join(str(flag_of(part)) for part in field.split("/"))
    if not field.isidentifier():
        return field
    return FIELD_FLAGS.get(field, "--" + field.replace("_", "-"))


def flag_reason(reason: str) -> str:
    """A reason with the parameters it names in backquotes (`family`) written as their flags
    (--family): the same one mapping as flag_of."""
    return REFERENCE.sub(lambda m: str(flag_of(m.group(1))), reason)


def given(ctx: Any, *names: str) -> list[str]:
    """The flags (first spelling, e.g. --max-runs) of the parameters `names` that the command
    line gave, not left at their default (click's parameter source)."""
    flags = {p.name: p.opts[0] for p in ctx.command.params if getattr(p, "opts", None)}
    out = []
    for name in names:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append(flags[name])
    return out


def refuse_given(ctx: Any, names: tuple[str, ...], why: str) -> None:
    """BadInput naming the first of `names` the command line gave: a flag the chosen mode
    does not use (``--search: applies to --sampler only ...``)."""
    flags = given(ctx, *names)
    if flags:
        raise BadInput(f"{flags[0]}: {why}")


def refusal(err: BadArgument) -> tuple[str, str | None]:
    """(one line, field) of a refusal: a CLI check (BadInput) and a wrong instance file or
    instance field (InstanceError) already name their flag, path or field; a library
    argument's field becomes its flag (flag_of)."""
    if isinstance(err, BadInput | InstanceError):
        message = one_line(err)
        return message, message.split(": ", 1)[0] if ": " in message else None
    flag = flag_of(err.field)
    return one_line(f"{flag}: {flag_reason(err.reason)}"), flag


class ClaimFailed(Exception):
    """A checked claim failed: the payload (with the counterexample) is printed, exit status 1."""

    def __init__(self, message: str, payload: dict[str, Any]):
        super().__init__(message)
        self.payload = payload


STOPPED_EXIT = 4


class Stopped(Exception):
    """Work stopped by its own limit (e.g. `prove --time-limit`) before an answer: neither a
    failed claim (1) nor a bug (3). The payload is printed; exit status 4."""

    def __init__(self, message: str, payload: dict[str, Any]):
        super().__init__(message)
        self.payload = payload


def jsonable(value: Any) -> Any:
    """Convert results to JSON types (Fractions become strings, numpy scalars numbers)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Fraction):
        return fraction_text(value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _report(line: str, payload: Any, as_json: bool, render: Callable[[Any], None] | None,
            dump: bool) -> None:
    """A failed claim's or a stopped run's payload: one JSON object with --json; else the one
    line on stderr, then the rendered payload (or, with dump and no renderer, its JSON)."""
    if as_json:
        print(json.dumps(jsonable(payload)))
        return
    stderr.print(line, markup=False, soft_wrap=True)
    if render is not None:
        render(payload)
    elif dump:
        print(json.dumps(jsonable(payload), indent=1))


def run(body: Callable[[], dict[str, Any]], as_json: bool,
        render: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Run a command body with the CLI contract: output, errors and exit status."""
    try:
        result = body()
    except BadArgument as err:  # BadInput and InstanceError included
        message, field = refusal(err)
        stderr.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
        if as_json:
            error_json(2, message, field)
        raise typer.Exit(2) from None
    except ClaimFailed as failure:
        _report(f"CLAIM FAILED: {failure}", failure.payload, as_json, render, dump=True)
        raise typer.Exit(1) from None
    except Stopped as stop:
        _report(f"STOPPED: {stop}", stop.payload, as_json, render, dump=False)
        raise typer.Exit(STOPPED_EXIT) from None
    except KeyboardInterrupt:
        stderr.print("interrupted", markup=False, highlight=False)
        raise typer.Exit(130) from None  # speclp.cli.Speclp.main adds the JSON object
    except (typer.Exit, typer.Abort):
        raise
    except Exception as err:
        raise typer.Exit(internal_error(err, as_json)) from None
    if as_json:
        print(json.dumps(jsonable(result)))
    elif render is not None:
        render(result)
    else:
        print(json.dumps(jsonable(result), indent=1))


def table(title: str, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    """A titled table on stdout; the title is a line of its own (never wrapped to the
    table's width). A table wider than the terminal folds its cells onto more lines, never
    cuts them (an e-value keeps its exponent)."""
    stdout.print(title, markup=False, highlight=False, soft_wrap=True)
    t = Table()
    for c in columns:
        t.add_column(escape(c), overflow="fold")
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


class TimeLimitColumn(ProgressColumn):
    """The time left until a known time limit ("limit in 42s"), re-rendered as the bar
    refreshes: work that stops at its limit shows when it will, whatever its item count."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.deadline = time.monotonic() + limit

    def render(self, task: Any) -> Text:
        left = max(0.0, self.deadline - time.monotonic())
        return Text(f"limit in {left:.0f}s", style="progress.remaining")


def _bar(total: int | None, time_limit: float | None = None) -> Progress:
    """A progress bar on stderr (hidden off a terminal): count, elapsed time, with a total
    the estimated time left, and with a time limit the time left until it."""
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn()]
    if total is not None:
        columns.append(TimeRemainingColumn())
    if time_limit is not None:
        columns.append(TimeLimitColumn(time_limit))
    return Progress(*columns, console=stderr, transient=False, disable=not sys.stderr.isatty())


def progress(items: Iterable[T], total: int | None, description: str,
             time_limit: float | None = None) -> Iterator[T]:
    """Iterate with a progress bar on stderr (hidden when stderr is not a terminal);
    time_limit (seconds from now): also show the time left until it."""
    with _bar(total, time_limit) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


@contextlib.contextmanager
def counting(total: int | None, description: str) -> Iterator[Callable[[], None]]:
    """A progress bar for work done in nested loops: yields a function that counts one item."""
    with _bar(total) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


PLAIN_EVERY_S = 10.0  # seconds between two plain progress lines


def duration(seconds: float) -> str:
    """A rounded duration for a progress line: "41 s", "2 min", "1 h 5 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min"


class PlainProgress:
    """Progress as plain lines on stderr, for runs whose stderr is not a terminal (piped or
    logged: the rich bar is hidden there), e.g. "realgap: 3/12 prompts, 41 s, ~2 min left":
    at most one line every `every` seconds while items are counted, and one at the end
    (finish). clock: seconds (time.monotonic; a test passes its own)."""

    def __init__(self, description: str, total: int | None, unit: str,
                 every: float = PLAIN_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.description, self.total, self.unit, self.every, self.clock = (
            description, total, unit, every, clock)
        self.start = self.last = clock()
        self.done = 0

    def line(self, now: float) -> str:
        """The progress line at time `now`."""
        elapsed = now - self.start
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        text = f"{self.description}: {count} {self.unit}, {duration(elapsed)}"
        if self.total is not None and 0 < self.done < self.total:
            text += f", ~{duration(elapsed / self.done * (self.total - self.done))} left"
        return text

    def _write(self, now: float) -> None:
        sys.stderr.write(self.line(now) + "\n")
        sys.stderr.flush()
        self.last = now

    def advance(self, count: int = 1) -> None:
        """Count `count` items; a line when `every` seconds have passed since the last one."""
        self.done += count
        now = self.clock()
        if now - self.last >= self.every:
            self._write(now)

    def finish(self) -> None:
        """The last line (always written)."""
        self._write(self.clock())


def reporting(items: Iterable[T], total: int | None, description: str, unit: str) -> Iterator[T]:
    """progress() on a terminal; elsewhere (stderr piped or logged) plain progress lines
    (PlainProgress): a long run shows how far it is wherever its stderr goes. stdout is
    never written (a --json run prints one JSON object)."""
    if sys.stderr.isatty():
        yield from progress(items, total, description)
        return
    lines = PlainProgress(description, total, unit)
    try:
        for item in items:
            yield item
            lines.advance()
    finally:
        lines.finish()


@contextlib.contextmanager
def counting_lines(total: int | None, description: str, unit: str) -> Iterator[Callable[[], None]]:
    """counting() on a terminal; elsewhere plain progress lines (PlainProgress)."""
    if sys.stderr.isatty():
        with counting(total, description) as advance:
            yield advance
        return
    lines = PlainProgress(description, total, unit)
    try:
        yield lines.advance
    finally:
        lines.finish()
