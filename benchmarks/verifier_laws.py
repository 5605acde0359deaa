"""Benchmark of the exact verifier laws (CPU).

1. Exact enumeration: every verifier's law over all 262,144 ordered draft configurations
   of a V = 4, L = 3, K = 3 instance (law only, and the whole `exact_result`:
   enumeration + law + aggregation + TV), with the exact block efficiency and TV.
2. Engine sizes: one batch row, K = 3 paths, L = 8, V = 151,936 (Qwen vocabulary),
   float32 rows: wall time of each law, relative to BV.

    python benchmarks/verifier_laws.py [--threads 1] [--repeats 3]

Writes benchmarks/results/verifier_laws.json and .md. Timings are the minimum over
repeats, with torch limited to --threads threads (default 1: on a shared 2-core machine
intra-op threads make every small op ~100x slower).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.exact import configurations, draft_tree, exact_result
from speclp.verifiers.law import DraftTree
from speclp.verifiers.registry import block_law, verifier_names

RESULTS = Path(__file__).resolve().parent / "results"


def best_time(fn, repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def exact_enumeration(names: list[str], repeats: int) -> list[dict[str, Any]]:
    instance = dirichlet_instance(4, 3, alpha=0.5, seed=0)
    model = instance.model()
    configs = configurations(model, 3)
    tree = draft_tree(model, configs.tokens)
    rows = []
    for name in names:
        law_s = best_time(lambda n=name: block_law(n, tree), repeats)
        start = time.perf_counter()
        result = exact_result(model, name, paths=3)
        total_s = time.perf_counter() - start
        rows.append({"verifier": name, "configurations": result.configurations,
                     "law_s": law_s, "exact_result_s": total_s,
                     "block_efficiency": float(result.block_efficiency),
                     "total_variation": result.total_variation})
        print(f"exact  {name:12s} law {law_s:7.3f} s  exact_result {total_s:7.3f} s  "
              f"BE {float(result.block_efficiency):.6f}  TV {result.total_variation:.1e}")
    return rows


def engine_sizes(names: list[str], repeats: int, vocab: int = 151_936, paths: int = 3,
                 depth: int = 8, batch: int = 1) -> list[dict[str, Any]]:
    generator = torch.Generator().manual_seed(0)
    target = torch.softmax(2 * torch.randn(batch, 1, depth + 1, vocab, generator=generator), -1)
    draft = torch.softmax(2 * torch.randn(batch, 1, depth, vocab, generator=generator), -1)
    # K paths that share the first token (a tree, not K disjoint chains); equal prefixes,
    # equal rows: every path reads the rows of path 0 (the law only needs consistency).
    tokens = torch.multinomial(draft[:, 0, 0], paths, replacement=True, generator=generator)
    tokens = tokens[:, :, None].repeat(1, 1, depth)
    tokens[:, :, 1:] = torch.randint(0, vocab, (batch, paths, depth - 1), generator=generator)
    tokens[:, 1, 0] = tokens[:, 0, 0]
    tree = DraftTree(tokens, target.expand(batch, paths, depth + 1, vocab).contiguous(),
                     draft.expand(batch, paths, depth, vocab).contiguous())
    base = best_time(lambda: block_law("bv", tree), repeats)
    rows = []
    for name in names:
        try:
            seconds = base if name == "bv" else best_time(lambda n=name: block_law(n, tree), repeats)
        except ValueError as err:  # a law for small vocabularies only (e.g. khisti)
            print(f"engine {name:12s} skipped: {err}")
            continue
        rows.append({"verifier": name, "seconds": seconds, "relative_to_bv": seconds / base})
        print(f"engine {name:12s} {seconds * 1e3:9.2f} ms  {seconds / base:6.1f} x BV")
    return rows


def write_markdown(report: dict[str, Any], path: Path) -> None:
    lines = ["# Verifier law benchmark", "",
             f"Machine: {report['machine']}; torch {report['torch']}, {report['threads']} "
             f"thread(s); load average at start {report['load_average']}.", "",
             "## Exact enumeration (V = 4, L = 3, K = 3, 262,144 ordered configurations)", "",
             "| verifier | law (s) | exact_result (s) | block efficiency | TV |",
             "|---|---|---|---|---|"]
    for row in report["exact"]:
        lines.append(f"| {row['verifier']} | {row['law_s']:.3f} | {row['exact_result_s']:.3f} | "
                     f"{row['block_efficiency']:.6f} | {row['total_variation']:.1e} |")
    lines += ["", "## Engine sizes (B = 1, K = 3, L = 8, V = 151,936, float32)", "",
              "| verifier | ms | x BV |", "|---|---|---|"]
    for row in report["engine"]:
        lines.append(f"| {row['verifier']} | {row['seconds'] * 1e3:.2f} | "
                     f"{row['relative_to_bv']:.1f} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = verifier_names(include_broken=False)
    report: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__, "threads": args.threads,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    report["exact"] = exact_enumeration(names, args.repeats)
    report["engine"] = engine_sizes(names, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verifier_laws.json").write_text(json.dumps(report, indent=1))
    write_markdown(report, args.out / "verifier_laws.md")
    print(f"saved {args.out / 'verifier_laws.json'} and .md")


if __name__ == "__main__":
    main()
