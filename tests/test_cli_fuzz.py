"""Property-based CLI fuzz (issue 9): every command registered on the app, random flags and
values, random instance files (wrong shapes and types, NaN/Inf, huge integers and fractions,
deep nesting, binary bytes).

Property: the exit status is 0, 1 or 2 (never 3, an internal error), nothing escapes as an
exception, no traceback is printed, an exit 2 is ONE stderr line ``error: ...`` (with --json
also the same error as one JSON object on stdout) given before any work started
(tests/work_guard.py: no clock, so the property holds however busy the machine is), a
--json success is one JSON object on stdout, and no case hangs (CASE_S seconds, a guard
only).

The commands are enumerated from the CLI app itself, so a command added later is fuzzed
without touching this file. Size-like integers are always given (from a pool whose valid
values are 1 and 2) so that an accepted case stays small; model names are never valid, so
no model is loaded (everything else a model command takes is checked before its --pair).

Examples per command: SPECLP_FUZZ_EXAMPLES (default 12: tens of seconds in CI); a longer
run: SPECLP_FUZZ_EXAMPLES=300 python -m pytest -q -s tests/test_cli_fuzz.py (-s shows
the counts of generated cases).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.cli import app, leaf_commands
from typer.testing import CliRunner
from work_guard import deadline, watch_work

EXAMPLES = int(os.environ.get("SPECLP_FUZZ_EXAMPLES", "12"))
LONG_RUN = "SPECLP_FUZZ_EXAMPLES" in os.environ  # random cases; CI's default run is reproducible
CASE_S = float(os.environ.get("SPECLP_FUZZ_CASE_SECONDS", "600"))  # a hang guard, not a speed test
COUNTS: dict[str, dict[int, int]] = {}

INTS = ["-5", "-1", "0", "1", "2", "1000000", str(10**30), str(2**63), "abc", "1.5", ""]
FLOATS = ["nan", "inf", "-inf", "-1", "0", "1e-300", "0.5", "1", "1e308", "x", ""]
SMALL_INTS = ["2", "2", "1"]  # the values a "clean" flag takes: accepted cases stay small
SMALL_FLOATS = ["0.5", "1"]
STRINGS = [
    "", " ", "x", "1", "2", "0", "-1", "1,2", "2,x", "nan", "1e999", "é", "a" * 500, "bad\x00path",
    "iid", "without-replacement", "highs", "cvxpy", "csv", "parquet", "bv", "gbv", "bv:1",
    "gbv:2,bv:1", "nope:1", "cpu", "cuda", "tpu", "auto", "fp32", "bf16", "humaneval:0",
    "humaneval:1", "humaneval:x", "file:@file", "file:@bin", "file:@dir", "file:@missing",
    "file:/dev/zero", "file:@fifo", "tcp://127.0.0.1:1", "bogus-cluster", "nosuchmodel", "a,b",
    "@dir", "@file", "@missing", "@sub/new", "/dev/null", "/proc/nonexistent/x", "draft",
    "class", "full", "bv-toy", "2,3",
]
ARGUMENTS = ["@inst", "@inst", "@inst", "@dir", "@file", "@bin", "@missing", "@fifo", "/dev/zero",
             "", "bad\x00path"]
NEVER_A_MODEL = "--pair"  # its values are never a loadable model (see the module docstring)
PLAUSIBLE = ["bv", "gbv", "token", "specinfer", "traversal", "nss", "bv_first_failure", "iid",
             "highs", "class", "full"]  # half of the values of a required text option


def kind(param) -> str:
    """int, float, bool or str: the declared type of a parameter."""
    if getattr(param, "is_flag", False):
        return "bool"
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if annotation in (int, float, bool):
        return annotation.__name__
    name = getattr(getattr(param, "type", None), "name", "")
    return {"integer": "int", "float": "float", "boolean": "bool"}.get(name, "str")


# --- instance files -------------------------------------------------------------------------

ENTRY_MUTATIONS = [float("nan"), float("inf"), -0.1, "1/0", "1e-99999", "9" * 500, "1/" + "7" * 600,
                   None, [], {}, True, 10**200, "0x1", "1/3", "-1/3", " 1/2 ", 2]


@st.composite
def instance_documents(draw) -> bytes:
    """Bytes of an instance file: valid, mutated in one place, or garbage."""
    form = draw(st.sampled_from(["valid", "mutated", "mutated", "garbage"]))
    if form == "garbage":
        return draw(st.one_of(
            st.binary(max_size=300),
            st.sampled_from([b"", b"null", b"[]", b'"x"', b"{", b"\xef\xbb\xbf{}", b"NaN",
                             b"[" * 100_000 + b"]" * 100_000, b'{"a": ' * 5000 + b"1" + b"}" * 5000,
                             b'{"vocab_size": 1e400, "depth": 1, "target": [], "draft": []}',
                             b'{"vocab_size": 2, "depth": 20000, "target": [], "draft": []}',
                             b'{"vocab_size": ' + b"9" * 5000 + b', "depth": 1}']),
        ))
    vocab = draw(st.sampled_from([2, 3]))
    depth = draw(st.sampled_from([1, 2]))
    nodes = (vocab ** (depth + 1) - 1) // (vocab - 1)
    exact = draw(st.booleans())

    def rows():
        out = []
        for _ in range(nodes):
            weights = [draw(st.integers(1, 9)) for _ in range(vocab)]
            total = sum(weights)
            out.append([f"{w}/{total}" if exact else w / total for w in weights])
        return out

    data = {"vocab_size": vocab, "depth": depth, "target": rows(), "draft": rows()}
    if form == "mutated":
        where = draw(st.sampled_from(["key", "vocab", "depth", "rows", "row", "entry"]))
        if where == "key":
            del data[draw(st.sampled_from(sorted(data)))]
        elif where in ("vocab", "depth"):
            field = "vocab_size" if where == "vocab" else "depth"
            data[field] = draw(st.sampled_from([0, 1, -1, "2", 2.0, True, None, 10**200, 20000, []]))
        elif where == "rows":
            data[draw(st.sampled_from(["target", "draft"]))] = draw(st.sampled_from(
                [[], "x", None, data["target"][:-1], data["target"] + data["target"]]))
        elif where == "row":
            side = draw(st.sampled_from(["target", "draft"]))
            i = draw(st.integers(0, nodes - 1))
            data[side][i] = draw(st.sampled_from([[], "x", data[side][i][:-1],
                                                  data[side][i] + [0], [[0.5, 0.5]]]))
        else:
            side = draw(st.sampled_from(["target", "draft"]))
            i, j = draw(st.integers(0, nodes - 1)), draw(st.integers(0, vocab - 1))
            data[side][i][j] = draw(st.sampled_from(ENTRY_MUTATIONS))
    return json.dumps(data).encode()


# --- cases ----------------------------------------------------------------------------------

@st.composite
def command_lines(draw, path: tuple[str, ...], command) -> list[str]:
    """A command line: every flag is clean (small valid value, or left out) or hostile (from
    the pools above) with a per-case hostility, so that both refusals and accepted runs
    (which then do their real, small, work) are generated."""
    hostility = draw(st.sampled_from([0, 10, 30, 60]))  # percent of hostile flags

    def hostile() -> bool:
        return draw(st.integers(0, 99)) < hostility

    argv = list(path)
    for param in command.params:
        if param.param_type_name == "argument":
            if param.required or draw(st.booleans()):
                argv.append(draw(st.sampled_from(ARGUMENTS)))
            continue
        flag = max(param.opts, key=len)
        what = kind(param)
        if what == "bool":
            if draw(st.booleans()):
                argv.append(flag)
        elif what == "int":  # always given: defaults may be large, the clean values are small
            argv += [flag, draw(st.sampled_from(INTS if hostile() else SMALL_INTS))]
        elif what == "float":
            if hostile():
                argv += [flag, draw(st.sampled_from(FLOATS))]
            elif draw(st.booleans()):
                argv += [flag, draw(st.sampled_from(SMALL_FLOATS))]
        elif param.required:
            argv += [flag, draw(st.sampled_from(PLAUSIBLE if draw(st.booleans()) else STRINGS))]
        elif hostile():
            argv += [flag, draw(st.sampled_from(STRINGS))]
    if any(p.opts == [NEVER_A_MODEL] for p in command.params) and NEVER_A_MODEL not in argv:
        argv += [NEVER_A_MODEL, draw(st.sampled_from(["nosuchmodel", "a,b", "@dir", "x" * 300]))]
    return argv


def materialise(argv: list[str], folder: Path, instance: bytes) -> list[str]:
    """Replace @name tokens by files of the case folder (created here)."""
    (folder / "inst.json").write_bytes(instance)
    (folder / "dir").mkdir()
    (folder / "file").write_text("def f(x):\n    return x\n")
    (folder / "bin").write_bytes(bytes(range(256)) * 8)
    os.mkfifo(folder / "fifo")
    names = {"@inst": "inst.json", "@dir": "dir", "@file": "file", "@bin": "bin",
             "@missing": "missing", "@fifo": "fifo", "@sub": "sub"}
    out = []
    for arg in argv:
        for token, name in names.items():
            arg = arg.replace(token, str(folder / name))
        out.append(arg)
    return out


def check_case(argv: list[str]) -> int:
    """Run one command line in-process and assert the contract; returns its exit status."""
    with deadline(CASE_S), watch_work() as work:
        result = CliRunner().invoke(app, argv)
    shown = (f"argv={argv!r}\nexit={result.exit_code}\nstdout={result.stdout[-2000:]}\n"
             f"stderr={result.stderr[-2000:]}")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{shown}\nexception={result.exception!r}")
    assert result.exit_code in (0, 1, 2, 4), shown  # 4: stopped by its own limit (prove --time-limit)
    assert "Traceback" not in result.stdout + result.stderr, shown
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), shown
        assert not work, f"refused after work started ({work[0]})\n{shown}"
        if "--json" in argv:  # the same error as one JSON object on stdout
            error = json.loads(result.stdout)
            assert error["exit_status"] == 2 and error["error"] == lines[0][len("error: "):], shown
    elif "--json" in argv:
        assert isinstance(json.loads(result.stdout), dict), shown
    return result.exit_code


COMMANDS = leaf_commands()


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_cli_fuzz(path, command):
    name = " ".join(path)
    counts = COUNTS.setdefault(name, {})
    home = os.getcwd()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG_RUN, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(argv=command_lines(path, command), instance=instance_documents())
    def case(argv, instance):
        with tempfile.TemporaryDirectory(prefix="speclp-fuzz-") as tmp:
            os.chdir(tmp)  # default outputs (./speclp-results, counterexamples/) land here
            try:
                code = check_case(materialise(argv, Path(tmp), instance))
            finally:
                os.chdir(home)
        counts[code] = counts.get(code, 0) + 1

    case()
    total = sum(counts.values())
    print(f"\nfuzz {name}: {total} generated cases, exit statuses {dict(sorted(counts.items()))}")
    assert total >= 1
