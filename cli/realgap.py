"""`speclp realgap`: how far every verifier is from the best possible on a real pair.

Contexts are reached by target sampling on real prompts; per context and K, a bracket of the
K-path optimum and every verifier's E[tau + 1] (experiments.realgap). Results are JSONL in
--out (default ./speclp-results/realgap), resumable; every flag is checked (cli/validate.py)
before a model is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import typer

from ..decode.models import check_model_pair
from ..experiments.intervals import format_interval
from ..experiments.plots import plot_realgap, plot_renormalised
from ..experiments.realgap import (
    MAX_COARSE_PATHS,
    full_records,
    run_realgap,
    run_realgap_renormalised,
    summarize_realgap,
    summarize_renormalised,
)
from ..experiments.store import load_jsonl, select_records, slug
from ..verifiers.registry import verifier_names
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, new_commands, progress, run, table
from .trees import check_run_flags, load_run_pair

MODE_FULL, MODE_RENORMALISED = "full-vocabulary", "renormalised"  # = experiments.realgap's modes

REALGAP_OUT = Path("speclp-results/realgap")


commands = new_commands()


@commands.command()
def realgap(
    pair: str = typer.Option("qwen2.5-coder", "--pair", help="Pair name, TARGET,DRAFT, or one model."),
    prompts: str = option.prompts("humaneval:10"),
    instances: str = typer.Option(MODE_FULL, "--instances",
                                  help="full-vocabulary (default): bounds and verifier intervals on the "
                                       "real rows; renormalised: LABELLED truncated instances (top-M of "
                                       "the target per node, renormalised; neither bound)."),
    depth: str = typer.Option("1,2", "--depth", help="L (comma list)."),
    paths: str = option.paths("1,2,3,4", "K (comma list)."),
    top: str = typer.Option("8", "--top",
                            help="M. full-vocabulary: tokens kept per node in the coarsened upper-bound "
                                 "instance (top-M of p+q; L >= 2). renormalised: comma list, M <= 5."),
    samples: int = typer.Option(128, "--samples", help="Sampled draft trees per context (full-vocabulary)."),
    batch: int = typer.Option(128, "--batch",
                              help="Trees drawn per model pass (memory: distinct nodes x V rows)."),
    verifiers: str = typer.Option("", "--verifiers",
                                  help="Comma list (default: every verifier lossless under i.i.d. "
                                       "drafts but khisti, which needs a small vocabulary)."),
    score_dtype: str = typer.Option("fp64", "--score-dtype", help="fp64 or fp32: rows of the scored laws."),
    contexts_per_prompt: int = typer.Option(2, "--contexts-per-prompt"),
    every: int = option.every(8),
    temperature: float = typer.Option(1.0, "--temperature"),
    draft_temperature: float = typer.Option(None, "--draft-temperature"),
    out: Path = typer.Option(REALGAP_OUT, "--out",
                             help="Folder of the JSONL results and figures (default "
                                  "./speclp-results/realgap)."),
    seed: int = option.seed(0),
    threads: int = typer.Option(None, "--threads"),
    as_json: bool = option.json(),
) -> None:
    """How far is every verifier from the best possible on a real pair?

    Default (full-vocabulary rows, no truncation), per context and K: upper bound on the
    K-path optimum (L = 1: the optimum itself in closed form; L >= 2: certified optimum of
    the coarsened instance, top-M of p+q kept per node and the rest lumped into a remainder
    token accepted to depth L), each verifier's E[tau+1] with a 95% interval (exact law
    given sampled draft trees, averaged over trees; exact at L = 1 for bv, token, nss and
    nodeopt), and a certified lower bound: the exact value of a lossless verifier that uses
    only the kept rows (L = 1: the optimum itself). Exit 1 if a verifier's interval lies
    above the upper bound or the lower bound above the upper bound.
    """

    def body() -> dict[str, Any]:
        check.choice("--instances", instances, (MODE_FULL, MODE_RENORMALISED))
        depths = check.int_list("--depth", depth, 1, 16)
        ks = check.int_list("--paths", paths, 1, 64)
        check_run_flags(out, prompts, every, contexts_per_prompt, temperature, draft_temperature, seed,
                threads)
        if instances == MODE_RENORMALISED:
            return _realgap_renormalised(depths, ks)
        widths = check.int_list("--top", top, 2, 1024)
        if len(widths) != 1:
            raise BadInput(f"--top: full-vocabulary mode takes one M, got {top!r}")
        width = widths[0]
        check.integer("--samples", samples, 2, 10_000_000)
        check.integer("--batch", batch, 1, 100_000)
        check.choice("--score-dtype", score_dtype, ("fp64", "fp32"))
        for d in depths:
            if d > 1 and (width + 1) ** d > MAX_COARSE_PATHS:
                raise BadInput(f"--top: the coarsened LP at M = {width}, L = {d} has {(width + 1) ** d:,} "
                               f"paths (limit {MAX_COARSE_PATHS:,}); lower --top or --depth")
        names = _verifier_list(verifiers)
        check_model_pair(pair)
        loaded, prompt_list, draft_t, label = load_run_pair(pair, prompts, draft_temperature, threads)
        check.vocabulary_limits("--verifiers", names, ks, loaded.target.vocab_size)
        out_file = out / f"{slug(pair)}.jsonl"
        status = run_realgap(
            loaded.target.model, loaded.draft.model, prompt_list, depths, ks, out_file,
            samples=samples, batch=batch, width=width, verifiers=names,
            contexts_per_prompt=contexts_per_prompt, every=every, temperature=temperature,
            draft_temperature=draft_t, seed=seed, label=label,
            eos=set(loaded.target.eos_token_ids),
            score_dtype=torch.float64 if score_dtype == "fp64" else torch.float32,
            progress=lambda it: progress(it, len(prompt_list), "realgap"))
        # only this invocation's records (keys) are summarised and plotted
        records = full_records(select_records(load_jsonl(out_file), status.pop("keys")))
        figures = plot_realgap(records, out)
        result = {"pair": label, "instances": MODE_FULL, **status, "records": len(records),
                  "figures": [str(f) for f in figures],
                  "contexts": [_context_view(r) for r in records],
                  "summary": summarize_realgap(records)}
        if status["failures"]:
            raise ClaimFailed(f"{len(status['failures'])} bracket failure(s) (a verifier "
                              "interval or the lower bound above the upper bound) "
                              f"(records in {out_file})", result)
        return result

    def _realgap_renormalised(depths: list[int], ks: list[int]) -> dict[str, Any]:
        widths = check.int_list("--top", top, 2, 5)
        if max(depths) > 3 or max(ks) > 3:
            raise BadInput("--depth/--paths: supported sizes are M <= 5, L <= 3, K <= 3 (LP size)")
        check_model_pair(pair)
        loaded, prompt_list, draft_t, label = load_run_pair(pair, prompts, draft_temperature, threads)
        out_file = out / f"{slug(pair)}_renormalised.jsonl"
        status = run_realgap_renormalised(
            loaded.target.model, loaded.draft.model, prompt_list, widths, depths, ks, out_file,
            contexts_per_prompt, every, temperature, draft_t, seed, label,
            set(loaded.target.eos_token_ids),
            progress=lambda it: progress(it, len(prompt_list), "realgap"))
        records = select_records(load_jsonl(out_file), status.pop("keys"))
        figures = plot_renormalised(records, out)
        return {"pair": label, "instances": MODE_RENORMALISED, **status, "records": len(records),
                "figures": [str(f) for f in figures],
                "label": "TRUNCATED: top-M of the TARGET row per node, rows RENORMALISED over the M "
                         "tokens (neither an upper nor a lower bound on the real pair)",
                "summary": summarize_renormalised(records)}

    def render(r: dict[str, Any]) -> None:
        if r["instances"] == MODE_RENORMALISED:
            rows = []
            for s in r["summary"]:
                for name, gap in sorted(s["mean_gap"].items(), key=lambda kv: kv[1]):
                    rows.append([s["width"], s["depth"], s["paths"], s["contexts"],
                                 f"{s['certified']}/{s['contexts']}", f"{s['mean_optimum']:.4f}", name,
                                 f"{gap:.4f}", f"{s['max_gap'][name]:.4f}"])
            table(f"realgap: {r['pair']} ({r['label']})",
                  ["M", "L", "K", "ctx", "LP certified", "mean LP optimum", "verifier", "mean gap",
                   "max gap"], rows)
        else:
            rows = []
            for c in r["contexts"]:
                for k, block in c["by_paths"].items():
                    rows.append([c["prompt"], c["context"], c["depth"], k, block["lower"],
                                 block["upper"], block["best"], block["estimate"]])
            table(f"realgap: {r['pair']} (full-vocabulary rows; per context)",
                  ["prompt", "ctx", "L", "K", "certified lower", "certified upper",
                   "best verifier", "its estimate [95% betting CI]"], rows)
            rows = []
            for s in r["summary"]:
                for name, iv in sorted(s["verifiers"].items(), key=lambda kv: -kv[1]["estimate"]):
                    rows.append([s["temperature"], s["depth"], s["paths"], s["contexts"],
                                 format_interval(s["upper"]), name, *_summary_cells(iv, s["gaps"][name])])
            table("realgap summary: means over contexts [nominal 95% t interval on per-prompt means]; "
                  "'exact': the exact value in every context, 'ESTIMATE': sampled trees",
                  ["T", "L", "K", "ctx", "upper bound", "verifier", "E[tau+1]", "gap to upper"], rows)
            if r.get("failures"):
                for f in r["failures"]:
                    print("FAILURE:", f)
        print("figures:", ", ".join(r["figures"]))

    run(body, as_json, render)


def _summary_cells(value: dict[str, Any], gap: dict[str, Any]) -> list[str]:
    """E[tau+1] and its gap to the upper bound, labelled: exact in every context, or an
    ESTIMATE; an estimate without an interval over prompts (one prompt) is never printed as a
    bare number next to the certified bound (issue 28)."""
    if value.get("exact"):
        return [f"{format_interval(value)} exact", format_interval(gap)]
    if value.get("low") is None:
        return [f"ESTIMATE {value['estimate']:.3f} (no interval over 1 prompt; per-context "
                "intervals in the records)", "n/a (estimate)"]
    return [f"ESTIMATE {format_interval(value)}", format_interval(gap)]


def _verifier_list(text: str) -> list[str]:
    lossless = verifier_names(draft_sampling="iid")
    if not text.strip():  # khisti enumerates V^(K-1) companion tuples: small vocabularies only
        return [n for n in lossless if n not in VOCABULARY_LIMITED]
    names = [v.strip() for v in text.split(",") if v.strip()]
    for name in names:
        if name not in lossless:
            raise BadInput(f"--verifiers: {name!r} is not a verifier lossless under i.i.d. drafts; "
                           f"known: {', '.join(lossless)}")
    return names


VOCABULARY_LIMITED = ("khisti",)  # left out of the default list on real vocabularies



def _context_view(record: dict[str, Any]) -> dict[str, Any]:
    """Per-context statement: certified lower <= optimum <= certified upper, and the best
    verifier's estimate with its interval (an estimate: it may lie either side of lower)."""
    view: dict[str, Any] = {"prompt": record["prompt"], "context": record["context"],
                            "depth": record["depth"], "by_paths": {}}
    for k, block in record["by_paths"].items():
        upper, lower = block["upper"], block["lower"]
        best = block.get("best_estimate") or lower  # records made before the certified lower
        tag = ("closed form" if upper.get("closed_form")
               else "certified" if upper["certified"] else "NOT certified")
        exact = best.get("exact")
        view["by_paths"][k] = {
            "lower": (f"{lower['value']:.4f} ({lower['verifier']})" if "value" in lower
                      else "n/a (older record)"),
            "upper": f"{upper['value']:.4f} ({tag})",
            "best": best["verifier"],
            "estimate": (f"{best['mean']:.4f} (exact)" if exact else
                         f"{best['mean']:.4f} [{best['low']:.4f}, {best['high']:.4f}]"),
            "verifiers": {n: [iv["mean"], iv["low"], iv["high"]]
                          for n, iv in block["verifiers"].items()},
        }
    return view
