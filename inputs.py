"""The one refusal type of speclp: an argument that is wrong (ground level: imports nothing of
speclp, so every layer may raise it).

The library raises ``BadArgument(field, reason)`` where an argument it was given is wrong,
naming the parameter (``paths``, ``draft_sampling``, ...); the CLI maps the field to its
flag in one place (speclp.cli.common.flag_of) and exits 2 with one line. Any other exception
that reaches the CLI is a bug: exit 3 with its own message, never a flag error.
"""

from __future__ import annotations

__all__ = ["BadArgument"]


class BadArgument(ValueError):
    """A wrong argument. field: the parameter (or input field, or path) it names; reason:
    what is wrong, one line. str(err) is ``"field: reason"``."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
