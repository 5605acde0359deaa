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
import importlib.util
import json
from pathlib import Path

import pytest
import sympy

ROOT = Path(__file__).resolve().parent.parent
CERTIFICATES = ROOT / "proofs" / "certificates"
CHECKER = CERTIFICATES / "check.py"

BV = "bv-optimal-V2-L1"
L1 = "l1-optimum-V2-L1-K2"
L1K3 = "l1-optimum-V2-L1-K3"
L1WO = "l1-optimum-V2-L1-K2-without-replacement"
GBV = "gbv-l1-closed-form-V2-L1-K2"
GBV3 = "gbv-l1-closed-form-V3-L1-K1"
REFUTED = "refuted/token-optimal-V2-L2"


@functools.lru_cache(maxsize=1)
def checker():
    spec = importlib.util.spec_from_file_location("speclp_proof_checker_tampers", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def leaves(doc: dict, where=lambda n: True) -> list[dict]:
    return [n for n in doc["nodes"] if n["status"] == "leaf" and where(n)]


def first(doc: dict, status: str, where=lambda n: True) -> dict:
    return next(n for n in doc["nodes"] if n["status"] == status and where(n))


def strict(node: dict) -> bool:
    return any(rel in (">", "<") for _, rel in node["conditions"])


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
    root["certificate"] = {"by": "opposite facts", "facts": [0, len(root["facts"]) - 1]}
    doc["nodes"] = doc["nodes"][:1]


def extra_condition_in_leaf(doc):
    leaf = leaves(doc)[0]
    leaf["facts"].append({"poly": leaf["conditions"][0][0], "rel": ">", "by": "condition"})


def rename_claim_gbv_to_token(doc):
    doc["claim"] = "token-optimal"


def rename_claim_l1_to_bv(doc):
    doc["claim"] = "bv-optimal"


def rename_claim_unknown(doc):
    doc["claim"] = "everything-is-optimal"


def rename_claim_bv_to_l1(doc):
    doc["claim"] = "l1-optimum"


def shape_depth(doc):
    doc["shape"]["depth"] = 2


def shape_paths(doc):
    doc["shape"]["paths"] = 3


def shape_sampling(doc):
    doc["shape"]["draft_sampling"] = "without-replacement"


def shape_vocab_token_dropped(doc):
    """V = 3 rows with the last token dropped from every row."""
    for which in ("target", "draft"):
        doc["rows"][which] = [row[:-1] for row in doc["rows"][which]]


def shape_vocab_smaller(doc):
    doc["shape"]["vocab"] = 2


def rows_changed(doc):
    doc["rows"]["target"][0][0] = srepr("p_0/2")


def symbols_renamed(doc):
    doc["symbols"][0] = "x_0"


def empty_lp(doc):
    """Every cell's LP replaced by an empty program (the issue's 'BE = LP optimum = 100')."""
    for key in doc["programs"]:
        doc["programs"][key] = {"num_vars": 0, "eq": [], "rhs_eq": [], "objective": [],
                                "constant": 0, "dropped": [], "dropped_rhs": 0,
                                "exprs": ["Integer(100)"], "variables": [], "rows": []}
    for leaf in leaves(doc):
        leaf["result"]["primal"], leaf["result"]["dual"] = [], []
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


def block_efficiency_changed(doc):
    leaf = leaves(doc)[-1]
    leaf["result"]["block_efficiency"] = "Integer(7)"


def continued_law_changed(doc):
    leaf = leaves(doc)[-1]
    leaf["result"]["continued_law"][0] = "Integer(7)"


def acceptance_changed(doc):
    leaf = leaves(doc)[-1]
    leaf["result"]["acceptance"] = "Integer(7)"


def closed_form_changed(doc):
    leaf = leaves(doc)[-1]
    leaf["result"]["closed_form"] = "Integer(7)"


def threshold_sets_changed(doc):
    leaf = leaves(doc, lambda n: len(n["result"]["threshold_sets"]) == 3)[0]
    leaf["result"]["threshold_sets"] = [[], [0, 1]]


def elimination_value(doc):
    """An '=' cell's value changed (p = 1 instead of p = 0): {p = 0} left uncovered."""
    node = first(doc, "leaf", lambda n: n.get("outcome") == "="
                 and n["elimination"]["value"] == "Integer(0)")
    node["elimination"]["value"] = "Integer(1)"


def elimination_polynomial(doc):
    """The elimination of a different polynomial than the parent's split (value consistent)."""
    node = first(doc, "leaf", lambda n: n.get("outcome") == "="
                 and n["elimination"]["value"] == "Integer(0)")
    symbol = node["elimination"]["symbol"]
    node["elimination"]["poly"] = srepr(f"{symbol} - 1")
    node["elimination"]["value"] = "Integer(1)"


def elimination_symbol(doc):
    node = first(doc, "leaf", lambda n: n.get("outcome") == "=")
    others = [s for s in doc["symbols"] if s != node["elimination"]["symbol"]]
    node["elimination"]["symbol"] = others[-1]


def threshold_best_not_a_threshold_set(doc):
    leaf = leaves(doc, lambda n: len(n["result"]["threshold_sets"]) == 3)[0]
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


def swapped_results(doc):
    """Two kept cells swap their results (each keeps its conditions and witness)."""
    kept = [n for n in leaves(doc) if n["result"]["best"] != leaves(doc)[0]["result"]["best"]]
    a = leaves(doc)[0]
    a["result"], kept[0]["result"] = kept[0]["result"], a["result"]


def swapped_children(doc):
    node = first(doc, "split", lambda n: len(n["split"]["outcomes"]) >= 2)
    node["split"]["outcomes"] = node["split"]["outcomes"][::-1]


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


def primal_breaks_a_matching_row(doc):
    leaf = leaves(doc, lambda n: any(v != "Integer(0)" for v in n["result"]["primal"]))[0]
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
    leaf = leaves(doc, lambda n: any(v != "Integer(0)" for v in n["result"]["primal"]))[0]
    j = next(j for j, v in enumerate(leaf["result"]["primal"]) if v != "Integer(0)")
    leaf["result"]["primal"][j] = "Integer(0)"


def witness_optimum_changed(doc):
    leaf = leaves(doc)[0]
    leaf["result"]["witness_optimum"] = "100"


def dual_changed(doc):
    leaf = leaves(doc)[0]
    leaf["result"]["dual"][-1] = "Integer(7)"


def variable_labels_renamed(doc):
    for prog in doc["programs"].values():
        prog["variables"] = [v.replace("pi[", "x[") for v in prog["variables"]]


def row_labels_unknown(doc):
    for prog in doc["programs"].values():
        prog["rows"] = [r.replace("match[", "other[") for r in prog["rows"]]


def split_misses_a_sign(doc):
    node = first(doc, "split", lambda n: len(n["split"]["outcomes"]) >= 2)
    node["split"]["outcomes"] = node["split"]["outcomes"][:1]


def root_condition_dropped(doc):
    root = doc["nodes"][0]
    root["conditions"] = root["conditions"][1:]
    root["facts"] = root["facts"][1:]


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
    for node in doc["nodes"]:
        for f in node["facts"]:
            if f["by"] == "combination":
                f["terms"].append(["1", [0]])
                return


def combination_negative(doc):
    for node in doc["nodes"]:
        for f in node["facts"]:
            if f["by"] == "combination":
                f["terms"][0][0] = "-1"
                return


def strictness_claimed(doc):
    for node in doc["nodes"]:
        for f in node["facts"]:
            if f["by"] == "combination" and f["rel"] == ">=" and all(
                    node["facts"][i]["rel"] in (">=", "<=") for _, m in f["terms"] for i in m):
                f["rel"] = ">"
                return
    raise AssertionError("no weak combination fact")


def combination_claims_equality(doc):
    """A strict combination (which proves a sign) relabelled as proving poly = 0."""
    for node in doc["nodes"]:
        for f in node["facts"]:
            if f["by"] == "combination" and f["rel"] in (">", "<"):
                f["rel"] = "="
                return
    raise AssertionError("no strict combination fact")


def fact_refers_forward(doc):
    for node in doc["nodes"]:
        for f in node["facts"]:
            if f["by"] == "combination":
                f["terms"][0][1] = [len(node["facts"]) + 3]
                return


def empty_certificate_wrong(doc):
    node = first(doc, "empty", lambda n: n["certificate"]["by"] == "combination")
    node["certificate"]["terms"] = node["certificate"]["terms"][1:]


def leaf_declared_empty(doc):
    leaf = leaves(doc, strict)[0]
    leaf["status"] = "empty"
    leaf["certificate"] = {"by": "constant condition"}


def leaf_unresolved(doc):
    leaves(doc)[0]["status"] = "unresolved"


def witness_removed(doc):
    del leaves(doc)[0]["witness"]


def witness_outside(doc):
    leaf = leaves(doc, strict)[0]
    for key in leaf["witness"]:
        leaf["witness"][key] = "0"


def witness_missing_symbol(doc):
    leaf = leaves(doc)[0]
    leaf["witness"].pop(next(iter(leaf["witness"])))


def claim_fails_on_cell(doc):
    leaves(doc)[0]["result"]["holds"] = False


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


def excluded_with_enough_paths(doc):
    leaf = leaves(doc)[0]
    leaf["status"] = "excluded"


def excluded_in_iid(doc):
    leaves(doc)[0]["status"] = "excluded"


def parent_forward(doc):
    doc["nodes"][1]["parent"] = len(doc["nodes"]) - 1


def format_changed(doc):
    doc["format"] = "speclp-symbolic-proof/0"


def refutation_instance_not_a_distribution(doc):
    doc["counterexample"]["instance"]["target"][0] = ["1/2", "1/3"]


def refutation_no_loss(doc):
    """Draft rows set to the target rows: token-level is optimal there, nothing is refuted."""
    inst = doc["counterexample"]["instance"]
    inst["draft"] = copy.deepcopy(inst["target"])
    for name in doc["counterexample"]["point"]:
        if name.startswith("q"):
            doc["counterexample"]["point"][name] = doc["counterexample"]["point"]["p" + name[1:]]


def refutation_point_not_instance(doc):
    doc["counterexample"]["point"]["p_0"] = "1/3"


def refutation_value_changed(doc):
    doc["counterexample"]["engine"]["token_block_efficiency"] = "3/2"


TAMPERS = {
    "extra condition fact (root declared empty)": (BV, extra_condition, "a condition beyond"),
    "extra condition fact in a kept cell": (L1, extra_condition_in_leaf, "a condition beyond"),
    "claim renamed gbv-k1-is-bv -> token-optimal": ("gbv-k1-is-bv-V2-L2", rename_claim_gbv_to_token,
                                                   "no dual solution"),
    "claim renamed l1-optimum -> bv-optimal": (L1, rename_claim_l1_to_bv, "K = 1 i.i.d. claim"),
    "claim renamed bv-optimal -> l1-optimum": (BV, rename_claim_bv_to_l1, "best"),
    "claim unknown": (BV, rename_claim_unknown, "unknown claim"),
    "shape depth changed": (BV, shape_depth, "symbols: not the symbols of the shape"),
    "shape paths changed": (L1, shape_paths, "primal: not the variables"),
    "shape draft sampling changed": (L1, shape_sampling,
                                     "(fewer positive paths than K|primal: not the variables)"),
    "shape with a vocabulary token dropped": (GBV3, shape_vocab_token_dropped,
                                              "rows: the target rows are not those of the shape"),
    "shape vocabulary changed": (GBV3, shape_vocab_smaller, "symbols: not the symbols"),
    "rows changed": (BV, rows_changed, "rows: the target rows are not those of the shape"),
    "symbol renamed": (BV, symbols_renamed, "symbols: not the symbols"),
    "empty LP (bv-optimal)": (BV, empty_lp, "reduced cost of"),
    "empty LP (l1-optimum)": (L1, empty_lp_l1, "primal: not the variables"),
    "laws set to 7": ("gbv-k1-is-bv-V2-L2", laws_set_to_seven, "left law is not the re-derived"),
    "block efficiency changed": (BV, block_efficiency_changed, "block_efficiency is not"),
    "continued law changed": (BV, continued_law_changed, "continued_law is not the target"),
    "acceptance changed": (GBV, acceptance_changed, "acceptance is not the re-derived"),
    "closed form changed": (L1, closed_form_changed, "closed_form is not the re-derived"),
    "threshold sets changed": (L1, threshold_sets_changed, "threshold_sets are not"),
    "elimination value changed": (BV, elimination_value, "elimination: wrong value"),
    "elimination of another polynomial": (BV, elimination_polynomial,
                                          "not the parent's split polynomial"),
    "elimination symbol changed": (BV, elimination_symbol, "elimination: not linear"),
    "H* not a threshold set": (L1, threshold_best_not_a_threshold_set, "is not a threshold set"),
    "denominator vanishing on part of the cell": (L1, vanishing_denominator,
                                                  "denominator factor p_0 may vanish"),
    "cells swapped": (L1, swapped_cells, "conditions"),
    "results swapped": (L1, swapped_results, r"(f\(H\*\)|threshold|LP optimum|row|reduced|>= 0)"),
    "split children swapped": (BV, swapped_children, "children != outcomes"),
    "dual feasible only at the witness": (L1, dual_feasible_only_at_witness, "reduced cost of pi"),
    "primal breaks a matching row": (L1, primal_breaks_a_matching_row, r"row match\[.*A x != b"),
    "primal negative": (L1, primal_negative, ">= 0 is not shown"),
    "bv-optimal primal changed": (BV, law_primal_changed, "primal is not the law's LP point"),
    "LP optimum at the witness changed (bv-optimal)": (BV, witness_optimum_changed,
                                                       "witness_optimum is not"),
    "LP optimum at the witness changed (l1-optimum)": (L1, witness_optimum_changed,
                                                       "witness_optimum is not"),
    "dual entry changed": (BV, dual_changed, r"(reduced cost|c\^T x != b\^T y)"),
    "LP variable labels renamed": (L1, variable_labels_renamed, "primal: not the variables"),
    "LP row labels unknown": (L1, row_labels_unknown, "dual: rows that the claim's LP does not"),
    "split misses a sign": (BV, split_misses_a_sign, "miss signs"),
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
    "kept cell unresolved": (BV, leaf_unresolved, "incomplete"),
    "witness removed": (BV, witness_removed, "without a witness"),
    "witness outside its cell": (BV, witness_outside, "the witness violates"),
    "witness misses a symbol": (BV, witness_missing_symbol, "misses a symbol"),
    "claim fails on a cell": (BV, claim_fails_on_cell, "the claim fails on this cell"),
    "GBV key order reversed": (GBV, key_order_swapped, r"key\(\d\) < key\(\d\) not shown"),
    "GBV x* changed": (GBV, x_star_changed, "x_star is not the re-derived"),
    "GBV min choices flipped": (GBV, choice_flipped, "choice is not shown"),
    "excluded cell with enough paths": (L1WO, excluded_with_enough_paths, "enough positive paths"),
    "excluded cell in an i.i.d. proof": (L1, excluded_in_iid, "only l1-optimum without"),
    "parent after its child": (BV, parent_forward, "not an earlier node"),
    "format changed": (BV, format_changed, "unknown format"),
    "refutation: instance not a distribution": (REFUTED, refutation_instance_not_a_distribution,
                                                "not a distribution"),
    "refutation: nothing refuted": (REFUTED, refutation_no_loss, "does not beat"),
    "refutation: point is not the instance": (REFUTED, refutation_point_not_instance,
                                              "the point is not the instance"),
    "refutation: stated value changed": (REFUTED, refutation_value_changed, "not the file's"),
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
    spec = importlib.util.spec_from_file_location("speclp_smt_check", CERTIFICATES / "smt_check.py")
    smt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smt)
    report = smt.run_file(str(CERTIFICATES / f"{BV}.json.gz"), 10_000, max_cells=8)
    assert report["questions"] > 0 and report["answers"]["unsat"] == report["questions"]
    alg = smt.check.Algebra(["p_0"])
    p = alg.gens[0]
    half = smt.check.Frac(p * 2 - 1, alg.R.one)  # 2 p_0 - 1 >= 0 does not follow from 0 <= p_0
    answer, point = smt.implied([(p, ">="), (p - 1, "<=")], half, ">=", [smt.z3.Real("p_0")],
                                10_000)
    assert answer == "sat" and "p_0" in point
