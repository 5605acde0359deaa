"""KV caches of the engine: the slot cache, its ONE tree-masked forward and the drafted tree.

Slot cache. Each model keeps a transformers ``DynamicCache`` (append-only) plus a boolean
``valid [B, S]`` saying which cache slots hold committed tokens of which row. Every forward
passes an explicit 4-D attention mask [B, 1, N, S + N] (valid past slots, plus the ancestors
among the new nodes) and explicit position ids, so rows with different context lengths and
ragged acceptance are batched without padding tricks in the model. After verification the
accepted slots are marked valid and the cache is compacted (per-row gather of valid slots,
left-aligned): the "roll back to the accepted path" step; no accepted token is recomputed.
`attention_mask` is the one place a boolean mask becomes the float mask of eager attention
(also used by decode.tree_rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def check_attention(model: Any) -> bool:
    """True when the model's attention needs a float mask (eager), False for sdpa; refuses
    other implementations and models with non-full-attention layers (the slot cache assumes
    full attention)."""
    impl = getattr(model.config, "_attn_implementation", "sdpa")
    if impl not in ("sdpa", "eager"):
        raise ValueError(f"the engine needs sdpa or eager attention (custom masks), got {impl!r}")
    types = set(getattr(model.config, "layer_types", None) or ["full_attention"])
    if types != {"full_attention"}:
        raise ValueError(f"models with {sorted(types)} layers are not supported (full attention only)")
    return impl == "eager"


def attention_mask(mask: torch.Tensor, model: Any, float_mask: bool) -> torch.Tensor:
    """The mask handed to the model: the boolean mask itself (sdpa), or 0 where attended and
    the dtype's minimum elsewhere (eager attention, in the model's dtype)."""
    if not float_mask:
        return mask
    dtype = model.dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, torch.finfo(dtype).min)


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
        self.float_mask = check_attention(model)

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
        mask = attention_mask(torch.cat([past, new_mask], dim=-1)[:, None], self.model,
                              self.float_mask)  # [B, 1, N, S+N]
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

