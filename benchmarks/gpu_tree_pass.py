"""Target tree-pass time for the Qwen2.5-1.5B architecture (random weights, config only).

The pass is the engine's: one forward over the pending token and the distinct nodes of K
drafted paths of depth L (tree attention mask, position ids = context + depth) on top of
a prefilled context of C tokens, then the tentative slots are dropped again. Distinct
random paths are drafted, so the node count is the worst case 1 + K L.

    python benchmarks/gpu_tree_pass.py                  # bf16 on CUDA, fp32 on CPU
    python benchmarks/gpu_tree_pass.py --layers 4       # a slice of the model (CPU, small)

Writes benchmarks/results/bench_gpu_tree_pass_<device>.json. With --layers < 28 the
time is also reported scaled to 28 layers (per-layer cost x 28 + the measured head),
marked as an extrapolation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from speclp.decode.engine import SlotCache, build_tree, chain_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device import pick_device, run_record, save_run, synced_seconds  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

QWEN25_15B = dict(vocab_size=151_936, hidden_size=1536, intermediate_size=8960,
                  num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                  max_position_embeddings=32_768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True)


def build_model(layers: int, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**{**QWEN25_15B, "num_hidden_layers": layers})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval()


@torch.inference_mode()
def time_tree_pass(model, context: int, paths: int, depth: int, device: torch.device,
                   repeats: int, generator: torch.Generator) -> tuple[list[float], int]:
    """Seconds per tree pass (after one warm-up) and the number of nodes."""
    vocab = model.config.vocab_size
    cache = SlotCache(model, 1, device)
    prompt = torch.randint(0, vocab, (context,), generator=generator, device=device).tolist()
    tokens, positions, mask, real = chain_inputs([prompt[:-1]], torch.zeros(1, dtype=torch.long,
                                                                          device=device), device)
    cache.forward(tokens, positions, mask, last_only=True)
    cache.commit(torch.where(real, torch.arange(tokens.shape[1], device=device), -1))
    cache.compact()
    drafted = torch.randint(0, vocab, (1, paths, depth), generator=generator, device=device)
    tree = build_tree(drafted)
    node_tokens, node_depth, ancestor, node_real = tree.tokens, tree.depth, tree.ancestor, tree.real
    node_tokens[:, 0] = prompt[-1]

    def tree_pass() -> None:
        logits = cache.forward(node_tokens, context - 1 + node_depth, ancestor)
        torch.softmax(logits.float(), -1)  # the engine turns every node into a row

    times = []
    for i in range(repeats + 1):
        seconds = synced_seconds(tree_pass, device)
        if i:
            times.append(seconds)
        cache.compact()  # drop the tentative slots
    return times, int(node_real.sum())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default="1,2,3,4")
    parser.add_argument("--depths", default="1,2,4,8")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, help="default bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype) if args.dtype else (
        torch.bfloat16 if device.type == "cuda" else torch.float32)
    model = build_model(args.layers, dtype, device)
    generator = torch.Generator(device=device).manual_seed(0)
    # the head (embedding + final norm + lm_head) measured with a 0-layer model is what does
    # not scale with depth; the rest is per-layer cost
    head_model = build_model(0, dtype, device) if args.layers < QWEN25_15B["num_hidden_layers"] \
        else None
    rows = []
    configs = sorted({(k, depth) for k in map(int, args.paths.split(","))
                      for depth in map(int, args.depths.split(","))})
    for paths, depth in configs:
        times, nodes = time_tree_pass(model, args.context, paths, depth, device, args.repeats,
                                      generator)
        row = {"paths": paths, "depth": depth, "nodes": nodes, "context": args.context,
               "layers": args.layers, "median_ms": 1000 * statistics.median(times),
               "min_ms": 1000 * min(times)}
        if head_model is not None:
            head, _ = time_tree_pass(head_model, args.context, paths, depth, device,
                                     args.repeats, generator)
            per_layer = (row["median_ms"] - 1000 * statistics.median(head)) / args.layers
            row["head_ms"] = 1000 * statistics.median(head)
            row["extrapolated_28_layers_ms"] = row["head_ms"] + 28 * per_layer
        rows.append(row)
        extra = (f", ~{row['extrapolated_28_layers_ms']:.0f} ms at 28 layers"
                 if "extrapolated_28_layers_ms" in row else "")
        print(f"K={paths} L={depth} nodes={nodes:3d} {row['median_ms']:9.1f} ms{extra}", flush=True)
    result = run_record("target tree pass, Qwen2.5-1.5B architecture, random weights", device,
                        rows, dtype=str(dtype), threads=torch.get_num_threads())
    return save_run(result, Path(args.out) if args.out
                    else RESULTS / f"bench_gpu_tree_pass_{device.type}.json")


if __name__ == "__main__":
    main()
