"""Real-model tree-selection runs (`speclp trees`): rule values on a real pair's rows,
modelled walltime, summaries, and the engine's reuse of target rows.

The rules themselves (exact tokens per round of each rule on an instance) and the
references shown next to them are in speclp.proofs.tree_selection. A run is defined by a
TreesSpec (the CLI reads its defaults); run_trees and run_engine_reuse take one.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch

from .. import inputs
from ..deadline import Deadline
from ..decode.engine import EngineConfig, SpeculativeEngine
from ..decode.tree_rows import sample_contexts, time_tree_round, tree_rows
from ..inputs import BadArgument
from ..proofs.tree_selection import (
    MAX_CONFIGURATIONS,
    REFERENCES,
    RULES,
    draft_ranked_tree,
    node_count,
    reference_value,
    rule_value,
)
from ..verifiers.registry import verifier_names
from ..verifiers.tree import TreeModel
from .realgap import _stable_hash, planned_dtype, prompt_digest, recorded, run_identity
from .store import append_jsonl, load_jsonl, record_key, select_records, slug

ENGINE_SHAPES = {8: (2, 4), 16: (2, 8), 32: (4, 8), 64: (8, 8)}  # budget N -> (K, L), K * L = N
MAX_TREE_NODES = 2000  # candidate tree nodes (rows of V probabilities per model, per context)
MAX_TREE_LEVEL = 1024  # nodes of the widest level (one batched forward)
TUPLE_FIELDS = ("budgets", "rules", "engine_budgets", "engine_verifiers")  # TreesSpec's list fields


def check_contexts(spec: Any) -> None:
    """The fields of the contexts a real-model run visits, as `trees` and `realgap` specs
    check them: contexts_per_prompt, every, temperature, draft_temperature, seed
    (BadArgument naming the field)."""
    inputs.integer("contexts_per_prompt", spec.contexts_per_prompt, 1, 10_000)
    inputs.integer("every", spec.every, 1, 100_000)
    inputs.number("temperature", spec.temperature, 0)
    if spec.draft_temperature is not None:
        inputs.number("draft_temperature", spec.draft_temperature, 0)
    inputs.seed("seed", spec.seed)


@dataclasses.dataclass(frozen=True)
class TreesSpec:
    """Everything that defines a `speclp trees` run; the CLI's defaults are these.

    The field names are the keys of the folder's spec.json (experiments.store), so a
    folder written before this class existed reopens unchanged.
    pair: pair name (decode.models); prompts: humaneval:N or file:PATH; budgets: the N
    (drafted nodes per round); rules: proofs.tree_selection.RULES (the REFERENCES are
    always computed too); top: M candidate children per node (top-M of (p + q)/2); depth:
    L of the candidate tree; contexts_per_prompt contexts, `every` target-sampled tokens
    apart; temperature / draft_temperature of the rows (None: the draft at `temperature`,
    or 1.5 when the draft is the target model); no_timing: skip the measured round times;
    engine_budgets / engine_verifiers / engine_tokens: the engine's reuse runs
    (ENGINE_SHAPES); skip_trees: only those; seed: context sampling and engine seed.
    Frozen; the list fields are tuples (a list given is kept as a tuple) and are lists in
    spec.json (as_dict), as before.
    """

    pair: str = "qwen2.5-coder"
    prompts: str = "humaneval:10"
    budgets: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    rules: tuple[str, ...] = RULES
    top: int = 4
    depth: int = 4
    contexts_per_prompt: int = 2
    every: int = 8
    temperature: float = 1.0
    draft_temperature: float | None = None
    no_timing: bool = False
    engine_budgets: tuple[int, ...] = ()
    engine_verifiers: tuple[str, ...] = ("bv", "gbv")
    engine_tokens: int = 48
    skip_trees: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        """Construction is the validation: BadArgument naming the field, in the order
        `speclp trees` reports them (the prompts are read, and the pair resolved, by whoever
        runs the spec)."""
        for name in TUPLE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise BadArgument(name, f"must be a list, got {inputs.short(value)}")
            object.__setattr__(self, name, tuple(value))
        check_contexts(self)
        inputs.integer("engine_tokens", self.engine_tokens, 1, 100_000)
        self._check_tree()
        bad = [r for r in self.rules if r not in RULES]
        if bad or not self.rules:
            why = " (a reference, always shown; not a rule)" if bad and bad[0] in REFERENCES else ""
            raise BadArgument("rules", f"unknown rule {bad[0] if bad else ''!r}{why}; known: "
                                       f"{', '.join(RULES)}")
        self._check_engine()

    def _check_tree(self) -> None:
        """budgets, top, depth: the candidate tree fits and holds every budget."""
        for budget in self.budgets:
            inputs.integer("budgets", budget, 1)
        if not self.budgets:
            raise BadArgument("budgets", "give at least one budget")
        inputs.integer("top", self.top, 2, 64)
        inputs.integer("depth", self.depth, 2, 16)
        nodes = node_count(self.top, self.depth)
        if nodes > MAX_TREE_NODES or self.top**self.depth > MAX_TREE_LEVEL:
            raise BadArgument("top/depth", f"the M={self.top}, L={self.depth} candidate tree has "
                                           f"{nodes:,} nodes (limits {MAX_TREE_NODES:,} nodes, "
                                           f"{MAX_TREE_LEVEL:,} at the deepest level); use a smaller "
                                           "`top` or `depth`")
        if max(self.budgets) > nodes:
            raise BadArgument("budgets", f"{max(self.budgets)} exceeds the {nodes} nodes of the "
                                         f"M={self.top}, L={self.depth} candidate tree; raise `top` "
                                         "or `depth`")

    def _check_engine(self) -> None:
        """engine_budgets (ENGINE_SHAPES), engine_verifiers (registered), skip_trees."""
        bad = [n for n in self.engine_budgets if n not in ENGINE_SHAPES]
        if bad:
            raise BadArgument("engine_budgets", f"{bad[0]} has no K x L shape; known: "
                                                f"{', '.join(map(str, ENGINE_SHAPES))}")
        known = verifier_names(include_broken=True)
        unknown = [v for v in self.engine_verifiers if v not in known]
        if unknown or (self.engine_budgets and not self.engine_verifiers):
            raise BadArgument("engine_verifiers", f"unknown verifier {unknown[0] if unknown else ''!r}; "
                                                  f"known: {', '.join(known)}")
        if self.skip_trees and not self.engine_budgets:
            raise BadArgument("skip_trees", "needs `engine_budgets` (otherwise nothing is computed)")

    def as_dict(self) -> dict[str, Any]:
        """The folder's spec (engine settings only when engine budgets are given), the tuple
        fields as lists: the spec.json of a folder written before the spec was frozen."""
        out = dataclasses.asdict(self)
        out.update({name: list(out[name]) for name in TUPLE_FIELDS})
        if not self.engine_budgets:
            out["engine_verifiers"], out["engine_tokens"] = [], None
        return out


def no_progress(items: Any, total: int | None = None) -> Any:
    return items


# ---------------------------------------------------------------------------
# real-model runs (`speclp trees`)
# ---------------------------------------------------------------------------

def real_rule_values(rows: Any, budgets: list[int], rules: tuple[str, ...] = RULES,
                     max_configurations: int = MAX_CONFIGURATIONS) -> dict[str, Any]:
    """Exact rule and reference values on the rows of a real pair (decode.tree_rows.TreeRows).

    `renormalised`: every rule and reference on the instance of the M kept tokens per node,
    renormalised (a truncation of the pair). `candidate_exact`: every rule but
    target-first-gbv, and the references, on the UNrenormalised rows, i.e. with the real
    full-vocabulary probabilities, trees restricted to the candidate tree: exact for those
    trees, a lower bound on the unrestricted rule (target-first counts 0 tokens below a
    first token outside the M candidates). References (proofs.tree_selection): `oracle` =
    best fixed N-node tree (a bound for draft and rerank only), `target-first-oracle` =
    best N-node tree below the target-sampled first token (a bound for target-first).
    `shapes`: target-first-gbv's (K, L') per budget.
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
            for reference in REFERENCES:
                out[key].setdefault(reference, {})[str(n)] = float(reference_value(model, reference, n))
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


def _mean_and_se(values: list[float], groups: list[Any]) -> tuple[float | None, float | None]:
    """Mean over contexts, and the standard error of that mean over prompts: the sd of the
    per-prompt means / sqrt(prompts) (contexts of one prompt are not independent). None
    when there are no values; se None below 2 prompts."""
    if not values:
        return None, None
    by_group: dict[Any, list[float]] = {}
    for value, group in zip(values, groups, strict=True):
        by_group.setdefault(group, []).append(value)
    means = [float(np.mean(v)) for v in by_group.values()]
    se = float(np.std(means, ddof=1) / np.sqrt(len(means))) if len(means) > 1 else None
    return float(np.mean(values)), se


def summarize_trees(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rule (then reference) and budget: mean tokens per round over contexts
    (renormalised, with its standard error over prompts, _mean_and_se, and candidate-exact),
    the numbers of contexts and prompts, target-first-gbv's shape (K, L') and whether it
    repeats the previous budget's ("saturated": the configuration cap fixed it), and
    modelled s/token."""
    rows: list[dict[str, Any]] = []
    if not records:
        return rows
    budgets = sorted({int(b) for r in records for b in r["values"]["renormalised"]["draft"]})
    present = dict.fromkeys(k for r in records for k in r["values"]["renormalised"])
    names = [k for k in present if k not in REFERENCES] + [k for k in REFERENCES if k in present]
    shapes = {n: tuple(s) for r in records for n, s in r["values"].get("shapes", {}).items()}
    for name in names:
        previous = None
        for n in budgets:
            key = str(n)
            having = [r for r in records if key in r["values"]["renormalised"].get(name, {})]
            norm = [r["values"]["renormalised"][name][key] for r in having]
            raw = [r["values"]["candidate_exact"][name][key] for r in records
                   if key in r["values"]["candidate_exact"].get(name, {})]
            timed = [r["walltime"][name][key] for r in records
                     if r.get("walltime") and key in r["walltime"].get(name, {})]
            mean, se = _mean_and_se(norm, [r.get("prompt") for r in having])
            shape = shapes.get(key) if name == "target-first-gbv" else None
            rows.append({
                "rule": name, "reference": name in REFERENCES, "budget": n, "contexts": len(norm),
                "prompts": len({r.get("prompt") for r in having}),
                "tokens_per_round": mean, "tokens_per_round_se": se,
                "tokens_per_round_candidate_exact": float(np.mean(raw)) if raw else None,
                "shape": list(shape) if shape else None,
                "saturated": bool(shape is not None and shape == previous),
                "sequential_s_per_token": float(np.mean([t["sequential_s_per_token"] for t in timed]))
                if timed else None,
                "overlapped_s_per_token_modelled":
                    float(np.mean([t["overlapped_s_per_token_modelled"] for t in timed])) if timed else None,
            })
            previous = shape
    return rows


def trees_key(spec: TreesSpec, label: str, dtype: str, prompt: dict[str, Any], context: int) -> str:
    """The key of one `trees` record: every setting that changes it (store.record_key)."""
    return record_key({"kind": "trees", "pair": label, "prompt": prompt["id"],
                       "prompt_digest": prompt_digest(prompt), "context": context,
                       "width": spec.top, "depth": spec.depth, "budgets": list(spec.budgets),
                       "rules": list(spec.rules), "every": spec.every,
                       "temperature": spec.temperature, "draft_temperature": spec.draft_temperature,
                       "seed": spec.seed, "timing": not spec.no_timing, "dtype": dtype})


def trees_keys(spec: TreesSpec, label: str, dtype: str, prompts: list[dict[str, Any]]) -> list[str]:
    """The record keys run_trees asks for (prompt-major), without a model: prompts need "id"
    and "text" (or "tokens"); dtype: the weights' dtype (str(torch dtype))."""
    return [trees_key(spec, label, dtype, p, c) for p in prompts for c in range(spec.contexts_per_prompt)]


def engine_key(spec: TreesSpec, label: str, dtype: str, prompt: dict[str, Any], verifier: str,
               budget: int) -> str:
    """The key of one engine-reuse record (run_engine_reuse)."""
    return record_key({"kind": "trees-engine", "pair": label, "prompt": prompt["id"],
                       "prompt_digest": prompt_digest(prompt), "verifier": verifier,
                       "budget": budget, "temperature": spec.temperature,
                       "max_new_tokens": spec.engine_tokens, "seed": spec.seed, "dtype": dtype})


def engine_keys(spec: TreesSpec, label: str, dtype: str, prompts: list[dict[str, Any]]) -> list[str]:
    """The record keys run_engine_reuse asks for, in its order, without a model."""
    return [engine_key(spec, label, dtype, p, name, n) for n in spec.engine_budgets
            for name in spec.engine_verifiers for p in prompts]


def context_record(spec: TreesSpec, target: Any, draft: Any, context: list[int]) -> dict[str, Any]:
    """Rows, rule and reference values and (unless spec.no_timing) measured round times
    and modelled s/token of one context (the body of a `trees` record)."""
    rows = tree_rows(target, draft, context, spec.top, spec.depth, spec.temperature,
                     spec.draft_temperature, select="mix")
    values = real_rule_values(rows, spec.budgets, tuple(spec.rules))
    walltime: dict[str, Any] = {}
    times: dict[str, Any] = {}
    if not spec.no_timing:
        norm = TreeModel(rows.target, rows.draft, rows.depth)
        for n in spec.budgets:
            tree = draft_ranked_tree(norm, n)
            nodes = [rows.node_tokens(int(i)) for i in tree]
            t = time_tree_round(target, draft, context, nodes, spec.temperature, spec.draft_temperature)
            times[str(n)] = t
            for rule in spec.rules:  # the references are not rules: not timed
                tpr = values["renormalised"][rule][str(n)]
                walltime.setdefault(rule, {})[str(n)] = modelled_walltime(tpr, t, extra_pass=rule != "draft")
    return {"context_tokens": len(context), "width": spec.top, "depth": spec.depth,
            "selection": "top-M of (p+q)/2 per node", "renormalised_values": True,
            "covered_target_mean": float(np.mean(rows.covered_target)),
            "covered_target_root": float(rows.covered_target[0]),
            "temperature": spec.temperature, "draft_temperature": spec.draft_temperature,
            "every": spec.every, "seed": spec.seed, "values": values, "times": times,
            "walltime": walltime, "rows_seconds": rows.seconds}


def run_trees(spec: TreesSpec, target: Any, draft: Any, prompts: list[dict[str, Any]], out_file: Any,
              label: str = "", eos: set[int] | None = None,
              progress: Callable[[Any, int], Iterator[Any]] = no_progress,
              deadline: Deadline | None = None, dtype: str | None = None) -> dict[str, Any]:
    """Compute (or resume) the `trees` records of `spec`: one JSONL record per (prompt,
    context), keyed on every setting that changes it (trees_key).

    prompts: [{"id", "tokens"}]. Rows: decode.tree_rows.tree_rows(select="mix"): the
    top-M tokens of (p + q)/2 at every node to depth L. Walltime (unless spec.no_timing):
    measured draft / tree-pass / extra-pass times of the draft-ranked tree of each budget
    at this context, turned into MODELLED s/token per rule (reuse of the context row = 0:
    with target-sampling verification of a deterministic tree the correction token is never
    a drafted child, see reuse_probability). progress(items, total) wraps the loop over the
    len(prompts) * contexts_per_prompt contexts. deadline (None: none): no new context is
    started once it has passed; finished records are kept (rerun to continue). dtype (None:
    str(target.dtype)): the weights' dtype in the keys. The models are used only for
    contexts not yet recorded: a fully resumed run may pass target = draft = None.
    Returns {"file", "computed", "reused", "keys" (this call's records, for summaries that
    count only what was asked), "contexts" (asked), "stopped" (None, or why it stopped)}.
    """
    out_file = Path(out_file)
    done = {r.get("key") for r in load_jsonl(out_file)}
    dtype = dtype or str(getattr(target, "dtype", ""))
    deadline = deadline or Deadline(None)
    status: dict[str, Any] = {"file": str(out_file), "computed": 0, "reused": 0, "keys": [],
                              "contexts": len(prompts) * spec.contexts_per_prompt, "stopped": None}

    def contexts() -> Iterator[tuple[dict[str, Any], int, list[int] | None]]:
        for prompt in prompts:
            keys = [trees_key(spec, label, dtype, prompt, c) for c in range(spec.contexts_per_prompt)]
            if all(k in done for k in keys):
                yield from ((prompt, c, None) for c in range(len(keys)))
                continue
            if deadline.passed:
                return
            gen = torch.Generator().manual_seed(spec.seed + _stable_hash(prompt["id"]))
            sampled = sample_contexts(target, prompt["tokens"], spec.contexts_per_prompt, spec.every,
                                      spec.temperature, eos, gen)
            yield from ((prompt, c, context) for c, context in enumerate(sampled))

    for prompt, c, context in progress(contexts(), status["contexts"]):
        key = trees_key(spec, label, dtype, prompt, c)
        status["keys"].append(key)
        if key in done:
            status["reused"] += 1
            continue
        if deadline.passed:
            break
        record = {"key": key, "pair": label, "prompt": prompt["id"], "context": c,
                  **context_record(spec, target, draft, context)}
        append_jsonl(out_file, record)
        done.add(key)
        status["computed"] += 1
    if status["computed"] + status["reused"] < status["contexts"] and deadline.passed:
        status["stopped"] = f"time limit of {deadline.seconds:g} s"
    return status


# ---------------------------------------------------------------------------
# reuse in real decoding (the engine drafts K paths of length L, not trees)
# ---------------------------------------------------------------------------

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


def run_engine_reuse(spec: TreesSpec, pair: Any, prompts: list[dict[str, Any]], out_file: Any,
                     label: str = "", advance: Callable[[], None] = lambda: None,
                     deadline: Deadline | None = None, dtype: str | None = None) -> dict[str, Any]:
    """Decode every prompt with the engine at each of spec.engine_budgets (mapped to K x L by
    ENGINE_SHAPES) and spec.engine_verifiers (spec.engine_tokens new tokens, spec.temperature,
    spec.seed); record the measured reuse rate and the engine's metrics (resumable JSONL).
    advance() is called after each of the len(budgets) * len(verifiers) * len(prompts) runs;
    deadline (None: none): no new run is started once it has passed. dtype (None: the
    target's): the weights' dtype in the keys; the pair is used only for runs not yet
    recorded (a fully resumed run may pass pair = None).
    Returns {"file", "computed", "keys", "runs" (asked), "stopped" (None, or why)}."""
    budgets, verifiers = spec.engine_budgets, spec.engine_verifiers
    max_new_tokens, temperature, seed = spec.engine_tokens, spec.temperature, spec.seed
    deadline = deadline or Deadline(None)
    out_file = Path(out_file)
    done = {r.get("key") for r in load_jsonl(out_file)}
    dtype = dtype or str(getattr(pair.target.model, "dtype", ""))
    computed = 0
    wanted: list[str] = []
    stopped = None
    for n in budgets:
        if n not in ENGINE_SHAPES:
            raise BadArgument("engine_budgets", f"{n} has no K x L shape; known: "
                                                f"{', '.join(map(str, ENGINE_SHAPES))}")
        paths, depth = ENGINE_SHAPES[n]
        for name in verifiers:
            for prompt in prompts:
                key = engine_key(spec, label, dtype, prompt, name, n)
                wanted.append(key)
                if key in done:
                    advance()
                    continue
                if deadline.passed:
                    stopped = f"time limit of {deadline.seconds:g} s"
                    break
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
                advance()
    return {"file": str(out_file), "computed": computed, "keys": wanted, "stopped": stopped,
            "runs": len(budgets) * len(verifiers) * len(prompts)}


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


class TreesStatus(StrEnum):
    """The outcome of a `trees` run (a StrEnum: equal to its word)."""

    COMPLETE = "complete"  # every context and engine run asked for is recorded
    STOPPED = "stopped"  # the time limit stopped it first; finished records are kept (rerun)


@dataclasses.dataclass(frozen=True)
class TreesResult:
    """One `speclp trees` invocation, inspectable without the CLI. pair: the run's label;
    file: the contexts' records (None with skip_trees); computed / reused: contexts computed
    now / found recorded; contexts: records of this invocation summarised; summary: one row
    per (rule, budget) (summarize_trees); engine: the engine's reuse runs ({} when not asked:
    file, computed, stopped, runs, summary); figures: files drawn; stopped: why each part
    stopped early (empty when none). record: the command's --json object, read-only;
    to_json() gives a copy."""

    status: TreesStatus
    pair: str
    file: str | None
    computed: int
    reused: int
    contexts: int
    summary: tuple[Mapping[str, Any], ...]
    engine: Mapping[str, Any]
    figures: tuple[str, ...]
    stopped: tuple[str, ...]
    record: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TreesResult:
        """The result of the command's object (trees_result builds it)."""
        record = copy.deepcopy(dict(data))
        stopped = tuple(record["stopped"] or ())
        return cls(TreesStatus.STOPPED if stopped else TreesStatus.COMPLETE, record["pair"],
                   record["file"], record["computed"], record["reused"], record["contexts"],
                   tuple(MappingProxyType(row) for row in record["summary"]),
                   MappingProxyType(record["engine"]), tuple(record["figures"]), stopped,
                   MappingProxyType(record))

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.record))

# ---------------------------------------------------------------------------
# a `speclp trees` run as its typed result (what the command prints)
# ---------------------------------------------------------------------------

RULE_HELP = {
    "draft": "top-N nodes by draft path probability",
    "rerank": "top-N with the target's first-token row in place of the draft's (+1 target pass)",
    "target-first": "draw the first token from the target (free, +1 target pass), then the "
                    "draft-ranked N-node tree below it",
    "target-first-gbv": "the same first token, then K x L' i.i.d. draft paths below it verified by "
                        "GBV (K x L' <= N, capped by exact enumeration)",
}
REFERENCE_HELP = {
    "oracle": "best FIXED N-node tree (top-N by target probability): a bound for draft and rerank "
              "only; the target-first rules can exceed it",
    "target-first-oracle": "first token from the target, then the best N-node tree below it: a "
                           "bound for target-first",
}
Loader = Callable[[], Any]
"""Loads the pair (decode.models.ModelPair), each prompt given its "tokens"."""
Counter = Callable[[int], AbstractContextManager[Callable[[], None]]]
"""count(total): a context giving the function that counts one engine run."""
Plotter = Callable[[list[dict[str, Any]], Path], list[Path]]
"""(records, folder) -> the figures written (experiments.plots)."""


def no_counter(total: int) -> AbstractContextManager[Callable[[], None]]:
    return nullcontext(lambda: None)


@dataclasses.dataclass
class TreesRun:
    """What a `trees` run works on: the spec with the draft temperature resolved, the label
    and weights' dtype of its keys, its prompts and record files, and the pair (None when
    every record asked for is already recorded: nothing is loaded)."""

    spec: TreesSpec
    label: str
    dtype: str
    prompts: list[dict[str, Any]]
    out_file: Path
    engine_file: Path
    pair: Any = None

    @property
    def eos(self) -> set[int] | None:
        return None if self.pair is None else set(self.pair.target.eos_token_ids)


def plan(out: Path, spec: TreesSpec, prompts: list[dict[str, Any]], load: Loader) -> TreesRun:
    """The run's keys from the spec and the prompts alone; the pair is loaded (`load`) only
    when a record is missing."""
    label, draft_t = run_identity(spec.pair, spec.draft_temperature)
    spec = dataclasses.replace(spec, draft_temperature=draft_t)  # the rows' temperature
    work = TreesRun(spec, label, planned_dtype(), prompts,
                    out / f"{slug(spec.pair)}.jsonl", out / f"{slug(spec.pair)}_engine.jsonl")
    missing = ((not spec.skip_trees
                and not recorded(work.out_file, trees_keys(spec, label, work.dtype, work.prompts)))
               or not recorded(work.engine_file, engine_keys(spec, label, work.dtype, work.prompts)))
    if missing:
        work.pair = load()
    return work


def trees_result(spec: TreesSpec, prompts: list[dict[str, Any]], out: Path, load: Loader,
                 deadline: Deadline | None = None,
                 progress: Callable[[Any, int], Iterator[Any]] = no_progress,
                 count: Counter = no_counter, plot: Plotter | None = None) -> TreesResult:
    """The run of `spec` on `prompts` (read from spec.prompts) into the folder `out`, as its
    TreesResult: plan (the pair loaded by `load` only if a record is missing), the engine
    part (if spec.engine_budgets), then the trees part (unless spec.skip_trees); past the
    deadline no new context or engine run starts (status STOPPED, finished records kept).
    progress(items, total) wraps the contexts, count(total) gives the engine runs' counter,
    plot(records, out) the figures (None: none); only this run's records are summarised."""
    work = plan(out, spec, prompts, load)
    spec, label = work.spec, work.label
    deadline = deadline or Deadline(None)
    engine = engine_part(work, deadline, count) if spec.engine_budgets else {}
    stopped = [f"engine runs: {engine['stopped']}"] if engine.get("stopped") else []
    if spec.skip_trees:
        return TreesResult.from_json({
            "pair": label, "engine": engine, "summary": [], "contexts": 0, "figures": [], "file": None,
            "computed": 0, "reused": 0, "notes": [], "stopped": stopped or None})
    pair = work.pair
    status = run_trees(spec, pair and pair.target.model, pair and pair.draft.model, work.prompts,
                       work.out_file, label, work.eos, progress, deadline, dtype=work.dtype)
    if status["stopped"]:
        stopped.append(f"contexts: {status['stopped']} ({status['computed'] + status['reused']} "
                       f"of {status['contexts']} done; rerun the same command to continue)")
    # only this invocation's records (keys) are counted and plotted
    records = select_records(load_jsonl(work.out_file), status.pop("keys"))
    figures = plot(records, out) if plot is not None else []
    summary = summarize_trees(records)
    return TreesResult.from_json({
        "pair": label, **status, "out": str(out), "contexts": len(records),
        "figures": [str(f) for f in figures], "rules": RULE_HELP, "references": REFERENCE_HELP,
        "notes": notes(summary), "walltime": "MODELLED from measured component times",
        "engine": engine, "summary": summary, "stopped": stopped or None})


def engine_part(work: TreesRun, deadline: Deadline, count: Counter = no_counter) -> dict[str, Any]:
    """The engine's reuse runs (run_engine_reuse) and their summary."""
    spec = work.spec
    if work.pair is not None and work.pair.same_model:
        work.pair.draft_temperature = spec.draft_temperature
    runs = len(spec.engine_budgets) * len(spec.engine_verifiers) * len(work.prompts)
    with count(runs) as advance:
        engine = run_engine_reuse(spec, work.pair, work.prompts, work.engine_file, work.label,
                                  advance, deadline, dtype=work.dtype)
    engine["summary"] = summarize_engine_reuse(select_records(load_jsonl(work.engine_file),
                                                              engine.pop("keys")))
    return engine


def notes(summary: list[dict[str, Any]]) -> list[str]:
    """The lines printed under the trees table: what the columns and rows mean, and what a
    reader would otherwise misread (the references, target-first-gbv's shape)."""
    out = ["tokens per round = E[accepted] + 1; rerank and the target-first rules need one extra "
           "target pass per round (reuse probability 0 for target-sampling verification of a "
           "deterministic tree). 'renorm.': exact on the top-M of (p+q)/2 per node, renormalised "
           "over the M tokens; 'real p, cand.': exact with the real probabilities on the candidate "
           "tree (a lower bound); '+- se': standard error of that mean over prompts (sd of the per-prompt "
           "means / sqrt(prompts)).",
           "references (not rules, they read the target everywhere): " + "; ".join(
               f"{k} = {v}" for k, v in REFERENCE_HELP.items()) + ". At budget N, target-first "
           "verifies as much as a fixed tree of up to V (N + 1) nodes (proofs/tree_selection.py)."]
    gbv = [s for s in summary if s["rule"] == "target-first-gbv" and s["shape"]]
    if gbv:
        shapes = ", ".join(f"N={s['budget']}: {s['shape'][0]}x{s['shape'][1]}" for s in gbv)
        out.append(f"target-first-gbv drafts K x L' paths below the first token ({shapes}). It is "
                   "not monotone in N: GBV is not monotone in K (it is not always >= BV, its K = 1 "
                   "case; docs/theory.md section 9.4), while the K-path optimum is; 'saturated' = the "
                   "exact-enumeration cap fixed the shape, so the value repeats.")
    return out
