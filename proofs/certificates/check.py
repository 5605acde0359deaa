#!/usr/bin/env python
"""Standalone checker of speclp symbolic proofs (depends on sympy only).

    python check.py [-v] PROOF.json[.gz] [...]     exit 0 when every proof checks
                                                   (-v: progress on stderr)

A proof (written by `speclp prove`) claims a statement for EVERY instance of a shape
(V, L, K, draft sampling). It is a decision tree of cells; a cell is a set of sign
conditions on polynomials in the row symbols. This script trusts nothing in the file that
it can derive: it imports nothing from speclp and, from the claim name and the shape alone,
rebuilds everything the claim is about. It runs nothing from the file: every expression is
parsed by a recursive descent over the producer's grammar (parse_expression: Integer,
Rational, Symbol of the shape, Add, Mul, Pow with a bounded integer exponent), never
evaluated, and every rational by parse_rational; anything else is a rejection naming the
field. Files are strict (format /2): a field the checker does not read is a rejection
(the tables PROOF_FIELDS ... RESULT_FIELDS below; export.strict_document writes them).

Re-derived here (own construction, sympy only):
  * the claim: the name selects the statement and the checks (docs/theory.md sections
    3.3, 8.2, 9.2-9.4); a shape the claim does not cover is refused; the file's
    "statement", "summary", result "kind" and counts are not read;
  * the symbols and the symbolic rows of the shape (docs/theory.md section 1.1:
    p{u}_{t}, q{u}_{t} for t < V - 1, the last entry 1 - the others); the file's "symbols"
    and "rows" must equal them;
  * the verifiers' laws, from their definitions: token-level (section 2.1), BV (section 2.2),
    GBV (select-then-BV with the skewed rows of section 9.2). These few dozen lines are
    the project's deliberate exception to "one implementation per algorithm": a checker is
    worth only its independence from the producer (speclp.verifiers);
  * the full K-path LP of the shape on each cell (section 4.1: configurations of the
    positive leaves with their weights, pi(c, n, y) and A(z) columns, marginal and
    target-matching rows), every row including the one the producer drops; the file's LP
    matrices are never read (only its variable and row LABELS, to place the file's vectors);
  * coverage: the root's conditions are the domain (every row entry >= 0); a cell's first
    facts are exactly its conditions and no other fact is a condition; a split's outcomes
    cover every sign its polynomial can take; a child's conditions are its parent's plus
    its outcome, or for "=" the parent's with a symbol eliminated from the parent's split
    polynomial (which must be the elimination's polynomial; the symbol's coefficient has a
    known nonzero sign on the parent);
  * every derived fact (an exact nonnegative combination of earlier facts, or a quotient
    by factors of known sign), every emptiness certificate, every witness point (exactly);
  * every sign used: each irreducible factor of numerator and denominator gets its sign
    from the facts; a denominator factor must be strictly signed on the cell; a min / max
    choice may ignore zero sets (where the two sides are equal either choice is right).

Taken from the file (what the checker cannot cheaply find, all of it verified):
  the cell tree (splits, outcomes, eliminations, conditions), derived facts and emptiness
  certificates, witness points, dual solutions y of the LP (and for l1-optimum the primal
  x and H*: verified against the rebuilt LP), the GBV key order at L = 1 (verified by
  adjacent comparisons). Laws, block efficiencies, continued laws, acceptances, closed
  forms, threshold sets, configurations, x*, the LP optimum at the witness and (bv-optimal)
  the primal in the file are never used: where present they are compared with the
  re-derived ones, and a difference is a rejection. A program in the file is only its
  variable and row labels (a strict file has no LP matrices).

Claims (checked on every kept cell):
  bv-optimal      BV's law (computed here) is a feasible point of the K = 1 full LP, and a
                  dual y (file) has reduced costs <= 0 and b^T y = c^T x: BV attains the
                  LP optimum. Feasibility includes the target-matching rows (1.4), i.e.
                  losslessness (Lemma 1.4).
  token-optimal   the same for token-level verification (refuted at V = 2, L = 2: a
                  refutation file gives a rational instance; the checker computes the token
                  law's value there and BV's law, a feasible LP point with a higher value).
  l1-optimum      L = 1: the file's primal x and dual y are optimal for the rebuilt LP;
                  the candidate sets are the sublevel sets of p/q (computed here), H* is one
                  of them, f(H*) <= f(H) for all, and the optimum is 1 + p(H*) + 1 - Q(H*),
                  Q(H) = P(all K drafts in H) computed here from the draft row.
  gbv-k1-is-bv    GBV's law with K = 1, from its own definition (the selection of section
                  9.1 and the skewed rows of Lemma 9.1, for every key order at every node
                  of the path: the rows must not depend on it), equals BV's law against q,
                  configuration by configuration.
  gbv-l1-closed-form   L = 1, i.i.d.: GBV's E[tau] (from its law) equals
                  sum_x min(p(x), F(x)^K - F(x-)^K) in the key order (p/q, x); GBV's law is
                  lossless (rows (1.4)); the limit K -> inf: q(x*) > 0 and q = 0 above x*.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import sys
from itertools import combinations, combinations_with_replacement, permutations, product

import sympy
from sympy import QQ
from sympy.polys.rings import ring

REL_SIGNS = {">": {1}, ">=": {0, 1}, "=": {0}, "<=": {-1, 0}, "<": {-1}}
FLIP = {">": "<", ">=": "<=", "=": "=", "<=": ">=", "<": ">"}
OPS = {"<": lambda s: s < 0, "<=": lambda s: s <= 0, ">": lambda s: s > 0,
       ">=": lambda s: s >= 0, "==": lambda s: s == 0, "!=": lambda s: s != 0, "=": lambda s: s == 0}
FORMAT = "speclp-symbolic-proof/2"  # /2: strict files (issue 27)

CLAIMS = {
    "bv-optimal": "BV's law is an optimal point of the single-path full LP (BV attains the "
                  "optimum of every lossless single-path verifier), for every instance",
    "token-optimal": "token-level verification's law is an optimal point of the single-path "
                     "full LP, for every instance",
    "l1-optimum": "at L = 1 the K-path full LP optimum is 1 + min over threshold sets H of "
                  "p(H) + 1 - Q(H), for every instance (without replacement: every instance "
                  "with at least K drafted tokens)",
    "gbv-k1-is-bv": "GBV with one path has BV's law, for every instance",
    "gbv-l1-closed-form": "at L = 1 GBV's E[tau] = sum_x min(p(x), F(x)^K - F(x-)^K) and GBV "
                          "is lossless, for every instance",
}
SINGLE_PATH = {"bv-optimal": "bv", "token-optimal": "token"}


class ProofError(Exception):
    pass


# ---- strict files: every field of a proof file is one the checker reads -------------------
# (the producer writes exactly these: speclp.proofs.symbolic.export.strict_document; a field
# not listed is a rejection naming it). Fields marked "compared" are re-derived here and
# compared (a difference is a rejection); every other one is an input the checks use.
PROOF_FIELDS = {"format", "claim", "shape", "symbols", "rows", "programs", "nodes"}
SHAPE_FIELDS = {"vocab", "depth", "paths", "draft_sampling"}
ROW_FIELDS = {"target", "draft"}
PROGRAM_FIELDS = {"variables", "rows"}  # labels only: where the file's vectors go
NODE_FIELDS = {"id", "parent", "status", "outcome", "elimination", "conditions", "facts"}
STATUS_FIELDS = {"split": {"split"}, "empty": {"certificate"}, "leaf": {"witness", "result"},
                 "excluded": {"witness"}}
ELIMINATION_FIELDS = {"symbol", "value", "poly"}
SPLIT_FIELDS = {"poly", "outcomes", "facts"}
FACT_FIELDS = {"condition": {"poly", "rel", "by"}, "combination": {"poly", "rel", "by", "sign", "terms"},
               "quotient": {"poly", "rel", "by", "fact", "others"}}
CERTIFICATE_FIELDS = {"combination": {"by", "terms"}, "opposite facts": {"by", "facts"},
                      "constant condition": {"by"}}
RESULT_FIELDS = {  # per claim: (inputs, compared)
    "bv-optimal": ({"program", "dual"},
                   {"primal", "block_efficiency", "continued_law", "witness_optimum"}),
    "token-optimal": ({"program", "dual"},
                      {"primal", "block_efficiency", "continued_law", "witness_optimum"}),
    "l1-optimum": ({"program", "primal", "dual", "best"},
                   {"witness_optimum", "closed_form", "threshold_sets", "configurations"}),
    "gbv-k1-is-bv": (set(), {"left", "right"}),
    "gbv-l1-closed-form": ({"key_order"}, {"choices", "x_star", "acceptance", "continued_law"}),
}
REFUTATION_FIELDS = {"claim", "shape", "counterexample"}
COUNTEREXAMPLE_FIELDS = {"instance", "point", "engine"}
INSTANCE_FIELDS = {"vocab_size", "depth", "target", "draft"}
ENGINE_FIELDS = {"token_block_efficiency"}  # compared with the checker's token law value


def only_fields(obj, allowed: set, where: str) -> None:
    """obj is a dict with no field outside allowed (a strict file)."""
    if not isinstance(obj, dict):
        raise ProofError(f"{where}: not an object")
    extra = sorted(map(str, set(obj) - allowed))
    if extra:
        raise ProofError(f"{where}: field {extra[0][:40]!r} is not read by the checker (strict "
                         "files hold only what it verifies)")


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ProofError(message)


def sign(x) -> int:
    return (x > 0) - (x < 0)


def check_shape(claim: str, shape: dict) -> tuple[int, int, int, str]:
    """(V, L, K, draft sampling) of the shape, refused when the claim does not cover it."""
    require(claim in CLAIMS, f"claim: unknown claim {claim!r}")
    only_fields(shape, SHAPE_FIELDS, "shape")
    try:
        vocab, depth = int(shape["vocab"]), int(shape["depth"])
        paths, sampling = int(shape["paths"]), shape["draft_sampling"]
    except (KeyError, TypeError, ValueError):
        raise ProofError("shape: needs vocab, depth, paths, draft_sampling") from None
    require(vocab >= 2 and depth >= 1 and paths >= 1, f"shape: bad shape {shape}")
    require(sampling in ("iid", "without-replacement"), f"shape: draft sampling {sampling!r}")
    if claim in ("bv-optimal", "token-optimal", "gbv-k1-is-bv"):
        require(paths == 1 and sampling == "iid", f"shape: {claim} is a K = 1 i.i.d. claim")
    if claim in ("l1-optimum", "gbv-l1-closed-form"):
        require(depth == 1, f"shape: {claim} is an L = 1 claim")
    if claim == "gbv-l1-closed-form":
        require(sampling == "iid", "shape: gbv-l1-closed-form is an i.i.d. claim")
    return vocab, depth, paths, sampling


# ---- expressions: parsed, never evaluated ---------------------------------------------------
# The producer writes every expression as sympy's srepr of a rational function of the shape's
# symbols, e.g. "Add(Mul(Integer(-1), Symbol('p_0', real=True)), Rational(1, 2))". This is
# the whole grammar accepted (a hand-written recursive descent; nothing in the text is ever
# called, looked up or evaluated as Python):
#     expr := Integer(INT) | Rational(INT, INT) | Symbol('NAME'[, real=True])
#           | Add(expr, ...) | Mul(expr, ...) | Pow(expr, Integer(INT))
# NAME must be a symbol of the shape; any other token is a rejection naming the field. The
# bounds below (far above the shipped files: at most 1222 characters, nesting 5, exponent 3,
# 4 digits) make hostile input fail fast.
MAX_EXPRESSION_CHARS = 200_000
MAX_NESTING = 64
MAX_EXPONENT = 64
MAX_DIGITS = 1000
MAX_DEGREE = 256  # total degree of every intermediate numerator and denominator
MAX_TERMS = 100_000  # bound on the terms of every intermediate product
MAX_KEY_ORDERS = 720  # gbv-k1-is-bv: key orders along a path checked (V!^L)
_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z]+)|(?P<int>-?[0-9]+)|'(?P<str>[A-Za-z0-9_]*)'"
                    r"|(?P<punct>[(),=]))")
_RATIONAL_TEXT = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}(/[0-9]{{1,{MAX_DIGITS}}})?")


def tokens(text: str, field: str) -> list[tuple[str, str]]:
    """(kind, text) tokens of an expression; anything else is a rejection."""
    require(isinstance(text, str), f"{field}: not an expression string")
    require(len(text) <= MAX_EXPRESSION_CHARS,
            f"{field}: expression longer than {MAX_EXPRESSION_CHARS} characters")
    out, pos, end = [], 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        require(m is not None, f"{field}: unexpected text {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_expression(text: str, field: str, builder):
    """The expression text, built by builder (integer, rational, symbol, add, mul, power):
    a recursive descent over the grammar above; nothing is evaluated."""
    toks = tokens(text, field)
    pos = 0

    def fail(what: str):
        shown = toks[pos][1] if pos < len(toks) else "the end"
        raise ProofError(f"{field}: {what} at {shown[:20]!r} (token {pos})")

    def take(kind: str, value: str | None = None) -> str:
        nonlocal pos
        if pos >= len(toks) or toks[pos][0] != kind or (value is not None and toks[pos][1] != value):
            fail(f"expected {value or kind}")
        pos += 1
        return toks[pos - 1][1]

    def integer() -> int:
        digits = take("int")
        if len(digits.lstrip("-")) > MAX_DIGITS:
            fail(f"an integer of more than {MAX_DIGITS} digits")
        return int(digits)

    def expr(depth: int):
        nonlocal pos
        if depth > MAX_NESTING:
            fail(f"nesting deeper than {MAX_NESTING}")
        head = take("name")
        take("punct", "(")
        if head == "Integer":
            out = builder.integer(integer())
        elif head == "Rational":
            num = integer()
            take("punct", ",")
            den = integer()
            if den <= 0:
                fail("a rational with a denominator <= 0")
            out = builder.rational(num, den)
        elif head == "Symbol":
            name = take("str")
            if pos < len(toks) and toks[pos] == ("punct", ","):
                pos += 1
                take("name", "real")
                take("punct", "=")
                take("name", "True")
            out = builder.symbol(name, field)
        elif head in ("Add", "Mul"):
            args = [expr(depth + 1)]
            while pos < len(toks) and toks[pos] == ("punct", ","):
                pos += 1
                args.append(expr(depth + 1))
            out = builder.add(args, field) if head == "Add" else builder.mul(args, field)
        elif head == "Pow":
            base = expr(depth + 1)
            take("punct", ",")
            take("name", "Integer")
            take("punct", "(")
            exponent = integer()
            take("punct", ")")
            if abs(exponent) > MAX_EXPONENT:
                fail(f"an exponent beyond +-{MAX_EXPONENT}")
            out = builder.power(base, exponent, field)
        else:
            pos -= 2
            fail("not Integer, Rational, Symbol, Add, Mul or Pow")
        take("punct", ")")
        return out

    result = expr(0)
    if pos != len(toks):
        fail("text after the expression")
    return result


def parse_rational(text, field: str):
    """An exact rational written "n" or "n/d" (d > 0), as QQ; anything else is a rejection."""
    require(isinstance(text, str) and _RATIONAL_TEXT.fullmatch(text.strip()) is not None,
            f"{field}: not a rational n or n/d: {str(text)[:40]!r}")
    num, _, den = text.strip().partition("/")
    require(int(den or 1) > 0, f"{field}: a rational with denominator 0")
    return QQ(int(num), int(den or 1))


class FracBuilder:
    """Builds the parsed expression as a Frac of the algebra's ring, with bounded degree and
    size at every step."""

    def __init__(self, algebra: Algebra) -> None:
        self.a = algebra

    def integer(self, value: int) -> Frac:
        return self.a.const(value)

    def rational(self, num: int, den: int) -> Frac:
        return self.a.const(QQ(num, den))

    def symbol(self, name: str, field: str) -> Frac:
        require(name in self.a.index, f"{field}: symbol {name!r} is not a symbol of the shape")
        return Frac(self.a.gens[self.a.index[name]], self.a.R.one)

    @staticmethod
    def _bounded(f: Frac, field: str) -> Frac:
        for part in (f.n, f.d):
            require(not part or part.is_ground or sum(max(part.monoms(), key=sum)) <= MAX_DEGREE,
                    f"{field}: an expression of degree above {MAX_DEGREE}")
        return f

    def add(self, args: list, field: str) -> Frac:
        out = args[0]
        for a in args[1:]:
            require(len(out.d) * len(a.n) + len(out.n) * len(a.d) <= MAX_TERMS
                    and len(out.d) * len(a.d) <= MAX_TERMS, f"{field}: an expression too large")
            out = self._bounded(out + a, field)
        return out

    def mul(self, args: list, field: str) -> Frac:
        out = args[0]
        for a in args[1:]:
            require(len(out.n) * len(a.n) <= MAX_TERMS and len(out.d) * len(a.d) <= MAX_TERMS,
                    f"{field}: an expression too large")
            out = self._bounded(out * a, field)
        return out

    def power(self, base: Frac, exponent: int, field: str) -> Frac:
        if exponent < 0:
            require(bool(base.n), f"{field}: division by zero")
            base, exponent = Frac(base.d, base.n), -exponent
        return self.mul([self.a.one] + [base] * exponent, field)


# ---- the tree of nodes (docs/theory.md section 1.1) ---------------------------------------
def nodes_of(vocab: int, depth: int) -> list[tuple]:
    """Every node of depth 0..L in shortlex order."""
    out: list[tuple] = []
    for d in range(depth + 1):
        out.extend(product(range(vocab), repeat=d))
    return out


def symbol_names(vocab: int, depth: int) -> list[str]:
    names = []
    for letter in ("p", "q"):
        for u in nodes_of(vocab, depth):
            names.extend(f"{letter}{''.join(map(str, u))}_{t}" for t in range(vocab - 1))
    return names


def label(u: tuple) -> str:
    """A node (a tuple of tokens) or a configuration (a tuple of paths) as the LP labels it."""
    return str(label_tuple(u))


def label_tuple(t):
    return tuple(label_tuple(x) for x in t) if isinstance(t, tuple) else int(t)


class Frac:
    """n/d with n, d in QQ[symbols] (sympy sparse polynomials), not reduced: identities
    are tested as n1 d2 - n2 d1 == 0, signs from the factors of n and d."""

    __slots__ = ("n", "d")

    def __init__(self, n, d) -> None:
        self.n, self.d = n, d

    def __add__(self, o: Frac) -> Frac:
        if self.d == o.d:
            return Frac(self.n + o.n, self.d)
        return Frac(self.n * o.d + o.n * self.d, self.d * o.d)

    def __neg__(self) -> Frac:
        return Frac(-self.n, self.d)

    def __sub__(self, o: Frac) -> Frac:
        return self + (-o)

    def __mul__(self, o: Frac) -> Frac:
        return Frac(self.n * o.n, self.d * o.d)

    def zero(self) -> bool:
        return not self.n

    def equals(self, o: Frac) -> bool:
        return not (self.n * o.d - o.n * self.d)

    def reduced(self) -> Frac:
        """Lowest terms (cached: the same fractions recur across the configurations)."""
        if not self.n:
            return Frac(self.n, self.d.ring.one)
        if self.d.is_ground:
            return self if self.d == 1 else Frac(self.n * (1 / self.d.LC), self.d.ring.one)
        key = (self.n, self.d)
        out = _REDUCED.get(key)
        if out is None:
            out = self.n.cancel(self.d)
            if len(_REDUCED) > 200_000:
                _REDUCED.clear()
            _REDUCED[key] = out
        return Frac(*out)


_REDUCED: dict = {}


class Algebra:
    """Polynomials of the shape's symbols, parsed from the file's srepr strings, with
    normalised keys, cached factorisations and sign reasoning from facts."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.symbols = [sympy.Symbol(n, real=True) for n in names]
        self.R, *self.gens = ring(self.symbols, QQ)
        self.index = {n: i for i, n in enumerate(names)}
        self.one = Frac(self.R.one, self.R.one)
        self.zero_ = Frac(self.R.zero, self.R.one)
        self._parsed: dict[str, Frac] = {}
        self._keys: dict = {}
        self._factors: dict = {}
        self._fact_index: dict = {}

    def frac(self, text: str, field: str = "expression") -> Frac:
        """The rational function the file's text writes (parsed, never evaluated: see
        parse_expression); field names the file's field in a rejection."""
        require(isinstance(text, str), f"{field}: not an expression string")
        out = self._parsed.get(text)
        if out is None:
            out = parse_expression(text, field, FracBuilder(self))
            if out.d.is_ground and out.d != 1:
                out = Frac(out.n * (1 / out.d.LC), self.R.one)
            self._parsed[text] = out
        return out

    def poly(self, text: str, field: str = "polynomial"):
        f = self.frac(text, field)
        require(f.d.is_ground, f"{field}: {text[:80]} is not a polynomial")
        return f.n * (1 / f.d.LC)

    def const(self, value) -> Frac:
        return Frac(self.R(value), self.R.one)

    def key(self, p) -> tuple[int, tuple]:
        """(sign, normalized polynomial): p = sign * c * normalized with c > 0."""
        k = self._keys.get(p)
        if k is None:
            if not p:
                k = (0, ())
            else:
                _, q = p.clear_denoms()
                _, q = q.primitive()
                s = 1 if q.LC > 0 else -1
                k = (s, tuple(sorted((s * q).items())))
            self._keys[p] = k
        return k

    def factor(self, p):
        out = self._factors.get(p)
        if out is None:
            out = p.factor_list()
            self._factors[p] = out
        return out

    def sign_set(self, facts: list, p) -> set[int]:
        """Signs of the polynomial p allowed by the facts on it."""
        s, k = self.key(p)
        if s == 0:
            return {0}
        if p.is_ground:
            return {sign(p.LC)}
        allowed = self.fact_index(facts).get(k, {-1, 0, 1})
        return set(allowed) if s > 0 else {-x for x in allowed}

    def fact_index(self, facts: list) -> dict:
        """normalized polynomial -> the signs the facts allow it (cached per fact list; the
        entry keeps the list, so its id is not reused while cached; facts lists are never
        changed after a node's facts are checked, and a list being built is re-indexed
        whenever it has grown)."""
        entry = self._fact_index.get(id(facts))
        if entry is not None and entry[0] is facts and entry[1] == len(facts):
            return entry[2]
        index: dict = {}
        for fp, rel in facts:
            fs, fk = self.key(fp)
            if fs == 0:
                continue
            allowed = REL_SIGNS[rel if fs > 0 else FLIP[rel]]
            index[fk] = index.get(fk, {-1, 0, 1}) & allowed
        if len(self._fact_index) > 4096:
            self._fact_index.clear()
        self._fact_index[id(facts)] = (facts, len(facts), index)
        return index

    def signs_of(self, facts: list, f: Frac, weak: bool = False) -> set[int]:
        """Possible signs of f from the signs of the irreducible factors of its numerator
        and denominator. Every denominator factor must be strictly signed by the facts;
        weak: zero sets of numerator factors ignored (for min / max choices)."""
        if f.zero():
            return {0}
        f = f.reduced()  # the function's own factors (every division was checked when made)
        total = {1}
        for part, in_den in ((f.n, False), (f.d, True)):
            constant, factors = self.factor(part)
            total = {x * sign(constant) for x in total}
            for g, exponent in factors:
                s = self.sign_set(facts, g)
                if in_den:
                    require(0 not in s, f"denominator factor {g.as_expr()} may vanish on the cell")
                elif weak:
                    s = (s - {0}) or {1}
                total = {x * y**exponent for x in total for y in s}
        return total

    def holds(self, facts: list, f: Frac, rel: str) -> bool:
        return all(OPS[rel](s) for s in self.signs_of(facts, f))

    def decide(self, facts: list, f: Frac, op: str) -> bool:
        if f.zero():
            return OPS[op](0)
        truth = {OPS[op](s) for s in self.signs_of(facts, f)}
        require(len(truth) == 1, f"sign of {f.n.as_expr()}/({f.d.as_expr()}) ({op} 0) "
                                 "is not determined by the facts")
        return truth.pop()

    @staticmethod
    def at(p, point: list):
        """The polynomial p at a rational point (sum over its terms)."""
        total = QQ(0)
        for monom, coeff in p.items():
            term = coeff
            for i, e in enumerate(monom):
                if e:
                    term = term * point[i] ** e
            total = total + term
        return total


class Arith:
    """Exact arithmetic on one cell: every comparison a law makes is decided by the cell's
    facts (a ProofError when the facts do not determine it). With no facts and constant
    values it is plain rational arithmetic (the refutation's instance)."""

    def __init__(self, algebra: Algebra, facts: list) -> None:
        self.a = algebra
        self.facts = facts
        self.one, self.zero = algebra.one, algebra.zero_

    def const(self, value) -> Frac:
        return self.a.const(value)

    def weak(self, f: Frac) -> set[int]:
        return {0} if f.zero() else self.a.signs_of(self.facts, f, weak=True)

    def minimum(self, x: Frac, y: Frac) -> Frac:
        s = self.weak(x - y)
        if all(v <= 0 for v in s):
            return x
        require(all(v >= 0 for v in s), "a min of the law is not decided by the facts")
        return y

    def positive_part(self, x: Frac) -> Frac:
        s = self.weak(x)
        if all(v >= 0 for v in s):
            return x
        require(all(v <= 0 for v in s), "a positive part of the law is not decided by the facts")
        return self.zero

    def nonzero(self, x: Frac) -> bool:
        return not x.zero() and self.a.decide(self.facts, x, "!=")

    def divide(self, x: Frac, y: Frac) -> Frac:
        require(not y.zero() and 0 not in self.a.signs_of(self.facts, y),
                f"divisor {y.n.as_expr()} may vanish on the cell")
        return Frac(x.n * y.d, x.d * y.n).reduced()

    def safe_div(self, x: Frac, y: Frac) -> Frac:
        """x / y, 0 where y = 0 (y must be identically 0 or strictly signed on the cell)."""
        if y.zero() or x.zero():
            return self.zero
        return self.divide(x, y)

    def less(self, x: Frac, y: Frac) -> bool:
        return self.a.decide(self.facts, x - y, "<")

    def equal(self, x: Frac, y: Frac) -> bool:
        return self.a.decide(self.facts, x - y, "==")

    def total(self, values) -> Frac:
        out = self.zero
        for v in values:
            out = out + v
        return out


# ---- verifiers' laws, from their definitions (docs/theory.md sections 2.1, 2.2, 9) --------
class Instance:
    """Rows of one (symbolic or rational) instance: target(u), draft(u) [V] for nodes u."""

    def __init__(self, vocab: int, depth: int, target: list, draft: list) -> None:
        self.vocab, self.depth = vocab, depth
        self.nodes = nodes_of(vocab, depth)
        self.position = {u: i for i, u in enumerate(self.nodes)}
        self._target, self._draft = target, draft

    def p(self, u: tuple) -> list:
        return self._target[self.position[u]]

    def q(self, u: tuple) -> list:
        return self._draft[self.position[u]]

    def path_q(self, ar: Arith, x: tuple) -> Frac:
        out = ar.one
        for i, t in enumerate(x):
            out = out * self.q(x[:i])[t]
        return out

    def path_p(self, ar: Arith, x: tuple) -> Frac:
        out = ar.one
        for i, t in enumerate(x):
            out = out * self.p(x[:i])[t]
        return out


def token_law(ar: Arith, inst: Instance, path: tuple) -> dict:
    """Token-level (section 2.1) on one path: {(d, y): P(tau = d, Y = y | path)}."""
    depth, vocab = len(path), inst.vocab
    out, reached = {}, ar.one
    for i in range(depth):
        u, t = path[:i], path[i]
        p, q = inst.p(u), inst.q(u)
        accept = ar.minimum(ar.one, ar.safe_div(p[t], q[t]))
        raw = [ar.positive_part(p[y] - q[y]) for y in range(vocab)]
        mass = ar.total(raw)
        stop = reached * (ar.one - accept)
        for y in range(vocab):
            out[(i, y)] = stop * ar.safe_div(raw[y], mass)
        reached = reached * accept
    for y in range(vocab):
        out[(depth, y)] = reached * inst.p(path)[y]
    return out


def bv_law(ar: Arith, inst: Instance, path: tuple, r_rows: list) -> dict:
    """BV (section 2.2) on one path against the draft rows r_rows[i] = r(.|path[:i]):
    {(d, y): P(tau = d, Y = y | path)}."""
    depth, vocab = len(path), inst.vocab
    w = [ar.one]
    for i in range(depth):
        u, t = path[:i], path[i]
        w.append(ar.minimum(ar.one, w[i] * ar.safe_div(inst.p(u)[t], r_rows[i][t])))
    h, residual = [ar.zero], []  # h_0 is never read (tau = the largest i >= 1 passing)
    for i in range(depth):
        p = inst.p(path[:i])
        raw = [ar.positive_part(w[i] * p[y] - r_rows[i][y]) for y in range(vocab)]
        mass = ar.total(raw)
        residual.append([ar.safe_div(v, mass) for v in raw])
        if i:
            h.append(ar.safe_div(mass, mass + ar.one - w[i]))
    h.append(w[depth])
    residual.append(inst.p(path))
    stop = [None] * (depth + 1)
    survive = ar.one  # prod_{j > i} (1 - h_j)
    for i in range(depth, 0, -1):
        stop[i] = h[i] * survive
        survive = survive * (ar.one - h[i])
    stop[0] = survive
    return {(d, y): (stop[d] * residual[d][y]).reduced() for d in range(depth + 1)
            for y in range(vocab)}


def gbv_selection(config: tuple, orders: dict) -> tuple:
    """GBV's selection (section 9.1): the best drafted path of the configuration in the
    lexicographic priority, walking from the root to the drafted child of highest key among
    the paths still through the current node; orders[u] = the tokens at u in ascending key."""
    candidates, depth = list(config), len(config[0])
    for i in range(depth):
        rank = {x: k for k, x in enumerate(orders[candidates[0][:i]])}
        top = max(rank[path[i]] for path in candidates)
        candidates = [path for path in candidates if rank[path[i]] == top]
    return candidates[0]


def skewed_rows(ar: Arith, inst: Instance, best: tuple, paths: int, orders: dict) -> list:
    """GBV's rows along the selected path (section 9.2, Lemma 9.1), from the definition:
    r(x|u) = [(Lam + Q (b(x) + q(x|u)))^K - (Lam + Q b(x))^K] / [(Lam + Q)^K - Lam^K],
    Q = q(u), Lam = the q-mass of the leaves ranked below cyl(u), b(x) = the q(.|u)-mass of
    the tokens ranked below x at u; then Lam <- Lam + Q b(y), Q <- Q q(y|u) for y = best_i."""
    lam, mass, rows = ar.zero, ar.one, []
    for i in range(inst.depth):
        u = best[:i]
        q = inst.q(u)
        below, row, b_of = ar.zero, [ar.zero] * inst.vocab, {}
        scale = power(ar, lam + mass, paths) - power(ar, lam, paths)
        for x in orders[u]:
            b_of[x] = below
            upper = below + q[x]
            row[x] = ar.divide(power(ar, lam + mass * upper, paths)
                               - power(ar, lam + mass * below, paths), scale)
            below = upper
        rows.append(row)
        y = best[i]
        lam, mass = lam + mass * b_of[y], mass * q[y]
    return rows


def gbv_law(ar: Arith, inst: Instance, config: tuple, paths: int, orders: dict) -> tuple:
    """GBV (section 9): the selected path y* (gbv_selection), then BV against the skewed
    rows (skewed_rows). Returns (y*, {(d, y): P(tau = d, Y = y | configuration)}).
    orders[u]: the tokens at node u in ascending key (the caller verifies the key order, or
    at K = 1 shows that the law does not depend on it)."""
    best = gbv_selection(config, orders)
    return best, bv_law(ar, inst, best, skewed_rows(ar, inst, best, paths, orders))


def power(ar: Arith, x: Frac, k: int) -> Frac:
    out = ar.one
    for _ in range(k):
        out = out * x
    return out


def without_replacement(ar: Arith, orders) -> Frac:
    """Sum over the given draw orders (each a sequence of draft probabilities) of the
    probability of drawing that sequence without replacement: every draw from q renormalised
    to the untaken tokens, q(x_1) q(x_2) / (1 - q(x_1)) ..."""
    out = ar.zero
    for order in orders:
        term, used = ar.one, ar.zero
        for qx in order:
            term = ar.divide(term * qx, ar.one - used) if not used.zero() else term * qx
            used = used + qx
        out = out + term
    return out


# ---- the full K-path LP (docs/theory.md section 4.1) --------------------------------------
class FullLP:
    """The full LP of an instance: configurations of the positive leaves with weights,
    columns pi(c, n, y) (objective |n| + 1) and A(z) (objective 0), rows marginal(c) and
    match(u, t): sum_c pi(c, u, t) + A(ut) - p(t|u) A(u) = [u = ()] p(t). Every row is kept
    (the producer drops one redundant marginal row; its dual is 0 here)."""

    def __init__(self, ar: Arith, inst: Instance, paths: int, sampling: str) -> None:
        self.ar, self.inst = ar, inst
        vocab, depth = inst.vocab, inst.depth
        leaves = list(product(range(vocab), repeat=depth))
        self.q_leaf = {x: inst.path_q(ar, x) for x in leaves}
        positive = [x for x in leaves if ar.nonzero(self.q_leaf[x])]
        self.positive = positive
        if sampling == "iid":
            configs = list(combinations_with_replacement(positive, paths))
        else:
            require(len(positive) >= paths, "fewer positive paths than K (an excluded cell)")
            configs = list(combinations(positive, paths))
        self.configs = [(c, self.weight(c, sampling)) for c in configs]
        self.columns: dict[str, tuple] = {}  # label -> (objective, {row label: coefficient})
        self.rhs: dict[str, Frac] = {}
        for c, w in self.configs:
            self.rhs[f"marginal[c={label(c)}]"] = w
        for u in inst.nodes:
            for t in range(vocab):
                self.rhs[f"match[u={label(u)}, t={t}]"] = inst.p(())[t] if not u else ar.zero
        for c, _ in self.configs:
            tree = sorted({x[:d] for x in c for d in range(depth + 1)}, key=lambda n: (len(n), n))
            for n in tree:
                for y in range(vocab):
                    self.columns[self.pi(c, n, y)] = (ar.const(len(n) + 1), {
                        f"marginal[c={label(c)}]": ar.one, f"match[u={label(n)}, t={y}]": ar.one})
        for z in inst.nodes[1:]:
            entries = {f"match[u={label(z[:-1])}, t={z[-1]}]": ar.one}
            for t in range(vocab):
                entries[f"match[u={label(z)}, t={t}]"] = -inst.p(z)[t]
            self.columns[f"A[{label(z)}]"] = (ar.zero, entries)

    def weight(self, config: tuple, sampling: str) -> Frac:
        ar = self.ar
        q = [self.q_leaf[x] for x in config]
        if sampling == "iid":
            out = ar.const(math.factorial(len(config)) // math.prod(
                math.factorial(config.count(x)) for x in set(config)))
            for v in q:
                out = out * v
            return out
        return without_replacement(ar, ([q[k] for k in order]
                                        for order in permutations(range(len(config)))))

    @staticmethod
    def pi(config: tuple, node: tuple, y: int) -> str:
        return f"pi[c={label(config)}, node={label(node)}, y={y}]"

    def law_point(self, laws: dict) -> dict[str, Frac]:
        """The LP point of a verifier: laws[c] = (path of the output node, {(d, y): P}),
        pi(c, path[:d], y) = w(c) P(d, y | c), A(z) = sum of pi over outputs below z."""
        ar = self.ar
        x = {name: ar.zero for name in self.columns}
        for c, w in self.configs:
            path, law = laws[c]
            for (d, y), prob in law.items():
                if prob.zero():
                    continue
                value = (w * prob).reduced()
                key = self.pi(c, path[:d], y)
                x[key] = x[key] + value
                for k in range(1, d + 1):
                    a = f"A[{label(path[:k])}]"
                    x[a] = x[a] + value
        return {k: v.reduced() for k, v in x.items()}

    def check(self, facts: list, x: dict[str, Frac], y: dict[str, Frac], optimal: bool = True
              ) -> Frac:
        """A x = b on every row, x >= 0 on the cell, and with optimal: reduced costs
        c_j - a_j^T y <= 0 on the cell and c^T x = b^T y. Returns c^T x."""
        ar, alg = self.ar, self.ar.a
        require(set(x) == set(self.columns), "primal: not the variables of the claim's LP")
        require(set(y) <= set(self.rhs), "dual: rows that the claim's LP does not have")
        x = {k: v.reduced() for k, v in x.items()}
        y = {k: v.reduced() for k, v in y.items()}
        activity = {r: ar.zero for r in self.rhs}
        primal = ar.zero
        for name, (objective, entries) in self.columns.items():
            value = x[name]
            if not value.zero():
                require(alg.holds(facts, value, ">="), f"{name} >= 0 is not shown on the cell")
                primal = primal + objective * value
                for r, coef in entries.items():
                    activity[r] = activity[r] + coef * value
        for r, b in self.rhs.items():
            require(activity[r].equals(b), f"row {r}: A x != b")
        if not optimal:
            return primal
        dual = ar.zero
        for r, value in y.items():
            if not value.zero():
                alg.signs_of(facts, value)  # a real vector on the whole cell: denominators signed
                dual = dual + self.rhs[r] * value
        for name, (objective, entries) in self.columns.items():
            reduced = objective
            for r, coef in entries.items():
                v = y.get(r)
                if v is not None and not v.zero():
                    reduced = reduced - coef * v
            require(reduced.zero() or alg.holds(facts, reduced, "<="),
                    f"reduced cost of {name} <= 0 is not shown on the cell")
        require(primal.equals(dual), "c^T x != b^T y")
        return primal


# ---- the proof document ----------------------------------------------------------------
class Checker:
    def __init__(self, doc: dict) -> None:
        only_fields(doc, PROOF_FIELDS, "proof")
        self.doc = doc
        self.claim = doc.get("claim")
        self.vocab, self.depth, self.paths, self.sampling = check_shape(self.claim,
                                                                        doc.get("shape", {}))
        names = symbol_names(self.vocab, self.depth)
        require(doc.get("symbols") == names, "symbols: not the symbols of the shape")
        self.alg = Algebra(names)
        self.index = self.alg.index
        self._rows_cache: dict = {}
        self.rows_ = self.shape_rows()
        only_fields(doc.get("rows"), ROW_FIELDS, "rows")
        programs = doc.get("programs", {})
        only_fields(programs, set(programs) if isinstance(programs, dict) else set(), "programs")
        for key, program in programs.items():
            only_fields(program, PROGRAM_FIELDS, f"programs.{key}")
        self.used_programs: set = set()
        for which in ("target", "draft"):
            given = doc.get("rows", {}).get(which)
            require(isinstance(given, list) and len(given) == len(self.rows_[which])
                    and all(isinstance(r, list) and len(r) == self.vocab for r in given),
                    f"rows: the {which} rows are not those of the shape")
            for mine, theirs in zip(self.rows_[which], given, strict=True):
                for a, b in zip(mine, theirs, strict=True):
                    require(a.equals(self.alg.frac(b, f"rows.{which}")),
                            f"rows: the {which} rows are not those of the shape")

    def shape_rows(self) -> dict[str, list[list[Frac]]]:
        alg = self.alg
        out = {}
        for which, letter in (("target", "p"), ("draft", "q")):
            table = []
            for u in nodes_of(self.vocab, self.depth):
                prefix = "".join(map(str, u))
                entries = [Frac(alg.gens[alg.index[f"{letter}{prefix}_{t}"]], alg.R.one)
                           for t in range(self.vocab - 1)]
                last = alg.one
                for e in entries:
                    last = last - e
                table.append(entries + [last])
            out[which] = table
        return out

    # ---- facts -----------------------------------------------------------------------
    def oriented(self, fact: tuple) -> object:
        p, rel = fact
        return p if rel in (">", ">=", "=") else -p

    def combination(self, facts: list, terms: list) -> tuple[object, bool]:
        total = self.alg.R.zero
        strict = False
        for coef, members in terms:
            c = parse_rational(coef, "a combination coefficient")
            require(c >= 0, f"negative coefficient {coef}")
            require(all(isinstance(i, int) and 0 <= i < len(facts) for i in members),
                    "a combination refers to a fact that is not before it")
            prod = self.alg.R.one
            for i in members:
                prod = prod * self.oriented(facts[i])
            total = total + prod * c
            if c > 0 and all(facts[i][1] in (">", "<") for i in members):
                strict = True
        return total, strict

    def check_facts(self, node: dict) -> list[tuple]:
        """The node's facts: the first len(conditions) are its conditions (and only they are
        'by condition'); every later one is proved from earlier ones."""
        facts: list[tuple] = []
        n_cond = len(node["conditions"])
        alg = self.alg
        for i, f in enumerate(node["facts"]):
            only_fields(f, FACT_FIELDS.get(f.get("by"), {"poly", "rel", "by"}), f"facts[{i}]")
            p, rel = alg.poly(f["poly"], f"facts[{i}].poly"), f["rel"]
            require(rel in REL_SIGNS, f"fact {i}: unknown relation {rel}")
            by = f["by"]
            if i < n_cond:
                require(by == "condition" and [f["poly"], rel] == list(node["conditions"][i]),
                        "the conditions are not the first facts")
            elif by == "combination":
                require(rel != "=", f"fact {i}: a combination proves a sign, not an equality")
                total, strict = self.combination(facts, f["terms"])
                require(f["sign"] in (1, -1) and not (p * f["sign"] - total),
                        f"fact {i}: s * poly != its combination")
                require((f["sign"] > 0) == (rel in (">", ">=")), f"fact {i}: sign mismatch")
                require(strict or rel in (">=", "<="), f"fact {i}: strictness not shown")
            elif by == "quotient":
                require(f["fact"] < i and all(j < i for j in f["others"]), "fact refers forward")
                product_, prel = facts[f["fact"]]
                constant, factors = alg.factor(product_)
                sk = alg.key(p)[1]
                found = [(g, m) for g, m in factors if alg.key(g)[1] == sk]
                require(len(found) == 1 and found[0][1] % 2 == 1, f"fact {i}: not a factor")
                others = {sign(constant)}
                sub = [facts[j] for j in f["others"]]
                for g, m in factors:
                    if alg.key(g)[1] == sk:
                        continue
                    s = alg.sign_set(sub, g)
                    require(len(s) == 1 and 0 not in s, f"fact {i}: a factor's sign is unknown")
                    others = {x * next(iter(s)) ** m for x in others}
                (r,) = others
                s_e = alg.key(p)[0] * alg.key(found[0][0])[0]
                derived = prel if r * s_e > 0 else FLIP[prel]
                require(REL_SIGNS[derived] <= REL_SIGNS[rel], f"fact {i}: quotient gives {derived}")
            elif by == "condition":
                raise ProofError(f"fact {i}: a condition beyond the cell's conditions "
                                 "(an assumption without proof)")
            else:
                raise ProofError(f"fact {i}: unknown proof {by!r}")
            facts.append((p, rel))
        require(len(facts) >= n_cond, "the conditions are not the first facts")
        return facts

    # ---- the tree --------------------------------------------------------------------
    def condition_set(self, conditions: list) -> set[tuple]:
        out = set()
        for p, rel in conditions:
            s, k = self.alg.key(p)
            out.add((k, rel if s > 0 else FLIP[rel]))
        return out

    def root_conditions(self) -> set[tuple]:
        out = []
        for which in ("target", "draft"):
            for row in self.rows_[which]:
                for entry in row:
                    if not entry.n.is_ground:
                        out.append((entry.n, ">="))
        return self.condition_set(out)

    def substitute(self, f: Frac, var: int, value: Frac) -> Frac:
        """f with symbol var replaced by value."""
        R = self.alg.R
        x = self.alg.gens[var]
        if f.n.degree(x) <= 0 and f.d.degree(x) <= 0:
            return f  # var does not occur

        def poly(p) -> Frac:
            groups: dict[int, object] = {}
            for monom, coeff in p.items():
                e = monom[var]
                rest = list(monom)
                rest[var] = 0
                groups[e] = groups.get(e, R.zero) + R({tuple(rest): coeff})
            top = max(groups) if groups else 0
            num = R.zero
            for e, c in groups.items():
                num = num + c * (value.n**e if e else R.one) * value.d ** (top - e)
            return Frac(num, value.d**top)

        num, den = poly(f.n), poly(f.d)
        # lowest terms: the same function wherever both denominators are nonzero (on a cell
        # every denominator has a known nonzero sign), so conditions compare as the
        # producer writes them (e.g. q1 (q1 - p1) / q1 -> q1 - p1)
        n, d = (num.n * den.d).cancel(num.d * den.n)
        return Frac(n, d)

    def eliminated_conditions(self, parent: dict, parent_facts: list, elim: dict
                              ) -> tuple[set[tuple], bool]:
        """The child's conditions derived from the parent's (and whether one became a
        false constant). The eliminated polynomial must be the parent's split polynomial."""
        alg = self.alg
        require(elim.get("symbol") in self.index, "elimination: unknown symbol")
        var = self.index[elim["symbol"]]
        g = alg.poly(elim["poly"], "elimination.poly")
        require(alg.key(g)[1] == alg.key(alg.poly(parent["split"]["poly"], "split.poly"))[1],
                "elimination: not the parent's split polynomial")
        value = alg.frac(elim["value"], "elimination.value")
        require(g.degree(alg.gens[var]) == 1, "elimination: not linear in the symbol")
        require(value.n.degree(alg.gens[var]) <= 0 and value.d.degree(alg.gens[var]) <= 0,
                "elimination: the value contains the symbol")
        coefficient = g.diff(alg.gens[var])
        rest = g - coefficient * alg.gens[var]
        require(not (value.n * coefficient + rest * value.d), "elimination: wrong value")
        constant, factors = alg.factor(coefficient)
        signs = {}
        for f, _ in factors:
            s = alg.sign_set(parent_facts, f)
            require(len(s) == 1 and 0 not in s, "elimination: a coefficient factor's sign is "
                                                "unknown")
            signs[alg.key(f)[1]] = next(iter(s)) * alg.key(f)[0]
        out: list[tuple] = []
        false_constant = False
        for text, rel in parent["conditions"]:
            h = self.substitute(Frac(alg.poly(text, "conditions"), alg.R.one), var, value)
            c_den, den_factors = alg.factor(h.d)
            s_den = sign(c_den)
            for f, m in den_factors:
                require(alg.key(f)[1] in signs, "elimination: unexpected denominator factor")
                s_den *= (signs[alg.key(f)[1]] * alg.key(f)[0]) ** m
            if h.n.is_ground:
                if not OPS[rel](sign(h.n.LC if h.n else 0) * s_den):
                    false_constant = True
                continue
            out.append((h.n, rel if s_den > 0 else FLIP[rel]))
        for f, _ in factors:
            out.append((f, ">" if signs[alg.key(f)[1]] * alg.key(f)[0] > 0 else "<"))
        return self.condition_set(out), false_constant

    def check(self) -> dict:
        nodes = self.doc["nodes"]
        require(isinstance(nodes, list) and nodes, "no nodes")
        seen_facts: list[list] = []
        substitutions: list[list] = []
        counts: dict[str, int] = {}
        children: dict[int, list[int]] = {}
        for i, node in enumerate(nodes):
            if i == 0:
                require(node["parent"] is None, "the first node is not the root")
            else:
                require(isinstance(node["parent"], int) and 0 <= node["parent"] < i,
                        f"node {node.get('id')}: its parent is not an earlier node")
                children.setdefault(node["parent"], []).append(i)
        for i, node in enumerate(nodes):
            if VERBOSE and i % 500 == 0:
                print(f"  node {i} of {len(nodes)}", file=sys.stderr, flush=True)
            try:
                only_fields(node, NODE_FIELDS | STATUS_FIELDS.get(node.get("status"), set()),
                            "node")
                expected_id = ("0" if i == 0 else
                               f"{nodes[node['parent']]['id']}."
                               f"{children[node['parent']].index(i)}")
                require(node["id"] == expected_id, f"id: {node['id']!r} is not its place in "
                                                   f"the tree {expected_id!r}")
                require(("elimination" in node) == (node.get("outcome") == "="),
                        "an elimination exactly on the '=' children")
                if "elimination" in node:
                    only_fields(node["elimination"], ELIMINATION_FIELDS, "elimination")
                require(all(rel in REL_SIGNS for _, rel in node["conditions"]),
                        "unknown relation in the conditions")
                conditions = self.condition_set([(self.alg.poly(text, "conditions"), rel)
                                                 for text, rel in node["conditions"]])
                false_constant = False
                if node["parent"] is None:
                    require(conditions == self.root_conditions(), "the root is not the domain")
                    substitution: list = []
                else:
                    parent = nodes[node["parent"]]
                    require(parent["status"] == "split", "the parent is not a split")
                    substitution = list(substitutions[node["parent"]])
                    if node["outcome"] == "=":
                        value = self.alg.frac(node["elimination"]["value"], "elimination.value")
                        require(all(value.n.degree(self.alg.gens[v]) <= 0
                                    and value.d.degree(self.alg.gens[v]) <= 0
                                    for v, _ in substitution),
                                "elimination: the value contains an eliminated symbol")
                        derived, false_constant = self.eliminated_conditions(
                            parent, seen_facts[node["parent"]], node["elimination"])
                        if not false_constant:
                            require(conditions == derived,
                                    "conditions after the elimination differ")
                        substitution.append((self.index[node["elimination"]["symbol"]], value))
                    else:
                        require(node["outcome"] in REL_SIGNS, "unknown outcome")
                        split = parent["split"]
                        expected = self.condition_set(
                            seen_facts[node["parent"]][:len(parent["conditions"])]
                            + [(self.alg.poly(split["poly"], "split.poly"), node["outcome"])])
                        require(conditions == expected, "conditions != parent's + outcome")
                facts = self.check_facts(node)  # conditions first, then proved facts
                substitutions.append(substitution)
                seen_facts.append(facts)
                status = node["status"]
                counts[status] = counts.get(status, 0) + 1
                kids = children.get(i, [])
                require(status == "split" or not kids, "a cell that is not a split has children")
                require(not false_constant or status == "empty",
                        "a cell with a false condition is not declared empty")
                if status == "split":
                    self.check_split(node, facts, [nodes[c] for c in kids])
                elif status == "empty":
                    self.check_empty(node, facts, false_constant)
                elif status in ("leaf", "excluded"):
                    require(not false_constant, "a kept cell with a false condition")
                    self.check_witness(node, nodes, i)
                    if status == "leaf":
                        self.check_result(node, facts, substitution)
                    else:
                        self.check_excluded(node, substitution)
                else:
                    raise ProofError(f"status {status}: the proof is incomplete")
            except ProofError as err:
                raise ProofError(f"node {node.get('id')}: {err}") from None
            except (KeyError, TypeError, IndexError, AttributeError) as err:
                raise ProofError(f"node {node.get('id')}: malformed ({type(err).__name__}: "
                                 f"{err})") from None
        unused = sorted(set(self.doc.get("programs", {})) - self.used_programs)
        if unused:
            raise ProofError(f"programs: {unused[0]!r} is used by no kept cell")
        return counts

    def check_split(self, node: dict, facts: list, kids: list[dict]) -> None:
        split = node["split"]
        only_fields(split, SPLIT_FIELDS, "split")
        p = self.alg.poly(split["poly"], "split.poly")
        require(not p.is_ground, "split on a constant")
        require(all(isinstance(j, int) and 0 <= j < len(facts) for j in split["facts"]),
                "split facts out of range")
        possible = self.alg.sign_set([facts[j] for j in split["facts"]], p)
        covered = set()
        for rel in split["outcomes"]:
            require(rel in REL_SIGNS, f"split outcome {rel}")
            covered |= REL_SIGNS[rel]
        require(possible <= covered, f"split outcomes {split['outcomes']} miss signs")
        require([k["outcome"] for k in kids] == split["outcomes"], "children != outcomes")

    def check_empty(self, node: dict, facts: list, false_constant: bool) -> None:
        cert = node["certificate"]
        only_fields(cert, CERTIFICATE_FIELDS.get(cert.get("by"), {"by"}), "certificate")
        if cert["by"] == "constant condition":
            require(false_constant, "no condition became a false constant")
        elif cert["by"] == "opposite facts":
            require(len(cert["facts"]) >= 2 and all(
                isinstance(j, int) and 0 <= j < len(facts) for j in cert["facts"]),
                "opposite facts out of range")
            chosen = [facts[j] for j in cert["facts"]]
            require(not self.alg.sign_set(chosen, chosen[0][0]), "the facts are not contradictory")
        else:
            require(cert["by"] == "combination", f"unknown certificate {cert['by']}")
            total, strict = self.combination(facts, cert["terms"])
            require(not total and strict, "the combination is not 0 > 0")

    def point(self, node: dict) -> list:
        values = [None] * len(self.alg.symbols)
        for name, text in node["witness"].items():
            require(name in self.index, f"the witness names an unknown symbol {name}")
            values[self.index[name]] = parse_rational(text, f"witness.{name}")
        require(all(v is not None for v in values), "the witness misses a symbol")
        return values

    def check_witness(self, node: dict, nodes: list, index: int) -> None:
        require("witness" in node, "kept cell without a witness")
        point = self.point(node)
        for text, rel in node["conditions"]:
            value = self.alg.at(self.alg.poly(text, "conditions"), point)
            require(OPS[rel](sign(value)), f"the witness violates {text}")
        k = index
        while nodes[k]["parent"] is not None:  # eliminated symbols hold their values there
            if nodes[k].get("outcome") == "=":
                e = nodes[k]["elimination"]
                v = self.alg.frac(e["value"], "elimination.value")
                require(self.alg.at(v.n, point)
                        == point[self.index[e["symbol"]]] * self.alg.at(v.d, point),
                        "the witness breaks an elimination")
            k = nodes[k]["parent"]

    # ---- claims on a kept cell -------------------------------------------------------
    def instance(self, substitution: list) -> Instance:
        """The shape's rows with the path's eliminations substituted (in order); memoised
        along the tree (a child's rows are its parent's with one more substitution)."""
        return Instance(self.vocab, self.depth, *self.substituted_rows(substitution))

    def substituted_rows(self, substitution: list) -> tuple[list, list]:
        key = tuple((var, id(value)) for var, value in substitution)  # values live in _parsed
        out = self._rows_cache.get(key)
        if out is None:
            if not substitution:
                out = (self.rows_["target"], self.rows_["draft"])
            else:
                var, value = substitution[-1]
                out = tuple([[self.substitute(f, var, value) for f in row] for row in table]
                            for table in self.substituted_rows(substitution[:-1]))
            if len(self._rows_cache) > 20_000:
                self._rows_cache.clear()
            self._rows_cache[key] = out
        return out

    def file_vector(self, result: dict, which: str, part: str) -> dict[str, Frac]:
        """The file's primal (part "variables") or dual (part "rows"), placed by the labels
        of its program (nothing else of the file's program is read)."""
        program = self.doc["programs"][result["program"]]
        labels, values = program[part], result[which]
        require(isinstance(labels, list) and isinstance(values, list)
                and len(labels) == len(values) and len(set(labels)) == len(labels),
                f"{which}: sizes do not match its labels")
        return {lab: self.alg.frac(v, f"result.{which}") for lab, v in zip(labels, values, strict=True)}

    def check_result(self, node: dict, facts: list, substitution: list) -> None:
        result = node["result"]
        inputs, compared = RESULT_FIELDS[self.claim]
        only_fields(result, inputs | compared, "result")
        if "program" in result:
            self.used_programs.add(result["program"])
        inst = self.instance(substitution)
        ar = Arith(self.alg, facts)
        if self.claim in SINGLE_PATH:
            lp = FullLP(ar, inst, 1, "iid")
            laws = {c: (c[0], single_path_law(SINGLE_PATH[self.claim], ar, inst, c[0]))
                    for c, _ in lp.configs}
            require("program" in result and "dual" in result,
                    "no dual solution of the claim's LP in the file")
            x = lp.law_point(laws)
            efficiency = lp.check(facts, x, self.file_vector(result, "dual", "rows"))
            if "primal" in result:  # the file's primal (not used) must be the law's point
                given = self.file_vector(result, "primal", "variables")
                require(set(given) == set(x) and all(given[k].equals(v) for k, v in x.items()),
                        "the file's primal is not the law's LP point")
            self.compare(result, "block_efficiency", efficiency)
            self.compare_continued(result, ar, inst)
            self.compare_at_witness(node, result, efficiency)
        elif self.claim == "l1-optimum":
            self.check_l1(node, result, ar, facts, inst)
        elif self.claim == "gbv-k1-is-bv":
            self.check_gbv_is_bv(result, ar, inst)
        elif self.claim == "gbv-l1-closed-form":
            self.check_gbv_l1(result, ar, facts, inst)

    def compare(self, result: dict, name: str, value: Frac) -> None:
        """A value the file states (ignored by the checks) must be the re-derived one."""
        if name in result:
            require(self.alg.frac(result[name], f"result.{name}").equals(value),
                    f"the file's {name} is not the re-derived one")

    def compare_at_witness(self, node: dict, result: dict, value: Frac) -> None:
        """The file's LP optimum at the witness (if any) must be the re-derived one there."""
        if "witness_optimum" in result:
            point = self.point(node)
            given = parse_rational(result["witness_optimum"], "result.witness_optimum")
            require(self.alg.at(value.n, point) == given * self.alg.at(value.d, point),
                    "the file's witness_optimum is not the re-derived one")

    def compare_continued(self, result: dict, ar: Arith, inst: Instance) -> None:
        """The file's continued law (if any) must be the target law of the first L + 1
        tokens (which it is for the lossless law shown by the rows (1.4))."""
        if "continued_law" not in result:
            return
        target = [inst.path_p(ar, s) for s in product(range(self.vocab), repeat=self.depth + 1)]
        given = result["continued_law"]
        require(len(given) == len(target) and all(
            self.alg.frac(a, "result.continued_law").equals(b)
            for a, b in zip(given, target, strict=True)),
            "the file's continued_law is not the target law")

    def check_gbv_is_bv(self, result: dict, ar: Arith, inst: Instance) -> None:
        """GBV's law at K = 1 from its own definition (selection and skewed rows, sections
        9.1-9.2) equals BV's law against q, configuration by configuration. The skewed rows
        are computed for EVERY key order at every node of the path (all V!^L of them: the
        cell's facts need not decide the keys) and must all be equal; then GBV's law is BV
        against them."""
        lp = FullLP(ar, inst, 1, "iid")
        size = (self.depth + 1) * self.vocab
        combos = math.factorial(self.vocab) ** self.depth
        require(combos <= MAX_KEY_ORDERS, f"gbv-k1-is-bv: {combos} key orders to check (more "
                                          f"than {MAX_KEY_ORDERS})")
        for side in ("left", "right"):
            require(side not in result or (isinstance(result[side], list)
                                           and len(result[side]) == len(lp.configs) * size),
                    f"the file's {side} law has the wrong size")
        for b, (c, _) in enumerate(lp.configs):
            path = c[0]
            bv = bv_law(ar, inst, path, [inst.q(path[:i]) for i in range(self.depth)])
            rows = None
            for choice in product(permutations(range(self.vocab)), repeat=self.depth):
                orders = {path[:i]: list(choice[i]) for i in range(self.depth)}
                require(gbv_selection(c, orders) == path, "GBV selected another path")
                mine = skewed_rows(ar, inst, path, 1, orders)
                if rows is None:
                    rows = mine
                require(all(a.equals(z) for r, s in zip(rows, mine, strict=True)
                            for a, z in zip(r, s, strict=True)),
                        f"GBV's skewed rows at {path} depend on the key order")
            gbv = bv_law(ar, inst, path, rows)  # GBV's law: BV against its skewed rows
            for (d, y), v in bv.items():
                require(v.equals(gbv[(d, y)]), f"GBV's law differs from BV's at {path} {(d, y)}")
                for side, law in (("left", gbv), ("right", bv)):  # [C, K = 1, L + 1, V]
                    if side in result:
                        given = self.alg.frac(result[side][b * size + d * self.vocab + y],
                                              f"result.{side}")
                        require(given.equals(law[(d, y)]),
                                f"the file's {side} law is not the re-derived one")

    def q_inside(self, ar: Arith, q: list[Frac], h: tuple) -> Frac:
        """Q(H) = P(all K drafts in H): i.i.d. q(H)^K; without replacement, the K distinct
        draws in every order, each from q renormalised to the untaken tokens."""
        if self.sampling == "iid":
            return power(ar, ar.total(q[x] for x in h), self.paths)
        return without_replacement(ar, ([q[x] for x in order]
                                        for order in permutations(h, self.paths)))

    def check_l1(self, node: dict, result: dict, ar: Arith, facts: list, inst: Instance
                 ) -> None:
        lp = FullLP(ar, inst, self.paths, self.sampling)
        primal = lp.check(facts, self.file_vector(result, "primal", "variables"),
                          self.file_vector(result, "dual", "rows"))
        self.compare_at_witness(node, result, primal)
        p, q = inst.p(()), inst.q(())
        vocab = self.vocab
        sets = {(), tuple(range(vocab))}
        for y in range(vocab):  # H_y = {x : p(x) q(y) <= p(y) q(x)}: all sublevel sets of p/q
            sets.add(tuple(x for x in range(vocab)
                           if self.alg.decide(facts, p[x] * q[y] - p[y] * q[x], "<=")))
        positive = {x for (x,) in lp.positive}

        def f(h: tuple) -> Frac:
            inside = tuple(x for x in h if x in positive)
            return ar.total(p[x] for x in h) + ar.one - self.q_inside(ar, q, inside)

        best = tuple(result["best"])
        require(best in sets, f"H* = {best} is not a threshold set {sorted(sets)}")
        value = f(best)
        for h in sets:
            require(self.alg.holds(facts, value - f(h), "<="), f"f(H*) <= f({h}) not shown")
        require(primal.equals(ar.one + value), "LP optimum != 1 + p(H*) + 1 - Q(H*)")
        self.compare(result, "closed_form", ar.one + value)
        if "threshold_sets" in result:
            require({tuple(h) for h in result["threshold_sets"]} == sets,
                    "the file's threshold_sets are not the re-derived ones")
        if "configurations" in result:
            require([tuple(c) for c in result["configurations"]]
                    == [tuple(x[0] for x in c) for c, _ in lp.configs],
                    "the file's configurations are not the re-derived ones")

    def check_gbv_l1(self, result: dict, ar: Arith, facts: list, inst: Instance) -> None:
        paths, vocab = self.paths, self.vocab
        p, q = inst.p(()), inst.q(())
        ratio = [ar.divide(p[x], q[x]) if ar.nonzero(q[x]) else ar.zero for x in range(vocab)]
        order = [int(x) for x in result["key_order"]]
        require(sorted(order) == list(range(vocab)), "the key order is not a permutation")
        for a, b in zip(order, order[1:], strict=False):
            require(ar.less(ratio[a], ratio[b]) or (ar.equal(ratio[a], ratio[b]) and a < b),
                    f"key({a}) < key({b}) not shown")
        lp = FullLP(ar, inst, paths, "iid")
        laws = {c: gbv_law(ar, inst, c, paths, {(): order}) for c, _ in lp.configs}
        x = lp.law_point(laws)
        efficiency = lp.check(facts, x, {}, optimal=False)  # rows (1.4): lossless
        closed, cdf = ar.zero, ar.zero
        choices = result.get("choices", [None] * vocab)
        require(len(choices) == vocab, "the file's choices: one per token")
        for t, choice in zip(order, choices, strict=True):
            upper = cdf + q[t]
            r = power(ar, upper, paths) - power(ar, cdf, paths)
            if choice is not None:  # the file's min choice: the chosen side is the smaller
                pick, other = (p[t], r) if choice == "p" else (r, p[t])
                require(choice in ("p", "r") and all(v <= 0 for v in ar.weak(pick - other)),
                        f"min(p({t}), r({t})): the file's choice is not shown")
            closed = closed + ar.minimum(p[t], r)
            cdf = upper
        require((efficiency - ar.one).equals(closed),
                "E[tau] != sum_x min(p(x), F(x)^K - F(x-)^K)")
        self.compare(result, "acceptance", efficiency - ar.one)
        self.compare_continued(result, ar, inst)
        drafted = [t for t in order if ar.nonzero(q[t])]
        require(bool(drafted), "no drafted token")
        top = drafted[-1]
        require(result.get("x_star", top) == top, "the file's x_star is not the re-derived one")
        require(ar.a.decide(facts, q[top], ">"), "q(x*) > 0 not shown")
        for t in order[order.index(top) + 1:]:
            require(q[t].zero(), f"q({t}) = 0 above x* fails")

    def check_excluded(self, node: dict, substitution: list) -> None:
        require(self.claim == "l1-optimum" and self.sampling == "without-replacement",
                "only l1-optimum without replacement excludes cells")
        inst = self.instance(substitution)
        ar = Arith(self.alg, [])
        leaves = product(range(self.vocab), repeat=self.depth)
        positive = sum(1 for x in leaves if not inst.path_q(ar, x).zero())
        require(positive < self.paths, "an excluded cell has enough positive paths")


def single_path_law(verifier: str, ar: Arith, inst: Instance, path: tuple) -> dict:
    if verifier == "token":
        return token_law(ar, inst, path)
    return bv_law(ar, inst, path, [inst.q(path[:i]) for i in range(len(path))])


# ---- refutations ---------------------------------------------------------------------
def check_refutation(doc: dict) -> dict:
    """A refuted single-path claim: at the file's rational instance, the verifier's value
    (its law, computed here) is below the value of BV's law (computed here), which is a
    feasible point of the rebuilt LP; so the verifier's law is not an LP optimum there."""
    claim = doc.get("claim")
    require(claim in SINGLE_PATH, f"refutation: claim {claim!r} has no refutation check")
    only_fields(doc, REFUTATION_FIELDS, "refutation")
    only_fields(doc["counterexample"], COUNTEREXAMPLE_FIELDS, "counterexample")
    only_fields(doc["counterexample"]["instance"], INSTANCE_FIELDS, "counterexample.instance")
    only_fields(doc["counterexample"].get("engine", {}), ENGINE_FIELDS, "counterexample.engine")
    vocab, depth, _, _ = check_shape(claim, doc.get("shape", {}))
    cex = doc["counterexample"]
    alg = Algebra(symbol_names(vocab, depth))
    ar = Arith(alg, [])
    given = cex["instance"]
    require(given.get("vocab_size") == vocab and given.get("depth") == depth,
            "refutation: the instance is not of the shape")
    n = len(nodes_of(vocab, depth))
    rows = {}
    for which in ("target", "draft"):
        table = given[which]
        require(len(table) == n and all(len(r) == vocab for r in table),
                f"refutation: {which} rows of the wrong size")
        rows[which] = [[ar.const(parse_rational(v, f"counterexample.instance.{which}")) for v in r]
                        for r in table]
        for r in rows[which]:
            require(all(v.n.LC >= 0 for v in r if not v.zero()) and ar.total(r).equals(ar.one),
                    f"refutation: a {which} row is not a distribution")
    point = [parse_rational(cex["point"][name], f"counterexample.point.{name}") for name in alg.names]
    for which, letter in (("target", "p"), ("draft", "q")):
        for u, r in zip(nodes_of(vocab, depth), rows[which], strict=True):
            for t in range(vocab - 1):
                name = f"{letter}{''.join(map(str, u))}_{t}"
                require(r[t].equals(ar.const(point[alg.index[name]])),
                        "refutation: the point is not the instance")
    inst = Instance(vocab, depth, rows["target"], rows["draft"])
    lp = FullLP(ar, inst, 1, "iid")

    def value(verifier: str) -> Frac:
        laws = {c: (c[0], single_path_law(verifier, ar, inst, c[0])) for c, _ in lp.configs}
        return lp.check([], lp.law_point(laws), {}, optimal=False)

    mine, better = value(SINGLE_PATH[claim]), value("bv")
    to_q = lambda f: f.n.LC / f.d.LC if f.n else QQ(0)  # noqa: E731
    require(to_q(better) > to_q(mine), "refutation: BV's law does not beat the claim's law")
    engine = cex.get("engine", {})
    if "token_block_efficiency" in engine:
        require(to_q(mine) == parse_rational(engine["token_block_efficiency"],
                                             "counterexample.engine.token_block_efficiency"),
                "refutation: the verifier's block efficiency is not the file's")
    return {"claim": claim, "refuted": True, "verifier_value": str(to_q(mine)),
            "feasible_value": str(to_q(better))}


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def check_document(doc: dict) -> dict:
    require(isinstance(doc, dict), "proof: not a JSON object")
    if "nodes" not in doc and "counterexample" in doc:
        return check_refutation(doc)
    require(doc.get("format") == FORMAT, f"format: unknown format {str(doc.get('format'))[:40]!r} "
            f"(this checker reads {FORMAT}: strict files; an older file is made strict by "
            "speclp.proofs.symbolic.export.strict_document)")
    counts = Checker(doc).check()
    return {"claim": doc["claim"], "shape": doc["shape"], "statement": CLAIMS[doc["claim"]],
            "nodes": counts}


def check_file(path: str) -> dict:
    report = check_document(load(path))
    report["file"] = path
    return report


VERBOSE = False


def main(argv: list[str]) -> int:
    global VERBOSE
    if argv[:1] == ["-v"]:
        VERBOSE, argv = True, argv[1:]
    if not argv:
        print(__doc__.strip().splitlines()[2])
        return 2
    status = 0
    for path in argv:
        try:
            report = check_file(path)
            if report.get("refuted"):
                print(f"OK   {path}: {report['claim']} REFUTED (the claim's law gives "
                      f"{report['verifier_value']}, a feasible LP point {report['feasible_value']})")
            else:
                print(f"OK   {path}: {report['claim']} {report['shape']} {report['nodes']}: "
                      f"{report['statement']}")
        except (ProofError, OSError, ValueError, KeyError, TypeError) as err:
            print(f"FAIL {path}: {err}")
            status = 1
        except RecursionError:  # a JSON nested too deeply for the json module
            print(f"FAIL {path}: the file is nested too deeply")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
