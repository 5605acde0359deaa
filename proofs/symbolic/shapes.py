"""Symbolic instances: every row of a (V, L) shape made of free symbols.

Row of node u (shortlex index, prefix digits u_1..u_d) and token t:
    target  p(t|u) = p{u}_{t}  for t < V - 1,   p(V-1|u) = 1 - sum_{t < V-1} p{u}_{t}
    draft   q(t|u) = q{u}_{t}  likewise
e.g. V = 2: p(0|root) = p_0, p(1|root) = 1 - p_0, p(0|prefix 1,0) = p10_0. Every node of
depth 0..L carries both rows (draft rows at depth L are never read: their symbols never
occur), so a shape's symbols describe ALL its instances. The domain is the product of
closed simplices: every entry >= 0 (the domain conditions of the root cell).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ...verifiers.tree import TreeModel, node_prefix, num_nodes
from .algebra import RationalFunction, Ring, to_fraction


def symbol_name(which: str, node: int, token: int, vocab: int) -> str:
    prefix = "".join(str(t) for t in node_prefix(node, vocab))
    return f"{which}{prefix}_{token}"


@dataclass
class Shape:
    """The symbols and rows of one (V, L) shape.

    rows[which] [N][V]: RationalFunction entries (which = "target" or "draft");
    row_vars[(which, node)]: indices of the row's free symbols (sampled jointly).
    """

    vocab: int
    depth: int
    ring: Ring
    rows: dict[str, list[list[RationalFunction]]]
    row_vars: dict[tuple[str, int], list[int]]
    cache: dict = field(default_factory=dict)  # certificate searches, shared by all cells

    @property
    def num_nodes(self) -> int:
        return num_nodes(self.vocab, self.depth)

    def domain(self) -> list[RationalFunction]:
        """Entries that must be >= 0: every free symbol and every row's last entry."""
        out = []
        for which in ("target", "draft"):
            for row in self.rows[which]:
                out.extend(row)
        return out

    def model(self, values: list[RationalFunction], number_type: type) -> TreeModel:
        """TreeModel whose entries are the rows with symbol i replaced by values[i], as
        objects of number_type (a RationalFunction subclass, e.g. CellExpr)."""
        arrays = {}
        for which in ("target", "draft"):
            arr = np.empty((self.num_nodes, self.vocab), dtype=object)
            for u, row in enumerate(self.rows[which]):
                for t, entry in enumerate(row):
                    arr[u, t] = _as(substitute_all(entry, values), number_type)
            arrays[which] = arr
        return TreeModel(arrays["target"], arrays["draft"], self.depth)

    def rational_model(self, point: list[Fraction]) -> TreeModel:
        """The concrete instance at a rational point (Fraction rows)."""
        arrays = {}
        for which in ("target", "draft"):
            arr = np.empty((self.num_nodes, self.vocab), dtype=object)
            for u, row in enumerate(self.rows[which]):
                for t, entry in enumerate(row):
                    arr[u, t] = to_fraction(entry.evaluate(point))
            arrays[which] = arr
        return TreeModel(arrays["target"], arrays["draft"], self.depth)

    def instance_json(self, point: list[Fraction]) -> dict:
        """The instance JSON (DESIGN.md format, fraction strings) at a rational point."""
        model = self.rational_model(point)

        def text(x: Fraction) -> str:
            return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"

        return {"vocab_size": self.vocab, "depth": self.depth,
                "target": [[text(x) for x in row] for row in model.target],
                "draft": [[text(x) for x in row] for row in model.draft]}


def _as(value: RationalFunction, number_type: type) -> RationalFunction:
    return number_type(value.num, value.den, value.ring)


def substitute_all(expr: RationalFunction, values: list[RationalFunction]) -> RationalFunction:
    """expr with every symbol i replaced by values[i] (expr is a row entry: linear, den 1)."""
    ring = expr.ring
    total = RationalFunction.constant(0, ring)
    for monom, coeff in expr.num.terms():
        term = RationalFunction.constant(int(coeff), ring)
        for i, e in enumerate(monom):
            if e:
                term = term * values[i] ** int(e)
        total = total + term
    if not expr.den.is_one():
        total = total / RationalFunction(expr.den, ring.one, ring)
    return total


def make_shape(vocab: int, depth: int) -> Shape:
    if vocab < 2 or depth < 1:
        raise ValueError(f"shape needs vocab >= 2 and depth >= 1, got ({vocab}, {depth})")
    n = num_nodes(vocab, depth)
    names: list[str] = []
    for _which, letter in (("target", "p"), ("draft", "q")):
        for u in range(n):
            for t in range(vocab - 1):
                names.append(symbol_name(letter, u, t, vocab))
    ring = Ring(names)
    rows: dict[str, list[list[RationalFunction]]] = {}
    row_vars: dict[tuple[str, int], list[int]] = {}
    for which, letter in (("target", "p"), ("draft", "q")):
        rows[which] = []
        for u in range(n):
            idx = [ring.index[symbol_name(letter, u, t, vocab)] for t in range(vocab - 1)]
            entries = [ring.variable(i) for i in idx]
            last = RationalFunction.constant(1, ring)
            for e in entries:
                last = last - e
            rows[which].append(entries + [last])
            row_vars[(which, u)] = idx
    return Shape(vocab, depth, ring, rows, row_vars)
