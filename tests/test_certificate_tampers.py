"""Tampered copies of the shipped proofs: the standalone checker must reject every one and
say what failed (issue 17, part 2).

Each kind below changes one thing in a shipped proof (proofs/certificates/*.json.gz, the
small ones) or in the shipped refutation, and names the message the checker must give.
The untampered files pass (asserted once per source file here, and for every shipped
proof in tests/test_symbolic.py), so a rejection is caused by the tamper.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
from fractions import Fraction

import pytest
import sympy
from helpers_proofs import (
    CERTIFICATES,
    CHECKER,
    combination_negative,
    dual_changed,
    first,
    first_combination,
    leaves,
    load_module,
    root_condition_dropped,
    set_field,
    set_leaf,
    split_outcomes,
    strict,
    witness_outside,
)
from speclp.lp.instance import dirichlet_instance, ties_instance
from speclp.verifiers.exact import exact_result

BV = "bv-optimal-V2-L1"
L1 = "l1-optimum-V2-L1-K2"
L1K3 = "l1-optimum-V2-L1-K3"
L1WO = "l1-optimum-V2-L1-K2-without-replacement"
GBV = "gbv-l1-closed-form-V2-L1-K2"
GBV3 = "gbv-l1-closed-form-V3-L1-K1"
REFUTED = "refuted/token-optimal-V2-L2"


@functools.lru_cache(maxsize=1)
def checker():
    return load_module("speclp_proof_checker_tampers", CHECKER)


@functools.cache
def _load(stem: str) -> str:
    if stem.startswith("refuted/"):
        return (CERTIFICATES / f"{stem}.json").read_text()
    with gzip.open(CERTIFICATES / f"{stem}.json.gz", "rt") as handle:
        return handle.read()


def load(stem: str) -> dict:
    return json.loads(_load(stem))


def srepr(text: str) -> str:
    """srepr of an expression in the proof's symbols (real symbols, as the files write)."""
    expr = sympy.sympify(text)
    expr = expr.subs({s: sympy.Symbol(str(s), real=True) for s in expr.free_symbols})
    return sympy.srepr(expr)


def program(doc: dict, leaf: dict) -> dict:
    return doc["programs"][leaf["result"]["program"]]


# ---- the tampers: name -> (source proof, change, message the checker must give) ----------
def extra_condition(doc):
    """An unproved fact marked 'by: condition' after the real conditions declares the root
    empty (the issue's forgery of the refuted token-optimal claim)."""
    root = doc["nodes"][0]
    poly = root["conditions"][0][0]
    root["facts"].append({"poly": poly, "rel": "<", "by": "condition"})
    root["status"] = "empty"
    del root["split"]
    root["certificate"] = {"by": "opposite facts", "facts": [0, len(root["facts"]) - 1]}
    doc["nodes"] = doc["nodes"][:1]


def extra_condition_in_leaf(doc):
    leaf = leaves(doc)[0]
    leaf["facts"].append({"poly": leaf["conditions"][0][0], "rel": ">", "by": "condition"})


def shape_vocab_token_dropped(doc):
    """V = 3 rows with the last token dropped from every row."""
    for which in ("target", "draft"):
        doc["rows"][which] = [row[:-1] for row in doc["rows"][which]]


def empty_lp(doc):
    """Every cell's LP replaced by an empty program (the issue's 'BE = LP optimum = 100')."""
    for key in doc["programs"]:
        doc["programs"][key] = {"variables": [], "rows": []}
    for leaf in leaves(doc):
        leaf["result"]["primal"], leaf["result"]["dual"] = [], []
        if "block_efficiency" in leaf["result"]:
            leaf["result"]["block_efficiency"] = "Integer(100)"


def empty_lp_l1(doc):
    empty_lp(doc)
    for leaf in leaves(doc):
        leaf["result"]["closed_form"] = "Integer(100)"


def laws_set_to_seven(doc):
    """Both sides of the law equality set to 7."""
    for leaf in leaves(doc):
        n = len(leaf["result"]["left"])
        leaf["result"]["left"] = ["Integer(7)"] * n
        leaf["result"]["right"] = ["Integer(7)"] * n


def three_threshold_sets(doc) -> dict:
    """The first kept cell with three threshold sets."""
    return leaves(doc, lambda n: len(n["result"]["threshold_sets"]) == 3)[0]


def threshold_sets_changed(doc):
    three_threshold_sets(doc)["result"]["threshold_sets"] = [[], [0, 1]]


def zero_elimination(doc) -> dict:
    """The first kept '=' cell whose elimination sets its symbol to 0."""
    return first(doc, "leaf", lambda n: n.get("outcome") == "="
                 and n["elimination"]["value"] == "Integer(0)")


def elimination_value(doc):
    """An '=' cell's value changed (p = 1 instead of p = 0): {p = 0} left uncovered."""
    zero_elimination(doc)["elimination"]["value"] = "Integer(1)"


def elimination_polynomial(doc):
    """The elimination of a different polynomial than the parent's split (value consistent)."""
    node = zero_elimination(doc)
    symbol = node["elimination"]["symbol"]
    node["elimination"]["poly"] = srepr(f"{symbol} - 1")
    node["elimination"]["value"] = "Integer(1)"


def elimination_symbol(doc):
    node = first(doc, "leaf", lambda n: n.get("outcome") == "=")
    others = [s for s in doc["symbols"] if s != node["elimination"]["symbol"]]
    node["elimination"]["symbol"] = others[-1]


def elimination_reintroduces_a_symbol(doc):
    """A second elimination whose value uses the symbol the first one eliminated."""
    nodes = doc["nodes"]

    def earlier(n):
        k = n["parent"]
        while k is not None:
            if nodes[k].get("outcome") == "=":
                return nodes[k]["elimination"]
            k = nodes[k]["parent"]
        return None

    node = next(n for n in nodes if n.get("outcome") == "=" and earlier(n) is not None)
    first_elim = earlier(node)
    value = sympy.sympify(node["elimination"]["value"])
    node["elimination"]["value"] = srepr(
        f"{value} + {first_elim['symbol']} - ({sympy.sympify(first_elim['value'])})")


def threshold_best_not_a_threshold_set(doc):
    leaf = three_threshold_sets(doc)
    sets = [tuple(h) for h in leaf["result"]["threshold_sets"]]
    leaf["result"]["best"] = list(next(h for h in ((0,), (1,)) if h not in sets))


def vanishing_denominator(doc):
    """A dual entry with a denominator that vanishes on part of the cell (p_0 >= 0 only)."""
    leaf = leaves(doc, lambda n: any(c == [srepr("p_0"), ">="] for c in n["conditions"])
                  and not any(c[0] == srepr("p_0") and c[1] == ">" for c in n["conditions"]))[0]
    leaf["result"]["dual"][0] = srepr("1/p_0")


def swapped_cells(doc):
    """Two kept cells swap their places in the tree (and so their conditions' parents)."""
    kept = leaves(doc, strict)
    a, b = doc["nodes"].index(kept[0]), doc["nodes"].index(kept[-1])
    doc["nodes"][a], doc["nodes"][b] = doc["nodes"][b], doc["nodes"][a]
    doc["nodes"][a]["parent"], doc["nodes"][b]["parent"] = (doc["nodes"][b]["parent"],
                                                            doc["nodes"][a]["parent"])
    doc["nodes"][a]["id"], doc["nodes"][b]["id"] = doc["nodes"][b]["id"], doc["nodes"][a]["id"]


def swapped_results(doc):
    """Two kept cells swap their results (each keeps its conditions and witness)."""
    kept = [n for n in leaves(doc) if n["result"]["best"] != leaves(doc)[0]["result"]["best"]]
    a = leaves(doc)[0]
    a["result"], kept[0]["result"] = kept[0]["result"], a["result"]


def dual_feasible_only_at_witness(doc):
    """y(u, t) of a non-root matching row (right-hand side 0, so b^T y is unchanged) shifted
    by s - s(witness): the same dual at the witness, infeasible where s < s(witness) (the
    row has a basic pi column, whose reduced cost becomes -(s - s(witness)))."""
    for leaf in leaves(doc, strict):
        prog = program(doc, leaf)
        result = leaf["result"]
        for label, value in zip(prog["variables"], result["primal"], strict=True):
            if label.startswith("pi[") and "node=()" not in label and value != "Integer(0)":
                node = label.split("node=")[1].split(", y=")[0]
                y = label.split(", y=")[1].rstrip("]")
                row = f"match[u={node}, t={y}]"
                if row not in prog["rows"]:
                    continue
                free = [c[0] for c in leaf["conditions"] if c[1] in (">", "<")]
                symbol = str(next(iter(sympy.sympify(free[0]).free_symbols)))
                i = prog["rows"].index(row)
                shifted = f"({sympy.sympify(result['dual'][i])}) + {symbol} - {leaf['witness'][symbol]}"
                # the new dual equals the old one at the witness
                at = {sympy.Symbol(k, real=True): sympy.Rational(v) for k, v in leaf["witness"].items()}
                assert sympy.sympify(srepr(shifted)).subs(at) == sympy.sympify(result["dual"][i]).subs(at)
                result["dual"][i] = srepr(shifted)
                return
    raise AssertionError("no leaf with a basic non-root pi column")


def nonzero_primal(doc) -> dict:
    """The first kept cell with a nonzero primal entry."""
    return leaves(doc, lambda n: any(v != "Integer(0)" for v in n["result"]["primal"]))[0]


def primal_breaks_a_matching_row(doc):
    leaf = nonzero_primal(doc)
    prog = program(doc, leaf)
    j = next(j for j, (lab, v) in enumerate(zip(prog["variables"], leaf["result"]["primal"],
                                                strict=True))
             if lab.startswith("A[") and v != "Integer(0)")
    leaf["result"]["primal"][j] = srepr(f"2 * ({sympy.sympify(leaf['result']['primal'][j])})")


def primal_negative(doc):
    """A primal that moves mass between two outputs of one configuration (rows unchanged
    only if both outputs share rows; here they do not): x >= 0 or A x = b fails."""
    leaf = leaves(doc)[0]
    leaf["result"]["primal"] = ["Integer(-1)"] * len(leaf["result"]["primal"])


def law_primal_changed(doc):
    """bv-optimal: the file's primal (unused: the checker computes BV's law point) changed."""
    leaf = nonzero_primal(doc)
    j = next(j for j, v in enumerate(leaf["result"]["primal"]) if v != "Integer(0)")
    leaf["result"]["primal"][j] = "Integer(0)"


def relabelled(field: str, old: str, new: str):
    """The tamper that replaces `old` by `new` in the labels `field` of every program."""
    def change(doc):
        for prog in doc["programs"].values():
            prog[field] = [label.replace(old, new) for label in prog[field]]
    return change


def branching(node: dict) -> bool:
    return len(node["split"]["outcomes"]) >= 2


def child_condition_weakened(doc):
    node = next(n for n in doc["nodes"] if n.get("outcome") == ">")
    n = len(node["conditions"])
    i = next(i for i in range(n) if node["conditions"][i][1] == ">")
    node["conditions"][i][1] = ">="
    node["facts"][i]["rel"] = ">="


def split_polynomial_changed(doc):
    node = first(doc, "split", lambda n: ">" in n["split"]["outcomes"])
    node["split"]["poly"] = srepr(f"2 * ({sympy.sympify(node['split']['poly'])}) + 1")


def combination_wrong(doc):
    found = first_combination(doc)
    if found is not None:
        found[1]["terms"].append(["1", [0]])


def strictness_claimed(doc):
    found = first_combination(doc, lambda node, f: f["rel"] == ">=" and all(
        node["facts"][i]["rel"] in (">=", "<=") for _, m in f["terms"] for i in m))
    if found is None:
        raise AssertionError("no weak combination fact")
    found[1]["rel"] = ">"


def combination_claims_equality(doc):
    """A strict combination (which proves a sign) relabelled as proving poly = 0."""
    found = first_combination(doc, lambda node, f: f["rel"] in (">", "<"))
    if found is None:
        raise AssertionError("no strict combination fact")
    found[1]["rel"] = "="


def fact_refers_forward(doc):
    found = first_combination(doc)
    if found is not None:
        node, f = found
        f["terms"][0][1] = [len(node["facts"]) + 3]


def empty_certificate_wrong(doc):
    node = first(doc, "empty", lambda n: n["certificate"]["by"] == "combination")
    node["certificate"]["terms"] = node["certificate"]["terms"][1:]


def leaf_declared_empty(doc):
    leaf = leaves(doc, strict)[0]
    leaf["status"] = "empty"
    del leaf["witness"], leaf["result"]  # an empty cell has neither (strict files)
    leaf["certificate"] = {"by": "constant condition"}


def witness_removed(doc):
    del leaves(doc)[0]["witness"]


def witness_missing_symbol(doc):
    leaf = leaves(doc)[0]
    leaf["witness"].pop(next(iter(leaf["witness"])))


def key_order_swapped(doc):
    leaf = leaves(doc, lambda n: strict(n) and len(set(n["result"]["choices"])) >= 1)[-1]
    leaf["result"]["key_order"] = leaf["result"]["key_order"][::-1]


def x_star_changed(doc):
    leaf = leaves(doc)[-1]
    leaf["result"]["x_star"] = 1 - leaf["result"]["x_star"]


def choice_flipped(doc):
    for leaf in leaves(doc, strict):
        choices = leaf["result"]["choices"]
        for i, c in enumerate(choices):
            choices[i] = "r" if c == "p" else "p"
        return


def parent_forward(doc):
    doc["nodes"][1]["parent"] = len(doc["nodes"]) - 1


def refutation_no_loss(doc):
    """Draft rows set to the target rows: token-level is optimal there, nothing is refuted."""
    inst = doc["counterexample"]["instance"]
    inst["draft"] = copy.deepcopy(inst["target"])
    for name in doc["counterexample"]["point"]:
        if name.startswith("q"):
            doc["counterexample"]["point"][name] = doc["counterexample"]["point"]["p" + name[1:]]


def field_added(where, name: str):
    """The tamper that adds the field `name` (a value the checker would not read) to the
    object where(doc) returns."""
    def change(doc):
        where(doc)[name] = "not read"
    return change


def program_unused(doc):
    doc["programs"]["0" * 16] = {"variables": [], "rows": []}


def node_id_changed(doc):
    leaves(doc)[0]["id"] = leaves(doc)[1]["id"]


# one-field tampers used twice below
witness_optimum_changed = set_leaf(0, "result", "witness_optimum", value="100")
def cell_excluded(doc):
    leaf = leaves(doc)[0]
    leaf["status"] = "excluded"
    del leaf["result"]  # an excluded cell has none (strict files)


def cell_unresolved(doc):
    leaf = leaves(doc)[0]
    leaf["status"] = "unresolved"
    del leaf["result"], leaf["witness"]

TAMPERS = {
    "extra condition fact (root declared empty)": (BV, extra_condition, "a condition beyond"),
    "extra condition fact in a kept cell": (L1, extra_condition_in_leaf, "a condition beyond"),
    "claim renamed gbv-k1-is-bv -> token-optimal": ("gbv-k1-is-bv-V2-L2",
                                                   set_field("claim", value="token-optimal"),
                                                   "result: field 'left' is not read"),
    "claim renamed l1-optimum -> bv-optimal": (L1, set_field("claim", value="bv-optimal"),
                                               "K = 1 i.i.d. claim"),
    "claim renamed bv-optimal -> l1-optimum": (BV, set_field("claim", value="l1-optimum"),
                                               "result: field 'block_efficiency' is not read"),
    "claim unknown": (BV, set_field("claim", value="everything-is-optimal"), "unknown claim"),
    "shape depth changed": (BV, set_field("shape", "depth", value=2),
                            "symbols: not the symbols of the shape"),
    "shape paths changed": (L1, set_field("shape", "paths", value=3), "primal: not the variables"),
    "shape draft sampling changed": (L1, set_field("shape", "draft_sampling", value="without-replacement"),
                                     "(fewer positive paths than K|primal: not the variables)"),
    "shape with a vocabulary token dropped": (GBV3, shape_vocab_token_dropped,
                                              "rows: the target rows are not those of the shape"),
    "shape vocabulary changed": (GBV3, set_field("shape", "vocab", value=2), "symbols: not the symbols"),
    "rows changed": (BV, set_field("rows", "target", 0, 0, value=srepr("p_0/2")),
                     "rows: the target rows are not those of the shape"),
    "symbol renamed": (BV, set_field("symbols", 0, value="x_0"), "symbols: not the symbols"),
    "empty LP (bv-optimal)": (BV, empty_lp, "reduced cost of"),
    "empty LP (l1-optimum)": (L1, empty_lp_l1, "primal: not the variables"),
    "laws set to 7": ("gbv-k1-is-bv-V2-L2", laws_set_to_seven, "left law is not the re-derived"),
    "block efficiency changed": (BV, set_leaf(-1, "result", "block_efficiency", value="Integer(7)"),
                                 "block_efficiency is not"),
    "continued law changed": (BV, set_leaf(-1, "result", "continued_law", 0, value="Integer(7)"),
                              "continued_law is not the target"),
    "acceptance changed": (GBV, set_leaf(-1, "result", "acceptance", value="Integer(7)"),
                           "acceptance is not the re-derived"),
    "closed form changed": (L1, set_leaf(-1, "result", "closed_form", value="Integer(7)"),
                            "closed_form is not the re-derived"),
    "threshold sets changed": (L1, threshold_sets_changed, "threshold_sets are not"),
    "elimination value changed": (BV, elimination_value, "elimination: wrong value"),
    "elimination of another polynomial": (BV, elimination_polynomial,
                                          "not the parent's split polynomial"),
    "elimination symbol changed": (BV, elimination_symbol, "elimination: not linear"),
    "elimination reintroduces an eliminated symbol": (BV, elimination_reintroduces_a_symbol,
                                                      "contains an eliminated symbol"),
    "H* not a threshold set": (L1, threshold_best_not_a_threshold_set, "is not a threshold set"),
    "denominator vanishing on part of the cell": (L1, vanishing_denominator,
                                                  "denominator factor p_0 may vanish"),
    "cells swapped": (L1, swapped_cells, "conditions"),
    "results swapped": (L1, swapped_results, r"(f\(H\*\)|threshold|LP optimum|row|reduced|>= 0)"),
    "split children swapped": (BV, split_outcomes(lambda o: o[::-1], branching), "children != outcomes"),
    "dual feasible only at the witness": (L1, dual_feasible_only_at_witness, "reduced cost of pi"),
    "primal breaks a matching row": (L1, primal_breaks_a_matching_row, r"row match\[.*A x != b"),
    "primal negative": (L1, primal_negative, ">= 0 is not shown"),
    "bv-optimal primal changed": (BV, law_primal_changed, "primal is not the law's LP point"),
    "LP optimum at the witness changed (bv-optimal)": (BV, witness_optimum_changed,
                                                       "witness_optimum is not"),
    "LP optimum at the witness changed (l1-optimum)": (L1, witness_optimum_changed,
                                                       "witness_optimum is not"),
    "dual entry changed": (BV, dual_changed, r"(reduced cost|c\^T x != b\^T y)"),
    "LP variable labels renamed": (L1, relabelled("variables", "pi[", "x["), "primal: not the variables"),
    "LP row labels unknown": (L1, relabelled("rows", "match[", "other["),
                              "dual: rows that the claim's LP does not"),
    "split misses a sign": (BV, split_outcomes(lambda o: o[:1], branching), "miss signs"),
    "root condition dropped": (BV, root_condition_dropped, "the root is not the domain"),
    "child condition weakened": (BV, child_condition_weakened, "conditions != parent's"),
    "split polynomial changed": (BV, split_polynomial_changed,
                                 "(miss signs|conditions != parent's)"),
    "derived fact: wrong combination": (BV, combination_wrong, "s \\* poly != its combination"),
    "derived fact: negative coefficient": (BV, combination_negative, "negative coefficient"),
    "derived fact: strictness claimed": (L1K3, strictness_claimed, "strictness not shown"),
    "derived fact: a sign relabelled as an equality": (L1K3, combination_claims_equality,
                                                       "proves a sign, not an equality"),
    "derived fact refers forward": (BV, fact_refers_forward, "not before it"),
    "emptiness certificate broken": (L1K3, empty_certificate_wrong, "not 0 > 0"),
    "kept cell declared empty": (BV, leaf_declared_empty, "no condition became a false constant"),
    "kept cell unresolved": (BV, cell_unresolved, "incomplete"),
    "witness removed": (BV, witness_removed, "without a witness"),
    "witness outside its cell": (BV, witness_outside, "the witness violates"),
    "witness misses a symbol": (BV, witness_missing_symbol, "misses a symbol"),
    "claim fails on a cell (unread 'holds')": (BV, set_leaf(0, "result", "holds", value=False),
                                               "result: field 'holds' is not read"),
    "GBV key order reversed": (GBV, key_order_swapped, r"key\(\d\) < key\(\d\) not shown"),
    "GBV x* changed": (GBV, x_star_changed, "x_star is not the re-derived"),
    "GBV min choices flipped": (GBV, choice_flipped, "choice is not shown"),
    "excluded cell with enough paths": (L1WO, cell_excluded, "enough positive paths"),
    "excluded cell in an i.i.d. proof": (L1, cell_excluded, "only l1-optimum without"),
    "parent after its child": (BV, parent_forward, "not an earlier node"),
    "format changed": (BV, set_field("format", value="speclp-symbolic-proof/0"), "unknown format"),
    # strict files (issue 27 part 3): a field the checker does not read is a rejection
    "unread top-level field": (BV, field_added(lambda d: d, "statement"),
                               "proof: field 'statement' is not read"),
    "unread shape field": (BV, field_added(lambda d: d["shape"], "note"), "shape: field 'note'"),
    "unread node field": (BV, field_added(lambda d: leaves(d)[0], "reason"), "node: field 'reason'"),
    "unread split field": (BV, field_added(lambda d: first(d, "split")["split"], "why"),
                           "split: field 'why'"),
    "unread fact field": (BV, field_added(lambda d: d["nodes"][0]["facts"][0], "comment"),
                          r"facts\[0\]: field 'comment'"),
    "unread elimination field": (BV, field_added(lambda d: zero_elimination(d)["elimination"],
                                                 "coefficient_factors"),
                                 "elimination: field 'coefficient_factors'"),
    "unread certificate field": (L1K3, field_added(lambda d: first(d, "empty")["certificate"],
                                                   "facts"), "certificate: field 'facts'"),
    "unread LP matrix": (L1, field_added(lambda d: next(iter(d["programs"].values())), "eq"),
                         r"programs\.\w+: field 'eq'"),
    "unread result field": (GBV, field_added(lambda d: leaves(d)[0]["result"], "kind"),
                            "result: field 'kind'"),
    "program used by no kept cell": (L1, program_unused, "used by no kept cell"),
    "node id not its place in the tree": (BV, node_id_changed, "is not its place in the tree"),
    "excluded cell with a result": (L1WO, field_added(lambda d: first(d, "excluded"), "result"),
                                    "node: field 'result'"),
    "refutation: unread field": (REFUTED, field_added(lambda d: d, "summary"),
                                 "refutation: field 'summary'"),
    "refutation: unread engine field": (REFUTED, field_added(lambda d: d["counterexample"]["engine"],
                                                             "lp_optimum"),
                                        "counterexample.engine: field 'lp_optimum'"),
    "refutation: instance not a distribution": (
        REFUTED, set_field("counterexample", "instance", "target", 0, value=["1/2", "1/3"]),
        "not a distribution"),
    "refutation: nothing refuted": (REFUTED, refutation_no_loss, "does not beat"),
    "refutation: point is not the instance": (REFUTED,
                                              set_field("counterexample", "point", "p_0", value="1/3"),
                                              "the point is not the instance"),
    "refutation: stated value changed": (
        REFUTED, set_field("counterexample", "engine", "token_block_efficiency", value="3/2"),
        "not the file's"),
}


def test_enough_kinds():
    assert len(TAMPERS) >= 30


# gbv-k1-is-bv-V2-L2 (about a minute) passes in tests/test_symbolic.py::test_shipped_proof_rechecks
@pytest.mark.parametrize("stem", sorted({source for source, _, _ in TAMPERS.values()}
                                        - {"gbv-k1-is-bv-V2-L2"}))
def test_untampered_sources_pass(stem):
    report = checker().check_document(load(stem))
    assert report.get("refuted") or report["nodes"].get("leaf", 0) > 0


@pytest.mark.parametrize("kind", list(TAMPERS))
def test_tampered_proof_is_rejected(kind):
    source, change, message = TAMPERS[kind]
    doc = load(source)
    change(doc)
    with pytest.raises(checker().ProofError, match=message):
        checker().check_document(doc)


def test_smt_second_check_agrees_and_can_disagree():
    """proofs/certificates/smt_check.py (optional, z3): the inequalities check.py proves on
    the first cells of a shipped proof are unsat when negated under the cell's conditions,
    and a false implication is found sat (so the second check can fail)."""
    pytest.importorskip("z3")
    smt = load_module("speclp_smt_check", CERTIFICATES / "smt_check.py")
    report = smt.run_file(str(CERTIFICATES / f"{BV}.json.gz"), 10_000, max_cells=8)
    assert report["questions"] > 0 and report["answers"]["unsat"] == report["questions"]
    alg = smt.check.Algebra(["p_0"])
    p = alg.gens[0]
    half = smt.check.Frac(p * 2 - 1, alg.R.one)  # 2 p_0 - 1 >= 0 does not follow from 0 <= p_0
    answer, point = smt.implied([(p, ">="), (p - 1, "<=")], half, ">=", [smt.z3.Real("p_0")],
                                10_000)
    assert answer == "sat" and "p_0" in point


# ---- the checker's own laws against the project's (two implementations, one value) ------
def _key_orders(model) -> dict[tuple, list[int]]:
    """GBV's key order at every node: tokens ascending in (p/q, x), ratio 0 where q = 0."""
    vocab = model.vocab_size
    out = {}
    for u in checker().nodes_of(vocab, model.depth - 1):
        i = checker().nodes_of(vocab, model.depth).index(u)
        p, q = model.target[i], model.draft[i]
        ratio = [Fraction(p[x]) / Fraction(q[x]) if q[x] != 0 else Fraction(0)
                 for x in range(vocab)]
        out[u] = sorted(range(vocab), key=lambda x: (ratio[x], x))
    return out


def _checker_values(model, paths: int) -> dict[str, object]:
    """Block efficiencies from check.py's own laws and LP point on a rational instance."""
    ck = checker()
    vocab, depth = model.vocab_size, model.depth
    alg = ck.Algebra(ck.symbol_names(vocab, depth))
    ar = ck.Arith(alg, [])

    def frac(x):
        x = Fraction(x)
        return alg.const(ck.QQ(x.numerator, x.denominator))

    inst = ck.Instance(vocab, depth, [[frac(v) for v in row] for row in model.target],
                       [[frac(v) for v in row] for row in model.draft])

    def value(lp, laws):
        v = lp.check([], lp.law_point(laws), {}, optimal=False)  # rows (1.4): lossless
        return Fraction(int(v.n.LC.numerator), int(v.n.LC.denominator)) if v.n else Fraction(0)

    out = {}
    if paths == 1:
        lp = ck.FullLP(ar, inst, 1, "iid")
        for verifier in ("token", "bv"):
            out[verifier] = value(lp, {c: (c[0], ck.single_path_law(verifier, ar, inst, c[0]))
                                       for c, _ in lp.configs})
        # GBV from its definition (selection, skewed rows) with the true keys at every node
        out["gbv"] = value(lp, {c: ck.gbv_law(ar, inst, c, 1, _key_orders(model))
                                for c, _ in lp.configs})
    if depth == 1:
        lp = ck.FullLP(ar, inst, paths, "iid")
        out["gbv"] = value(lp, {c: ck.gbv_law(ar, inst, c, paths, _key_orders(model))
                                for c, _ in lp.configs})
    return out


@pytest.mark.parametrize("vocab,depth,paths,kind,seed", [
    (2, 1, 1, "ties", 0), (3, 1, 2, "ties", 1), (3, 1, 3, "ties", 2), (3, 1, 2, "dirichlet", 3),
    (2, 2, 1, "ties", 4), (2, 2, 1, "dirichlet", 5), (3, 2, 1, "ties", 6), (2, 1, 3, "dirichlet", 7),
])
def test_checker_laws_agree_with_the_projects(vocab, depth, paths, kind, seed):
    """check.py's token / BV / GBV laws (its own few dozen lines) give the block efficiency
    of speclp.verifiers' exact laws, in rationals, on instances with ties and zeros; and
    the laws pass the rebuilt LP's matching rows (lossless)."""
    inst = (ties_instance(vocab, depth, seed=seed, denominator=4) if kind == "ties"
            else dirichlet_instance(vocab, depth, seed=seed, denominator=12))
    model = inst.model(exact=True)
    mine = _checker_values(model, paths)
    for verifier, value in mine.items():
        k = paths if verifier == "gbv" else 1
        expected = Fraction(exact_result(model, verifier, paths=k).block_efficiency)
        assert value == expected, (verifier, value, expected)


# ---- proof files are parsed, never evaluated (issue 27, part 1) ---------------------------
MARKER_NAME = "speclp-proof-file-code-ran"


def _payload(marker) -> str:
    """The issue's injection: Python that, if evaluated, replaces Checker.check (so every
    file would print OK), sets a global of builtins and writes a marker file."""
    code = (f"import builtins; builtins.SPECLP_INJECTED = 1; open({str(marker)!r}, 'w').write('x'); "
            "import sys; [setattr(m.Checker, 'check', lambda self: {'leaf': 1}) "
            "for m in list(sys.modules.values()) if hasattr(m, 'Checker')]")
    return f"(__import__('builtins').exec({code!r}), Symbol('p_0', real=True))[1]"


def _forged_refuted_claim(entry: str) -> dict:
    """A 1-node 'proof' of the REFUTED claim token-optimal (V = 2, L = 2) whose first row
    entry is `entry` (the issue's forgery)."""
    ck = checker()
    names = ck.symbol_names(2, 2)
    rows = {w: [[f"Symbol('{letter}{''.join(map(str, u))}_0', real=True)",
                 f"Add(Integer(1), Mul(Integer(-1), Symbol('{letter}{''.join(map(str, u))}_0', "
                 "real=True)))"] for u in ck.nodes_of(2, 2)]
            for w, letter in (("target", "p"), ("draft", "q"))}
    rows["target"][0][0] = entry
    return {"format": ck.FORMAT, "claim": "token-optimal",
            "shape": {"vocab": 2, "depth": 2, "paths": 1, "draft_sampling": "iid"},
            "symbols": names, "rows": rows, "programs": {},
            "nodes": [{"id": "0", "parent": None, "status": "leaf", "conditions": [],
                       "facts": [], "witness": {n: "0" for n in names}, "result": {}}]}


def _injected(tmp_path) -> bool:
    import builtins

    return (tmp_path / MARKER_NAME).exists() or hasattr(builtins, "SPECLP_INJECTED")


def test_injected_code_in_a_proof_file_never_runs(tmp_path):
    """The issue's forgery is rejected naming the field, and its code did not run (no marker
    file, no global set, Checker.check unchanged), in-process and as a script."""
    original = checker().Checker.check
    doc = _forged_refuted_claim(_payload(tmp_path / MARKER_NAME))
    with pytest.raises(checker().ProofError, match=r"rows\.target: unexpected text"):
        checker().check_document(doc)
    assert not _injected(tmp_path) and checker().Checker.check is original
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(doc))
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(CHECKER), str(path)], capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout.startswith("FAIL") and "rows.target" in out.stdout
    assert not _injected(tmp_path)


def test_hostile_json_is_a_failure_not_a_crash(tmp_path):
    """A JSON nested beyond the json module's recursion, or not an object: FAIL, exit 1."""
    deep, listed = tmp_path / "deep.json", tmp_path / "list.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    listed.write_text("[1, 2]")
    assert checker().main([str(deep), str(listed)]) == 1
    with pytest.raises(checker().ProofError, match="not a JSON object"):
        checker().check_document([1, 2])


def test_the_payload_would_run_under_eval(tmp_path):
    """Control: the payload is live code (sympy.sympify would run it), so the test above
    can fail; here it runs in a throwaway sandbox namespace and leaves the marker."""
    marker = tmp_path / "control"
    code = f"open({str(marker)!r}, 'w').write('x')"
    sympy.sympify(f"(__import__('builtins').exec({code!r}), Symbol('p_0', real=True))[1]")
    assert marker.exists()


HOSTILE = {
    "call of a builtin": "exec('1')",
    "dunder name": "__import__('os')",
    "attribute access": "Symbol('p_0', real=True).__class__",
    "method call": "Integer(1).evalf()",
    "lambda": "(lambda: Symbol('p_0', real=True))()",
    "subscript": "[Symbol('p_0', real=True)][0]",
    "unknown function": "Function('f')(Symbol('p_0', real=True))",
    "keyword other than real": "Symbol('p_0', commutative=False)",
    "symbol of another shape": "Symbol('x_0', real=True)",
    "symbol with a quote": "Symbol('p_0\\'', real=True)",
    "float": "Float('0.5', precision=53)",
    "infix text": "p_0 + 1",
    "huge exponent": "Pow(Symbol('p_0', real=True), Integer(1000000000))",
    "negative huge exponent": "Pow(Symbol('p_0', real=True), Integer(-65))",
    "exponent not an Integer": "Pow(Symbol('p_0', real=True), Symbol('q_0', real=True))",
    "huge integer": "Integer(" + "9" * 5000 + ")",
    "zero denominator": "Rational(1, 0)",
    "division by zero": "Pow(Integer(0), Integer(-1))",
    "deep nesting": "Add(" * 10_000 + "Integer(1)" + ")" * 10_000,
    "very long string": "Add(" + ", ".join(["Integer(1)"] * 100_000) + ")",
    "degree blow-up": "Pow(Pow(Pow(Add(Symbol('p_0', real=True), Symbol('q_0', real=True)), "
                      "Integer(64)), Integer(64)), Integer(64))",
    "trailing text": "Integer(1)) + (Integer(2)",
    "unbalanced": "Add(Integer(1), Integer(2)",
    "not a string": 7,
    "a list": ["Integer(1)"],
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_expressions_are_rejected_naming_the_field(kind):
    doc = _forged_refuted_claim(HOSTILE[kind])
    with pytest.raises(checker().ProofError, match=r"^rows\.target: "):
        checker().check_document(doc)


@pytest.mark.parametrize("kind", ["call of a builtin", "dunder name", "attribute access"])
def test_hostile_expressions_rejected_in_every_field(kind):
    """The same parser reads facts, splits, eliminations, duals and compared laws."""
    text = HOSTILE[kind]
    for stem, change, field in [
        (BV, lambda d: d["nodes"][0]["facts"].__setitem__(0, {**d["nodes"][0]["facts"][0],
                                                              "poly": text}), "facts[0].poly"),
        (BV, lambda d: first(d, "split")["split"].__setitem__("poly", text), "split.poly"),
        (BV, lambda d: zero_elimination(d)["elimination"].__setitem__("value", text),
         "elimination.value"),
        (BV, set_leaf(0, "result", "dual", 0, value=text), "result.dual"),
        (BV, set_leaf(0, "result", "block_efficiency", value=text), "result.block_efficiency"),
    ]:
        doc = load(stem)
        change(doc)
        with pytest.raises(checker().ProofError) as err:
            checker().check_document(doc)
        assert field in str(err.value), (field, str(err.value))


def test_parser_builds_what_sympy_means():
    """Independent reference: sympy's own expressions (built here, in the test), written
    with srepr as the producer does, parse to the same rational function (compared at
    rational points)."""
    ck = checker()
    names = ["p_0", "q_0", "p1_0"]
    alg = ck.Algebra(names)
    p, q, r = (sympy.Symbol(n, real=True) for n in names)
    exprs = [1 - p, p * q - sympy.Rational(3, 7) * r**2, (p + q) ** 3 - p / 2,
             p / (1 - q), (p - q) ** 2 / (q * r + 1) ** 2 + sympy.Integer(-5), sympy.Integer(0),
             sympy.Rational(-22, 9) * p * q * r]
    points = [(Fraction(1, 3), Fraction(2, 5), Fraction(-7, 4)), (Fraction(5), Fraction(-1, 9),
                                                                   Fraction(3, 2))]
    for e in exprs:
        f = alg.frac(sympy.srepr(e), "test")
        for point in points:
            at = [ck.QQ(x.numerator, x.denominator) for x in point]
            value = alg.at(f.n, at) / alg.at(f.d, at)
            expected = e.subs(dict(zip((p, q, r), map(sympy.Rational, point), strict=True)))
            assert sympy.Rational(int(value.numerator), int(value.denominator)) == expected


def test_rationals_of_the_file_are_parsed_strictly():
    ck = checker()
    assert ck.parse_rational("-3/4", "f") == ck.QQ(-3, 4) and ck.parse_rational("7", "f") == 7
    for bad in ("1/0", "1e3", "0x10", "__import__('os')", "1/2/3", "9" * 2000, 5, ""):
        with pytest.raises(ck.ProofError, match="^witness: "):
            ck.parse_rational(bad, "witness")


# ---- strict files (issue 27, part 3) -------------------------------------------------------
def test_shipped_files_are_strict():
    """Every shipped proof and the refutation hold exactly what strict_document keeps (so
    every field of them is one the checker reads)."""
    from speclp.proofs.symbolic.export import strict_document

    stems = [p.name.removesuffix(".json.gz") for p in CERTIFICATES.glob("*.json.gz")
             if p.stat().st_size < 1_000_000] + [REFUTED]
    assert len(stems) >= 12
    for stem in stems:
        doc = load(stem)
        assert strict_document(doc) == doc, stem


def test_strict_document_of_an_older_file_checks():
    """A format /1 document with everything the older producer wrote (statement, summary,
    LP matrices, split reasons, failures, ...) is rejected, and strict_document makes it a
    file the checker accepts (what the lead applies to proofs produced by older code)."""
    from speclp.proofs.symbolic.export import strict_document

    doc = load(L1WO)
    old = copy.deepcopy(doc)
    old.update({"format": "speclp-symbolic-proof/1", "statement": "s", "summary": {"kept": 1},
                "generated_by": "speclp prove", "counterexample": None})
    for prog in old["programs"].values():
        prog.update({"num_vars": 0, "eq": [], "exprs": ["Integer(1)"]})
    for node in old["nodes"]:
        node["reason"] = "r"
        if node["status"] == "split":
            node["split"].update({"why": "w", "asked_at": "a"})
        if node["status"] == "leaf":
            node["result"].update({"holds": True, "failures": [], "kind": "l1-optimum"})
        if node["status"] == "excluded":
            node["result"] = {"excluded": "fewer than K"}
    with pytest.raises(checker().ProofError, match="format"):
        checker().check_document(old)
    made = strict_document(old)
    assert made == doc
    assert checker().check_document(made)["nodes"]["leaf"] > 0
    assert strict_document(made) == made


def test_readme_table_names_every_claim_and_its_compared_fields():
    """The certificates README's per-claim table (ship.CHECKER_TABLE) covers every claim of
    the checker, and its last column names exactly the fields the checker compares."""
    from speclp.proofs.symbolic.ship import CHECKER_TABLE

    ck = checker()
    rows = {row[0]: row for row in CHECKER_TABLE[1:]}
    assert set(rows) == set(ck.CLAIMS) == set(ck.RESULT_FIELDS)
    for claim, (inputs, compared) in ck.RESULT_FIELDS.items():
        named = rows[claim][3] if claim != "token-optimal" else rows["bv-optimal"][3]
        assert all(field in named for field in compared), claim
        assert all(field in rows[claim][2] for field in inputs - {"program"}) or claim == "token-optimal"
    assert "| gbv-k1-is-bv |" in (CERTIFICATES / "README.md").read_text()
