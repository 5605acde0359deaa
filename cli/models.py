"""`speclp bench`: speculative decoding with real models, every verifier, resumable.

Each (configuration, prompt) is one JSON line in ``--out/<pair>.jsonl`` (appended and
flushed as soon as it is computed); a configuration x prompt already recorded there is not
recomputed, so an interrupted sweep resumes where it stopped. ``plot_bench`` renders block
efficiency and throughput against K per verifier (used by ``speclp plot``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import typer

from . import BadInput, app, progress, run, stderr, table
from . import validate as check

DEFAULT_OUT = Path("speclp-results") / "bench"  # relative to the working directory
MAX_PATHS = 64
# Fields that identify a configuration (with the prompt id they identify a record).
CONFIG_KEYS = (
    "pair",
    "verifier",
    "paths",
    "depth",
    "temperature",
    "top_p",
    "draft_temperature",
    "max_new_tokens",
    "dtype",
    "device",
    "seed",
)


def humaneval_prompts(count: int) -> list[dict[str, str]]:
    """The first `count` HumanEval prompts: [{"id": task_id, "text": prompt}]."""
    return check.humaneval_prompts("--prompts", count)


def parse_prompts(spec: str) -> list[dict[str, str]]:
    """ "humaneval:N", or "file:PATH" (one prompt per line, or JSONL with a "prompt" field);
    checked by cli.validate.prompts (bounded regular UTF-8 file, well-formed lines)."""
    return check.prompts("--prompts", spec)


def parse_configs(configs: str | None, verifiers: str, paths: str) -> list[tuple[str, int]]:
    """(verifier, K) pairs: --configs "bv:1,gbv:3" or the product --verifiers x --paths."""
    from ..verifiers.law import verifier_names

    known = set(verifier_names(include_broken=True)) | {"autoregressive"}
    try:
        if configs:
            pairs = []
            for item in configs.split(","):
                name, _, k = item.strip().partition(":")
                pairs.append((name, int(k) if k else 1))
        else:
            ks = [int(k) for k in paths.split(",") if k.strip()]
            pairs = [(v.strip(), k) for v in verifiers.split(",") if v.strip() for k in ks]
    except ValueError:
        raise BadInput(
            f"--configs/--paths: expected integers K, got {configs or paths!r}"
        ) from None
    for name, k in pairs:
        if name not in known:
            raise BadInput(
                f"--verifiers: unknown verifier {name!r}; known: {', '.join(sorted(known))}"
            )
        if (k < 1 or k > MAX_PATHS) and name != "autoregressive":
            raise BadInput(f"--paths: K must be in 1..{MAX_PATHS}, got {k}")
    return list(dict.fromkeys((n, 0 if n == "autoregressive" else k) for n, k in pairs))


def record_key(record: dict[str, Any]) -> str:
    return json.dumps([record.get(k) for k in CONFIG_KEYS] + [record["prompt_id"]])


def load_records(out: Path) -> list[dict[str, Any]]:
    """Every record in the JSONL files under `out` (a truncated last line is ignored)."""
    records = []
    for path in sorted(Path(out).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aggregate records per configuration (sums over prompts, then ratios)."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[tuple(r.get(k) for k in CONFIG_KEYS)].append(r)
    rows = []
    for key, rs in groups.items():
        tokens = sum(r["generated_tokens"] for r in rs)
        steps = max(sum(r["row_steps"] for r in rs), 1)
        decode = sum(r["decode_s"] for r in rs)
        parts = {p: sum(r[f"{p}_s"] for r in rs) for p in ("draft", "target", "verifier", "other")}
        rows.append(
            {
                **dict(zip(CONFIG_KEYS, key, strict=True)),
                "label": rs[0].get("label"),
                "prompts": len(rs),
                "generated_tokens": tokens,
                "target_calls": sum(r["target_calls"] for r in rs),
                "block_efficiency": sum(r["block_efficiency"] * r["row_steps"] for r in rs) / steps,
                "expected_block_efficiency": sum(
                    r["expected_block_efficiency"] * r["row_steps"] for r in rs
                )
                / steps,
                "tokens_per_call": tokens / steps,
                "decode_tokens_per_s": tokens / max(decode, 1e-12),
                "ms_per_token": 1000 * decode / max(tokens, 1),
                **{f"{p}_share": v / max(decode, 1e-12) for p, v in parts.items()},
                "verifier_ms_per_call": 1000 * parts["verifier"] / steps,
                "target_nodes_per_call": sum(
                    r["target_nodes_per_call"] * r["row_steps"] for r in rs
                )
                / steps,
                "peak_memory_mb": max(r["peak_memory_mb"] for r in rs),
            }
        )
    rows.sort(key=lambda r: (str(r["pair"]), r["temperature"], r["verifier"], r["paths"]))
    return rows


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def run_bench(
    pair_name: str,
    prompt_spec: str,
    configs: list[tuple[str, int]],
    depth: int,
    temperatures: list[float],
    top_p: float,
    draft_temperature: float | None,
    max_new_tokens: int,
    out: Path,
    seed: int = 0,
    device: str | None = None,
    dtype: str | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Run (or resume) a sweep; returns {"file", "computed", "reused", "configurations"}."""
    import torch

    from ..verifiers.engine import (
        EngineConfig,
        PrefixStore,
        SpeculativeEngine,
        generate_autoregressive,
    )
    from ..verifiers.models import (
        ModelUnavailable,
        VocabularyMismatch,
        default_device,
        default_dtype,
        load_pair,
        parse_dtype,
    )

    prompts = parse_prompts(prompt_spec)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{_slug(pair_name)}.jsonl"
    done = {record_key(r) for r in load_records(out)}
    try:
        torch_dtype = parse_dtype(dtype)
    except ValueError as err:
        raise BadInput(f"--dtype: {err}") from None
    # records are keyed on the dtype and device actually used ("auto" is resolved here)
    run_device = torch.device(device) if device else default_device()
    torch_dtype = torch_dtype or default_dtype(run_device)
    wanted: set[str] = set()
    pair = None
    jobs = []
    # prompt-major order: an interrupted sweep has every configuration on the first prompts
    for prompt in prompts:
        for temperature in temperatures:
            # a single model is its own draft at another temperature (default 1.5 T; 1.0 at T=0)
            single = "," not in pair_name and pair_name not in _builtin_pairs()
            draft_t = draft_temperature
            if single and draft_t is None:
                draft_t = 1.5 * temperature if temperature > 0 else 1.0
            for verifier, paths in configs:
                jobs.append((temperature, draft_t, prompt, verifier, paths))
    computed = 0
    store = None
    with open(path, "a") as sink:
        for temperature, draft_t, prompt, verifier, paths in progress(jobs, len(jobs), "bench"):
            base = {
                "pair": pair_name,
                "verifier": verifier,
                "paths": paths,
                "depth": 0 if verifier == "autoregressive" else depth,
                "temperature": temperature,
                "top_p": top_p,
                "draft_temperature": temperature if draft_t is None else draft_t,
                "max_new_tokens": max_new_tokens,
                "dtype": str(torch_dtype).removeprefix("torch."),
                "device": str(run_device),
                "seed": seed,
                "prompt_id": prompt["id"],
            }
            if verifier == "autoregressive":
                base["draft_temperature"] = None
            wanted.add(record_key(base))
            if record_key(base) in done:
                continue
            if pair is None:
                try:
                    pair = load_pair(pair_name, device=device, dtype=torch_dtype)
                except (ModelUnavailable, VocabularyMismatch) as err:
                    raise BadInput(f"--pair: {err}") from None
                except OSError as err:
                    raise BadInput(f"--pair: cannot load {pair_name!r}: {err}") from None
                store = PrefixStore()
            tokens = pair.target.tokenizer.encode(prompt["text"])
            digest = hashlib.sha256(prompt["id"].encode()).digest()
            generator = torch.Generator(device=pair.target.device)
            generator.manual_seed(seed * 1_000_003 + int.from_bytes(digest[:4], "little"))
            start = time.perf_counter()
            if verifier == "autoregressive":
                result = generate_autoregressive(
                    pair.target, [tokens], temperature, top_p, max_new_tokens, generator=generator
                )
            else:
                config = EngineConfig(
                    paths=paths,
                    depth=depth,
                    temperature=temperature,
                    top_p=top_p,
                    draft_temperature=draft_t,
                    max_new_tokens=max_new_tokens,
                )
                engine = SpeculativeEngine(
                    pair.target, pair.draft, verifier, config, prefix_store=store
                )
                result = engine.generate([tokens], generator=generator)
            record = {
                **result.metrics,
                **base,
                "label": pair.label,
                "prompt_tokens": len(tokens),
                "wall_s": time.perf_counter() - start,
                "model_dtype": str(pair.target.model.dtype),
                "threads": torch.get_num_threads(),
                "output": pair.target.tokenizer.decode(result.tokens[0]),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            done.add(record_key(base))
            computed += 1
    # the summary counts exactly the records this invocation asked for
    rows = summarize([r for r in load_records(out) if record_key(r) in wanted])
    return {
        "file": str(path),
        "computed": computed,
        "reused": len(jobs) - computed,
        "configurations": rows,
    }


def _builtin_pairs() -> set[str]:
    from ..verifiers.models import BUILTIN_PAIRS

    return set(BUILTIN_PAIRS)


def plot_bench(records_or_dir: list[dict[str, Any]] | str | Path, out: str | Path) -> list[Path]:
    """Render block efficiency and decode throughput against K, one line per verifier.

    records_or_dir: bench records or a folder of bench JSONL files. One figure per
    (pair, temperature) panel row; writes `out`.png and `out`.pdf (a .png/.pdf suffix on
    `out` is dropped first). Returns the two paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = (
        load_records(Path(records_or_dir))
        if isinstance(records_or_dir, str | Path)
        else records_or_dir
    )
    rows = summarize(records)
    if not rows:
        raise BadInput("plot: no bench records")
    panels = sorted({(str(r["pair"]), r["temperature"]) for r in rows})
    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.6 * len(panels)), squeeze=False)
    for (pair, temperature), (ax_be, ax_tp) in zip(panels, axes, strict=True):
        mine = [r for r in rows if str(r["pair"]) == pair and r["temperature"] == temperature]
        for verifier in sorted({r["verifier"] for r in mine}):
            pts = sorted((r["paths"], r) for r in mine if r["verifier"] == verifier)
            ks = [k for k, _ in pts]
            style = dict(marker="o", label=verifier)
            if verifier == "autoregressive":
                for ax, key in ((ax_be, "block_efficiency"), (ax_tp, "decode_tokens_per_s")):
                    ax.axhline(pts[0][1][key], color="gray", ls="--", label="autoregressive")
                continue
            ax_be.plot(ks, [r["expected_block_efficiency"] for _, r in pts], **style)
            ax_tp.plot(ks, [r["decode_tokens_per_s"] for _, r in pts], **style)
        depth = max(r["depth"] for r in mine)
        ax_be.set(
            xlabel="paths K",
            ylabel="block efficiency E[tau+1]",
            title=f"{pair}, T={temperature}, L={depth}",
        )
        ax_tp.set(xlabel="paths K", ylabel="decode tokens / s", title=f"{pair}, T={temperature}")
        for ax in (ax_be, ax_tp):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    if out.suffix in (".png", ".pdf"):
        out = out.with_suffix("")
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.parent / f"{out.name}.png", out.parent / f"{out.name}.pdf"]  # keeps "qwen2.5"
    for p in paths:
        fig.savefig(p, dpi=130)
    plt.close(fig)
    return paths


@app.command()
def bench(
    pair: str = typer.Option(
        "qwen2.5-coder",
        "--pair",
        help="Built-in pair (qwen2.5-coder), 'TARGET,DRAFT', or one model "
        "(then its own draft at --draft-temperature).",
    ),
    prompts: str = typer.Option("humaneval:10", "--prompts", help="humaneval:N or file:PATH."),
    verifiers: str = typer.Option(
        "token,bv,gbv,specinfer,spectr,traversal",
        "--verifiers",
        help="Comma list; 'autoregressive' adds the plain baseline.",
    ),
    paths: str = typer.Option("1,2,3,4", "--paths", help="Comma list of K."),
    configs: str = typer.Option(
        None, "--configs", help="Explicit VERIFIER:K list (overrides --verifiers x --paths)."
    ),
    depth: int = typer.Option(8, "--depth", help="Draft depth L."),
    temperature: str = typer.Option("1.0", "--temperature", help="T, or a comma list."),
    top_p: float = typer.Option(1.0, "--top-p", help="Top-p applied to both models."),
    draft_temperature: float = typer.Option(
        None, "--draft-temperature", help="Draft T (default: T; single model: 1.5 T)."
    ),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
    out: Path = typer.Option(DEFAULT_OUT, "--out",
                             help="Folder of the JSONL results (default ./speclp-results/bench)."),
    seed: int = typer.Option(0, "--seed"),
    device: str = typer.Option(None, "--device", help="cuda or cpu (default: cuda if present)."),
    dtype: str = typer.Option("auto", "--dtype",
                              help="auto (fp32 on CPU, bf16 on CUDA), bf16, fp32 or fp16."),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads (default: torch's)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Speculative decoding on real models: block efficiency, throughput, time split.

    Resumable: records already in --out are not recomputed.
    """

    def body() -> dict[str, Any]:
        # everything is checked before a model is loaded (cli/validate.py)
        temps = check.float_list("--temperature", temperature, 0)
        check.number("--top-p", top_p, 0, 1, low_open=True)
        check.integer("--depth", depth, 1, 64)
        check.integer("--max-new-tokens", max_new_tokens, 1, 1_000_000)
        if draft_temperature is not None:
            check.number("--draft-temperature", draft_temperature, 0)
        check.seed("--seed", seed)
        check.dtype("--dtype", dtype)
        check.output_dir("--out", out)
        if threads is not None:
            check.integer("--threads", threads, 1, 1024)
        check.prompts("--prompts", prompts)
        # the checks below import torch (seconds): after the cheap ones
        check.device("--device", device)
        chosen = parse_configs(configs, verifiers, paths)
        check.model_pair("--pair", pair)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        stderr.print(
            f"bench: {len(chosen)} configurations x {len(temps)} temperatures -> {out}",
            highlight=False,
        )
        return run_bench(
            pair,
            prompts,
            chosen,
            depth,
            temps,
            top_p,
            draft_temperature,
            max_new_tokens,
            out,
            seed,
            device,
            None if dtype == "auto" else dtype,
        )

    def render(r: dict[str, Any]) -> None:
        cols = [
            "T",
            "verifier",
            "K",
            "prompts",
            "BE",
            "E[BE]",
            "tok/s",
            "ms/tok",
            "draft/target/verif %",
            "nodes",
            "peak MB",
        ]
        table(
            f"bench {pair} ({r['computed']} computed, {r['reused']} reused) -> {r['file']}",
            cols,
            [
                [
                    c["temperature"],
                    c["verifier"],
                    c["paths"],
                    c["prompts"],
                    f"{c['block_efficiency']:.3f}",
                    f"{c['expected_block_efficiency']:.3f}",
                    f"{c['decode_tokens_per_s']:.3f}",
                    f"{c['ms_per_token']:.0f}",
                    "/".join(
                        f"{100 * c[f'{p}_share']:.0f}" for p in ("draft", "target", "verifier")
                    ),
                    f"{c['target_nodes_per_call']:.1f}",
                    f"{c['peak_memory_mb']:.0f}",
                ]
                for c in r["configurations"]
            ],
        )

    run(body, as_json, render)
