"""`speclp lossless` as data: a frozen LosslessSpec whose construction is the validation, run()
the report (issue 29: a spec in, the result out).

The question is an acceptance configuration (speclp.proofs.config_law.AcceptanceConfig: the
method and the settings given, every other setting the library's default) and the audit
instances it is asked on (config_report's vocab, depth, trials, seed; defaults config_report's)
and an optional time limit (seconds; None, the default: none).
A wrong field raises speclp.inputs.BadArgument naming it, in the order `speclp lossless`
reports them: the method, a setting of another method's (threshold_single, threshold_acc,
typical_epsilon, typical_delta, weight belong to one method each), the instance fields, then
the configuration's own check (AcceptanceConfig.check), the time limit. run() returns a
LosslessReport (status a Losslessness, STOPPED when the time limit ended it before the last
instance; to_json() config_report's dict, what `speclp lossless --json` prints).
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from .. import inputs
from ..deadline import STOPPED as STOPPED_STATUS
from ..deadline import Deadline
from ..inputs import BadArgument
from .config_law import METHODS, AcceptanceConfig, config_report

REPORT = inspect.signature(config_report).parameters
SETTINGS = tuple(f.name for f in fields(AcceptanceConfig) if f.name != "method")
METHOD_SETTINGS = {"threshold": ("threshold_single", "threshold_acc"),
                   "typical": ("typical_epsilon", "typical_delta"), "ensemble": ("weight",)}
"""The settings of a method's own (refused with any other method)."""
MAX_VOCAB, MAX_DEPTH, MAX_TRIALS = 6, 3, 60  # the exact laws enumerate every draft configuration


class Losslessness(StrEnum):
    """The verdict of a lossless report (a StrEnum: equal to its word)."""

    THEOREM = "lossless by theorem"  # the lossless conditions hold: exact TV 0 on every instance
    NO_COUNTEREXAMPLE = "no counterexample"  # exact TV 0 on the audited instances, no theorem
    LOSSY = "lossy"  # exact TV above ZERO_TV on some audited instance
    STOPPED = STOPPED_STATUS  # the time limit passed before the last instance: no verdict


@dataclass(frozen=True)
class LosslessReport:
    """config_report's result, inspectable without the CLI. status: a Losslessness; config:
    the AcceptanceConfig asked about; max_tv and worst_instance: the largest exact TV from the
    target law and where (None when STOPPED); instances: one row per audited instance
    (instance, tv, block_efficiency; when STOPPED, those done); record: config_report's dict,
    read-only; to_json() gives a copy."""

    status: Losslessness
    config: AcceptanceConfig
    max_tv: float | None
    worst_instance: str | None
    instances: tuple[Mapping[str, Any], ...]
    record: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LosslessReport:
        """The report of config_report's dict (or of a to_json() object)."""
        status = (Losslessness.STOPPED if data.get("stopped") else Losslessness.LOSSY
                  if not data["lossless"] else Losslessness.THEOREM
                  if data["lossless_by_theorem"] else Losslessness.NO_COUNTEREXAMPLE)
        record = copy.deepcopy(dict(data))
        return cls(status, AcceptanceConfig(**data["config"]), data.get("max_tv"), data.get("worst_instance"),
                   tuple(MappingProxyType(row) for row in record["instances"]), MappingProxyType(record))

    @property
    def lossless(self) -> bool:
        """No audited instance has a positive exact TV (config_report's "lossless"); False
        when STOPPED (no verdict)."""
        return self.status in (Losslessness.THEOREM, Losslessness.NO_COUNTEREXAMPLE)

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.record))


def foreign_settings(method: str) -> tuple[str, ...]:
    """The settings that belong to a method other than `method` (all five for an unknown one)."""
    return tuple(name for names in METHOD_SETTINGS.values() for name in names
                 if name not in METHOD_SETTINGS.get(method, ()))


@dataclass(frozen=True)
class LosslessSpec:
    """One `speclp lossless` question as data. settings: the AcceptanceConfig fields given
    (name -> value; the others are AcceptanceConfig's defaults); after construction `config`
    holds the checked AcceptanceConfig. vocab, depth, trials, seed: the audit instances
    (config_report's arguments, family MIXED). time_limit: seconds (> 0) from the start of
    run(), checked before each instance; None (the default): none."""

    method: str = AcceptanceConfig.method
    settings: Mapping[str, Any] = field(default_factory=dict)
    vocab: int = REPORT["vocab"].default
    depth: int = REPORT["depth"].default
    trials: int = REPORT["trials"].default
    seed: int = REPORT["seed"].default
    time_limit: float | None = None
    config: AcceptanceConfig = field(init=False, repr=False)

    def __post_init__(self) -> None:
        inputs.choice("method", self.method, METHODS)
        settings = dict(self.settings)
        for name in settings:
            inputs.choice("settings", name, SETTINGS)
        for name in foreign_settings(self.method):
            if name in settings:
                raise BadArgument(name, f"does not apply to `method` {self.method}")
        inputs.integer("vocab", self.vocab, 2, MAX_VOCAB)
        inputs.integer("depth", self.depth, 1, MAX_DEPTH)
        inputs.integer("trials", self.trials, 1, MAX_TRIALS)
        inputs.seed("seed", self.seed)
        if self.time_limit is not None:
            inputs.number("time_limit", self.time_limit, 0, low_open=True)
        config = AcceptanceConfig(method=self.method, **settings)
        config.check()
        object.__setattr__(self, "settings", MappingProxyType(settings))
        object.__setattr__(self, "config", config)

    def run(self, clock: Callable[[], float] = time.monotonic) -> LosslessReport:
        """config_report of the configuration on the audit instances, as a LosslessReport
        (LOSSY when some exact TV is positive; STOPPED when time_limit seconds on `clock` have
        passed before the last instance)."""
        return LosslessReport.from_json(config_report(self.config, self.vocab, self.depth,
                                                      self.trials, self.seed,
                                                      deadline=Deadline(self.time_limit, clock)))
