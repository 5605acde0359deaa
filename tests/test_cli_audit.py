"""`speclp audit`: passes shipped verifiers, catches the broken GBV, rejects bad input."""

import json

from speclp.cli import app
from typer.testing import CliRunner

runner = CliRunner()


def test_audit_passes_gbv_with_ties():
    result = runner.invoke(app, ["audit", "--verifier", "gbv", "--paths", "3", "--vocab", "3",
                                 "--depth", "2", "--trials", "3", "--ties", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] and out["max_tv"] <= 1e-12 and out["lossless_claimed"]


def test_audit_catches_broken_gbv(tmp_path):
    result = runner.invoke(app, ["audit", "--verifier", "gbv_broken", "--paths", "2", "--vocab", "3",
                                 "--depth", "2", "--trials", "10", "--ties", "--json",
                                 "--save-dir", str(tmp_path)])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["max_tv"] > 1e-3
    saved = json.loads(open(out["saved"]).read())
    assert saved["vocab_size"] == 3


def test_audit_bad_input():
    for args, flag in ((["--verifier", "nope"], "--verifier"),
                       (["--verifier", "bv", "--vocab", "1"], "--vocab"),
                       (["--verifier", "bv", "--draft-sampling", "x"], "--draft-sampling")):
        result = runner.invoke(app, ["audit", *args])
        assert result.exit_code == 2 and flag in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_audit_verifier_family_and_conflicts():
    result = runner.invoke(app, ["audit", "--verifier", "gbv_clipped", "--family", "clipped-ties",
                                 "--trials", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] and out["family"] == "clipped-ties"
    for args, flag in ((["--family", "nope"], "--family"),
                       (["--family", "tiny", "--ties"], "--ties")):
        bad = runner.invoke(app, ["audit", "--verifier", "gbv", *args])
        assert bad.exit_code == 2 and flag in bad.stderr
