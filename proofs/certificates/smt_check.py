#!/usr/bin/env python
"""A second, independent check of the inequalities of a proof, by an SMT solver (optional).

    python smt_check.py PROOF.json[.gz] [...] [--timeout-ms T] [--max-cells N]

Needs z3-solver (`pip install speclp[smt]`); the checker (check.py) does not. The proof is
first re-checked by check.py (sympy only); every inequality that check.py proves on a kept
cell from the signs of factors (x >= 0 and reduced costs <= 0 of the rebuilt LP, f(H*) <=
f(H), ...) is then given to z3's nonlinear real arithmetic as a separate question:

    conditions of the cell  and  den != 0  and  not (num * den REL 0)      unsat?

(num / den REL 0 has the sign of num * den where den != 0; check.py has shown den strictly
signed). "unsat" means z3 agrees that the conditions imply the inequality; "sat" would be a
disagreement (z3's point is printed); "unknown" is a timeout. The cell's derived facts are
not given to z3: it re-derives the implication from the conditions alone.
Exit 0 when every question is answered unsat, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import z3


def _checker():
    """The sympy-only checker next to this file (loaded by path: no package needed)."""
    spec = importlib.util.spec_from_file_location("speclp_certificate_check",
                                                  Path(__file__).resolve().parent / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _checker()

Z3_REL = {">": lambda a: a > 0, ">=": lambda a: a >= 0, "<": lambda a: a < 0,
          "<=": lambda a: a <= 0, "=": lambda a: a == 0, "==": lambda a: a == 0}


def to_z3(p, variables: list) -> z3.ArithRef:
    """A sympy sparse polynomial over QQ as a z3 real term."""
    total = z3.RealVal(0)
    for monom, coeff in p.terms():
        term = z3.RealVal(f"{coeff.numerator}/{coeff.denominator}")
        for v, e in zip(variables, monom, strict=True):
            if e:
                term = term * v**e
        total = total + term
    return total


def implied(conditions: list, f: check.Frac, rel: str, variables: list, timeout_ms: int
            ) -> tuple[str, str]:
    """('unsat' | 'sat' | 'unknown', z3's point when sat)."""
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    for p, crel in conditions:
        solver.add(Z3_REL[crel](to_z3(p, variables)))
    den = to_z3(f.d, variables)
    solver.add(den != 0)
    solver.add(z3.Not(Z3_REL[rel](to_z3(f.n, variables) * den)))
    answer = solver.check()
    model = str(solver.model()) if answer == z3.sat else ""
    return str(answer), model


class Recorder:
    """Collects (cell conditions, value, rel) for every inequality check.py proves."""

    def __init__(self) -> None:
        self.questions: list[tuple[str, list, check.Frac, str]] = []
        self.conditions: list = []
        self.cell = ""


def run_file(path: str, timeout_ms: int, max_cells: int | None) -> dict:
    doc = check.load(path)
    recorder = Recorder()
    original_holds = check.Algebra.holds
    original_result = check.Checker.check_result

    def holds(self, facts, f, rel):
        ok = original_holds(self, facts, f, rel)
        if ok and not f.n.is_ground:
            recorder.questions.append((recorder.cell, recorder.conditions, f, rel))
        return ok

    def check_result(self, node, facts, substitution):
        recorder.cell = node["id"]
        recorder.conditions = facts[:len(node["conditions"])]
        return original_result(self, node, facts, substitution)

    check.Algebra.holds, check.Checker.check_result = holds, check_result
    try:
        checker = check.Checker(doc)
        checker.check()
    finally:
        check.Algebra.holds, check.Checker.check_result = original_holds, original_result
    variables = [z3.Real(name) for name in checker.alg.names]
    counts = {"unsat": 0, "sat": 0, "unknown": 0}
    disagreements = []
    cells = []
    for cell, conditions, f, rel in recorder.questions:
        if cell not in cells:
            if max_cells is not None and len(cells) >= max_cells:
                break
            cells.append(cell)
        answer, model = implied(conditions, f, rel, variables, timeout_ms)
        counts[answer] = counts.get(answer, 0) + 1
        if answer == "sat":
            disagreements.append({"cell": cell, "value": str(f.n.as_expr()), "rel": rel,
                                  "point": model})
    return {"file": path, "cells": len(cells), "questions": sum(counts.values()),
            "answers": counts, "disagreements": disagreements}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--timeout-ms", type=int, default=10_000)
    parser.add_argument("--max-cells", type=int, default=None)
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        try:
            report = run_file(path, args.timeout_ms, args.max_cells)
        except check.ProofError as err:
            print(f"FAIL {path}: the checker rejects it: {err}")
            status = 1
            continue
        ok = report["answers"]["unsat"] == report["questions"]
        status |= not ok
        print(f"{'AGREE' if ok else 'DIFFER'} {path}: {report['questions']} inequalities on "
              f"{report['cells']} cells, z3 answers {report['answers']}")
        for d in report["disagreements"][:5]:
            print(f"  cell {d['cell']}: {d['value']} {d['rel']} 0 fails at {d['point']}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
