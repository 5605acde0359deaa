"""docs/check_theory.py recomputes the numbers quoted in docs/theory.md: its fast mode
passes, and a tampered computation makes it fail (it is not a check that cannot fail)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

CHECK_THEORY = Path(__file__).resolve().parents[1] / "docs" / "check_theory.py"


def _load_check_theory():
    spec = importlib.util.spec_from_file_location("check_theory", CHECK_THEORY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_theory_fast_mode_has_no_failure():
    out = subprocess.run([sys.executable, str(CHECK_THEORY)], capture_output=True, text=True,
                         timeout=600)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert lines[-1] == "0 failure(s)"
    assert not [line for line in lines if line.startswith("FAIL")]
    assert sum(line.startswith("PASS") for line in lines) >= 20  # every group of checks ran


def test_check_theory_fails_on_a_tampered_value(monkeypatch):
    module = _load_check_theory()
    original = module.node_optimum

    def off_by_a_ninth(*args, **kwargs):
        beta, value = original(*args, **kwargs)
        return beta, value + Fraction(1, 9)

    monkeypatch.setattr(module, "node_optimum", off_by_a_ninth)
    module.FAILURES.clear()
    module.single_path()
    assert module.FAILURES and all(f.startswith("2.4:") for f in module.FAILURES)
    monkeypatch.setattr(module, "CHECKS", [module.single_path])
    module.FAILURES.clear()
    assert module.main([]) == 1
