"""Shared pieces of the tests of the symbolic proofs and their standalone checker
(tests/test_symbolic.py, tests/test_certificate_tampers.py): where the shipped proofs lie,
loading a script of proofs/certificates as a module, finding nodes of a proof document, and
the tamper kinds that both files apply (to a freshly proved document and to the shipped
files).
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CERTIFICATES = ROOT / "proofs" / "certificates"
CHECKER = CERTIFICATES / "check.py"


def load_module(name: str, path: Path):
    """The script at `path` executed as a fresh module called `name` (not in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- nodes of a proof document -------------------------------------------------------------
def leaves(doc: dict, where=lambda n: True) -> list[dict]:
    return [n for n in doc["nodes"] if n["status"] == "leaf" and where(n)]


def first(doc: dict, status: str, where=lambda n: True) -> dict:
    return next(n for n in doc["nodes"] if n["status"] == status and where(n))


def strict(node: dict) -> bool:
    return any(rel in (">", "<") for _, rel in node["conditions"])


def first_combination(doc: dict, where=lambda node, fact: True) -> tuple[dict, dict] | None:
    """(node, fact) of the first fact derived 'by: combination' (and passing `where`), or None."""
    for node in doc["nodes"]:
        for f in node["facts"]:
            if f["by"] == "combination" and where(node, f):
                return node, f
    return None


# ---- tamper factories: a tamper changes a proof document in place ---------------------------
def _assign(container, path: tuple, value) -> None:
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = copy.deepcopy(value)


def set_field(*path, value):
    """The tamper doc[path[0]][path[1]]... = value."""
    return lambda doc: _assign(doc, path, value)


def set_leaf(index: int, *path, value):
    """The tamper that sets [path...] of the index-th kept cell (leaves(doc)[index]) to value."""
    return lambda doc: _assign(leaves(doc)[index], path, value)


def split_outcomes(edit, where=lambda n: True):
    """The tamper that replaces the outcomes of the first split node (passing `where`) by
    edit(outcomes)."""
    def change(doc):
        node = first(doc, "split", where)
        node["split"]["outcomes"] = edit(node["split"]["outcomes"])
    return change


# ---- tamper kinds used by both test files ---------------------------------------------------
dual_changed = set_leaf(0, "result", "dual", -1, value="Integer(7)")


def witness_outside(doc):
    leaf = leaves(doc, strict)[0]
    for key in leaf["witness"]:
        leaf["witness"][key] = "0"


def root_condition_dropped(doc):
    root = doc["nodes"][0]
    root["conditions"] = root["conditions"][1:]
    root["facts"] = root["facts"][1:]


def combination_negative(doc) -> bool:
    """The first combination fact's first coefficient made -1; False where there is none
    (and nothing changed)."""
    found = first_combination(doc)
    if found is not None:
        found[1]["terms"][0][0] = "-1"
    return found is not None
