"""Checks that a refusal comes "before any work", made without a clock (issue 19: no test may
depend on how busy the machine is).

`watch_work()` records the first call into the code that does a command's work (LP builders
and solvers, certificates, exact laws, model loading and decoding, the sweep's executors,
the symbolic prover's enumeration) while the block runs. A refusal (exit 2) must come with
no such call: its checks read sizes, names and files only. After the first work call the
watch removes itself, so an accepted case runs at full speed.
"""

from __future__ import annotations

import inspect
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import speclp

PACKAGE = Path(speclp.__file__).parent
WORK_MODULES = {  # every function of these files is work
    "lp/solve.py", "lp/certify.py", "lp/colgen.py", "lp/engine.py", "lp/class_lp.py", "lp/node.py",
    "lp/coarsen.py", "lp/program.py", "verifiers/exact.py", "verifiers/single_path.py",
    "verifiers/gbv.py", "verifiers/multipath.py", "verifiers/nodeopt.py", "verifiers/spectr_gbv.py",
    "verifiers/single_step.py", "decode/engine.py", "decode/tree_rows.py",
    "proofs/symbolic/explore.py", "proofs/symbolic/cells.py",
}
WORK_FUNCTIONS = {  # and these functions of other files
    "decode/models.py": {"load_pair", "load_model"},
    "experiments/sweep.py": {"run_task", "_in_process", "_process_pool", "_dask"},
}
FUNCTION = inspect.CO_OPTIMIZED  # set on functions, not on module or class bodies (imports)


def work_name(code) -> str | None:
    """`file:function` when the code object is work (see the module docstring), else None."""
    try:
        relative = Path(code.co_filename).relative_to(PACKAGE).as_posix()
    except ValueError:
        return None
    if not code.co_flags & FUNCTION or code.co_name.startswith("<"):
        return None  # a module or class body, or a comprehension (of an import, or inside work)
    if relative in WORK_MODULES or code.co_name in WORK_FUNCTIONS.get(relative, ()):
        return f"{relative}:{code.co_name}"
    return None


@contextmanager
def watch_work() -> Iterator[list[str]]:
    """Yields a list that holds the first work call made in the block (empty if none)."""
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            name = work_name(frame.f_code)
            if name is not None:
                seen.append(name)
                sys.setprofile(None)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


class TooSlow(BaseException):
    """Raised by the alarm of `deadline`: a case hung (a guard against hangs only; how fast
    a refusal is, is never tested)."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TooSlow in the block after `seconds` of wall time (SIGALRM)."""
    def alarm(signum, frame):
        raise TooSlow(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
