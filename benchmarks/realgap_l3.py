"""Brackets at L = 3 and 4 on a real pair: width reached and where the seconds go (issue 33 part 2).

Per (T, L, prompt): the context `speclp realgap --prompts humaneval:N --prompt-seed S
--contexts-per-prompt 2` would reach (context index --context), then
`experiments.realgap.adaptive_bracket` (mass-driven trees, docs/theory.md 13.6) with the caps
--caps tried in turn within --budget seconds. Recorded per tree tried: caps, kept nodes and
tokens, the padded LP's (W + 1)^L paths and the coarse paths it really needs, seconds of the
forward passes (rows), the LPs, the upper bounds in all and the lower-bound laws, and the
bracket width per K. Only bounds (no sampled verifier values). Run from the repository root:

    flock /tmp/heavy.lock taskset -c 0 nice -n 5 python benchmarks/realgap_l3.py \
        --temps 0.6,1.0 --depths 3 --prompts 3 --budget 120

Appends one JSON line per (T, L, prompt, settings) to OUT/records.jsonl (default
benchmarks/results/realgap/l3); lines already there are skipped (resumable). Prints a summary
line per record.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from speclp.decode.models import load_pair
from speclp.decode.tree_rows import prefill, sample_contexts
from speclp.experiments.prompts import read_prompts
from speclp.experiments.realgap import (
    BOUNDS_VERSION,
    WIDTH_TARGETS,
    _stable_hash,
    adaptive_bracket,
    width_schedule,
)

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "realgap" / "l3"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen2.5-coder")
    parser.add_argument("--temps", default="0.6,1.0")
    parser.add_argument("--depths", default="3")
    parser.add_argument("--prompts", type=int, default=3, help="the first N of humaneval:24 drawn "
                        "with --prompt-seed")
    parser.add_argument("--prompt-seed", type=int, default=0)
    parser.add_argument("--contexts", default="1", help="comma list of context indices (of 2 per "
                        "prompt)")
    parser.add_argument("--caps", default="", help="comma list of caps tried in turn (default: "
                        "per depth, CAPS)")
    parser.add_argument("--paths", default="1,2,3,4")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per context and depth")
    parser.add_argument("--verifiers", default="", help="comma list (default: every lossless "
                        "i.i.d. verifier, as realgap)")
    parser.add_argument("--lp-paths", default="ragged", choices=["ragged", "padded"],
                        help="the coarse LPs' path set (experiments.realgap.bracket_bounds)")
    parser.add_argument("--kept-limit", type=int, default=None, help="at most this many kept "
                        "tokens per tree, whose caps are then not bounded by the padded layout "
                        "(experiments.realgap.mass_tree_rows; in the key only when set)")
    parser.add_argument("--label", default="", help="a tag in the key (e.g. the code version)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--summarize", action="store_true", help="print the means of the records "
                        "in OUT and exit")
    args = parser.parse_args(argv)
    if args.summarize:
        summarize(args.out / "records.jsonl")
        return
    caps_default = {2: [8, 16], 3: [2, 4, 8], 4: [1, 2, 4]}
    paths = sorted(int(x) for x in args.paths.split(","))
    verifiers = [v for v in args.verifiers.split(",") if v] or None
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "records.jsonl"
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                done.add(json.loads(line)["key"])
            except (ValueError, KeyError):
                pass
    torch.set_num_threads(1)
    prompts = read_prompts("humaneval:24", seed=args.prompt_seed)[: args.prompts]
    pair = None
    for t in [float(x) for x in args.temps.split(",")]:
        for depth in [int(x) for x in args.depths.split(",")]:
            caps = ([int(x) for x in args.caps.split(",")] if args.caps
                    else caps_default[depth])
            widths = width_schedule(caps[0], depth, caps, args.kept_limit is None)
            for prompt, c in [(p, int(c)) for p in prompts for c in args.contexts.split(",")]:
                key = json.dumps([args.pair, prompt["id"], c, t, depth, widths,
                                  args.budget, paths, verifiers, BOUNDS_VERSION, args.label,
                                  args.lp_paths]
                                 + ([args.kept_limit] if args.kept_limit is not None else []))
                if key in done:
                    continue
                if pair is None:
                    pair = load_pair(args.pair, device="cpu")
                tokens = pair.target.tokenizer.encode(prompt["text"])
                gen = torch.Generator().manual_seed(0 + _stable_hash(prompt["id"]))  # --seed 0
                contexts = sample_contexts(pair.target.model, tokens, 2, 8, t,
                                           set(pair.target.eos_token_ids), gen)
                if c >= len(contexts):  # the prompt's sampling ended (EOS) before it
                    continue
                context = contexts[c]
                start = time.perf_counter()
                ready = prefill(pair.target.model, pair.draft.model, context, t, None)
                found = adaptive_bracket(pair.target.model, pair.draft.model, context, depth,
                                         paths, t, None, ready, verifiers, widths,
                                         WIDTH_TARGETS[depth], args.budget, "mass",
                                         args.lp_paths, kept_limit=args.kept_limit)
                seconds = time.perf_counter() - start
                by_k = {k: {"lower": found["lower"][k]["value"],
                            "lower_by": found["lower"][k]["verifier"],
                            "upper": found["bounds"][k]["value"],
                            "upper_by": found["bounds"][k]["method"],
                            "width": found["bounds"][k]["value"] - found["lower"][k]["value"]}
                        for k in found["bounds"]}
                record = {"key": key, "pair": args.pair, "prompt": prompt["id"],
                          "prompt_seed": args.prompt_seed, "context": c,
                          "context_tokens": len(context), "temperature": t, "depth": depth,
                          "caps": widths, "budget": args.budget, "label": args.label,
                          "lp_paths": args.lp_paths, "kept_limit": args.kept_limit,
                          "bounds_version": BOUNDS_VERSION, "target": WIDTH_TARGETS[depth],
                          "seconds": round(seconds, 2), "prefill_seconds": ready.seconds,
                          "by_paths": by_k, "expansion": found["expansion"],
                          "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
                with out.open("a") as fh:
                    fh.write(json.dumps(record) + "\n")
                widths_text = " ".join(f"K{k}={v['width']:.4f}" for k, v in by_k.items())
                steps = "; ".join(
                    f"cap {s['cap']} W {s['width']} nodes {s['nodes']} tok {s['kept_tokens']} "
                    f"(W+1)^L {s['padded_paths']} law nodes {s.get('law_nodes')} "
                    f"rows {sum(s['rows_seconds'].values()):.1f}s "
                    f"lp {s['lp_seconds']:.1f}s upper {s['upper_seconds']:.1f}s "
                    f"laws {s['lower_seconds']:.1f}s"
                    for s in found["expansion"])
                print(f"T={t} L={depth} {prompt['id']} c{c} {seconds:.1f}s {widths_text} | {steps}",
                      flush=True)


def summarize(path: Path) -> None:
    """Per (lp paths, caps, budget, T, L, K): contexts, mean and max bracket width, mean and max
    seconds per context (bounds only), against the target."""
    groups: dict[tuple, list[dict]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        for k, v in r["by_paths"].items():
            key = (r.get("lp_paths", "padded"), ",".join(map(str, r["caps"])), r["budget"],
                   r["temperature"], r["depth"], int(k), r.get("kept_limit") or 0,
                   r.get("label") or "")
            groups.setdefault(key, []).append({"width": v["width"], "seconds": r["seconds"]})
    for (lp_paths, caps, budget, t, depth, k, limit, label), rows in sorted(groups.items()):
        widths = [x["width"] for x in rows]
        secs = [x["seconds"] for x in rows]
        limit_text = (f" kept<={limit}" if limit else "") + (f" [{label}]" if label else "")
        print(f"{lp_paths:6s} caps {caps}{limit_text} budget {budget:g} T={t} L={depth} K={k} "
              f"n={len(rows)} width mean "
              f"{sum(widths) / len(widths):.4f} max {max(widths):.4f} (target "
              f"{WIDTH_TARGETS[depth]}) seconds mean {sum(secs) / len(secs):.1f} max {max(secs):.1f}")


if __name__ == "__main__":
    main()
