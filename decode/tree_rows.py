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

from ..verifiers.law import DraftTree
from ..verifiers.tree import num_nodes
from .cache import attention_mask, check_attention
from .sampling import probability_rows

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

    def __init__(self, model: Any, context: list[int], temperature: float,
                 row_dtype: torch.dtype = torch.float32):
        from transformers import DynamicCache  # lazy: optional dependency (the models extra)

        self.model = model
        self.temperature = temperature
        self.row_dtype = row_dtype  # dtype of the softmax (rows are returned as float64)
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.context = len(context)
        self.float_mask = check_attention(model)
        ids = torch.tensor([context], dtype=torch.long, device=self.device)
        out = model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=1)
        self.root_row = probability_rows(out.logits[0, -1], temperature,
                                         dtype=row_dtype).double()  # [V]
        self.slots = 0  # tree slots appended after the context

    def rewind(self) -> None:
        """Forget every tree slot: the cache holds the context only again."""
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.numel():
                layer.keys = layer.keys[..., : self.context, :]
                layer.values = layer.values[..., : self.context, :]
        self.slots = 0

    def level(self, tokens: torch.Tensor, ancestors: torch.Tensor, depth: int) -> torch.Tensor:
        """tokens [n] (one level), ancestors [n, slots] bool (tree slots each node sees).

        Returns rows [n, V] float64 (temperature applied).
        """
        count = int(tokens.shape[0])
        ctx = torch.ones(count, self.context, dtype=torch.bool, device=self.device)
        own = torch.eye(count, dtype=torch.bool, device=self.device)
        mask = attention_mask(torch.cat([ctx, ancestors.to(self.device), own], dim=1)[None, None],
                              self.model, self.float_mask)
        positions = torch.full((1, count), self.context - 1 + depth, dtype=torch.long,
                               device=self.device)
        out = self.model(input_ids=tokens[None].to(self.device), position_ids=positions,
                         attention_mask=mask, cache=self.cache, use_cache=True)
        self.slots += count
        return probability_rows(out.logits[0], self.temperature, dtype=self.row_dtype).double()


@dataclass
class Prefilled:
    """Both models prefilled once at a context (float64 rows); tree passes below the context
    reuse the cached keys/values (each pass rewinds the caches to the context first)."""

    target: _TreeForward
    draft: _TreeForward
    context: list[int]
    seconds: dict[str, float]

    def rewind(self) -> None:
        self.target.rewind()
        self.draft.rewind()


@torch.no_grad()
def prefill(target: Any, draft: Any, context: list[int], temperature: float = 1.0,
            draft_temperature: float | None = None) -> Prefilled:
    """Prefill both models at `context` (softmax rows in float64)."""
    if not context:
        raise ValueError("context needs at least one token")
    draft_temperature = temperature if draft_temperature is None else draft_temperature
    start = time.perf_counter()
    tgt = _TreeForward(target, context, temperature, torch.float64)
    middle = time.perf_counter()
    drf = _TreeForward(draft, context, draft_temperature, torch.float64)
    return Prefilled(tgt, drf, list(context), {"target": middle - start,
                                              "draft": time.perf_counter() - middle})


@torch.no_grad()
def level_rows(tgt: _TreeForward, drf: _TreeForward, child_tokens: torch.Tensor,
               ancestors: torch.Tensor, parents: int, parent_local: torch.Tensor, d: int,
               seconds: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both models' rows of the children of one tree level (depth d + 1) in one tree-masked
    forward each, below the prefilled context: child i sees its parent's ancestors
    (`ancestors` [parents, S]) and its parent, the slot S + parent_local[i] (children of the
    root, d = 0, see the context only). Adds the forward seconds to seconds["target"/"draft"].
    Returns (p_rows, q_rows [count, V], base [count, S + parents]: what each child sees)."""
    count = len(child_tokens)
    if d == 0:
        base = torch.zeros(count, 0, dtype=torch.bool)
    else:
        base = torch.zeros(count, ancestors.shape[1] + parents, dtype=torch.bool)
        base[:, : ancestors.shape[1]] = ancestors[parent_local]
        base[torch.arange(count), ancestors.shape[1] + parent_local] = True
    start = time.perf_counter()
    p_rows = tgt.level(child_tokens, base, d + 1)
    seconds["target"] += time.perf_counter() - start
    start = time.perf_counter()
    q_rows = drf.level(child_tokens, base, d + 1)
    seconds["draft"] += time.perf_counter() - start
    return p_rows, q_rows, base


@torch.no_grad()
def tree_rows(target: Any, draft: Any, context: list[int], width: int, depth: int,
              temperature: float = 1.0, draft_temperature: float | None = None,
              select: str = "target", row_dtype: torch.dtype = torch.float32,
              prefilled: Prefilled | None = None) -> TreeRows:
    """Rows of (target, draft) on the complete `width`-ary tree of depth `depth` below context.

    target, draft: transformers causal LMs (they may be the same object; then the draft
    differs by `draft_temperature`). context: >= 1 token ids. row_dtype: dtype of the
    softmax (float64: full rows sum to 1 within ~1e-15, so 1 - kept mass is accurate).
    prefilled: caches of `prefill` at this context (then row_dtype is float64 and the
    models, context and temperatures are those of the prefill).
    """
    if select not in SELECT:
        raise ValueError(f"select must be one of {SELECT}, got {select!r}")
    if width < 2 or depth < 1:
        raise ValueError(f"need width >= 2 and depth >= 1, got {width}, {depth}")
    if not context:
        raise ValueError("context needs at least one token")
    draft_temperature = temperature if draft_temperature is None else draft_temperature
    seconds = {"target": 0.0, "draft": 0.0}
    if prefilled is not None:
        prefilled.rewind()
        tgt, drf = prefilled.target, prefilled.draft
    else:
        start = time.perf_counter()
        tgt = _TreeForward(target, context, temperature, row_dtype)
        seconds["target"] += time.perf_counter() - start
        start = time.perf_counter()
        drf = _TreeForward(draft, context, draft_temperature, row_dtype)
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
        p_rows, q_rows, ancestors = level_rows(tgt, drf, child_tokens, ancestors, len(level_nodes),
                                               parent_local, d, seconds)
        level_nodes = level_nodes[:, None] * width + np.arange(1, width + 1)[None]
        level_nodes = level_nodes.reshape(-1)
    p_norm = _renormalise(p_edge)
    q_norm = _renormalise(q_edge)
    return TreeRows(tokens, p_edge, q_edge, p_norm, q_norm, cov_p, cov_q, width, depth, select,
                    seconds)


@torch.no_grad()
def next_token_rows(target: Any, draft: Any, context: list[int], temperature: float = 1.0,
                    draft_temperature: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Full next-token rows p(.|context), q(.|context): float64 [V] each (softmax in float64)."""
    ready = prefill(target, draft, context, temperature, draft_temperature)
    return ready.target.root_row.cpu().numpy(), ready.draft.root_row.cpu().numpy()


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
    from transformers import DynamicCache  # lazy: optional dependency (the models extra)

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
    mask = attention_mask(mask.to(fwd.device), fwd.model, fwd.float_mask)
    positions = torch.tensor([[fwd.context - 1 + d for d in depths]], device=fwd.device)
    out = fwd.model(input_ids=tokens[None].to(fwd.device), position_ids=positions,
                    attention_mask=mask, cache=fwd.cache, use_cache=True)
    return probability_rows(out.logits[0], fwd.temperature, dtype=fwd.row_dtype).double()


# ---------------------------------------------------------------------------------------
# Sampled draft trees with full-vocabulary rows (Monte Carlo over drafts, exact given them)


@dataclass
class SampledTrees:
    """`count` independent draft trees of K i.i.d. paths of depth L at one context.

    tokens       [N, K, L] int64 drafted tokens (path k of tree n)
    node_of      [N, K, L+1] int64: node id of the first i tokens of path k (0 = the root)
    target_nodes [n, V] float64: p(. | node) for every distinct node (depth 0..L)
    draft_nodes  [n_d, V] float64: q(. | node) for the nodes of depth < L (ids < n_d)
    Rows are the models' full-vocabulary rows (no truncation) at the given temperatures.
    Distinct nodes are shared by all trees, so the model passes cost one forward per
    distinct node: one draft forward per depth and ONE tree-masked target forward.
    """

    tokens: torch.Tensor
    node_of: torch.Tensor
    target_nodes: torch.Tensor
    draft_nodes: torch.Tensor
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def distinct_nodes(self) -> int:
        return int(self.target_nodes.shape[0])

    def tree(self, rows: slice | torch.Tensor = slice(None), dtype: torch.dtype = torch.float64,
             paths: int | None = None) -> DraftTree:
        """DraftTree of trees `rows` (a slice or index tensor) made of their first `paths`
        paths (default all K): tokens [n, K', L], rows [n, K', L+1, V] / [n, K', L, V]."""
        node = self.node_of[rows][:, :paths]
        return DraftTree(self.tokens[rows][:, :paths], self.target_nodes[node].to(dtype),
                         self.draft_nodes[node[..., :-1]].to(dtype))

    def distinct(self, paths: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(first, inverse): trees whose first `paths` paths carry the same tokens have the same
        law; first [U] indexes one tree per distinct token array, inverse [N] maps every tree
        to its entry in `first`."""
        tokens = self.tokens[:, :paths].reshape(self.count, -1)
        _, inverse = torch.unique(tokens, dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), self.count, dtype=torch.long)
        first = first.scatter_reduce(0, inverse, torch.arange(self.count), reduce="amin")
        return first, inverse


@torch.no_grad()
def sample_trees(target: Any, draft: Any, context: list[int], paths: int, depth: int,
                 count: int, temperature: float = 1.0, draft_temperature: float | None = None,
                 generator: torch.Generator | None = None,
                 prefilled: Prefilled | None = None) -> SampledTrees:
    """Draw `count` draft trees (K i.i.d. draft paths of depth L each) at `context`.

    Every path samples its next token from the draft's row at its current node (softmax
    in float64 at `draft_temperature`, default `temperature`); the trees are independent
    given the context. Target rows (at `temperature`) are computed at every distinct node
    in one tree-masked forward. generator: a torch.Generator on the CPU (sampling runs on
    the CPU rows). prefilled: caches of `prefill` at this context, reused (then the models,
    context and temperatures are the prefill's).
    """
    if paths < 1 or depth < 1 or count < 1:
        raise ValueError(f"need paths, depth and count >= 1, got {paths}, {depth}, {count}")
    if not context:
        raise ValueError("context needs at least one token")
    draft_temperature = temperature if draft_temperature is None else draft_temperature
    seconds = {"draft": 0.0, "target": 0.0}
    if prefilled is None:
        prefilled = prefill(target, draft, context, temperature, draft_temperature)
        seconds = dict(prefilled.seconds)
    prefilled.rewind()
    drf, tgt = prefilled.draft, prefilled.target
    vocab = int(drf.root_row.shape[-1])
    n_paths = count * paths
    tokens = torch.zeros(n_paths, depth, dtype=torch.long)
    node_of = torch.zeros(n_paths, depth + 1, dtype=torch.long)
    current = torch.zeros(n_paths, dtype=torch.long)  # node id of every path
    q_nodes = drf.root_row.cpu()[None]  # [n_d, V]
    node_token = [0]  # last token of every node (root: unused)
    node_depth = [0]
    ancestors = torch.zeros(1, 0, dtype=torch.bool)  # [n, n - 1]: strict ancestors (slot = id - 1)
    for d in range(depth):
        nxt = torch.multinomial(q_nodes[current], 1, generator=generator)[:, 0]  # [n_paths]
        tokens[:, d] = nxt
        pair, inverse = torch.unique(current * vocab + nxt, return_inverse=True)
        parents, new_tokens = pair // vocab, pair % vocab
        first = len(node_token)
        new_ids = torch.arange(first, first + len(pair))
        current = new_ids[inverse]
        node_of[:, d + 1] = current
        node_token.extend(new_tokens.tolist())
        node_depth.extend([d + 1] * len(pair))
        # strict ancestors of the new nodes: the parent's, plus the parent itself
        see = torch.zeros(len(pair), first + len(pair) - 1, dtype=torch.bool)
        see[:, : ancestors.shape[1]] = ancestors[parents]
        see[torch.arange(len(pair)), (parents - 1).clamp_min(0)] |= parents > 0
        grown = torch.zeros(first + len(pair), first + len(pair) - 1, dtype=torch.bool)
        grown[:first, : ancestors.shape[1]] = ancestors
        grown[first:] = see
        ancestors = grown
        if d + 1 < depth:  # draft rows of the new nodes (they sample the next level)
            t0 = time.perf_counter()
            rows = drf.level(new_tokens, see[:, : first - 1], d + 1).cpu()
            seconds["draft"] += time.perf_counter() - t0
            q_nodes = torch.cat([q_nodes, rows])
    # one target pass over every non-root node (mixed depths)
    t0 = time.perf_counter()
    nodes = len(node_token)
    rows = _level_with_depths(tgt, torch.tensor(node_token[1:]), ancestors[1:], node_depth[1:])
    p_nodes = torch.cat([tgt.root_row.cpu()[None], rows.cpu()])
    seconds["target"] += time.perf_counter() - t0
    assert p_nodes.shape[0] == nodes
    return SampledTrees(tokens.reshape(count, paths, depth), node_of.reshape(count, paths, depth + 1),
                        p_nodes, q_nodes, seconds)
