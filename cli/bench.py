"""`speclp bench`: paired decoding comparisons on real models, with confidence intervals.

The runs, records and summaries are `speclp.experiments.bench`; this module parses the options,
loads the pair and prints. Results: ``--out/<pair>.jsonl`` (resumable) and a figure with
error bars (``--out/bench_<pair>.png``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..experiments.store import slug
from . import validate as check
from .common import BadInput, new_commands, progress, run, stderr, table

DEFAULT_OUT = Path("speclp-results") / "bench"  # relative to the working directory


def humaneval_prompts(count: int) -> list[dict[str, str]]:
    """The first `count` HumanEval prompts: [{"id": task_id, "text": prompt}]."""
    return check.humaneval_prompts("--prompts", count)




commands = new_commands()


@commands.command()
def bench(
    pair: str = typer.Option(
        "qwen2.5-coder",
        "--pair",
        help="Built-in pair (qwen2.5-coder), 'TARGET,DRAFT', or one model "
        "(then its own draft at --draft-temperature, default 1.5 T).",
    ),
    prompts: str = typer.Option("humaneval:10", "--prompts", help="humaneval:N or file:PATH."),
    verifiers: str = typer.Option(
        "token,bv,gbv,specinfer,spectr,traversal",
        "--verifiers",
        help="Verifiers scored on every step's drafted tree (paired).",
    ),
    drive: str = typer.Option("gbv", "--drive", help="The verifier that decodes (its blocks are committed)."),
    paths: str = typer.Option("1,2,3,4", "--paths", help="Comma list of K (one run per K, L, T)."),
    depth: str = typer.Option("8", "--depth", help="Draft depth L, or a comma list."),
    temperature: str = typer.Option("1.0", "--temperature", help="T, or a comma list."),
    top_p: float = typer.Option(1.0, "--top-p", help="Top-p applied to both models."),
    draft_temperature: float = typer.Option(
        None, "--draft-temperature", help="Draft T (default: T; single model: 1.5 T)."
    ),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens"),
    batch: int = typer.Option(8, "--batch", help="Prompts decoded together (one engine call)."),
    baseline: bool = typer.Option(False, "--baseline", help="Also decode autoregressively (tokens/s)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Folder of the JSONL results and figure."),
    seed: int = typer.Option(0, "--seed"),
    device: str = typer.Option(None, "--device", help="cuda or cpu (default: cuda if present)."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, bf16 or fp32 (model weights)."),
    score_dtype: str = typer.Option("fp32", "--score-dtype", help="fp32 or fp64: rows of the scored laws."),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Paired decoding comparison: every verifier scored on the same drafted trees.

    One run per (K, L, T) decodes the prompts with --drive; at every step each verifier in
    --verifiers gets its exact conditional E[tau+1] on that step's tree. Reports per run
    the mean E[tau+1] per step of every verifier and the paired difference to bv, with 95%
    bootstrap intervals over prompts, plus the driver's realised tokens per call and
    decode speed. Resumable: records already in --out are not recomputed.
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
        check.dtype("--dtype", dtype)
        check.output_dir("--out", out)
        if threads is not None:
            check.integer("--threads", threads, 1, 1024)
        prompt_list = check.prompts("--prompts", prompts)
        # the checks below import torch (seconds): after the cheap ones
        check.device("--device", device)
        from ..verifiers.registry import verifier_names

        lossless = verifier_names(draft_sampling="iid")
        names = [v.strip() for v in verifiers.split(",") if v.strip()]
        if not names:
            raise BadInput("--verifiers: expected at least one verifier")
        for name in names + [drive]:
            if name not in lossless:
                flag = "--drive" if name == drive and name not in names else "--verifiers"
                raise BadInput(f"{flag}: unknown verifier {name!r} (or not lossless under i.i.d. "
                               f"drafts); known: {', '.join(lossless)}")
        check.model_pair("--pair", pair)
        import torch

        from ..decode.models import ModelUnavailable, VocabularyMismatch, load_pair, parse_dtype
        from ..experiments.bench import load_records, run_bench, summarize_bench
        from ..experiments.plots import plot_bench

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

        stderr.print(f"bench: {len(ks) * len(depths) * len(temps)} runs x {len(prompt_list)} prompts "
                     f"-> {out}", highlight=False)
        out_file = out / f"{slug(pair)}.jsonl"
        status = run_bench(
            load, pair, prompt_list, ks, depths, temps, names, out_file, drive=drive, top_p=top_p,
            draft_temperature=draft_temperature, max_new_tokens=max_new_tokens, batch=batch,
            seed=seed, dtype=None if dtype == "auto" else dtype, device=device,
            score_dtype=score_dtype, baseline=baseline,
            progress=lambda it, total: progress(it, total, "bench"))
        records = [r for r in load_records(out) if r.get("pair") == pair]
        rows = [r for r in summarize_bench(records)
                if r["temperature"] in temps and (r["depth"] in depths or r["depth"] == 0)
                and (r["paths"] in ks or r["paths"] == 0) and r["max_new_tokens"] == max_new_tokens]
        figures = []
        if any(r["drive"] != "autoregressive" for r in rows):
            figures = [str(f) for f in plot_bench(records, out / f"bench_{slug(pair)}")]
        return {**status, "runs": rows, "figures": figures}

    def render(r: dict[str, Any]) -> None:
        from ..experiments.intervals import format_interval

        rows = []
        for c in r["runs"]:
            if c["drive"] == "autoregressive":
                rows.append([c["temperature"], "-", "-", c["prompts"], "autoregressive", "1", "", "",
                             f"{c['decode_tokens_per_s']:.2f}"])
                continue
            for name, iv in sorted(c["verifiers"].items(), key=lambda kv: -kv[1]["estimate"]):
                diff = c["differences"].get(name)
                rel = c["relative"].get(name)
                rows.append([c["temperature"], c["depth"], c["paths"], c["prompts"], name,
                             format_interval(iv), format_interval(diff) if diff else "",
                             format_interval(rel) if rel else "",
                             f"{c['decode_tokens_per_s']:.2f} ({c['drive']})"])
        table(f"bench {pair} ({r['computed']} computed, {r['reused']} reused) -> {r['file']}",
              ["T", "L", "K", "prompts", "verifier", "E[tau+1] per step", "minus bv", "/ bv - 1",
               "tok/s"], rows)
        print("95% percentile bootstrap intervals over prompts; every verifier scored on the same trees")
        print("figures:", ", ".join(r["figures"]))

    run(body, as_json, render)
