"""`speclp prove CLAIM --vocab V --depth L [--paths K] [--time-limit S]`: a claim proved for
every instance of a shape (speclp.proofs.symbolic), exported as JSON + Markdown.

Exit 0 when the claim is proved on every cell ("status": "proved"); 1 when it fails on a
cell ("refuted": a concrete rational counterexample is printed and saved) or the proof is
incomplete ("incomplete": unresolved cells); 4 when --time-limit stopped it ("stopped: time
limit": neither a proof nor a refutation; one line saying how far it got, nothing written);
2 on bad input, including a flag the claim does not use (--paths for a single-path claim,
--draft-sampling for any claim but l1-optimum). The JSON payload always has "proved" and
"status".

The JSON file written is strict (export.strict_document: only what the checker reads); the
Markdown next to it is rendered from the full document.

Progress: the share of the decision tree finished (each split divides its cell's share
among its children), an estimate of the fraction done that reaches 100% at the end; when
the shape has a shipped proof, its cell count and time are shown as the expected total.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from ..proofs.symbolic.export import strict_document
from ..proofs.symbolic.markdown import render
from ..proofs.symbolic.prove import ClaimInputError, proof_stem, prove, validate
from ..proofs.symbolic.ship import CERTIFICATES
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, Stopped, counting, new_commands, run, table

DEFAULT_TIME_LIMIT_S = 3600.0

CLAIM_HELP = ("bv-optimal, token-optimal, l1-optimum, gbv-k1-is-bv or gbv-l1-closed-form")


def _render(r: dict[str, Any]) -> None:
    cells = r["cells"]
    rows = [["claim", r["claim"]], ["shape", f"V={r['vocab']} L={r['depth']} K={r['paths']} "
                                             f"{r['draft_sampling']}"],
            ["result", "PROVED" if r["proved"] else f"NOT PROVED ({r.get('status', '')})"],
            ["kept cells", cells["kept"]], ["empty cells (certificate)", cells["empty"]],
            ["outside the domain", cells["excluded"]], ["failing cells", cells["failing"]],
            ["unresolved cells", cells["unresolved"]], ["seconds", r["seconds"]]]
    for key in ("json", "markdown", "counterexample_saved"):
        if r.get(key):
            rows.append([key, r[key]])
    table(f"speclp prove {r['claim']}", ["quantity", "value"], rows)
    ce = r.get("counterexample")
    if ce:
        ce_rows = [["cell", ce["cell"]], ["identity", ce["identity"]],
                   ["difference on the cell", ce["difference_on_cell"]],
                   ["conditions", "; ".join(ce["conditions"])],
                   ["eliminated", ", ".join(f"{k} = {v}" for k, v in ce["eliminated"].items())],
                   ["point", ", ".join(f"{k}={v}" for k, v in ce["point"].items())],
                   ["difference at the point", ce["difference_at_point"]]]
        for key, value in ce.get("engine", {}).items():
            ce_rows.append([f"engine: {key}", value])
        table("counterexample", ["quantity", "value"], ce_rows)


commands = new_commands()


@commands.command("prove")
def prove_cmd(
    ctx: typer.Context,
    claim: str = typer.Argument(..., help=f"Claim: {CLAIM_HELP}."),
    vocab: int = option.vocab(2),
    depth: int = option.depth(1),
    paths: int = option.paths(1),
    draft_sampling: str = option.draft_sampling("iid", "iid or without-replacement (l1-optimum)."),
    out: str = typer.Option("symbolic-proofs", "--out",
                            help="Directory for the proof (JSON + Markdown)."),
    save_dir: str = option.save_dir(help="Where a counterexample instance is saved."),
    seed: int = option.seed(0, "Seed of the witness search."),
    all_cells: bool = typer.Option(False, "--all-cells",
                                   help="On failure, go on and map every failing cell."),
    time_limit: float = option.time_limit(DEFAULT_TIME_LIMIT_S, "Seconds; past it the proof "
                                                                "stops (exit 4, nothing written)."),
    as_json: bool = option.json(),
) -> None:
    """Prove a claim for EVERY instance of a shape (symbolic cells).

    Cells by sign conditions, a primal and a dual (or the law identities) on every cell,
    exported for the standalone checker (proofs/certificates/check.py, which re-derives the
    rows, the LP and the laws). Exit 0: proved; 1: fails on a cell (counterexample saved)
    or incomplete; 4: stopped by --time-limit (nothing written); 2: bad input, or a flag the
    claim does not use. The progress bar shows the share of the cell tree done, and the
    shipped proof's total if any."""

    def body() -> dict[str, Any]:
        given = {name for name in ("paths", "draft_sampling")  # by name: typer may bring its own click
                 if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") not in ("DEFAULT",
                                                                                      "DEFAULT_MAP")}
        unused = unused_flag(claim, given)
        if unused:
            raise BadInput(unused)
        try:
            validate(claim, vocab, depth, paths, draft_sampling)
        except ClaimInputError as err:
            raise BadInput(str(err)) from None
        check.output_dir("--out", out)
        check.output_dir("--save-dir", save_dir)
        check.seed("--seed", seed)
        check.number("--time-limit", time_limit, 0, low_open=True)
        stem = proof_stem(claim, vocab, depth, paths, draft_sampling)
        with counting(PER_MILLE, _description(claim, vocab, depth, stem)) as count:
            bar = _ShareBar(count)
            result = prove(claim, vocab, depth, paths, draft_sampling, seed=seed,
                           progress=bar, stop_at_first_failure=not all_cells,
                           time_limit=time_limit)
        summary = result.summary()
        if result.stopped.startswith("time limit"):
            summary.update({"stopped": result.stopped, "status": "stopped: time limit",
                            "proved": False})
            raise Stopped(f"{claim}: stopped at the {result.stopped} after {bar.cells} cells "
                          f"(about {bar.done:.0%} of the decision tree): neither proved nor "
                          "refuted; nothing written (a larger --time-limit goes on)", summary)
        summary["status"] = ("refuted" if result.counterexample is not None
                             else "incomplete" if not result.complete else "proved")
        directory = Path(out)
        directory.mkdir(parents=True, exist_ok=True)
        json_path = directory / f"{stem}.json"
        json_path.write_text(json.dumps(strict_document(result.document), indent=0,
                                        separators=(",", ":")))
        md_path = directory / f"{stem}.md"
        md_path.write_text(render(result.document))
        summary.update({"json": str(json_path), "markdown": str(md_path)})
        if result.counterexample is not None:
            summary["counterexample"] = result.counterexample
            save = Path(save_dir)
            save.mkdir(parents=True, exist_ok=True)
            instance_path = save / f"prove-{stem}.json"
            instance_path.write_text(json.dumps(result.counterexample["instance"], indent=1))
            summary["counterexample_saved"] = str(instance_path)
            ce = result.counterexample
            raise ClaimFailed(f"{claim} fails on cell {ce['cell']}: {ce['identity']} is "
                              f"{ce['difference_on_cell']} there, "
                              f"{ce['difference_at_point']} at the point "
                              f"{ce['point']} (instance saved to {instance_path})", summary)
        if not result.complete:
            raise ClaimFailed(f"{claim}: NOT PROVED, {result.counts['unresolved']} unresolved "
                              "cells (no witness and no emptiness certificate found)", summary)
        return summary

    run(body, as_json, _render)


PER_MILLE = 1000
SINGLE_PATH_CLAIMS = ("bv-optimal", "token-optimal", "gbv-k1-is-bv")


def unused_flag(claim: str, given: set[str]) -> str | None:
    """The error line for a flag given on the command line that the claim does not use:
    --paths for a single-path claim, --draft-sampling for any claim but l1-optimum."""
    if "paths" in given and claim in SINGLE_PATH_CLAIMS:
        return f"--paths: {claim} is a single-path claim (K = 1); it takes no --paths"
    if "draft_sampling" in given and claim in CLAIMS_NO_SAMPLING:
        return (f"--draft-sampling: {claim} is stated for i.i.d. drafts; only l1-optimum "
                "takes --draft-sampling")
    return None


CLAIMS_NO_SAMPLING = ("bv-optimal", "token-optimal", "gbv-k1-is-bv", "gbv-l1-closed-form")


class _ShareBar:
    """Turns the explorer's shares of the tree into whole per-mille steps of a bar."""

    def __init__(self, count) -> None:
        self.count, self.done, self.cells, self.shown = count, 0.0, 0, 0

    def __call__(self, share: float) -> None:
        self.done += share
        self.cells += 1
        target = min(PER_MILLE, int(self.done * PER_MILLE + 1e-9))
        while self.shown < target:
            self.count()
            self.shown += 1


def _description(claim: str, vocab: int, depth: int, stem: str) -> str:
    """The bar's label; with the shipped proof's cell count and time when there is one."""
    text = f"prove {claim} V={vocab} L={depth} (share of the cell tree)"
    try:
        entry = json.loads((CERTIFICATES / "index.json").read_text()).get(stem)
    except (OSError, ValueError):
        entry = None
    if entry:
        cells = sum(entry["cells"].get(k, 0) for k in ("kept", "empty", "excluded", "failing"))
        text += f"; shipped proof: {cells} cells in {entry['seconds']} s"
    return text
