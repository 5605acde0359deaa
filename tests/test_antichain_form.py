"""The antichain form of the K-path LP (docs/theory.md section 7.5, i.i.d. drafts): its hull
separation against brute force over every antichain, its optimum against the engine's
certified optimum and the enumerated full LP, exactly in rationals, and its in-out cutting
planes with exact bounds (the engine's route at V^L >= 512 leaves, depth <= 3) against the
same certified optima, with tampered runs that must not certify."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from speclp.inputs import BadArgument
from speclp.lp import engine, optimum
from speclp.lp.antichain import (
    antichain_bounds,
    antichain_feasible,
    antichain_hulls,
    antichain_inout,
    antichain_of,
    antichain_violations,
    path_masses,
)
from speclp.lp.hitting import g_exact
from speclp.lp.instance import bv_toy, dirichlet_instance, ties_instance
from speclp.lp.node_form import all_antichains, antichain_form_optimum, node_form_optimum
from speclp.verifiers.tree import node_parents, num_nodes


def is_antichain(members, vocab, depth):
    """No member is a proper prefix of another (walk each member's parents)."""
    parents, _ = node_parents(vocab, depth)
    chosen = set(members)
    for z in members:
        u = parents[z]
        while u > 0:
            if u in chosen:
                return False
            u = parents[u]
    return True


def brute_antichains(vocab, depth):
    """Every nonempty antichain, by testing every subset of nodes (tiny trees only)."""
    nodes = range(1, num_nodes(vocab, depth))
    return [s for r in range(1, len(nodes) + 1) for s in itertools.combinations(nodes, r)
            if is_antichain(s, vocab, depth)]


@pytest.mark.parametrize("vocab,depth", [(2, 2), (2, 3), (3, 2)])
def test_all_antichains_matches_brute_force(vocab, depth):
    listed = all_antichains(vocab, depth, limit=10**6)
    assert sorted(listed) == sorted(brute_antichains(vocab, depth))
    assert all_antichains(vocab, depth, limit=len(listed) - 1) is None


@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 0), (2, 3, 3, 1), (3, 2, 2, 2),
                                                    (2, 3, 2, 3), (3, 2, 4, 4)])
def test_hull_separation_finds_the_most_violated_antichain(vocab, depth, paths, seed):
    """The exact maximum of beta(Z) - g(Q(Z)) over all antichains equals the first
    violation the hull reports (or none is violated), for random rational beta of every
    scale; every reported antichain is one, with its excess recomputed from its members."""
    model = dirichlet_instance(vocab, depth, seed=seed, denominator=16).model(exact=True)
    mass = path_masses(model)
    everything = brute_antichains(vocab, depth)
    rng = np.random.default_rng(seed)
    for scale in (Fraction(1, 8), Fraction(1, 2), Fraction(1), Fraction(2)):
        beta = [Fraction(0)] + [scale * Fraction(int(v), 64)
                                for v in rng.integers(0, 65, num_nodes(vocab, depth) - 1)]
        best = max(sum((beta[z] for z in s), Fraction(0))
                   - g_exact(sum((mass[z] for z in s), Fraction(0)), paths) for s in everything)
        found = antichain_violations(beta, mass, paths, vocab, depth, exact=True)
        if best <= 0:
            assert found == []
        else:
            assert found[0][0] == best
        for excess, members in found:
            assert is_antichain(members, vocab, depth)
            assert excess == (sum((beta[z] for z in members), Fraction(0))
                              - g_exact(sum((mass[z] for z in members), Fraction(0)), paths))
            assert excess > 0


def test_hull_vertices_are_the_points_of_their_antichains():
    model = dirichlet_instance(3, 3, seed=5, denominator=16).model(exact=True)
    mass = path_masses(model)
    rng = np.random.default_rng(0)
    beta = [Fraction(0)] + [Fraction(int(v), 32) for v in rng.integers(0, 33, num_nodes(3, 3) - 1)]
    hulls = antichain_hulls(beta, mass, 3, 3)
    for n in (0, 1, 5):
        for k, (x, y) in enumerate(hulls.vertices[n]):
            members = antichain_of(hulls, n, k, 3)
            assert x == sum((mass[z] for z in members), Fraction(0))
            assert y == sum((beta[z] for z in members), Fraction(0))


def test_the_node_form_example_is_cut_by_a_mixed_depth_antichain():
    """docs/theory.md 7.1: the node form's optimal point violates beta(00) + beta(1) <=
    1 - (7/64)^2 (an antichain of two depths), and the antichain form gives the optimum."""
    inst = dirichlet_instance(2, 2, alpha=1.0, seed=4, denominator=8)
    node = node_form_optimum(inst, 2)
    assert node.exact_value == Fraction(12159, 4096)
    beta = [Fraction(0)] + list(node.details["beta"])
    model = inst.model(exact=True)
    found = antichain_violations(beta, path_masses(model), 2, 2, 2, exact=True)
    assert found and found[0][1] == (2, 3)  # nodes (1) and (0, 0)
    assert found[0][0] == Fraction(7, 8) + Fraction(1, 8) - (1 - Fraction(49, 4096))
    for method in ("enumerate", "cuts"):
        form = antichain_form_optimum(inst, 2, method=method)
        assert form.certified and form.exact_value == Fraction(6055, 2048)


CASES = [(dirichlet_instance(2, 2, alpha=0.5, seed=s, denominator=16), k)
         for s, k in ((0, 2), (1, 3), (2, 4))] + [
    (dirichlet_instance(3, 2, alpha=1.0, seed=3, denominator=12), 2),
    (dirichlet_instance(2, 3, alpha=0.7, seed=4, denominator=16), 3),
    (dirichlet_instance(3, 3, alpha=1.0, seed=5, denominator=16), 2),
    (dirichlet_instance(4, 2, alpha=0.3, seed=6, denominator=8), 3),
    (dirichlet_instance(2, 4, alpha=1.0, seed=7, denominator=16), 2),
    (ties_instance(3, 2, seed=1), 2), (ties_instance(2, 3, seed=2, denominator=6), 3),
    (bv_toy(3), 2)]


@pytest.mark.parametrize("inst,paths", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_antichain_form_equals_the_optimum(inst, paths):
    """Theorem 7.5 on rational instances (ties, zeros, up to 4 paths): the antichain form's
    certified optimum is the engine's certified K-path optimum, exactly."""
    best = optimum(inst, paths)
    form = antichain_form_optimum(inst, paths)
    assert best.certified and form.certified
    assert form.exact_value == best.exact_value
    assert form.details["min_subset_slack"] == 0


@pytest.mark.parametrize("seed", range(3))
def test_antichain_form_equals_the_enumerated_full_lp(seed):
    inst = dirichlet_instance(2, 2, alpha=1.0, seed=20 + seed, denominator=8)
    for paths in (2, 3):
        full = optimum(inst, paths, method="full")
        assert full.certified
        assert antichain_form_optimum(inst, paths, method="enumerate").exact_value == full.exact_value
        assert antichain_form_optimum(inst, paths, method="cuts").exact_value == full.exact_value


def test_antichain_form_refuses_a_bad_method():
    with pytest.raises(BadArgument, match="method"):
        antichain_form_optimum(bv_toy(2), 2, method="nope")
    with pytest.raises(BadArgument, match="enumerate"):
        antichain_form_optimum(dirichlet_instance(3, 3, seed=0, denominator=8), 2,
                               method="enumerate")


@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 3, 2, 0), (3, 2, 3, 1), (3, 3, 2, 2)])
def test_antichain_feasible_repairs_by_scaling_subtrees(vocab, depth, paths, seed):
    """The repaired point violates no antichain row (exactly), is below the input, scales every
    subtree as a whole (so chain rows that held still hold), and leaves a feasible point as
    it is."""
    model = dirichlet_instance(vocab, depth, seed=seed, denominator=16).model(exact=True)
    mass = path_masses(model)
    rng = np.random.default_rng(seed)
    parents, _ = node_parents(vocab, depth)
    for scale in (Fraction(1, 4), Fraction(1), Fraction(3)):
        beta = [Fraction(0)] + [scale * Fraction(int(v) + 1, 64)
                                for v in rng.integers(0, 64, num_nodes(vocab, depth) - 1)]
        fixed = antichain_feasible(beta, mass, paths, vocab, depth)
        assert antichain_violations(fixed, mass, paths, vocab, depth, exact=True) == []
        ratio = [f / b for f, b in zip(fixed[1:], beta[1:], strict=True)]
        assert all(0 <= r <= 1 for r in ratio)  # 0: a node of draft mass 0
        for z in range(1, len(beta)):  # a node's factor is its parent's times its own
            if parents[z] > 0:
                assert ratio[z - 1] <= ratio[parents[z] - 1]
        assert antichain_feasible(fixed, mass, paths, vocab, depth) == fixed


@pytest.mark.parametrize("inst,paths", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_inout_bounds_bracket_the_certified_optimum(inst, paths):
    """The in-out run's exact bounds hold the engine's exactly certified optimum (an
    independent solve: the selection master with its basis certificate) within 1e-9."""
    best = optimum(inst, paths)
    model = inst.model(exact=True)
    run = antichain_inout(model, paths)
    assert run.status == "optimal", run.stop
    lower, upper = antichain_bounds(model, paths, run)
    assert isinstance(lower, Fraction) and isinstance(upper, Fraction)
    assert lower <= best.exact_value <= upper
    assert upper - lower <= Fraction(1, 10**9)


@pytest.mark.parametrize("seed", range(3))
def test_inout_bounds_hold_for_any_duals_and_any_point(seed):
    """The bounds trust none of the run's numbers: with the duals replaced by random
    non-negative ones, the upper bound still holds (weak duality with the chain duals
    recomputed); with the point replaced by a random one, far outside the rows, the lower
    bound still holds (the exact repair). Both are then far from tight."""
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=seed, denominator=12)
    best = optimum(inst, 2).exact_value
    model = inst.model(exact=True)
    run = antichain_inout(model, 2)
    rng = np.random.default_rng(seed)
    run.duals = rng.random(len(run.duals)) * rng.integers(0, 2, len(run.duals))
    run.core = np.concatenate([[0.0], rng.random(len(run.core) - 1) * 2])
    run.raw = np.concatenate([[0.0], rng.random(len(run.core) - 1) * 3])
    lower, upper = antichain_bounds(model, 2, run)
    assert lower <= best <= upper
    assert upper - lower > Fraction(1, 10**3)
    run.duals = run.duals * 0  # no antichain dual: the chain duals alone (the BV-free bound)
    assert antichain_bounds(model, 2, run)[1] >= best


def test_inout_time_limit_gives_valid_wide_bounds():
    """A run stopped by its time limit says so, and its bounds still hold the optimum."""
    inst = dirichlet_instance(3, 3, alpha=1.0, seed=5, denominator=16)
    best = optimum(inst, 3).exact_value
    model = inst.model(exact=True)
    run = antichain_inout(model, 3, time_limit=0.0)
    assert run.status == "time_limit" and run.rounds == 0
    lower, upper = antichain_bounds(model, 3, run)
    assert lower <= best <= upper


def _antichain_engine(monkeypatch):
    monkeypatch.setattr(engine, "EXACT_PHASE_MAX_LEAVES", 0)  # certify by exact bounds
    monkeypatch.setattr(engine, "NODE_MASTER_FIRST_SOLVES", 0)  # on the antichain form


def test_engine_certifies_within_w_on_the_antichain_form(monkeypatch):
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=3, denominator=12)
    exact = optimum(inst, 3)
    _antichain_engine(monkeypatch)
    bounded = optimum(inst, 3)
    assert bounded.details["master"] == "antichain form"
    assert not bounded.certified and bounded.certified_within <= 1e-9
    lower, upper = bounded.bounds
    assert lower <= exact.exact_value <= upper and bounded.value == float(lower)
    assert "Theorem 7.5" in bounded.certificate and bounded.label.startswith("certified within")


def test_engine_falls_back_to_the_node_master_when_the_bounds_do_not_meet(monkeypatch):
    """Tampered bounds (the upper one 1e-6 too low, below the lower one) are refused by the
    antichain route, never reported: the node-budget master then certifies, and the record
    says why."""
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=3, denominator=12)
    exact = optimum(inst, 2)
    _antichain_engine(monkeypatch)
    real = engine.antichain_bounds
    monkeypatch.setattr(engine, "antichain_bounds", lambda model, paths, run: (
        real(model, paths, run)[0], real(model, paths, run)[1] - Fraction(1, 10**6)))
    record = optimum(inst, 2)
    assert record.details["master"] == "node-budget"
    assert any(n.startswith("antichain form:") and "NOT certified" in n for n in record.notes)
    lower, upper = record.bounds
    assert lower <= exact.exact_value <= upper and record.certified_within <= 1e-9


def test_engine_switches_to_the_antichain_form_after_the_solve_cap(monkeypatch):
    """A node master stopped by the cap is "iteration_limit", never bounded as if converged;
    the antichain form then certifies. Below the cap, or past depth 3, the node master alone."""
    inst = dirichlet_instance(3, 3, alpha=1.0, seed=5, denominator=16)
    exact = optimum(inst, 3)
    monkeypatch.setattr(engine, "EXACT_PHASE_MAX_LEAVES", 0)
    alone = optimum(inst, 3)
    assert alone.details["master"] == "node-budget" and alone.certified_within <= 1e-9
    solves = alone.details["iterations"]
    assert solves >= 2
    monkeypatch.setattr(engine, "NODE_MASTER_FIRST_SOLVES", solves - 1)
    record = optimum(inst, 3)
    assert record.details["master"] == "antichain form"
    assert f"node-budget master: not converged in {solves - 1} solves" in " ".join(record.notes)
    lower, upper = record.bounds
    assert lower <= exact.exact_value <= upper and record.certified_within <= 1e-9
    deep = dirichlet_instance(2, 4, seed=1, denominator=12)
    monkeypatch.setattr(engine, "NODE_MASTER_FIRST_SOLVES", 1)
    assert optimum(deep, 3).details["master"] == "node-budget"  # depth 4 > 3


def test_node_master_stopped_by_max_iterations_says_so():
    from speclp.lp.colgen import master_data, solve_node_master

    model = dirichlet_instance(3, 3, alpha=1.0, seed=5, denominator=16).model(exact=True)
    master = master_data(model, 3, "iid", exact=True)
    full = solve_node_master(master)
    assert full.status == "optimal" and full.iterations >= 2
    assert solve_node_master(master, max_iterations=full.iterations - 1).status == "iteration_limit"
    assert solve_node_master(master, max_iterations=full.iterations).status == "optimal"


def test_engine_antichain_route_reports_its_time_limit(monkeypatch):
    """The antichain route stopped by the time limit gives no value and says where the time
    went (gap then reports the optimum as not found, never a bound as the optimum)."""
    from speclp.proofs.gap import OptimumNotFound, gap

    _antichain_engine(monkeypatch)
    real = engine.antichain_inout
    monkeypatch.setattr(engine, "antichain_inout",
                        lambda model, paths, time_limit=None: real(model, paths, time_limit=0.0))
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=3, denominator=12)
    record = optimum(inst, 2, time_limit=50)
    assert record.status == "time_limit" and record.value is None
    assert record.certificate.startswith("time limit 50 s hit") and "antichain form" in record.certificate
    with pytest.raises(OptimumNotFound, match="time_limit"):
        gap(inst, 2, time_limit=50)


@pytest.mark.parametrize("inst", [ties_instance(3, 2, seed=1),
                                  dirichlet_instance(3, 3, alpha=0.3, seed=5, denominator=8)],
                         ids=["ties", "sparse"])
def test_inout_tightening_keeps_rows_of_zero_bound_feasible(inst):
    """Nodes of draft mass 0 give rows beta(Z) <= 0: tightening them below 0 made the polish
    LP infeasible (beta >= 0); they stay at 0, the polish ends optimal, the bracket holds."""
    model = inst.model(exact=True)
    assert any(q == 0 for q in path_masses(model))
    run = antichain_inout(model, 2)
    assert run.status == "optimal" and run.notes == []
    lower, upper = antichain_bounds(model, 2, run)
    assert lower <= optimum(inst, 2).exact_value <= upper
