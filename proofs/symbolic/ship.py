"""Regenerate the shipped proofs under proofs/certificates/ (the claims of issue 13, part 3).

    python -m speclp.proofs.symbolic.ship                 # every proof, smallest first
    python -m speclp.proofs.symbolic.ship --only bv-optimal-V2-L1 --only l1-optimum-V2-L1-K2

Each proof is what `speclp prove CLAIM --vocab V --depth L [--paths K]
[--draft-sampling S] --out DIR` writes (CLAIM-stem.json + .md), the JSON gzipped here
(stem.json.gz; the checker reads both), in strict form (export.strict_document: only the
fields the checker reads; the .md is rendered from the full document). The refutation of
token-optimal on (2, 2) is shipped as its counterexample (refuted/token-optimal-V2-L2.json:
the instance, the rational point and the engine's token value, what the checker reads;
refuted/token-optimal-V2-L2.md: the failing cell, the run's summary and the engine's
certified LP optimum there). `--make-strict FILE ...` rewrites files of an older producer
in strict form. The
index proofs/certificates/README.md (and index.json) lists every shipped proof with its cells and the time
it took (measured here, one process, on the machine that ran this). A proof that fails or
is incomplete is written with its document (its summary says so) and listed as such; the
test suite re-checks only the proofs whose summary says proved.

Long proofs are resumable: every proof is journaled to OUT/STEM.journal.jsonl (one fsynced
line per cell, speclp.proofs.symbolic.journal). A run stopped by --time-limit, SIGINT or
SIGTERM (or killed) writes no proof and keeps the journal; the same command goes on from
it, and the proof it writes is byte for byte an uninterrupted run's (the .json.gz is
written with gzip mtime 0). A journal of other settings or other code is refused (--fresh
starts over, --other-code goes on anyway); the journal is removed once the proof is written.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from .export import strict_document
from .journal import JournalError
from .markdown import render
from .prove import command_line, proof_stem, prove

CERTIFICATES = Path(__file__).resolve().parent.parent / "certificates"

# (claim, vocab, depth, paths, draft_sampling), the shapes of issue 13 part 3
SHIPPED: tuple[tuple[str, int, int, int, str], ...] = (
    ("bv-optimal", 2, 1, 1, "iid"),
    ("bv-optimal", 3, 1, 1, "iid"),
    ("bv-optimal", 2, 2, 1, "iid"),
    ("gbv-k1-is-bv", 2, 2, 1, "iid"),
    *(("l1-optimum", v, 1, k, s) for v in (2, 3) for k in (1, 2, 3)
      for s in ("iid", "without-replacement") if not (s == "without-replacement" and k > v)),
    *(("gbv-l1-closed-form", v, 1, k, "iid") for v in (2, 3) for k in (1, 2, 3)),
)
# claims that are false on the shape: the proof must fail with a counterexample
REFUTED: tuple[tuple[str, int, int, int, str], ...] = (("token-optimal", 2, 2, 1, "iid"),)


def write(run: object, claim: str, vocab: int, depth: int, paths: int, draft_sampling: str,
          out: Path) -> tuple[Path, Path]:
    """Write the proof's JSON (strict: what the checker reads) and Markdown (the full
    document, readable) into out (the same files as `speclp prove`)."""
    stem = proof_stem(claim, vocab, depth, paths, draft_sampling)
    json_path, md_path = out / f"{stem}.json.gz", out / f"{stem}.md"
    write_gzip_json(json_path, strict_document(run.document))
    md_path.write_text(render(run.document))
    return json_path, md_path


def write_gzip_json(path: Path, document: dict) -> None:
    """The JSON (indent 0, compact separators) gzipped with mtime 0 and the file's own name
    in the header: the same document gives the same bytes (a resumed proof's certificate is
    byte for byte an uninterrupted run's). Written to a temporary file, then renamed."""
    text = json.dumps(document, indent=0, separators=(",", ":")).encode()
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as raw, gzip.GzipFile(path.name.removesuffix(".gz"), "wb", 9, raw,
                                                  mtime=0) as handle:
        handle.write(text)
    partial.replace(path)


def journal_path(out: Path, stem: str) -> Path:
    """Where ship journals the proof of stem (speclp.proofs.symbolic.journal)."""
    return out / f"{stem}.journal.jsonl"


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (as SIGINT does) inside the block, so that a
    terminated run reports where its journal is; the journal is safe either way (every line
    is fsynced, a cut last line is ignored)."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_refutation(refutation: dict, stem: str, out: Path) -> None:
    """refuted/STEM.json (strict: the instance, the point and the engine's token value,
    what the checker reads) and refuted/STEM.md (everything, readable)."""
    (out / "refuted").mkdir(exist_ok=True)
    (out / "refuted" / f"{stem}.json").write_text(
        json.dumps(strict_document(refutation), indent=1) + "\n")
    (out / "refuted" / f"{stem}.md").write_text(refutation_markdown(refutation))


def refutation_markdown(refutation: dict) -> str:
    """The refutation, readable: statement, summary and the failing cell with its point."""
    ce = refutation["counterexample"]
    lines = [f"# Refutation: `{refutation['claim']}` on {refutation['shape']}", "",
             f"**Statement (false).** {refutation.get('statement', '')}", "",
             f"On cell `{ce.get('cell')}` the identity `{ce.get('identity')}` is "
             f"`{ce.get('difference_on_cell')}`; at the point below it is "
             f"`{ce.get('difference_at_point')}`.", "",
             "Cell conditions: " + "; ".join(f"`{c}`" for c in ce.get("conditions", [])), "",
             "Eliminated: " + ", ".join(f"`{k} = {v}`" for k, v in ce.get("eliminated", {}).items()),
             "", "Point: " + ", ".join(f"`{k} = {v}`" for k, v in ce.get("point", {}).items()), "",
             "Engine at the point: " + ", ".join(f"{k} = {v}" for k, v in ce.get("engine", {}).items()),
             "", "Summary of the run: `" + json.dumps(refutation.get("summary", {})) + "`", "",
             "Re-check: `python proofs/certificates/check.py proofs/certificates/refuted/"
             f"{refutation['claim']}-V{refutation['shape']['vocab']}-L{refutation['shape']['depth']}"
             ".json` (the JSON holds only what the checker reads)."]
    return "\n".join(lines) + "\n"


# shapes of SHIPPED without a shipped proof, and why (the README lists them; the tests check it)
NOT_SHIPPED: dict[str, str] = {
    "bv-optimal-V2-L2": "the run was stopped unfinished after ~50 min (issue 13); not rerun "
                        "(issue 17: the shared machine at load 9-14)",
    "l1-optimum-V3-L1-K1, -K2, -K3 (both draft samplings)": "runs stopped unfinished to free "
                                                            "the machine (issue 13); not "
                                                            "rerun (issue 17, same load)",
    "gbv-l1-closed-form-V3-L1-K3": "NOT PROVED: 6 unresolved cells on cubic surfaces that are "
                                   "linear in no symbol (unchecked/README.md); the cell method "
                                   "for them is not implemented",
}

_SCOPE_HEAD = """\
## What the checker re-derives, and what it takes from the file

`check.py` imports nothing from speclp and runs nothing from the file: every expression
is PARSED (a recursive descent over exactly the grammar the producer writes, sympy's srepr
of a rational function: `Integer`, `Rational`, `Symbol('NAME', real=True)` of the shape's
symbols, `Add`, `Mul`, `Pow(..., Integer(e))`), never evaluated; any other token is a
rejection naming the field, and length (200,000 characters), nesting (64), exponents
(|e| <= 64), integer digits (1000), degree (256) and size of every intermediate are
bounded. Files are STRICT: a field the checker does not read is a rejection naming it
(the producer writes the JSON through `export.strict_document`; the statement, summary,
LP matrices and the rest stay in the `.md`).

For every claim, from the claim name and shape alone, it rebuilds: the statement (a shape
the claim does not cover is refused); the symbols and symbolic rows (the file's must equal
them); the coverage of the cell tree (the root is the domain, a cell's first facts are
exactly its conditions, every split covers every sign of its polynomial, a child is its
parent plus its outcome, or for "=" the parent with a symbol eliminated from the parent's
split polynomial; node ids are their places in the tree); every derived fact, emptiness
certificate and witness point (exactly); and every sign it uses (each irreducible factor
gets its sign from a fact of the cell; denominators strictly signed). From the file it
takes, and verifies, the cell tree itself (splits, outcomes, eliminations, conditions),
the derived facts with their proofs, the emptiness certificates and the witness points.

Per claim, on every kept cell:

"""

# per claim: (claim, what the checker derives, what it takes from the file (verified),
# what it compares with the derived value if present); the README's table
CHECKER_TABLE: tuple[tuple[str, str, str, str], ...] = (
    ('claim',
     'the checker derives (its own code, docs/theory.md)',
     'it takes from the file (verified)',
     'compared with the derived value if present (a difference is a rejection)'),
    ('bv-optimal',
     "BV's law (2.2) on every configuration; its point of the rebuilt K = 1 full LP (4.1: every "
     'marginal and target-matching row); A x = b, x >= 0 on the cell (so BV is lossless); c^T x',
     "`dual` y (placed by the program's row labels, the only part of `programs` read): reduced "
     "costs <= 0 on the whole cell and b^T y = c^T x, so BV's value is the LP optimum",
     'primal, block_efficiency, continued_law (the target law), witness_optimum'),
    ('token-optimal',
     "the same with token-level verification's law (2.1)",
     'the dual y, as above (the claim is false at (2, 2): the refutation below)',
     'as bv-optimal'),
    ('l1-optimum',
     'the K-path full LP (i.i.d. or without replacement; configurations and weights); the threshold '
     'sets H_y = {x : p(x) q(y) <= p(y) q(x)} (decided on the cell); f(H) = p(H) + 1 - Q(H) with Q(H)'
     ' = P(all K drafts in H)',
     '`primal` x and `dual` y (optimal for the rebuilt LP: A x = b, x >= 0, reduced costs <= 0, b^T y'
     ' = c^T x), and `best` H* (must be a threshold set with f(H*) <= f(H) for all; LP optimum = 1 + f(H*))',
     'witness_optimum, closed_form, threshold_sets, configurations'),
    ('gbv-k1-is-bv',
     "BV's law against q, and GBV's law FROM ITS OWN DEFINITION at K = 1: the selection of 9.1 (the "
     'best drafted path in the lexicographic priority) and the skewed rows of Lemma 9.1 (Lam, Q, b(x)'
     ' along the path) for EVERY key order at every node of the path (V!^L orders; the rows must not '
     'depend on it), then BV against those rows; the two laws equal configuration by configuration',
     'nothing beyond the tree, facts and witnesses',
     "left (GBV's law), right (BV's law)"),
    ('gbv-l1-closed-form',
     "GBV's law at L = 1 from the selection and skewed rows in the file's key order; its LP point "
     '(rows (1.4): lossless); E[tau] = sum_x min(p(x), F(x)^K - F(x-)^K) in that order; the limit K '
     '-> inf: q(x*) > 0 and q = 0 above x*',
     '`key_order` (ascending in (p/q, x): every adjacent pair is shown on the cell)',
     'choices (which side of each min is smaller, shown on the cell), x_star, acceptance, '
     'continued_law'),
)

_SCOPE_TAIL = """A refutation (refuted/) is a rational instance and point: the checker computes the refuted
verifier's value there and BV's law, a feasible point of the rebuilt LP with a higher value;
it compares the engine's token value (`engine.token_block_efficiency`) with its own.

`tests/test_certificate_tampers.py` makes tampered copies of these files (unproved
conditions, renamed claims and shapes, empty LPs, laws set to 7, changed eliminations, a
non-threshold H*, vanishing denominators, swapped cells, a dual feasible only at the
witness, a primal breaking a matching row, a dropped vocabulary token, fields the checker
does not read, ...) and asserts that the checker rejects every one, naming what failed; it
also feeds the issue-27 injection (a row entry that, evaluated, replaces the checker's
check) and its variants (attribute access, lambda, dunder names, calls, huge exponents, deep
nesting, very long strings) and asserts that each is rejected and that no code ran.

A second, independent check of the inequalities (optional, `pip install speclp[smt]`):
`python proofs/certificates/smt_check.py FILE` asks z3 whether the cell's conditions (not
its derived facts) imply each inequality the checker proved there. On the shipped proofs it
agreed on all 5370 (no counterexample, no timeout; benchmarks/results/prove/smt_check.txt;
recorded before the strict re-ship of issue 27, which changed no inequality of those files
but regenerated gbv-k1-is-bv-V2-L2).
"""

CHECKER_SCOPE = (_SCOPE_HEAD.rstrip() + "\n\n" + "\n".join(
    ["| " + " | ".join(CHECKER_TABLE[0]) + " |", "|---|---|---|---|"]
    + ["| " + " | ".join(row) + " |" for row in CHECKER_TABLE[1:]]) + "\n\n" + _SCOPE_TAIL)


def check_times() -> dict[str, str]:
    """Checker "CPU / wall" seconds per proof stem (benchmarks/results/prove/check_times.json)."""
    path = CERTIFICATES.parent.parent / "benchmarks" / "results" / "prove" / "check_times.json"
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return {}
    return {Path(r["file"]).name.split(".json")[0]: f"{r['cpu_s']} / {r['wall_s']}" for r in rows
            if r.get("status") == "OK"}


def readme(index: dict) -> str:
    """proofs/certificates/README.md: what is shipped, what the checker re-derives, how to
    re-check and regenerate it."""
    lines = ["# Shipped symbolic proofs", "",
             "Each `CLAIM-V*-L*[-K*][-without-replacement].json.gz` is a proof of a claim for EVERY",
             "instance of the shape (rows are symbols; the domain is all row entries >= 0 with",
             "rows summing to 1), as a decision tree of cells with a witness point in every kept",
             "cell, an emptiness certificate for every dropped one, and on every kept cell the",
             "LP dual (and the data listed below). The `.md` next to it is the readable version.",
             "", CHECKER_SCOPE,
             "## Re-check and regenerate", "",
             "Re-check (sympy only, imports nothing from speclp):", "",
             "    python proofs/certificates/check.py proofs/certificates/*.json.gz "
             "proofs/certificates/refuted/*.json", "",
             "Regenerate all (smallest first; writes the files and this README):", "",
             "    python -m speclp.proofs.symbolic.ship", "",
             "or one proof: the command in the table with `--out proofs/certificates`.",
             "Seconds: wall time of the proof (cell exploration, laws, LP bases, export); check:",
             "CPU / wall seconds of the checker (`python benchmarks/prove_check_times.py`, one",
             "process per file, nice 15); all on a shared 2-core machine at load 5-14, so the",
             "wall times are upper bounds and the CPU times the better measure.", "",
             "| proof | command | result | kept cells | empty | outside domain | seconds | "
             "check CPU / wall s |",
             "|---|---|---|---|---|---|---|---|"]
    checked = check_times()
    for stem in sorted(index):
        e = index[stem]
        c = e["cells"]
        result = ("REFUTED (counterexample confirmed by the engine and the checker)"
                  if e.get("refuted") else "PROVED" if e["proved"] else "NOT PROVED")
        lines.append(f"| {stem} | `{e['command']}` | {result} "
                     f"| {c['kept']} | {c['empty']} | {c['excluded']} | {e['seconds']} "
                     f"| {checked.get(stem, 'not timed')} |")
    lines += ["", "Proofs produced but not (yet) accepted by the checker, or incomplete: see "
              "unchecked/README.md.", "",
              "Shapes of the issue's list that are NOT shipped (no proof here; nothing is "
              "claimed for them):", "", "| shape | why |", "|---|---|"]
    lines += [f"| {stem} | {why} |" for stem, why in NOT_SHIPPED.items() if stem not in index]
    return "\n".join(lines) + "\n"


def make_strict(path: Path) -> None:
    """Rewrite one proof or refutation file in strict form (in place)."""
    gz = path.name.endswith(".gz")
    with (gzip.open(path, "rt") if gz else path.open()) as handle:
        document = json.load(handle)
    if "nodes" not in document and "summary" in document:  # a full refutation: keep it readable
        path.with_name(path.name.removesuffix(".json") + ".md").write_text(
            refutation_markdown(document))
    strict = strict_document(document)
    if gz:
        write_gzip_json(path, strict)
    else:
        path.write_text(json.dumps(strict, indent=1) + "\n")
    print(f"{path}: strict", flush=True)


class _Progress:
    """Prints the share of the cell tree done, cells and an extrapolated total time."""

    def __init__(self, stem: str, every: float) -> None:
        self.stem, self.every = stem, every
        self.start = self.last = time.perf_counter()
        self.done, self.cells = 0.0, 0

    def __call__(self, share: float) -> None:
        self.done += share
        self.cells += 1
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            elapsed = now - self.start
            print(f"  {self.stem}: {self.done:.1%} of the cell tree, {self.cells} cells, "
                  f"{elapsed:.0f} s (extrapolated total {elapsed / max(self.done, 1e-9):.0f} s)",
                  file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="proof stem(s) to regenerate")
    parser.add_argument("--out", default=str(CERTIFICATES))
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds per proof (this run); a proof stopped by it is reported, "
                             "not written, and its journal is kept: the same command goes on")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the proof's journal (OUT/STEM.journal.jsonl) and start over")
    parser.add_argument("--other-code", action="store_true",
                        help="go on from a journal written by other code (by default refused: "
                             "the result would not be byte for byte one code's proof)")
    parser.add_argument("--progress-every", type=float, default=60.0,
                        help="seconds between progress lines on stderr (share of the cell tree)")
    parser.add_argument("--readme-only", action="store_true",
                        help="rewrite README.md from index.json (and the checker times) only")
    parser.add_argument("--make-strict", nargs="+", metavar="FILE", default=None,
                        help="rewrite these proof / refutation files (.json or .json.gz) in "
                             "strict form (export.strict_document; the .md of a proof is "
                             "left as it is, a refutation gets its .md) and exit")
    args = parser.parse_args(argv)
    if args.make_strict:
        for name in args.make_strict:
            make_strict(Path(name))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    if args.readme_only:
        (out / "README.md").write_text(readme(index))
        return 0
    status = 0
    jobs = [(s, False) for s in sorted(SHIPPED, key=lambda s: (s[1]**s[2], s[1], s[3]))]
    jobs += [(s, True) for s in REFUTED]
    for (claim, vocab, depth, paths, sampling), refute in jobs:
        stem = proof_stem(claim, vocab, depth, paths, sampling)
        if args.only and stem not in args.only:
            continue
        journal = journal_path(out, stem)
        if args.fresh:
            journal.unlink(missing_ok=True)
        try:
            with terminate_as_interrupt():
                run = prove(claim, vocab, depth, paths, sampling, stop_at_first_failure=True,
                            progress=_Progress(stem, args.progress_every),
                            time_limit=args.time_limit, journal=journal,
                            journal_same_code=not args.other_code)
        except KeyboardInterrupt:
            print(f"{stem}: INTERRUPTED; nothing written; journal kept at {journal} (the same "
                  "command goes on from it)", flush=True)
            return 130
        except JournalError as err:
            print(f"{stem}: {err}", file=sys.stderr, flush=True)
            return 2
        seconds = run.seconds
        if run.stopped.startswith("time limit"):
            print(f"{stem}: STOPPED at the {run.stopped} ({run.counts}, {run.resumed} steps "
                  f"from the journal); nothing written; journal kept at {journal} (the same "
                  "command goes on from it)", flush=True)
            status |= 1
            continue
        proved = run.holds and run.complete
        entry = {"command": command_line(claim, vocab, depth, paths, sampling),
                 "proved": proved, "cells": run.counts, "seconds": round(seconds, 1)}
        if refute:
            ce = run.counterexample
            confirmed = bool(ce and ce.get("engine", {}).get("confirms"))
            entry["refuted"] = confirmed
            status |= 0 if confirmed else 1
            if ce is not None:
                write_refutation({"claim": claim, "shape": run.document["shape"],
                                  "statement": run.document["statement"],
                                  "summary": run.summary(), "counterexample": ce}, stem, out)
        else:
            write(run, claim, vocab, depth, paths, sampling, out)
            status |= 0 if proved else 1
        index[stem] = entry
        journal.unlink(missing_ok=True)  # the proof is written
        index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        (out / "README.md").write_text(readme(index))
        print(f"{stem}: {'REFUTED' if entry.get('refuted') else 'PROVED' if proved else 'NOT PROVED'} "
              f"kept={run.counts['kept']} empty={run.counts['empty']} "
              f"excluded={run.counts['excluded']} failing={run.counts['failing']} "
              f"unresolved={run.counts['unresolved']} {seconds:.1f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
