"""`speclp instance`: write an instance file (DESIGN.md's JSON format) from one of
lp.instance's generators, for `speclp solve`, `gap`, `audit --instance` and `check`.

Families: dirichlet (independent Dirichlet(alpha) target and draft rows at every prefix),
temperature (target softmax(logits), draft softmax(logits / T + noise N(0, 1))), ties
(rational rows with many equal ratios p/q, for audits of tie handling). --denominator D
makes the rows rational: each row rounded (largest remainder) to multiples of 1/D, so the
instance is solved and compared in exact arithmetic (ties: rows are compositions of D
units). Float rows are written settled (lp.instance.Instance.settled: the loader's
renormalisation leaves them bit for bit). The file is written to a temporary file, read back
and compared with the generated rows, and only then renamed to --out: a failure leaves no
file.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np
import typer

from ..lp.instance import (
    Instance,
    _round_rows,  # the rounding dirichlet_instance uses, reused for the other families
    dirichlet_instance,
    from_rows,
    instance_size,
    load_instance,
    temperature_instance,
    ties_instance,
)
from . import options as option
from . import validate as check
from .common import BadInput, new_commands, run, working

FAMILIES = ("dirichlet", "temperature", "ties")
MAX_DENOMINATOR = 10**9


def library_default(function: Any, name: str) -> Any:
    """The default of parameter `name` of a library function (the one place it is set)."""
    return inspect.signature(function).parameters[name].default


TIES_DENOMINATOR = library_default(ties_instance, "denominator")  # composition units
MAX_WRITTEN_ENTRIES = 1_000_000  # probabilities per model written by this command (~50 MB of JSON)
DEFAULTS = {"alpha": library_default(dirichlet_instance, "alpha"),
            "temperature": library_default(temperature_instance, "temperature"),
            "noise": library_default(temperature_instance, "noise"),
            "seed": library_default(dirichlet_instance, "seed")}
FAMILY_FLAGS = {"dirichlet": ("alpha",), "temperature": ("temperature", "noise"), "ties": ()}

commands = new_commands()


def generate(family: str, vocab: int, depth: int, alpha: float, temperature: float, noise: float,
             seed: int, denominator: int | None) -> Instance:
    """The instance of `family` (module docstring); rows rounded to 1/denominator if given."""
    if family == "dirichlet":
        return dirichlet_instance(vocab, depth, alpha=alpha, seed=seed, denominator=denominator)
    if family == "ties":
        return ties_instance(vocab, depth, seed=seed, denominator=denominator or TIES_DENOMINATOR)
    inst = temperature_instance(vocab, depth, temperature=temperature, noise=noise, seed=seed)
    if denominator:
        name = f"{inst.name}-d{denominator}"
        inst = from_rows(_round_rows(inst.target, denominator), _round_rows(inst.draft, denominator),
                         depth, name)
    return inst


def output_file(flag: str, path: Path, force: bool) -> Path:
    """A file path that can be written: its folder exists or can be created; an existing
    file only with --force; never a folder, a FIFO or a device."""
    if path.is_dir():
        raise BadInput(f"{flag}: {path}: is a folder; give the file to write, e.g. {path / 'instance.json'}")
    if os.path.lexists(path):
        if not path.is_file():
            raise BadInput(f"{flag}: {path}: exists and is not a regular file")
        if not force:
            raise BadInput(f"{flag}: {path}: exists; add --force to overwrite it")
    check.output_dir(flag, path.parent if str(path.parent) else Path("."))
    return path


def same_rows(written: Instance, generated: Instance) -> bool:
    """The file read back has exactly the generated rows: the same fractions and the same
    float64 values, bit for bit (a float instance is written settled, Instance.settled, so
    that the loader's renormalisation leaves it as it is)."""
    if written.rational != generated.rational:
        return False
    pairs = ((written.target_exact, generated.target_exact), (written.draft_exact, generated.draft_exact),
             (written.target, generated.target), (written.draft, generated.draft))
    return all(a.shape == b.shape and np.array_equal(a, b) for a, b in pairs)


def write_checked(inst: Instance, path: Path) -> None:
    """Write `inst` to `path` only if the file reads back as exactly `inst` (same_rows): it
    is written to a temporary file beside `path`, read back, compared, then renamed; on any
    failure no file is left."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        inst.save(temporary)
        if not same_rows(load_instance(temporary), inst):
            raise RuntimeError(f"{path}: the file read back differs from the generated rows")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


@commands.command()
def instance(
    out: Path = typer.Option(None, "--out", help="The instance file to write (JSON)."),
    family: str = typer.Option("dirichlet", "--family",
                               help="dirichlet, temperature (temperature-shifted draft) or ties "
                                    "(rational, many equal ratios)."),
    vocab: int = option.vocab(2),
    depth: int = option.depth(2, "Depth L (rows for every prefix of length 0..L)."),
    alpha: float = typer.Option(None, "--alpha",
                                help=f"Dirichlet concentration (--family dirichlet; default "
                                     f"{DEFAULTS['alpha']:g})."),
    temperature: float = typer.Option(None, "--temperature",
                                      help=f"Draft temperature T (--family temperature; default "
                                           f"{DEFAULTS['temperature']:g})."),
    noise: float = typer.Option(None, "--noise",
                                help=f"Standard deviation of the draft's logit noise (--family "
                                     f"temperature; default {DEFAULTS['noise']:g})."),
    seed: int = option.seed(DEFAULTS["seed"], "Random seed of the rows."),
    denominator: int = typer.Option(None, "--denominator",
                                    help="Rational rows: round every row to multiples of 1/D "
                                         "(exact arithmetic downstream); ties: composition units "
                                         f"(default {TIES_DENOMINATOR})."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
    as_json: bool = option.json(),
) -> None:
    """Write an instance file (random target and draft rows) for solve, gap, audit and check."""

    def body() -> dict[str, Any]:
        values = checked_values(out, family, vocab, depth, alpha, temperature, noise, seed,
                                denominator)
        return write_instance(Path(out), force, values, vocab, depth, seed, denominator)

    def render(r: dict[str, Any]) -> None:
        numbers = ("exact rationals (solved and compared in exact arithmetic)" if r["rational"]
                   else "floats")
        print(f"wrote {r['path']}: {r['name']}, V = {r['vocab_size']}, L = {r['depth']}, "
              f"{r['rows_per_model']} rows per model (target and draft), in {numbers}")
        print("next: " + "; ".join(r["next"]))

    run(body, as_json, render)


def checked_values(out: Path | None, family: str, vocab: int, depth: int, alpha: float | None,
                   temperature: float | None, noise: float | None, seed: int,
                   denominator: int | None) -> dict[str, Any]:
    """The checks of `speclp instance` (exit 2 before any work); returns the family ("family")
    and its parameters with the library's defaults filled in (alpha, temperature, noise)."""
    if out is None:
        raise BadInput("--out: give the file to write, e.g. --out instance.json")
    choice = check.choice("--family", family, FAMILIES)
    check.integer("--vocab", vocab, 2)
    check.integer("--depth", depth, 1)
    check.instance_shape("--vocab/--depth", vocab, depth)
    entries = instance_size(vocab, depth)["entries"]
    if entries > MAX_WRITTEN_ENTRIES:
        raise BadInput(f"--vocab/--depth: V={vocab}, L={depth} has {entries:,} probabilities per "
                       f"model (this command writes at most {MAX_WRITTEN_ENTRIES:,}); use a "
                       "smaller vocabulary or depth")
    given = {"alpha": alpha, "temperature": temperature, "noise": noise}
    for name, value in given.items():
        if value is not None and name not in FAMILY_FLAGS[choice]:
            raise BadInput(f"--{name}: does not apply to --family {choice} (it applies to "
                           f"--family {next(f for f, names in FAMILY_FLAGS.items() if name in names)})")
    values = {name: DEFAULTS[name] if value is None else value for name, value in given.items()}
    check.number("--alpha", values["alpha"], 0, low_open=True)
    check.number("--temperature", values["temperature"], 0, low_open=True)
    check.number("--noise", values["noise"], 0)
    check.seed("--seed", seed)
    if denominator is not None:
        check.integer("--denominator", denominator, 1, MAX_DENOMINATOR)
    return {"family": choice, **values}


def write_instance(out: Path, force: bool, values: dict[str, Any], vocab: int, depth: int,
                   seed: int, denominator: int | None) -> dict[str, Any]:
    """Generate the instance, write it checked (write_checked) and describe it."""
    choice = values["family"]
    path = output_file("--out", out, force)
    with working(f"instance {choice} V={vocab} L={depth}"):
        inst = generate(choice, vocab, depth, values["alpha"], values["temperature"],
                        values["noise"], seed, denominator).settled()
        write_checked(inst, path)
    settings = {"family": choice, "vocab": vocab, "depth": depth, "seed": seed,
                "denominator": denominator if choice != "ties" else denominator or TIES_DENOMINATOR}
    settings.update({name: values[name] for name in FAMILY_FLAGS[choice]})
    return {"path": str(path), "name": inst.name, "vocab_size": inst.vocab_size,
            "depth": inst.depth, "rational": inst.rational,
            "rows_per_model": int(inst.target.shape[0]), "settings": settings,
            "next": [f"speclp solve {path}", f"speclp gap {path} --paths 2"]}
