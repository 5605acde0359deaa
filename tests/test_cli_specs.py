"""Flags -> spec (issue 29, DESIGN "each command builds a frozen spec dataclass (its
construction is the only validation)"): BenchSpec, TreesSpec, RealgapSpec and the audit specs
refuse a wrong field with speclp.inputs.BadArgument naming the FIELD; the CLI maps it to its
flag in one place (cli.common.flag_of) and prints the same line a check in the CLI printed
(exit 2, `error: --flag: reason`). realgap's adaptive-bracket settings (--top as a cap
schedule, --width-target, --context-budget) reach experiments.realgap.run_realgap, and the
default flags keep the record keys of earlier runs."""

from __future__ import annotations

import dataclasses
import json

import pytest
from speclp.cli import app
from speclp.cli import realgap as cli_realgap
from speclp.cli.common import flag_of, flag_reason
from speclp.cli.realgap import MODE_RENORMALISED, RealgapSpec
from speclp.experiments import realgap as realgap_library
from speclp.experiments import realgap_spec
from speclp.experiments.bench import BenchSpec
from speclp.experiments.realgap import realgap_keys
from speclp.experiments.trees import TreesSpec
from speclp.inputs import BadArgument
from speclp.proofs.audit import SamplerAuditSpec, VerifierAuditSpec
from typer.testing import CliRunner

NO_MODEL = "nosuchmodel"  # never a loadable model: a refusal for --pair means the flag was accepted


def test_flag_of_maps_fields_pairs_of_fields_and_references_in_a_reason():
    assert flag_of("depths") == "--depth" and flag_of("temperatures") == "--temperature"
    assert flag_of("widths") == "--top" and flag_of("context_budget") == "--context-budget"
    assert flag_of("top/depth") == "--top/--depth" and flag_of("depths/paths") == "--depth/--paths"
    assert flag_of("--vocab/--depth") == "--vocab/--depth"  # already flags: as they are
    assert flag_of("a/b.json") == "a/b.json"  # a path
    assert (flag_reason("raise `top` or `depths`; `runs` at most")
            == "raise --top or --depth; --max-runs at most")
    assert flag_reason("no `2x` here, nor 'top'") == "no `2x` here, nor 'top'"


@pytest.mark.parametrize("spec, kwargs, field", [
    (BenchSpec, {"depths": (0,)}, "depths"),
    (BenchSpec, {"paths": (65,)}, "paths"),
    (BenchSpec, {"temperatures": ()}, "temperatures"),
    (BenchSpec, {"temperatures": (float("nan"),)}, "temperatures"),
    (BenchSpec, {"top_p": 0.0}, "top_p"),
    (BenchSpec, {"batch": True}, "batch"),
    (BenchSpec, {"score_dtype": "fp16"}, "score_dtype"),
    (BenchSpec, {"draft_temperature": -1.0}, "draft_temperature"),
    (BenchSpec, {"prompt_seed": -1}, "prompt_seed"),
    (BenchSpec, {"dtype": "int8"}, "dtype"),
    (BenchSpec, {"device": "tpu"}, "device"),
    (BenchSpec, {"verifiers": ()}, "verifiers"),
    (BenchSpec, {"verifiers": ("bv", "gbv_broken")}, "verifiers"),
    (BenchSpec, {"drive": "nope"}, "drive"),
    (TreesSpec, {"every": 0}, "every"),
    (TreesSpec, {"engine_tokens": 0}, "engine_tokens"),
    (TreesSpec, {"budgets": []}, "budgets"),
    (TreesSpec, {"budgets": [341]}, "budgets"),  # M = L = 4: 4 + 16 + 64 + 256 = 340 nodes
    (TreesSpec, {"top": 1}, "top"),
    (TreesSpec, {"top": 8, "depth": 4}, "top/depth"),  # 8^4 = 4096 > 1024 at the deepest level
    (TreesSpec, {"rules": ["oracle"]}, "rules"),
    (TreesSpec, {"engine_budgets": [12]}, "engine_budgets"),
    (TreesSpec, {"engine_budgets": [8], "engine_verifiers": []}, "engine_verifiers"),
    (TreesSpec, {"skip_trees": True}, "skip_trees"),
    (RealgapSpec, {"instances": "bogus"}, "instances"),
    (RealgapSpec, {"depths": (17,)}, "depths"),
    (RealgapSpec, {"widths": (0,)}, "widths"),  # a cap of 1 is valid (full-vocabulary)
    (RealgapSpec, {"widths": (200,), "depths": (1, 3)}, "widths"),  # 201^3 paths > MAX_COARSE_PATHS
    (RealgapSpec, {"samples": 1}, "samples"),
    (RealgapSpec, {"verifiers": ("gbv_broken",)}, "verifiers"),
    (RealgapSpec, {"width_target": -0.1}, "width_target"),
    (RealgapSpec, {"context_budget": 0.0}, "context_budget"),
    (RealgapSpec, {"context_budget": float("inf")}, "context_budget"),
    (RealgapSpec, {"instances": MODE_RENORMALISED, "widths": (6,)}, "widths"),
    (RealgapSpec, {"instances": MODE_RENORMALISED, "widths": (3,)}, "depths/paths"),  # K = 4 > 3
    (RealgapSpec, {"instances": MODE_RENORMALISED, "widths": (3,), "paths": (1,),
                   "width_target": 0.1}, "width_target"),
    (VerifierAuditSpec, {"verifier": "bv", "vocab": 9, "depth": 3, "paths": 9}, "paths"),
    (VerifierAuditSpec, {"verifier": "bv", "vocab": 1000, "depth": 9}, "vocab/depth"),
    (SamplerAuditSpec, {"sampler": "m:f", "trials": 10**7}, "trials"),
    (SamplerAuditSpec, {"sampler": "nofile.py:f"}, "sampler"),
])
def test_a_spec_refuses_a_wrong_field_naming_it(spec, kwargs, field):
    with pytest.raises(BadArgument) as caught:
        spec(**kwargs)
    assert caught.value.field == field


def test_the_specs_defaults_are_valid_and_hold_tuples():
    bench = BenchSpec(paths=[2, 4], depths=[3], temperatures=[0.5])  # lists are kept as tuples
    assert (bench.paths, bench.depths, bench.temperatures) == ((2, 4), (3,), (0.5,))
    realgap = RealgapSpec(widths=[4, 8])
    assert RealgapSpec is realgap_spec.RealgapSpec  # the library's class (the CLI imports it)
    assert RealgapSpec(widths=(1,)).widths == (1,)  # full-vocabulary: a cap of 1 token per node
    assert realgap.widths == (4, 8) and "khisti" not in realgap.verifiers and "bv" in realgap.verifiers
    assert RealgapSpec(instances=MODE_RENORMALISED, widths=(3,), paths=(1,)).verifiers == ()
    assert TreesSpec().as_dict()["engine_tokens"] is None  # the folder's spec is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        realgap.samples = 3  # type: ignore[misc]


def _refusal(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("args, line", [
    (["bench", "--depth", "0"], "error: --depth: must be >= 1, got 0"),
    (["bench", "--temperature", "1,-2"], "error: --temperature: must be >= 0, got -2"),
    (["bench", "--top-p", "0"], "error: --top-p: must be > 0, got 0"),
    (["bench", "--score-dtype", "fp16"], "error: --score-dtype: must be one of fp32, fp64, got 'fp16'"),
    (["bench", "--prompt-seed", "-1"], "error: --prompt-seed: must be >= 0, got -1"),
    (["bench", "--verifiers", " , "], "error: --verifiers: expected at least one verifier"),
    (["trees", "--top", "9", "--depth", "9"],
     "error: --top/--depth: the M=9, L=9 candidate tree has 435,848,049 nodes (limits 2,000 nodes, "
     "1,024 at the deepest level); use a smaller --top or --depth"),  # (9^10 - 9) / 8 nodes
    (["trees", "--budgets", "2,341"],
     "error: --budgets: 341 exceeds the 340 nodes of the M=4, L=4 candidate tree; raise --top or --depth"),
    (["trees", "--skip-trees"],
     "error: --skip-trees: needs --engine-budgets (otherwise nothing is computed)"),
    (["trees", "--engine-budgets", "12"],
     "error: --engine-budgets: 12 has no K x L shape; known: 8, 16, 32, 64"),
    (["realgap", "--top", "200", "--depth", "1,3"],
     "error: --top: the coarsened LP at M = 200, L = 3 has 8,120,601 paths (limit 40,000); "
     "lower --top or --depth"),  # 201^3
    (["realgap", "--contexts-per-prompt", "0"], "error: --contexts-per-prompt: must be >= 1, got 0"),
    (["realgap", "--instances", "renormalised", "--top", "3"],
     "error: --depth/--paths: supported sizes are M <= 5, L <= 3, K <= 3 (LP size)"),
    (["realgap", "--width-target", "nan"], "error: --width-target: must be a finite number, got nan"),
    (["realgap", "--width-target", "-1"], "error: --width-target: must be >= 0, got -1"),
    (["realgap", "--context-budget", "0"], "error: --context-budget: must be > 0, got 0"),
    (["realgap", "--top", "8,0"], "error: --top: must be >= 1, got 0"),
    (["realgap", "--instances", "renormalised", "--top", "1"], "error: --top: must be >= 2, got 1"),
    (["realgap", "--instances", "renormalised", "--top", "3", "--paths", "1", "--context-budget", "5"],
     "error: --context-budget: applies to --instances full-vocabulary only (the bracket expansion); "
     "drop it"),
    (["audit", "--sampler", "m:f", "--ties", "--family", "tiny"],
     "error: --ties: means --family ties; it contradicts --family tiny"),
    (["audit", "--sampler", "m:f", "--search", "2"], "error: --search: must be at least --trials (6), got 2"),
    (["audit", "--sampler", "m:f", "--alpha", "1"], "error: --alpha: must be < 1, got 1"),
    (["audit", "--verifier", "bv", "--trials", "1000001"],
     "error: --trials: must be <= 1,000,000, got 1000001"),
])
def test_the_cli_prints_the_specs_refusal_as_its_flag(args, line, tmp_path):
    extra = ["--out", str(tmp_path / "out"), "--pair", NO_MODEL] if args[0] != "audit" else \
        ["--save-dir", str(tmp_path / "saved")]
    assert _refusal(args + extra) == line


def test_a_json_refusal_names_the_flag_as_its_field(tmp_path):
    result = CliRunner().invoke(app, ["realgap", "--pair", NO_MODEL, "--out", str(tmp_path), "--width-target",
                                      "-1", "--json"])
    assert result.exit_code == 2
    record = json.loads(result.stdout)
    assert record["field"] == "--width-target" and record["error"].startswith("--width-target: ")


class Captured(Exception):
    """Raised by the stand-in of run_realgap once it has seen its arguments."""


@pytest.fixture
def captured_run(tmp_path, monkeypatch):
    """`speclp realgap ARGS` up to run_realgap (replaced: its keyword arguments are kept, then
    Captured stops the command; nothing is loaded)."""
    seen: dict[str, object] = {}
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def f():\ndef g():\n")

    def fake_run(target, draft, prompt_list, depths, paths, out_file, **kwargs):
        seen.update(kwargs, depths=depths, paths=paths, prompts=prompt_list)
        raise Captured

    monkeypatch.setattr(realgap_library, "run_realgap", fake_run)  # realgap_full calls it
    monkeypatch.setattr(cli_realgap, "check_model_pair", lambda name: [name])
    monkeypatch.setattr(realgap_library, "recorded", lambda out_file, keys: True)  # nothing is loaded

    def invoke(*args: str) -> dict[str, object]:
        seen.clear()
        result = CliRunner().invoke(app, ["realgap", "--pair", NO_MODEL, "--prompts", f"file:{prompts}",
                                          "--out", str(tmp_path / "out"), *args])
        assert result.exit_code == 3 and "Captured" in result.stderr, result.output  # stopped by the stand-in
        return dict(seen)

    return invoke


def _keys(seen: dict[str, object], drop: tuple[str, ...] = ()) -> list[str]:
    kwargs = {k: v for k, v in seen.items()
              if k not in ("depths", "paths", "prompts", "progress", "eos", *drop)}
    return realgap_keys(seen["prompts"], seen["depths"], seen["paths"], **kwargs)


def test_the_adaptive_bracket_flags_reach_run_realgap(captured_run):
    seen = captured_run("--top", "4,8,16", "--width-target", "0.05", "--context-budget", "30",
                        "--depth", "2")
    assert (seen["width"], seen["widths"]) == (4, [4, 8, 16])
    assert (seen["width_target"], seen["time_budget"]) == (0.05, 30.0)
    keys = _keys(seen)
    assert keys != _keys(seen, drop=("widths", "width_target", "time_budget"))  # the settings are keyed


def test_the_default_flags_keep_the_record_keys_of_earlier_runs(captured_run):
    seen = captured_run()
    assert "widths" not in seen and seen["width"] == 8  # one M: the fixed width, as before
    assert seen["width_target"] is None and seen["time_budget"] is None
    # the keys run_realgap is asked for are the keys of a run without the new arguments
    assert _keys(seen) == _keys(seen, drop=("widths", "width_target", "time_budget"))
    one = captured_run("--top", "6")
    assert "widths" not in one and one["width"] == 6


def _bench_record(prompt: str, steps: int, grid: dict[str, dict[str, float]], accepted: float) -> dict:
    config = {"pair": "p", "drive": "bv", "paths": 2, "depth": 2, "temperature": 1.0, "top_p": 1.0,
              "draft_temperature": None, "max_new_tokens": 8, "dtype": "float32", "device": "cpu",
              "seed": 0, "batch": 2, "scored": ["bv", "gbv"], "score_dtype": "fp32", "score_grid": True}
    metrics = {"decode_s": 2.0, "draft_s": 0.5, "target_s": 1.0, "verifier_s": 0.25, "wall_s": 4.0}
    return {**config, "prompt_id": prompt, "row_steps": steps, "scores": grid["2,2"], "grid": grid,
            "accepted_plus_one": accepted, "generated_tokens": 8, "batch_id": "b0", "batch_metrics": metrics}


def test_a_bench_cell_is_inspectable_and_its_json_is_the_summary_row():
    from speclp.experiments.bench import BenchCell, bench_cells

    records = [_bench_record("a", 4, {"1,1": {"bv": 6.0, "gbv": 6.0}, "2,2": {"bv": 8.0, "gbv": 10.0}}, 9.0),
               _bench_record("b", 2, {"1,1": {"bv": 3.0, "gbv": 3.0}, "2,2": {"bv": 5.0, "gbv": 5.0}}, 4.0)]
    cells = bench_cells(records)
    assert all(isinstance(c, BenchCell) for c in cells)
    assert [(c.paths, c.depth, c.tree_paths, c.tree_depth) for c in cells] == [(1, 1, 2, 2), (2, 2, 2, 2)]
    small, own = cells
    # per-prompt means per step: bv (8/4, 5/2) = (2, 2.5), gbv (10/4, 5/2) = (2.5, 2.5); K'=L'=1: 1.5 each
    assert own.estimate("bv") == pytest.approx(2.25) and own.estimate("gbv") == pytest.approx(2.5)
    assert own.differences["gbv"]["estimate"] == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert own.relative["gbv"]["estimate"] == pytest.approx(0.25 / 2.25)
    assert small.estimate("bv") == pytest.approx(1.5) and small.differences["gbv"]["note"]
    assert small.realised is None and own.realised["estimate"] == pytest.approx((9 / 4 + 4 / 2) / 2)
    row = own.to_json()
    assert (row["paths"], row["depth"], row["tree_paths"], row["tree_depth"]) == (2, 2, 2, 2)
    assert (row["prompts"], row["row_steps"], row["generated_tokens"]) == (2, 6, 16)  # the run's
    assert row["decode_tokens_per_s"] == pytest.approx(16 / 2.0)  # one batch: its decode seconds
    assert json.loads(json.dumps(row)) == row  # plain JSON types


# ---------------------------------------------------------------------------------------
# gap: GapSpec's construction is the only validation; the instance file is read after it
# ---------------------------------------------------------------------------------------

def test_gap_spec_reads_its_instance_only_once_every_field_is_checked():
    from speclp.lp.instance import bv_toy
    from speclp.proofs.gap import GapSpec

    calls, toy = [], bv_toy(1)

    def read(spec):
        calls.append((spec.paths, spec.draft_sampling, spec.method))
        return toy

    for bad in ({"paths": 0}, {"paths": 33}, {"method": "closed-form"}, {"seed": 2**32},
                {"backend": "cvxpy"}, {"samples": 10**7 + 1}, {"verifiers": ("nope",)}):
        with pytest.raises(BadArgument):
            GapSpec(read, **bad)
    assert calls == []  # a wrong field is refused before the file is read
    spec = GapSpec(read, paths=3, draft_sampling="without-replacement", method="full")
    assert calls == [(3, "without-replacement", "full")] and spec.instance is toy
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.paths = 2  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, field, reason", [
    ({"paths": 33}, "paths", "K = 33 is over the limit of 32 paths (every verifier's law holds K "
                             "paths per draft configuration); use fewer paths"),
    ({"backend": "cvxpy"}, "backend", "cvxpy solves the enumerated LP only; add `method` full"),
    ({"method": "closed-form"}, "method", "must be one of auto, colgen, full, got 'closed-form'"),
    ({"samples": 10**7 + 1}, "samples", "must be <= 10,000,000, got 10000001"),
    ({"time_limit": 0.0}, "time_limit", "must be > 0, got 0"),
])
def test_gap_spec_refusals_name_the_field(kwargs, field, reason):
    from speclp.lp.instance import bv_toy
    from speclp.proofs.gap import GapSpec

    with pytest.raises(BadArgument) as caught:
        GapSpec(bv_toy(1), **kwargs)
    assert (caught.value.field, caught.value.reason) == (field, reason)


@pytest.mark.parametrize("args, line", [
    (["--paths", "0"], "error: --paths: must be >= 1, got 0"),
    (["--paths", "40"], "error: --paths: K = 40 is over the limit of 32 paths (every verifier's law "
                        "holds K paths per draft configuration); use fewer paths"),
    (["--backend", "cvxpy"], "error: --backend: cvxpy solves the enumerated LP only; add --method full"),
    (["--method", "closed-form"], "error: --method: must be one of auto, colgen, full, got 'closed-form'"),
    (["--time-limit", "nan"], "error: --time-limit: must be a finite number, got nan"),
    (["--samples", "1"], "error: --samples: must be >= 2, got 1"),
    (["--seed", "-1"], "error: --seed: must be >= 0, got -1"),
    (["--verifiers", ","], "error: --verifiers: give at least one verifier name"),
    (["--paths", "5", "--draft-sampling", "without-replacement"],  # V = 2, L = 2: 4 distinct paths
     "error: --paths: cannot draft 5 distinct paths out of 4 (V=2, L=2, without replacement)"),
])
def test_gap_prints_the_specs_refusal_as_its_flag(args, line, tmp_path):
    from speclp.lp.instance import dirichlet_instance

    path = dirichlet_instance(2, 2, seed=0, denominator=10).save(tmp_path / "inst.json")
    assert _refusal(["gap", str(path), *args, "--save-dir", str(tmp_path / "saved")]) == line


# ---------------------------------------------------------------------------------------
# trees: TreesSpec is frozen; its folder's spec.json is the one written before it was
# ---------------------------------------------------------------------------------------

# spec.json's "spec" of a `speclp trees ... --budgets 1,2,3 --top 2 --depth 3 --engine-budgets 8`
# folder written by the code before TreesSpec was frozen (lists, key order as written)
RECORDED_TREES_SPEC = (
    '{"pair": "smollm2-135m", "prompts": "humaneval:2", "budgets": [1, 2, 3], "rules": ["draft", '
    '"rerank", "target-first", "target-first-gbv"], "top": 2, "depth": 3, "contexts_per_prompt": 1, '
    '"every": 2, "temperature": 1.0, "draft_temperature": null, "no_timing": true, "engine_budgets": '
    '[8], "engine_verifiers": ["bv", "gbv"], "engine_tokens": 3, "skip_trees": false, "seed": 0}')


def test_trees_spec_is_frozen_and_writes_the_spec_json_of_earlier_folders():
    spec = TreesSpec(pair="smollm2-135m", prompts="humaneval:2", budgets=[1, 2, 3], top=2, depth=3,
                     contexts_per_prompt=1, every=2, no_timing=True, engine_budgets=[8],
                     engine_tokens=3)
    assert (spec.budgets, spec.engine_budgets, spec.engine_verifiers) == ((1, 2, 3), (8,), ("bv", "gbv"))
    assert spec.as_dict() == json.loads(RECORDED_TREES_SPEC)  # lists, not tuples: equal to the file
    assert json.dumps(spec.as_dict()) == RECORDED_TREES_SPEC  # the same bytes, key order included
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.budgets = (4,)  # type: ignore[misc]
    assert dataclasses.replace(spec, draft_temperature=1.5).budgets == (1, 2, 3)
    with pytest.raises(BadArgument) as caught:
        TreesSpec(budgets=8)  # type: ignore[arg-type]
    assert caught.value.field == "budgets"
