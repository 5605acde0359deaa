"""Mean certified bracket width per (version, expansion, budget, T, L, K) over the contexts of brackets.jsonl
(one line per prompt), against issue 33's targets. Run from the repository root:

    python benchmarks/results/realgap/bracket_smollm2/summarize.py [BOUNDS_VERSION]
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
version = int(sys.argv[1]) if len(sys.argv) > 1 else None
groups = defaultdict(list)
for line in (HERE / "brackets.jsonl").read_text().splitlines():
    r = json.loads(line)
    if version is not None and r["bounds_version"] != version:
        continue
    mode = json.loads(r["key"])[1]  # the expansion (the key's second field)
    for k, b in r["by_paths"].items():
        groups[(r["bounds_version"], mode, r["budget"], r["temperature"], r["depth"], int(k))].append(
            (r["prompt"], b["width"], b["lower"], b["upper"], r["seconds"]))
print("| version | expansion | budget s | T | L | K | contexts | mean width | max width | target | mean s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
targets = {1: 0.0, 2: 0.02, 3: 0.05, 4: 0.10}
for key in sorted(groups):
    rows = groups[key]
    widths = [w for _, w, *_ in rows]
    print(f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]} | {key[4]} | {key[5]} | {len(rows)} | "
          f"{sum(widths) / len(widths):.3f} | {max(widths):.3f} | {targets[key[4]]} | "
          f"{sum(s for *_, s in rows) / len(rows):.0f} |")
