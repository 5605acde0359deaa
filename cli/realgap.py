"""`speclp realgap`: how far every verifier is from the best possible on a real pair.

Contexts are reached by target sampling on real prompts; per context and K, a bracket of the
K-path optimum and every verifier's E[tau + 1] (experiments.realgap). Results are JSONL in
--out (default ./speclp-results/realgap), resumable; every flag is checked before a model is
loaded (the values by RealgapSpec's construction, --out and --threads here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import typer

from ..decode.models import check_model_pair
from ..experiments.intervals import format_interval
from ..experiments.plots import plot_realgap, plot_renormalised
from ..experiments.prompts import read_prompts
from ..experiments.realgap import (
    WIDTH_TARGETS,
    RealgapResult,
    RealgapStatus,
    full_records,
    realgap_keys,
    renormalised_keys,
    run_realgap,
    run_realgap_renormalised,
    summarize_realgap,
    summarize_renormalised,
)
from ..experiments.realgap_spec import MODE_FULL, MODE_RENORMALISED, RealgapSpec
from ..experiments.store import load_jsonl, select_records, slug
from . import options as option
from . import validate as check
from .common import ClaimFailed, new_commands, reporting, run, table
from .trees import check_run_flags, load_run_pair, planned_dtype, recorded, run_identity

REALGAP_OUT = Path("speclp-results/realgap")


DEFAULTS = RealgapSpec()
HELP = {
    "instances": "full-vocabulary (default): bounds and verifier intervals on the real rows; "
                 "renormalised: LABELLED truncated instances (top-M of the target per node, "
                 "renormalised over them; neither bound).",
    "top": "M >= 1. full-vocabulary: the cap of the mass-driven kept tree of the bracket (L >= 2; a "
           "node of depth d keeps at most M 2^(L-1-d) tokens, docs/theory.md 13.6); a comma list "
           "is a schedule of caps tried in turn until the bracket is --width-target wide or "
           "--context-budget is spent. renormalised: comma list, M <= 5.",
    "width_target": "full-vocabulary: stop widening the bracket once it is this wide (default: "
                    "per L, " + ", ".join(f"L={d}: {w:g}" for d, w in WIDTH_TARGETS.items()) + ").",
    "context_budget": "full-vocabulary: seconds of bracket expansion per context and depth "
                      "(default: no limit; checked between trees).",
    "kept_limit": "full-vocabulary: at most this many kept tokens per mass-driven tree, whose "
                  "per-depth caps (--top c: c 2^(L-1-d)) are then not bounded by the padded "
                  "coarse layout ((W + 1)^L <= 40,000); default: bounded, no limit.",
    "verifiers": "Comma list (default: every verifier lossless under i.i.d. drafts but khisti, which "
                 "needs a small vocabulary).",
    "out": "Folder of the JSONL results and figures (default ./speclp-results/realgap).",
}

commands = new_commands()


@commands.command()
def realgap(
    ctx: typer.Context,
    pair: str = typer.Option(DEFAULTS.pair, "--pair", help="Pair name, TARGET,DRAFT, or one model."),
    prompts: str = option.prompts(DEFAULTS.prompts),
    prompt_seed: int = option.prompt_seed(DEFAULTS.prompt_seed),
    instances: str = typer.Option(DEFAULTS.instances, "--instances", help=HELP["instances"]),
    depth: str = typer.Option(",".join(map(str, DEFAULTS.depths)), "--depth", help="L (comma list)."),
    paths: str = option.paths(",".join(map(str, DEFAULTS.paths)), "K (comma list)."),
    top: str = typer.Option(",".join(map(str, DEFAULTS.widths)), "--top", help=HELP["top"]),
    samples: int = typer.Option(DEFAULTS.samples, "--samples",
                                help="Sampled draft trees per context (full-vocabulary)."),
    batch: int = typer.Option(DEFAULTS.batch, "--batch",
                              help="Trees drawn per model pass (memory: distinct nodes x V rows)."),
    width_target: float = typer.Option(DEFAULTS.width_target, "--width-target", help=HELP["width_target"]),
    context_budget: float = typer.Option(DEFAULTS.context_budget, "--context-budget", metavar="SECONDS",
                                         help=HELP["context_budget"]),
    kept_limit: int = typer.Option(DEFAULTS.kept_limit, "--kept-limit", help=HELP["kept_limit"]),
    verifiers: str = typer.Option("", "--verifiers", help=HELP["verifiers"]),
    score_dtype: str = typer.Option(DEFAULTS.score_dtype, "--score-dtype",
                                    help="fp64 or fp32: rows of the scored laws."),
    contexts_per_prompt: int = typer.Option(DEFAULTS.contexts_per_prompt, "--contexts-per-prompt"),
    every: int = option.every(DEFAULTS.every),
    temperature: float = typer.Option(DEFAULTS.temperature, "--temperature"),
    draft_temperature: float = typer.Option(DEFAULTS.draft_temperature, "--draft-temperature"),
    out: Path = typer.Option(REALGAP_OUT, "--out", help=HELP["out"]),
    seed: int = option.seed(DEFAULTS.seed),
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
    run(lambda: realgap_command(ctx.params), as_json, render)


def realgap_spec(flags: dict[str, Any]) -> tuple[RealgapSpec, list[dict[str, Any]]]:
    """(RealgapSpec, prompts) of the command line (flags: its parameters by name): the lists
    parsed, --threads and --out checked, the spec (its construction checks the rest:
    BadArgument naming the field, exit 2 naming its flag), the prompts read, and the pair
    last (naming a model imports torch); all before anything is loaded."""
    f = flags
    lists = {"depths": check.int_list("--depth", f["depth"]), "paths": check.int_list("--paths", f["paths"]),
             "widths": check.int_list("--top", f["top"])}
    full = {"samples": f["samples"], "batch": f["batch"], "score_dtype": f["score_dtype"],
            "verifiers": tuple(v.strip() for v in f["verifiers"].split(",") if v.strip())}
    check_run_flags(f["out"], f["threads"])
    spec = RealgapSpec(pair=f["pair"], prompts=f["prompts"], prompt_seed=f["prompt_seed"],
                       instances=f["instances"], **{k: tuple(v) for k, v in lists.items()},
                       **(full if f["instances"] == MODE_FULL else {}),
                       contexts_per_prompt=f["contexts_per_prompt"],
                       every=f["every"], temperature=f["temperature"],
                       draft_temperature=f["draft_temperature"], seed=f["seed"],
                       width_target=f["width_target"], context_budget=f["context_budget"],
                       kept_limit=f["kept_limit"])
    prompt_list = read_prompts(spec.prompts, seed=spec.prompt_seed)
    check_model_pair(spec.pair)
    return spec, prompt_list


def realgap_command(flags: dict[str, Any]) -> dict[str, Any]:
    """`speclp realgap`: the spec (checked), then the run of its mode into --out."""
    spec, prompt_list = realgap_spec(flags)
    if spec.instances == MODE_RENORMALISED:
        return run_renormalised(spec, prompt_list, flags["out"], flags["threads"]).to_json()
    return run_full(spec, prompt_list, flags["out"], flags["threads"]).to_json()


def run_full(spec: RealgapSpec, prompt_list: list[dict[str, Any]], out: Path,
             threads: int | None) -> RealgapResult:
    """The full-vocabulary run (experiments.realgap.run_realgap) and its report; the pair is
    loaded only when a record asked for is missing from --out (realgap_keys)."""
    label, draft_t = run_identity(spec.pair, spec.draft_temperature)
    out_file = out / f"{slug(spec.pair)}.jsonl"
    depths, ks = list(spec.depths), list(spec.paths)
    schedule = {"widths": list(spec.widths)} if len(spec.widths) > 1 else {}  # one M: the old keys
    args = dict(samples=spec.samples, batch=spec.batch, width=spec.widths[0], **schedule,
                width_target=spec.width_target, time_budget=spec.context_budget,
                kept_limit=spec.kept_limit, verifiers=list(spec.verifiers),
                contexts_per_prompt=spec.contexts_per_prompt,
                every=spec.every, temperature=spec.temperature, draft_temperature=draft_t,
                seed=spec.seed, label=label, model_dtype=planned_dtype(),
                score_dtype=torch.float64 if spec.score_dtype == "fp64" else torch.float32)
    pair = None
    if not recorded(out_file, realgap_keys(prompt_list, depths, ks, **args)):
        pair = load_run_pair(spec.pair, prompt_list, threads)
        check.vocabulary_limits("--verifiers", list(spec.verifiers), ks, pair.target.vocab_size)
    status = run_realgap(
        pair and pair.target.model, pair and pair.draft.model, prompt_list, depths, ks, out_file,
        eos=pair and set(pair.target.eos_token_ids),
        progress=lambda it: reporting(it, len(prompt_list), "realgap", "prompts"), **args)
    # only this invocation's records (keys) are summarised and plotted
    records = full_records(select_records(load_jsonl(out_file), status.pop("keys")))
    figures = plot_realgap(records, out)
    result = RealgapResult.from_json({
        "pair": label, "instances": MODE_FULL, **status, "records": len(records),
        "figures": [str(f) for f in figures], "contexts": [_context_view(r) for r in records],
        "summary": summarize_realgap(records)})
    if result.status is RealgapStatus.FAILED:
        raise ClaimFailed(f"{len(result.failures)} bracket failure(s) (a verifier "
                          "interval or the lower bound above the upper bound) "
                          f"(records in {out_file})", result.to_json())
    return result


def run_renormalised(spec: RealgapSpec, prompt_list: list[dict[str, Any]], out: Path,
                     threads: int | None) -> RealgapResult:
    """The labelled renormalised run (experiments.realgap.run_realgap_renormalised) and its
    report; the pair is loaded only when a record asked for is missing (renormalised_keys)."""
    label, draft_t = run_identity(spec.pair, spec.draft_temperature)
    out_file = out / f"{slug(spec.pair)}_renormalised.jsonl"
    widths, depths, ks = list(spec.widths), list(spec.depths), list(spec.paths)
    fixed = {"pair": label, "every": spec.every, "temperature": spec.temperature,
             "draft_temperature": draft_t, "seed": spec.seed, "dtype": planned_dtype()}
    keys = renormalised_keys(prompt_list, widths, depths, ks, spec.contexts_per_prompt, **fixed)
    pair = None if recorded(out_file, keys) else load_run_pair(spec.pair, prompt_list, threads)
    status = run_realgap_renormalised(
        pair and pair.target.model, pair and pair.draft.model, prompt_list, widths, depths, ks,
        out_file, spec.contexts_per_prompt, spec.every, spec.temperature, draft_t, spec.seed, label,
        pair and set(pair.target.eos_token_ids),
        progress=lambda it: reporting(it, len(prompt_list), "realgap", "prompts"),
        model_dtype=fixed["dtype"])
    records = select_records(load_jsonl(out_file), status.pop("keys"))
    figures = plot_renormalised(records, out)
    return RealgapResult.from_json({
        "pair": label, "instances": MODE_RENORMALISED, **status, "records": len(records),
        "figures": [str(f) for f in figures],
        "label": "TRUNCATED: top-M of the TARGET row per node, rows RENORMALISED over the M "
                 "tokens (neither an upper nor a lower bound on the real pair)",
        "summary": summarize_renormalised(records)})


def render(r: dict[str, Any]) -> None:
    """The tables of a realgap result (either mode), then its figures."""
    if r["instances"] == MODE_RENORMALISED:
        render_renormalised(r)
    else:
        render_full(r)
    print("figures:", ", ".join(r["figures"]))


def render_renormalised(r: dict[str, Any]) -> None:
    rows = []
    for s in r["summary"]:
        for name, gap in sorted(s["mean_gap"].items(), key=lambda kv: kv[1]):
            rows.append([s["width"], s["depth"], s["paths"], s["contexts"],
                         f"{s['certified']}/{s['contexts']}", f"{s['mean_optimum']:.4f}", name,
                         f"{gap:.4f}", f"{s['max_gap'][name]:.4f}"])
    table(f"realgap: {r['pair']} ({r['label']})",
          ["M", "L", "K", "ctx", "LP certified", "mean LP optimum", "verifier", "mean gap",
           "max gap"], rows)


def render_full(r: dict[str, Any]) -> None:
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
    table("realgap summary: means over contexts [95% Hall skew-corrected t interval on per-prompt "
          "means; coverage: benchmarks/results/bench/interval_coverage.md]; "
          "'exact': the exact value in every context, 'ESTIMATE': sampled trees",
          ["T", "L", "K", "ctx", "upper bound", "verifier", "E[tau+1]", "gap to upper"], rows)
    for f in r.get("failures") or []:
        print("FAILURE:", f)


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
