"""A generated instance as data (what `speclp instance` writes): the family and its parameters,
checked at construction, and generate() (issue 29: a spec in, the object out).

Families (lp.instance's generators): dirichlet (independent Dirichlet(alpha) target and draft
rows at every prefix), temperature (target softmax(logits), draft softmax(logits / T +
noise N(0, 1))), ties (rational rows with many equal ratios p/q). denominator D makes the rows
rational: each row rounded (largest remainder) to multiples of 1/D (ties: composition units,
default TIES_DENOMINATOR). The defaults are the generators' own (read from their signatures).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .. import inputs
from ..inputs import BadArgument
from .instance import (
    Instance,
    _round_rows,  # the rounding dirichlet_instance uses, reused for the other families
    dirichlet_instance,
    from_rows,
    instance_size,
    instance_size_problem,
    temperature_instance,
    ties_instance,
)

__all__ = ["DEFAULTS", "FAMILIES", "FAMILY_PARAMETERS", "MAX_DENOMINATOR", "MAX_WRITTEN_ENTRIES",
           "TIES_DENOMINATOR", "InstanceResult", "InstanceSpec", "library_default"]

FAMILIES = ("dirichlet", "temperature", "ties")
MAX_DENOMINATOR = 10**9
MAX_WRITTEN_ENTRIES = 1_000_000  # probabilities per model one spec may generate (~50 MB of JSON)


def library_default(function: Any, name: str) -> Any:
    """The default of parameter `name` of a library function (the one place it is set)."""
    return inspect.signature(function).parameters[name].default


TIES_DENOMINATOR = library_default(ties_instance, "denominator")  # composition units
DEFAULTS = {"alpha": library_default(dirichlet_instance, "alpha"),
            "temperature": library_default(temperature_instance, "temperature"),
            "noise": library_default(temperature_instance, "noise"),
            "seed": library_default(dirichlet_instance, "seed")}
FAMILY_PARAMETERS = {"dirichlet": ("alpha",), "temperature": ("temperature", "noise"), "ties": ()}
"""The parameters of a family's own (refused with any other family)."""


@dataclass(frozen=True)
class InstanceSpec:
    """One generated instance as data. Construction is the validation (BadArgument naming the
    field, in the order `speclp instance` reports them): the family, the shape (V >= 2, L >= 1,
    within lp.instance's limits and at most MAX_WRITTEN_ENTRIES probabilities per model), a
    parameter of another family's refused, then the parameters, the seed and the denominator.
    A parameter left None is the family's default (DEFAULTS) once constructed; one of another
    family stays None."""

    family: str = FAMILIES[0]
    vocab: int = 2
    depth: int = 2
    alpha: float | None = None
    temperature: float | None = None
    noise: float | None = None
    seed: int = DEFAULTS["seed"]
    denominator: int | None = None

    def __post_init__(self) -> None:
        family = inputs.choice("family", self.family, FAMILIES)
        inputs.integer("vocab", self.vocab, 2)
        inputs.integer("depth", self.depth, 1)
        problem = instance_size_problem(self.vocab, self.depth)
        if problem:
            raise BadArgument("vocab/depth", problem)
        entries = instance_size(self.vocab, self.depth)["entries"]
        if entries > MAX_WRITTEN_ENTRIES:
            raise BadArgument("vocab/depth", f"V={self.vocab}, L={self.depth} has {entries:,} "
                                             f"probabilities per model (this command writes at most "
                                             f"{MAX_WRITTEN_ENTRIES:,}); use a smaller vocabulary or depth")
        for name in ("alpha", "temperature", "noise"):
            if getattr(self, name) is not None and name not in FAMILY_PARAMETERS[family]:
                owner = next(f for f, names in FAMILY_PARAMETERS.items() if name in names)
                raise BadArgument(name, f"does not apply to `family` {family} (it applies to "
                                        f"`family` {owner})")
        for name in FAMILY_PARAMETERS[family]:
            if getattr(self, name) is None:
                object.__setattr__(self, name, DEFAULTS[name])
        for name, low, low_open in (("alpha", 0, True), ("temperature", 0, True), ("noise", 0, False)):
            if getattr(self, name) is not None:
                inputs.number(name, getattr(self, name), low, low_open=low_open)
        inputs.seed("seed", self.seed)
        if self.denominator is not None:
            inputs.integer("denominator", self.denominator, 1, MAX_DENOMINATOR)

    def generate(self) -> Instance:
        """The instance of the spec (module docstring), its float rows settled
        (Instance.settled: a file written from it reads back bit for bit)."""
        if self.family == "dirichlet":
            inst = dirichlet_instance(self.vocab, self.depth, alpha=self.alpha, seed=self.seed,
                                      denominator=self.denominator)
        elif self.family == "ties":
            inst = ties_instance(self.vocab, self.depth, seed=self.seed,
                                 denominator=self.denominator or TIES_DENOMINATOR)
        else:
            inst = temperature_instance(self.vocab, self.depth, temperature=self.temperature,
                                        noise=self.noise, seed=self.seed)
            if self.denominator:
                inst = from_rows(_round_rows(inst.target, self.denominator),
                                 _round_rows(inst.draft, self.denominator), self.depth,
                                 f"{inst.name}-d{self.denominator}")
        return inst.settled()

    def settings(self) -> dict[str, Any]:
        """The spec as the "settings" of `speclp instance --json` (the family's own parameters
        only; ties: its denominator, default TIES_DENOMINATOR)."""
        denominator = (self.denominator if self.family != "ties"
                       else self.denominator or TIES_DENOMINATOR)
        out: dict[str, Any] = {"family": self.family, "vocab": self.vocab, "depth": self.depth,
                               "seed": self.seed, "denominator": denominator}
        out.update({name: getattr(self, name) for name in FAMILY_PARAMETERS[self.family]})
        return out


@dataclass(frozen=True)
class InstanceResult:
    """What `speclp instance` wrote, inspectable without the CLI. path: the file; name,
    vocab_size, depth, rational: the instance's (lp.instance.Instance); rows_per_model: the
    target's (and the draft's) rows, one per prefix of length 0..L ((V^(L+1) - 1) / (V - 1)); settings:
    the spec's (InstanceSpec.settings), read-only; next: the commands that read the file.
    to_json() is the command's --json object."""

    path: str
    name: str
    vocab_size: int
    depth: int
    rational: bool
    rows_per_model: int
    settings: Mapping[str, Any]
    next: tuple[str, ...]

    @classmethod
    def written(cls, spec: InstanceSpec, inst: Instance, path: str | Path) -> InstanceResult:
        """The result of `inst` (generated from `spec`) written to `path`."""
        return cls(str(path), inst.name, inst.vocab_size, inst.depth, inst.rational,
                   int(inst.target.shape[0]), MappingProxyType(spec.settings()),
                   (f"speclp solve {path}", f"speclp gap {path} --paths 2"))

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "vocab_size": self.vocab_size,
                "depth": self.depth, "rational": self.rational, "rows_per_model": self.rows_per_model,
                "settings": dict(self.settings), "next": list(self.next)}
