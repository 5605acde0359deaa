"""The single-path LPs and BV on one instance as data (what `speclp solve` runs; docs/theory.md
sections 2.2, 3.3): a frozen SolveSpec whose construction is the validation, solve(spec) the
computation (issue 29: a spec in, the result out).

On one instance (a built-in, default lp.instance.BUILTINS' first at builtin_instance's
default depth, or a given Instance), K = 1:
    optimum   the optimum by the engine (speclp.lp.optimum: column generation, certified)
    lp_full   the enumerated full LP (method "full"): the independent oracle
    lp_node   the node-budget LP (speclp.lp.node.node_lp), build included in its seconds
    bv, token the exact block efficiencies E[tau + 1] of BV and token-level verification
              (speclp.verifiers.exact.exact_result; exact fractions on a rational instance)
and each verifier's gap to the full LP optimum (exact on a rational instance). solve(spec)
returns a SolveResult (typed: the three Optimum records, the verifiers' values; to_json() is
`speclp solve --json` but its "meaning").
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .. import inputs
from ..inputs import BadArgument
from ..lp.engine import BACKENDS, Optimum, optimum, program_optimum
from ..lp.full import MAX_VARIABLES, check_full_lp_size, full_lp_size
from ..lp.instance import BUILTINS, Instance, builtin_instance, check_enumeration, instance_size_problem
from ..lp.node import node_lp
from ..rationals import fraction_text, parse_fraction
from ..verifiers.exact import exact_result

DEFAULT_BUILTIN = next(iter(BUILTINS))  # bv-toy
DEFAULT_DEPTH = inspect.signature(builtin_instance).parameters["depth"].default
BUILTIN_VOCAB = 2  # the built-in instances' vocabulary (their sizes are refused before they are built)
LARGEST_SUGGESTED_DEPTH = 64  # the size refusal's suggestion looks for a depth at most this
STAGES = ("optimum", "lp_full", "lp_node", "bv", "token")  # the records of a solve, in order
OPTIMA = STAGES[:3]
VERIFIERS = STAGES[3:]


class OptimumNotFound(RuntimeError):
    """One of the three optima was not found (time limit, solver failure): its stage (key) and
    record (Optimum.to_json) are kept; the message is one line."""

    def __init__(self, message: str, key: str, record: dict[str, Any]):
        super().__init__(message)
        self.key = key
        self.record = record


def _largest_depth(depth: int) -> int:
    """The largest depth in 1..min(depth, LARGEST_SUGGESTED_DEPTH) whose K = 1 full LP fits
    (0 when none): the suggestion of a size refusal."""
    return next((d for d in range(min(depth, LARGEST_SUGGESTED_DEPTH), 0, -1)
                 if full_lp_size(BUILTIN_VOCAB, d, 1)["variables"] <= MAX_VARIABLES), 0)


@dataclass(frozen=True)
class SolveSpec:
    """One `speclp solve` as data. instance: an Instance, or a function spec -> Instance
    called once every other field is checked (the CLI reads the file there), or None for the
    built-in `builtin` (default DEFAULT_BUILTIN) at `depth` (default DEFAULT_DEPTH). The
    fields then hold the Instance (and the built-in's resolved name and depth). Construction
    is the validation: BadArgument naming the field, in the order `speclp solve` reports them
    (backend; depth with a given instance; the built-in's name, depth and sizes)."""

    instance: Instance | Callable[[SolveSpec], Instance] | None = None
    builtin: str | None = None
    depth: int | None = None
    backend: str = BACKENDS[0]

    def __post_init__(self) -> None:
        inputs.choice("backend", self.backend, BACKENDS)
        if self.instance is not None:
            if self.builtin is not None:
                raise BadArgument("builtin", "give either an instance or `builtin`, not both")
            if self.depth is not None:
                raise BadArgument("depth", "only applies to `builtin` instances (a file fixes its depth)")
            if not isinstance(self.instance, Instance):
                object.__setattr__(self, "instance", self.instance(self))
            return
        name = inputs.choice("builtin", DEFAULT_BUILTIN if self.builtin is None else self.builtin,
                             BUILTINS)
        depth = inputs.integer("depth", DEFAULT_DEPTH if self.depth is None else self.depth, 1)
        suggestion = f"use --depth {_largest_depth(depth)} or less"
        problem = instance_size_problem(BUILTIN_VOCAB, depth)
        if problem:
            raise BadArgument("depth", problem)
        check_full_lp_size("depth", BUILTIN_VOCAB, depth, 1, suggestion=suggestion)
        check_enumeration("depth", BUILTIN_VOCAB, depth, 1, suggestion=suggestion)
        for field, value in (("builtin", name), ("depth", depth),
                             ("instance", builtin_instance(name, depth))):
            object.__setattr__(self, field, value)


@dataclass(frozen=True)
class SolveResult:
    """The result of a solve, inspectable like scipy's OptimizeResult. instance: its name,
    vocab_size, depth, rational, notes; optimum, lp_full, lp_node: the typed records of the
    engine (lp.engine.Optimum: .status a Status, .value, .exact_value, .certified); verifiers:
    each verifier's float block efficiency; verifiers_exact: its fraction text on a rational
    instance, else None; gap_to_optimum: full LP optimum minus each verifier's block
    efficiency (a fraction text when exact, else a float). to_json() is `speclp solve
    --json` but its "meaning"."""

    instance: dict[str, Any]
    optimum: Optimum
    lp_full: Optimum
    lp_node: Optimum
    verifiers: dict[str, float]
    verifiers_exact: dict[str, str | None]
    gap_to_optimum: dict[str, Any]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SolveResult:
        """The result of a to_json() object (or of `speclp solve --json`: "meaning" is not
        kept); the Optimum records by Optimum.from_json."""
        rational = data["instance"]["rational"]
        return cls(data["instance"], *(Optimum.from_json(data[key], rational) for key in OPTIMA),
                   data["verifiers"], data["verifiers_exact"], data["gap_to_optimum"])

    @property
    def rational(self) -> bool:
        return bool(self.instance["rational"])

    def exact_gap(self, verifier: str) -> Fraction | None:
        """A verifier's gap to the full LP optimum as a Fraction (None when it is a float)."""
        gap = self.gap_to_optimum[verifier]
        return parse_fraction(gap) if isinstance(gap, str) else None

    def to_json(self) -> dict[str, Any]:
        return {"instance": dict(self.instance),
                **{key: getattr(self, key).to_json() for key in OPTIMA},
                "verifiers": dict(self.verifiers), "verifiers_exact": dict(self.verifiers_exact),
                "gap_to_optimum": dict(self.gap_to_optimum)}


def solve(spec: SolveSpec, progress: Callable[[Iterable[str]], Iterable[str]] | None = None
          ) -> SolveResult:
    """The SolveResult of a spec (its to_json: the records of `speclp solve --json` but its
    "meaning"). progress: optional wrapper of the stages (STAGES). Raises OptimumNotFound for
    the first of the three optima that was not found."""
    inst = spec.instance
    records: dict[str, Optimum] = {}
    verifiers, verifiers_exact = {}, {}
    model = inst.model(exact=inst.rational)
    for key in (progress or iter)(STAGES):
        if key == "optimum":  # the engine (column generation, certified)
            records[key] = optimum(inst, 1)
        elif key == "lp_full":  # the enumerated LP: the independent oracle
            full = records[key] = optimum(inst, 1, method="full", backend=spec.backend)
        elif key == "lp_node":
            start = time.perf_counter()
            node = records[key] = program_optimum(node_lp(inst), spec.backend, rational=inst.rational)
            node.seconds = time.perf_counter() - start  # build included
        else:  # an exact verifier law
            res = exact_result(model, key)
            verifiers[key] = float(res.block_efficiency)
            verifiers_exact[key] = (fraction_text(Fraction(res.block_efficiency)) if inst.rational
                                    else None)
    for key in OPTIMA:
        record = records[key].to_json()
        if record["value"] is None:
            raise OptimumNotFound(f"{key}: optimum not found: {record['status']} "
                                  f"({record['certificate']})", key, record)
    if full.exact_value is not None and inst.rational:
        gaps: dict[str, Any] = {n: fraction_text(full.exact_value - parse_fraction(verifiers_exact[n]))
                                for n in verifiers}
    else:
        gaps = {n: full.value - v for n, v in verifiers.items()}
    return SolveResult({"name": inst.name, "vocab_size": inst.vocab_size, "depth": inst.depth,
                        "rational": inst.rational, "notes": inst.notes},
                       records["optimum"], records["lp_full"], records["lp_node"], verifiers,
                       verifiers_exact, gaps)
