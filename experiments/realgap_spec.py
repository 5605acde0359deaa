"""RealgapSpec: one `speclp realgap` run as data (issue 29: a spec in, a result out). Its
defaults are the command's flags' defaults; its construction is the only validation
(speclp.inputs.BadArgument naming the field). The limits and targets it uses are the library's
(experiments.realgap: MAX_COARSE_PATHS and the modes; width_target None means its WIDTH_TARGETS;
experiments.trees: check_contexts, shared with TreesSpec)."""

from __future__ import annotations

import dataclasses

from .. import inputs
from ..inputs import BadArgument
from ..verifiers.registry import verifier_names
from .realgap import MAX_COARSE_PATHS, MODE_FULL, MODE_RENORMALISED
from .trees import check_contexts

__all__ = ["MODE_FULL", "MODE_RENORMALISED", "VOCABULARY_LIMITED", "RealgapSpec"]

VOCABULARY_LIMITED = ("khisti",)  # left out of the default list on real vocabularies


@dataclasses.dataclass(frozen=True)
class RealgapSpec:
    """One `speclp realgap` run as data; its defaults are the flags' defaults. Construction is
    the validation (BadArgument naming the field, in the order the command reports them; the
    prompts are read and the pair resolved by cli.realgap.realgap_spec). instances: MODE_FULL or
    MODE_RENORMALISED; depths L, paths K, widths M (full-vocabulary: the schedule of caps
    tried in turn at L >= 2, experiments.realgap.width_schedule; one M: the fixed width);
    verifiers (full-vocabulary; () is the default list: every verifier lossless under i.i.d.
    drafts but VOCABULARY_LIMITED); samples, batch, score_dtype: the sampled trees of the
    full-vocabulary mode; width_target (None: experiments.realgap.WIDTH_TARGETS per L) and
    context_budget (seconds per context and depth, None: no limit): when the bracket
    expansion stops (full-vocabulary); kept_limit (None: the trees of the padded layout's
    limit): at most this many kept tokens per mass-driven tree, whose caps are then free;
    contexts_per_prompt contexts `every` target-sampled tokens apart; draft_temperature None:
    the run's (1.5 for a single model, trees.run_identity)."""

    pair: str = "qwen2.5-coder"
    prompts: str = "humaneval:10"
    prompt_seed: int | None = None
    instances: str = MODE_FULL
    depths: tuple[int, ...] = (1, 2)
    paths: tuple[int, ...] = (1, 2, 3, 4)
    widths: tuple[int, ...] = (8,)
    samples: int = 128
    batch: int = 128
    verifiers: tuple[str, ...] = ()
    score_dtype: str = "fp64"
    contexts_per_prompt: int = 2
    every: int = 8
    temperature: float = 1.0
    draft_temperature: float | None = None
    seed: int = 0
    width_target: float | None = None
    context_budget: float | None = None
    kept_limit: int | None = None

    def __post_init__(self) -> None:
        inputs.choice("instances", self.instances, (MODE_FULL, MODE_RENORMALISED))
        for name, high in (("depths", 16), ("paths", 64)):
            self._integers(name, 1, high)
        check_contexts(self)
        if self.prompt_seed is not None:
            inputs.seed("prompt_seed", self.prompt_seed)
        if self.instances == MODE_RENORMALISED:
            self._check_renormalised()
        else:
            self._check_full()

    def _integers(self, name: str, low: int, high: int) -> None:
        """A non-empty tuple of integers in [low, high] (stored as a tuple)."""
        values = tuple(getattr(self, name))
        if not values:
            raise BadArgument(name, "give at least one value")
        for value in values:
            inputs.integer(name, value, low, high)
        object.__setattr__(self, name, values)

    def _check_renormalised(self) -> None:
        self._integers("widths", 2, 5)
        if max(self.depths) > 3 or max(self.paths) > 3:
            raise BadArgument("depths/paths", "supported sizes are M <= 5, L <= 3, K <= 3 (LP size)")
        for name in ("width_target", "context_budget", "kept_limit"):
            if getattr(self, name) is not None:
                raise BadArgument(name, f"applies to `instances` {MODE_FULL} only (the bracket "
                                        "expansion); drop it")

    def _check_full(self) -> None:
        self._integers("widths", 1, 1024)  # a cap of the mass-driven tree (1: one token per node at L - 1)
        inputs.integer("samples", self.samples, 2, 10_000_000)
        inputs.integer("batch", self.batch, 1, 100_000)
        inputs.choice("score_dtype", self.score_dtype, ("fp64", "fp32"))
        if self.width_target is not None:
            inputs.number("width_target", self.width_target, 0)
        if self.context_budget is not None:
            inputs.number("context_budget", self.context_budget, 0, low_open=True)
        if self.kept_limit is not None:
            inputs.integer("kept_limit", self.kept_limit, 1, 10_000_000)
        width = min(self.widths)  # the schedule keeps at least its smallest width
        for d in self.depths:  # with kept_limit the trees are never padded (the caps are free)
            if d > 1 and self.kept_limit is None and (width + 1) ** d > MAX_COARSE_PATHS:
                raise BadArgument("widths", f"the coarsened LP at M = {width}, L = {d} has "
                                            f"{(width + 1) ** d:,} paths (limit {MAX_COARSE_PATHS:,}); "
                                            "lower `widths` or `depths`")
        lossless = verifier_names(draft_sampling="iid")
        for name in self.verifiers:
            if name not in lossless:
                raise BadArgument("verifiers", f"{name!r} is not a verifier lossless under i.i.d. "
                                               f"drafts; known: {', '.join(lossless)}")
        if not self.verifiers:  # khisti enumerates V^(K-1) companion tuples: small vocabularies only
            object.__setattr__(self, "verifiers",
                               tuple(n for n in lossless if n not in VOCABULARY_LIMITED))
        object.__setattr__(self, "verifiers", tuple(self.verifiers))
