"""Dump the full rows of a few real-model draft trees, for checking the verifier laws on a GPU
that has no models (issue 33, part 5).

A lent GPU machine reaches no package registry or model hub and receives at most 64 MiB of
files, so no model weights travel there. This script runs a few real speculative-decoding
steps on the CPU (decode.engine, EngineConfig.record_steps: the trees the verifier of a real
run sees, float32 rows) and writes each drafted tree's FULL target and draft rows (float32,
all V columns) with its tokens, compressed (numpy savez_compressed; numeric arrays only, read
back with allow_pickle=False), plus a manifest (models, commit, prompts, temperatures, shapes,
sha256 of every file). benchmarks/gpu_laws.py reads them.

    flock /tmp/heavy.lock taskset -c 0 nice -n 5 python benchmarks/dump_trees.py \
        --prompts humaneval:1 --max-steps 2 --run smollm2-135m:1.0:1 \
        --run qwen2.5-coder:1.0:1 --run qwen2.5-coder:0.6:1:3:3 --out benchmarks/results/gpu/trees

--run PAIR:T:N[:K:L]: N trees of the pair at target temperature T (one file per run; K, L
default to --paths, --depth, at most 4). A single
model drafts for itself at draft temperature 1.5 as `speclp realgap` does
(experiments.realgap.run_identity); a built-in pair drafts at T. Trees are the first steps of the
first prompts (round robin over prompts, so that N trees come from min(N, prompts) prompts).

File layout (one .npz per run; rows stored once per DISTINCT row, bit for bit):
    tokens        int64 [N, K, L]        drafted tokens
    target_nodes  float32 [M, V]         distinct target rows
    target_index  int32 [N, K, L+1]      target_rows = target_nodes[target_index]
    draft_nodes   float32 [M', V]        distinct draft rows
    draft_index   int32 [N, K, L]        draft_rows = draft_nodes[draft_index]
    prompt, step  int32 [N]              which prompt (index into the manifest's) and step
    context       int64 [sum of lengths] the committed tokens before each tree's step,
    context_end   int64 [N]              concatenated (tree n: context[end[n-1]:end[n]])
Paths that share a prefix carry the same rows there (the engine gathers them), so storing
distinct rows halves the size without losing a bit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1
ARRAYS = ("tokens", "target_nodes", "target_index", "draft_nodes", "draft_index", "prompt", "step",
          "context", "context_end")


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes [M, V], index [...]) with rows[...] == nodes[index] bit for bit: equal rows
    (the same bytes) stored once, in order of first appearance."""
    flat = np.ascontiguousarray(rows.reshape(-1, rows.shape[-1]))
    seen: dict[bytes, int] = {}
    index = np.empty(flat.shape[0], dtype=np.int32)
    keep: list[int] = []
    for i, row in enumerate(flat):
        key = hashlib.sha256(row.tobytes()).digest()
        j = seen.get(key)
        if j is None or not np.array_equal(flat[keep[j]].view(np.uint32), row.view(np.uint32)):
            j = seen[key] = len(keep)
            keep.append(i)
        index[i] = j
    return flat[keep], index.reshape(rows.shape[:-1])


def collect_trees(target: Any, draft: Any, prompts: list[list[int]], paths: int, depth: int,
                  temperature: float, draft_temperature: float | None, count: int, seed: int,
                  max_steps: int = 8) -> dict[str, np.ndarray]:
    """The first `count` drafted trees (round robin over prompts, then steps) of a real
    decoding run of target/draft (decode.models.LoadedModel) on `prompts` (token lists),
    as the arrays of the module docstring. Rows are the engine's float32 rows."""
    from speclp.decode.engine import EngineConfig, SpeculativeEngine  # lazy: models extra

    if count < 1:
        raise ValueError(f"count: need >= 1 trees, got {count}")
    config = EngineConfig(paths=paths, depth=depth, temperature=temperature,
                          draft_temperature=draft_temperature, max_new_tokens=max_steps,
                          law_dtype=torch.float32, record_steps=True, time_phases=False)
    engine = SpeculativeEngine(target, draft, verifier="bv", config=config)
    result = engine.generate(prompts, torch.Generator().manual_seed(seed))
    found: dict[int, list[tuple[int, list[int], Any]]] = {}
    for step, record in enumerate(result.steps):
        for b, prompt in enumerate(record.rows):
            found.setdefault(prompt, []).append((step, record.contexts[b], (record.tree, b)))
    picked = []
    for rank in range(max(len(v) for v in found.values())):
        for prompt in sorted(found):
            if rank < len(found[prompt]) and len(picked) < count:
                picked.append((prompt, *found[prompt][rank]))
    if len(picked) < count:
        raise ValueError(f"count: only {len(picked)} trees in {max_steps} steps of "
                         f"{len(prompts)} prompts, asked for {count}")
    tokens = np.stack([t.tokens[b].cpu().numpy() for *_, (t, b) in picked]).astype(np.int64)
    target_rows = np.stack([t.target_rows[b].float().cpu().numpy() for *_, (t, b) in picked])
    draft_rows = np.stack([t.draft_rows[b].float().cpu().numpy() for *_, (t, b) in picked])
    target_nodes, target_index = distinct_rows(target_rows)
    draft_nodes, draft_index = distinct_rows(draft_rows)
    contexts = [np.asarray(c, dtype=np.int64) for _, _, c, _ in picked]
    return {"tokens": tokens, "target_nodes": target_nodes, "target_index": target_index,
            "draft_nodes": draft_nodes, "draft_index": draft_index,
            "prompt": np.array([p for p, *_ in picked], dtype=np.int32),
            "step": np.array([s for _, s, *_ in picked], dtype=np.int32),
            "context": np.concatenate(contexts),
            "context_end": np.cumsum([len(c) for c in contexts]).astype(np.int64)}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_dump(out: Path, name: str, arrays: dict[str, np.ndarray], info: dict[str, Any]
               ) -> dict[str, Any]:
    """Write OUT/NAME.npz (compressed) and return its manifest entry (INFO plus file, bytes,
    sha256 and the shapes)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.npz"
    np.savez_compressed(path, **{k: arrays[k] for k in ARRAYS})
    trees, paths, depth = arrays["tokens"].shape
    return {**info, "file": path.name, "bytes": path.stat().st_size, "sha256": sha256_file(path),
            "trees": trees, "paths": paths, "depth": depth,
            "vocab": int(arrays["target_nodes"].shape[1]),
            "distinct_target_rows": int(arrays["target_nodes"].shape[0]),
            "distinct_draft_rows": int(arrays["draft_nodes"].shape[0]),
            "shapes": {k: list(arrays[k].shape) for k in ARRAYS},
            "dtypes": {k: str(arrays[k].dtype) for k in ARRAYS}}


def write_manifest(out: Path, entries: list[dict[str, Any]], settings: dict[str, Any]) -> Path:
    path = out / "manifest.json"
    path.write_text(json.dumps({"format": FORMAT, "created_by": "benchmarks/dump_trees.py",
                                **settings, "files": entries,
                                "total_bytes": sum(e["bytes"] for e in entries)}, indent=1) + "\n")
    return path


def git_commit() -> str:
    """HEAD of the repository, with "+dirty" when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def parse_run(text: str, paths: int, depth: int) -> tuple[str, float, int, int, int]:
    """PAIR:T:N[:K:L] -> (pair, temperature, trees, K, L); K, L default to --paths, --depth."""
    parts = text.split(":")
    try:
        if len(parts) not in (3, 5):
            raise ValueError
        pair, temperature, count = parts[0], float(parts[1]), int(parts[2])
        if len(parts) == 5:
            paths, depth = int(parts[3]), int(parts[4])
    except ValueError:
        raise SystemExit(f"--run: expected PAIR:T:N or PAIR:T:N:K:L (e.g. smollm2-135m:1.0:4), "
                         f"got {text!r}") from None
    if not pair or not temperature > 0 or count < 1 or not (1 <= paths <= 4 and 1 <= depth <= 4):
        raise SystemExit(f"--run: need a pair, T > 0, N >= 1 and 1 <= K, L <= 4, got {text!r}")
    return pair, temperature, count, paths, depth


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, help="PAIR:T:N[:K:L] (repeatable)")
    parser.add_argument("--prompts", default="humaneval:2", help="as `speclp realgap --prompts`")
    parser.add_argument("--paths", type=int, default=4, help="K of runs that name none (<= 4)")
    parser.add_argument("--depth", type=int, default=4, help="L of runs that name none (<= 4)")
    parser.add_argument("--max-steps", type=int, default=6, help="max new tokens per prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu" / "trees"))
    args = parser.parse_args(argv)
    from speclp.decode.models import load_pair, pair_names
    from speclp.experiments.prompts import read_prompts
    from speclp.experiments.realgap import run_identity  # lazy: models extra

    torch.set_num_threads(args.threads)
    runs = [parse_run(r, args.paths, args.depth) for r in args.run]
    prompts = read_prompts(args.prompts)
    out = Path(args.out)
    entries, loaded = [], {}
    for pair_name, temperature, count, paths, depth in runs:
        label, draft_temperature = run_identity(pair_name, None)
        if pair_name not in loaded:
            loaded[pair_name] = load_pair(pair_name, device="cpu", dtype=torch.float32)
        pair = loaded[pair_name]
        tokens = [pair.target.tokenizer.encode(p["text"]) for p in prompts]
        start = time.perf_counter()
        arrays = collect_trees(pair.target, pair.draft, tokens, paths, depth,
                               temperature, draft_temperature, count, args.seed, args.max_steps)
        seconds = time.perf_counter() - start
        names = pair_names(pair_name) or (pair_name, pair_name)
        info = {"pair": pair_name, "label": label, "target_model": names[0], "draft_model": names[1],
                "temperature": temperature,
                "draft_temperature": temperature if draft_temperature is None else draft_temperature,
                "top_p": 1.0, "row_dtype": "float32",
                "prompts": [{"id": p["id"], "text_sha256": hashlib.sha256(p["text"].encode()).hexdigest(),
                             "tokens": len(t)} for p, t in zip(prompts, tokens, strict=True)],
                "decode_seconds": round(seconds, 1)}
        name = f"{pair_name}_T{temperature:g}_K{paths}L{depth}".replace(".", "_")
        entries.append(write_dump(out, name, arrays, info))
        e = entries[-1]
        print(f"{e['file']}: {e['trees']} trees K={e['paths']} L={e['depth']} V={e['vocab']}, "
              f"{e['distinct_target_rows']} + {e['distinct_draft_rows']} distinct rows, "
              f"{e['bytes'] / 1e6:.1f} MB ({seconds:.0f} s)", flush=True)
    settings = {"commit": git_commit(), "command": "python benchmarks/dump_trees.py "
                + " ".join(sys.argv[1:] if argv is None else argv),
                "prompts_spec": args.prompts, "seed": args.seed, "max_steps": args.max_steps,
                "engine": "decode.engine.SpeculativeEngine, verifier bv drives, record_steps",
                "torch": torch.__version__,
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = write_manifest(out, entries, settings)
    total = sum(e["bytes"] for e in entries)
    print(f"saved {path}: {len(entries)} files, {total / 1e6:.1f} MB in all")
    return json.loads(path.read_text())


if __name__ == "__main__":
    main()
