"""speclp.rationals: exact text for rationals of any size (the 4300-digit limit of str/int)."""

from __future__ import annotations

import sys
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from speclp.rationals import fraction_text, parse_fraction


def test_beyond_the_int_string_limit():
    limit = sys.get_int_max_str_digits()
    big = Fraction(7**20001, 3**15000 + 2)  # ~17,000 and ~7,000 digits
    with pytest.raises(ValueError):
        str(big)  # what crashed `gap` at (8, 3, 4) and realgap at L = 3
    text = fraction_text(big)
    assert parse_fraction(text) == big
    assert sys.get_int_max_str_digits() == limit  # no global setting changed
    assert text.count("/") == 1 and len(text) > 20000


@given(st.fractions())
def test_round_trip_and_same_text_as_str(x):
    assert fraction_text(x) == str(x)
    assert parse_fraction(fraction_text(x)) == x


@pytest.mark.parametrize("text", ["1.5", "1e3", "__import__('os')", "1/0", "2**8", "", "1/-2", "0x10"])
def test_parser_refuses_what_is_not_p_over_q(text):
    with pytest.raises(ValueError):
        parse_fraction(text)


def test_parser_bounds_size():
    with pytest.raises(ValueError, match="digits"):
        parse_fraction("1" * 50, max_digits=40)
