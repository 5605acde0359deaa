"""Results folders of the resumable commands: one spec per folder, one writer at a time,
records keyed on every setting that changes them.

A results folder DIR holds

    DIR/spec.json   {"kind": "sweep", "spec": {...}, "created": ..., "runs": [...]}: the
                    settings of the command that fill the folder (every setting that
                    changes a result; not --workers, --threads, progress or output flags)
    DIR/.lock       locked (fcntl.flock, exclusive) by the one run writing DIR; the kernel
                    releases it when that process ends, however it ends (SIGKILL included)
    data            JSONL records (append_jsonl; each carries its `key`) or part files

Rules (used by `sweep` and `trees`; `realgap` and `bench` key their records the same way):
  * open_folder refuses (SpecMismatch, naming every differing setting) a folder whose spec
    is another one, unless new_folder=True: then the first sibling DIR-2, DIR-3, ... that
    is free or holds the same spec is used (a rerun with the same settings resumes it);
  * a second writer is refused (FolderBusy) while the first holds the lock: two runs
    never interleave rows;
  * every record is keyed on its settings (record_key), so a record is reused only by a
    run that asks for exactly the same computation; summaries keep only the keys the
    invocation asked for (select_records);
  * default folders live under ./speclp-results/ in the current directory (default_out),
    never inside the package's recorded results;
  * worker processes call die_with_parent so that killing the parent (even with SIGKILL)
    leaves no worker running.

API (small on purpose):
    default_out(kind) -> Path
    open_folder(path, kind, spec, new_folder=False) -> ResultsFolder  (a context manager)
    record_key(settings) -> str
    load_jsonl(path) -> list[dict];  append_jsonl(path, record)
    open_records(out_file, kind, spec={}) -> KeyedRecords  (a context manager: the folder of
        out_file opened with open_folder, and the keyed records of out_file: done keys,
        want(keys), write(record), reused / computed counts: the one resume bookkeeping of
        `realgap` and `bench`)
    select_records(records, keys) -> list[dict]
    die_with_parent(parent_pid)
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, single writer assumed
    fcntl = None

RESULTS_ROOT = Path("speclp-results")
SPEC_FILE = "spec.json"
LOCK_FILE = ".lock"


class ResultsFolderError(ValueError):
    """A results folder that cannot be used as asked (the message is one line)."""


class SpecMismatch(ResultsFolderError):
    """The folder holds results of another spec; `differences` lists the settings."""

    def __init__(self, message: str, differences: list[str]):
        super().__init__(message)
        self.differences = differences


class FolderBusy(ResultsFolderError):
    """Another run holds the folder's lock."""


def slug(text: str) -> str:
    """A file-name part from a label: the text before any " (" (a pair's description),
    runs of characters outside [A-Za-z0-9_.-] replaced by "_"."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text.split(" (")[0]).strip("_")


def default_out(kind: str) -> Path:
    """./speclp-results/<kind> (relative to the current directory)."""
    return RESULTS_ROOT / kind


def record_key(settings: dict[str, Any]) -> str:
    """Canonical key of a record: its settings as sorted, compact JSON."""
    return json.dumps(_normalise(settings), sort_keys=True, separators=(",", ":"))


def _normalise(value: Any) -> Any:
    """JSON round trip: tuples become lists, numpy scalars numbers (so specs compare equal)."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def spec_differences(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """'setting: A in the folder, B now' for every setting that differs."""
    stored, wanted = _normalise(stored), _normalise(wanted)
    out = []
    for key in list(stored) + [k for k in wanted if k not in stored]:
        a, b = stored.get(key, "(unset)"), wanted.get(key, "(unset)")
        if a != b:
            out.append(f"{_flag(key)} {_show(a)} in the folder, {_show(b)} now")
    return out


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _show(value: Any, limit: int = 40) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------
# the folder
# ---------------------------------------------------------------------------

class ResultsFolder:
    """An open results folder: the spec is checked and recorded and the lock is held until
    close() (or the end of a `with` block)."""

    def __init__(self, path: Path, kind: str, spec: dict[str, Any], handle: Any):
        self.path = path
        self.kind = kind
        self.spec = spec
        self._handle = handle

    def close(self) -> None:
        if self._handle is not None:
            _unlock(self._handle)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> ResultsFolder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_folder(path: str | Path, kind: str, spec: dict[str, Any],
                new_folder: bool = False) -> ResultsFolder:
    """Open (create) a results folder for a run of `kind` with `spec`.

    Raises SpecMismatch when the folder holds another spec (or another kind of results)
    and new_folder is False, FolderBusy when another run holds its lock, and
    ResultsFolderError when the path is not a usable folder.
    """
    path = Path(path)
    if new_folder:
        path = _free_sibling(path, kind, spec)
    if path.exists() and not path.is_dir():
        raise ResultsFolderError(f"{path} exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle = open(path / LOCK_FILE, "a+")  # noqa: SIM115 - held until close()
    except OSError as err:
        raise ResultsFolderError(f"{path}: {err.strerror or err}") from None
    if not _try_lock(handle):
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise FolderBusy(f"{path} is being written by another speclp run ({holder}); wait for "
                         "it to finish or choose another folder")
    try:
        differences = _check_spec(path, kind, spec)
        if differences:
            raise SpecMismatch(
                f"{path} holds results of another spec ({'; '.join(differences)});"
                " rerun with the same settings to resume, choose another folder, or pass "
                "--new-out to start a new folder next to it", differences)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                     f"{datetime.now(UTC).isoformat(timespec='seconds')}\n")
        handle.flush()
        _record_run(path, kind, spec)
    except BaseException:
        _unlock(handle)
        handle.close()
        raise
    return ResultsFolder(path, kind, _normalise(spec), handle)


def _free_sibling(path: Path, kind: str, spec: dict[str, Any]) -> Path:
    """path, path-2, path-3, ...: the first that does not exist, is empty, or holds `spec`."""
    for n in range(1, 10_000):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        if not candidate.exists():
            return candidate
        if candidate.is_dir():
            if not any(p.name != LOCK_FILE for p in candidate.iterdir()):
                return candidate
            if (candidate / SPEC_FILE).exists() and not _check_spec(candidate, kind, spec):
                return candidate
    raise ResultsFolderError(f"{path}: no free folder name {path.name}-2 .. {path.name}-9999")


def _check_spec(path: Path, kind: str, spec: dict[str, Any]) -> list[str]:
    """Differences between the folder's recorded spec and `spec` ([] when it has none)."""
    stored = read_spec(path)
    if stored is None:
        return []
    if stored.get("kind") != kind:
        return [f"kind: {stored.get('kind')!r} results, not {kind!r}"]
    return spec_differences(stored.get("spec", {}), spec)


def read_spec(path: str | Path) -> dict[str, Any] | None:
    """The folder's spec.json ({"kind", "spec", ...}) or None when it has none.

    Raises ResultsFolderError when the file is unreadable (it is never silently replaced).
    """
    file = Path(path) / SPEC_FILE
    if not file.exists():
        return None
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ResultsFolderError(f"{file}: unreadable spec ({type(err).__name__}); move the "
                                 "folder away or repair the file") from None
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        raise ResultsFolderError(f"{file}: not a speclp results spec")
    return data


def _record_run(path: Path, kind: str, spec: dict[str, Any]) -> None:
    """Write spec.json (atomically) with this run appended to its run log."""
    file = path / SPEC_FILE
    data = read_spec(path) or {"kind": kind, "spec": _normalise(spec),
                               "created": datetime.now(UTC).isoformat(timespec="seconds"),
                               "runs": []}
    data["runs"] = list(data.get("runs", []))[-99:] + [{
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv[1:]}]
    tmp = path / f".{SPEC_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, file)


def _try_lock(handle: Any) -> bool:
    if fcntl is None:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(handle: Any) -> None:
    if fcntl is None:  # pragma: no cover - not POSIX
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------------------
# JSONL records
# ---------------------------------------------------------------------------

def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Records of a JSONL file (missing file: []); a torn line left by a kill is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(record, dict):
                out.append(record)
    return out


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as a line, flushed; a torn last line (a killed writer) is closed
    first so that the new record stays readable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as handle:
        if handle.tell() > 0:
            with open(path, "rb") as reader:
                reader.seek(-1, os.SEEK_END)
                if reader.read(1) != b"\n":
                    handle.write(b"\n")
        handle.write((json.dumps(record) + "\n").encode())
        handle.flush()


class KeyedRecords:
    """The resume bookkeeping of one JSONL records file: the keys already in it (`done`, by
    `key_of`, default the record's "key" field), the keys this run asked for (`wanted`, for
    select_records), and how many records were reused and computed."""

    def __init__(self, path: str | Path,
                 key_of: Callable[[dict[str, Any]], Any] = lambda r: r.get("key")):
        self.path = Path(path)
        self.key_of = key_of
        self.done = {key_of(r) for r in load_jsonl(self.path)} - {None}
        self.wanted: list[Any] = []
        self.reused = self.computed = 0

    def want(self, keys: Iterable[Any]) -> list[Any]:
        """Record that this run asks for `keys`; returns those still to compute (the others
        are counted as reused)."""
        keys = list(keys)
        self.wanted += keys
        todo = [k for k in keys if k not in self.done]
        self.reused += len(keys) - len(todo)
        return todo

    def write(self, record: dict[str, Any]) -> None:
        """Append a computed record (flushed) and mark its key done."""
        append_jsonl(self.path, record)
        self.done.add(self.key_of(record))
        self.computed += 1


@contextmanager
def open_records(out_file: str | Path, kind: str, spec: dict[str, Any] | None = None,
                 key_of: Callable[[dict[str, Any]], Any] = lambda r: r.get("key"),
                 ) -> Iterator[KeyedRecords]:
    """Open the folder of `out_file` for a run of `kind` (open_folder: one writer at a time,
    the spec checked and its run logged) and yield the keyed records of `out_file`. spec {}
    (default): the records' keys carry every setting, so runs of different settings share
    the folder."""
    with open_folder(Path(out_file).parent, kind, spec or {}):
        yield KeyedRecords(out_file, key_of)


def select_records(records: Iterable[dict[str, Any]], keys: Iterable[str]) -> list[dict[str, Any]]:
    """The records whose key is one of `keys` (first record per key), in `keys` order."""
    by_key: dict[str, dict[str, Any]] = {}
    for r in records:
        by_key.setdefault(r.get("key"), r)
    return [by_key[k] for k in dict.fromkeys(keys) if k in by_key]


# ---------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Make this (worker) process end when `parent_pid` ends, however it ends.

    Linux: prctl(PR_SET_PDEATHSIG, SIGKILL); elsewhere a daemon thread polls the parent
    pid every half second. Either way the worker exits at once when the parent is already
    gone. Call it first thing in a worker (a process pool's initializer).
    """
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    if not armed:
        def watch() -> None:
            while True:
                time.sleep(0.5)
                if os.getppid() != parent_pid:
                    os._exit(1)

        threading.Thread(target=watch, name="die-with-parent", daemon=True).start()
