"""Exported proofs: a JSON document (sympy srepr) and a Markdown/LaTeX rendering.

JSON layout of the producer's full document (what the Markdown renders; the file written is
strict_document of it, "format": "speclp-symbolic-proof/2", with only the fields the checker
reads, see proofs/certificates/check.py PROOF_FIELDS ... RESULT_FIELDS):
    claim, statement, shape {vocab, depth, paths, draft_sampling}, symbols [names],
    rows {target, draft}: [N][V] srepr of every entry in the symbols,
    nodes: the decision tree, parents before children; each node
        id, parent (index or null), status (split | leaf | empty | excluded | unresolved),
        outcome (rel of the split polynomial of the parent that made this child),
        elimination (for an "=" child): symbol, value, poly, coefficient_factors [[poly, sign]],
        conditions [[poly, rel]] (all of the node's conditions, in its free symbols),
        facts: [fact]: conditions first (same order), then derived facts
            {"poly", "rel", "by": "condition"} |
            {"poly", "rel", "by": "combination", "sign": s, "terms": [[coef, [i, ...]]]}:
                s * poly = sum coef * prod oriented(facts[i]), oriented(f) = +-f.poly >= 0 |
            {"poly", "rel", "by": "quotient", "fact": i, "others": [j, ...]}
        split (split nodes): poly, outcomes [rel], facts [indices of facts on poly],
        certificate (empty nodes): {"by": "combination", "terms"} (0 = sum with a strict
            term) | {"by": "opposite facts", "facts": [i, j]} | {"by": "constant condition"},
        witness (leaves): {symbol: "a/b"} for every symbol (eliminated ones computed),
        result (leaves): claim-specific data, see speclp.proofs.certificates.check,
    summary: counts, seconds, holds.
Every polynomial is the srepr of a sympy expression in the symbols (sympy.Symbol(name,
real=True)).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from fractions import Fraction
from typing import Any

import sympy

from ...rationals import fraction_text
from ..certificates import check as ck  # the checker's field tables (what a strict file holds)
from .algebra import RationalFunction, Ring, poly_text, to_fraction
from .cells import Cell
from .explore import Node, Tree
from .lp_side import reduced_costs

EXPORT_CACHE = 50_000  # texts of polynomials remembered by an Exporter
FORMAT = "speclp-symbolic-proof/2"  # strict_document writes it; /1 had the full document


class Exporter:
    """Turns a decision tree into the JSON document (expressions as srepr strings)."""

    def __init__(self, ring: Ring) -> None:
        self.ring = ring
        self._cache: dict[str, str] = {}

    def poly(self, p: Any) -> str:
        key = poly_text(p)
        out = self._cache.get(key)
        if out is None:
            out = sympy.srepr(self.ring.to_sympy(p))
            if len(self._cache) >= EXPORT_CACHE:  # a pure cache: bounded for long proofs
                self._cache.clear()
            self._cache[key] = out
        return out

    def value(self, v: Any) -> str:
        if isinstance(v, RationalFunction):
            if v.den.is_one():
                return self.poly(v.num)
            return sympy.srepr(v.to_sympy())
        if isinstance(v, int | Fraction):
            return sympy.srepr(sympy.Rational(Fraction(v).numerator, Fraction(v).denominator))
        f = to_fraction(v)  # an fmpq (never its str: flint's text of an object leaks)
        return sympy.srepr(sympy.Rational(f.numerator, f.denominator))


def _fraction_text(x: Any) -> str:
    return fraction_text(to_fraction(x))


def _needed_facts(cell: Cell, roots: set[int]) -> list[int]:
    """Derived facts in roots and everything their proofs use (closure), sorted."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        fid = stack.pop()
        if fid in seen:
            continue
        seen.add(fid)
        fact = cell.facts[fid]
        if fact.kind != "derived" or fact.proof is None:
            continue
        proof = fact.proof
        if proof["by"] == "combination":
            used = {proof["facts"][i] for prod in proof["combination"].products for i in prod}
            stack.extend(used)
        elif proof["by"] == "quotient":
            stack.append(proof["fact"])
            stack.extend(proof["others"])
    return sorted(seen)


def factor_facts(cell: Cell, values: list[Any]) -> set[int]:
    """Facts giving the signs of every irreducible factor of the values (for the checker,
    which factors each expression and looks its factors up)."""
    out: set[int] = set()
    ring = cell.ring
    for v in values:
        if not isinstance(v, RationalFunction) or v.is_constant():
            continue
        for part in (v.num, v.den):
            _, factors = ring.factor(part)
            for g, _ in factors:
                key = poly_text(g)
                if key not in cell.sign_cache:
                    with cell.active():
                        cell.signs(g)
                out.update(cell.sign_cache[key][1])
                out.update(cell.by_key.get(key, []))
    return out


def export_facts(ex: Exporter, cell: Cell, extra: set[int]) -> tuple[list[dict], dict[int, int]]:
    """The node's facts: all conditions, then the derived facts needed (closure of extra)."""
    conditions = cell.conditions()
    derived = [f for f in _needed_facts(cell, set(extra)) if f not in set(conditions)]
    order = conditions + derived
    index = {fid: i for i, fid in enumerate(order)}
    out = []
    for fid in order:
        fact = cell.facts[fid]
        entry: dict[str, Any] = {"poly": ex.poly(fact.poly), "rel": fact.rel}
        if fact.kind != "derived":
            entry["by"] = "condition"
        elif fact.proof["by"] == "combination":
            proof = fact.proof
            combo = proof["combination"]
            entry.update({"by": "combination", "sign": proof["target_sign"], "terms": [
                [_fraction_text(c), [index[proof["facts"][i]] for i in prod]]
                for c, prod in zip(combo.coefficients, combo.products, strict=True)]})
        else:
            proof = fact.proof
            entry.update({"by": "quotient", "fact": index[proof["fact"]],
                          "others": [index[j] for j in proof["others"]]})
        out.append(entry)
    return out, index


def node_document(ex: Exporter, tree: Tree, k: int, result_export: Any) -> dict:
    """One node of the decision tree (see the module docstring)."""
    node: Node = tree.nodes[k]
    cell = node.cell
    doc: dict[str, Any] = {"id": cell.ident, "parent": node.parent, "status": node.status}
    if node.parent is not None:
        parent = tree.nodes[node.parent]
        number = parent.children.index(k)
        doc["outcome"] = parent.split.outcomes[number]
        if doc["outcome"] == "=":
            e = cell.eliminations[-1]
            doc["elimination"] = {
                "symbol": ex.ring.names[e.var], "value": ex.value(e.value),
                "poly": ex.poly(e.poly),
                "coefficient_factors": [[ex.poly(f["poly"]), f["sign"]]
                                        for f in e.coefficient_facts]}
    extra: set[int] = set()
    result_doc = None
    if node.status == "split":
        extra |= set(node.split_facts)
        for child in node.children:  # the sign facts of every elimination coefficient factor
            kid = tree.nodes[child].cell
            if len(kid.eliminations) > len(cell.eliminations):
                for f in kid.eliminations[-1].coefficient_facts:
                    extra |= set(f["facts"])
    if node.status == "empty" and node.certificate:
        cert = node.certificate
        if cert["by"] == "combination":
            extra |= set(cert["facts"])
        elif cert["by"] == "opposite facts":
            extra |= set(cert["facts"])
            for fid in cert["facts"]:
                extra |= set(cell.sign_cache.get(poly_text(cell.facts[fid].poly), ((), ()))[1])
    if node.status == "leaf" and node.result is not None:
        result_doc, sign_values = result_export(ex, cell, node.result)
        extra |= factor_facts(cell, sign_values)
        # every fact a sign decision of the claim's computation used (the laws' min, max and
        # divisions): the checker re-derives the laws and decides the same signs
        extra |= set(cell.used)
    facts, index = export_facts(ex, cell, extra)
    n_conditions = len(cell.conditions())
    doc["conditions"] = [[f["poly"], f["rel"]] for f in facts[:n_conditions]]
    doc["facts"] = facts
    if node.status == "split":
        doc["split"] = {"poly": ex.poly(node.split.poly), "outcomes": list(node.split.outcomes),
                        "why": node.split.why, "asked_at": node.split.where,
                        "facts": [index[f] for f in node.split_facts if f in index]}
    if node.status == "empty":
        doc["certificate"] = _certificate(node.certificate, index)
    if node.status in ("leaf", "excluded") or (node.status == "unresolved" and cell.samples):
        if cell.samples:
            doc["witness"] = {name: _fraction_text(v) for name, v in
                              zip(ex.ring.names, cell.witness, strict=True)}
    if result_doc is not None:
        doc["result"] = result_doc
    if node.reason:
        doc["reason"] = node.reason
    return doc


def _certificate(cert: dict | None, index: dict[int, int]) -> dict:
    if cert is None:
        return {"by": "none"}
    if cert["by"] == "combination":
        combo = cert["combination"]
        return {"by": "combination", "terms": [
            [_fraction_text(c), [index[cert["facts"][i]] for i in prod]]
            for c, prod in zip(combo.coefficients, combo.products, strict=True)]}
    if cert["by"] == "opposite facts":
        return {"by": "opposite facts", "facts": [index[f] for f in cert["facts"]]}
    return {"by": "constant condition"}


def program_document(ex: Exporter, lp: Any) -> dict:
    """The LP (eq rows only: the full LP has no <= rows) with its exact table as srepr."""
    if lp.num_ub:
        raise ValueError("program_document: <= rows are not exported")
    dropped = lp.meta.get("dropped_eq")
    if dropped is None or dropped.count != 1:
        raise ValueError("program_document: expects exactly one dropped marginal row")
    used = sorted(set(lp.eq.refs.tolist()) | set(lp.eq.rhs_refs.tolist())
                  | set(lp.objective_refs.tolist()) | {lp.constant_ref}
                  | set(dropped.refs.tolist()) | set(dropped.rhs_refs.tolist()))
    position = {r: i for i, r in enumerate(used)}
    return {
        "num_vars": int(lp.num_vars),
        "eq": [[int(r), int(c), position[int(f)]] for r, c, f in
               zip(lp.eq.rows.tolist(), lp.eq.cols.tolist(), lp.eq.refs.tolist(), strict=True)],
        "rhs_eq": [position[int(f)] for f in lp.eq.rhs_refs.tolist()],
        "objective": [position[int(f)] for f in lp.objective_refs.tolist()],
        "constant": position[int(lp.constant_ref)],
        "dropped": [[int(c), position[int(f)]] for c, f in
                    zip(dropped.cols.tolist(), dropped.refs.tolist(), strict=True)],
        "dropped_rhs": position[int(dropped.rhs_refs[0])],
        "exprs": [ex.value(lp.exact_table[r]) for r in used],
        "variables": [lp.variable_label(j) for j in range(lp.num_vars)],
        "rows": [lp.eq_label(i) for i in range(lp.num_eq)],
    }


def result_document(ex: Exporter, programs: dict[str, dict], cell: Cell, result: Any,
                    claim: str) -> tuple[dict, list]:
    """(the leaf's result for the checker, the values whose signs the checker decides)."""
    doc: dict[str, Any] = {"holds": not result.failures,
                           "failures": [name for name, _ in result.failures]}
    signs: list[Any] = []
    if result.excluded:
        return {"excluded": result.excluded}, signs
    if result.lp is not None:
        program = program_document(ex, result.lp["program"])
        digest = hashlib.sha1(json.dumps(program, sort_keys=True).encode()).hexdigest()[:16]
        programs.setdefault(digest, program)
        x, y = result.lp["primal"], result.lp["dual"]
        doc.update({"program": digest, "primal": [ex.value(v) for v in x],
                    "dual": [ex.value(v) for v in y],
                    "witness_optimum": _fraction_text(result.lp["witness_optimum"])})
        with cell.active():
            signs += list(x) + reduced_costs(result.lp["program"], y)
    if claim in ("bv-optimal", "token-optimal"):
        name = next(k for k in result.values if k.endswith("block efficiency"))
        doc.update({"kind": "lp-law", "block_efficiency": ex.value(result.values[name]),
                    "continued_law": [ex.value(v) for v in result.extra["continued_law"]]})
    elif claim == "l1-optimum":
        doc.update({"kind": "l1-optimum",
                    "threshold_sets": [list(h) for h in result.extra["threshold_sets"]],
                    "best": list(result.extra["best"]),
                    "configurations": [list(c) for c in result.extra["configurations"]],
                    "closed_form": ex.value(result.values["1 + p(H*) + 1 - Q(H*)"])})
        signs += [v for _, v, _ in result.inequalities]
        model = cell.model()
        vocab = model.vocab_size
        p = [model.target[0, t] for t in range(vocab)]
        q = [model.draft[0, t] for t in range(vocab)]
        signs += p + q + [p[a] * q[b] - p[b] * q[a] for a in range(vocab) for b in range(vocab)]
        sizes = range(1, vocab) if result.extra.get("draft_sampling") == "without-replacement" \
            else ()
        for size in sizes:  # 1 - q(S): the renormalisations of drafts without replacement
            for chosen in itertools.combinations(range(vocab), size):
                signs.append(1 - sum((q[x] for x in chosen), 0))
    elif claim == "gbv-l1-closed-form":
        order = result.extra["key_order"]
        doc.update({"kind": "gbv-l1", "key_order": list(order),
                    "choices": result.extra["choices"], "x_star": int(result.extra["x_star"]),
                    "acceptance": ex.value(result.extra["acceptance"]),
                    "continued_law": [ex.value(v) for v in result.extra["continued_law"]]})
        model = cell.model()
        vocab = model.vocab_size
        p = [model.target[0, t] for t in range(vocab)]
        q = [model.draft[0, t] for t in range(vocab)]
        with cell.active():
            ratio = [p[x] / q[x] if q[x] != 0 else 0 for x in range(vocab)]
        signs += q + [ratio[a] - ratio[b] for a, b in zip(order, order[1:], strict=False)]
        below = 0
        for x in order:
            r = (below + q[x]) ** result.extra.get("paths", 1) - below ** result.extra.get(
                "paths", 1)
            signs.append(p[x] - r)
            below = below + q[x]
    elif claim == "gbv-k1-is-bv":
        doc.update({"kind": "law-equality",
                    "left": [ex.value(v) for v in result.extra["left"]],
                    "right": [ex.value(v) for v in result.extra["right"]]})
    return doc, [v for v in signs if isinstance(v, RationalFunction)]


def strict_document(document: dict) -> dict:
    """The document reduced to what the standalone checker reads (issue 27: strict files).

    Applied wherever a proof is written (`speclp prove --out`, ship.py), and to a document of
    an older producer afterwards: a proof document (format /1 or /2) becomes format /2 with
    only the checker's fields (its tables PROOF_FIELDS, NODE_FIELDS, RESULT_FIELDS, ...; the
    statement, summary, LP matrices, split reasons, failures, ... stay in the Markdown); a
    refutation keeps its claim, shape, instance, point and the engine's token value. Nothing
    is recomputed: a field is kept or dropped, and the result is a new document."""
    def keep(obj: dict, allowed: set) -> dict:
        return {k: copy.deepcopy(v) for k, v in obj.items() if k in allowed}

    if "nodes" not in document:  # a refutation
        out = keep(document, ck.REFUTATION_FIELDS)
        ce = keep(document["counterexample"], ck.COUNTEREXAMPLE_FIELDS)
        ce["instance"] = keep(ce["instance"], ck.INSTANCE_FIELDS)
        if "engine" in ce:
            ce["engine"] = keep(ce["engine"], ck.ENGINE_FIELDS)
        out["counterexample"] = ce
        out["shape"] = keep(out["shape"], ck.SHAPE_FIELDS)
        return out
    out = keep(document, ck.PROOF_FIELDS)
    out["format"] = ck.FORMAT
    out["shape"] = keep(document["shape"], ck.SHAPE_FIELDS)
    inputs, compared = ck.RESULT_FIELDS[document["claim"]]
    nodes, used = [], set()
    for node in document["nodes"]:
        status = node["status"]
        kept = keep(node, ck.NODE_FIELDS | ck.STATUS_FIELDS.get(status, set()))
        if "elimination" in kept:
            kept["elimination"] = keep(kept["elimination"], ck.ELIMINATION_FIELDS)
        if "split" in kept:
            kept["split"] = keep(kept["split"], ck.SPLIT_FIELDS)
        kept["facts"] = [keep(f, ck.FACT_FIELDS.get(f.get("by"), {"poly", "rel", "by"}))
                         for f in node.get("facts", [])]
        if "certificate" in kept:
            kept["certificate"] = keep(kept["certificate"],
                                       ck.CERTIFICATE_FIELDS.get(kept["certificate"].get("by"),
                                                                 {"by"}))
        if "result" in kept:
            if kept["result"] is None:
                del kept["result"]
            else:
                kept["result"] = keep(kept["result"], inputs | compared)
                if "program" in kept["result"]:
                    used.add(kept["result"]["program"])
        nodes.append(kept)
    out["nodes"] = nodes
    programs = document.get("programs") or {}
    if programs or "programs" in document:
        out["programs"] = {key: keep(programs[key], ck.PROGRAM_FIELDS)
                           for key in programs if key in used}
    return out
