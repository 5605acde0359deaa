"""The one time-limit type of speclp (ground level: imports nothing of speclp, so the CLI,
experiments/ and proofs/ share it without an upward arrow).

A library loop that takes a time limit checks ``deadline.passed`` between its units of work
(trials, instances, contexts, runs) and stops there, keeping what it finished; the CLI
reports such a run as stopped (exit 4, ``STOPPED: ...``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["STOPPED", "Deadline"]

STOPPED = "stopped: time limit"  # the "status" of a result that its deadline stopped


class Deadline:
    """A time limit of `seconds` from now (None: none); `passed` once it is over.

    clock: seconds on a clock that never goes back (time.monotonic; a test passes its own).
    The limit counts from construction: build it when the work starts."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.end = None if seconds is None else clock() + seconds

    @property
    def passed(self) -> bool:
        return self.end is not None and self.clock() >= self.end

    @property
    def reason(self) -> str:
        """What stopped the work, for a result's "stopped": "time limit of 5 s"."""
        return f"time limit of {self.seconds:g} s"
