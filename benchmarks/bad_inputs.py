"""Bad inputs against every command of the CLI (issue 28, last "Done when" bullet).

Our own list of command lines (CASES, data below; at least 360), each with the class it must
end in under the CLI contract (README "The CLI contract"):

    REFUSE        exit 2, ONE stderr line `error: ...` (naming FIELD when the case gives one);
                  with --json also that error as one JSON object on stdout
    SAMPLER_FAIL  exit 1, the sampler blamed: a message naming the sampler and what it did
    OK_ACCEPT     exit 0: only where the input is actually valid (controls)

Each case runs in its own subprocess (`python -m speclp ...`, its own process group, cwd a
fresh temporary folder holding the case's files, stdin /dev/null, offline) under a hard
timeout: the limit the case states (its --time-limit / --call-timeout / --load-timeout,
0 for a refusal) + MARGIN_S. Outcomes: pass, or the first of hang (the timeout), traceback
('Traceback' anywhere in the output), wrong_acceptance (exit 0 on a bad input), wrong_exit,
multi_line_error (an exit 2 that is not one `error: ` line), invalid_json (--json output not
one JSON object, or its error not the stderr line), wrong_field (refused, but the line does
not name the flag at fault: for bench/trees/realgap a refusal for the never-valid --pair
instead means the bad flag was accepted), no_blame (a sampler failure that does not name
the sampler or what it did), orphan (a process the sampler started outlived the audit).

No real model is ever loaded: every bench/trees/realgap case names a model that does not
exist (--pair nosuchmodel), and their flags are checked before the model is resolved.

    python benchmarks/bad_inputs.py                       # all cases, resumable
    python benchmarks/bad_inputs.py --only gap/,audit/sampler --limit 20
    python benchmarks/bad_inputs.py --rerun               # forget the recorded results
    python benchmarks/bad_inputs.py --list                # ids and expected classes

Results: benchmarks/results/bad_inputs/results.json (one record per case, written after
every case: an interrupted run resumes where it stopped; a case whose definition changed is
run again) and README.md (counts per command and class, every non-pass case with the head
of its output). tests/test_bad_inputs.py runs a fixed sample through the same runner.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the repository root = the package speclp
RESULTS = ROOT / "benchmarks" / "results" / "bad_inputs"
MARGIN_S = 45.0  # start-up, instance set-up and teardown on a busy machine, over the stated limit
MEMORY_BYTES = 6 * 2**30  # address-space cap of one case (a case reading /dev/zero must not eat the box)
REFUSE, SAMPLER_FAIL, OK_ACCEPT = "REFUSE", "SAMPLER_FAIL", "OK_ACCEPT"
EXPECTED_EXIT = {REFUSE: 2, SAMPLER_FAIL: 1, OK_ACCEPT: 0}
NO_MODEL = "nosuchmodel"  # never a loadable model
EXAMPLES_TOKEN = "@@EXAMPLES@@"


@dataclass(frozen=True)
class Case:
    """One command line (after `python -m speclp`) and what it must do.

    argv tokens `@NAME` are replaced by the path of the case file NAME (files: NAME -> bytes,
    or DIR / FIFO / SPARSE for a folder, a named pipe, a 200 MB sparse file; a NAME not in
    files is a path that does not exist), `@repo` by the repository root."""

    id: str
    argv: tuple[str, ...]
    expect: str
    field: tuple[str, ...] = ()  # a refusal line must contain one of these
    files: tuple[tuple[str, Any], ...] = ()
    limit_s: float = 0.0  # the limit the command line states (seconds); 0 for a refusal
    says: str = ""  # text the output must contain (sampler failures: what the sampler did)
    pidfile: str = ""  # a case file where the sampler writes the ids of processes it started

    @property
    def command(self) -> str:
        return self.id.split("/", 1)[0]

    def fingerprint(self) -> str:
        text = json.dumps([self.argv, self.expect, self.field, [(n, repr(c)) for n, c in self.files],
                           self.limit_s, self.says, self.pidfile])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


DIR, FIFO, SPARSE = "<dir>", "<fifo>", "<sparse>"


# --- instance files --------------------------------------------------------------------------

def _doc(**over: Any) -> dict[str, Any]:
    """A valid rational instance V = 2, L = 1 (3 rows per model), with fields replaced."""
    data: dict[str, Any] = {"vocab_size": 2, "depth": 1,
                            "target": [["4/5", "1/5"], ["9/10", "1/10"], ["1/10", "9/10"]],
                            "draft": [["1/2", "1/2"], ["0", "1"], ["4/5", "1/5"]]}
    data.update(over)
    return data


def _row(entry: Any, other: Any = "1/2") -> list[list[Any]]:
    """The target rows of _doc with row 0 = [entry, other]."""
    return [[entry, other], ["9/10", "1/10"], ["1/10", "9/10"]]


def _json(data: Any) -> bytes:
    return json.dumps(data).encode()


VALID_INSTANCE = _json(_doc())
FLOAT_INSTANCE = _json(_doc(target=[[0.1, 0.2 + 0.7], [1 / 3, 2 / 3], [0.3, 0.7]],
                            draft=[[0.25, 0.75], [0.6, 0.4], [0.5, 0.5]]))
BAD_FILES: list[tuple[str, Any]] = [  # (what, content or None for a path that does not exist)
    ("missing", None),
    ("directory", DIR),
    ("fifo", FIFO),
    ("huge-sparse", SPARSE),
    ("empty", b""),
    ("binary", bytes(range(256)) * 8),
    ("null", b"null"),
    ("list", b"[]"),
    ("string", b'"x"'),
    ("truncated", b'{"vocab_size": 2, "depth"'),
    ("deep-list", b"[" * 100_000 + b"]" * 100_000),
    ("deep-object", b'{"a": ' * 5000 + b"1" + b"}" * 5000),
    ("no-draft", _json({k: v for k, v in _doc().items() if k != "draft"})),
    ("vocab-1", _json(_doc(vocab_size=1))),
    ("vocab-string", _json(_doc(vocab_size="2"))),
    ("vocab-bool", _json(_doc(vocab_size=True))),
    ("vocab-10k-digits", b'{"vocab_size": ' + b"9" * 10_000 + b', "depth": 1, "target": [], "draft": []}'),
    ("vocab-1e400", b'{"vocab_size": 1e400, "depth": 1, "target": [], "draft": []}'),
    ("depth-0", _json(_doc(depth=0))),
    ("depth-20000", _json(_doc(depth=20000))),
    ("rows-missing-one", _json(_doc(target=_row("1/2")[:-1]))),
    ("row-short", _json(_doc(target=[["1"], ["9/10", "1/10"], ["1/10", "9/10"]]))),
    ("row-nested", _json(_doc(target=[[["1/2", "1/2"]], ["9/10", "1/10"], ["1/10", "9/10"]]))),
    ("nan-entry", b'{"vocab_size": 2, "depth": 1, "target": [[NaN, 0.5], [0.9, 0.1], [0.1, 0.9]],'
                  b' "draft": [[0.5, 0.5], [0, 1], [0.8, 0.2]]}'),
    ("inf-entry", b'{"vocab_size": 2, "depth": 1, "target": [[Infinity, 0.5], [0.9, 0.1], [0.1, 0.9]],'
                  b' "draft": [[0.5, 0.5], [0, 1], [0.8, 0.2]]}'),
    ("float-sum-1.1", _json(_doc(target=_row(0.5, 0.6)))),
    ("rational-sum-5/6", _json(_doc(target=_row("1/2", "1/3")))),
    ("negative-entry", _json(_doc(target=_row("-1/10", "11/10")))),
    ("zero-row", _json(_doc(draft=[["0", "0"], ["0", "1"], ["4/5", "1/5"]]))),
    ("zero-denominator", _json(_doc(target=_row("1/0", "1/2")))),
    ("word-entry", _json(_doc(target=_row("abc")))),
    ("hex-entry", _json(_doc(target=_row("0x1", "0")))),
    ("null-entry", _json(_doc(target=_row(None)))),
    ("bool-entry", _json(_doc(target=_row(True, False)))),
    ("10k-digit-entry", _json(_doc(target=_row("9" * 10_000, "0")))),
    ("10k-digit-denominator", _json(_doc(target=_row("1/" + "7" * 10_000, "1/2")))),
]


# --- sampler files ---------------------------------------------------------------------------

OK_SAMPLER = '''import numpy as np


def f(target_rows, draft_rows, paths, rng):
    """Token-level speculative sampling on path 0, batched (lossless)."""
    batch, _, depth = paths.shape
    vocab = target_rows.shape[-1]
    rows = np.arange(batch)
    out = np.full((batch, depth + 1), -1, dtype=np.int64)
    alive = np.ones(batch, dtype=bool)

    def draw(law):
        law = np.maximum(law, 0.0)
        total = law.sum(axis=1, keepdims=True)
        law = np.where(total > 0, law / np.where(total > 0, total, 1), 1.0 / vocab)
        u = rng.random(len(law))[:, None]
        return np.minimum((np.cumsum(law, axis=1) < u).sum(axis=1), vocab - 1)

    for i in range(depth):
        x = paths[:, 0, i]
        p, q = target_rows[rows, 0, i, x], draft_rows[rows, 0, i, x]
        accept = alive & (rng.random(batch) * q < p)
        out[accept, i] = x[accept]
        reject = alive & ~accept
        if reject.any():
            out[reject, i] = draw(target_rows[reject, 0, i] - draft_rows[reject, 0, i])
        alive = accept
    if alive.any():
        out[alive, depth] = draw(target_rows[alive, 0, depth])
    return out
'''

SAMPLERS: dict[str, tuple[str, str, str]] = {  # name -> (module text, expected class, what it says)
    "raises-at-import": ("raise RuntimeError('broken at import')\n" + OK_SAMPLER, SAMPLER_FAIL,
                         "RuntimeError"),
    "exits-at-import": ("import sys\nsys.exit(3)\n" + OK_SAMPLER, SAMPLER_FAIL, "exit"),
    "loops-at-import": ("while True:\n    pass\n" + OK_SAMPLER, SAMPLER_FAIL, "load"),
    "sleeps-at-import": ("import time\ntime.sleep(600)\n" + OK_SAMPLER, SAMPLER_FAIL, "load"),
    "raises": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    raise ValueError('boom')\n", SAMPLER_FAIL,
               "ValueError"),
    "sys-exit": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import sys\n    sys.exit(0)\n",
                 SAMPLER_FAIL, "exit"),
    "os-exit": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import os\n    os._exit(7)\n",
                SAMPLER_FAIL, ""),
    "segfault": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import ctypes\n    ctypes.string_at(0)\n",
                 SAMPLER_FAIL, ""),
    "infinite-loop": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    while True:\n        pass\n",
                      SAMPLER_FAIL, "within"),
    "sleeps": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import time\n    time.sleep(600)\n",
               SAMPLER_FAIL, "within"),
    "ignores-sigterm": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import signal\n"
                        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    while True:\n"
                        "        pass\n", SAMPLER_FAIL, "within"),
    "reads-stdin": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    input()\n    return f(t, d, p, rng)\n",
                    SAMPLER_FAIL, ""),
    "returns-none": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    return None\n", SAMPLER_FAIL, "None"),
    "returns-string": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    return 'abc'\n", SAMPLER_FAIL, ""),
    "returns-one-block": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    return [[0]]\n", SAMPLER_FAIL,
                          "blocks"),
    "returns-too-long": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import numpy as np\n"
                         "    return np.zeros((p.shape[0], p.shape[2] + 5), dtype=int)\n",
                         SAMPLER_FAIL, ""),
    "returns-out-of-vocab": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    out = f(t, d, p, rng)\n"
                             "    out[:, 0] = 99\n    return out\n", SAMPLER_FAIL, ""),
    "returns-negative-id": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    out = f(t, d, p, rng)\n"
                            "    out[:, 0] = -5\n    return out\n", SAMPLER_FAIL, ""),
    "returns-nan": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import numpy as np\n"
                    "    return np.full((p.shape[0], p.shape[2] + 1), np.nan)\n", SAMPLER_FAIL, ""),
    "returns-empty-blocks": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n"
                             "    return [[] for _ in range(len(p))]\n",
                             SAMPLER_FAIL, ""),
    "returns-3d": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    return f(t, d, p, rng)[:, None, :]\n",
                   SAMPLER_FAIL, ""),
    "wrong-arity": (OK_SAMPLER + "\n\ndef g(t):\n    return t\n", SAMPLER_FAIL, "TypeError"),
    "not-callable": (OK_SAMPLER + "\ng = 3\n", REFUSE, ""),
    "lossy": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import numpy as np\n"
              "    out = np.full((p.shape[0], p.shape[2] + 1), -1)\n    out[:, 0] = p[:, 0, 0]\n"
              "    return out\n", SAMPLER_FAIL, "law test"),
    # valid samplers that do odd things: they must pass, their noise captured, nothing left running
    "prints-to-stdout": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    print('noise ' * 1000)\n"
                         "    import sys\n    print('more noise', file=sys.stderr)\n"
                         "    return f(t, d, p, rng)\n", OK_ACCEPT, ""),
    "prints-at-import": ("print('hello from import')\n" + OK_SAMPLER + "\ng = f\n", OK_ACCEPT, ""),
    "forks": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import os, time\n"
              "    if not os.path.exists('children.pid'):\n        pid = os.fork()\n"
              "        if pid == 0:\n            time.sleep(300)\n            os._exit(0)\n"
              "        with open('children.pid', 'a') as fh:\n            fh.write(f'{pid}\\n')\n"
              "    return f(t, d, p, rng)\n", OK_ACCEPT, ""),
    "spawns": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import os, subprocess\n"
               "    if not os.path.exists('children.pid'):\n"
               "        child = subprocess.Popen(['sleep', '300'])\n"
               "        with open('children.pid', 'a') as fh:\n            fh.write(f'{child.pid}\\n')\n"
               "    return f(t, d, p, rng)\n", OK_ACCEPT, ""),
    "thread-never-ends": (OK_SAMPLER + "\n\nimport threading, time\n"
                          "threading.Thread(target=lambda: time.sleep(300)).start()\ng = f\n",
                          OK_ACCEPT, ""),
    "forks-then-raises": (OK_SAMPLER + "\n\ndef g(t, d, p, rng):\n    import os, time\n    pid = os.fork()\n"
                          "    if pid == 0:\n        time.sleep(300)\n        os._exit(0)\n"
                          "    with open('children.pid', 'a') as fh:\n        fh.write(f'{pid}\\n')\n"
                          "    raise RuntimeError('after fork')\n", SAMPLER_FAIL, "RuntimeError"),
}


# --- the list --------------------------------------------------------------------------------

def _replace(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with flag set to value (None: flag removed; a new flag is appended)."""
    out, i, done = [], 0, False
    while i < len(argv):
        if argv[i] == flag:
            if value is not None and not done:
                out += [flag, value]
                done = True
            i += 2
            continue
        out.append(argv[i])
        i += 1
    if value is not None and not done:
        out += [flag, value]
    return out


MODEL_COMMANDS = ("bench", "trees", "realgap")
SAMPLER_LIMITS = ["--trials", "1", "--time-limit", "2", "--call-timeout", "3", "--load-timeout", "3"]
SAMPLER_LIMIT_S = 2 + 3 + 3
BASES: dict[str, list[str]] = {  # a small valid command line per command (model commands: no model)
    "solve": ["solve"],
    "instance": ["instance", "--out", "@new.json", "--vocab", "2", "--depth", "1", "--denominator", "10"],
    "check class-equals-full": ["check", "class-equals-full", "--trials", "1", "--vocab", "2",
                                "--depth", "1", "--paths", "1"],
    "check node-form": ["check", "node-form", "--trials", "1", "--vocab", "2", "--depth", "1",
                        "--paths", "1"],
    "check bv-optimal": ["check", "bv-optimal", "--trials", "1", "--vocab", "2", "--depth", "1"],
    "audit": ["audit", "--verifier", "bv", "--trials", "1", "--vocab", "2", "--depth", "1"],
    "audit-sampler": ["audit", "--sampler", "@ok.py:f", "--vocab", "2", "--depth", "1", *SAMPLER_LIMITS],
    "lossless": ["lossless", "--trials", "1", "--vocab", "2", "--depth", "1"],
    "gap": ["gap", "@inst.json", "--paths", "1"],
    "sweep": ["sweep", "--vocab", "2", "--depth", "1", "--paths", "1", "--trials", "1", "--verifiers",
              "bv", "--out", "@sw", "--format", "csv"],
    "plot": ["plot", "@repo/benchmarks/results/sweep", "--out", "@figs"],
    "bench": ["bench", "--pair", NO_MODEL, "--out", "@out"],
    "trees": ["trees", "--pair", NO_MODEL, "--out", "@out"],
    "realgap": ["realgap", "--pair", NO_MODEL, "--out", "@out"],
    "prove": ["prove", "bv-optimal", "--out", "@proof"],
}
BASE_FILES: dict[str, tuple[tuple[str, Any], ...]] = {
    "gap": (("inst.json", VALID_INSTANCE),),
    "audit-sampler": (("ok.py", OK_SAMPLER.encode()),),
}
SAMPLER_ONLY_FLAGS = {"--search", "--layout", "--max-runs", "--runs", "--call-timeout", "--load-timeout",
                      "--time-limit", "--alpha", "--unbatched", "--instance"}


def _base(name: str) -> tuple[list[str], tuple[tuple[str, Any], ...]]:
    return list(BASES[name]), BASE_FILES.get(name, ())


class _Builder:
    def __init__(self) -> None:
        self.cases: list[Case] = []

    def add(self, id_: str, argv: list[str], expect: str, field: str | tuple[str, ...] = (),
            files: tuple[tuple[str, Any], ...] = (), limit_s: float = 0.0, says: str = "",
            pidfile: str = "") -> None:
        fields = (field,) if isinstance(field, str) else tuple(field)
        self.cases.append(Case(id_, tuple(argv), expect, fields, tuple(files), limit_s, says, pidfile))

    def flag(self, base: str, flag: str, value: str, expect: str = REFUSE,
             field: str | tuple[str, ...] | None = None, tag: str = "", drop: tuple[str, ...] = (),
             extra: tuple[str, ...] = (), files: tuple[tuple[str, Any], ...] = ()) -> None:
        """A case: the base command line of `base` with one flag set (and others dropped/added)."""
        argv, base_files = _base(base)
        for name in drop:
            argv = _replace(argv, name, None)
        argv = _replace(argv, flag, value) + list(extra)
        command = base.replace(" ", "-") if base != "audit-sampler" else "audit"
        sub = "sampler:" if base == "audit-sampler" else ""
        self.add(f"{command}/{sub}{flag.lstrip('-')}={_label(value)}{tag}", argv, expect,
                 flag if field is None else field, base_files + files,
                 SAMPLER_LIMIT_S if base == "audit-sampler" else 0.0)


def _label(value: str) -> str:
    if len(value) > 24:
        return f"{value[:10]}..({len(value)} chars)"
    return value if value else "''"


def generic_cases(builder: _Builder) -> None:
    """Per command of the app (enumerated from it): an unknown option, and per option one case:
    a text option without its value, an integer option given 1.5, a float option given nan."""
    for path, command in leaf_commands():
        name = " ".join(path)
        base = name if name in BASES else name.split()[0]
        builder.add(f"{name.replace(' ', '-')}/unknown-option", BASES[base] + ["--no-such-flag", "1"],
                    REFUSE, "--no-such-flag", BASE_FILES.get(base, ()))
        for param in command.params:
            if param.param_type_name != "option" or getattr(param, "is_flag", False):
                continue
            flag = max(param.opts, key=len)
            where = "audit-sampler" if name == "audit" and flag in SAMPLER_ONLY_FLAGS else base
            argv, files = _base(where)
            id_base = f"{name.replace(' ', '-')}/{flag.lstrip('-')}"
            kind = _kind(param)
            if kind == "str" and base in MODEL_COMMANDS:
                continue  # their text options: the lists of range_cases
            if kind == "str":  # one case per option: a missing value, or a value of the wrong type
                builder.add(f"{id_base}:missing-value", _replace(argv, flag, None) + [flag], REFUSE,
                            flag, files)
            else:
                builder.flag(where, flag, "1.5" if kind == "int" else "nan")


def leaf_commands() -> list[tuple[tuple[str, ...], Any]]:
    """(command path, click command) for every command registered on the app
    (speclp.cli.leaf_commands, as tests/test_cli_fuzz.py enumerates them)."""
    from speclp.cli import leaf_commands as registered

    return registered()


def _kind(param: Any) -> str:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation in (int, float):
        return annotation.__name__
    name = getattr(getattr(param, "type", None), "name", "")
    return {"integer": "int", "float": "float"}.get(name, "str")


def file_cases(builder: _Builder) -> None:
    """Every bad instance file against solve, gap and audit --sampler --instance."""
    for n, (what, content) in enumerate(BAD_FILES):  # every file on gap, every third on the others
        files = () if content is None else (("bad.json", content),)
        builder.add(f"gap/file:{what}", ["gap", "@bad.json", "--paths", "1"], REFUSE, (), files)
        if n % 3 == 0:
            builder.add(f"solve/file:{what}", ["solve", "@bad.json"], REFUSE, (), files)
        if n % 3 == 1:
            argv, base_files = _base("audit-sampler")
            builder.add(f"audit/sampler:instance-file:{what}", argv + ["--instance", "@bad.json"], REFUSE,
                        (), base_files + files, SAMPLER_LIMIT_S)
        if n % 3 == 2 and n < 12:  # plot: results that are not results
            builder.add(f"plot/results:{what}", ["plot", "@bad.json", "--out", "@figs"], REFUSE, (), files)


def sampler_cases(builder: _Builder) -> None:
    argv, base_files = _base("audit-sampler")
    for name, (text, expect, says) in SAMPLERS.items():
        function = "f" if name.endswith("-at-import") else "g"
        files = base_files + (("s.py", text.encode()),)
        limit = SAMPLER_LIMIT_S
        line = _replace(argv, "--sampler", f"@s.py:{function}")
        pidfile = "children.pid" if name in ("forks", "spawns", "forks-then-raises") else ""
        builder.add(f"audit/sampler-does:{name}", line, expect, "--sampler" if expect == REFUSE else (),
                    files, limit, says, pidfile)
        if name in ("raises", "prints-to-stdout"):
            builder.add(f"audit/sampler-does:{name}:json", line + ["--json"], expect,
                        "--sampler" if expect == REFUSE else (), files, limit, says, pidfile)
    # specs that name nothing callable: bad input, exit 2, the sampler never ran
    files = base_files + (("syntax.py", b"def f(:\n"), ("bin.py", bytes(range(256)) * 4),
                          ("dir.py", DIR), ("empty.py", b""))
    for label, spec in [("empty", ""), ("no-colon", "@ok.py"), ("no-function", "@ok.py:"),
                        ("no-module", ":f"), ("missing-file", "@missing.py:f"),
                        ("missing-function", "@ok.py:nope"), ("syntax-error", "@syntax.py:f"),
                        ("binary-file", "@bin.py:f"), ("directory", "@dir.py:f"),
                        ("empty-file", "@empty.py:f"), ("no-such-module", "no_such_module_xyz:f"),
                        ("module-without-function", "json:no_such_function"),
                        ("two-colons", "@ok.py:f:g"), ("fifo-file", "@fifo.py:f"),
                        ("dev-zero", "/dev/zero:f")]:
        extra = (("fifo.py", FIFO),) if label == "fifo-file" else ()
        builder.add(f"audit/sampler-spec:{label}", _replace(argv, "--sampler", spec), REFUSE, "--sampler",
                    files + extra)
    builder.add("audit/sampler-spec:os-system", _replace(argv, "--sampler", "os:system"), SAMPLER_FAIL,
                (), files, SAMPLER_LIMIT_S, "TypeError")


def range_cases(b: _Builder) -> None:  # noqa: PLR0915 (a list of data)
    """Out-of-range, empty, huge, negative, unknown names, conflicting and unused flags."""
    huge = str(10**30)
    # solve
    for flag, value in [("--builtin", "nope"), ("--builtin", ""), ("--depth", "0"), ("--depth", "-1"),
                        ("--depth", huge), ("--depth", "40"), ("--backend", "nope"), ("--backend", "")]:
        b.flag("solve", flag, value)
    b.add("solve/instance-and-builtin", ["solve", "@inst.json", "--builtin", "bv-toy"], REFUSE,
          ("--builtin", "instance"), (("inst.json", VALID_INSTANCE),))
    b.add("solve/depth-unused-with-file", ["solve", "@inst.json", "--depth", "2"], REFUSE, "--depth",
          (("inst.json", VALID_INSTANCE),))
    # instance
    for flag, value in [("--family", "nope"), ("--family", ""), ("--vocab", "1"), ("--vocab", "0"),
                        ("--vocab", "-1"), ("--vocab", huge), ("--vocab", "100000"), ("--depth", "0"),
                        ("--depth", "-2"), ("--depth", "100"), ("--alpha", "0"), ("--alpha", "-1"),
                        ("--seed", "-1"), ("--denominator", "0"), ("--denominator", "-1"),
                        ("--out", ""), ("--out", "/proc/nonexistent/x.json"), ("--out", "@dir"),
                        ("--out", "@existing.json")]:
        b.flag("instance", flag, value, files=(("dir", DIR), ("existing.json", VALID_INSTANCE)))
    for flag, value in [("--temperature", "0"), ("--temperature", "-1"), ("--noise", "-1")]:
        b.flag("instance", flag, value, extra=("--family", "temperature"))
    for flag, value, family in [("--alpha", "2", "temperature"), ("--temperature", "2", "dirichlet"),
                                ("--noise", "0.1", "dirichlet"), ("--alpha", "2", "ties"),
                                ("--temperature", "2", "ties")]:
        b.flag("instance", flag, value, tag=f":unused-with-{family}", extra=("--family", family))
    b.add("instance/no-out", _replace(BASES["instance"], "--out", None), REFUSE, "--out")
    # check
    for sub in ("class-equals-full", "node-form", "bv-optimal"):
        base = f"check {sub}"
        pairs = [("--trials", "0"), ("--trials", "-1"), ("--vocab", "1"), ("--depth", "0"),
                 ("--alpha", "0"), ("--alpha", "-1"), ("--denominator", "-1"), ("--backend", "nope"),
                 ("--save-dir", "/proc/nonexistent/x"),
                 ("--seed", "-1")][:: 1 if sub == "class-equals-full" else 3]
        if sub != "bv-optimal":
            pairs += [("--paths", "0"), ("--draft-sampling", "nope")]
        else:
            pairs += [("--verifier", "nope"), ("--verifier", "")]
        if sub == "node-form":
            pairs += [("--against", "nope")]
        for flag, value in pairs:
            b.flag(base, flag, value)
        b.flag(base, "--vocab", "50", tag=":size", extra=("--depth", "6"), drop=("--depth",),
               field=("--vocab", "--depth", "--paths"))
    b.flag("check class-equals-full", "--against", "full", tag=":unused")
    b.flag("check bv-optimal", "--trials", huge)
    b.flag("lossless", "--trials", huge)
    b.flag("sweep", "--trials", huge)
    b.flag("check class-equals-full", "--paths", "3", tag=":distinct-paths",
           extra=("--draft-sampling", "without-replacement"))
    # audit --verifier
    for flag, value in [("--verifier", "nope"), ("--verifier", ""), ("--paths", "0"), ("--paths", "-1"),
                        ("--vocab", "1"), ("--vocab", "100000"), ("--depth", "0"), ("--depth", "60"),
                        ("--trials", "0"), ("--trials", huge), ("--seed", "-1"), ("--family", "nope"),
                        ("--draft-sampling", "nope"), ("--save-dir", "/proc/nonexistent/x"),
                        ("--save-dir", "@file")]:
        b.flag("audit", flag, value, files=(("file", b"x"),))
    b.flag("audit", "--paths", "5", tag=":distinct-paths", extra=("--draft-sampling", "without-replacement"))
    b.flag("audit", "--family", "dirichlet", tag=":ties-conflict", extra=("--ties",), field=("--ties",
                                                                                                 "--family"))
    b.add("audit/neither-verifier-nor-sampler", ["audit", "--trials", "1"], REFUSE,
          ("--verifier", "--sampler"))
    argv, files = _base("audit-sampler")
    b.add("audit/verifier-and-sampler", argv + ["--verifier", "bv"], REFUSE, ("--verifier", "--sampler"),
          files)
    for flag, value in [("--search", "3"), ("--layout", "ragged"), ("--max-runs", "10"),
                        ("--call-timeout", "5"), ("--load-timeout", "5"), ("--time-limit", "5"),
                        ("--alpha", "0.01"), ("--unbatched", None), ("--instance", "@inst.json")]:
        extra = (flag,) if value is None else (flag, value)
        b.add(f"audit/verifier-unused:{flag.lstrip('-')}", BASES["audit"] + list(extra), REFUSE, flag,
              (("inst.json", VALID_INSTANCE),))
    # audit --sampler flags
    for flag, value in [("--max-runs", "0"), ("--max-runs", "-1"), ("--max-runs", str(10**10)),
                        ("--time-limit", "0"), ("--time-limit", "-1"), ("--call-timeout", "0"),
                        ("--call-timeout", "-1"), ("--load-timeout", "0"), ("--load-timeout", "-5"),
                        ("--alpha", "0"), ("--alpha", "1"), ("--alpha", "1.5"), ("--alpha", "-0.1"),
                        ("--layout", "nope"), ("--layout", ""), ("--search", "-1"), ("--family", "nope"),
                        ("--paths", "0"), ("--vocab", "1"), ("--depth", "0"), ("--trials", "0"),
                        ("--instance", "")]:
        b.flag("audit-sampler", flag, value)
    b.flag("audit-sampler", "--instance", "@missing.json", field=("--instance", "missing.json"))
    b.add("audit/sampler:exact", _base("audit-sampler")[0] + ["--exact"], REFUSE, "--exact",
        _base("audit-sampler")[1], SAMPLER_LIMIT_S)
    b.flag("audit-sampler", "--layout", "ragged", tag=":paths-2", extra=("--paths", "2"),
           field=("--layout", "--paths"))
    b.flag("audit-sampler", "--layout", "batched", tag=":with-unbatched", extra=("--unbatched",),
           field=("--layout", "--unbatched"))
    b.flag("audit-sampler", "--instance", "@inst.json", tag=":with-vocab-3", extra=("--vocab", "3"),
           files=(("inst.json", VALID_INSTANCE),), field=("--instance", "--vocab"))
    # lossless
    for flag, value in [("--method", "nope"), ("--method", ""), ("--temperature", "0"),
                        ("--temperature", "-1"), ("--target-top-k", "0"), ("--target-top-k", "-1"),
                        ("--target-top-p", "0"), ("--target-top-p", "1.5"), ("--target-top-p", "-0.1"),
                        ("--draft-top-k", "0"), ("--draft-top-p", "2"), ("--verify-temperature", "0"),
                        ("--verify-target-top-k", "0"), ("--verify-target-top-p", "0"),
                        ("--verify-draft-top-k", "-1"), ("--verify-draft-top-p", "1.1"),
                        ("--vocab", "1"), ("--vocab", "100000"), ("--depth", "0"), ("--trials", "0"),
                        ("--seed", "-1")][::2]:
        b.flag("lossless", flag, value)
    for flag, value, method in [("--threshold-single", "-1", "threshold"),
                                ("--threshold-acc", "-1", "threshold"),
                                ("--typical-epsilon", "-1", "typical"),
                                ("--typical-delta", "-0.5", "typical"),
                                ("--weight", "2", "ensemble"), ("--weight", "-0.5", "ensemble")]:
        b.flag("lossless", flag, value, extra=("--method", method))
    for flag, value in [("--threshold-single", "0.5"), ("--threshold-acc", "0.5"),
                        ("--typical-epsilon", "0.1"), ("--typical-delta", "0.2"), ("--weight", "0.5")]:
        b.flag("lossless", flag, value, tag=":unused-with-speculative")
    # gap
    for flag, value in [("--paths", "0"), ("--paths", "-1"), ("--paths", huge), ("--paths", "1000"),
                        ("--draft-sampling", "nope"), ("--verifiers", "nope"), ("--verifiers", ""),
                        ("--verifiers", "bv,nope"), ("--method", "nope"),
                        ("--backend", "nope"), ("--time-limit", "0"), ("--time-limit", "-1"),
                        ("--max-enumerated", "0"), ("--max-enumerated", "-1"), ("--samples", "0"),
                        ("--samples", "-1"), ("--seed", "-1"), ("--save-dir", "/proc/nonexistent/x"),
                        ("--save-dir", "@inst.json")]:
        b.flag("gap", flag, value)
    b.flag("gap", "--paths", "3", tag=":distinct-paths", extra=("--draft-sampling", "without-replacement"))
    b.flag("gap", "--backend", "cvxpy", tag=":unused-with-colgen", extra=("--method", "colgen"))
    b.flag("gap", "--verifiers", "bv,,gbv", OK_ACCEPT, ())  # comma lists drop empty items, by design
    # sweep
    for flag, value in [("--vocab", ""), ("--vocab", "1"), ("--vocab", "2,x"), ("--vocab", "0"),
                        ("--vocab", "-1"), ("--vocab", "2,,3"), ("--vocab", "100000"), ("--depth", "0"),
                        ("--depth", "1e9"), ("--depth", huge), ("--paths", "0"), ("--paths", ""),
                        ("--alpha", "-1"), ("--alpha", "nan"), ("--alpha", "0"), ("--alpha", "x"),
                        ("--temperature", "0"), ("--temperature", "-1"), ("--temperature", "inf"),
                        ("--trials", "0"), ("--trials", "-1"), ("--seed", "-1"), ("--draft-sampling", "x"),
                        ("--backend", "x"), ("--method", "x"), ("--max-enumerated", "0"),
                        ("--samples", "0"), ("--verifiers", "nope"), ("--verifiers", ""),
                        ("--format", "xlsx"), ("--workers", "0"), ("--workers", "-1"),
                        ("--workers", "1000000"), ("--out", "/proc/nonexistent/x"), ("--out", "@file"),
                        ("--cluster", "bogus-cluster")][::2]:
        b.flag("sweep", flag, value, files=(("file", b"x"),))
    b.flag("sweep", "--max-variables", "0", extra=("--method", "full"))
    b.flag("sweep", "--max-variables", "1000", tag=":unused-with-auto")
    # the full LP at V = 8, L = 5, K = 1: 8^5 paths x 6 depths x 8 tokens ~ 1.6e6 variables > 4e5
    b.flag("sweep", "--vocab", "8", tag=":full-too-large", extra=("--depth", "5", "--method", "full"),
           drop=("--depth",), field=("--vocab", "--depth", "--paths", "--max-variables"))
    # plot
    for flag, value in [("--out", "/proc/nonexistent/x"), ("--out", "@file"), ("--out", "")]:
        b.flag("plot", flag, value, files=(("file", b"x"),))
    b.add("plot/results:empty-dir", ["plot", "@empty", "--out", "@figs"], REFUSE, (), (("empty", DIR),))
    b.add("plot/results:dir-of-junk", ["plot", "@junk", "--out", "@figs"], REFUSE, (),
          (("junk", DIR), ("junk/results.json", b"{not json"), ("junk/rows.parquet", b"PAR1garbage")))
    b.add("plot/results:dev-zero", ["plot", "/dev/zero", "--out", "@figs"], REFUSE)
    # model commands: every flag checked before the (never valid) model; 5 s of torch import
    # per case, so each list is spread over the three commands rather than repeated
    model_files = (("dir", DIR), ("empty", b""), ("bin", bytes(range(256)) * 8), ("fifo", FIFO),
                   ("file", b"x"))
    shared = [("--prompts", "nope"), ("--prompts", ""), ("--prompts", "humaneval:0"),
              ("--prompts", "humaneval:-1"), ("--prompts", "humaneval:x"), ("--prompts", "humaneval:100000"),
              ("--prompts", "file:@missing"), ("--prompts", "file:@dir"), ("--prompts", "file:@empty"),
              ("--prompts", "file:@bin"), ("--prompts", "file:/dev/zero"), ("--prompts", "file:@fifo"),
              ("--out", "/proc/nonexistent/x"), ("--out", "@file"), ("--temperature", "-1"),
              ("--temperature", "1,-0.5"), ("--draft-temperature", "-1"), ("--threads", "0"),
              ("--seed", "-1"),
              ("--pair", ""), ("--pair", "a,b"), ("--pair", "x" * 300), ("--pair", "@dir"),
              ("--pair", "../../etc"), ("--pair", "nosuchmodel,nosuchmodel2"), ("--pair", ",")]
    for n, (flag, value) in enumerate(shared):
        b.flag(MODEL_COMMANDS[n % 3], flag, value, files=model_files)
    for flag, value in [("--verifiers", "nope"), ("--drive", "nope"), ("--paths", "0"), ("--paths", "1,x"),
                        ("--depth", "100000"), ("--top-p", "0"), ("--top-p", "1.5"),
                        ("--max-new-tokens", "0"),
                        ("--batch", "0"), ("--device", "tpu"), ("--dtype", "nope"), ("--score-dtype", "fp16"),
                        ("--temperature", "nan,1")]:
        b.flag("bench", flag, value)
    b.flag("bench", "--prompt-seed", "3", tag=":unused-with-file", extra=("--prompts", "file:@file"),
           files=(("file", b"def f():\n    pass\n"),))
    for flag, value in [("--budgets", "0"), ("--budgets", "x"), ("--budgets", "2,-1"), ("--rules", "nope"),
                        ("--top", "1"), ("--depth", "0"), ("--every", "0"), ("--engine-budgets", "3"),
                        ("--engine-verifiers", "nope"), ("--engine-tokens", "0"), ("--time-limit", "0")]:
        b.flag("trees", flag, value)
    b.add("trees/skip-trees-without-engine-budgets", BASES["trees"] + ["--skip-trees"], REFUSE,
          ("--skip-trees", "--engine-budgets"))
    for flag, value in [("--instances", "nope"), ("--depth", "0"), ("--paths", ""), ("--top", "0"),
                        ("--samples", "1"), ("--batch", "0"), ("--verifiers", "nope"),
                        ("--score-dtype", "fp16"),
                        ("--contexts-per-prompt", "0")]:
        b.flag("realgap", flag, value)
    b.flag("realgap", "--top", "6", tag=":renormalised-M>5", extra=("--instances", "renormalised"))
    b.flag("realgap", "--top", "2,0", tag=":schedule-member-below-1")  # a cap schedule: each M >= 1
    b.flag("realgap", "--top", "200,300", tag=":schedule-over-coarse-limit", extra=("--depth", "1,3"))
    for flag, value in [("--width-target", "-0.1"), ("--context-budget", "0"),
                        ("--context-budget", "inf")]:
        b.flag("realgap", flag, value)
    for value in ("0", "x", "1e99"):
        b.flag("realgap", "--kept-limit", value)
    b.flag("realgap", "--kept-limit", "100", tag=":renormalised",
           extra=("--instances", "renormalised", "--top", "3", "--paths", "1"))
    b.flag("realgap", "--context-budget", "60", tag=":renormalised",
           extra=("--instances", "renormalised", "--top", "3", "--paths", "1"))
    # prove
    for flag, value in [("--vocab", "1"), ("--vocab", "0"), ("--vocab", "100000"), ("--depth", "0"),
                        ("--depth", "100"), ("--paths", "0"), ("--draft-sampling", "nope"),
                        ("--time-limit", "0"), ("--time-limit", "-1"), ("--seed", "-1"),
                        ("--out", "/proc/nonexistent/x"), ("--out", "@file"),
                        ("--save-dir", "/proc/nonexistent/x")]:
        b.flag("prove", flag, value, files=(("file", b"x"),))
    b.flag("prove", "--draft-sampling", "without-replacement", tag=":unused-with-bv-optimal")
    for claim in ("nope", "", "BV-OPTIMAL"):
        b.add(f"prove/claim={_label(claim)}", ["prove", claim, "--out", "@proof"], REFUSE, ("claim", claim or
                                                                                             "CLAIM"))


def control_cases(b: _Builder) -> None:
    """Valid inputs (OK_ACCEPT): the refusals above are not everything refused."""
    inst = (("inst.json", VALID_INSTANCE),)
    b.add("solve/ok:builtin", ["solve"], OK_ACCEPT)
    b.add("solve/ok:file-json", ["solve", "@inst.json", "--json"], OK_ACCEPT, (), inst)
    b.add("solve/ok:float-file", ["solve", "@inst.json"], OK_ACCEPT, (), (("inst.json", FLOAT_INSTANCE),))
    b.add("gap/ok", ["gap", "@inst.json", "--paths", "2", "--json"], OK_ACCEPT, (), inst)
    for family, vocab, depth, seed in [("dirichlet", 3, 3, 1), ("dirichlet", 3, 2, 2),
                                       ("temperature", 3, 2, 3),
                                       ("ties", 3, 2, 0)]:
        b.add(f"instance/ok:{family}-V{vocab}-L{depth}-s{seed}-float",
              ["instance", "--out", "@new.json", "--family", family, "--vocab", str(vocab), "--depth",
               str(depth), "--seed", str(seed), "--json"], OK_ACCEPT)
    b.add("instance/ok:force", ["instance", "--out", "@existing.json", "--force", "--denominator", "10"],
          OK_ACCEPT, (), (("existing.json", VALID_INSTANCE),))
    b.add("check-class-equals-full/ok", BASES["check class-equals-full"] + ["--json"], OK_ACCEPT)
    b.add("check-bv-optimal/ok", BASES["check bv-optimal"], OK_ACCEPT)
    b.add("audit/ok:verifier-bv", BASES["audit"] + ["--json"], OK_ACCEPT)
    argv, files = _base("audit-sampler")
    b.add("audit/ok:sampler", argv, OK_ACCEPT, (), files, SAMPLER_LIMIT_S)
    # --instance fixes V, L and the instances: the valid form gives none of --vocab/--depth/--trials
    drop = {"--vocab", "--depth", "--trials"}
    on_file = [a for i, a in enumerate(argv) if a not in drop and (i == 0 or argv[i - 1] not in drop)]
    b.add("audit/ok:sampler-instance", on_file + ["--instance", "@inst.json"], OK_ACCEPT, (),
          files + inst, SAMPLER_LIMIT_S)
    b.add("lossless/ok:speculative", BASES["lossless"] + ["--json"], OK_ACCEPT)
    b.add("sweep/ok", BASES["sweep"] + ["--json"], OK_ACCEPT)
    b.add("plot/ok:sweep", BASES["plot"], OK_ACCEPT)
    b.add("prove/ok:bv-optimal", BASES["prove"] + ["--json"], OK_ACCEPT)


def build_cases() -> list[Case]:
    builder = _Builder()
    generic_cases(builder)
    file_cases(builder)
    sampler_cases(builder)
    range_cases(builder)
    control_cases(builder)
    ids = [case.id for case in builder.cases]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    if duplicates:
        raise ValueError(f"duplicate case ids: {duplicates[:5]}")
    return builder.cases


# --- running ---------------------------------------------------------------------------------

def materialise(case: Case, folder: Path) -> list[str]:
    """Create the case's files in folder; return its argv with @tokens replaced."""
    for name, content in case.files:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == DIR:
            path.mkdir(exist_ok=True)
        elif content == FIFO:
            os.mkfifo(path)
        elif content == SPARSE:
            with open(path, "wb") as fh:
                fh.truncate(200 * 2**20)
        else:
            data = content.replace(EXAMPLES_TOKEN.encode(), str(ROOT / "examples").encode())
            path.write_bytes(data)
    names = sorted({name.split("/")[0] for name, _ in case.files} | _tokens(case.argv), key=len, reverse=True)
    out = []
    for arg in case.argv:
        arg = arg.replace("@repo", str(ROOT))
        for name in names:
            arg = arg.replace(f"@{name}", str(folder / name))
        out.append(arg)
    return out


def _tokens(argv: tuple[str, ...]) -> set[str]:
    """Names after @ in argv (files that do not exist are tokens too)."""
    found = set()
    for arg in argv:
        for piece in arg.split("@")[1:]:
            name = piece.split(":")[0].split(",")[0]
            if name and name != "repo" and not name.startswith("repo/"):
                found.add(name)
    return found


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def run_case(case: Case, margin_s: float = MARGIN_S) -> dict[str, Any]:
    """Run one case in a subprocess; its record (outcome 'pass' or the first violation)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT.parent) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="200", PYTHONDONTWRITEBYTECODE="1")
    env.pop("SPECLP_DEBUG", None)
    timeout = case.limit_s + margin_s
    with tempfile.TemporaryDirectory(prefix="speclp-bad-") as tmp:
        folder = Path(tmp)
        argv = materialise(case, folder)
        start = time.monotonic()
        process = subprocess.Popen([sys.executable, "-m", "speclp", *argv], cwd=folder, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, preexec_fn=_limit_memory)
        hung = False
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            _kill_group(process.pid)
            out, err = process.communicate()
        seconds = time.monotonic() - start
        _kill_group(process.pid)  # anything left in the command's own group
        orphans = []
        if case.pidfile and (folder / case.pidfile).exists():
            for line in (folder / case.pidfile).read_text().split():
                if line.isdigit() and _alive(int(line)):
                    orphans.append(int(line))
                    os.kill(int(line), signal.SIGKILL)  # a process this case started
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    outcome, detail = classify(case, argv, process.returncode, stdout, stderr, hung, orphans)
    return {"id": case.id, "command": case.command, "expect": case.expect, "outcome": outcome,
            "detail": detail, "exit": None if hung else process.returncode, "seconds": round(seconds, 2),
            "timeout_s": timeout, "argv": list(case.argv), "stdout_head": stdout[:600],
            "stderr_head": stderr[:600], "fingerprint": case.fingerprint()}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def classify(case: Case, argv: list[str], code: int | None, stdout: str, stderr: str, hung: bool,
             orphans: list[int]) -> tuple[str, str]:
    """The first violation of the case's contract, or ('pass', '')."""
    if hung:
        return "hang", f"no exit within {case.limit_s:g} s (stated) + {MARGIN_S:g} s"
    if "Traceback" in stdout + stderr:
        return "traceback", ""
    expected = EXPECTED_EXIT[case.expect]
    if code == 0 and case.expect != OK_ACCEPT:
        return "wrong_acceptance", "exit 0 on a bad input"
    if code != expected:
        return "wrong_exit", f"exit {code}, expected {expected}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if code == 2 and (len(lines) != 1 or not lines[0].startswith("error: ")):
        return "multi_line_error", f"{len(lines)} stderr lines"
    if "--json" in argv:
        try:
            record = json.loads(stdout)
        except ValueError:
            return "invalid_json", "stdout is not one JSON object"
        if not isinstance(record, dict):
            return "invalid_json", "stdout is JSON but not an object"
        if code == 2 and (record.get("exit_status") != 2 or record.get("error") != lines[0][len("error: "):]):
            return "invalid_json", "the JSON error is not the stderr line"
    if code == 2 and case.field and not any(f in lines[0] for f in case.field):
        if case.command in MODEL_COMMANDS and "--pair" in lines[0] and "--pair" not in case.field:
            return "wrong_field", "refused only for the model (--pair): the bad flag was accepted"
        return "wrong_field", f"the line does not name {' or '.join(case.field)}"
    if case.expect == SAMPLER_FAIL:
        text = stdout + stderr
        if "sampler" not in text or (case.says and case.says.lower() not in text.lower()):
            also = f" and {case.says!r}" if case.says else ""
            return "no_blame", f"output does not name the sampler{also}"
    if orphans:
        return "orphan", f"{len(orphans)} process(es) the sampler started still ran after the audit"
    return "pass", ""


# --- results ---------------------------------------------------------------------------------

def select(cases: list[Case], only: str | None) -> list[Case]:
    if not only:
        return cases
    patterns = [p for p in only.split(",") if p]
    return [c for c in cases if any(c.id.startswith(p) or fnmatch.fnmatch(c.id, p) for p in patterns)]


def load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"records": {}}


def save_results(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    tmp.replace(path)


def summary(cases: list[Case], records: dict[str, Any]) -> dict[str, Any]:
    current = {c.id: c for c in cases}
    done = [r for i, r in records.items() if i in current and r["fingerprint"] == current[i].fingerprint()]
    outcomes = Counter(r["outcome"] for r in done)
    return {"cases": len(cases), "run": len(done), "outcomes": dict(sorted(outcomes.items())),
            "expected": dict(sorted(Counter(c.expect for c in cases).items()))}


def write_readme(out: Path, cases: list[Case], records: dict[str, Any], command: str, note: str = "") -> None:
    current = {c.id: c for c in cases}
    done = [r for i, r in sorted(records.items()) if i in current
            and r["fingerprint"] == current[i].fingerprint()]
    info = summary(cases, records)
    outcome_names = sorted({r["outcome"] for r in done} | {"pass"})
    lines = ["# Bad inputs against every command (issue 28)", "",
             f"Command: `{command}` (resumable; `--only`, `--limit`; see benchmarks/bad_inputs.py).", "",
             *([note, ""] if note else []),
             f"{info['run']} of {info['cases']} cases run; expected classes {info['expected']}; "
             f"outcomes {info['outcomes']}.", "",
             "Outcomes: pass, or the first violation of hang (past the stated limit + "
             f"{MARGIN_S:g} s), traceback, wrong_acceptance (exit 0 on a bad input), wrong_exit, "
             "multi_line_error, invalid_json, wrong_field (refused, not naming the flag at fault), "
             "no_blame (sampler failure not naming the sampler / what it did), orphan (a process the "
             "sampler started outlived the audit). Wall seconds depend on the machine (2 shared cores).", "",
             "| command | expected | cases | " + " | ".join(outcome_names) + " |",
             "|---|---|---|" + "---|" * len(outcome_names)]
    table: dict[tuple[str, str], Counter] = {}
    for r in done:
        table.setdefault((r["command"], r["expect"]), Counter())[r["outcome"]] += 1
    for (command_name, expect), counts in sorted(table.items()):
        lines.append(f"| {command_name} | {expect} | {sum(counts.values())} | "
                     + " | ".join(str(counts.get(o, 0)) for o in outcome_names) + " |")
    bad = [r for r in done if r["outcome"] != "pass"]
    lines += ["", f"## Cases that did not pass ({len(bad)})", ""]
    for r in bad:
        head = (r["stderr_head"].strip() or r["stdout_head"].strip()).splitlines()[:3]
        lines += [f"- `{r['id']}`: **{r['outcome']}** ({r['detail']}; exit {r['exit']}, {r['seconds']} s); "
                  f"argv `{' '.join(r['argv'])[:200]}`",
                  "  " + " / ".join(h[:220] for h in head) if head else "  (no output)"]
    slow = sorted(done, key=lambda r: -r["seconds"])[:5]
    lines += ["", "Slowest cases: " + ", ".join(f"`{r['id']}` {r['seconds']} s" for r in slow), ""]
    (out / "README.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma list of case-id prefixes or globs")
    parser.add_argument("--limit", type=int, help="run at most N cases not yet recorded")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rerun", action="store_true", help="forget recorded results of the selection")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--note", help="how the recorded run was made (results.json, README)")
    args = parser.parse_args(argv)
    cases = build_cases()
    chosen = select(cases, args.only)
    if args.list:
        for case in chosen:
            print(f"{case.expect:13} {case.id}")
        print(f"{len(chosen)} cases ({dict(Counter(c.expect for c in chosen))})")
        return 0
    path = args.out / "results.json"
    results = load_results(path)
    known = {case.id for case in cases}
    records = {i: r for i, r in results["records"].items() if i in known}  # cases since removed: dropped
    results["records"] = records
    if args.rerun:
        for case in chosen:
            records.pop(case.id, None)
    todo = [c for c in chosen if records.get(c.id, {}).get("fingerprint") != c.fingerprint()]
    if args.limit is not None:
        todo = todo[:args.limit]
    command = "python benchmarks/bad_inputs.py" + (f" --only {args.only}" if args.only else "")
    print(f"{len(chosen)} cases selected, {len(todo)} to run", file=sys.stderr)
    for n, case in enumerate(todo, 1):
        record = run_case(case)
        records[case.id] = record
        results["summary"] = summary(cases, records)
        save_results(path, results)
        mark = "ok " if record["outcome"] == "pass" else "BAD"
        print(f"[{n}/{len(todo)}] {mark} {case.id}: {record['outcome']} (exit {record['exit']}, "
              f"{record['seconds']} s)", file=sys.stderr)
    if args.note:
        results["note"] = args.note
    results["summary"] = summary(cases, records)
    save_results(path, results)
    write_readme(args.out, cases, records, command, results.get("note", ""))
    print(json.dumps(results["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
