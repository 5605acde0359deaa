"""`speclp trees` (tree selection and target-row reuse); its run helpers serve `speclp realgap`.

Both work at contexts reached by target sampling on real prompts, with rows of the real
pair on a small complete prefix tree (decode.tree_rows); results are JSONL (resumable:
records are keyed on every setting that changes them, finished ones are skipped) plus
figures, in --out (default ./speclp-results/trees, ./speclp-results/realgap). `trees`
folders record their spec and take one writer at a time (experiments.store). Every flag is
checked before a model is loaded (the values by TreesSpec's construction). The run is a
experiments.trees.TreesSpec, whose defaults are the flags' defaults; --time-limit stops
starting new work once it has passed (finished records are kept). The record keys of both
commands follow from the flags and the prompt texts (experiments.realgap run_identity, planned_dtype), so a
run whose every record is already in --out loads no model. Off a terminal, progress is
printed as plain lines on stderr (common.reporting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import typer

from ..deadline import Deadline
from ..decode.models import (
    ModelUnavailable,
    VocabularyMismatch,
    check_model_pair,
    load_pair,
)
from ..experiments.plots import plot_trees, trees_title
from ..experiments.prompts import read_prompts
from ..experiments.store import ResultsFolderError, open_folder
from ..experiments.trees import REFERENCE_HELP, RULE_HELP, TreesSpec, trees_result
from ..proofs.tree_selection import RULES
from ..verifiers.registry import verifier_names
from . import options as option
from . import validate as check
from .common import BadInput, counting_lines, new_commands, reporting, run, table

TREES_OUT = Path("speclp-results/trees")


commands = new_commands()


def check_run_flags(out: Path, threads: int | None) -> None:
    """The flags trees and realgap share that are not spec fields: --threads, --out."""
    if threads is not None:
        check.integer("--threads", threads, 1, 1024)
    check.output_dir("--out", out)


def load_run_pair(pair_name: str, prompts: list[dict[str, Any]], threads: int | None) -> Any:
    """The pair on the CPU/GPU default device (decode.models.ModelPair); each prompt gets
    its "tokens" (the target's tokenizer)."""
    if threads:
        torch.set_num_threads(threads)
    try:
        pair = load_pair(pair_name)
    except (ModelUnavailable, VocabularyMismatch, OSError) as err:  # VocabularyMismatch: a ValueError
        raise BadInput(f"--pair: {err}") from None
    for p in prompts:
        p["tokens"] = pair.target.tokenizer.encode(p["text"])
    return pair


DEFAULTS = TreesSpec()
DEFAULT_TIME_LIMIT_S = 4 * 3600.0
HELP = {
    "pair": "Pair name, TARGET,DRAFT, or one model (draft = same model at --draft-temperature, "
            "default 1.5).",
    "budgets": "Comma list of budgets N (drafted nodes per round).",
    "rules": "Comma list of selection rules: " + "; ".join(f"{k}: {v}" for k, v in RULE_HELP.items())
             + ". Always shown next to them, as references (not rules): "
             + "; ".join(f"{k}: {v}" for k, v in REFERENCE_HELP.items()) + ".",
    "top": "M: candidate children per node (top-M of (p+q)/2).",
    "temperature": "Temperature of the target's rows (and of the draft's unless --draft-temperature).",
    "draft_temperature": "Temperature of the draft's rows (default --temperature; 1.5 when the draft "
                         "is the target model).",
    "engine_budgets": "Also decode with the engine at these budgets (mapped to K x L paths: 8=2x4, "
                      "16=2x8, 32=4x8, 64=8x8) and measure reuse.",
    "skip_trees": "Only the engine runs (with --engine-budgets).",
    "out": "Folder of the JSONL results and figures (default ./speclp-results/trees).",
    "time_limit": "Seconds: no new context (or engine run) starts after it; finished ones are kept, "
                  "rerun to continue (default 4 h).",
}


@commands.command()
def trees(
    ctx: typer.Context,
    pair: str = typer.Option(DEFAULTS.pair, "--pair", help=HELP["pair"]),
    prompts: str = option.prompts(DEFAULTS.prompts),
    budgets: str = typer.Option(",".join(map(str, DEFAULTS.budgets)), "--budgets", help=HELP["budgets"]),
    rules: str = typer.Option(",".join(DEFAULTS.rules), "--rules", help=HELP["rules"]),
    width: int = typer.Option(DEFAULTS.top, "--top", help=HELP["top"]),
    depth: int = typer.Option(DEFAULTS.depth, "--depth", help="L: depth of the candidate tree."),
    contexts_per_prompt: int = typer.Option(DEFAULTS.contexts_per_prompt, "--contexts-per-prompt",
                                            help="Contexts per prompt."),
    every: int = option.every(DEFAULTS.every),
    temperature: float = typer.Option(DEFAULTS.temperature, "--temperature", help=HELP["temperature"]),
    draft_temperature: float = typer.Option(DEFAULTS.draft_temperature, "--draft-temperature",
                                            help=HELP["draft_temperature"]),
    no_timing: bool = typer.Option(DEFAULTS.no_timing, "--no-timing", help="Skip the measured round times."),
    engine_budgets: str = typer.Option(",".join(map(str, DEFAULTS.engine_budgets)), "--engine-budgets",
                                       help=HELP["engine_budgets"]),
    engine_verifiers: str = typer.Option(",".join(DEFAULTS.engine_verifiers), "--engine-verifiers",
                                         help="Verifiers of the engine runs."),
    engine_tokens: int = typer.Option(DEFAULTS.engine_tokens, "--engine-tokens",
                                      help="Tokens generated per engine run."),
    skip_trees: bool = typer.Option(DEFAULTS.skip_trees, "--skip-trees", help=HELP["skip_trees"]),
    out: Path = typer.Option(TREES_OUT, "--out", help=HELP["out"]),
    new_out: bool = option.new_out("spec"),
    seed: int = option.seed(DEFAULTS.seed, "Seed of the context sampling and the engine."),
    time_limit: float = option.time_limit(DEFAULT_TIME_LIMIT_S, HELP["time_limit"]),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads."),
    as_json: bool = option.json(),
) -> None:
    """Expected tokens per round of tree-selection rules at real contexts, per budget.

    Tokens per round = E[accepted] + 1 (correction/bonus token). Values are exact on the
    instance of the top-M tokens of (p+q)/2 per node, RENORMALISED, and exact with the real
    (unrenormalised) probabilities on the candidate tree (a lower bound). Two references
    are shown next to the rules (see --rules). Walltime per token is MODELLED from measured
    draft / tree-pass / extra-pass times.
    """
    run(lambda: trees_command(ctx.params), as_json, render)


def trees_spec(flags: dict[str, Any]) -> TreesSpec:
    """The TreesSpec of the command line (flags: its parameters by name): the lists parsed,
    --threads, --out and --time-limit checked, then the spec (its construction checks the
    rest: BadArgument naming the field, exit 2 naming its flag); the prompts are read next,
    the pair checked last, before anything is loaded (trees_command)."""
    f = flags
    budgets = check.int_list("--budgets", f["budgets"])
    rules = _names("--rules", f["rules"], "rule", RULES)
    engine_budgets = check.int_list("--engine-budgets", f["engine_budgets"]) if f["engine_budgets"] else []
    engine_verifiers = _names("--engine-verifiers", f["engine_verifiers"], "verifier",
                              verifier_names(include_broken=True), required=bool(engine_budgets))
    check_run_flags(f["out"], f["threads"])
    check.number("--time-limit", f["time_limit"], 0, low_open=True)
    return TreesSpec(pair=f["pair"], prompts=f["prompts"], budgets=budgets, rules=rules, top=f["width"],
                     depth=f["depth"], contexts_per_prompt=f["contexts_per_prompt"], every=f["every"],
                     temperature=f["temperature"], draft_temperature=f["draft_temperature"],
                     no_timing=f["no_timing"], engine_tokens=f["engine_tokens"],
                     skip_trees=f["skip_trees"], seed=f["seed"], engine_budgets=engine_budgets,
                     engine_verifiers=engine_verifiers)


def _names(flag: str, text: str, what: str, known: Any, required: bool = True) -> list[str]:
    """A comma list of names, in order, without repeats; none at all (where some are
    required) is refused naming the text given."""
    names = list(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if required and not names:
        raise BadInput(f"{flag}: unknown {what} {text!r}; known: {', '.join(known)}")
    return names


def trees_command(flags: dict[str, Any]) -> dict[str, Any]:
    """`speclp trees`: the spec (checked), the pair's name (checked), the folder (opened
    through the store), then the run."""
    spec = trees_spec(flags)
    prompts = read_prompts(spec.prompts)
    check_model_pair(spec.pair)
    try:
        folder = open_folder(flags["out"], "trees", spec.as_dict(), new_folder=flags["new_out"])
    except ResultsFolderError as err:
        raise BadInput(f"--out: {err}") from None
    with folder:
        return trees_result(spec, prompts, folder.path,
                            lambda: load_run_pair(spec.pair, prompts, flags["threads"]),
                            Deadline(flags["time_limit"]), _contexts, _engine_runs, _plot).to_json()


def _contexts(items: Any, total: int) -> Any:
    return reporting(items, total, "trees", "contexts")


def _engine_runs(total: int) -> Any:
    return counting_lines(total, "trees: engine runs", "runs")


def _plot(records: list[dict[str, Any]], out: Path) -> list[Path]:
    return plot_trees(records, out, title=trees_title(records))


def _shown(value: float | None, scale: float, spec: str) -> str:
    return "" if value is None else format(scale * value, spec)


def render(r: dict[str, Any]) -> None:
    rows = []
    for s in r["summary"]:
        name = f"{s['rule']} (reference)" if s["reference"] else s["rule"]
        shape = "x".join(map(str, s["shape"])) + (" saturated" if s["saturated"] else "") \
            if s["shape"] else ""
        mean = "" if s["tokens_per_round"] is None else f"{s['tokens_per_round']:.4f}"
        if s["tokens_per_round_se"] is not None:
            mean += f" +- {s['tokens_per_round_se']:.4f}"
        rows.append([name, s["budget"], shape, s["contexts"], mean,
                     _shown(s["tokens_per_round_candidate_exact"], 1, ".4f"),
                     _shown(s["sequential_s_per_token"], 1000, ".1f"),
                     _shown(s["overlapped_s_per_token_modelled"], 1000, ".1f")])
    if r["summary"]:
        table(f"trees: {r['pair']} ({r['contexts']} contexts; {r['file']})",
              ["rule", "N", "K x L'", "ctx", "tokens/round (renorm.) +- se", "tokens/round (real p, cand.)",
               "ms/token seq (modelled)", "ms/token overlap (modelled)"], rows)
    if r["engine"]:
        table("engine (K x L paths, measured): reuse of p(.|next context) from the tree pass",
              ["verifier", "N", "K x L", "prompts", "row-steps", "reuse rate", "tokens/call",
               "ms/token (measured)"],
              [[e["verifier"], e["budget"], "x".join(map(str, e["shape"])), e["prompts"], e["row_steps"],
                "" if e["reuse_rate"] is None else f"{e['reuse_rate']:.3f}", f"{e['tokens_per_call']:.3f}",
                f"{e['ms_per_token']:.1f}"]
               for e in r["engine"]["summary"]])
    for line in r["notes"]:
        print(line)
    for line in r["stopped"] or []:
        print(f"stopped early: {line}")
    if r["figures"]:
        print("figures:", ", ".join(r["figures"]))
