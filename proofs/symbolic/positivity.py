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

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ...lp.certify import solve_exact
from ...lp.program import Block, LinearProgram, ValueTable

STRICT_CAP = 2**20  # bound on the strict part of the objective (bounded unless the cell is empty)


@dataclass
class Combination:
    """P = sum_k coefficient[k] * prod(facts in products[k]); strict: the sum is > 0."""

    coefficients: list[Fraction]
    products: list[tuple[int, ...]]  # indices into the fact list given (empty: the constant 1)
    strict: bool


def _terms(poly: Any) -> dict[tuple[int, ...], Fraction]:
    return {tuple(m): Fraction(int(c)) for m, c in poly.terms()}


def nonnegative_combination(target: Any, facts: list[tuple[Any, bool]], degree: int = 2,
                            want_strict: bool = True, ring: Any = None) -> Combination | None:
    """Search P = sum lambda_m M_m (see the module docstring).

    target: flint polynomial P; facts: [(f_i, strict_i)] meaning f_i >= 0 (> 0 when strict);
    products of up to `degree` facts (1 or 2). Returns None when the LP finds no exact
    certificate.
    """
    products: list[tuple[int, ...]] = [()]
    polys = [None]
    for i, (f, _) in enumerate(facts):
        products.append((i,))
        polys.append(f)
    if degree >= 2:
        for i in range(len(facts)):
            for j in range(i, len(facts)):
                products.append((i, j))
                polys.append(facts[i][0] * facts[j][0])
    strict = [all(facts[i][1] for i in prod) for prod in products]
    target_terms = _terms(target)
    zero_monomial = None
    columns: list[dict[tuple[int, ...], Fraction]] = []
    for poly in polys:
        if poly is None:
            columns.append({})  # filled below with the zero monomial
        else:
            columns.append(_terms(poly))
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
    columns[0] = {zero_monomial: Fraction(1)}
    monomials.setdefault(zero_monomial, len(monomials))
    # drop products that contain a monomial absent from P and from every other column: cheap
    # pruning is not needed at these sizes; the LP decides.
    return _solve(target_terms, columns, strict, products, monomials, want_strict)


def _solve(target_terms: dict, columns: list[dict], strict: list[bool],
           products: list[tuple[int, ...]], monomials: dict, want_strict: bool
           ) -> Combination | None:
    """The LP in equality form only (one row per monomial, plus the strict-part row).

    target != 0: maximise the strict part s = sum of the strict lambdas, s + slack =
    STRICT_CAP (bounded unless the cell is empty). target == 0 (a contradiction): the strict
    part is fixed to 1, objective 0 (feasible iff 0 > 0 follows from the facts).
    """
    n = len(columns)
    contradiction = not any(target_terms.values())
    strict_cols = [j for j in range(n) if strict[j]]
    use_strict = bool(strict_cols) and (want_strict or contradiction)
    n_vars = n + (1 if use_strict and not contradiction else 0)
    table = ValueTable(exact=True)
    rows, cols, values = [], [], []
    for j, col in enumerate(columns):
        for mono, coeff in col.items():
            rows.append(monomials[mono])
            cols.append(j)
            values.append(coeff)
    m = len(monomials)
    rhs = [target_terms.get(mono, Fraction(0)) for mono in monomials]
    if use_strict:
        for j in strict_cols:
            rows.append(m)
            cols.append(j)
            values.append(Fraction(1))
        if contradiction:
            rhs.append(Fraction(1))
        else:
            rows.append(m)
            cols.append(n)
            values.append(Fraction(1))
            rhs.append(Fraction(STRICT_CAP))
    elif contradiction:
        return None
    value_refs = table.add(np.array(values, dtype=object)) if values else np.zeros(0, np.int64)
    rhs_refs = table.add(np.array(rhs, dtype=object))
    objective = np.full(n_vars, table.zero, dtype=np.int64)
    if use_strict and not contradiction:
        objective[strict_cols] = table.one
    rows_a, cols_a = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)
    order = np.lexsort((cols_a, rows_a))
    eq = Block(rows_a[order], cols_a[order], np.asarray(value_refs, np.int64)[order], rhs_refs)
    floats, exact = table.tables()
    lp = LinearProgram("sign-certificate", n_vars, objective, table.zero, eq, Block.empty(),
                       floats, exact)
    try:
        solution, cert = solve_exact(lp)
    except Exception:  # noqa: BLE001 - a failed search is "no certificate", never an answer
        return None
    if not cert.certified or cert.primal is None:
        return None
    lam = [Fraction(int(v.p), int(v.q)) for v in cert.primal[:n]]
    keep = [j for j in range(n) if lam[j] != 0]
    is_strict = any(strict[j] for j in keep)
    return Combination([lam[j] for j in keep], [products[j] for j in keep], is_strict)


def verify_combination(target: Any, facts: list[tuple[Any, bool]], combo: Combination,
                       one: Any) -> bool:
    """Exact re-check: target == sum coefficient * product of facts, coefficients >= 0
    (multiplied through by the common denominator of the coefficients)."""
    import math

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
