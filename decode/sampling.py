"""Next-token rows from logits: temperature and top-p (the rows every verifier sees)."""

from __future__ import annotations

import torch


def probability_rows(logits: torch.Tensor, temperature: float, top_p: float = 1.0,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Next-token rows from logits [..., V] -> probabilities [..., V] (float32, or `dtype`).

    temperature 0 gives the one-hot argmax row. top_p < 1 keeps the smallest set of most
    likely tokens whose mass reaches top_p (at least one token) and renormalises. With
    dtype float64 the softmax runs in float64 (rows sum to 1 within ~1e-15).
    """
    logits = logits.to(dtype)
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    if temperature == 0:
        rows = torch.zeros_like(logits)
        return rows.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    rows = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1:
        sorted_rows, order = rows.sort(dim=-1, descending=True)
        mass_before = sorted_rows.cumsum(-1) - sorted_rows
        keep_sorted = mass_before < top_p  # the first token is always kept
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        rows = rows * keep
        rows = rows / rows.sum(-1, keepdim=True)
    return rows

