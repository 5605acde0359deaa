"""Run untrusted sampler code where its failures cannot fool or break the audit.

A sampler under audit (`speclp audit --sampler FILE.py:FUNCTION`) is user code: it may call
`sys.exit` (at import or when called), raise anything, return the wrong shape or invalid token
ids, print, or hang. `SandboxedSampler` loads and calls it in a child process (a fresh
interpreter started with subprocess, talking over a socket), so that

* an exit, an exception (with its file:line), a crash (signal) or a hang (no answer within
  `call_timeout` seconds per call, or an import that takes longer than `load_timeout`
  seconds, its own limit) become `SamplerFailed`, the sampler's failure, never the audit's;
* a spec that names nothing callable (no file, no module, a file or module that does not
  compile: SyntaxError, no such attribute) is kind "spec": bad input, the sampler never ran;
* every process the sampler starts (fork, subprocess) in the child's process group is killed
  when the sampler is closed, pass or fail (a process that leaves the group with setsid
  escapes: this is not a security boundary);
* everything the sampler writes to stdout or stderr (Python or C level) goes to a capture file
  and is reported (`captured_output`), never into the audit's own output;
* the answer comes back as bytes (a JSON header and raw int64 blocks), never as a pickle, and
  the parent checks its shape and token ids itself: the child runs the user's code, so nothing
  it sends is trusted.

This protects the audit from a sampler's mistakes; it is not a security boundary against
hostile code (the child runs with the user's permissions).

`InProcessSampler` calls a Python function in this process with the same answer checks and
the same failure reports (for the Python API, where the caller passes a function object).

Layouts (what the sampler is given; the answer is always checked into blocks [B, L+1],
left-aligned, padded with -1):
    "batched"    sampler(target_rows [B, K, L+1, V], draft_rows [B, K, L, V], paths [B, K, L],
                 rng) -> [B, L+1] ids padded with -1, or a list of B sequences
    "unbatched"  the same without the B axis, one call per configuration -> one sequence
    "ragged"     the flat layout of serving-engine rejection samplers, one draft chain per
                 request: sampler(draft_token_ids [T], num_draft_tokens [B], draft_probs [T, V],
                 target_probs [T, V], bonus_token_ids [B], rng) -> [B, max(n)+1] padded with -1
                 (T = sum of the counts; row j of request b's slice is p(.|its first j tokens)
                 and q(.|...); the bonus token was drawn from p(.|all its draft tokens)).
    "vllm"       the flat layout of vLLM's rejection sampler (optional draft probabilities,
                 the bonus row included; proofs.layouts)
    "sglang"     a draft tree as retrieve-index / next-token / next-sibling arrays with
                 threshold flags, the layout of SGLang's tree sampling kernel (proofs.layouts)
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs import BadArgument
from .layouts import ENGINE_LAYOUTS, call_engine_layout

LAYOUTS = ("batched", "unbatched", "ragged") + ENGINE_LAYOUTS
CALL_TIMEOUT = 60.0  # seconds per call of the sampler (one batch) before it counts as hung
LOAD_TIMEOUT = 120.0  # seconds the sampler's import may take (torch under load): its own limit
MAX_CAPTURE = 4000  # characters of captured sampler output kept for the report
_PACKAGE = str(Path(__file__).resolve().parent.parent)
PR_SET_PDEATHSIG = 1
SAMPLER_STREAM = 0x5A11  # the sampler's generator is default_rng([seed, SAMPLER_STREAM]): a
# stream of its own, never the one that drew the drafts (identical streams would correlate
# the sampler's uniforms with the drafted tokens and fail lossless samplers)


def sampler_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, SAMPLER_STREAM])


class SpecError(BadArgument):
    """The --sampler spec names nothing callable (no file, no module, no such attribute);
    a BadArgument of the field "sampler"."""

    def __init__(self, reason: str):
        super().__init__("sampler", reason)


class SamplerFailed(Exception):
    """The sampler broke its contract (exit, exception, hang, crash, malformed answer).

    kind: "exit", "exception", "timeout", "crash", "answer", "load", or "spec" (the spec names
    nothing callable: a bad flag rather than a failing sampler).
    where: "file:line in function" of the innermost frame of the user's code, or None.
    hint: a suggestion for the user (e.g. --unbatched), or None.
    """

    def __init__(self, message: str, kind: str, where: str | None = None,
                 hint: str | None = None, output: str = ""):
        super().__init__(message)
        self.kind, self.where, self.hint, self.output = kind, where, hint, output

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": str(self), "where": self.where, "hint": self.hint,
                "captured_output": self.output}


# ---------------------------------------------------------------------------
# loading and the answer check (shared by both runners)
# ---------------------------------------------------------------------------

def split_spec(spec: str) -> tuple[str, str]:
    """'MODULE:FUNCTION' or 'FILE.py:FUNCTION' -> (module or file, function); ValueError."""
    module_name, sep, function = spec.rpartition(":")
    if not sep or not module_name or not function:
        raise SpecError(f"expected MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    if (module_name.endswith(".py") or "/" in module_name) and not Path(module_name).is_file():
        raise SpecError(f"no file {module_name!r}")
    return module_name, function


def import_sampler(spec: str) -> Callable[..., Any]:
    """Import the sampler named by `spec` in THIS process (the child, or a trusting caller).
    Raises SpecError (a ValueError) for a bad spec, a missing module or a missing /
    non-callable attribute; whatever the module raises at import propagates."""
    module_name, function = split_spec(spec)
    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name)
        loader_spec = importlib.util.spec_from_file_location(f"_speclp_sampler_{path.stem}", path)
        if loader_spec is None or loader_spec.loader is None:
            raise SpecError(f"cannot load {module_name!r}")
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and module_name.startswith(err.name):
                raise SpecError(f"no module {module_name!r}") from None
            raise
    if not hasattr(module, function):
        raise SpecError(f"{module_name!r} has no attribute {function!r}")
    fn = getattr(module, function)
    if not callable(fn):
        raise SpecError(f"{spec!r} is not callable")
    return fn


def where(err: BaseException, user_file: str | None = None) -> str | None:
    """'file:line in function' of the frame that best names the user's code: the innermost
    frame in `user_file`, else the innermost outside speclp and the standard library."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return None
    stdlib = os.path.dirname(os.__file__)
    chosen = None
    if user_file is not None:
        target = os.path.realpath(user_file)
        chosen = next((f for f in reversed(frames) if os.path.realpath(f.filename) == target), None)
    if chosen is None:
        chosen = next((f for f in reversed(frames)
                       if not f.filename.startswith((_PACKAGE, stdlib))), None)
    if chosen is None:  # raised at the call itself (e.g. a signature that does not match)
        return None
    return f"{chosen.filename}:{chosen.lineno} in {chosen.name}"


def describe(err: BaseException) -> str:
    text = " ".join(str(err).split())
    if len(text) > 300:
        text = text[:300] + "..."
    if isinstance(err, SystemExit):
        return f"sys.exit({err.code!r})"
    return f"raised {type(err).__name__}" + (f": {text}" if text else "")


def _sequence(seq: Any, depth: int, index: int) -> np.ndarray:
    """One block as int64 [<= L+1] (-1 padding stripped); SamplerFailed on a bad answer."""
    if seq is None:
        raise SamplerFailed(f"returned None for configuration {index}", "answer")
    try:
        arr = np.asarray(seq)
    except Exception as err:  # noqa: BLE001 - an answer numpy cannot read
        raise SamplerFailed(f"returned {type(seq).__name__} for configuration {index}, not a "
                            f"token sequence ({type(err).__name__})", "answer") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise SamplerFailed(f"returned an array of shape {tuple(arr.shape)} for configuration "
                            f"{index}, expected one sequence of at most {depth + 1} token ids",
                            "answer")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise SamplerFailed(f"returned {arr.dtype} values for configuration {index}, expected "
                            "integer token ids", "answer")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise SamplerFailed(f"returned non-integer token ids {arr.tolist()[:6]} for "
                                f"configuration {index}", "answer")
    arr = arr.astype(np.int64)
    negative = np.flatnonzero(arr < 0)
    if len(negative):
        first = int(negative[0])
        if not np.all(arr[first:] == -1):
            raise SamplerFailed(f"returned {arr.tolist()} for configuration {index}: negative ids "
                                "other than trailing -1 padding", "answer")
        arr = arr[:first]
    if not 1 <= len(arr) <= depth + 1:
        raise SamplerFailed(f"returned a block of {len(arr)} tokens for configuration {index} "
                            f"(allowed 1..{depth + 1})", "answer")
    return arr


def check_blocks(answer: Any, count: int, depth: int, vocab: int) -> np.ndarray:
    """The sampler's answer for a batch of `count` -> int64 blocks [count, L+1] padded with -1.
    SamplerFailed (kind "answer") for a wrong count, shape, dtype or an invalid token id."""
    if answer is None:
        raise SamplerFailed(f"returned None for a batch of {count}", "answer")
    if isinstance(answer, np.ndarray) and answer.ndim != 2:
        raise SamplerFailed(f"returned an array of shape {tuple(answer.shape)} for a batch of "
                            f"{count}, expected [{count}, {depth + 1}] (or a list of {count} "
                            "sequences)", "answer")
    if (isinstance(answer, np.ndarray) and answer.dtype.kind in "iu" and answer.shape[0] == count
            and 1 <= answer.shape[1] <= depth + 1):
        return _check_array(answer.astype(np.int64), count, depth, vocab)
    try:
        sequences = list(answer)
    except TypeError:
        raise SamplerFailed(f"returned {type(answer).__name__}, not a batch of blocks",
                            "answer") from None
    if len(sequences) != count:
        raise SamplerFailed(f"returned {len(sequences)} blocks for a batch of {count}", "answer")
    out = np.full((count, depth + 1), -1, dtype=np.int64)
    for b, seq in enumerate(sequences):
        arr = _sequence(seq, depth, b)
        out[b, : len(arr)] = arr
    bad = (out >= vocab) | (out < -1)
    if bad.any():
        b = int(np.flatnonzero(bad.any(-1))[0])
        raise SamplerFailed(f"returned token id {int(out[bad][0])} outside the vocabulary "
                            f"0..{vocab - 1} (configuration {b}: {out[b].tolist()})", "answer")
    return out


def _check_array(blocks: np.ndarray, count: int, depth: int, vocab: int) -> np.ndarray:
    """check_blocks for an integer array [count, <= L+1] (vectorised; the same verdicts)."""
    out = np.full((count, depth + 1), -1, dtype=np.int64)
    out[:, : blocks.shape[1]] = blocks
    negative = out < 0
    after = np.cumsum(negative, axis=1) > 0  # at or after the first negative entry
    if (out[after] != -1).any() or (after & ~negative).any():
        b = int(np.flatnonzero(((out != -1) & after).any(1))[0])
        raise SamplerFailed(f"returned {out[b].tolist()} for configuration {b}: negative ids "
                            "other than trailing -1 padding", "answer")
    if negative[:, 0].any():
        b = int(np.flatnonzero(negative[:, 0])[0])
        raise SamplerFailed(f"returned a block of 0 tokens for configuration {b} "
                            f"(allowed 1..{depth + 1})", "answer")
    bad = out >= vocab
    if bad.any():
        b = int(np.flatnonzero(bad.any(-1))[0])
        raise SamplerFailed(f"returned token id {int(out[bad][0])} outside the vocabulary "
                            f"0..{vocab - 1} (configuration {b}: {out[b].tolist()})", "answer")
    return out


def call_layout(fn: Callable[..., Any], layout: str, request: dict[str, np.ndarray],
                rng: np.random.Generator) -> Any:
    """Call the sampler on one request in its layout; the raw answer (a list for unbatched)."""
    if layout == "batched":
        return fn(request["target"], request["draft"], request["paths"], rng)
    if layout == "unbatched":
        target, draft, paths = request["target"], request["draft"], request["paths"]
        return [fn(target[b], draft[b], paths[b], rng) for b in range(paths.shape[0])]
    if layout in ENGINE_LAYOUTS:
        return call_engine_layout(fn, layout, request, rng)
    return fn(request["draft_token_ids"], request["num_draft_tokens"], request["draft_probs"],
              request["target_probs"], request["bonus_token_ids"], rng)


# ---------------------------------------------------------------------------
# the child process
# ---------------------------------------------------------------------------

def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this child when the parent dies (the prctl of experiments.store's
    die_with_parent, which proofs/ may not import); elsewhere the socket's EOF ends it."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # lazy: only the child needs it

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)


def _send(conn: Any, header: dict[str, Any], payload: bytes = b"") -> None:
    conn.send_bytes(json.dumps(header).encode())
    conn.send_bytes(payload)


def _child(conn: Any, spec: str, layout: str, seed: int, parent_pid: int) -> None:
    """Child main: load the sampler, then answer requests until None or EOF. Its stdout and
    stderr are the capture file (set by the parent)."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    user_file = split_spec(spec)[0] if spec.rpartition(":")[0].endswith(".py") else None
    try:
        fn = import_sampler(spec)
    except SpecError as err:
        _send(conn, {"ok": False, "kind": "spec", "message": str(err), "where": None})
        return
    except SyntaxError as err:  # the code does not compile: nothing of it ran (bad input)
        _send(conn, {"ok": False, "kind": "spec", "where": None,
                     "message": f"sampler: {split_spec(spec)[0]!r} does not compile: "
                                f"{type(err).__name__} at {err.filename}:{err.lineno}: {err.msg}"})
        return
    except BaseException as err:  # noqa: BLE001 - anything the user's import does
        _send(conn, {"ok": False, "kind": "exit" if isinstance(err, SystemExit) else "load",
                     "message": f"at import: {describe(err)}", "where": where(err, user_file)})
        return
    _send(conn, {"ok": True})
    rng = sampler_rng(seed)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            answer = call_layout(fn, layout, request, rng)
            blocks = check_blocks(answer, request["count"], request["depth"], request["vocab"])
        except SamplerFailed as err:
            _send(conn, {"ok": False, "kind": err.kind, "message": str(err), "where": None})
            return
        except BaseException as err:  # noqa: BLE001 - the sampler's failure, reported
            kind = "exit" if isinstance(err, SystemExit) else "exception"
            _send(conn, {"ok": False, "kind": kind, "message": f"when called: {describe(err)}",
                         "where": where(err, user_file)})
            return
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        _send(conn, {"ok": True, "shape": list(blocks.shape)}, blocks.tobytes())


def child_main() -> None:
    """Entry of the child process: argv = [fd, spec, layout, seed, parent pid]."""
    fd, spec, layout, seed, parent_pid = sys.argv[1:6]
    _child(Connection(int(fd)), spec, layout, int(seed), int(parent_pid))


# ---------------------------------------------------------------------------
# the parent side
# ---------------------------------------------------------------------------

def _import_path() -> list[str]:
    """sys.path entries the child needs to import speclp as this process does."""
    package_parent = str(Path(_PACKAGE).parent)
    return [p for p in sys.path if p] + ([package_parent] if package_parent not in sys.path else [])


def _shape_hint(layout: str, message: str) -> str | None:
    if "positional argument" in message:
        return {"ragged": "the ragged layout calls sampler(draft_token_ids, num_draft_tokens, "
                          "draft_probs, target_probs, bonus_token_ids, rng)",
                "vllm": "the vllm layout calls sampler(draft_token_ids, num_draft_tokens, "
                        "draft_probs or None, target_probs, rng)",
                "sglang": "the sglang layout calls sampler(candidates, retrive_index, "
                          "retrive_next_token, retrive_next_sibling, target_probs, draft_probs, "
                          "threshold_single, threshold_acc, rng)"}.get(
            layout, f"the {layout} layout calls sampler(target_rows, draft_rows, paths, rng)")
    if layout == "batched" and any(w in message for w in ("shape", "unpack", "dimension", "index",
                                                          "blocks for a batch", "axis")):
        return "a batched call failed on shapes: if the sampler takes one configuration, use --unbatched"
    return None


def _wait(process: subprocess.Popen, seconds: float) -> int | None:
    """The child's return code once it has exited (Popen's convention: -signal for a
    signal), waiting at most `seconds`; None while it runs. The child is NOT reaped (waitid
    WNOWAIT): while it is an unreaped zombie its pid stays its process group's id, so the
    group can still be killed safely (close)."""
    if process.returncode is not None:
        return process.returncode
    deadline = time.monotonic() + seconds
    while True:
        try:
            info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:  # reaped already (by Popen)
            return process.returncode if process.returncode is not None else -1
        if info is not None:
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


class SandboxedSampler:
    """A sampler loaded and called in a child process (see the module docstring);
    the child is a fresh interpreter in its own session (terminal signals are the parent's),
    killed with the parent (Linux) and on close.

        with SandboxedSampler("my.py:fn", "batched", seed=0) as sampler:
            blocks = sampler(request)   # request: the arrays of the layout + count/depth/vocab
    """

    def __init__(self, spec: str, layout: str = "batched", seed: int = 0,
                 call_timeout: float = CALL_TIMEOUT, load_timeout: float = LOAD_TIMEOUT):
        if layout not in LAYOUTS:
            raise BadArgument("layout", f"must be one of {LAYOUTS}, got {layout!r}")
        for field_name, value in (("call_timeout", call_timeout), ("load_timeout", load_timeout)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise BadArgument(field_name, f"must be a number of seconds > 0, got {value!r}")
        split_spec(spec)  # ValueError for a malformed spec, before a process starts
        self.spec, self.layout, self.seed, self.call_timeout = spec, layout, seed, call_timeout
        self.load_timeout = load_timeout
        self.process: Any = None
        self.conn: Any = None
        self.capture_path: str | None = None
        self.calls = 0

    def __enter__(self) -> SandboxedSampler:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start the child (a fresh interpreter: nothing of this process's __main__ runs in it)
        and wait for the sampler to load."""
        handle, self.capture_path = tempfile.mkstemp(prefix="speclp-sampler-", suffix=".out")
        parent_end, child_end = socket.socketpair()
        code = ("import sys, json; sys.path[:0] = json.loads(sys.argv.pop(1)); "
                "from speclp.proofs.sandbox import child_main; child_main()")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, json.dumps(_import_path()), str(child_end.fileno()),
                 self.spec, self.layout, str(self.seed), str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=handle, stderr=handle,
                pass_fds=(child_end.fileno(),), start_new_session=True)
        finally:
            os.close(handle)
            child_end.close()
        self.conn = Connection(parent_end.detach())
        self._receive(self.load_timeout, "loading", 0)

    def captured_output(self) -> str:
        """What the sampler wrote to stdout/stderr so far (first MAX_CAPTURE characters)."""
        if self.capture_path is None or not os.path.exists(self.capture_path):
            return ""
        with open(self.capture_path, "rb") as handle:
            data = handle.read(MAX_CAPTURE + 1)
        text = data.decode("utf-8", "replace")
        return text if len(text) <= MAX_CAPTURE else text[:MAX_CAPTURE] + "..."

    def _kill(self) -> None:
        """SIGKILL the child's whole process group (its session, so that what it started dies
        too); called only while the child is alive and unreaped (its pid is its group id)."""
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.process.kill()

    def _fail(self, message: str, kind: str, where_: str | None = None) -> SamplerFailed:
        if kind == "timeout" and self.process is not None:
            self._kill()
        output = self.captured_output()
        self.close()
        return SamplerFailed(message, kind, where_, _shape_hint(self.layout, message), output)

    def _receive(self, timeout: float, stage: str, max_bytes: int) -> tuple[dict[str, Any], bytes]:
        if not self.conn.poll(timeout):
            limit = ("the load time limit, load_timeout: the import of the sampler's module"
                     if stage == "loading" else "the per-call time limit, --call-timeout")
            raise self._fail(f"did not answer within {timeout:g} s ({stage}; {limit})", "timeout")
        try:
            header = json.loads(self.conn.recv_bytes(4096).decode())
            payload = self.conn.recv_bytes(max(max_bytes, 1))
        except (EOFError, OSError, ValueError, UnicodeDecodeError):
            code = _wait(self.process, 5)
            if code is not None and code < 0:
                name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else code
                raise self._fail(f"crashed ({stage}) with signal {name}", "crash") from None
            raise self._fail(f"ended the process ({stage}) with exit status {code} and no answer "
                             "(os._exit or a broken answer)", "exit") from None
        if not isinstance(header, dict) or not header.get("ok"):
            message = header.get("message", "failed") if isinstance(header, dict) else "failed"
            kind = header.get("kind", "exception") if isinstance(header, dict) else "exception"
            place = header.get("where") if isinstance(header, dict) else None
            raise self._fail(str(message), str(kind), place if isinstance(place, str) else None)
        return header, payload

    def __call__(self, request: dict[str, Any]) -> np.ndarray:
        """Blocks [count, depth + 1] (checked here again: the child is not trusted)."""
        if self.process is None:
            raise RuntimeError("SandboxedSampler used outside its context")
        count, depth, vocab = request["count"], request["depth"], request["vocab"]
        self.calls += 1
        self.conn.send(request)
        header, payload = self._receive(self.call_timeout, f"call {self.calls}",
                                        8 * count * (depth + 1))
        if header.get("shape") != [count, depth + 1] or len(payload) != 8 * count * (depth + 1):
            raise self._fail(f"sent an answer of shape {header.get('shape')!r}", "answer")
        blocks = np.frombuffer(payload, dtype=np.int64).reshape(count, depth + 1).copy()
        return check_blocks(blocks, count, depth, vocab)

    def close(self) -> None:
        """End the child and every process of its group (what the sampler forked or spawned),
        pass or fail. The group is killed while the child is alive or an unreaped zombie
        (_wait does not reap), so its group id cannot have been reused; then it is reaped."""
        if self.process is not None:
            with contextlib.suppress(Exception):
                self.conn.send(None)
            _wait(self.process, 2)
            self._kill()  # the child's group: its own pid is still reserved (not reaped)
            with contextlib.suppress(Exception):
                self.process.wait(5)
            with contextlib.suppress(Exception):
                self.conn.close()
            self.process = None

    def cleanup(self) -> None:
        """Close and remove the capture file."""
        self.close()
        if self.capture_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.capture_path)


class InProcessSampler:
    """A sampler function called in this process: the same answer checks and failure
    reports as SandboxedSampler (exceptions and sys.exit become SamplerFailed with the
    file:line; prints are captured), but no protection against hangs or crashes."""

    def __init__(self, fn: Callable[..., Any], layout: str = "batched", seed: int = 0):
        if layout not in LAYOUTS:
            raise BadArgument("layout", f"must be one of {LAYOUTS}, got {layout!r}")
        self.fn, self.layout = fn, layout
        self.rng = sampler_rng(seed)
        self.buffer = io.StringIO()
        code = getattr(fn, "__code__", None)
        self.user_file = code.co_filename if code is not None else None

    def __enter__(self) -> InProcessSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def captured_output(self) -> str:
        text = self.buffer.getvalue()
        return text if len(text) <= MAX_CAPTURE else text[:MAX_CAPTURE] + "..."

    def cleanup(self) -> None:
        pass

    def __call__(self, request: dict[str, Any]) -> np.ndarray:
        # copies: the caller keeps its arrays whatever the sampler writes into them
        request = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in request.items()}
        try:
            with contextlib.redirect_stdout(self.buffer), contextlib.redirect_stderr(self.buffer):
                answer = call_layout(self.fn, self.layout, request, self.rng)
            return check_blocks(answer, request["count"], request["depth"], request["vocab"])
        except SamplerFailed as err:
            err.hint = _shape_hint(self.layout, str(err))
            err.output = self.captured_output()
            raise
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the sampler's own failure
            kind = "exit" if isinstance(err, SystemExit) else "exception"
            message = f"when called: {describe(err)}"
            raise SamplerFailed(message, kind, where(err, self.user_file),
                                _shape_hint(self.layout, message), self.captured_output()) from None
