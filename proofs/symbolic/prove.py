"""`prove(claim, vocab, depth, paths, draft_sampling)`: a claim proved on every instance of
a shape, as a decision tree of cells (explore) with a claim computation on every cell
(claims), exported as JSON and Markdown (export, markdown).

A claim holds on the shape when every leaf of the tree is a kept cell on which it holds,
a dropped (empty) cell or a cell outside the claim's domain. A kept cell where an identity
of the claim is not the zero function is a counterexample region: the proof fails, and a
concrete rational point of the cell where the two sides differ is reported, re-checked
with the numeric engine (certified LP optimum and exact law on that instance).
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from ...inputs import BadArgument
from ...lp.engine import optimum
from ...lp.instance import instance_from_json
from ...verifiers.exact import exact_result
from .algebra import RationalFunction, poly_text, to_fraction
from .cells import Cell, CertificateCache
from .claims import CLAIMS, claim_function
from .explore import MAX_NODES, Exploration, Tree
from .export import FORMAT, Exporter, node_document, result_document
from .journal import Journal, JournalError, code_digest, resume
from .shapes import make_shape

STATEMENTS = {
    "bv-optimal": "Block verification's block efficiency equals the optimum of the "
                  "single-path information-agnostic LP (BV's law is an optimal point of the "
                  "full LP, K = 1), and BV is lossless, for every instance of the shape.",
    "token-optimal": "Token-level verification's block efficiency equals the optimum of the "
                     "single-path LP (its law is an optimal point), for every instance.",
    "l1-optimum": "At L = 1 the K-path optimum (full LP) equals 1 + min over threshold sets H "
                  "of [p(H) + 1 - Q(H)], Q(H) = P(all K drafts in H), H = {x : p(x)/q(x) <= "
                  "theta}, for every instance.",
    "gbv-k1-is-bv": "GBV with one drafted path has exactly BV's output law (joint law of "
                    "the output node and token), configuration by configuration, for every "
                    "instance.",
    "gbv-l1-closed-form": "At L = 1 with K i.i.d. drafts, GBV accepts with probability "
                          "sum_x min(p(x), F(x)^K - F(x-)^K), F the draft CDF in the key "
                          "order (p/q, x) (ratio 0 where q = 0), and GBV is lossless; as K -> "
                          "infinity the closed form tends to p(x*), x* the highest-key token "
                          "with q(x*) > 0.",
}


class ClaimInputError(BadArgument):
    """A claim / shape combination that is not defined: BadArgument naming the parameter
    (claim, vocab, depth, paths, draft_sampling; vocab/depth for a shape too large)."""


MAX_SYMBOLIC_PATHS = 4  # the shapes of the issue need K <= 3; K = 4 is already slow


def validate(claim: str, vocab: int, depth: int, paths: int, draft_sampling: str) -> None:
    if claim not in CLAIMS:
        raise ClaimInputError("claim", f"must be one of {', '.join(CLAIMS)}, got {claim!r}")
    if vocab < 2:
        raise ClaimInputError("vocab", f"must be >= 2, got {vocab}")
    if depth < 1:
        raise ClaimInputError("depth", f"must be >= 1, got {depth}")
    if paths < 1:
        raise ClaimInputError("paths", f"must be >= 1, got {paths}")
    if draft_sampling not in ("iid", "without-replacement"):
        raise ClaimInputError("draft_sampling", f"must be iid or without-replacement, got "
                              f"{draft_sampling!r}")
    if claim in ("l1-optimum", "gbv-l1-closed-form") and depth != 1:
        raise ClaimInputError("depth", f"{claim} is a statement about L = 1, got {depth}")
    if claim in ("bv-optimal", "token-optimal", "gbv-k1-is-bv") and paths != 1:
        raise ClaimInputError("paths", f"{claim} is a single-path statement (K = 1), got {paths}")
    if claim == "gbv-l1-closed-form" and draft_sampling != "iid":
        raise ClaimInputError("draft_sampling", "GBV is defined for i.i.d. drafts")
    if claim != "l1-optimum" and draft_sampling != "iid":
        raise ClaimInputError("draft_sampling", f"{claim} is stated for i.i.d. drafts; only "
                              "l1-optimum takes without-replacement")
    if draft_sampling == "without-replacement" and paths > vocab**depth:
        raise ClaimInputError("paths", f"cannot draw {paths} distinct paths from {vocab**depth}")
    if paths > MAX_SYMBOLIC_PATHS:
        raise ClaimInputError("paths", f"at most {MAX_SYMBOLIC_PATHS} drafted paths in a symbolic proof "
                              f"(the laws' polynomial degree grows with K), got {paths}")
    if vocab**depth > 9 or vocab > 3:
        raise ClaimInputError("vocab/depth", f"({vocab}, {depth}) is too large for a symbolic "
                              "proof here (at most 9 paths, V <= 3)")


@dataclass
class ProofRun:
    claim: str
    vocab: int
    depth: int
    paths: int
    draft_sampling: str
    tree: Tree
    holds: bool
    complete: bool
    counts: dict[str, int]
    seconds: float
    counterexample: dict | None
    document: dict
    stopped: str = ""  # why the exploration stopped early, "" when it ran to the end
    resumed: int = 0  # steps read from the journal (0: a fresh run)

    def summary(self) -> dict[str, Any]:
        return {"claim": self.claim, "vocab": self.vocab, "depth": self.depth,
                "paths": self.paths, "draft_sampling": self.draft_sampling,
                "proved": self.holds and self.complete, "holds_on_every_kept_cell": self.holds,
                "complete": self.complete, "cells": self.counts, "seconds": round(self.seconds, 1)}


def proof_stem(claim: str, vocab: int, depth: int, paths: int, draft_sampling: str) -> str:
    """File stem of a proof: CLAIM-V{V}-L{L}[-K{K}][-without-replacement]."""
    stem = f"{claim}-V{vocab}-L{depth}"
    if claim in ("l1-optimum", "gbv-l1-closed-form"):
        stem += f"-K{paths}"
    if draft_sampling != "iid":
        stem += "-" + draft_sampling
    return stem


def command_line(claim: str, vocab: int, depth: int, paths: int, draft_sampling: str) -> str:
    out = f"speclp prove {claim} --vocab {vocab} --depth {depth}"
    if paths != 1 or claim == "l1-optimum":
        out += f" --paths {paths}"
    if draft_sampling != "iid":
        out += f" --draft-sampling {draft_sampling}"
    return out


def prove(claim: str, vocab: int, depth: int, paths: int = 1, draft_sampling: str = "iid",
          seed: int = 0, progress: Callable[[float], None] | None = None,
          stop_at_first_failure: bool = False, time_limit: float | None = None,
          journal: str | Path | None = None, journal_same_code: bool = True) -> ProofRun:
    """Run the claim on every cell. stop_at_first_failure: stop exploring at the first
    cell where the claim fails (a refutation; the tree is then partial). time_limit
    (seconds): stop exploring then (the run is incomplete, run.stopped says why).
    progress(share): see explore. journal: a file (speclp.proofs.symbolic.journal) every
    step is appended to; when it exists, the proof goes on from it (its settings must be
    these), and the document is the one an uninterrupted run gives (seconds aside).
    journal_same_code=False goes on from a journal written by other code (its steps are
    taken as they are, the re-run ones still compared; the proof is then not necessarily
    what either code alone gives, but the checker re-checks it like any other)."""
    validate(claim, vocab, depth, paths, draft_sampling)
    start = time.perf_counter()
    shape = make_shape(vocab, depth)
    shape.cache = CertificateCache()

    def stop(result: Any) -> bool:
        return stop_at_first_failure and bool(getattr(result, "failures", None))

    book = None
    if journal is not None:
        book = Journal.open(Path(journal), {
            "claim": claim, "vocab": vocab, "depth": depth, "paths": paths,
            "draft_sampling": draft_sampling, "seed": seed,
            "stop_at_first_failure": stop_at_first_failure, "code": code_digest()},
            journal_same_code)
    recorder = Recorder(claim, shape, book)
    exploration = Exploration(shape, claim_function(claim, paths, draft_sampling), progress,
                              MAX_NODES, stop, recorder.on_step)
    before, resumed = 0.0, 0
    try:
        if book is not None and book.records:
            before = resume(book, exploration, seed, recorder)
            resumed, book.records = len(book.records), []  # kept by the recorder, compressed
        else:
            exploration.start(seed)
        recorder.last = time.perf_counter()
        exploration.run(time_limit)
    finally:
        if book is not None:
            book.close()
    tree = exploration.tree(time.perf_counter() - start)
    nodes = tree.nodes
    failing = [nodes[k] for k in recorder.failing]
    counts = {"kept": tree.count("leaf") - len(failing), "failing": len(failing),
              "empty": tree.count("empty"), "excluded": tree.count("excluded"),
              "unresolved": tree.count("unresolved"), "splits": tree.count("split"),
              "unexplored": tree.count("open")}
    failing.sort(key=lambda n: (len(n.cell.eliminations), len(n.cell.conditions())))
    counterexample = _counterexample(claim, paths, draft_sampling, failing[0]) if failing else None
    seconds = before + time.perf_counter() - start
    document = _document(claim, vocab, depth, paths, draft_sampling, tree, recorder, counts,
                         seconds, counterexample)
    return ProofRun(claim, vocab, depth, paths, draft_sampling, tree, not failing,
                    counts["unresolved"] == 0 and counts["unexplored"] == 0, counts, seconds,
                    counterexample, document, tree.stopped,
                    resumed)


class Recorder:
    """Exports every node the exploration finishes, right after the step that finished it
    (export.node_document: the same document the whole tree gives at the end, since a
    finished node is never changed), then drops its cell (a failing leaf keeps it, for the
    counterexample); with a journal, appends the step (journal.Journal)."""

    def __init__(self, claim: str, shape: Any, journal: Journal | None) -> None:
        self.claim = claim
        self.journal = journal
        self.ex = Exporter(shape.ring)
        self.programs: dict[str, dict] = {}  # digest -> LP program, every one seen
        self.docs: dict[int, bytes] = {}  # node -> its document, compact JSON, zlib-compressed
        self.failing: list[int] = []
        self.last = time.perf_counter()

    def result_export(self, exporter: Exporter, cell: Cell, result: Any) -> tuple[dict, list]:
        return result_document(exporter, self.programs, cell, result, self.claim)

    def export(self, tree: Tree, k: int) -> dict:
        return node_document(self.ex, tree, k, self.result_export)

    def _finish(self, exploration: Exploration, index: int, created: list[int]
                ) -> tuple[list[tuple[int, dict]], dict, bool, list[int]]:
        nodes = exploration.nodes
        node = nodes[index]
        if node.status == "leaf" and node.result is not None and node.result.excluded:
            node.status = "excluded"
        failing = node.status == "leaf" and bool(node.result.failures)
        finished = [index] + [k for k in created if nodes[k].status == "empty"]
        seen = set(self.programs)
        tree = exploration.tree(0.0)
        docs = [(k, self.export(tree, k)) for k in finished]
        new = {d: program for d, program in self.programs.items() if d not in seen}
        for k in finished:
            if not (k == index and failing):
                nodes[k].cell, nodes[k].result = None, None
        pushed = [k for k in reversed(created) if nodes[k].status == "open"]
        return docs, new, failing, pushed

    def on_step(self, exploration: Exploration, index: int, created: list[int]) -> None:
        docs, new, failing, pushed = self._finish(exploration, index, created)
        self._keep(docs)
        if failing:
            self.failing.append(index)
        log = exploration.shape.cache.log
        now = time.perf_counter()
        if self.journal is not None:
            self.journal.append({
                "k": index, "kids": [created[0] if created else len(exploration.nodes),
                                     len(created)],
                "push": pushed, "docs": [[k, doc] for k, doc in docs], "programs": new,
                "cache": self.journal.encode_cache(log), "fail": failing,
                "stop": exploration.stopped, "seconds": round(now - self.last, 3)})
        self.last = now
        log.clear()

    def replayed(self, record: dict) -> None:
        """A journaled step not re-run: its documents and programs."""
        self._keep(record["docs"])
        self.programs.update(record["programs"])

    def _keep(self, docs: list) -> None:
        """The documents, compressed (a long proof holds ~10^4 of them until the end; read
        back by `document`; JSON in both ways, so a journal's document and a fresh one are the
        same)."""
        for k, doc in docs:
            self.docs[k] = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)

    def document(self, tree: Tree, k: int) -> dict:
        packed = self.docs.get(k)
        if packed is None:
            return json.loads(json.dumps(self.export(tree, k)))
        return json.loads(zlib.decompress(packed))

    def check(self, exploration: Exploration, index: int, created: list[int], record: dict,
              line: int) -> None:
        """A journaled step re-run: what it exports must be what the journal holds."""
        docs, new, failing, _ = self._finish(exploration, index, created)
        log = exploration.shape.cache.log
        cache = self.journal.encode_cache(log)
        log.clear()
        mine = json.loads(json.dumps({"docs": [[k, d] for k, d in docs], "programs": new,
                                      "cache": cache, "fail": failing}))
        for key, value in mine.items():
            if value != record[key]:
                raise JournalError(f"{self.journal.path}: line {line}: re-running node {index} "
                                   f"gives other {key} than the journal's")
        self._keep(docs)
        if failing:
            self.failing.append(index)


def _document(claim: str, vocab: int, depth: int, paths: int, draft_sampling: str, tree: Tree,
              recorder: Recorder, counts: dict[str, int], seconds: float,
              counterexample: dict | None) -> dict:
    shape = tree.shape
    ex = recorder.ex
    nodes = [recorder.document(tree, k) for k in range(len(tree.nodes))]
    programs: dict[str, dict] = {}  # in the order of the nodes using them
    for node in nodes:
        digest = (node.get("result") or {}).get("program")
        if digest is not None and digest not in programs:
            programs[digest] = recorder.programs[digest]
    return {
        "format": FORMAT, "claim": claim, "statement": STATEMENTS[claim],
        "shape": {"vocab": vocab, "depth": depth, "paths": paths,
                  "draft_sampling": draft_sampling},
        "generated_by": command_line(claim, vocab, depth, paths, draft_sampling),
        "symbols": list(shape.ring.names),
        "rows": {which: [[ex.value(e) for e in row] for row in shape.rows[which]]
                 for which in ("target", "draft")},
        "summary": {**counts, "seconds": round(seconds, 1),
                    "holds": counts["failing"] == 0,
                    "complete": counts["unresolved"] == 0 and counts["unexplored"] == 0},
        "counterexample": counterexample,
        "programs": programs,
        "nodes": nodes,
    }


def _nice_point(cell: Cell, value: RationalFunction) -> list[Any] | None:
    """A point of the cell with small denominators where value != 0."""
    best, best_size = None, None
    for x in cell.samples + cell.find_samples(64, tries=6000):
        try:
            if value.evaluate(x) == 0:
                continue
        except ZeroDivisionError:
            continue
        size = max(int(v.q) for v in x)
        if best is None or size < best_size:
            best, best_size = x, size
    return best


def _counterexample(claim: str, paths: int, draft_sampling: str, node: Any) -> dict:
    """A concrete rational instance in the failing cell, checked with the numeric engine."""
    cell = node.cell
    name, value = node.result.failures[0]
    point = _nice_point(cell, value) or cell.witness
    shape = cell.shape
    instance_json = shape.instance_json(point)
    out: dict[str, Any] = {
        "cell": cell.ident, "identity": name,
        "difference_on_cell": str(value),
        "difference_at_point": str(to_fraction(value.evaluate(point))),
        "conditions": [f"{poly_text(cell.facts[i].poly)} {cell.facts[i].rel} 0" for i in cell.conditions()
                       if cell.facts[i].kind == "condition"],
        "eliminated": {shape.ring.names[e.var]: str(cell.values[e.var])
                       for e in cell.eliminations},
        "point": {n: str(to_fraction(v)) for n, v in zip(shape.ring.names, point, strict=True)},
        "instance": instance_json,
    }
    instance = instance_from_json(instance_json, name="counterexample")
    if claim in ("bv-optimal", "token-optimal"):
        verifier = "bv" if claim == "bv-optimal" else "token"
        record = optimum(instance, 1, method="full").to_json()
        law = exact_result(instance.model(exact=True), verifier)
        efficiency = Fraction(law.block_efficiency)
        out["engine"] = {"lp_optimum": record["exact"], "lp_certified": record["certified"],
                         f"{verifier}_block_efficiency": str(efficiency),
                         "confirms": bool(record["certified"] and record["exact"] is not None
                                          and Fraction(record["exact"]) - efficiency
                                          == Fraction(out["difference_at_point"]))}
    elif claim == "l1-optimum":
        record = optimum(instance, paths, draft_sampling, method="full").to_json()
        out["engine"] = {"lp_optimum": record["exact"], "lp_certified": record["certified"]}
    return out
