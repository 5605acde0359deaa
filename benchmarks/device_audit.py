"""The sampler audit of GBV and nodeopt with their laws computed on a device (issue 20,
part 4): the statistical losslessness audit (speclp.proofs.audit.audit_sampler: chi-square of
the emitted tokens against the target, block efficiency against the certified optimum) of a
sampler that builds every drafted tree on DEVICE, computes the verifier's law there (float32
or float64) and draws the block there. The exact laws on the device are compared with the CPU
by tests/test_devices.py.

    python benchmarks/device_audit.py --device cuda --out benchmarks/results/beyond/device_audit_cuda.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from speclp.proofs.audit import audit_sampler
from speclp.verifiers.law import DraftTree, sample_block
from speclp.verifiers.registry import block_law


def device_sampler(name: str, device: torch.device, dtype: torch.dtype):
    """(target [B, K, L+1, V], draft [B, K, L, V], paths [B, K, L], rng) -> blocks [B, L+1],
    the law and the draw on `device` (examples/law_samplers.py does the same on the CPU)."""

    def sample(target_rows, draft_rows, paths, rng):
        tree = DraftTree(torch.as_tensor(paths, device=device),
                         torch.as_tensor(target_rows, dtype=dtype, device=device),
                         torch.as_tensor(draft_rows, dtype=dtype, device=device))
        generator = torch.Generator(device=device).manual_seed(int(rng.integers(2**63 - 1)))
        path, accepted, token = (t.cpu().numpy() for t in
                                 sample_block(block_law(name, tree), generator))
        batch, depth = paths.shape[0], paths.shape[2]
        blocks = np.full((batch, depth + 1), -1, dtype=np.int64)
        rows = np.arange(batch)
        chosen = paths[rows, path]
        for i in range(depth):
            blocks[:, i] = np.where(accepted > i, chosen[:, i], blocks[:, i])
        blocks[rows, accepted] = token
        return blocks

    sample.__name__ = f"{name}@{device}"
    return sample


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--verifiers", default="gbv,nodeopt")
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    out = {"benchmark": "sampler audit with the law on a device", "device": str(device),
           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
           else "cpu", "dtype": args.dtype, "runs": args.runs, "trials": args.trials,
           "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "audits": {}}
    for name in args.verifiers.split(","):
        start = time.perf_counter()
        report = audit_sampler(device_sampler(name, device, dtype), paths=3, vocab=4, depth=2,
                               trials=args.trials, runs=args.runs, seed=0, name=name)
        out["audits"][name] = {"passed": bool(report["passed"]),
                               "failures": report["failures"],
                               "seconds": round(time.perf_counter() - start, 1)}
        print(name, out["audits"][name], flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
