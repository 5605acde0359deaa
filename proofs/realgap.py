"""Real-model gaps: LP optimum vs every lossless verifier on instances cut from a real pair.

At contexts reached by target sampling on real prompts, `verifiers.real_rows.tree_rows`
gives both models' rows on the complete M-ary tree of depth L whose children at every node
are the top-M tokens of the TARGET row at that node ("per node" selection); both rows are
restricted to those M tokens and RENORMALISED, which makes a float instance of vocabulary
M and depth L (a truncation of the real pair, not the pair itself; the kept target mass is
recorded as `covered_target_root` / `covered_target_mean`). On it:
    optimum  = speclp.lp.optimum(instance, paths=K)   (column generation, exact certificate
               on the binary values of the float rows; `certified` says whether it was)
    verifier = exact_result(model, name, paths=K).block_efficiency for every registered
               lossless verifier (exact law, float64)
    gap      = optimum - verifier  (E[tau + 1] units)
Results are appended to a JSONL file, one record per (prompt, context, M, L, K); a record
is keyed on every setting that changes it (realgap_key: the pair, the prompt and its tokens,
the context, M, L, K, --every, the temperatures, the seed and the model dtype), and a rerun
skips exactly the records whose key it asks for (resumable, never stale).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..lp.engine import optimum
from ..lp.instance import from_rows
from ..verifiers.exact import exact_result
from ..verifiers.law import verifier_names
from ..verifiers.real_rows import sample_contexts, tree_rows
from .store import append_jsonl, load_jsonl, record_key  # noqa: F401 - load_jsonl re-exported


def realgap_key(prompt: dict[str, Any], context: int, width: int, depth: int, paths: int,
                every: int, temperature: float, draft_temperature: float | None, seed: int,
                label: str, dtype: str) -> str:
    """Key of one realgap record: every setting that changes it (store.record_key)."""
    return record_key({"kind": "realgap", "pair": label, "prompt": prompt["id"],
                       "prompt_tokens": prompt_digest(prompt), "context": context, "width": width,
                       "depth": depth, "paths": paths, "every": every, "temperature": temperature,
                       "draft_temperature": draft_temperature, "seed": seed, "dtype": dtype})


def prompt_digest(prompt: dict[str, Any]) -> str:
    """Short sha256 of a prompt's token ids (an edited prompt file changes the key)."""
    import hashlib

    return hashlib.sha256(json.dumps(list(map(int, prompt["tokens"]))).encode()).hexdigest()[:16]


def gap_record(instance: Any, paths: int, verifiers: list[str]) -> dict[str, Any]:
    """LP optimum (certified) and every verifier's exact E[tau + 1] on one instance."""
    start = time.perf_counter()
    record = optimum(instance, paths)
    values = {}
    for name in verifiers:
        values[name] = float(exact_result(instance.model(), name, paths=paths).block_efficiency)
    return {
        "optimum": record.value,
        "optimum_certified": bool(record.certified),
        "certificate": record.certificate,
        "verifiers": values,
        "gaps": {n: record.value - v for n, v in values.items()},
        "seconds": round(time.perf_counter() - start, 3),
    }


def run_realgap(target: Any, draft: Any, prompts: list[dict[str, Any]], widths: list[int],
                depths: list[int], paths: list[int], out_file: Path, contexts_per_prompt: int = 2,
                every: int = 8, temperature: float = 1.0, draft_temperature: float | None = None,
                seed: int = 0, label: str = "", eos: set[int] | None = None,
                progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
                ) -> dict[str, Any]:
    """Compute (or resume) the realgap records; returns {"file", "computed", "reused", "keys"}
    (keys: this call's records, for summaries that count only what was asked).

    prompts: [{"id", "tokens"}] (token ids). Contexts: prompt + k*every target-sampled tokens.
    """
    import torch

    done = {r.get("key") for r in load_jsonl(out_file)}
    verifiers = verifier_names(draft_sampling="iid")  # contexts are drafted i.i.d.
    dtype = str(getattr(target, "dtype", ""))
    computed = reused = 0
    wanted: list[str] = []

    def key(prompt: dict[str, Any], c: int, m: int, d: int, k: int) -> str:
        return realgap_key(prompt, c, m, d, k, every, temperature, draft_temperature, seed, label,
                           dtype)

    for prompt in progress(prompts):
        keys = [(c, m, d, k) for c in range(contexts_per_prompt) for m in widths for d in depths
                for k in paths]
        wanted.extend(key(prompt, *ck) for ck in keys)
        if all(key(prompt, *ck) in done for ck in keys):
            reused += len(keys)
            continue
        gen = torch.Generator().manual_seed(seed + _stable_hash(prompt["id"]))
        contexts = sample_contexts(target, prompt["tokens"], contexts_per_prompt, every,
                                   temperature, eos, gen)
        for c, context in enumerate(contexts):
            for m in widths:
                for d in depths:
                    todo = [k for k in paths if key(prompt, c, m, d, k) not in done]
                    reused += len(paths) - len(todo)
                    if not todo:
                        continue
                    rows = tree_rows(target, draft, context, m, d, temperature, draft_temperature,
                                     select="target")
                    inst = from_rows(rows.target, rows.draft, d, name=f"{prompt['id']}-c{c}")
                    for k in todo:
                        record = {
                            "key": key(prompt, c, m, d, k), "pair": label,
                            "prompt": prompt["id"], "context": c, "context_tokens": len(context),
                            "width": m, "depth": d, "paths": k, "selection": "target top-M per node",
                            "renormalised": True,
                            "covered_target_root": float(rows.covered_target[0]),
                            "covered_target_mean": float(np.mean(rows.covered_target)),
                            "covered_draft_mean": float(np.mean(rows.covered_draft)),
                            "temperature": temperature, "draft_temperature": draft_temperature,
                            "every": every, "seed": seed, "dtype": dtype,
                            "rows_seconds": rows.seconds,
                            **gap_record(inst, k, verifiers),
                        }
                        append_jsonl(out_file, record)
                        done.add(record["key"])
                        computed += 1
    return {"file": str(out_file), "computed": computed, "reused": reused, "keys": wanted}


def summarize_realgap(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean optimum and mean gap per verifier, per (M, L, K)."""
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["width"], r["depth"], r["paths"]), []).append(r)
    out = []
    for (m, d, k), recs in sorted(groups.items()):
        names = sorted(recs[0]["gaps"])
        out.append({
            "width": m, "depth": d, "paths": k, "contexts": len(recs),
            "certified": sum(r["optimum_certified"] for r in recs),
            "mean_optimum": float(np.mean([r["optimum"] for r in recs])),
            "mean_gap": {n: float(np.mean([r["gaps"][n] for r in recs])) for n in names},
            "max_gap": {n: float(np.max([r["gaps"][n] for r in recs])) for n in names},
            "mean_covered_target": float(np.mean([r["covered_target_mean"] for r in recs])),
        })
    return out


def plot_realgap(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Bar chart of the mean gap to the certified optimum per verifier, one panel per (M, L, K)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarize_realgap(records)
    if not summary:
        return []
    shapes = sorted({(s["width"], s["depth"]) for s in summary})
    ks = sorted({s["paths"] for s in summary})
    fig, axes = plt.subplots(len(shapes), len(ks), figsize=(3.6 * len(ks), 2.8 * len(shapes)),
                             squeeze=False)
    for ax in axes.reshape(-1):
        ax.set_visible(False)
    for s in summary:
        ax = axes[shapes.index((s["width"], s["depth"])), ks.index(s["paths"])]
        ax.set_visible(True)
        names = sorted(s["mean_gap"], key=lambda n: s["mean_gap"][n])
        ax.barh(names, [s["mean_gap"][n] for n in names], color="tab:blue")
        ax.set_title(f"M={s['width']} L={s['depth']} K={s['paths']}: {s['contexts']} ctx, "
                     f"{s['certified']} certified", fontsize=8)
        ax.set_xlabel("mean gap to LP optimum, E[tau+1]", fontsize=8)
        ax.tick_params(labelsize=7)
    pair = records[0].get("pair", "")
    fig.suptitle(f"{pair}\ninstances: top-M of target per node, rows renormalised", fontsize=9)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "realgap_gaps.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def _stable_hash(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
