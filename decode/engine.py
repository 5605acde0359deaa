"""Speculative decoding with real models, any registered verifier (gpt-fast in spirit).

One decoding step for a batch of B prompts (K draft paths, depth L, vocabulary V):

    draft   feed the draft's uncached committed tokens (1 or 2 per row), then L-1 forwards
            of the K paths at once -> K i.i.d. paths X [B, K, L] and draft rows
            q [B, K, L, V] (row 0 is shared by the K paths)
    target  ONE tree-masked forward over the pending token and the distinct drafted nodes
            (shared prefixes are computed once): each node attends to the committed
            context and to its own ancestors only; its position id is
            (context length - 1 + depth). -> target rows p [B, K, L+1, V]
    verify  law = block_law(verifier, DraftTree(X, p, q)); (path, tau, Y) = sample_block(law)
    score   (optional, EngineConfig.score) the exact conditional E[tau + 1 | tree] of every
            named verifier on the SAME drafted tree (paired comparison; not timed as decoding)
    commit  append X[path, :tau] + Y; keep in both KV caches exactly the accepted slots

Paired scoring. Every lossless verifier leaves the committed text distributed as target
sampling, so the contexts at which steps start are target samples whichever verifier
drives the run; at each step the law of every scored verifier is evaluated on the one
drafted tree, giving its exact conditional expected block efficiency there. Per prompt
the engine reports the sum over steps (metrics["per_prompt"]); the difference of two
verifiers' sums is a paired estimate with far less variance than two separate runs. (The
steps start where the DRIVING verifier's blocks end; the scores are the other verifiers'
expected block efficiencies at those contexts.)

Temperature / top-p are applied to both models' logits before the rows reach the
verifier, so "lossless" means: the output has the law of sampling the target at that
temperature / top-p.

KV cache bookkeeping ("slot cache"). Each model keeps a transformers ``DynamicCache``
(append-only) plus a boolean ``valid [B, S]`` saying which cache slots hold committed
tokens of which row. Every forward passes an explicit 4-D attention mask
[B, 1, N, S + N] (valid past slots, plus the ancestors among the new nodes) and explicit
position ids, so rows with different context lengths and ragged acceptance are batched
without padding tricks in the model. After verification the accepted slots are marked
valid and the cache is compacted (per-row gather of valid slots, left-aligned), which is
the "roll back to the accepted path" step; no accepted token is recomputed. The target's
bonus/correction token Y is the next step's pending token (its key/values are computed in
the next tree pass); the draft also re-reads X_L when tau = L (it never fed X_L).
Rows that finish (EOS or max_new_tokens) leave the batch. Models with sliding-window
layers are refused (the slot cache assumes full attention).

The code is the loop of `SpeculativeEngine.generate` over plain step functions: prefill,
draft_paths, tree_pass (a `TreeBatch`: the distinct nodes, one field per tensor), verify,
score, fetch, commit_caches, commit_tokens; the metrics are computed from the per-step
records (`step_metrics`). The host reads the device ONCE per step (`fetch`: path, tau,
correction, the chosen path's tokens, E[tau + 1], node counts and scores in one float64
tensor); cache widths are counted on the host. With `EngineConfig.compact_tree` (default on
the CPU) the tree is sized by its distinct-node count, which is a second read per step;
without it (default on CUDA) it has 1 + K L node slots, padding included.
tests/test_engine.py counts the reads. (On CUDA the per-phase timers, `time_phases`,
add device synchronisations that read nothing.)

Works on CUDA when present and on the CPU otherwise; every tensor op in the step,
including the verifier law and sampling, stays on the models' device.

Files (one idea each; this module re-exports their public names):
    decode/sampling.py        probability_rows (temperature, top-p)
    decode/cache.py           SlotCache (the ONE tree-masked forward, attention_mask: the one
                              bool -> float mask), chain_inputs, TreeBatch, build_tree
    decode/scoring.py         score_cells, cut_tree, score_grid, score_tree (paired scoring)
    decode/generate.py        EngineConfig, SpeculativeEngine and the step functions
    decode/metrics.py         StepClock, peak_memory_mb, step_metrics
    decode/autoregressive.py  generate_autoregressive (the baseline)
"""

from __future__ import annotations

from .autoregressive import generate_autoregressive
from .cache import SlotCache, TreeBatch, attention_mask, build_tree, chain_inputs
from .generate import (
    DecodeState,
    EngineConfig,
    GenerationResult,
    PrefixStore,
    SpeculativeEngine,
    StepOutcome,
    StepRecord,
    commit_caches,
    commit_tokens,
    draft_paths,
    fetch,
    prefill,
    score,
    tree_pass,
    verify,
)
from .metrics import StepClock, peak_memory_mb, step_metrics
from .sampling import probability_rows
from .scoring import cell_name, cut_tree, score_cells, score_grid, score_tree

__all__ = [
    "DecodeState", "EngineConfig", "GenerationResult", "PrefixStore", "SlotCache", "SpeculativeEngine",
    "StepClock", "StepOutcome", "StepRecord", "TreeBatch", "attention_mask", "build_tree",
    "cell_name", "chain_inputs", "commit_caches", "commit_tokens", "cut_tree", "draft_paths",
    "fetch", "generate_autoregressive", "peak_memory_mb", "prefill", "probability_rows", "score",
    "score_cells", "score_grid", "score_tree", "step_metrics", "tree_pass", "verify",
]
