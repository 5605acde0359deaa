"""Paired decoding comparisons on real models (`speclp bench`), with confidence intervals.

One RUN per (T, L, K): the prompts are decoded in batches by the speculative engine with
one DRIVING verifier; at every step every SCORED verifier's exact conditional
E[tau + 1 | drafted tree] is computed on the same tree (`decode.engine`, paired
scoring). All verifiers are lossless, so the committed text is target sampling whoever
drives, and the scores of different verifiers are paired (same trees, same contexts).

Per prompt the record holds the sums over its steps: row_steps, each scored verifier's sum
of E[tau + 1 | tree], the driver's realised accepted + 1 and generated tokens. Summaries
(`summarize_bench`) estimate, per run and verifier, the mean E[tau + 1] per step as
sum over prompts / sum of steps, with a 95% percentile bootstrap interval over prompts;
the paired difference (verifier - bv) and relative gain (verifier / bv - 1) get the same
treatment. Timing (decode tokens/s, time split) is the driver's, per batch.

Records: one JSON line per (run settings, prompt) in ``<out>/<pair>.jsonl``, appended as
soon as a batch finishes; a rerun skips recorded (settings, prompt) pairs (resumable).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .intervals import bootstrap_ratio, bootstrap_relative
from .store import record_key as settings_key

# Fields that identify a run (with the prompt id they identify a record).
CONFIG_KEYS = (
    "pair",
    "drive",
    "paths",
    "depth",
    "temperature",
    "top_p",
    "draft_temperature",
    "max_new_tokens",
    "dtype",
    "device",
    "seed",
    "batch",
    "scored",
    "score_dtype",
)
REFERENCE = "bv"  # paired differences are taken against this verifier when it is scored
TIMING_KEYS = ("decode_s", "prefill_s", "draft_s", "target_s", "verifier_s", "other_s", "score_s")


def record_key(record: dict[str, Any]) -> str:
    """A run's settings, the prompt id and the digest of the prompt's text (store.record_key)."""
    return settings_key({**{k: record.get(k) for k in CONFIG_KEYS}, "prompt_id": record["prompt_id"],
                         "prompt_digest": record.get("prompt_digest")})


def text_digest(text: str) -> str:
    """Short sha256 of a prompt's text (an edited prompt file changes the key)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def paired_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of paired runs (older single-verifier records are left out)."""
    return [r for r in records if "scores" in r and "drive" in r]


def run_bench(
    load: Callable[[], Any],
    pair_name: str,
    prompts: list[dict[str, Any]],
    paths: list[int],
    depths: list[int],
    temperatures: list[float],
    scored: list[str],
    out_file: Path,
    *,
    drive: str = "gbv",
    top_p: float = 1.0,
    draft_temperature: float | None = None,
    max_new_tokens: int = 32,
    batch: int = 8,
    seed: int = 0,
    dtype: str | None = None,
    device: str | None = None,
    score_dtype: str = "fp32",
    baseline: bool = False,
    progress: Callable[[Iterable[Any], int], Iterable[Any]] = lambda it, total: it,
) -> dict[str, Any]:
    """Run (or resume) paired decoding runs; returns {file, computed, reused}.

    load() -> ModelPair (called only when something must be computed). prompts:
    [{"id", "text"}] (tokenized with the target's tokenizer). For a single model (its own
    draft) the draft temperature defaults to 1.5 T (1.0 at T = 0). baseline: also decode
    autoregressively (drive "autoregressive", K = L = 0) for tokens/s. dtype and device
    ("auto"/None: the defaults for the device) are resolved before records are keyed, so
    a key names the dtype and device actually used.
    """
    import torch

    from ..decode.engine import (
        EngineConfig,
        PrefixStore,
        SpeculativeEngine,
        generate_autoregressive,
    )
    from ..decode.models import default_device, default_dtype, parse_dtype

    run_device = torch.device(device) if device else default_device()
    run_dtype = str(parse_dtype(dtype) or default_dtype(run_device)).removeprefix("torch.")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    done = {record_key(r) for r in load_records(out_file.parent) if r.get("pair") == pair_name}
    score_torch = {"fp32": torch.float32, "fp64": torch.float64}[score_dtype]
    batches = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    runs = [(t, d, k) for t in temperatures for d in depths for k in paths]
    if baseline:
        runs += [(t, 0, 0) for t in temperatures]
    jobs = [(group, run) for group in batches for run in runs]  # prompt-major: resumable
    pair = None
    store = None
    computed = 0
    with open(out_file, "a") as sink:
        for group, (temperature, depth, k) in progress(jobs, len(jobs)):
            autoregressive = depth == 0
            base = {
                "pair": pair_name, "drive": "autoregressive" if autoregressive else drive,
                "paths": k, "depth": depth, "temperature": temperature, "top_p": top_p,
                "draft_temperature": None if autoregressive else draft_temperature,
                "max_new_tokens": max_new_tokens, "dtype": run_dtype,
                "device": str(run_device), "seed": seed, "batch": batch,
                "scored": [] if autoregressive else sorted(scored),
                "score_dtype": None if autoregressive else score_dtype,
            }
            todo = [p for p in group
                    if record_key({**base, "prompt_id": p["id"], "prompt_digest": text_digest(p["text"])})
                    not in done]
            if not todo:
                continue
            if pair is None:
                pair = load()
                store = PrefixStore()
            draft_t = draft_temperature
            if draft_t is None and pair.same_model:  # a single model is its own draft
                draft_t = 1.5 * temperature if temperature > 0 else 1.0
            tokens = [pair.target.tokenizer.encode(p["text"]) for p in todo]
            digest = hashlib.sha256(json.dumps([base["drive"], k, depth, temperature,
                                                [p["id"] for p in todo]]).encode()).digest()
            generator = torch.Generator(device=pair.target.device)
            generator.manual_seed(seed * 1_000_003 + int.from_bytes(digest[:6], "little"))
            start = time.perf_counter()
            if autoregressive:
                result = generate_autoregressive(pair.target, tokens, temperature, top_p,
                                                 max_new_tokens, generator=generator)
            else:
                config = EngineConfig(paths=k, depth=depth, temperature=temperature, top_p=top_p,
                                      draft_temperature=draft_t, max_new_tokens=max_new_tokens,
                                      score=tuple(sorted(scored)), score_dtype=score_torch)
                engine = SpeculativeEngine(pair.target, pair.draft, drive, config, prefix_store=store)
                result = engine.generate(tokens, generator=generator)
            wall = time.perf_counter() - start
            m = result.metrics
            batch_view = {key: m.get(key) for key in (*TIMING_KEYS, "target_calls", "row_steps",
                                                       "generated_tokens", "target_nodes_per_call",
                                                       "draft_forwards", "peak_memory_mb",
                                                       "peak_memory_kind", "score_seconds")}
            batch_view["wall_s"] = wall
            batch_view["prompts"] = [p["id"] for p in todo]
            batch_id = hashlib.sha256(json.dumps([base, batch_view["prompts"], time.time()])
                                      .encode()).hexdigest()[:12]
            for b, prompt in enumerate(todo):
                if autoregressive:
                    count = len(result.tokens[b])
                    own = {"row_steps": count, "accepted_plus_one": count, "generated_tokens": count,
                           "scores": {}, "expected_block_efficiency": float(count)}
                else:
                    own = m["per_prompt"][b]
                record = {
                    **base, "prompt_id": prompt["id"], "prompt_digest": text_digest(prompt["text"]),
                    "label": pair.label,
                    "draft_temperature_used": None if autoregressive else (
                        temperature if draft_t is None else draft_t),
                    "prompt_tokens": len(tokens[b]),
                    "row_steps": own["row_steps"],
                    "accepted_plus_one": own["accepted_plus_one"],
                    "generated_tokens": own["generated_tokens"],
                    "expected_block_efficiency_sum": own["expected_block_efficiency"],
                    "scores": own["scores"],
                    "batch_id": batch_id, "batch_metrics": batch_view,
                    "model_dtype": str(pair.target.model.dtype),
                    "threads": torch.get_num_threads(),
                    "output": pair.target.tokenizer.decode(result.tokens[b]),
                    "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
                sink.write(json.dumps(record) + "\n")
                done.add(record_key(record))
                computed += 1
            sink.flush()
    total = len(prompts) * len(runs)
    return {"file": str(out_file), "computed": computed, "reused": total - computed}


def summarize_bench(records: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Per run (settings without the prompt): intervals over prompts (module docstring).

    Keys: the CONFIG_KEYS, label, prompts, row_steps, generated_tokens, verifiers
    {name: bootstrap record of E[tau + 1] per step}, realised (driver: accepted + 1 per step),
    tokens_per_call (generated / steps, truncation included), differences and relative
    {name: vs bv}, decode_tokens_per_s, ms_per_token, time shares, score_ms_per_step
    {name: law time per step}.
    """
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in paired_records(records):
        groups[json.dumps([r.get(k) for k in CONFIG_KEYS])].append(r)
    rows = []
    for key, recs in groups.items():
        steps = np.array([r["row_steps"] for r in recs], dtype=np.float64)
        scored = sorted(recs[0]["scores"])
        sums = {n: np.array([r["scores"][n] for r in recs]) for n in scored}
        verifiers = {n: bootstrap_ratio(sums[n], steps, seed=seed) for n in scored}
        differences, relative = {}, {}
        if REFERENCE in sums:
            for n in scored:
                if n != REFERENCE:
                    differences[n] = bootstrap_ratio(sums[n] - sums[REFERENCE], steps, seed=seed)
                    relative[n] = bootstrap_relative(sums[n], sums[REFERENCE], seed=seed)
        batches = {r["batch_id"]: r["batch_metrics"] for r in recs}
        decode = sum(b["decode_s"] for b in batches.values())
        tokens = sum(r["generated_tokens"] for r in recs)
        law_seconds: dict[str, float] = defaultdict(float)
        for b in batches.values():
            for n, sec in (b.get("score_seconds") or {}).items():
                law_seconds[n] += sec
        rows.append({
            **dict(zip(CONFIG_KEYS, json.loads(key), strict=True)),
            "label": recs[0].get("label"),
            "prompts": len(recs),
            "row_steps": int(steps.sum()),
            "generated_tokens": tokens,
            "verifiers": verifiers,
            "realised": bootstrap_ratio([r["accepted_plus_one"] for r in recs], steps, seed=seed),
            "tokens_per_call": tokens / max(steps.sum(), 1),
            "differences": differences,
            "relative": relative,
            "decode_tokens_per_s": tokens / max(decode, 1e-12),
            "ms_per_token": 1000 * decode / max(tokens, 1),
            **{f"{p}_share": sum(b[f"{p}_s"] for b in batches.values()) / max(decode, 1e-12)
               for p in ("draft", "target", "verifier")},
            "score_ms_per_step": {n: 1000 * s / max(steps.sum(), 1) for n, s in law_seconds.items()},
            "batches": len(batches),
        })
    rows.sort(key=lambda r: (str(r["pair"]), r["temperature"], r["depth"], r["paths"]))
    return rows




