#!/usr/bin/env python
"""Standalone checker of speclp symbolic proofs (depends on sympy only).

    python check.py PROOF.json[.gz] [...]     exit 0 when every proof checks

A proof (written by `speclp prove`) is a decision tree of cells of the instances of one
shape (V, L): every cell is a set of sign conditions on polynomials in the row symbols.
This script re-derives, with sympy alone and without trusting the producer:
  * coverage: the root's conditions are "every row entry >= 0" (the whole domain); at a
    split the children's outcomes cover every sign the split polynomial can take (signs
    excluded by listed facts of the node); a child's conditions are the parent's plus its
    outcome, or for an equality the parent's with the eliminated symbol substituted (the
    coefficient of the symbol has a known nonzero sign on the parent);
  * every derived fact: "s * poly = sum coef * prod of earlier facts" expanded exactly
    (all coef >= 0; strict when a term with coef > 0 has strict factors only), or a
    quotient of a product condition by factors of known sign;
  * every dropped cell: its contradiction (0 = a nonnegative combination with a strict
    term, or two facts on one polynomial with no common sign, or a condition that became
    a false constant);
  * every kept cell: its witness point satisfies the conditions (exactly), and the claim:
    identities simplify to 0 (sympy cancel), inequalities follow from the facts factor by
    factor (each irreducible factor of numerator and denominator has a sign given by a
    fact), LP points satisfy A x = b, x >= 0, reduced costs <= 0 and c^T x = b^T y.
Claim statements checked on a kept cell (the "result.kind" of the proof):
  lp-law        the verifier's law x (the output law, as LP variables) is optimal for the
                full LP: feasibility, a dual y with reduced costs <= 0, equal objectives;
                its block efficiency is c^T x; lossless: the law continued by target
                sampling equals the target's path probabilities (computed here from rows).
  l1-optimum    the LP point x and dual y are optimal with value 1 + p(H*) + 1 - Q(H*);
                the candidate sets are exactly the sublevel sets of p/q: the empty set,
                everything and H_y = {x : p(x) q(y) <= p(y) q(x)} for every y (membership
                checked here from the facts); Q(H) is computed here from the draft row
                (i.i.d.: q(H)^K; without replacement: sequential draws renormalised) and
                f(H*) <= f(H) for every H.
  gbv-l1        E[tau] of GBV's law = sum_x min(p(x), F(x)^K - F(x-)^K) with F the draft
                CDF in the key order (p/q, x), the order and every min checked from facts;
                lossless; and for the limit K -> inf: q(x*) > 0 and q = 0 above x*.
  law-equality  two laws (exported entry by entry) are equal.
"""

from __future__ import annotations

import gzip
import json
import sys
from itertools import permutations

import sympy
from sympy import QQ
from sympy.polys.rings import ring

REL_SIGNS = {">": {1}, ">=": {0, 1}, "=": {0}, "<=": {-1, 0}, "<": {-1}}
FLIP = {">": "<", ">=": "<=", "=": "=", "<=": ">=", "<": ">"}
OPS = {"<": lambda s: s < 0, "<=": lambda s: s <= 0, ">": lambda s: s > 0,
       ">=": lambda s: s >= 0, "==": lambda s: s == 0, "!=": lambda s: s != 0}


class ProofError(Exception):
    pass


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ProofError(message)


def sign(x) -> int:
    return (x > 0) - (x < 0)


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


class Checker:
    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.symbols = [sympy.Symbol(n, real=True) for n in doc["symbols"]]
        self.R, *self.gens = ring(self.symbols, QQ)
        self.index = {n: i for i, n in enumerate(doc["symbols"])}
        self.one = Frac(self.R.one, self.R.one)
        self.zero_ = Frac(self.R.zero, self.R.one)
        self._parsed: dict[str, Frac] = {}
        self._keys: dict = {}
        self._factors: dict = {}

    # ---- expressions -----------------------------------------------------------------
    def frac(self, text: str) -> Frac:
        out = self._parsed.get(text)
        if out is None:
            num, den = sympy.fraction(sympy.together(sympy.sympify(text)))
            out = Frac(self.R.from_expr(num) if num.free_symbols else self.R(num),
                       self.R.from_expr(den) if den.free_symbols else self.R(den))
            self._parsed[text] = out
        return out

    def poly(self, text: str):
        f = self.frac(text)
        require(f.d.is_ground, f"{text} is not a polynomial")
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

    # ---- facts -----------------------------------------------------------------------
    def sign_set(self, facts: list, p) -> set[int]:
        """Signs of the polynomial p allowed by the facts on it."""
        s, k = self.key(p)
        if s == 0:
            return {0}
        if p.is_ground:
            return {sign(p.LC)}
        possible = {-1, 0, 1}
        for fp, rel in facts:
            fs, fk = self.key(fp)
            if fk == k:
                possible &= REL_SIGNS[rel if fs == s else FLIP[rel]]
        return possible

    def signs_of(self, facts: list, f: Frac, weak: bool = False) -> set[int]:
        """Possible signs of f from the signs of the irreducible factors of its numerator
        and denominator (weak: zero sets ignored, for min / max choices)."""
        if f.zero():
            return {0}
        total = {1}
        for part, in_den in ((f.n, False), (f.d, True)):
            constant, factors = self.factor(part)
            total = {x * sign(constant) for x in total}
            for g, exponent in factors:
                s = self.sign_set(facts, g)
                if in_den or weak:
                    s = (s - {0}) or ({1} if weak else set())
                    require(bool(s), f"denominator factor {g.as_expr()} may vanish")
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

    def divide(self, facts: list, a: Frac, b: Frac) -> Frac:
        """a / b, the divisor shown nonzero on the cell by the facts."""
        require(0 not in self.signs_of(facts, b), f"divisor {b.n.as_expr()} may vanish")
        return Frac(a.n * b.d, a.d * b.n)

    def oriented(self, fact: tuple) -> object:
        p, rel = fact
        return p if rel in (">", ">=", "=") else -p

    def combination(self, facts: list, terms: list) -> tuple[object, bool]:
        total = self.R.zero
        strict = False
        for coef, members in terms:
            c = QQ(*[int(x) for x in coef.split("/")]) if "/" in coef else QQ(int(coef))
            require(c >= 0, f"negative coefficient {coef}")
            prod = self.R.one
            for i in members:
                prod = prod * self.oriented(facts[i])
            total = total + prod * c
            if c > 0 and all(facts[i][1] in (">", "<") for i in members):
                strict = True
        return total, strict

    def check_facts(self, node: dict) -> list[tuple]:
        facts: list[tuple] = []
        for i, f in enumerate(node["facts"]):
            p, rel = self.poly(f["poly"]), f["rel"]
            by = f["by"]
            if by == "combination":
                require(all(j < i for _, m in f["terms"] for j in m), "fact refers forward")
                total, strict = self.combination(facts, f["terms"])
                require(not (p * f["sign"] - total), f"fact {i}: s * poly != its combination")
                require((f["sign"] > 0) == (rel in (">", ">=")), f"fact {i}: sign mismatch")
                require(strict or rel in (">=", "<="), f"fact {i}: strictness not shown")
            elif by == "quotient":
                require(f["fact"] < i and all(j < i for j in f["others"]), "fact refers forward")
                product, prel = facts[f["fact"]]
                constant, factors = self.factor(product)
                sk = self.key(p)[1]
                found = [(g, m) for g, m in factors if self.key(g)[1] == sk]
                require(len(found) == 1 and found[0][1] % 2 == 1, f"fact {i}: not a factor")
                others = {sign(constant)}
                sub = [facts[j] for j in f["others"]]
                for g, m in factors:
                    if self.key(g)[1] == sk:
                        continue
                    s = self.sign_set(sub, g)
                    require(len(s) == 1 and 0 not in s, f"fact {i}: a factor's sign is unknown")
                    others = {x * next(iter(s)) ** m for x in others}
                (r,) = others
                s_e = self.key(p)[0] * self.key(found[0][0])[0]
                derived = prel if r * s_e > 0 else FLIP[prel]
                require(REL_SIGNS[derived] <= REL_SIGNS[rel], f"fact {i}: quotient gives {derived}")
            else:
                require(by == "condition", f"fact {i}: unknown proof {by}")
            facts.append((p, rel))
        return facts

    # ---- the tree --------------------------------------------------------------------
    def condition_set(self, conditions: list) -> set[tuple]:
        out = set()
        for p, rel in conditions:
            s, k = self.key(p)
            out.add((k, rel if s > 0 else FLIP[rel]))
        return out

    def root_conditions(self) -> set[tuple]:
        out = []
        for which in ("target", "draft"):
            for row in self.doc["rows"][which]:
                for entry in row:
                    p = self.poly(entry)
                    if not p.is_ground:
                        out.append((p, ">="))
        return self.condition_set(out)

    def substitute(self, f: Frac, var: int, value: Frac) -> Frac:
        """f with symbol var replaced by value."""
        def poly(p) -> Frac:
            groups: dict[int, object] = {}
            for monom, coeff in p.items():
                e = monom[var]
                rest = list(monom)
                rest[var] = 0
                groups[e] = groups.get(e, self.R.zero) + self.R({tuple(rest): coeff})
            top = max(groups) if groups else 0
            num = self.R.zero
            for e, c in groups.items():
                num = num + c * (value.n**e if e else self.R.one) * value.d ** (top - e)
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
        false constant)."""
        var = self.index[elim["symbol"]]
        g = self.poly(elim["poly"])
        value = self.frac(elim["value"])
        require(g.degree(self.gens[var]) == 1, "elimination: not linear in the symbol")
        coefficient = g.diff(self.gens[var])
        rest = g - coefficient * self.gens[var]
        require(not (value.n * coefficient + rest * value.d), "elimination: wrong value")
        constant, factors = self.factor(coefficient)
        signs = {}
        for f, _ in factors:
            s = self.sign_set(parent_facts, f)
            require(len(s) == 1 and 0 not in s, "elimination: a coefficient factor's sign is "
                                                "unknown")
            signs[self.key(f)[1]] = next(iter(s)) * self.key(f)[0]
        out: list[tuple] = []
        false_constant = False
        for text, rel in parent["conditions"]:
            h = self.substitute(Frac(self.poly(text), self.R.one), var, value)
            c_den, den_factors = self.factor(h.d)
            s_den = sign(c_den)
            for f, m in den_factors:
                require(self.key(f)[1] in signs, "elimination: unexpected denominator factor")
                s_den *= (signs[self.key(f)[1]] * self.key(f)[0]) ** m
            if h.n.is_ground:
                if not OPS[{"=": "=="}.get(rel, rel)](sign(h.n.LC if h.n else 0) * s_den):
                    false_constant = True
                continue
            out.append((h.n, rel if s_den > 0 else FLIP[rel]))
        for f, _ in factors:
            out.append((f, ">" if signs[self.key(f)[1]] * self.key(f)[0] > 0 else "<"))
        return self.condition_set(out), false_constant

    def check(self) -> dict:
        nodes = self.doc["nodes"]
        seen_facts: list[list] = []
        substitutions: list[list] = []
        counts: dict[str, int] = {}
        children: dict[int, list[int]] = {}
        for i, node in enumerate(nodes):
            if node["parent"] is not None:
                require(node["parent"] < i, "a node precedes its parent")
                children.setdefault(node["parent"], []).append(i)
        for i, node in enumerate(nodes):
            try:
                facts = self.check_facts(node)
                n_cond = len(node["conditions"])
                require([[f["poly"], f["rel"]] for f in node["facts"][:n_cond]]
                        == node["conditions"] and all(f["by"] == "condition"
                                                      for f in node["facts"][:n_cond]),
                        "the conditions are not the first facts")
                conditions = self.condition_set(facts[:n_cond])
                false_constant = False
                if node["parent"] is None:
                    require(conditions == self.root_conditions(), "the root is not the domain")
                    substitution: list = []
                else:
                    parent = nodes[node["parent"]]
                    substitution = list(substitutions[node["parent"]])
                    if node["outcome"] == "=":
                        derived, false_constant = self.eliminated_conditions(
                            parent, seen_facts[node["parent"]], node["elimination"])
                        if not false_constant:
                            require(conditions == derived, "conditions after the elimination differ")
                        substitution.append((self.index[node["elimination"]["symbol"]],
                                             self.frac(node["elimination"]["value"])))
                    else:
                        split = parent["split"]
                        expected = self.condition_set(
                            seen_facts[node["parent"]][:len(parent["conditions"])]
                            + [(self.poly(split["poly"]), node["outcome"])])
                        require(conditions == expected, "conditions != parent's + outcome")
                substitutions.append(substitution)
                seen_facts.append(facts)
                status = node["status"]
                counts[status] = counts.get(status, 0) + 1
                if status == "split":
                    self.check_split(node, facts, [nodes[c] for c in children.get(i, [])])
                elif status == "empty":
                    self.check_empty(node, facts, false_constant)
                elif status in ("leaf", "excluded"):
                    self.check_witness(node, nodes, i)
                    if status == "leaf":
                        self.check_result(node, facts, substitution)
                    else:
                        self.check_excluded(node, substitution)
                else:
                    raise ProofError(f"status {status}: the proof is incomplete")
            except ProofError as err:
                raise ProofError(f"node {node['id']}: {err}") from None
        return counts

    def check_split(self, node: dict, facts: list, kids: list[dict]) -> None:
        split = node["split"]
        p = self.poly(split["poly"])
        possible = self.sign_set([facts[j] for j in split["facts"]], p)
        covered = set()
        for rel in split["outcomes"]:
            covered |= REL_SIGNS[rel]
        require(possible <= covered, f"split outcomes {split['outcomes']} miss signs")
        require([k["outcome"] for k in kids] == split["outcomes"], "children != outcomes")

    def check_empty(self, node: dict, facts: list, false_constant: bool) -> None:
        cert = node["certificate"]
        if cert["by"] == "constant condition":
            require(false_constant, "no condition became a false constant")
        elif cert["by"] == "opposite facts":
            chosen = [facts[j] for j in cert["facts"]]
            require(not self.sign_set(chosen, chosen[0][0]), "the facts are not contradictory")
        else:
            require(cert["by"] == "combination", f"unknown certificate {cert['by']}")
            total, strict = self.combination(facts, cert["terms"])
            require(not total and strict, "the combination is not 0 > 0")

    def point(self, node: dict) -> list:
        values = [None] * len(self.symbols)
        for name, text in node["witness"].items():
            num, _, den = text.partition("/")
            values[self.index[name]] = QQ(int(num), int(den or 1))
        require(all(v is not None for v in values), "the witness misses a symbol")
        return values

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

    def check_witness(self, node: dict, nodes: list, index: int) -> None:
        require("witness" in node, "kept cell without a witness")
        point = self.point(node)
        for text, rel in node["conditions"]:
            value = self.at(self.poly(text), point)
            require(OPS[{"=": "=="}.get(rel, rel)](sign(value)), f"the witness violates {text}")
        k = index
        while nodes[k]["parent"] is not None:  # eliminated symbols hold their values there
            if nodes[k].get("outcome") == "=":
                e = nodes[k]["elimination"]
                v = self.frac(e["value"])
                require(self.at(v.n, point) == point[self.index[e["symbol"]]] * self.at(v.d, point),
                        "the witness breaks an elimination")
            k = nodes[k]["parent"]

    # ---- claims on a kept cell -------------------------------------------------------
    def rows(self, substitution: list) -> dict[str, list[list[Frac]]]:
        out = {}
        for which in ("target", "draft"):
            table = []
            for row in self.doc["rows"][which]:
                entries = []
                for text in row:
                    f = self.frac(text)
                    for var, value in substitution:
                        f = self.substitute(f, var, value)
                    entries.append(f)
                table.append(entries)
            out[which] = table
        return out

    def path_probabilities(self, rows: list[list[Frac]], length: int) -> list[Frac]:
        vocab = len(rows[0])
        probs = [self.one]
        offset = 0
        for d in range(length):
            block = rows[offset: offset + vocab**d]
            probs = [pr * block[i][t] for i, pr in enumerate(probs) for t in range(vocab)]
            offset += vocab**d
        return probs

    def check_lossless(self, result: dict, rows: dict) -> None:
        target = self.path_probabilities(rows["target"], self.doc["shape"]["depth"] + 1)
        continued = [self.frac(t) for t in result["continued_law"]]
        require(len(continued) == len(target), "continued law length")
        for a, b in zip(continued, target, strict=True):
            require(a.equals(b), "not lossless")

    def check_lp(self, result: dict, facts: list) -> Frac:
        program = self.doc["programs"][result["program"]]
        exprs = [self.frac(t) for t in program["exprs"]]
        x = [self.frac(t) for t in result["primal"]]
        y = [self.frac(t) for t in result["dual"]]
        n, m = program["num_vars"], len(program["rhs_eq"])
        require(len(x) == n and len(y) == m, "LP point sizes")
        activity = [self.zero_] * m
        reduced = [exprs[r] for r in program["objective"]]
        for r, c, ref in program["eq"]:
            if not x[c].zero():
                activity[r] = activity[r] + exprs[ref] * x[c]
            if not y[r].zero():
                reduced[c] = reduced[c] - exprs[ref] * y[r]
        for r in range(m):
            require(activity[r].equals(exprs[program["rhs_eq"][r]]), f"row {r}: A x != b")
        dropped = self.zero_
        for c, ref in program["dropped"]:
            dropped = dropped + exprs[ref] * x[c]
        require(dropped.equals(exprs[program["dropped_rhs"]]), "dropped row: A x != b")
        for j in range(n):
            require(x[j].zero() or self.holds(facts, x[j], ">="), f"x[{j}] >= 0 not shown")
            require(reduced[j].zero() or self.holds(facts, reduced[j], "<="),
                    f"reduced cost {j} <= 0 not shown")
        primal = exprs[program["constant"]]
        for j in range(n):
            if not x[j].zero():
                primal = primal + exprs[program["objective"][j]] * x[j]
        dual = exprs[program["constant"]]
        for i in range(m):
            if not y[i].zero():
                dual = dual + exprs[program["rhs_eq"][i]] * y[i]
        require(primal.equals(dual), "c^T x != b^T y")
        return primal

    def check_result(self, node: dict, facts: list, substitution: list) -> None:
        result = node["result"]
        require(result.get("holds", True), "the claim fails on this cell")
        kind = result["kind"]
        rows = self.rows(substitution)
        if kind == "lp-law":
            primal = self.check_lp(result, facts)
            require(primal.equals(self.frac(result["block_efficiency"])),
                    "c^T x != the law's block efficiency")
            self.check_lossless(result, rows)
        elif kind == "l1-optimum":
            self.check_l1(result, facts, rows)
        elif kind == "gbv-l1":
            self.check_gbv_l1(result, facts, rows)
        elif kind == "law-equality":
            for a, b in zip(result["left"], result["right"], strict=True):
                require(self.frac(a).equals(self.frac(b)), "the laws differ")
        else:
            raise ProofError(f"unknown result kind {kind}")

    def q_inside(self, facts: list, q: list[Frac], h: tuple, paths: int, sampling: str) -> Frac:
        """Q(H) = P(all K drafts in H): i.i.d. q(H)^K; without replacement, the K distinct
        draws in every order, each from q renormalised to the untaken tokens."""
        if sampling == "iid":
            total = self.zero_
            for x in h:
                total = total + q[x]
            out = self.one
            for _ in range(paths):
                out = out * total
            return out
        out = self.zero_
        for order in permutations(h, paths):
            term, used = self.one, self.zero_
            for x in order:
                term = self.divide(facts, term * q[x], self.one - used) if not used.zero() \
                    else term * q[x]
                used = used + q[x]
            out = out + term
        return out

    def check_l1(self, result: dict, facts: list, rows: dict) -> None:
        shape = self.doc["shape"]
        paths, sampling = shape["paths"], shape["draft_sampling"]
        primal = self.check_lp(result, facts)
        p, q = rows["target"][0], rows["draft"][0]
        vocab = len(p)
        sets = {tuple(h) for h in result["threshold_sets"]}
        expected = {(), tuple(range(vocab))}
        for y in range(vocab):  # H_y = {x : p(x) q(y) <= p(y) q(x)}: all sublevel sets of p/q
            expected.add(tuple(x for x in range(vocab)
                               if self.decide(facts, p[x] * q[y] - p[y] * q[x], "<=")))
        require(sets == expected, f"threshold sets {sorted(sets)} != {sorted(expected)}")
        positive = [x for x in range(vocab) if not q[x].zero()]
        require(sampling == "iid" or len(positive) >= paths, "too few drafted tokens")

        def f(h: tuple) -> Frac:
            total = self.one + self.one
            for x in h:
                total = total + p[x]
            inside = tuple(x for x in h if x in positive)
            return total - self.one - self.q_inside(facts, q, inside, paths, sampling)

        best = f(tuple(result["best"]))
        for h in sets:
            require(self.holds(facts, best - f(h), "<="), f"f(H*) <= f({h}) not shown")
        require(primal.equals(self.one + best), "LP optimum != 1 + p(H*) + 1 - Q(H*)")

    def check_gbv_l1(self, result: dict, facts: list, rows: dict) -> None:
        paths = self.doc["shape"]["paths"]
        p, q = rows["target"][0], rows["draft"][0]
        vocab = len(p)
        ratio = [self.divide(facts, p[x], q[x]) if self.decide(facts, q[x], "!=")
                 else self.zero_ for x in range(vocab)]
        order = result["key_order"]
        require(sorted(order) == list(range(vocab)), "the key order is not a permutation")
        for a, b in zip(order, order[1:], strict=False):
            below = self.decide(facts, ratio[a] - ratio[b], "<") or (
                self.decide(facts, ratio[a] - ratio[b], "==") and a < b)
            require(below, f"key({a}) < key({b}) not shown")
        closed, cdf = self.zero_, self.zero_
        for x, choice in zip(order, result["choices"], strict=True):
            upper = cdf + q[x]
            r_up, r_low = self.one, self.one
            for _ in range(paths):
                r_up, r_low = r_up * upper, r_low * cdf
            r = r_up - r_low
            pick, other = (p[x], r) if choice == "p" else (r, p[x])
            diff = pick - other
            require(diff.zero() or all(s <= 0 for s in self.signs_of(facts, diff, weak=True)),
                    f"min(p({x}), r({x})): the choice is not shown")
            closed = closed + pick
            cdf = upper
        require(self.frac(result["acceptance"]).equals(closed),
                "E[tau] != sum_x min(p(x), F(x)^K - F(x-)^K)")
        self.check_lossless(result, rows)
        top = result["x_star"]
        require(self.decide(facts, q[top], ">"), "q(x*) > 0 not shown")
        for x in order[order.index(top) + 1:]:
            require(q[x].zero(), f"q({x}) = 0 above x* fails")

    def check_excluded(self, node: dict, substitution: list) -> None:
        shape = self.doc["shape"]
        require(shape["draft_sampling"] == "without-replacement", "only w/o replacement excludes")
        q = self.path_probabilities(self.rows(substitution)["draft"], shape["depth"])
        positive = sum(1 for v in q if not v.zero())
        require(positive < shape["paths"], "an excluded cell has enough positive paths")


def check_file(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        doc = json.load(handle)
    require(doc.get("format") == "speclp-symbolic-proof/1", f"{path}: unknown format")
    counts = Checker(doc).check()
    return {"file": path, "claim": doc["claim"], "shape": doc["shape"], "nodes": counts}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2])
        return 2
    status = 0
    for path in argv:
        try:
            report = check_file(path)
            print(f"OK   {path}: {report['claim']} {report['shape']} {report['nodes']}")
        except (ProofError, OSError, ValueError, KeyError) as err:
            print(f"FAIL {path}: {err}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

