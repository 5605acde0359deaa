"""Exact rationals as text, at any size.

Python refuses to turn an int of more than 4300 decimal digits into a string (or back)
with plain str()/int() (sys.get_int_max_str_digits, a guard against quadratic-time
conversion of untrusted input). Certified bounds of large instances are rationals with
thousands of digits, so every exact number the toolkit writes or reads goes through this
one pair: fraction_text (always the exact "p/q" or "p") and parse_fraction (the inverse,
with its own explicit size bound, so a huge string in a file is refused, not parsed).
The conversion goes through decimal.Decimal, whose int conversions are exact and not
subject to the digit limit; no global setting is changed.
"""

from __future__ import annotations

import decimal
import re
from fractions import Fraction

__all__ = ["MAX_DIGITS", "fraction_text", "integer_text", "parse_fraction"]

MAX_DIGITS = 1_000_000  # digits accepted per integer when parsing (about 1 MB of text)
_FRACTION = re.compile(r"\s*([+-]?)(\d+)(?:\s*/\s*(\d+))?\s*")


def integer_text(n: int) -> str:
    """Decimal digits of the int n, exact at any size."""
    n = int(n)
    if -10**4000 < n < 10**4000:
        return str(n)
    return format(decimal.Decimal(n), "f")


def fraction_text(x: Fraction | int) -> str:
    """"p/q" (or "p" when the denominator is 1) for an exact rational of any size."""
    x = Fraction(x)
    if x.denominator == 1:
        return integer_text(x.numerator)
    return f"{integer_text(x.numerator)}/{integer_text(x.denominator)}"


def _parse_integer(digits: str) -> int:
    if len(digits) <= 4000:
        return int(digits)
    return int(decimal.Decimal(digits))


def parse_fraction(text: str, max_digits: int = MAX_DIGITS) -> Fraction:
    """The rational written as "p/q" or "p" (decimal integers, optional sign), at any size up
    to max_digits digits per integer. ValueError on anything else (no floats, no
    expressions: this is a parser, it evaluates nothing)."""
    if not isinstance(text, str):
        raise ValueError(f"not a rational string: {type(text).__name__}")
    match = _FRACTION.fullmatch(text)
    if match is None:
        raise ValueError(f"not a rational 'p/q': {text[:40]!r}")
    sign, num, den = match.groups()
    if len(num) > max_digits or (den is not None and len(den) > max_digits):
        raise ValueError(f"rational with more than {max_digits} digits refused")
    numerator = _parse_integer(num)
    denominator = _parse_integer(den) if den is not None else 1
    if denominator == 0:
        raise ValueError(f"zero denominator: {text[:40]!r}")
    value = Fraction(numerator, denominator)
    return -value if sign == "-" else value
