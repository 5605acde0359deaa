"""`speclp trees` (tree selection and target-row reuse) and `speclp realgap` (real-pair gaps).

Both work at contexts reached by target sampling on real prompts, with rows of the real
pair on a small complete prefix tree (verifiers.real_rows); results are JSONL (resumable:
finished contexts are skipped) plus figures, in --out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from . import BadInput, app, progress, run, table

TREES_OUT = Path("benchmarks/results/trees")
REALGAP_OUT = Path("benchmarks/results/realgap")


def _int_list(text: str, option: str, minimum: int = 1) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInput(f"{option}: expected a comma list of integers, got {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise BadInput(f"{option}: every value must be >= {minimum}, got {text!r}")
    return values


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def _load(pair_name: str, prompt_spec: str, draft_temperature: float | None,
          threads: int | None) -> tuple[Any, list[dict[str, Any]], float | None, str]:
    """Prompts (checked first: cheap), then the pair on the CPU/GPU default device."""
    import torch

    from ..verifiers.models import ModelUnavailable, VocabularyMismatch, load_pair
    from .models import parse_prompts

    prompts = parse_prompts(prompt_spec)
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


@app.command()
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
    out: Path = typer.Option(TREES_OUT, "--out", help="Folder of the JSONL results and figures."),
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
        from ..proofs.realgap import load_jsonl
        from ..proofs.trees import (
            ENGINE_SHAPES,
            RULES,
            node_count,
            plot_trees,
            run_engine_reuse,
            run_trees,
            summarize_engine_reuse,
            summarize_trees,
        )

        budget_list = _int_list(budgets, "--budgets")
        rule_list = tuple(r.strip() for r in rules.split(",") if r.strip())
        bad = [r for r in rule_list if r not in RULES]
        if bad or not rule_list:
            raise BadInput(f"--rules: unknown rule {bad[0] if bad else rules!r}; known: {', '.join(RULES)}")
        if width < 2 or depth < 2:
            raise BadInput(f"--top/--depth: need M >= 2 and L >= 2, got {width}, {depth}")
        if max(budget_list) > node_count(width, depth):
            raise BadInput(f"--budgets: {max(budget_list)} exceeds the {node_count(width, depth)} nodes of "
                           f"the M={width}, L={depth} candidate tree; raise --top or --depth")
        if contexts_per_prompt < 1 or every < 1:
            raise BadInput("--contexts-per-prompt/--every: must be >= 1")
        engine_list = _int_list(engine_budgets, "--engine-budgets") if engine_budgets else []
        bad_engine = [n for n in engine_list if n not in ENGINE_SHAPES]
        if bad_engine:
            raise BadInput(f"--engine-budgets: {bad_engine[0]} has no K x L shape; known: "
                           f"{', '.join(map(str, ENGINE_SHAPES))}")
        loaded, prompt_list, draft_t, label = _load(pair, prompts, draft_temperature, threads)
        out_file = out / f"{_slug(pair)}.jsonl"
        engine: dict[str, Any] = {}
        if engine_list:
            engine_file = out / f"{_slug(pair)}_engine.jsonl"
            if loaded.same_model:
                loaded.draft_temperature = draft_t
            engine = run_engine_reuse(loaded, prompt_list, engine_list,
                                      [v.strip() for v in engine_verifiers.split(",") if v.strip()],
                                      engine_file, engine_tokens, temperature, seed, label)
            engine["summary"] = summarize_engine_reuse(load_jsonl(engine_file))
        if skip_trees:
            return {"pair": label, "engine": engine, "summary": [], "contexts": 0, "figures": [],
                    "file": None, "computed": 0, "reused": 0, "convention": "", "rows": ""}
        status = run_trees(loaded.target.model, loaded.draft.model, prompt_list, budget_list, rule_list,
                           out_file, width, depth, contexts_per_prompt, every, temperature, draft_t,
                           seed, label, set(loaded.target.eos_token_ids), not no_timing,
                           progress=lambda it: progress(it, len(prompt_list), "trees"))
        records = [r for r in load_jsonl(out_file) if r["width"] == width and r["depth"] == depth]
        figures = plot_trees(records, out, title=f"{label}: {len(records)} contexts, M={width}, L={depth}")
        return {"pair": label, **status, "contexts": len(records), "figures": [str(f) for f in figures],
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


@app.command()
def realgap(
    pair: str = typer.Option("qwen2.5-coder", "--pair", help="Pair name, TARGET,DRAFT, or one model."),
    prompts: str = typer.Option("humaneval:10", "--prompts", help="humaneval:N or file:PATH."),
    top: str = typer.Option("3", "--top", help="M (comma list): top-M tokens of the TARGET row per node."),
    depth: str = typer.Option("2", "--depth", help="L (comma list)."),
    paths: str = typer.Option("1,2,3", "--paths", help="K (comma list)."),
    contexts_per_prompt: int = typer.Option(2, "--contexts-per-prompt"),
    every: int = typer.Option(8, "--every", help="Target-sampled tokens between contexts."),
    temperature: float = typer.Option(1.0, "--temperature"),
    draft_temperature: float = typer.Option(None, "--draft-temperature"),
    out: Path = typer.Option(REALGAP_OUT, "--out"),
    seed: int = typer.Option(0, "--seed"),
    threads: int = typer.Option(None, "--threads"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Certified K-path LP optimum vs every lossless verifier on instances cut from a real pair.

    Instances: top-M tokens of the TARGET row at every node to depth L, both rows
    RENORMALISED over them (a truncation of the real pair).
    """

    def body() -> dict[str, Any]:
        from ..proofs.realgap import load_jsonl, plot_realgap, run_realgap, summarize_realgap

        widths = _int_list(top, "--top", 2)
        depths = _int_list(depth, "--depth", 1)
        ks = _int_list(paths, "--paths", 1)
        if max(widths) > 5 or max(depths) > 3 or max(ks) > 3:
            raise BadInput("--top/--depth/--paths: supported sizes are M <= 5, L <= 3, K <= 3 (LP size)")
        if contexts_per_prompt < 1 or every < 1:
            raise BadInput("--contexts-per-prompt/--every: must be >= 1")
        loaded, prompt_list, draft_t, label = _load(pair, prompts, draft_temperature, threads)
        out_file = out / f"{_slug(pair)}.jsonl"
        status = run_realgap(loaded.target.model, loaded.draft.model, prompt_list, widths, depths, ks,
                             out_file, contexts_per_prompt, every, temperature, draft_t, seed, label,
                             set(loaded.target.eos_token_ids),
                             progress=lambda it: progress(it, len(prompt_list), "realgap"))
        records = load_jsonl(out_file)
        figures = plot_realgap(records, out)
        return {"pair": label, **status, "records": len(records), "figures": [str(f) for f in figures],
                "instances": "top-M of the TARGET row per node, rows renormalised over the M tokens",
                "summary": summarize_realgap(records)}

    def render(r: dict[str, Any]) -> None:
        rows = []
        for s in r["summary"]:
            for name, gap in sorted(s["mean_gap"].items(), key=lambda kv: kv[1]):
                rows.append([s["width"], s["depth"], s["paths"], s["contexts"],
                             f"{s['certified']}/{s['contexts']}", f"{s['mean_optimum']:.4f}", name,
                             f"{gap:.4f}", f"{s['max_gap'][name]:.4f}"])
        table(f"realgap: {r['pair']} ({r['instances']})",
              ["M", "L", "K", "ctx", "LP certified", "mean LP optimum", "verifier", "mean gap",
               "max gap"], rows)
        print("figures:", ", ".join(r["figures"]))

    run(body, as_json, render)
