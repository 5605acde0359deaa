"""Real-model rows at every node of a small prefix tree (for `speclp trees` / `realgap`).

Given a context (token ids) and a target/draft pair, build the complete M-ary prefix
tree of depth L whose children at every node are M tokens chosen from the real rows at
that node, and return both models' next-token rows at every node restricted to those
M tokens:

    select = "target"  children = top-M tokens of the target row at the node
    select = "draft"   children = top-M tokens of the draft row
    select = "mix"     children = top-M tokens of (p + q) / 2 (favours neither model)

Outputs (N = (M^(L+1) - 1)/(M - 1) nodes in shortlex order over the M child slots, so
a TreeModel with vocabulary M):
    tokens        [N, M]  real token id of child slot j of node n
    target_edge   [N, M]  p(child | node), UNrenormalised (true full-vocabulary probability)
    draft_edge    [N, M]  q(child | node), UNrenormalised
    target/draft  [N, M]  the same rows renormalised over the M kept tokens
    covered       [N] / [N] target and draft mass of the kept tokens at every node
Rows at depth L (leaves) are computed too (bonus token rows).

Cost: one prefill of the context per model, then ONE tree-masked forward per level
(M^d new nodes attending to the context and to their own ancestors only; position id
= context length - 1 + depth), so L + 1 forwards per model; the KV cache of the
context is reused by every level. Everything runs in torch.no_grad on the models'
device; rows are float64 numpy arrays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .engine import probability_rows
from .tree import num_nodes

SELECT = ("target", "draft", "mix")


@dataclass
class TreeRows:
    """Rows of a real pair on a complete M-ary tree of depth L (module docstring)."""

    tokens: np.ndarray  # [N, M] int64
    target_edge: np.ndarray  # [N, M] float64
    draft_edge: np.ndarray  # [N, M]
    target: np.ndarray  # [N, M] renormalised
    draft: np.ndarray  # [N, M] renormalised
    covered_target: np.ndarray  # [N]
    covered_draft: np.ndarray  # [N]
    width: int
    depth: int
    select: str
    seconds: dict[str, float] = field(default_factory=dict)

    def node_tokens(self, node: int) -> list[int]:
        """Real token ids of the prefix of tree node `node` (shortlex over child slots)."""
        out: list[int] = []
        while node:
            parent, slot = divmod(node - 1, self.width)
            out.append(int(self.tokens[parent, slot]))
            node = parent
        return out[::-1]


class _TreeForward:
    """One model: prefill a context, then append tree levels with an ancestor mask."""

    def __init__(self, model: Any, context: list[int], temperature: float):
        from transformers import DynamicCache

        self.model = model
        self.temperature = temperature
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.context = len(context)
        impl = getattr(model.config, "_attn_implementation", "sdpa")
        self.float_mask = impl == "eager"
        ids = torch.tensor([context], dtype=torch.long, device=self.device)
        out = model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=1)
        self.root_row = probability_rows(out.logits[0, -1], temperature).double()  # [V]
        self.slots = 0  # tree slots appended after the context

    def level(self, tokens: torch.Tensor, ancestors: torch.Tensor, depth: int) -> torch.Tensor:
        """tokens [n] (one level), ancestors [n, slots] bool (tree slots each node sees).

        Returns rows [n, V] float64 (temperature applied).
        """
        count = int(tokens.shape[0])
        ctx = torch.ones(count, self.context, dtype=torch.bool, device=self.device)
        own = torch.eye(count, dtype=torch.bool, device=self.device)
        mask = torch.cat([ctx, ancestors.to(self.device), own], dim=1)[None, None]
        if self.float_mask:
            dtype = self.model.dtype
            mask = torch.zeros(mask.shape, dtype=dtype, device=self.device).masked_fill(
                ~mask, torch.finfo(dtype).min)
        positions = torch.full((1, count), self.context - 1 + depth, dtype=torch.long,
                               device=self.device)
        out = self.model(input_ids=tokens[None].to(self.device), position_ids=positions,
                         attention_mask=mask, cache=self.cache, use_cache=True)
        self.slots += count
        return probability_rows(out.logits[0], self.temperature).double()


@torch.no_grad()
def tree_rows(target: Any, draft: Any, context: list[int], width: int, depth: int,
              temperature: float = 1.0, draft_temperature: float | None = None,
              select: str = "target") -> TreeRows:
    """Rows of (target, draft) on the complete `width`-ary tree of depth `depth` below context.

    target, draft: transformers causal LMs (they may be the same object; then the draft
    differs by `draft_temperature`). context: >= 1 token ids.
    """
    if select not in SELECT:
        raise ValueError(f"select must be one of {SELECT}, got {select!r}")
    if width < 2 or depth < 1:
        raise ValueError(f"need width >= 2 and depth >= 1, got {width}, {depth}")
    if not context:
        raise ValueError("context needs at least one token")
    draft_temperature = temperature if draft_temperature is None else draft_temperature
    seconds = {"target": 0.0, "draft": 0.0}
    start = time.perf_counter()
    tgt = _TreeForward(target, context, temperature)
    seconds["target"] += time.perf_counter() - start
    start = time.perf_counter()
    drf = _TreeForward(draft, context, draft_temperature)
    seconds["draft"] += time.perf_counter() - start
    n_nodes = num_nodes(width, depth)
    tokens = np.zeros((n_nodes, width), dtype=np.int64)
    p_edge = np.zeros((n_nodes, width))
    q_edge = np.zeros((n_nodes, width))
    cov_p = np.zeros(n_nodes)
    cov_q = np.zeros(n_nodes)
    p_rows, q_rows = tgt.root_row[None], drf.root_row[None]  # [1, V] rows of level 0
    level_nodes = np.array([0])
    ancestors = torch.zeros(1, 0, dtype=torch.bool)  # [n_level, tree slots] seen by this level
    for d in range(depth + 1):
        # choose the children of this level's nodes and record their probabilities
        score = {"target": p_rows, "draft": q_rows, "mix": p_rows + q_rows}[select]
        top = torch.topk(score, width, dim=-1).indices  # [n, M] (ties: torch's order)
        p_top, q_top = p_rows.gather(-1, top), q_rows.gather(-1, top)
        tokens[level_nodes] = top.cpu().numpy()
        p_edge[level_nodes] = p_top.cpu().numpy()
        q_edge[level_nodes] = q_top.cpu().numpy()
        cov_p[level_nodes] = p_top.sum(-1).cpu().numpy()
        cov_q[level_nodes] = q_top.sum(-1).cpu().numpy()
        if d == depth:
            break
        # next level: M children per node, in shortlex order
        count = len(level_nodes) * width
        child_tokens = top.reshape(-1)
        parent_local = torch.arange(count) // width
        if d == 0:  # children of the root see the context only
            base = torch.zeros(count, 0, dtype=torch.bool)
        else:  # the parent's ancestors, then the parent itself (slots of levels 1..d)
            base = torch.zeros(count, ancestors.shape[1] + len(level_nodes), dtype=torch.bool)
            base[:, : ancestors.shape[1]] = ancestors[parent_local]
            base[torch.arange(count), ancestors.shape[1] + parent_local] = True
        start = time.perf_counter()
        p_rows = tgt.level(child_tokens, base, d + 1)
        seconds["target"] += time.perf_counter() - start
        start = time.perf_counter()
        q_rows = drf.level(child_tokens, base, d + 1)
        seconds["draft"] += time.perf_counter() - start
        ancestors = base
        level_nodes = level_nodes[:, None] * width + np.arange(1, width + 1)[None]
        level_nodes = level_nodes.reshape(-1)
    p_norm = _renormalise(p_edge)
    q_norm = _renormalise(q_edge)
    return TreeRows(tokens, p_edge, q_edge, p_norm, q_norm, cov_p, cov_q, width, depth, select,
                    seconds)


def _renormalise(edge: np.ndarray) -> np.ndarray:
    """Rows divided by their sums; a row of zeros (all kept tokens at probability 0, possible
    only at temperature 0 / top-p) becomes uniform."""
    sums = edge.sum(axis=1, keepdims=True)
    uniform = np.full_like(edge, 1.0 / edge.shape[1])
    return np.where(sums > 0, edge / np.where(sums > 0, sums, 1.0), uniform)


@torch.no_grad()
def sample_contexts(model: Any, prompt: list[int], count: int, every: int,
                    temperature: float = 1.0, eos: set[int] | None = None,
                    generator: torch.Generator | None = None) -> list[list[int]]:
    """Contexts reached by target sampling: prompt + the first k*every sampled tokens, k = 0..count-1.

    Plain autoregressive sampling with a KV cache; stops early at an EOS token.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    ids = list(prompt)
    contexts = [list(ids)]
    out = model(input_ids=torch.tensor([ids], device=device), cache=cache,
                use_cache=True, logits_to_keep=1)
    generated = 0
    while len(contexts) < count:
        row = probability_rows(out.logits[0, -1], temperature)
        token = int(torch.multinomial(row, 1, generator=generator)[0])
        if eos and token in eos:
            break
        ids.append(token)
        generated += 1
        if generated % every == 0:
            contexts.append(list(ids))
        out = model(input_ids=torch.tensor([[token]], device=device), cache=cache,
                    use_cache=True)
    return contexts


@torch.no_grad()
def time_tree_round(target: Any, draft: Any, context: list[int], node_tokens: list[list[int]],
                    temperature: float = 1.0, draft_temperature: float | None = None,
                    repeats: int = 1) -> dict[str, float]:
    """Measured component times (seconds) of one speculative round on a given tree.

    node_tokens: the token prefixes of the tree's nodes (prefix-closed, parents first).
    draft_s: draft forwards level by level (one per depth) over the tree's nodes;
    target_s: ONE tree-masked target forward over all nodes (the verification pass);
    extra_s: one target forward of a single token at the context (the "extra pass" that
    gives p(.|context) when it is not reused). The context prefill is excluded (in real
    decoding the context is already cached). Best of `repeats`.
    """
    best = {"draft_s": float("inf"), "target_s": float("inf"), "extra_s": float("inf")}
    prefix_context = context[:-1] if len(context) > 1 else context
    last = context[-1:] if len(context) > 1 else []
    index = {tuple(t): i for i, t in enumerate(node_tokens)}
    depths = [len(t) for t in node_tokens]
    for _ in range(repeats):
        # extra pass: the last context token on a cached prefix
        fwd = _TreeForward(target, prefix_context, temperature)
        if last:
            start = time.perf_counter()
            fwd.level(torch.tensor(last), torch.zeros(1, 0, dtype=torch.bool), 1)
            best["extra_s"] = min(best["extra_s"], time.perf_counter() - start)
        # verification pass: all nodes at once
        fwd = _TreeForward(target, context, temperature)
        n = len(node_tokens)
        if n:
            see = torch.zeros(n, n, dtype=torch.bool)
            for i, t in enumerate(node_tokens):
                for d in range(1, len(t)):
                    see[i, index[tuple(t[:d])]] = True
            start = time.perf_counter()
            positions_tokens = torch.tensor([t[-1] for t in node_tokens])
            _level_with_depths(fwd, positions_tokens, see, depths)
            best["target_s"] = min(best["target_s"], time.perf_counter() - start)
        else:
            best["target_s"] = 0.0
        # drafting: one draft forward per depth over that depth's nodes
        dfw = _TreeForward(draft, context, draft_temperature or temperature)
        start = time.perf_counter()
        done: list[int] = []
        for d in range(1, max(depths, default=0) + 1):
            level = [i for i, t in enumerate(node_tokens) if len(t) == d]
            see = torch.zeros(len(level), len(done), dtype=torch.bool)
            for a, i in enumerate(level):
                for dd in range(1, d):
                    see[a, done.index(index[tuple(node_tokens[i][:dd])])] = True
            dfw.level(torch.tensor([node_tokens[i][-1] for i in level]), see, d)
            done.extend(level)
        best["draft_s"] = min(best["draft_s"], time.perf_counter() - start)
    if best["extra_s"] == float("inf"):
        best["extra_s"] = 0.0
    return best


def _level_with_depths(fwd: _TreeForward, tokens: torch.Tensor, see: torch.Tensor,
                       depths: list[int]) -> torch.Tensor:
    """A tree forward of nodes of mixed depths (see [n, n]: strict ancestors)."""
    count = int(tokens.shape[0])
    ctx = torch.ones(count, fwd.context, dtype=torch.bool)
    mask = torch.cat([ctx, see | torch.eye(count, dtype=torch.bool)], dim=1)[None, None]
    mask = mask.to(fwd.device)
    if fwd.float_mask:
        dtype = fwd.model.dtype
        mask = torch.zeros(mask.shape, dtype=dtype, device=fwd.device).masked_fill(
            ~mask, torch.finfo(dtype).min)
    positions = torch.tensor([[fwd.context - 1 + d for d in depths]], device=fwd.device)
    out = fwd.model(input_ids=tokens[None].to(fwd.device), position_ids=positions,
                    attention_mask=mask, cache=fwd.cache, use_cache=True)
    return probability_rows(out.logits[0], fwd.temperature).double()
