"""speclp.proofs.gap and `speclp gap`: anchors, claims, JSON contract, exit codes."""

import json
from fractions import Fraction

import numpy as np
import pytest
from speclp.cli import app
from speclp.lp.instance import (
    bv_toy,
    dirichlet_instance,
    from_rows,
    instance_from_json,
    ties_instance,
)
from speclp.proofs import gap as gap_module
from speclp.proofs.gap import DEFAULT_VERIFIERS, gap
from speclp.verifiers.exact import exact_result
from typer.testing import CliRunner

runner = CliRunner()
UNIFORM = ["1/3", "1/3", "1/3"]


def anchor_instance():
    """THEORY.md section 4 anchor: L = 1, p = (.5, .3, .2), q = (.2, .3, .5)."""
    return instance_from_json({
        "vocab_size": 3, "depth": 1,
        "target": [["1/2", "3/10", "1/5"], UNIFORM, UNIFORM, UNIFORM],
        "draft": [["1/5", "3/10", "1/2"], UNIFORM, UNIFORM, UNIFORM],
    }, "anchor")


def test_single_step_anchor_k2():
    """K = 2 i.i.d.: optimum accepts .86 (Khisti), RRS (SpecInfer) .76, K-SEQ .7914."""
    result = gap(anchor_instance(), 2)
    assert result["failures"] == []
    assert result["optimum"]["certified"] is True
    assert result["optimum"]["exact"] == "93/50"  # 1 + 0.86
    assert result["class_optimum"]["exact"] == "93/50"  # the same solve (theorem class = full)
    assert result["verifiers"]["specinfer"]["block_efficiency"] == pytest.approx(1.76, abs=1e-12)
    assert result["verifiers"]["spectr"]["block_efficiency"] == pytest.approx(1.7914, abs=5e-5)
    # NSS: 1 + sum_t p(t) (1 - (1 - q(t))^2) = 1 + .18 + .153 + .15
    assert result["verifiers"]["nss"]["block_efficiency"] == pytest.approx(1.483, abs=1e-12)
    rrs = result["verifiers"]["specinfer"]
    assert rrs["gap"] == pytest.approx(0.10, abs=1e-12)
    assert rrs["ratio"] == pytest.approx(1.76 / 1.86, abs=1e-12)


@pytest.mark.parametrize("depth,bv", [(2, Fraction(20, 9)), (3, Fraction(8, 3))])
def test_k1_optimum_is_bv_toy_anchor(depth, bv):
    """K = 1: the optimum is BV's block efficiency (THEORY section 2 toy anchors); GBV = BV."""
    result = gap(bv_toy(depth), 1)
    assert result["optimum"]["exact"] == str(bv)
    for name in ("bv", "gbv", "traversal"):
        if name in result["verifiers"]:
            assert result["verifiers"][name]["block_efficiency"] == pytest.approx(float(bv),
                                                                                  abs=1e-12)
            assert abs(result["verifiers"][name]["gap"]) < 1e-12


def test_every_verifier_below_optimum_and_lossless():
    inst = dirichlet_instance(2, 2, alpha=0.7, seed=3)
    result = gap(inst, 3)
    assert result["failures"] == []
    assert result["optimum"]["certified"] is True
    optimum = result["optimum"]["value"]
    assert list(result["verifiers"]) == list(DEFAULT_VERIFIERS)
    assert "nodeopt" in result["verifiers"]  # a registered verifier appears unasked
    for name, v in result["verifiers"].items():
        assert v["gap"] == pytest.approx(optimum - v["block_efficiency"], abs=1e-15)
        if not v["lossless_claimed"]:  # published but lossy (spectr_gbv): reported, not held
            assert v["tv"] > 1e-3, name
            continue
        assert v["block_efficiency"] <= optimum + 1e-9, name
        assert v["tv"] <= 1e-12, name
        assert v["gap"] == pytest.approx(optimum - v["block_efficiency"], abs=1e-15)
    assert result["class_optimum"]["value"] == optimum
    assert "theorem" in result["class_optimum"]["source"]


def test_unknown_verifier_is_refused_naming_it():
    with pytest.raises(gap_module.UnknownVerifier, match="'no_such_verifier'"):
        gap(bv_toy(2), 1, verifiers=["bv", "no_such_verifier"])
    result = gap(bv_toy(2), 1, verifiers=["bv", "nodeopt"])
    assert list(result["verifiers"]) == ["bv", "nodeopt"]


def test_default_comparison_comes_from_the_registry():
    """Every lossless verifier and the not-claimed-lossless ones; broken ones only by name."""
    from speclp.verifiers.registry import REGISTRY

    assert set(DEFAULT_VERIFIERS) == {n for n, s in REGISTRY.items()
                                      if s.lossless or not s.draft_sampling}
    assert {"nodeopt", "spectr_gbv", "traversal"} <= set(DEFAULT_VERIFIERS)
    assert not {"gbv_broken", "bv_first_failure"} & set(DEFAULT_VERIFIERS)


def test_rational_instance_gives_exact_laws_and_exact_zero_tv():
    inst = dirichlet_instance(3, 2, alpha=0.7, seed=1, denominator=12)
    result = gap(inst, 3)
    assert result["failures"] == []
    for name, row in result["verifiers"].items():
        assert row["tv_kind"] == "exact", name
        assert Fraction(row["exact"]) == pytest.approx(row["block_efficiency"], abs=1e-12)
        if row["lossless_claimed"]:
            assert row["tv_exact"] == "0" and row["tv"] == 0.0, name
        else:  # spectr_gbv as released: lossy, exactly
            assert Fraction(row["tv_exact"]) > 0
    evaluations = {name: row["evaluation"] for name, row in result["verifiers"].items()}
    assert evaluations["specinfer"] == "node recursion"
    assert evaluations["nodeopt"] == evaluations["gbv"] == "selection law"
    assert evaluations["traversal"] == "sibling recursion" and evaluations["bv"] == "single path"


def test_lossy_verifier_is_reported():
    """The deliberately broken BV (stops at the first failure) is caught, not dropped."""
    result = gap(dirichlet_instance(2, 3, seed=1), 1, verifiers=["bv_first_failure"])
    assert any(f.startswith("bv_first_failure: lossy") for f in result["failures"])


def inflate(monkeypatch, name, amount):
    """Make the exact law of `name` report amount more block efficiency (a planted bug)."""
    real = gap_module.exact_result

    def fake(model, verifier, **kw):
        res = real(model, verifier, **kw)
        if verifier == name:
            res.block_efficiency = res.block_efficiency + amount
        return res

    monkeypatch.setattr(gap_module, "exact_result", fake)


def test_verifier_above_optimum_is_reported(monkeypatch):
    """GBV attains the optimum 1.86 on the anchor; 1e-6 more is over the 1e-9 tolerance."""
    inflate(monkeypatch, "gbv", 1e-6)
    result = gap(anchor_instance(), 2)
    assert len(result["failures"]) == 1
    assert result["failures"][0].startswith("gbv: exact block efficiency")
    assert "exceeds the certified exact optimum 93/50" in result["failures"][0]


def test_within_tolerance_is_not_reported(monkeypatch):
    """Float laws only (no exact enumeration): 1e-10 is within the 1e-9 tolerance."""
    monkeypatch.setattr(gap_module, "EXACT_WORK", 0)
    inflate(monkeypatch, "gbv", 1e-10)
    assert gap(anchor_instance(), 2)["failures"] == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="draft_sampling"):
        gap(bv_toy(2), 2, draft_sampling="sometimes")
    with pytest.raises(ValueError, match="paths"):
        gap(bv_toy(2), 0)
    with pytest.raises(ValueError, match="method"):
        gap(bv_toy(2), 2, method="simplex")


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
def test_engine_and_enumerated_lp_give_the_same_gaps(draft_sampling):
    inst = dirichlet_instance(2, 2, alpha=0.7, seed=5, denominator=12)
    engine = gap(inst, 2, draft_sampling=draft_sampling)
    full = gap(inst, 2, draft_sampling=draft_sampling, method="full")
    assert engine["method"] == "colgen" and full["method"] == "full"
    assert engine["optimum"]["exact"] == full["optimum"]["exact"] is not None
    for name, v in engine["verifiers"].items():
        assert v["gap"] == full["verifiers"][name]["gap"]


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def test_cli_json(tmp_path):
    path = anchor_instance().save(tmp_path / "anchor.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["optimum"]["exact"] == "93/50"
    assert out["optimum"]["certified"] is True
    assert out["verifiers"]["specinfer"]["block_efficiency"] == pytest.approx(1.76, abs=1e-12)


def test_cli_table_labels_certification(tmp_path):
    path = anchor_instance().save(tmp_path / "anchor.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "2"])
    assert result.exit_code == 0, result.output
    assert "K-path optimum (closed-form)" in result.stdout and "certified" in result.stdout
    assert "same solve" in result.stdout
    assert "specinfer" in result.stdout


def test_cli_without_replacement_flags_iid_only_verifiers(tmp_path):
    """GBV's skewed law r(y) = F(y)^K - F(y^-)^K is the law of the best of K I.I.D. draws:
    with drafts drawn without replacement GBV is lossy. It is reported with its TV and
    marked as not claimed lossless there (not held to the claims); the others hold."""
    path = anchor_instance().save(tmp_path / "anchor.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "2", "--draft-sampling",
                                 "without-replacement", "--json", "--save-dir",
                                 str(tmp_path / "ce")])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["draft_sampling"] == "without-replacement"
    assert out["verifiers"]["gbv"]["lossless_claimed"] is False
    assert out["verifiers"]["gbv"]["tv"] > 1e-3
    for name in ("bv", "rrsw", "nss"):
        assert out["verifiers"][name]["lossless_claimed"] is True
        assert out["verifiers"][name]["tv"] <= 1e-12
        assert out["verifiers"][name]["block_efficiency"] <= out["optimum"]["value"] + 1e-9


def test_lossy_verifier_claimed_lossless_fails(tmp_path):
    """A verifier that claims losslessness and is lossy makes `gap` exit 1."""
    from speclp.verifiers.law import REGISTRY

    path = anchor_instance().save(tmp_path / "anchor.json")
    spec = REGISTRY["gbv"]
    original = spec.draft_sampling
    spec.draft_sampling = ("iid", "without-replacement")  # a false claim, for this test only
    try:
        result = runner.invoke(app, ["gap", str(path), "--paths", "2", "--draft-sampling",
                                     "without-replacement", "--json", "--save-dir",
                                     str(tmp_path / "ce")])
    finally:
        spec.draft_sampling = original
    assert result.exit_code == 1, result.output
    assert any(f.startswith("gbv: lossy") for f in json.loads(result.stdout)["failures"])


@pytest.mark.parametrize("content,field", [
    (None, "no such file"),
    ("{not json", "malformed JSON"),
    ('{"vocab_size": 1, "depth": 1, "target": [], "draft": []}', "vocab_size"),
])
def test_cli_bad_input_exit_2(tmp_path, content, field):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["gap", str(path), "--paths", "2"])
    assert result.exit_code == 2
    assert field in result.output


def test_cli_bad_options_exit_2(tmp_path):
    path = anchor_instance().save(tmp_path / "anchor.json")
    for args in (["--paths", "0"], ["--backend", "glpk"], ["--draft-sampling", "x"],
                 ["--paths", "4", "--draft-sampling", "without-replacement"],
                 ["--method", "simplex"], ["--backend", "cvxpy"]):
        result = runner.invoke(app, ["gap", str(path), *args])
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("error: --"), result.output


def test_cli_claim_failure_exit_1(tmp_path, monkeypatch):
    inflate(monkeypatch, "gbv", 1e-3)
    path = anchor_instance().save(tmp_path / "anchor.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "2", "--json", "--save-dir",
                                 str(tmp_path / "ce")])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert any(f.startswith("gbv: exact block efficiency") for f in out["failures"])
    assert (tmp_path / "ce" / "gap-K2-anchor.json").exists()


def test_optimum_time_limit_is_one_line_and_exit_1(tmp_path):
    # the colgen float phase checks its clock before every master solve: a limit of a
    # microsecond is hit before the optimum is found (a labelled failure, never a traceback)
    path = dirichlet_instance(3, 2, alpha=0.7, seed=1).save(tmp_path / "i.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "3", "--time-limit", "1e-6"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("CLAIM FAILED: K-path optimum"), result.output
    assert "time limit" in lines[0] and "Traceback" not in result.output
    result = runner.invoke(app, ["gap", str(path), "--paths", "3", "--time-limit", "1e-6",
                                 "--json"])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["optimum"]["status"] == "time_limit" and out["optimum"]["certified"] is False
    assert out["optimum"]["value"] is None
    for bad in (["--time-limit", "0"], ["--samples", "1"], ["--max-enumerated", "0"]):
        result = runner.invoke(app, ["gap", str(path), "--paths", "2", *bad])
        assert result.exit_code == 2 and result.output.startswith(f"error: {bad[0]}"), result.output


def test_gap_raises_optimum_not_found_with_the_record():
    inst = dirichlet_instance(3, 2, alpha=0.7, seed=1)
    with pytest.raises(gap_module.OptimumNotFound) as info:
        gap(inst, 3, time_limit=1e-6)
    assert info.value.record["status"] == "time_limit"
    assert "\n" not in str(info.value)


def test_estimated_verifiers_are_labelled_and_close_to_the_exact_laws(monkeypatch):
    # V=2, L=3, K=3: 512 ordered tuples. With max_enumerated below that, multi-path verifiers
    # are estimated from sampled configurations; the exact laws (max_enumerated above) are the
    # independent reference: every estimate within 5 standard errors of its exact value
    inst = dirichlet_instance(2, 3, alpha=0.7, seed=3)
    exact = gap(inst, 3)
    # node recursion: 98 rule evaluations, selection laws and single paths: 8 paths, ordered
    # tuples (traversal, spectr_gbv): 512
    monkeypatch.setattr(gap_module, "MAX_STRUCTURED", 0)  # structure work capped at 20 too
    estimated = gap(inst, 3, max_enumerated=20, samples=4000, seed=11)
    assert estimated["failures"] == [] and exact["failures"] == []
    labelled = 0
    for name, row in estimated["verifiers"].items():
        reference = exact["verifiers"][name]
        assert reference["estimate"] is None
        if row["estimate"] is None:  # single paths and selection laws: 8 paths, exact
            assert row["block_efficiency"] == reference["block_efficiency"]
            continue
        labelled += 1
        est = row["estimate"]
        assert row["tv"] is None and est["samples"] == 4000
        assert est["ci_low"] < row["block_efficiency"] < est["ci_high"]
        assert abs(row["block_efficiency"] - reference["block_efficiency"]) <= 5 * est["standard_error"]
    assert labelled >= 8


def test_cli_table_labels_estimates(tmp_path):
    path = dirichlet_instance(2, 3, alpha=0.7, seed=3).save(tmp_path / "i.json")
    # every verifier has a structure on i.i.d. drafts; drafts without replacement enumerate
    result = runner.invoke(app, ["gap", str(path), "--paths", "3", "--max-enumerated", "100",
                                 "--samples", "500", "--draft-sampling", "without-replacement"])
    assert result.exit_code == 0, result.output
    assert "ESTIMATE: 95% CI" in result.stdout


def test_cli_table_short_fractions_exact_tv_and_not_claimed(tmp_path):
    path = dirichlet_instance(3, 2, alpha=0.7, seed=1, denominator=12).save(tmp_path / "r.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "3"])
    assert result.exit_code == 0, result.output
    assert "12017/4608" in result.stdout  # the optimum's fraction is short: shown
    assert "chars: --json" in result.stdout  # spectr's is long: pointed to
    assert "TV 0 (exact)" in result.stdout and "e-17" not in result.stdout
    assert "not claimed lossless" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) < 200
    out = json.loads(runner.invoke(app, ["gap", str(path), "--paths", "3", "--json"]).stdout)
    assert len(out["verifiers"]["spectr"]["exact"]) > 100  # the full fraction is in --json


def test_cli_verifiers_option(tmp_path):
    path = anchor_instance().save(tmp_path / "anchor.json")
    result = runner.invoke(app, ["gap", str(path), "--paths", "2", "--verifiers", "bv,nodeopt",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)["verifiers"]) == ["bv", "nodeopt"]
    result = runner.invoke(app, ["gap", str(path), "--paths", "2", "--verifiers", "bv,nope"])
    assert result.exit_code == 2
    assert result.output.startswith("error: --verifiers: unknown verifier 'nope'"), result.output
    result = runner.invoke(app, ["gap", "--help"])
    assert "spectr_gbv" in result.output and "broken" in result.output


def test_certified_within_w_by_exact_bounds(monkeypatch):
    """With the exact basis certificate skipped (node-budget master), the exact bounds
    bracket the exactly certified optimum and are labelled apart from it; tampered duals
    widen them (NOT certified)."""
    from speclp.lp import engine

    inst = dirichlet_instance(3, 2, alpha=0.7, seed=1, denominator=12)
    exact = engine.optimum(inst, 3)
    assert exact.certified and exact.certified_within is None
    monkeypatch.setattr(engine, "EXACT_PHASE_MAX_LEAVES", 0)
    bounded = engine.optimum(inst, 3)
    assert not bounded.certified and bounded.certified_within is not None
    assert bounded.certified_within <= 1e-9 and bounded.details["master"] == "node-budget"
    lower = Fraction(bounded.details["lower_bound_exact"])
    upper = Fraction(bounded.details["upper_bound_exact"])
    assert lower <= exact.exact_value <= upper
    assert bounded.label.startswith("certified within")
    result = gap(inst, 3)  # through gap, with the exact certificate still skipped
    assert result["optimum"]["certified_within"] is not None and result["failures"] == []
    real = engine.solve_node_master

    def tampered_duals(master, **kw):
        out = real(master, **kw)
        out.chain_duals = out.chain_duals * 0  # (x 1.01 is repaired by the snap: certified)
        return out

    monkeypatch.setattr(engine, "solve_node_master", tampered_duals)
    tampered = engine.optimum(inst, 3)
    assert tampered.certified_within is None and "NOT certified" in tampered.label


def test_structure_is_not_capped_by_the_enumeration_limit():
    """--max-enumerated limits enumerations; laws by structure have their own, larger cap."""
    result = gap(dirichlet_instance(2, 3, alpha=0.7, seed=3), 3, max_enumerated=20,
                 samples=200)
    rows = result["verifiers"]
    assert rows["specinfer"]["evaluation"] == "node recursion"
    assert rows["nodeopt"]["evaluation"] == "selection law"
    assert rows["traversal"]["evaluation"] == "sibling recursion"
    assert rows["spectr_gbv"]["evaluation"] == "first-visit recursion"


def test_undefined_spectr_gbv_has_no_block_efficiency():
    """spectr_gbv as released is undefined where a correction row is all zero (ties_instance
    (3, 2, seed 0) at K = 2: 25 of the ordered configurations, one node): gap reports where
    and how much, and no block efficiency; the undefined mass is 1 - the law's mass of the
    ordered enumeration, computed apart."""
    inst = ties_instance(3, 2, seed=0)
    result = gap(inst, 2, verifiers=["spectr_gbv", "traversal"])
    row = result["verifiers"]["spectr_gbv"]
    assert row["block_efficiency"] is None and row["gap"] is None and row["ratio"] is None
    law = exact_result(inst.model(exact=True), "spectr_gbv", 2, enumeration="ordered")
    assert law.undefined_configurations == 25
    assert row["undefined"]["count"] == 1 and row["undefined"]["unit"] == "nodes"
    assert Fraction(row["undefined"]["mass_exact"]) == 1 - law.emit.sum() > 0
    assert result["verifiers"]["traversal"]["undefined"] is None
    assert result["failures"] == []  # not claimed lossless: reported, never a failure


def test_traversal_stays_rational_no_false_failure():
    """The instance on which traversal's walker turned into floats (int 0 / int 1 = 0.0) and
    gap failed it falsely: now exact, TV exactly 0, no failure."""
    target = [[2, 0, 2], [1, 3, 1], [0, 0, 2], [3, 0, 1], [0, 2, 1], [2, 1, 0], [1, 2, 2],
              [2, 3, 1], [2, 0, 1], [2, 1, 0], [1, 2, 1], [1, 0, 0], [0, 2, 2]]
    draft = [[2, 1, 2], [2, 3, 1], [2, 2, 0], [0, 2, 1], [2, 2, 1], [3, 1, 2], [1, 2, 1],
             [1, 2, 1], [2, 1, 0], [2, 0, 3], [0, 3, 1], [1, 3, 0], [0, 2, 1]]

    def rows(weights):
        out = np.empty((len(weights), 3), dtype=object)
        for i, w in enumerate(weights):
            out[i] = [Fraction(x, sum(w)) for x in w]
        return out

    inst = from_rows(rows(target), rows(draft), 2, "floats-before")
    result = gap(inst, 3, verifiers=["traversal"])
    assert result["failures"] == []
    assert result["verifiers"]["traversal"]["tv_exact"] == "0"


@pytest.mark.parametrize("vocab,depth,paths", [(3, 2, 3), (2, 3, 3)])
def test_cli_gap_on_a_small_float_instance_imports_no_torch(tmp_path, vocab, depth, paths):
    """`speclp gap` on a small float instance runs every structure-aware law in numpy float64:
    torch is never imported (it cost 3.4 s of a 3.8 s run). Checked in a fresh process at exit."""
    import subprocess
    import sys

    path = dirichlet_instance(vocab, depth, seed=1).save(tmp_path / "d.json")
    code = ("import sys\nfrom speclp.cli import app\ntry:\n"
            f"    app(['gap', {str(path)!r}, '--paths', '{paths}', '--json'])\n"
            "except SystemExit as stop:\n    code = stop.code\n"
            "print('EXIT', code, 'TORCH', 'torch' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "EXIT 0 TORCH False" in out.stderr, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["failures"] == []
    assert result["optimum"]["certified"] is True
    evaluations = {v["evaluation"] for v in result["verifiers"].values()}
    assert "estimate" not in evaluations and len(result["verifiers"]) >= 13
