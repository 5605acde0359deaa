"""Markdown / LaTeX rendering of an exported proof (the JSON document of export.py)."""

from __future__ import annotations

import re

import sympy

from ..certificates.check import parse_expression

MAX_LISTED = 400  # kept cells rendered in full; the rest are summarised


def _symbol_latex(name: str) -> str:
    """p10_0 -> p_{0|1,0} (p(0 | prefix 1,0)); p_0 -> p_{0}."""
    match = re.fullmatch(r"([pq])(\d*)_(\d+)", name)
    if not match:
        return name
    letter, prefix, token = match.groups()
    return f"{letter}_{{{token}|{','.join(prefix)}}}" if prefix else f"{letter}_{{{token}}}"


class Renderer:
    def __init__(self, doc: dict) -> None:
        self.doc = doc
        self.symbols = [sympy.Symbol(n, real=True) for n in doc["symbols"]]
        self.names = {s: _symbol_latex(s.name) for s in self.symbols}
        self.by_name = {s.name: s for s in self.symbols}
        self._cache: dict[str, str] = {}

    def tex(self, text: str) -> str:
        out = self._cache.get(text)
        if out is None:
            out = sympy.latex(parse_expression(text, "expression", self), symbol_names=self.names)
            self._cache[text] = out
        return out

    # the builder of parse_expression (the checker's parser: the text is parsed, never
    # evaluated): sympy expressions in the document's symbols
    def integer(self, value: int) -> sympy.Expr:
        return sympy.Integer(value)

    def rational(self, num: int, den: int) -> sympy.Expr:
        return sympy.Rational(num, den)

    def symbol(self, name: str, field: str) -> sympy.Expr:
        if name not in self.by_name:
            raise ValueError(f"{field}: symbol {name!r} is not a symbol of the proof")
        return self.by_name[name]

    def add(self, args: list, field: str) -> sympy.Expr:
        return sympy.Add(*args)

    def mul(self, args: list, field: str) -> sympy.Expr:
        return sympy.Mul(*args)

    def power(self, base: sympy.Expr, exponent: int, field: str) -> sympy.Expr:
        return sympy.Pow(base, sympy.Integer(exponent))

    def condition(self, poly: str, rel: str) -> str:
        op = {">": ">", ">=": r"\ge", "<": "<", "<=": r"\le", "=": "="}[rel]
        return f"${self.tex(poly)} {op} 0$"


def render(doc: dict) -> str:
    r = Renderer(doc)
    shape = doc["shape"]
    s = doc["summary"]
    lines = [f"# Proof: `{doc['claim']}` on V = {shape['vocab']}, L = {shape['depth']}"
             f" (K = {shape['paths']}, {shape['draft_sampling']} drafts)", "",
             f"**Statement.** {doc['statement']}", "",
             f"**Result.** {'PROVED' if s['holds'] and s['complete'] else 'NOT PROVED'}: "
             f"{s['kept']} kept cells (the claim holds on each), {s['empty']} empty cells "
             f"dropped with a certificate, {s['excluded']} cells outside the claim's domain, "
             f"{s['failing']} failing, {s['unresolved']} unresolved; {s['splits']} splits; "
             f"{s['seconds']} s.", "",
             f"Regenerate: `{doc['generated_by']} --out DIR`. Re-check (sympy only): "
             "`python proofs/certificates/check.py FILE.json`.", "",
             "## Symbols and rows", "",
             "Row entries are $p_{t|u} = p(t \\mid u)$ (target) and $q_{t|u}$ (draft) for the "
             "prefix $u$ (root: $p_{t}$); the last entry of every row is 1 minus the others. "
             "The domain is every entry $\\ge 0$.", "",
             "| row | entries |", "|---|---|"]
    for which in ("target", "draft"):
        for u, row in enumerate(doc["rows"][which]):
            lines.append(f"| {which} {u} | " + ", ".join(f"${r.tex(e)}$" for e in row) + " |")
    lines += ["", "## How to read a cell", "",
              "A cell is the set of instances satisfying its conditions (and, where listed, "
              "with the eliminated symbols given by their values). The cells are the leaves of "
              "a decision tree: each split lists outcomes covering every sign of one "
              "polynomial. On a kept cell every quantity below is one rational function, the "
              "identities cancel to 0, and every inequality follows factor by factor from the "
              "facts (a fact is a condition or a nonnegative combination of products of "
              "earlier facts, written out in the JSON).", ""]
    nodes = doc["nodes"]
    kept = [n for n in nodes if n["status"] == "leaf"]
    lines.append(f"## Kept cells ({len(kept)})")
    lines.append("")
    for n in kept[:MAX_LISTED]:
        lines += _cell(r, doc, n)
    if len(kept) > MAX_LISTED:
        lines.append(f"... {len(kept) - MAX_LISTED} more kept cells in the JSON.")
    for status, title in (("empty", "Empty cells (dropped with a certificate)"),
                          ("excluded", "Cells outside the claim's domain")):
        group = [n for n in nodes if n["status"] == status]
        if not group:
            continue
        lines += ["", f"## {title} ({len(group)})", ""]
        for n in group[:MAX_LISTED]:
            conds = [c for c in n["conditions"] if c not in nodes[0]["conditions"]]
            how = n.get("certificate", {}).get("by", n.get("result", {}).get("excluded", ""))
            lines.append(f"- cell {n['id']}: " + ", ".join(r.condition(*c) for c in conds[:8])
                         + f" — {how}")
    return "\n".join(lines) + "\n"


def _cell(r: Renderer, doc: dict, n: dict) -> list[str]:
    root = set(map(tuple, doc["nodes"][0]["conditions"]))
    conds = [c for c in n["conditions"] if tuple(c) not in root]
    out = [f"### Cell {n['id']}", ""]
    eliminated = _eliminations(doc["nodes"], n)
    if eliminated:
        out.append("Eliminated: " + ", ".join(
            f"${_symbol_latex(name)} = {r.tex(value)}$" for name, value in eliminated))
    out.append("Conditions: " + (", ".join(r.condition(*c) for c in conds) or "none beyond the "
                                 "domain"))
    if "witness" in n:
        shown = {k: v for k, v in n["witness"].items() if v != "0"}
        out.append("Witness: " + ", ".join(f"${_symbol_latex(k)} = {v}$"
                                           for k, v in list(shown.items())[:12]))
    res = n.get("result", {})
    kind = res.get("kind")
    if kind == "lp-law":
        out.append(f"Block efficiency of the law: ${r.tex(res['block_efficiency'])}$ "
                   "= LP objective $c^T x$ = dual objective $b^T y$.")
    if kind == "l1-optimum":
        out.append(f"Threshold sets: {res['threshold_sets']}, minimiser $H^* = "
                   f"{set(res['best']) or '{}'}$; optimum ${r.tex(res['closed_form'])}$.")
    if kind == "gbv-l1":
        out.append(f"Key order (ascending): {res['key_order']}, min choices "
                   f"{res['choices']}; $E[\\tau] = {r.tex(res['acceptance'])}$; "
                   f"limit token $x^* = {res['x_star']}$.")
    if "program" in res:
        program = doc["programs"][res["program"]]
        primal = [f"{program['variables'][j]} $= {r.tex(v)}$"
                  for j, v in enumerate(res["primal"]) if v != "Integer(0)"]
        dual = [f"{program['rows'][i]} $= {r.tex(v)}$"
                for i, v in enumerate(res["dual"]) if v != "Integer(0)"]
        out.append("Primal (nonzero): " + "; ".join(primal))
        out.append("Dual (nonzero): " + "; ".join(dual))
    out.append("")
    return out


def _eliminations(nodes: list[dict], n: dict) -> list[tuple[str, str]]:
    out = []
    k = n
    while k["parent"] is not None:
        if k.get("outcome") == "=":
            out.append((k["elimination"]["symbol"], k["elimination"]["value"]))
        k = nodes[k["parent"]]
    return list(reversed(out))
