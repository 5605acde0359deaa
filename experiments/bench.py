"""Paired decoding comparisons on real models (`speclp bench`), with confidence intervals.

One RUN per temperature (grid mode, `grid=True`, what the CLI does): the prompts are decoded
in batches by the speculative engine with one DRIVING verifier at (K_max, L_max); at every
step every SCORED verifier's exact conditional E[tau + 1 | drafted tree] is computed on the
same tree for EVERY (K', L') <= (K_max, L_max): the first K' drafted paths cut to depth L'
are K' i.i.d. paths of depth L' at that context (docs/theory.md section 12.4), so one draft
and one target tree pass per step answer every cell (`decode.engine.score_grid`). All
verifiers are lossless, so the committed text is target sampling whoever drives, and the
scores of different verifiers and cells are paired (same contexts, same rows). The steps
start where the driver's (K_max, L_max) blocks end: a cell's value is the mean over those
step contexts (target samples), not over the contexts a (K', L') run would visit.
Without `grid`, one run per (T, L, K) scores the one cell (K, L) (older records).

Per prompt the record holds sums over its steps: row_steps, each scored verifier's sum of
E[tau + 1 | tree] (`scores`, cell (K_max, L_max)) and, in grid mode, `grid`
{"K',L'": {verifier: sum}}, the driver's realised accepted + 1 and generated tokens, and the
batch's per-step cost log (draft, target tree pass, driver's law, each scored law).
Summaries (`summarize_bench`), per run, cell and verifier: the mean over prompts of the
per-prompt mean E[tau + 1] per step, with the cluster interval (Hall's skew-corrected t) on
the per-prompt means
(`intervals.cluster_mean_interval`; prompts drawn at random with a recorded seed; its
coverage at these prompt counts is simulated by benchmarks/interval_coverage.py); the
paired difference (verifier - bv) gets the same treatment; the relative gain is a point
estimate (difference / bv), without an interval.

Records: one JSON line per (run settings, prompt) in ``<out>/<pair>.jsonl``, appended as
soon as a batch finishes; a rerun skips recorded (settings, prompt) pairs (resumable; a
later run with more prompts adds records to the same runs). The folder is opened through
`experiments.store.open_records` (one writer at a time; the keyed records do the resume
bookkeeping).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import inputs
from ..decode.engine import (
    EngineConfig,
    PrefixStore,
    SpeculativeEngine,
    generate_autoregressive,
)
from ..decode.models import check_device, check_dtype, default_device, default_dtype, parse_dtype
from ..inputs import BadArgument
from ..verifiers.registry import verifier_names
from .intervals import cluster_mean_interval
from .store import open_records
from .store import record_key as settings_key

# Fields that identify a run (with the prompt id they identify a record).
CONFIG_KEYS = (
    "pair",
    "drive",
    "paths",
    "depth",
    "temperature",
    "top_p",
    "draft_temperature",
    "max_new_tokens",
    "dtype",
    "device",
    "seed",
    "batch",
    "scored",
    "score_dtype",
    "score_grid",
)
REFERENCE = "bv"  # paired differences are taken against this verifier when it is scored
TIMING_KEYS = ("decode_s", "prefill_s", "draft_s", "target_s", "verifier_s", "other_s", "score_s")


def record_key(record: dict[str, Any]) -> str:
    """A run's settings, the prompt id and the digest of the prompt's text (store.record_key)."""
    return settings_key({**{k: record.get(k) for k in CONFIG_KEYS}, "prompt_id": record["prompt_id"],
                         "prompt_digest": record.get("prompt_digest")})


def text_digest(text: str) -> str:
    """Short sha256 of a prompt's text (an edited prompt file changes the key)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_records(out: Path) -> list[dict[str, Any]]:
    """Every record in the JSONL files under `out` (a truncated last line is ignored)."""
    records = []
    for path in sorted(Path(out).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def paired_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of paired runs (older single-verifier records are left out)."""
    return [r for r in records if "scores" in r and "drive" in r]



@dataclasses.dataclass(frozen=True)
class BenchSpec:
    """One `speclp bench` invocation as data (its defaults are the CLI's): the pair, the
    prompts spec (humaneval:N or file:PATH; prompt_seed: N drawn at random from HumanEval),
    the scored verifiers and the driving one, K_max / L_max lists (paths, depths), the
    temperatures, and the decoding settings of run_bench. dtype "auto": the device's default
    (resolved by run_bench before keying)."""

    pair: str = "qwen2.5-coder"
    prompts: str = "humaneval:10"
    verifiers: tuple[str, ...] = ("token", "bv", "gbv", "nodeopt", "bv_extended_rrs", "specinfer",
                                  "spectr", "traversal")
    drive: str = "bv_extended_rrs"  # never below BV, run by run (docs/theory.md Theorem 19.2)
    paths: tuple[int, ...] = (4,)
    depths: tuple[int, ...] = (8,)
    temperatures: tuple[float, ...] = (1.0,)
    top_p: float = 1.0
    draft_temperature: float | None = None
    max_new_tokens: int = 32
    prompt_seed: int | None = None
    grid: bool = True
    batch: int = 8
    baseline: bool = False
    seed: int = 0
    device: str | None = None
    dtype: str = "auto"
    score_dtype: str = "fp32"

    def __post_init__(self) -> None:
        """Construction is the validation (BadArgument naming the field; the order in which
        `speclp bench` reports them). The prompts are read, and the pair resolved, by whoever
        runs the spec (experiments.prompts.read_prompts, decode.models.check_model_pair)."""
        for name, low, high in (("temperatures", 0, None), ("depths", 1, 64), ("paths", 1, 64)):
            values = tuple(getattr(self, name))
            if not values:
                raise BadArgument(name, "give at least one value")
            for value in values:
                (inputs.number if name == "temperatures" else inputs.integer)(name, value, low, high)
            object.__setattr__(self, name, values)
        inputs.number("top_p", self.top_p, 0, 1, low_open=True)
        inputs.integer("max_new_tokens", self.max_new_tokens, 1, 1_000_000)
        inputs.integer("batch", self.batch, 1, 4096)
        inputs.choice("score_dtype", self.score_dtype, ("fp32", "fp64"))
        if self.draft_temperature is not None:
            inputs.number("draft_temperature", self.draft_temperature, 0)
        inputs.seed("seed", self.seed)
        check_dtype(self.dtype)
        if self.prompt_seed is not None:
            inputs.seed("prompt_seed", self.prompt_seed)
        check_device(self.device)
        object.__setattr__(self, "verifiers", tuple(self.verifiers))
        self._check_verifiers()

    def _check_verifiers(self) -> None:
        """The scored verifiers and the driving one: lossless under i.i.d. drafts."""
        lossless = verifier_names(draft_sampling="iid")
        if not self.verifiers:
            raise BadArgument("verifiers", "expected at least one verifier")
        for name in [*self.verifiers, self.drive]:
            if name not in lossless:
                field = "drive" if name == self.drive and name not in self.verifiers else "verifiers"
                raise BadArgument(field, f"unknown verifier {name!r} (or not lossless under i.i.d. "
                                         f"drafts); known: {', '.join(lossless)}")

    @property
    def runs(self) -> int:
        """Runs per prompt batch: one per T (grid), else one per (K, L, T) (baseline apart)."""
        return len(self.temperatures) * (1 if self.grid else len(self.paths) * len(self.depths))

    def run(self, load: Callable[[], Any], prompts: list[dict[str, Any]], out_file: Path,
            progress: Callable[[Iterable[Any], int], Iterable[Any]] = lambda it, total: it,
            ) -> dict[str, Any]:
        """run_bench with this spec's settings (load() is called only if a record is missing)."""
        return run_bench(load, self.pair, prompts, list(self.paths), list(self.depths),
                         list(self.temperatures), list(self.verifiers), out_file, drive=self.drive,
                         top_p=self.top_p, draft_temperature=self.draft_temperature,
                         max_new_tokens=self.max_new_tokens, batch=self.batch, seed=self.seed,
                         dtype=None if self.dtype == "auto" else self.dtype, device=self.device,
                         score_dtype=self.score_dtype, baseline=self.baseline, grid=self.grid,
                         progress=progress)

    def cells(self, records: list[dict[str, Any]]) -> list[BenchCell]:
        """The BenchCells (bench_cells) of the runs this spec asks for."""
        wanted_k = {max(self.paths)} if self.grid else set(self.paths)
        wanted_l = {max(self.depths)} if self.grid else set(self.depths)
        cells = [(c, c.to_json()) for c in bench_cells(records)]
        return [c for c, r in cells
                if r["temperature"] in self.temperatures and r["tree_depth"] in wanted_l | {0}
                and r["tree_paths"] in wanted_k | {0} and r["max_new_tokens"] == self.max_new_tokens
                and bool(r["score_grid"]) == (self.grid and r["drive"] != "autoregressive")]

    def rows(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The summary rows (BenchCell.to_json) of the runs this spec asks for."""
        return [c.to_json() for c in self.cells(records)]


@dataclasses.dataclass(frozen=True)
class BenchCell:
    """One cell (K', L') of one bench run, inspectable like scipy's OptimizeResult.

    config: the run's settings (CONFIG_KEYS; its paths / depth are K_max / L_max, the
    tree_paths / tree_depth properties); paths, depth: the cell's K', L'; verifiers {name:
    cluster_mean_interval of E[tau + 1] per step}; differences {name: the same for verifier
    - bv}; relative {name: point estimate of the mean difference / bv}; run: the run's counts,
    speed, time shares and per-step cost (run_summary; the same on every cell of the run);
    realised: the driver's accepted + 1 per step (its own cell (K_max, L_max) only, else
    None). to_json() is the row of summarize_bench and of `speclp bench --json`'s "runs"."""

    config: dict[str, Any]
    paths: int
    depth: int
    verifiers: dict[str, dict[str, Any]]
    differences: dict[str, dict[str, Any]]
    relative: dict[str, dict[str, Any]]
    run: dict[str, Any] = dataclasses.field(repr=False)
    realised: dict[str, Any] | None = None

    @property
    def tree_paths(self) -> int:
        """K_max: the paths the run drafted (every cell cuts its trees)."""
        return self.config["paths"]

    @property
    def tree_depth(self) -> int:
        """L_max: the depth the run drafted."""
        return self.config["depth"]

    def estimate(self, verifier: str) -> float:
        """The verifier's mean E[tau + 1] per step in this cell (the interval: verifiers)."""
        return self.verifiers[verifier]["estimate"]

    def to_json(self) -> dict[str, Any]:
        return {**self.config, "paths": self.paths, "depth": self.depth,
                "tree_paths": self.tree_paths, "tree_depth": self.tree_depth,
                "verifiers": self.verifiers, "differences": self.differences,
                "relative": self.relative, **self.run, "realised": self.realised}



@dataclasses.dataclass(frozen=True)
class BenchResult:
    """One `speclp bench` invocation, inspectable without the CLI: file: the pair's records
    (JSONL); computed / reused: batch runs decoded now / found recorded (run_bench); cells:
    the BenchCells of the runs the spec asks for (BenchSpec.cells); figures: the files drawn
    (none when every run is autoregressive). to_json() is the command's --json object (the
    cells as its "runs" rows)."""

    file: str
    computed: int
    reused: int
    cells: tuple[BenchCell, ...]
    figures: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "computed": self.computed, "reused": self.reused,
                "runs": [c.to_json() for c in self.cells], "figures": list(self.figures)}


def run_bench(
    load: Callable[[], Any],
    pair_name: str,
    prompts: list[dict[str, Any]],
    paths: list[int],
    depths: list[int],
    temperatures: list[float],
    scored: list[str],
    out_file: Path,
    *,
    drive: str = "bv_extended_rrs",
    top_p: float = 1.0,
    draft_temperature: float | None = None,
    max_new_tokens: int = 32,
    batch: int = 8,
    seed: int = 0,
    dtype: str | None = None,
    device: str | None = None,
    score_dtype: str = "fp32",
    baseline: bool = False,
    grid: bool = False,
    progress: Callable[[Iterable[Any], int], Iterable[Any]] = lambda it, total: it,
) -> dict[str, Any]:
    """Run (or resume) paired decoding runs; returns {file, computed, reused}.

    load() -> ModelPair (called only when something must be computed). prompts:
    [{"id", "text"[, "prompt_seed"]}] (tokenized with the target's tokenizer). grid: one
    run per T at (max(paths), max(depths)) scoring every (K', L') cell (module docstring);
    otherwise one run per (T, L, K). For a single model (its own draft) the draft
    temperature defaults to 1.5 T (1.0 at T = 0). baseline: also decode autoregressively
    (drive "autoregressive", K = L = 0) for tokens/s. dtype and device ("auto"/None: the
    defaults for the device) are resolved before records are keyed, so a key names the
    dtype and device actually used.
    """
    run_device = torch.device(device) if device else default_device()
    run_dtype = str(parse_dtype(dtype) or default_dtype(run_device)).removeprefix("torch.")
    settings = {"pair": pair_name, "drive": drive, "top_p": top_p,
                "draft_temperature": draft_temperature, "max_new_tokens": max_new_tokens,
                "dtype": run_dtype, "device": str(run_device), "seed": seed, "batch": batch,
                "scored": sorted(scored), "score_dtype": score_dtype,
                "score_grid": True if grid else None}
    batches = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    if grid:
        runs = [(t, max(depths), max(paths)) for t in temperatures]
    else:
        runs = [(t, d, k) for t in temperatures for d in depths for k in paths]
    if baseline:
        runs += [(t, 0, 0) for t in temperatures]
    jobs = [(group, run) for group in batches for run in runs]  # prompt-major: resumable
    state: dict[str, Any] = {"pair": None, "store": None}
    with open_records(out_file, "bench", key_of=record_key) as records:
        for group, (temperature, depth, k) in progress(jobs, len(jobs)):
            base = run_settings(settings, temperature, depth, k)
            keys = {record_key({**base, "prompt_id": p["id"],
                                "prompt_digest": text_digest(p["text"])}): p for p in group}
            todo = [keys[key] for key in records.want(keys)]
            if not todo:
                continue
            if state["pair"] is None:
                state.update(pair=load(), store=PrefixStore())
            for record in decode_batch(state["pair"], state["store"], base, todo):
                records.write(record)  # appended and flushed as soon as its batch finishes
    return {"file": str(out_file), "computed": records.computed, "reused": records.reused}


def run_settings(settings: dict[str, Any], temperature: float, depth: int, paths: int
                 ) -> dict[str, Any]:
    """The CONFIG_KEYS of one run (depth 0: the autoregressive baseline)."""
    if depth == 0:
        return {**settings, "drive": "autoregressive", "paths": 0, "depth": 0,
                "temperature": temperature, "draft_temperature": None, "scored": [],
                "score_dtype": None, "score_grid": None}
    return {**settings, "paths": paths, "depth": depth, "temperature": temperature}


def decode_batch(pair: Any, store: PrefixStore, base: dict[str, Any],
                 todo: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode one batch of prompts under the settings `base`; one record per prompt."""
    k, depth, temperature = base["paths"], base["depth"], base["temperature"]
    draft_t = base["draft_temperature"]
    if draft_t is None and pair.same_model and depth:  # a single model is its own draft
        draft_t = 1.5 * temperature if temperature > 0 else 1.0
    tokens = [pair.target.tokenizer.encode(p["text"]) for p in todo]
    digest = hashlib.sha256(json.dumps([base["drive"], k, depth, temperature,
                                        [p["id"] for p in todo]]).encode()).digest()
    generator = torch.Generator(device=pair.target.device)
    generator.manual_seed(base["seed"] * 1_000_003 + int.from_bytes(digest[:6], "little"))
    start = time.perf_counter()
    if depth == 0:
        result = generate_autoregressive(pair.target, tokens, temperature, base["top_p"],
                                         base["max_new_tokens"], generator=generator)
    else:
        config = EngineConfig(
            paths=k, depth=depth, temperature=temperature, top_p=base["top_p"],
            draft_temperature=draft_t, max_new_tokens=base["max_new_tokens"],
            score=tuple(base["scored"]), score_grid=bool(base["score_grid"]),
            score_dtype={"fp32": torch.float32, "fp64": torch.float64}[base["score_dtype"]])
        engine = SpeculativeEngine(pair.target, pair.draft, base["drive"], config,
                                   prefix_store=store)
        result = engine.generate(tokens, generator=generator)
    wall = time.perf_counter() - start
    m = result.metrics
    view = {key: m.get(key) for key in (*TIMING_KEYS, "target_calls", "row_steps",
                                        "generated_tokens", "target_nodes_per_call",
                                        "draft_forwards", "peak_memory_mb", "peak_memory_kind",
                                        "score_seconds", "step_log")}
    view.update(wall_s=wall, prompts=[p["id"] for p in todo])
    batch_id = hashlib.sha256(json.dumps([base, view["prompts"], time.time()])
                              .encode()).hexdigest()[:12]
    records = []
    for b, prompt in enumerate(todo):
        if depth == 0:
            count = len(result.tokens[b])
            own = {"row_steps": count, "accepted_plus_one": count, "generated_tokens": count,
                   "scores": {}, "expected_block_efficiency": float(count)}
        else:
            own = m["per_prompt"][b]
        records.append({
            **base, "prompt_id": prompt["id"], "prompt_digest": text_digest(prompt["text"]),
            "prompt_seed": prompt.get("prompt_seed"), "label": pair.label,
            "draft_temperature_used": None if depth == 0 else (
                temperature if draft_t is None else draft_t),
            "prompt_tokens": len(tokens[b]), "row_steps": own["row_steps"],
            "accepted_plus_one": own["accepted_plus_one"],
            "generated_tokens": own["generated_tokens"],
            "expected_block_efficiency_sum": own["expected_block_efficiency"],
            "scores": own["scores"], **({"grid": own["grid"]} if "grid" in own else {}),
            "batch_id": batch_id, "batch_metrics": view,
            "model_dtype": str(pair.target.model.dtype), "threads": torch.get_num_threads(),
            "output": pair.target.tokenizer.decode(result.tokens[b]),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        })
    return records


def record_cells(record: dict[str, Any]) -> dict[tuple[int, int], dict[str, float]]:
    """{(K', L'): {verifier: sum over the prompt's steps}}; a record without a grid has the
    one cell (K, L) of its run."""
    if record.get("grid"):
        return {tuple(int(v) for v in key.split(",")): sums  # type: ignore[misc]
                for key, sums in record["grid"].items()}
    return {(record["paths"], record["depth"]): record["scores"]}


def summarize_bench(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run (settings without the prompt) and cell (K', L'): intervals over prompts.

    Keys: the CONFIG_KEYS with paths/depth = the cell's K', L', tree_paths/tree_depth = the
    run's (K_max, L_max), label, prompts, prompt_seeds, row_steps, generated_tokens,
    verifiers {name: cluster_mean_interval of E[tau + 1] per step}, differences {name: the
    same for verifier - bv}, relative {name: point estimate of the mean difference / bv},
    realised (driver: accepted + 1 per step; the run's own cell only), tokens_per_call,
    decode_tokens_per_s, ms_per_token, time shares, cost (seconds per step: draft, target,
    driver's law, each scored law's whole grid) and prompts_per_hour (prompts / batch wall
    time) (the last ones are the run's, repeated on every cell).
    """
    return [cell.to_json() for cell in bench_cells(records)]


def bench_cells(records: list[dict[str, Any]]) -> list[BenchCell]:
    """The BenchCell of every run (settings without the prompt) and cell (K', L') of the
    paired records, in the order of summarize_bench (pair, T, L_max, K_max, L', K')."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in paired_records(records):
        groups[json.dumps([r.get(k) for k in CONFIG_KEYS])].append(r)
    cells = []
    for key, recs in groups.items():
        config = dict(zip(CONFIG_KEYS, json.loads(key), strict=True))
        run = run_summary(recs)
        steps = np.array([r["row_steps"] for r in recs], dtype=np.float64)
        sums = [record_cells(r) for r in recs]
        for cell in sorted(set.intersection(*(set(c) for c in sums))):
            own = cell == (config["paths"], config["depth"])
            cells.append(BenchCell(
                config, cell[0], cell[1], **cell_summary([c[cell] for c in sums], steps), run=run,
                realised=cluster_mean_interval([r["accepted_plus_one"] for r in recs], steps)
                if own else None))
    cells.sort(key=lambda c: (str(c.config["pair"]), c.config["temperature"], c.tree_depth,
                              c.tree_paths, c.depth, c.paths))
    return cells


def cell_summary(sums: list[dict[str, float]], steps: np.ndarray) -> dict[str, Any]:
    """verifiers / differences / relative of one cell from the per-prompt sums."""
    scored = sorted(sums[0])
    totals = {n: np.array([s[n] for s in sums], dtype=np.float64) for n in scored}
    verifiers = {n: cluster_mean_interval(totals[n], steps) for n in scored}
    differences, relative = {}, {}
    if REFERENCE in totals:
        for n in scored:
            if n != REFERENCE:
                differences[n] = cluster_mean_interval(totals[n] - totals[REFERENCE], steps)
                relative[n] = {"estimate": differences[n]["estimate"]
                               / verifiers[REFERENCE]["estimate"], "method": "point estimate"}
    return {"verifiers": verifiers, "differences": differences, "relative": relative}


def run_summary(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, speed, time shares and the per-step cost split of one run's records."""
    batches = {r["batch_id"]: r["batch_metrics"] for r in recs}
    decode = sum(b["decode_s"] for b in batches.values())
    tokens = sum(r["generated_tokens"] for r in recs)
    steps = sum(r["row_steps"] for r in recs)
    law_seconds: dict[str, float] = defaultdict(float)
    for b in batches.values():
        for n, sec in (b.get("score_seconds") or {}).items():
            law_seconds[n] += sec
    log = [s for b in batches.values() for s in (b.get("step_log") or [])]
    cost = None
    if log:
        cost = {part: float(np.mean([s[part] for s in log]))
                for part in ("draft_s", "target_s", "verifier_s")}
        cost["laws_s"] = {n: float(np.mean([s["law_s"].get(n, 0.0) for s in log]))
                          for n in sorted({n for s in log for n in s["law_s"]})}
        cost.update(steps=len(log), rows_per_step=float(np.mean([s["rows"] for s in log])),
                    nodes_per_step=float(np.mean([s["nodes"] for s in log])))
    wall = sum(b.get("wall_s") or 0.0 for b in batches.values())
    return {
        "label": recs[0].get("label"),
        "prompts": len(recs),
        "prompt_seeds": sorted({r.get("prompt_seed") for r in recs}, key=str),
        "row_steps": int(steps),
        "generated_tokens": tokens,
        "tokens_per_call": tokens / max(steps, 1),
        "decode_tokens_per_s": tokens / max(decode, 1e-12),
        "ms_per_token": 1000 * decode / max(tokens, 1),
        **{f"{p}_share": sum(b[f"{p}_s"] for b in batches.values()) / max(decode, 1e-12)
           for p in ("draft", "target", "verifier")},
        "score_ms_per_step": {n: 1000 * s / max(steps, 1) for n, s in law_seconds.items()},
        "cost_per_step": cost,
        "prompts_per_hour": 3600 * len(recs) / wall if wall > 0 else None,
        "batches": len(batches),
    }
