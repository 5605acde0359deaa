"""Regenerate the shipped proofs under proofs/certificates/ (the claims of issue 13, part 3).

    python -m speclp.proofs.symbolic.ship                 # every proof, smallest first
    python -m speclp.proofs.symbolic.ship --only bv-optimal-V2-L1 --only l1-optimum-V2-L1-K2

Each proof is what `speclp prove CLAIM --vocab V --depth L [--paths K]
[--draft-sampling S] --out DIR` writes (CLAIM-stem.json + .md), the JSON gzipped here
(stem.json.gz; the checker reads both). The refutation of token-optimal on (2, 2) is
shipped as its counterexample (refuted/token-optimal-V2-L2.json: the failing cell, the
rational point and the engine's certified LP optimum and exact law there). The
index proofs/certificates/README.md (and index.json) lists every shipped proof with its cells and the time
it took (measured here, one process, on the machine that ran this). A proof that fails or
is incomplete is written with its document (its summary says so) and listed as such; the
test suite re-checks only the proofs whose summary says proved.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

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
    """Write the proof's JSON and Markdown into out (the same files as `speclp prove`)."""
    stem = proof_stem(claim, vocab, depth, paths, draft_sampling)
    json_path, md_path = out / f"{stem}.json.gz", out / f"{stem}.md"
    with gzip.open(json_path, "wt") as handle:
        json.dump(run.document, handle, indent=0, separators=(",", ":"))
    md_path.write_text(render(run.document))
    return json_path, md_path


def readme(index: dict) -> str:
    """proofs/certificates/README.md: what is shipped, how to re-check and regenerate it."""
    lines = ["# Shipped symbolic proofs", "",
             "Each `CLAIM-V*-L*[-K*][-without-replacement].json.gz` is a proof of a claim for EVERY",
             "instance of the shape (rows are symbols; the domain is all row entries >= 0 with",
             "rows summing to 1), as a decision tree of cells with a witness point in every kept",
             "cell, an emptiness certificate for every dropped one, and on every kept cell the",
             "claim's primal / dual / law as rational functions (sympy srepr). The `.md` next to",
             "it is the readable version.", "",
             "Re-check (sympy only, imports nothing from speclp):", "",
             "    python proofs/certificates/check.py proofs/certificates/*.json.gz", "",
             "Regenerate all (smallest first; writes the files and this README):", "",
             "    python -m speclp.proofs.symbolic.ship", "",
             "or one proof: the command in the table with `--out proofs/certificates`.",
             "Seconds: wall time of the proof (cell exploration, laws, LP bases, export), one",
             "process on a shared 2-core machine (load ~5), so an upper bound.", "",
             "| proof | command | result | kept cells | empty | outside domain | seconds |",
             "|---|---|---|---|---|---|---|"]
    for stem in sorted(index):
        e = index[stem]
        c = e["cells"]
        result = ("REFUTED (counterexample confirmed by the engine)" if e.get("refuted")
                  else "PROVED" if e["proved"] else "NOT PROVED")
        lines.append(f"| {stem} | `{e['command']}` | {result} "
                     f"| {c['kept']} | {c['empty']} | {c['excluded']} | {e['seconds']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="proof stem(s) to regenerate")
    parser.add_argument("--out", default=str(CERTIFICATES))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    status = 0
    jobs = [(s, False) for s in sorted(SHIPPED, key=lambda s: (s[1]**s[2], s[1], s[3]))]
    jobs += [(s, True) for s in REFUTED]
    for (claim, vocab, depth, paths, sampling), refute in jobs:
        stem = proof_stem(claim, vocab, depth, paths, sampling)
        if args.only and stem not in args.only:
            continue
        start = time.perf_counter()
        run = prove(claim, vocab, depth, paths, sampling, stop_at_first_failure=True)
        seconds = time.perf_counter() - start
        proved = run.holds and run.complete
        entry = {"command": command_line(claim, vocab, depth, paths, sampling),
                 "proved": proved, "cells": run.counts, "seconds": round(seconds, 1)}
        if refute:
            ce = run.counterexample
            confirmed = bool(ce and ce.get("engine", {}).get("confirms"))
            entry["refuted"] = confirmed
            status |= 0 if confirmed else 1
            if ce is not None:
                (out / "refuted").mkdir(exist_ok=True)
                (out / "refuted" / f"{stem}.json").write_text(json.dumps(
                    {"claim": claim, "shape": run.document["shape"],
                     "statement": run.document["statement"], "summary": run.summary(),
                     "counterexample": ce}, indent=1) + "\n")
        else:
            write(run, claim, vocab, depth, paths, sampling, out)
            status |= 0 if proved else 1
        index[stem] = entry
        index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        (out / "README.md").write_text(readme(index))
        print(f"{stem}: {'REFUTED' if entry.get('refuted') else 'PROVED' if proved else 'NOT PROVED'} "
              f"kept={run.counts['kept']} empty={run.counts['empty']} "
              f"excluded={run.counts['excluded']} failing={run.counts['failing']} "
              f"unresolved={run.counts['unresolved']} {seconds:.1f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
