"""benchmarks/realgap_headline.py (issue 33 part 4) on synthetic realgap records written in the
real format from known numbers: table values, shares and paired K -> K + 1 differences equal
hand computations (Fractions), settings groups are never mixed, a record lacking a verifier
is reported, bad records and paths are reported, not crashed on."""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
from speclp.experiments.intervals import cluster_mean_interval
from speclp.experiments.store import record_key

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("realgap_headline",
                                               ROOT / "benchmarks" / "realgap_headline.py")
headline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(headline)

NAMES = ("bv", "gbv", "nodeopt", "bv_extended_rrs")


def record(prompt: str, context: int, depth: int, by_k: dict[int, tuple], *, temperature=0.6,
           samples=32, prompt_seed=None, bounds_version=4, every=8, drop: tuple = (), exact=None
           ) -> dict:
    """A realgap record in the format of experiments/realgap.py (run_realgap + context_record):
    by_k = {K: (upper, lower, {verifier: mean})}; `drop`: (K, verifier) pairs left out."""
    settings = {"mode": "full-vocabulary", "pair": "toy (t <- d)", "every": every,
                "temperature": temperature, "draft_temperature": None, "seed": 0,
                "paths": sorted(by_k), "samples": samples, "batch": 32, "verifiers": sorted(NAMES),
                "score_dtype": "torch.float32", "model_dtype": "torch.float32",
                "bounds_version": bounds_version, "prompt": prompt, "prompt_digest": "0" * 16,
                **({} if prompt_seed is None else {"prompt_seed": prompt_seed}),
                "context": context, "depth": depth, "width": 8 if depth > 1 else None}
    exact = depth == 1 if exact is None else exact
    by_paths = {}
    for k, (upper, lower, values) in by_k.items():
        verifiers = {n: {"mean": float(v), "low": float(v) - 0.1, "high": float(v) + 0.1,
                         "n": 0 if exact else samples, "exact": exact, "method": "synthetic"}
                     for n, v in values.items() if (k, n) not in drop}
        best = max(verifiers, key=lambda n: verifiers[n]["mean"])
        by_paths[str(k)] = {
            "upper": {"value": float(upper), "certified": depth > 1, "method": "coarse LP"},
            "lower": {"value": float(lower), "verifier": "nodeopt-kept", "certified": True},
            "best_estimate": {"verifier": best, **verifiers[best]}, "verifiers": verifiers,
            "gaps": {n: {"mean": float(upper) - v["mean"]} for n, v in verifiers.items()}}
    return {"key": record_key(settings), **settings, "context_tokens": 100,
            "recorded_at": "2026-12-07T08:00:00", "by_paths": by_paths, "values": {},
            "failures": [], "seconds": 1.0}


def same(u, lo, gbv, nodeopt, bvx, bv):
    return (F(u), F(lo), {"gbv": F(gbv), "nodeopt": F(nodeopt), "bv_extended_rrs": F(bvx),
                          "bv": F(bv)})


# L = 2, K = 1, 2; prompts A (2 contexts), B, C (1 context each); every number dyadic.
CONTEXTS = {
    ("A", 0): {1: same("5/2", "9/4", "9/4", "9/4", "9/4", "9/4"),
               2: same("11/4", "5/2", "17/8", "5/2", "19/8", "9/4")},
    ("A", 1): {1: same(2, 2, 2, 2, 2, 2),
               2: same("5/2", "9/4", "15/8", "9/4", 2, 2)},
    ("B", 0): {1: same("9/4", "17/8", 2, 2, 2, 2),
               2: same("5/2", "5/2", "7/4", "5/2", "15/8", 2)},
    ("C", 0): {1: same(3, "11/4", "5/2", "5/2", "5/2", "5/2"),
               2: same(3, 3, "9/4", "23/8", "11/4", "5/2")},
}


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def base_records(**kw) -> list[dict]:
    return [record(p, c, 2, by_k, **kw) for (p, c), by_k in CONTEXTS.items()]


def per_prompt(values: dict[tuple[str, int], F]) -> tuple[list[float], list[int]]:
    """Hand clustering: per-prompt sums and context counts (prompts sorted)."""
    prompts = sorted({p for p, _ in values})
    return ([float(sum(v for (p, _), v in values.items() if p == q)) for q in prompts],
            [sum(1 for (p, _) in values if p == q) for q in prompts])


def hand_mean(values: dict[tuple[str, int], F]) -> F:
    """Mean over prompts of the per-prompt means, exactly."""
    prompts = sorted({p for p, _ in values})
    means = [sum((v for (p, _), v in values.items() if p == q), F(0))
             / sum(1 for (p, _) in values if p == q) for q in prompts]
    return sum(means, F(0)) / len(means)


def assert_interval(got: dict, values: dict[tuple[str, int], F]) -> None:
    """got is the interval of cluster_mean_interval on the hand per-prompt sums and counts,
    and its estimate the exact hand mean."""
    sums, counts = per_prompt(values)
    want = cluster_mean_interval(np.array(sums), np.array(counts))
    assert got["estimate"] == pytest.approx(float(hand_mean(values)), abs=1e-12)
    assert got["clusters"] == want["clusters"] == len(counts)
    for side in ("low", "high"):
        assert got[side] == pytest.approx(want[side], abs=1e-12)


def summarize(tmp_path: Path, records: list[dict], tail: str = "") -> dict:
    write(tmp_path / "rec" / "toy.jsonl", records, tail)
    return headline.run([str(tmp_path / "rec")], tmp_path / "out", "test", figure=False)


def row_of(group: dict, depth: int, k: int) -> dict:
    (row,) = [r for r in group["rows"] if r["depth"] == depth and r["paths"] == k]
    return row


def test_table_values_and_shares_equal_hand_computations(tmp_path):
    result = summarize(tmp_path, base_records())
    (group,) = result["groups"]
    assert (group["records"], group["prompts"], group["contexts"]) == (4, 3, 4)
    for k in (1, 2):
        row = row_of(group, 2, k)
        assert (row["contexts"], row["prompts"]) == (4, 3)
        up = {c: v[k][0] for c, v in CONTEXTS.items()}
        lo = {c: v[k][1] for c, v in CONTEXTS.items()}
        assert_interval(row["upper"], up)
        assert_interval(row["lower"], lo)
        widths = [up[c] - lo[c] for c in CONTEXTS]
        w = row["bracket_width"]
        assert w["mean"] == pytest.approx(float(sum(widths, F(0)) / 4))
        assert w["max"] == pytest.approx(float(max(widths)))
        for name in NAMES:
            val = {c: v[k][2][name] for c, v in CONTEXTS.items()}
            got = row["verifiers"][name]
            assert got["missing"] == 0 and got["contexts"] == 4
            assert_interval(got["value"], val)
            assert_interval(got["share_of_upper"], {c: val[c] / up[c] for c in CONTEXTS})
            assert_interval(got["share_of_lower"], {c: val[c] / lo[c] for c in CONTEXTS})
    # spelled out for K = 2, GBV: shares 17/22, 3/4 (A), 7/10 (B), 3/4 (C)
    gbv = row_of(group, 2, 2)["verifiers"]["gbv"]["share_of_upper"]
    assert gbv["estimate"] == pytest.approx(float(((F(17, 22) + F(3, 4)) / 2 + F(7, 10) + F(3, 4)) / 3))
    # widths at K = 1: 1/4, 0, 1/8, 1/4 -> mean 5/32 against L = 2's target 0.02: missed
    w = row_of(group, 2, 1)["bracket_width"]
    assert (w["mean"], w["max"], w["target"], w["status"]) == (5 / 32, 0.25, 0.02, "missed")
    assert w["missed_by"] == pytest.approx(5 / 32 - 0.02)
    md = (tmp_path / "out" / "headline.md").read_text()
    assert f"missed by {5 / 32 - 0.02:.4f}" in md
    assert "LOWER bound on its share of the optimum" in md


def test_paired_differences_equal_hand_computations(tmp_path):
    (group,) = summarize(tmp_path, base_records())["groups"]
    (step,) = group["steps"]
    assert (step["depth"], step["from"], step["to"]) == (2, 1, 2)
    for name in headline.STEPPED:
        diffs = {c: v[2][2][name] - v[1][2][name] for c, v in CONTEXTS.items()}
        got = step["verifiers"][name]
        assert_interval(got["difference"], diffs)
        assert got["verdict"] == headline.verdict(got["difference"])
        losses = [-d for d in diffs.values() if d < 0]
        assert got["losing_contexts"] == len(losses)
        assert got["largest_loss"] == pytest.approx(float(max(losses, default=0)))
        assert got["exact"] is False  # sampled (L = 2) values
    # GBV loses in every context (-1/8, -1/8, -1/4, -1/4): mean over prompts -5/24
    gbv = step["verifiers"]["gbv"]
    assert gbv["difference"]["estimate"] == pytest.approx(-5 / 24)
    assert (gbv["losing_contexts"], gbv["largest_loss"]) == (4, 0.25)
    assert step["verifiers"]["nodeopt"]["losing_contexts"] == 0
    assert step["verifiers"]["bv_extended_rrs"]["losing_contexts"] == 1  # B: 2 -> 15/8
    (losers,) = group["losing_at_some_step"]
    worst = [{"prompt": p, "context": c, "from": 1, "to": 2, "loss": loss, "exact": False}
             for p, c, loss in (("B", 0, 0.25), ("C", 0, 0.25), ("A", 0, 0.125), ("A", 1, 0.125))]
    assert losers["verifiers"]["gbv"] == {"contexts": 4, "losing": 4, "material": 4,
                                          "largest": 0.25, "exact": False, "worst": worst}
    assert losers["verifiers"]["nodeopt"]["losing"] == 0
    assert losers["verifiers"]["bv_extended_rrs"]["losing"] == 1
    md = (tmp_path / "out" / "headline.md").read_text()
    assert "4 of 4 contexts lose more than 1e-09 at some step, 4 more than 0.001" in md


def test_verdicts_read_the_interval():
    iv = {"estimate": -0.2, "low": -0.3, "high": -0.1}
    assert headline.verdict(iv) == "negative"
    assert headline.verdict({"estimate": 0.2, "low": 0.1, "high": 0.3}) == "positive"
    assert headline.verdict({"estimate": 0.1, "low": -0.1, "high": 0.3}) == "undecided"
    assert headline.verdict({"estimate": 0.0, "low": 0.0, "high": 0.0}) == "zero"
    assert headline.verdict({"estimate": 0.1, "low": None, "high": None}) == "n/a"  # one prompt
    assert headline.verdict(None) == "n/a"
    # an interval narrower than the digits shown says so (no scientific notation)
    assert headline._iv({"estimate": 1.0, "low": 0.99999, "high": 1.00001}, 4) == "1.0000 [width < 1e-4]"


def test_exact_L1_records_meet_or_miss_the_exact_target_and_count_losses_as_facts(tmp_path):
    ks = {1: same("7/4", "7/4", "7/4", "7/4", "7/4", "7/4"),
          2: same("15/8", "15/8", "13/8", "15/8", "7/4", "7/4")}
    recs = [record(p, 0, 1, ks) for p in ("A", "B")]
    (group,) = summarize(tmp_path, recs)["groups"]
    assert row_of(group, 1, 2)["bracket_width"]["status"] == "met"
    assert row_of(group, 1, 2)["verifiers"]["gbv"]["exact"] is True
    gbv = group["steps"][0]["verifiers"]["gbv"]
    assert gbv["exact"] is True and gbv["losing_contexts"] == 2 and gbv["largest_loss"] == 0.125
    assert group["losing_at_some_step"][0]["verifiers"]["gbv"] == {
        "contexts": 2, "losing": 2, "material": 2, "largest": 0.125, "exact": True,
        "worst": [{"prompt": p, "context": 0, "from": 1, "to": 2, "loss": 0.125, "exact": True}
                  for p in ("A", "B")]}
    md = (tmp_path / "out" / "headline.md").read_text()
    assert "the largest exact losses: A context 0, K 1 -> 2: -0.1250; B context 0" in md
    # equal on both prompts: the interval has no spread, and the verdict reads it
    assert gbv["difference"]["estimate"] == -0.125
    # one L = 1 context whose bounds differ: the exact target is missed by its width
    off = record("C", 0, 1, {1: same(2, "15/8", 2, 2, 2, 2), 2: ks[2]})
    (group,) = summarize(tmp_path, [*recs, off])["groups"]
    w = row_of(group, 1, 1)["bracket_width"]
    assert (w["status"], w["missed_by"]) == ("missed", 0.125)


def test_mixed_settings_are_separated(tmp_path, capsys):
    variants = [{}, {"temperature": 1.0}, {"samples": 64}, {"prompt_seed": 0},
                {"bounds_version": 3}, {"every": 16}]
    recs = []
    for i, kw in enumerate(variants):
        # each variant's upper bounds shifted by i/16, so a mixed mean would show
        shifted = {c: {k: (u + F(i, 16), lo, vals) for k, (u, lo, vals) in by_k.items()}
                   for c, by_k in CONTEXTS.items()}
        recs += [record(p, c, 2, by_k, **kw) for (p, c), by_k in shifted.items()]
    write(tmp_path / "rec" / "toy.jsonl", recs)
    headline.main([str(tmp_path / "rec"), "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "headline.json").read_text())
    groups = result["groups"]
    assert len(groups) == len(variants)
    assert all(g["records"] == 4 and g["contexts"] == 4 for g in groups)
    base = float(hand_mean({c: v[1][0] for c, v in CONTEXTS.items()}))
    shifts = set()
    for g in groups:
        shifts.add(round((row_of(g, 2, 1)["upper"]["estimate"] - base) * 16, 9))
    assert shifts == {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}  # each group holds one variant only
    labels = {g["label"] for g in groups}
    assert len(labels) == len(variants)  # the titles tell the groups apart
    assert "groups found (never mixed):" in printed
    assert sum(line.startswith("  toy (t <- d)") for line in printed.splitlines()) == len(variants)
    assert any("T = 1.0" in label for label in labels)
    assert any("prompt seed 0" in label for label in labels)
    assert any("every 16" in label for label in labels)  # not in the short label: named
    for name in ("headline.md", "headline.json", "headline.png", "headline.pdf",
                 "headline_share.png", "headline_share.pdf"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    md = (tmp_path / "out" / "headline.md").read_text()
    assert "Figure. " in md and "prompt seed 0" in md and "3 prompts" in md


def test_a_record_lacking_a_verifier_is_reported_not_crashed_on(tmp_path):
    recs = base_records()
    recs[2] = record("B", 0, 2, CONTEXTS[("B", 0)], drop=((2, "nodeopt"),))
    (group,) = summarize(tmp_path, recs)["groups"]
    got = row_of(group, 2, 2)["verifiers"]["nodeopt"]
    assert (got["contexts"], got["missing"]) == (3, 1)
    assert_interval(got["value"], {c: v[2][2]["nodeopt"] for c, v in CONTEXTS.items()
                                   if c != ("B", 0)})
    assert row_of(group, 2, 1)["verifiers"]["nodeopt"]["missing"] == 0
    assert group["missing_verifiers"] == {"nodeopt (L = 2, K = 2)": 1}
    step = group["steps"][0]["verifiers"]["nodeopt"]
    assert (step["contexts"], step["missing"]) == (3, 1)
    md = (tmp_path / "out" / "headline.md").read_text()
    assert "(1 of 4 contexts lack it)" in md and "nodeopt (L = 2, K = 2): 1 context(s)" in md


def test_unusable_lines_are_reported_and_skipped(tmp_path):
    recs = base_records()
    renormalised = {**recs[0], "mode": "renormalised", "key": "other"}
    no_rows = {k: v for k, v in recs[1].items() if k != "by_paths"}
    no_rows["key"] = "no rows"
    zero = record("D", 0, 2, {1: same(0, 0, 1, 1, 1, 1)})
    result = summarize(tmp_path, [*recs, recs[0], renormalised, no_rows, zero],
                       tail='{"key": "torn')
    (group,) = result["groups"]
    assert group["records"] == 4  # the duplicate, the renormalised, the row-less, zero: skipped
    skipped = " | ".join(result["meta"]["inputs"]["skipped"])
    assert "repeats the key" in skipped and "renormalised" in skipped
    assert "no field 'by_paths'" in skipped and "1 unreadable line(s)" in skipped
    assert "a bound <= 0" in skipped


def test_bad_paths_give_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match="no such file or folder: .*nowhere"):
        headline.run([str(tmp_path / "nowhere")], tmp_path / "out", "test", figure=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no .*jsonl file in the folder"):
        headline.run([str(tmp_path / "empty")], tmp_path / "out", "test", figure=False)
    write(tmp_path / "bad" / "x.jsonl", [{"mode": "renormalised"}])
    with pytest.raises(SystemExit, match="no usable full-vocabulary realgap record"):
        headline.run([str(tmp_path / "bad")], tmp_path / "out", "test", figure=False)
