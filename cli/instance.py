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
file. The flags build an lp.instance_spec.InstanceSpec (its construction is the validation;
the defaults are the generators'); only --out and --force are checked here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import typer

from ..lp.instance import Instance, load_instance
from ..lp.instance_spec import DEFAULTS, TIES_DENOMINATOR, InstanceResult, InstanceSpec
from . import options as option
from . import validate as check
from .common import BadInput, new_commands, run, working

commands = new_commands()


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
    family: str = typer.Option(InstanceSpec.family, "--family",
                               help="dirichlet, temperature (temperature-shifted draft) or ties "
                                    "(rational, many equal ratios)."),
    vocab: int = option.vocab(InstanceSpec.vocab),
    depth: int = option.depth(InstanceSpec.depth, "Depth L (rows for every prefix of length 0..L)."),
    alpha: float = typer.Option(None, "--alpha",
                                help=f"Dirichlet concentration (--family dirichlet; default "
                                     f"{DEFAULTS['alpha']:g})."),
    temperature: float = typer.Option(None, "--temperature",
                                      help=f"Draft temperature T (--family temperature; default "
                                           f"{DEFAULTS['temperature']:g})."),
    noise: float = typer.Option(None, "--noise",
                                help=f"Standard deviation of the draft's logit noise (--family "
                                     f"temperature; default {DEFAULTS['noise']:g})."),
    seed: int = option.seed(InstanceSpec.seed, "Random seed of the rows."),
    denominator: int = typer.Option(None, "--denominator",
                                    help="Rational rows: round every row to multiples of 1/D "
                                         "(exact arithmetic downstream); ties: composition units "
                                         f"(default {TIES_DENOMINATOR})."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
    as_json: bool = option.json(),
) -> None:
    """Write an instance file (random target and draft rows) for solve, gap, audit and check."""

    def body() -> dict[str, Any]:
        if out is None:  # what the flags alone have: the file to write
            raise BadInput("--out: give the file to write, e.g. --out instance.json")
        spec = InstanceSpec(family, vocab, depth, alpha, temperature, noise, seed, denominator)
        return write_instance(spec, Path(out), force).to_json()

    def render(r: dict[str, Any]) -> None:
        numbers = ("exact rationals (solved and compared in exact arithmetic)" if r["rational"]
                   else "floats")
        print(f"wrote {r['path']}: {r['name']}, V = {r['vocab_size']}, L = {r['depth']}, "
              f"{r['rows_per_model']} rows per model (target and draft), in {numbers}")
        print("next: " + "; ".join(r["next"]))

    run(body, as_json, render)


def write_instance(spec: InstanceSpec, out: Path, force: bool) -> InstanceResult:
    """Generate the spec's instance, write it checked (write_checked) and describe it."""
    path = output_file("--out", out, force)
    with working(f"instance {spec.family} V={spec.vocab} L={spec.depth}"):
        inst = spec.generate()
        write_checked(inst, path)
    return InstanceResult.written(spec, inst, path)
