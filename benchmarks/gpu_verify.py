"""Verifier step time at a real vocabulary: every registered verifier, K paths, depth L.

One "step" = block_law + sample_block on a DraftTree with random rows (what the engine
calls once per target pass). Rows: the synthetic correlated rows of benchmarks/beyond_step.py
(`correlated_tree`: softmax of Gaussian logits of scale 3, peaked like an LM; the draft a
tempered, noisy copy), target rows [B, K, L+1, V], draft rows [B, K, L, V], tokens drafted
depth by depth from the draft rows (so they have q > 0), and paths that share a prefix share
its rows (the DraftTree contract: equal prefixes carry equal rows). Until 2026-12-02 this
script drew every path's rows independently, which broke that contract whenever two paths
drew the same first tokens (nodeopt's law then had no mass: "invalid multinomial
distribution" at V = 64, L = 2); the recorded results were regenerated.

    python benchmarks/gpu_verify.py                       # CUDA if present, else CPU
    python benchmarks/gpu_verify.py --batch 1,32 --paths 1,2,3,4 --depth 8

Prints a table and writes benchmarks/results/bench_gpu_verify_<device>.json. On CPU the
default is batch 1 only (batch 32 at V = 151,936 needs ~1.5 GB per tensor in fp32).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from speclp.verifiers.law import DraftTree, sample_block
from speclp.verifiers.registry import block_law, verifier_names

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device import pick_device, run_record, save_run, synced_seconds  # noqa: E402
from beyond_step import correlated_tree  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def time_step(name: str, tree: DraftTree, device: torch.device, generator: torch.Generator,
              repeats: int) -> list[float]:
    """Seconds per block_law + sample_block (after one warm-up)."""
    times = [synced_seconds(lambda: sample_block(block_law(name, tree), generator), device)
             for _ in range(repeats + 1)]
    return times[1:]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--paths", default="1,2,3,4")
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--batch", default=None, help="comma list (default 1,32 on CUDA, 1 on CPU)")
    parser.add_argument("--verifiers", default=None, help="comma list (default: all lossless)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    batches = [int(b) for b in (args.batch or ("1,32" if device.type == "cuda" else "1")).split(",")]
    names = args.verifiers.split(",") if args.verifiers else verifier_names()
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator(device=device).manual_seed(0)
    rows = []
    for batch in batches:
        for paths in [int(k) for k in args.paths.split(",")]:
            tree = correlated_tree(batch, paths, args.depth, args.vocab, dtype, generator, device)
            for name in names:
                try:
                    times = time_step(name, tree, device, generator, args.repeats)
                except ValueError as err:  # a law for small vocabularies only (e.g. khisti)
                    print(f"B={batch:3d} K={paths} {name:12s} skipped: {err}", flush=True)
                    continue
                rows.append({"verifier": name, "batch": batch, "paths": paths,
                             "depth": args.depth, "vocab": args.vocab,
                             "median_ms": 1000 * statistics.median(times),
                             "min_ms": 1000 * min(times)})
                print(f"B={batch:3d} K={paths} {name:12s} {rows[-1]['median_ms']:9.2f} ms "
                      f"(min {rows[-1]['min_ms']:.2f})", flush=True)
            del tree
    result = run_record("verifier step (block_law + sample_block), correlated random rows", device, rows,
                        threads=torch.get_num_threads(), dtype=args.dtype)
    return save_run(result, Path(args.out) if args.out
                    else RESULTS / f"bench_gpu_verify_{device.type}.json")


if __name__ == "__main__":
    main()
