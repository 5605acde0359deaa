"""`speclp solve` and `speclp check bv-optimal` (single-path core)."""

from __future__ import annotations

import time
from typing import Any

import typer

from . import BadInput, ClaimFailed, app, check_app, progress, run, table
from . import validate as check

BACKENDS = ("highs", "cvxpy")


def _load(instance: str | None, builtin: str | None, depth: int | None) -> Any:
    """The instance to solve, after refusing (exit 2) one whose single-path LP or exact laws
    are over the size limits (before anything is built)."""
    from ..lp.full import MAX_VARIABLES, full_lp_size
    from ..lp.instance import BUILTINS, builtin_instance

    if instance and builtin:
        raise BadInput("INSTANCE: give either INSTANCE.json or --builtin, not both")
    if instance:
        if depth is not None:
            raise BadInput("--depth: only applies to --builtin instances (a file fixes its depth)")
        return check.instance_file(instance)
    name = check.choice("--builtin", builtin or "bv-toy", BUILTINS)
    depth = check.integer("--depth", 2 if depth is None else depth, 1)
    fits = check.largest(lambda d: full_lp_size(2, d, 1)["variables"] <= MAX_VARIABLES, min(depth, 64))
    suggestion = f"use --depth {fits} or less"
    check.instance_shape("--depth", 2, depth)
    check.full_lp("--depth", 2, depth, 1, suggestion=suggestion)
    check.enumeration("--depth", 2, depth, 1, suggestion=suggestion)
    return builtin_instance(name, depth)



@app.command()
def solve(
    instance: str = typer.Argument(None, help="Instance JSON file (default: --builtin bv-toy)."),
    builtin: str = typer.Option(None, "--builtin", help="Built-in instance: bv-toy."),
    depth: int = typer.Option(None, "--depth", help="Depth L of a built-in instance (default 2)."),
    backend: str = typer.Option("highs", "--backend", help="LP backend: highs or cvxpy."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Solve the single-path information-agnostic LPs and compare BV and token-level.

    The optimum by the engine (column generation), the enumerated full LP (variables
    pi(x, i, y)) and the node-budget LP, each certified in exact rationals; exact block
    efficiencies E[tau + 1] of BV and token-level verification.
    """

    def body() -> dict[str, Any]:
        check.choice("--backend", backend, BACKENDS)
        inst = _load(instance, builtin, depth)
        from fractions import Fraction

        from ..lp.engine import optimum, program_optimum
        from ..lp.node import node_lp
        from ..verifiers.exact import exact_result

        records: dict[str, Any] = {}
        verifiers, verifiers_exact = {}, {}
        model = inst.model(exact=inst.rational)
        stages = ["optimum", "lp_full", "lp_node", "bv", "token"]
        for key in progress(stages, len(stages), f"solve {inst.name}"):
            if key == "optimum":  # the engine (column generation, certified)
                records[key] = optimum(inst, 1).to_json()
            elif key == "lp_full":  # the enumerated LP: the independent oracle
                full = optimum(inst, 1, method="full", backend=backend)
                records[key] = full.to_json()
            elif key == "lp_node":
                start = time.perf_counter()
                node = program_optimum(node_lp(inst), backend, rational=inst.rational)
                node.seconds = time.perf_counter() - start  # build included
                records[key] = node.to_json()
            else:  # an exact verifier law
                res = exact_result(model, key)
                verifiers[key] = float(res.block_efficiency)
                verifiers_exact[key] = str(Fraction(res.block_efficiency)) if inst.rational else None
        for key in ("optimum", "lp_full", "lp_node"):  # not found: one line, exit 1
            if records[key]["value"] is None:
                message = (f"{key}: optimum not found: {records[key]['status']} "
                           f"({records[key]['certificate']})")
                raise ClaimFailed(message, {"error": message, key: records[key]})
        if full.exact_value is not None and inst.rational:
            gaps = {n: str(full.exact_value - Fraction(verifiers_exact[n])) for n in verifiers}
        else:
            gaps = {n: full.value - v for n, v in verifiers.items()}
        return {
            "instance": {"name": inst.name, "vocab_size": inst.vocab_size, "depth": inst.depth,
                         "rational": inst.rational, "notes": inst.notes},
            **records,
            "verifiers": verifiers,
            "verifiers_exact": verifiers_exact,
            "gap_to_optimum": gaps,
        }

    def render(r: dict[str, Any]) -> None:
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

    run(body, as_json, render)


@check_app.command("bv-optimal")
def check_bv_optimal_cmd(
    trials: int = typer.Option(200, "--trials", help="Random instances."),
    vocab: int = typer.Option(3, "--vocab", help="Vocabulary size V."),
    depth: int = typer.Option(3, "--depth", help="Depth L."),
    seed: int = typer.Option(0, "--seed", help="First seed."),
    alpha: float = typer.Option(1.0, "--alpha", help="Dirichlet concentration of the rows."),
    denominator: int = typer.Option(0, "--denominator",
                                    help="Round rows to multiples of 1/D (rational instances); 0: floats."),
    verifier: str = typer.Option("bv", "--verifier", help="Verifier claimed optimal (bv)."),
    backend: str = typer.Option("highs", "--backend", help="LP backend: highs or cvxpy."),
    save_dir: str = typer.Option("counterexamples", "--save-dir", help="Where a counterexample is saved."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Full LP optimum = node LP optimum = exact BV block efficiency, BV lossless."""

    def body() -> dict[str, Any]:
        check.integer("--trials", trials, 1)
        check.integer("--vocab", vocab, 2)
        check.integer("--depth", depth, 1)
        check.seed("--seed", seed)
        check.number("--alpha", alpha, 0, low_open=True)
        check.integer("--denominator", denominator, 0, 2**31)
        check.choice("--backend", backend, BACKENDS)
        check.output_dir("--save-dir", save_dir)
        check.instance_shape("--vocab/--depth", vocab, depth)
        check.full_lp("--vocab/--depth", vocab, depth, 1)
        check.enumeration("--vocab/--depth", vocab, depth, 1)
        from ..proofs.bv_optimal import check_bv_optimal
        from ..verifiers.law import get_verifier

        try:
            get_verifier(verifier)
        except KeyError as err:
            raise BadInput(f"--verifier: {err.args[0]}") from None
        result = check_bv_optimal(
            trials, vocab, depth, seed=seed, alpha=alpha, denominator=denominator or None,
            verifier=verifier, backend=backend, save_dir=save_dir,
            progress=lambda it: progress(it, trials, f"bv-optimal V={vocab} L={depth}"))
        if not result["passed"]:
            failures = "; ".join(result["counterexample"]["failures"])
            name = result["counterexample"]["instance"]
            raise ClaimFailed(f"{verifier} is not LP-optimal/lossless on {name}: "
                              f"{failures} (instance saved to {result['saved']})", result)
        return result

    def render(r: dict[str, Any]) -> None:
        if r["passed"]:
            table("claim bv-optimal: HOLDS", ["trials", "V", "L", "certified", "max |LP - BV| (float)",
                                              "max TV (float64)"],
                  [[r["trials"], r["vocab"], r["depth"], f"{r['certified']}/{r['trials']}",
                    f"{r['max_float_gap_lp_vs_bv']:.3g}", f"{r['max_tv_float64']:.3g}"]])
        else:
            ce = r["counterexample"]
            table("counterexample", ["quantity", "value"], [
                ["instance", ce["instance"]], ["saved", r["saved"]],
                ["full LP optimum", ce["lp_full"]["value"]], ["node LP optimum", ce["lp_node"]["value"]],
                [f"{r['verifier']} block efficiency", ce["block_efficiency"]],
                ["TV (float64)", ce["tv_float64"]], ["failures", "; ".join(ce["failures"])]])

    run(body, as_json, render)
