"""THE optimum entry point speclp.lp.optimum: column generation = enumerated full LP exactly,
the optimal selection mixture, the record and its contract.

Independent references: the enumerated full LP (a different program: every draft
configuration explicit), brute-force enumeration of ordered draft tuples (verifiers.drafts)
for the law of a selection rule, THEORY.md anchors.
"""

import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp import Optimum, optimum
from speclp.lp.hitting import hitting_function
from speclp.lp.instance import bv_toy, dirichlet_instance, from_rows
from speclp.lp.node import node_optimum
from speclp.verifiers.drafts import ordered_configurations


def instances():
    """(V, L, K, draft sampling) small enough for the enumerated LP, rational rows."""
    return st.sampled_from([
        (2, 1, 2), (3, 1, 3), (2, 2, 2), (3, 2, 2), (2, 3, 2), (2, 2, 3), (2, 3, 3), (3, 2, 3),
        (4, 1, 4), (2, 4, 2),
    ]).flatmap(lambda shape: st.tuples(
        st.just(shape), st.sampled_from(["iid", "without-replacement"]),
        st.integers(0, 10**6), st.sampled_from([0.3, 0.8, 2.0])))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=instances())
def test_colgen_equals_full_lp_exactly(case):
    (vocab, depth, paths), draft_sampling, seed, alpha = case
    if draft_sampling == "without-replacement" and paths > vocab**depth:
        paths = vocab**depth
    inst = dirichlet_instance(vocab, depth, alpha=alpha, seed=seed, denominator=24)
    if draft_sampling == "without-replacement":
        positive = sum(1 for x in inst.model(exact=True).draft_path_probabilities() if x != 0)
        paths = min(paths, positive)
    engine = optimum(inst, paths, draft_sampling, method="colgen")
    full = optimum(inst, paths, draft_sampling, method="full")
    default = optimum(inst, paths, draft_sampling)  # closed form at L = 1 with iid drafts
    assert engine.method == "colgen" and full.method == "full"
    assert default.method == ("closed-form" if depth == 1 and draft_sampling == "iid"
                              else "colgen")
    assert engine.certified, engine.certificate
    assert full.certified, full.certificate
    assert engine.exact_value == full.exact_value == default.exact_value  # exact, no tolerance
    assert engine.exact == str(engine.exact_value) and engine.value == float(engine.exact_value)


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 1), (3, 2, 2, 2), (2, 3, 3, 4)])
def test_mixture_realises_the_optimum(vocab, depth, paths, seed, draft_sampling):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=seed, denominator=16)
    record = optimum(inst, paths, draft_sampling)
    assert record.certified and record.details["mixture_value_matches"]
    mixture = record.mixture
    assert mixture.exact and all(isinstance(w, Fraction) and w > 0 for w in mixture.weights)
    assert sum(mixture.weights) == 1
    # r is the law of "draw a priority with probability lambda, select the highest-priority
    # drafted path", computed here by enumerating the ordered draft tuples
    model = inst.model(exact=True)
    configs = ordered_configurations(model, paths, draft_sampling)
    r = [Fraction(0)] * vocab**depth
    for priority, weight in zip(mixture.priorities, mixture.weights, strict=True):
        rank = {int(x): i for i, x in enumerate(priority)}
        for drafted, probability in zip(configs.paths, configs.probability, strict=True):
            r[min((int(x) for x in drafted), key=rank.__getitem__)] += weight * probability
    assert list(mixture.leaf_law) == r
    # r lies in P_K and BV with r in place of q attains the optimum exactly
    hit = hitting_function(model, paths, draft_sampling)
    assert hit.minimum(np.array(r, dtype=object), exact=True)[0] == 0
    assert node_optimum(model, exact=True, leaf_law=np.array(r, dtype=object))[1] == \
        record.exact_value
    assert json.dumps(mixture.to_json())  # fraction strings, plain lists


def test_single_step_anchor_and_toy():
    # THEORY section 4: p = (.5,.3,.2), q = (.2,.3,.5), K = 2 iid: optimal acceptance .86
    p = [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]
    q = [Fraction(1, 5), Fraction(3, 10), Fraction(1, 2)]
    inst = from_rows(np.array([p] * 4, dtype=object), np.array([q] * 4, dtype=object), 1)
    assert optimum(inst, 2).exact == "93/50"
    # THEORY section 2: BV accepts 11/9, 5/3, 166/81 tokens on the toy (K = 1: BV is optimal)
    for depth, accepted in ((2, Fraction(11, 9)), (3, Fraction(5, 3)), (4, Fraction(166, 81))):
        assert optimum(bv_toy(depth), 1).exact_value == 1 + accepted


def test_float_instance_is_certified_in_its_binary_values():
    inst = dirichlet_instance(3, 2, alpha=0.5, seed=11)
    record = optimum(inst, 3)
    assert record.certified and record.exact is None and record.exact_value is not None
    uncertified = optimum(inst, 3, certify=False)
    assert not uncertified.certified and uncertified.certificate == "not requested"
    assert abs(uncertified.value - record.value) <= 1e-9
    assert record.mixture.exact and not uncertified.mixture.exact


def test_record_json_and_bad_arguments():
    record = optimum(dirichlet_instance(2, 2, seed=0, denominator=8), 2)
    assert isinstance(record, Optimum)
    out = record.to_json()
    assert {"value", "exact", "certified", "certificate", "status", "method", "seconds", "size",
            "notes"} <= set(out)
    assert "mixture" not in out and "mixture" in record.to_json(mixture=True)
    json.dumps(out)
    inst = bv_toy(2)
    with pytest.raises(ValueError, match="method"):
        optimum(inst, 2, method="simplex")
    with pytest.raises(ValueError, match="paths"):
        optimum(inst, 0)
    with pytest.raises(ValueError, match="draft_sampling"):
        optimum(inst, 2, draft_sampling="sometimes")
    with pytest.raises(ValueError, match="backend"):
        optimum(inst, 2, backend="cvxpy")  # cvxpy only for the enumerated LP
    assert optimum(inst, 2, method="full", backend="cvxpy").certified


def test_importing_the_lp_package_does_not_import_torch():
    code = ("import sys, speclp.lp, speclp.lp.class_lp, speclp.lp.node_form, speclp.lp.closed_form; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_exact_pricing_adds_what_the_degenerate_float_master_did_not_need():
    """Regression: the float duals of a degenerate master priced every priority at 0 while
    the exact master's duals (another optimal dual) had an improving priority; the exact
    phase adds it and certifies (before: an endless float/exact loop)."""
    inst = dirichlet_instance(2, 2, alpha=0.3, seed=12345, denominator=24)
    record = optimum(inst, 2, "without-replacement", method="colgen")
    assert record.certified, record.certificate
    assert record.exact_value == optimum(inst, 2, "without-replacement", method="full").exact_value
    assert any("exact pricing added" in note for note in record.notes)


@pytest.mark.parametrize("method", ["colgen", "full"])
def test_time_limit_gives_a_labelled_uncertified_record(method):
    inst = dirichlet_instance(3, 2, alpha=0.7, seed=1)
    record = optimum(inst, 3, method=method, time_limit=1e-6)
    assert record.status == "time_limit" and not record.certified and record.value is None
    assert "time limit" in record.certificate and record.label.startswith("NOT certified")
    json.dumps(record.to_json())  # a JSON-ready record, no exception


def test_colgen_time_limit_keeps_a_lower_bound(monkeypatch):
    import types

    from speclp.lp import colgen

    inst = dirichlet_instance(2, 6, alpha=0.7, seed=4)  # 132 float master solves
    full = colgen.solve_colgen(inst.model(exact=True), paths=3)
    assert full.status == "optimal" and full.certificate.certified
    # a deterministic clock: every reading is one second later, so a 12 s limit stops the
    # float phase after a few master solves whatever the machine's load
    clock = iter(range(10**6))
    monkeypatch.setattr(colgen, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    stopped = colgen.solve_colgen(inst.model(exact=True), paths=3, time_limit=12.0)
    assert stopped.status == "time_limit" and stopped.certificate is None
    assert 1 <= stopped.iterations < full.iterations
    assert stopped.value <= full.value + 1e-12  # a restriction of the master: a lower bound
    assert any("lower bound" in note for note in stopped.notes)


def test_time_limit_in_the_exact_phase_keeps_the_float_optimum_labelled(monkeypatch):
    import types

    from speclp.lp import colgen
    from speclp.lp.certify import Certificate

    inst = dirichlet_instance(3, 2, alpha=0.7, seed=1)
    reference = optimum(inst, 3)
    assert reference.certified
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(colgen, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    real = colgen.certify_master

    def slow_round(master, chosen, max_rounds=6, time_limit=None):
        lp, solution, _, _ = real(master, chosen, max_rounds, time_limit)
        clock.now += 1000.0  # this exact round "took" 1000 s, past the limit
        other = np.arange(master.num_leaves)[::-1].copy()
        return lp, solution, Certificate(False, None, "forced: not certified", 0.0), other

    monkeypatch.setattr(colgen, "certify_master", slow_round)
    record = optimum(inst, 3, method="colgen", time_limit=10.0)
    assert record.status == "optimal" and not record.certified
    assert "exact phase" in record.certificate and record.label.startswith("NOT certified")
    assert record.value == pytest.approx(reference.value, abs=1e-9)  # float optimum, labelled


def test_status_is_typed_and_the_json_keeps_the_solvers_word():
    """Optimum.status is a Status (issue 29); to_json prints the solver's own word, so a
    word outside the enum (here a made-up one) is OTHER in the record and verbatim in JSON."""
    from speclp.lp.engine import Status
    from speclp.lp.instance import bv_toy
    record = optimum(bv_toy(1), 1)
    assert record.status is Status.OPTIMAL and record.status == "optimal"
    assert f"{record.status}" == "optimal" and json.loads(json.dumps(record.to_json()))["status"] == "optimal"
    odd = Optimum(value=None, exact_value=None, certified=False, certificate="x",
                  status="model_error_17", method="full", rational=True, seconds=0.0)
    assert odd.status is Status.OTHER and odd.solver_status == "model_error_17"
    assert odd.to_json()["status"] == "model_error_17"
    assert Status.of("time_limit") is Status.TIME_LIMIT
