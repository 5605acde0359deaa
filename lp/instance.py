"""Instances: small-vocabulary target/draft pairs (JSON format of DESIGN.md).

    {"vocab_size": V, "depth": L, "target": ROWS, "draft": ROWS}

ROWS holds one probability row of length V for every prefix of length 0..L in shortlex
order (see speclp.verifiers.tree). Entries are numbers or exact fraction strings
("1/3"). An instance written without any float (fraction strings, decimal strings or
integers) is *rational*: it is solved and compared in exact arithmetic, and rows must
sum to exactly 1. Float rows must sum to 1 within 1e-9 and are renormalised.

Every problem is reported as an InstanceError with a one-line message that names the
offending field, e.g. ``target[3]: row sums to 0.9, not 1 (tolerance 1e-9)``.

Reading limits (load_instance / read_instance_json): the path must be a regular file (a
FIFO, a device such as /dev/zero or a directory is refused before it is opened) of at most
MAX_FILE_BYTES, UTF-8 JSON (nesting deeper than the parser's recursion limit is refused),
with integers of at most
MAX_INT_DIGITS digits and number strings of at most MAX_ENTRY_CHARS characters with a
decimal exponent of at most MAX_EXPONENT. The size of an instance (rows and entries per
model, instance_size) is checked from vocab_size and depth before any row is read or
generated.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..inputs import BadArgument
from ..rationals import fraction_text
from ..verifiers.tree import (
    MAX_TUPLES,
    SIZE_CAP,
    TreeModel,
    capped_num_nodes,
    node_prefix,
    num_nodes,
    ordered_tuple_count,
)
from . import tolerances

ROW_SUM_TOLERANCE = tolerances.ROW_SUM
MAX_NODES = 2_000_000  # rows per model; larger instances are refused (memory)
MAX_ENTRIES = 4_000_000  # probabilities per model (rows x V): one Fraction each, ~160 bytes
MAX_FILE_BYTES = 256 * 2**20  # an instance file (JSON text)
MAX_INT_DIGITS = 100  # digits of a JSON integer
MAX_ENTRY_CHARS = 1000  # characters of a number or fraction string
MAX_EXPONENT = 1000  # |decimal exponent| of a number string ("1e-5")
_EXPONENT = re.compile(r"[eE]\s*([+-]?\d+)")


class InstanceError(BadArgument):
    """Bad instance input; the message is one line naming the field of the instance (or the
    file, or the generator's argument) first: ``target[3]: row sums to ...``."""

    def __init__(self, message: str):
        field, sep, reason = message.partition(": ")
        ValueError.__init__(self, message)
        self.field = field if sep else "instance"
        self.reason = reason if sep else message


@dataclass
class Instance:
    vocab_size: int
    depth: int
    target: np.ndarray  # [N, V] float64
    draft: np.ndarray  # [N, V] float64
    target_exact: np.ndarray  # [N, V] Fractions (exact rows, or the exact value of the floats)
    draft_exact: np.ndarray
    rational: bool  # True when the instance was given in exact numbers
    name: str = "instance"
    notes: list[str] = field(default_factory=list)

    def model(self, exact: bool = False) -> TreeModel:
        """Rows as a TreeModel: float64, or exact rationals when exact=True."""
        if exact:
            return TreeModel(self.target_exact, self.draft_exact, self.depth)
        return TreeModel(self.target, self.draft, self.depth)

    def to_json(self, exact: bool | None = None) -> dict[str, Any]:
        """JSON object; exact fraction strings when the instance is rational (or exact=True)."""
        use_exact = self.rational if exact is None else exact
        if use_exact:
            rows = lambda a: [[_fraction_str(x) for x in row] for row in a]  # noqa: E731
            return {"vocab_size": self.vocab_size, "depth": self.depth,
                    "target": rows(self.target_exact), "draft": rows(self.draft_exact)}
        return {"vocab_size": self.vocab_size, "depth": self.depth,
                "target": self.target.tolist(), "draft": self.draft.tolist()}

    def save(self, path: str | Path) -> Path:
        """Write the instance file atomically (a temporary file in the same folder, renamed):
        a failed write leaves no file behind and never a half-written one."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "w") as out:
                out.write(json.dumps(self.to_json(), indent=1))
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return path

    def settled(self) -> Instance:
        """This instance with float rows that its own file reads back bit for bit.

        A float row is stored renormalised (its exact binary values divided by their sum);
        read back, that row is renormalised once more, which can move an entry by an ulp.
        settled() repeats the renormalisation until a row is its own renormalisation (the
        loader then leaves it unchanged), so save() followed by load_instance() gives these
        very rows, and the exact rows are those of the file (the settled floats over their
        exact sum). A rational instance is returned as it is."""
        if self.rational:
            return self
        rows = [_settled_rows(self.target, "target"), _settled_rows(self.draft, "draft")]
        out = from_rows(rows[0], rows[1], self.depth, self.name)  # exact rows: those of the file
        out.notes = list(self.notes)
        return out


SETTLE_ROUNDS = 8  # renormalisations settled() tries per row


def _renormalised(row: np.ndarray) -> np.ndarray:
    """The float64 row the loader makes of a float row: exact values over their exact sum."""
    exact = [Fraction(float(x)) for x in row]
    total = sum(exact, Fraction(0))
    return row if total == 1 else np.array([float(x / total) for x in exact], dtype=np.float64)


def _exact_sum_row(row: np.ndarray) -> np.ndarray | None:
    """The row with one entry moved by the exact residual 1 - sum so that its binary values
    sum to exactly 1 (the loader then keeps it as it is), or None when no entry can take the
    residual exactly. Tried from the smallest positive entry up (the finest ulp)."""
    exact = [Fraction(float(x)) for x in row]
    residual = 1 - sum(exact, Fraction(0))
    for i in sorted((i for i, x in enumerate(exact) if x > 0), key=lambda i: exact[i]):
        moved = exact[i] + residual
        if moved >= 0 and Fraction(float(moved)) == moved:
            out = row.copy()
            out[i] = float(moved)
            return out
    return None


def _settled_rows(rows: np.ndarray, field_name: str) -> np.ndarray:
    """Each row renormalised until it is its own renormalisation, or (a row that cycles)
    moved to an exact sum of 1 (Instance.settled)."""
    out = np.array(rows, dtype=np.float64)
    for i, first in enumerate(out):
        row = first
        for _ in range(SETTLE_ROUNDS):
            again = _renormalised(row)
            if np.array_equal(again, row):
                break
            row = again
        else:
            row = _exact_sum_row(_renormalised(first))
            if row is None:
                raise RuntimeError(f"{field_name}[{i}]: the row neither settles under "
                                   "renormalisation nor can sum to exactly 1 in float64")
        out[i] = row
    return out


def _short(value: Any, limit: int = 60) -> str:
    """repr of a value for a one-line message, cut to `limit` characters."""
    text = repr(value) if not isinstance(value, list | dict) else type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fraction_str(x: Fraction) -> str:
    return fraction_text(x)


# ---------------------------------------------------------------------------
# parsing and validation
# ---------------------------------------------------------------------------

def _parse_entry(value: Any, where: str) -> tuple[Fraction, bool]:
    """-> (exact value, was_float)."""
    if isinstance(value, bool):
        raise InstanceError(f"{where}: expected a probability, got {value!r}")
    if isinstance(value, int):
        return Fraction(value), False
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise InstanceError(f"{where}: {value} is not a probability")
        return Fraction(value), True
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
            raise InstanceError(f"{where}: {value!r} is not a probability")
        if len(text) > MAX_ENTRY_CHARS:
            raise InstanceError(f"{where}: a number string of {len(text):,} characters "
                                f"(limit {MAX_ENTRY_CHARS})")
        exponent = _EXPONENT.search(text)
        if exponent and abs(int(exponent.group(1))) > MAX_EXPONENT:
            raise InstanceError(f"{where}: exponent {exponent.group(1)} out of range "
                                f"(|exponent| <= {MAX_EXPONENT})")
        try:
            return Fraction(text), False
        except (ValueError, ZeroDivisionError):
            raise InstanceError(f"{where}: cannot read {value!r} as a number or fraction") from None
    raise InstanceError(f"{where}: expected a number or fraction string, got {type(value).__name__}")


def _parse_rows(rows: Any, field_name: str, vocab: int, count: int) -> tuple[np.ndarray, bool]:
    if not isinstance(rows, list):
        raise InstanceError(f"{field_name}: expected a list of {count} rows, got {type(rows).__name__}")
    if len(rows) != count:
        raise InstanceError(
            f"{field_name}: expected {count} rows (one per prefix of length 0..depth), got {len(rows)}"
        )
    exact = np.empty((count, vocab), dtype=object)
    any_float = False
    for i, row in enumerate(rows):
        where = f"{field_name}[{i}]"
        if not isinstance(row, list) or len(row) != vocab:
            got = len(row) if isinstance(row, list) else type(row).__name__
            raise InstanceError(f"{where}: expected a row of {vocab} probabilities, got {got}")
        for j, value in enumerate(row):
            x, was_float = _parse_entry(value, f"{where}[{j}]")
            if x < 0:
                raise InstanceError(f"{where}[{j}]: negative probability {value!r}")
            exact[i, j] = x
            any_float |= was_float
    return exact, any_float


def _normalise(exact: np.ndarray, field_name: str, rational: bool) -> tuple[np.ndarray, np.ndarray]:
    """Check row sums; return (exact rows summing to exactly 1, float64 rows)."""
    out = exact.copy()
    for i, row in enumerate(exact):
        total = sum(row, Fraction(0))
        if rational:
            if total != 1:
                raise InstanceError(
                    f"{field_name}[{i}]: exact row sums to {_fraction_str(total)}, not 1 "
                    f"({_node_name(i, exact.shape[1])})"
                )
        elif abs(float(total) - 1.0) > ROW_SUM_TOLERANCE:
            raise InstanceError(
                f"{field_name}[{i}]: row sums to {float(total):.12g}, not 1 "
                f"(tolerance {ROW_SUM_TOLERANCE:g}; {_node_name(i, exact.shape[1])})"
            )
        if total != 1:
            out[i] = [x / total for x in row]
    floats = np.array([[float(x) for x in row] for row in out], dtype=np.float64)
    return out, floats


def _node_name(index: int, vocab: int) -> str:
    return f"prefix {node_prefix(index, vocab)}"


def instance_header(data: Any) -> tuple[int, int]:
    """(vocab_size, depth) of parsed instance JSON, checked (fields present, integers, size
    within instance_size's limits) before any row is read; raises InstanceError."""
    if not isinstance(data, dict):
        raise InstanceError(f"instance: expected a JSON object, got {type(data).__name__}")
    for key in ("vocab_size", "depth", "target", "draft"):
        if key not in data:
            raise InstanceError(f"{key}: missing field")
    vocab, depth = data["vocab_size"], data["depth"]
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 2:
        raise InstanceError(f"vocab_size: must be an integer >= 2, got {_short(vocab)}")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise InstanceError(f"depth: must be an integer >= 1, got {_short(depth)}")
    problem = instance_size_problem(vocab, depth)
    if problem:
        raise InstanceError(f"depth: {problem}")
    return vocab, depth


def instance_from_json(data: Any, name: str = "instance") -> Instance:
    """Validate a parsed JSON object and build an Instance (raises InstanceError)."""
    vocab, depth = instance_header(data)
    count = num_nodes(vocab, depth)
    target, target_float = _parse_rows(data["target"], "target", vocab, count)
    draft, draft_float = _parse_rows(data["draft"], "draft", vocab, count)
    rational = not (target_float or draft_float)
    target_exact, target_f = _normalise(target, "target", rational)
    draft_exact, draft_f = _normalise(draft, "draft", rational)
    inst = Instance(vocab, depth, target_f, draft_f, target_exact, draft_exact, rational, name)
    if not rational:
        inst.notes.append("float rows: exact data are the binary values renormalised to sum to 1")
    return inst


def format_count(count: int) -> str:
    """A size for a message: '1,234,567', or 'more than 9.2e+18' at the cap of the estimates."""
    return f"more than {float(SIZE_CAP):.2g}" if count >= SIZE_CAP else f"{count:,}"


def instance_size(vocab_size: int, depth: int) -> dict[str, int]:
    """Size of an instance without building it: rows per model (nodes of depth 0..L) and
    probabilities per model (rows x V), both capped at verifiers.tree.SIZE_CAP."""
    rows = capped_num_nodes(vocab_size, depth)
    return {"rows": rows, "entries": min(rows * vocab_size, SIZE_CAP)}


def instance_size_problem(vocab_size: int, depth: int) -> str | None:
    """None when an instance of this V and L fits the limits, else why not (with the size,
    the limit and what to do)."""
    size = instance_size(vocab_size, depth)
    if size["rows"] > MAX_NODES or size["entries"] > MAX_ENTRIES:
        return (f"V={vocab_size}, L={depth} needs {format_count(size['rows'])} rows of "
                f"{vocab_size} probabilities per model ({format_count(size['entries'])} "
                f"entries; limits {MAX_NODES:,} rows, {MAX_ENTRIES:,} entries); use a smaller "
                "vocabulary or depth")
    return None


def check_enumeration(field: str, vocab: int, depth: int, paths: int, limit: int | None = None,
                      suggestion: str = "use a smaller V, L or K") -> int:
    """The count of ordered draft tuples exact verifier laws enumerate at (V, L, K)
    (verifiers.tree.ordered_tuple_count); BadArgument(field) over `limit` (default
    verifiers.tree.MAX_TUPLES)."""
    limit = MAX_TUPLES if limit is None else limit
    tuples = ordered_tuple_count(vocab, depth, paths)
    if tuples > limit:
        raise BadArgument(field, f"exact verifier laws at V={vocab}, L={depth}, K={paths} enumerate "
                                 f"{format_count(tuples)} ordered draft tuples (limit {limit:,}); "
                                 f"{suggestion}")
    return tuples


def read_text_file(path: str | Path, max_bytes: int = MAX_FILE_BYTES,
                   what: str = "an instance JSON file") -> str:
    """The UTF-8 text of a regular file of at most max_bytes.

    A directory, FIFO, device or socket is refused before it is opened (a FIFO would block,
    /dev/zero never ends); the file is read with a bound even if it grows meanwhile.
    Raises InstanceError naming the path.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InstanceError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        raise InstanceError(f"{_short(str(path))}: cannot read ({getattr(err, 'strerror', None) or err})"
                            ) from None
    if stat.S_ISDIR(info.st_mode):
        raise InstanceError(f"{path}: is a directory, expected {what}")
    if not stat.S_ISREG(info.st_mode):
        raise InstanceError(f"{path}: not a regular file ({_file_kind(info.st_mode)}); "
                            f"expected {what}")
    if info.st_size > max_bytes:
        raise InstanceError(f"{path}: {info.st_size:,} bytes, over the limit of {max_bytes:,} "
                            f"bytes for {what}")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as err:
        raise InstanceError(f"{path}: cannot read ({err.strerror or err})") from None
    if len(raw) > max_bytes:
        raise InstanceError(f"{path}: longer than the limit of {max_bytes:,} bytes for {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InstanceError(f"{path}: not UTF-8 text (byte {err.start}); expected {what}"
                            ) from None


def readable_path(path: str | Path, field: str, allow_dir: bool = False) -> Path:
    """An existing regular file (or a directory when allow_dir) that can be read; never opens
    a FIFO or a device. Else BadArgument naming `field` (the CLI passes its flag)."""
    if str(path) == "":
        raise BadArgument(field, "empty path")
    if "\x00" in str(path):
        raise BadArgument(field, f"{_short(str(path))}: a path cannot contain a NUL byte")
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise BadArgument(field, f"{path}: no such file or directory") from None
    except OSError as err:
        raise BadArgument(field, f"{path}: cannot read ({err.strerror or err})") from None
    if stat.S_ISDIR(info.st_mode):
        if allow_dir:
            return path
        raise BadArgument(field, f"{path}: is a directory, expected a file")
    if not stat.S_ISREG(info.st_mode):
        raise BadArgument(field, f"{path}: not a regular file")
    if not os.access(path, os.R_OK):
        raise BadArgument(field, f"{path}: not readable")
    return path


def read_instance_json(path: str | Path) -> Any:
    """The parsed JSON of an instance file, within the reading limits (module docstring).

    Raises InstanceError naming the path; nothing is opened that is not a regular file.
    """
    text = read_text_file(path)
    try:
        return json.loads(text, parse_int=_bounded_int)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        raise InstanceError(f"{path}: malformed JSON ({err.msg} at {where})") from None
    except RecursionError:
        raise InstanceError(f"{path}: JSON nested too deeply (an instance needs 3 levels)"
                            ) from None
    except ValueError as err:  # an over-long integer (_bounded_int)
        raise InstanceError(f"{path}: {err}") from None


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("+-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer with {digits:,} digits (limit {MAX_INT_DIGITS})")
    return int(text)


def load_instance(path: str | Path) -> Instance:
    """Read and validate an instance file (reading limits: see the module docstring)."""
    return instance_from_json(read_instance_json(path), name=Path(path).stem)


def from_rows(target: np.ndarray, draft: np.ndarray, depth: int, name: str = "instance") -> Instance:
    """Instance from arrays [N, V] (float64, or object arrays of Fractions for a rational one)."""
    target = np.asarray(target)
    draft = np.asarray(draft)
    if target.dtype == object and draft.dtype == object:
        data = {"vocab_size": target.shape[1], "depth": depth,
                "target": [[_fraction_str(Fraction(x)) for x in r] for r in target],
                "draft": [[_fraction_str(Fraction(x)) for x in r] for r in draft]}
    else:
        data = {"vocab_size": int(target.shape[1]), "depth": depth,
                "target": np.asarray(target, dtype=np.float64).tolist(),
                "draft": np.asarray(draft, dtype=np.float64).tolist()}
    return instance_from_json(data, name)


# ---------------------------------------------------------------------------
# generators and built-ins
# ---------------------------------------------------------------------------

def _require_size(vocab_size: int, depth: int) -> int:
    """Rows per model of a generated instance, after refusing (InstanceError) shapes that do
    not fit instance_size's limits, before anything is allocated."""
    if vocab_size < 2 or depth < 1:
        raise InstanceError(f"vocab_size, depth: need V >= 2 and L >= 1, got {vocab_size}, {depth}")
    problem = instance_size_problem(vocab_size, depth)
    if problem:
        raise InstanceError(f"depth: {problem}")
    return num_nodes(vocab_size, depth)


def _round_rows(rows: np.ndarray, denominator: int) -> np.ndarray:
    """Largest-remainder rounding of float rows to multiples of 1/denominator (exact)."""
    out = np.empty(rows.shape, dtype=object)
    for i, row in enumerate(rows):
        scaled = row * denominator
        base = np.floor(scaled).astype(np.int64)
        short = denominator - int(base.sum())
        order = np.argsort(-(scaled - base), kind="stable")
        base[order[:short]] += 1
        out[i] = [Fraction(int(b), denominator) for b in base]
    return out


def dirichlet_instance(vocab_size: int, depth: int, alpha: float = 1.0, seed: int = 0,
                       denominator: int | None = None) -> Instance:
    """Independent Dirichlet(alpha) target and draft rows at every prefix.

    denominator: round every row to multiples of 1/denominator (a rational instance).
    """
    if not alpha > 0:
        raise InstanceError(f"alpha: must be > 0, got {alpha}")
    count = _require_size(vocab_size, depth)
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.full(vocab_size, alpha), size=count)
    draft = rng.dirichlet(np.full(vocab_size, alpha), size=count)
    name = f"dirichlet-V{vocab_size}-L{depth}-a{alpha:g}-s{seed}"
    if denominator:
        return from_rows(_round_rows(target, denominator), _round_rows(draft, denominator), depth, name)
    return from_rows(target, draft, depth, name)


def temperature_instance(vocab_size: int, depth: int, temperature: float = 1.5, noise: float = 0.5,
                         scale: float = 2.0, seed: int = 0) -> Instance:
    """Target = softmax(logits); draft = softmax(logits / temperature + noise * N(0, 1)).

    logits ~ N(0, scale^2) independently at every prefix.
    """
    if not temperature > 0:
        raise InstanceError(f"temperature: must be > 0, got {temperature}")
    count = _require_size(vocab_size, depth)
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, scale, size=(count, vocab_size))
    draft_logits = logits / temperature + noise * rng.normal(size=logits.shape)

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    name = f"temperature-V{vocab_size}-L{depth}-T{temperature:g}-n{noise:g}-s{seed}"
    return from_rows(softmax(logits), softmax(draft_logits), depth, name)


def bv_toy(depth: int = 2) -> Instance:
    """V = 2, every target row (1/3, 2/3), every draft row (2/3, 1/3) (docs/theory.md section 2.4)."""
    count = _require_size(2, depth)
    target = np.empty((count, 2), dtype=object)
    draft = np.empty((count, 2), dtype=object)
    target[:] = [Fraction(1, 3), Fraction(2, 3)]
    draft[:] = [Fraction(2, 3), Fraction(1, 3)]
    return from_rows(target, draft, depth, name=f"bv-toy-L{depth}")


BUILTINS = {"bv-toy": bv_toy}


def builtin_instance(name: str, depth: int = 2) -> Instance:
    if name not in BUILTINS:
        raise InstanceError(f"--builtin: unknown instance {name!r}; known: {', '.join(BUILTINS)}")
    if depth < 1:
        raise InstanceError(f"depth: must be an integer >= 1, got {depth}")
    return BUILTINS[name](depth)


def ties_instance(vocab_size: int, depth: int, seed: int = 0, denominator: int = 4,
                  copy_probability: float = 0.5) -> Instance:
    """A rational instance with many equal ratios p/q (for audits of tie handling).

    Rows are random compositions of `denominator` units into V parts (multiples of
    1/denominator); with probability `copy_probability` a draft row is a copy of the
    target row at the same prefix (all ratios equal to 1 there).
    """
    count = _require_size(vocab_size, depth)
    rng = np.random.default_rng(seed)

    def composition() -> list[Fraction]:
        cuts = np.sort(rng.integers(0, denominator + 1, size=vocab_size - 1))
        parts = np.diff(np.concatenate([[0], cuts, [denominator]]))
        return [Fraction(int(x), denominator) for x in parts]

    target = np.empty((count, vocab_size), dtype=object)
    draft = np.empty((count, vocab_size), dtype=object)
    for i in range(count):
        target[i] = composition()
        draft[i] = list(target[i]) if rng.random() < copy_probability else composition()
    name = f"ties-V{vocab_size}-L{depth}-d{denominator}-s{seed}"
    return from_rows(target, draft, depth, name)
