"""Cells of the parameter space and the number type whose comparisons they decide.

A *cell* is a set of instances of a shape given by sign conditions on polynomials in
the row symbols: conditions g > 0, g >= 0, g < 0, g <= 0 (g irreducible, primitive,
positive leading coefficient) and equalities g = 0, each equality eliminated at once by
solving it for a symbol it contains linearly (with a coefficient of known nonzero sign
on the cell), so that the remaining ("free") symbols are unconstrained but for
inequalities. The root cell is the domain: every row entry >= 0.

Symbolic execution. The verifier laws and the LP code run unchanged on numpy object
arrays of `CellExpr` (an exact rational function of the free symbols). Every comparison
they make (a < b, a == b, min, max, argsort, a != 0 in safe_div, ...) asks the active
cell for the sign of a - b = c * prod g_i^e_i / prod d_j^f_j (irreducible factors):
  * a factor's sign is known from a condition, a fact derived earlier, or a certificate
    found now (speclp.proofs.symbolic.positivity), or
  * it is not determined on the cell: the code raises `Branch(g, outcomes)` and the
    driver (speclp.proofs.symbolic.explore) re-runs the computation on each child cell
    (the cell with g > 0 / g = 0 / g < 0 or the coarser two-way outcomes the comparison
    needs). Leaves of this decision tree are the cells of the proof: on a leaf every
    comparison is decided, so every value the code computes is ONE rational function on
    the whole cell.
Children are checked for emptiness: a rational witness point (exact) or an emptiness
certificate (a contradiction found by the positivity search) for every child.

float(x) of a CellExpr is its value at the cell's witness point (concolic execution:
solvers that need floats get the witness instance); no decision is ever taken on it.
"""

from __future__ import annotations

import contextlib
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np
from scipy.optimize import minimize

from .algebra import Poly, RationalFunction, Ring, poly_text
from .positivity import Combination, nonnegative_combination
from .shapes import Shape

REL_SIGNS: dict[str, frozenset[int]] = {
    ">": frozenset({1}), ">=": frozenset({0, 1}), "=": frozenset({0}),
    "<=": frozenset({-1, 0}), "<": frozenset({-1}),
}
SIGNS_REL = {v: k for k, v in REL_SIGNS.items()}
ALL_SIGNS = frozenset({-1, 0, 1})
FLIP = {">": "<", ">=": "<=", "=": "=", "<=": ">=", "<": ">"}
OPS = {
    "<": lambda s: s < 0, "<=": lambda s: s <= 0, ">": lambda s: s > 0, ">=": lambda s: s >= 0,
    "==": lambda s: s == 0, "!=": lambda s: s != 0,
}
MAX_FACTS = 48  # facts offered to one certificate search (the most relevant ones)
MAX_FACTS_DEGREE_2 = 20  # of which the first ones enter the products of two facts


class Branch(Exception):
    """The sign of poly on the cell is not determined: split the cell by `outcomes`
    (relations of poly to 0)."""

    def __init__(self, poly: Poly, outcomes: list[str], why: str = "") -> None:
        super().__init__(f"undetermined sign of {poly_text(poly)} ({why})")
        self.poly = poly
        self.outcomes = outcomes
        self.why = why
        self.where = _caller()


class Unsupported(Exception):
    """The cell cannot be handled (e.g. an equality linear in no symbol)."""


@dataclass
class Fact:
    """poly rel 0 on the cell. kind: "domain" | "condition" | "derived".

    proof (derived facts): {"by": "combination", "target_sign": s, "combination": Combination,
    "facts": [fact ids, in the order the combination indexes them]} meaning
    s * poly = sum coefficient * prod facts; or {"by": "quotient", "fact": id, "factor":
    k, "others": [fact ids]} (poly is factor k of fact id's polynomial, the other factors'
    signs are the facts listed).
    """

    poly: Poly
    rel: str
    kind: str
    proof: dict | None = None


def sign(x: Any) -> int:
    return int(x > 0) - int(x < 0)


def product_signs(a: frozenset[int], b: frozenset[int]) -> frozenset[int]:
    return frozenset(x * y for x in a for y in b)


def power_signs(a: frozenset[int], e: int) -> frozenset[int]:
    return frozenset(x**e for x in a)


def _caller() -> str:
    """file:line:function of the first frame outside this package (what asked)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.endswith(("symbolic/cells.py",
                                                                   "symbolic/algebra.py")):
        frame = frame.f_back
    if frame is None:
        return "?"
    name = frame.f_code.co_filename.rsplit("/", 2)
    return f"{'/'.join(name[-2:])}:{frame.f_lineno}:{frame.f_code.co_name}"


_ACTIVE: list[Cell] = []


def active_cell() -> Cell:
    if not _ACTIVE:
        raise TypeError("a comparison of symbolic values needs an active cell")
    return _ACTIVE[-1]


class CellExpr(RationalFunction):
    """Exact rational function whose comparisons are decided by the active cell."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]

    def _check_divisor(self, divisor: RationalFunction) -> None:
        if divisor.is_zero():
            raise ZeroDivisionError("division by the zero function")
        if not divisor.is_constant() and not active_cell().decide(divisor, "!="):
            raise ZeroDivisionError("division by a function that is 0 on this cell")

    def _compare(self, other: Any, op: str) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        difference = RationalFunction.__sub__(self, o)
        if difference.is_constant():
            return OPS[op](sign(difference.constant_value()))
        return active_cell().decide(difference, op)

    def __lt__(self, other: Any) -> Any:
        return self._compare(other, "<")

    def __le__(self, other: Any) -> Any:
        return self._compare(other, "<=")

    def __gt__(self, other: Any) -> Any:
        return self._compare(other, ">")

    def __ge__(self, other: Any) -> Any:
        return self._compare(other, ">=")

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self._compare(other, "==")

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self._compare(other, "!=")

    def __bool__(self) -> bool:
        return bool(self._compare(0, "!="))

    def __abs__(self) -> CellExpr:
        return self if self._compare(0, ">=") else -self

    def minimum(self, other: Any) -> Any:
        """min(self, other): the two agree where they are equal, so only the strict signs
        of self - other matter (a cell is never split on their zero set)."""
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return self if active_cell().weak_order(RationalFunction.__sub__(self, o)) <= 0 else (
            o if isinstance(o, CellExpr) else cell_expr(o))

    def maximum(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return self if active_cell().weak_order(RationalFunction.__sub__(self, o)) >= 0 else (
            o if isinstance(o, CellExpr) else cell_expr(o))

    def known_nonzero(self) -> bool:
        """True when the active cell already knows self != 0 (never splits the cell)."""
        if self.is_zero():
            return False
        if self.is_constant():
            return True
        return active_cell().known_nonzero(self)

    def __float__(self) -> float:
        if self.is_constant():
            return float(self.constant_value())
        value = self.evaluate(active_cell().witness)
        return int(value.p) / int(value.q)


def cell_expr(value: RationalFunction) -> CellExpr:
    return CellExpr(value.num, value.den, value.ring)


@dataclass
class Elimination:
    """x_var = value on the cell, from poly = coefficient * x_var + rest = 0; the
    coefficient's sign on the parent cell is coefficient_sign (facts listed)."""

    var: int
    value: RationalFunction
    poly: Poly
    coefficient: Poly
    coefficient_sign: int
    coefficient_facts: list[dict]


@dataclass
class Cell:
    """A cell (see the module docstring). values[i]: symbol i as a function of the free
    symbols (itself when free). samples: exact points of the cell (one value per symbol,
    eliminated symbols included), samples[0] is the witness."""

    shape: Shape
    values: list[RationalFunction]
    facts: list[Fact]
    samples: list[list[Fraction]]
    eliminations: list[Elimination]
    ident: str = "0"
    seed: int = 0
    by_key: dict[str, list[int]] = field(default_factory=dict)
    sign_cache: dict[str, tuple[frozenset[int], tuple[int, ...]]] = field(default_factory=dict)
    products: list[tuple[int, list[tuple[Poly, int]], int]] = field(default_factory=list)
    used: set[int] = field(default_factory=set)
    certificate_searches: int = 0
    empty_reason: dict | None = None

    # ---- construction --------------------------------------------------------------
    @classmethod
    def root(cls, shape: Shape, seed: int = 0) -> Cell:
        ring = shape.ring
        values = [ring.variable(i) for i in range(ring.nvars)]
        cell = cls(shape, values, [], [], [], "0", seed)
        for entry in shape.domain():
            s, g = ring.normalize(entry.num)
            if s == 0 or g.is_constant():
                continue
            cell._add_fact(Fact(g, ">=" if s > 0 else "<=", "domain"))
        cell.samples = cell.find_samples(32)
        cell._generic_first()
        return cell

    @property
    def ring(self) -> Ring:
        return self.shape.ring

    @property
    def witness(self) -> list[Fraction]:
        if not self.samples:
            raise ValueError(f"cell {self.ident} has no witness point")
        return self.samples[0]

    @property
    def free(self) -> list[int]:
        eliminated = {e.var for e in self.eliminations}
        return [i for i in range(self.ring.nvars) if i not in eliminated]

    def conditions(self) -> list[int]:
        return [i for i, f in enumerate(self.facts) if f.kind in ("domain", "condition")]

    def _add_fact(self, fact: Fact) -> int:
        self.facts.append(fact)
        fid = len(self.facts) - 1
        self.by_key.setdefault(poly_text(fact.poly), []).append(fid)
        if fact.kind != "derived":
            constant, factors = self.ring.factor(fact.poly)
            if len(factors) > 1 or (factors and factors[0][1] > 1):
                self.products.append((fid, factors, sign(constant)))
        return fid

    @contextlib.contextmanager
    def active(self) -> Iterator[Cell]:
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.pop()

    def model(self) -> Any:
        """The shape's TreeModel on this cell (CellExpr entries)."""
        return self.shape.model(self.values, CellExpr)

    def expr(self, value: RationalFunction) -> CellExpr:
        return cell_expr(value)

    # ---- signs ---------------------------------------------------------------------------
    def signs(self, g: Poly, depth: int = 0) -> frozenset[int]:
        """Possible signs of the normalized irreducible polynomial g on the cell."""
        key = poly_text(g)
        cached = self.sign_cache.get(key)
        if cached is not None:
            self.used.update(cached[1])
            return cached[0]
        possible, reasons = ALL_SIGNS, []
        for fid in self.by_key.get(key, []):
            possible = possible & REL_SIGNS[self.facts[fid].rel]
            reasons.append(fid)
        if len(possible) > 1 and depth < 2:
            derived = self._quotient(g, depth)
            if derived is not None:
                possible = possible & REL_SIGNS[self.facts[derived].rel]
                reasons.append(derived)
        if len(possible) > 1:
            proved = self._prove_sign(g, possible)
            if proved is not None:
                possible = possible & REL_SIGNS[self.facts[proved].rel]
                reasons.append(proved)
        if not possible:
            raise Unsupported(f"cell {self.ident}: contradictory facts about {poly_text(g)} (empty cell)")
        self.sign_cache[key] = (possible, tuple(reasons))
        self.used.update(reasons)
        return possible

    def _quotient(self, g: Poly, depth: int) -> int | None:
        """A condition on a product g * h * ... with the other factors' signs known."""
        key = poly_text(g)
        for fid, factors, constant_sign in self.products:
            keys = [poly_text(f) for f, _ in factors]
            if key not in keys:
                continue
            k = keys.index(key)
            if factors[k][1] % 2 == 0:
                continue
            others = frozenset({constant_sign})
            other_facts = []
            ok = True
            for j, (f, e) in enumerate(factors):
                if j == k:
                    continue
                s = self.signs(f, depth + 1)
                if len(s) != 1:
                    ok = False
                    break
                others = product_signs(others, power_signs(s, e))
                other_facts.extend(self.sign_cache[poly_text(f)][1])
            if not ok or 0 in others:
                continue
            s_other = next(iter(others))
            rel = self.facts[fid].rel
            rel_g = rel if s_other > 0 else FLIP[rel]
            return self._add_fact(Fact(g, rel_g, "derived",
                                       {"by": "quotient", "fact": fid, "factor": k,
                                        "others": sorted(set(other_facts))}))
        return None

    def sample_signs(self, g: Poly) -> set[int]:
        return {sign(self.ring.evaluate(g, x)) for x in self.samples}

    def _prove_sign(self, g: Poly, possible: frozenset[int]) -> int | None:
        """Try to narrow the sign of g by a certificate; returns the new fact id."""
        seen = self.sample_signs(g) if self.samples else set()
        if 1 in seen and -1 in seen:
            return None
        attempts: list[str] = []
        if seen <= {0, 1} and 1 in seen:
            attempts = [">"]
        elif seen <= {-1, 0} and -1 in seen:
            attempts = ["<"]
        elif not seen:
            attempts = [">", "<"]
        for rel in attempts:
            if not (REL_SIGNS[rel] & possible) or REL_SIGNS[rel] >= possible:
                continue
            fid = self.prove(g, rel)
            if fid is not None:
                return fid
        return None

    def prove(self, g: Poly, rel: str) -> int | None:
        """Search a certificate of g rel 0 (rel '>' or '<'; a '>=' / '<=' fact is recorded
        when only the weak form is found). Returns the fact id or None."""
        target = g if rel in (">", ">=") else -g
        found = self._search(target, self.relevant_facts(self.ring.variables_of(g)),
                             want_strict=True)
        if found is None:
            return None
        combo, facts = found
        strict = combo.strict
        fact_rel = (">" if strict else ">=") if rel in (">", ">=") else ("<" if strict else "<=")
        proof = {"by": "combination", "target_sign": 1 if rel in (">", ">=") else -1,
                 "combination": combo, "facts": list(facts)}
        return self._add_fact(Fact(g, fact_rel, "derived", proof))

    def _search(self, target: Poly, facts: list[int], want_strict: bool
                ) -> tuple[Combination, list[int]] | None:
        """nonnegative_combination of target over the given facts (degree 1, then 2).

        Returns (combination, the fact ids its products index) or None. Results are cached
        on the shape by target, with the facts as (polynomial, relation) keys: a certificate
        found before is reused in any cell that has the facts it uses (it is valid there);
        a failed search is not repeated with a subset of the facts offered then. Weak
        (non-strict) results are reused only for a subset of the facts offered then."""
        keys = {fid: (poly_text(self.facts[fid].poly), self.facts[fid].rel) for fid in facts}
        available = {key: fid for fid, key in keys.items()}
        offered_set = frozenset(keys.values())
        cache_key = (poly_text(target), want_strict)
        entry = self.shape.cache.get(cache_key, _NO_ENTRY)
        for used_keys, combo, offered_then in entry["pos"]:
            if all(k in available for k in used_keys) and (
                    combo.strict or not want_strict or offered_set <= offered_then):
                return combo, [available[k] for k in used_keys]
        if any(offered_set <= failed for failed in entry["neg"]):
            return None
        ordered = list(facts)
        offered = [(self._oriented(fid), self.facts[fid].rel in (">", "<")) for fid in ordered]
        best = None
        for degree in (1, 2, 3):
            if degree == 3 and not (target.is_zero() or not self.samples):
                break  # degree 3 only for emptiness (a cell or a side without points)
            self.certificate_searches += 1
            combo = nonnegative_combination(target, offered, degree=degree, ring=self.ring,
                                            pair_limit=MAX_FACTS_DEGREE_2)
            if combo is None or (target.is_zero() and not combo.strict):
                continue
            if best is None or combo.strict:
                best = combo
            if combo.strict or not want_strict:
                break
        if best is None:
            remember(self.shape.cache, cache_key, "neg", offered_set)
            return None
        used = sorted({i for prod in best.products for i in prod})
        position = {i: k for k, i in enumerate(used)}
        remapped = Combination(list(best.coefficients),
                               [tuple(position[i] for i in prod) for prod in best.products],
                               best.strict)
        used_ids = [ordered[i] for i in used]
        remember(self.shape.cache, cache_key, "pos",
                 (tuple(keys[f] for f in used_ids), remapped, offered_set))
        return remapped, used_ids

    def _oriented(self, fid: int) -> Poly:
        """The fact as a polynomial >= 0 (or > 0)."""
        f = self.facts[fid]
        return f.poly if f.rel in (">", ">=") else -f.poly

    def relevant_facts(self, variables: tuple[int, ...]) -> list[int]:
        """Inequality facts sharing symbols with `variables`, then with those facts' symbols,
        most relevant first (fewest symbols outside `variables`)."""
        wanted = set(variables)
        strength = {">": 0, "<": 0, ">=": 1, "<=": 1}
        best: dict[tuple[str, int], int] = {}  # one fact per polynomial and direction
        for i, f in enumerate(self.facts):
            if f.rel == "=":
                continue
            key = (poly_text(f.poly), 1 if f.rel in (">", ">=") else -1)
            j = best.get(key)
            if j is None or strength[f.rel] < strength[self.facts[j].rel]:
                best[key] = i
        usable = sorted(best.values())
        var_sets = {i: set(self.ring.variables_of(self.facts[i].poly)) for i in usable}
        first = [i for i in usable if var_sets[i] & wanted]
        grown = set(wanted)
        for i in first:
            grown |= var_sets[i]
        first_set = set(first)
        second = [i for i in usable if var_sets[i] & grown and i not in first_set]
        def simple(i: int) -> bool:  # x >= 0 for one symbol, a multiplier certificates need
            return len(var_sets[i]) == 1 and self.facts[i].poly.total_degree() == 1

        rank = {i: (0 if i in first_set else 1,
                    0 if self.facts[i].kind != "domain" else (1 if simple(i) else 2),
                    len(var_sets[i] - wanted), -i) for i in first + second}
        return sorted(first + second, key=rank.__getitem__)[:MAX_FACTS]

    # ---- decisions ----------------------------------------------------------------------
    def factor_signs(self, value: RationalFunction
                     ) -> tuple[int, list[tuple[Poly, int, frozenset[int], bool]]]:
        """(constant sign, [(factor, exponent, possible signs, in_denominator)])."""
        c_num, num_factors = self.ring.factor(value.num)
        c_den, den_factors = self.ring.factor(value.den)
        out = [(g, e, self.signs(g), False) for g, e in num_factors]
        out += [(g, e, self.signs(g), True) for g, e in den_factors]
        return sign(c_num) * sign(c_den), out

    def decide(self, value: RationalFunction, op: str) -> bool:
        """Truth of `value op 0` on the whole cell, or Branch."""
        if value.is_zero():
            return OPS[op](0)
        constant_sign, factors = self.factor_signs(value)
        possible = frozenset({constant_sign})
        for _g, e, s, in_den in factors:
            if in_den:
                s = s - {0}
            possible = product_signs(possible, power_signs(s, e))
        truth = {OPS[op](x) for x in possible}
        if len(truth) == 1:
            return truth.pop()
        undetermined = [(g, e, s, d) for g, e, s, d in factors if len(power_signs(s, e)) > 1]
        if len(undetermined) == 1:
            g, e, s, _ = undetermined[0]
            rest = frozenset({constant_sign})
            for h, f, t, d in factors:
                if h is not g:
                    rest = product_signs(rest, power_signs(t - {0} if d else t, f))
            (r,) = tuple(rest) if len(rest) == 1 else (None,)
            if r is not None and r != 0:
                classes: dict[bool, set[int]] = {}
                for x in s:
                    classes.setdefault(OPS[op](r * x**e), set()).add(x)
                outcomes = []
                for members in classes.values():
                    fs = frozenset(members)
                    if fs in SIGNS_REL:
                        outcomes.append(SIGNS_REL[fs])
                    else:  # {-1, 1}: two cells
                        outcomes += ["<", ">"]
                raise Branch(g, outcomes, f"{op} 0")
        indefinite = [u for u in undetermined if u[1] % 2 and {-1, 1} <= u[2]]
        if indefinite:  # a factor taking both strict signs: a binary cover first
            g = indefinite[0][0]
            raise Branch(g, ["<=", ">"], f"{op} 0")
        g, e, s, _ = undetermined[0]
        raise Branch(g, [SIGNS_REL[frozenset({x})] for x in sorted(s)], f"{op} 0")

    def weak_order(self, value: RationalFunction) -> int:
        """-1 if value <= 0 on the cell, +1 if value >= 0 (0 if value is the zero function);
        Branch on a factor that takes both strict signs otherwise. Factors that are >= 0 or
        <= 0 only change the zero set of value, where both answers are right."""
        if value.is_zero():
            return 0
        constant_sign, factors = self.factor_signs(value)
        strict = frozenset({constant_sign})
        for _g, e, s, _ in factors:
            strict = product_signs(strict, power_signs(s - {0} or frozenset({1}), e))
        if strict <= {-1}:
            return -1
        if strict <= {1}:
            return 1
        for g, e, s, _ in factors:
            if e % 2 and {-1, 1} <= s:
                raise Branch(g, ["<=", ">"], "min/max")
        raise AssertionError("weak_order: no factor with both signs")  # pragma: no cover

    def known_nonzero(self, value: RationalFunction) -> bool:
        """value != 0 on the cell from what the cell knows (no split; may search)."""
        _, factors = self.factor_signs(value)
        return all(0 not in s for _, _, s, _ in factors)

    def explain(self, value: RationalFunction) -> dict:
        """The factorisation behind value's (decided) sign: constant, and each factor with
        its exponent, its sign and the facts that give it."""
        c_num, num_factors = self.ring.factor(value.num)
        c_den, den_factors = self.ring.factor(value.den)
        parts = []
        for g, e, in_den in [(g, e, False) for g, e in num_factors] + [
                (g, e, True) for g, e in den_factors]:
            s = self.signs(g)
            parts.append({"poly": g, "exponent": e, "denominator": in_den, "signs": s,
                          "facts": list(self.sign_cache[poly_text(g)][1])})
        return {"constant": c_num / c_den, "factors": parts}

    # ---- children -----------------------------------------------------------------------
    def child(self, g: Poly, rel: str, number: int) -> Cell:
        """The cell with the extra condition g rel 0 (rel: >, >=, <, <=)."""
        facts = list(self.facts)
        kid = Cell(self.shape, list(self.values), facts, [], list(self.eliminations),
                   f"{self.ident}.{number}", self.seed)
        kid.by_key = {k: list(v) for k, v in self.by_key.items()}
        kid.products = list(self.products)
        kid.sign_cache = {k: v for k, v in self.sign_cache.items() if len(v[0]) == 1}
        if rel not in [kid.facts[i].rel for i in kid.by_key.get(poly_text(g), [])]:
            kid._add_fact(Fact(g, rel, "condition"))
        kid.sign_cache.pop(poly_text(g), None)
        kid.samples = [x for x in self.samples if kid._holds(g, rel, x)]
        return kid

    def eliminate(self, g: Poly, number: int) -> Cell:
        """The cell with g = 0, one symbol of g eliminated (Branch when no symbol has a
        coefficient of known nonzero sign; Unsupported when g is linear in no symbol)."""
        ring = self.ring
        candidates = []
        for var in ring.variables_of(g):
            coeffs = ring.split_variable(g, var)
            if len(coeffs) == 2:
                candidates.append((var, coeffs[0], coeffs[1]))
        if not candidates:
            raise Unsupported(f"cell {self.ident}: {poly_text(g)} = 0 is linear in no symbol")
        candidates.sort(key=lambda c: (not c[2].is_constant(), len(list(c[2].terms())), -c[0]))
        undetermined = None
        for var, rest, coefficient in candidates:
            constant, factors = ring.factor(coefficient)
            s_total = sign(constant)
            facts, ok = [], True
            for f, e in factors:
                s = self.signs(f)
                if 0 in s:
                    ok = False
                    if undetermined is None:
                        undetermined = f
                    break
                if len(s) != 1:
                    ok = False
                    break
                s_total *= next(iter(s)) ** e
                facts.append({"poly": f, "exponent": e, "sign": next(iter(s)),
                              "facts": list(self.sign_cache[poly_text(f)][1])})
            if ok:
                value = RationalFunction.make(-rest, coefficient, ring)
                return self._eliminated(g, var, value, coefficient, s_total, facts, number)
        if undetermined is not None:
            raise Branch(undetermined, [SIGNS_REL[frozenset({x})]
                                        for x in sorted(self.signs(undetermined))],
                         f"coefficient for eliminating {poly_text(g)} = 0")
        raise Unsupported(f"cell {self.ident}: no symbol of {poly_text(g)} has a coefficient of one sign")

    def _eliminated(self, g: Poly, var: int, value: RationalFunction, coefficient: Poly,
                    coefficient_sign: int, facts: list[dict], number: int) -> Cell:
        """Child with x_var = value (value = -rest / coefficient, coefficient != 0 here).

        Conditions: every condition of the parent with x_var substituted (its denominator is
        a product of factors of the coefficient, whose signs are known), and the factors of
        the coefficient with their signs (facts of the parent, kept as conditions so that a
        later elimination making them vanish shows the cell empty)."""
        ring = self.ring
        kid = Cell(self.shape, list(self.values), [], [],
                   self.eliminations + [Elimination(var, value, g, coefficient,
                                                    coefficient_sign, facts)],
                   f"{self.ident}.{number}", self.seed)
        factor_sign = {poly_text(f["poly"]): f["sign"] for f in facts}
        for fid in self.conditions():
            fact = self.facts[fid]
            new = RationalFunction(fact.poly, ring.one, ring).substitute(var, value)
            s_num, num = ring.normalize(new.num)
            den_constant, den_factors = ring.factor(new.den)
            s_den = sign(den_constant)
            for f, e in den_factors:
                s_den *= factor_sign[poly_text(f)] ** e
            s = s_num * s_den
            if s == 0 or num.is_constant():
                if not OPS[_op_of(fact.rel)](s):
                    kid.empty_reason = {"condition": fid, "becomes": s}
                continue
            kid._add_fact(Fact(num, fact.rel if s > 0 else FLIP[fact.rel], fact.kind))
        for f in facts:
            rel = ">" if f["sign"] > 0 else "<"
            if rel not in [kid.facts[i].rel for i in kid.by_key.get(poly_text(f["poly"]), [])]:
                kid._add_fact(Fact(f["poly"], rel, "condition"))
        if kid.empty_reason:
            return kid
        try:
            kid.values = [v.substitute(var, value) for v in self.values]
        except ZeroDivisionError:
            kid.empty_reason = {"condition": None, "becomes": 0}
            return kid
        kid.samples = [y for y in map(kid.completed_point, self.samples) if y is not None]
        return kid

    # ---- points ---------------------------------------------------------------------------
    def _holds(self, g: Poly, rel: str, x: list[Fraction]) -> bool:
        return OPS[_op_of(rel)](sign(self.ring.evaluate(g, x)))

    def contains(self, x: list[Fraction]) -> bool:
        for fid in self.conditions():
            f = self.facts[fid]
            if not self._holds(f.poly, f.rel, x):
                return False
        return all(self.values[e.var].evaluate(x) == x[e.var] for e in self.eliminations)

    def complete(self, x: list[Fraction]) -> list[Fraction]:
        """x with every eliminated symbol set from the free ones."""
        y = list(x)
        for e in self.eliminations:
            y[e.var] = self.values[e.var].evaluate(x)
        return y

    def completed_point(self, x: list[Fraction]) -> list[Fraction] | None:
        """x completed (`complete`) when that point exists (no eliminated symbol divides by
        zero there) and lies in the cell (`contains`), else None."""
        try:
            y = self.complete(x)
        except ZeroDivisionError:
            return None
        return y if self.contains(y) else None

    def find_samples(self, count: int, tries: int = 1500) -> list[list[Fraction]]:
        """Up to `count` exact points of the cell by random search: lattice points of the
        simplices (denominators 2..12 and 40..2000), eliminated symbols computed, a float64
        prefilter, then the exact test of every condition."""
        rng = np.random.default_rng([self.seed, zlib.crc32(self.ident.encode())])
        shape, ring = self.shape, self.ring
        n = ring.nvars
        small = rng.choice([2, 3, 4, 5, 6, 8, 10, 12], size=tries)
        large = rng.integers(40, 2001, size=tries)
        denominator = np.where(np.arange(tries) % 2 == 0, small, large)
        numerators = np.zeros((tries, n), dtype=np.int64)
        for idx in shape.row_vars.values():
            cuts = np.sort(rng.integers(0, denominator[:, None] + 1,
                                        size=(tries, shape.vocab - 1)), axis=1)
            edges = np.concatenate([np.zeros((tries, 1), np.int64), cuts, denominator[:, None]], 1)
            parts = np.diff(edges, axis=1)
            parts = np.take_along_axis(parts, rng.permuted(
                np.tile(np.arange(shape.vocab), (tries, 1)), axis=1), axis=1)
            numerators[:, idx] = parts[:, : len(idx)]
        points = numerators / denominator[:, None]
        ok = np.ones(tries, dtype=bool)
        with np.errstate(all="ignore"):
            for e in self.eliminations:
                value = self.values[e.var]
                den = ring.evaluate_many(value.den, points)
                ok &= np.abs(den) > 1e-300
                points[:, e.var] = ring.evaluate_many(value.num, points) / np.where(ok, den, 1)
            for fid in self.conditions():
                f = self.facts[fid]
                v = ring.evaluate_many(f.poly, points)
                tolerance = 1e-9 * (1 + np.abs(v))
                if f.rel == ">":
                    ok &= v > -tolerance
                elif f.rel == "<":
                    ok &= v < tolerance
                elif f.rel == ">=":
                    ok &= v > -tolerance
                else:
                    ok &= v < tolerance
                if not ok.any():
                    return []
        found: list[list[Fraction]] = []
        for row in np.nonzero(ok)[0]:
            d = int(denominator[row])
            x = self.completed_point([flint.fmpq(int(v), d) for v in numerators[row]])
            if x is not None:
                found.append(x)
                if len(found) >= count:
                    break
        return found

    def optimize_witness(self, starts: int = 8) -> bool:
        """A harder witness search for thin cells: minimise the largest violation of the
        conditions (float64, Nelder-Mead from random starts), then rationalise the point and
        test it exactly. Adds the point to the samples; True when one is found."""
        ring = self.ring
        free = self.free
        conditions = [(self.facts[i].poly, self.facts[i].rel) for i in self.conditions()]
        if not free or not conditions:
            return False
        signs = np.array([1.0 if rel in (">", ">=") else -1.0 for _, rel in conditions])
        offset = np.array([1e-9 if rel in (">", "<") else 0.0 for _, rel in conditions])
        compiled = []
        for g, _ in conditions:
            terms = list(g.terms())
            compiled.append((np.array([m for m, _ in terms], dtype=float)[:, free],
                             np.array([float(int(c)) for _, c in terms])))

        def violation(z: np.ndarray) -> float:
            y = np.clip(z, 0.0, 1.0)
            worst = float(np.abs(z - y).sum())
            values = np.array([(np.prod(y[None, :] ** e, axis=1) * c).sum() for e, c in compiled])
            return worst - float((signs * values - offset).min())

        rng = np.random.default_rng([self.seed, zlib.crc32(self.ident.encode()), 7])
        for _ in range(starts):
            res = minimize(violation, rng.random(len(free)), method="Nelder-Mead",
                           options={"xatol": 1e-12, "fatol": 1e-15, "maxiter": 800})
            if res.fun >= 0:
                continue
            z = np.clip(res.x, 0.0, 1.0)
            for limit in (10, 100, 1000, 10**4, 10**6, 10**9):
                x = [flint.fmpq(0)] * ring.nvars
                for var, v in zip(free, z, strict=True):
                    f = Fraction(float(v)).limit_denominator(limit)
                    x[var] = flint.fmpq(f.numerator, f.denominator)
                x = self.completed_point(x)
                if x is not None:
                    self.samples.append(x)
                    return True
        return False

    def ensure_samples(self, count: int = 8) -> bool:
        """At least one sample (a witness), topped up towards count; a harder search
        (more tries) only when there is none. The witness (samples[0]) is a generic point
        when one is known: no weak condition vanishes there (an LP basis found at a point on
        the boundary of the cell may be optimal there only)."""
        if len(self.samples) < count:
            self.samples.extend(self.find_samples(count - len(self.samples), tries=600))
        if not self.samples:
            self.samples.extend(self.find_samples(count, tries=6000))
        self._generic_first()
        return bool(self.samples)

    def _generic_first(self) -> None:
        weak = [self.facts[i].poly for i in self.conditions() if self.facts[i].rel in (">=", "<=")]

        def degenerate(x: list) -> tuple[int, int]:
            zeros = sum(1 for g in weak if self.ring.evaluate(g, x) == 0)
            return zeros, -max(int(v.q) for v in x)

        if self.samples:
            best = min(range(len(self.samples)), key=lambda i: degenerate(self.samples[i]))
            self.samples.insert(0, self.samples.pop(best))

    def fact_signs(self, g: Poly) -> frozenset[int]:
        """Signs of g allowed by the facts recorded on g (no search)."""
        possible = ALL_SIGNS
        for fid in self.by_key.get(poly_text(g), []):
            possible = possible & REL_SIGNS[self.facts[fid].rel]
        return possible

    def implied_equality(self) -> tuple[Poly, list[int]] | None:
        """A condition g >= 0 (or <= 0) whose opposite is a fact or follows from the other
        facts: g = 0 on the cell. Returns (g, the facts on g) or None. Searched among the
        weak conditions that vanish at every sample (all of them when there is none)."""
        for fids in self.by_key.values():
            if self.fact_signs(self.facts[fids[0]].poly) == REL_SIGNS["="]:
                return self.facts[fids[0]].poly, list(fids)
        for fid in reversed(self.conditions()):
            fact = self.facts[fid]
            if fact.rel not in (">=", "<=") or self.sample_signs(fact.poly) - {0}:
                continue
            proved = self.prove(fact.poly, "<" if fact.rel == ">=" else ">")
            if proved is not None:
                return fact.poly, list(self.by_key[poly_text(fact.poly)])
        return None

    def contradiction(self) -> dict | None:
        """A certificate that the cell is empty: a condition that became a false constant,
        two facts on one polynomial with no common sign (after deriving the signs of the
        factors of product conditions), or 0 = sum lambda * products of facts with a strict
        term (or the constant 1) > 0, from the facts on the symbols of the conditions."""
        if self.empty_reason:
            return {"by": "constant condition", **self.empty_reason}
        for fids in list(self.by_key.values()):
            if not self.fact_signs(self.facts[fids[0]].poly):
                return {"by": "opposite facts", "facts": list(fids)}
        for _, factors, _ in list(self.products):
            for f, _ in factors:
                try:
                    self.signs(f)
                except Unsupported:
                    return {"by": "opposite facts", "facts": list(self.by_key[poly_text(f)])}
        focus: set[int] = set()
        for fid in self.conditions():
            if self.facts[fid].kind == "condition":
                focus |= set(self.ring.variables_of(self.facts[fid].poly))
        if not focus:
            return None
        found = self._search(self.ring.zero, self.relevant_facts(tuple(sorted(focus))),
                             want_strict=True)
        if found is not None and found[0].strict:
            return {"by": "combination", "combination": found[0], "facts": list(found[1])}
        return None


_NO_ENTRY: dict[str, tuple] = {"pos": (), "neg": ()}


class CertificateCache(dict):
    """The shape's cache of certificate searches (Cell._search; key (target text,
    want_strict) -> {"pos": [(used fact keys, combination, offered keys)], "neg": [offered
    keys]}) with a log of every addition in order (`log`, emptied by its reader): the cache is
    the one state shared by all cells, so a journal that records the log can rebuild it
    (speclp.proofs.symbolic.journal)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[tuple[str, bool], str, Any]] = []


def remember(cache: dict, key: tuple[str, bool], kind: str, item: Any) -> None:
    """Add item to cache[key][kind] ("pos" or "neg"), logged when the cache keeps a log."""
    cache.setdefault(key, {"pos": [], "neg": []})[kind].append(item)
    log = getattr(cache, "log", None)
    if log is not None:
        log.append((key, kind, item))


def _op_of(rel: str) -> str:
    return {">": ">", ">=": ">=", "<": "<", "<=": "<=", "=": "=="}[rel]


def combination_terms(combo: Combination) -> list[tuple[Fraction, tuple[int, ...]]]:
    return list(zip(combo.coefficients, combo.products, strict=True))


__all__ = ["Branch", "Cell", "CellExpr", "CertificateCache", "Fact", "Unsupported", "active_cell",
           "cell_expr", "combination_terms", "remember"]
