"""Audit of foreign sampler code: passes every registered law's sampler, fails the known
failure modes (and passes their correct twins), catches impossible efficiencies and
malformed blocks, keeps the CLI contract; the e-processes are valid (simulated under the
null) and powerful (tampered laws); instance families and the ragged layout."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from speclp.cli import app
from speclp.lp.instance import ties_instance
from speclp.proofs.audit import (
    FAMILIES,
    SAMPLER_TRIALS,
    TIME_LIMIT,
    audit_instance,
    draw_drafts,
    family_instance,
    instance_family,
    load_sampler,
)
from speclp.proofs.audit import audit_sampler as _library_audit_sampler
from speclp.proofs.evalues import (
    detectable_tv,
    least_favourable_split,
    log_efficiency_evalue,
    log_law_evalue,
    shifted_law,
)
from speclp.proofs.sandbox import SamplerFailed, SandboxedSampler, check_blocks
from speclp.verifiers.exact import continued_law, exact_result
from speclp.verifiers.registry import verifier_names
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
import broken_samplers  # noqa: E402
import law_samplers  # noqa: E402
import ragged_sampler  # noqa: E402

runner = CliRunner()
# the tests below fix their budget in runs: no wall-clock limit, so a verdict is a function of
# the seed (the library's default time limit is the CLI's 60 s)
audit_sampler = functools.partial(_library_audit_sampler, time_limit=None)
TIE_TRIAL = 2  # audit_instance(3, 2, 2, ties=True, seed=0): equal ratios where both bugs bite


@pytest.mark.parametrize("name", verifier_names())
def test_every_registered_law_sampler_passes(name):
    report = audit_sampler(law_samplers.sampler_for(name), trials=1, runs=20_000, seed=1, name=name)
    assert report["passed"], report["failures"]
    (inst,) = report["instances"]
    assert inst["runs"] == 20_000 and inst["malformed"] == 0 and inst["impossible_outcomes"] == 0
    assert inst["optimum_certified"] and not inst["above_optimum"]
    assert inst["tv_ci"][0] <= inst["tv"] <= inst["tv_ci"][1]
    assert 0 < inst["detectable_tv"] < 0.1


@pytest.mark.parametrize("broken,twin,paths", [
    ("gbv_first_child_on_ties", "gbv_token_id_ties", 2),
    ("traversal_path_order", "traversal_dfs_order", 3),
])
def test_failure_modes_fail_and_their_twins_pass(broken, twin, paths):
    """The two independently written buggy samplers fail (the law test rejects) on a --ties
    instance; the same code with the bug fixed passes on the same instance."""
    instance = audit_instance(3, 2, TIE_TRIAL, ties=True, seed=0)
    bad = audit_sampler(getattr(broken_samplers, broken), paths=paths, runs=10_000, batched=False,
                        instances=[instance], name=broken)
    assert not bad["passed"] and bad["instances"][0]["law_rejected"]
    assert bad["instances"][0]["law_evalue"] >= 1 / bad["level"]
    assert bad["instances"][0]["runs"] < 10_000  # stopped early on clear evidence
    good = audit_sampler(getattr(broken_samplers, twin), paths=paths, runs=10_000, batched=False,
                         instances=[instance], name=twin)
    assert good["passed"], good["failures"]


def test_spectr_gbv_sampler_fails():
    report = audit_sampler(law_samplers.sampler_for("spectr_gbv"), trials=1, runs=20_000)
    assert not report["passed"] and report["instances"][0]["law_rejected"]


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
    assert any("efficiency test rejected" in f and "impossible for a lossless verifier" in f
               for f in report["failures"])


def test_malformed_blocks_are_flagged():
    def off_path(target, draft, paths, rng):  # emits (1 - x_1) then a token: not a drafted prefix
        return [[1 - int(p[0, 0]), 0] for p in paths]

    report = audit_sampler(off_path, paths=1, vocab=2, trials=1, runs=500)
    assert report["instances"][0]["malformed"] == 500 and not report["passed"]
    assert "not a drafted prefix" in report["failures"][0]


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
    with pytest.raises(ValueError, match="no module"):
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
    saved = json.loads(Path(out["saved"][0]).read_text())
    assert saved["vocab_size"] == 3


def test_cli_sampler_passes(tmp_path):
    result = runner.invoke(app, ["audit", "--sampler", f"{EXAMPLES / 'law_samplers.py'}:gbv",
                                 "--trials", "1", "--runs", "5000", "--ties", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] and out["instances"][0]["optimum_certified"]
    assert out["instances"][0]["runs"] == 5000 and "family-wise error level 0.001" in out["error_level"]
    text = runner.invoke(app, ["audit", "--sampler", f"{EXAMPLES / 'law_samplers.py'}:gbv",
                               "--trials", "1", "--runs", "3000"])
    assert text.exit_code == 0, text.output
    assert "would have detected TV >=" in text.stdout and "with probability 0.9" in text.stdout


@pytest.mark.parametrize("args,flag", [
    ([], "--verifier"),
    (["--verifier", "bv", "--sampler", "x:y"], "--verifier"),
    (["--sampler", "no_such_module_xyz:f"], "--sampler"),
    (["--sampler", "x:y", "--runs", "1"], "--max-runs"),
    (["--sampler", "x:y", "--alpha", "2"], "--alpha"),
    (["--sampler", "x:y", "--runs", "99999999999"], "--max-runs"),
    (["--sampler", "x:y", "--exact"], "--exact"),
    (["--sampler", "x:y", "--layout", "diagonal"], "--layout"),
    (["--sampler", "x:y", "--layout", "ragged", "--paths", "2"], "--paths"),
    (["--sampler", "x:y", "--family", "nope"], "--family"),
    (["--sampler", "x:y", "--search", "2", "--trials", "3"], "--search"),
    (["--sampler", "x:y", "--call-timeout", "0"], "--call-timeout"),
    (["--sampler", "/no/such/file.py:f"], "--sampler"),
])
def test_cli_sampler_bad_input(args, flag):
    result = runner.invoke(app, ["audit", *args])
    assert result.exit_code == 2 and flag in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    as_json = runner.invoke(app, ["audit", *args, "--json"])
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["exit_status"] == 2


def test_readme_sampler_example_runs():
    """The README's sampler example (token-level speculative sampling on path 0) passes."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- sampler-example -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README sampler example not found"
    namespace: dict = {}
    exec(compile(match.group(1), "README-example", "exec"), namespace)
    report = audit_sampler(namespace["token_level"], trials=1, runs=3000, batched=False)
    assert report["passed"], report["failures"]


# --- the sandbox: every way a sampler can break its contract is the sampler's failure ------

SAMPLER_FILE = '''
import os, sys, time
import numpy as np

def lossless(target, draft, paths, rng):
    """token-level speculative sampling on path 0, vectorised (independent of speclp)"""
    batch, _, depth = paths.shape
    out = np.full((batch, depth + 1), -1)
    alive = np.ones(batch, dtype=bool)
    for i in range(depth + 1):
        p = target[:, 0, i]
        if i == depth:
            row = p
        else:
            x, q = paths[:, 0, i], draft[:, 0, i]
            px, qx = p[np.arange(batch), x], q[np.arange(batch), x]
            accept = rng.random(batch) < np.minimum(1, px / np.where(qx > 0, qx, 1))
            take = alive & accept
            out[take, i] = x[take]
            row = np.maximum(p - q, 0)
        stop = alive & ((i == depth) | ~accept) if i < depth else alive
        mass = row.sum(-1, keepdims=True)
        row = np.where(mass > 0, row / np.where(mass > 0, mass, 1), p)
        cdf = row.cumsum(-1)
        token = np.minimum((cdf <= rng.random(batch)[:, None] * cdf[:, -1:]).sum(-1), row.shape[-1] - 1)
        out[stop, i] = token[stop]
        alive &= ~stop
    return out

def prints(target, draft, paths, rng):
    print("debug: a batch of", len(paths))
    os.write(1, b"raw fd write\\n")
    return lossless(target, draft, paths, rng)

def calls_exit(target, draft, paths, rng):
    sys.exit(0)

def raises_runtime(target, draft, paths, rng):
    raise RuntimeError("kaput")

def raises_type(target, draft, paths, rng):
    return len(3)

def raises_index(target, draft, paths, rng):
    return paths[0, 99]

def raises_value(target, draft, paths, rng):
    a, b, c = paths[0]
    return a

def recursion(target, draft, paths, rng):
    return recursion(target, draft, paths, rng)

def returns_none(target, draft, paths, rng):
    return None

def wrong_shape(target, draft, paths, rng):
    return np.zeros((3, 4, 5), dtype=int)

def invalid_token(target, draft, paths, rng):
    out = lossless(target, draft, paths, rng)
    out[:, 0] = 99
    return out

def hangs(target, draft, paths, rng):
    time.sleep(10_000)

def hard_exit(target, draft, paths, rng):
    os._exit(7)

def scribbles(target, draft, paths, rng):
    out = lossless(target, draft, paths, rng)
    paths[...] = 0  # writes into its inputs after answering
    target[...] = 0
    return out
'''

FAILURES = [  # function, words the one line must contain
    ("calls_exit", "sys.exit(0)"),
    ("raises_runtime", "RuntimeError: kaput"),
    ("raises_type", "TypeError"),
    ("raises_index", "IndexError"),
    ("raises_value", "ValueError"),
    ("recursion", "RecursionError"),
    ("returns_none", "returned None"),
    ("wrong_shape", "shape (3, 4, 5)"),
    ("invalid_token", "token id 99 outside the vocabulary"),
    ("hangs", "did not answer within 3 s"),
    ("hard_exit", "exit status 7"),
]


@pytest.fixture(scope="module")
def sampler_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("samplers") / "user_sampler.py"
    path.write_text(SAMPLER_FILE)
    return path


def _audit(args, tmp_path):
    return runner.invoke(app, ["audit", *args, "--trials", "1", "--max-runs", "2000",
                               "--call-timeout", "3", "--save-dir", str(tmp_path)])


@pytest.mark.parametrize("function,words", FAILURES)
def test_sampler_failure_is_exit_1_naming_it(function, words, sampler_file, tmp_path):
    spec = f"{sampler_file}:{function}"
    result = _audit(["--sampler", spec], tmp_path)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and spec in lines[0] and words in lines[0], lines
    if function.startswith(("raises", "calls", "recursion")):
        assert f"{sampler_file}:" in lines[0]  # file:line of the user's code
    as_json = _audit(["--sampler", spec, "--json"], tmp_path)
    assert as_json.exit_code == 1
    assert len(as_json.stdout.strip().splitlines()) == 1
    out = json.loads(as_json.stdout)
    assert out["passed"] is False and words in out["failures"][0]
    assert out["sampler_failure"]["kind"] in ("exit", "exception", "answer", "timeout")


def test_sys_exit_at_import_fails(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(0)\ndef f(*a):\n    return None\n")
    result = _audit(["--sampler", f"{path}:f", "--json"], tmp_path)
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert "at import: sys.exit(0)" in out["failures"][0] and f"{path}:2" in out["failures"][0]


def test_batched_shape_error_hints_unbatched(tmp_path):
    spec = f"{EXAMPLES / 'broken_samplers.py'}:gbv_token_id_ties"
    result = _audit(["--sampler", spec], tmp_path)
    assert result.exit_code == 1
    assert "--unbatched" in result.stderr and spec in result.stderr


def test_prints_are_captured_not_in_json(sampler_file, tmp_path):
    result = _audit(["--sampler", f"{sampler_file}:prints", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # exactly one object: the prints did not reach stdout
    assert out["passed"] and "debug: a batch of" in out["captured_output"]
    assert "raw fd write" in out["captured_output"]
    assert "printed" in result.stderr


def test_lossless_user_sampler_passes_in_the_sandbox(sampler_file, tmp_path):
    result = _audit(["--sampler", f"{sampler_file}:lossless", "--family", "mixed", "--json"],
                    tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["instances"][0]["runs"] == 2000


def test_sampler_writing_into_its_inputs_does_not_fool_the_audit(sampler_file):
    """In this process too (a function object), the sampler gets copies: zeroing the drafted
    paths after answering does not make its blocks look malformed (or well-formed)."""
    report = audit_sampler(load_sampler(f"{sampler_file}:scribbles"), trials=1, runs=3000)
    assert report["passed"] and report["instances"][0]["malformed"] == 0


def test_several_failing_instances_are_all_saved(tmp_path):
    result = runner.invoke(app, ["audit", "--sampler", f"{EXAMPLES / 'law_samplers.py'}:spectr_gbv",
                                 "--trials", "3", "--family", "dirichlet", "--max-runs", "20000",
                                 "--json", "--save-dir", str(tmp_path)])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    failed = len({f.split(" ")[0] for f in out["failures"]})
    assert failed >= 2 and len(out["saved"]) == failed
    assert all(Path(p).is_file() for p in out["saved"])


# --- the e-processes: valid under the null (simulated), powerful against tampered laws ------

def _law():
    inst = audit_instance(3, 2, 0, family="dirichlet")
    model = inst.model()
    return np.asarray(model.target_path_probabilities(3), dtype=np.float64)


def test_law_evalue_is_anytime_valid_under_the_null():
    """Ville: P(sup_n E_n >= 1/a) <= a. 300 null streams, 8 looks each (1,000 .. 128,000
    outcomes), a = 0.1: at most 30 expected; allow 45 (binomial tail ~ 0.1%)."""
    probs = _law()
    rng = np.random.default_rng(11)
    alarms = 0
    for _ in range(300):
        counts = np.zeros(len(probs), dtype=np.int64)
        total = 0
        for look in range(8):
            step = 1000 * 2**look - total
            counts += rng.multinomial(step, probs)
            total += step
            if log_law_evalue(counts, probs, 3, 3) >= np.log(10):
                alarms += 1
                break
    assert alarms <= 45


def test_law_evalue_rejects_tampered_laws():
    probs = _law()
    rng = np.random.default_rng(3)
    signs = least_favourable_split(probs)
    tampered = shifted_law(probs, 0.03, signs)
    assert abs(0.5 * np.abs(tampered - probs).sum() - 0.03) < 1e-12
    assert log_law_evalue(rng.multinomial(50_000, tampered), probs, 3, 3) > np.log(1e4)
    without_first = np.where(np.arange(len(probs)) == 0, 0.0, probs / (1 - probs[0]))
    counts = rng.multinomial(100, without_first)
    counts[0] = 1  # one outcome of probability 0
    assert log_law_evalue(counts, without_first, 3, 3) == np.inf
    assert log_law_evalue(rng.multinomial(50_000, probs), probs, 3, 3) < np.log(1e4)


def test_efficiency_evalue_valid_and_powerful():
    rng = np.random.default_rng(5)
    # null at its boundary: lengths 1..3 with mean exactly 2 against the bound 2
    alarms = sum(log_efficiency_evalue(np.bincount(rng.choice(3, 4000, p=[0.3, 0.4, 0.3]),
                                                   minlength=3), 2.0) >= np.log(10)
                 for _ in range(300))
    assert alarms <= 45
    above = np.bincount(rng.choice(3, 4000, p=[0.25, 0.4, 0.35]), minlength=3)  # mean 2.1
    assert log_efficiency_evalue(above, 2.0) > np.log(1e4)


def test_detectable_tv_is_what_the_test_detects():
    """At the reported TV the shifted law is rejected in >= 85% of 200 fresh simulations
    (bisection target 90%), at 0.6 of it in fewer; it shrinks as runs grow."""
    probs = _law()
    threshold = np.log(1 / 2.5e-4)
    d = detectable_tv(probs, 3, 3, 20_000, threshold)
    assert 0 < d < 0.1
    assert detectable_tv(probs, 3, 3, 80_000, threshold) < d
    rng = np.random.default_rng(99)
    signs = least_favourable_split(probs)

    def rate(tv):
        draws = rng.multinomial(20_000, shifted_law(probs, tv, signs), size=200)
        return np.mean([log_law_evalue(c, probs, 3, 3) >= threshold for c in draws])

    assert rate(d) >= 0.85 and rate(0.6 * d) < 0.85


def test_false_alarms_of_a_lossless_sampler_at_level_0_1(sampler_file):
    """The family-wise level holds: 40 audits (2 instances, both tests, level 0.1 overall)
    of an independent lossless sampler: at most 4 alarms expected; allow 10. (This test
    caught the sampler's generator sharing the stream of the draft draws.)"""
    fn = load_sampler(f"{sampler_file}:lossless")
    alarms = 0
    for seed in range(40):
        report = audit_sampler(fn, trials=2, runs=3000, seed=seed, alpha=0.1, family="mixed")
        alarms += not report["passed"]
    assert alarms <= 10


# --- instance families, the block law, public bugs, ragged layout, search ------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_families_are_what_they_say(family):
    inst = family_instance(family, 3, 2, seed=4)
    assert instance_family(inst) == family
    p, q = inst.target, inst.draft
    assert np.allclose(p.sum(1), 1) and np.allclose(q.sum(1), 1)
    if family == "clipped-ties":
        assert all(((pe > qe).sum() >= 2) for pe, qe in zip(inst.target_exact, inst.draft_exact, strict=True))
    if family == "ties":
        assert any(list(a) == list(b) for a, b in zip(inst.target_exact, inst.draft_exact, strict=True))
    if family == "zero-draft":
        assert ((q == 0) & (p > 0)).any(1).all()
    if family == "near-deterministic":
        assert (p.max(1) >= 1 - 1e-2).all()
    if family == "tiny":
        assert (p.min(1) < 1e-5).all() and (p.max(1) > 0.05).all()


def test_mixed_family_cycles():
    names = [instance_family(audit_instance(3, 2, t, family="mixed")) for t in range(6)]
    assert names == list(FAMILIES)


PUBLIC = [("residual_at_drafted_only", 2), ("bonus_wrong_slice", 2), ("low_precision_ratio", 0)]


@pytest.mark.parametrize("bug,trial", PUBLIC)
def test_public_bugs_have_small_exact_tv_and_fail(bug, trial):
    """Each new broken sampler has an exact TV in [0.003, 0.05] on its instance (exact law);
    the same law with the bug off is the token verifier (TV 0); the audit catches the bug."""
    inst = audit_instance(3, 2, trial, family="dirichlet")
    tv = exact_result(inst.model(), broken_samplers.public_bug_law(bug), paths=2).total_variation
    assert 0.003 <= tv <= 0.05
    fixed = exact_result(inst.model(), broken_samplers.token_level_law, paths=2)
    token = exact_result(inst.model(), "token", paths=2)
    assert fixed.total_variation < 1e-12
    assert abs(fixed.block_efficiency - token.block_efficiency) < 1e-12
    report = audit_sampler(getattr(broken_samplers, bug), instances=[inst], runs=400_000, seed=1)
    assert not report["passed"] and report["instances"][0]["law_rejected"]


def test_block_test_sees_beyond_two_tokens():
    """The bonus-slice bug changes only the token after L = 2 accepted ones: the law of the
    first two tokens is exact, the law of the continued block (3 tokens) is not."""
    inst = audit_instance(3, 2, 2, family="dirichlet")
    model = inst.model()
    result = exact_result(model, broken_samplers.public_bug_law("bonus_wrong_slice"), paths=2)
    law = continued_law(model, result.emit)
    two = law.reshape(9, 3).sum(1)
    assert np.abs(two - model.target_path_probabilities(2)).sum() < 1e-12
    assert result.total_variation > 0.003


def test_ragged_layout():
    good = audit_sampler(ragged_sampler.rejection_sample, paths=1, trials=2, runs=20_000,
                         layout="ragged", family="mixed", name="ragged")
    assert good["passed"], good["failures"]
    assert good["layout"] == "ragged" and good["instances"][0]["malformed"] == 0
    bad = audit_sampler(ragged_sampler.rejection_sample_fp8_ratio, paths=1, trials=1,
                        runs=400_000, layout="ragged", family="dirichlet", name="fp8")
    assert not bad["passed"]
    result = runner.invoke(app, ["audit", "--sampler",
                                 f"{EXAMPLES / 'ragged_sampler.py'}:rejection_sample",
                                 "--layout", "ragged", "--trials", "1", "--max-runs", "3000",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["paths"] == 1


def test_search_screens_and_names_the_family():
    report = audit_sampler(broken_samplers.residual_at_drafted_only, trials=1, search=6,
                           family="mixed", runs=100_000)
    assert len(report["screened"]) == 6 and report["trials"] == 1
    assert not report["passed"] and "(family " in report["failures"][0]


@pytest.mark.parametrize("bad,words", [
    ([[1, -1, 2], [0, 0, 0]], "other than trailing -1 padding"),
    ([[-1, -1, -1], [0, 0, 0]], "block of 0 tokens"),
    ([[3, 0, 0], [0, 0, 0]], "token id 3 outside the vocabulary"),
    ([[1, -2, -1], [0, 0, 0]], "other than trailing -1 padding"),
    ([[0.5, 1, 1], [0, 0, 0]], "non-integer token ids"),
    ([[0, 0, 0]], "returned 1 blocks for a batch of 2"),
])
def test_answer_checks_refuse_tampered_answers(bad, words):
    """The parent's answer check (vectorised for integer arrays, per row otherwise) refuses
    every malformed answer with the same verdict, and keeps good ones."""
    for answer in (np.array(bad), [list(r) for r in bad]):
        with pytest.raises(SamplerFailed, match=re.escape(words)):
            check_blocks(answer, 2, 2, 3)
    good = [[1, 2, 0], [0, -1, -1]]
    assert check_blocks(np.array(good), 2, 2, 3).tolist() == good
    assert check_blocks([[1, 2, 0], [0]], 2, 2, 3).tolist() == good


def test_without_replacement_skips_instances_with_too_few_paths():
    """Zero-draft instances can have fewer than K positive paths: without replacement the
    stream skips them (a given one is refused), and the registered rrsw sampler passes."""
    report = audit_sampler(law_samplers.sampler_for("rrsw"), paths=3, trials=3, runs=3000,
                           family="zero-draft", draft_sampling="without-replacement")
    assert report["passed"] and report["trials"] == 3
    few = next(audit_instance(3, 2, t, family="zero-draft") for t in range(50)
               if (audit_instance(3, 2, t, family="zero-draft").model()
                   .draft_path_probabilities() > 0).sum() < 3)
    with pytest.raises(ValueError, match="paths: .* fewer than 3 paths"):
        audit_sampler(law_samplers.sampler_for("rrsw"), paths=3, instances=[few], runs=3000,
                      draft_sampling="without-replacement")


def test_time_limit_stops_after_a_batch():
    """A time limit far below one batch's cost stops each instance after its first batch
    (deterministic whatever the load: every batch takes longer than a microsecond)."""
    result = runner.invoke(app, ["audit", "--sampler", f"{EXAMPLES / 'law_samplers.py'}:bv",
                                 "--trials", "2", "--time-limit", "0.000001", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [i["runs"] for i in out["instances"]] == [1024, 1024]
    bad = runner.invoke(app, ["audit", "--sampler", "x:y", "--time-limit", "0"])
    assert bad.exit_code == 2 and "--time-limit" in bad.stderr


# ---------------------------------------------------------------------------
# the sandbox's edges (issue 28)
# ---------------------------------------------------------------------------

def test_library_defaults_are_the_clis():
    """audit_sampler's defaults are the CLI's (6 trials, 60 s), one constant each."""
    params = inspect.signature(_library_audit_sampler).parameters
    assert params["trials"].default == SAMPLER_TRIALS == 6
    assert params["time_limit"].default == TIME_LIMIT == 60.0


def test_verbose_prints_progress_on_stderr(capsys):
    report = audit_sampler(ragged_sampler.rejection_sample, paths=1, trials=2, runs=2000,
                           layout="ragged", verbose=True, name="ragged-ref")
    err = capsys.readouterr().err.splitlines()
    assert report["passed"]
    assert [line.split(":")[1].strip().split()[1] for line in err] == ["1/2", "2/2"]
    assert all(line.startswith("audit ragged-ref: instance") and "2,000 runs" in line
               for line in err), err


def test_import_that_loops_gets_the_load_limit_and_names_it(tmp_path):
    path = tmp_path / "loops.py"
    path.write_text("while True:\n    pass\ndef f(*a):\n    return None\n")
    with pytest.raises(SamplerFailed) as caught:
        with SandboxedSampler(f"{path}:f", call_timeout=600, load_timeout=2):
            pass
    err = caught.value  # the load limit (2 s) ended it, not the call limit (600 s)
    assert err.kind == "timeout" and "within 2 s" in str(err)
    assert "load time limit" in str(err) and "--call-timeout" not in str(err)
    with pytest.raises(ValueError, match="load_timeout"):
        SandboxedSampler(f"{path}:f", load_timeout=0)


SPAWNER = """
import subprocess, sys
sys.path.insert(0, {examples!r})
from ragged_sampler import rejection_sample
_child = subprocess.Popen(["sleep", "300"])
open({pidfile!r}, "w").write(str(_child.pid))

def spawns(*args):
    return rejection_sample(*args)
"""


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie waiting for its reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("passing", [True, False])
def test_processes_the_sampler_spawns_end_with_the_audit(tmp_path, passing):
    """A sleeper the sampler starts at import is gone after the audit, pass or fail."""
    pidfile = tmp_path / "pid"
    path = tmp_path / "spawner.py"
    path.write_text(SPAWNER.format(examples=str(EXAMPLES), pidfile=str(pidfile)))
    if not passing:
        path.write_text(path.read_text() + "\ndef fails(*args):\n    raise RuntimeError('x')\n")
    report = None
    try:
        report = audit_sampler(f"{path}:{'spawns' if passing else 'fails'}", paths=1, trials=1,
                               runs=2000, layout="ragged")
    except SamplerFailed as err:
        assert not passing and err.kind == "exception"
    assert (report is not None and report["passed"]) == passing
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):  # clean up before failing
        os.kill(pid, 9)
        pytest.fail(f"the sampler's sleeper {pid} outlived the audit")


def test_syntax_error_and_missing_function_are_both_bad_input(tmp_path):
    """Both name nothing callable (the sampler never ran): kind "spec", exit 2 in the CLI."""
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n    pass\n")
    fine = tmp_path / "fine.py"
    fine.write_text("def g(*a):\n    return None\n")
    for spec, words in ((f"{broken}:f", "does not compile: SyntaxError"),
                        (f"{fine}:f", "has no attribute 'f'")):
        with pytest.raises(SamplerFailed) as caught:
            with SandboxedSampler(spec):
                pass
        assert caught.value.kind == "spec" and words in str(caught.value)
        result = runner.invoke(app, ["audit", "--sampler", spec, "--trials", "1"])
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr
