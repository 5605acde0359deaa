"""The one table of comparison tolerances (docs/theory.md section 16.2: direct HiGHS solves were
accurate to about 1e-10 only, so floats are compared at 1e-7 unless certified).

Every claim check reads its tolerance here; exact (rational) comparisons use none.
"""

from __future__ import annotations

CERTIFIED = 1e-9
"""A float value against an optimum certified exactly (or a closed form): a verifier's block
efficiency above optimum + CERTIFIED is a violation."""

UNCERTIFIED = 1e-7
"""The same against a float optimum that is NOT certified (HiGHS accuracy about 1e-10, with a
margin)."""

TOTAL_VARIATION = 1e-12
"""Largest total variation of a float64 law (continued by target sampling) from the target law
that still counts as lossless; exact laws are compared exactly."""

FLOAT_AGREEMENT = 1e-9
"""Two float64 computations of the same exact quantity (an LP value against a closed form, a
node LP against BV's value) must agree to this."""

ROW_SUM = 1e-9
"""A probability row of an instance must sum to 1 within this."""

ORDER = 1e-12
"""A float comparison of two verifiers (GBV below BV, say) counts only beyond this."""


def optimum_tolerance(certified: bool) -> float:
    """The tolerance of a comparison with an optimum (CERTIFIED or UNCERTIFIED)."""
    return CERTIFIED if certified else UNCERTIFIED
