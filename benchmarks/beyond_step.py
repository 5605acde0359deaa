"""Verifier step time at a real vocabulary: nodeopt against BV and GBV, side by side.

One "step" = block_law + sample_block on one DraftTree (what the engine calls once per
target pass): K paths of depth L over V tokens, batch B. The verifiers are timed in
INTERLEAVED rounds (every round times each verifier once, in rotating order) so that load
on a shared machine hits all of them alike; the ratios are medians over the rounds of the
per-round ratios, with their min and max.

Rows (stated on every output): softmax of Gaussian logits (scale 3, peaked like an LM) for
the target; the draft is the target's logits / 1.3 plus N(0, 0.5^2) noise (a correlated
draft, so drafted tokens have p > 0 and the rules see realistic ratio spreads); row 0 is
shared by the K paths, drafted tokens are sampled from the draft rows depth by depth, and
paths sharing a prefix share its rows. Synthetic rows with real-model SHAPES, not rows of a
real model.

    python benchmarks/beyond_step.py                   # V = 151,936, K = 3, L = 8, B = 1
    python benchmarks/beyond_step.py --out benchmarks/results/beyond/step_cpu.json
    python benchmarks/beyond_step.py --depth 1 --vocab 1000,10000,100000,151936   # scaling in V

Prints a table; saves JSON only with --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from speclp.verifiers.law import DraftTree, sample_block
from speclp.verifiers.registry import block_law

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device import device_name, pick_device, synced_seconds  # noqa: E402

VERIFIERS = ("bv", "gbv", "nodeopt")


def correlated_tree(batch: int, paths: int, depth: int, vocab: int, dtype: torch.dtype,
                    generator: torch.Generator, device: torch.device) -> DraftTree:
    """Target rows [B, K, L+1, V] and draft rows [B, K, L, V] (module docstring), drafted
    depth by depth; paths that share a prefix share its rows (the DraftTree contract: equal
    prefixes carry equal rows)."""
    logits = 3 * torch.randn(batch, paths, depth + 1, vocab, generator=generator, device=device)
    noise = 0.5 * torch.randn(batch, paths, depth, vocab, generator=generator, device=device)
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits[:, :, :depth] / 1.3 + noise, -1)
    tokens = torch.zeros(batch, paths, depth, dtype=torch.long, device=device)
    for i in range(depth + 1):
        for k in range(1, paths):
            copied = torch.zeros(batch, dtype=torch.bool, device=device)
            for j in range(k):  # the first earlier path with the same prefix gives its rows
                same = (tokens[:, j, :i] == tokens[:, k, :i]).all(-1) & ~copied
                target[:, k, i] = torch.where(same[:, None], target[:, j, i], target[:, k, i])
                if i < depth:
                    draft[:, k, i] = torch.where(same[:, None], draft[:, j, i], draft[:, k, i])
                copied |= same
        if i < depth:
            tokens[:, :, i] = torch.multinomial(draft[:, :, i].reshape(-1, vocab), 1,
                                                generator=generator).reshape(batch, paths)
    return DraftTree(tokens, target.to(dtype), draft.to(dtype))


def one_step(name: str, tree: DraftTree, generator: torch.Generator, device: torch.device) -> float:
    return synced_seconds(lambda: sample_block(block_law(name, tree), generator), device)


def measure(args: argparse.Namespace, vocab: int, device: torch.device) -> dict:
    """Interleaved rounds at one vocabulary size; prints and returns the record."""
    generator = torch.Generator(device=device).manual_seed(args.seed)
    tree = correlated_tree(args.batch, args.paths, args.depth, vocab, getattr(torch, args.dtype),
                           generator, device)
    for name in VERIFIERS:  # warm-up
        one_step(name, tree, generator, device)
    times: dict[str, list[float]] = {name: [] for name in VERIFIERS}
    for r in range(args.rounds):
        for j in range(len(VERIFIERS)):
            name = VERIFIERS[(r + j) % len(VERIFIERS)]
            times[name].append(one_step(name, tree, generator, device))
    rows = {name: {"median_ms": 1000 * statistics.median(t), "min_ms": 1000 * min(t),
                   "max_ms": 1000 * max(t)} for name, t in times.items()}
    ratios = {}
    for base in ("bv", "gbv"):
        per_round = [a / b for a, b in zip(times["nodeopt"], times[base], strict=True)]
        ratios[f"nodeopt_over_{base}"] = {"median": statistics.median(per_round),
                                          "min": min(per_round), "max": max(per_round)}
    result = {
        "benchmark": "verifier step (block_law + sample_block), interleaved rounds",
        "rows": "synthetic: softmax(3 N(0,1)) target, draft = softmax(logits/1.3 + 0.5 N(0,1)); "
                "real-model shapes, not real-model rows",
        "vocab": vocab, "paths": args.paths, "depth": args.depth, "batch": args.batch,
        "rounds": args.rounds, "dtype": args.dtype, "device": str(device),
        "device_name": device_name(device),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verifiers": rows, "ratios": ratios,
        "target": "nodeopt within 2x of BV (issue 12)",
        "target_met": ratios["nodeopt_over_bv"]["median"] <= 2.0,
    }
    print(f"V = {vocab}, K = {args.paths}, L = {args.depth}, B = {args.batch}")
    for name, row in rows.items():
        print(f"{name:8s} median {row['median_ms']:9.2f} ms  (min {row['min_ms']:.2f}, "
              f"max {row['max_ms']:.2f})")
    for key, value in ratios.items():
        print(f"{key}: median {value['median']:.2f} (min {value['min']:.2f}, max {value['max']:.2f})")
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default="151936", help="V, or a comma list (one result each)")
    parser.add_argument("--paths", type=int, default=3)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="save the JSON here (default: print only)")
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    torch.set_num_threads(args.threads)
    results = []
    for vocab in [int(v) for v in args.vocab.split(",")]:
        results.append(measure(args, vocab, device))
    result = results[0] if len(results) == 1 else {"by_vocab": results}
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"saved {out}")
    return result


if __name__ == "__main__":
    main()
