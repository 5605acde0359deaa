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
    check_model_pair,
    load_pair,
    parse_dtype,
)
from ..experiments.bench import BenchResult, BenchSpec, load_records
from ..experiments.intervals import format_interval
from ..experiments.plots import plot_bench
from ..experiments.prompts import read_prompts
from ..experiments.store import slug
from . import options as option
from . import validate as check
from .common import BadInput, new_commands, reporting, run, stderr, table

DEFAULT_OUT = Path("speclp-results") / "bench"  # relative to the working directory
DEFAULTS = BenchSpec()
HELP = {
    "pair": "Built-in pair (qwen2.5-coder), 'TARGET,DRAFT', or one model (then its own draft at "
            "--draft-temperature, default 1.5 T).",
    "paths": "K_max (or a comma list: its largest is K_max); every K' <= K_max is scored on the same trees.",
    "depth": "L_max (or a comma list: its largest is L_max); every L' <= L_max is scored on the same trees.",
    "grid": "One run per T at (K_max, L_max) scoring every (K', L') (default), or one run per (K, L, T).",
}


def _csv(values: tuple[Any, ...]) -> str:
    return ",".join(map(str, values))


commands = new_commands()


@commands.command()
def bench(
    ctx: typer.Context,
    pair: str = typer.Option(DEFAULTS.pair, "--pair", help=HELP["pair"]),
    prompts: str = option.prompts(DEFAULTS.prompts),
    verifiers: str = typer.Option(_csv(DEFAULTS.verifiers), "--verifiers",
                                  help="Verifiers scored on every step's drafted tree (paired)."),
    drive: str = typer.Option(DEFAULTS.drive, "--drive",
                              help="The verifier that decodes (its blocks are committed)."),
    paths: str = typer.Option(_csv(DEFAULTS.paths), "--paths", help=HELP["paths"]),
    depth: str = typer.Option(_csv(DEFAULTS.depths), "--depth", help=HELP["depth"]),
    temperature: str = typer.Option(_csv(DEFAULTS.temperatures), "--temperature", help="T, or a comma list."),
    top_p: float = typer.Option(DEFAULTS.top_p, "--top-p", help="Top-p applied to both models."),
    draft_temperature: float = typer.Option(DEFAULTS.draft_temperature, "--draft-temperature",
                                            help="Draft T (default: T; single model: 1.5 T)."),
    max_new_tokens: int = typer.Option(DEFAULTS.max_new_tokens, "--max-new-tokens",
                                       help="New tokens per prompt."),
    prompt_seed: int = option.prompt_seed(DEFAULTS.prompt_seed),
    grid: bool = typer.Option(DEFAULTS.grid, "--grid/--no-grid", help=HELP["grid"]),
    batch: int = typer.Option(DEFAULTS.batch, "--batch", help="Prompts decoded together (one engine call)."),
    baseline: bool = typer.Option(DEFAULTS.baseline, "--baseline",
                                  help="Also decode autoregressively (tokens/s)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Folder of the JSONL results and figure."),
    seed: int = option.seed(DEFAULTS.seed),
    device: str = typer.Option(DEFAULTS.device, "--device", help="cuda or cpu (default: cuda if present)."),
    dtype: str = typer.Option(DEFAULTS.dtype, "--dtype", help="auto, bf16 or fp32 (model weights)."),
    score_dtype: str = typer.Option(DEFAULTS.score_dtype, "--score-dtype",
                                    help="fp32 or fp64: rows of the scored laws."),
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
    run(lambda: bench_command(ctx.params), as_json, lambda r: render(r, pair))


def bench_spec(flags: dict[str, Any]) -> tuple[BenchSpec, list[dict[str, Any]]]:
    """(BenchSpec, prompts) of the command line (flags: its parameters by name): the lists
    parsed, the flags that are not spec fields checked (--out, --threads), the spec (its
    construction checks the rest), the prompts read, and the pair's name last (naming a
    model imports torch); all before a model is loaded. BadArgument: exit 2 naming the flag."""
    f = flags
    temps = check.float_list("--temperature", f["temperature"])
    depths = check.int_list("--depth", f["depth"])
    ks = check.int_list("--paths", f["paths"])
    check.output_dir("--out", f["out"])
    if f["threads"] is not None:
        check.integer("--threads", f["threads"], 1, 1024)
    names = [v.strip() for v in f["verifiers"].split(",") if v.strip()]
    spec = BenchSpec(pair=f["pair"], prompts=f["prompts"], verifiers=tuple(names), drive=f["drive"],
                     paths=tuple(ks), depths=tuple(depths), temperatures=tuple(temps),
                     top_p=f["top_p"], draft_temperature=f["draft_temperature"],
                     max_new_tokens=f["max_new_tokens"], prompt_seed=f["prompt_seed"], grid=f["grid"],
                     batch=f["batch"], baseline=f["baseline"], seed=f["seed"], device=f["device"],
                     dtype=f["dtype"], score_dtype=f["score_dtype"])
    prompt_list = read_prompts(spec.prompts, seed=spec.prompt_seed)
    check_model_pair(spec.pair)
    return spec, prompt_list


def bench_command(flags: dict[str, Any]) -> dict[str, Any]:
    """`speclp bench`: the spec (checked), the runs (the pair is loaded only when a record is
    missing from --out), the rows of the runs asked for and the figure."""
    spec, prompt_list = bench_spec(flags)
    out, threads = flags["out"], flags["threads"]
    if threads is not None:
        torch.set_num_threads(threads)

    def load() -> Any:
        try:
            loaded = load_pair(spec.pair, device=spec.device,
                               dtype=parse_dtype(None if spec.dtype == "auto" else spec.dtype))
        except (ModelUnavailable, VocabularyMismatch) as err:
            raise BadInput(f"--pair: {err}") from None
        except OSError as err:
            raise BadInput(f"--pair: cannot load {spec.pair!r}: {err}") from None
        check.vocabulary_limits("--verifiers", [*spec.verifiers, spec.drive], list(spec.paths),
                                loaded.target.vocab_size)
        return loaded

    stderr.print(f"bench: {spec.runs} runs x {len(prompt_list)} prompts -> {out}", highlight=False)
    status = spec.run(load, prompt_list, out / f"{slug(spec.pair)}.jsonl",
                      progress=lambda it, total: reporting(it, total, "bench", "batch runs"))
    records = [r for r in load_records(out) if r.get("pair") == spec.pair]
    cells = tuple(spec.cells(records))
    figures: tuple[str, ...] = ()
    if any(c.to_json()["drive"] != "autoregressive" for c in cells):
        figures = tuple(str(f) for f in plot_bench(records, out / f"bench_{slug(spec.pair)}"))
    return BenchResult(status["file"], status["computed"], status["reused"], cells, figures).to_json()


def render(r: dict[str, Any], pair: str) -> None:
    """The table of a bench result, the note on its intervals and the per-step costs."""
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
          "[each interval's method is in the JSON; default: Hall's skew-corrected t on per-prompt "
          "means, simulated coverage 0.924-0.961 / 0.943-0.959 / 0.944-0.960 at 24 / 48 / 96 prompts "
          "over realistic populations, nominal 95% at other counts: "
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
