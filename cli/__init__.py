"""Console entry point `speclp`: a thin face over lp, verifiers, proofs and experiments.

Contract (DESIGN.md): `--json` prints exactly one JSON object on stdout; without it a
readable table. Exit statuses:
    0    success
    1    a checked claim failed (the counterexample is printed and saved), or audited code
         failed its contract
    2    bad input: ONE line on stderr, ``error: FLAG-or-PATH: what is wrong`` (usage errors
         of the parser included); checked before any expensive work (cli/validate.py)
    3    internal error (a bug): one line ``internal error: ...; please report`` (set
         SPECLP_DEBUG=1 for the traceback)
    4    stopped by its own limit before an answer (``prove --time-limit``): neither a
         failed claim nor a bug (cli/common.py Stopped)
    130  interrupted (Ctrl-C / SIGTERM); resumable commands keep what they finished
Long work shows a progress bar on stderr. With --json, an error (exit 2, 3 or 130) also
prints one JSON object on stdout: {"error": the line without "error: ", "exit_status": N,
"field": the flag or path it names, or null} (error_json).

The command registry is COMMANDS below: every command (as typed after `speclp`), the module
of this package that defines it, and its one-line summary. The top-level group imports a
command's module only when that command runs, so `speclp --help` (and a refused flag of a
light command) stays free of torch, scipy and sympy; each command module imports what it
needs at its top and registers its commands on its own `commands` object
(cli/common.py). Shared helpers: cli/common.py; input checks: cli/validate.py.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any

import typer
import typer.core
from rich.console import Console

from .. import __version__

INTERNAL_ERROR = 3
INTERRUPTED = 130

COMMANDS: dict[str, tuple[str, str]] = {
    "solve": ("core", "Solve the single-path information-agnostic LPs and compare BV and "
                      "token-level."),
    "instance": ("instance", "Write an instance file (random target and draft rows) for solve, gap, "
                             "audit and check."),
    "check": ("claims", "Check a claim of the theory; exit 1 with a counterexample if it fails."),
    "audit": ("audit", "Audit a verifier or anyone's sampler for losslessness."),
    "lossless": ("lossless", "Is an acceptance configuration lossless? Exact TV if not."),
    "gap": ("gap", "Every verifier's exact block efficiency E[tau + 1] against the K-path LP "
                   "optimum."),
    "sweep": ("sweep", "Optimality gaps over a grid of random instances, one row per (instance, "
                       "verifier)."),
    "plot": ("sweep", "Optimality-gap figures (PNG and PDF) from a sweep, or benchmark figures."),
    "bench": ("bench", "Paired decoding comparison: every verifier scored on the same drafted "
                       "trees."),
    "trees": ("trees", "Expected tokens per round of tree-selection rules at real contexts, per "
                       "budget."),
    "realgap": ("realgap", "How far is every verifier from the best possible on a real pair?"),
    "prove": ("prove", "Prove a claim for EVERY instance of a shape (symbolic cells)."),
}
"""command -> (module of speclp.cli defining it, one-line summary shown by `speclp --help`)."""

stderr = Console(stderr=True)
# Tables are never cut: off a terminal (a file, a pipe) they keep their natural width.
stdout = Console() if sys.stdout.isatty() or os.environ.get("COLUMNS") else Console(width=100_000)


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def wants_json(args: Any) -> bool:
    """Whether the command line asks for --json (an option before any `--`)."""
    tokens = list(sys.argv[1:] if args is None else args)
    return "--json" in (tokens[:tokens.index("--")] if "--" in tokens else tokens)


ERROR_JSON_PRINTED: list[int] = []  # statuses error_json printed in this invocation (Speclp.main)


def error_json(status: int, message: str, field: str | None = None) -> None:
    """The one JSON object on stdout of a --json command that ends in an error."""
    print(json.dumps({"error": one_line(message), "exit_status": status, "field": field}))
    ERROR_JSON_PRINTED.append(status)


def parser_field(err: Any) -> str | None:
    """The option a parser error names (click's param / option_name), if any."""
    param = getattr(err, "param", None)
    opts = getattr(param, "opts", None)
    if opts:
        return max(opts, key=len)
    if getattr(param, "name", None):
        return str(param.name).upper()  # an argument
    return getattr(err, "option_name", None)


def parser_error(err: Any, as_json: bool = False) -> int:
    """One line for an error of the command-line parser (click's exceptions, vendored by
    typer): unknown option, missing or unparsable value; returns its exit status (2).
    as_json: also the JSON object of error_json on stdout."""
    if type(err).__name__ == "NoArgsIsHelpError":  # `speclp` alone prints the help
        err.show()
        return int(err.exit_code)
    ctx = getattr(err, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    message = f"{one_line(err.format_message())}{hint}"
    stderr.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        error_json(int(err.exit_code), message, parser_field(err))
    return int(err.exit_code)


def internal_error(err: BaseException, as_json: bool = False) -> int:
    """Report an unexpected exception on one line (traceback with SPECLP_DEBUG=1); exit 3.
    as_json: also the JSON object of error_json on stdout."""
    if os.environ.get("SPECLP_DEBUG"):
        traceback.print_exception(err)
    message = (f"internal error: {type(err).__name__}: {one_line(err)[:300]}; please report "
               f"it with the command line (speclp {__version__}; SPECLP_DEBUG=1 shows the "
               "traceback)")
    stderr.print(message, markup=False, highlight=False, soft_wrap=True)
    if as_json:
        error_json(INTERNAL_ERROR, message)
    return INTERNAL_ERROR


def command_module(name: str) -> Any:
    """The module of speclp.cli that defines the command `name` (imported on first use)."""
    return importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")


def load_command(name: str) -> Any:
    """The click command (or group, for `check`) registered under `name` by its module
    (typer's vendored click: a module with several commands builds a group)."""
    built = typer.main.get_command(command_module(name).commands)
    if isinstance(built, typer.core.TyperGroup):
        found = built.commands.get(name)
        if found is None:
            raise LookupError(f"module {COMMANDS[name][0]} does not define the command {name!r}")
        return found
    if built.name != name:
        raise LookupError(f"module {COMMANDS[name][0]} defines {built.name!r}, not {name!r}")
    return built


class Speclp(typer.core.TyperGroup):
    """The top-level group: commands from COMMANDS, each module imported when its command is
    resolved; every error ends as one line on stderr with an exit status of the contract
    (module docstring), usage errors of the parser included."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, name: str) -> Any:
        return load_command(name) if name in COMMANDS else None

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        as_json = wants_json(args)
        ERROR_JSON_PRINTED.clear()
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0  # a command's typer.Exit(N) returns N here
        except typer.Exit as done:
            code = done.exit_code
        except (typer.Abort, KeyboardInterrupt):
            stderr.print("interrupted", markup=False, highlight=False)
            code = INTERRUPTED
        except Exception as err:
            if hasattr(err, "exit_code") and hasattr(err, "format_message"):  # a parser error
                code = parser_error(err, as_json)
            else:  # a bug outside a command body
                code = internal_error(err, as_json)
        if code == INTERRUPTED and as_json and not ERROR_JSON_PRINTED:
            error_json(code, "interrupted")  # (a command's own interrupt message is on stderr)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=Speclp,
    help="speclp: speculative decoding theory turned into checked numbers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def leaf_commands() -> list[tuple[tuple[str, ...], Any]]:
    """(command path, click command) for every command registered on the app, groups walked
    down to their commands (e.g. ("check", "node-form")): what the fuzz and the bad-input
    list run over, so that a command added later is covered without touching them."""
    out: list[tuple[tuple[str, ...], Any]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        if path == ():  # the top-level group loads its commands on demand
            subcommands = {name: load_command(name) for name in COMMANDS}
        if subcommands:
            for name, sub in subcommands.items():
                walk(sub, path + (name,))
        else:
            out.append((path, command))

    walk(typer.main.get_command(app), ())
    return out


@app.callback()
def main() -> None:
    """speclp: speculative decoding theory turned into checked numbers."""
