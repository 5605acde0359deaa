"""speclp.testing.assert_lossless, the engine mutants' exact laws and the engine layouts.

Independent checks: the mutants' reference law equals the registered `token` verifier's law
(a second implementation); the lossless references have TV 0 (theorems); the ensemble law's
first token is off by exactly (1 - w) TV(p, q) (closed form), and two implementations of it
agree; the numpy mutants in the vllm layout (per draw) follow the torch mutants' exact laws
(sampled at a fixed seed, against a finite-sample bound); every reference passes and every
mutant fails in every layout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from speclp.proofs.audit import _continued_cells, audit_instance, draw_drafts
from speclp.proofs.layouts import sglang_request, tree_nodes
from speclp.testing import assert_lossless, ensemble_law
from speclp.verifiers.exact import continued_law, exact_result
from speclp.verifiers.tree import prefix_node_indices

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import engine_layouts  # noqa: E402
import engine_mutants  # noqa: E402
from test_engine_ci import (  # noqa: E402,F401  (the README's pytest example, run in the suite)
    test_a_wrong_logits_slice_is_caught,
    test_rejection_sampler_is_lossless,
)

INSTANCES = [audit_instance(3, 2, t, family="mixed", seed=0) for t in range(6)]


def _emit(instance, law, paths=1):
    return np.asarray(exact_result(instance.model(), law, paths=paths).emit, dtype=np.float64)


@pytest.mark.parametrize("index", range(6))
def test_reference_law_is_the_token_verifier(index):
    instance = INSTANCES[index]
    assert np.allclose(_emit(instance, engine_mutants.REFERENCES["reference"]),
                       _emit(instance, "token"), atol=1e-12)
    for law in engine_mutants.REFERENCES.values():
        assert float(exact_result(instance.model(), law, paths=1).total_variation) < 1e-12


def test_every_mutant_is_lossy_on_the_audit_families():
    for name, law in engine_mutants.MUTANTS.items():
        tvs = [float(exact_result(i.model(), law, paths=1).total_variation) for i in INSTANCES]
        assert max(tvs) > 1e-3, (name, tvs)


@pytest.mark.parametrize("w", [0.0, 0.5, 0.9, 1.0])
def test_ensemble_law_closed_form_and_two_implementations(w):
    for instance in INSTANCES[:3]:
        model = instance.model()
        law = continued_law(model, _emit(instance, ensemble_law(w)))
        first = np.asarray(law, dtype=np.float64).reshape(3, -1).sum(1)
        p0 = np.asarray(model.to_float().target[0], dtype=np.float64)
        q0 = np.asarray(model.to_float().draft[0], dtype=np.float64)
        assert abs(0.5 * np.abs(first - p0).sum() - (1 - w) * 0.5 * np.abs(p0 - q0).sum()) < 1e-12
        assert np.allclose(_emit(instance, ensemble_law(w)),
                           _emit(instance, engine_mutants.ensemble_law(w)), atol=1e-12)
    with pytest.raises(ValueError, match="w: "):
        ensemble_law(1.5)


# bugs whose vllm-layout form (all n = L, draft probs given) is the torch law exactly
SAME_LAW = ("no_temperature", "topk_draft_only", "topp_target_only", "target_rows_overwritten",
            "bonus_wrong_position", "threshold_acceptance", "typical_acceptance", "ensemble_w09")


@pytest.mark.parametrize("bug", (None, *SAME_LAW, "draft_probs_none_one_hot"))
def test_vllm_numpy_mutants_follow_the_exact_laws(bug):
    """The per-draw numpy form of each mutant (vllm layout) against the exact law of its torch
    form: the empirical TV over V^(L+1) = 27 cells after 200,000 draws stays within the
    Bretagnolle-Huber-Carol bound at delta = 1e-6 (about 0.012), while the mutants' laws are
    further apart than that from the target law on these instances."""
    runs = 200_000
    for index in (0, 1, 3):
        instance = INSTANCES[index]
        model = instance.model().to_float()
        rng = np.random.default_rng(index)
        tokens = draw_drafts(model, 1, runs, rng)
        nodes = prefix_node_indices(tokens, 3)
        target = np.asarray(model.target, dtype=np.float64)[nodes][:, 0]  # [B, L+1, V]
        draft = np.asarray(model.draft, dtype=np.float64)[nodes[..., :-1]][:, 0]
        counts = np.full(runs, 2)
        one_hot = bug == "draft_probs_none_one_hot"
        blocks = engine_layouts._vllm(tokens[:, 0].reshape(-1), counts,
                                      None if one_hot else draft.reshape(-1, 3),
                                      target.reshape(-1, 3), rng, bug)
        cells = np.bincount(_continued_cells(blocks, model, rng), minlength=27) / runs
        law = engine_mutants.REFERENCES["reference"] if bug is None else engine_mutants.MUTANTS[bug]
        exact = np.asarray(continued_law(instance.model(), _emit(instance, law)), dtype=np.float64)
        bound = 0.5 * np.sqrt(2 * (27 * np.log(2) + np.log(1e6)) / runs)
        assert 0.5 * np.abs(cells - exact).sum() < bound, (bug, index)


def test_sglang_tree_arrays_are_the_merged_paths():
    tokens = np.array([[[0, 1], [0, 2], [1, 1]], [[2, 2], [2, 2], [2, 0]]])
    node, used = tree_nodes(tokens)
    assert node[0].tolist() == [[0, 1, 2], [0, 1, 3], [0, 4, 5]] and used.tolist() == [6, 4]
    assert node[1].tolist() == [[0, 1, 2], [0, 1, 2], [0, 1, 3]]
    target = np.random.default_rng(0).dirichlet(np.ones(3), size=(2, 3, 3))
    draft = np.random.default_rng(1).dirichlet(np.ones(3), size=(2, 3, 2))
    request, _ = sglang_request(tokens, target, draft)
    assert request["candidates"][0].tolist() == [-1, 0, 1, 2, 1, 1, -1]
    assert request["retrive_next_token"][0].tolist() == [1, 2, -1, -1, 5, -1, -1]
    assert request["retrive_next_sibling"][0].tolist() == [-1, 4, 3, -1, -1, -1, -1]
    assert request["retrive_next_token"][1].tolist() == [1, 2, -1, -1, -1, -1, -1]
    assert request["retrive_next_sibling"][1].tolist() == [-1, -1, 3, -1, -1, -1, -1]
    assert np.array_equal(request["target_probs"][0, 3], target[0, 1, 2])
    assert np.array_equal(request["draft_probs"][0, 4], draft[0, 2, 1])
    assert not request["draft_probs"][0, 5].any()  # depth L: no draft row


@pytest.mark.parametrize("layout,paths", [("vllm", 1), ("sglang", 2), ("sglang", 3)])
def test_references_pass_and_every_mutant_fails_in_each_layout(layout, paths):
    reference = getattr(engine_layouts, f"{layout}_reference")
    report = assert_lossless(reference, layout=layout, paths=paths, runs=50_000, seed=3)
    assert report["passed"] and report["layout"] == layout
    for bug in engine_layouts.MUTANT_NAMES:
        with pytest.raises(AssertionError, match="is not lossless"):
            assert_lossless(engine_layouts.MUTANTS[(layout, bug)], layout=layout, paths=paths,
                            runs=50_000, seed=3)


def test_assert_lossless_is_deterministic_in_the_seed():
    def digest(seed):
        report = assert_lossless(engine_layouts.vllm_reference, layout="vllm", runs=20_000,
                                 seed=seed)
        return [(i["instance"], i["runs"], i["law_evalue"], i["tv"]) for i in report["instances"]]

    assert digest(4) == digest(4) and digest(4) != digest(5)


def test_failure_names_instance_position_and_statistic():
    with pytest.raises(AssertionError) as caught:
        assert_lossless(engine_layouts.vllm_bonus_wrong_position, layout="vllm", runs=50_000,
                        seed=0)
    text = str(caught.value)
    assert "vllm_bonus_wrong_position is not lossless" in text and "seed 0" in text
    names = [i.name for i in INSTANCES]
    first = text.splitlines()[1]
    assert any(first.strip().startswith(n) for n in names), first
    assert "position" in first and "e-value" in first and "empirical TV" in first


def test_lossy_law_mode():
    """The ensemble sampler is exactly w p + (1 - w) q (passes against the stated law, fails
    losslessness); the lossless reference is not that law."""
    sampler = engine_mutants.SAMPLERS["ensemble_w09"]
    report = assert_lossless(sampler, paths=1, runs=50_000, law=ensemble_law(0.9), trials=3)
    assert report["passed"] and report["law"] == "ensemble_law(0.9)"
    with pytest.raises(AssertionError, match="is not lossless"):
        assert_lossless(sampler, paths=1, runs=50_000, trials=3)
    with pytest.raises(AssertionError, match=r"is not exactly ensemble_law\(0.9\)"):
        assert_lossless(engine_mutants.SAMPLERS["reference"], paths=1, runs=50_000, trials=3,
                        law=ensemble_law(0.9))


def test_contract_failure_is_an_assertion():
    def raises(*args):
        raise RuntimeError("kernel fault")

    with pytest.raises(AssertionError, match="broke its contract: when called: raised "
                                             "RuntimeError: kernel fault"):
        assert_lossless(raises, layout="vllm", runs=1000)
    with pytest.raises(ValueError, match="runs: "):
        assert_lossless(engine_layouts.vllm_reference, layout="vllm", runs=1)


# ---------------------------------------------------------------------------
# speclp lossless: is my configuration lossless?
# ---------------------------------------------------------------------------

def _config_tvs(**settings):
    from speclp.proofs.config_law import AcceptanceConfig, config_report

    return [i["tv"] for i in config_report(AcceptanceConfig(**settings))["instances"]]


@pytest.mark.parametrize("settings,mutant", [
    ({"method": "threshold", "threshold_single": 0.6, "threshold_acc": 0.8}, "threshold_acceptance"),
    ({"method": "typical"}, "typical_acceptance"),
    ({"method": "ensemble", "weight": 0.9}, "ensemble_w09"),
])
def test_config_laws_equal_the_mutants_laws(settings, mutant):
    """Two implementations of the same rules (proofs.config_law, examples/engine_mutants.py):
    the same exact TV on every instance of the default audit."""
    expected = [float(exact_result(i.model(), engine_mutants.MUTANTS[mutant], paths=1)
                      .total_variation) for i in INSTANCES]
    assert np.allclose(_config_tvs(**settings), expected, atol=1e-12)


@pytest.mark.parametrize("settings", [
    {}, {"method": "one-hot"}, {"method": "threshold"}, {"method": "ensemble", "weight": 1.0},
    {"temperature": 0.5, "target_top_k": 2, "draft_top_p": 0.9},
])
def test_configs_lossless_by_theorem_have_exact_tv_zero(settings):
    assert max(_config_tvs(**settings)) < 1e-12


def test_lossless_command():
    from speclp.cli import app
    from typer.testing import CliRunner

    runner = CliRunner()
    ok = runner.invoke(app, ["lossless", "--method", "one-hot", "--temperature", "0.7", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["lossless_by_theorem"] is True
    lossy = runner.invoke(app, ["lossless", "--temperature", "0.7", "--verify-temperature", "1",
                                "--json"])
    assert lossy.exit_code == 1
    out = json.loads(lossy.stdout)
    assert out["max_tv"] > 0.01 and out["worst_instance"] in [i.name for i in INSTANCES]
    one_sided = runner.invoke(app, ["lossless", "--draft-top-k", "2", "--verify-draft-top-k", "3"])
    assert one_sided.exit_code == 1 and "LOSSY: exact TV" in one_sided.stderr
    for args, flag in ((["--weight", "0.5"], "--weight"), (["--target-top-p", "1.5"], "--target-top-p"),
                       (["--method", "nope"], "--method")):
        bad = runner.invoke(app, ["lossless", *args])
        assert bad.exit_code == 2 and flag in bad.stderr, bad.output
        assert len(bad.stderr.strip().splitlines()) == 1


def test_vllm_pooled_histogram_test_cannot_see_what_the_audit_sees():
    """The reimplemented vLLM test copies one row to every position and drops the bonus: a
    row shift and a bonus from the wrong position leave its verdict where the reference's is
    (identical outputs), while the audit fails both (test_references_pass_and_every_mutant_
    fails_in_each_layout); the temperature bug changes every row, and the pooled test sees it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "engine_mutants_benchmark", EXAMPLES.parent / "benchmarks" / "engine_mutants.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    pooled_histogram_test = benchmark.pooled_histogram_test

    for seed in range(2):
        reference = pooled_histogram_test(engine_layouts.vllm_reference, seed)
        assert reference["passed"]
        for blind in ("row_shift", "bonus_wrong_position"):
            assert pooled_histogram_test(engine_layouts.MUTANTS[("vllm", blind)], seed) == reference
        assert not pooled_histogram_test(engine_layouts.vllm_no_temperature, seed)["passed"]
