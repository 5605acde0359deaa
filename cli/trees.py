"""`speclp trees` (tree selection and target-row reuse); its run helpers serve `speclp realgap`.

Both work at contexts reached by target sampling on real prompts, with rows of the real
pair on a small complete prefix tree (decode.tree_rows); results are JSONL (resumable:
records are keyed on every setting that changes them, finished ones are skipped) plus
figures, in --out (default ./speclp-results/trees, ./speclp-results/realgap). `trees`
folders record their spec and take one writer at a time (experiments.store). Every flag is
checked before a model is loaded (the values by TreesSpec's construction). The run is a
experiments.trees.TreesSpec, whose defaults are the flags' defaults; --time-limit stops
starting new work once it has passed (finished records are kept). The record keys of both
commands follow from the flags and the prompt texts (run_identity, planned_dtype), so a
run whose every record is already in --out loads no model. Off a terminal, progress is
printed as plain lines on stderr (common.reporting).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
import typer

from ..deadline import Deadline
from ..decode.models import (
    ModelUnavailable,
    VocabularyMismatch,
    check_model_pair,
    default_device,
    default_dtype,
    load_pair,
    pair_label,
    pair_names,
)
from ..experiments.plots import plot_trees, trees_title
from ..experiments.prompts import read_prompts
from ..experiments.store import (
    KeyedRecords,
    ResultsFolderError,
    load_jsonl,
    open_folder,
    select_records,
    slug,
)
from ..experiments.trees import (
    TreesResult,
    TreesSpec,
    engine_keys,
    run_engine_reuse,
    run_trees,
    summarize_engine_reuse,
    summarize_trees,
    trees_keys,
)
from ..proofs.tree_selection import RULES
from ..verifiers.registry import verifier_names
from . import options as option
from . import validate as check
from .common import BadInput, counting_lines, new_commands, reporting, run, table

TREES_OUT = Path("speclp-results/trees")
SELF_DRAFT_TEMPERATURE = 1.5  # a single model drafts for itself at this temperature by default


commands = new_commands()


def check_run_flags(out: Path, threads: int | None) -> None:
    """The flags trees and realgap share that are not spec fields: --threads, --out."""
    if threads is not None:
        check.integer("--threads", threads, 1, 1024)
    check.output_dir("--out", out)


def run_identity(pair_name: str, draft_temperature: float | None) -> tuple[str, float | None]:
    """(label, draft temperature) of a run on the pair `pair_name`, from the name alone: a
    single model drafts for itself at SELF_DRAFT_TEMPERATURE unless --draft-temperature."""
    if pair_names(pair_name) is not None:
        return pair_label(pair_name), draft_temperature
    if draft_temperature is None:
        draft_temperature = SELF_DRAFT_TEMPERATURE
    return f"{pair_label(pair_name)}, draft temperature {draft_temperature}", draft_temperature


def planned_dtype() -> str:
    """The dtype of the weights load_run_pair loads (the default device's), as the record
    keys name it: known before anything is loaded."""
    return str(default_dtype(default_device()))


def recorded(out_file: Path, keys: list[str]) -> bool:
    """Every one of `keys` is already in out_file: the run has nothing to compute (and loads
    no model)."""
    done = KeyedRecords(out_file).done
    return all(k in done for k in keys)


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
RULE_HELP = {
    "draft": "top-N nodes by draft path probability",
    "rerank": "top-N with the target's first-token row in place of the draft's (+1 target pass)",
    "target-first": "draw the first token from the target (free, +1 target pass), then the "
                    "draft-ranked N-node tree below it",
    "target-first-gbv": "the same first token, then K x L' i.i.d. draft paths below it verified by "
                        "GBV (K x L' <= N, capped by exact enumeration)",
}
REFERENCE_HELP = {
    "oracle": "best FIXED N-node tree (top-N by target probability): a bound for draft and rerank "
              "only; the target-first rules can exceed it",
    "target-first-oracle": "first token from the target, then the best N-node tree below it: a "
                           "bound for target-first",
}
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
    read_prompts(spec.prompts)
    check_model_pair(spec.pair)
    try:
        folder = open_folder(flags["out"], "trees", spec.as_dict(), new_folder=flags["new_out"])
    except ResultsFolderError as err:
        raise BadInput(f"--out: {err}") from None
    with folder:
        return compute(folder.path, spec, flags["threads"], Deadline(flags["time_limit"])).to_json()


@dataclasses.dataclass
class TreesRun:
    """What a `trees` run works on: the spec with the draft temperature resolved, the label
    and weights' dtype of its keys, its prompts and record files, and the pair (None when
    every record asked for is already recorded: nothing is loaded)."""

    spec: TreesSpec
    label: str
    dtype: str
    prompts: list[dict[str, Any]]
    out_file: Path
    engine_file: Path
    pair: Any = None

    @property
    def eos(self) -> set[int] | None:
        return None if self.pair is None else set(self.pair.target.eos_token_ids)


def plan(out: Path, spec: TreesSpec, threads: int | None) -> TreesRun:
    """The run's keys from the flags and the prompts alone; the pair is loaded only when a
    record is missing."""
    label, draft_t = run_identity(spec.pair, spec.draft_temperature)
    spec = dataclasses.replace(spec, draft_temperature=draft_t)  # the rows' temperature
    work = TreesRun(spec, label, planned_dtype(), read_prompts(spec.prompts),
                    out / f"{slug(spec.pair)}.jsonl", out / f"{slug(spec.pair)}_engine.jsonl")
    missing = ((not spec.skip_trees
                and not recorded(work.out_file, trees_keys(spec, label, work.dtype, work.prompts)))
               or not recorded(work.engine_file, engine_keys(spec, label, work.dtype, work.prompts)))
    if missing:
        work.pair = load_run_pair(spec.pair, work.prompts, threads)
    return work


def compute(out: Path, spec: TreesSpec, threads: int | None, deadline: Deadline) -> TreesResult:
    """Plan (load the pair only if needed), run the engine part (if asked) and the trees
    part into `out` (a TreesResult)."""
    work = plan(out, spec, threads)
    spec, label = work.spec, work.label
    engine = engine_part(work, deadline) if spec.engine_budgets else {}
    stopped = [f"engine runs: {engine['stopped']}"] if engine.get("stopped") else []
    if spec.skip_trees:
        return TreesResult.from_json({
            "pair": label, "engine": engine, "summary": [], "contexts": 0, "figures": [], "file": None,
            "computed": 0, "reused": 0, "notes": [], "stopped": stopped or None})
    pair = work.pair
    status = run_trees(spec, pair and pair.target.model, pair and pair.draft.model, work.prompts,
                       work.out_file, label, work.eos,
                       lambda it, total: reporting(it, total, "trees", "contexts"), deadline,
                       dtype=work.dtype)
    if status["stopped"]:
        stopped.append(f"contexts: {status['stopped']} ({status['computed'] + status['reused']} "
                       f"of {status['contexts']} done; rerun the same command to continue)")
    # only this invocation's records (keys) are counted and plotted
    records = select_records(load_jsonl(work.out_file), status.pop("keys"))
    figures = plot_trees(records, out, title=trees_title(records))
    summary = summarize_trees(records)
    return TreesResult.from_json({
        "pair": label, **status, "out": str(out), "contexts": len(records),
        "figures": [str(f) for f in figures], "rules": RULE_HELP, "references": REFERENCE_HELP,
        "notes": notes(summary), "walltime": "MODELLED from measured component times",
        "engine": engine, "summary": summary, "stopped": stopped or None})


def engine_part(work: TreesRun, deadline: Deadline) -> dict[str, Any]:
    """The engine's reuse runs (experiments.trees.run_engine_reuse) and their summary."""
    spec = work.spec
    if work.pair is not None and work.pair.same_model:
        work.pair.draft_temperature = spec.draft_temperature
    runs = len(spec.engine_budgets) * len(spec.engine_verifiers) * len(work.prompts)
    with counting_lines(runs, "trees: engine runs", "runs") as advance:
        engine = run_engine_reuse(spec, work.pair, work.prompts, work.engine_file, work.label,
                                  advance, deadline, dtype=work.dtype)
    engine["summary"] = summarize_engine_reuse(select_records(load_jsonl(work.engine_file),
                                                              engine.pop("keys")))
    return engine


def notes(summary: list[dict[str, Any]]) -> list[str]:
    """The lines printed under the trees table: what the columns and rows mean, and what a
    reader would otherwise misread (the references, target-first-gbv's shape)."""
    out = ["tokens per round = E[accepted] + 1; rerank and the target-first rules need one extra "
           "target pass per round (reuse probability 0 for target-sampling verification of a "
           "deterministic tree). 'renorm.': exact on the top-M of (p+q)/2 per node, renormalised "
           "over the M tokens; 'real p, cand.': exact with the real probabilities on the candidate "
           "tree (a lower bound); '+- se': standard error of that mean over prompts (sd of the per-prompt "
           "means / sqrt(prompts)).",
           "references (not rules, they read the target everywhere): " + "; ".join(
               f"{k} = {v}" for k, v in REFERENCE_HELP.items()) + ". At budget N, target-first "
           "verifies as much as a fixed tree of up to V (N + 1) nodes (proofs/tree_selection.py)."]
    gbv = [s for s in summary if s["rule"] == "target-first-gbv" and s["shape"]]
    if gbv:
        shapes = ", ".join(f"N={s['budget']}: {s['shape'][0]}x{s['shape'][1]}" for s in gbv)
        out.append(f"target-first-gbv drafts K x L' paths below the first token ({shapes}). It is "
                   "not monotone in N: GBV is not monotone in K (it is not always >= BV, its K = 1 "
                   "case; docs/theory.md section 9.4), while the K-path optimum is; 'saturated' = the "
                   "exact-enumeration cap fixed the shape, so the value repeats.")
    return out


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
