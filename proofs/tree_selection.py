"""Draft trees, target-probability reuse and tree-selection rules (docs/theory.md section 14).

Conventions (used everywhere in this module, the `trees` command and the notebook):
- A *tree* is a prefix-closed set of non-root nodes (shortlex indices, verifiers.tree) of
  an instance of depth L; its *budget* N is its number of nodes.
- Verification of a deterministic tree is by target sampling: sample from the target and
  walk down while the sampled token is a child in the tree; the first sampled token that
  is not a child (or the bonus token below a leaf) is the correction token. Then
      E[accepted] = sum_{n in T} p(n)        (p(n) = target path probability),
  the optimum of the LP of that one tree (docs/theory.md Theorem 4.3;
  speclp.lp.optimum(instance, tree_nodes=T) certifies it: lp.full.tree_lp).
- *Tokens per round* = E[accepted] + 1 (the correction / bonus token): tokens produced
  per verification pass (tree pass) of the target. Rules that need the target row at the
  current context report ``extra_target_rows = 1``: one more target pass per round unless
  that row is reused from the previous pass (see reuse_probability). Tokens per target
  call without reuse is tokens_per_round / 2 for those rules.

Selection rules (budget N, instance depth L; all exact on exact instances):
  draft          top-N nodes by draft path probability q(z) (ties by shortlex index).
  rerank         top-N by score(z) = p(z_1) q(z_2..z_d | z_1): the target row at the
                 context replaces the draft's for the first token.
  target-first   draw t ~ p(.|context) (an exact target sample, accepted for free) and
                 spend the whole budget on the draft-ranked tree T_t of the subtree below
                 t (depth L - 1):  tokens per round =
                     1 + sum_t p(t) [1 + sum_{n in T_t} p(n | t)]
                 (the t token, the accepted tokens below t, and the correction token).
                 This equals 1 + sum_{n in S} p(n) for the FIXED tree S = {every first
                 token} + {t T_t}, of up to V (N + 1) nodes: at budget N, target-first
                 verifies as much as a fixed tree of up to V (N + 1) nodes would, while
                 drafting only N (it drafts after seeing t).
  target-first-gbv  draw t ~ p as above, then K i.i.d. draft paths of length L' below t
                 verified by GBV, with the shape L' = min(L - 1, N), K = min(N // L',
                 largest K whose (V^L')^K draft configurations fit `max_configurations`):
                     tokens per round = 1 + sum_t p(t) BE_GBV(sub-instance below t, K, L').
                 Not monotone in N: GBV is not monotone in K (it is not always >= BV, its
                 K = 1 case; docs/theory.md section 9.4), and the shape changes with N (K grows at
                 a fixed L'); once the configuration cap fixes the shape, the value repeats.
Every selection is a prefix-closed top-N of a score that never increases along a path,
so "best-first expansion" and "top-N of all nodes" give the same tree.

References (not rules: they need the target row at every node, which no rule has):
  oracle         the best FIXED N-node tree, top-N by p(z) (optimal_tree_value): an upper
                 bound for draft and rerank (each picks a fixed N-node tree) and NOT for
                 the target-first rules (see above: they can exceed it).
  target-first-oracle  t ~ p, then the best N-node tree below t (top-N by p(.|t)): an upper
                 bound for target-first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..verifiers.exact import configurations, draft_tree, exact_result
from ..verifiers.registry import block_law
from ..verifiers.tree import TreeModel, depth_offset, node_depths, num_nodes

RULES = ("draft", "rerank", "target-first", "target-first-gbv")
REFERENCES = ("oracle", "target-first-oracle")
"""Reference values shown next to the rules (module docstring); never selectable as --rules."""
MAX_CONFIGURATIONS = 5000


def ranked_tree(scores: np.ndarray, budget: int, vocab: int) -> np.ndarray:
    """[min(N, nodes)] node indices of the top-`budget` non-root nodes by score.

    scores [N] (float or exact), non-increasing along every path; ties by shortlex index
    (so a parent always precedes its children and the result is prefix-closed).
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    order = sorted(range(1, len(scores)), key=lambda i: (-scores[i], i))
    chosen = np.array(sorted(order[:budget]), dtype=np.int64)
    present = set(chosen.tolist())
    for n in chosen.tolist():
        parent = (n - 1) // vocab
        if parent and parent not in present:
            raise ValueError("scores increase along a path: the top-N set is not prefix-closed")
    return chosen


def rerank_model(model: TreeModel) -> TreeModel:
    """Rows whose path probabilities are the rerank scores: target root row, draft rows below."""
    rows = model.draft.copy()
    rows[0] = model.target[0]
    return TreeModel(model.target, rows, model.depth)


def draft_ranked_tree(model: TreeModel, budget: int) -> np.ndarray:
    """Rule `draft`: top-N by q(z)."""
    return ranked_tree(model.node_probabilities("draft"), budget, model.vocab_size)


def reranked_tree(model: TreeModel, budget: int) -> np.ndarray:
    """Rule `rerank`: top-N by p(z_1) q(z_2..|z_1)."""
    return ranked_tree(rerank_model(model).node_probabilities("draft"), budget, model.vocab_size)


def tree_accepted(model: TreeModel, tree: np.ndarray) -> Any:
    """E[accepted] = sum_{n in T} p(n) of verification by target sampling (exact on exact models)."""
    p = model.node_probabilities("target")
    zero = p[0] * 0
    return sum((p[int(n)] for n in tree), zero)


def subtree_model(model: TreeModel, token: int, depth: int) -> TreeModel:
    """Rows below the first token `token`, as an instance of depth `depth` (<= L - 1).

    Node s of the sub-instance (depth d) is node (token, s) of depth d + 1 of the instance.
    """
    if not 0 <= depth <= model.depth - 1:
        raise ValueError(f"subtree depth must be in 0..{model.depth - 1}, got {depth}")
    vocab = model.vocab_size
    index = []
    for d in range(depth + 1):
        start = depth_offset(vocab, d + 1) + token * vocab**d
        index.extend(range(start, start + vocab**d))
    index = np.array(index, dtype=np.int64)
    return TreeModel(model.target[index], model.draft[index], depth)


def gbv_shape(vocab: int, depth: int, budget: int,
              max_configurations: int = MAX_CONFIGURATIONS) -> tuple[int, int]:
    """(K, L') for target-first-gbv: L' = min(L - 1, N), K = min(N // L', cap) (module doc)."""
    sub_depth = min(depth - 1, budget)
    if sub_depth <= 0:
        return 0, 0
    paths = max(1, budget // sub_depth)
    while paths > 1 and (vocab**sub_depth) ** paths > max_configurations:
        paths -= 1
    return paths, sub_depth


@dataclass
class RuleValue:
    """Exact expectation of one rule at one budget (see module conventions)."""

    rule: str
    budget: int
    tokens_per_round: Any  # E[accepted] + 1
    accepted: Any  # E[accepted] (the free target token of target-first rules included)
    extra_target_rows: int  # target rows needed at the context before drafting (0 or 1)
    nodes: int  # drafted nodes actually used (<= budget)
    shape: tuple[int, int] | None = None  # (K, L') for target-first-gbv

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "budget": self.budget, "tokens_per_round": self.tokens_per_round,
                "accepted": self.accepted, "extra_target_rows": self.extra_target_rows,
                "nodes": self.nodes, "shape": list(self.shape) if self.shape else None}


def rule_value(model: TreeModel, rule: str, budget: int,
               max_configurations: int = MAX_CONFIGURATIONS,
               cache: dict[Any, Any] | None = None) -> RuleValue:
    """Exact tokens per round of a selection rule at budget N (module docstring).

    cache: optional dict reused across calls on the SAME model (memoises the GBV block
    efficiencies below each first token per shape; budgets often share a shape).
    """
    vocab, depth = model.vocab_size, model.depth
    one = model.target[0, 0] * 0 + 1
    if rule in ("draft", "rerank"):
        tree = draft_ranked_tree(model, budget) if rule == "draft" else reranked_tree(model, budget)
        accepted = tree_accepted(model, tree)
        return RuleValue(rule, budget, accepted + one, accepted, int(rule == "rerank"), len(tree))
    if rule == "target-first":
        accepted, used = target_first_accepted(model, budget, draft_ranked_tree)
        return RuleValue(rule, budget, accepted + one, accepted, 1, used)
    if rule == "target-first-gbv":
        paths, sub_depth = gbv_shape(vocab, depth, budget, max_configurations)
        tokens = one + one  # t, then a correction token (sub_depth = 0: the bonus below t)
        if sub_depth > 0:
            tokens = one
            for t in range(vocab):
                p_t = model.target[0, t]
                if p_t == 0:
                    continue
                key = ("gbv", t, paths, sub_depth)
                if cache is None or key not in cache:
                    sub = subtree_model(model, t, sub_depth)
                    value = exact_result(sub, "gbv", paths=paths).block_efficiency
                    if cache is None:
                        tokens = tokens + p_t * value
                        continue
                    cache[key] = value
                tokens = tokens + p_t * cache[key]
        return RuleValue(rule, budget, tokens, tokens - one, 1, paths * sub_depth,
                         (paths, sub_depth))
    raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")


def target_first_accepted(model: TreeModel, budget: int, choose: Any) -> tuple[Any, int]:
    """(E[accepted], nodes used) when t ~ p(.|context) is accepted for free and the tree
    choose(sub-instance below t, budget) is verified below it (target sampling)."""
    one = model.target[0, 0] * 0 + 1
    accepted, used = one, 0
    sub_depth = model.depth - 1
    for t in range(model.vocab_size):
        p_t = model.target[0, t]
        if sub_depth == 0 or p_t == 0:
            continue
        sub = subtree_model(model, t, sub_depth)
        tree = choose(sub, budget)
        used = max(used, len(tree))
        accepted = accepted + p_t * tree_accepted(sub, tree)
    return accepted, used


def target_ranked_tree(model: TreeModel, budget: int) -> np.ndarray:
    """Top-N nodes by target path probability p(z): the best fixed N-node tree."""
    return ranked_tree(model.node_probabilities("target"), budget, model.vocab_size)


def optimal_tree_value(model: TreeModel, budget: int) -> tuple[Any, np.ndarray]:
    """Best prefix-closed tree of N nodes for target-sampling verification: top-N by p(z).

    (Prefix-closed and optimal over all N-node sets: docs/theory.md section 14.1.) Returns
    (E[accepted], tree).
    """
    tree = target_ranked_tree(model, budget)
    return tree_accepted(model, tree), tree


def reference_value(model: TreeModel, reference: str, budget: int) -> Any:
    """Tokens per round (E[accepted] + 1) of a reference of the module docstring."""
    one = model.target[0, 0] * 0 + 1
    if reference == "oracle":
        return optimal_tree_value(model, budget)[0] + one
    if reference == "target-first-oracle":
        return target_first_accepted(model, budget, target_ranked_tree)[0] + one
    raise ValueError(f"unknown reference {reference!r}; known: {', '.join(REFERENCES)}")


# ---------------------------------------------------------------------------
# reuse of the previous pass's target rows
# ---------------------------------------------------------------------------

def reuse_probability(model: TreeModel, verifier: str, paths: int) -> Any:
    """P(the correction token Y is a drafted child of the output node) for K i.i.d. paths.

    Then the previous tree pass already computed the target row at the next round's full
    context (output node + Y), so a rule needing that row costs no extra target pass.
    (For a deterministic tree verified by target sampling this probability is 0: the
    correction token is by construction not a child in the tree.)
    """
    configs = configurations(model, paths)
    tokens = configs.tokens  # [C, K, L]
    law = block_law(verifier, draft_tree(model, tokens))
    joint = law.joint()
    if not isinstance(joint, np.ndarray):
        joint = joint.double().cpu().numpy()
    count, k_paths, depth = tokens.shape
    vocab = model.vocab_size
    child = np.zeros((count, k_paths, depth + 1, vocab), dtype=bool)
    for k in range(k_paths):
        for j in range(k_paths):
            same = np.ones(count, dtype=bool)
            for i in range(depth):  # output node = first i tokens of path k
                rows = np.nonzero(same)[0]
                child[rows, k, i, tokens[rows, j, i]] = True
                same &= tokens[:, k, i] == tokens[:, j, i]
    weights = configs.probability.reshape(-1, 1, 1, 1)
    masked = np.where(child, joint * weights, joint.reshape(-1)[0] * 0)
    return masked.sum()


def all_rules(model: TreeModel, budgets: list[int], rules: tuple[str, ...] = RULES,
              max_configurations: int = MAX_CONFIGURATIONS) -> list[RuleValue]:
    """rule_value for every (rule, budget)."""
    return [rule_value(model, r, n, max_configurations) for n in budgets for r in rules]


def node_count(vocab: int, depth: int) -> int:
    """Non-root nodes of an instance (the largest useful budget)."""
    return num_nodes(vocab, depth) - 1


__all__ = ["REFERENCES", "RULES", "RuleValue", "all_rules", "draft_ranked_tree", "gbv_shape",
           "node_count", "node_depths", "optimal_tree_value", "ranked_tree", "reference_value",
           "reranked_tree", "rerank_model", "reuse_probability", "rule_value", "subtree_model",
           "target_first_accepted", "target_ranked_tree", "tree_accepted"]
