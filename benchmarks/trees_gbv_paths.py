"""Why `speclp trees`' target-first-gbv can fall as the budget grows: on real rows, GBV's
exact value below the target-drawn first token against the certified K-path optimum there,
for K = 1, 2, 3 paths of length L' (the shapes target-first-gbv takes as N grows).

    python benchmarks/trees_gbv_paths.py [--pair smollm2-135m] [--prompts 2] [--top 4]
        [--depth 3] [--out FILE.json]

Rows: decode.tree_rows (top-M of (p+q)/2 per node to depth L, renormalised), contexts as
`speclp trees` samples them (2 per prompt, 8 tokens apart, seed 0). For each context and K:
    gbv      = 1 + sum_t p(t) BE_GBV(rows below t, K, L' = L - 1)   (target-first-gbv)
    optimum  = 1 + sum_t p(t) OPT_K(rows below t)                   (lp.optimum, certified in
               the exact binary values of the float rows; `certified` says whether all were)
The K-path optimum never falls with K (a verifier may ignore a path); GBV can.
Prints one line per context and saves the rows with --out.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from speclp.decode.models import load_pair
from speclp.decode.tree_rows import sample_contexts, tree_rows
from speclp.experiments.prompts import read_prompts
from speclp.experiments.realgap import _stable_hash
from speclp.lp import optimum
from speclp.lp.instance import from_rows
from speclp.proofs.tree_selection import subtree_model
from speclp.verifiers.exact import exact_result
from speclp.verifiers.tree import TreeModel

PATHS = (1, 2, 3)


def below_first_token(model: TreeModel, paths: int) -> dict[str, float | bool]:
    """target-first-gbv's value with K = paths and the K-path optimum below the drawn token."""
    gbv = best = 1.0
    certified = True
    for t in range(model.vocab_size):
        p_t = float(model.target[0, t])
        if p_t == 0:
            continue
        sub = subtree_model(model, t, model.depth - 1)
        gbv += p_t * float(exact_result(sub, "gbv", paths=paths).block_efficiency)
        record = optimum(from_rows(sub.target, sub.draft, sub.depth), paths=paths)
        best += p_t * float(record.value)
        certified &= bool(record.certified)
    return {"paths": paths, "gbv": gbv, "optimum": best, "certified": certified}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=2, help="HumanEval prompts (2 contexts each)")
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--out", default=None, help="JSON file for the rows (default: print only)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pair = load_pair(args.pair)
    draft_temperature = 1.5 if pair.same_model else None  # as `speclp trees`
    rows_out = []
    start = time.perf_counter()
    for prompt in read_prompts(f"humaneval:{args.prompts}"):
        tokens = pair.target.tokenizer.encode(prompt["text"])
        gen = torch.Generator().manual_seed(_stable_hash(prompt["id"]))
        contexts = sample_contexts(pair.target.model, tokens, 2, 8, 1.0,
                                   set(pair.target.eos_token_ids), gen)
        for c, context in enumerate(contexts):
            rows = tree_rows(pair.target.model, pair.draft.model, context, args.top, args.depth,
                             1.0, draft_temperature, select="mix")
            model = TreeModel(rows.target, rows.draft, rows.depth)
            values = [below_first_token(model, k) for k in PATHS]
            rows_out.append({"prompt": prompt["id"], "context": c, "values": values})
            print(prompt["id"], c, "  ".join(
                f"K={v['paths']}: gbv {v['gbv']:.4f} optimum {v['optimum']:.4f}"
                f"{'' if v['certified'] else ' (NOT certified)'}" for v in values), flush=True)
    falls = sum(r["values"][1]["gbv"] > r["values"][2]["gbv"] for r in rows_out)
    print(f"{len(rows_out)} contexts; GBV falls from K = 2 to K = 3 on {falls}; "
          f"{time.perf_counter() - start:.0f} s")
    if args.out:
        summary = {"pair": pair.label, "top": args.top, "depth": args.depth, "rows": rows_out,
                   "draft_temperature": draft_temperature}
        with open(args.out, "w") as handle:
            json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
