"""A linear program as inspectable data (cvxpy-style), in float64 and exact rationals.

    maximize    c^T x + constant
    subject to  A_eq x  = b_eq
                A_ub x <= b_ub
                x >= 0

Every coefficient is stored as a *reference* into a value table (an index), so one
structure is materialised twice: with the float64 table for the solvers and with
the exact table (numpy object array of ``fractions.Fraction``) for certificates.
Builders fill the structure; nothing else in speclp writes a second copy of an LP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp


def is_zero_value(value: Any) -> bool:
    """True when an exact coefficient is zero. Numbers: value == 0. Symbolic rational
    functions (speclp.proofs.symbolic) have is_zero(): zero as a FUNCTION, so that a
    coefficient vanishing on part of a cell is kept (an explicit 0 entry changes no LP)
    instead of splitting the cell. Used only where zeros are dropped for sparsity."""
    test = getattr(value, "is_zero", None)
    if callable(test) and not isinstance(value, np.generic):
        return bool(test())
    return value == 0


@dataclass
class Block:
    """One block of rows: COO entries (row, col, ref) and right-hand sides (ref per row)."""

    rows: np.ndarray  # [nnz] int64
    cols: np.ndarray  # [nnz] int64
    refs: np.ndarray  # [nnz] int64 index into the value table
    rhs_refs: np.ndarray  # [m] int64

    @property
    def count(self) -> int:
        return int(len(self.rhs_refs))

    @staticmethod
    def empty() -> Block:
        z = np.zeros(0, dtype=np.int64)
        return Block(z, z, z, z)


@dataclass
class LinearProgram:
    name: str
    num_vars: int
    objective_refs: np.ndarray  # [n] refs
    constant_ref: int
    eq: Block
    ub: Block
    table: np.ndarray  # [T] float64 values
    exact_table: np.ndarray | None  # [T] Fractions (None: no exact data)
    variable_label: Callable[[int], str] = field(default=lambda j: f"x{j}", repr=False)
    eq_label: Callable[[int], str] = field(default=lambda i: f"eq{i}", repr=False)
    ub_label: Callable[[int], str] = field(default=lambda i: f"ub{i}", repr=False)
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    # ---- sizes -------------------------------------------------------------
    @property
    def num_eq(self) -> int:
        return self.eq.count

    @property
    def num_ub(self) -> int:
        return self.ub.count

    @property
    def nnz(self) -> int:
        return int(len(self.eq.refs) + len(self.ub.refs))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "variables": self.num_vars,
            "equality_rows": self.num_eq,
            "inequality_rows": self.num_ub,
            "nonzeros": self.nnz,
            "exact_data": self.exact_table is not None,
            "notes": list(self.notes),
        }

    # ---- float64 -----------------------------------------------------------
    def objective(self) -> np.ndarray:
        return self.table[self.objective_refs]

    def constant(self) -> float:
        return float(self.table[self.constant_ref])

    def matrix(self, block: str) -> sp.csr_array:
        b = self.eq if block == "eq" else self.ub
        return sp.csr_array(
            (self.table[b.refs], (b.rows, b.cols)), shape=(b.count, self.num_vars)
        )

    def rhs(self, block: str) -> np.ndarray:
        b = self.eq if block == "eq" else self.ub
        return self.table[b.rhs_refs]

    # ---- exact -------------------------------------------------------------
    def exact(self) -> ExactProgram:
        if self.exact_table is None:
            raise ValueError(f"LP {self.name!r} carries no exact data")
        t = self.exact_table
        return ExactProgram(
            objective=t[self.objective_refs],
            constant=t[self.constant_ref],
            eq=(self.eq.rows, self.eq.cols, t[self.eq.refs]),
            b_eq=t[self.eq.rhs_refs],
            ub=(self.ub.rows, self.ub.cols, t[self.ub.refs]),
            b_ub=t[self.ub.rhs_refs],
            num_vars=self.num_vars,
        )


@dataclass
class ExactProgram:
    """The LP with exact rational data; matrices as COO (rows, cols, values)."""

    objective: np.ndarray
    constant: Fraction
    eq: tuple[np.ndarray, np.ndarray, np.ndarray]
    b_eq: np.ndarray
    ub: tuple[np.ndarray, np.ndarray, np.ndarray]
    b_ub: np.ndarray
    num_vars: int


class ValueTable:
    """Collects the distinct coefficient values of an LP in float64 and (optionally) exact form.

    add(values) appends a vector of values (float64 array and, when exact, object array
    of Fractions) and returns the refs of the appended entries.
    """

    def __init__(self, exact: bool) -> None:
        self._floats: list[np.ndarray] = []
        self._exact: list[np.ndarray] | None = [] if exact else None
        self._size = 0
        self.zero = self.add_scalar(0)
        self.one = self.add_scalar(1)
        self.minus_one = self.add_scalar(-1)

    def add(self, values: np.ndarray) -> np.ndarray:
        """values: float64 array or object array of exact rationals; returns refs."""
        values = np.asarray(values)
        flat = values.reshape(-1)
        if flat.dtype == object:
            self._floats.append(np.array([float(v) for v in flat], dtype=np.float64))
            if self._exact is not None:
                self._exact.append(flat)
        else:
            self._floats.append(flat.astype(np.float64))
            if self._exact is not None:
                self._exact.append(np.array([Fraction(float(v)) for v in flat], dtype=object))
        refs = np.arange(self._size, self._size + len(flat), dtype=np.int64)
        self._size += len(flat)
        return refs.reshape(values.shape)

    def add_scalar(self, value: Any) -> int:
        arr = np.empty(1, dtype=object)
        arr[0] = Fraction(value) if not isinstance(value, float) else Fraction(value)
        return int(self.add(arr)[0])

    def tables(self) -> tuple[np.ndarray, np.ndarray | None]:
        floats = np.concatenate(self._floats) if self._floats else np.zeros(0)
        exact = None
        if self._exact is not None:
            exact = np.concatenate(self._exact) if self._exact else np.zeros(0, dtype=object)
        return floats, exact


def exact_fraction(value: Any) -> Fraction:
    """Fraction of a Fraction / fmpq / int / float (exact) value."""
    if isinstance(value, Fraction):
        return value
    if hasattr(value, "p") and hasattr(value, "q"):
        return Fraction(int(value.p), int(value.q))
    return Fraction(value)
