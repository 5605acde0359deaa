"""The claims proved cell by cell (what `speclp prove CLAIM` runs on every cell).

Each claim is a function cell -> CellResult, run with the cell active on the shape's
symbolic rows. Verifier laws come from the registry (speclp.verifiers: the same law
functions as everywhere), LPs from speclp.lp.full, certificates from speclp.lp.certify.

bv-optimal (V, L)       BV's law is an optimal point of the K = 1 full LP: the law is
                        lossless (its output continued by target sampling is the target
                        law: identities), feasible (A x = b identities, x >= 0) and its
                        objective equals b^T y for a dual y (from the optimal basis at the
                        witness, solved on the cell) whose reduced costs are <= 0 on the cell.
token-optimal (V, L)    the same for token-level verification (false for L >= 2: a cell
                        where the identity fails is a counterexample).
l1-optimum (V, K, s)    L = 1: the K-path full LP optimum (basis solved on the cell,
                        primal and dual checked) = 1 + min over threshold sets H of
                        p(H) + 1 - Q(H), Q(H) = P(all K drafts in H) (from the LP
                        builder's configuration weights), H = {x : p(x)/q(x) <= theta}.
gbv-k1-is-bv (V, L)     GBV's law with K = 1 equals BV's law (joint of output node and
                        token), configuration by configuration.
gbv-l1-closed-form      L = 1, K i.i.d. paths: GBV's acceptance E[tau] equals
                        sum_x min(p(x), F(x)^K - F(x-)^K), F the draft CDF in the key order
                        (p/q, x) (q = 0: ratio 0, GBV's convention); and the limit as
                        K -> infinity is p(x*), x* the highest-key token with q(x*) > 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...verifiers.exact import aggregate, block_efficiency_from_emit, configurations, continued_law
from ...verifiers.exact import draft_tree as make_draft_tree
from ...verifiers.registry import block_law
from .cells import Cell, Unsupported, active_cell
from .lp_side import (
    full_program,
    objective_values,
    point_checks,
    single_path_law_point,
    symbolic_optimum,
    without_bonus_rows,
)

CLAIMS = ("bv-optimal", "token-optimal", "l1-optimum", "gbv-k1-is-bv", "gbv-l1-closed-form")


@dataclass
class CellResult:
    """What a claim computed on one cell.

    values: named CellExpr values (exported); identities: (name, value) that must be the
    zero function; inequalities: (name, value, rel) decided true on the cell (value rel 0);
    lp: {"program", "primal", "dual"} when the claim is an LP statement; excluded: the
    cell is outside the claim's domain (why); failures: identities that are NOT zero.
    """

    values: dict[str, Any] = field(default_factory=dict)
    identities: list[tuple[str, Any]] = field(default_factory=list)
    inequalities: list[tuple[str, Any, str]] = field(default_factory=list)
    lp: dict[str, Any] | None = None
    excluded: str | None = None
    failures: list[tuple[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def require_zero(self, name: str, value: Any) -> bool:
        """Record an identity; False (and a failure) when value is not the zero function.

        A value that is not the zero function but vanishes at the witness does not refute
        the claim on the cell (the witness may be a degenerate point of it): the cell is
        split by the value's sign instead (Branch from the active cell)."""
        zero = value.is_zero() if hasattr(value, "is_zero") else value == 0
        if zero:
            self.identities.append((name, value))
            return True
        if hasattr(value, "is_zero"):
            cell = active_cell()
            if value.evaluate(cell.witness) == 0 and cell.decide(value, "=="):
                self.identities.append((name, value))  # zero on the cell (not syntactically)
                return True
        self.failures.append((name, value))
        return False

    def require(self, cell: Cell, name: str, value: Any, rel: str) -> None:
        """Record value rel 0, decided on the cell (Branch when it is not determined)."""
        ops = {">": "__gt__", ">=": "__ge__", "<": "__lt__", "<=": "__le__"}
        if not hasattr(value, "is_zero"):
            ok = getattr(value, ops[rel])(0)
        else:
            ok = cell.decide(value, {">": ">", ">=": ">=", "<": "<", "<=": "<="}[rel])
        if not ok:
            raise AssertionError(f"{name}: {value} {rel} 0 is false on the cell")
        self.inequalities.append((name, value, rel))


def _law(cell: Cell, verifier: str, paths: int = 1, draft_sampling: str = "iid") -> tuple:
    model = cell.model()
    configs = configurations(model, paths, draft_sampling)
    law = block_law(verifier, make_draft_tree(model, configs.tokens))
    emit = aggregate(model, configs, law)
    return model, configs, law, emit, block_efficiency_from_emit(model, emit)


def _lossless(result: CellResult, model: Any, emit: Any, verifier: str) -> None:
    continued = continued_law(model, emit)
    result.extra["continued_law"] = list(continued)
    target = model.target_path_probabilities(model.depth + 1)
    for s, (a, b) in enumerate(zip(continued, target, strict=True)):
        result.require_zero(f"{verifier} lossless: P(output continued = sequence {s}) - p", a - b)


def single_path_optimal(cell: Cell, verifier: str) -> CellResult:
    """bv-optimal / token-optimal on one cell (see the module docstring)."""
    result = CellResult()
    model, configs, law, emit, efficiency = _law(cell, verifier)
    result.values[f"{verifier} block efficiency"] = efficiency
    _lossless(result, model, emit, verifier)
    lp, structure = full_program(model, 1, "iid")
    optimum = symbolic_optimum(lp, cell, need_primal=False)
    _, dual = without_bonus_rows(structure, lp, None, optimum.dual, cell)
    optimum.dual = dual
    x = single_path_law_point(structure, lp, configs.tokens, configs.probability, law)
    primal_value, dual_value = objective_values(lp, x, optimum.dual)
    result.values["LP dual objective b^T y"] = dual_value
    result.require_zero(f"{verifier} objective c^T x - {verifier} block efficiency",
                        primal_value - efficiency)
    gap = dual_value - efficiency
    if not (gap.is_zero() if hasattr(gap, "is_zero") else gap == 0):
        return _single_path_refutation(result, cell, lp, structure, efficiency, verifier)
    result.require_zero(f"b^T y - {verifier} block efficiency", gap)
    checks = point_checks(lp, x, optimum.dual)
    if not all(checks["checks"].values()):
        raise AssertionError(f"law point / dual checks failed on the cell: {checks['checks']}")
    result.lp = {"program": lp, "primal": x, "dual": optimum.dual,
                 "reduced": checks["reduced"], "witness_optimum": optimum.witness_value}
    return result


def _single_path_refutation(result: CellResult, cell: Cell, lp: Any, structure: Any,
                            efficiency: Any, verifier: str) -> CellResult:
    """b^T y (the witness basis's dual) differs from the law's objective on the cell. That
    refutes nothing by itself (the dual may be infeasible on part of the cell), so the LP
    optimum is PROVED on the cell first: the witness basis's primal and dual (bonus rows
    frozen), every certificate check decided on the cell (a Branch splits it). Only then is
    "LP optimum - block efficiency", a nonzero rational function, a failure of the claim on
    the cell; a check decided false leaves the cell unresolved (Unsupported)."""
    optimum = symbolic_optimum(lp, cell, need_primal=False)
    primal, dual = without_bonus_rows(structure, lp, optimum.primal, optimum.dual, cell)
    checks = point_checks(lp, primal, dual)
    if not all(checks["checks"].values()):
        raise Unsupported(f"cell {cell.ident}: the witness basis is not optimal on the cell "
                          f"({checks['checks']}); no refutation")
    primal_value, dual_value = objective_values(lp, primal, dual)
    if not result.require_zero("LP optimum c^T x - b^T y", primal_value - dual_value):
        raise Unsupported(f"cell {cell.ident}: primal and dual objectives differ on the cell")
    result.values["LP optimum (basis proved optimal on the cell)"] = primal_value
    result.lp = {"program": lp, "primal": primal, "dual": dual, "reduced": checks["reduced"],
                 "witness_optimum": optimum.witness_value}
    result.require_zero(f"LP optimum - {verifier} block efficiency", primal_value - efficiency)
    return result


def threshold_sets(cell: Cell, p: list, q: list) -> list[tuple[int, ...]]:
    """The sublevel sets of the ratio p/q (ties kept together): the empty set, everything,
    and H_y = {x : p(x) q(y) <= p(y) q(x)} for every token y. For q(y) > 0 that is
    {x : p(x)/q(x) <= p(y)/q(y)} (q(x) = 0 counts as ratio +inf unless p(x) = 0); for q(y) = 0
    it is everything. Together: every set {x : p(x) <= theta q(x)} (theta = 0 gives
    H_y of a y with p(y) = 0 < q(y), or only tokens with p = q = 0, whose f is f(empty)).
    The comparisons are decided by the cell."""
    vocab = len(p)
    sets = {(), tuple(range(vocab))}
    for y in range(vocab):
        sets.add(tuple(x for x in range(vocab) if p[x] * q[y] <= p[y] * q[x]))
    return sorted(sets, key=lambda s: (len(s), s))


def l1_optimum(cell: Cell, paths: int, draft_sampling: str) -> CellResult:
    """The closed form first (threshold sets, the minimiser H*: the cell is split where they
    change), then the LP: the optimal basis at the cell's basis point, solved on the cell."""
    result = CellResult()
    model = cell.model()
    try:
        lp, structure = full_program(model, paths, draft_sampling)
    except ValueError as err:  # fewer than K paths of positive draft probability
        result.excluded = str(err)
        return result
    vocab = model.vocab_size
    p = [model.target[0, t] for t in range(vocab)]
    q = [model.draft[0, t] for t in range(vocab)]
    configs = structure.configs
    members = [set(int(x) for x in configs.paths[c]) for c in range(len(configs))]

    def closed(h: tuple[int, ...]) -> Any:
        inside = sum((configs.weight[c] for c in range(len(configs)) if members[c] <= set(h)), 0)
        return sum((p[x] for x in h), 0) + 1 - inside

    candidates = threshold_sets(cell, p, q)
    values = {h: closed(h) for h in candidates}
    best = candidates[0]
    for h in candidates[1:]:  # ties: either is a minimiser, so only strict signs matter
        if cell.weak_order(values[h] - values[best]) < 0:
            best = h
    for h in candidates:
        if h != best:
            result.require(cell, f"f(H*) - f({set(h) or '{}'}) <= 0", values[best] - values[h],
                           "<=")
    result.extra.update({"threshold_sets": candidates, "best": best,
                         "draft_sampling": draft_sampling,
                         "configurations": [tuple(int(structure.configs.path_tokens[x][0])
                                                  for x in row)
                                            for row in structure.configs.paths]})
    result.values["threshold set H*"] = best
    result.values["1 + p(H*) + 1 - Q(H*)"] = 1 + values[best]
    optimum = symbolic_optimum(lp, cell, need_primal=False)
    primal, dual = without_bonus_rows(structure, lp, optimum.primal, optimum.dual, cell)
    primal_value, dual_value = objective_values(lp, primal, dual)
    result.values["LP optimum"] = primal_value
    if not result.require_zero("b^T y - (1 + p(H*) + 1 - Q(H*))", dual_value - 1 - values[best]):
        return result
    if not result.require_zero("c^T x - b^T y", primal_value - dual_value):
        return result
    checks = point_checks(lp, primal, dual)
    if not all(checks["checks"].values()):
        raise AssertionError(f"primal / dual checks failed on the cell: {checks['checks']}")
    result.lp = {"program": lp, "primal": primal, "dual": dual, "reduced": checks["reduced"],
                 "witness_optimum": optimum.witness_value}
    return result


def gbv_k1_is_bv(cell: Cell) -> CellResult:
    result = CellResult()
    model, configs, bv, _, bv_efficiency = _law(cell, "bv")
    _, _, gbv, _, gbv_efficiency = _law(cell, "gbv")
    bv_joint, gbv_joint = bv.joint(), gbv.joint()
    for flat, (a, b) in enumerate(zip(bv_joint.reshape(-1), gbv_joint.reshape(-1), strict=True)):
        result.require_zero(f"GBV - BV joint law, entry {flat}", b - a)
    result.extra.update({"left": list(bv_joint.reshape(-1)), "right": list(gbv_joint.reshape(-1))})
    result.values["BV block efficiency"] = bv_efficiency
    result.values["GBV block efficiency"] = gbv_efficiency
    return result


def key_order(cell: Cell, p: list, q: list) -> list[int]:
    """Tokens in ascending key (p/q, x), ratio 0 when q = 0 (GBV's convention)."""
    vocab = len(p)
    ratio = [p[x] / q[x] if q[x] != 0 else 0 for x in range(vocab)]
    order: list[int] = []
    for x in range(vocab):  # insertion sort: every comparison decided by the cell
        position = len(order)
        while position > 0 and (ratio[x] < ratio[order[position - 1]]):
            position -= 1
        order.insert(position, x)
    return order


def gbv_l1_closed_form(cell: Cell, paths: int) -> CellResult:
    result = CellResult()
    model, configs, law, emit, efficiency = _law(cell, "gbv", paths, "iid")
    vocab = model.vocab_size
    p = [model.target[0, t] for t in range(vocab)]
    q = [model.draft[0, t] for t in range(vocab)]
    order = key_order(cell, p, q)
    closed, below, choices = 0, 0, []
    for x in order:
        upper = below + q[x]
        r = upper**paths - below**paths
        pick_p = cell.weak_order(p[x] - r) <= 0  # min(p, r): ties either way
        choices.append("p" if pick_p else "r")
        closed = closed + (p[x] if pick_p else r)
        below = upper
    result.extra.update({"key_order": order, "choices": choices, "acceptance": efficiency - 1,
                         "paths": paths})
    result.values["GBV acceptance E[tau]"] = efficiency - 1
    result.values["sum_x min(p(x), F(x)^K - F(x-)^K)"] = closed
    result.values["key order (ascending)"] = tuple(order)
    result.require_zero("E[tau] - sum_x min(p(x), F(x)^K - F(x-)^K)", efficiency - 1 - closed)
    _lossless(result, model, emit, "gbv")
    # the limit K -> infinity: x* = highest-key token with q > 0
    top = next(x for x in reversed(order) if q[x] != 0)
    result.values["x* (limit: acceptance -> p(x*))"] = top
    result.extra["x_star"] = top
    result.require(cell, "q(x*) > 0", q[top], ">")
    for x in order[order.index(top) + 1:]:
        result.require_zero(f"q({x}) (ranked above x*)", q[x])
    return result


def claim_function(claim: str, paths: int = 1, draft_sampling: str = "iid") -> Any:
    if claim == "bv-optimal":
        return lambda cell: single_path_optimal(cell, "bv")
    if claim == "token-optimal":
        return lambda cell: single_path_optimal(cell, "token")
    if claim == "l1-optimum":
        return lambda cell: l1_optimum(cell, paths, draft_sampling)
    if claim == "gbv-k1-is-bv":
        return gbv_k1_is_bv
    if claim == "gbv-l1-closed-form":
        return lambda cell: gbv_l1_closed_form(cell, paths)
    raise ValueError(f"unknown claim {claim!r}; known: {', '.join(CLAIMS)}")
