"""The typer options several commands share: one factory per flag, holding its name, help
text and (where the commands agree) its default, so that a flag reads the same in every
`speclp X --help`. A command module imports this module as `option` and declares e.g.
`vocab: int = option.vocab(3)`; each call builds a fresh option, and a command passes the
default (and the help) where its own differs. Only typer is imported here (`speclp --help`
stays light)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer

DRAFT_SAMPLING_HELP = "iid or without-replacement."
FAILING_INSTANCE_HELP = "Where a failing instance is saved."
COUNTEREXAMPLE_HELP = "Where a counterexample is saved."
DENOMINATOR_HELP = "Round rows to multiples of 1/D (rational, exact comparison); 0: floats."
SAVE_DIR = "counterexamples"


def json() -> Any:
    """--json: the one JSON object of the CLI contract (speclp.cli)."""
    return typer.Option(False, "--json", help="Print one JSON object.")


def vocab(default: int) -> Any:
    return typer.Option(default, "--vocab", help="Vocabulary size V.")


def depth(default: int, help: str = "Depth L.") -> Any:
    return typer.Option(default, "--depth", help=help)


def paths(default: int | str | None, help: str = "Number K of drafted paths.") -> Any:
    return typer.Option(default, "--paths", help=help)


def trials(default: int | None, help: str = "Random instances.") -> Any:
    return typer.Option(default, "--trials", help=help)


def time_limit(default: float, help: str) -> Any:
    """--time-limit in seconds (each command says what stops when it is reached)."""
    return typer.Option(default, "--time-limit", help=help)


def seed(default: int, help: str | None = None) -> Any:
    return typer.Option(default, "--seed", help=help)


def concentration(default: float) -> Any:
    """--alpha of the claim checks: the Dirichlet concentration of random rows."""
    return typer.Option(default, "--alpha", help="Dirichlet concentration of the rows.")


def denominator(default: int) -> Any:
    return typer.Option(default, "--denominator", help=DENOMINATOR_HELP)


def backend(backends: Sequence[str], default: str, what: str = "LP backend") -> Any:
    """--backend, its help naming the backends (`what: highs or cvxpy.`)."""
    return typer.Option(default, "--backend", help=f"{what}: {' or '.join(backends)}.")


def draft_sampling(default: str = "iid", help: str = DRAFT_SAMPLING_HELP) -> Any:
    return typer.Option(default, "--draft-sampling", help=help)


def save_dir(default: str = SAVE_DIR, help: str = FAILING_INSTANCE_HELP) -> Any:
    return typer.Option(default, "--save-dir", help=help)


def method(help: str) -> Any:
    """--method of the optimum engine (auto by default; the help says what auto picks)."""
    return typer.Option("auto", "--method", help=help)


def max_enumerated(default: int, help: str) -> Any:
    """--max-enumerated: draft configurations one verifier's exact law may enumerate
    before its block efficiency is estimated from --samples (samples); the default is the
    command's spec's (the library's)."""
    return typer.Option(default, "--max-enumerated", help=help)


def samples(default: int) -> Any:
    """--samples: sampled draft configurations per estimated verifier (the spec's default)."""
    return typer.Option(default, "--samples",
                        help="Sampled draft configurations per estimated verifier.")


def new_out(what: str) -> Any:
    """--new-out of a resumable results folder holding `what` (a sweep, a spec)."""
    return typer.Option(False, "--new-out",
                        help=f"If --out holds another {what}, use a new folder next to it "
                             "(OUT-2, ...) instead of refusing.")


def prompts(default: str) -> Any:
    return typer.Option(default, "--prompts", help="humaneval:N or file:PATH.")


def prompt_seed(default: int | None = None) -> Any:
    return typer.Option(default, "--prompt-seed",
                        help="With humaneval:N: draw the N prompts at random from the 164 with this seed "
                             "(recorded; a larger N with the same seed adds prompts to the runs).")


def every(default: int) -> Any:
    return typer.Option(default, "--every", help="Target-sampled tokens between contexts.")
