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


def peaked_llama_pair(vocab: int = 40, seeds: tuple[int, int] = (1, 2)) -> tuple[Any, Any]:
    """(target, draft): two models of the same config, each from torch.manual_seed of its own
    seed, in eval mode, their lm_head scaled up (N(0, 2 / sqrt(hidden)) entries): peaked rows,
    as real pairs have (the realgap tests)."""
    import torch
    from transformers import AutoModelForCausalLM  # lazy: optional (the models extra)

    cfg = tiny_llama_config(vocab)
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg).eval()
        with torch.no_grad():
            model.lm_head.weight.normal_(0, 2.0 / 32**0.5)
        models.append(model)
    return models[0], models[1]


class TinyTokenizer:
    """A stand-in tokenizer for the tiny models: the last `keep` characters of a text, each
    mapped to a token id in 1..vocab-1 (no EOS)."""

    eos_token_id = None

    def __init__(self, vocab: int = 40, keep: int = 5):
        self.vocab, self.keep = vocab, keep

    def encode(self, text: str) -> list[int]:
        return [1 + ord(c) % (self.vocab - 1) for c in text[-self.keep:]]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def tiny_loaded_pair(name: str, vocab: int = 40, seed: int = 0) -> Any:
    """A decode.models.ModelPair of tiny models (with TinyTokenizer) standing in for
    load_pair(name): one model (its own draft) when `name` names one model, else two, with
    the label load_pair gives."""
    from speclp.decode.models import ModelPair, make_pair, pair_label, pair_names, wrap_model

    target, draft = tiny_llama_pair(vocab, seed)
    if pair_names(name) is None:
        model = wrap_model(target, name, TinyTokenizer(vocab))
        return ModelPair(model, model, pair_label(name))
    return make_pair(wrap_model(target, "target", TinyTokenizer(vocab)),
                     wrap_model(draft, "draft", TinyTokenizer(vocab)), pair_label(name))
