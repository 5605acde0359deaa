"""`speclp lossless` as data: a frozen LosslessSpec whose construction is the validation, run()
the report (issue 29: a spec in, the result out).

The question is an acceptance configuration (speclp.proofs.config_law.AcceptanceConfig: the
method and the settings given, every other setting the library's default) and the audit
instances it is asked on (config_report's vocab, depth, trials, seed; defaults config_report's).
A wrong field raises speclp.inputs.BadArgument naming it, in the order `speclp lossless`
reports them: the method, a setting of another method's (threshold_single, threshold_acc,
typical_epsilon, typical_delta, weight belong to one method each), the instance fields, then
the configuration's own check (AcceptanceConfig.check).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from .. import inputs
from ..inputs import BadArgument
from .config_law import METHODS, AcceptanceConfig, config_report

REPORT = inspect.signature(config_report).parameters
SETTINGS = tuple(f.name for f in fields(AcceptanceConfig) if f.name != "method")
METHOD_SETTINGS = {"threshold": ("threshold_single", "threshold_acc"),
                   "typical": ("typical_epsilon", "typical_delta"), "ensemble": ("weight",)}
"""The settings of a method's own (refused with any other method)."""
MAX_VOCAB, MAX_DEPTH, MAX_TRIALS = 6, 3, 60  # the exact laws enumerate every draft configuration


def foreign_settings(method: str) -> tuple[str, ...]:
    """The settings that belong to a method other than `method` (all five for an unknown one)."""
    return tuple(name for names in METHOD_SETTINGS.values() for name in names
                 if name not in METHOD_SETTINGS.get(method, ()))


@dataclass(frozen=True)
class LosslessSpec:
    """One `speclp lossless` question as data. settings: the AcceptanceConfig fields given
    (name -> value; the others are AcceptanceConfig's defaults); after construction `config`
    holds the checked AcceptanceConfig. vocab, depth, trials, seed: the audit instances
    (config_report's arguments, family MIXED)."""

    method: str = AcceptanceConfig.method
    settings: Mapping[str, Any] = field(default_factory=dict)
    vocab: int = REPORT["vocab"].default
    depth: int = REPORT["depth"].default
    trials: int = REPORT["trials"].default
    seed: int = REPORT["seed"].default
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
        config = AcceptanceConfig(method=self.method, **settings)
        config.check()
        object.__setattr__(self, "settings", MappingProxyType(settings))
        object.__setattr__(self, "config", config)

    def run(self) -> dict[str, Any]:
        """config_report of the configuration on the audit instances (its dict; "lossless"
        False when some exact TV is positive)."""
        return config_report(self.config, self.vocab, self.depth, self.trials, self.seed)
