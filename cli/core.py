"""`speclp solve`: the single-path LPs and BV (the main job on a built-in default). The flags
build a speclp.proofs.single_path.SolveSpec (its construction is the validation, its defaults
the library's); the CLI reads the instance file (refused by its sizes, naming the path) and
refuses a file given with --builtin; solve(spec) computes (a SolveResult); its to_json() is
rendered, the table and "meaning" are here."""

from __future__ import annotations

from typing import Any

import typer

from ..lp import tolerances
from ..lp.engine import BACKENDS
from ..lp.instance import BUILTINS, Instance
from ..proofs.single_path import DEFAULT_BUILTIN, DEFAULT_DEPTH, STAGES, OptimumNotFound, SolveSpec, solve
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, new_commands, progress, run, table

commands = new_commands()


def solve_spec(instance: str | None, builtin: str | None, depth: int | None, backend: str) -> SolveSpec:
    """Flags -> SolveSpec (BadArgument naming the field, exit 2 before any work): a file with
    --builtin refused here, the file read (check.instance_file) once the spec's other fields
    are checked."""
    if instance and builtin:
        raise BadInput("INSTANCE: give either INSTANCE.json or --builtin, not both")

    def read(spec: SolveSpec) -> Instance:
        return check.instance_file(instance)

    return SolveSpec(read if instance else None, builtin, depth, backend)


@commands.command("solve")
def solve_cmd(
    instance: str = typer.Argument(None, help=f"Instance JSON file (default: --builtin {DEFAULT_BUILTIN})."),
    builtin: str = typer.Option(None, "--builtin", help=f"Built-in instance: {', '.join(BUILTINS)}."),
    depth: int = typer.Option(None, "--depth",
                              help=f"Depth L of a built-in instance (default {DEFAULT_DEPTH})."),
    backend: str = option.backend(BACKENDS, SolveSpec.backend),
    as_json: bool = option.json(),
) -> None:
    """Solve the single-path information-agnostic LPs and compare BV and token-level.

    The optimum by the engine (column generation), the enumerated full LP (variables
    pi(x, i, y)) and the node-budget LP, each certified in exact rationals; exact block
    efficiencies E[tau + 1] of BV and token-level verification.
    """

    def body() -> dict[str, Any]:
        spec = solve_spec(instance, builtin, depth, backend)
        bar = lambda stages: progress(stages, len(STAGES), f"solve {spec.instance.name}")  # noqa: E731
        try:
            result = solve(spec, bar).to_json()
        except OptimumNotFound as err:  # one line, exit 1
            raise ClaimFailed(str(err), {"error": str(err), err.key: err.record}) from None
        return {**result, "meaning": meaning(result)}

    run(body, as_json, render_solve)


def _gap_is_zero(gap: Any, rational: bool, certified: bool) -> bool:
    """A gap to the optimum is 0: exactly (rational), or within the one tolerance table's
    bound for a (certified or not) float optimum."""
    if rational:
        return str(gap) == "0"
    return abs(float(gap)) <= tolerances.optimum_tolerance(certified)


def meaning(r: dict[str, Any]) -> str:
    """What the table of `solve` says, for a newcomer (derived from the result `r`, never
    fixed text: the optimum, who certified it, BV's and token-level's gaps)."""
    inst = r["instance"]
    optima = [r[key] for key in ("optimum", "lp_full", "lp_node")]
    certified = all(rec["certified"] for rec in optima)
    shown = optima[0]["exact"] or f"{optima[0]['value']:.12g}"
    agree = (len({rec["exact"] for rec in optima}) == 1 if inst["rational"]
             else max(rec["value"] for rec in optima) - min(rec["value"] for rec in optima)
             <= tolerances.FLOAT_AGREEMENT)
    how = ("each certified exactly in rational arithmetic (an exact basis, its duals and reduced "
           "costs checked)" if certified else "NOT all certified (see the status column)")
    rows = "its rational rows" if inst["rational"] else "the exact binary values of its float rows"
    lines = [f"What this means: one draft path of L = {inst['depth']} tokens over V = "
             f"{inst['vocab_size']} tokens. The best expected number of tokens per target call, "
             f"E[tau + 1], that ANY lossless verifier keeping a prefix of the drafted path (plus one "
             f"token) can reach here, even one that reads every target and draft row off the "
             f"path too, is {shown}: three "
             f"different LPs {'agree on it' if agree else 'DISAGREE'}, {how}, on {rows}."]
    for name, label in (("bv", "Block verification (BV)"), ("token", "Token-level verification")):
        gap = r["gap_to_optimum"][name]
        value = r["verifiers_exact"][name] or f"{r['verifiers'][name]:.12g}"
        if _gap_is_zero(gap, inst["rational"], certified):
            exactly = "exactly" if inst["rational"] else "to float precision"
            lines.append(f"{label} gets {value}, the optimum {exactly}: it is optimal here.")
        else:
            shown_gap = gap if inst["rational"] else f"{float(gap):.4g}"
            lines.append(f"{label} gets {value}, {shown_gap} below the optimum.")
    lines.append("Both verifier values come from their exact laws, not from samples (docs/theory.md "
                 "sections 2.2 and 3.3).")
    return " ".join(lines)


def render_solve(r: dict[str, Any]) -> None:
    """The table of `speclp solve`."""
    if "verifiers" not in r:  # an optimum was not found: the one line says why
        return
    inst = r["instance"]
    rows = []
    for key, label in (("optimum", "optimum (engine: column generation)"),
                       ("lp_full", "full LP optimum"), ("lp_node", "node LP optimum")):
        rec = r[key]
        rows.append([label, rec["exact"] or f"{rec['value']:.12g}", f"{rec['value']:.12g}",
                     "certified" if rec["certified"] else f"NOT certified: {rec['certificate']}",
                     f"total {rec['seconds']:.3f}s (solve {rec['solve_seconds'] or 0:.3f}s, "
                     f"certificate {rec['certify_seconds'] or 0:.3f}s)"])
    for name in ("bv", "token"):
        exact = r["verifiers_exact"][name]
        rows.append([f"{name} block efficiency", exact or f"{r['verifiers'][name]:.12g}",
                     f"{r['verifiers'][name]:.12g}", f"gap {r['gap_to_optimum'][name]}", "exact law"])
    title = (f"{inst['name']}  (V={inst['vocab_size']}, L={inst['depth']}, "
             f"{'rational' if inst['rational'] else 'float'})  E[tau + 1]")
    table(title, ["quantity", "exact", "float", "status", "times"], rows)
    print(r["meaning"])
