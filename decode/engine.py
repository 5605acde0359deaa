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
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..verifiers.law import BlockLaw, DraftTree, sample_block
from ..verifiers.registry import block_law, get_verifier
from .models import LoadedModel, ModelPair, check_same_vocabulary

# ---------------------------------------------------------------------------------------
# Sampling rows


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


# ---------------------------------------------------------------------------------------
# Slot cache


class SlotCache:
    """KV cache of one model for a batch of rows: DynamicCache + validity of every slot.

    valid [B, S] bool: slot s of row b holds a committed token of row b. New slots are
    appended by every forward (tentative until committed).
    """

    def __init__(self, model: Any, batch: int, device: torch.device):
        from transformers import DynamicCache  # lazy: optional dependency (the models extra)

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.valid = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        impl = getattr(model.config, "_attn_implementation", "sdpa")
        if impl not in ("sdpa", "eager"):
            raise ValueError(
                f"the engine needs sdpa or eager attention (custom masks), got {impl!r}"
            )
        self.float_mask = impl == "eager"
        types = set(getattr(model.config, "layer_types", None) or ["full_attention"])
        if types != {"full_attention"}:
            raise ValueError(
                f"models with {sorted(types)} layers are not supported (full attention only)"
            )

    @property
    def slots(self) -> int:
        return int(self.valid.shape[1])

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        new_mask: torch.Tensor,
        past_extra: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Run the model on new nodes and append their key/values.

        tokens, positions [B, N]; new_mask [B, N, N] bool (node a attends node c; must hold
        the diagonal); past_extra [B, N, S] bool: tentative past slots a node may also see.
        Returns logits [B, N, V] (or [B, 1, V] for the last node when last_only).
        """
        batch, count = tokens.shape
        past = self.valid[:, None, :].expand(batch, count, self.slots)
        if past_extra is not None:
            past = past | past_extra
        mask = torch.cat([past, new_mask], dim=-1)[:, None]  # [B, 1, N, S+N]
        if self.float_mask:
            dtype = self.model.dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
                ~mask, torch.finfo(dtype).min
            )
        out = self.model(
            input_ids=tokens,
            position_ids=positions,
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1 if last_only else 0,
        )
        self.valid = torch.cat([self.valid, torch.zeros_like(tokens, dtype=torch.bool)], dim=1)
        return out.logits

    def row(self, b: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Committed key/values of row b: per layer (keys, values) [1, H, n_b, D] (copies)."""
        count = int(self.valid[b].sum())
        index = self.valid[b].nonzero()[:, 0]
        out = []
        for layer in self.cache.layers:
            out.append(
                (layer.keys[b : b + 1, :, index].clone(), layer.values[b : b + 1, :, index].clone())
            )
        assert all(k.shape[2] == count for k, _ in out)
        return out

    def load(self, rows: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
        """Start from per-row committed key/values (as returned by `row`), left-aligned."""
        counts = [r[0][0].shape[2] if r else 0 for r in rows]
        width = max(counts)
        device = self.valid.device
        self.valid = (
            torch.arange(width, device=device)[None] < torch.tensor(counts, device=device)[:, None]
        )
        if width == 0:
            return
        for layer in range(len(rows[0])):
            stacked = []
            for which in (0, 1):
                parts = [r[layer][which] for r in rows]
                stacked.append(
                    torch.cat(
                        [torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[2])) for t in parts],
                        dim=0,
                    )
                )
            self.cache.update(stacked[0], stacked[1], layer)

    def commit(self, slots: torch.Tensor) -> None:
        """Mark slots [B, M] (entries < 0 ignored) as committed (no host sync)."""
        added = torch.zeros(self.valid.shape, dtype=torch.int32, device=slots.device)
        added.scatter_add_(1, slots.clamp_min(0), (slots >= 0).to(torch.int32))
        self.valid |= added > 0

    def compact(self, rows: torch.Tensor | None = None, width: int | None = None) -> None:
        """Keep only committed slots (left-aligned per row) and, if given, only `rows` [B'].

        width: the largest number of committed slots over the kept rows when the caller
        knows it (the engine counts on the host); None reads it from the device (a sync).
        """
        valid = self.valid if rows is None else self.valid[rows]
        counts = valid.sum(1)
        if width is None:
            width = int(counts.max()) if counts.numel() else 0
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[
            :, :width
        ]  # [B', S']
        for layer in self.cache.layers:
            if layer.keys is None or layer.keys.numel() == 0:
                continue
            for attr in ("keys", "values"):
                tensor = getattr(layer, attr)
                if rows is not None:
                    tensor = tensor[rows]
                index = order[:, None, :, None].expand(-1, tensor.shape[1], -1, tensor.shape[3])
                setattr(layer, attr, tensor.gather(2, index))
        self.valid = torch.arange(width, device=valid.device)[None, :] < counts[:, None]


def chain_inputs(
    chains: list[list[int]], lengths: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded chain of committed tokens per row (padding first, so the last node is real).

    chains: B token lists (may be empty); lengths [B]: committed tokens before the chain.
    Returns tokens [B, N], positions [B, N], new_mask [B, N, N], real [B, N].
    """
    width = max(len(c) for c in chains)
    padded = [[0] * (width - len(c)) + list(c) for c in chains]
    flags = [[False] * (width - len(c)) + [True] * len(c) for c in chains]
    tokens = torch.tensor(padded, dtype=torch.long, device=device).reshape(len(chains), width)
    real = torch.tensor(flags, dtype=torch.bool, device=device).reshape(len(chains), width)
    pad = (~real).sum(1, keepdim=True)
    positions = (lengths[:, None] + torch.arange(width, device=device)[None] - pad).clamp_min(0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    new_mask = causal[None] & real[:, None, :] & real[:, :, None]
    new_mask = new_mask | torch.eye(width, dtype=torch.bool, device=device)[None]
    return tokens, positions, new_mask, real


@dataclass
class TreeBatch:
    """Distinct nodes of K drafted paths per row, as a flat node list with slot 0 = root.

    N = 1 + the largest number of distinct nodes over rows (compact) or 1 + K L (fixed).
    """

    node_of: torch.Tensor  # [B, K, L+1] long: node index of the first i tokens of path k
    tokens: torch.Tensor  # [B, N] long: last token of every node (root: set by the caller)
    depth: torch.Tensor  # [B, N] long: depth of every node (padding nodes: 0)
    ancestor: torch.Tensor  # [B, N, N] bool: a attends c (c an ancestor of a, or a itself;
    #                         padding nodes see themselves only)
    real: torch.Tensor  # [B, N] bool: the node exists in this row (False: padding)


def build_tree(tokens: torch.Tensor, compact: bool = True) -> TreeBatch:
    """The TreeBatch of drafted paths tokens [B, K, L] (shared prefixes are one node).

    compact: N = 1 + the largest distinct-node count over rows (reads that count from the
    device: one host sync); otherwise N = 1 + K L (no sync; more padding nodes).
    """
    batch, paths, depth = tokens.shape
    device = tokens.device
    # same[b, k, j, i]: paths k and j agree on their first i+1 tokens
    same = (tokens[:, :, None, :] == tokens[:, None, :, :]).long().cumprod(-1).bool()
    first = same.long().argmax(2)  # [B, K, L]: smallest j with the same prefix of length i+1
    distinct = first == torch.arange(paths, device=device)[None, :, None]  # [B, K, L]
    flat = distinct.reshape(batch, paths * depth)  # order (k, i)
    index = flat.long().cumsum(1) * flat  # 1-based node index of distinct nodes, else 0
    index = index.reshape(batch, paths, depth)
    # a repeated node takes the index of its first occurrence (path first[b, k, i], depth i)
    node = torch.gather(index, 1, first)  # [B, K, L]
    count = (int(flat.sum(1).max()) if compact else paths * depth) + 1
    node_of = torch.cat([torch.zeros(batch, paths, 1, dtype=torch.long, device=device), node], 2)
    node_tokens = torch.zeros(batch, count, dtype=torch.long, device=device)
    node_depth = torch.zeros(batch, count, dtype=torch.long, device=device)
    rows = torch.arange(batch, device=device)[:, None, None].expand(batch, paths, depth)
    depths = torch.arange(1, depth + 1, device=device)[None, None].expand(batch, paths, depth)
    node_tokens[rows, node] = tokens
    node_depth[rows, node] = depths
    ancestor = torch.zeros(batch, count, count, dtype=torch.bool, device=device)
    ancestor[:, :, 0] = True  # everything sees the root
    for i in range(1, depth + 1):
        for j in range(1, i + 1):
            ancestor[rows[..., 0], node_of[:, :, i], node_of[:, :, j]] = True
    real = torch.zeros(batch, count, dtype=torch.bool, device=device)
    real[:, 0] = True
    real[rows, node] = True
    eye = torch.eye(count, dtype=torch.bool, device=device)[None]
    return TreeBatch(node_of, node_tokens, node_depth, (ancestor & real[:, :, None]) | eye, real)


# ---------------------------------------------------------------------------------------
# Engine


@dataclass
class EngineConfig:
    """Decoding settings. draft_temperature/draft_top_p default to the target's."""

    paths: int = 3  # K
    depth: int = 8  # L
    temperature: float = 1.0
    top_p: float = 1.0
    draft_temperature: float | None = None
    draft_top_p: float | None = None
    max_new_tokens: int = 64
    eos_token_ids: tuple[int, ...] | None = None  # None: the target's EOS ids
    law_dtype: torch.dtype = torch.float32  # dtype of the rows handed to the verifier
    record_steps: bool = False  # keep every step's tree and outcome (tests, debugging)
    score: tuple[str, ...] = ()  # verifiers scored on every step's tree (paired comparison)
    score_dtype: torch.dtype = torch.float64  # dtype of the rows of the scored laws
    score_elements: int = 1 << 25  # rows scored at once: B' K (L+1) V at most this many
    score_grid: bool = False  # also score every (K', L') <= (K, L) on the same tree (score_cells)
    compact_tree: bool | None = None  # tree of distinct nodes only (one more host read per
    #                                   step to size it); None: on the CPU only
    time_phases: bool = True  # seconds per phase per step (CUDA: a device sync per phase)


@dataclass
class StepRecord:
    """One decoding step (kept when EngineConfig.record_steps).

    rows [B'] prompt indices of the active rows; contexts: their committed tokens before
    the step; tree: the DraftTree handed to the verifier; path/accepted/token [B'].
    """

    rows: list[int]
    contexts: list[list[int]]
    tree: DraftTree
    path: torch.Tensor
    accepted: torch.Tensor
    token: torch.Tensor


@dataclass
class GenerationResult:
    """tokens: generated ids per prompt; metrics: see SpeculativeEngine.generate."""

    tokens: list[list[int]]
    metrics: dict[str, Any]
    steps: list[StepRecord] = field(default_factory=list)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """Peak memory: CUDA max allocated (reset per run) or the process's peak RSS on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if sys.platform != "darwin" else rss / 2**20, "process_peak_rss"


class PrefixStore:
    """Committed prompt key/values kept across `generate` calls of engines on the same models.

    entries: prompt head (all tokens but the last) -> (target rows, draft rows) as returned
    by SlotCache.row. A benchmark that runs many configurations on the same prompts pays
    the prefill once per prompt (the reuse is reported: metrics["prefill_reused"]).
    """

    def __init__(self) -> None:
        self.entries: dict[tuple[int, ...], tuple[list, list]] = {}


def score_cells(paths: int, depth: int) -> list[tuple[int, int]]:
    """Every (K', L') with 1 <= K' <= paths and 1 <= L' <= depth (K' major)."""
    return [(k, d) for k in range(1, paths + 1) for d in range(1, depth + 1)]


def cell_name(cell: tuple[int, int]) -> str:
    """The key of a (K', L') cell in records: "K,L"."""
    return f"{cell[0]},{cell[1]}"


def cut_tree(tree: DraftTree, paths: int, depth: int) -> DraftTree:
    """The first `paths` drafted paths cut to `depth` tokens (with their rows).

    The first K' of K i.i.d. drafted paths, cut to depth L', are K' i.i.d. paths of depth
    L' with the rows along them (docs/theory.md section 12, real models), so the cut tree
    is a sample of the (K', L') tree at the same context.
    """
    return DraftTree(tree.tokens[:, :paths, :depth], tree.target_rows[:, :paths, : depth + 1],
                     tree.draft_rows[:, :paths, :depth])


def score_grid(
    names: tuple[str, ...] | list[str],
    tokens: torch.Tensor,
    target_rows: torch.Tensor,
    draft_rows: torch.Tensor,
    cells: list[tuple[int, int]] | None = None,
    dtype: torch.dtype = torch.float64,
    max_elements: int = 1 << 25,
    seconds: dict[str, float] | None = None,
    to_cpu: bool = True,
) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """Exact conditional E[tau + 1 | tree] of every named verifier at every (K', L') cell.

    tokens [B, K, L], target_rows [B, K, L+1, V], draft_rows [B, K, L, V] (any dtype; cast
    to `dtype` in chunks of rows so that one chunk holds at most `max_elements` target-row
    entries). cells: the (K', L') to score (default: only (K, L)); cell (K', L') scores the
    tree of the first K' paths cut to depth L' (`cut_tree`) on the same rows. A verifier
    that reads path 0 only (VerifierSpec.multipath False) is evaluated once per L' and its
    value shared by every K'. Returns {cell: {name: [B] float64 on the CPU}} (to_cpu False:
    on the rows' device, no host read). seconds: if
    given, the time spent in each verifier's law is added to seconds[name].
    """
    batch, paths, levels, vocab = target_rows.shape
    cells = [(paths, levels - 1)] if cells is None else list(cells)
    if any(not (1 <= k <= paths and 1 <= d < levels) for k, d in cells):
        raise ValueError(f"cells must lie in [1, {paths}] x [1, {levels - 1}], got {cells}")
    chunk = max(1, max_elements // max(paths * levels * vocab, 1))
    out: dict[tuple[int, int], dict[str, list[torch.Tensor]]] = {
        cell: {name: [] for name in names} for cell in cells}
    single = {name: not get_verifier(name).multipath for name in names}
    for start in range(0, batch, chunk):
        part = slice(start, start + chunk)
        tree = DraftTree(tokens[part], target_rows[part].to(dtype), draft_rows[part].to(dtype))
        for name in names:
            begin = time.perf_counter()
            done: dict[tuple[int, int], torch.Tensor] = {}
            for k, d in cells:
                key = (1, d) if single[name] else (k, d)
                if key not in done:
                    law = block_law(name, cut_tree(tree, *key))
                    value = law.block_efficiency().double()
                    done[key] = value.cpu() if to_cpu else value
                out[(k, d)][name].append(done[key])
            if seconds is not None:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - begin
    return {cell: {name: torch.cat(values) for name, values in by_name.items()}
            for cell, by_name in out.items()}


def score_tree(
    names: tuple[str, ...] | list[str],
    tokens: torch.Tensor,
    target_rows: torch.Tensor,
    draft_rows: torch.Tensor,
    dtype: torch.dtype = torch.float64,
    max_elements: int = 1 << 25,
    seconds: dict[str, float] | None = None,
) -> dict[str, torch.Tensor]:
    """Exact conditional E[tau + 1 | tree] of every named verifier on the whole drafted tree
    (`score_grid` at the one cell (K, L)): {name: [B] float64 on the CPU}."""
    cell = (int(tokens.shape[1]), int(tokens.shape[2]))
    return score_grid(names, tokens, target_rows, draft_rows, [cell], dtype, max_elements,
                      seconds)[cell]


class SpeculativeEngine:
    """Speculative decoding of a target model with a draft model and a named verifier.

    The verifier is used only through ``block_law`` and ``sample_block``, so any verifier in
    the registry works (including broken ones registered for audits). `generate` is the
    loop over the step functions below (prefill, draft_paths, tree_pass, verify, score,
    fetch, commit); the host reads the device once per step (`fetch`), plus once to size
    the tree when `EngineConfig.compact_tree` (the default on the CPU).
    """

    def __init__(
        self,
        target: LoadedModel | ModelPair,
        draft: LoadedModel | None = None,
        verifier: str = "bv",
        config: EngineConfig | None = None,
        prefix_store: PrefixStore | None = None,
    ):
        if isinstance(target, ModelPair):
            pair = target
            target, draft = pair.target, pair.draft
            config = config or EngineConfig()
            if pair.draft_temperature is not None and config.draft_temperature is None:
                config.draft_temperature = pair.draft_temperature
        if draft is None:
            raise ValueError("a draft model is needed")
        check_same_vocabulary(target, draft)
        self.target, self.draft = target, draft
        self.spec = get_verifier(verifier)
        for name in (config.score if config is not None else ()):
            get_verifier(name)  # unknown names fail here, not mid-run
        self.verifier = verifier
        self.config = config or EngineConfig()
        if self.config.paths < 1 or self.config.depth < 1:
            raise ValueError(
                f"need paths >= 1 and depth >= 1, got {self.config.paths}, {self.config.depth}"
            )
        self.device = target.device
        self.prefix_store = prefix_store

    # -- rows ---------------------------------------------------------------------------
    def target_rows(self, logits: torch.Tensor) -> torch.Tensor:
        return probability_rows(logits, self.config.temperature, self.config.top_p)

    def draft_rows(self, logits: torch.Tensor) -> torch.Tensor:
        c = self.config
        temperature = c.temperature if c.draft_temperature is None else c.draft_temperature
        top_p = c.top_p if c.draft_top_p is None else c.draft_top_p
        return probability_rows(logits, temperature, top_p)

    def law(self, tree: DraftTree) -> BlockLaw:
        return self.spec.law(tree, **self.spec.options)

    # -- generation ---------------------------------------------------------------------
    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        generator: torch.Generator | None = None,
        callback: Callable[[int, list[int]], None] | None = None,
        progress: bool = False,
    ) -> GenerationResult:
        """Generate up to max_new_tokens per prompt (a batch of token-id lists, each >= 1 token).

        callback(prompt_index, new_tokens) is called after every step for every row that
        grew (streaming). progress: a tqdm bar on stderr. Metrics: `step_metrics`.
        """
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        state = prefill(self, prompts)
        bar = progress_bar(self, len(prompts)) if progress else None
        _synchronize(self.device)
        t_decode = time.perf_counter()
        while state.active:
            clock = StepClock(self.device, self.config.time_phases)
            drafted, q, tentative = draft_paths(self, state, generator)
            clock.lap("draft_s")
            nodes, p, base = tree_pass(self, state, drafted)
            clock.lap("target_s")
            tree, outcome = verify(self, drafted, p, q, generator)
            clock.lap("verifier_s")
            law_s: dict[str, float] = {}
            scores = score(self, tree, law_s)
            clock.lap("score_s")
            host = fetch(outcome, nodes, drafted, scores)  # the step's one host sync
            commit_caches(state, nodes, base, tentative, outcome)
            record = {"rows": len(state.active), "law_s": law_s, **host.summary()}
            if self.config.record_steps:
                state.steps.append(StepRecord(list(state.active), [list(state.committed[r])
                                              for r in state.active], tree, *outcome[:3]))
            grown = commit_tokens(self, state, host)
            for r, block in grown:
                if callback is not None and block:
                    callback(r, block)
                if bar is not None:
                    bar.update(len(block))
            clock.lap("other_s")
            state.log.append({**record, **clock.laps})
        _synchronize(self.device)
        decode_s = time.perf_counter() - t_decode
        if bar is not None:
            bar.close()
        return GenerationResult(state.generated, step_metrics(self, state, decode_s), state.steps)


@dataclass
class DecodeState:
    """Host-side state of one `generate` call over B prompts (rows leave when they finish)."""

    committed: list[list[int]]  # per prompt: prompt + generated tokens
    generated: list[list[int]]
    active: list[int]  # prompt index of every batch row
    uncached: list[list[int]]  # per active row: committed tokens the draft has not fed
    target: SlotCache
    draft: SlotCache
    target_count: list[int]  # per active row: committed slots of the target's cache
    draft_count: list[int]
    per_prompt: list[dict[str, Any]]
    cells: list[tuple[int, int]]
    prefill_s: float
    prefill_reused: int
    log: list[dict[str, Any]] = field(default_factory=list)  # one record per step
    steps: list[StepRecord] = field(default_factory=list)


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


def progress_bar(engine: SpeculativeEngine, batch: int) -> Any:
    from tqdm import tqdm  # lazy: optional progress display

    c = engine.config
    return tqdm(total=batch * c.max_new_tokens, file=sys.stderr, unit="tok",
                desc=f"{engine.verifier} K={c.paths} L={c.depth}")


def prefill(engine: SpeculativeEngine, prompts: list[list[int]]) -> DecodeState:
    """Both caches take every prompt token but the last (identical prompts share one prefill;
    a PrefixStore reuses earlier calls' key/values)."""
    c, device = engine.config, engine.device
    _synchronize(device)
    start = time.perf_counter()
    heads = [tuple(p[:-1]) for p in prompts]
    unique = list(dict.fromkeys(heads))
    first_row = {h: i for i, h in enumerate(unique)}
    copies = torch.tensor([first_row[h] for h in heads], dtype=torch.long, device=device)
    target = SlotCache(engine.target.model, len(unique), device)
    draft = SlotCache(engine.draft.model, len(unique), device)
    store, reused = engine.prefix_store, 0
    if store is not None and all(h in store.entries for h in unique):
        target.load([store.entries[h][0] for h in unique])
        draft.load([store.entries[h][1] for h in unique])
        reused = len(prompts)
    elif max(len(h) for h in unique) > 0:
        lengths = torch.zeros(len(unique), dtype=torch.long, device=device)
        for cache in (target, draft):
            tokens, positions, new_mask, real = chain_inputs(unique, lengths, device)
            cache.forward(tokens, positions, new_mask, last_only=True)
            cache.commit(torch.where(real, torch.arange(tokens.shape[1], device=device), -1))
            cache.compact(width=max(len(h) for h in unique))
        if store is not None:
            for b, h in enumerate(unique):
                store.entries[h] = (target.row(b), draft.row(b))
    width = max(len(h) for h in heads)
    target.compact(copies, width)
    draft.compact(copies, width)
    cells = score_cells(c.paths, c.depth) if c.score_grid else [(c.paths, c.depth)]
    per_prompt = [{"row_steps": 0, "accepted_plus_one": 0, "expected_block_efficiency": 0.0,
                   "scores": dict.fromkeys(c.score, 0.0),
                   **({"grid": {cell_name(cell): dict.fromkeys(c.score, 0.0) for cell in cells}}
                      if c.score_grid else {})} for _ in prompts]
    _synchronize(device)
    return DecodeState(
        committed=[list(p) for p in prompts], generated=[[] for _ in prompts],
        active=list(range(len(prompts))), uncached=[[p[-1]] for p in prompts],
        target=target, draft=draft, target_count=[len(h) for h in heads],
        draft_count=[len(h) for h in heads], per_prompt=per_prompt, cells=cells,
        prefill_s=time.perf_counter() - start, prefill_reused=reused)


def draft_paths(engine: SpeculativeEngine, state: DecodeState, generator: torch.Generator | None
                ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Feed the draft its uncached committed tokens, then draw K i.i.d. paths of depth L.

    Returns drafted [B', K, L], draft rows q [B', K, L, V] (paths that share their first i
    tokens share the row at depth i) and the first cache slot of the K nodes fed at each
    depth 1..L-1 (tentative until committed).
    """
    c, device, cache = engine.config, engine.device, state.draft
    rows_now, paths, depth = len(state.active), c.paths, c.depth
    lengths = torch.tensor([len(state.committed[r]) for r in state.active], device=device)
    tokens, positions, new_mask, real = chain_inputs(
        state.uncached, lengths - torch.tensor([len(u) for u in state.uncached], device=device),
        device)
    base = cache.slots
    logits = cache.forward(tokens, positions, new_mask, last_only=True)[:, -1]
    cache.commit(torch.where(real, base + torch.arange(tokens.shape[1], device=device), -1))
    q_root = engine.draft_rows(logits)  # [B', V]
    vocab = q_root.shape[-1]
    drafted = torch.empty(rows_now, paths, depth, dtype=torch.long, device=device)
    q = torch.empty(rows_now, paths, depth, vocab, dtype=q_root.dtype, device=device)
    q[:, :, 0] = q_root[:, None]
    drafted[:, :, 0] = torch.multinomial(q_root, paths, replacement=True, generator=generator)
    tentative: list[int] = []
    eye = torch.eye(paths, dtype=torch.bool, device=device)[None].expand(rows_now, -1, -1)
    for i in range(1, depth):
        extra = torch.zeros(rows_now, paths, cache.slots, dtype=torch.bool, device=device)
        for start in tentative:
            extra[:, :, start : start + paths] |= eye
        tentative.append(cache.slots)
        logits = cache.forward(drafted[:, :, i - 1], (lengths - 1 + i)[:, None].expand(-1, paths),
                               eye, past_extra=extra)
        rows_i = engine.draft_rows(logits)  # [B', K, V]
        prefix = drafted[:, :, :i]
        same = (prefix[:, :, None, :] == prefix[:, None, :, :]).all(-1)  # [B', K, K]
        first = same.to(torch.int8).argmax(2)  # [B', K]: the first path with this prefix
        rows_i = torch.gather(rows_i, 1, first[..., None].expand(-1, -1, vocab))
        q[:, :, i] = rows_i
        drafted[:, :, i] = torch.multinomial(rows_i.reshape(-1, vocab), 1,
                                             generator=generator).reshape(rows_now, paths)
    return drafted, q, tentative


def tree_pass(engine: SpeculativeEngine, state: DecodeState, drafted: torch.Tensor
              ) -> tuple[TreeBatch, torch.Tensor, int]:
    """ONE tree-masked target forward over the pending token and the distinct drafted nodes.

    Returns the TreeBatch, target rows p [B', K, L+1, V] along every path and the first
    cache slot of the tree's nodes (tentative until committed).
    """
    c, device = engine.config, engine.device
    rows_now, paths, depth = drafted.shape
    compact = c.compact_tree if c.compact_tree is not None else device.type == "cpu"
    nodes = build_tree(drafted, compact=compact)
    nodes.tokens[:, 0] = torch.tensor([state.committed[r][-1] for r in state.active],
                                      device=device)
    lengths = torch.tensor([len(state.committed[r]) for r in state.active], device=device)
    base = state.target.slots
    logits = state.target.forward(nodes.tokens, lengths[:, None] - 1 + nodes.depth,
                                  nodes.ancestor)
    p_nodes = engine.target_rows(logits)  # [B', N, V]
    vocab = p_nodes.shape[-1]
    p = torch.gather(p_nodes, 1, nodes.node_of.reshape(rows_now, -1, 1).expand(-1, -1, vocab))
    return nodes, p.reshape(rows_now, paths, depth + 1, vocab), base


def verify(engine: SpeculativeEngine, drafted: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
           generator: torch.Generator | None) -> tuple[DraftTree, tuple[torch.Tensor, ...]]:
    """The driver's law on the drafted tree and one block drawn from it.

    Returns the DraftTree and (path, accepted, token, E[tau + 1 | tree]), each [B'] on the
    device.
    """
    dtype = engine.config.law_dtype
    tree = DraftTree(drafted, p.to(dtype), q.to(dtype))
    law = engine.law(tree)
    path, accepted, token = sample_block(law, generator)
    return tree, (path, accepted, token, law.block_efficiency())


def score(engine: SpeculativeEngine, tree: DraftTree, law_s: dict[str, float]
          ) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """Every scored verifier's exact E[tau + 1 | tree] at every cell (device tensors)."""
    c = engine.config
    if not c.score:
        return {}
    cells = score_cells(c.paths, c.depth) if c.score_grid else [(c.paths, c.depth)]
    return score_grid(c.score, tree.tokens, tree.target_rows, tree.draft_rows, cells,
                      c.score_dtype, c.score_elements, law_s, to_cpu=False)


@dataclass
class StepOutcome:
    """What the host reads after a step (one transfer): per row the chosen path, tau, the
    correction token, the drafted tokens of the chosen path, E[tau + 1 | tree], the node
    count of its tree and the scores {cell: {verifier: value}}."""

    path: list[int]
    accepted: list[int]
    token: list[int]
    chosen: list[list[int]]
    expected: list[float]
    nodes: list[int]
    scores: dict[tuple[int, int], dict[str, list[float]]]

    def summary(self) -> dict[str, Any]:
        return {"nodes": sum(self.nodes), "accepted": list(self.accepted)}


def fetch(outcome: tuple[torch.Tensor, ...], nodes: TreeBatch, drafted: torch.Tensor,
          scores: dict[tuple[int, int], dict[str, torch.Tensor]]) -> StepOutcome:
    """The step's ONE host read: everything the host needs, packed in one float64 tensor
    (token ids < 2^53 are exact in float64)."""
    path, accepted, token, expected = outcome
    rows = torch.arange(drafted.shape[0], device=drafted.device)
    chosen = drafted[rows, path]  # [B', L]
    keys = [(cell, name) for cell, by_name in scores.items() for name in by_name]
    columns = [path[:, None], accepted[:, None], token[:, None], expected[:, None],
               nodes.real.sum(1, keepdim=True), chosen,
               *[scores[cell][name].to(drafted.device)[:, None] for cell, name in keys]]
    table = torch.cat([col.to(torch.float64) for col in columns], dim=1).tolist()
    depth = chosen.shape[1]
    out = StepOutcome([int(r[0]) for r in table], [int(r[1]) for r in table],
                      [int(r[2]) for r in table], [[int(x) for x in r[5 : 5 + depth]] for r in table],
                      [r[3] for r in table], [int(r[4]) for r in table], {})
    for j, (cell, name) in enumerate(keys):
        out.scores.setdefault(cell, {})[name] = [r[5 + depth + j] for r in table]
    return out


def commit_caches(state: DecodeState, nodes: TreeBatch, base: int, tentative: list[int],
                  outcome: tuple[torch.Tensor, ...]) -> None:
    """Mark the accepted slots committed in both caches (device only, no host read)."""
    path, accepted = outcome[0], outcome[1]
    device = path.device
    rows = torch.arange(path.shape[0], device=device)
    depth = nodes.node_of.shape[2] - 1
    keep = torch.arange(depth + 1, device=device)[None] <= accepted[:, None]
    state.target.commit(torch.where(keep, base + nodes.node_of[rows, path], -1))
    if tentative:  # draft: tentative slot of path k at depth i is tentative[i-1] + k
        slots = torch.tensor(tentative, device=device)[None] + path[:, None]
        keep = torch.arange(1, depth, device=device)[None] <= accepted[:, None]
        state.draft.commit(torch.where(keep, slots, -1))


def commit_tokens(engine: SpeculativeEngine, state: DecodeState, host: StepOutcome
                  ) -> list[tuple[int, list[int]]]:
    """Append every row's block (cut at EOS / max_new_tokens), add its sums, drop finished
    rows from the batch and compact both caches. Returns [(prompt index, new tokens)]."""
    c = engine.config
    eos = set(c.eos_token_ids if c.eos_token_ids is not None else engine.target.eos_token_ids)
    depth, grown, still, uncached = c.depth, [], [], []
    for b, r in enumerate(state.active):
        tau = host.accepted[b]
        entry = state.per_prompt[r]
        entry["row_steps"] += 1
        entry["accepted_plus_one"] += tau + 1
        entry["expected_block_efficiency"] += host.expected[b]
        for cell, by_name in host.scores.items():
            for name, values in by_name.items():
                if cell == (c.paths, depth):
                    entry["scores"][name] += values[b]
                if c.score_grid:
                    entry["grid"][cell_name(cell)][name] += values[b]
        block = (host.chosen[b][:tau] + [host.token[b]])[: c.max_new_tokens - len(state.generated[r])]
        for j, t in enumerate(block):
            if t in eos:
                block = block[: j + 1]
                break
        state.generated[r].extend(block)
        state.committed[r].extend(block)
        grown.append((r, block))
        state.target_count[b] += tau + 1
        state.draft_count[b] += len(state.uncached[b]) + min(tau, depth - 1)
        if not (len(state.generated[r]) >= c.max_new_tokens or (block and block[-1] in eos)):
            still.append(b)
            uncached.append(([host.chosen[b][depth - 1]] if tau == depth else []) + [host.token[b]])
    keep = None if len(still) == len(state.active) else torch.tensor(still, dtype=torch.long,
                                                                      device=engine.device)
    state.target_count = [state.target_count[b] for b in still]
    state.draft_count = [state.draft_count[b] for b in still]
    state.target.compact(keep, max(state.target_count, default=0))
    state.draft.compact(keep, max(state.draft_count, default=0))
    state.active = [state.active[b] for b in still]
    state.uncached = uncached
    return grown


def step_metrics(engine: SpeculativeEngine, state: DecodeState, decode_s: float) -> dict[str, Any]:
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
