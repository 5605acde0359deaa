"""The exact bounds of the node-budget master (lp/colgen.py node_master_bounds) with the chain
duals snapped (_snapped_chain_duals): the float duals' solver error no longer decides whether
the optimum is certified within w.

Independent value: the optimum certified EXACTLY by the selection master's exact basis
certificate (engine.optimum on <= 128 leaves), a different LP and a different certificate.
Noise of 1e-9 on the float chain duals stands in for the solver error seen at V = 8, L = 4,
K = 2 (bounds 4.7e-8 apart before the snap).
"""

from fractions import Fraction

import numpy as np
import pytest
from speclp.lp import colgen, engine
from speclp.lp.instance import dirichlet_instance

CASES = [(3, 2, 3, 1), (3, 3, 2, 3), (2, 4, 2, 4)]


def _noise(count: int) -> np.ndarray:
    return np.array([(-1) ** i * 1e-9 * (1 + i % 3) for i in range(count)])


def _exact(values: np.ndarray) -> np.ndarray:
    return np.array([max(Fraction(float(v)), Fraction(0)) for v in values], dtype=object)


@pytest.mark.parametrize("vocab,depth,paths,seed", CASES)
def test_snapped_duals_give_the_exact_optimum(vocab, depth, paths, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=seed, denominator=12)
    model = inst.model(exact=True)
    exact = engine.optimum(inst, paths)
    assert exact.certified and exact.exact_value is not None
    master = colgen.master_data(model, paths, "iid", exact=True)
    result = colgen.solve_node_master(master)
    noisy = _exact(result.chain_duals + _noise(len(result.chain_duals)))
    plain = colgen._dual_bound(model, master, noisy)
    snapped = colgen._dual_bound(model, master, colgen._snapped_chain_duals(model, noisy))
    assert plain - exact.exact_value > colgen.Fraction(1, 10**9)  # the noise alone fails w
    assert snapped == exact.exact_value  # weak duality, tight: the optimal duals recovered


def _noisy_solver(monkeypatch):
    real = engine.solve_node_master

    def noisy(master, **kw):
        out = real(master, **kw)
        out.chain_duals = out.chain_duals + _noise(len(out.chain_duals))
        return out

    monkeypatch.setattr(engine, "solve_node_master", noisy)
    monkeypatch.setattr(engine, "EXACT_PHASE_MAX_LEAVES", 0)  # certify by exact bounds


def test_engine_certifies_within_w_despite_dual_noise(monkeypatch):
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=3, denominator=12)
    exact = engine.optimum(inst, 2)
    _noisy_solver(monkeypatch)
    bounded = engine.optimum(inst, 2)
    assert bounded.certified_within is not None and bounded.certified_within <= 1e-9
    lower = Fraction(bounded.details["lower_bound_exact"])
    upper = Fraction(bounded.details["upper_bound_exact"])
    assert lower <= exact.exact_value <= upper
    # without the snap the same run is NOT certified: the snap is what certifies it
    monkeypatch.setattr(colgen, "_snapped_chain_duals", lambda model, nu: nu)
    unsnapped = engine.optimum(inst, 2)
    assert unsnapped.certified_within is None and "NOT certified" in unsnapped.label


def test_tampered_bound_is_not_certified(monkeypatch):
    """A bound below the optimum (the weak-duality bound less 1e-6: what a wrong dual
    feasibility repair could give) falls below the exact lower bound: refused, never reported
    as certified."""
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=3, denominator=12)
    _noisy_solver(monkeypatch)
    real = colgen._dual_bound
    monkeypatch.setattr(colgen, "_dual_bound",
                        lambda model, master, nu: real(model, master, nu) - Fraction(1, 10**6))
    tampered = engine.optimum(inst, 2)
    assert tampered.certified_within is None and "NOT certified" in tampered.label
    assert Fraction(tampered.details["upper_bound_exact"]) < Fraction(
        tampered.details["lower_bound_exact"])


class _WrongOnce:
    """A HiGHS model whose `at`-th getInfo() reports an objective 100 too high: a warm
    solve that ends "optimal" at a wrong point (the V = 8, L = 4, K = 2 master's last solve
    was 1.6e-6 above a proven bound, and the loop stopped there)."""

    def __init__(self, h, at):
        self._h, self._at, self.calls = h, at, 0

    def __getattr__(self, name):
        return getattr(self._h, name)

    def getInfo(self):  # noqa: N802 - HiGHS's name
        from types import SimpleNamespace

        info = self._h.getInfo()
        self.calls += 1
        if self.calls == self._at:
            return SimpleNamespace(objective_function_value=info.objective_function_value + 100)
        return info


def test_master_value_above_the_bound_is_solved_again(monkeypatch):
    inst = dirichlet_instance(2, 5, alpha=0.7, seed=1, denominator=12)  # 4 master solves
    exact = engine.optimum(inst, 3)
    real = colgen._node_master_highs
    monkeypatch.setattr(colgen, "_node_master_highs", lambda model: _WrongOnce(real(model), 2))
    monkeypatch.setattr(engine, "EXACT_PHASE_MAX_LEAVES", 0)
    bounded = engine.optimum(inst, 3)
    assert any("above the bound" in note and "solved cold (optimal)" in note
               for note in bounded.notes), bounded.notes
    assert bounded.certified_within is not None and bounded.certified_within <= 1e-9
    lower = Fraction(bounded.details["lower_bound_exact"])
    upper = Fraction(bounded.details["upper_bound_exact"])
    assert lower <= exact.exact_value <= upper
