"""Verifier step times at a real vocabulary: BV, GBV, nodeopt, SpecInfer and extended BV side by
side (issue 20, part 3; issue 31, part 3: bv_extended and bv_extended_rrs).

One "step" = block_law + sample_block on one DraftTree (what the engine calls once per target
pass). Rows: the synthetic correlated rows of benchmarks/beyond_step.py (softmax(3 N(0,1))
target, draft = softmax(logits/1.3 + 0.5 N(0,1)); real-model shapes, not real-model rows).
Every configuration (threads x dtype x K x L) times all verifiers in INTERLEAVED rounds
(rotating order), so load on a shared machine hits them alike; a ratio is the median over
the rounds of the per-round ratios (with min and max). "bv_before" is BV as it was before
issue 20 (zeroed K-path rows, safe_div residuals, stacked rows; kept here only, as the
before/after baseline of BV's own step in the same run).

Breakdown (K = 3, L = 8 unless set): sampling = sample_block alone on a ready law;
GBV: sort = its L key sorts (key_order) alone; nodeopt: cells = ratio_cells of the K L node
rows, rules = the node rules for n = 1..K on those cells, bv = BV on the K paths.
On CUDA: the same, plus the achieved bandwidth (bytes of the K(L+1) target and KL draft rows
read once / median step) against the device's peak if known (--peak-gbs).

    nice -n 15 python benchmarks/verifier_step.py --out benchmarks/results/beyond/verifier_step.json
    python benchmarks/verifier_step.py --threads 1 --dtypes float32 --paths 3 --depths 8 --rounds 3
    python benchmarks/verifier_step.py --threads 1 --dtypes float32 --paths 3 --depths 8 --rounds 5 \
        --verifiers bv,bv_extended,bv_extended_rrs --no-breakdown \
        --out benchmarks/results/beyond/verifier_step_extended.json

Extended BV's floor at this size (issue 31, part 3): its exact law has a residual row at
every (path, depth) where a block can end, K L rows where BV has L (docs/theory.md Lemma 19.4:
each path's BV runs once, from its own fresh-start depth), and without a host synchronisation
the shapes cannot depend on where the paths split, so all K L rows are built: about K times
BV's law before any fallback step (the step itself runs at floor(K/2) L fallback slots).
At K = 3 that alone is about the 2x budget; the record says how far above it the step is.

Prints a table; with --out saves the JSON and the figure (experiments/plots/steps.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from speclp.verifiers import ops
from speclp.verifiers.gbv import key_order, ratio_row
from speclp.verifiers.law import BlockLaw, DraftTree, sample_block
from speclp.verifiers.nodeopt import DEFAULT_SUPPORT, node_rules
from speclp.verifiers.registry import block_law
from speclp.verifiers.single_path import bv_path_law
from speclp.verifiers.single_step import ratio_cells

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device import device_name, pick_device, synced_seconds  # noqa: E402
from beyond_step import correlated_tree  # noqa: E402

VERIFIERS = ("bv_before", "bv", "gbv", "nodeopt", "specinfer", "bv_extended", "bv_extended_rrs")
# issues 20 and 31: step <= 2x BV's at K = 3, L = 8, 1 thread
TARGETS = {"gbv": 2.0, "nodeopt": 2.0, "bv_extended": 2.0, "bv_extended_rrs": 2.0}


def bv_before(tree: DraftTree) -> BlockLaw:
    """BV's law as computed before issue 20 (the baseline of BV's own step)."""
    tokens, target, draft = tree.tokens[:, 0], tree.target_rows[:, 0], tree.draft_rows[:, 0]
    depth = tokens.shape[-1]
    index = tokens[..., None]
    q_drafted = draft.gather(-1, index)[..., 0]
    p_drafted = target[:, :depth].gather(-1, index)[..., 0]
    ratio = ops.safe_div(p_drafted, q_drafted)
    weights = [torch.ones_like(q_drafted[:, 0])]
    for i in range(depth):
        weights.append(torch.minimum(weights[-1] * ratio[:, i], torch.ones_like(ratio[:, i])))
    residuals, stop_probs = [], []
    for i in range(depth):
        raw = (weights[i][:, None] * target[:, i] - draft[:, i]).clamp_min(0)
        mass = raw.sum(-1)
        residuals.append(ops.safe_div(raw, mass[:, None]))
        stop_probs.append(ops.safe_div(mass, mass + 1 - weights[i]))
    residuals.append(target[:, depth])
    stop_probs.append(weights[depth])
    stop, survive = [], torch.ones_like(q_drafted[:, 0])
    for i in range(depth, 0, -1):
        stop.append(stop_probs[i] * survive)
        survive = survive * (1 - stop_probs[i])
    stop.append(survive)
    stop.reverse()
    batch, paths, _ = tree.tokens.shape
    like = {"dtype": q_drafted.dtype, "device": q_drafted.device}
    out_stop = torch.zeros(batch, paths, depth + 1, **like)
    out_rows = torch.zeros(batch, paths, depth + 1, tree.vocab_size, **like)
    out_stop[:, 0] = torch.stack(stop, 1)
    out_rows[:, 0] = torch.stack(residuals, 1)
    return BlockLaw(out_stop, out_rows)


def law_of(name: str, tree: DraftTree) -> BlockLaw:
    return bv_before(tree) if name == "bv_before" else block_law(name, tree)


def summary(times: list[float]) -> dict[str, float]:
    return {"median_ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times),
            "max_ms": 1000 * max(times)}


def measure(tree: DraftTree, rounds: int, generator: torch.Generator, device: torch.device,
            verifiers: tuple[str, ...] = VERIFIERS) -> dict[str, Any]:
    """Interleaved rounds of every verifier's step on one tree."""
    for name in verifiers:  # warm-up
        synced_seconds(lambda name=name: sample_block(law_of(name, tree), generator), device)
    times: dict[str, list[float]] = {name: [] for name in verifiers}
    for r in range(rounds):
        for j in range(len(verifiers)):
            name = verifiers[(r + j) % len(verifiers)]
            times[name].append(synced_seconds(
                lambda name=name: sample_block(law_of(name, tree), generator), device))
    ratios = {}
    for name in verifiers:
        per_round = [a / b for a, b in zip(times[name], times["bv"], strict=True)]
        ratios[name] = {"median": statistics.median(per_round), "min": min(per_round),
                        "max": max(per_round)}
    return {"verifiers": {name: summary(t) for name, t in times.items()},
            "over_bv": ratios}


def breakdown(tree: DraftTree, rounds: int, generator: torch.Generator, device: torch.device
              ) -> dict[str, Any]:
    """Parts of the steps (module docstring), median ms over `rounds`."""
    batch, paths, depth, vocab = tree.batch, tree.paths, tree.depth, tree.vocab_size
    law = block_law("bv", tree)
    q_rows, p_rows = tree.draft_rows[:, 0], tree.target_rows[:, 0, :depth]
    node_a = tree.target_rows[:, :, :depth].reshape(-1, vocab)
    node_q = tree.draft_rows.reshape(-1, vocab)
    cells = ratio_cells(node_a, node_q, DEFAULT_SUPPORT)
    skewed = tree.draft_rows.reshape(batch * paths, depth, vocab)
    tokens = tree.tokens.reshape(batch * paths, depth)
    target = tree.target_rows.reshape(batch * paths, depth + 1, vocab)
    parts = {
        "sampling (sample_block)": lambda: sample_block(law, generator),
        "gbv: L key sorts": lambda: [key_order(ratio_row(p_rows[:, i], q_rows[:, i]))
                                     for i in range(depth)],
        "nodeopt: cells (K L rows)": lambda: ratio_cells(node_a, node_q, DEFAULT_SUPPORT),
        "nodeopt: node rules n = 1..K": lambda: node_rules(node_a, node_q, paths, cells),
        "nodeopt: BV on the K paths": lambda: bv_path_law(tokens, target, skewed),
    }
    out = {}
    for name, fn in parts.items():
        fn()
        out[name] = 1000 * statistics.median(synced_seconds(fn, device) for _ in range(rounds))
    return out


def grid(args: argparse.Namespace) -> list[tuple[int, str, int, int]]:
    """(threads, dtype, K, L) in the order run: the target's configuration first (1 thread,
    float32, K = 3, L = 8), so that an interrupted run has it."""
    cells = [(t, d, k, l) for t in map(int, args.threads.split(","))
             for d in args.dtypes.split(",") for k in map(int, args.paths.split(","))
             for l in map(int, args.depths.split(","))]
    return sorted(cells, key=lambda c: c != (1, "float32", 3, 8))


def run(args: argparse.Namespace, save=None) -> dict[str, Any]:
    """Every configuration of the grid; save(result) after each one (partial results)."""
    device = pick_device(args.device)
    result = {"benchmark": "verifier step (block_law + sample_block), interleaved rounds",
              "rows": "synthetic: softmax(3 N(0,1)) target, draft = softmax(logits/1.3 + "
                      "0.5 N(0,1)); real-model shapes, not real-model rows",
              "vocab": args.vocab, "batch": 1, "rounds": args.rounds, "device": str(device),
              "device_name": device_name(device),
              "peak_gbs": args.peak_gbs, "torch": torch.__version__,
              "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "targets": {f"{k} <= {v}x BV at K=3, L=8, 1 thread, float32": v
                          for k, v in TARGETS.items()},
              "configs": []}
    torch.set_num_threads(1)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    tree = correlated_tree(1, 3, 8, args.vocab, torch.float32, generator, device)
    if args.breakdown:
        result["breakdown_K3_L8_float32_1thread_ms"] = breakdown(tree, args.rounds, generator,
                                                                 device)
    for threads, dtype, paths, depth in grid(args):
        torch.set_num_threads(threads)
        generator = torch.Generator(device=device).manual_seed(args.seed)
        tree = correlated_tree(1, paths, depth, args.vocab, getattr(torch, dtype), generator,
                               device)
        record = {"threads": threads, "dtype": dtype, "paths": paths, "depth": depth,
                  **measure(tree, args.rounds, generator, device, args.verifiers)}
        if device.type == "cuda":
            size = torch.finfo(getattr(torch, dtype)).bits // 8
            read = size * args.vocab * paths * (2 * depth + 1)
            record["rows_read_bytes"] = read
            record["achieved_gbs"] = {name: read / (v["median_ms"] / 1000) / 1e9
                                      for name, v in record["verifiers"].items()}
        result["configs"].append(record)
        line = "  ".join(f"{n} {v['median_ms']:.1f}" for n, v in record["verifiers"].items())
        print(f"threads {threads} {dtype} K={paths} L={depth}: {line} ms", flush=True)
        result["target_lines"] = target_lines(result)
        if save is not None:
            save(result)
    torch.set_num_threads(1)
    return result


def target_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for record in result["configs"]:
        if (record["threads"], record["dtype"], record["paths"], record["depth"]) != (
                1, "float32", 3, 8):
            continue
        for name, limit in TARGETS.items():
            if name not in record["over_bv"]:
                continue
            ratio = record["over_bv"][name]
            lines.append(f"{name}/bv at K=3, L=8, 1 thread, float32: median {ratio['median']:.2f}"
                         f" (min {ratio['min']:.2f}, max {ratio['max']:.2f}); target <= {limit}: "
                         f"{'met' if ratio['median'] <= limit else 'NOT met'}")
        if "bv_before" in record["over_bv"]:
            before = record["over_bv"]["bv_before"]
            lines.append(f"bv_before/bv: median {before['median']:.2f} (BV's own step before/after)")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--paths", default="2,3,4")
    parser.add_argument("--depths", default="4,8")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--peak-gbs", type=float, default=None,
                        help="the device's peak memory bandwidth (GB/s), recorded beside")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON path (figure beside it)")
    parser.add_argument("--verifiers", default=",".join(VERIFIERS),
                        help="comma-separated, timed side by side (bv is always included)")
    parser.add_argument("--no-breakdown", dest="breakdown", action="store_false",
                        help="skip the per-part breakdown of GBV's and nodeopt's steps")
    args = parser.parse_args(argv)
    names = [n for n in args.verifiers.split(",") if n]
    unknown = [n for n in names if n not in VERIFIERS]
    if unknown:
        parser.error(f"--verifiers: unknown {unknown}; known: {', '.join(VERIFIERS)}")
    args.verifiers = tuple(dict.fromkeys(["bv", *names]))
    out = Path(args.out) if args.out else None

    def save(result: dict[str, Any]) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")

    result = run(args, save if out else None)
    result["target_lines"] = target_lines(result)
    print("\n".join(result["target_lines"]))
    print(json.dumps(result.get("breakdown_K3_L8_float32_1thread_ms", {}), indent=1))
    if out:
        from speclp.experiments.plots.steps import plot_steps  # lazy: matplotlib, figures only

        result["figures"] = plot_steps(result, out.parent, out.stem)
        save(result)
        print(f"saved {out} and {result['figures']}")
    return result


if __name__ == "__main__":
    main()
