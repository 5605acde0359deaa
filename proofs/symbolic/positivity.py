"""Sign certificates: a polynomial is >= 0 (or > 0) on a cell because it is a nonnegative
combination of products of the cell's facts (a Handelman / Positivstellensatz-style
certificate, checked term by term).

Given facts f_i >= 0 (some of them strict, f_i > 0) and a target polynomial P, find
rationals lambda_m >= 0 with

    P = lambda_0 * 1 + sum_i lambda_i f_i + sum_{i <= j} lambda_ij f_i f_j      (exactly),

then P >= 0 on the cell, and P > 0 when some lambda_m > 0 multiplies a product of strict
facts only (the constant 1 counts as strict). Every product is >= 0 on the cell, so the
identity is the whole proof: the standalone checker expands it and reads the signs.

The lambdas come from a linear program (one equality row per monomial) solved with the
project's engine (speclp.lp: HiGHS, then the exact basis certificate in rationals), so
the identity holds in exact arithmetic. A contradiction certificate (the cell is empty)
is the same search with P = 0 and a strict term required, or P = -1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from flint import fmpq, fmpq_mat
from scipy.optimize import linprog
from scipy.sparse import csr_array

from ...lp.certify import solve_exact
from ...lp.program import Block, LinearProgram, ValueTable
from .algebra import poly_text

STRICT_CAP = 2**20  # bound on the strict part of the objective (bounded unless the cell is empty)
TRIPLE_LIMIT = 10  # degree 3: products of three among the first TRIPLE_LIMIT facts


@dataclass
class Combination:
    """P = sum_k coefficient[k] * prod(facts in products[k]); strict: the sum is > 0."""

    coefficients: list[Fraction]
    products: list[tuple[int, ...]]  # indices into the fact list given (empty: the constant 1)
    strict: bool


_TERMS: dict[str, dict[tuple[int, ...], int]] = {}


def _terms(poly: Any) -> dict[tuple[int, ...], int]:
    """{monomial: integer coefficient} of a flint polynomial (cached by its text)."""
    key = poly_text(poly)
    out = _TERMS.get(key)
    if out is None:
        out = {tuple(m): int(c) for m, c in poly.terms()}
        if len(_TERMS) < 500_000:
            _TERMS[key] = out
    return out


def _product_terms(facts: list[tuple[Any, bool]], texts: list[str],
                   members: tuple[int, ...]) -> dict[tuple[int, ...], int]:
    key = "*".join(f"({texts[i]})" for i in members)
    cached = _TERMS.get(key)
    if cached is None:
        poly = facts[members[0]][0]
        for i in members[1:]:
            poly = poly * facts[i][0]
        cached = {tuple(m): int(c) for m, c in poly.terms()}
        if len(_TERMS) < 500_000:
            _TERMS[key] = cached
    return cached


def nonnegative_combination(target: Any, facts: list[tuple[Any, bool]], degree: int = 2,
                            want_strict: bool = True, ring: Any = None,
                            pair_limit: int | None = None) -> Combination | None:
    """Search P = sum lambda_m M_m (see the module docstring).

    target: flint polynomial P; facts: [(f_i, strict_i)] meaning f_i >= 0 (> 0 when strict);
    products of up to `degree` facts (1, 2 or 3; products of two among the first pair_limit
    facts, of three among the first TRIPLE_LIMIT). Returns None when the LP finds no exact certificate.
    """
    products: list[tuple[int, ...]] = [()]
    columns: list[dict[tuple[int, ...], int]] = [{}]  # the constant 1: filled below
    texts = [poly_text(f) for f, _ in facts]
    for i, (f, _) in enumerate(facts):
        products.append((i,))
        columns.append(_terms(f))
    if degree >= 2:
        paired = len(facts) if pair_limit is None else min(pair_limit, len(facts))
        for i in range(paired):
            for j in range(i, paired):
                products.append((i, j))
                columns.append(_product_terms(facts, texts, (i, j)))
    if degree >= 3:
        tripled = min(TRIPLE_LIMIT, len(facts))
        for i in range(tripled):
            for j in range(i, tripled):
                for k in range(j, tripled):
                    products.append((i, j, k))
                    columns.append(_product_terms(facts, texts, (i, j, k)))
    strict = [all(facts[i][1] for i in prod) for prod in products]
    target_terms = _terms(target)
    zero_monomial = None
    monomials: dict[tuple[int, ...], int] = {}
    for m in target_terms:
        monomials.setdefault(m, len(monomials))
    nvars = len(next(iter(target_terms))) if target_terms else None
    for col in columns:
        for m in col:
            monomials.setdefault(m, len(monomials))
            nvars = len(m)
    if nvars is None:
        nvars = ring.nvars if ring is not None else 0
    zero_monomial = (0,) * nvars
    columns[0] = {zero_monomial: 1}
    monomials.setdefault(zero_monomial, len(monomials))
    # drop products that contain a monomial absent from P and from every other column: cheap
    # pruning is not needed at these sizes; the LP decides.
    return _solve(target_terms, columns, strict, products, monomials, want_strict)


def _solve(target_terms: dict, columns: list[dict], strict: list[bool],
           products: list[tuple[int, ...]], monomials: dict, want_strict: bool
           ) -> Combination | None:
    """The LP in equality form (one row per monomial, plus the strict-part row).

    target != 0: maximise the strict part s = sum of the strict lambdas, s + slack =
    STRICT_CAP (bounded unless the cell is empty). target == 0 (a contradiction): the strict
    part is fixed to 1, objective 0 (feasible iff 0 > 0 follows from the facts).
    Solved in float64 by HiGHS, then made exact on the support of the float solution
    (_exact_on_support); when that fails, by the project's exact LP machinery
    (speclp.lp.certify.solve_exact). Either way the identity is re-checked exactly.
    """
    n = len(columns)
    contradiction = not any(target_terms.values())
    strict_cols = [j for j in range(n) if strict[j]]
    use_strict = bool(strict_cols) and (want_strict or contradiction)
    if contradiction and not use_strict:
        return None
    n_vars = n + (1 if use_strict and not contradiction else 0)
    m = len(monomials)
    rows, cols, values = [], [], []
    for j, col in enumerate(columns):
        for mono, coeff in col.items():
            rows.append(monomials[mono])
            cols.append(j)
            values.append(coeff)
    rhs = [target_terms.get(mono, 0) for mono in monomials]
    if use_strict:
        for j in strict_cols:
            rows.append(m)
            cols.append(j)
            values.append(1)
        if contradiction:
            rhs.append(1)
        else:
            rows.append(m)
            cols.append(n)
            values.append(1)
            rhs.append(STRICT_CAP)
    objective = np.zeros(n_vars)
    if use_strict and not contradiction:
        objective[strict_cols] = 1.0
    lam = _float_then_exact(rows, cols, values, rhs, objective, n_vars)
    if lam == "infeasible":
        return None
    if lam is None:  # HiGHS found a point but its support did not give an exact one
        lam = _project_exact(rows, cols, values, rhs, objective, n_vars)
    if lam is None:
        return None
    lam = lam[:n]
    keep = [j for j in range(n) if lam[j] != 0]
    is_strict = any(strict[j] for j in keep)
    return Combination([lam[j] for j in keep], [products[j] for j in keep], is_strict)


def _float_then_exact(rows: list, cols: list, values: list, rhs: list, objective: np.ndarray,
                      n_vars: int) -> list[Fraction] | str | None:
    """HiGHS (scipy) in float64, then the exact solution on the support of its vertex: the
    support's columns are independent there, so A_S^T A_S lam = A_S^T b has the unique
    solution, which is accepted only if A_S lam = b holds exactly and lam >= 0."""
    m = len(rhs)
    matrix = csr_array((np.array(values, dtype=float), (rows, cols)), shape=(m, n_vars))
    result = linprog(-objective, A_eq=matrix, b_eq=np.array(rhs, dtype=float),
                     bounds=(0, None), method="highs")
    if result.status == 2:  # infeasible: no certificate with these facts
        return "infeasible"
    if result.status != 0 or result.x is None:
        return None
    x = result.x
    support = [j for j in range(n_vars) if x[j] > 1e-9 * max(1.0, float(np.max(x)))]
    if not support:
        return [Fraction(0)] * n_vars if not any(rhs) else None
    index = {j: k for k, j in enumerate(support)}
    k = len(support)
    dense = [[0] * k for _ in range(m)]
    for r, c, v in zip(rows, cols, values, strict=True):
        if c in index:
            dense[r][index[c]] += v
    a = fmpq_mat(m, k, [fmpq(v) for row in dense for v in row])
    b = fmpq_mat(m, 1, [fmpq(v) for v in rhs])
    at = a.transpose()
    try:
        lam_s = (at * a).solve(at * b)
    except ZeroDivisionError:
        return None
    if a * lam_s != b:
        return None
    out = [Fraction(0)] * n_vars
    for j, pos in index.items():
        v = lam_s[pos, 0]
        if v < 0:
            return None
        out[j] = Fraction(int(v.p), int(v.q))
    return out


def _project_exact(rows: list, cols: list, values: list, rhs: list, objective: np.ndarray,
                   n_vars: int) -> list[Fraction] | None:
    """The same LP through speclp.lp (ValueTable, HiGHS, exact basis certificate)."""
    table = ValueTable(exact=True)
    value_refs = table.add(np.array(values, dtype=object)) if values else np.zeros(0, np.int64)
    rhs_refs = table.add(np.array(rhs, dtype=object))
    objective_refs = np.where(objective > 0, table.one, table.zero).astype(np.int64)
    rows_a, cols_a = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)
    order = np.lexsort((cols_a, rows_a))
    eq = Block(rows_a[order], cols_a[order], np.asarray(value_refs, np.int64)[order], rhs_refs)
    floats, exact = table.tables()
    lp = LinearProgram("sign-certificate", n_vars, objective_refs, table.zero, eq,
                       Block.empty(), floats, exact)
    try:
        _, cert = solve_exact(lp)
    except Exception:  # noqa: BLE001 - a failed search is "no certificate", never an answer
        return None
    if not cert.certified or cert.primal is None:
        return None
    return [Fraction(int(v.p), int(v.q)) for v in cert.primal]


def verify_combination(target: Any, facts: list[tuple[Any, bool]], combo: Combination,
                       one: Any) -> bool:
    """Exact re-check: target == sum coefficient * product of facts, coefficients >= 0
    (multiplied through by the common denominator of the coefficients)."""
    if any(c < 0 for c in combo.coefficients):
        return False
    den = 1
    for c in combo.coefficients:
        den = den * c.denominator // math.gcd(den, c.denominator)
    total = one * 0
    for coeff, prod in zip(combo.coefficients, combo.products, strict=True):
        term = one
        for i in prod:
            term = term * facts[i][0]
        total = total + term * int(coeff * den)
    return (total - target * den).is_zero()
