"""`speclp bench`: paired decoding comparisons on real models, with confidence intervals.

The runs, records and summaries are `speclp.experiments.bench`; this module parses the options,
loads the pair and prints. Results: ``--out/<pair>.jsonl`` (resumable) and a figure with
error bars (``--out/bench_<pair>.png``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import typer

from ..decode.models import (
    ModelUnavailable,
    VocabularyMismatch,
    check_device,
    check_dtype,
    check_model_pair,
    load_pair,
    parse_dtype,
)
from ..experiments.bench import (
    HUMANEVAL_SIZE,
    load_records,
    random_prompts,
    run_bench,
    summarize_bench,
)
from ..experiments.intervals import format_interval
from ..experiments.plots import plot_bench
from ..experiments.prompts import humaneval_prompts, read_prompts
from ..experiments.store import slug
from ..verifiers.registry import verifier_names
from . import options as option
from . import validate as check
from .common import BadInput, new_commands, progress, run, stderr, table

DEFAULT_OUT = Path("speclp-results") / "bench"  # relative to the working directory


commands = new_commands()


@commands.command()
def bench(
    pair: str = typer.Option(
        "qwen2.5-coder",
        "--pair",
        help="Built-in pair (qwen2.5-coder), 'TARGET,DRAFT', or one model "
        "(then its own draft at --draft-temperature, default 1.5 T).",
    ),
    prompts: str = option.prompts("humaneval:10"),
    verifiers: str = typer.Option(
        "token,bv,gbv,specinfer,spectr,traversal",
        "--verifiers",
        help="Verifiers scored on every step's drafted tree (paired).",
    ),
    drive: str = typer.Option("gbv", "--drive", help="The verifier that decodes (its blocks are committed)."),
    paths: str = typer.Option("4", "--paths", help="K_max (or a comma list: its largest is K_max); "
                              "every K' <= K_max is scored on the same trees."),
    depth: str = typer.Option("8", "--depth", help="L_max (or a comma list: its largest is L_max); "
                              "every L' <= L_max is scored on the same trees."),
    temperature: str = typer.Option("1.0", "--temperature", help="T, or a comma list."),
    top_p: float = typer.Option(1.0, "--top-p", help="Top-p applied to both models."),
    draft_temperature: float = typer.Option(
        None, "--draft-temperature", help="Draft T (default: T; single model: 1.5 T)."
    ),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", help="New tokens per prompt."),
    prompt_seed: int = typer.Option(
        None, "--prompt-seed", help="With humaneval:N: draw the N prompts at random from the 164 "
        "with this seed (recorded; a larger N with the same seed adds prompts to the runs)."),
    grid: bool = typer.Option(True, "--grid/--no-grid", help="One run per T at (K_max, L_max) "
                              "scoring every (K', L') (default), or one run per (K, L, T)."),
    batch: int = typer.Option(8, "--batch", help="Prompts decoded together (one engine call)."),
    baseline: bool = typer.Option(False, "--baseline", help="Also decode autoregressively (tokens/s)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Folder of the JSONL results and figure."),
    seed: int = option.seed(0),
    device: str = typer.Option(None, "--device", help="cuda or cpu (default: cuda if present)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, bf16 or fp32 (model weights)."),
    score_dtype: str = typer.Option("fp32", "--score-dtype", help="fp32 or fp64: rows of the scored laws."),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's)."),
    as_json: bool = option.json(),
) -> None:
    """Paired decoding comparison: every verifier scored on the same drafted trees.

    One run per T decodes the prompts with --drive at (K_max, L_max); at every step each
    verifier in --verifiers gets its exact conditional E[tau+1] on that step's tree, cut to
    every (K', L') <= (K_max, L_max) (the first K' paths to depth L'). Reports per cell the
    mean E[tau+1] per step of every verifier and the paired difference to bv, with t
    intervals on the per-prompt means (coverage simulated in
    benchmarks/interval_coverage.py), plus the driver's realised tokens per call, decode
    speed and the per-step cost split. Resumable: records already in --out are not
    recomputed.
    """

    def body() -> dict[str, Any]:
        # everything is checked before a model is loaded (cli/validate.py)
        temps = check.float_list("--temperature", temperature, 0)
        depths = check.int_list("--depth", depth, 1, 64)
        ks = check.int_list("--paths", paths, 1, 64)
        check.number("--top-p", top_p, 0, 1, low_open=True)
        check.integer("--max-new-tokens", max_new_tokens, 1, 1_000_000)
        check.integer("--batch", batch, 1, 4096)
        check.choice("--score-dtype", score_dtype, ("fp32", "fp64"))
        if draft_temperature is not None:
            check.number("--draft-temperature", draft_temperature, 0)
        check.seed("--seed", seed)
        check_dtype(dtype)
        check.output_dir("--out", out)
        if threads is not None:
            check.integer("--threads", threads, 1, 1024)
        prompt_list = read_prompts(prompts)
        if prompt_seed is not None:
            check.seed("--prompt-seed", prompt_seed)
            if not prompts.startswith("humaneval:"):
                raise BadInput("--prompt-seed: only with --prompts humaneval:N")
            every = humaneval_prompts(HUMANEVAL_SIZE)
            prompt_list = random_prompts(every, len(prompt_list), prompt_seed)
        check_device(device)

        lossless = verifier_names(draft_sampling="iid")
        names = [v.strip() for v in verifiers.split(",") if v.strip()]
        if not names:
            raise BadInput("--verifiers: expected at least one verifier")
        for name in names + [drive]:
            if name not in lossless:
                flag = "--drive" if name == drive and name not in names else "--verifiers"
                raise BadInput(f"{flag}: unknown verifier {name!r} (or not lossless under i.i.d. "
                               f"drafts); known: {', '.join(lossless)}")
        check_model_pair(pair)
        torch_dtype = parse_dtype(None if dtype == "auto" else dtype)
        if threads is not None:
            torch.set_num_threads(threads)

        def load() -> Any:

            try:
                loaded = load_pair(pair, device=device, dtype=torch_dtype)
            except (ModelUnavailable, VocabularyMismatch) as err:
                raise BadInput(f"--pair: {err}") from None
            except OSError as err:
                raise BadInput(f"--pair: cannot load {pair!r}: {err}") from None
            check.vocabulary_limits("--verifiers", names + [drive], ks, loaded.target.vocab_size)
            return loaded

        runs = len(temps) if grid else len(ks) * len(depths) * len(temps)
        stderr.print(f"bench: {runs} runs x {len(prompt_list)} prompts "
                     f"-> {out}", highlight=False)
        out_file = out / f"{slug(pair)}.jsonl"
        status = run_bench(
            load, pair, prompt_list, ks, depths, temps, names, out_file, drive=drive, top_p=top_p,
            draft_temperature=draft_temperature, max_new_tokens=max_new_tokens, batch=batch,
            seed=seed, dtype=None if dtype == "auto" else dtype, device=device,
            score_dtype=score_dtype, baseline=baseline, grid=grid,
            progress=lambda it, total: progress(it, total, "bench"))
        records = [r for r in load_records(out) if r.get("pair") == pair]
        wanted_k = {max(ks)} if grid else set(ks)
        wanted_l = {max(depths)} if grid else set(depths)
        rows = [r for r in summarize_bench(records)
                if r["temperature"] in temps and r["tree_depth"] in wanted_l | {0}
                and r["tree_paths"] in wanted_k | {0} and r["max_new_tokens"] == max_new_tokens
                and bool(r["score_grid"]) == (grid and r["drive"] != "autoregressive")]
        figures = []
        if any(r["drive"] != "autoregressive" for r in rows):
            figures = [str(f) for f in plot_bench(records, out / f"bench_{slug(pair)}")]
        return {**status, "runs": rows, "figures": figures}

    def render(r: dict[str, Any]) -> None:
        runs = [c for c in r["runs"] if c["drive"] != "autoregressive"]
        names = sorted({n for c in runs for n in c["differences"]})
        rows = []
        for c in r["runs"]:
            if c["drive"] == "autoregressive":
                rows.append([c["temperature"], "-", "-", c["prompts"], "autoregressive",
                             *[""] * len(names), f"{c['decode_tokens_per_s']:.2f}"])
                continue
            ref = c["verifiers"].get("bv")
            rows.append([c["temperature"], c["depth"], c["paths"], c["prompts"],
                         format_interval(ref) if ref else "",
                         *[format_interval(c["differences"][n]) if n in c["differences"] else ""
                           for n in names],
                         f"{c['decode_tokens_per_s']:.2f} ({c['drive']})"])
        table(f"bench {pair} ({r['computed']} computed, {r['reused']} reused) -> {r['file']}",
              ["T", "L", "K", "prompts", "bv E[tau+1]", *[f"{n} - bv" for n in names], "tok/s"],
              rows)
        print("estimates: mean over prompts of the per-step exact conditional E[tau+1]; "
              "[nominal 95% t interval on per-prompt means; simulated coverage, median over "
              "recorded populations, 0.87 / 0.91 / 0.93 / 0.94 at 3 / 8 / 16 / 32 prompts: "
              "benchmarks/results/bench/interval_coverage.md]; every verifier and (K, L) "
              "scored on the same trees")
        for c in runs:
            if c["realised"] is not None and c["cost_per_step"]:
                cost = c["cost_per_step"]
                laws = ", ".join(f"{n} {s:.2f}" for n, s in cost["laws_s"].items())
                print(f"T={c['temperature']} K={c['paths']} L={c['depth']}: seconds per step: draft "
                      f"{cost['draft_s']:.2f}, target tree pass {cost['target_s']:.2f}, driver law "
                      f"{cost['verifier_s']:.2f}; scored laws (every cell) {laws}; "
                      f"prompts per hour {c['prompts_per_hour'] or 0:.1f}")
        print("figures:", ", ".join(r["figures"]))

    run(body, as_json, render)
