"""Resumable sweeps of optimality gaps over random instances (docs/theory.md sections 4.1, 5.5, 10).

A sweep is a grid over vocabulary V, depth L, draft paths K and an instance family
    "dirichlet"    Dirichlet(alpha) target and draft rows (one cell per alpha), or
    "temperature"  draft = tempered, noisy target (one cell per temperature),
with `trials` instances per cell (seeds seed .. seed + trials - 1; the same seeds at
every K, so results are paired across K). One *task* = one (instance, K); it runs
speclp.proofs.gap.gap and yields ONE ROW PER (instance, verifier) (ROW_COLUMNS).

Storage (DIR = --out; a results folder of speclp.experiments.store):
    DIR/spec.json                the sweep's spec (the grid and every option that changes
                                 a row, folder_spec) and the runs that worked on it; a run
                                 with another spec is refused (store.SpecMismatch)
    DIR/.lock                    held by the one run writing DIR (store.FolderBusy for a
                                 second one: two concurrent sweeps never duplicate rows)
    DIR/parts/part-*.parquet     finished tasks (or .csv), written atomically (temporary
                                 file + os.replace) by the parent process only
    DIR/results.parquet          the spec's rows, written when every task is done
A task is *finished* when its rows are in a part file; the done set is the set of
instance_ids found in DIR/parts. A rerun of the same command skips every finished task,
so interrupted work is never recomputed and nothing already written is lost or
duplicated. Rows are flushed every `batch` finished tasks or `flush_seconds`, and on
KeyboardInterrupt / SIGTERM / an error; a SIGKILL loses at most the unflushed tasks
(they are recomputed on resume). Every row carries the run_id of the run that computed
it and computed_at (UTC), which is how the tests prove nothing was recomputed.

Execution: in-process (workers = 1), a concurrent.futures process pool (spawn; one
torch thread per worker; workers die with the parent, store.die_with_parent) or a Dask
distributed cluster (Client(address), or a
LocalCluster for "local"). The size guard refuses cells whose full LP is estimated over
`max_variables` variables (method full) or whose column-generation master is over
lp.colgen.MAX_MASTER_COLUMNS columns (SweepTooLarge; skip them with skip_large=True).
A verifier whose exact law would enumerate more than `max_enumerated` configurations gets
its block efficiency ESTIMATED from `samples` sampled draft configurations (exact law per
sampled configuration, averaged; speclp.proofs.gap): its rows say estimate=True and carry
standard_error and the 95% interval [ci_low, ci_high]; tv is NaN (not checked).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import multiprocessing
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from .. import inputs
from ..inputs import BadArgument
from ..lp import tolerances
from ..lp.colgen import MAX_MASTER_COLUMNS, master_size
from ..lp.engine import BACKENDS, DEFAULT_TIME_LIMIT
from ..lp.full import MAX_VARIABLES, full_lp_size
from ..lp.instance import Instance, dirichlet_instance, temperature_instance
from ..proofs.gap import GAP_METHODS, available_verifiers, check_estimation, check_gap_paths, gap
from ..rationals import fraction_text
from ..verifiers.drafts import DRAFT_SAMPLING
from ..verifiers.registry import REGISTRY, get_verifier
from ..verifiers.tree import ESTIMATE_SAMPLES, MAX_TUPLES, ordered_tuple_count
from .store import (
    LOCK_FILE,
    FolderBusy,
    SpecMismatch,
    _try_lock,
    _unlock,
    die_with_parent,
    open_folder,
    read_spec,
    spec_differences,
)

FAMILIES = ("dirichlet", "temperature")
FORMATS = ("parquet", "csv")
MAX_TASKS = 1_000_000  # tasks one sweep may plan (cells x shapes x trials)
CLUSTER_TIMEOUT_S = 5.0  # a scheduler that does not accept a TCP connection by then is refused
ROW_COLUMNS = (
    "family", "vocab", "depth", "paths", "draft_sampling", "alpha", "temperature", "seed",
    "instance_id", "verifier", "multipath", "block_efficiency", "optimum", "optimum_certified",
    "optimum_certified_within",
    "optimum_exact", "optimum_method", "gap", "ratio", "tv",
    "estimate", "standard_error", "ci_low", "ci_high", "samples", "evaluation",
    "claim_ok", "failures", "optimum_seconds", "verifier_seconds", "seconds",
    "run_id", "computed_at", "worker",
)


class SweepTooLarge(BadArgument):
    """A grid cell whose LP (or exact enumeration) is over the size guard: a BadArgument of
    max_variables (the full LP's guard) or of paths (the cell itself is too large)."""


class SweepInterrupted(KeyboardInterrupt):
    """Raised on SIGTERM (and by tests) to stop a sweep after flushing finished tasks."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One (instance, K): the instance is fixed by family, V, L, alpha/temperature, seed."""

    family: str
    vocab: int
    depth: int
    paths: int
    seed: int
    alpha: float | None = None
    temperature: float | None = None
    draft_sampling: str = "iid"

    @property
    def instance_id(self) -> str:
        """Unique key of the task, e.g. dirichlet-V3-L2-a0.5-s7-K3-iid."""
        shape = f"a{self.alpha:g}" if self.family == "dirichlet" else f"T{self.temperature:g}"
        return (f"{self.family}-V{self.vocab}-L{self.depth}-{shape}-s{self.seed}"
                f"-K{self.paths}-{self.draft_sampling}")

    def instance(self) -> Instance:
        if self.family == "dirichlet":
            return dirichlet_instance(self.vocab, self.depth, alpha=float(self.alpha),
                                      seed=self.seed)
        return temperature_instance(self.vocab, self.depth, temperature=float(self.temperature),
                                    seed=self.seed)


LIST_FIELDS = ("vocab", "depth", "paths", "alpha", "temperature")  # tuples in a spec, lists in spec.json
DEFAULT_ALPHA = (1.0,)  # the family of a sweep given neither alpha nor temperature values (the CLI's)


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """The grid and the options of every task (method: the optimum engine, see
    speclp.lp.engine.optimum; the selection-class optimum equals the optimum by the theorem
    of speclp.lp.colgen and is not a column of the rows). The CLI's defaults are these.

    Construction is the validation: a wrong field raises BadArgument naming it (verifiers:
    UnknownVerifier), in the order `speclp sweep` reports them. Frozen; the list fields (and
    verifiers) are tuples (a list given is kept as a tuple) and are lists in spec.json
    (as_dict), as before."""

    vocab: tuple[int, ...] = (2, 3)
    depth: tuple[int, ...] = (1, 2)
    paths: tuple[int, ...] = (1, 2, 3)
    alpha: tuple[float, ...] = ()
    temperature: tuple[float, ...] = ()
    trials: int = 4
    seed: int = 0
    draft_sampling: str = "iid"
    backend: str = "highs"
    certify: bool = True
    method: str = "auto"
    verifiers: tuple[str, ...] | None = None  # None: gap's default comparison
    max_variables: int = MAX_VARIABLES
    max_enumerated: int = MAX_TUPLES
    samples: int = ESTIMATE_SAMPLES

    def __post_init__(self) -> None:
        for name in (*LIST_FIELDS, "verifiers"):
            value = getattr(self, name)
            if value is None and name == "verifiers":
                continue
            if isinstance(value, str) or not hasattr(value, "__iter__"):
                raise BadArgument(name, f"must be a list, got {inputs.short(value)}")
            object.__setattr__(self, name, tuple(value))
        inputs.integer("trials", self.trials, 1)
        inputs.seed("seed", self.seed)
        last = self.seed + self.trials - 1  # the seeds are seed .. seed + trials - 1
        if last > inputs.SEED_MAX:
            raise BadArgument("seed/trials", f"the last seed, `seed` + `trials` - 1 = {last:,}, is over "
                                             f"{inputs.SEED_MAX:,} (the largest seed numpy and torch "
                                             "take); use a smaller `seed` or fewer `trials`")
        inputs.integer("max_variables", self.max_variables, 1)
        check_estimation(self.max_enumerated, self.samples)
        if self.verifiers is not None:  # none, or an unknown name: refused (kept as given: spec.json)
            available_verifiers(self.verifiers)
        self._check_grid()
        inputs.choice("draft_sampling", self.draft_sampling, DRAFT_SAMPLING)
        inputs.choice("backend", self.backend, BACKENDS)
        inputs.choice("method", self.method, GAP_METHODS)
        if self.backend != "highs" and self.method != "full":
            raise BadArgument("backend", "cvxpy solves the enumerated LP only (method full)")
        count = len(self.cells()) * len(self.shapes()) * self.trials
        if count > MAX_TASKS:
            raise BadArgument("trials", f"the grid has {count:,} tasks (cells x alpha/temperature "
                             f"values x trials; limit {MAX_TASKS:,}); use fewer values or trials")

    def _check_grid(self) -> None:
        """alpha, temperature (> 0, finite; at least one family), paths (1..MAX_GAP_PATHS),
        vocab (>= 2), depth (>= 1)."""
        for name in ("alpha", "temperature"):
            for value in getattr(self, name):
                inputs.number(name, value, 0, low_open=True)
        if not self.alpha and not self.temperature:
            raise BadArgument("alpha", "give --alpha and/or --temperature values (no family chosen)")
        for name, low in (("paths", 1), ("vocab", 2), ("depth", 1)):
            values = getattr(self, name)
            if not values:
                raise BadArgument(name, "give at least one value")
            for value in values:
                inputs.integer(name, value, low)
            if name == "paths":
                check_gap_paths(max(values))

    def as_dict(self) -> dict[str, Any]:
        """The fields in order, the tuples as lists (the keys of spec.json, experiments.store)."""
        fields = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}

    def cells(self) -> list[tuple[int, int, int]]:
        return [(v, d, k) for v in self.vocab for d in self.depth for k in self.paths]

    def shapes(self) -> list[tuple[str, float | None, float | None]]:
        return ([("dirichlet", a, None) for a in self.alpha]
                + [("temperature", None, t) for t in self.temperature])

    def run(self, out: str | Path, **options: Any) -> SweepResult:
        """Run (or resume) the sweep into `out` (run_sweep with `options`) and summarise the
        rows of this spec's tasks (SweepResult.of_run)."""
        return SweepResult.of_run(run_sweep(self, out, **options))


def estimate_cell(vocab: int, depth: int, paths: int, draft_sampling: str = "iid"
                  ) -> dict[str, int]:
    """Upper bounds for one cell (lp.full.full_lp_size: every path drafted with q > 0;
    verifiers.tree.ordered_tuple_count: the ordered draft tuples the exact laws enumerate)."""
    size = full_lp_size(vocab, depth, paths, draft_sampling)
    return {"configurations": size["configurations"], "variables": size["variables"],
            "tuples": ordered_tuple_count(vocab, depth, paths)}


def plan(spec: SweepSpec, skip_large: bool = False) -> tuple[list[Task], list[dict[str, Any]]]:
    """All tasks of the grid, and the cells left out (with the reason).

    Raises SweepTooLarge for a cell over the size guard unless skip_large.
    """
    tasks: list[Task] = []
    skipped: list[dict[str, Any]] = []
    for vocab, depth, paths in spec.cells():
        size = estimate_cell(vocab, depth, paths, spec.draft_sampling)
        reason = None
        if spec.draft_sampling == "without-replacement" and paths > vocab**depth:
            reason = f"cannot draft {paths} distinct paths out of {vocab**depth}"
        elif spec.method != "full" and master_size(vocab, depth, paths, spec.draft_sampling)[
                "columns"] > MAX_MASTER_COLUMNS:
            reason = (f"column-generation master over {MAX_MASTER_COLUMNS:,} columns")
        elif spec.method == "full" and size["variables"] > spec.max_variables:
            reason = (f"full LP about {size['variables']:,} variables "
                      f"({size['configurations']:,} draft configurations; limit "
                      f"{spec.max_variables:,})")
        if reason is not None:
            if not skip_large:
                full = spec.method == "full"
                raise SweepTooLarge(
                    "max_variables" if full else "paths",
                    f"cell V={vocab} L={depth} K={paths}: {reason}; drop the cell (fewer "
                    "--paths, --vocab or --depth values), "
                    + ("raise --max-variables if you have the time and memory, " if full else "")
                    + "or pass --skip-large to leave such cells out")
            skipped.append({"vocab": vocab, "depth": depth, "paths": paths, "reason": reason})
            continue
        for family, alpha, temperature in spec.shapes():
            for trial in range(spec.trials):
                tasks.append(Task(family, vocab, depth, paths, spec.seed + trial, alpha,
                                  temperature, spec.draft_sampling))
    return tasks, skipped


# ---------------------------------------------------------------------------
# one task (runs in a worker)
# ---------------------------------------------------------------------------

def run_task(task: Task, spec: SweepSpec, run_id: str,
             time_limit: float | None = DEFAULT_TIME_LIMIT) -> dict[str, Any]:
    """Compute one task: {"instance_id", "rows": [...]} or {"instance_id", "error": text}.
    time_limit: seconds for the task's optimum (gap's time_limit; None: none); past it the
    task is an error (OptimumNotFound) and stays unfinished."""
    torch.set_num_threads(1)
    start = time.perf_counter()
    try:
        instance = task.instance()
        result = gap(instance, task.paths, draft_sampling=task.draft_sampling,
                     backend=spec.backend, verifiers=spec.verifiers, certify=spec.certify,
                     method=spec.method, max_enumerated=spec.max_enumerated,
                     samples=spec.samples, seed=task.seed, time_limit=time_limit)
    except Exception as err:  # recorded, not fatal: the task stays unfinished
        return {"instance_id": task.instance_id, "error": f"{type(err).__name__}: {err}"}
    seconds = time.perf_counter() - start
    optimum = result["optimum"]
    computed_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    worker = f"{socket.gethostname()}:{os.getpid()}"
    failures = result["failures"]
    rows = []
    for name, res in result["verifiers"].items():
        mine = [f for f in failures if f.startswith(f"{name}:")]
        # a rule undefined on some configurations (gap's "undefined") has no block efficiency
        res = {**res, **{k: math.nan for k in ("block_efficiency", "gap", "ratio")
                         if res[k] is None}}
        rows.append({
            "family": task.family, "vocab": task.vocab, "depth": task.depth,
            "paths": task.paths, "draft_sampling": task.draft_sampling,
            "alpha": task.alpha if task.alpha is not None else math.nan,
            "temperature": task.temperature if task.temperature is not None else math.nan,
            "seed": task.seed, "instance_id": task.instance_id, "verifier": name,
            "multipath": bool(get_verifier(name).multipath),
            "block_efficiency": res["block_efficiency"],
            "optimum": optimum["value"], "optimum_certified": bool(optimum["certified"]),
            "optimum_certified_within": (optimum.get("certified_within")
                                         if optimum.get("certified_within") is not None
                                         else math.nan),
            "optimum_exact": (fraction_text(optimum["exact_value"])
                              if optimum["exact_value"] is not None
                              else None),
            "optimum_method": optimum["method"],
            "gap": res["gap"], "ratio": res["ratio"],
            "tv": res["tv"] if res["tv"] is not None else math.nan,
            "estimate": res["estimate"] is not None,
            "standard_error": (res["estimate"]["standard_error"] if res["estimate"] is not None
                               else 0.0),
            "ci_low": (res["estimate"]["ci_low"] if res["estimate"] is not None
                       else res["block_efficiency"]),
            "ci_high": (res["estimate"]["ci_high"] if res["estimate"] is not None
                        else res["block_efficiency"]),
            "samples": res["estimate"]["samples"] if res["estimate"] is not None else 0,
            "evaluation": res["evaluation"],
            "claim_ok": not mine, "failures": "; ".join(mine),
            "optimum_seconds": optimum["seconds"],
            "verifier_seconds": res["seconds"], "seconds": round(seconds, 6),
            "run_id": run_id, "computed_at": computed_at, "worker": worker,
        })
    return {"instance_id": task.instance_id, "rows": rows,
            "other_failures": [f for f in failures
                               if not any(f.startswith(f"{name}:") for name in result["verifiers"])]}


# ---------------------------------------------------------------------------
# storage
# ---------------------------------------------------------------------------

class ResultStore:
    """Part files under DIR/parts, each written atomically; the done set is read from them."""

    def __init__(self, out: str | Path, fmt: str = "parquet") -> None:
        if fmt not in FORMATS:
            raise BadArgument("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self.out = Path(out)
        self.parts = self.out / "parts"
        self.fmt = fmt

    def part_files(self) -> list[Path]:
        if not self.parts.is_dir():
            return []
        return sorted(p for p in self.parts.iterdir()
                      if p.suffix in (".parquet", ".csv") and not p.name.startswith("."))

    def done(self) -> set[str]:
        """instance_ids of every finished task."""
        ids: set[str] = set()
        for part in self.part_files():
            ids.update(_read_table(part, columns=["instance_id"])["instance_id"].tolist())
        return ids

    def write_part(self, rows: list[dict[str, Any]], run_id: str, sequence: int) -> Path:
        """Write rows as one new part file (temporary file + os.replace)."""
        self.parts.mkdir(parents=True, exist_ok=True)
        final = self.parts / f"part-{run_id}-{sequence:05d}.{self.fmt}"
        tmp = self.parts / f".{final.name}.tmp"
        _write_table(pd.DataFrame(rows, columns=list(ROW_COLUMNS)), tmp, self.fmt)
        os.replace(tmp, final)
        return final

    def load(self) -> pd.DataFrame:
        frames = [_read_table(p) for p in self.part_files()]
        if not frames:
            return pd.DataFrame(columns=list(ROW_COLUMNS))
        return pd.concat(frames, ignore_index=True)


def forget_tasks(out: str | Path, instance_ids: Iterable[str]) -> dict[str, int]:
    """Remove every row of the given tasks (instance_ids) from a sweep folder's part files,
    so that rerunning the sweep's command recomputes exactly those tasks (a task with rows
    is finished; the rest of the folder is kept). Holds the folder's lock (FolderBusy while
    a sweep writes it); each changed part is rewritten atomically (temporary file +
    os.replace), a part left without rows is removed, and so is results.parquet (written
    when the grid was complete; the rerun writes it again). An id with no rows is a
    BadArgument naming instance_ids. Returns {"rows": rows removed, "parts": part files
    changed}.

        python -c "from speclp.experiments.sweep import forget_tasks; print(forget_tasks(
            'benchmarks/results/sweep_grid', ['dirichlet-V8-L4-a1-s0-K2-iid']))"
    """
    store = ResultStore(out)
    wanted = set(instance_ids)
    missing = wanted - store.done()
    if missing:
        raise BadArgument("instance_ids", f"no rows for {sorted(missing)} in {store.parts}")
    handle = open(Path(out) / LOCK_FILE, "a+")  # noqa: SIM115 - closed below
    try:
        if not _try_lock(handle):
            raise FolderBusy(f"{out} is being written by another speclp run; wait for it")
        rows = parts = 0
        for part in store.part_files():
            frame = _read_table(part)
            keep = ~frame["instance_id"].isin(wanted)
            if keep.all():
                continue
            rows += int((~keep).sum())
            parts += 1
            if not keep.any():
                part.unlink()
                continue
            tmp = part.with_name(f".{part.name}.tmp")
            _write_table(frame[keep], tmp, "parquet" if part.suffix == ".parquet" else "csv")
            os.replace(tmp, part)
        if parts:
            (Path(out) / "results.parquet").unlink(missing_ok=True)
    finally:
        _unlock(handle)
        handle.close()
    return {"rows": rows, "parts": parts}


def _write_table(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    with open(path, "wb") as handle:
        if fmt == "parquet":
            frame.to_parquet(handle, index=False)
        else:
            frame.to_csv(handle, index=False)
        handle.flush()
        os.fsync(handle.fileno())


def _read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path, columns=columns)
    return pd.read_csv(path, usecols=columns)


def load_results(path: str | Path) -> pd.DataFrame:
    """Rows of a sweep: a sweep directory (its parts), or one .parquet / .csv file.

    A directory gives one row per (instance_id, verifier); when it records its spec
    (spec.json) only the rows of that spec's tasks are returned, so a count never mixes in
    rows the spec did not ask for. Raises FileNotFoundError / ValueError with a readable
    message.
    """
    path = Path(path)
    if not path.exists():
        raise BadArgument("results", f"{path}: no such file or directory")
    try:
        if path.is_dir():
            frame = ResultStore(path).load()
            if frame.empty and (path / "results.parquet").exists():
                frame = pd.read_parquet(path / "results.parquet")
            if frame.empty:
                raise BadArgument("results", f"{path}: no sweep results (no parts/ files)")
            tasks = folder_tasks(path)
            frame = (_only_tasks(frame, tasks) if tasks is not None
                     else frame.drop_duplicates(["instance_id", "verifier"]).reset_index(drop=True))
        elif path.is_file() and path.suffix in (".parquet", ".csv"):
            frame = _read_table(path)
        else:
            raise BadArgument("results", f"{path}: expected a sweep directory or a .parquet / .csv file")
    except BadArgument:
        raise
    except Exception as err:  # a damaged or foreign table file (pyarrow / pandas errors)
        raise BadArgument("results", f"{path}: cannot read sweep results ({type(err).__name__})") from None
    missing = {"instance_id", "verifier", "block_efficiency", "optimum"} - set(frame.columns)
    if missing:
        raise BadArgument("results", f"{path}: not sweep results (missing columns {sorted(missing)})")
    return frame


def folder_tasks(path: str | Path) -> list[Task] | None:
    """The tasks of the spec a sweep folder records (spec.json), or None without one."""
    stored = read_spec(path)
    if stored is None or stored.get("kind") != "sweep":
        return None
    fields = {f.name for f in dataclasses.fields(SweepSpec)}
    spec = SweepSpec(**{k: v for k, v in stored["spec"].items() if k in fields})
    return plan(spec, skip_large=bool(stored["spec"].get("skip_large", False)))[0]


# ---------------------------------------------------------------------------
# execution
# ---------------------------------------------------------------------------

def _in_process(tasks: list[Task], spec: SweepSpec, run_id: str, time_limit: float | None
                ) -> Iterator[dict[str, Any]]:
    for task in tasks:
        yield run_task(task, spec, run_id, time_limit)


def _process_pool(tasks: list[Task], spec: SweepSpec, run_id: str, time_limit: float | None,
                  workers: int) -> Iterator[dict[str, Any]]:
    executor = ProcessPoolExecutor(max_workers=workers,
                                   mp_context=multiprocessing.get_context("spawn"),
                                   initializer=die_with_parent, initargs=(os.getpid(),))
    finished = False
    try:
        futures: list[Future] = [executor.submit(run_task, t, spec, run_id, time_limit)
                                 for t in tasks]
        for future in as_completed(futures):
            yield future.result()
        finished = True
    finally:
        if not finished:  # interrupted: do not wait for tasks whose rows will be dropped
            for process in list(getattr(executor, "_processes", {}).values()):
                process.terminate()
        executor.shutdown(wait=finished, cancel_futures=True)


def _dask(tasks: list[Task], spec: SweepSpec, run_id: str, time_limit: float | None, cluster: Any,
          workers: int) -> Iterator[dict[str, Any]]:
    from dask.distributed import Client, LocalCluster  # lazy: optional dependency
    from dask.distributed import as_completed as dask_completed  # lazy: optional dependency

    own_client = None
    own_cluster = None
    if isinstance(cluster, Client):
        client = cluster
    elif cluster == "local":
        own_cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
        client = own_client = Client(own_cluster)
    else:
        client = own_client = Client(str(cluster), timeout="20s")
    try:
        futures = [client.submit(run_task, t, spec, run_id, time_limit, pure=False) for t in tasks]
        try:
            for future in dask_completed(futures):
                yield future.result()
        finally:
            client.cancel(futures)
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()


def check_cluster(address: str | None, field: str = "cluster") -> str | None:
    """None, "local", or a Dask scheduler address that accepts a TCP connection within
    CLUSTER_TIMEOUT_S seconds; dask[distributed] must be installed. A wrong address: BadArgument
    naming `field`."""
    if address is None:
        return None
    try:
        import distributed  # noqa: F401  # lazy: optional (the cluster extra)
    except ImportError:
        raise BadArgument(field, "needs dask[distributed] (pip install 'speclp[cluster]')") from None
    if address == "local":
        return address
    text = str(address).strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in ("tcp", "tls"):
        raise BadArgument(field, f"expected local or [tcp://]HOST:PORT, got {_short_repr(address)}")
    host, _, port_text = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadArgument(field, f"expected local or [tcp://]HOST:PORT, got {_short_repr(address)}")
    try:
        with socket.create_connection((host, int(port_text)), timeout=CLUSTER_TIMEOUT_S):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise BadArgument(field, f"cannot reach a scheduler at {text} ({reason})") from None
    return text


def _short_repr(value: Any, limit: int = 60) -> str:
    """repr of a value for a one-line message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

def run_sweep(spec: SweepSpec, out: str | Path, fmt: str = "parquet", workers: int = 1,
              cluster: Any = None, skip_large: bool = False,
              progress: Callable[[Iterable[dict[str, Any]], int], Iterable[dict[str, Any]]]
              | None = None,
              batch: int = 8, flush_seconds: float = 10.0,
              on_result: Callable[[dict[str, Any]], None] | None = None,
              new_folder: bool = False,
              time_limit: float | None = DEFAULT_TIME_LIMIT) -> dict[str, Any]:
    """Run (or resume) a sweep into `out`; returns a summary.

    cluster: None (process pool when workers > 1), a dask Client, "local" (a LocalCluster
    of `workers` processes) or a scheduler address. on_result is called in the parent after
    each finished task is buffered (tests use it to interrupt a sweep). `out` must hold
    this spec or none (store.SpecMismatch otherwise, unless new_folder: then the first free
    sibling out-2, out-3, ... is used) and no other run may be writing it
    (store.FolderBusy). Summary keys: out, format, tasks, done_before, computed, errors,
    skipped_cells, rows, violations, run_id, seconds, parts_written, complete, results_file
    (rows and results count this spec's tasks only). time_limit: seconds for each task's
    optimum (None: none); a task past it is an error of this run and stays unfinished (a
    rerun with a larger limit computes it). It is a setting of the run, not of the folder
    (a task that finishes has the same rows under any limit): spec.json records it in the
    run's argv only.
    """
    if workers < 1:
        raise BadArgument("workers", f"must be >= 1, got {workers}")
    if time_limit is not None:
        inputs.number("time_limit", time_limit, 0, low_open=True)
    tasks, skipped = plan(spec, skip_large=skip_large)
    _refuse_legacy_mismatch(Path(out), spec, new_folder)
    with open_folder(out, "sweep", folder_spec(spec, fmt, skip_large), new_folder) as folder:
        return _run_in_folder(spec, folder.path, tasks, skipped, fmt, workers, cluster, progress,
                              batch, flush_seconds, on_result, time_limit)


def folder_spec(spec: SweepSpec, fmt: str, skip_large: bool) -> dict[str, Any]:
    """What a sweep folder's spec.json records: every field of the spec (certify as
    no_certify, the command's flag), the format and skip_large (which decides the cells
    planned)."""
    fields = spec.as_dict()
    fields["no_certify"] = not fields.pop("certify")
    return {**fields, "format": fmt, "skip_large": skip_large}


def _refuse_legacy_mismatch(out: Path, spec: SweepSpec, new_folder: bool) -> None:
    """A folder written before spec.json existed records its grid in sweep.json: refuse
    another grid there too (SpecMismatch)."""
    legacy = out / "sweep.json"
    if new_folder or (out / "spec.json").exists() or not legacy.is_file():
        return
    try:
        stored = json.loads(legacy.read_text()).get("spec", {})
    except (OSError, ValueError, AttributeError):
        return
    mine = spec.as_dict()
    differences = spec_differences({k: v for k, v in stored.items() if k in mine},
                                   {k: v for k, v in mine.items() if k in stored})
    if differences:
        raise SpecMismatch(f"{out} holds results of another spec ({'; '.join(differences)}; "
                           "from its sweep.json); rerun with the same settings to resume, "
                           "choose another folder, or pass --new-out to start a new folder "
                           "next to it", differences)


def _run_in_folder(spec: SweepSpec, out: Path, tasks: list[Task], skipped: list[dict[str, Any]],
                   fmt: str, workers: int, cluster: Any, progress: Any, batch: int,
                   flush_seconds: float, on_result: Any, time_limit: float | None) -> dict[str, Any]:
    store = ResultStore(out, fmt)
    done_before = store.done()
    todo = [t for t in tasks if t.instance_id not in done_before]
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    start = time.perf_counter()
    buffer: list[dict[str, Any]] = []
    buffered_tasks = 0
    sequence = 0
    computed = 0
    errors: list[dict[str, str]] = []
    violations: list[str] = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal buffer, buffered_tasks, sequence, last_flush
        if buffer:
            store.write_part(buffer, run_id, sequence)
            sequence += 1
        buffer, buffered_tasks, last_flush = [], 0, time.monotonic()

    if not todo:
        results: Iterator[dict[str, Any]] = iter(())
    elif cluster is not None:
        results = _dask(todo, spec, run_id, time_limit, cluster, workers)
    elif workers > 1:
        results = _process_pool(todo, spec, run_id, time_limit, workers)
    else:
        results = _in_process(todo, spec, run_id, time_limit)
    stream: Iterable[dict[str, Any]] = progress(results, len(todo)) if progress else results

    previous = signal.getsignal(signal.SIGTERM)
    handler_installed = False
    try:
        try:
            signal.signal(signal.SIGTERM, _raise_interrupt)
            handler_installed = True
        except ValueError:  # not the main thread
            pass
        for result in stream:
            if "error" in result:
                errors.append({"instance_id": result["instance_id"], "error": result["error"]})
            else:
                buffer.extend(result["rows"])
                buffered_tasks += 1
                computed += 1
                violations.extend(f"{r['instance_id']}: {r['failures']}"
                                  for r in result["rows"] if not r["claim_ok"])
                violations.extend(f"{result['instance_id']}: {f}"
                                  for f in result.get("other_failures", []))
            if on_result is not None:
                on_result(result)
            if buffered_tasks >= batch or time.monotonic() - last_flush >= flush_seconds:
                flush()
    finally:
        flush()
        if isinstance(results, Iterator) and hasattr(results, "close"):
            results.close()  # type: ignore[attr-defined]
        if handler_installed:
            signal.signal(signal.SIGTERM, previous)

    frame = _only_tasks(store.load(), tasks)
    complete = {t.instance_id for t in tasks} <= set(frame["instance_id"])
    results_file = None
    if complete and not frame.empty:
        results_file = store.out / f"results.{fmt}"
        tmp = store.out / f".results.{fmt}.tmp"
        _write_table(frame, tmp, fmt)
        os.replace(tmp, results_file)
        results_file = str(results_file)
    return {
        "out": str(store.out), "format": fmt, "tasks": len(tasks),
        "done_before": len(done_before & {t.instance_id for t in tasks}),
        "computed": computed, "errors": errors, "skipped_cells": skipped,
        "rows": int(len(frame)), "violations": violations, "run_id": run_id,
        "seconds": round(time.perf_counter() - start, 3), "parts_written": sequence,
        "complete": complete, "results_file": results_file,
    }


class SweepStatus(StrEnum):
    """The outcome of a sweep run (a StrEnum: equal to its word)."""

    COMPLETE = "complete"  # every planned task has its rows, no claim violated
    INCOMPLETE = "incomplete"  # some planned task has no rows yet (an error, or not run): rerun
    VIOLATED = "claim violated"  # a verifier above a certified optimum, or lossy: exit 1


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """One sweep run, inspectable without the CLI (like scipy's OptimizeResult). The fields are
    run_sweep's summary (out: the folder, format, tasks planned, done_before, computed,
    errors [{instance_id, error}], skipped_cells [{vocab, depth, paths, reason}], rows of this
    spec's tasks, violations, run_id, seconds, parts_written, complete, results_file) and
    summary: `summarize` of those rows. status: SweepStatus. to_json() is `speclp sweep
    --json`'s object."""

    out: str
    format: str
    tasks: int
    done_before: int
    computed: int
    errors: tuple[dict[str, str], ...]
    skipped_cells: tuple[dict[str, Any], ...]
    rows: int
    violations: tuple[str, ...]
    run_id: str
    seconds: float
    parts_written: int
    complete: bool
    results_file: str | None
    summary: dict[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def of_run(cls, summary: dict[str, Any]) -> SweepResult:
        """The result of run_sweep's summary: its rows (this spec's tasks) summarised."""
        rows = (load_results(summary["out"]) if summary["rows"]  # else every cell skipped
                else pd.DataFrame(columns=list(ROW_COLUMNS)))
        fields = {**summary, "errors": tuple(summary["errors"]),
                  "skipped_cells": tuple(summary["skipped_cells"]),
                  "violations": tuple(summary["violations"])}
        return cls(**fields, summary=summarize(rows))

    @property
    def status(self) -> SweepStatus:
        if self.violations:
            return SweepStatus.VIOLATED
        return SweepStatus.COMPLETE if self.complete else SweepStatus.INCOMPLETE

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("errors", "skipped_cells", "violations"):
            out[name] = list(out[name])
        return copy.deepcopy(out)


@dataclasses.dataclass(frozen=True)
class PlotResult:
    """What `speclp plot` drew (the figures of a sweep folder, or of bench / realgap / trees
    records): out: the figure folder; kind: "sweep", or the record kinds joined by "+";
    figures: {name: {"files", "note", ...}}; instances: a sweep's instance count (None for
    records); skipped: {file: why} of record files not drawn (None for a sweep). to_json()
    is the command's --json object."""

    out: str
    kind: str
    figures: dict[str, Any]
    instances: int | None = None
    skipped: dict[str, str] | None = None

    @classmethod
    def of(cls, drawn: dict[str, Any]) -> PlotResult:
        """The result of plots.plot_results' dict (a sweep) or of the records' figures."""
        return cls(drawn["out"], drawn["kind"], drawn["figures"], drawn.get("instances"),
                   drawn.get("skipped"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"out": self.out, "kind": self.kind}
        if self.instances is not None:
            out["instances"] = self.instances
        out["figures"] = self.figures
        if self.skipped is not None:
            out["skipped"] = self.skipped
        return copy.deepcopy(out)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise SweepInterrupted(f"signal {signum}")


def _only_tasks(frame: pd.DataFrame, tasks: list[Task]) -> pd.DataFrame:
    """Rows of the given tasks only, one per (instance_id, verifier) (the first written)."""
    ids = {t.instance_id for t in tasks}
    frame = frame[frame["instance_id"].isin(ids)]
    return frame.drop_duplicates(["instance_id", "verifier"]).reset_index(drop=True)


GAP_ZERO = tolerances.UNCERTIFIED  # a mean gap below it in magnitude is float noise: written 0


def zero_noise(value: float) -> float:
    """`value` as a float, 0.0 when |value| < GAP_ZERO (the tolerance of a float optimum:
    "8.327e-17" is no gap); NaN stays NaN."""
    value = float(value)
    return 0.0 if abs(value) < GAP_ZERO else value


def lossy_verifiers(frame: pd.DataFrame) -> set[str]:
    """Verifiers not lossless under the draft law of their rows (the registry's declaration;
    a name the registry does not know: lossy if any of its rows has TV above tolerance)."""
    out = set()
    draft = frame["draft_sampling"] if "draft_sampling" in frame else pd.Series("iid", index=frame.index)
    for (name, law), part in frame.assign(draft_sampling=draft).groupby(["verifier", "draft_sampling"]):
        spec = REGISTRY.get(name)
        if spec is None:
            tv = part["tv"].abs() if "tv" in part else pd.Series(dtype=float)
            lossy = bool((tv > tolerances.TOTAL_VARIATION).any())
        else:
            lossy = not spec.lossless or law not in spec.draft_sampling
        if lossy:
            out.add(str(name))
    return out


def summarize(frame: pd.DataFrame, tolerance: float = 1e-12) -> dict[str, Any]:
    """Headline numbers of a sweep: every verifier's mean gap to the optimum (overall and per
    K, mean_gap_per_verifier[_per_K]: the lossless verifiers by mean gap, then the
    lossy_verifiers; a mean below gap_zero_tolerance in magnitude written 0), GBV's
    (gbv_mean_gap...) and how often GBV < BV (block efficiency lower by more than
    `tolerance`) on the same task.

    Rows whose block efficiency is an ESTIMATE (column estimate; sampled configurations) are
    counted in estimated_rows / estimated_cells; the means include them (unbiased
    estimates), the GBV < BV count compares exact rows only (a 1e-12 tolerance means nothing
    for an estimate)."""
    if "estimate" not in frame.columns:  # rows recorded before estimates existed
        frame = frame.assign(estimate=False)
    frame = frame.assign(estimate=frame["estimate"].fillna(False).astype(bool))
    out: dict[str, Any] = {"instances": int(frame["instance_id"].nunique()),
                           "rows": int(len(frame)),
                           "optimum_certified": int(frame.drop_duplicates("instance_id")
                                                    ["optimum_certified"].sum())}
    if "optimum_certified_within" in frame.columns:
        within = frame.drop_duplicates("instance_id")["optimum_certified_within"]
        out["optimum_certified_within"] = int(within.notna().sum())
        out["optimum_certified_within_max"] = (float(within.max()) if within.notna().any()
                                               else None)
    estimated = frame[frame["estimate"]]
    out["estimated_rows"] = int(len(estimated))
    out["estimated_cells"] = sorted(
        {f"V{int(v)}-L{int(d)}-K{int(k)}" for v, d, k in
         estimated[["vocab", "depth", "paths"]].itertuples(index=False)}) if len(estimated) else []
    gbv = frame[frame["verifier"] == "gbv"].set_index("instance_id")
    if not gbv.empty:
        out["gbv_mean_gap"] = zero_noise(gbv["gap"].mean())
        out["gbv_mean_gap_per_K"] = {int(k): zero_noise(v)
                                     for k, v in gbv.groupby("paths")["gap"].mean().items()}
        out["gbv_mean_ratio"] = float(gbv["ratio"].mean())
    bv = frame[frame["verifier"] == "bv"].set_index("instance_id")
    gbv, bv = gbv[~gbv["estimate"]], bv[~bv["estimate"]]
    if not gbv.empty and not bv.empty:
        both = gbv[["block_efficiency", "paths"]].merge(
            bv[["block_efficiency"]], left_index=True, right_index=True, suffixes=("", "_bv"))
        worse = both["block_efficiency"] < both["block_efficiency_bv"] - tolerance
        out["gbv_below_bv"] = {"count": int(worse.sum()), "of": int(len(both)),
                               "fraction": float(worse.mean()) if len(both) else math.nan,
                               "tolerance": tolerance,
                               "per_K": {int(k): int(v)
                                         for k, v in worse.groupby(both["paths"]).sum().items()}}
    lossy = lossy_verifiers(frame)
    means = frame.groupby("verifier")["gap"].mean()
    # lossless verifiers by mean gap, then the lossy ones (the optimum does not bound them:
    # a small or negative gap there is no merit); |mean| < GAP_ZERO is float noise, written 0
    order = sorted(dict.fromkeys(frame["verifier"]), key=lambda v: (v in lossy, float(means[v])))
    out["gap_zero_tolerance"] = GAP_ZERO
    out["lossy_verifiers"] = [str(v) for v in order if v in lossy]
    out["mean_gap_per_verifier"] = {str(k): zero_noise(means[k]) for k in order}
    per_k = frame.groupby(["verifier", "paths"])["gap"].mean()
    out["mean_gap_per_verifier_per_K"] = {
        str(v): {int(k): zero_noise(per_k[(v, k)]) for k in sorted(frame["paths"].unique())
                 if (v, k) in per_k.index} for v in order}
    out["claim_violations"] = int((~frame["claim_ok"].astype(bool)).sum())
    return out
