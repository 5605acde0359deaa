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
from typing import Any

import typer

from ..proofs.symbolic.prove_spec import CLAIMS_NO_SAMPLING, SINGLE_PATH_CLAIMS, ProveSpec, ProveStatus
from ..proofs.symbolic.ship import CERTIFICATES
from . import options as option
from . import validate as check
from .common import ClaimFailed, Stopped, counting, new_commands, refuse_given, run, table

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
    vocab: int = option.vocab(ProveSpec.vocab),
    depth: int = option.depth(ProveSpec.depth),
    paths: int = option.paths(ProveSpec.paths),
    draft_sampling: str = option.draft_sampling(ProveSpec.draft_sampling,
                                                "iid or without-replacement (l1-optimum)."),
    out: str = typer.Option(ProveSpec.out, "--out", help="Directory for the proof (JSON + Markdown)."),
    save_dir: str = option.save_dir(ProveSpec.save_dir, "Where a counterexample instance is saved."),
    seed: int = option.seed(ProveSpec.seed, "Seed of the witness search."),
    all_cells: bool = typer.Option(False, "--all-cells",
                                   help="On failure, go on and map every failing cell."),
    time_limit: float = option.time_limit(ProveSpec.time_limit, "Seconds; past it the proof "
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
        if claim in SINGLE_PATH_CLAIMS:
            refuse_given(ctx, ("paths",), f"{claim} is a single-path claim (K = 1); it takes no --paths")
        if claim in CLAIMS_NO_SAMPLING:
            refuse_given(ctx, ("draft_sampling",), f"{claim} is stated for i.i.d. drafts; only "
                         "l1-optimum takes --draft-sampling")
        spec = ProveSpec(claim, vocab, depth, paths, draft_sampling, out, save_dir, seed,
                         all_cells, time_limit)
        check.output_dir("--out", out)
        check.output_dir("--save-dir", save_dir)
        return run_prove(spec)

    run(body, as_json, _render)


def run_prove(spec: ProveSpec) -> dict[str, Any]:
    """The proof run (ProveSpec.run) as the command's JSON: Stopped (exit 4, nothing written)
    at the time limit; ClaimFailed (exit 1) when refuted (the counterexample instance saved)
    or incomplete."""
    with counting(PER_MILLE, _description(spec.claim, spec.vocab, spec.depth, spec.stem)) as count:
        bar = _ShareBar(count)
        outcome = spec.run(bar)
    result, summary = outcome.proof, outcome.to_json()
    if outcome.status is ProveStatus.STOPPED:
        raise Stopped(f"{spec.claim}: stopped at the {result.stopped} after {bar.cells} cells "
                      f"(about {bar.done:.0%} of the decision tree): neither proved nor "
                      "refuted; nothing written (a larger --time-limit goes on)", summary)
    ce = summary.get("counterexample")
    if ce is not None:
        raise ClaimFailed(f"{spec.claim} fails on cell {ce['cell']}: {ce['identity']} is "
                          f"{ce['difference_on_cell']} there, {ce['difference_at_point']} at the "
                          f"point {ce['point']} (instance saved to {summary['counterexample_saved']})",
                          summary)
    if outcome.status is ProveStatus.INCOMPLETE:
        raise ClaimFailed(f"{spec.claim}: NOT PROVED, {result.counts['unresolved']} unresolved "
                          "cells (no witness and no emptiness certificate found)", summary)
    return summary


PER_MILLE = 1000


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
