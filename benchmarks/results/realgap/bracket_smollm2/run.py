"""The bracket of docs/theory.md section 13.5 on smollm2-135m (its own draft at 1.5 T), a few
contexts: widths reached per (K, L) against issue 33's targets. Run from the repository root:

    flock /tmp/heavy.lock nice -n 5 python benchmarks/results/realgap/bracket_smollm2/run.py L T

(L: a comma list of depths; T: the temperature.) Records: records.jsonl here (resumable).
"""

import sys
from pathlib import Path

import torch
from speclp.decode.models import load_pair
from speclp.experiments.realgap import WIDTH_TARGETS, load_jsonl, run_realgap

HERE = Path(__file__).resolve().parent
PROMPTS = ["def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
           "def is_palindrome(text: str) -> bool:\n"]

depths = [int(d) for d in sys.argv[1].split(",")]
temperature = float(sys.argv[2])
torch.set_num_threads(1)
pair = load_pair("smollm2-135m", device="cpu")
prompts = [{"id": f"fixed:{i}", "tokens": pair.target.tokenizer.encode(text)}
           for i, text in enumerate(PROMPTS)]
status = run_realgap(pair.target.model, pair.draft.model, prompts, depths, [1, 2, 4],
                     HERE / "records.jsonl", samples=8, batch=8, width=4,
                     verifiers=["bv", "gbv", "nss", "nodeopt", "specinfer"],
                     contexts_per_prompt=1, every=8, temperature=temperature,
                     draft_temperature=1.5 * temperature, seed=0, label="smollm2-135m",
                     widths=[4, 6, 8], time_budget=240)
print(status["computed"], "computed", status["reused"], "reused", status["failures"])
for r in load_jsonl(HERE / "records.jsonl"):
    if r["depth"] not in depths or r["temperature"] != temperature:
        continue
    for k, block in r["by_paths"].items():
        up, low = block["upper"], block["lower"]
        print(f"{r['prompt']} T={r['temperature']} L={r['depth']} K={k}: [{low['value']:.4f}, "
              f"{up['value']:.4f}] width {up['value'] - low['value']:.4f} (target "
              f"{WIDTH_TARGETS[r['depth']]}); upper {up.get('method', 'closed form')} M="
              f"{up.get('width')}, lower {low.get('verifier')} M={low.get('width')}")
    for e in r.get("expansion", []):
        print("   expansion", e)
