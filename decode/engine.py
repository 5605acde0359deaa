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

Works on CUDA when present and on the CPU otherwise; every tensor op in the step,
including the verifier law and sampling, stays on the models' device.
"""

from __future__ import annotations

import resource
import sys
import time
from collections import Counter
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
        from transformers import DynamicCache

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
        """Mark slots [B, M] (entries < 0 ignored) as committed."""
        rows = torch.arange(slots.shape[0], device=slots.device)[:, None].expand_as(slots)
        keep = slots >= 0
        self.valid[rows[keep], slots[keep]] = True

    def compact(self, rows: torch.Tensor | None = None) -> None:
        """Keep only committed slots (left-aligned per row) and, if given, only `rows` [B']."""
        valid = self.valid if rows is None else self.valid[rows]
        counts = valid.sum(1)
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


def build_tree(
    tokens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct nodes of K drafted paths per row, as a flat node list with slot 0 = root.

    tokens [B, K, L]. Returns
      node_of [B, K, L+1] long: node index of the first i tokens of path k (0 = root)
      node_tokens [B, N] long: last token of every node (root: filled in by the caller)
      node_depth [B, N] long (padding nodes: depth 0)
      ancestor [B, N, N] bool: node a attends node c (c an ancestor of a or a itself;
                padding nodes see themselves only)
      real [B, N] bool: the node exists in this row (False: padding)
    N = 1 + the largest number of distinct nodes over rows.
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
    count = int(flat.sum(1).max()) + 1
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
    ancestor = (ancestor & real[:, :, None]) | torch.eye(count, dtype=torch.bool, device=device)[
        None
    ]
    return node_of, node_tokens, node_depth, ancestor, real


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
) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """Exact conditional E[tau + 1 | tree] of every named verifier at every (K', L') cell.

    tokens [B, K, L], target_rows [B, K, L+1, V], draft_rows [B, K, L, V] (any dtype; cast
    to `dtype` in chunks of rows so that one chunk holds at most `max_elements` target-row
    entries). cells: the (K', L') to score (default: only (K, L)); cell (K', L') scores the
    tree of the first K' paths cut to depth L' (`cut_tree`) on the same rows. A verifier
    that reads path 0 only (VerifierSpec.multipath False) is evaluated once per L' and its
    value shared by every K'. Returns {cell: {name: [B] float64 on the CPU}}. seconds: if
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
                    done[key] = law.block_efficiency().double().cpu()
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
    the registry works (including broken ones registered for audits).
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
    def _target_rows(self, logits: torch.Tensor) -> torch.Tensor:
        return probability_rows(logits, self.config.temperature, self.config.top_p)

    def _draft_rows(self, logits: torch.Tensor) -> torch.Tensor:
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
        grew (streaming). progress: a tqdm bar on stderr.

        metrics (all rows together):
          generated_tokens, target_calls (tree passes, prefill excluded), row_steps (sum of
          active rows over the calls), block_efficiency (mean tau + 1 per row-step, before
          truncation at EOS / max_new_tokens), expected_block_efficiency (mean of the law's
          exact E[tau + 1] given the drafted tree: same mean, lower variance),
          tokens_per_call (generated / row_steps), accepted_histogram (tau = 0..L),
          prefill_s, decode_s, draft_s, target_s, verifier_s, other_s, tokens_per_s
          (generated / (prefill + decode)), decode_tokens_per_s, ms_per_token (decode),
          target_nodes_per_call (mean nodes per row in the tree pass, pending included),
          draft_forwards, peak_memory_mb and peak_memory_kind; score_s (time spent scoring,
          excluded from decode_s), score_seconds {verifier: seconds in its law} and
          per_prompt: one dict per prompt with row_steps, accepted_plus_one,
          generated_tokens, expected_block_efficiency (sums over that prompt's steps) and
          scores {verifier: sum over its steps of E[tau + 1 | tree]}.
        """
        c = self.config
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        device, vocab = self.device, self.target.vocab_size
        eos = set(c.eos_token_ids if c.eos_token_ids is not None else self.target.eos_token_ids)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        batch, paths, depth = len(prompts), c.paths, c.depth
        committed = [list(p) for p in prompts]
        generated: list[list[int]] = [[] for _ in prompts]
        active = list(range(batch))  # prompt index of every batch row
        timers = Counter({"draft": 0.0, "target": 0.0, "verifier": 0.0, "score": 0.0})
        stats: Counter[str] = Counter()
        histogram = [0] * (depth + 1)
        expected_be = 0.0
        score_seconds: dict[str, float] = dict.fromkeys(c.score, 0.0)
        cells = score_cells(paths, depth) if c.score_grid else [(paths, depth)]
        per_prompt = [
            {"row_steps": 0, "accepted_plus_one": 0, "expected_block_efficiency": 0.0,
             "scores": dict.fromkeys(c.score, 0.0),
             **({"grid": {cell_name(cell): dict.fromkeys(c.score, 0.0) for cell in cells}}
                if c.score_grid else {})}
            for _ in prompts
        ]
        step_log: list[dict[str, Any]] = []
        steps: list[StepRecord] = []
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(
                total=batch * c.max_new_tokens,
                file=sys.stderr,
                unit="tok",
                desc=f"{self.verifier} K={paths} L={depth}",
            )

        def clock(name: str, start: float) -> float:
            _synchronize(device)
            now = time.perf_counter()
            timers[name] += now - start
            return now

        # prefill: both caches take every prompt token but the last
        _synchronize(device)
        t_start = time.perf_counter()
        heads = [tuple(p[:-1]) for p in committed]
        # identical prompts share one prefill (rows are copied afterwards)
        unique = list(dict.fromkeys(heads))
        first_row = {h: i for i, h in enumerate(unique)}
        copies = torch.tensor([first_row[h] for h in heads], dtype=torch.long, device=device)
        target_cache = SlotCache(self.target.model, len(unique), device)
        draft_cache = SlotCache(self.draft.model, len(unique), device)
        store = self.prefix_store
        if store is not None and all(h in store.entries for h in unique):
            target_cache.load([store.entries[h][0] for h in unique])
            draft_cache.load([store.entries[h][1] for h in unique])
            stats["prefill_reused"] = batch
        elif max(len(h) for h in unique) > 0:
            lengths = torch.zeros(len(unique), dtype=torch.long, device=device)
            for cache in (target_cache, draft_cache):
                tokens, positions, new_mask, real = chain_inputs(unique, lengths, device)
                cache.forward(tokens, positions, new_mask, last_only=True)
                cache.commit(torch.where(real, torch.arange(tokens.shape[1], device=device), -1))
                cache.compact()
            if store is not None:
                for b, h in enumerate(unique):
                    store.entries[h] = (target_cache.row(b), draft_cache.row(b))
        target_cache.compact(copies)
        draft_cache.compact(copies)
        draft_uncached = [[p[-1]] for p in committed]
        _synchronize(device)
        t_decode = time.perf_counter()
        timers["prefill"] = t_decode - t_start

        while active:
            rows_now = len(active)
            n = torch.tensor(
                [len(committed[r]) for r in active], device=device
            )  # [B'] incl. pending
            # ---- draft: uncached committed tokens, then K paths of depth L ----------------
            t0 = time.perf_counter()
            tokens, positions, new_mask, real = chain_inputs(
                draft_uncached,
                n - torch.tensor([len(u) for u in draft_uncached], device=device),
                device,
            )
            base = draft_cache.slots
            logits = draft_cache.forward(tokens, positions, new_mask, last_only=True)[:, -1]
            draft_cache.commit(
                torch.where(real, base + torch.arange(tokens.shape[1], device=device), -1)
            )
            stats["draft_forwards"] += 1
            q_root = self._draft_rows(logits)  # [B', V]
            drafted = torch.empty(rows_now, paths, depth, dtype=torch.long, device=device)
            draft_rows = torch.empty(
                rows_now, paths, depth, vocab, dtype=q_root.dtype, device=device
            )
            draft_rows[:, :, 0] = q_root[:, None]
            drafted[:, :, 0] = torch.multinomial(
                q_root, paths, replacement=True, generator=generator
            )
            tentative: list[int] = []  # first slot of the K nodes fed at depth 1..L-1
            eye = torch.eye(paths, dtype=torch.bool, device=device)[None].expand(rows_now, -1, -1)
            for i in range(1, depth):
                extra = torch.zeros(
                    rows_now, paths, draft_cache.slots, dtype=torch.bool, device=device
                )
                for start in tentative:
                    extra[:, :, start : start + paths] |= eye
                tentative.append(draft_cache.slots)
                logits = draft_cache.forward(
                    drafted[:, :, i - 1],
                    (n - 1 + i)[:, None].expand(-1, paths),
                    eye,
                    past_extra=extra,
                )
                stats["draft_forwards"] += 1
                rows_i = self._draft_rows(logits)  # [B', K, V]
                # paths sharing their first i tokens share one row (that of the first such path)
                prefix = drafted[:, :, :i]
                same = (prefix[:, :, None, :] == prefix[:, None, :, :]).all(-1)  # [B', K, K]
                first = same.to(torch.int8).argmax(2)  # [B', K]
                rows_i = torch.gather(rows_i, 1, first[..., None].expand(-1, -1, vocab))
                draft_rows[:, :, i] = rows_i
                drafted[:, :, i] = torch.multinomial(
                    rows_i.reshape(-1, vocab), 1, generator=generator
                ).reshape(rows_now, paths)
            t1 = clock("draft", t0)
            # ---- target: one tree-masked pass over pending token + distinct nodes ----------
            node_of, node_tokens, node_depth, ancestor, node_real = build_tree(drafted)
            node_tokens[:, 0] = torch.tensor([committed[r][-1] for r in active], device=device)
            base = target_cache.slots
            logits = target_cache.forward(node_tokens, n[:, None] - 1 + node_depth, ancestor)
            p_nodes = self._target_rows(logits)  # [B', N, V]
            target_rows = torch.gather(
                p_nodes, 1, node_of.reshape(rows_now, -1, 1).expand(-1, -1, vocab)
            ).reshape(rows_now, paths, depth + 1, vocab)
            stats["target_nodes"] += int(node_real.sum())
            t2 = clock("target", t1)
            # ---- verify ---------------------------------------------------------------------
            dtype = c.law_dtype
            tree = DraftTree(drafted, target_rows.to(dtype), draft_rows.to(dtype))
            law = self.law(tree)
            path, accepted, token = sample_block(law, generator)
            row_expected = law.block_efficiency()  # [B']
            expected_be += float(row_expected.sum())
            t3 = clock("verifier", t2)
            for r, tau, value in zip(active, accepted.tolist(), row_expected.tolist(), strict=True):
                per_prompt[r]["row_steps"] += 1
                per_prompt[r]["accepted_plus_one"] += tau + 1
                per_prompt[r]["expected_block_efficiency"] += value
            if c.score:
                law_s = dict.fromkeys(c.score, 0.0)
                grid = score_grid(c.score, drafted, target_rows, draft_rows, cells,
                                  c.score_dtype, c.score_elements, law_s)
                for cell, scores in grid.items():
                    for name, values in scores.items():
                        for r, value in zip(active, values.tolist(), strict=True):
                            if cell == (paths, depth):
                                per_prompt[r]["scores"][name] += value
                            if c.score_grid:
                                per_prompt[r]["grid"][cell_name(cell)][name] += value
                for name, sec in law_s.items():
                    score_seconds[name] += sec
                t4 = clock("score", t3)
            step_log.append({"rows": rows_now, "nodes": int(node_real.sum()),
                             "draft_s": t1 - t0, "target_s": t2 - t1, "verifier_s": t3 - t2,
                             "law_s": law_s if c.score else {}})
            if c.score:
                t3 = t4
            # ---- commit ---------------------------------------------------------------------
            row_index = torch.arange(rows_now, device=device)
            accepted_nodes = node_of[row_index, path]  # [B', L+1] node indices along the path
            keep = torch.arange(depth + 1, device=device)[None] <= accepted[:, None]
            target_cache.commit(torch.where(keep, base + accepted_nodes, -1))
            # draft: tentative slot of path k at depth i is tentative[i-1] + k (i = 1..L-1)
            if tentative:
                starts = torch.tensor(tentative, device=device)[None]  # [1, L-1]
                draft_slots = starts + path[:, None]
                draft_keep = torch.arange(1, depth, device=device)[None] <= accepted[:, None]
                draft_cache.commit(torch.where(draft_keep, draft_slots, -1))
            path_l, accepted_l, token_l = path.tolist(), accepted.tolist(), token.tolist()
            drafted_l = drafted.tolist()
            if c.record_steps:
                steps.append(
                    StepRecord(
                        list(active),
                        [list(committed[r]) for r in active],
                        tree,
                        path,
                        accepted,
                        token,
                    )
                )
            still: list[int] = []
            new_uncached: list[list[int]] = []
            for b, r in enumerate(active):
                tau = accepted_l[b]
                block = drafted_l[b][path_l[b]][:tau] + [token_l[b]]
                histogram[tau] += 1
                room = c.max_new_tokens - len(generated[r])
                block = block[:room]
                for j, t in enumerate(block):
                    if t in eos:
                        block = block[: j + 1]
                        break
                generated[r].extend(block)
                committed[r].extend(block)
                if callback is not None and block:
                    callback(r, block)
                if bar is not None:
                    bar.update(len(block))
                done = len(generated[r]) >= c.max_new_tokens or (block and block[-1] in eos)
                if not done:
                    still.append(b)
                    tail = [drafted_l[b][path_l[b]][depth - 1]] if tau == depth else []
                    new_uncached.append(tail + [token_l[b]])
            stats["row_steps"] += rows_now
            stats["target_calls"] += 1
            stats["accepted_plus_one"] += int(accepted.sum()) + rows_now
            if len(still) < rows_now:
                keep_rows = torch.tensor(still, dtype=torch.long, device=device)
                target_cache.compact(keep_rows)
                draft_cache.compact(keep_rows)
            else:
                target_cache.compact()
                draft_cache.compact()
            active = [active[b] for b in still]
            draft_uncached = new_uncached
            timers["other"] += time.perf_counter() - t3
        _synchronize(device)
        t_end = time.perf_counter()
        if bar is not None:
            bar.close()
        total_tokens = sum(len(g) for g in generated)
        decode_s = t_end - t_decode - timers["score"]  # scoring is not part of decoding
        row_steps = max(stats["row_steps"], 1)
        for r, entry in enumerate(per_prompt):
            entry["generated_tokens"] = len(generated[r])
        peak, kind = peak_memory_mb(device)
        metrics: dict[str, Any] = {
            "verifier": self.verifier,
            "paths": paths,
            "depth": depth,
            "temperature": c.temperature,
            "top_p": c.top_p,
            "draft_temperature": c.temperature
            if c.draft_temperature is None
            else c.draft_temperature,
            "prompts": batch,
            "generated_tokens": total_tokens,
            "target_calls": stats["target_calls"],
            "row_steps": stats["row_steps"],
            "block_efficiency": stats["accepted_plus_one"] / row_steps,
            "expected_block_efficiency": expected_be / row_steps,
            "tokens_per_call": total_tokens / row_steps,
            "accepted_histogram": histogram,
            "prefill_s": timers["prefill"],
            "decode_s": decode_s,
            "draft_s": timers["draft"],
            "target_s": timers["target"],
            "verifier_s": timers["verifier"],
            "other_s": timers["other"],
            "tokens_per_s": total_tokens / max(decode_s + timers["prefill"], 1e-12),
            "decode_tokens_per_s": total_tokens / max(decode_s, 1e-12),
            "ms_per_token": 1000 * decode_s / max(total_tokens, 1),
            "target_nodes_per_call": stats["target_nodes"] / row_steps,
            "draft_forwards": stats["draft_forwards"],
            "prefill_reused": stats["prefill_reused"],
            "peak_memory_mb": peak,
            "peak_memory_kind": kind,
            "device": str(device),
            "score_s": timers["score"],
            "score_seconds": score_seconds,
            "score_dtype": str(c.score_dtype) if c.score else None,
            "per_prompt": per_prompt,
            "step_log": step_log,
        }
        return GenerationResult(generated, metrics, steps)


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
    total_tokens = sum(len(g) for g in generated)
    peak, kind = peak_memory_mb(device)
    metrics = {
        "verifier": "autoregressive",
        "paths": 0,
        "depth": 0,
        "temperature": temperature,
        "top_p": top_p,
        "prompts": batch,
        "generated_tokens": total_tokens,
        "target_calls": calls,
        "row_steps": row_steps,
        "block_efficiency": 1.0,
        "expected_block_efficiency": 1.0,
        "tokens_per_call": total_tokens / max(row_steps, 1),
        "decode_s": elapsed,
        "prefill_s": prefill_s,
        "target_s": elapsed,
        "draft_s": 0.0,
        "verifier_s": 0.0,
        "other_s": 0.0,
        "tokens_per_s": total_tokens / max(elapsed + prefill_s, 1e-12),
        "decode_tokens_per_s": total_tokens / max(elapsed, 1e-12),
        "ms_per_token": 1000 * elapsed / max(total_tokens, 1),
        "target_nodes_per_call": 1.0,
        "peak_memory_mb": peak,
        "peak_memory_kind": kind,
        "device": str(device),
    }
    return GenerationResult(generated, metrics)
