"""`speclp gap`: every verifier against the certified K-path optimum on one instance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..lp.engine import BACKENDS
from ..lp.engine import METHODS as ENGINE_METHODS
from ..verifiers.drafts import DRAFT_SAMPLING
from . import validate as check
from .common import BadInput, ClaimFailed, new_commands, run, stderr, table, working

METHODS = tuple(m for m in ENGINE_METHODS if m != "closed-form")  # closed-form: auto picks it
MAX_GAP_PATHS = 32  # `speclp gap --paths`: verifier laws hold [configurations, K, L+1, V] rows


commands = new_commands()


def _label(record: dict[str, Any]) -> str:
    """'certified' or 'NOT certified: reason' for an optimum record."""
    if record.get("certified"):
        return "certified"
    return f"NOT certified: {record.get('certificate') or record.get('reason') or 'unknown'}"


@commands.command()
def gap(
    instance: str = typer.Argument(..., help="Instance JSON file."),
    paths: int = typer.Option(2, "--paths", help="Number K of draft paths."),
    draft_sampling: str = typer.Option("iid", "--draft-sampling",
                                       help="iid or without-replacement."),
    method: str = typer.Option("auto", "--method",
                               help="Optimum engine: auto (= colgen), colgen or full (the "
                                    "enumerated LP, small instances only)."),
    backend: str = typer.Option("highs", "--backend",
                                help="LP backend of --method full: highs or cvxpy."),
    save_dir: str = typer.Option("counterexamples", "--save-dir",
                                 help="Where a failing instance is saved."),
    time_limit: float = typer.Option(600.0, "--time-limit",
                                     help="Seconds for the optimum (colgen or full LP); when hit: "
                                          "one line, exit 1."),
    max_enumerated: int = typer.Option(1_000_000, "--max-enumerated",
                                       help="Configurations one verifier's exact law may "
                                            "enumerate; above it the block efficiency is "
                                            "estimated from --samples sampled configurations."),
    samples: int = typer.Option(4096, "--samples",
                                help="Sampled draft configurations per estimated verifier."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampled configurations."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Every verifier's exact block efficiency E[tau + 1] against the K-path LP optimum.

    Exit 1 when a verifier exceeds the optimum (tolerance 1e-9 certified, 1e-7 not) or is
    lossy (TV > 1e-12): the numbers are printed and the instance saved; also exit 1, with one
    line, when the optimum is not found within --time-limit. A verifier whose exact law would
    enumerate more than --max-enumerated configurations gets an ESTIMATE (mean over sampled
    configurations, 95% confidence interval), labelled so.
    """

    def body() -> dict[str, Any]:
        check.integer("--paths", paths, 1)
        if paths > MAX_GAP_PATHS:
            raise BadInput(f"--paths: K = {paths} is over the limit of {MAX_GAP_PATHS} paths (every "
                           "verifier's law holds K paths per draft configuration); use fewer paths")
        check.choice("--draft-sampling", draft_sampling, DRAFT_SAMPLING)
        check.choice("--backend", backend, BACKENDS)
        check.choice("--method", method, METHODS)
        if backend != "highs" and method != "full":
            raise BadInput("--backend: cvxpy solves the enumerated LP only; add --method full")
        check.output_dir("--save-dir", save_dir)
        check.number("--time-limit", time_limit, 0, low_open=True)
        check.integer("--max-enumerated", max_enumerated, 1)
        check.integer("--samples", samples, 2, check.MAX_SAMPLES)
        check.seed("--seed", seed)
        inst = check.instance_file(instance, paths, draft_sampling, size_flag="--paths",
                                   method=method, exact_laws=False)
        from ..proofs.gap import OptimumNotFound
        from ..proofs.gap import gap as compute_gap

        with working(f"gap {inst.name} K={paths}"):
            try:
                result = compute_gap(inst, paths, draft_sampling=draft_sampling, backend=backend,
                                     method=method, time_limit=time_limit,
                                     max_enumerated=max_enumerated, samples=samples, seed=seed)
            except ValueError as err:
                raise BadInput(f"--paths: {err}") from None
            except OptimumNotFound as err:
                raise ClaimFailed(str(err), {"error": str(err), "optimum": err.record}) from None
        result["optimum"].pop("exact_value", None)
        if result["failures"]:
            saved = inst.save(Path(save_dir) / f"gap-K{paths}-{inst.name}.json")
            result["saved"] = str(saved)
            raise ClaimFailed(f"{'; '.join(result['failures'])} (instance saved to {saved})",
                              result)
        return result

    def render(r: dict[str, Any]) -> None:
        if "verifiers" not in r:  # the optimum was not found: the one line says why
            return
        inst, opt, class_row = r["instance"], r["optimum"], r["class_optimum"]
        rows = [[f"K-path optimum ({opt['method']})", f"{opt['value']:.12g}", opt["exact"] or "",
                 "", "", _label(opt)],
                ["class optimum (select + BV)", f"{class_row['value']:.12g}", class_row["exact"] or "",
                 "0", "1", "= K-path optimum (theorem; same solve)"]]
        for name, v in r["verifiers"].items():
            estimate = v.get("estimate")
            if estimate is not None:
                status = (f"ESTIMATE: 95% CI [{estimate['ci_low']:.6g}, {estimate['ci_high']:.6g}] "
                          f"from {estimate['samples']} sampled configurations; TV not checked")
            else:
                status = f"TV {v['tv']:.2g}"
            rows.append([name, f"{v['block_efficiency']:.12g}", v.get("exact") or "", f"{v['gap']:.3g}",
                         f"{v['ratio']:.6f}", status])
        title = (f"{inst['name']}  V={inst['vocab_size']} L={inst['depth']} K={r['paths']} "
                 f"({r['draft_sampling']})  E[tau + 1]")
        table(title, ["quantity", "value", "exact", "gap to optimum", "ratio", "status"], rows)
        if r["missing"]:
            stderr.print(f"verifiers not registered: {', '.join(r['missing'])}", markup=False)

    run(body, as_json, render)
