"""Regenerate the shipped proofs under proofs/certificates/ (the claims of issue 13, part 3).

    python -m speclp.proofs.symbolic.ship                 # every proof, smallest first
    python -m speclp.proofs.symbolic.ship --only bv-optimal-V2-L1 --only l1-optimum-V2-L1-K2

Each proof is exactly what `speclp prove CLAIM --vocab V --depth L [--paths K]
[--draft-sampling S] --out proofs/certificates` writes (CLAIM-stem.json + .md). The
index proofs/certificates/INDEX.md lists every shipped proof with its cells and the time
it took (measured here, one process, on the machine that ran this). A proof that fails or
is incomplete is written with its document (its summary says so) and listed as such; the
test suite re-checks only the proofs whose summary says proved.
"""

from __future__ import annotations

import argparse
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


def write(run: object, claim: str, vocab: int, depth: int, paths: int, draft_sampling: str,
          out: Path) -> tuple[Path, Path]:
    """Write the proof's JSON and Markdown into out (the same files as `speclp prove`)."""
    stem = proof_stem(claim, vocab, depth, paths, draft_sampling)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(run.document, indent=0, separators=(",", ":")))
    md_path.write_text(render(run.document))
    return json_path, md_path


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
    for claim, vocab, depth, paths, sampling in sorted(SHIPPED, key=lambda s: (s[1]**s[2], s[1], s[3])):
        stem = proof_stem(claim, vocab, depth, paths, sampling)
        if args.only and stem not in args.only:
            continue
        start = time.perf_counter()
        run = prove(claim, vocab, depth, paths, sampling, stop_at_first_failure=True)
        seconds = time.perf_counter() - start
        write(run, claim, vocab, depth, paths, sampling, out)
        proved = run.holds and run.complete
        status |= 0 if proved else 1
        index[stem] = {"command": command_line(claim, vocab, depth, paths, sampling),
                       "proved": proved, "cells": run.counts, "seconds": round(seconds, 1)}
        index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        print(f"{stem}: {'PROVED' if proved else 'NOT PROVED'} kept={run.counts['kept']} "
              f"empty={run.counts['empty']} excluded={run.counts['excluded']} "
              f"failing={run.counts['failing']} unresolved={run.counts['unresolved']} "
              f"{seconds:.1f} s", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
