"""The speculative decoding loop: one step = draft, ONE target tree pass, verify, score, commit.

`SpeculativeEngine.generate` is the loop over the step functions below (prefill, draft_paths,
tree_pass, verify, score, fetch, commit_caches, commit_tokens); decode.engine describes the
step, the caches (decode.cache) and paired scoring (decode.scoring).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..verifiers.law import BlockLaw, DraftTree, sample_block
from ..verifiers.registry import get_verifier
from .cache import SlotCache, TreeBatch, build_tree, chain_inputs
from .metrics import StepClock, _synchronize, step_metrics
from .models import LoadedModel, ModelPair, check_same_vocabulary
from .sampling import probability_rows
from .scoring import cell_name, score_cells, score_grid


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
    share_sorts: bool = True  # score_grid sorts each distinct node row once (same bits)
    one_pass: bool = True  # score_grid: grid laws serve every cell in one pass per K' (verifiers.grid)
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


class PrefixStore:
    """Committed prompt key/values kept across `generate` calls of engines on the same models.

    entries: prompt head (all tokens but the last) -> (target rows, draft rows) as returned
    by SlotCache.row. A benchmark that runs many configurations on the same prompts pays
    the prefill once per prompt (the reuse is reported: metrics["prefill_reused"]).
    """

    def __init__(self) -> None:
        self.entries: dict[tuple[int, ...], tuple[list, list]] = {}


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
        verifier: str = "bv_extended_rrs",  # never below BV, run by run (Theorem 19.2)
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
                      c.score_dtype, c.score_elements, law_s, to_cpu=False,
                      share_sorts=c.share_sorts, one_pass=c.one_pass)


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

