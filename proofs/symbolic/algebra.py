"""Exact rational functions of a shape's row entries (python-flint polynomials over Z).

A `Ring` names the symbols of one proof (the free row entries of a symbolic instance,
e.g. ``p_0`` = p(0 | root), ``q1_0`` = q(0 | prefix 1)). A `RationalFunction` is
num/den with num, den in Z[symbols] (flint ``fmpz_mpoly``), kept canonical:
gcd(num, den) = 1 and den has a positive leading coefficient (lex order), so equal
functions have equal representations and ``is_zero`` is exact.

Arithmetic is pure (+, -, *, /, ** int; ints, Fractions and flint fmpq mix in). The
number type the verifier laws run on (`speclp.proofs.symbolic.cells.CellExpr`) adds
comparisons decided by a cell of the parameter space on top of this class.

Everything exported (proof JSON, Markdown) goes through sympy: `to_sympy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

Poly = Any  # flint.fmpz_mpoly

_NAMES: dict[int, tuple[str, ...]] = {}  # id of a flint context (cached by flint, kept alive) -> names
_MONOMIALS: dict[int, dict[tuple[int, ...], str]] = {}  # id of a context -> {exponents: text}
_TEXTS: dict[int, tuple[Any, str]] = {}  # id of a polynomial -> (the polynomial, its text)
_TEXT_CAP = 20_000


def poly_text(poly: Poly) -> str:
    """The text of a flint polynomial, character for character what ``str(poly)`` gives
    (e.g. ``-x0^2*x1 + 12*x3 - 1``), built from its terms in Python.

    python-flint 0.9.0 leaks the C string behind ``str`` / ``repr`` / ``format`` of an
    fmpz_mpoly (about its length plus 100 bytes per call; measured: 18 MB per 20 000 calls
    on a 303-character polynomial). The proofs use a polynomial's text as the key of every
    sign and fact lookup, millions of times in a long run, which held ~0.5 MB per cell of
    the decision tree (11 GB in 15 minutes on l1-optimum V = 3). Every text of a polynomial
    in this package goes through this function. The texts of the last _TEXT_CAP polynomial
    objects are remembered (each object held, so its id is not reused meanwhile)."""
    hit = _TEXTS.get(id(poly))
    if hit is not None and hit[0] is poly:
        return hit[1]
    text = _poly_text(poly)
    if len(_TEXTS) >= _TEXT_CAP:
        _TEXTS.clear()
    _TEXTS[id(poly)] = (poly, text)
    return text


def _poly_text(poly: Poly) -> str:
    ctx = poly.context()
    key = id(ctx)
    names = _NAMES.get(key)
    if names is None:
        names = _NAMES[key] = tuple(ctx.names())
        _MONOMIALS[key] = {}
    monomials = _MONOMIALS[key]
    parts = []
    for monom, coeff in zip(poly.monoms(), poly.coeffs(), strict=True):
        text = monomials.get(monom)
        if text is None:
            text = "*".join(name if e == 1 else f"{name}^{e}"
                            for name, e in zip(names, monom, strict=True) if e)
            if len(monomials) < 100_000:
                monomials[monom] = text
        c = int(coeff)
        if not text:
            body = str(abs(c))
        elif c in (1, -1):
            body = text
        else:
            body = f"{abs(c)}*{text}"
        if parts:
            parts.append(f" - {body}" if c < 0 else f" + {body}")
        else:
            parts.append(f"-{body}" if c < 0 else body)
    return "".join(parts) if parts else "0"


class Ring:
    """The polynomial ring Z[x_0..x_{n-1}] of one proof, with sympy twins of its symbols."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.ctx = flint.fmpz_mpoly_ctx.get(self.names, "lex")
        self.qctx = flint.fmpq_mpoly_ctx.get(self.names, "lex")
        self.gens = self.ctx.gens()
        self.symbols = tuple(sympy.Symbol(n, real=True) for n in self.names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.one = self.ctx.from_dict({(0,) * len(self.names): 1})
        self.zero = self.one - self.one
        self._qcache: dict[str, Any] = {}

    @property
    def nvars(self) -> int:
        return len(self.names)

    def constant(self, value: int) -> Poly:
        return self.one * int(value)

    def variable(self, i: int) -> RationalFunction:
        return RationalFunction(self.gens[i], self.one, self)

    # ---- polynomials -------------------------------------------------------
    def evaluate(self, poly: Poly, point: Sequence[Any]) -> flint.fmpq:
        """poly at a rational point (flint fmpq values, one per symbol) -> fmpq."""
        key = poly_text(poly)
        q = self._qcache.get(key)
        if q is None:
            q = self.qctx.from_dict(poly.to_dict())
            if len(self._qcache) < 200_000:
                self._qcache[key] = q
        return q(*point)

    def evaluate_many(self, poly: Poly, points: np.ndarray) -> np.ndarray:
        """poly at many float points [n, nvars] -> [n] float64 (a prefilter; exact checks
        use `evaluate`)."""
        terms = list(poly.terms())
        if not terms:
            return np.zeros(len(points))
        exponents = np.array([m for m, _ in terms], dtype=np.int64)  # [T, nvars]
        coeffs = np.array([float(int(c)) for _, c in terms])  # [T]
        used = np.nonzero(exponents.any(axis=0))[0]
        if len(used) == 0:
            return np.full(len(points), coeffs.sum())
        powers = points[:, None, used] ** exponents[None, :, used]  # [n, T, k]
        return powers.prod(axis=-1) @ coeffs

    def variables_of(self, poly: Poly) -> tuple[int, ...]:
        """Indices of the symbols that occur in poly."""
        degrees = poly.degrees()
        return tuple(i for i, d in enumerate(degrees) if d > 0)

    def to_sympy(self, poly: Poly) -> sympy.Expr:
        terms = []
        for monom, coeff in poly.terms():
            factor = sympy.Integer(int(coeff))
            for i, e in enumerate(monom):
                if e:
                    factor = factor * self.symbols[i] ** int(e)
            terms.append(factor)
        return sympy.Add(*terms)

    def to_text(self, poly: Poly) -> str:
        return poly_text(poly)

    def normalize(self, poly: Poly) -> tuple[int, Poly]:
        """(sign s, g) with poly = s * c * g, c > 0 an integer, g primitive with a positive
        leading coefficient. The zero polynomial gives (0, 0); a nonzero constant (s, 1)."""
        if poly.is_zero():
            return 0, poly
        content = poly.content()
        g = poly / content if content != 1 else poly
        if g.leading_coefficient() < 0:
            return -1, -g
        return 1, g

    def split_variable(self, poly: Poly, var: int) -> list[Poly]:
        """Coefficients [P_0, P_1, ..., P_d] of poly = sum_k P_k x_var^k (P_k free of x_var)."""
        groups: dict[int, dict[tuple[int, ...], int]] = {}
        for monom, coeff in poly.terms():
            k = monom[var]
            rest = list(monom)
            rest[var] = 0
            groups.setdefault(k, {})[tuple(rest)] = int(coeff)
        degree = max(groups) if groups else 0
        return [self.ctx.from_dict(groups[k]) if k in groups else self.zero
                for k in range(degree + 1)]

    def substitute_poly(self, poly: Poly, var: int, value: RationalFunction) -> RationalFunction:
        """poly with x_var replaced by value (a rational function free of x_var)."""
        coeffs = self.split_variable(poly, var)
        degree = len(coeffs) - 1
        if degree == 0:
            return RationalFunction(poly, self.one, self)
        num = self.zero
        n_power = self.one
        d_powers = [self.one]
        for _ in range(degree):
            d_powers.append(d_powers[-1] * value.den)
        for k, c in enumerate(coeffs):
            if not c.is_zero():
                num = num + c * n_power * d_powers[degree - k]
            n_power = n_power * value.num
        return RationalFunction.make(num, d_powers[degree], self)

    def factor(self, poly: Poly) -> tuple[Fraction, list[tuple[Poly, int]]]:
        """poly = constant * prod g_i^e_i with g_i irreducible, primitive, leading coefficient
        > 0 (the sign goes into the constant)."""
        content, factors = poly.factor()
        constant = Fraction(int(content))
        out = []
        for g, e in factors:
            if g.leading_coefficient() < 0:
                g = -g
                if e % 2:
                    constant = -constant
            out.append((g, int(e)))
        return constant, out


class RationalFunction:
    """num/den over a Ring, canonical (see the module docstring). Immutable."""

    __slots__ = ("num", "den", "ring")

    def __init__(self, num: Poly, den: Poly, ring: Ring) -> None:
        self.num = num
        self.den = den
        self.ring = ring

    @classmethod
    def make(cls, num: Poly, den: Poly, ring: Ring) -> RationalFunction:
        if den.is_zero():
            raise ZeroDivisionError("rational function with a zero denominator")
        if num.is_zero():
            return cls(num, ring.one, ring)
        if not den.is_one():
            g = num.gcd(den)
            if not g.is_one():
                num = num / g
                den = den / g
            if den.leading_coefficient() < 0:
                num, den = -num, -den
        return cls(num, den, ring)

    @classmethod
    def constant(cls, value: Any, ring: Ring) -> RationalFunction:
        value = Fraction(value) if not isinstance(value, flint.fmpq) else Fraction(int(value.p),
                                                                                    int(value.q))
        return cls.make(ring.constant(value.numerator), ring.constant(value.denominator), ring)

    # ---- inspection ------------------------------------------------------------
    def is_zero(self) -> bool:
        return self.num.is_zero()

    def is_constant(self) -> bool:
        return self.num.is_constant() and self.den.is_constant()

    def constant_value(self) -> Fraction:
        """The value of a constant function (ValueError otherwise)."""
        if not self.is_constant():
            raise ValueError("not a constant")
        zero = (0,) * self.ring.nvars
        return Fraction(int(self.num.to_dict().get(zero, 0)), int(self.den.to_dict()[zero]))

    def evaluate(self, point: Sequence[Any]) -> flint.fmpq:
        """Value at a rational point (fmpq per symbol); ZeroDivisionError on a pole."""
        num = self.ring.evaluate(self.num, point)
        if self.den.is_one():
            return num
        return num / self.ring.evaluate(self.den, point)

    def substitute(self, var: int, value: RationalFunction) -> RationalFunction:
        if self.num.degrees()[var] == 0 and self.den.degrees()[var] == 0:
            return self
        return self.ring.substitute_poly(self.num, var, value) / self.ring.substitute_poly(
            self.den, var, value)

    def variables(self) -> set[int]:
        return set(self.ring.variables_of(self.num)) | set(self.ring.variables_of(self.den))

    def to_sympy(self) -> sympy.Expr:
        num = self.ring.to_sympy(self.num)
        if self.den.is_one():
            return num
        return num / self.ring.to_sympy(self.den)

    def __repr__(self) -> str:
        if self.den.is_one():
            return poly_text(self.num)
        return f"({poly_text(self.num)})/({poly_text(self.den)})"

    # ---- arithmetic ----------------------------------------------------------------
    def _coerce(self, other: Any) -> RationalFunction | None:
        if isinstance(other, RationalFunction):
            return other
        if isinstance(other, int | Fraction | flint.fmpq | flint.fmpz):
            if isinstance(other, flint.fmpz):
                other = int(other)
            return type(self).constant(other, self.ring)
        return None

    def _new(self, num: Poly, den: Poly) -> RationalFunction:
        return type(self).make(num, den, self.ring)

    def __add__(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        if self.den == o.den:
            return self._new(self.num + o.num, self.den)
        return self._new(self.num * o.den + o.num * self.den, self.den * o.den)

    __radd__ = __add__

    def __neg__(self) -> RationalFunction:
        return type(self)(-self.num, self.den, self.ring)

    def __sub__(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return self + (-o)

    def __rsub__(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        return o + (-self)

    def __mul__(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        if self.den.is_one() and o.den.is_one():
            return type(self)(self.num * o.num, self.den, self.ring)
        g1 = self.num.gcd(o.den)
        g2 = o.num.gcd(self.den)
        return self._new((self.num / g1) * (o.num / g2), (self.den / g2) * (o.den / g1))

    __rmul__ = __mul__

    def _check_divisor(self, divisor: RationalFunction) -> None:
        """Hook: CellExpr asks its cell whether the divisor can vanish."""
        if divisor.is_zero():
            raise ZeroDivisionError("division by the zero function")

    def __truediv__(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        self._check_divisor(o)
        return self * type(self)(o.den, o.num, self.ring).normalized()

    def __rtruediv__(self, other: Any) -> Any:
        o = self._coerce(other)
        if o is None:
            return NotImplemented
        o = type(self)(o.num, o.den, self.ring)
        return o / self

    def normalized(self) -> RationalFunction:
        return type(self).make(self.num, self.den, self.ring)

    def __pow__(self, exponent: int) -> RationalFunction:
        if not isinstance(exponent, int):
            return NotImplemented
        if exponent < 0:
            return (1 / self) ** (-exponent)
        return type(self)(self.num**exponent, self.den**exponent, self.ring)

    def __pos__(self) -> RationalFunction:
        return self


def to_fraction(value: Any) -> Fraction:
    """Fraction of an fmpq (or int / Fraction)."""
    if isinstance(value, flint.fmpq):
        return Fraction(int(value.p), int(value.q))
    return Fraction(value)


def to_fmpq(value: Any) -> flint.fmpq:
    value = Fraction(value) if not isinstance(value, flint.fmpq) else value
    if isinstance(value, flint.fmpq):
        return value
    return flint.fmpq(value.numerator, value.denominator)


def rational(value: Any) -> Fraction:
    """Fraction of an int / Fraction / fmpq / constant RationalFunction."""
    if isinstance(value, RationalFunction):
        return value.constant_value()
    if isinstance(value, flint.fmpq):
        return Fraction(int(value.p), int(value.q))
    return Fraction(value)


def sympy_polys(ring: Ring, polys: Iterable[Poly]) -> list[sympy.Expr]:
    return [ring.to_sympy(p) for p in polys]
