"""Real-pair gaps: LP optimum vs verifiers on instances, the runner on tiny models, CLI errors."""

import numpy as np
import pytest
from speclp.cli import app
from speclp.lp.instance import dirichlet_instance
from speclp.proofs.realgap import gap_record, load_jsonl, run_realgap, summarize_realgap
from typer.testing import CliRunner


def tiny_pair():
    """Two tiny random Llama models (vocabulary 40) sharing a config."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      attn_implementation="sdpa")
    torch.manual_seed(1)
    return AutoModelForCausalLM.from_config(cfg).eval(), AutoModelForCausalLM.from_config(cfg).eval()


def test_gap_record_bv_is_optimal_at_one_path_and_no_verifier_beats_the_lp():
    inst = dirichlet_instance(3, 2, seed=3)
    one = gap_record(inst, 1, ["bv", "token"])
    assert one["optimum_certified"]
    assert abs(one["gaps"]["bv"]) < 1e-9  # THEORY section 3: LP* = BE(BV)
    assert one["gaps"]["token"] > 1e-6
    two = gap_record(inst, 2, ["bv", "gbv", "specinfer"])
    assert two["optimum_certified"]
    assert all(g > -1e-9 for g in two["gaps"].values())
    assert two["optimum"] > one["optimum"]


def test_run_realgap_records_and_resumes(tmp_path):
    target, draft = tiny_pair()
    prompts = [{"id": "p0", "tokens": [5, 6, 7]}]
    out = tmp_path / "gap.jsonl"
    first = run_realgap(target, draft, prompts, [2], [2], [1, 2], out, contexts_per_prompt=1,
                        every=2, draft_temperature=1.5)
    assert first["computed"] == 2
    again = run_realgap(target, draft, prompts, [2], [2], [1, 2], out, contexts_per_prompt=1,
                        every=2, draft_temperature=1.5)
    assert again["computed"] == 0 and again["reused"] == 2 and again["file"] == str(out)
    assert again["keys"] == first["keys"] and len(set(first["keys"])) == 2
    records = load_jsonl(out)
    assert {r["paths"] for r in records} == {1, 2}
    for r in records:
        assert r["optimum_certified"] and r["renormalised"]
        assert 0 < r["covered_target_root"] <= 1 + 1e-9
        assert all(g > -1e-7 for g in r["gaps"].values())
        if r["paths"] == 1:
            assert abs(r["gaps"]["bv"]) < 1e-7
    summary = summarize_realgap(records)
    assert [s["paths"] for s in summary] == [1, 2]
    assert np.isclose(summary[0]["mean_gap"]["bv"], 0, atol=1e-7)


@pytest.mark.parametrize("args, field", [
    (["realgap", "--top", "9"], "--top"),
    (["realgap", "--paths", "0"], "--paths"),
    (["trees", "--rules", "draft,bogus"], "--rules"),
    (["trees", "--budgets", "2,1000", "--top", "2", "--depth", "2"], "--budgets"),
])
def test_cli_bad_input_exits_2_naming_the_field(args, field):
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 2
    assert field in result.output


def test_cli_help_lists_the_commands():
    result = CliRunner().invoke(app, ["--help"])
    assert "trees" in result.output and "realgap" in result.output
