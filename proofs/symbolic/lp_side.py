"""The LP of a cell: the project's builders and certificate code run on CellExpr data.

On a cell, speclp.lp.full.full_lp builds the information-agnostic LP with CellExpr
coefficients (ONE builder for numbers and functions; its float table is the witness
instance, see cells.CellExpr.__float__). The optimal basis is found at the cell's witness
point (speclp.lp.certify.solve_exact on the witness LP, certified in rationals), and the
same basis is then solved symbolically by speclp.lp.certify's exact code: its primal and
dual are rational functions on the cell, and every check of the certificate (x >= 0,
A x = b, reduced costs <= 0, equal objectives) is a comparison decided by the cell (or a
Branch that splits it). So "the basis is optimal on the whole cell" is proved, not
sampled.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np

from ...lp.certify import _basis_point, _evaluate, _exact_data, solve_exact
from ...lp.full import full_lp
from ...lp.program import LinearProgram
from ...verifiers.law import BlockLaw
from ...verifiers.tree import node_parents
from .algebra import RationalFunction, to_fraction
from .cells import Cell, Unsupported, cell_expr


@dataclasses.dataclass
class FullLayout:
    """Where things are in a full LP (speclp.lp.full.full_lp): configurations, slots
    (slot_config, slot_node, slot_depth [M]: the distinct nodes of every configuration's
    tree; pi column id = slot * V + y), matching-row keys u * V + t [R] (sorted)."""

    model: Any
    paths: int
    draft_sampling: str
    configs: Any
    slot_config: np.ndarray
    slot_node: np.ndarray
    slot_depth: np.ndarray
    match_keys: np.ndarray

    @property
    def vocab(self) -> int:
        return self.model.vocab_size

    @property
    def num_pi(self) -> int:
        return int(len(self.slot_node)) * self.vocab

    @property
    def num_marginal_rows(self) -> int:
        return len(self.configs) - 1

    def match_rows(self, keys: np.ndarray) -> np.ndarray:
        """Row index (within the LP) of matching-row keys u * V + t."""
        return self.num_marginal_rows + np.searchsorted(self.match_keys, keys)


def full_program(model: Any, paths: int, draft_sampling: str) -> tuple[LinearProgram, FullLayout]:
    """The project's full K-path LP of the (symbolic) model and its layout."""
    lp = full_lp(model, paths, draft_sampling, exact=True)
    slot_config, slot_node, slot_depth = lp.meta["slots"]
    layout = FullLayout(model, paths, draft_sampling, lp.meta["configurations_set"], slot_config,
                        slot_node, slot_depth, lp.meta["match_keys"])
    return lp, layout


def witness_table(table: np.ndarray, point: list[Any]) -> np.ndarray:
    """Exact table of the LP at a rational point (Fractions)."""
    out = np.empty(len(table), dtype=object)
    for i, v in enumerate(table):
        out[i] = to_fraction(v.evaluate(point)) if isinstance(v, RationalFunction) else Fraction(v)
    return out


def basis_point(cell: Cell) -> list:
    """The point where the LP basis is taken: the witness with every bonus-token row (target
    rows at depth L, see without_bonus_rows) set to (1, 0, ..., 0). There the rows (u, t),
    |u| = L, t > 0, force pi(c, u, t) = 0, so the optimal vertex found is a vertex of the LP
    without bonus tokens and its values do not depend on the bonus rows. The witness itself
    when that point is not in the cell (a condition on a bonus row)."""
    point = list(cell.witness)
    shape = cell.shape
    one, zero = type(point[0])(1), type(point[0])(0)
    for var in bonus_symbols(cell):
        point[var] = zero
    first = (shape.vocab**shape.depth - 1) // (shape.vocab - 1)
    for u in range(first, shape.num_nodes):
        point[shape.row_vars[("target", u)][0]] = one
    try:
        point = cell.complete(point)
    except ZeroDivisionError:
        return cell.witness
    return point if cell.contains(point) else cell.witness


def witness_basis(lp: LinearProgram, cell: Cell, point: list | None = None
                  ) -> tuple[tuple[np.ndarray, np.ndarray], Fraction]:
    """Optimal basis of the LP at a point of the cell (default: basis_point) and the
    certified optimum there."""
    exact = witness_table(lp.exact_table, basis_point(cell) if point is None else point)
    floats = np.array([float(v) for v in exact])
    witness_lp = dataclasses.replace(lp, exact_table=exact, table=floats)
    solution, cert = solve_exact(witness_lp)
    if not cert.certified or solution.basis is None:
        raise Unsupported(f"cell {cell.ident}: the LP at the witness point was not certified "
                          f"({cert.reason})")
    return solution.basis, cert.value


@dataclasses.dataclass
class SymbolicOptimum:
    """Basis primal x and dual y [rows eq then ub] (CellExpr or fmpq), LP value (CellExpr),
    the checks of the certificate (all decided True on the cell), the witness optimum."""

    lp: LinearProgram
    primal: list
    dual: list
    value: Any
    checks: dict[str, bool]
    witness_value: Fraction


def symbolic_optimum(lp: LinearProgram, cell: Cell, need_primal: bool = True) -> SymbolicOptimum:
    """The witness basis solved symbolically; with need_primal the whole certificate is
    checked on the cell (x >= 0 included), otherwise only the dual side is computed."""
    basis, witness_value = witness_basis(lp, cell)
    data = _exact_data(lp)
    x, y, _ = _basis_point(data, lp.num_vars, basis)
    checks: dict[str, bool] = {}
    value = None
    if need_primal:
        evaluation = _evaluate(data, lp, x, y)
        checks = dict(evaluation.checks)
        value = evaluation.primal_value
    return SymbolicOptimum(lp, x, y, value, checks, witness_value)


def objective_values(lp: LinearProgram, x: list, y: list) -> tuple[Any, Any]:
    """(c^T x + constant, b^T y + constant) with the LP's exact data."""
    data = _exact_data(lp)
    primal = data.constant + sum((data.objective[j] * x[j] for j in range(lp.num_vars)), 0)
    dual = data.constant + sum((data.rhs[i] * y[i] for i in range(data.num_rows)), 0)
    return primal, dual


def point_checks(lp: LinearProgram, x: list, y: list) -> dict[str, Any]:
    """The certificate's checks for a given primal x and dual y (decided on the cell):
    equality_rows, inequality_rows, primal_nonnegative, dual_sign, reduced_costs,
    objective_match; plus the reduced costs themselves."""
    data = _exact_data(lp)
    evaluation = _evaluate(data, lp, x, y)
    return {"checks": dict(evaluation.checks), "reduced": evaluation.reduced}


def reduced_costs(lp: LinearProgram, y: list) -> list:
    """c_j - a_j^T y for every column (the checker's dual feasibility rows)."""
    data = _exact_data(lp)
    reduced = list(data.objective)
    for r, c, ref in zip(data.rows.tolist(), data.cols.tolist(), data.refs.tolist(), strict=True):
        reduced[c] = reduced[c] - data.table[ref] * y[r]
    return reduced


def single_path_law_point(structure: Any, lp: LinearProgram, tokens: np.ndarray,
                          probability: np.ndarray, law: BlockLaw) -> list:
    """The K = 1 full LP's variables for a single-path verifier's law.

    tokens [C, 1, L], probability [C] (verifiers.exact.configurations), law on them.
    pi(c, x[:d], y) = q(x) P(tau = d) P(Y = y | tau = d); A(z) = sum of pi over outputs whose
    node extends z. Returns x [num_vars] (CellExpr / numbers).
    """
    if structure.paths != 1:
        raise ValueError("single_path_law_point: K = 1 only")
    vocab, depth = structure.vocab, structure.model.depth
    index = {tuple(int(t) for t in tokens[i, 0]): i for i in range(len(tokens))}
    n_pi = structure.num_pi
    x: list[Any] = [0] * lp.num_vars
    parents, _ = node_parents(vocab, depth)
    for slot in range(len(structure.slot_node)):
        c = int(structure.slot_config[slot])
        path = tuple(int(t) for t in structure.configs.path_tokens[structure.configs.paths[c, 0]])
        i = index.get(path)
        if i is None:  # a configuration the law's enumeration dropped (probability 0)
            continue
        d = int(structure.slot_depth[slot])
        mass = 0
        for y in range(vocab):
            value = probability[i] * law.stop[i, 0, d] * law.correction[i, 0, d, y]
            x[slot * vocab + y] = value
            mass = mass + value
        node = int(structure.slot_node[slot])
        while node > 0:
            x[n_pi + node - 1] = x[n_pi + node - 1] + mass
            node = int(parents[node])
    return x


def bonus_symbols(cell: Cell) -> list[int]:
    """The symbols of the target rows at depth L (the bonus-token rows)."""
    shape = cell.shape
    first = (shape.vocab**shape.depth - 1) // (shape.vocab - 1)
    out = []
    for u in range(first, shape.num_nodes):
        out.extend(shape.row_vars[("target", u)])
    return out


def _freeze(value: Any, frozen: list[tuple[int, RationalFunction]]) -> Any:
    if not isinstance(value, RationalFunction):
        return value
    for var, constant in frozen:
        value = value.substitute(var, constant)
    return cell_expr(value)


def without_bonus_rows(structure: Any, lp: LinearProgram, x: list | None, y: list,
                       cell: Cell) -> tuple[list | None, list]:
    """A primal and a dual of the full LP that do not depend on the bonus rows p(.|u),
    |u| = L, made from a basis solution (x, y) of the same LP.

    The full LP's rows (u, t), |u| = L, only say how the stop mass at u is split into
    bonus tokens; a vertex splits it configuration by configuration, so the basis solution
    (and the cell where it is feasible) depends on p(.|u). Here the bonus symbols are
    frozen at their values at basis_point (point masses), and then
      primal: pi(c, u, t) := p(t|u) m(c, u), m(c, u) = sum_t pi(c, u, t) (frozen): the
              marginal rows and the objective are unchanged, rows (u, t) hold because
              sum_c m(c, u) = A(u) (the rows (u, .) summed);
      dual:   v(u, t) := v(parent row of A(u)) for every t: the reduced cost of A(u) is
              then 0 and that of pi(c, u, t) is L + 1 - y_c - v(parent row).
    Nothing rests on this derivation: the result is checked on the cell like any point.
    """
    vocab, depth = structure.vocab, structure.model.depth
    witness = basis_point(cell)
    ring = cell.ring
    frozen = [(var, RationalFunction.constant(to_fraction(witness[var]), ring))
              for var in bonus_symbols(cell)]
    y_new = [_freeze(v, frozen) for v in y]
    parents, last = node_parents(vocab, depth)
    first_leaf = (vocab**depth - 1) // (vocab - 1)
    leaf_keys = [k for k in structure.match_keys.tolist() if k // vocab >= first_leaf]
    if leaf_keys:
        rows = structure.match_rows(np.array(leaf_keys))
        parent_keys = np.array([parents[k // vocab] * vocab + last[k // vocab] for k in leaf_keys])
        parent_rows = structure.match_rows(parent_keys)
        for r, pr in zip(rows.tolist(), parent_rows.tolist(), strict=True):
            y_new[r] = y_new[pr]
    if x is None:
        return None, y_new
    x_new = [_freeze(v, frozen) for v in x]
    target = structure.model.target
    for slot in np.nonzero(structure.slot_depth == depth)[0].tolist():
        node = int(structure.slot_node[slot])
        mass = sum((x_new[slot * vocab + t] for t in range(vocab)), 0)
        for t in range(vocab):
            x_new[slot * vocab + t] = target[node, t] * mass
    return x_new, y_new
