"""`speclp realgap`: how far every verifier is from the best possible on a real pair.

Contexts are reached by target sampling on real prompts; per context and K, a bracket of the
K-path optimum and every verifier's E[tau + 1] (experiments.realgap). Results are JSONL in
--out (default ./speclp-results/realgap), resumable; every flag is checked before a model is
loaded (the values by RealgapSpec's construction, --out and --threads here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..decode.models import check_model_pair
from ..experiments.intervals import format_interval
from ..experiments.plots import plot_realgap, plot_renormalised
from ..experiments.prompts import read_prompts
from ..experiments.realgap import (
    WIDTH_TARGETS,
    RealgapResult,
    RealgapStatus,
    realgap_full,
    realgap_renormalised,
)
from ..experiments.realgap_spec import MODE_FULL, MODE_RENORMALISED, RealgapSpec
from ..experiments.store import slug
from . import options as option
from . import validate as check
from .common import ClaimFailed, new_commands, reporting, run, table
from .trees import check_run_flags, load_run_pair

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
    """The full-vocabulary run (experiments.realgap.realgap_full) with the CLI's loader
    (--pair, then --verifiers checked against the vocabulary), progress and figures;
    ClaimFailed (exit 1) on a bracket failure."""
    def load() -> Any:
        pair = load_run_pair(spec.pair, prompt_list, threads)
        check.vocabulary_limits("--verifiers", list(spec.verifiers), list(spec.paths),
                                pair.target.vocab_size)
        return pair

    result = realgap_full(spec, prompt_list, out, load, _progress(prompt_list), plot_realgap)
    if result.status is RealgapStatus.FAILED:
        raise ClaimFailed(f"{len(result.failures)} bracket failure(s) (a verifier "
                          "interval or the lower bound above the upper bound) "
                          f"(records in {out / f'{slug(spec.pair)}.jsonl'})", result.to_json())
    return result


def run_renormalised(spec: RealgapSpec, prompt_list: list[dict[str, Any]], out: Path,
                     threads: int | None) -> RealgapResult:
    """The labelled renormalised run (experiments.realgap.realgap_renormalised) with the
    CLI's loader, progress and figures."""
    return realgap_renormalised(spec, prompt_list, out,
                                lambda: load_run_pair(spec.pair, prompt_list, threads),
                                _progress(prompt_list), plot_renormalised)


def _progress(prompt_list: list[dict[str, Any]]) -> Any:
    """Progress over the prompts on stderr (a bar on a terminal, plain lines elsewhere)."""
    return lambda it: reporting(it, len(prompt_list), "realgap", "prompts")


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
