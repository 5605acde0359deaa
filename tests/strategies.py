"""Hypothesis strategies shared by the tests of exact verifier laws (tests/test_structure.py,
tests/test_bv_extended.py): small rational instances with zeros and ties in the rows."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import strategies as st
from speclp.lp.instance import Instance, from_rows
from speclp.verifiers.tree import num_nodes


def rational_instance(draw: Any, vocab: int, depth: int) -> Instance:
    """Target and draft rows of small integers in 0..3 (zeros and ties frequent), normalised
    to exact rationals; every row positive somewhere."""
    count = num_nodes(vocab, depth)
    weights = st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(any)

    def rows() -> np.ndarray:
        out = np.empty((count, vocab), dtype=object)
        for i in range(count):
            w = draw(weights)
            out[i] = [Fraction(x, sum(w)) for x in w]
        return out

    target = rows()
    draft = rows()
    return from_rows(target, draft, depth, "hypothesis")


@st.composite
def rational_instances(draw: Any) -> Instance:
    """rational_instance at V in {2, 3}, L in {1, 2}."""
    return rational_instance(draw, draw(st.integers(2, 3)), draw(st.integers(1, 2)))
