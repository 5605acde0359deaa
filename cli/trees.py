"""`speclp trees` (tree selection and target-row reuse); its run helpers serve `speclp realgap`.

Both work at contexts reached by target sampling on real prompts, with rows of the real
pair on a small complete prefix tree (decode.tree_rows); results are JSONL (resumable:
records are keyed on every setting that changes them, finished ones are skipped) plus
figures, in --out (default ./speclp-results/trees, ./speclp-results/realgap). `trees`
folders record their spec and take one writer at a time (experiments.store). Every flag is
checked (cli/validate.py) before a model is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..experiments.store import slug
from . import validate as check
from .common import BadInput, new_commands, progress, run, table

TREES_OUT = Path("speclp-results/trees")
MAX_TREE_NODES = 2000  # candidate tree nodes (rows of V probabilities per model, per context)
MAX_TREE_LEVEL = 1024  # nodes of the widest level (one batched forward)


commands = new_commands()



def check_run_flags(out: Path, prompts: str, every: int, contexts_per_prompt: int, temperature: float,
            draft_temperature: float | None, seed: int, threads: int | None) -> None:
    """The flags trees and realgap share (cheap checks; the pair is checked last, by the
    caller, since naming the built-in models imports torch)."""
    check.integer("--contexts-per-prompt", contexts_per_prompt, 1, 10_000)
    check.integer("--every", every, 1, 100_000)
    check.number("--temperature", temperature, 0)
    if draft_temperature is not None:
        check.number("--draft-temperature", draft_temperature, 0)
    check.seed("--seed", seed)
    if threads is not None:
        check.integer("--threads", threads, 1, 1024)
    check.output_dir("--out", out)
    check.prompts("--prompts", prompts)



def load_run_pair(pair_name: str, prompt_spec: str, draft_temperature: float | None,
          threads: int | None) -> tuple[Any, list[dict[str, Any]], float | None, str]:
    """Prompts (checked first: cheap), then the pair on the CPU/GPU default device."""
    import torch

    from ..decode.models import ModelUnavailable, VocabularyMismatch, load_pair

    prompts = check.prompts("--prompts", prompt_spec)
    if threads:
        torch.set_num_threads(threads)
    try:
        pair = load_pair(pair_name)
    except (ModelUnavailable, VocabularyMismatch, OSError, ValueError) as err:
        raise BadInput(f"--pair: {err}") from None
    if pair.same_model and draft_temperature is None:
        draft_temperature = 1.5
    label = pair.label + (f", draft temperature {draft_temperature}" if pair.same_model else "")
    for p in prompts:
        p["tokens"] = pair.target.tokenizer.encode(p["text"])
    return pair, prompts, draft_temperature, label


@commands.command()
def trees(
    pair: str = typer.Option("qwen2.5-coder", "--pair",
                             help="Pair name, TARGET,DRAFT, or one model (draft = same model at "
                                  "--draft-temperature, default 1.5)."),
    prompts: str = typer.Option("humaneval:10", "--prompts", help="humaneval:N or file:PATH."),
    budgets: str = typer.Option("2,4,8,16,32,64", "--budgets", help="Comma list of budgets N."),
    rules: str = typer.Option("draft,rerank,target-first,target-first-gbv", "--rules",
                              help="Comma list of selection rules."),
    width: int = typer.Option(4, "--top", help="M: candidate children per node (top-M of (p+q)/2)."),
    depth: int = typer.Option(4, "--depth", help="L: depth of the candidate tree."),
    contexts_per_prompt: int = typer.Option(2, "--contexts-per-prompt", help="Contexts per prompt."),
    every: int = typer.Option(8, "--every", help="Target-sampled tokens between contexts."),
    temperature: float = typer.Option(1.0, "--temperature"),
    draft_temperature: float = typer.Option(None, "--draft-temperature"),
    no_timing: bool = typer.Option(False, "--no-timing", help="Skip the measured round times."),
    engine_budgets: str = typer.Option("", "--engine-budgets",
                                       help="Also decode with the engine at these budgets (mapped to "
                                            "K x L paths: 8=2x4, 16=2x8, 32=4x8, 64=8x8) and measure reuse."),
    engine_verifiers: str = typer.Option("bv,gbv", "--engine-verifiers"),
    engine_tokens: int = typer.Option(48, "--engine-tokens", help="Tokens generated per engine run."),
    skip_trees: bool = typer.Option(False, "--skip-trees",
                                    help="Only the engine runs (with --engine-budgets)."),
    out: Path = typer.Option(TREES_OUT, "--out",
                             help="Folder of the JSONL results and figures (default "
                                  "./speclp-results/trees)."),
    new_out: bool = typer.Option(False, "--new-out",
                                 help="If --out holds another spec, use a new folder next to it "
                                      "(OUT-2, ...) instead of refusing."),
    seed: int = typer.Option(0, "--seed"),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Expected tokens per round of tree-selection rules at real contexts, per budget.

    Tokens per round = E[accepted] + 1 (correction/bonus token). Values are exact on the
    instance of the top-M tokens of (p+q)/2 per node, RENORMALISED, and exact with the real
    (unrenormalised) probabilities on the candidate tree (a lower bound). Walltime per token
    is MODELLED from measured draft / tree-pass / extra-pass times.
    """

    def body() -> dict[str, Any]:
        check_run_flags(out, prompts, every, contexts_per_prompt, temperature, draft_temperature, seed,
                threads)
        check.integer("--engine-tokens", engine_tokens, 1, 100_000)
        from ..experiments.store import ResultsFolderError, open_folder
        from ..experiments.trees import ENGINE_SHAPES
        from ..proofs.tree_selection import RULES, node_count
        from ..verifiers.registry import verifier_names

        budget_list = check.int_list("--budgets", budgets)
        rule_list = tuple(dict.fromkeys(r.strip() for r in rules.split(",") if r.strip()))
        bad = [r for r in rule_list if r not in RULES]
        if bad or not rule_list:
            raise BadInput(f"--rules: unknown rule {bad[0] if bad else rules!r}; known: {', '.join(RULES)}")
        check.integer("--top", width, 2, 64)
        check.integer("--depth", depth, 2, 16)
        nodes = node_count(width, depth)
        if nodes > MAX_TREE_NODES or width**depth > MAX_TREE_LEVEL:
            raise BadInput(f"--top/--depth: the M={width}, L={depth} candidate tree has {nodes:,} "
                           f"nodes (limits {MAX_TREE_NODES:,} nodes, {MAX_TREE_LEVEL:,} at the "
                           "deepest level); use a smaller --top or --depth")
        if max(budget_list) > nodes:
            raise BadInput(f"--budgets: {max(budget_list)} exceeds the {nodes} nodes of "
                           f"the M={width}, L={depth} candidate tree; raise --top or --depth")
        engine_list = check.int_list("--engine-budgets", engine_budgets) if engine_budgets else []
        bad_engine = [n for n in engine_list if n not in ENGINE_SHAPES]
        if bad_engine:
            raise BadInput(f"--engine-budgets: {bad_engine[0]} has no K x L shape; known: "
                           f"{', '.join(map(str, ENGINE_SHAPES))}")
        engine_names = list(dict.fromkeys(v.strip() for v in engine_verifiers.split(",") if v.strip()))
        known = verifier_names(include_broken=True)
        if engine_list and (not engine_names or any(v not in known for v in engine_names)):
            unknown = next((v for v in engine_names if v not in known), engine_verifiers)
            raise BadInput(f"--engine-verifiers: unknown verifier {unknown!r}; known: {', '.join(known)}")
        if skip_trees and not engine_list:
            raise BadInput("--skip-trees: needs --engine-budgets (otherwise nothing is computed)")
        check.model_pair("--pair", pair)
        spec = {"pair": pair, "prompts": prompts, "budgets": budget_list, "rules": list(rule_list),
                "top": width, "depth": depth, "contexts_per_prompt": contexts_per_prompt,
                "every": every, "temperature": temperature, "draft_temperature": draft_temperature,
                "no_timing": no_timing, "engine_budgets": engine_list,
                "engine_verifiers": engine_names if engine_list else [],
                "engine_tokens": engine_tokens if engine_list else None,
                "skip_trees": skip_trees, "seed": seed}
        try:
            folder = open_folder(out, "trees", spec, new_folder=new_out)
        except ResultsFolderError as err:
            raise BadInput(f"--out: {err}") from None
        with folder:
            return compute(folder.path, spec)

    def compute(out: Path, spec: dict[str, Any]) -> dict[str, Any]:
        from ..experiments.plots import plot_trees
        from ..experiments.store import load_jsonl, select_records
        from ..experiments.trees import (
            run_engine_reuse,
            run_trees,
            summarize_engine_reuse,
            summarize_trees,
        )

        budget_list, rule_list, engine_list = spec["budgets"], tuple(spec["rules"]), spec["engine_budgets"]
        loaded, prompt_list, draft_t, label = load_run_pair(pair, prompts, draft_temperature, threads)
        out_file = out / f"{slug(pair)}.jsonl"
        engine: dict[str, Any] = {}
        if engine_list:
            engine_file = out / f"{slug(pair)}_engine.jsonl"
            if loaded.same_model:
                loaded.draft_temperature = draft_t
            engine = run_engine_reuse(loaded, prompt_list, engine_list, spec["engine_verifiers"],
                                      engine_file, engine_tokens, temperature, seed, label)
            engine["summary"] = summarize_engine_reuse(select_records(load_jsonl(engine_file),
                                                                      engine.pop("keys")))
        if skip_trees:
            return {"pair": label, "engine": engine, "summary": [], "contexts": 0, "figures": [],
                    "file": None, "computed": 0, "reused": 0, "convention": "", "rows": ""}
        status = run_trees(loaded.target.model, loaded.draft.model, prompt_list, budget_list, rule_list,
                           out_file, width, depth, contexts_per_prompt, every, temperature, draft_t,
                           seed, label, set(loaded.target.eos_token_ids), not no_timing,
                           progress=lambda it: progress(it, len(prompt_list), "trees"))
        # only this invocation's records (keys) are counted and plotted
        records = select_records(load_jsonl(out_file), status.pop("keys"))
        figures = plot_trees(records, out, title=f"{label}: {len(records)} contexts, M={width}, L={depth}")
        return {"pair": label, **status, "out": str(out), "contexts": len(records),
                "figures": [str(f) for f in figures],
                "convention": "tokens per round = E[accepted] + 1; rerank/target-first rules need one "
                              "extra target pass per round (reuse probability 0 for target-sampling "
                              "verification of a deterministic tree)",
                "rows": "top-M of (p+q)/2 per node; 'tokens_per_round' on rows renormalised over the M "
                        "tokens, 'candidate_exact' with the real probabilities (lower bound)",
                "walltime": "MODELLED from measured component times",
                "engine": engine, "summary": summarize_trees(records)}

    def render(r: dict[str, Any]) -> None:
        rows = [[s["rule"], s["budget"], s["contexts"], f"{s['tokens_per_round']:.4f}",
                 "" if s["tokens_per_round_candidate_exact"] is None
                 else f"{s['tokens_per_round_candidate_exact']:.4f}",
                 "" if s["sequential_s_per_token"] is None else f"{1000 * s['sequential_s_per_token']:.1f}",
                 "" if s["overlapped_s_per_token_modelled"] is None
                 else f"{1000 * s['overlapped_s_per_token_modelled']:.1f}"]
                for s in r["summary"]]
        table(f"trees: {r['pair']} ({r['contexts']} contexts; {r['file']})",
              ["rule", "N", "ctx", "tokens/round (renorm.)", "tokens/round (real p, cand.)",
               "ms/token seq (modelled)", "ms/token overlap (modelled)"], rows)
        if r["engine"]:
            table("engine (K x L paths, measured): reuse of p(.|next context) from the tree pass",
                  ["verifier", "N", "K x L", "prompts", "row-steps", "reuse rate", "tokens/call",
                   "ms/token (measured)"],
                  [[e["verifier"], e["budget"], "x".join(map(str, e["shape"])), e["prompts"], e["row_steps"],
                    f"{e['reuse_rate']:.3f}", f"{e['tokens_per_call']:.3f}", f"{e['ms_per_token']:.1f}"]
                   for e in r["engine"]["summary"]])
        print(r["rows"])
        print(r["convention"])
        print("figures:", ", ".join(r["figures"]))

    run(body, as_json, render)
