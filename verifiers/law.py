"""Law first: every verifier maps a drafted tree to the exact law of its output block.

Shapes (B = batch, K = draft paths, L = depth, V = vocabulary):
    DraftTree.tokens       [B, K, L]      drafted token ids (path k = tokens[:, k])
    DraftTree.target_rows  [B, K, L+1, V] p(. | first i tokens of path k), i = 0..L
    DraftTree.draft_rows   [B, K, L, V]   q(. | first i tokens of path k), i = 0..L-1
Equal prefixes carry equal rows. Rows are torch tensors (any float dtype, any device)
or numpy object arrays of exact rationals; the same law function serves both.

BlockLaw (the output block is an accepted prefix of a drafted path plus one token):
    stop        [B, K, L+1]     P(output node = first i tokens of path k)
    correction  [B, K, L+1, V]  P(Y = y | output node = (k, i)); a row may be
                                anything where stop is 0
A node shared by several paths may carry its mass on any of them (each verifier
picks one); consumers aggregate by node (see verifiers.exact).

A verifier is registered with `@register(name)` and is a function
``law(tree: DraftTree, **options) -> BlockLaw``. Sampling draws from that law; it is
not a second implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ops
from .ops import torch  # imported on first use (ops._LazyTorch)

Array = Any

MASS_TOLERANCE = 1e-12  # float64 laws sum to one within this; exact laws exactly


class LawMassError(ArithmeticError):
    """A verifier's law does not sum to one: an internal error of the verifier (never a bad
    input), named with the verifier and the configuration (re-exported by verifiers.exact;
    defined here so that a law module can raise it without importing verifiers.exact)."""


@dataclass
class DraftTree:
    tokens: Array  # [B, K, L] int
    target_rows: Array  # [B, K, L+1, V]
    draft_rows: Array  # [B, K, L, V]

    @property
    def batch(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def paths(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def depth(self) -> int:
        return int(self.tokens.shape[2])

    @property
    def vocab_size(self) -> int:
        return int(self.target_rows.shape[-1])

    def first_path(self) -> DraftTree:
        """The K = 1 tree made of path 0 only."""
        return DraftTree(self.tokens[:, :1], self.target_rows[:, :1], self.draft_rows[:, :1])

    def drafted_probabilities(self) -> tuple[Array, Array]:
        """(p, q) of the drafted tokens: [B, K, L] each (p(X_i|X_<i), q(X_i|X_<i))."""
        index = ops.index_like(self.draft_rows, self.tokens)[..., None]
        q = ops.gather(self.draft_rows, -1, index)[..., 0]
        p = ops.gather(self.target_rows[:, :, : self.depth], -1, index)[..., 0]
        return p, q


@dataclass
class BlockLaw:
    stop: Array  # [B, K, L+1]
    correction: Array  # [B, K, L+1, V]

    def joint(self) -> Array:
        """[B, K, L+1, V] P(output node = (k, i), Y = y)."""
        return self.stop[..., None] * self.correction

    def expected_accepted(self) -> Array:
        """[B] E[tau] (number of accepted draft tokens)."""
        depth = self.stop.shape[-1] - 1
        if ops.is_torch(self.stop):
            steps = torch.arange(depth + 1, dtype=self.stop.dtype, device=self.stop.device)
        else:
            steps = np.arange(depth + 1)
        return ops.total(ops.total(self.stop * steps, -1), -1)

    def block_efficiency(self) -> Array:
        """[B] E[tau + 1]."""
        return self.expected_accepted() + 1


@dataclass
class VerifierSpec:
    name: str
    law: Callable[..., BlockLaw]
    description: str
    multipath: bool  # False: uses path 0 only (single-path verifiers as K-path baselines)
    lossless: bool = True  # False only for deliberately broken variants kept for audits
    options: dict[str, Any] = field(default_factory=dict)
    # draft laws the verifier is lossless under ("iid": K i.i.d. paths; "without-replacement")
    draft_sampling: tuple[str, ...] = ("iid", "without-replacement")
    # True: the output law (aggregated by node) depends only on the MULTISET of drafted paths,
    # not on their order, so exact laws may enumerate multisets with their weights
    # (verifiers.exact); tests/test_exact_enumeration.py checks every verifier that declares it
    order_invariant: bool = False
    # Structure-aware exact evaluation on i.i.d. drafts (docs/theory.md sections 12.2, 12.3):
    # node_rule: a node-local verifier's rule at one node (verifiers.multipath.NodeRule), so that
    #   its exact law follows the recursion over (node, number of paths through it);
    # selection_rows: for a select-then-BV verifier, fn(model: TreeModel, paths, **options) ->
    #   [N, V] r(.|u) at every node u of the complete tree (shortlex; depth-L rows unused), the
    #   law of the selected path; its exact law is BV's against r.
    # None of both: exact laws enumerate draft configurations.
    node_rule: Callable[..., Any] | None = None
    selection_rows: Callable[..., Any] | None = None
    # exact_law: fn(model: TreeModel, paths) -> (emit [N, V], evaluations), the verifier's own
    #   structure-aware exact law on i.i.d. drafts (traversal: verifiers.structure.sibling_recursion)
    exact_law: Callable[..., Any] | None = None
    # True: the rule as published is undefined on some configurations (it reaches a step whose
    # correction row is all zero, e.g. spectr_gbv as released): its law may have mass < 1, and
    # the exact law reports where (ExactResult.undefined_*) instead of failing its mass check
    may_be_undefined: bool = False


REGISTRY: dict[str, VerifierSpec] = {}


def register(
    name: str, description: str, multipath: bool, lossless: bool = True,
    draft_sampling: tuple[str, ...] = ("iid", "without-replacement"),
    order_invariant: bool = False, node_rule: Callable[..., Any] | None = None,
    selection_rows: Callable[..., Any] | None = None,
    exact_law: Callable[..., Any] | None = None, may_be_undefined: bool = False,
    **options: Any
) -> Callable[[Callable[..., BlockLaw]], Callable[..., BlockLaw]]:
    """Decorator adding a law function to the registry (options are bound as kwargs).

    draft_sampling: the draft laws under which the verifier is lossless (GBV, SpecTr and
    SpecInfer assume i.i.d. drafts and are lossy on drafts drawn without replacement).
    order_invariant: the law aggregated by node depends only on the multiset of drafted
    paths (declare it only when true: it lets exact laws enumerate multisets).
    node_rule, selection_rows, exact_law: the hooks of structure-aware exact evaluation
    (VerifierSpec).
    """

    def wrap(fn: Callable[..., BlockLaw]) -> Callable[..., BlockLaw]:
        REGISTRY[name] = VerifierSpec(name, fn, description, multipath, lossless, dict(options),
                                      tuple(draft_sampling), order_invariant, node_rule,
                                      selection_rows, exact_law, may_be_undefined)
        return fn

    return wrap


def sample_block(law: BlockLaw, generator: torch.Generator | None = None) -> tuple[Array, Array, Array]:
    """Draw one block per batch row from a (torch) law.

    Returns (path [B], accepted [B], token [B]): the output node is the first
    `accepted` tokens of drafted path `path`, followed by the correction `token`.
    """
    stop = law.stop
    batch, paths, positions = stop.shape
    flat = stop.reshape(batch, paths * positions).clamp_min(0)
    choice = torch.multinomial(flat, 1, generator=generator)[:, 0]
    path = choice // positions
    accepted = choice % positions
    rows = law.correction[torch.arange(batch, device=stop.device), path, accepted]
    token = torch.multinomial(rows.clamp_min(0), 1, generator=generator)[:, 0]
    return path, accepted, token
