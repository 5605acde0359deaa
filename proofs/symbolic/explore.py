"""The decision tree: run a computation on the root cell, split where it branches.

    tree = explore(shape, compute)

compute(cell) runs with the cell active (the verifier laws, the LP code, the claim's
checks, all on CellExpr values). When a comparison is undetermined it raises Branch; the
cell is then split by the outcomes (each child = the cell plus one sign condition, an
equality eliminating a symbol) and compute is re-run on every child. A child is kept when
a rational point of it is found (its witness), dropped with a certificate when it is
empty, and kept as `unresolved` (the proof is then incomplete) when neither is found.

Outcomes at a split are exhaustive: the relations listed cover every sign the polynomial
can take on the parent (a sign excluded by a fact of the parent is not listed; the fact is
exported with the split). So the leaves cover the parent, and the root is the whole
domain: the kept leaves, with the dropped (empty) ones, cover every instance of the shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...deadline import Deadline
from .algebra import poly_text
from .cells import Branch, Cell, Unsupported
from .shapes import Shape

MAX_NODES = 200_000


@dataclass
class Node:
    """status: "leaf" (result set), "split", "empty" (certificate), "unresolved" (reason),
    "open" (not yet explored). cell is None for a finished node whose cell was dropped (by the
    caller of explore, after recording what it needs)."""

    cell: Cell | None
    parent: int | None
    status: str = "open"
    split: Branch | None = None
    split_facts: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    result: Any = None
    certificate: dict | None = None
    reason: str = ""
    seconds: float = 0.0
    share: float = 1.0  # of the tree: the root 1, a split divides its share among its children


@dataclass
class Tree:
    shape: Shape
    nodes: list[Node]
    seconds: float
    stopped: str = ""  # why the exploration stopped early ("" when it ran to the end)

    def leaves(self) -> list[Node]:
        return [n for n in self.nodes if n.status == "leaf"]

    def count(self, status: str) -> int:
        return sum(1 for n in self.nodes if n.status == status)


def _split(node: Node, branch: Branch, nodes: list[Node], index: int) -> list[int]:
    """Children of node for branch (re-splitting on a coefficient when an equality cannot
    be eliminated yet). Returns the new node indices."""
    cell = node.cell
    for _ in range(8):
        try:
            children = []
            for number, rel in enumerate(branch.outcomes):
                if rel == "=":
                    children.append(cell.eliminate(branch.poly, number))
                else:
                    children.append(cell.child(branch.poly, rel, number))
            break
        except Branch as inner:
            branch = inner
    else:
        raise Unsupported(f"cell {cell.ident}: could not split on {poly_text(branch.poly)}")
    node.split = branch
    key = poly_text(branch.poly)
    node.split_facts = sorted(set(cell.sign_cache.get(key, ((), ()))[1])
                              | set(cell.by_key.get(key, [])))
    out = []
    for child in children:
        nodes.append(Node(child, index, share=node.share / len(children)))
        out.append(len(nodes) - 1)
    node.children = out
    return out


def _release(node: Node) -> None:
    """Drop what a finished split or empty node no longer needs (its sample points, and for a
    split its sign cache and product conditions): its children were made from them, and its
    exported form (export.node_document) reads only its facts, eliminations and split. Bounds
    the memory a long proof holds per cell; leaves keep everything (their export decides signs)."""
    cell = node.cell
    cell.samples = []
    if node.status == "split":
        cell.sign_cache = {}
        cell.products = []
        node.split.__traceback__ = None  # the frames of the computation that raised it


def _settle(node: Node) -> bool:
    """Witness or emptiness of a fresh child. True when it must be explored."""
    cell = node.cell
    if cell.empty_reason:
        node.status, node.certificate = "empty", cell.contradiction()
        _release(node)
        return False
    if cell.ensure_samples(8):
        return True
    certificate = cell.contradiction()
    if certificate is not None:
        node.status, node.certificate = "empty", certificate
        _release(node)
        return False
    cell.optimize_witness()
    return True  # without a witness an implied equality is looked for before computing


def _suspect_equality(cell: Cell) -> bool:
    """A weak condition that vanishes at every sample (or two opposite facts)."""
    for fids in cell.by_key.values():
        if len(fids) > 1 and cell.fact_signs(cell.facts[fids[0]].poly) == frozenset({0}):
            return True
    for fid in cell.conditions():
        fact = cell.facts[fid]
        if fact.rel in (">=", "<=") and not (cell.sample_signs(fact.poly) - {0}):
            return True
    return False


def _implied_split(node: Node, nodes: list[Node], index: int) -> list[int] | None:
    """For a cell without a witness: split on an implied equality g = 0 (the only outcome;
    the facts on g exclude the others). Returns the child indices or None."""
    found = node.cell.implied_equality()
    if found is None:
        return None
    g, _ = found
    node.status = "split"
    return _split(node, Branch(g, ["="], "implied equality"), nodes, index)


def explore(shape: Shape, compute: Callable[[Cell], Any], seed: int = 0,
            progress: Callable[[float], None] | None = None,
            max_nodes: int = MAX_NODES, stop: Callable[[Any], bool] | None = None,
            time_limit: float | None = None,
            on_step: Callable[[Exploration, int, list[int]], None] | None = None) -> Tree:
    """The decision tree of compute over the shape (see the module docstring). stop(result)
    True ends the exploration early (the remaining nodes stay "open"); so does time_limit
    (seconds, checked before each cell). progress(share) is called for every finished cell
    with its share of the tree (the shares of all finished cells sum to 1 at the end: an
    estimate of the fraction done, not of the time left). on_step(exploration, index,
    created): see Exploration."""
    start = time.perf_counter()
    exploration = Exploration(shape, compute, progress, max_nodes, stop, on_step)
    exploration.start(seed)
    exploration.run(time_limit)
    return exploration.tree(time.perf_counter() - start)


class Exploration:
    """The state of one exploration: the nodes, the stack of open ones (depth first, the
    last pushed is explored next) and why it stopped.

    A *step* pops one open node and processes it (`step`): it becomes a leaf, a split (its
    children are created and settled: empty ones are finished, the others pushed) or
    unresolved. on_step(self, index, created) is called after every step with the node and
    the children it created: a node is never changed by a later step (its children are
    copies), so what on_step records of the finished nodes is final (the journal of
    speclp.proofs.symbolic.journal records the steps and resumes from them)."""

    def __init__(self, shape: Shape, compute: Callable[[Cell], Any],
                 progress: Callable[[float], None] | None = None, max_nodes: int = MAX_NODES,
                 stop: Callable[[Any], bool] | None = None,
                 on_step: Callable[[Exploration, int, list[int]], None] | None = None) -> None:
        self.shape = shape
        self.compute = compute
        self.ticker = _Ticker(progress)
        self.max_nodes = max_nodes
        self.stop = stop
        self.on_step = on_step
        self.nodes: list[Node] = []
        self.stack: list[int] = []
        self.stopped = ""

    def start(self, seed: int = 0) -> None:
        self.nodes = [Node(Cell.root(self.shape, seed), None)]
        self.stack = [0]

    def tree(self, seconds: float) -> Tree:
        return Tree(self.shape, self.nodes, seconds, self.stopped)

    def run(self, time_limit: float | None = None) -> None:
        """Steps until the stack is empty, stop() asks to stop or time_limit (seconds from
        now) has passed (checked before each step)."""
        deadline = Deadline(time_limit, clock=time.perf_counter)
        while self.stack and not self.stopped:
            if deadline.passed:
                self.stopped = deadline.reason
                break
            index = self.stack.pop()
            created = self.step(index)
            if self.on_step is not None:
                self.on_step(self, index, created)
            if len(self.nodes) > self.max_nodes:
                raise RuntimeError(f"decision tree over {self.max_nodes} nodes")

    def _settle_children(self, kids: list[int]) -> None:
        for k in reversed(kids):
            if _settle(self.nodes[k]):
                self.stack.append(k)
            else:
                self.ticker.tick(self.nodes[k].share)

    def step(self, index: int) -> list[int]:
        """Process the open node `index` (see the class docstring); returns the indices of
        the children it created."""
        nodes = self.nodes
        node = nodes[index]
        cell = node.cell
        cell.used = set()
        t0 = time.perf_counter()
        if not cell.samples or _suspect_equality(cell):
            try:
                kids = _implied_split(node, nodes, index)
            except (Branch, Unsupported):
                kids = None
            if kids is not None:
                self._settle_children(kids)
                _release(node)
                node.seconds = time.perf_counter() - t0
                return kids
        kids = []
        try:
            with cell.active():
                node.result = self.compute(cell)
            node.status = "leaf"
            if not cell.samples:
                node.status, node.reason = "unresolved", "no witness point found"
            self.ticker.tick(node.share)
            if self.stop is not None and self.stop(node.result):
                self.stopped = "the first failing cell"
        except Branch as branch:
            node.status = "split"
            try:
                kids = _split(node, branch, nodes, index)
            except Unsupported as err:
                node.status, node.reason = "unresolved", str(err)
                kids = []
            self._settle_children(kids)
            if node.status == "split":
                _release(node)
        except Unsupported as err:
            node.status, node.reason = "unresolved", str(err)
            self.ticker.tick(node.share)
        node.seconds = time.perf_counter() - t0
        return kids


class _Ticker:
    def __init__(self, progress: Callable[[float], None] | None) -> None:
        self._progress = progress

    def tick(self, share: float) -> None:
        if self._progress is not None:
            self._progress(share)
