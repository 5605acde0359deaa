"""The randomized claim checks as data (what `speclp check class-equals-full | node-form |
bv-optimal` run): a frozen spec whose construction is the validation, run() the check
(issue 29: a spec in, the library's result out).

    ClassClaimSpec  class-equals-full / node-form (speclp.proofs.class_claims)
    BvOptimalSpec   bv-optimal (speclp.proofs.bv_optimal)

The defaults are the library's (class_claims.DEFAULTS, bv_optimal.DEFAULTS). A wrong field
raises speclp.inputs.BadArgument naming it, in the order the commands report them: the
settings every claim shares (trials, vocab, depth, seed, alpha, denominator, backend, the
instance shape), then the claim's own (paths, draft law, against, and the sizes of its LP
and exact laws), then time_limit. save_dir is where a counterexample goes; the CLI checks
that the folder can be written. time_limit: seconds (> 0) from the start of run(), checked
before each trial; None (the default): none. run() returns a ClaimCheckResult (status a
Verdict, STOPPED when the time limit ended it before the last trial; to_json() the
library's dict, what `speclp check ... --json` prints).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from .. import inputs
from ..deadline import STOPPED as STOPPED_STATUS
from ..deadline import Deadline
from ..inputs import BadArgument
from ..lp.engine import BACKENDS
from ..lp.full import check_full_lp_size
from ..lp.instance import check_enumeration, instance_size_problem
from ..verifiers.drafts import DRAFT_SAMPLING
from ..verifiers.registry import get_verifier
from . import bv_optimal, class_claims

CLASS = class_claims.DEFAULTS
BV = bv_optimal.DEFAULTS
CLASS_CLAIMS = ("class-equals-full", "node-form")
AGAINST = class_claims.AGAINST  # what the node form is compared with
MAX_DENOMINATOR = 2**31
Progress = Callable[[Iterable[int]], Iterable[int]] | None
Clock = Callable[[], float]


class Verdict(StrEnum):
    """The outcome of a claim check (a StrEnum: equal to its word)."""

    PASSED = "passed"  # the claim held on every trial
    FAILED = "failed"  # a trial failed: its counterexample is saved
    STOPPED = STOPPED_STATUS  # the time limit passed before the last trial (all run held); nothing saved


@dataclass(frozen=True)
class ClaimCheckResult:
    """The result of a claim check, inspectable without the CLI. claim: its name; status: a
    Verdict; trials_run: the trials checked (all of them when passed, up to the failing one
    when failed, those finished when stopped); kind: what failed (class_claims:
    "counterexample", "bug" or "undecided: an optimum was not found"; bv-optimal:
    "counterexample"), None when passed or stopped; bugs: the theorems that failed
    (class_claims), message: the failing comparison (None when passed or
    for bv-optimal); counterexample: the failing trial's records; saved: where its instance
    went. record: the library's dict (class_claims.check_* / bv_optimal.check_bv_optimal),
    read-only; to_json() gives a copy of it."""

    claim: str
    status: Verdict
    trials_run: int
    kind: str | None
    bugs: tuple[str, ...]
    message: str | None
    counterexample: Mapping[str, Any] | None
    saved: str | None
    record: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClaimCheckResult:
        """The result of the library's dict (or of a to_json() object)."""
        passed, stopped = bool(data["passed"]), bool(data.get("stopped"))
        status = Verdict.PASSED if passed else Verdict.STOPPED if stopped else Verdict.FAILED
        return cls(data["claim"], status, data["trials"] if passed else data["trials_run"],
                   None if passed or stopped else data.get("kind", "counterexample"),
                   tuple(data.get("bugs", ())),
                   data.get("message"), data.get("counterexample"), data.get("saved"),
                   MappingProxyType(copy.deepcopy(dict(data))))

    @property
    def passed(self) -> bool:
        return self.status is Verdict.PASSED

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self.record))


def _check_settings(spec: Any) -> None:
    """The settings every claim shares (ClaimSettings' fields but paths, draft law, save_dir)."""
    inputs.integer("trials", spec.trials, 1, inputs.MAX_TRIALS)
    inputs.integer("vocab", spec.vocab, 2)
    inputs.integer("depth", spec.depth, 1)
    inputs.seed("seed", spec.seed)
    inputs.number("alpha", spec.alpha, 0, low_open=True)
    inputs.integer("denominator", spec.denominator, 0, MAX_DENOMINATOR)
    inputs.choice("backend", spec.backend, BACKENDS)
    problem = instance_size_problem(spec.vocab, spec.depth)
    if problem:
        raise BadArgument("vocab/depth", problem)


def _check_time_limit(time_limit: float | None) -> None:
    """A time limit is None (none) or a finite number of seconds > 0."""
    if time_limit is not None:
        inputs.number("time_limit", time_limit, 0, low_open=True)


@dataclass(frozen=True)
class ClassClaimSpec:
    """`check class-equals-full` or `check node-form` as data: `trials` Dirichlet(alpha)
    instances (seeds seed .. seed + trials - 1; rows in multiples of 1/denominator, 0:
    floats) of shape (V, L, K). against (node-form only): "class" (None: the default) or
    "full"; None for class-equals-full."""

    claim: str
    trials: int = CLASS.trials
    vocab: int = CLASS.vocab
    depth: int = CLASS.depth
    paths: int = CLASS.paths
    seed: int = CLASS.seed
    alpha: float = CLASS.alpha
    denominator: int = CLASS.denominator
    draft_sampling: str = CLASS.draft_sampling
    backend: str = CLASS.backend
    against: str | None = None
    save_dir: str = CLASS.save_dir
    time_limit: float | None = None

    def __post_init__(self) -> None:
        inputs.choice("claim", self.claim, CLASS_CLAIMS)
        _check_settings(self)
        inputs.integer("paths", self.paths, 1)
        inputs.choice("draft_sampling", self.draft_sampling, DRAFT_SAMPLING)
        if self.claim == "node-form":
            object.__setattr__(self, "against", inputs.choice("against", self.against or AGAINST[0],
                                                              AGAINST))
        elif self.against is not None:
            raise BadArgument("against", "only applies to `check node-form`")
        check_full_lp_size("paths", self.vocab, self.depth, self.paths, self.draft_sampling)
        check_enumeration("paths", self.vocab, self.depth, self.paths)
        _check_time_limit(self.time_limit)

    def run(self, progress: Progress = None, clock: Clock = time.monotonic) -> ClaimCheckResult:
        """The check (class_claims.check_class_equals_full / check_node_form) as a
        ClaimCheckResult: FAILED and the counterexample saved under save_dir on the first
        failing trial; STOPPED when time_limit seconds on `clock` passed before the last
        trial. progress: optional wrapper of the seeds."""
        common = dict(seed=self.seed, alpha=self.alpha, progress=progress,
                      denominator=self.denominator or None, draft_sampling=self.draft_sampling,
                      backend=self.backend, save_dir=self.save_dir,
                      deadline=Deadline(self.time_limit, clock))
        if self.claim == "class-equals-full":
            return ClaimCheckResult.from_json(class_claims.check_class_equals_full(
                self.trials, self.vocab, self.depth, self.paths, **common))
        return ClaimCheckResult.from_json(class_claims.check_node_form(
            self.trials, self.vocab, self.depth, self.paths, against=self.against, **common))


@dataclass(frozen=True)
class BvOptimalSpec:
    """`check bv-optimal` as data (docs/theory.md Theorem 3.3): `trials` Dirichlet(alpha)
    instances of shape (V, L), K = 1; verifier: the registered verifier claimed optimal."""

    trials: int = BV.trials
    vocab: int = BV.vocab
    depth: int = BV.depth
    seed: int = BV.seed
    alpha: float = BV.alpha
    denominator: int = BV.denominator
    verifier: str = "bv"
    backend: str = BV.backend
    save_dir: str = BV.save_dir
    time_limit: float | None = None

    def __post_init__(self) -> None:
        _check_settings(self)
        check_full_lp_size("vocab/depth", self.vocab, self.depth, 1)
        check_enumeration("vocab/depth", self.vocab, self.depth, 1)
        try:
            get_verifier(self.verifier)
        except KeyError as err:
            raise BadArgument("verifier", err.args[0]) from None
        _check_time_limit(self.time_limit)

    def run(self, progress: Progress = None, clock: Clock = time.monotonic) -> ClaimCheckResult:
        """The check (bv_optimal.check_bv_optimal) as a ClaimCheckResult: FAILED and the
        counterexample saved under save_dir on the first failing trial; STOPPED when
        time_limit seconds on `clock` passed before the last trial."""
        return ClaimCheckResult.from_json(bv_optimal.check_bv_optimal(
            self.trials, self.vocab, self.depth, seed=self.seed, alpha=self.alpha,
            denominator=self.denominator or None, verifier=self.verifier, backend=self.backend,
            save_dir=self.save_dir, progress=progress, deadline=Deadline(self.time_limit, clock)))
