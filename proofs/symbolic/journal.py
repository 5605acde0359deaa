"""A resumable proof: every step of the exploration appended to a journal (JSON lines).

A long proof (hours to days) must survive a stop: a time limit, SIGINT / SIGTERM, a crash.
`prove(..., journal=PATH)` appends one line per step of the exploration
(explore.Exploration.step: one cell processed), written with flush + fsync, and a rerun with
the same journal goes on where the last complete line ends. The proof it finishes is the
same, byte for byte, as an uninterrupted run's.

File. Line 1, the header: {"journal": FORMAT, "settings": {claim, vocab, depth, paths,
draft_sampling, seed, stop_at_first_failure, code}} (code: a digest of the producer's
source, so a journal is never continued by other code). Then one record per step:
    k        the node processed (popped from the stack),
    kids     [first, count]: the children it created (node indices first .. first+count-1),
    push     the children pushed on the stack, in push order (the others are empty),
    docs     [[index, document]]: the exported document (export.node_document) of every node
             the step finished (the node itself and its empty children),
    programs {digest: program}: LP programs seen for the first time,
    texts    polynomial texts seen for the first time (numbered in order from 0),
    cache    the step's additions to the shape's certificate cache (cells.CertificateCache),
             in order, each fact key as [text number, relation],
    fail     the node is a leaf where the claim fails, stop: why the exploration stopped
             after the step ("" when it did not), seconds: the step's wall time.
docs and programs are stored together as z: the base64 of the zlib-compressed JSON
{"docs": ..., "programs": ...} (the documents are most of a journal; 5x smaller). Text
only: numbers are integers or "p/q" strings (speclp.rationals); nothing is evaluated or
unpickled when it is read. A last line cut short (the process killed while writing it) is
ignored and cut off; any other bad line is an error naming the line.

Resuming. The certificate cache is the only state that cells share: every cell's
computation depends on its own cell and on the cache as earlier steps left it. So the
journal is read in order: a step whose cells are still needed (it made a cell that is
still open, an ancestor of one, or a failing leaf) is re-run (same code, same cell, same
cache), its output compared with the record (children, pushes, cache additions, documents:
a difference is a JournalError); every other step only adds its recorded cache entries.
The re-run costs about one cell per level of the tree.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any

from ...rationals import fraction_text, parse_fraction
from .explore import Exploration, Node
from .positivity import Combination

FORMAT = "speclp-symbolic-journal/1"
SETTINGS = ("claim", "vocab", "depth", "paths", "draft_sampling", "seed", "stop_at_first_failure",
            "code")
# the source the journal's steps depend on (what a cell computes and how it is exported)
_HERE = Path(__file__).resolve().parent
_PACKAGE = _HERE.parent.parent
CODE = ("proofs/symbolic/algebra.py", "proofs/symbolic/cells.py", "proofs/symbolic/claims.py",
        "proofs/symbolic/explore.py", "proofs/symbolic/export.py", "proofs/symbolic/lp_side.py",
        "proofs/symbolic/positivity.py", "proofs/symbolic/shapes.py", "proofs/symbolic/prove.py",
        "proofs/symbolic/journal.py", "lp", "verifiers", "rationals.py")


class JournalError(ValueError):
    """A journal that cannot be continued (the message names the file and what differs)."""


def code_digest() -> str:
    """sha256 of the producer's source files (CODE, every .py below a folder), by path."""
    digest = hashlib.sha256()
    for name in CODE:
        path = _PACKAGE / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(_PACKAGE)).encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


class Journal:
    """The journal file of one proof (see the module docstring)."""

    def __init__(self, path: Path, settings: dict[str, Any], same_code: bool = True) -> None:
        self.path = Path(path)
        self.settings = settings
        self.same_code = same_code
        self.records: list[dict] = []
        self.texts: list[str] = []  # number -> text, over the whole journal
        self.numbers: dict[str, int] = {}
        self._new_texts: list[str] = []
        self._handle: Any = None

    # ---- reading ----------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, settings: dict[str, Any], same_code: bool = True) -> Journal:
        """The journal at path: read (the header must match settings; settings.code only
        when same_code) or created."""
        journal = cls(path, settings, same_code)
        if journal.path.exists() and journal.path.stat().st_size > 0:
            journal._read()
        else:
            journal.path.parent.mkdir(parents=True, exist_ok=True)
            journal._write({"journal": FORMAT, "settings": settings}, fresh=True)
        return journal

    def _read(self) -> None:
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        complete, tail = lines[:-1], lines[-1]  # tail: b"" when the file ends with a newline
        good = len(data) - len(tail)
        parsed = []
        for number, line in enumerate(complete, 1):
            try:
                parsed.append(json.loads(line))
            except ValueError:
                if number == len(complete) and not tail:
                    good -= len(line) + 1  # the last line, cut short: ignored
                    break
                raise JournalError(f"{self.path}: line {number} is not JSON") from None
        if not parsed:
            raise JournalError(f"{self.path}: no header line")
        header, *records = parsed
        if not isinstance(header, dict) or header.get("journal") != FORMAT:
            raise JournalError(f"{self.path}: line 1: not a {FORMAT} header")
        theirs = header.get("settings", {})
        for key in SETTINGS:
            if key == "code" and not self.same_code:
                continue  # the re-run steps are still compared with their records
            if theirs.get(key) != self.settings.get(key):
                raise JournalError(
                    f"{self.path}: settings.{key} is {theirs.get(key)!r} in the journal, "
                    f"{self.settings.get(key)!r} in this run (delete the journal to start over)")
        if good != len(data):
            with self.path.open("r+b") as handle:  # drop the cut line before appending
                handle.truncate(good)
        for number, record in enumerate(records, 2):
            if not isinstance(record, dict):
                raise JournalError(f"{self.path}: line {number}: not a record")
            record["line"] = number
            for text in record.get("texts", []):
                self.numbers[text] = len(self.texts)
                self.texts.append(text)
            self.records.append(record)

    def payload(self, record: dict) -> dict:
        """The record's {"docs", "programs"} (its z field, decompressed)."""
        try:
            payload = json.loads(zlib.decompress(base64.b64decode(record["z"])))
            payload["docs"], payload["programs"]  # noqa: B018 (present)
            return payload
        except (KeyError, TypeError, ValueError, zlib.error):
            raise JournalError(f"{self.path}: line {record.get('line')}: bad z field") from None

    # ---- writing ----------------------------------------------------------------------
    def number(self, text: str) -> int:
        n = self.numbers.get(text)
        if n is None:
            n = self.numbers[text] = len(self.texts)
            self.texts.append(text)
            self._new_texts.append(text)
        return n

    def append(self, record: dict) -> None:
        record["texts"], self._new_texts = self._new_texts, []
        payload = json.dumps({"docs": record.pop("docs"), "programs": record.pop("programs")},
                             separators=(",", ":")).encode()
        record["z"] = base64.b64encode(zlib.compress(payload, 6)).decode("ascii")
        self._write(record)

    def _write(self, obj: dict, fresh: bool = False) -> None:
        if self._handle is None or fresh:
            self._handle = self.path.open("w" if fresh else "a", encoding="utf-8")
        self._handle.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    # ---- the certificate cache ----------------------------------------------------------
    def encode_cache(self, log: list) -> list:
        out = []
        for (target, want_strict), kind, item in log:
            key = [self.number(target), int(want_strict)]
            if kind == "neg":
                out.append(["n", key, self._keys(item, sort=True)])
            else:
                used, combo, offered = item
                out.append(["p", key, self._keys(used), {
                    "c": [fraction_text(Fraction(c)) for c in combo.coefficients],
                    "p": [list(product) for product in combo.products],
                    "s": bool(combo.strict)}, self._keys(offered, sort=True)])
        return out

    def _keys(self, keys: Any, sort: bool = False) -> list:
        out = [[self.number(text), rel] for text, rel in keys]
        return sorted(out) if sort else out

    def decode_cache(self, entries: list, cache: dict) -> None:
        """Add the recorded entries to cache (in order)."""
        for entry in entries:
            kind, (target, want_strict) = entry[0], entry[1]
            key = (self.texts[target], bool(want_strict))
            slot = cache.setdefault(key, {"pos": [], "neg": []})
            if kind == "n":
                slot["neg"].append(self._unkeys(entry[2], frozenset))
            else:
                combo = entry[3]
                slot["pos"].append((
                    self._unkeys(entry[2], tuple),
                    Combination([parse_fraction(c) for c in combo["c"]],
                                [tuple(product) for product in combo["p"]], bool(combo["s"])),
                    self._unkeys(entry[4], frozenset)))

    def _unkeys(self, keys: list, kind: type) -> Any:
        return kind((self.texts[n], rel) for n, rel in keys)


def plan(records: list[dict]) -> tuple[list[int], set[int], list[int], dict[int, int]]:
    """From the records alone: the stack after the last step, the steps to re-run (the
    ancestors of every node still open, and the failing leaves), the parent of every node
    and the step (record number) that created each node. JournalError when the records
    do not describe one depth-first exploration."""
    stack, parent, made_by = [0], {0: None}, {0: -1}
    count = 1
    for number, record in enumerate(records):
        k = record.get("k")
        if not stack or stack.pop() != k:
            raise JournalError(f"journal line {number + 2}: node {k} was not next on the stack")
        try:
            first, n = (int(x) for x in record["kids"])
            pushed = [int(x) for x in record["push"]]
            record["z"], record["cache"]  # noqa: B018 (present)
        except (KeyError, TypeError, ValueError):
            raise JournalError(f"journal line {number + 2}: kids, push, z or cache missing or "
                               "malformed") from None
        if n and first != count:
            raise JournalError(f"journal line {number + 2}: children numbered from {first}, "
                               f"expected {count}")
        for child in range(first, first + n):
            parent[child] = k
            made_by[child] = number
        count += n
        if not set(pushed) <= set(range(first, first + n)):
            raise JournalError(f"journal line {number + 2}: pushes a node it did not create")
        stack.extend(pushed)
    live = set(stack) | {r["k"] for r in records if r.get("fail")}
    rerun = {r["k"] for r in records if r.get("fail")}
    for node in list(live):
        up = parent[node]
        while up is not None and up not in rerun:
            rerun.add(up)
            up = parent[up]
    return stack, rerun, [parent[i] for i in range(count)], made_by


def resume(journal: Journal, exploration: Exploration, seed: int, recorder: Any) -> float:
    """Rebuild the exploration from the journal's records (see the module docstring):
    exploration.nodes (finished nodes as placeholders without a cell), .stack, .stopped,
    the shape's cache; recorder.replayed(...) receives every record (its documents and
    programs) and recorder.check(...) the re-run steps. Returns the seconds the journal's
    steps took."""
    records = journal.records
    stack, rerun, parents, _ = plan(records)
    shape = exploration.shape
    cache = shape.cache
    exploration.start(seed)
    nodes = exploration.nodes
    ticker, exploration.ticker = exploration.ticker, type(exploration.ticker)(None)
    on_step, exploration.on_step = exploration.on_step, None
    seconds = 0.0
    status: dict[int, str] = {}
    for record in records:  # (payloads decompressed one record at a time: a journal of 10^4
        for k, doc in journal.payload(record)["docs"]:  # steps holds ~10^8 bytes of documents)
            status[k] = doc["status"]
    try:
        for number, record in enumerate(records):
            k = record["k"]
            first, n = record["kids"]
            seconds += record.get("seconds", 0.0)
            if k in rerun:
                node = nodes[k]
                if node.cell is None:
                    raise JournalError(f"{journal.path}: line {number + 2}: node {k} has no "
                                       "cell to re-run")
                if len(nodes) != first and n:
                    raise JournalError(f"{journal.path}: line {number + 2}: {len(nodes)} "
                                       f"nodes before the step, the journal says {first}")
                exploration.stack, exploration.stopped = [], ""
                created = exploration.step(k)
                pushed = exploration.stack
                if created != list(range(first, first + n)) or pushed != record["push"]:
                    raise JournalError(
                        f"{journal.path}: line {number + 2}: re-running node {k} made "
                        f"children {created} (pushed {pushed}); the journal says "
                        f"{list(range(first, first + n))} (pushed {record['push']}): the "
                        "computation is not the one journaled")
                recorder.check(exploration, k, created, {**record, **journal.payload(record)},
                               number + 2)
            else:
                for child in range(first, first + n):
                    nodes.append(Node(None, k, status=status.get(child, "open"),
                                      share=nodes[k].share / n))
                journal.decode_cache(record["cache"], cache)
                recorder.replayed(journal.payload(record))
            if status.get(k):
                nodes[k].status = status[k]
        for k, node in enumerate(nodes):  # finished nodes keep no cell
            if node.status != "open" and k not in recorder.failing and node.cell is not None:
                node.cell, node.result = None, None
    finally:
        exploration.ticker, exploration.on_step = ticker, on_step
    exploration.stack = stack
    exploration.stopped = records[-1].get("stop", "") if records else ""
    if exploration.stopped.startswith("time limit"):
        exploration.stopped = ""
    for k, node in enumerate(nodes):
        if node.status != "split" and node.status != "open":
            ticker.tick(node.share)
        if parents[k] != node.parent:
            raise JournalError(f"{journal.path}: node {k}: parent {node.parent}, the journal "
                               f"says {parents[k]}")
    return seconds


__all__ = ["FORMAT", "Journal", "JournalError", "code_digest", "plan", "resume"]
