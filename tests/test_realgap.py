"""Real-pair gaps on full-vocabulary rows: sampled trees, bounds, the runner, the CLI.

Tiny random Llama models (vocabulary 40) stand in for a real pair: every row is a real
model row, and at L = 1 the exact expectation over all K-tuples of drafts is cheap
(40^K configurations), so the Monte Carlo estimates are checked against exact values.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers_torch import one_thread  # noqa: F401 (an autouse fixture: importing it applies it here)
from speclp.cli import app
from speclp.decode.engine import probability_rows, score_tree
from speclp.decode.tree_rows import next_token_rows, prefill, sample_trees, tree_rows
from speclp.experiments.intervals import (
    betting_interval,
    bootstrap_ratio,
    bootstrap_relative,
    t_interval,
)
from speclp.experiments.realgap import (
    load_jsonl,
    renormalised_gap_record,
    run_realgap,
    run_realgap_renormalised,
    summarize_realgap,
    summarize_renormalised,
)
from speclp.lp.closed_form import one_step_optimum
from speclp.lp.instance import dirichlet_instance, from_rows
from speclp.verifiers.exact import exact_result
from tiny_models import peaked_llama_pair
from typer.testing import CliRunner

VOCAB = 40


@pytest.fixture(scope="module")
def tiny_pair():
    """Two tiny random Llama models sharing a config (peaked rows: lm_head scaled up)."""
    return peaked_llama_pair(VOCAB)


def plain_rows(model, sequence: list[int], temperature: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0]
    return probability_rows(logits, temperature, dtype=torch.float64)


# ---------------------------------------------------------------------------------------
# sampled trees


def test_sampled_tree_rows_equal_plain_forwards(tiny_pair):
    target, draft = tiny_pair
    context = [3, 9, 4, 1]
    trees = sample_trees(target, draft, context, paths=3, depth=3, count=4, temperature=1.0,
                         draft_temperature=1.3, generator=torch.Generator().manual_seed(0))
    tree = trees.tree()
    assert tree.tokens.shape == (4, 3, 3) and tree.target_rows.shape == (4, 3, 4, VOCAB)
    worst = 0.0
    for n in range(4):
        for k in range(3):
            path = tree.tokens[n, k].tolist()
            p = plain_rows(target, context + path)[len(context) - 1:]  # [L+1, V]
            q = plain_rows(draft, context + path[:-1], 1.3)[len(context) - 1:]  # [L, V]
            worst = max(worst, float((tree.target_rows[n, k] - p).abs().max()),
                        float((tree.draft_rows[n, k] - q).abs().max()))
    assert worst < 1e-5  # fp32 models: tree-masked and plain forwards agree to rounding
    assert trees.distinct_nodes <= 1 + 4 * 3 * 3


def test_prefilled_caches_are_rewound_between_tree_passes(tiny_pair):
    """One prefill serves a coarse tree pass and then two sampled-tree passes: rows still
    equal plain forwards (the caches are rewound to the context before each pass)."""
    target, draft = tiny_pair
    context = [2, 8, 8, 1, 5]
    ready = prefill(target, draft, context, 1.0, 1.2)
    rows = tree_rows(target, draft, context, 3, 2, 1.0, 1.2, select="mix", prefilled=ready)
    fresh = tree_rows(target, draft, context, 3, 2, 1.0, 1.2, select="mix", row_dtype=torch.float64)
    assert np.abs(rows.target_edge - fresh.target_edge).max() < 1e-6
    assert (rows.tokens == fresh.tokens).all()
    for seed in (0, 1):
        trees = sample_trees(target, draft, context, 2, 2, 3, 1.0, 1.2,
                             torch.Generator().manual_seed(seed), prefilled=ready)
        tree = trees.tree()
        for n in range(3):
            path = tree.tokens[n, 1].tolist()
            p = plain_rows(target, context + path)[len(context) - 1:]
            q = plain_rows(draft, context + path[:-1], 1.2)[len(context) - 1:]
            assert float((tree.target_rows[n, 1] - p).abs().max()) < 1e-5
            assert float((tree.draft_rows[n, 1] - q).abs().max()) < 1e-5


@pytest.mark.parametrize("verifier, paths", [("bv", 1), ("gbv", 2), ("specinfer", 2),
                                             ("spectr", 2), ("traversal", 2)])
def test_monte_carlo_over_sampled_trees_matches_exact_enumeration(tiny_pair, verifier, paths):
    """At L = 1 the exact E[tau + 1] over all 40^K draft tuples is cheap: the mean of the
    conditional values over 600 sampled trees must be within 4 standard errors of it."""
    target, draft = tiny_pair
    context = [5, 6, 7]
    p_root = plain_rows(target, context)[-1]
    q_root = plain_rows(draft, context)[-1]
    # exact instance of depth 1: root rows + the target's bonus rows at every child
    bonus = torch.stack([plain_rows(target, context + [t])[-1] for t in range(VOCAB)])
    rows_t = torch.cat([p_root[None], bonus]).numpy()
    rows_d = torch.cat([q_root[None], q_root[None].expand(VOCAB, -1)]).numpy()
    inst = from_rows(rows_t, rows_d, 1)
    exact = float(exact_result(inst.model(), verifier, paths=paths).block_efficiency)
    trees = sample_trees(target, draft, context, paths, 1, 600,
                         generator=torch.Generator().manual_seed(1))
    tree = trees.tree()
    values = score_tree([verifier], tree.tokens, tree.target_rows, tree.draft_rows)[verifier]
    interval = t_interval(values.numpy())
    assert abs(interval["mean"] - exact) < 4 * interval["stderr"] + 1e-9
    assert interval["stderr"] < 0.05  # informative


# ---------------------------------------------------------------------------------------
# the runner


def test_run_realgap_records_bounds_and_resumes(tiny_pair, tmp_path):
    target, draft = tiny_pair
    prompts = [{"id": "p0", "tokens": [5, 6, 7]}, {"id": "p1", "tokens": [1, 2]}]
    out = tmp_path / "gap.jsonl"
    kwargs = dict(samples=48, batch=16, width=3, contexts_per_prompt=1, every=2,
                  draft_temperature=1.4, verifiers=["bv", "gbv", "specinfer", "nss"])
    first = run_realgap(target, draft, prompts, [1, 2], [1, 2], out, **kwargs)
    assert first["computed"] == 4 and first["failures"] == []
    again = run_realgap(target, draft, prompts, [1, 2], [1, 2], out, **kwargs)
    assert again["computed"] == 0 and again["reused"] == 4
    records = load_jsonl(out)
    assert len(records) == 4
    for r in records:
        for k in ("1", "2"):
            block = r["by_paths"][k]
            upper = block["upper"]["value"]
            lower = block["lower"]["value"]
            assert lower <= upper + 1e-9  # certified bracket
            for name, iv in block["verifiers"].items():
                exact = r["depth"] == 1 and name in ("bv", "gbv", "nss", "specinfer")  # exact L = 1
                assert iv.get("exact", False) == exact
                assert exact or "not a bound" in iv["estimate"]  # every estimate is labelled
                assert iv["n"] == (0 if exact else 48) and iv["low"] <= iv["mean"] <= iv["high"]
                assert iv["low"] <= upper + 1e-9, (name, iv, upper)
            if r["depth"] == 1 and k == "1":
                # one drafted token X: NSS accepts with p(X), BV with min(1, p(X)/q(X)) >= p(X),
                # tree by tree, so on the same (paired) trees NSS's mean cannot exceed BV's
                nss, bv = block["verifiers"]["nss"]["mean"], block["verifiers"]["bv"]["mean"]
                assert 1.0 < nss <= bv + 1e-12
            assert block["best_estimate"]["verifier"] in block["verifiers"]
            if r["depth"] == 1:  # the optimum itself: lower = upper
                assert lower == upper
            else:
                # the best kept verifier: token-kept / nss-kept or a named lossless one's
                # law on the coarse instance credited up to the first R (section 13.5)
                assert block["lower"]["verifier"] in (
                    "token-kept", "nss-kept", *(f"{n}-kept" for n in kwargs["verifiers"]))
                assert block["lower"]["value"] >= max(
                    block["lower"]["values"][n] for n in ("token-kept", "nss-kept"))
                assert block["upper"]["value"] == min(block["upper"]["candidates"].values())
        if r["depth"] == 1:
            # the L = 1 bound at K = 1 is BV's exact value sum min(p, q) + 1
            assert r["by_paths"]["1"]["upper"]["value"] == pytest.approx(
                1 + r["rows"]["sum_min_pq"], abs=1e-12)
        else:
            assert all(r["by_paths"][k]["upper"]["certified"] for k in ("1", "2"))
            assert 0 <= r["coarsening"]["remainder_target_mean"] <= 1
    # a setting that changes the result is part of the key: a new temperature recomputes
    other = run_realgap(target, draft, prompts[:1], [1], [1], out, **{**kwargs, "temperature": 0.7})
    assert other["computed"] == 1
    summary = summarize_realgap(load_jsonl(out))
    one = [s for s in summary if s["depth"] == 1 and s["paths"] == 1 and s["temperature"] == 1.0]
    assert one and one[0]["contexts"] == 2 and one[0]["prompts"] == 2
    assert one[0]["upper_closed_form"] == 2
    assert one[0]["bracket_width"]["estimate"] == pytest.approx(0.0, abs=1e-12)  # L = 1: exact
    two = [s for s in summary if s["depth"] == 2 and s["paths"] == 2]
    widths = [r["by_paths"]["2"]["upper"]["value"] - r["by_paths"]["2"]["lower"]["value"]
              for r in load_jsonl(out) if r["depth"] == 2]
    assert two[0]["bracket_width"]["estimate"] == pytest.approx(np.mean(widths))
    assert two[0]["width_target"] == 0.02


def test_root_rows_and_closed_form_agree_with_bv_at_one_path(tiny_pair):
    target, draft = tiny_pair
    p, q = next_token_rows(target, draft, [4, 4, 2], 1.0, 1.5)
    assert abs(p.sum() - 1) < 1e-12 and abs(q.sum() - 1) < 1e-12
    values = [float(r.value[0]) for r in one_step_optimum(p, q, [1, 2, 4, 8])]
    assert values[0] == pytest.approx(1 + np.minimum(p, q).sum(), abs=1e-12)  # K = 1: BV
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:], strict=False))
    assert values[-1] <= 2 + 1e-12



def test_khisti_is_refused_where_its_companion_tuples_exceed_the_limit():
    from speclp.cli.realgap import RealgapSpec
    from speclp.cli.validate import BadInput
    from speclp.cli.validate import vocabulary_limits as check_vocabulary_limits
    from speclp.verifiers.multipath import KHISTI_MAX_COMPANIONS

    assert "khisti" not in RealgapSpec().verifiers  # default list on real vocabularies
    check_vocabulary_limits("--verifiers", ["khisti"], [1, 2], KHISTI_MAX_COMPANIONS)  # = limit
    with pytest.raises(BadInput, match="--verifiers: khisti"):
        check_vocabulary_limits("--verifiers", ["bv", "khisti"], [1, 2], KHISTI_MAX_COMPANIONS + 1)
    check_vocabulary_limits("--verifiers", ["bv", "gbv"], [4], 151_936)  # others: any vocabulary

# ---------------------------------------------------------------------------------------
# the labelled renormalised option


def test_renormalised_gap_record_bv_is_optimal_at_one_path():
    inst = dirichlet_instance(3, 2, seed=3)
    one = renormalised_gap_record(inst, 1, ["bv", "token"])
    assert one["optimum_certified"] and abs(one["gaps"]["bv"]) < 1e-9
    assert one["gaps"]["token"] > 1e-6
    two = renormalised_gap_record(inst, 2, ["bv", "gbv", "specinfer"])
    assert all(g > -1e-9 for g in two["gaps"].values()) and two["optimum"] > one["optimum"]


def test_run_realgap_renormalised_is_labelled_and_resumes(tiny_pair, tmp_path):
    target, draft = tiny_pair
    prompts = [{"id": "p0", "tokens": [5, 6, 7]}]
    out = tmp_path / "renorm.jsonl"
    first = run_realgap_renormalised(target, draft, prompts, [2], [2], [1, 2], out,
                                     contexts_per_prompt=1, every=2, draft_temperature=1.5)
    assert first["computed"] == 2
    again = run_realgap_renormalised(target, draft, prompts, [2], [2], [1, 2], out,
                                     contexts_per_prompt=1, every=2, draft_temperature=1.5)
    assert again["computed"] == 0 and again["reused"] == 2
    records = load_jsonl(out)
    assert all(r["renormalised"] and r["mode"] == "renormalised" for r in records)
    assert [s["paths"] for s in summarize_renormalised(records)] == [1, 2]
    assert summarize_realgap(records) == []  # never mixed into the full-vocabulary summary


# ---------------------------------------------------------------------------------------
# intervals


def test_betting_interval_is_valid_where_the_t_interval_collapses():
    """Values 1 (prob. 1%) or 2: in 64 draws the rare value is missed about half the time and
    the t interval is then the point 2, excluding the mean 1.99; the betting interval covers."""
    rng = np.random.default_rng(3)
    cover_betting = cover_t = 0
    for _ in range(400):
        x = np.where(rng.random(64) < 0.01, 1.0, 2.0)
        b, t = betting_interval(x, 1.0, 2.0), t_interval(x)
        cover_betting += b["low"] <= 1.99 <= b["high"]
        cover_t += t["low"] <= 1.99 <= t["high"]
    assert cover_betting >= 380 and cover_t < 300
    same = betting_interval(np.full(64, 2.0), 1.0, 2.0)
    assert same["high"] == 2.0 and 1.85 < same["low"] < 2.0
    wide = betting_interval(rng.uniform(1, 3, 200), 1.0, 3.0)
    assert wide["low"] < 2.0 < wide["high"] and wide["high"] - wide["low"] < 0.5
    with pytest.raises(ValueError, match="outside"):
        betting_interval([0.5, 1.5], 1.0, 2.0)


def test_t_interval_and_bootstrap_cover_known_means():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(200):
        x = rng.normal(2.0, 1.0, size=30)
        iv = t_interval(x)
        hits += iv["low"] <= 2.0 <= iv["high"]
    assert 180 <= hits <= 200  # nominal 95%: 190 expected
    assert t_interval([1.0])["stderr"] == float("inf")
    # a constant ratio has a degenerate interval; a paired relative gain is ratio - 1
    point = bootstrap_ratio([2, 4, 6], [1, 2, 3])
    assert point["estimate"] == point["low"] == point["high"] == 2.0
    gain = bootstrap_relative([1.1, 2.2, 3.3], [1, 2, 3])
    assert gain["estimate"] == pytest.approx(0.1) and gain["low"] == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------
# CLI


@pytest.mark.parametrize("args, field", [
    (["realgap", "--paths", "0"], "--paths"),
    (["realgap", "--samples", "1"], "--samples"),
    (["realgap", "--top", "0"], "--top"),
    (["realgap", "--top", "40", "--depth", "3"], "--top"),
    (["realgap", "--instances", "bogus"], "--instances"),
    (["realgap", "--verifiers", "bv,bogus"], "--verifiers"),
    (["realgap", "--instances", "renormalised", "--top", "9"], "--top"),
    (["trees", "--rules", "draft,bogus"], "--rules"),
    (["trees", "--budgets", "2,1000", "--top", "2", "--depth", "2"], "--budgets"),
])
def test_cli_bad_input_exits_2_naming_the_field(args, field):
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 2, result.output
    assert field in result.output


def test_cli_help_lists_the_commands():
    result = CliRunner().invoke(app, ["--help"])
    assert "trees" in result.output and "realgap" in result.output


def test_distinct_trees_map_back_to_every_sample(tiny_pair):
    target, draft = tiny_pair
    trees = sample_trees(target, draft, [1, 1, 1], 3, 1, 200, 0.5, 0.5,
                         torch.Generator().manual_seed(2))  # peaked rows: many repeats
    for k in (1, 3):
        first, inverse = trees.distinct(k)
        assert len(first) < trees.count
        assert torch.equal(trees.tokens[first][inverse][:, :k], trees.tokens[:, :k])
        full = trees.tree(paths=k)
        once = trees.tree(first, paths=k)
        values = score_tree(["specinfer"], full.tokens, full.target_rows, full.draft_rows)
        dedup = score_tree(["specinfer"], once.tokens, once.target_rows, once.draft_rows)
        assert torch.allclose(values["specinfer"], dedup["specinfer"][inverse], atol=1e-12)


def test_realgap_opens_its_folder_through_the_store(tmp_path):
    """One writer per folder (store.open_records); the keyed records count reuse."""
    from speclp.experiments import store

    out = tmp_path / "gap.jsonl"
    with store.open_records(out, "realgap") as held:
        assert held.done == set()
        with pytest.raises(store.FolderBusy):
            run_realgap(None, None, [{"id": "p", "tokens": [1, 2]}], [1], [1], out)
        held.write({"key": "a", "value": 1})
        assert held.want(["a", "b"]) == ["b"] and held.reused == 1 and held.computed == 1
    again = store.KeyedRecords(out)
    assert again.done == {"a"}
    assert store.read_spec(tmp_path)["kind"] == "realgap"


def test_adaptive_bracket_keeps_the_best_bound_of_every_width(tiny_pair):
    from speclp.experiments.realgap import adaptive_bracket, coarse_upper_bounds, width_schedule

    target, draft = tiny_pair
    context = [4, 8, 15, 16]
    ready = prefill(target, draft, context, 1.0, 1.3)
    args = (target, draft, context, 2, [1, 2], 1.0, 1.3, ready, ["bv", "gbv", "nss"])
    found = adaptive_bracket(*args, [2, 3], None, None)
    assert [e["width"] for e in found["expansion"]] == [2, 3]
    each = [coarse_upper_bounds(target, draft, context, 2, m, [1, 2], 1.0, 1.3, ready,
                                ["bv", "gbv", "nss"]) for m in (2, 3)]
    for k in ("1", "2"):
        assert found["bounds"][k]["value"] == min(e["bounds"][k]["value"] for e in each)
        assert found["lower"][k]["value"] == max(e["lower"][k]["value"] for e in each)
        assert found["lower"][k]["value"] <= found["bounds"][k]["value"]
    # a target already met after the first width stops the expansion there
    assert len(adaptive_bracket(*args, [2, 3], 10.0, None)["expansion"]) == 1
    assert width_schedule(8, 4, [30, 4, 8]) == [4, 8]  # (30 + 1)^4 paths exceed the cap
    assert width_schedule(8, 2) == [8]


def test_summary_never_prints_a_bare_estimate_next_to_the_certified_bound():
    """Issue 28: a sampled value over one prompt has no interval; it is labelled ESTIMATE and
    given no gap, while exact values (L = 1 closed forms) say so."""
    from speclp.cli.realgap import _summary_cells

    gap = {"estimate": 0.07, "low": None, "high": None, "note": "n/a (1 prompt)"}
    one_prompt = {"estimate": 1.539, "low": None, "high": None, "note": "n/a (1 prompt)",
                  "exact": False}
    cells = _summary_cells(one_prompt, gap)
    assert cells[0].startswith("ESTIMATE 1.539") and "no interval" in cells[0]
    assert cells[1] == "n/a (estimate)"
    exact = {**one_prompt, "estimate": 1.609, "exact": True}
    assert _summary_cells(exact, gap)[0].endswith("exact")
    sampled = {"estimate": 2.5, "low": 2.4, "high": 2.6, "exact": False}
    assert _summary_cells(sampled, {"estimate": 0.1, "low": 0.0, "high": 0.2})[0].startswith(
        "ESTIMATE 2.5")


# ---------------------------------------------------------------------------------------
# the command on tiny models: the library's numbers, a resumed run loads no model,
# plain progress lines off a terminal


def realgap_cli(out, *extra):
    import json

    result = CliRunner().invoke(app, [
        "realgap", "--pair", "smollm2-135m", "--prompts", "humaneval:2", "--depth", "1,2",
        "--paths", "1,2", "--top", "3", "--samples", "8", "--batch", "8",
        "--contexts-per-prompt", "1", "--every", "2", "--verifiers", "bv,gbv,nss,specinfer",
        "--out", str(out), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr  # json.loads: stdout is ONE object


@pytest.fixture
def tiny_loads(monkeypatch):
    """cli/trees.load_pair (the loader of realgap and trees) gives tiny models; the names it
    was asked for are listed."""
    from speclp.cli import trees as cli_trees
    from tiny_models import tiny_loaded_pair

    loads = []

    def load_pair(name, *args, **kwargs):
        loads.append(name)
        return tiny_loaded_pair(name)

    monkeypatch.setattr(cli_trees, "load_pair", load_pair)
    return loads


def refuse_loading(monkeypatch):
    """Every model loader raises (a fully resumed run must not call one)."""
    from speclp.cli import trees as cli_trees
    from speclp.decode import models

    def loader(*args, **kwargs):
        raise AssertionError("a model was loaded by a fully resumed run")

    for module in (cli_trees, models):
        monkeypatch.setattr(module, "load_pair", loader)
    monkeypatch.setattr(models, "load_model", loader)


def without_counts(result):
    return {k: v for k, v in result.items() if k not in ("computed", "reused")}


def test_realgap_command_reports_the_librarys_values(tmp_path, tiny_loads):
    """The command's --json summary is summarize_realgap of run_realgap called directly on
    the same models, tokens and settings (a second path through the library)."""
    import json

    from speclp.cli.common import jsonable
    from speclp.experiments.prompts import read_prompts
    from tiny_models import TinyTokenizer, tiny_loaded_pair

    out, log = realgap_cli(tmp_path / "cli")
    assert (out["computed"], out["reused"], out["records"], out["failures"]) == (4, 0, 4, [])
    label = "smollm2-135m (draft: same model at another temperature), draft temperature 1.5"
    assert out["pair"] == label and tiny_loads == ["smollm2-135m"]
    assert "realgap: 2/2 prompts" in log  # stderr is not a terminal here: plain lines
    prompts = read_prompts("humaneval:2")
    for p in prompts:
        p["tokens"] = TinyTokenizer().encode(p["text"])
    model = tiny_loaded_pair("smollm2-135m").target.model
    direct = tmp_path / "direct.jsonl"
    run_realgap(model, model, prompts, [1, 2], [1, 2], direct, samples=8, batch=8, width=3,
                verifiers=["bv", "gbv", "nss", "specinfer"], contexts_per_prompt=1, every=2,
                draft_temperature=1.5, label=label)
    expected = summarize_realgap(load_jsonl(direct))
    assert json.loads(json.dumps(jsonable(expected))) == out["summary"]
    assert [(c["prompt"], c["depth"]) for c in out["contexts"]] == \
        [(r["prompt"], r["depth"]) for r in load_jsonl(direct)]


def test_a_fully_resumed_realgap_run_loads_no_model(tmp_path, tiny_loads, monkeypatch):
    first, _ = realgap_cli(tmp_path)
    subset, _ = realgap_cli(tmp_path, "--prompts", "humaneval:1")  # recorded: not loaded
    assert (subset["computed"], subset["reused"]) == (0, 2) and tiny_loads == ["smollm2-135m"]
    more, _ = realgap_cli(tmp_path, "--prompts", "humaneval:3")  # one prompt missing: loaded
    assert (more["computed"], more["reused"]) == (2, 4) and len(tiny_loads) == 2
    refuse_loading(monkeypatch)
    again, log = realgap_cli(tmp_path)
    assert (again["computed"], again["reused"]) == (0, 4)
    assert without_counts(again) == without_counts(first)
    assert "realgap: 2/2 prompts" in log


def test_a_fully_resumed_renormalised_run_loads_no_model(tmp_path, tiny_loads, monkeypatch):
    args = ("--instances", "renormalised", "--top", "2", "--depth", "1,2", "--paths", "1,2")
    first, _ = realgap_cli(tmp_path, *args)
    assert (first["computed"], first["reused"]) == (8, 0) and len(tiny_loads) == 1  # 2 x 2 x 2
    refuse_loading(monkeypatch)
    again, _ = realgap_cli(tmp_path, *args)
    assert (again["computed"], again["reused"]) == (0, 8)
    assert without_counts(again) == without_counts(first)


def test_plain_progress_lines_at_most_every_ten_seconds_and_at_the_end(capsys):
    from speclp.cli.common import PlainProgress, duration

    now = [100.0]
    lines = PlainProgress("realgap", 12, "prompts", clock=lambda: now[0])
    for step in (4.0, 5.0, 2.0, 30.0, 1.0):  # t = 4, 9, 11, 41, 42 s after the start
        now[0] += step
        lines.advance()
    lines.finish()
    assert capsys.readouterr().err.splitlines() == [
        "realgap: 3/12 prompts, 11 s, ~33 s left",  # 11 s / 3 * 9 left
        "realgap: 4/12 prompts, 41 s, ~82 s left",
        "realgap: 5/12 prompts, 42 s, ~59 s left",  # the end: always
    ]
    assert [duration(s) for s in (41, 89.6, 120, 5399, 5400, 3 * 3600 + 5 * 60)] == \
        ["41 s", "90 s", "2 min", "90 min", "1 h 30 min", "3 h 5 min"]


def test_realgap_keys_are_the_keys_a_run_asks_for(tiny_pair, tmp_path):
    """realgap_keys / renormalised_keys (no model) give the keys run_realgap /
    run_realgap_renormalised ask for, defaults included; a prompt's text, not its tokens,
    names it when it has one."""
    from speclp.experiments.realgap import prompt_digest, realgap_keys, renormalised_keys

    target, draft = tiny_pair
    prompts = [{"id": "a", "text": "x = 1", "tokens": [5, 6, 7]}, {"id": "b", "tokens": [1, 2]}]
    kwargs = dict(samples=4, batch=4, contexts_per_prompt=1, every=2, verifiers=["bv"])
    status = run_realgap(target, draft, prompts, [1], [1, 2], tmp_path / "f.jsonl", **kwargs)
    assert status["keys"] == realgap_keys(prompts, [1], [1, 2], model_dtype="torch.float32", **kwargs)
    assert len(status["keys"]) == 2
    renorm = run_realgap_renormalised(target, draft, prompts, [2], [1], [1], tmp_path / "r.jsonl",
                                      contexts_per_prompt=1, every=2)
    assert renorm["keys"] == renormalised_keys(prompts, [2], [1], [1], 1, pair="", every=2,
                                               temperature=1.0, draft_temperature=None, seed=0,
                                               dtype="torch.float32")
    retokenized = {**prompts[0], "tokens": [9]}
    assert prompt_digest(retokenized) == prompt_digest(prompts[0])
    assert prompt_digest({**prompts[0], "text": "x = 2"}) != prompt_digest(prompts[0])
    assert prompt_digest(prompts[1]) != prompt_digest({"id": "b", "tokens": [1, 3]})
    # a prompt drawn with a seed records the seed, in its record and its key
    seeded = [{**p, "prompt_seed": 11} for p in prompts]
    drawn = run_realgap(target, draft, seeded, [1], [1, 2], tmp_path / "s.jsonl", **kwargs)
    assert drawn["keys"] == realgap_keys(seeded, [1], [1, 2], model_dtype="torch.float32", **kwargs)
    assert not set(drawn["keys"]) & set(status["keys"])
    import json
    recs = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert recs and all(r["prompt_seed"] == 11 for r in recs)


def test_realgap_prompt_seed_refused_where_it_has_no_meaning(tmp_path):
    (tmp_path / "p.txt").write_text("def f():\n")
    for extra, flag in ((["--prompts", f"file:{tmp_path / 'p.txt'}", "--prompt-seed", "3"], "--prompt-seed"),
                        (["--prompts", "humaneval:2", "--prompt-seed", "-1"], "--prompt-seed")):
        result = CliRunner().invoke(app, ["realgap", "--out", str(tmp_path / "o"), *extra])
        assert result.exit_code == 2 and flag in result.output, result.output


def test_the_commands_realgap_bench_and_trees_have_no_function_over_60_lines():
    """Issue 29: flags -> spec -> run -> render, each short (signature and docstring counted)."""
    import ast
    from pathlib import Path

    import speclp

    root = Path(speclp.__file__).parent / "cli"
    long = []
    for name in ("realgap.py", "bench.py", "trees.py", "common.py"):
        for node in ast.walk(ast.parse((root / name).read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{name}:{node.name} ({lines} lines)")
    assert not long, long


def test_float32_rounding_past_l_plus_one_is_clipped_and_a_real_excess_is_still_refused():
    from speclp.experiments.intervals import betting_interval
    from speclp.experiments.realgap import SCORE_ROUNDING, in_range

    slack = SCORE_ROUNDING[torch.float32]
    values = [3.0 + slack / 2, 1.0 - slack / 2, 2.0]  # L = 2: rounding on both ends
    clipped = in_range(values, 2, slack)
    assert clipped.tolist() == [3.0, 1.0, 2.0]
    assert 1.0 <= betting_interval(clipped, 1.0, 3.0)["mean"] <= 3.0
    far = in_range([3.0 + 10 * slack], 2, slack)
    assert far.tolist() == [3.0 + 10 * slack]
    with pytest.raises(ValueError, match="outside"):
        betting_interval(far, 1.0, 3.0)


# ---------------------------------------------------------------------------------------
# exact L = 1 values of the multi-draft verifiers (issue 33: bv_extended_rrs was sampled)

from fractions import Fraction  # noqa: E402
from functools import partial  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from speclp.experiments import realgap as realgap_module  # noqa: E402
from speclp.experiments.realgap import (  # noqa: E402
    exact_one_step,
    extended_bv_one_step,
    nodeopt_one_step,
    specinfer_one_step,
)
from speclp.verifiers import bv_extended as bv_extended_module  # noqa: E402
from speclp.verifiers.bv_extended import extended_bv_structured  # noqa: E402
from speclp.verifiers.exact import block_efficiency_from_emit  # noqa: E402
from speclp.verifiers.law import REGISTRY  # noqa: E402
from speclp.verifiers.nodeopt import nodeopt_law  # noqa: E402

ONE_STEP = ("bv_extended_rrs", "bv_extended", "nodeopt", "specinfer")


def one_step_record(p, q, paths):
    """exact_one_step's values on float64 rows, every verifier of ONE_STEP (and a sampled
    stand-in that must stay as it was)."""
    optima = {str(k): {"value": float(one_step_optimum(p, q, [k])[0].value[0])} for k in paths}
    by_paths = {str(k): {name: {} for name in ONE_STEP} | {"rrsw": {"mean": 0.0}} for k in paths}
    exact_one_step(by_paths, p, q, list(paths), optima)
    return by_paths, optima


@st.composite
def one_step_rows(draw):
    """A rational L = 1 instance: rows of small integers (zeros and ties frequent), V = 2..6."""
    vocab = draw(st.integers(2, 6))
    weights = st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(any)
    rows = []
    for _ in range(2):  # the root row, repeated at the V leaves (not read at L = 1)
        w = draw(weights)
        rows.append(np.array([[Fraction(x, sum(w)) for x in w]] * (1 + vocab), dtype=object))
    return from_rows(rows[0], rows[1], 1, "hypothesis")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=one_step_rows(), paths=st.integers(1, 4))
def test_exact_one_step_equals_the_exact_laws_on_rational_rows(instance, paths):
    """The L = 1 forms against each verifier's exact law in rationals: the enumeration of the
    ordered draft tuples (verifiers.exact, the registered batched law on every tree) where
    V^K <= 64, else the structure-aware law (extended_bv's fresh-start recursion, checked
    against the enumeration in tests/test_bv_extended.py); and bv_extended_rrs = specinfer
    EXACTLY (the derivation in extended_bv_one_step), both <= the optimum."""
    model = instance.model(exact=True)
    p = np.array([float(x) for x in instance.target[0]])
    q = np.array([float(x) for x in instance.draft[0]])
    got, optima = one_step_record(p, q, [paths])
    small = model.vocab_size**paths <= 64
    exact = {name: exact_result(model, name, paths, enumeration="ordered" if small else "auto")
             .block_efficiency for name in ONE_STEP}
    assert exact["bv_extended_rrs"] == exact["specinfer"]  # Fractions: the theorem, exactly
    for fallback, name in (("specinfer", "bv_extended_rrs"), ("optimal", "bv_extended")):
        assert block_efficiency_from_emit(model, extended_bv_structured(model, paths, fallback)) \
            == exact[name]
    bv = 1 + float(np.minimum(p, q).sum())
    for name in ONE_STEP:
        value = got[str(paths)][name]
        assert value["exact"] and value["low"] == value["mean"] == value["high"]
        assert value["mean"] == pytest.approx(float(exact[name]), abs=1e-12), name
        assert bv - 1e-12 <= value["mean"] <= optima[str(paths)]["value"] + 1e-12, name
    assert got[str(paths)]["rrsw"] == {"mean": 0.0}  # no exact form here: left sampled


@pytest.mark.parametrize("vocab, alpha, seed", [(2, 0.5, 0), (4, 0.3, 1), (5, 1.0, 2), (6, 0.2, 3)])
def test_exact_one_step_equals_the_exact_laws_on_float_rows(vocab, alpha, seed):
    inst = dirichlet_instance(vocab, 1, alpha, seed=seed)
    inst.draft[0][0] = 0.0  # a token the draft never proposes
    inst.draft[0] /= inst.draft[0].sum()
    model = inst.model()
    p, q = np.asarray(inst.target[0], dtype=np.float64), np.asarray(inst.draft[0], dtype=np.float64)
    got, optima = one_step_record(p, q, [1, 2, 3, 4])
    for k in (1, 2, 3, 4):
        for name in ONE_STEP:
            exact = float(exact_result(model, name, k, enumeration="ordered").block_efficiency)
            assert got[str(k)][name]["mean"] == pytest.approx(exact, abs=1e-12), (name, k)
            assert got[str(k)][name]["mean"] <= optima[str(k)]["value"] + 1e-12
        assert got[str(k)]["bv_extended_rrs"]["mean"] == specinfer_one_step(p, q, k)


def test_nodeopt_one_step_is_the_registered_pooled_rule_not_the_optimum():
    """Above the registered support (V = 80 > 64) nodeopt pools its tail tokens into ratio
    cells: its exact L = 1 value (enumeration of the 6,400 ordered draft pairs through the
    registered law) is nodeopt_one_step's, and here strictly below the optimum."""
    inst = dirichlet_instance(80, 1, 3.0, seed=0)
    model = inst.model()
    p, q = np.asarray(inst.target[0], dtype=np.float64), np.asarray(inst.draft[0], dtype=np.float64)
    exact = float(exact_result(model, "nodeopt", 2, enumeration="ordered").block_efficiency)
    got, optima = one_step_record(p, q, [2])
    assert got["2"]["nodeopt"]["mean"] == pytest.approx(exact, abs=1e-12)
    assert nodeopt_one_step(p, q, 2) == got["2"]["nodeopt"]["mean"]
    assert optima["2"]["value"] - exact > 1e-3  # pooling costs acceptance on this row (5.9e-3)


def small_support(monkeypatch, support):
    """The pooled layout (8 singleton cells, the rest in ratio buckets) from V > 8 on: the
    registered support of nodeopt and of bv_extended's optimal step lowered to `support`."""
    monkeypatch.setitem(REGISTRY["nodeopt"].options, "support", support)
    monkeypatch.setattr(realgap_module, "EXTENDED_SUPPORT", support)
    monkeypatch.setattr(bv_extended_module, "optimal_step_rule",
                        partial(ORIGINAL_OPTIMAL_STEP, support=support))


ORIGINAL_OPTIMAL_STEP = bv_extended_module.optimal_step_rule
ORIGINAL_RATIO_CELLS = bv_extended_module.ratio_cells


@pytest.mark.parametrize("paths", [2, 3])
def test_pooled_nodeopt_at_one_step_matches_its_law_with_a_small_support(monkeypatch, paths):
    """V = 12 pooled (support 4): nodeopt against the enumeration of every ordered draft tuple
    through its law, strictly below the optimum on this row."""
    small_support(monkeypatch, 4)
    inst = dirichlet_instance(12, 1, 3.0, seed=1)
    model = inst.model()
    p, q = np.asarray(inst.target[0], dtype=np.float64), np.asarray(inst.draft[0], dtype=np.float64)
    got, optima = one_step_record(p, q, [paths])
    nodeopt = exact_result(model, lambda tree: nodeopt_law(tree, support=4), paths,
                           enumeration="ordered").block_efficiency
    assert got[str(paths)]["nodeopt"]["mean"] == pytest.approx(float(nodeopt), abs=1e-12)
    assert optima[str(paths)]["value"] - float(nodeopt) > 1e-3  # pooling matters here


def test_pooled_bv_extended_at_one_step_matches_its_law_with_a_small_support(monkeypatch):
    """bv_extended's optimal step runs on the residual (p - q)_+ / Z with K - 1 = 2 draws;
    with the support lowered to 4 and 1 singleton cell it pools on V = 14: against the
    enumeration of every ordered draft triple through its law (2,744 trees). The pooled value
    differs from the one-cell-per-token one on this row (by 1.2e-3)."""
    inst = dirichlet_instance(14, 1, 3.0, seed=1)
    model = inst.model()
    p, q = np.asarray(inst.target[0], dtype=np.float64), np.asarray(inst.draft[0], dtype=np.float64)
    unpooled = extended_bv_one_step(p, q, 3, "optimal")  # V = 8 <= 64: one cell per token
    small_support(monkeypatch, 4)
    for module in (bv_extended_module, realgap_module):
        monkeypatch.setattr(module, "ratio_cells", partial(ORIGINAL_RATIO_CELLS, singletons=1))
    got, optima = one_step_record(p, q, [3])
    law = exact_result(model, "bv_extended", 3, enumeration="ordered").block_efficiency
    assert got["3"]["bv_extended"]["mean"] == pytest.approx(float(law), abs=1e-12)
    assert extended_bv_one_step(p, q, 3, "optimal") == got["3"]["bv_extended"]["mean"]
    assert unpooled - got["3"]["bv_extended"]["mean"] > 1e-3
    assert got["3"]["bv_extended"]["mean"] <= optima["3"]["value"] + 1e-12


def test_extended_one_step_refuses_an_unknown_fallback():
    with pytest.raises(ValueError, match="fallback"):
        extended_bv_one_step(np.ones(2) / 2, np.ones(2) / 2, 2, "nope")


def _headline_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "realgap_headline.py"
    spec = importlib.util.spec_from_file_location("realgap_headline_q33", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_headline_takes_specinfers_exact_value_for_a_sampled_bv_extended_rrs_at_one_step():
    """Records made before exact_one_step knew bv_extended_rrs hold it sampled at L = 1; the
    headline replaces it (in memory) by the record's exact specinfer value, its equal at L = 1,
    and leaves L >= 2, exact values and records without an exact specinfer as they are."""
    headline = _headline_module()

    def rec(depth, rrs_exact, spec_exact):
        value = {"bv_extended_rrs": {"mean": 1.97, "low": 1.9, "high": 2.0, "n": 32,
                                     "exact": rrs_exact},
                 "specinfer": {"mean": 1.95, "low": 1.95, "high": 1.95, "n": 0, "exact": spec_exact}}
        return {"depth": depth, "by_paths": {"2": {"verifiers": json_copy(value)}}}

    def json_copy(x):
        import json
        return json.loads(json.dumps(x))

    old = rec(1, False, True)
    assert headline.exact_at_one(old) == 1
    got = old["by_paths"]["2"]["verifiers"]["bv_extended_rrs"]
    assert (got["mean"], got["low"], got["high"], got["exact"]) == (1.95, 1.95, 1.95, True)
    assert got["sampled"]["mean"] == 1.97
    for untouched in (rec(2, False, False), rec(1, True, True), rec(1, False, False)):
        before = json_copy(untouched)
        assert headline.exact_at_one(untouched) == 0 and untouched == before
