"""One column-generation loop serves both masters of speclp.lp.colgen (the selection master
and the node-budget master): their optima agree with the full LP solved exactly, and the
loop's stop rules (no improving column, max_iterations, the time limit, a solve that is not
optimal, a failed warm start) hold as stated, checked on a scripted HiGHS stand-in."""

import math
from fractions import Fraction

import highspy
import numpy as np
import pytest
from speclp.lp.certify import fmpq_to_fraction, solve_exact
from speclp.lp.colgen import (
    _column_loop,
    _SelectionPricing,
    master_data,
    master_lp,
    node_master_bounds,
    solve_colgen,
    solve_node_master,
)
from speclp.lp.full import full_lp
from speclp.lp.instance import dirichlet_instance
from speclp.lp.solve import highs_model

OPTIMAL = highspy.HighsModelStatus.kOptimal
NOT_SET = highspy.HighsModelStatus.kNotset
INFEASIBLE = highspy.HighsModelStatus.kInfeasible


def _exact(value) -> Fraction:
    return value if isinstance(value, Fraction) else fmpq_to_fraction(value)


@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 0), (3, 2, 2, 1), (2, 3, 3, 2),
                                                    (3, 2, 3, 3)])
def test_both_masters_reach_the_exact_full_lp_optimum(vocab, depth, paths, seed):
    inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=seed, denominator=24)
    _, full = solve_exact(full_lp(inst, paths=paths))
    assert full.certified, full.reason
    optimum = _exact(full.value)
    selection = solve_colgen(inst, paths=paths)
    assert selection.status == "optimal" and selection.certificate.certified
    assert _exact(selection.certificate.value) == optimum
    master = master_data(inst, paths, "iid", exact=True)
    node = solve_node_master(master)
    assert node.status == "optimal" and node.iterations == len(node.history) >= 1
    lower, upper = node_master_bounds(master.model, master, node)
    assert lower <= optimum <= upper and upper - lower <= Fraction(1, 10**9)
    assert abs(node.value - float(optimum)) <= 1e-9


def test_node_master_stops_at_max_iterations_with_a_lower_bound():
    inst = dirichlet_instance(2, 3, alpha=0.8, seed=3, denominator=24)
    master = master_data(inst, 3, "iid", exact=True)
    full = solve_node_master(master)
    assert full.iterations >= 2  # the first master is not optimal for this instance
    early = solve_node_master(master, max_iterations=1)  # stopped by the cap, not converged
    assert early.status == "iteration_limit" and early.iterations == 1 and len(early.history) == 1
    assert early.value < full.value - 1e-9  # a restriction of the class LP
    none = solve_node_master(master, max_iterations=0)
    assert none.status == "unknown" and none.iterations == 0 and math.isnan(none.value)


class _FakeHighs:
    """Stands in for highspy.Highs in the loop: each run ends with the next scripted status."""

    def __init__(self, statuses):
        self.statuses, self.runs, self.options = list(statuses), 0, []

    def run(self):
        self.runs += 1

    def getModelStatus(self):  # noqa: N802 (HiGHS's name)
        return self.statuses[self.runs - 1]

    def modelStatusToString(self, status):  # noqa: N802
        return "Not Set" if status == NOT_SET else "Other"  # status_name always asks

    def getRunTime(self):  # noqa: N802
        return 10.0

    def setOptionValue(self, name, value):  # noqa: N802
        self.options.append((name, value))


class _Scripted:
    """A master whose pricing finds an improving column in its first `improving` solves and
    whose recovery turns not_set into optimal (a cold solve that works)."""

    def __init__(self, statuses, improving):
        self.h, self.improving, self.priced, self.recovered = _FakeHighs(statuses), improving, [], []

    def recover(self, iteration, status):
        self.recovered.append((iteration, status))
        return "optimal" if status == "not_set" else status

    def price(self, iteration, started):
        self.priced.append(iteration)
        return iteration > self.improving


def test_loop_stops_when_no_column_improves():
    pricing = _Scripted([OPTIMAL] * 5, improving=2)
    assert _column_loop(pricing, 100, lambda: None) == ("optimal", 3)
    assert pricing.priced == [1, 2, 3] and pricing.recovered == [] and pricing.h.options == []


def test_loop_stops_at_max_iterations():
    pricing = _Scripted([OPTIMAL] * 5, improving=5)
    assert _column_loop(pricing, 2, lambda: None) == ("optimal", 2)
    assert _column_loop(_Scripted([], improving=5), 0, lambda: None) == ("unknown", 0)


def test_loop_recovers_a_failed_warm_start_and_stops_on_a_status_not_optimal():
    pricing = _Scripted([OPTIMAL, NOT_SET, INFEASIBLE, OPTIMAL], improving=10)
    assert _column_loop(pricing, 100, lambda: None) == ("infeasible", 3)
    assert pricing.recovered == [(2, "not_set"), (3, "infeasible")]
    assert pricing.priced == [1, 2]  # the infeasible master is not priced


def test_loop_time_limit():
    spent = _Scripted([OPTIMAL] * 3, improving=10)
    assert _column_loop(spent, 100, lambda: 0.0) == ("time_limit", 0) and spent.h.runs == 0
    left = iter([5.0, 2.5, -1.0])
    pricing = _Scripted([OPTIMAL] * 3, improving=10)
    assert _column_loop(pricing, 100, lambda: next(left)) == ("time_limit", 2)
    # HiGHS's run clock accumulates over runs: the limit is its run time plus the time left
    assert pricing.h.options == [("time_limit", 15.0), ("time_limit", 12.5)]


def test_selection_master_solves_a_failed_warm_start_cold_and_notes_it():
    inst = dirichlet_instance(3, 2, alpha=0.8, seed=4)
    master = master_data(inst, 2, "iid", exact=False)
    priorities = [np.argsort(-master.q, kind="stable")]
    notes = []
    pricing = _SelectionPricing(master, highs_model(master_lp(master, priorities), presolve=False,
                                                    method="simplex"), priorities, 1e-9, notes)
    assert pricing.recover(4, "infeasible") == "infeasible" and notes == []
    assert pricing.recover(4, "not_set") == "optimal"
    assert notes == ["iteration 4: warm start failed, solved cold"]
    pricing.price(4, 0.0)
    assert pricing.history[0]["iteration"] == 4 and pricing.history[0]["columns"] == 1
    assert abs(pricing.value - solve_colgen(inst, paths=2, exact=False, max_iterations=1).value) <= 1e-9
