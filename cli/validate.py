"""Input validation shared by every command: each rule written once.

Every check raises BadInput with ONE line that starts with the offending flag or path
(``--depth: ...``), which the CLI prints as ``error: ...`` with exit status 2. Checks
run before anything expensive: sizes are estimated from V, L, K by the code that would
build the object (lp.full.full_lp_size, lp.instance.instance_size,
verifiers.tree.ordered_tuple_count) and refused with the size, the limit and a
suggestion; files are checked to be regular files of bounded size before they are opened
(lp.instance.readable_path); output folders are checked to be creatable.

The value checks of a command whose spec validates itself (solve, instance, check, gap, audit,
bench, trees, realgap, lossless, prove: the spec's construction is the validation) live in the
spec and raise speclp.inputs.BadArgument naming the field; here they remain only for what
flags alone have (list parsing, files, folders). The number, choice and seed checks are
written once, in speclp.inputs (integer, number, choice, seed); the functions here wrap them
with the flag (flagged).

The checks of one library idea live with it and raise speclp.inputs.BadArgument naming the
field, which the CLI maps to its flag (cli.common.flag_of): devices, dtypes and model pairs
(resolved offline before any model is loaded) in decode.models (check_device, check_dtype,
check_model_pair), prompts in experiments.prompts (read_prompts, humaneval_prompts), the
Dask scheduler address in experiments.sweep (check_cluster).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import inputs
from ..inputs import BadArgument
from ..lp.colgen import MAX_ENUMERATED_CONFIGURATIONS, MAX_MASTER_COLUMNS, master_size
from ..lp.full import check_distinct_paths, check_full_lp_size
from ..lp.instance import (
    InstanceError,
    check_enumeration,
    format_count,
    instance_from_json,
    instance_header,
    instance_size_problem,
    read_instance_json,
    readable_path,
)
from ..verifiers.multipath import KHISTI_MAX_COMPANIONS
from ..verifiers.tree import capped_power


class BadInput(BadArgument):
    """A refusal written by the CLI itself: its one line already starts with the flag or path
    it names (``--depth: ...``); reported as is, exit status 2."""

    def __init__(self, message: str):
        field, sep, reason = message.partition(": ")
        ValueError.__init__(self, message)
        self.field = field if sep else None  # type: ignore[assignment]
        self.reason = reason if sep else message


MAX_WORKERS = 256
MAX_TRIALS = inputs.MAX_TRIALS  # random instances of one audit or claim check (as sweep's task cap)


# ---------------------------------------------------------------------------
# numbers, choices, lists
# ---------------------------------------------------------------------------

def flagged(check: Any, flag: str, *args: Any, **kwargs: Any) -> Any:
    """check(flag, ...) of speclp.inputs (the one wording of a number, choice or seed check)
    with its refusal as a BadInput naming `flag`."""
    try:
        return check(flag, *args, **kwargs)
    except BadArgument as err:
        raise BadInput(str(err)) from None


def integer(flag: str, value: int, low: int | None = None, high: int | None = None) -> int:
    """value itself, after checking low <= value <= high (either bound may be None)."""
    return flagged(inputs.integer, flag, value, low, high)


def number(flag: str, value: float, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> float:
    """A finite float in [low, high] ((low, high] when low_open); NaN and +-inf refused."""
    return flagged(inputs.number, flag, value, low, high, low_open)


def choice(flag: str, value: str, choices: Iterable[str]) -> str:
    return flagged(inputs.choice, flag, value, choices)


def seed(flag: str, value: int) -> int:
    """A seed for numpy and torch generators: 0 <= seed <= 2^32 - 1."""
    return flagged(inputs.seed, flag, value)


def int_list(flag: str, text: str, low: int | None = None, high: int | None = None) -> list[int]:
    """Comma-separated integers (at least one), each in [low, high]; order kept, repeats dropped."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise BadInput(f"{flag}: expected comma-separated integers, got {_short(text)}")
    values = []
    for item in items:
        if len(item) > 30:
            raise BadInput(f"{flag}: {_short(item)} is not a reasonable integer")
        try:
            values.append(int(item))
        except ValueError:
            raise BadInput(f"{flag}: expected comma-separated integers, got {_short(text)}") from None
    for v in values:
        integer(flag, v, low, high)
    return list(dict.fromkeys(values))


def float_list(flag: str, text: str, low: float | None = None, high: float | None = None,
               low_open: bool = False) -> list[float]:
    """Comma-separated finite numbers (at least one), each checked like `number`."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise BadInput(f"{flag}: expected comma-separated numbers, got {_short(text)}")
    values = []
    for item in items:
        try:
            values.append(float(item))
        except ValueError:
            raise BadInput(f"{flag}: expected comma-separated numbers, got {_short(text)}") from None
    for v in values:
        number(flag, v, low, high, low_open)
    return list(dict.fromkeys(values))


# ---------------------------------------------------------------------------
# sizes (estimated by the code that would build the object)
# ---------------------------------------------------------------------------

def instance_shape(flag: str, vocab: int, depth: int) -> None:
    """Refuse a (V, L) whose instance rows do not fit lp.instance's limits."""

    problem = instance_size_problem(vocab, depth)
    if problem:
        raise BadInput(f"{flag}: {problem}")


def distinct_paths(flag: str, vocab: int, depth: int, paths: int, draft_sampling: str) -> None:
    """Refuse K paths drafted without replacement when there are fewer than K distinct
    paths (V^L; lp.full.check_distinct_paths)."""
    flagged(check_distinct_paths, flag, vocab, depth, paths, draft_sampling)


def full_lp(flag: str, vocab: int, depth: int, paths: int, draft_sampling: str = "iid",
            limit: int | None = None, suggestion: str = "use a smaller V, L or K") -> dict[str, int]:
    """Refuse a K-path LP over `limit` variables (default lp.full.MAX_VARIABLES); returns
    the size estimate (lp.full.check_full_lp_size, the one wording)."""
    return flagged(check_full_lp_size, flag, vocab, depth, paths, draft_sampling, limit, suggestion)


def master_lp(flag: str, vocab: int, depth: int, paths: int, draft_sampling: str = "iid",
              suggestion: str = "use a smaller V, L or K") -> dict[str, int]:
    """Refuse a column-generation master over lp.colgen's limits (its columns, and the
    configurations it enumerates without replacement); returns lp.colgen.master_size."""

    distinct_paths(flag, vocab, depth, paths, draft_sampling)
    size = master_size(vocab, depth, paths, draft_sampling)
    if size["columns"] > MAX_MASTER_COLUMNS:
        raise BadInput(f"{flag}: the column-generation master at V={vocab}, L={depth} would have "
                       f"about {format_count(size['columns'])} columns (limit "
                       f"{MAX_MASTER_COLUMNS:,}); {suggestion}")
    if size["configurations"] > MAX_ENUMERATED_CONFIGURATIONS:
        raise BadInput(f"{flag}: drafting without replacement enumerates "
                       f"{format_count(size['configurations'])} configurations (limit "
                       f"{MAX_ENUMERATED_CONFIGURATIONS:,}); {suggestion}")
    return size


def enumeration(flag: str, vocab: int, depth: int, paths: int, limit: int | None = None,
                suggestion: str = "use a smaller V, L or K") -> int:
    """Refuse exact verifier laws over more than `limit` ordered draft tuples (default
    verifiers.tree.MAX_TUPLES; lp.instance.check_enumeration); returns the count."""
    return flagged(check_enumeration, flag, vocab, depth, paths, limit, suggestion)


def instance_file(path: str | Path, paths: int = 1, draft_sampling: str = "iid",
                  size_flag: str | None = None, exact_laws: bool = True,
                  method: str = "full") -> Any:
    """Read an instance file (lp.instance's reading limits) and refuse it, before any row is
    parsed, when its K-path LP (method "full": the enumerated LP; otherwise the column-
    generation master) or its exact verifier laws would be over the limits. The message
    names the path, or `size_flag` for a size refusal (e.g. --paths)."""

    name = str(path)
    try:
        data = read_instance_json(path)
        vocab, depth = instance_header(data)
    except InstanceError as err:
        text = str(err)
        raise BadInput(text if text.startswith(name) else f"{name}: {text}") from None
    flag = size_flag or name
    hint = "use fewer paths K" if size_flag == "--paths" else "use a smaller instance"
    if method == "full":
        full_lp(flag, vocab, depth, paths, draft_sampling, suggestion=hint)
    else:
        master_lp(flag, vocab, depth, paths, draft_sampling, suggestion=hint)
    if exact_laws:
        enumeration(flag, vocab, depth, paths, suggestion=hint)
    try:
        return instance_from_json(data, name=Path(path).stem)
    except InstanceError as err:
        raise BadInput(f"{name}: {err}") from None


def largest(fits: Any, start: int) -> int:
    """The largest n in 1..start with fits(n) (0 when none): the suggestion of a refusal."""
    n = start
    while n >= 1 and not fits(n):
        n -= 1
    return n


def path_count(vocab: int, depth: int) -> int:
    """V^L (capped at verifiers.tree.SIZE_CAP): the distinct draft paths."""

    return capped_power(vocab, depth)


# ---------------------------------------------------------------------------
# files and folders
# ---------------------------------------------------------------------------

def _no_nul(flag: str, path: str | Path) -> Path:
    if str(path) == "":
        raise BadInput(f"{flag}: empty path")
    if "\x00" in str(path):
        raise BadInput(f"{flag}: {_short(str(path))}: a path cannot contain a NUL byte")
    return Path(path)


def input_path(flag: str, path: str | Path, allow_dir: bool = False) -> Path:
    """An existing regular file (or a directory when allow_dir); never opens a FIFO/device
    (lp.instance.readable_path, naming the flag)."""
    return readable_path(path, flag, allow_dir)


def output_dir(flag: str, path: str | Path) -> Path:
    """A folder that exists and is writable, or can be created. Nothing is left behind: a
    missing folder is probed by creating it (and its missing parents) and removing them."""
    path = _no_nul(flag, path)
    missing: list[Path] = []
    probe = path
    while True:
        try:
            info = os.stat(probe)
        except FileNotFoundError:
            if probe.parent == probe:
                raise BadInput(f"{flag}: {path}: cannot be created") from None
            missing.append(probe)
            probe = probe.parent
            continue
        except OSError as err:
            raise BadInput(f"{flag}: {path}: {err.strerror or err}") from None
        break
    if not stat.S_ISDIR(info.st_mode):
        what = "exists and is not a folder" if probe == path else f"{probe} is not a folder"
        raise BadInput(f"{flag}: {path}: {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BadInput(f"{flag}: {path}: {'not writable' if probe == path else f'{probe} is not writable'}")
    if missing:
        created: list[Path] = []
        try:
            for folder in reversed(missing):
                try:
                    folder.mkdir()
                    created.append(folder)
                except FileExistsError:  # another run created it meanwhile: a folder is fine
                    if not folder.is_dir():
                        raise
        except OSError as err:
            raise BadInput(f"{flag}: {path}: cannot be created ({err.strerror or err})") from None
        finally:
            for folder in reversed(created):  # only what this probe made, deepest first
                try:
                    folder.rmdir()
                except OSError:
                    pass
    return path


# ---------------------------------------------------------------------------
# devices, dtypes, models (clusters: experiments.sweep.check_cluster)
# ---------------------------------------------------------------------------

# device, dtype and model-pair checks: decode.models (check_device, check_dtype,
# check_model_pair); the scheduler address: experiments.sweep.check_cluster


_short = inputs.short

def vocabulary_limits(flag: str, names: list[str], paths: list[int], vocab: int) -> None:
    """Refuse (exit 2) a verifier that cannot run at this vocabulary: khisti enumerates
    V^(K-1) companion tuples per node (verifiers.multipath.KHISTI_MAX_COMPANIONS)."""

    if "khisti" in names and vocab ** (max(paths) - 1) > KHISTI_MAX_COMPANIONS:
        raise BadInput(f"{flag}: khisti enumerates V^(K-1) companion tuples per node: "
                       f"{vocab}^{max(paths) - 1} exceeds {KHISTI_MAX_COMPANIONS:,} at K = {max(paths)} "
                       "on this pair; drop khisti or use fewer paths")
