"""Certified brackets only (no sampled verifier values) on smollm2-135m (its own draft at
1.5 T): mass-driven kept trees (docs/theory.md section 13.6) against the uniform M-ary ones
(section 13.5), per (prompt, T, L). Run from the repository root:

    flock /tmp/heavy.lock nice -n 5 python benchmarks/results/realgap/bracket_smollm2/bracket.py \
        EXPANSION L T BUDGET [PROMPTS]

EXPANSION: mass or uniform; L, T: comma lists; BUDGET: seconds per context (checked between
trees, and the LP solves get what is left); PROMPTS: N, the first N of PROMPTS (default all),
or @i,j: those.
Appends to brackets.jsonl here, one line per (prompt, expansion, L, T, budget); lines
already there are skipped (resumable).
"""

import json
import sys
import time
from pathlib import Path

import torch
from speclp.decode.models import load_pair
from speclp.decode.tree_rows import prefill
from speclp.experiments.realgap import (
    BOUNDS_VERSION,
    WIDTH_TARGETS,
    adaptive_bracket,
    width_schedule,
)

HERE = Path(__file__).resolve().parent
OUT = HERE / "brackets.jsonl"
PROMPTS = ["def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "def is_palindrome(text: str) -> bool:\n",
           "import numpy as np\n\ndef moving_average(x, window):\n",
           "class Stack:\n    def __init__(self):\n"]
CAPS = {"mass": {2: [8, 12, 16], 3: [3, 4, 6], 4: [1, 2]},  # depth_caps: root widest
        "uniform": {2: [4, 6, 8], 3: [4, 6, 8], 4: [3, 4, 5]}}
PATHS = [1, 2, 4]
VERIFIERS = ["bv", "gbv", "nss", "nodeopt", "specinfer"]

expansion, depths, temps, budget = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
arg = sys.argv[5] if len(sys.argv) > 5 else str(len(PROMPTS))
# PROMPTS: N (the first N prompts) or @i,j (those indices)
chosen = [int(i) for i in arg[1:].split(",")] if arg.startswith("@") else list(range(int(arg)))
done = set()
if OUT.exists():
    for line in OUT.read_text().splitlines():
        try:
            done.add(json.loads(line)["key"])
        except (ValueError, KeyError):
            pass
torch.set_num_threads(1)
pair = load_pair("smollm2-135m", device="cpu")
for t in [float(x) for x in temps.split(",")]:
    for depth in [int(x) for x in depths.split(",")]:
        for i in chosen:
            text = PROMPTS[i]
            key = json.dumps([f"fixed:{i}", expansion, depth, t, budget, BOUNDS_VERSION])
            if key in done:
                continue
            context = pair.target.tokenizer.encode(text)
            start = time.perf_counter()
            ready = prefill(pair.target.model, pair.draft.model, context, t, 1.5 * t)
            widths = width_schedule(CAPS[expansion][depth][0], depth, CAPS[expansion][depth])
            found = adaptive_bracket(pair.target.model, pair.draft.model, context, depth, PATHS,
                                     t, 1.5 * t, ready, VERIFIERS, widths, WIDTH_TARGETS[depth],
                                     budget, expansion)
            record = {"key": key, "prompt": f"fixed:{i}", "expansion": expansion, "depth": depth,
                      "temperature": t, "draft_temperature": 1.5 * t, "budget": budget,
                      "bounds_version": BOUNDS_VERSION, "target": WIDTH_TARGETS[depth],
                      "seconds": round(time.perf_counter() - start, 1),
                      "by_paths": {k: {"lower": found["lower"][k]["value"],
                                       "lower_by": found["lower"][k]["verifier"],
                                       "upper": found["bounds"][k]["value"],
                                       "upper_by": found["bounds"][k]["method"],
                                       "upper_exact": found["bounds"][k]["exact"],
                                       "width": found["bounds"][k]["value"]
                                       - found["lower"][k]["value"],
                                       "upper_seconds": found["bounds"][k]["seconds"],
                                       "lower_seconds": found["lower"][k]["seconds"],
                                       "skipped": found["lower"][k]["skipped"]}
                                   for k in found["bounds"]},
                      "coarsening": {k: v for k, v in found["coarsening"].items()
                                     if k != "rows_seconds"},
                      "steps": found["expansion"]}
            with OUT.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{record['prompt']} {expansion} L={depth} T={t}: " + ", ".join(
                f"K={k} [{b['lower']:.4f}, {b['upper']:.4f}] w {b['width']:.4f}"
                for k, b in record["by_paths"].items()) + f" ({record['seconds']} s)", flush=True)
