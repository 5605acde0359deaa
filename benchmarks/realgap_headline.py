"""The headline of issue 33 (part 4): how far GBV is from the certified optimum on a real model.

Reads realgap JSONL records (`speclp realgap`: one line per (prompt, context, L), with per K
the certified upper bound "upper", the certified lower bound "lower" and every verifier's
E[tau + 1] estimate) and writes, into --out (default benchmarks/results/realgap/headline/):

  headline.md        per settings group and (T, L, K): the bracket (upper, lower, width mean and
                     max against the issue's targets), the mean E[tau + 1] of gbv, nodeopt,
                     bv_extended_rrs and bv, their share of the certified upper bound (a LOWER
                     bound on their share of the optimum) and of the certified lower bound; the
                     paired K -> K + 1 differences of gbv, nodeopt and bv_extended_rrs with the
                     steps that are significantly negative / positive / undecided; the figure's
                     caption (command, commit, inputs, record counts, prompt seed)
  headline.json      the same numbers with every interval
  headline.png/.pdf  per (T, L) panel: E[tau + 1] against K for the four verifiers (error bars:
                     intervals over prompts) on the certified bracket [lower, upper] (band)

Statistics. Contexts of one prompt are not independent: every interval is over PROMPTS
(clusters), `experiments.intervals.cluster_mean_interval` on the per-prompt sums and context
counts of a per-context quantity (a value, a share value / upper, a difference). A verifier's
per-context value at L >= 2 is the mean of its exact conditional E[tau + 1] over sampled draft
trees, an unbiased estimate of its value there, so the interval over prompts covers the mean of
the true per-context values (and shares: the bounds are fixed per context). The K -> K + 1
difference is paired: the first K paths of each sampled tree are the K-path tree, so both
values of a context come from the same trees. Intervals are 95% per comparison, not
simultaneous over the comparisons shown. Width targets (mean over contexts, issue 33 part 2):
`experiments.realgap.WIDTH_TARGETS` (L = 1 exact: width 0 in every context).

Records of different settings (every setting of a record's key except the prompt, context,
depth, width and verifier list: temperature, samples, bounds_version, pair, prompt seed, ...)
are grouped and never mixed; the groups found are printed. Rows are per (L, width, K), so two
kept-tree widths are never mixed either. A record lacking a verifier is counted and reported
(that verifier's numbers use the records that have it); a record that is not a full-vocabulary
realgap record, a torn line or a repeated key is reported and skipped. It computes nothing
new and reads growing records safely (copy them first if a writer is appending), with one
exception: at L = 1 a sampled bv_extended_rrs value (records made before realgap computed it
exactly) is replaced, in memory, by the exact specinfer value of the same record, its equal at
L = 1 (`exact_at_one`; proof in `experiments.realgap.extended_bv_one_step`); the count is
printed. The records hold no probability rows, so nothing else can be recomputed from them.

    python benchmarks/realgap_headline.py RECORD_DIR_OR_FILE... [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent.parent))

from speclp.experiments.intervals import cluster_mean_interval, format_interval  # noqa: E402
from speclp.experiments.realgap import MODE_FULL, WIDTH_TARGETS  # noqa: E402
from speclp.experiments.store import load_jsonl  # noqa: E402

RESULTS = ROOT / "results" / "realgap" / "headline"
SHOWN = ("gbv", "nodeopt", "bv_extended_rrs", "bv")  # the table's and the figure's verifiers
STEPPED = ("gbv", "nodeopt", "bv_extended_rrs")  # the K -> K + 1 differences
LABELS = {"gbv": "GBV", "nodeopt": "nodeopt", "bv_extended_rrs": "BV-ext-RRS (never below BV)",
          "bv": "BV"}
# settings of a record that identify it within its run (not a run setting)
IDENTITY = ("prompt", "prompt_digest", "context", "depth", "width", "verifiers")
# run settings read from the record itself when it carries no parsable key
FALLBACK_SETTINGS = ("mode", "pair", "temperature", "draft_temperature", "samples", "batch",
                     "bounds_version", "prompt_seed", "every", "seed", "paths", "score_dtype",
                     "model_dtype", "widths", "width_target", "time_budget")
LOSS_TOLERANCE = 1e-9  # a per-context K -> K + 1 difference below -this counts as a loss
MATERIAL_LOSS = 1e-3  # ... and below -this as a loss that matters (counted apart)
WORST_SHOWN = 5  # the largest such losses listed per (L, verifier)


# ---------------------------------------------------------------------------------------
# reading and grouping


def input_files(paths: list[str]) -> list[Path]:
    """The JSONL files named: a file as given, a folder's *.jsonl (sorted)."""
    files: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = sorted(path.glob("*.jsonl"))
            if not found:
                raise SystemExit(f"records: no *.jsonl file in the folder {text}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise SystemExit(f"records: no such file or folder: {text}")
    return files


def read_records(files: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The usable records of `files` (first occurrence of each key) and what was read:
    {"files": [{path, lines, records, sha256}], "skipped": [reason, ...]}."""
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    report: dict[str, Any] = {"files": [], "skipped": []}
    recomputed = 0
    for path in files:
        data = path.read_bytes()
        lines = [line for line in data.decode("utf-8", errors="replace").splitlines() if line.strip()]
        loaded = load_jsonl(path)
        report["files"].append({"path": str(path), "lines": len(lines), "records": len(loaded),
                                "sha256": hashlib.sha256(data).hexdigest()[:16]})
        if len(loaded) < len(lines):
            report["skipped"].append(f"{path}: {len(lines) - len(loaded)} unreadable line(s) "
                                     "(a torn last line of a running recording)")
        reasons: dict[str, list[int]] = {}  # reason -> record numbers (1-based) in this file
        for i, record in enumerate(loaded):
            problem = record_problem(record)
            if problem is None:
                key = record.get("key") or json.dumps(settings_of(record) | identity_of(record),
                                                      sort_keys=True, default=str)
                if key in seen:
                    problem = "repeats the key of an earlier record"
                else:
                    seen.add(key)
                    records.append(record)
                    recomputed += exact_at_one(record)
                    continue
            reasons.setdefault(problem, []).append(i + 1)
        report["skipped"] += [f"{path}: {len(numbers)} record(s) ({_numbers(numbers)}): {reason}"
                              for reason, numbers in reasons.items()]
    report["exact_at_one"] = {"verifiers": sorted(EQUAL_AT_ONE), "replaced": recomputed,
                              "note": EXACT_AT_ONE_NOTE}
    return records, report


# verifier -> the verifier whose exact L = 1 value it equals (a theorem, not a measurement:
# experiments.realgap.extended_bv_one_step derives bv_extended_rrs = specinfer at L = 1)
EQUAL_AT_ONE = {"bv_extended_rrs": "specinfer"}
EXACT_AT_ONE_NOTE = ("at L = 1 a sampled bv_extended_rrs value is replaced by the exact value of "
                     "specinfer stored in the same record (equal at L = 1: "
                     "experiments.realgap.extended_bv_one_step); the records themselves are "
                     "unchanged")


def exact_at_one(record: dict[str, Any]) -> int:
    """At L = 1, a verifier of EQUAL_AT_ONE that the record holds as a sampled estimate takes
    the exact value of its equal (when the record holds that one as exact): records made
    before realgap computed bv_extended_rrs exactly. The records store no probability rows
    (only sum min(p, q) at L = 1), so nothing else can be recomputed from them. Returns the
    number of (K, verifier) values replaced (in place, in memory only)."""
    if record.get("depth") != 1:
        return 0
    replaced = 0
    for block in (record.get("by_paths") or {}).values():
        verifiers = block.get("verifiers") or {}
        for name, equal in EQUAL_AT_ONE.items():
            have, source = verifiers.get(name), verifiers.get(equal)
            if (isinstance(have, dict) and have.get("exact") is not True and isinstance(source, dict)
                    and source.get("exact") is True and _finite(source.get("mean"))):
                value = source["mean"]
                verifiers[name] = {"mean": value, "low": value, "high": value, "n": 0, "exact": True,
                                   "method": f"exact: {equal}'s exact L = 1 value in this record "
                                             "(equal at L = 1), recomputed by realgap_headline",
                                   "sampled": have}
                replaced += 1
    return replaced


def _numbers(numbers: list[int], shown: int = 5) -> str:
    """'record 1, 2, 3' or 'records 1, 2, 3, 4, 5, ...'."""
    head = ", ".join(str(n) for n in numbers[:shown]) + (", ..." if len(numbers) > shown else "")
    return ("record " if len(numbers) == 1 else "records ") + head


def record_problem(record: dict[str, Any]) -> str | None:
    """Why a record cannot be used here (None: it can)."""
    if record.get("mode") != MODE_FULL:
        return f"mode {record.get('mode')!r} is not {MODE_FULL!r} (not a bracket record)"
    for field in ("prompt", "context", "depth", "temperature", "by_paths"):
        if field not in record:
            return f"no field {field!r}"
    if not isinstance(record["by_paths"], dict) or not record["by_paths"]:
        return "by_paths is empty"
    for k, block in record["by_paths"].items():
        for part in ("upper", "lower"):
            if not isinstance(block.get(part), dict) or not _finite(block[part].get("value")):
                return f"K = {k}: no numeric {part}.value"
        if block["upper"]["value"] <= 0 or block["lower"]["value"] <= 0:
            return f"K = {k}: a bound <= 0 (E[tau + 1] >= 1)"
        if not isinstance(block.get("verifiers"), dict):
            return f"K = {k}: no verifiers"
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and bool(np.isfinite(value))


def settings_of(record: dict[str, Any]) -> dict[str, Any]:
    """The run settings of a record: its key's settings less the identity (prompt, context,
    depth, width, verifiers); from the record's fields when the key is absent or not JSON."""
    try:
        keyed = json.loads(record["key"])
    except (KeyError, TypeError, ValueError):
        keyed = None
    if not isinstance(keyed, dict):
        keyed = {f: record.get(f) for f in FALLBACK_SETTINGS if f in record}
    out = {k: v for k, v in keyed.items() if k not in IDENTITY}
    out.setdefault("prompt_seed", None)  # records made before --prompt-seed existed
    return out


def identity_of(record: dict[str, Any]) -> dict[str, Any]:
    return {f: record.get(f) for f in IDENTITY}


def group_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{"settings", "records"}], one group per distinct run settings, in a stable order."""
    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        settings = settings_of(r)
        key = json.dumps(settings, sort_keys=True, default=str)
        groups.setdefault(key, {"settings": settings, "records": []})["records"].append(r)
    return [groups[k] for k in sorted(groups, key=lambda k: _group_order(groups[k]["settings"]))]


def _group_order(settings: dict[str, Any]) -> tuple:
    return (str(settings.get("pair")), float(settings.get("temperature") or 0),
            json.dumps(settings, sort_keys=True, default=str))


def group_label(settings: dict[str, Any]) -> str:
    """'pair, T = 0.6, samples 32, bounds v4, prompt seed 0' (the settings that differ most)."""
    seed = settings.get("prompt_seed")
    return (f"{settings.get('pair')}, T = {settings.get('temperature')}, "
            f"samples {settings.get('samples')}, bounds v{settings.get('bounds_version')}, "
            + ("prompts not drawn (fixed list)" if seed is None else f"prompt seed {seed}"))


# ---------------------------------------------------------------------------------------
# the numbers


def over_prompts(values: list[tuple[str, float]]) -> dict[str, Any] | None:
    """Mean over prompts of the per-prompt mean of per-context values, with the interval of
    `cluster_mean_interval` over prompts (None without values)."""
    if not values:
        return None
    prompts = sorted({p for p, _ in values})
    index = {p: i for i, p in enumerate(prompts)}
    sums, counts = np.zeros(len(prompts)), np.zeros(len(prompts))
    for prompt, v in values:
        sums[index[prompt]] += v
        counts[index[prompt]] += 1
    return cluster_mean_interval(sums, counts)


def verdict(interval: dict[str, Any] | None) -> str:
    """'negative' / 'positive' where the interval excludes 0, else 'undecided' ('n/a' without
    an interval; 'zero' where the difference is 0 on every prompt)."""
    if interval is None or interval.get("low") is None or interval.get("high") is None:
        return "n/a"
    if interval["low"] == interval["high"] == interval["estimate"] == 0:
        return "zero"
    if interval["high"] < 0:
        return "negative"
    if interval["low"] > 0:
        return "positive"
    return "undecided"


def bracket_row(recs: list[dict[str, Any]], depth: int, width: Any, k: str) -> dict[str, Any]:
    """The bracket and the shown verifiers of one (L, width, K) over `recs`."""
    blocks = [(r["prompt"], r["by_paths"][k]) for r in recs]
    uppers = [(p, b["upper"]["value"]) for p, b in blocks]
    lowers = [(p, b["lower"]["value"]) for p, b in blocks]
    widths = [b["upper"]["value"] - b["lower"]["value"] for _, b in blocks]
    target = WIDTH_TARGETS.get(depth)
    mean_width, max_width = float(np.mean(widths)), float(np.max(widths))
    if target is None:
        status, missed = "no target", None
    elif target == 0:  # "exact": width 0 in every context
        status = "met" if max_width <= 0 else "missed"
        missed = None if status == "met" else max_width
    else:
        status = "met" if mean_width <= target else "missed"
        missed = None if status == "met" else mean_width - target
    row: dict[str, Any] = {
        "depth": depth, "width": width, "paths": int(k), "contexts": len(recs),
        "prompts": len({p for p, _ in blocks}),
        "upper": over_prompts(uppers), "lower": over_prompts(lowers),
        "lower_share_of_upper": over_prompts([(p, lo / up) for (p, lo), (_, up)
                                              in zip(lowers, uppers, strict=True)]),
        "bracket_width": {"mean": mean_width, "max": max_width, "target": target,
                          "status": status, "missed_by": missed,
                          "over_prompts": over_prompts([(p, w) for (p, _), w in zip(blocks, widths,
                                                                                      strict=True)])},
        "upper_kinds": _count(b["upper"].get("method", "?") for _, b in blocks),
        "lower_verifiers": _count(b["lower"].get("verifier", "?") for _, b in blocks),
        "verifiers": {},
    }
    for name in SHOWN:
        have = [(p, b["upper"]["value"], b["lower"]["value"], b["verifiers"][name])
                for p, b in blocks if _finite((b["verifiers"].get(name) or {}).get("mean"))]
        entry: dict[str, Any] = {"contexts": len(have), "missing": len(blocks) - len(have)}
        if have:
            entry.update(
                value=over_prompts([(p, v["mean"]) for p, _, _, v in have]),
                share_of_upper=over_prompts([(p, v["mean"] / up) for p, up, _, v in have]),
                share_of_lower=(over_prompts([(p, v["mean"] / lo) for p, _, lo, v in have])
                                if all(lo > 0 for _, _, lo, _ in have) else None),
                exact=all(v.get("exact") is True for *_, v in have),
                beats_lower=sum(v["mean"] > lo for _, _, lo, v in have))
        row["verifiers"][name] = entry
    return row


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def step_rows(recs: list[dict[str, Any]], depth: int, width: Any, ks: list[int]
              ) -> list[dict[str, Any]]:
    """Paired differences value(K') - value(K) for consecutive recorded K < K' of the same
    contexts, per verifier of STEPPED, with their interval over prompts and verdict."""
    out = []
    for k, k_next in zip(ks, ks[1:], strict=False):
        row: dict[str, Any] = {"depth": depth, "width": width, "from": k, "to": k_next,
                               "verifiers": {}}
        for name in STEPPED:
            diffs, lacking, exact = [], 0, True
            for r in recs:
                a = r["by_paths"].get(str(k), {}).get("verifiers", {}).get(name) or {}
                b = r["by_paths"].get(str(k_next), {}).get("verifiers", {}).get(name) or {}
                if _finite(a.get("mean")) and _finite(b.get("mean")):
                    diffs.append((r["prompt"], b["mean"] - a["mean"]))
                    exact = exact and a.get("exact") is True and b.get("exact") is True
                else:
                    lacking += 1
            interval = over_prompts(diffs)
            row["verifiers"][name] = {
                "difference": interval, "verdict": verdict(interval), "contexts": len(diffs),
                "missing": lacking, "prompts": len({p for p, _ in diffs}),
                # exact: both values exact in every context, so the loss count is a fact (up to
                # LOSS_TOLERANCE), not an estimate
                "exact": exact and bool(diffs),
                "losing_contexts": sum(d < -LOSS_TOLERANCE for _, d in diffs),
                "largest_loss": max([-d for _, d in diffs if d < -LOSS_TOLERANCE], default=0.0)}
        out.append(row)
    return out


def summarize_group(group: dict[str, Any]) -> dict[str, Any]:
    """Rows per (L, width, K), K steps, missing verifiers and failures of one settings group."""
    recs = group["records"]
    by_depth: dict[tuple[int, Any], list[dict[str, Any]]] = {}
    for r in recs:
        by_depth.setdefault((int(r["depth"]), r.get("width")), []).append(r)
    rows, steps, losers = [], [], []
    for (depth, width), these in sorted(by_depth.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        ks = sorted({int(k) for r in these for k in r["by_paths"]})
        for k in ks:
            with_k = [r for r in these if str(k) in r["by_paths"]]
            rows.append(bracket_row(with_k, depth, width, str(k)))
        steps += step_rows(these, depth, width, ks)
        losers.append({"depth": depth, "width": width,
                       "verifiers": {n: any_step_loss(these, ks, n) for n in STEPPED}})
    missing: dict[str, int] = {}
    for r in recs:
        for k, block in r["by_paths"].items():
            for name in SHOWN:
                if not _finite((block["verifiers"].get(name) or {}).get("mean")):
                    label = f"{name} (L = {r['depth']}, K = {k})"
                    missing[label] = missing.get(label, 0) + 1
    return {"label": group_label(group["settings"]), "settings": group["settings"],
            "records": len(recs), "prompts": len({r["prompt"] for r in recs}),
            "contexts": len({(r["prompt"], r["context"]) for r in recs}),
            "contexts_per_depth": {str(d): len({(r["prompt"], r["context"]) for r in recs
                                                if int(r["depth"]) == d})
                                   for d in sorted({int(r["depth"]) for r in recs})},
            "failures": sum(len(r.get("failures") or []) for r in recs),
            "missing_verifiers": missing, "rows": rows, "steps": steps,
            "losing_at_some_step": losers}


def any_step_loss(recs: list[dict[str, Any]], ks: list[int], name: str) -> dict[str, Any]:
    """How many contexts (with the verifier at every K of `ks`) lose more than LOSS_TOLERANCE
    at some K -> K' step; exact: every value exact (then the count is a fact)."""
    counted, losing, material, largest, exact = 0, 0, 0, 0.0, True
    worst: list[dict[str, Any]] = []  # every step losing more than MATERIAL_LOSS
    for r in recs:
        blocks = [(r["by_paths"].get(str(k), {}).get("verifiers", {}).get(name) or {}) for k in ks]
        if len(blocks) < 2 or not all(_finite(b.get("mean")) for b in blocks):
            continue
        counted += 1
        exact = exact and all(b.get("exact") is True for b in blocks)
        means = [b["mean"] for b in blocks]
        loss = max(a - b for a, b in zip(means, means[1:], strict=False))
        losing += loss > LOSS_TOLERANCE
        material += loss > MATERIAL_LOSS
        largest = max(largest, loss)
        worst += [{"prompt": r["prompt"], "context": r["context"], "from": k, "to": k_next,
                   "loss": a - b, "exact": blocks[i]["exact"] is True and blocks[i + 1]["exact"] is True}
                  for i, (k, k_next, a, b) in enumerate(zip(ks, ks[1:], means, means[1:], strict=False))
                  if a - b > MATERIAL_LOSS]
    worst.sort(key=lambda w: -w["loss"])
    return {"contexts": counted, "losing": losing, "material": material, "largest": largest,
            "exact": exact and counted > 0, "worst": worst[:WORST_SHOWN]}


# ---------------------------------------------------------------------------------------
# writing


def _iv(record: dict[str, Any] | None, digits: int = 3) -> str:
    """format_interval, except that an interval narrower than the digits shown is written
    'm [width < 1e-digits]' (not in scientific notation around a share near 1)."""
    if record is None:
        return "-"
    low, high = record.get("low"), record.get("high")
    if (low is not None and high is not None and low != high
            and f"{low:.{digits}f}" == f"{high:.{digits}f}"):
        return f"{record['estimate']:.{digits}f} [width < 1e-{digits}]"
    return format_interval(record, digits)


def markdown(summaries: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["# How far is GBV from the optimum on a real model (issue 33 part 4)", "",
             "Command: `" + meta["command"] + "`  ", f"Commit: {meta['commit']}  ",
             "Inputs: " + "; ".join(f"{f['path']} ({f['records']} records, sha256 {f['sha256']})"
                                    for f in meta["inputs"]["files"]), ""]
    if meta["inputs"]["skipped"]:
        lines += ["Skipped: " + "; ".join(meta["inputs"]["skipped"]), ""]
    at_one = meta["inputs"].get("exact_at_one") or {}
    if at_one.get("replaced"):
        lines += [f"Exact at L = 1: {at_one['replaced']} sampled value(s) replaced; "
                  + at_one["note"] + ".", ""]
    lines += ["Groups found (records of different settings are never mixed):", ""]
    lines += [f"- {s['label']}: {s['records']} records, {s['prompts']} prompts, {s['contexts']} "
              f"contexts; failures recorded: {s['failures']}" for s in summaries]
    lines += ["", "How to read it. Each number with an interval is the mean over prompts of the "
              "per-prompt mean over its contexts, with a 95% interval over PROMPTS (contexts of one "
              "prompt are clusters; `experiments.intervals.cluster_mean_interval`); bracket widths "
              "are plain means and maxima over contexts, as the targets are stated. upper / lower: "
              "the certified bracket of the K-path optimum "
              "(L = 1: the closed-form optimum on the full rows in float64, so lower = upper). "
              "A verifier's share of the certified "
              "upper bound (value / upper per context) is a LOWER bound on its share of the optimum; "
              "its share of the certified lower bound exceeds 1 where it beats the bound we can "
              "certify (value / lower > 1). Values at L >= 2 are means of exact conditional values over "
              "sampled draft trees (estimates; exact ones are marked `=`). Width: upper - lower; its "
              "mean over contexts against the target of issue 33 (L = 1 exact: width 0 in every "
              "context; L = 2 <= 0.02; L = 3 <= 0.05; L = 4 <= 0.10).", ""]
    lines += ["## Findings (generated from the tables below)", ""]
    for s in summaries:
        lines += findings(s)
    lines += [""]
    for s in summaries:
        lines += _group_markdown(s)
    lines += ["## Figure", "", f"![headline]({meta['figure']}.png)", "",
              f"![share of the certified upper bound]({meta['figure']}_share.png)", "",
              meta["caption"], ""]
    return "\n".join(lines)


def findings(s: dict[str, Any]) -> list[str]:
    """Bullets per (T, L) at the largest K: the shares and the bracket; and per stepped
    verifier, its significant K -> K' steps and the contexts that lose value at some step."""
    out = []
    for depth, width in panels_of(s):
        rows = [r for r in s["rows"] if (r["depth"], r["width"]) == (depth, width)]
        top = rows[-1]
        w = top["bracket_width"]
        shares = ", ".join(f"{LABELS[n]} {_iv(top['verifiers'][n].get('share_of_upper'), 3)}"
                           for n in SHOWN)
        status = w["status"] if w["missed_by"] is None else f"missed by {w['missed_by']:.4f}"
        out.append(f"- {s['label']}, L = {depth}, K = {top['paths']} ({top['prompts']} prompts, "
                   f"{top['contexts']} contexts): share of the certified upper bound {shares}; "
                   f"bracket width mean {w['mean']:.4f}, max {w['max']:.4f} ({status}).")
        steps = [st for st in s["steps"] if (st["depth"], st["width"]) == (depth, width)]
        (losers,) = [x for x in s["losing_at_some_step"] if (x["depth"], x["width"]) == (depth, width)]
        for n in STEPPED:
            neg = [f"{st['from']} -> {st['to']}" for st in steps
                   if st["verifiers"][n]["verdict"] == "negative"]
            lose = losers["verifiers"][n]
            out.append(f"  - {LABELS[n]}: mean over prompts significantly lower at K + 1 at "
                       f"{', '.join(neg) or 'no step'} of {len(steps)}; {lose['losing']} of "
                       f"{lose['contexts']} contexts lose more than {LOSS_TOLERANCE:g} at some step, "
                       f"{lose['material']} more than {MATERIAL_LOSS:g} (largest loss "
                       f"{lose['largest']:.4f}; "
                       + ("exact float64 values: counts, not estimates" if lose["exact"]
                          else "estimates from sampled trees") + ")"
                       + ("" if not (lose["exact"] and lose["worst"]) else
                          "; the largest exact losses: " + "; ".join(
                              f"{w['prompt']} context {w['context']}, K {w['from']} -> {w['to']}: "
                              f"{-w['loss']:.4f}" for w in lose["worst"])) + ".")
    return out


def _group_markdown(s: dict[str, Any]) -> list[str]:
    T = s["settings"].get("temperature")
    out = [f"## {s['label']}", "",
           "### The certified bracket", "",
           "| T | L | K | contexts | prompts | upper | lower | width mean | width max | target | status |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        w = r["bracket_width"]
        target = "-" if w["target"] is None else ("exact" if w["target"] == 0 else f"<= {w['target']:g}")
        status = w["status"] if w["missed_by"] is None else f"missed by {w['missed_by']:.4f}"
        out.append(f"| {T} | {r['depth']} | {r['paths']} | {r['contexts']} | {r['prompts']} | "
                   f"{_iv(r['upper'])} | {_iv(r['lower'])} | {w['mean']:.4f} | {w['max']:.4f} | "
                   f"{target} | {status} |")
    for title, field in (("Mean E[tau + 1]", "value"),
                         ("Share of the certified upper bound (a lower bound on the share of the "
                          "optimum)", "share_of_upper"),
                         ("Share of the certified lower bound (> 1: beats the certified lower bound)",
                          "share_of_lower")):
        out += ["", f"### {title}", "",
                "| T | L | K | " + " | ".join(LABELS[n] for n in SHOWN) + " |",
                "|---|---|---|" + "---|" * len(SHOWN)]
        for r in s["rows"]:
            cells = []
            for n in SHOWN:
                v = r["verifiers"][n]
                cell = _iv(v.get(field), 3 if field == "value" else 4)
                if v.get("exact") and field == "value":
                    cell = "= " + cell
                if v["missing"]:
                    cell += f" ({v['missing']} of {r['contexts']} contexts lack it)"
                cells.append(cell)
            out.append(f"| {T} | {r['depth']} | {r['paths']} | " + " | ".join(cells) + " |")
    out += ["", "### Can a verifier lose value as K grows? Paired value(K + 1) - value(K), same contexts",
            "", "Mean difference [95% interval over prompts], its verdict (negative / positive: the "
            "interval excludes 0), and how many contexts lose more than "
            f"{LOSS_TOLERANCE:g} (with the largest loss). Where both values are exact in every "
            "context (L = 1 closed forms) the count is a fact about those contexts; elsewhere the "
            "per-context differences are estimates from the same sampled trees.", "",
            "| T | L | K -> K' | " + " | ".join(LABELS[n] for n in STEPPED) + " |",
            "|---|---|---|" + "---|" * len(STEPPED)]
    for st in s["steps"]:
        cells = []
        for n in STEPPED:
            v = st["verifiers"][n]
            loss = (f"{v['losing_contexts']}/{v['contexts']} contexts lose"
                    + (f", up to {v['largest_loss']:.4f}" if v["losing_contexts"] else "")
                    + ("; exact values" if v["exact"] else ""))
            cells.append(f"{_iv(v['difference'], 4)} **{v['verdict']}** ({loss})")
        out.append(f"| {T} | {st['depth']} | {st['from']} -> {st['to']} | " + " | ".join(cells) + " |")
    out += [""]
    for n in STEPPED:
        found = {v: [f"L = {st['depth']}, K {st['from']} -> {st['to']}" for st in s["steps"]
                     if st["verifiers"][n]["verdict"] == v] for v in ("negative", "positive", "undecided")}
        out.append(f"- {LABELS[n]}: significantly negative at "
                   f"{', '.join(found['negative']) or 'no step'}; positive at "
                   f"{', '.join(found['positive']) or 'no step'}; undecided at "
                   f"{', '.join(found['undecided']) or 'no step'}.")
    if s["missing_verifiers"]:
        out += ["", "Records lacking a shown verifier: " + "; ".join(
            f"{k}: {v} context(s)" for k, v in sorted(s["missing_verifiers"].items()))]
    out += [""]
    return out


def panels_of(summary: dict[str, Any]) -> list[tuple[int, Any]]:
    """The (L, width) of a group's rows, in order: one figure panel each."""
    return sorted({(r["depth"], r["width"]) for r in summary["rows"]}, key=lambda dw: (dw[0], str(dw[1])))


def plot(summaries: list[dict[str, Any]], out: Path, name: str, field: str = "value") -> list[str]:
    """One panel per (group, L): against K, the verifiers' mean E[tau + 1] (field "value") or
    their share of the certified upper bound ("share_of_upper"), error bars their intervals
    over prompts, on the certified bracket (band: [lower, upper], or [lower / upper, 1])."""
    from speclp.experiments.plots.style import distinct_styles, pyplot, save  # lazy: matplotlib

    plt = pyplot()
    cols = max(1, max((len(panels_of(s)) for s in summaries), default=1))
    nrows = max(1, len(summaries))
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
    styles = distinct_styles(list(SHOWN))
    for i, s in enumerate(summaries):
        panels = panels_of(s)
        for j in range(cols):
            ax = axes[i][j]
            if j >= len(panels):
                ax.axis("off")
                continue
            d, width = panels[j]
            rows = [r for r in s["rows"] if (r["depth"], r["width"]) == (d, width)]
            ks = [r["paths"] for r in rows]
            if field == "value":
                lower = [r["lower"]["estimate"] for r in rows]
                upper = [r["upper"]["estimate"] for r in rows]
            else:
                lower = [r["lower_share_of_upper"]["estimate"] for r in rows]
                upper = [1.0] * len(rows)
            ax.fill_between(ks, lower, upper, color="0.75", alpha=0.6, lw=0,
                            label="certified bracket of the optimum (mean)")
            ax.plot(ks, upper, color="0.35", lw=1, ls="--")
            ax.plot(ks, lower, color="0.35", lw=1, ls=":")
            for offset, n in zip(np.linspace(-0.12, 0.12, len(SHOWN)), SHOWN, strict=True):
                pts = [(r["paths"] + offset, r["verifiers"][n].get(field)) for r in rows]
                pts = [(x, v) for x, v in pts if v is not None]
                if not pts:
                    continue
                ys = [v["estimate"] for _, v in pts]
                err = [[0.0 if v["low"] is None else max(0.0, v["estimate"] - v["low"]) for _, v in pts],
                       [0.0 if v["high"] is None else max(0.0, v["high"] - v["estimate"]) for _, v in pts]]
                colour, marker = styles[n]
                ax.errorbar([x for x, _ in pts], ys, yerr=err, color=colour, marker=marker, ms=4,
                            lw=1.2, capsize=2, label=LABELS[n])
            tag = distinguishing(s["settings"], [g["settings"] for g in summaries])
            if sum(dw[0] == d for dw in panels) > 1:
                tag = ", ".join(t for t in (tag, f"kept width {width}") if t)
            ax.set_title(f"T = {s['settings'].get('temperature')}, L = {d}  "
                         f"({rows[0]['prompts']} prompts, {rows[0]['contexts']} contexts)"
                         + (f"\n{tag}" if tag else ""), fontsize=9)
            ax.set_xticks(ks)
            ax.set_xlabel("K (draft paths)")
            ax.set_ylabel("E[tau + 1]" if field == "value" else "share of the certified upper bound")
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(5, len(handles)), fontsize=8,
                   bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save(fig, out, name)


def distinguishing(settings: dict[str, Any], every: list[dict[str, Any]]) -> str:
    """The settings other than the temperature in which this group differs from another
    group of the same temperature ('' when it is the only one): panel titles."""
    return differing(settings, [g for g in every if g.get("temperature") == settings.get("temperature")])


def differing(settings: dict[str, Any], others: list[dict[str, Any]]) -> str:
    """'name value, ...' of the settings in which `settings` differs from any of `others`."""
    differ = sorted({k for g in others for k in set(g) | set(settings)
                     if g.get(k) != settings.get(k)})
    return ", ".join("prompts not drawn (fixed list)" if k == "prompt_seed" and settings.get(k) is None
                     else f"{k.replace('_', ' ')} {settings.get(k)}" for k in differ)


def interval_method(summaries: list[dict[str, Any]]) -> str:
    """The method named by the intervals used (cluster_mean_interval's own words)."""
    for s in summaries:
        for r in s["rows"]:
            if r["upper"] and r["upper"].get("method"):
                return str(r["upper"]["method"])
    return "cluster_mean_interval"


def caption(summaries: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    counts = "; ".join(
        f"{s['label']}: {s['prompts']} prompts, contexts "
        + ", ".join(f"L = {d}: {c}" for d, c in s["contexts_per_depth"].items()) for s in summaries)
    pairs = sorted({str(s["settings"].get("pair")) for s in summaries})
    return ("Figure. Block efficiency E[tau + 1] (headline.png) and its share of the certified "
            "upper bound (headline_share.png, a lower bound on the share of the optimum) against the "
            "number of draft paths K for GBV, nodeopt, BV-ext-RRS (never below BV) and BV on "
            + ", ".join(pairs) + "; one panel per (T, L). Points: mean over prompts of per-prompt means; "
            "error bars: "
            f"95% intervals over prompts ({interval_method(summaries)}; contexts of one prompt "
            "clustered); grey band: the mean certified bracket [lower, upper] of the K-path optimum "
            "(dashed: upper, dotted: lower; in the share figure [lower / upper, 1]). Records: "
            + counts + ". Made by `" + meta["command"] + "` at commit " + meta["commit"] + ".")


def commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return head + (" (with uncommitted changes in benchmarks/)" if dirty else "")


def run(paths: list[str], out: Path, command: str, figure: bool = True) -> dict[str, Any]:
    """Read, group, summarise and write; returns {"meta", "groups"} (also written as JSON)."""
    records, inputs = read_records(input_files(paths))
    if not records:
        raise SystemExit("records: no usable full-vocabulary realgap record in "
                         + ", ".join(paths) + ("" if not inputs["skipped"] else
                                               f" ({inputs['skipped'][0]})"))
    summaries = [summarize_group(g) for g in group_records(records)]
    for s in summaries:  # groups the short label does not tell apart: name what differs
        twins = [t["settings"] for t in summaries if t["label"] == s["label"]]
        if len(twins) > 1:
            s["label"] += " (" + differing(s["settings"], twins) + ")"
    meta = {"command": command, "commit": commit(), "inputs": inputs, "figure": "headline",
            "width_targets": {str(k): v for k, v in WIDTH_TARGETS.items()},
            "interval": "95% cluster_mean_interval over prompts (experiments/intervals.py)"}
    meta["caption"] = caption(summaries, meta)
    out.mkdir(parents=True, exist_ok=True)
    if figure:
        meta["figures"] = (plot(summaries, out, "headline")
                           + plot(summaries, out, "headline_share", "share_of_upper"))
    result = {"meta": meta, "groups": summaries}
    (out / "headline.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "headline.md").write_text(markdown(summaries, meta))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="realgap JSONL files or folders holding them")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    result = run(args.records, args.out,
                 " ".join(["python benchmarks/realgap_headline.py", *given]))
    print("groups found (never mixed):")
    for s in result["groups"]:
        print(f"  {s['label']}: {s['records']} records, {s['prompts']} prompts, {s['contexts']} contexts")
    for line in result["meta"]["inputs"]["skipped"]:
        print(f"  skipped: {line}")
    at_one = result["meta"]["inputs"]["exact_at_one"]
    print(f"  exact at L = 1: {at_one['replaced']} sampled value(s) of "
          f"{', '.join(at_one['verifiers'])} replaced by their exact equal in the same record")
    print(f"wrote {args.out / 'headline.md'}, headline.json, headline[_share].png/.pdf")


if __name__ == "__main__":
    main()
