#!/usr/bin/env python
"""Standalone checker of speclp symbolic proofs (depends on sympy only).

    python check.py PROOF.json [PROOF.json ...]     exit 0 when every proof checks

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
                the candidate sets are exactly the sublevel sets of p/q (checked here from
                the facts); Q(H) is computed here from the draft row (i.i.d.: q(H)^K;
                without replacement: sequential draws) and f(H*) <= f(H) for every H.
  gbv-l1        E[tau] of GBV's law = sum_x min(p(x), F(x)^K - F(x-)^K) with F the draft
                CDF in the key order (p/q, x), the order and every min checked from facts;
                lossless; and for the limit K -> inf: q(x*) > 0 and q = 0 above x*.
  law-equality  two laws (exported entry by entry) are equal.
"""

from __future__ import annotations

import json
import sys
from fractions import Fraction
from itertools import permutations

import sympy
from sympy import Poly, Rational, cancel, factor_list, fraction

REL_SIGNS = {">": {1}, ">=": {0, 1}, "=": {0}, "<=": {-1, 0}, "<": {-1}}
FLIP = {">": "<", ">=": "<=", "=": "=", "<=": ">=", "<": ">"}
OPS = {"<": lambda s: s < 0, "<=": lambda s: s <= 0, ">": lambda s: s > 0,
       ">=": lambda s: s >= 0, "==": lambda s: s == 0, "!=": lambda s: s != 0}


class ProofError(Exception):
    pass


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ProofError(message)


class Checker:
    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.symbols = [sympy.Symbol(n, real=True) for n in doc["symbols"]]
        self.by_name = {s.name: s for s in self.symbols}
        self._parsed: dict[str, sympy.Expr] = {}
        self._keys: dict[sympy.Expr, tuple] = {}

    # ---- expressions ---------------------------------------------------------------
    def expr(self, text: str) -> sympy.Expr:
        out = self._parsed.get(text)
        if out is None:
            out = sympy.sympify(text)
            self._parsed[text] = out
        return out

    def poly(self, e: sympy.Expr) -> Poly:
        return Poly(e, *self.symbols, domain="QQ")

    def key(self, e: sympy.Expr) -> tuple[int, tuple]:
        """(sign, normalized polynomial) with e = sign * c * normalized, c > 0."""
        cached = self._keys.get(e)
        if cached is not None:
            return cached
        p = self.poly(e)
        if p.is_zero:
            out = (0, ())
        else:
            _, p = p.clear_denoms()
            _, p = p.primitive()
            s = 1 if p.LC() > 0 else -1
            out = (s, tuple(sorted((s * p).terms())))
        self._keys[e] = out
        return out

    # ---- facts -----------------------------------------------------------------------
    def sign_set(self, facts: list[tuple[sympy.Expr, str]], e: sympy.Expr) -> set[int]:
        """Signs of e allowed by the facts on it (e a polynomial)."""
        s, k = self.key(e)
        if s == 0:
            return {0}
        if not k or all(m == (0,) * len(self.symbols) for m, _ in k):
            value = self.poly(e).LC()
            return {1 if value > 0 else -1}
        possible = {-1, 0, 1}
        for fe, rel in facts:
            fs, fk = self.key(fe)
            if fk == k:
                possible &= REL_SIGNS[rel if fs == s else FLIP[rel]]
        return possible

    def signs_of(self, facts: list, e: sympy.Expr, weak: bool = False) -> set[int]:
        """Possible signs of a rational expression from the signs of its irreducible
        factors (weak: zero sets ignored, for min / max choices)."""
        num, den = fraction(cancel(sympy.together(e)))
        total = {1}
        for part, in_den in ((num, False), (den, True)):
            constant, factors = factor_list(part, *self.symbols)
            total = {x * (1 if constant > 0 else -1 if constant < 0 else 0) for x in total}
            for f, exponent in factors:
                s = self.sign_set(facts, f)
                if in_den or weak:
                    s = (s - {0}) or ({1} if weak else set())
                    require(bool(s), f"denominator factor {f} may vanish")
                total = {x * y**exponent for x in total for y in s}
        return total

    def holds(self, facts: list, e: sympy.Expr, rel: str) -> bool:
        if rel == "==":
            return cancel(e) == 0
        return all(OPS[rel](s) for s in self.signs_of(facts, e))

    def oriented(self, fact: tuple[sympy.Expr, str]) -> sympy.Expr:
        e, rel = fact
        return e if rel in (">", ">=", "=") else -e

    def combination(self, facts: list, terms: list) -> tuple[sympy.Expr, bool]:
        total = sympy.Integer(0)
        strict = False
        for coef, members in terms:
            c = Rational(coef)
            require(c >= 0, f"negative coefficient {coef}")
            prod = sympy.Integer(1)
            for i in members:
                prod = prod * self.oriented(facts[i])
            total = total + c * prod
            if c > 0 and all(facts[i][1] in (">", "<") for i in members):
                strict = True
        return total, strict

    def check_facts(self, node: dict) -> list[tuple[sympy.Expr, str]]:
        facts: list[tuple[sympy.Expr, str]] = []
        for i, f in enumerate(node["facts"]):
            e, rel = self.expr(f["poly"]), f["rel"]
            by = f["by"]
            if by == "combination":
                require(all(j < i for _, m in f["terms"] for j in m), "fact refers forward")
                total, strict = self.combination(facts, f["terms"])
                require(self.poly(f["sign"] * e - total).is_zero,
                        f"fact {i}: {f['sign']}*({e}) != its combination")
                want = {">": ">", ">=": ">=", "<": ">", "<=": ">="}[rel]
                require((f["sign"] > 0) == (rel in (">", ">=")), f"fact {i}: sign mismatch")
                require(strict or want == ">=", f"fact {i}: strictness not shown")
            elif by == "quotient":
                product, prel = facts[f["fact"]]
                constant, factors = factor_list(product, *self.symbols)
                sk = self.key(e)[1]
                found = [(g, m) for g, m in factors if self.key(g)[1] == sk]
                require(len(found) == 1 and found[0][1] % 2 == 1, f"fact {i}: not a factor")
                others = {1 if constant > 0 else -1}
                sub = [facts[j] for j in f["others"]]
                for g, m in factors:
                    if self.key(g)[1] == sk:
                        continue
                    s = self.sign_set(sub, g)
                    require(len(s) == 1 and 0 not in s, f"fact {i}: factor {g} sign unknown")
                    others = {x * next(iter(s)) ** m for x in others}
                (r,) = others
                s_e = self.key(e)[0] * self.key(found[0][0])[0]
                derived = prel if r * s_e > 0 else FLIP[prel]
                require(REL_SIGNS[derived] <= REL_SIGNS[rel], f"fact {i}: quotient gives {derived}")
            else:
                require(by == "condition", f"fact {i}: unknown proof {by}")
            facts.append((e, rel))
        return facts

    # ---- the tree --------------------------------------------------------------------
    def condition_set(self, conditions: list) -> set[tuple]:
        out = set()
        for e, rel in conditions:
            s, k = self.key(e)
            out.add((k, rel if s > 0 else FLIP[rel]))
        return out

    def root_conditions(self) -> set[tuple]:
        out = []
        for which in ("target", "draft"):
            for row in self.doc["rows"][which]:
                for entry in row:
                    e = self.expr(entry)
                    if not e.is_number:
                        out.append((e, ">="))
        return self.condition_set(out)

    def eliminated_conditions(self, parent: dict, parent_facts: list, elim: dict
                              ) -> tuple[set[tuple], bool]:
        """The child's conditions derived from the parent's (and whether one became a
        false constant)."""
        sym = self.by_name[elim["symbol"]]
        g = self.expr(elim["poly"])
        value = self.expr(elim["value"])
        p = self.poly(g)
        require(p.degree(sym) == 1, "elimination: not linear in the symbol")
        coefficient = p.diff(sym).as_expr()
        rest = (p - Poly(coefficient * sym, *self.symbols, domain="QQ")).as_expr()
        require(cancel(value + rest / coefficient) == 0, "elimination: wrong value")
        constant, factors = factor_list(coefficient, *self.symbols)
        signs = {}
        for f, _ in factors:
            s = self.sign_set(parent_facts, f)
            require(len(s) == 1 and 0 not in s, f"elimination: coefficient factor {f} sign unknown")
            signs[self.key(f)[1]] = next(iter(s)) * self.key(f)[0]
        out: list[tuple[sympy.Expr, str]] = []
        false_constant = False
        for text, rel in parent["conditions"]:
            e = self.expr(text).subs(sym, value)
            num, den = fraction(cancel(sympy.together(e)))
            c_den, den_factors = factor_list(den, *self.symbols)
            s_den = 1 if c_den > 0 else -1
            for f, m in den_factors:
                require(self.key(f)[1] in signs, f"elimination: denominator factor {f}")
                s_den *= signs[self.key(f)[1]] ** m
            if num.is_number:
                if not OPS[{"=": "==", **{r: r for r in OPS}}.get(rel, rel)](
                        sympy.sign(num) * s_den):
                    false_constant = True
                continue
            out.append((num, rel if s_den > 0 else FLIP[rel]))
        for f, _ in factors:
            out.append((f, ">" if signs[self.key(f)[1]] > 0 else "<"))
        return self.condition_set(out), false_constant

    def check(self) -> dict:
        doc = self.doc
        nodes = doc["nodes"]
        seen_facts: list[list] = []
        rows_at: list[dict] = []
        counts: dict[str, int] = {}
        children: dict[int, list[int]] = {}
        for i, node in enumerate(nodes):
            if node["parent"] is not None:
                children.setdefault(node["parent"], []).append(i)
        for i, node in enumerate(nodes):
            where = f"node {node['id']}"
            try:
                facts = self.check_facts(node)
                conditions = self.condition_set([(self.expr(e), r) for e, r in node["conditions"]])
                require(all(f["by"] == "condition" for f in node["facts"][:len(node["conditions"])])
                        and [[f["poly"], f["rel"]] for f in node["facts"][:len(node["conditions"])]]
                        == node["conditions"], "conditions are not the first facts")
                parent_index = node["parent"]
                false_constant = False
                if parent_index is None:
                    require(conditions == self.root_conditions(), "root is not the domain")
                    substitution: list[tuple] = []
                else:
                    parent = nodes[parent_index]
                    substitution = list(rows_at[parent_index]["substitution"])
                    if node["outcome"] == "=":
                        derived, false_constant = self.eliminated_conditions(
                            parent, seen_facts[parent_index], node["elimination"])
                        if not false_constant:
                            require(conditions == derived, "conditions after elimination differ")
                        substitution.append((self.by_name[node["elimination"]["symbol"]],
                                             self.expr(node["elimination"]["value"])))
                    else:
                        split = parent["split"]
                        expected = self.condition_set(
                            [(self.expr(e), r) for e, r in parent["conditions"]]
                            + [(self.expr(split["poly"]), node["outcome"])])
                        require(conditions == expected, "conditions = parent's + outcome fails")
                rows_at.append({"substitution": substitution})
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
                        self.check_excluded(node, facts, substitution)
                else:
                    raise ProofError(f"status {status}: the proof is incomplete")
            except ProofError as err:
                raise ProofError(f"{where}: {err}") from None
        return counts

    def check_split(self, node: dict, facts: list, kids: list[dict]) -> None:
        split = node["split"]
        e = self.expr(split["poly"])
        listed = [facts[j] for j in split["facts"]]
        possible = self.sign_set(listed, e)
        covered = set()
        for rel in split["outcomes"]:
            covered |= REL_SIGNS[rel]
        require(possible <= covered, f"split on {e}: outcomes {split['outcomes']} miss signs")
        require([k["outcome"] for k in kids] == split["outcomes"], "children do not match outcomes")

    def check_empty(self, node: dict, facts: list, false_constant: bool) -> None:
        cert = node["certificate"]
        if cert["by"] == "constant condition":
            require(false_constant, "no condition became a false constant")
        elif cert["by"] == "opposite facts":
            sets = [facts[j] for j in cert["facts"]]
            require(not self.sign_set(sets, sets[0][0]), "facts are not contradictory")
        else:
            require(cert["by"] == "combination", f"unknown certificate {cert['by']}")
            total, strict = self.combination(facts, cert["terms"])
            require(self.poly(total).is_zero and strict, "combination is not 0 > 0")

    def point(self, node: dict) -> dict:
        return {self.by_name[n]: Rational(v) for n, v in node["witness"].items()}

    def check_witness(self, node: dict, nodes: list, index: int) -> None:
        require("witness" in node, "kept cell without a witness")
        point = self.point(node)
        for text, rel in node["conditions"]:
            value = self.expr(text).subs(point)
            require(OPS[{"=": "=="}.get(rel, rel)](sympy.sign(value)),
                    f"witness violates {text} {rel} 0")
        k = index
        while nodes[k]["parent"] is not None:  # eliminated symbols: their values hold
            if nodes[k].get("outcome") == "=":
                e = nodes[k]["elimination"]
                require(self.expr(e["value"]).subs(point) == point[self.by_name[e["symbol"]]],
                        "witness breaks an elimination")
            k = nodes[k]["parent"]

    # ---- claims on a kept cell ---------------------------------------------------------
    def rows(self, substitution: list) -> dict[str, list[list[sympy.Expr]]]:
        out = {}
        for which in ("target", "draft"):
            table = []
            for row in self.doc["rows"][which]:
                entries = []
                for text in row:
                    e = self.expr(text)
                    for sym, value in substitution:
                        e = e.subs(sym, value)
                    entries.append(e)
                table.append(entries)
            out[which] = table
        return out

    def path_probabilities(self, rows: list[list[sympy.Expr]], length: int) -> list[sympy.Expr]:
        vocab = len(rows[0])
        probs = [sympy.Integer(1)]
        offset = 0
        for d in range(length):
            block = rows[offset: offset + vocab**d]
            probs = [pr * block[i][t] for i, pr in enumerate(probs) for t in range(vocab)]
            offset += vocab**d
        return probs

    def check_lossless(self, result: dict, rows: dict) -> None:
        target = self.path_probabilities(rows["target"], self.doc["shape"]["depth"] + 1)
        continued = [self.expr(t) for t in result["continued_law"]]
        require(len(continued) == len(target), "continued law length")
        for a, b in zip(continued, target, strict=True):
            require(cancel(a - b) == 0, "not lossless")

    def check_lp(self, result: dict, facts: list) -> tuple[sympy.Expr, sympy.Expr]:
        program = self.doc["programs"][result["program"]]
        exprs = [self.expr(t) for t in program["exprs"]]
        x = [self.expr(t) for t in result["primal"]]
        y = [self.expr(t) for t in result["dual"]]
        n, m_eq = program["num_vars"], len(program["rhs_eq"])
        require(len(x) == n and len(y) == m_eq, "LP point sizes")
        activity = [sympy.Integer(0)] * m_eq
        reduced = [exprs[r] for r in program["objective"]]
        for r, c, ref in program["eq"]:
            activity[r] = activity[r] + exprs[ref] * x[c]
            reduced[c] = reduced[c] - exprs[ref] * y[r]
        for r in range(m_eq):
            require(cancel(activity[r] - exprs[program["rhs_eq"][r]]) == 0, f"row {r}: A x != b")
        dropped = sum((exprs[ref] * x[c] for c, ref in program["dropped"]), sympy.Integer(0))
        require(cancel(dropped - exprs[program["dropped_rhs"]]) == 0, "dropped row: A x != b")
        for j in range(n):
            if x[j] != 0:
                require(self.holds(facts, x[j], ">="), f"x[{j}] >= 0 not shown")
            if reduced[j] != 0:
                require(self.holds(facts, reduced[j], "<="), f"reduced cost {j} <= 0 not shown")
        constant = exprs[program["constant"]]
        primal = constant + sum((exprs[program["objective"][j]] * x[j] for j in range(n)),
                                sympy.Integer(0))
        dual = constant + sum((exprs[program["rhs_eq"][i]] * y[i] for i in range(m_eq)),
                              sympy.Integer(0))
        require(cancel(primal - dual) == 0, "c^T x != b^T y")
        return primal, dual

    def check_result(self, node: dict, facts: list, substitution: list) -> None:
        result = node["result"]
        kind = result["kind"]
        require(result.get("holds", True), "the claim fails on this cell")
        rows = self.rows(substitution)
        if kind == "lp-law":
            primal, _ = self.check_lp(result, facts)
            require(cancel(primal - self.expr(result["block_efficiency"])) == 0,
                    "c^T x != the law's block efficiency")
            self.check_lossless(result, rows)
        elif kind == "l1-optimum":
            self.check_l1(result, facts, rows)
        elif kind == "gbv-l1":
            self.check_gbv_l1(result, facts, rows)
        elif kind == "law-equality":
            for a, b in zip(result["left"], result["right"], strict=True):
                require(cancel(self.expr(a) - self.expr(b)) == 0, "laws differ")
        else:
            raise ProofError(f"unknown result kind {kind}")

    def q_inside(self, q: list, h: set, paths: int, sampling: str) -> sympy.Expr:
        """Q(H) = P(all K drafts in H)."""
        if sampling == "iid":
            return sum((q[x] for x in h), sympy.Integer(0)) ** paths
        total = sympy.Integer(0)
        for order in permutations(sorted(h), paths):
            term, used = sympy.Integer(1), sympy.Integer(0)
            for x in order:
                term = term * q[x] / (1 - used)
                used = used + q[x]
            total = total + term
        return total

    def check_l1(self, result: dict, facts: list, rows: dict) -> None:
        shape = self.doc["shape"]
        paths, sampling = shape["paths"], shape["draft_sampling"]
        primal, _ = self.check_lp(result, facts)
        p, q = rows["target"][0], rows["draft"][0]
        vocab = len(p)
        sets = {tuple(h) for h in result["threshold_sets"]}
        expected = {(), tuple(range(vocab))}
        expected.add(tuple(x for x in range(vocab) if self.decide(facts, p[x], "==")))
        for y in range(vocab):
            if self.decide(facts, q[y], "!="):
                expected.add(tuple(x for x in range(vocab)
                                   if self.decide(facts, p[x] * q[y] - p[y] * q[x], "<=")))
        require(sets == expected, f"threshold sets {sorted(sets)} != {sorted(expected)}")

        def f(h: tuple) -> sympy.Expr:
            return sum((p[x] for x in h), sympy.Integer(0)) + 1 - self.q_inside(q, set(h), paths,
                                                                            sampling)

        best = tuple(result["best"])
        for h in sets:
            require(self.holds(facts, f(best) - f(h), "<="), f"f(H*) <= f({h}) not shown")
        require(cancel(primal - 1 - f(best)) == 0, "LP optimum != 1 + p(H*) + 1 - Q(H*)")

    def decide(self, facts: list, e: sympy.Expr, op: str) -> bool:
        if cancel(e) == 0:
            return OPS[op](0)
        signs = self.signs_of(facts, e)
        truth = {OPS[op](s) for s in signs}
        require(len(truth) == 1, f"sign of {e} ({op} 0) not determined by the facts")
        return truth.pop()

    def check_gbv_l1(self, result: dict, facts: list, rows: dict) -> None:
        paths = self.doc["shape"]["paths"]
        p, q = rows["target"][0], rows["draft"][0]
        vocab = len(p)
        ratio = [p[x] / q[x] if self.decide(facts, q[x], "!=") else sympy.Integer(0)
                 for x in range(vocab)]
        order = result["key_order"]
        require(sorted(order) == list(range(vocab)), "key order is not a permutation")
        for a, b in zip(order, order[1:], strict=False):
            below = self.decide(facts, ratio[a] - ratio[b], "<") or (
                self.decide(facts, ratio[a] - ratio[b], "==") and a < b)
            require(below, f"key({a}) < key({b}) not shown")
        closed, cdf = sympy.Integer(0), sympy.Integer(0)
        for x, choice in zip(order, result["choices"], strict=True):
            r = (cdf + q[x]) ** paths - cdf**paths
            pick, other = (p[x], r) if choice == "p" else (r, p[x])
            require(all(s <= 0 for s in self.signs_of(facts, pick - other, weak=True))
                    or cancel(pick - other) == 0, f"min(p({x}), r({x})) choice not shown")
            closed = closed + pick
            cdf = cdf + q[x]
        require(cancel(self.expr(result["acceptance"]) - closed) == 0,
                "E[tau] != sum_x min(p(x), F(x)^K - F(x-)^K)")
        self.check_lossless(result, rows)
        top = result["x_star"]
        require(self.decide(facts, q[top], ">"), "q(x*) > 0 not shown")
        for x in order[order.index(top) + 1:]:
            require(cancel(q[x]) == 0, f"q({x}) = 0 above x* fails")

    def check_excluded(self, node: dict, facts: list, substitution: list) -> None:
        shape = self.doc["shape"]
        require(shape["draft_sampling"] == "without-replacement", "only w/o replacement excludes")
        q = self.path_probabilities(self.rows(substitution)["draft"], shape["depth"])
        positive = sum(1 for v in q if cancel(v) != 0)
        require(positive < shape["paths"], "excluded cell has enough positive paths")


def check_file(path: str) -> dict:
    with open(path) as handle:
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

_ = Fraction  # (kept for readers: witness values are exact fractions)
