"""`speclp solve` and `speclp check bv-optimal` (single-path core)."""

from __future__ import annotations

import time
from typing import Any

import typer

from . import BadInput, ClaimFailed, app, check_app, progress, require_choice, require_min, run, table

BACKENDS = ("highs", "cvxpy")


def _load(instance: str | None, builtin: str | None, depth: int | None) -> Any:
    from ..lp.instance import builtin_instance, load_instance

    if instance and builtin:
        raise BadInput("give either INSTANCE.json or --builtin, not both")
    if instance:
        if depth is not None:
            raise BadInput("--depth: only applies to --builtin instances (a file fixes its depth)")
        return load_instance(instance)
    return builtin_instance(builtin or "bv-toy", depth if depth is not None else 2)


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
        require_choice("--backend", backend, BACKENDS)
        from fractions import Fraction

        from ..lp.engine import optimum, program_optimum
        from ..lp.node import node_lp
        from ..verifiers.exact import exact_result

        inst = _load(instance, builtin, depth)
        full = optimum(inst, 1, method="full", backend=backend)
        start = time.perf_counter()
        node = program_optimum(node_lp(inst), backend, rational=inst.rational)
        node.seconds = time.perf_counter() - start  # build included
        engine = optimum(inst, 1)
        records = {"optimum": engine.to_json(), "lp_full": full.to_json(),
                   "lp_node": node.to_json()}
        verifiers, verifiers_exact = {}, {}
        model = inst.model(exact=inst.rational)
        for name in ("bv", "token"):
            res = exact_result(model, name)
            verifiers[name] = float(res.block_efficiency)
            verifiers_exact[name] = str(Fraction(res.block_efficiency)) if inst.rational else None
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
        from ..proofs.bv_optimal import check_bv_optimal
        from ..verifiers.law import get_verifier

        require_min("--trials", trials, 1)
        require_min("--vocab", vocab, 2)
        require_min("--depth", depth, 1)
        require_min("--alpha", alpha, 0, strict=True)
        require_choice("--backend", backend, BACKENDS)
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
