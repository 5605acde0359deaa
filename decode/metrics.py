"""Timing and metrics of a generate call (per-phase clocks, peak memory, the metrics dict)."""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

import torch


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """Peak memory: CUDA max allocated (reset per run) or the process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if sys.platform != "darwin" else rss / 2**20, "process_peak_rss"


class StepClock:
    """Seconds per phase of one step (a device sync before each reading on CUDA when timed:
    a timing sync, not a host read)."""

    def __init__(self, device: torch.device, synchronize: bool = True):
        self.device, self.synchronize = device, synchronize
        self.laps: dict[str, float] = {}
        self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.synchronize:
            _synchronize(self.device)
        now = time.perf_counter()
        self.laps[name] = now - self.last
        self.last = now


def step_metrics(engine: Any, state: Any, decode_s: float) -> dict[str, Any]:
    """Metrics of a generate call, from its per-step records (state.log).

    generated_tokens, target_calls (tree passes, prefill excluded), row_steps (sum of active
    rows over the calls), block_efficiency (mean tau + 1 per row-step, before truncation at
    EOS / max_new_tokens), expected_block_efficiency (mean of the law's exact E[tau + 1]
    given the drafted tree: same mean, lower variance), tokens_per_call (generated /
    row_steps), accepted_histogram (tau = 0..L), prefill_s, decode_s (scoring excluded),
    draft_s, target_s, verifier_s, other_s, tokens_per_s (generated / (prefill + decode)),
    decode_tokens_per_s, ms_per_token (decode), target_nodes_per_call (mean nodes per row in
    the tree pass, pending included), draft_forwards, prefill_reused, peak_memory_mb and
    peak_memory_kind; score_s, score_seconds {verifier: seconds in its law}; per_prompt: per
    prompt row_steps, accepted_plus_one, generated_tokens, expected_block_efficiency and
    scores {verifier: sum of E[tau + 1 | tree]} (and grid {"K,L": {verifier: sum}}); step_log:
    the per-step records (rows, nodes, accepted, seconds per phase, law_s per verifier).
    """
    c, log = engine.config, state.log
    total = {key: sum(s[key] for s in log) for key in ("draft_s", "target_s", "verifier_s",
                                                        "score_s", "other_s", "rows", "nodes")}
    taus = [t for s in log for t in s["accepted"]]
    row_steps = max(total["rows"], 1)
    tokens = sum(len(g) for g in state.generated)
    decode_s -= total["score_s"]  # scoring is not part of decoding
    histogram = [taus.count(t) for t in range(c.depth + 1)]
    for r, entry in enumerate(state.per_prompt):
        entry["generated_tokens"] = len(state.generated[r])
    peak, kind = peak_memory_mb(engine.device)
    return {
        "verifier": engine.verifier, "paths": c.paths, "depth": c.depth,
        "temperature": c.temperature, "top_p": c.top_p,
        "draft_temperature": c.temperature if c.draft_temperature is None else c.draft_temperature,
        "prompts": len(state.generated), "generated_tokens": tokens, "target_calls": len(log),
        "row_steps": total["rows"],
        "block_efficiency": (sum(taus) + len(taus)) / row_steps,
        "expected_block_efficiency": sum(e["expected_block_efficiency"]
                                         for e in state.per_prompt) / row_steps,
        "tokens_per_call": tokens / row_steps, "accepted_histogram": histogram,
        "prefill_s": state.prefill_s, "decode_s": decode_s, "draft_s": total["draft_s"],
        "target_s": total["target_s"], "verifier_s": total["verifier_s"],
        "other_s": total["other_s"],
        "tokens_per_s": tokens / max(decode_s + state.prefill_s, 1e-12),
        "decode_tokens_per_s": tokens / max(decode_s, 1e-12),
        "ms_per_token": 1000 * decode_s / max(tokens, 1),
        "target_nodes_per_call": total["nodes"] / row_steps,
        "draft_forwards": len(log) * c.depth, "prefill_reused": state.prefill_reused,
        "peak_memory_mb": peak, "peak_memory_kind": kind, "device": str(engine.device),
        "score_s": total["score_s"],
        "score_seconds": {n: sum(s["law_s"].get(n, 0.0) for s in log) for n in c.score},
        "score_dtype": str(c.score_dtype) if c.score else None,
        "per_prompt": state.per_prompt, "step_log": log,
    }


def _autoregressive_metrics(generated: list[list[int]], temperature: float, top_p: float,
                            calls: int, row_steps: int, elapsed: float, prefill_s: float,
                            device: torch.device) -> dict[str, Any]:
    """The metrics of SpeculativeEngine.generate for plain target sampling (K = L = 0)."""
    total_tokens = sum(len(g) for g in generated)
    peak, kind = peak_memory_mb(device)
    return {
        "verifier": "autoregressive", "paths": 0, "depth": 0, "temperature": temperature,
        "top_p": top_p, "prompts": len(generated), "generated_tokens": total_tokens,
        "target_calls": calls, "row_steps": row_steps, "block_efficiency": 1.0,
        "expected_block_efficiency": 1.0,
        "tokens_per_call": total_tokens / max(row_steps, 1), "decode_s": elapsed,
        "prefill_s": prefill_s, "target_s": elapsed, "draft_s": 0.0, "verifier_s": 0.0,
        "other_s": 0.0, "tokens_per_s": total_tokens / max(elapsed + prefill_s, 1e-12),
        "decode_tokens_per_s": total_tokens / max(elapsed, 1e-12),
        "ms_per_token": 1000 * elapsed / max(total_tokens, 1), "target_nodes_per_call": 1.0,
        "peak_memory_mb": peak, "peak_memory_kind": kind, "device": str(device),
    }

