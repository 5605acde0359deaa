"""Column generation for the K-path LP: the selection master, its pricing and its certificate.

This is the optimum engine of the project (speclp.lp.engine.optimum, method "colgen"): the
optimum of the full K-path LP (speclp.lp.full) without enumerating draft configurations,
certified in exact rationals.

Priorities and their laws
-------------------------
A priority is a strict order on the P = V^L leaves (complete paths), best first. The rule
"select the highest-priority drafted path" gives the selected path a law r_k on the
leaves (priority_law): for i.i.d. drafting r(x) = (q(x) + Q_below(x))^K - Q_below(x)^K,
Q_below(x) the q-mass of the leaves ranked below x (the law of the best of K draws);
without replacement it is summed over the enumerated configurations. These laws are the
vertices of the polytope P_K of reachable skewed laws (speclp.lp.class_lp).

The master (master_lp)
----------------------
Variables: rho(x, d, y) >= 0 for every leaf x, depth d in 0..L and token y (column
(x (L+1) + d) V + y; output node x[:d], token y, objective d + 1), then A(z) for
z = 1..N-1, then lambda_k >= 0 per priority. Rows: P path rows
sum_{d,y} rho(x, d, y) - sum_k lambda_k r_k(x) = 0; then the N V target-matching rows
(speclp.lp.rows) with C(u, t) = sum of rho(x, |u|, t) over the leaves x extending u. The
convexity row sum_k lambda_k = 1 is implied (all rows together) and dropped; it is kept in
meta["dropped_eq"] and checked by the certificate.

Why it is the full LP. Dual feasibility for rho makes theta(x) >= H(x) = max over prefixes
n of x and tokens y of (|n| + 1) - v(n, y), and pricing the priorities gives
max_k r_k . theta = E[max_k theta(X_k)] (the greedy vertex selects the best drafted path),
so y_c = max_k theta(x_k) is a feasible dual of the full LP with the same objective;
conversely pi(c, n, y) = sum_k lambda_k w(c) [sel_k(c) = x] rho(x, |n|, y) / r(x),
r = sum_k lambda_k r_k, is feasible for the full LP with the same objective. The argument
holds for any draft law (i.i.d. or without replacement).

The optimal selection mixture
-----------------------------
At the optimum, the priorities with lambda_k > 0, their weights lambda_k and the skewed
law r = sum_k lambda_k r_k describe an optimal verifier: draw a priority k with probability
lambda_k, select the highest-priority drafted path, and run BV on it with r in place of q
(for a fixed r the master's rho part is the single-path LP with budgets r, whose optimum
is BV's closed form, speclp.lp.node.node_optimum). The certificate checks that value
exactly (mixture_value_matches).

Pricing and certificate
-----------------------
solve_colgen sorts the leaves by their float dual theta and adds the greedy priority while
its reduced cost r . theta exceeds a tolerance (HiGHS re-solves warm). With certify=True
(certify_master) the master restricted to its basic priorities is rebuilt with exact data
and certified from its basis (speclp.lp.certify.refine_basis); its exact duals give
theta(x) >= H(x) for every leaf (all rho columns are in the master, so the certificate
checked those reduced costs exactly), and the exact greedy priority must have
r . theta <= 0 (all_configurations_priced): then no column of the full LP has positive
reduced cost. A priority the float pricing missed is added and the loop resumes.

One loop, two masters
---------------------
The selection master (solve_colgen) and the node-budget master (solve_node_master) run the
same HiGHS loop (_column_loop: solve warm, recover a failed solve, price, add columns, stop
when no column improves, at max_iterations or at the time limit); each brings its own
pricing step and recovery (_SelectionPricing, _NodePricing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

import highspy
import numpy as np
from flint import fmpq, fmpz

from ..inputs import BadArgument
from ..rationals import fraction_text
from ..verifiers.drafts import (
    Configurations,
    check_draft_sampling,
    count_configurations,
    multiset_configurations,
)
from ..verifiers.tree import (
    SIZE_CAP,
    TreeModel,
    all_paths,
    capped_num_nodes,
    capped_power,
    num_nodes,
    prefix_node_indices,
)
from .certify import BASIC, Certificate, fmpq_to_fraction, refine_basis, to_fmpq
from .full import as_model, label_node
from .instance import Instance
from .node import node_optimum
from .program import Block, LinearProgram, ValueTable
from .rows import depth_values, matching_a_entries, target_refs
from .solve import LPSolution, highs_model, highs_solution, new_highs, solve, status_name

SIMPLEX_PRIMAL = 4  # HiGHS option simplex_strategy: 4 = primal
MAX_ENUMERATED_CONFIGURATIONS = 20_000_000  # without replacement: priority laws by enumeration


@dataclass
class MasterData:
    """Data of the selection master.

    path_tokens [P, L] token ids of the leaves; q [P] draft probability of every leaf
    (float64) and q_exact (exact, or None); configurations: the sets of K distinct paths
    with their weights (drafting without replacement only, where priority laws are summed
    over them; None for iid).
    """

    model: TreeModel
    paths: int
    draft_sampling: str
    path_tokens: np.ndarray
    q: np.ndarray
    q_exact: np.ndarray | None
    configurations: Configurations | None
    exact: bool

    @property
    def num_leaves(self) -> int:
        return int(len(self.q))

    def count_configurations(self) -> int:
        """Number of draft configurations of the full LP the master stands for."""
        return count_configurations(int((self.q > 0).sum()), self.paths, self.draft_sampling)

    def leaf_label(self, x: int) -> str:
        return str(tuple(int(t) for t in self.path_tokens[x]))


MAX_MASTER_COLUMNS = 2_000_000  # single-path output columns rho(x, d, y) of the master


def master_size(vocab: int, depth: int, paths: int, draft_sampling: str = "iid") -> dict[str, int]:
    """Size of the selection master from the shape alone (nothing is built; capped at
    verifiers.tree.SIZE_CAP): leaves P = V^L, columns P (L+1) V + N - 1 (+ one per
    generated priority), rows P + N V, and the configurations enumerated without
    replacement (0 for iid, where priority laws have a closed form)."""
    leaves = capped_power(vocab, depth)
    nodes = capped_num_nodes(vocab, depth)
    columns = min(leaves * (depth + 1) * vocab + nodes - 1, SIZE_CAP)
    rows = min(leaves + nodes * vocab, SIZE_CAP)
    enumerated = (count_configurations(leaves, paths, draft_sampling)
                  if draft_sampling == "without-replacement" else 0)
    return {"leaves": leaves, "columns": columns, "rows": rows, "configurations": enumerated}


def master_data(model_or_instance: TreeModel | Instance, paths: int = 2,
                draft_sampling: str = "iid", exact: bool = True,
                max_configurations: int = MAX_ENUMERATED_CONFIGURATIONS) -> MasterData:
    check_draft_sampling(draft_sampling)
    if paths < 1:
        raise BadArgument("paths", f"must be >= 1, got {paths}")
    model = as_model(model_or_instance, exact)
    q = model.draft_path_probabilities()
    q_float = np.array([float(v) for v in q]) if q.dtype == object else q.astype(np.float64)
    q_exact = None
    if exact:
        q_exact = q if q.dtype == object else np.array([Fraction(float(v)) for v in q],
                                                       dtype=object)
    configs = None
    if draft_sampling == "without-replacement":
        count = count_configurations(int((q_float > 0).sum()), paths, draft_sampling)
        if count > max_configurations:
            raise BadArgument("paths", f"the selection master without replacement enumerates "
                             f"{count:,} configurations (limit {max_configurations:,}); "
                             "use iid drafting or fewer paths")
        configs = multiset_configurations(model, paths, draft_sampling)
    return MasterData(model, paths, draft_sampling, all_paths(model.vocab_size, model.depth),
                      q_float, q_exact, configs, exact)


def priority_law(master: MasterData, priority: np.ndarray, exact: bool = False) -> np.ndarray:
    """[P] law of the selected path when the highest-priority drafted path is selected.

    priority [P]: a permutation of the leaves; priority[0] is the best. iid:
    r(x) = (q(x) + Q_below(x))^K - Q_below(x)^K with Q_below(x) = q-mass of the leaves
    ranked below x. Without replacement: summed over the enumerated configurations.
    Float64, or exact (object array) when exact=True.
    """
    priority = np.asarray(priority, dtype=np.int64)
    count = master.num_leaves
    q = master.q_exact if exact else master.q
    if master.draft_sampling == "iid":
        ranked = q[priority]  # best first
        if exact:
            below = np.empty(count, dtype=object)
            acc = Fraction(0)
            for i in range(count - 1, -1, -1):
                below[i] = acc
                acc += ranked[i]
        else:
            below = np.concatenate([np.cumsum(ranked[::-1])[::-1][1:], [0.0]])
        law_ranked = (ranked + below) ** master.paths - below ** master.paths
        law = np.empty(count, dtype=object if exact else np.float64)
        law[priority] = law_ranked
        return law
    rank = np.empty(count, dtype=np.int64)
    rank[priority] = np.arange(count)
    configs = master.configurations
    chosen = configs.paths[np.arange(len(configs)), rank[configs.paths].argmin(axis=1)]
    weight = configs.weight
    if not exact:
        weight = np.array([float(v) for v in weight]) if weight.dtype == object else weight
        return np.bincount(chosen, weights=weight, minlength=count)
    law = np.empty(count, dtype=object)
    law[:] = [Fraction(0)] * count
    if weight.dtype != object:
        weight = np.array([Fraction(float(v)) for v in weight], dtype=object)
    np.add.at(law, chosen, weight)
    return law


def master_lp(master: MasterData, priorities: list[np.ndarray], exact: bool = False
              ) -> LinearProgram:
    """The selection master with one lambda column per priority (module docstring)."""
    model = master.model
    vocab, depth = model.vocab_size, model.depth
    count = master.num_leaves
    n_nodes = num_nodes(vocab, depth)
    n_rho = count * (depth + 1) * vocab
    n_a = n_nodes - 1
    n_lambda = len(priorities)
    n_vars = n_rho + n_a + n_lambda
    table = ValueTable(exact)
    depth_refs = table.add(depth_values(model))
    neg_target, root_target = target_refs(model, table)
    laws = [priority_law(master, priority, exact) for priority in priorities]
    law_refs = [table.add(-law) for law in laws]
    # rho columns: path row x and matching row (x[:d], y)
    leaf_nodes = prefix_node_indices(master.path_tokens, vocab)  # [P, L+1]
    x_idx, d_idx, y_idx = (a.reshape(-1) for a in np.meshgrid(
        np.arange(count), np.arange(depth + 1), np.arange(vocab), indexing="ij"))
    rho_cols = np.arange(n_rho, dtype=np.int64)
    objective_refs = np.full(n_vars, table.zero, dtype=np.int64)
    objective_refs[:n_rho] = depth_refs[d_idx]
    match0 = count  # first matching row; matching row of key u * V + t is match0 + key
    a_keys, a_cols, a_refs = matching_a_entries(model, n_rho, neg_target, table.one)
    rows = [x_idx, match0 + leaf_nodes[x_idx, d_idx] * vocab + y_idx, match0 + a_keys]
    cols = [rho_cols, rho_cols, a_cols]
    refs = [np.full(n_rho, table.one, dtype=np.int64)] * 2 + [a_refs]
    for k, law in enumerate(laws):
        nz = np.nonzero(np.array([v != 0 for v in law]) if exact else law != 0)[0]
        rows.append(nz)
        cols.append(np.full(len(nz), n_rho + n_a + k, dtype=np.int64))
        refs.append(law_refs[k][nz])
    rows_all, cols_all, refs_all = np.concatenate(rows), np.concatenate(cols), np.concatenate(refs)
    rhs = np.full(count + n_nodes * vocab, table.zero, dtype=np.int64)
    rhs[match0: match0 + vocab] = root_target
    order = np.lexsort((cols_all, rows_all))
    eq = Block(rows_all[order], cols_all[order], refs_all[order], rhs)
    dropped = Block(np.zeros(n_lambda, dtype=np.int64), n_rho + n_a + np.arange(n_lambda),
                    np.full(n_lambda, table.one, dtype=np.int64),
                    np.array([table.one], dtype=np.int64))
    values, exact_values = table.tables()

    def variable_label(j: int) -> str:
        j = int(j)
        if j < n_rho:
            x, rest = divmod(j, (depth + 1) * vocab)
            d, y = divmod(rest, vocab)
            return f"rho[x={master.leaf_label(x)}, d={d}, y={y}]"
        if j < n_rho + n_a:
            return f"A[{label_node(j - n_rho + 1, vocab)}]"
        return f"lambda[{j - n_rho - n_a}]"

    def eq_label(i: int) -> str:
        i = int(i)
        if i < count:
            return f"path[{master.leaf_label(i)}]"
        u, t = divmod(i - count, vocab)
        return f"match[u={label_node(u, vocab)}, t={t}]"

    lp = LinearProgram(
        name=f"selection-master-V{vocab}-L{depth}-K{master.paths}-{master.draft_sampling}-"
             f"{n_lambda}",
        num_vars=n_vars, objective_refs=objective_refs, constant_ref=table.zero, eq=eq,
        ub=Block.empty(), table=values, exact_table=exact_values,
        variable_label=variable_label, eq_label=eq_label)
    lp.notes.append("convexity row sum lambda = 1 dropped (implied by the other rows); kept in "
                    "meta['dropped_eq'] and checked by the certificate")
    lp.meta.update({"kind": "selection-master", "priorities": list(priorities),
                    "dropped_eq": dropped, "num_rho": n_rho, "num_a": n_a, "num_leaves": count,
                    "vocab_size": vocab, "depth": depth, "paths": master.paths,
                    "draft_sampling": master.draft_sampling})
    return lp


def price(master: MasterData, duals: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Best priority against float master duals.

    duals [m]: the first P are theta(x) of the path rows. The lambda column of a priority
    has reduced cost r . theta (r its law), maximised by ranking the leaves by theta (the
    selected path is then the drafted path of largest theta). Returns (priority [P],
    law [P], reduced cost).
    """
    theta = duals[: master.num_leaves]
    priority = np.argsort(-theta, kind="stable")
    law = priority_law(master, priority)
    return priority, law, float(law @ theta)


# ---------------------------------------------------------------------------
# exact certificate
# ---------------------------------------------------------------------------

def _float(v: Any) -> float:
    return float(fmpq_to_fraction(v)) if isinstance(v, fmpq) else float(v)


def basic_priorities(master: MasterData, priorities: list[np.ndarray],
                     solution: LPSolution) -> list[np.ndarray]:
    """The priorities whose lambda column is basic or positive in a float master solution
    (all of them when the solution carries no basis)."""
    first_lambda = master.num_leaves * (master.model.depth + 1) * master.model.vocab_size + (
        num_nodes(master.model.vocab_size, master.model.depth) - 1)
    if solution.basis is None:
        return list(priorities)
    col_status = solution.basis[0]
    keep = [p for k, p in enumerate(priorities) if col_status[first_lambda + k] == BASIC
            or solution.x[first_lambda + k] > 0]
    return keep or list(priorities)


def certify_master(master: MasterData, priorities: list[np.ndarray], max_rounds: int = 6,
                   time_limit: float | None = None
                   ) -> tuple[LinearProgram, LPSolution, Certificate, np.ndarray | None]:
    """Exact certificate of the full K-path LP from the master on `priorities`.

    1. The master is built with exact data, solved and certified exactly (refine_basis);
       the dropped convexity row is checked.
    2. The exact greedy priority of its exact duals theta must have r . theta <= 0
       (all_configurations_priced).
    Returns (exact master LP, its solution, certificate, improving priority or None): when
    the exact pricing finds a priority with positive reduced cost, the caller adds it to
    `priorities` and certifies again (solve_colgen). time_limit: seconds for the HiGHS solve
    of the exact master (the exact certificate itself is not interruptible).
    """
    start = time.perf_counter()
    lp = master_lp(master, priorities, exact=True)
    master_solution = solve(lp, time_limit=time_limit)
    if not master_solution.optimal:
        cert = Certificate(False, None, f"selection master: solver status "
                           f"{master_solution.status}", time.perf_counter() - start)
        return lp, master_solution, cert, None
    left = None if time_limit is None else time_limit - (time.perf_counter() - start)
    master_solution, cert = refine_basis(lp, master_solution, max_rounds, time_limit=left)
    if not cert.certified:
        cert.reason = "selection master: " + cert.reason
        cert.seconds = time.perf_counter() - start
        return lp, master_solution, cert, None
    count = master.num_leaves
    theta = cert.dual[:count]
    greedy = np.array(sorted(range(count), key=lambda x: (-theta[x], x)), dtype=np.int64)
    law = to_fmpq(priority_law(master, greedy, exact=True))
    excess = sum((law[x] * theta[x] for x in range(count)), fmpq(0))
    cert.checks["all_configurations_priced"] = excess <= 0
    if excess > 0:
        cert.certified = False
        cert.value = None
        cert.reason = (f"failed: all_configurations_priced (the greedy priority has reduced "
                       f"cost {_float(excess):.3g} > 0)")
        cert.seconds = time.perf_counter() - start
        return lp, master_solution, cert, greedy
    cert.reason = (f"optimal for the full LP: selection master ({len(priorities)} priorities) "
                   f"certified exactly; every column of the full LP priced exactly (greedy "
                   f"priority reduced cost {_float(excess):.3g} <= 0)")
    cert.seconds = time.perf_counter() - start
    return lp, master_solution, cert, None


# ---------------------------------------------------------------------------
# the loop (one HiGHS column-generation loop for both masters)
# ---------------------------------------------------------------------------

class _Pricing(Protocol):
    """What a master brings to the loop (_column_loop): its HiGHS model, how it recovers
    from a warm solve that did not end optimal, and its pricing step."""

    h: Any

    def recover(self, iteration: int, status: str) -> str:
        """The status after recovering from a non-optimal warm solve."""

    def price(self, iteration: int, started: float) -> bool:
        """Read the solved master, price its duals, add the improving columns; True when
        none improves (stop). started: perf_counter() before this solve."""


def _clock(time_limit: float | None, start: float) -> Callable[[], float | None]:
    """Seconds left of time_limit from perf_counter() start (None: no limit)."""
    return lambda: None if time_limit is None else time_limit - (time.perf_counter() - start)


def _column_loop(pricing: _Pricing, max_iterations: int, time_left: Callable[[], float | None]
                 ) -> tuple[str, int]:
    """Solve the master (warm from the last basis), price, add columns, solve again, until
    the pricing finds no improving column, a solve is not optimal, max_iterations solves or
    the time limit. Returns (status of the last solve, or "time_limit"; master solves)."""
    h = pricing.h
    status, iterations = "unknown", 0
    while iterations < max_iterations:
        left = time_left()
        if left is not None:
            if left <= 0:
                return "time_limit", iterations
            # HiGHS compares time_limit with its run clock, which accumulates over runs
            h.setOptionValue("time_limit", float(h.getRunTime() + left))
        started = time.perf_counter()
        h.run()
        iterations += 1
        status = status_name(h, h.getModelStatus())
        if status != "optimal":
            status = pricing.recover(iterations, status)
        if status != "optimal" or pricing.price(iterations, started):
            break
    return status, iterations


def _recover_warm_start(h: Any, notes: list[str], iteration: int, status: str) -> str:
    """A selection master's recovery (column loop): a warm solve that did not run ("not_set")
    is solved cold without presolve and noted; any other status is kept."""
    if status != "not_set":
        return status
    notes.append(f"iteration {iteration}: warm start failed, solved cold")
    return _solve_cold(h, ("off",))


def _solve_cold(h: Any, presolves: tuple[str, ...]) -> str:
    """Solve from scratch (the warm start failed), with each presolve setting in turn until
    one is optimal; presolve is left off, as the masters run. Returns the status."""
    status = "not_set"
    for presolve in presolves:
        h.clearSolver()
        h.setOptionValue("presolve", presolve)
        h.run()
        status = status_name(h, h.getModelStatus())
        if status == "optimal":
            break
    h.setOptionValue("presolve", "off")
    return status


def _add_column(h: Any, rows: np.ndarray, values: np.ndarray) -> None:
    """A lambda column (objective 0, lambda >= 0) with `values` in `rows`."""
    h.addCol(0.0, 0.0, np.inf, len(rows), np.asarray(rows, dtype=np.int32),
             np.asarray(values, dtype=np.float64))


@dataclass
class _SelectionPricing:
    """The selection master's part of the loop: price (the greedy priority of the path
    duals), a warm start that failed (not_set) solved cold once and noted."""

    master: MasterData
    h: Any
    priorities: list[np.ndarray]
    tolerance: float
    notes: list[str]
    history: list[dict[str, Any]] = field(default_factory=list)
    value: float = float("nan")  # the last master value (a lower bound on the optimum)

    def recover(self, iteration: int, status: str) -> str:
        return _recover_warm_start(self.h, self.notes, iteration, status)

    def price(self, iteration: int, started: float) -> bool:
        self.value = float(self.h.getInfo().objective_function_value)
        duals = np.asarray(self.h.getSolution().row_dual, dtype=np.float64)
        priority, law, reduced = price(self.master, duals)
        self.history.append({"iteration": iteration, "columns": len(self.priorities),
                             "value": self.value, "max_reduced_cost": reduced,
                             "seconds": time.perf_counter() - started})
        if reduced <= self.tolerance:
            return True
        nz = np.nonzero(law)[0]
        _add_column(self.h, nz, -law[nz])
        self.priorities.append(priority)
        return False


@dataclass
class ColgenResult:
    """Column generation outcome.

    value: optimum of the full K-path LP (float; certificate.value is exact when certified).
    lp: the final master (exact data when certified); solution: its solution (basis
    included; x exact-valued floats of the certified point when certified); master: the
    MasterData; certificate: from certify_master (certify=True), else None. history: one
    dict per float master solve (columns, value, max reduced cost, seconds). seconds: the
    float phase; certify_seconds: the exact phase (exact_rounds exact master solves).
    """

    status: str
    value: float
    lp: LinearProgram
    solution: LPSolution
    master: MasterData
    iterations: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    certificate: Certificate | None = None
    certify_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    exact_rounds: int = 0


def solve_colgen(model_or_instance: TreeModel | Instance, paths: int = 2,
                 draft_sampling: str = "iid", exact: bool = True, tolerance: float = 1e-9,
                 max_iterations: int = 5_000, time_limit: float | None = None,
                 certify: bool = True, max_exact_rounds: int = 50) -> ColgenResult:
    """Column generation for the K-path full LP (module docstring).

    The master starts from the priority "leaves by q, descending" and holds every rho and
    A column; each round prices the float duals (price) and adds the greedy priority while
    its reduced cost exceeds `tolerance` (float phase: at most max_iterations master solves,
    time_limit seconds). With certify=True (and exact=True) the exact phase certifies the
    master on the basic priorities of the float solution (certify_master); an improving
    priority found by the exact pricing joins them and the exact master is certified again
    (at most max_exact_rounds times). A float phase stopped by max_iterations is priced
    exactly once (certified if no priority improves).

    time_limit (seconds, None: none) bounds the whole run, float and exact phases; it never
    raises. Hit in the float phase: status "time_limit", certificate None and value = the
    last float master value, a LOWER bound on the optimum (the master on a subset of the
    priorities is a restriction of the full LP). Hit in the exact phase: the float optimum
    stands (status "optimal") with a certificate that is NOT certified and says so. The
    one overrun: an exact basis solve already under way finishes (no new refinement round
    or exact round starts after the limit).
    """
    start = time.perf_counter()
    time_left = _clock(time_limit, start)
    master = master_data(model_or_instance, paths, draft_sampling, exact)
    priorities = [np.argsort(-master.q, kind="stable")]
    lp = master_lp(master, priorities)
    notes = [f"{master.count_configurations():,} draft configurations; master {lp.num_vars} "
             f"columns x {lp.num_eq} rows"]
    h = highs_model(lp, presolve=False, method="simplex")
    # primal simplex: a new priority column leaves the last basis primal feasible, so each warm
    # re-solve starts feasible (dual simplex, HiGHS's default, took 89 solves and 0.45 s CPU
    # against 56 and 0.21 s at (V, L, K) = (4, 3, 3), Dirichlet(1) seed 1; the same exact optimum)
    h.setOptionValue("simplex_strategy", SIMPLEX_PRIMAL)
    pricing = _SelectionPricing(master, h, priorities, tolerance, notes)
    status, iterations = _column_loop(pricing, max_iterations, time_left)
    history, value = pricing.history, pricing.value
    if status == "optimal" and history and history[-1]["max_reduced_cost"] > tolerance:
        status = "iteration_limit"  # stopped by max_iterations with an improving priority
    lp = master_lp(master, priorities)
    solution = highs_solution(pricing.h, lp, status, time.perf_counter() - start, list(notes))
    seconds = time.perf_counter() - start
    certificate, certify_seconds, rounds = None, 0.0, 0
    if status in ("optimal", "iteration_limit") and certify and master.exact \
            and solution.basis is not None:
        phase = _exact_phase(master, basic_priorities(master, priorities, solution),
                             status == "optimal", time_left, time_limit, max_exact_rounds)
        certificate, certify_seconds, rounds = phase.certificate, phase.seconds, phase.rounds
        notes += phase.notes
        if phase.lp is not None:
            lp, solution = phase.lp, phase.solution
        if certificate.certified:
            status, value = "optimal", float(certificate.value)
    if status == "time_limit":  # the float phase stopped (there was no exact phase)
        notes.append(f"time limit {time_limit:g} s hit after {iterations} master solves and "
                     f"{rounds} exact rounds; " + (
                         f"the last master value {value:.12g} is a lower bound on the "
                         "optimum, not the optimum" if value == value else "no master was solved"))
    return ColgenResult(status, value, lp, solution, master, iterations, seconds, history,
                        certificate, certify_seconds if certify else None, notes, rounds)


@dataclass
class _ExactPhase:
    """What the exact phase of solve_colgen leaves: the exact master and its solution when
    they replace the float ones (else None), the certificate, the exact rounds solved, the
    seconds, and its notes."""

    lp: LinearProgram | None
    solution: LPSolution | None
    certificate: Certificate
    rounds: int
    seconds: float
    notes: list[str]


def _exact_phase(master: MasterData, chosen: list[np.ndarray], float_optimal: bool,
                 time_left: Callable[[], float | None], time_limit: float | None,
                 max_rounds: int) -> _ExactPhase:
    """Certify the master on the float solution's basic priorities `chosen`; an improving
    priority found by the exact pricing joins them and the exact master is solved again
    (the float duals of a degenerate master need not be the exact ones). A float phase that
    did not end optimal (float_optimal False) is priced exactly once."""
    t0 = time.perf_counter()
    rounds, timed_out, certificate, notes = 0, False, None, []
    while True:
        left = time_left()
        if left is not None and left <= 0:
            timed_out = True
            break
        rounds += 1
        lp_round, solution_round, round_certificate, missed = certify_master(
            master, chosen, time_limit=left)
        if solution_round.status == "time_limit":
            rounds -= 1  # the exact master of this round was not solved
            timed_out = True
            break
        lp, solution, certificate = lp_round, solution_round, round_certificate
        if certificate.certified or missed is None or rounds >= max_rounds or not float_optimal:
            break
        if any(np.array_equal(missed, p) for p in chosen):
            certificate.reason += " (the improving priority is already in the master)"
            break
        chosen.append(missed)
    if rounds > 1:
        notes.append(f"exact pricing added {rounds - 1} priorities the float pricing did not need")
    if timed_out:
        # the float optimum stands, labelled: the exact phase did not finish in time
        reason = (f"time limit {time_limit:g} s hit in the exact phase after {rounds} exact "
                  "rounds; the float optimum is NOT certified")
        if certificate is not None:
            reason += f" (last exact round: {certificate.reason})"
        notes.append(reason)
        return _ExactPhase(None, None, Certificate(False, None, reason, time.perf_counter() - t0),
                           rounds, time.perf_counter() - t0, notes)
    keep = float_optimal or certificate.certified
    return _ExactPhase(lp if keep else None, solution if keep else None, certificate, rounds,
                       time.perf_counter() - t0, notes)


# ---------------------------------------------------------------------------
# the optimal selection mixture
# ---------------------------------------------------------------------------

@dataclass
class SelectionMixture:
    """An optimal selection verifier read off the master's solution (module docstring).

    priorities [k][P]: the priorities with lambda_k > 0 (leaf indices, best first);
    weights [k]: lambda_k (Fractions when exact, else float); leaf_law [P]: the optimal
    skewed law r = sum_k lambda_k r_k on the leaves (Fractions when exact, else float64);
    path_tokens [P, L]: token ids of the leaves; exact: True when read from the certified
    exact point (then node_optimum with leaf_law reproduces the certified optimum exactly).
    """

    priorities: list[np.ndarray]
    weights: list[Any]
    leaf_law: np.ndarray
    path_tokens: np.ndarray
    exact: bool

    def to_json(self) -> dict[str, Any]:
        """JSON form: priorities as lists of leaf indices, exact numbers as fraction strings."""
        text = fraction_text if self.exact else float
        return {"priorities": [p.tolist() for p in self.priorities],
                "weights": [text(w) for w in self.weights],
                "leaf_law": [text(v) for v in self.leaf_law],
                "path_tokens": self.path_tokens.tolist(), "exact": self.exact}


def common_denominator_sum(weights: list[fmpq], laws: list[list[fmpq]], size: int) -> list[fmpq]:
    """sum_k weights[k] laws[k] ([size] fmpq, exactly), over one common denominator: with
    D = lcm of the weights' denominators and E = lcm of the laws' entries' denominators,
    entry x is (sum_k (w_k D) (law_k(x) E)) / (D E), integer products and sums (fmpz), one
    reduction per entry. (The weights of a certified master are basis solves with
    denominators of ~30,000 bits at (V, L, K) = (4, 3, 3): summed one fraction at a time,
    every addition reduced by a gcd of that size, about 1 ms each.)"""
    common_w, common_law = fmpz(1), fmpz(1)
    for w in weights:
        common_w = common_w.lcm(w.q)
    for law in laws:
        for v in law:
            common_law = common_law.lcm(v.q)
    scaled_w = [w.p * (common_w // w.q) for w in weights]
    total = [fmpz(0)] * size
    for w, law in zip(scaled_w, laws, strict=True):
        total = [t + w * (v.p * (common_law // v.q)) for t, v in zip(total, law, strict=True)]
    denominator = common_w * common_law
    return [fmpq(t, denominator) for t in total]


def selection_mixture(result: ColgenResult) -> SelectionMixture:
    """The priorities with positive weight, their weights and the skewed law r of a column
    generation result: exact from the certificate's primal point when certified, else
    float64 from the HiGHS solution."""
    lp, master = result.lp, result.master
    priorities = lp.meta["priorities"]
    first_lambda = lp.meta["num_rho"] + lp.meta["num_a"]
    certificate = result.certificate
    exact = certificate is not None and certificate.certified and certificate.primal is not None
    if exact:
        weights_exact = [certificate.primal[first_lambda + k] for k in range(len(priorities))]
        chosen = [k for k, w in enumerate(weights_exact) if w > 0]
        total = common_denominator_sum([weights_exact[k] for k in chosen],
                                       [to_fmpq(priority_law(master, priorities[k], exact=True))
                                        for k in chosen], master.num_leaves)
        leaf_law = np.empty(master.num_leaves, dtype=object)
        leaf_law[:] = [fmpq_to_fraction(v) for v in total]
        weights = [fmpq_to_fraction(weights_exact[k]) for k in chosen]
    else:
        weights_all = [float(result.solution.x[first_lambda + k]) for k in range(len(priorities))]
        chosen = [k for k, w in enumerate(weights_all) if w > 0]
        leaf_law = np.zeros(master.num_leaves)
        for k in chosen:
            leaf_law = leaf_law + weights_all[k] * priority_law(master, priorities[k])
        weights = [weights_all[k] for k in chosen]
    return SelectionMixture([np.asarray(priorities[k]) for k in chosen], weights, leaf_law,
                            master.path_tokens, exact)


# ---------------------------------------------------------------------------
# the node-budget master: the same column generation on the class LP's node form
# ---------------------------------------------------------------------------

@dataclass
class NodeMasterResult:
    """Column generation over priorities on the node-budget form of the class LP.

    value: float optimum of the last master (a lower bound on the optimum up to float
    error); priorities / weights: the priorities with lambda > 0 and their float weights;
    chain_duals [N-1] float duals nu(z) >= 0 of the chain rows beta(z) <= p(t|u) beta(u)
    (root children: beta(t) <= p(t)) of the solve whose weak-duality bound (with the
    smallest feasible budget duals) was the smallest; history: one dict per master solve."""

    status: str
    value: float
    priorities: list[np.ndarray]
    weights: list[float]
    chain_duals: np.ndarray
    iterations: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _node_marginals(law: np.ndarray, vocab: int, depth: int) -> np.ndarray:
    """[N-1] r(z) for the nodes of depth 1..L of a leaf law [P] (lexicographic)."""
    levels = [law]
    for _ in range(depth - 1):
        levels.append(levels[-1].reshape(-1, vocab).sum(axis=1))
    return np.concatenate(levels[::-1])


def _node_master_highs(model: TreeModel) -> Any:
    """The node-budget master's HiGHS model without lambda columns: rows budget z
    (0..count-1), chain z (count..2 count-1), convexity (2 count); one beta column per node
    of depth 1..L (solve_node_master)."""
    vocab, depth = model.vocab_size, model.depth
    count = num_nodes(vocab, depth) - 1  # nodes of depth 1..L (node index - 1)
    target = np.asarray(model.target, dtype=np.float64)
    h = new_highs()
    h.setOptionValue("presolve", "off")
    h.setOptionValue("solver", "simplex")
    h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    h.setOptionValue("primal_feasibility_tolerance", 1e-10)
    h.setOptionValue("dual_feasibility_tolerance", 1e-10)
    h.setOptionValue("small_matrix_value", 1e-12)
    lower = np.concatenate([np.full(2 * count, -np.inf), [1.0]])
    upper = np.zeros(2 * count + 1)
    upper[count: count + vocab] = target[0]  # root children: beta(t) <= p(t)
    upper[-1] = 1.0
    h.addRows(len(lower), lower, upper, 0, np.zeros(1, dtype=np.int32),
              np.zeros(0, dtype=np.int32), np.zeros(0))
    inner = num_nodes(vocab, depth - 1) - 1  # nodes of depth 1..L-1 have children
    for z in range(count):  # beta(z): budget z, chain z, and the chains of its children
        rows = [z, count + z]
        values = [1.0, 1.0]
        node = z + 1
        if z < inner:
            first = node * vocab + 1  # first child of the node
            rows += list(range(count + first - 1, count + first - 1 + vocab))
            values += list(-target[node])
        h.addCol(1.0, 0.0, np.inf, len(rows), np.asarray(rows, dtype=np.int32),
                 np.asarray(values, dtype=np.float64))
    return h


@dataclass
class _NodePricing:
    """The node master's part of the loop: price the budget duals (plus the smoothed and the
    smallest feasible ones), keep the chain duals of the best weak-duality bound; a warm
    solve that is not optimal is solved cold, then with presolve."""

    master: MasterData
    h: Any
    tolerance: float
    smoothing: float
    priorities: list[np.ndarray] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    value: float = float("nan")
    best: float = float("inf")
    center: np.ndarray | None = None
    best_nu: np.ndarray | None = None  # chain duals of the best bound (zeros before any)
    notes: list[str] = field(default_factory=list)
    failed: str | None = None  # the status of a cold re-solve that did not end optimal
    converged: bool = False  # the pricing test ended the loop (no improving column, or the
    # master value within tolerance of the best bound)
    count: int = field(init=False)  # nodes of depth 1..L: budget rows, then as many chain rows
    target: np.ndarray = field(init=False)  # [N, V] float64 target rows
    leaf_paths: np.ndarray = field(init=False)  # [P, L] the budget rows of every leaf's prefixes

    def __post_init__(self) -> None:
        model = self.master.model
        self.count = num_nodes(model.vocab_size, model.depth) - 1
        self.target = np.asarray(model.target, dtype=np.float64)
        self.best_nu = np.zeros(self.count)
        self.leaf_paths = prefix_node_indices(self.master.path_tokens, model.vocab_size)[:, 1:] - 1

    def add(self, priority: np.ndarray) -> None:
        model = self.master.model
        marginal = _node_marginals(priority_law(self.master, priority), model.vocab_size,
                                   model.depth)
        nz = np.nonzero(marginal)[0]
        _add_column(self.h, np.concatenate([nz, [2 * self.count]]),
                    np.concatenate([-marginal[nz], [1.0]]))
        self.priorities.append(np.asarray(priority))

    def recover(self, iteration: int, status: str) -> str:
        return _solve_cold(self.h, ("off", "on"))

    def price(self, iteration: int, started: float) -> bool:
        master, count, leaf_paths = self.master, self.count, self.leaf_paths
        self.value = 1.0 + float(self.h.getInfo().objective_function_value)
        if self.value > self.best + self.tolerance:
            # a master value above a weak-duality bound already proven (up to float error):
            # the warm solve ended "optimal" at a wrong point (V = 8, L = 4, K = 2, alpha 1:
            # 1.6e-6 above it, which ended the loop by the gap test with bounds 4.7e-8 apart);
            # solve it cold and price that solve instead
            status = _solve_cold(self.h, ("off", "on"))
            self.notes.append(f"iteration {iteration}: master value {self.value:.17g} above the "
                              f"bound {self.best:.17g}; solved cold ({status})")
            if status != "optimal":
                self.failed = status
                return True
            self.value = 1.0 + float(self.h.getInfo().objective_function_value)
        row_dual = np.asarray(self.h.getSolution().row_dual, dtype=np.float64)
        mu, sigma = np.abs(row_dual[:count]), abs(row_dual[-1])
        nu = np.abs(row_dual[count: 2 * count])
        feasible = _feasible_budget_duals(nu, self.target, master.model.vocab_size,
                                          master.model.depth)
        bound = 1.0 + float(self.target[0] @ nu[:master.model.vocab_size]) + _expected_max(
            master, feasible[leaf_paths].sum(axis=1))[1]
        if bound < self.best:
            self.best, self.center, self.best_nu = bound, mu, nu
        theta = mu[leaf_paths].sum(axis=1)
        priority, expected = _expected_max(master, theta)
        reduced = expected - sigma
        self.history.append({"iteration": iteration, "value": self.value, "bound": bound,
                             "max_reduced_cost": reduced})
        if reduced <= self.tolerance or abs(self.best - self.value) <= self.tolerance:
            self.converged = True
            return True
        # the greedy priority of the current duals, plus those of the smoothed duals and of
        # the smallest feasible budget duals when they also improve the current master
        self.add(priority)
        others = [feasible[leaf_paths].sum(axis=1)]
        if self.smoothing and self.center is not None:
            others.append((self.smoothing * self.center + (1 - self.smoothing) * mu)
                          [leaf_paths].sum(axis=1))
        for point in others:
            candidate, _ = _expected_max(master, point)
            if (not any(np.array_equal(candidate, p) for p in self.priorities[-3:])
                    and float(priority_law(master, candidate) @ theta) - sigma > self.tolerance):
                self.add(candidate)
        return False


def solve_node_master(master: MasterData, tolerance: float = 1e-10,
                      max_iterations: int = 20_000, time_limit: float | None = None,
                      smoothing: float = 0.5) -> NodeMasterResult:
    """The K-path optimum by column generation on the class LP in node-budget form
    (docs/theory.md sections 5.4, 5.5: class LP = full LP), float64, i.i.d. drafts:

        max 1 + sum_z beta(z)  s.t.  beta(z) - sum_k lambda_k r_k(z) <= 0   (budget rows)
                                     beta(u t) - p(t|u) beta(u) <= 0         (chain rows;
                                                                root children: beta(t) <= p(t))
                                     sum_k lambda_k = 1,  beta, lambda >= 0,
    z over the nodes of depth 1..L, r_k(z) the node marginal of priority k's law. For a fixed
    mixture the beta part is BV's node LP against it; pricing: with mu(z) >= 0 the budget
    duals, Theta(x) = sum of mu over the prefixes of leaf x, the best priority ranks the
    leaves by Theta (the greedy vertex), reduced cost r . Theta - sigma (sigma the
    convexity dual). About 2N rows instead of the selection master's P + N V (no rho
    columns): the solve of choice where the optimum is certified by exact bounds
    (node_master_bounds), not by an exact basis. Wentges smoothing of mu (weight
    `smoothing` on the duals of the best bound seen) when it finds an improving column."""
    start = time.perf_counter()
    model = master.model
    pricing = _NodePricing(master, _node_master_highs(model), tolerance, smoothing)
    pricing.add(np.argsort(-master.q, kind="stable"))
    for ratio in (target_over_draft(model, clip=False), target_over_draft(model, clip=True)):
        # GBV's orders (docs/theory.md 9.1)
        pricing.add(lexicographic_priority(ratio, model.vocab_size, model.depth))
    status, iterations = _column_loop(pricing, max_iterations, _clock(time_limit, start))
    status = pricing.failed or status
    if status == "optimal" and not pricing.converged:  # stopped by max_iterations
        status = "iteration_limit"
    weights_all = np.asarray(pricing.h.getSolution().col_value[pricing.count:], dtype=np.float64)
    chosen = [k for k, w in enumerate(weights_all) if w > 0]
    return NodeMasterResult(status, pricing.value, [pricing.priorities[k] for k in chosen],
                            [float(weights_all[k]) for k in chosen], pricing.best_nu, iterations,
                            time.perf_counter() - start, pricing.history, pricing.notes)


def target_over_draft(model: TreeModel, clip: bool = False) -> np.ndarray:
    """[N, V] float64 p(t|u)/q(t|u) (0 where q = 0), clipped at 1 when clip."""
    target = np.asarray(model.target, dtype=np.float64)
    draft = np.asarray(model.draft, dtype=np.float64)
    ratio = np.divide(target, draft, out=np.zeros_like(target), where=draft > 0)
    return np.minimum(ratio, 1.0) if clip else ratio


def lexicographic_priority(ratio: np.ndarray, vocab: int, depth: int) -> np.ndarray:
    """[P] the leaves best first under the lexicographic order of the node keys
    (ratio(t|u), t), higher better (GBV's priority): an initial column of the node master."""
    leaf_tokens = all_paths(vocab, depth)
    nodes = prefix_node_indices(leaf_tokens, vocab)  # [P, L+1]
    tokens = np.arange(vocab)[None, :].repeat(len(ratio), 0)
    order = np.lexsort((-tokens, -ratio), axis=1)  # per node: best token first
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, tokens, axis=1)  # rank[u, t]: 0 = best
    keys = [rank[nodes[:, i], leaf_tokens[:, i]] for i in range(depth)]
    return np.lexsort(keys[::-1])  # the depth-1 rank is the primary key


def _feasible_budget_duals(nu: np.ndarray, target: np.ndarray, vocab: int, depth: int
                           ) -> np.ndarray:
    """[N-1] the smallest budget duals mu(z) = max(0, 1 - nu(z) + sum_t p(t|z) nu(z t)) that
    make every beta column dual feasible for chain duals nu >= 0 (float64; node_master_bounds
    evaluates the same in exact rationals)."""
    count = len(nu)
    inner = num_nodes(vocab, depth - 1) - 1  # nodes of depth 1..L-1 (rows 0..inner-1)
    below = np.zeros(count)
    if inner:
        node = np.arange(1, inner + 1)
        below[:inner] = (target[node] * nu[node[:, None] * vocab + np.arange(vocab)]).sum(1)
    return np.maximum(0.0, 1.0 - nu + below)


def _expected_max(master: MasterData, theta: np.ndarray) -> tuple[np.ndarray, float]:
    """(greedy priority: leaves by theta descending, E[max_k theta(X_k)] in float64)."""
    priority = np.argsort(-theta, kind="stable")
    return priority, float(priority_law(master, priority) @ theta)


def node_master_bounds(model: TreeModel, master: MasterData, result: NodeMasterResult
                       ) -> tuple[Fraction, Fraction]:
    """Exact (lower, upper) bounds on the K-path optimum (i.i.d.) from a node-master run.

    lower: BV's exact value against the mixture of the result's priorities, its float
    weights rationalised and renormalised (a lossless select-then-BV verifier: a mixture of
    greedy vertices is a reachable skewed law, docs/theory.md section 5.3).
    upper: weak duality of the node-budget class LP with the chain duals nu >= 0
    rationalised and the budget duals set to the smallest feasible
    mu(z) = max(0, 1 - nu(z) + sum_t p(t|z) nu(z t)) (nu(z t) = 0 below depth L): every
    beta column is then dual feasible, and sigma = max over ALL priorities of r . Theta =
    E[max of Theta over the K drafts] (exact pricing of every priority at once), so
        upper = 1 + sum_t p(t) nu(t) + E[max_k Theta(X_k)].
    Both in exact rationals of the model's rows (model exact). The upper bound is the
    smaller of those at the float duals and at the same duals snapped (_snapped_chain_duals):
    weak duality holds at both."""
    weights = [Fraction(w) for w in result.weights]
    total = sum(weights, Fraction(0))
    leaf_law = np.array([Fraction(0)] * master.num_leaves, dtype=object)
    for weight, priority in zip(weights, result.priorities, strict=True):
        leaf_law = leaf_law + (weight / total) * priority_law(master, priority, exact=True)
    _, lower = node_optimum(model, exact=True, leaf_law=leaf_law)
    float_nu = np.array([max(Fraction(float(v)), Fraction(0)) for v in result.chain_duals],
                        dtype=object)
    upper = min(_dual_bound(model, master, nu)
                for nu in (float_nu, _snapped_chain_duals(model, float_nu)))
    return Fraction(lower), Fraction(upper)


SNAP = Fraction(1, 10**8)  # _snapped_chain_duals: a float chain dual this near 0 or W(z) is set to it


def _snapped_chain_duals(model: TreeModel, nu: np.ndarray) -> np.ndarray:
    """[N-1] chain duals nu >= 0 repaired bottom-up in exact rationals (a second candidate
    for node_master_bounds' weak-duality bound, which holds for ANY nu >= 0).

    With W(z) = 1 + sum_t p(t|z) nu(z t) (W = 1 at depth L), a beta column is dual feasible
    with mu(z) = max(0, W(z) - nu(z)); at an optimal dual point mu(z) + nu(z) = W(z) wherever
    beta(z) > 0, so nu(z) lies in [0, W(z)]. The float duals of the master meet this only to
    the solver's tolerance, and each small error adds a positive mu(z) (or raises W above)
    over thousands of nodes (at V = 8, L = 4, K = 2, alpha 1 the bound was 4.7e-8 above the
    lower one). Snapped: nu(z) = 0 when the float nu(z) <= SNAP, W(z) when it is within SNAP
    of W(z) or above it (above W only raises the parents' mu), else its exact float value;
    W from the already snapped children."""
    vocab, depth = model.vocab_size, model.depth
    inner = num_nodes(vocab, depth - 1) - 1  # rows 0..inner-1: nodes of depth 1..L-1
    out = np.array(nu, dtype=object)
    for z in range(len(nu) - 1, -1, -1):  # deepest rows first (shortlex order)
        node = z + 1
        whole = Fraction(1)
        if z < inner:
            first = node * vocab + 1
            whole += sum((model.target[node, t] * out[first - 1 + t] for t in range(vocab)),
                         Fraction(0))
        value = out[z]
        out[z] = (Fraction(0) if value <= SNAP else whole if value >= whole - SNAP else value)
    return out


def _dual_bound(model: TreeModel, master: MasterData, nu: np.ndarray) -> Fraction:
    """Weak duality of the node-budget class LP at chain duals nu >= 0 (exact): with the
    smallest feasible budget duals mu and every priority priced exactly,
    1 + sum_t p(t) nu(t) + E[max_k Theta(X_k)] (node_master_bounds)."""
    vocab, depth = model.vocab_size, model.depth
    count = num_nodes(vocab, depth) - 1
    mu = np.empty(count, dtype=object)
    inner = num_nodes(vocab, depth - 1) - 1  # nodes of depth 1..L-1 have children rows
    for z in range(count):
        node = z + 1
        below = Fraction(0)
        if z < inner:
            first = node * vocab + 1
            below = sum((model.target[node, t] * nu[first - 1 + t] for t in range(vocab)),
                        Fraction(0))
        mu[z] = max(Fraction(0), 1 - nu[z] + below)
    leaf_rows = prefix_node_indices(master.path_tokens, vocab)[:, 1:] - 1
    theta = [sum((mu[r] for r in row), Fraction(0)) for row in leaf_rows]
    order = sorted(range(master.num_leaves), key=lambda x: theta[x], reverse=True)
    expected = sum((a * b for a, b in zip(priority_law(master, np.asarray(order), exact=True)
                                          [order], [theta[x] for x in order], strict=True)),
                   Fraction(0))
    upper = 1 + sum((model.target[0, t] * nu[t] for t in range(vocab)), Fraction(0)) + expected
    return upper
