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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..proofs.symbolic.export import strict_document
from ..proofs.symbolic.markdown import render
from ..proofs.symbolic.prove import ClaimInputError, proof_stem, prove, validate
from ..proofs.symbolic.ship import CERTIFICATES
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, Stopped, counting, new_commands, refuse_given, run, table

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
        spec = prove_spec(ctx, claim, vocab, depth, paths, draft_sampling, out, save_dir, seed,
                          all_cells, time_limit)
        return run_prove(spec)

    run(body, as_json, _render)


@dataclass(frozen=True)
class ProveSpec:
    """One `speclp prove` run as data (prove_spec builds it from checked flags): the claim and
    shape of speclp.proofs.symbolic.prove.prove, where the proof goes and how it runs."""

    claim: str
    vocab: int
    depth: int
    paths: int
    draft_sampling: str
    out: str
    save_dir: str
    seed: int
    all_cells: bool
    time_limit: float

    @property
    def stem(self) -> str:
        return proof_stem(self.claim, self.vocab, self.depth, self.paths, self.draft_sampling)


def prove_spec(ctx: typer.Context, claim: str, vocab: int, depth: int, paths: int,
               draft_sampling: str, out: str, save_dir: str, seed: int, all_cells: bool,
               time_limit: float) -> ProveSpec:
    """Flags -> ProveSpec, refusing (BadInput, exit 2) a flag the claim does not use, a
    claim / shape the proof does not define, and bad folders, seed or time limit."""
    if claim in SINGLE_PATH_CLAIMS:
        refuse_given(ctx, ("paths",), f"{claim} is a single-path claim (K = 1); it takes no --paths")
    if claim in CLAIMS_NO_SAMPLING:
        refuse_given(ctx, ("draft_sampling",), f"{claim} is stated for i.i.d. drafts; only "
                     "l1-optimum takes --draft-sampling")
    try:
        validate(claim, vocab, depth, paths, draft_sampling)
    except ClaimInputError as err:
        raise BadInput(str(err)) from None
    check.output_dir("--out", out)
    check.output_dir("--save-dir", save_dir)
    check.seed("--seed", seed)
    check.number("--time-limit", time_limit, 0, low_open=True)
    return ProveSpec(claim, vocab, depth, paths, draft_sampling, out, save_dir, seed, all_cells,
                     time_limit)


def run_prove(spec: ProveSpec) -> dict[str, Any]:
    """The proof run as the command's JSON: written (JSON + Markdown) when it ends; Stopped
    (exit 4, nothing written) at the time limit; ClaimFailed (exit 1) when refuted (the
    counterexample instance saved) or incomplete."""
    with counting(PER_MILLE, _description(spec.claim, spec.vocab, spec.depth, spec.stem)) as count:
        bar = _ShareBar(count)
        result = prove(spec.claim, spec.vocab, spec.depth, spec.paths, spec.draft_sampling,
                       seed=spec.seed, progress=bar, stop_at_first_failure=not spec.all_cells,
                       time_limit=spec.time_limit)
    summary = result.summary()
    if result.stopped.startswith("time limit"):
        summary.update({"stopped": result.stopped, "status": "stopped: time limit",
                        "proved": False})
        raise Stopped(f"{spec.claim}: stopped at the {result.stopped} after {bar.cells} cells "
                      f"(about {bar.done:.0%} of the decision tree): neither proved nor "
                      "refuted; nothing written (a larger --time-limit goes on)", summary)
    summary["status"] = ("refuted" if result.counterexample is not None
                         else "incomplete" if not result.complete else "proved")
    summary.update(_write_proof(result.document, spec))
    ce = result.counterexample
    if ce is not None:
        summary["counterexample"] = ce
        instance_path = _save_instance(ce["instance"], spec)
        summary["counterexample_saved"] = str(instance_path)
        raise ClaimFailed(f"{spec.claim} fails on cell {ce['cell']}: {ce['identity']} is "
                          f"{ce['difference_on_cell']} there, {ce['difference_at_point']} at the "
                          f"point {ce['point']} (instance saved to {instance_path})", summary)
    if not result.complete:
        raise ClaimFailed(f"{spec.claim}: NOT PROVED, {result.counts['unresolved']} unresolved "
                          "cells (no witness and no emptiness certificate found)", summary)
    return summary


def _write_proof(document: dict[str, Any], spec: ProveSpec) -> dict[str, str]:
    """The strict JSON (what the checker reads) and the Markdown of the full document, in
    --out; returns their paths under "json" and "markdown"."""
    directory = Path(spec.out)
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{spec.stem}.json"
    json_path.write_text(json.dumps(strict_document(document), indent=0, separators=(",", ":")))
    md_path = directory / f"{spec.stem}.md"
    md_path.write_text(render(document))
    return {"json": str(json_path), "markdown": str(md_path)}


def _save_instance(instance: dict[str, Any], spec: ProveSpec) -> Path:
    """The counterexample's instance, in --save-dir."""
    save = Path(spec.save_dir)
    save.mkdir(parents=True, exist_ok=True)
    instance_path = save / f"prove-{spec.stem}.json"
    instance_path.write_text(json.dumps(instance, indent=1))
    return instance_path


PER_MILLE = 1000
SINGLE_PATH_CLAIMS = ("bv-optimal", "token-optimal", "gbv-k1-is-bv")


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
