"""Tiny random Llama models for the tests that need real-model code paths without weights
(transformers is imported when a model is built: it is an optional dependency)."""

from __future__ import annotations

from typing import Any


def tiny_llama_config(vocab: int = 40) -> Any:
    """A 2-layer Llama config with `vocab` tokens (hidden 32, 4 heads, 2 KV heads)."""
    from transformers import LlamaConfig  # lazy: optional (the models extra)

    return LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       attn_implementation="sdpa")


def tiny_llama_pair(vocab: int = 40, seed: int = 0) -> tuple[Any, Any]:
    """(target, draft): two models of the same config, drawn one after the other from
    torch.manual_seed(seed), in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM  # lazy: optional (the models extra)

    cfg = tiny_llama_config(vocab)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg).eval(), AutoModelForCausalLM.from_config(cfg).eval()
