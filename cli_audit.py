"""`speclp audit`: losslessness of a registered verifier over random instances."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from . import cli_validate as check
from .cli import BadInput, ClaimFailed, app, progress, run, table


@app.command()
def audit(
    verifier: str = typer.Option(..., "--verifier",
                                 help="Registered verifier name (a wrong name prints the list)."),
    paths: int = typer.Option(2, "--paths", help="Draft paths K."),
    vocab: int = typer.Option(3, "--vocab", help="Vocabulary size V."),
    depth: int = typer.Option(2, "--depth", help="Depth L."),
    trials: int = typer.Option(20, "--trials", help="Random instances."),
    ties: bool = typer.Option(False, "--ties", help="Instances with many equal ratios p/q."),
    seed: int = typer.Option(0, "--seed", help="Seed of the instance stream."),
    draft_sampling: str = typer.Option("iid", "--draft-sampling", help="iid or without-replacement."),
    exact: bool = typer.Option(False, "--exact", help="Exact rational arithmetic instead of float64."),
    save_dir: str = typer.Option("counterexamples", "--save-dir", help="Where a failing instance is saved."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Largest TV distance of the verifier's output (continued by target sampling) from the
    target law over random instances; exit 1 (worst instance saved) when TV > 1e-12."""

    def body() -> dict[str, Any]:
        check.choice("--draft-sampling", draft_sampling, ("iid", "without-replacement"))
        for flag, value, low in (("--paths", paths, 1), ("--vocab", vocab, 2), ("--depth", depth, 1),
                                 ("--trials", trials, 1)):
            check.integer(flag, value, low)
        check.seed("--seed", seed)
        check.output_dir("--save-dir", save_dir)
        check.instance_shape("--vocab/--depth", vocab, depth)
        if draft_sampling == "without-replacement" and paths > check.path_count(vocab, depth):
            raise BadInput(f"--paths: cannot draft {paths} distinct paths out of "
                           f"{check.path_count(vocab, depth):,} (V={vocab}, L={depth})")
        check.enumeration("--paths", vocab, depth, paths)
        from .proofs.audit import audit as run_audit
        from .verifiers.law import get_verifier

        try:
            spec = get_verifier(verifier)
        except KeyError as err:
            raise BadInput(f"--verifier: {err.args[0]}") from None
        try:
            result = run_audit(verifier, paths, vocab, depth, trials, ties, seed=seed,
                               draft_sampling=draft_sampling, exact=exact,
                               progress=lambda it: progress(it, trials, f"audit {verifier}"))
        except ValueError as err:
            raise BadInput(str(err)) from None
        result["lossless_claimed"] = spec.lossless and draft_sampling in spec.draft_sampling
        if not result["passed"]:
            path = Path(save_dir) / (f"audit-{verifier}-K{paths}-V{vocab}-L{depth}-"
                                     f"{'ties' if ties else 'dirichlet'}-s{seed}.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result["worst_instance"], indent=1))
            result["saved"] = str(path)
            raise ClaimFailed(f"{verifier} is not lossless: max TV {result['max_tv']:.3g} > "
                              f"{result['tolerance']:g} (worst instance saved to {path})", result)
        return result

    def render(r: dict[str, Any]) -> None:
        verdict = "lossless on every trial" if r["passed"] else "LOSSY"
        table(f"audit {r['verifier']}: {verdict}",
              ["K", "V", "L", "trials", "instances", "draft sampling", "max TV", "mean TV",
               "mean E[tau+1]"],
              [[r["paths"], r["vocab"], r["depth"], r["trials"], "ties" if r["ties"] else "Dirichlet",
                r["draft_sampling"], f"{r['max_tv']:.3g}", f"{r['mean_tv']:.3g}",
                f"{r['mean_block_efficiency']:.6f}"]])

    run(body, as_json, render)
