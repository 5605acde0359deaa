"""Seconds per decoding step of the paired bench pipeline, split: draft, target tree pass, laws.

One step of `speclp bench` (grid mode) = the draft's forwards (K paths, depth L, its KV cache
reused across steps), ONE target tree-masked forward over the distinct drafted nodes (KV cache
reused: the prompt is never recomputed), the driving verifier's law, and the exact laws of
every scored verifier at every (K', L') cell (`decode.scoring.score_grid`). This script runs the
engine on a few fixed code prompts and reports the per-step means of each part, side by side
for three settings of the same run:

    before  every (K', L') <= (K, L) scored, every cell's laws sorting their own rows
            (EngineConfig.share_sorts False: the pipeline before issue 33)
    grid    the same grid, each distinct node row sorted once per step (share_sorts, the
            default: every value the same bits)
    cell    only the cell (K, L) scored (the cost of one law per verifier)

and the ratio laws / (draft + target pass) that issue 33 asks to bring to <= 0.5.

    python benchmarks/pipeline_step.py                     # smollm2-135m, its own draft (1.5 T)
    python benchmarks/pipeline_step.py --pair tiny         # a tiny random Llama (no download)
    python benchmarks/pipeline_step.py --out benchmarks/results/pipeline/step_cpu.json

Every number is a mean over the recorded steps of ONE run (CPU timings on a shared machine
vary with load; the settings are interleaved run by run, in the order before, grid, cell, cell, grid,
before, so that load hits all of them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from speclp.decode.engine import EngineConfig, SpeculativeEngine
from speclp.decode.models import load_pair, wrap_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device import run_record, save_run  # noqa: E402

PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def is_palindrome(text: str) -> bool:\n",
    "# Sort a list of integers with merge sort\ndef merge_sort(values):\n",
    "class Stack:\n    def __init__(self):\n",
]
VERIFIERS = ("token", "bv", "gbv", "specinfer", "spectr", "nodeopt")


def tiny_pair():
    """A tiny random Llama as its own draft (vocabulary 512), tokens as integers."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    model = wrap_model(AutoModelForCausalLM.from_config(cfg).eval(), "tiny-llama")
    return model, model, [[(7 * i + j) % 500 + 1 for j in range(12 + i)] for i in range(4)]


def step_means(log: list[dict]) -> dict[str, float]:
    """Per-step means of the phases and of every scored law (seconds)."""
    out = {part: statistics.fmean(s[part] for s in log)
           for part in ("draft_s", "target_s", "verifier_s", "score_s")}
    names = sorted({n for s in log for n in s["law_s"]})
    out["laws_s"] = {n: statistics.fmean(s["law_s"].get(n, 0.0) for s in log) for n in names}
    out["forwards_s"] = out["draft_s"] + out["target_s"]
    out["laws_over_forwards"] = out["score_s"] / out["forwards_s"] if out["forwards_s"] else None
    out["steps"] = len(log)
    out["rows_per_step"] = statistics.fmean(s["rows"] for s in log)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="smollm2-135m", help="a decode.models pair name, or tiny")
    ap.add_argument("--paths", type=int, default=4)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--verifiers", default=",".join(VERIFIERS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    names = tuple(v for v in args.verifiers.split(",") if v)
    if args.pair == "tiny":
        target, draft, prompts = tiny_pair()
        draft_t = 1.5 * args.temperature
    else:
        pair = load_pair(args.pair, device="cpu")
        target, draft = pair.target, pair.draft
        draft_t = 1.5 * args.temperature if pair.same_model else None
        prompts = [target.tokenizer.encode(text) for text in PROMPTS]
    prompts = (prompts * args.batch)[: args.batch]
    settings = ("before", "grid", "cell")
    rows, logs = [], {s: [] for s in settings}
    for round_index, setting in enumerate(settings + settings[::-1]):  # interleaved
        config = EngineConfig(paths=args.paths, depth=args.depth, temperature=args.temperature,
                              draft_temperature=draft_t, max_new_tokens=args.new_tokens,
                              score=names, score_grid=setting != "cell",
                              share_sorts=setting != "before", score_dtype=torch.float32)
        engine = SpeculativeEngine(target, draft, "gbv", config)
        generator = torch.Generator().manual_seed(round_index % len(settings))
        start = time.perf_counter()
        result = engine.generate(prompts, generator=generator)
        logs[setting] += result.metrics["step_log"]
        print(f"{setting}: {len(result.metrics['step_log'])} steps in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    for setting in settings:
        means = step_means(logs[setting])
        rows.append({"setting": setting, **means})
        laws = ", ".join(f"{n} {v:.3f}" for n, v in means["laws_s"].items())
        print(f"{setting:6s} per step: draft {means['draft_s']:.3f} s, target pass "
              f"{means['target_s']:.3f} s, driver law {means['verifier_s']:.3f} s, scored laws "
              f"{means['score_s']:.3f} s ({laws}); laws / forwards "
              f"{means['laws_over_forwards']:.2f}")
    record = run_record("pipeline_step", torch.device("cpu"), rows, pair=args.pair,
                        paths=args.paths, depth=args.depth, temperature=args.temperature,
                        batch=args.batch, new_tokens=args.new_tokens, verifiers=list(names),
                        threads=args.threads, command=" ".join(sys.argv))
    if args.out:
        save_run(record, args.out)
    else:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
