"""The one refusal type of speclp: an argument that is wrong (ground level: imports nothing of
speclp, so every layer may raise it).

The library raises ``BadArgument(field, reason)`` where an argument it was given is wrong,
naming the parameter (``paths``, ``draft_sampling``, ...); the CLI maps the field to its
flag in one place (speclp.cli.common.flag_of) and exits 2 with one line. Any other exception
that reaches the CLI is a bug: exit 3 with its own message, never a flag error.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

__all__ = ["MAX_TRIALS", "SEED_MAX", "BadArgument", "choice", "integer", "number", "seed", "short"]


class BadArgument(ValueError):
    """A wrong argument. field: the parameter (or input field, or path) it names; reason:
    what is wrong, one line. str(err) is ``"field: reason"``."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


# ---------------------------------------------------------------------------
# the checks every spec makes (one wording: the CLI shows them as `error: --flag: reason`)
# ---------------------------------------------------------------------------

SEED_MAX = 2**32 - 1  # numpy and torch generators take seeds in [0, 2^32 - 1]
MAX_TRIALS = 1_000_000  # random instances of one audit or claim check (as sweep's task cap)


def short(value: object, limit: int = 60) -> str:
    """repr of a value for a one-line message, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def integer(field: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """value itself, after checking it is an integer (not a bool) with low <= value <= high
    (either bound may be None); BadArgument(field) otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BadArgument(field, f"must be an integer, got {short(value)}")
    if low is not None and value < low:
        raise BadArgument(field, f"must be >= {low}, got {short(value)}")
    if high is not None and value > high:
        raise BadArgument(field, f"must be <= {high:,}, got {short(value)}")
    return int(value)


def number(field: str, value: object, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> float:
    """A finite real number in [low, high] ((low, high] when low_open); NaN, +-inf, bools
    and non-numbers refused (BadArgument(field))."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadArgument(field, f"must be a number, got {short(value)}")
    if not math.isfinite(value):
        raise BadArgument(field, f"must be a finite number, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise BadArgument(field, f"must be {'>' if low_open else '>='} {low:g}, got {value:g}")
    if high is not None and value > high:
        raise BadArgument(field, f"must be <= {high:g}, got {value:g}")
    return value


def choice(field: str, value: object, choices: Iterable[str]) -> str:
    """value when it is one of `choices`; BadArgument(field) otherwise."""
    choices = tuple(choices)
    if value not in choices:
        raise BadArgument(field, f"must be one of {', '.join(choices)}, got {short(value)}")
    return value  # type: ignore[return-value]


def seed(field: str, value: object) -> int:
    """A seed for numpy and torch generators: 0 <= seed <= SEED_MAX."""
    return integer(field, value, 0, SEED_MAX)
