"""Real-model tree-selection runs (`speclp trees`): rule values on a real pair's rows,
modelled walltime, summaries, and the engine's reuse of target rows.

The rules themselves (exact tokens per round of each rule on an instance) are in
speclp.proofs.tree_selection.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..proofs.tree_selection import (
    MAX_CONFIGURATIONS,
    RULES,
    draft_ranked_tree,
    optimal_tree_value,
    rule_value,
)
from ..verifiers.tree import TreeModel

# ---------------------------------------------------------------------------
# real-model runs (`speclp trees`)
# ---------------------------------------------------------------------------

def real_rule_values(rows: Any, budgets: list[int], rules: tuple[str, ...] = RULES,
                     max_configurations: int = MAX_CONFIGURATIONS) -> dict[str, Any]:
    """Exact rule values on the rows of a real pair (decode.tree_rows.TreeRows).

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




def run_trees(target: Any, draft: Any, prompts: list[dict[str, Any]], budgets: list[int],
              rules: tuple[str, ...], out_file: Any, width: int = 4, depth: int = 4,
              contexts_per_prompt: int = 2, every: int = 8, temperature: float = 1.0,
              draft_temperature: float | None = None, seed: int = 0, label: str = "",
              eos: set[int] | None = None, time_rounds: bool = True,
              progress: Any = lambda it: it) -> dict[str, Any]:
    """Compute (or resume) the `trees` records: one JSONL record per (prompt, context), keyed
    on every setting that changes it; returns {"file", "computed", "reused", "keys"} (keys:
    this call's records, for summaries that count only what was asked).

    prompts: [{"id", "tokens"}]. Rows: decode.tree_rows.tree_rows(select="mix"): the
    top-M tokens of (p + q)/2 at every node to depth L. Walltime (time_rounds): measured
    draft / tree-pass / extra-pass times of the draft-ranked tree of each budget at this
    context, turned into MODELLED s/token per rule (reuse of the context row = 0: with
    target-sampling verification of a deterministic tree the correction token is never a
    drafted child, see reuse_probability).
    """
    from pathlib import Path

    import torch

    from ..decode.tree_rows import sample_contexts, time_tree_round, tree_rows
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

    steps: decode.engine.StepRecord list (EngineConfig.record_steps=True). In those
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

    from ..decode.engine import EngineConfig, SpeculativeEngine
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
