"""Plain target sampling with the same slot cache and metrics: the baseline for speed-ups."""

from __future__ import annotations

import time

import torch

from .cache import SlotCache, chain_inputs
from .generate import GenerationResult
from .metrics import _autoregressive_metrics, _synchronize
from .models import LoadedModel
from .sampling import probability_rows


@torch.inference_mode()
def generate_autoregressive(
    model: LoadedModel,
    prompts: list[list[int]],
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    eos_token_ids: tuple[int, ...] | None = None,
    generator: torch.Generator | None = None,
) -> GenerationResult:
    """Plain target sampling (one target call per token), the baseline for speed-ups.

    Same slot cache and metrics names as SpeculativeEngine.generate (block efficiency 1).
    """
    device = model.device
    eos = set(eos_token_ids if eos_token_ids is not None else model.eos_token_ids)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    batch = len(prompts)
    committed = [list(p) for p in prompts]
    generated: list[list[int]] = [[] for _ in prompts]
    active = list(range(batch))
    _synchronize(device)
    t_start = time.perf_counter()
    cache = SlotCache(model.model, batch, device)
    heads = [p[:-1] for p in prompts]
    if max(len(h) for h in heads) > 0:
        tokens, positions, new_mask, real = chain_inputs(
            heads, torch.zeros(batch, dtype=torch.long, device=device), device
        )
        cache.forward(tokens, positions, new_mask, last_only=True)
        cache.commit(torch.where(real, torch.arange(tokens.shape[1], device=device), -1))
        cache.compact()
    lengths = torch.tensor([len(p) - 1 for p in prompts], dtype=torch.long, device=device)
    uncached = [[p[-1]] for p in prompts]
    _synchronize(device)
    t0 = time.perf_counter()
    prefill_s = t0 - t_start
    calls = row_steps = 0
    while active:
        tokens, positions, new_mask, real = chain_inputs(uncached, lengths, device)
        base = cache.slots
        logits = cache.forward(tokens, positions, new_mask, last_only=True)[:, -1]
        cache.commit(torch.where(real, base + torch.arange(tokens.shape[1], device=device), -1))
        rows = probability_rows(logits, temperature, top_p)
        token = torch.multinomial(rows, 1, generator=generator)[:, 0].tolist()
        calls += 1
        row_steps += len(active)
        still = []
        for b, r in enumerate(active):
            generated[r].append(token[b])
            committed[r].append(token[b])
            if len(generated[r]) < max_new_tokens and token[b] not in eos:
                still.append(b)
        lengths = torch.tensor(
            [len(committed[active[b]]) - 1 for b in still], dtype=torch.long, device=device
        )
        cache.compact(torch.tensor(still, dtype=torch.long, device=device))
        uncached = [[token[b]] for b in still]
        active = [active[b] for b in still]
    _synchronize(device)
    elapsed = time.perf_counter() - t0
    metrics = _autoregressive_metrics(generated, temperature, top_p, calls, row_steps, elapsed,
                                      prefill_s, device)
    return GenerationResult(generated, metrics)

