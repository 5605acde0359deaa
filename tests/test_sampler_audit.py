"""Audit of foreign sampler code: passes every registered law's sampler, fails the known
failure modes (and passes their correct twins), catches impossible efficiencies and
malformed blocks, and keeps the CLI contract."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from speclp.cli import app
from speclp.lp.instance import ties_instance
from speclp.proofs.audit import audit_instance, audit_sampler, draw_drafts, load_sampler
from speclp.verifiers.registry import verifier_names
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
import broken_samplers  # noqa: E402
import law_samplers  # noqa: E402

runner = CliRunner()
TIE_TRIAL = 2  # audit_instance(3, 2, 2, ties=True, seed=0): equal ratios where both bugs bite


@pytest.mark.parametrize("name", verifier_names())
def test_every_registered_law_sampler_passes(name):
    report = audit_sampler(law_samplers.sampler_for(name), trials=1, runs=20_000, seed=1, name=name)
    assert report["passed"], report["failures"]
    (inst,) = report["instances"]
    assert inst["malformed"] == 0 and inst["impossible_outcomes"] == 0
    assert inst["optimum_certified"] and not inst["above_optimum"]
    assert inst["tv_ci"][0] <= inst["tv"] <= inst["tv_ci"][1]
    assert 0 < inst["detectable_tv"] < 0.05


@pytest.mark.parametrize("broken,twin,paths", [
    ("gbv_first_child_on_ties", "gbv_token_id_ties", 2),
    ("traversal_path_order", "traversal_dfs_order", 3),
])
def test_failure_modes_fail_and_their_twins_pass(broken, twin, paths):
    """The two independently written buggy samplers fail with p < 1e-6 on a --ties
    instance; the same code with the bug fixed passes on the same instance."""
    instance = audit_instance(3, 2, TIE_TRIAL, ties=True, seed=0)
    bad = audit_sampler(getattr(broken_samplers, broken), paths=paths, runs=10_000, batched=False,
                        instances=[instance], name=broken)
    assert not bad["passed"] and bad["min_p_value"] < 1e-6
    good = audit_sampler(getattr(broken_samplers, twin), paths=paths, runs=10_000, batched=False,
                         instances=[instance], name=twin)
    assert good["passed"], good["failures"]


def test_spectr_gbv_sampler_fails():
    report = audit_sampler(law_samplers.sampler_for("spectr_gbv"), trials=1, runs=20_000)
    assert not report["passed"] and report["min_p_value"] < 1e-6


def _always_accept_path0(target, draft, paths, rng):
    """Lossy on purpose: accept path 0 whole, bonus token from p(.|X_1..L)."""
    batch, _, depth = paths.shape
    rows = target[:, 0, depth]
    cdf = np.cumsum(rows, -1)
    bonus = (cdf <= rng.random(batch)[:, None] * cdf[:, -1:]).sum(-1).clip(0, rows.shape[-1] - 1)
    return np.concatenate([paths[:, 0], bonus[:, None]], 1)


def test_impossible_block_efficiency_is_flagged():
    """Block efficiency L + 1 = 3 > the certified optimum: impossible for a lossless verifier."""
    report = audit_sampler(_always_accept_path0, trials=1, runs=4000)
    (inst,) = report["instances"]
    assert inst["block_efficiency"] == 3.0 and inst["above_optimum"]
    assert any("impossible for a lossless verifier" in f for f in report["failures"])


def test_malformed_blocks_are_flagged():
    def off_path(target, draft, paths, rng):  # emits (1 - x_1) then a token: not a drafted prefix
        return [[1 - int(p[0, 0]), 0] for p in paths]

    report = audit_sampler(off_path, paths=1, vocab=2, trials=1, runs=500)
    assert report["instances"][0]["malformed"] == 500 and not report["passed"]


def test_draft_paths_follow_the_draft_law():
    inst = ties_instance(3, 2, seed=3)
    model = inst.model()
    rng = np.random.default_rng(0)
    tokens = draw_drafts(model, 2, 30_000, rng)
    q = model.draft_path_probabilities()
    for k in range(2):
        counts = np.bincount(tokens[:, k, 0] * 3 + tokens[:, k, 1], minlength=9)
        assert counts[q == 0].sum() == 0
        keep = q > 0
        assert stats.chisquare(counts[keep], q[keep] * counts.sum()).pvalue > 1e-4
    distinct = draw_drafts(model, 3, 2000, rng, "without-replacement")
    assert all(len({tuple(p) for p in conf}) == 3 for conf in distinct)


def test_load_sampler_errors(tmp_path):
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        load_sampler("no_colon")
    with pytest.raises(ValueError, match="cannot load"):
        load_sampler("no_such_module_xyz:f")
    with pytest.raises(ValueError, match="no file"):
        load_sampler(str(tmp_path / "missing.py") + ":f")
    assert load_sampler(f"{EXAMPLES / 'law_samplers.py'}:bv").__name__ == "bv"


def test_cli_sampler_failure_exits_1_and_saves(tmp_path):
    result = runner.invoke(app, ["audit", "--sampler",
                                 f"{EXAMPLES / 'law_samplers.py'}:spectr_gbv", "--trials", "1",
                                 "--runs", "5000", "--json", "--save-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert not out["passed"] and out["failures"]
    saved = json.loads(Path(out["saved"]).read_text())
    assert saved["vocab_size"] == 3


def test_cli_sampler_passes(tmp_path):
    result = runner.invoke(app, ["audit", "--sampler", f"{EXAMPLES / 'law_samplers.py'}:gbv",
                                 "--trials", "1", "--runs", "5000", "--ties", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] and out["instances"][0]["optimum_certified"]


@pytest.mark.parametrize("args,flag", [
    ([], "--verifier"),
    (["--verifier", "bv", "--sampler", "x:y"], "--verifier"),
    (["--sampler", "no_such_module_xyz:f"], "--sampler"),
    (["--sampler", "x:y", "--runs", "1"], "--runs"),
    (["--sampler", "x:y", "--alpha", "2"], "--alpha"),
])
def test_cli_sampler_bad_input(args, flag):
    result = runner.invoke(app, ["audit", *args])
    assert result.exit_code == 2 and flag in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_readme_sampler_example_runs():
    """The README's sampler example (token-level speculative sampling on path 0) passes."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- sampler-example -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README sampler example not found"
    namespace: dict = {}
    exec(compile(match.group(1), "README-example", "exec"), namespace)
    report = audit_sampler(namespace["token_level"], trials=1, runs=3000, batched=False)
    assert report["passed"], report["failures"]
