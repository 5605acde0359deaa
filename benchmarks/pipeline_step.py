"""Seconds per decoding step of the paired bench pipeline, split: draft, target tree pass, laws.

One step of `speclp bench` (grid mode) = the draft's forwards (K paths, depth L, its KV cache
reused across steps), ONE target tree-masked forward over the distinct drafted nodes (KV cache
reused: the prompt is never recomputed), the driving verifier's law, and the exact laws of
every scored verifier at every (K', L') cell (`decode.scoring.score_grid`). This script runs the
engine on a few fixed code prompts and reports the per-step means of each part, side by side
for four settings of the same run:

    before  every (K', L') <= (K, L) scored, every cell's laws on its own cut tree, sorting
            their own rows (share_sorts False, one_pass False: the pipeline before issue 33)
    grid    the same, each distinct node row sorted once per step (share_sorts; one_pass
            False: the state after the first round of issue 33)
    after   the same grid from the one-pass grid laws (verifiers.grid, EngineConfig.one_pass,
            the default: one pass per K' serves every L'; values equal the per-cell laws')
    cell    only the cell (K, L) scored (the cost of one law per verifier)

and the ratio laws / (draft + target pass) that issue 33 asks to bring to <= 0.5.

No recomputation (checked, not assumed): every forward of either model goes through
decode.cache.SlotCache.forward; this script counts those calls and the tokens they feed, by
phase (prefill, draft, target tree pass, anything else), and records per run: the prefill's
tokens (to compare with the prompt heads' tokens, both models), the calls per step of the
draft and of the target, the most tokens one row feeds in one call of each, and
`prompt_recomputed` (any forward outside the three phases, a target call feeding a row more
than the 1 + K L tree nodes, or a draft call more than max(K, L + 1) tokens: the accepted
block plus the bonus token, or one token per path). The target must make ONE call per step.

    python benchmarks/pipeline_step.py                     # smollm2-135m, its own draft (1.5 T)
    python benchmarks/pipeline_step.py --pair tiny         # a tiny random Llama (no download)
    python benchmarks/pipeline_step.py --out benchmarks/results/pipeline/step_cpu.json
    python benchmarks/pipeline_step.py --plot benchmarks/results/pipeline/step_cpu.json  # its figure

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
from speclp.decode import cache as cache_module
from speclp.decode import generate as generate_module
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


class ForwardCounter:
    """Counts every SlotCache.forward call (rows, tokens per row) by phase while active."""

    PHASES = {"prefill": "prefill", "draft_paths": "draft", "tree_pass": "target"}

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []  # (phase, rows, tokens per row)
        self.phase = "other"

    def __enter__(self) -> ForwardCounter:
        self.saved = {name: getattr(generate_module, name) for name in self.PHASES}
        self.saved_forward = cache_module.SlotCache.forward
        for name, phase in self.PHASES.items():
            setattr(generate_module, name, self._phased(self.saved[name], phase))
        counter, forward = self, self.saved_forward

        def counted(cache, tokens, *args, **kwargs):
            counter.calls.append((counter.phase, int(tokens.shape[0]), int(tokens.shape[1])))
            return forward(cache, tokens, *args, **kwargs)

        cache_module.SlotCache.forward = counted
        return self

    def __exit__(self, *exc) -> None:
        for name, function in self.saved.items():
            setattr(generate_module, name, function)
        cache_module.SlotCache.forward = self.saved_forward

    def _phased(self, function, phase):
        def run(*args, **kwargs):
            previous, self.phase = self.phase, phase
            try:
                return function(*args, **kwargs)
            finally:
                self.phase = previous
        return run

    def summary(self, steps: int, prompts: list[list[int]], paths: int, depth: int) -> dict:
        """Calls and tokens by phase; the no-recompute claims (module docstring)."""
        by = {phase: [c for c in self.calls if c[0] == phase]
              for phase in ("prefill", "draft", "target", "other")}
        most = {phase: max((t for _, _, t in by[phase]), default=0) for phase in ("draft", "target")}
        heads = {tuple(p[:-1]) for p in prompts}  # the prefill feeds each distinct head once
        return {
            "prompt_heads_tokens_both_models": 2 * sum(len(h) for h in heads),
            # the prefill is one padded batch of the distinct heads per model
            "prefill_once": (sum(rows * tokens for _, rows, tokens in by["prefill"])
                             == 2 * len(heads) * max(len(h) for h in heads)),
            "prefill_calls": len(by["prefill"]),
            "prefill_tokens": sum(rows * tokens for _, rows, tokens in by["prefill"]),
            "draft_calls_per_step": len(by["draft"]) / steps if steps else None,
            "target_calls_per_step": len(by["target"]) / steps if steps else None,
            "target_tokens_per_row_step": (statistics.fmean(t for _, _, t in by["target"])
                                           if by["target"] else None),
            "tree_nodes_at_most": 1 + paths * depth,
            "most_draft_tokens_per_row_call": most["draft"],
            "most_target_tokens_per_row_call": most["target"],
            "other_calls": len(by["other"]),
            # more than the step's own tokens in one call (the tree, or the accepted block and
            # K paths for the draft), or a forward outside the phases: something recomputed
            "prompt_recomputed": (bool(by["other"]) or most["target"] > 1 + paths * depth
                                  or most["draft"] > max(paths, depth + 1)),
        }


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


def plot(record_path: Path) -> Path:
    """Stacked bars of the per-step seconds of every setting (draft, target pass, each scored
    verifier's laws) with laws / (draft + target) written at each bar; saved as a PNG beside
    the record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    record = json.loads(record_path.read_text())
    rows = record["rows"]
    names = sorted({n for r in rows for n in r["laws_s"]})
    fig, ax = plt.subplots(figsize=(8, 3.2))
    colours = plt.get_cmap("tab10")
    for y, row in enumerate(rows):
        left = 0.0
        parts = [("draft", row["draft_s"]), ("target tree pass", row["target_s"])]
        parts += [(f"law: {n}", row["laws_s"].get(n, 0.0)) for n in names]
        for c, (label, width) in enumerate(parts):
            ax.barh(y, width, left=left, color=colours(c), label=label if y == 0 else None)
            left += width
        ax.text(left, y, f"  laws / forwards {row['laws_over_forwards']:.2f}", va="center",
                fontsize=8)
    ax.set_yticks(range(len(rows)), [r["setting"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds per decoding step (mean)")
    ax.set_title(f"{record['pair']}, K = {record['paths']}, L = {record['depth']}, batch "
                 f"{record['batch']}, {record['device_name']} ({record['threads']} thread)",
                 fontsize=9)
    ax.set_xlim(0, max(r["forwards_s"] + r["score_s"] for r in rows) * 1.35)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    out = record_path.with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(f"saved {out}")
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
    ap.add_argument("--plot", type=Path, default=None, help="only draw the figure of this record")
    args = ap.parse_args()
    if args.plot:
        plot(args.plot)
        return
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
    settings = ("before", "grid", "after", "cell")
    rows, logs = [], {s: [] for s in settings}
    claims: dict[str, list[dict]] = {s: [] for s in settings}
    for round_index, setting in enumerate(settings + settings[::-1]):  # interleaved
        config = EngineConfig(paths=args.paths, depth=args.depth, temperature=args.temperature,
                              draft_temperature=draft_t, max_new_tokens=args.new_tokens,
                              score=names, score_grid=setting != "cell",
                              share_sorts=setting != "before", one_pass=setting == "after",
                              score_dtype=torch.float32)
        engine = SpeculativeEngine(target, draft, "gbv", config)
        generator = torch.Generator().manual_seed(round_index % len(settings))
        start = time.perf_counter()
        with ForwardCounter() as counter:
            result = engine.generate(prompts, generator=generator)
        log = result.metrics["step_log"]
        logs[setting] += log
        claims[setting].append(counter.summary(len(log), prompts, args.paths, args.depth))
        print(f"{setting}: {len(log)} steps in {time.perf_counter() - start:.1f} s; "
              f"forwards {claims[setting][-1]}", flush=True)
    for setting in settings:
        means = step_means(logs[setting])
        rows.append({"setting": setting, **means, "forwards": claims[setting]})
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
        plot(args.out)
    else:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
