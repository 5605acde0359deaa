"""The serving engines' own input layouts for the sampler audit, built from drafted paths.

Both are built from the audit's drafted configurations (tokens [B, K, L], the target rows
p(. | prefix) [B, K, L+1, V] and draft rows q(. | prefix) [B, K, L, V] along each path) and
answered in the audit's block form: [B, L+1] token ids, the accepted draft tokens then one
more token, padded with -1.

"vllm"  a flat batch of requests, each with its own number of draft tokens (one draft chain
        per request, K = 1), the layout of vLLM's rejection sampler:

            sampler(draft_token_ids [T], num_draft_tokens [B], draft_probs [T, V] or None,
                    target_probs [T + B, V], rng) -> [B, max(num_draft_tokens) + 1]

        Request b's n_b draft tokens are draft_token_ids[s_b : s_b + n_b] (s_b = the sum of the
        earlier counts); its target rows are target_probs[s_b + b : s_b + b + n_b + 1]: row j is
        p(. | its first j draft tokens), the last one (j = n_b) is the bonus position's row,
        the sampler draws the bonus token itself. draft_probs[s_b + j] = q(. | the first j
        draft tokens), or None (the draft-free path of n-gram drafters: the drafts still came
        from some law the sampler is not told; each batch is None with probability 1/2, drawn
        from the audit's generator). n_b is uniform on 1..L.

"sglang"  a draft tree per configuration (the K drafted paths merged on common prefixes), the
        layout of SGLang's tree speculative sampling kernel:

            sampler(candidates [B, N], retrive_index [B, N], retrive_next_token [B, N],
                    retrive_next_sibling [B, N], target_probs [B, N, V], draft_probs [B, N, V],
                    threshold_single, threshold_acc, rng) -> [B, L + 1]

        N = 1 + K L nodes per tree (unused slots: token -1, no links). Node 0 is the root (the
        last verified token, candidates = -1 here); node i's token is candidates[b, i], its
        first child retrive_next_token[b, i] and its next sibling retrive_next_sibling[b, i]
        (-1: none); retrive_index[b, i] = b N + i is its position in the flattened batch.
        target_probs[b, i] = p(. | the path to node i) (the law of node i's child),
        draft_probs[b, i] = q(. | the same path) (zeros at depth L and in unused slots).
        Nodes are numbered path by path (path 0's nodes first), parents before children, and
        siblings are linked in that order. threshold_single = threshold_acc = 1.0: the
        lossless configuration (a sampler that changes them is audited as it behaves).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ENGINE_LAYOUTS = ("vllm", "sglang")
LOSSLESS_THRESHOLDS = (1.0, 1.0)  # (threshold_single, threshold_acc) of the lossless config


def vllm_request(tokens: np.ndarray, target: np.ndarray, draft: np.ndarray,
                 rng: np.random.Generator) -> tuple[dict[str, Any], np.ndarray]:
    """The vllm layout of drafted chains (path 0 of tokens [B, K, L]); (request, the draft
    count of each request [B])."""
    count, _, depth = tokens.shape
    limits = rng.integers(1, depth + 1, size=count)
    mask = np.arange(depth)[None, :] < limits[:, None]  # [B, L] draft positions in use
    rows = np.arange(depth + 1)[None, :] <= limits[:, None]  # [B, L+1] target rows in use
    without = bool(rng.random() < 0.5)
    request = {"draft_token_ids": tokens[:, 0][mask], "num_draft_tokens": limits,
               "draft_probs": None if without else draft[:, 0][mask],
               "target_probs": target[:, 0][rows]}
    return request, limits


def tree_nodes(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(node [B, K, L+1], nodes used [B]): the node of each path's prefix of each length in
    the tree that merges the K paths on common prefixes (node 0 = the empty prefix; new nodes
    numbered path by path, depth by depth)."""
    count, paths, depth = tokens.shape
    node = np.zeros((count, paths, depth + 1), dtype=np.int64)
    used = np.ones(count, dtype=np.int64)
    for k in range(paths):
        for d in range(1, depth + 1):
            found = np.full(count, -1, dtype=np.int64)
            for j in range(k - 1, -1, -1):  # the earliest path j < k with the same prefix wins
                same = (tokens[:, j, :d] == tokens[:, k, :d]).all(-1)
                found = np.where(same, node[:, j, d], found)
            new = found < 0
            node[:, k, d] = np.where(new, used, found)
            used = used + new
    return node, used


def sglang_request(tokens: np.ndarray, target: np.ndarray, draft: np.ndarray
                   ) -> tuple[dict[str, Any], np.ndarray]:
    """The sglang layout of drafted trees tokens [B, K, L]; (request, L for every tree)."""
    count, paths, depth = tokens.shape
    vocab = target.shape[-1]
    size = 1 + paths * depth
    node, _ = tree_nodes(tokens)
    candidates = np.full((count, size), -1, dtype=np.int64)
    next_token = np.full((count, size), -1, dtype=np.int64)
    next_sibling = np.full((count, size), -1, dtype=np.int64)
    last_child = np.full((count, size), -1, dtype=np.int64)
    target_probs = np.zeros((count, size, vocab))
    draft_probs = np.zeros((count, size, vocab))
    rows = np.arange(count)
    target_probs[:, 0] = target[:, 0, 0]
    draft_probs[:, 0] = draft[:, 0, 0]
    seen = np.zeros((count, size), dtype=bool)
    seen[:, 0] = True
    for k in range(paths):
        for d in range(1, depth + 1):
            child, parent = node[:, k, d], node[:, k, d - 1]
            new = ~seen[rows, child]
            b, c, par = rows[new], child[new], parent[new]
            seen[b, c] = True
            candidates[b, c] = tokens[new, k, d - 1]
            target_probs[b, c] = target[new, k, d]
            if d < depth:
                draft_probs[b, c] = draft[new, k, d]
            first = last_child[b, par] < 0
            next_token[b[first], par[first]] = c[first]
            next_sibling[b[~first], last_child[b[~first], par[~first]]] = c[~first]
            last_child[b, par] = c
    retrive_index = np.arange(count)[:, None] * size + np.arange(size)[None, :]
    single, acc = LOSSLESS_THRESHOLDS
    request = {"candidates": candidates, "retrive_index": retrive_index,
               "retrive_next_token": next_token, "retrive_next_sibling": next_sibling,
               "target_probs": target_probs, "draft_probs": draft_probs,
               "threshold_single": single, "threshold_acc": acc}
    return request, np.full(count, depth, dtype=np.int64)


def call_engine_layout(fn: Any, layout: str, request: dict[str, Any],
                       rng: np.random.Generator) -> Any:
    """Call a sampler in an engine layout on one request; its raw answer."""
    if layout == "vllm":
        return fn(request["draft_token_ids"], request["num_draft_tokens"],
                  request["draft_probs"], request["target_probs"], rng)
    return fn(request["candidates"], request["retrive_index"], request["retrive_next_token"],
              request["retrive_next_sibling"], request["target_probs"], request["draft_probs"],
              request["threshold_single"], request["threshold_acc"], rng)
