"""Exact verifier laws: by the structure of i.i.d. drafting where the verifier admits it
(verifiers.structure: the (node, m) recursion of a node-local verifier's own node rule, or
BV against a select-then-BV verifier's selection law), else by enumerating every draft
configuration of a small instance as one batch (the test oracle, and the evaluation of
the deliberately broken variants and of drafts without replacement). Traversal and
spectr_gbv have recursions of their own (VerifierSpec.exact_law, verifiers.structure).

Every law is checked where it is made (check_block_law per configuration, check_emit in
total): mass exactly one in rationals, within MASS_TOLERANCE in float64; otherwise
LawMassError naming the verifier and the configuration. A rule that may be undefined
(spectr_gbv as released, the broken variants) reports where and how much instead.

A draft configuration is a K-tuple of length-L paths with its weight (speclp.verifiers
.drafts, the one enumerator: prod_k q(x_k) for an ordered i.i.d. tuple, prod_k q(x_k) /
(1 - sum_{j<k} q(x_j)) without replacement; a multiset carries the total weight of its
orderings). Ordered tuples are enumerated for the verifiers that read the paths in order
(SpecInfer, SpecTr, ...); verifiers that declare order_invariant (GBV) run on the multisets
(45,760 instead of 262,144 at V = 4, L = 3, K = 3), and single-path verifiers (BV, token)
at K = 1: both give the same exact law, with far fewer configurations.

The output law of a verifier is aggregated by node:
    emit[u, t] = P(output node = u, Y = t)           [N, V], u of depth 0..L
from which the block efficiency E[tau + 1] = sum emit[u, t] (|u| + 1) and the law of
the output continued by target sampling to depth L+1 (compared with the target law
in total variation) follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..inputs import BadArgument
from . import ops
from .drafts import (
    DRAFT_SAMPLING,
    Configurations,
    check_enough_paths,
    count_configurations,
    multiset_configurations,
    ordered_configurations,
    positive_leaves,
)
from .law import MASS_TOLERANCE, BlockLaw, DraftTree, LawMassError
from .registry import block_law, get_verifier
from .structure import evaluation_kind, rule_evaluations, structured_law
from .tree import TreeModel, all_paths, depth_offset, node_depths, num_nodes, prefix_node_indices

__all__ = ["DRAFT_SAMPLING", "Configurations", "ExactResult", "LawMassError", "SampledResult",
           "check_block_law", "check_emit", "configurations", "exact_result", "sampled_result"]


def configurations(model: TreeModel, paths: int, draft_sampling: str = "iid") -> Configurations:
    """All ordered K-tuples of drafted paths with their probabilities (tokens [C, K, L],
    probability [C]); see speclp.verifiers.drafts.ordered_configurations."""
    return ordered_configurations(model, paths, draft_sampling)


def draft_tree(model: TreeModel, tokens: np.ndarray, device: Any = "cpu",
               dtype: Any = None, numpy_floats: bool = False) -> DraftTree:
    """Gather the rows along every path. tokens [C, K, L].

    Exact instances give numpy object rows; float instances give torch tensors, or numpy
    float64 arrays with numpy_floats (for laws whose ops all have a numpy branch: no torch).
    """
    nodes = prefix_node_indices(tokens, model.vocab_size)  # [C, K, L+1]
    if model.exact:
        return DraftTree(np.asarray(tokens), model.target[nodes], model.draft[nodes[..., :-1]])
    if numpy_floats:
        target, draft = np.asarray(model.target, np.float64), np.asarray(model.draft, np.float64)
        return DraftTree(np.asarray(tokens), target[nodes], draft[nodes[..., :-1]])
    torch = ops.torch
    dtype = torch.float64 if dtype is None else dtype
    target = torch.as_tensor(model.target, dtype=dtype, device=device)
    draft = torch.as_tensor(model.draft, dtype=dtype, device=device)
    nodes_t = torch.as_tensor(nodes, device=device)
    return DraftTree(torch.as_tensor(tokens, device=device), target[nodes_t], draft[nodes_t[..., :-1]])


@dataclass
class ExactResult:
    """Exact output law of one verifier on one instance, aggregated by node."""

    emit: np.ndarray  # [N, V] P(output node = u, Y = t), float64 or exact
    block_efficiency: Any  # E[tau + 1]
    total_variation: float  # TV(output continued by target sampling, target law) at depth L+1
    configurations: int  # configurations enumerated, or rule / path evaluations (structure)
    # "node recursion" or "selection law" (verifiers.structure), else the enumeration:
    # "ordered", "multisets" or "single path"
    enumeration: str = "ordered"
    # the same TV computed exactly (the laws' own rationals) on exact models, else None: an
    # exactly lossless law has exactly 0 here
    total_variation_exact: Any = None
    # a rule registered may_be_undefined (spectr_gbv): the configurations on which it reaches
    # a step with an all-zero correction row (by structure: the nodes where it stops with
    # one), and the probability of reaching one (= 1 - the law's mass); block_efficiency is
    # then that of a law of mass < 1 and is not reported
    undefined_configurations: int = 0
    undefined_mass: Any = 0


def _is_one(value: Any, exact: bool) -> bool:
    return value == 1 if exact else abs(float(value) - 1) <= MASS_TOLERANCE


def check_block_law(name: str, model: TreeModel, tokens: np.ndarray, law: BlockLaw,
                    probability: np.ndarray, may_be_undefined: bool = False) -> tuple[int, Any]:
    """Check a batch law where it is made: for every configuration, the stop masses sum to
    one and the law's mass sum_(k, i) stop (sum of the correction row) is one; in exact
    rationals every correction row with positive stop mass sums to exactly one, in float64
    the masses are within MASS_TOLERANCE. A correction row summing to zero at positive stop
    mass (exactly zero and, in float64, stop mass over MASS_TOLERANCE) is an undefined step:
    allowed only for a rule registered may_be_undefined, which gets (configurations with an
    undefined step, their probability-weighted undefined mass); anything else raises
    LawMassError naming the verifier and the configuration."""
    stop, correction = law.stop, law.correction
    if ops.is_torch(stop):
        stop, correction = ops.as_float64(stop), ops.as_float64(correction)
    exact = stop.dtype == object
    batch = stop.shape[0]
    where = f"(V={model.vocab_size}, L={model.depth}, K={tokens.shape[1]})"
    rows = correction.sum(axis=-1)  # [C, K, L+1]
    zero = (rows == 0) & (stop != 0 if exact else stop > MASS_TOLERANCE)
    if not may_be_undefined:
        zero = zero & False
    lost = np.where(zero, stop, 0 * stop).reshape(batch, -1).sum(axis=1)
    stops = stop.reshape(batch, -1).sum(axis=1)
    mass = (stop * rows).reshape(batch, -1).sum(axis=1) + lost
    for label, values in (("stop masses", stops), ("law (with its undefined mass)", mass)):
        for c in np.nonzero([not _is_one(v, exact) for v in values])[0][:1]:
            raise LawMassError(f"{name}: {label} of configuration {tokens[c].tolist()} {where} "
                               f"sum to {float(values[c])!r}, not 1")
    if exact:
        bad = np.argwhere((stop != 0) & ~zero & (rows != 1))
        if len(bad):
            c, k, i = bad[0]
            raise LawMassError(f"{name}: correction row at prefix length {i} of path {k} of "
                               f"configuration {tokens[c].tolist()} {where} sums to "
                               f"{float(rows[c, k, i])!r}, not 1")
    undefined = zero.reshape(batch, -1).any(axis=1)
    return int(undefined.sum()), (lost * probability).sum() if batch else 0


def _may_be_undefined(name: str) -> bool:
    """A rule whose law may have mass < 1: registered may_be_undefined (spectr_gbv as
    released), or deliberately broken (lossless=False with draft laws: bv_first_failure stops
    where BV's residual row is all zero); the undefined mass is reported, never hidden."""
    spec = get_verifier(name)
    return spec.may_be_undefined or not spec.lossless


def check_emit(name: str, model: TreeModel, paths: int, emit: np.ndarray, kind: str,
               expected: Any = 1) -> None:
    """The node-aggregated law emit [N, V] has mass `expected` (1 unless undefined mass was
    reported), exactly in rationals, within MASS_TOLERANCE in float64; else LawMassError."""
    total = emit.sum()
    ok = total == expected if emit.dtype == object else \
        abs(float(total) - float(expected)) <= MASS_TOLERANCE
    if not ok:
        raise LawMassError(f"{name}: exact law ({kind}) on V={model.vocab_size}, "
                           f"L={model.depth}, K={paths} has mass {float(total)!r}, not "
                           f"{float(expected)!r}")


def aggregate(model: TreeModel, configs: Configurations, law: BlockLaw) -> np.ndarray:
    """[N, V] P(node, token) from a batch law over configurations."""
    vocab, depth = model.vocab_size, model.depth
    nodes = prefix_node_indices(configs.tokens, vocab)  # [C, K, L+1]
    joint = law.joint()
    if ops.is_torch(joint):
        joint = ops.as_float64(joint)
    weights = configs.probability.reshape((-1,) + (1,) * (joint.ndim - 1))
    weighted = (joint * weights).reshape(-1, vocab)
    emit = np.zeros((num_nodes(vocab, depth), vocab), dtype=weighted.dtype)
    if weighted.dtype == object:
        emit[...] = model.target[0, 0] * 0
    np.add.at(emit, nodes.reshape(-1), weighted)
    return emit


def block_efficiency_from_emit(model: TreeModel, emit: np.ndarray) -> Any:
    depths = node_depths(model.vocab_size, model.depth)
    return (emit.sum(axis=1) * (depths + 1)).sum()


def continued_law(model: TreeModel, emit: np.ndarray) -> np.ndarray:
    """[V^(L+1)] law of the output block continued by target sampling to length L+1.

    G(s) = P(the output starts with s and the block ended within s); G(root) = 0 and
    G(s t) = G(s) p(t|s) + emit[s, t]. At length L+1 every block has ended, so the
    continued law is G over the sequences of length L+1.
    """
    vocab, depth = model.vocab_size, model.depth
    zero = model.target[0, 0] * 0
    done = np.array([zero], dtype=emit.dtype)  # G at depth 0: nothing has ended before the root
    for d in range(depth + 1):
        start, count = depth_offset(vocab, d), vocab**d
        rows = model.target[start : start + count]
        sampled = done[:, None] * rows  # [V^d, V]
        if d == depth:
            return (sampled + emit[start : start + count]).reshape(-1)
        done = (sampled + emit[start : start + count]).reshape(-1)
    raise AssertionError("unreachable")


def exact_total_variation(a: np.ndarray, b: np.ndarray) -> Any:
    """Total variation distance in the laws' own exact numbers (object arrays)."""
    diff = a - b
    return sum((abs(x) for x in diff), diff[0] * 0) / 2


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    diff = a - b
    if diff.dtype == object:
        return float(exact_total_variation(a, b))
    return float(np.abs(diff).sum() / 2)


def _result(model: TreeModel, emit: np.ndarray, count: int, kind: str,
            undefined: tuple[int, Any] = (0, 0)) -> ExactResult:
    """ExactResult of a node-aggregated law emit [N, V]."""
    continued = continued_law(model, emit)
    target = model.target_path_probabilities(model.depth + 1)
    exact_tv = exact_total_variation(continued, target) if emit.dtype == object else None
    tv = float(exact_tv) if exact_tv is not None else total_variation(continued, target)
    return ExactResult(emit, block_efficiency_from_emit(model, emit), tv, count, kind, exact_tv,
                       undefined[0], undefined[1])


# "auto": structure (i.i.d. drafts, verifiers.structure) where the verifier admits it, else
# the smallest exact enumeration; "enumerated": the smallest exact enumeration only;
# "ordered": every ordered K-tuple (the reference the tests compare with)
ENUMERATIONS = ("auto", "enumerated", "ordered")


def enumerated_configurations(model: TreeModel, verifier: str | Callable[[DraftTree], BlockLaw],
                              paths: int,
                              draft_sampling: str = "iid",
                              enumeration: str = "auto") -> tuple[Configurations, str]:
    """The draft configurations an exact law needs, and which ones ("ordered", "multisets"
    or "single path").

    enumeration "auto" / "enumerated": a single-path verifier (it reads path 0, whose law is q under both
    draft laws) at K = 1; an order-invariant one (VerifierSpec.order_invariant) on the
    multisets with their weights; any other on the ordered K-tuples. "ordered": always the
    ordered K-tuples (the reference the tests compare with). A law function given directly
    (not a registered name) always gets the ordered K-tuples.
    """
    if enumeration not in ENUMERATIONS:
        raise ValueError(f"enumeration must be one of {ENUMERATIONS}, got {enumeration!r}")
    if callable(verifier):
        return ordered_configurations(model, paths, draft_sampling), "ordered"
    spec = get_verifier(verifier)
    ordered = ordered_configurations if enumeration == "ordered" else None
    if ordered is None and not spec.multipath:
        check_enough_paths(len(positive_leaves(model)[1]), paths, draft_sampling)
        return ordered_configurations(model, 1, draft_sampling), "single path"
    if ordered is None and spec.order_invariant:
        return multiset_configurations(model, paths, draft_sampling), "multisets"
    return ordered_configurations(model, paths, draft_sampling), "ordered"


def exact_result(model: TreeModel, verifier: str | Callable[[DraftTree], BlockLaw],
                 paths: int = 1, draft_sampling: str = "iid",
                 chunk: int = 1 << 16, enumeration: str = "auto") -> ExactResult:
    """Exact law, block efficiency and losslessness of a verifier on an instance.

    verifier: a registered name, or a law function DraftTree -> BlockLaw (e.g. a rule that
    needs the instance, like speclp.proofs.reference.mixture_law).

    enumeration "auto": on i.i.d. drafts a registered verifier that admits a structure-aware
    evaluation (verifiers.structure.evaluation_kind) gets it ("node recursion" or
    "selection law"; exact, equal to the enumeration); otherwise the configurations of
    enumerated_configurations (multisets or K = 1 where that keeps the law exact).
    Float instances run through torch in float64 on the CPU in chunks of `chunk`
    configurations; exact instances run on numpy object arrays.
    """
    if enumeration not in ENUMERATIONS:
        raise ValueError(f"enumeration must be one of {ENUMERATIONS}, got {enumeration!r}")
    name = verifier if isinstance(verifier, str) else getattr(verifier, "__name__", "law")
    may_be_undefined = isinstance(verifier, str) and _may_be_undefined(verifier)
    if enumeration == "auto" and not callable(verifier):
        structured = structured_law(model, get_verifier(verifier), paths, draft_sampling)
        if structured is not None:
            count, lost = structured.undefined
            if count and not may_be_undefined:
                raise LawMassError(f"{name}: undefined at {count} nodes ({structured.kind})")
            check_emit(name, model, paths, structured.emit, structured.kind, 1 - lost)
            return _result(model, structured.emit, structured.evaluations, structured.kind,
                           structured.undefined)
    configs, kind = enumerated_configurations(model, verifier, paths, draft_sampling,
                                              "ordered" if enumeration == "ordered" else "auto")
    if len(configs) == 0:
        raise BadArgument("paths", f"no draft configuration of {paths} path(s) ({draft_sampling}) has "
                         "positive probability")
    emit = None
    total = len(configs)
    undefined_count, undefined_mass = 0, model.target[0, 0] * 0
    for start in range(0, total, chunk):
        part = configs.part(start, start + chunk)
        # single-path laws (BV, token) run on numpy float64 rows: no torch import for them
        tree = draft_tree(model, part.tokens, numpy_floats=kind == "single path")
        law = verifier(tree) if callable(verifier) else block_law(verifier, tree)
        count, lost = check_block_law(name, model, np.asarray(part.tokens), law,
                                      part.probability, may_be_undefined)
        undefined_count, undefined_mass = undefined_count + count, undefined_mass + lost
        piece = aggregate(model, part, law)
        emit = piece if emit is None else emit + piece
    check_emit(name, model, paths, emit, kind, 1 - undefined_mass)
    return _result(model, emit, total, kind, (undefined_count, undefined_mass))


# ---------------------------------------------------------------------------
# estimates from sampled draft configurations (where the exact law cannot be enumerated)
# ---------------------------------------------------------------------------

CONFIDENCE_Z = 1.959963984540054  # two-sided 95% normal quantile


def enumeration_size(model: TreeModel, verifier: str, paths: int,
                     draft_sampling: str = "iid") -> int:
    """Work of exact_result(model, verifier, ...) with enumeration "auto", computed without
    doing it (capped at verifiers.tree.SIZE_CAP): the node-rule evaluations of the node
    recursion (an upper bound, rule_evaluations), the V^L paths of a selection law, or the
    configurations enumerated (K = 1 for a single-path verifier, multisets for an
    order-invariant one, else ordered K-tuples)."""
    spec = get_verifier(verifier)
    kind = evaluation_kind(spec, paths, draft_sampling)
    if kind == "node recursion":
        return rule_evaluations(model.vocab_size, model.depth, paths)
    if kind == "selection law":
        return model.vocab_size ** model.depth
    if kind is not None and spec.exact_law is not None:
        return spec.exact_law.work(model.vocab_size, model.depth, paths)
    leaves = len(positive_leaves(model)[1])
    if not spec.multipath:
        return leaves
    return count_configurations(leaves, paths, draft_sampling, ordered=not spec.order_invariant)


def sample_configurations(model: TreeModel, paths: int, draft_sampling: str, samples: int,
                          rng: np.random.Generator) -> np.ndarray:
    """[S, K, L] token ids of `samples` ordered draft tuples drawn from the draft law.

    iid: K independent leaves with probability q(x) each. Without replacement: the K
    distinct leaves in their drafting order, by the Gumbel-top-K trick (the K largest
    log q(x) + Gumbel keys, in decreasing order, have exactly the law of drawing K times
    without replacement with probability proportional to q)."""
    q_all, positive = positive_leaves(model)
    check_enough_paths(len(positive), paths, draft_sampling)
    q = np.array([float(q_all[x]) for x in positive], dtype=np.float64)
    q = q / q.sum()
    if draft_sampling == "iid":
        picks = rng.choice(len(positive), size=(samples, paths), p=q)
    else:
        keys = np.log(q)[None, :] + rng.gumbel(size=(samples, len(positive)))
        picks = np.argsort(-keys, axis=1, kind="stable")[:, :paths]
    leaves = positive[picks]
    return all_paths(model.vocab_size, model.depth)[leaves]


@dataclass
class SampledResult:
    """Block efficiency of a verifier ESTIMATED from sampled draft configurations.

    For each of `samples` ordered draft tuples drawn from the draft law, the verifier's exact
    conditional law given the drafts (its law function) gives E[tau + 1 | drafts]; their mean
    is an unbiased estimate of E[tau + 1] (tokens per target call). standard_error: sample
    standard deviation / sqrt(samples); ci_low, ci_high: the 95% normal confidence interval
    mean -+ 1.96 standard errors. Losslessness is not checked (total_variation is NaN): the
    sampled law is not the exact one.
    """

    block_efficiency: float
    standard_error: float
    ci_low: float
    ci_high: float
    samples: int
    seed: int
    total_variation: float = float("nan")
    enumeration: str = "sampled"
    # a rule registered may_be_undefined: sampled configurations with an undefined step, and
    # the estimated probability of one (mean over the samples)
    undefined_samples: int = 0
    undefined_mass: float = 0.0


def sampled_result(model: TreeModel, verifier: str | Callable[[DraftTree], BlockLaw],
                   paths: int = 1, draft_sampling: str = "iid", samples: int = 4096,
                   seed: int = 0, chunk: int = 1 << 12) -> SampledResult:
    """Estimate of a verifier's block efficiency from `samples` sampled draft
    configurations (SampledResult), in float64 on the CPU, chunks of `chunk`."""
    if samples < 2:
        raise ValueError(f"samples must be >= 2, got {samples}")
    float_model = model.to_float() if model.exact else model
    rng = np.random.default_rng(seed)
    tokens = sample_configurations(float_model, paths, draft_sampling, samples, rng)
    values = []
    name = verifier if isinstance(verifier, str) else getattr(verifier, "__name__", "law")
    may_be_undefined = isinstance(verifier, str) and _may_be_undefined(verifier)
    undefined, lost = 0, 0.0
    for start in range(0, samples, chunk):
        part = tokens[start: start + chunk]
        tree = draft_tree(float_model, part)
        law = verifier(tree) if callable(verifier) else block_law(verifier, tree)
        count, mass = check_block_law(name, float_model, part, law, np.ones(len(part)),
                                      may_be_undefined)
        undefined, lost = undefined + count, lost + float(mass)
        values.append(ops.as_float64(law.block_efficiency()))
    per_configuration = np.concatenate(values)
    mean = float(per_configuration.mean())
    error = float(per_configuration.std(ddof=1) / np.sqrt(samples))
    return SampledResult(mean, error, mean - CONFIDENCE_Z * error, mean + CONFIDENCE_Z * error,
                         samples, seed, undefined_samples=undefined,
                         undefined_mass=lost / samples)
