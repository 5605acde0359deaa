"""Draft trees, target-probability reuse and tree-selection rules (THEORY.md section 5).

Conventions (used everywhere in this module, the `trees` command and the notebook):
- A *tree* is a prefix-closed set of non-root nodes (shortlex indices, verifiers.tree) of
  an instance of depth L; its *budget* N is its number of nodes.
- Verification of a deterministic tree is by target sampling: sample from the target and
  walk down while the sampled token is a child in the tree; the first sampled token that
  is not a child (or the bonus token below a leaf) is the correction token. Then
      E[accepted] = sum_{n in T} p(n)        (p(n) = target path probability),
  and this is the best any valid verifier can do (speclp.lp.optimum(instance, tree_nodes=T)
  certifies it: the LP of that one tree, lp.full.tree_lp).
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
  target-first-gbv  draw t ~ p as above, then K i.i.d. draft paths of length L' below t
                 verified by GBV, with the shape L' = min(L - 1, N), K = min(N // L',
                 largest K whose (V^L')^K draft configurations fit `max_configurations`):
                     tokens per round = 1 + sum_t p(t) BE_GBV(sub-instance below t, K, L').
Every selection is a prefix-closed top-N of a score that never increases along a path,
so "best-first expansion" and "top-N of all nodes" give the same tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..verifiers.exact import configurations, draft_tree, exact_result
from ..verifiers.law import block_law
from ..verifiers.tree import TreeModel, depth_offset, node_depths, num_nodes

RULES = ("draft", "rerank", "target-first", "target-first-gbv")
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
        accepted, used = one, 0
        sub_depth = depth - 1
        for t in range(vocab):
            p_t = model.target[0, t]
            if sub_depth == 0 or p_t == 0:
                continue
            sub = subtree_model(model, t, sub_depth)
            tree = draft_ranked_tree(sub, budget)
            used = max(used, len(tree))
            accepted = accepted + p_t * tree_accepted(sub, tree)
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


def optimal_tree_value(model: TreeModel, budget: int) -> tuple[Any, np.ndarray]:
    """Best prefix-closed tree of N nodes for target-sampling verification: top-N by p(z).

    (p(z) is non-increasing along paths, so the top-N set is prefix-closed and maximises
    sum p over all N-node sets, prefix-closed or not.) Returns (E[accepted], tree).
    """
    tree = ranked_tree(model.node_probabilities("target"), budget, model.vocab_size)
    return tree_accepted(model, tree), tree


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


__all__ = ["RULES", "RuleValue", "all_rules", "draft_ranked_tree", "gbv_shape", "node_count",
           "node_depths", "optimal_tree_value", "ranked_tree", "reranked_tree", "rerank_model",
           "reuse_probability", "rule_value", "subtree_model", "tree_accepted"]


# ---------------------------------------------------------------------------
# real-model runs (`speclp trees`)
# ---------------------------------------------------------------------------

def real_rule_values(rows: Any, budgets: list[int], rules: tuple[str, ...] = RULES,
                     max_configurations: int = MAX_CONFIGURATIONS) -> dict[str, Any]:
    """Exact rule values on the rows of a real pair (verifiers.real_rows.TreeRows).

    `renormalised`: every rule on the instance of the M kept tokens per node, renormalised
    (a truncation of the pair). `candidate_exact`: draft / rerank / target-first /
    oracle on the UNrenormalised rows, i.e. with the real full-vocabulary probabilities,
    trees restricted to the candidate tree: exact for those trees, a lower bound on the
    unrestricted rule (target-first counts 0 tokens below a first token outside the M
    candidates). `oracle` = best N-node tree for target-sampling verification (top-N by
    p, needs the target everywhere: a reference, not a rule).
    """
    norm = TreeModel(rows.target, rows.draft, rows.depth)
    raw = TreeModel(rows.target_edge, rows.draft_edge, rows.depth)
    out: dict[str, Any] = {"renormalised": {}, "candidate_exact": {}, "shapes": {}}
    cache: dict[Any, Any] = {}
    for n in budgets:
        for rule in rules:
            value = rule_value(norm, rule, n, max_configurations, cache)
            out["renormalised"].setdefault(rule, {})[str(n)] = float(value.tokens_per_round)
            if value.shape:
                out["shapes"][str(n)] = list(value.shape)
            if rule != "target-first-gbv":
                raw_value = rule_value(raw, rule, n)
                out["candidate_exact"].setdefault(rule, {})[str(n)] = float(raw_value.tokens_per_round)
        for key, model in (("renormalised", norm), ("candidate_exact", raw)):
            best, _ = optimal_tree_value(model, n)
            out[key].setdefault("oracle", {})[str(n)] = float(best) + 1.0
    return out


def modelled_walltime(tokens_per_round: float, times: dict[str, float], extra_pass: bool,
                      reuse: float = 0.0) -> dict[str, float]:
    """MODELLED seconds per generated token from measured component times of one round.

    sequential = (draft + target tree pass + (1 - reuse) * extra pass) / tokens per round;
    overlapped = (max(draft, (1 - reuse) * extra pass) + target tree pass) / tokens per round
    (the extra target pass run concurrently with drafting; for target-first rules this
    needs drafting below several candidate first tokens, so it is an optimistic model).
    """
    extra = (1.0 - reuse) * times["extra_s"] if extra_pass else 0.0
    seq = (times["draft_s"] + times["target_s"] + extra) / tokens_per_round
    over = (max(times["draft_s"], extra) + times["target_s"]) / tokens_per_round
    return {"sequential_s_per_token": seq, "overlapped_s_per_token_modelled": over}


def summarize_trees(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean tokens per round (renormalised and candidate-exact) and modelled s/token per rule, budget."""
    rows: list[dict[str, Any]] = []
    if not records:
        return rows
    budgets = sorted({int(b) for r in records for b in r["values"]["renormalised"]["draft"]})
    rules = list(records[0]["values"]["renormalised"])
    for rule in rules:
        for n in budgets:
            key = str(n)
            norm = [r["values"]["renormalised"][rule][key] for r in records
                    if key in r["values"]["renormalised"].get(rule, {})]
            raw = [r["values"]["candidate_exact"][rule][key] for r in records
                   if key in r["values"]["candidate_exact"].get(rule, {})]
            timed = [r["walltime"][rule][key] for r in records
                     if r.get("walltime") and key in r["walltime"].get(rule, {})]
            rows.append({
                "rule": rule, "budget": n, "contexts": len(norm),
                "tokens_per_round": float(np.mean(norm)) if norm else None,
                "tokens_per_round_candidate_exact": float(np.mean(raw)) if raw else None,
                "sequential_s_per_token": float(np.mean([t["sequential_s_per_token"] for t in timed]))
                if timed else None,
                "overlapped_s_per_token_modelled":
                    float(np.mean([t["overlapped_s_per_token_modelled"] for t in timed])) if timed else None,
            })
    return rows


def plot_trees(records: list[dict[str, Any]], out_dir: Any, title: str = "") -> list[Any]:
    """Two figures: expected tokens per round vs budget per rule; modelled s/token vs budget."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize_trees(records)
    if not summary:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    colors = {rule: f"C{i}" for i, rule in enumerate(RULES + ("oracle",))}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for rule in dict.fromkeys(s["rule"] for s in summary):
        pts = [s for s in summary if s["rule"] == rule]
        style = "--" if rule == "oracle" else "-"
        axes[0].plot([s["budget"] for s in pts], [s["tokens_per_round"] for s in pts], style,
                     marker="o", label=rule, color=colors.get(rule))
        ok = [s for s in pts if s["tokens_per_round_candidate_exact"] is not None]
        if ok:
            axes[1].plot([s["budget"] for s in ok], [s["tokens_per_round_candidate_exact"] for s in ok],
                         style, marker="o", label=rule, color=colors.get(rule))
    axes[0].set_title("renormalised top-M instance (exact); target-first rules: +1 target pass",
                      fontsize=9)
    axes[1].set_title("real probabilities on candidate tree (exact, lower bound)", fontsize=9)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget N (drafted nodes)")
        ax.set_ylabel("E[tokens per round] = E[accepted] + 1")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    paths.append(out_dir / "trees_acceptance.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    timed = [s for s in summary if s["sequential_s_per_token"] is not None]
    if timed:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for rule in dict.fromkeys(s["rule"] for s in timed):
            pts = [s for s in timed if s["rule"] == rule]
            line = ax.plot([s["budget"] for s in pts], [1000 * s["sequential_s_per_token"] for s in pts],
                           marker="o", label=f"{rule} sequential", color=colors.get(rule))
            ax.plot([s["budget"] for s in pts],
                    [1000 * s["overlapped_s_per_token_modelled"] for s in pts], ":", marker="x",
                    color=line[0].get_color(), label=f"{rule} overlapped (modelled)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget N")
        ax.set_ylabel("MODELLED ms per token")
        ax.set_title("modelled from measured draft / tree-pass / extra-pass times", fontsize=9)
        ax.legend(fontsize=6)
        fig.tight_layout()
        paths.append(out_dir / "trees_walltime_modelled.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def run_trees(target: Any, draft: Any, prompts: list[dict[str, Any]], budgets: list[int],
              rules: tuple[str, ...], out_file: Any, width: int = 4, depth: int = 4,
              contexts_per_prompt: int = 2, every: int = 8, temperature: float = 1.0,
              draft_temperature: float | None = None, seed: int = 0, label: str = "",
              eos: set[int] | None = None, time_rounds: bool = True,
              progress: Any = lambda it: it) -> dict[str, Any]:
    """Compute (or resume) the `trees` records: one JSONL record per (prompt, context), keyed
    on every setting that changes it; returns {"file", "computed", "reused", "keys"} (keys:
    this call's records, for summaries that count only what was asked).

    prompts: [{"id", "tokens"}]. Rows: verifiers.real_rows.tree_rows(select="mix"): the
    top-M tokens of (p + q)/2 at every node to depth L. Walltime (time_rounds): measured
    draft / tree-pass / extra-pass times of the draft-ranked tree of each budget at this
    context, turned into MODELLED s/token per rule (reuse of the context row = 0: with
    target-sampling verification of a deterministic tree the correction token is never a
    drafted child, see reuse_probability).
    """
    from pathlib import Path

    import torch

    from ..verifiers.real_rows import sample_contexts, time_tree_round, tree_rows
    from .realgap import _stable_hash, prompt_digest
    from .store import append_jsonl, load_jsonl, record_key

    out_file = Path(out_file)
    done = {r.get("key") for r in load_jsonl(out_file)}
    dtype = str(getattr(target, "dtype", ""))
    computed = reused = 0
    wanted: list[str] = []

    def key_of(prompt: dict[str, Any], c: int) -> str:
        """Every setting that changes a record (store.record_key)."""
        return record_key({"kind": "trees", "pair": label, "prompt": prompt["id"],
                           "prompt_tokens": prompt_digest(prompt), "context": c, "width": width,
                           "depth": depth, "budgets": list(budgets), "rules": list(rules),
                           "every": every, "temperature": temperature,
                           "draft_temperature": draft_temperature, "seed": seed,
                           "timing": bool(time_rounds), "dtype": dtype})

    for prompt in progress(prompts):
        keys = [key_of(prompt, c) for c in range(contexts_per_prompt)]
        wanted.extend(keys)
        if all(k in done for k in keys):
            reused += len(keys)
            continue
        gen = torch.Generator().manual_seed(seed + _stable_hash(prompt["id"]))
        contexts = sample_contexts(target, prompt["tokens"], contexts_per_prompt, every,
                                   temperature, eos, gen)
        for c, context in enumerate(contexts):
            key = key_of(prompt, c)
            if key in done:
                reused += 1
                continue
            rows = tree_rows(target, draft, context, width, depth, temperature, draft_temperature,
                             select="mix")
            values = real_rule_values(rows, budgets, rules)
            walltime: dict[str, Any] = {}
            times: dict[str, Any] = {}
            if time_rounds:
                norm = TreeModel(rows.target, rows.draft, rows.depth)
                for n in budgets:
                    tree = draft_ranked_tree(norm, n)
                    nodes = [rows.node_tokens(int(i)) for i in tree]
                    t = time_tree_round(target, draft, context, nodes, temperature, draft_temperature)
                    times[str(n)] = t
                    for rule in rules:  # the oracle is a reference, not a rule: not timed
                        tpr = values["renormalised"][rule][str(n)]
                        walltime.setdefault(rule, {})[str(n)] = modelled_walltime(
                            tpr, t, extra_pass=rule not in ("draft", "oracle"))
            record = {"key": key, "pair": label, "prompt": prompt["id"], "context": c,
                      "context_tokens": len(context), "width": width, "depth": depth,
                      "selection": "top-M of (p+q)/2 per node", "renormalised_values": True,
                      "covered_target_mean": float(np.mean(rows.covered_target)),
                      "covered_target_root": float(rows.covered_target[0]),
                      "temperature": temperature, "draft_temperature": draft_temperature,
                      "every": every, "seed": seed, "dtype": dtype,
                      "values": values, "times": times, "walltime": walltime,
                      "rows_seconds": rows.seconds}
            append_jsonl(out_file, record)
            done.add(key)
            computed += 1
    return {"file": str(out_file), "computed": computed, "reused": reused, "keys": wanted}


# ---------------------------------------------------------------------------
# reuse in real decoding (the engine drafts K paths of length L, not trees)
# ---------------------------------------------------------------------------

ENGINE_SHAPES = {8: (2, 4), 16: (2, 8), 32: (4, 8), 64: (8, 8)}  # budget N -> (K, L), K * L = N


def step_reuse(steps: list[Any]) -> tuple[int, int]:
    """(row-steps whose correction token is a drafted child of the output node, row-steps).

    steps: verifiers.engine.StepRecord list (EngineConfig.record_steps=True). In those
    row-steps the tree pass already computed p(.|next context) (it computed rows at every
    drafted node), so a rule needing that row costs no extra target pass.
    """
    hits = total = 0
    for step in steps:
        tokens = step.tree.tokens.cpu()  # [B, K, L]
        depth = tokens.shape[-1]
        for b in range(tokens.shape[0]):
            k, acc, y = int(step.path[b]), int(step.accepted[b]), int(step.token[b])
            total += 1
            if acc >= depth:
                continue  # bonus token below a leaf: nothing was drafted there
            same = (tokens[b, :, :acc] == tokens[b, k, :acc]).all(-1)  # [K] paths through the node
            hits += int(bool((tokens[b, same, acc] == y).any()))
    return hits, total


def run_engine_reuse(pair: Any, prompts: list[dict[str, Any]], budgets: list[int], verifiers: list[str],
                     out_file: Any, max_new_tokens: int = 48, temperature: float = 1.0,
                     seed: int = 0, label: str = "") -> dict[str, Any]:
    """Decode every prompt with the engine at each budget (mapped to K x L by ENGINE_SHAPES)
    and verifier; record the measured reuse rate and the engine's metrics (resumable JSONL)."""
    from pathlib import Path

    import torch

    from ..verifiers.engine import EngineConfig, SpeculativeEngine
    from .realgap import prompt_digest
    from .store import append_jsonl, load_jsonl, record_key

    out_file = Path(out_file)
    done = {r.get("key") for r in load_jsonl(out_file)}
    dtype = str(getattr(pair.target.model, "dtype", ""))
    computed = 0
    wanted: list[str] = []
    for n in budgets:
        if n not in ENGINE_SHAPES:
            raise ValueError(f"engine budget {n}: known shapes {sorted(ENGINE_SHAPES)}")
        paths, depth = ENGINE_SHAPES[n]
        for name in verifiers:
            for prompt in prompts:
                key = record_key({"kind": "trees-engine", "pair": label, "prompt": prompt["id"],
                                  "prompt_tokens": prompt_digest(prompt), "verifier": name,
                                  "budget": n, "temperature": temperature,
                                  "max_new_tokens": max_new_tokens, "seed": seed, "dtype": dtype})
                wanted.append(key)
                if key in done:
                    continue
                config = EngineConfig(paths=paths, depth=depth, temperature=temperature,
                                      max_new_tokens=max_new_tokens, record_steps=True)
                engine = SpeculativeEngine(pair, verifier=name, config=config)
                gen = torch.Generator(device=pair.target.device).manual_seed(seed)
                result = engine.generate([prompt["tokens"]], generator=gen)
                hits, total = step_reuse(result.steps)
                metrics = {k: v for k, v in result.metrics.items()
                           if isinstance(v, int | float) and not isinstance(v, bool)}
                record = {"key": key, "pair": label, "prompt": prompt["id"], "verifier": name,
                          "budget": n, "paths": paths, "depth": depth,
                          "shape_note": "engine drafts K i.i.d. paths of length L (K*L = N), not trees",
                          "reuse_hits": hits, "row_steps": total,
                          "reuse_rate": hits / total if total else None, "metrics": metrics}
                append_jsonl(out_file, record)
                done.add(key)
                computed += 1
    return {"file": str(out_file), "computed": computed, "keys": wanted}


def summarize_engine_reuse(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pooled reuse rate and mean measured metrics per (verifier, budget)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["verifier"], r["budget"]), []).append(r)
    out = []
    for (name, n), recs in sorted(groups.items()):
        hits, total = sum(r["reuse_hits"] for r in recs), sum(r["row_steps"] for r in recs)
        out.append({"verifier": name, "budget": n, "shape": [recs[0]["paths"], recs[0]["depth"]],
                    "prompts": len(recs), "reuse_rate": hits / total if total else None,
                    "row_steps": total,
                    "tokens_per_call": float(np.mean([r["metrics"].get("tokens_per_call", np.nan)
                                                      for r in recs])),
                    "ms_per_token": float(np.mean([r["metrics"].get("ms_per_token", np.nan)
                                                   for r in recs]))})
    return out
