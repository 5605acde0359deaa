"""Losslessness audits: of a registered verifier's exact law, and of anyone's sampler code.

Instances come from families (`audit_instance`, `FAMILIES`) that trip the rules public code
uses: Dirichlet rows, ties of the clipped ratio min(1, p/q) (several tokens with p > q), exact
p = q ties, zero draft probabilities, near-deterministic rows, tiny next to large
probabilities; "mixed" cycles through all of them.

`audit` (registered verifiers): every ordered draft configuration of each instance is
enumerated, and the verifier's exact output law, continued by target sampling to depth L+1,
is compared with the target law in total variation (verifiers.exact). A lossless verifier has
TV 0; the audit passes when the largest TV over the trials is at most `tolerance` (1e-12;
float64 rounding stays far below it on these sizes).

    audit("gbv", paths=3, vocab=3, depth=2, trials=20, ties=True)
    -> {"verifier": "gbv", ..., "max_tv": 2e-16, "passed": True, "worst_instance": {...}}

`audit_sampler` (foreign code): the sampler runs in a child process (proofs.sandbox) on
drafts drawn from the instances, and its blocks, continued by target sampling, are tested
against the exact target law of paths and its block efficiency against the certified K-path
optimum, by anytime-valid e-processes (proofs.evalues) at one family-wise error level.

As data (what `speclp audit` runs): a frozen `VerifierAuditSpec` or `SamplerAuditSpec`
(construction validates, BadArgument naming the field; the defaults are the CLI's), then
`run(spec)` -> `AuditReport` (status: AuditStatus PASSED / FAILED / BROKEN, failures,
`save(folder)` for the failing instances, `to_json()` the command's JSON):

    report = run(VerifierAuditSpec("gbv", paths=3, ties=True))
    report.status, report.record["max_tv"]   # AuditStatus.PASSED, below the 1e-12 tolerance
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from .. import inputs
from ..inputs import BadArgument
from ..lp import optimum as lp_optimum
from ..lp import tolerances
from ..lp.instance import (
    Instance,
    check_enumeration,
    dirichlet_instance,
    from_rows,
    instance_size_problem,
    ties_instance,
)
from ..verifiers.exact import DRAFT_SAMPLING, continued_law, exact_result
from ..verifiers.registry import get_verifier
from ..verifiers.tree import capped_power, depth_offset, num_nodes, prefix_node_indices
from .evalues import detectable_tv, law_component_logs, log_efficiency_evalue, log_law_evalue
from .layouts import sglang_request, vllm_request
from .sandbox import (
    CALL_TIMEOUT,
    LAYOUTS,
    LOAD_TIMEOUT,
    InProcessSampler,
    SamplerFailed,
    SandboxedSampler,
    import_sampler,
    split_spec,
)

TOLERANCE = tolerances.TOTAL_VARIATION
ALPHAS = (0.2, 0.5, 1.0, 3.0)  # Dirichlet concentrations drawn per trial (ties=False)
MAX_CONFIGURATIONS = 2_000_000  # ordered draft configurations per instance


FAMILIES = ("dirichlet", "clipped-ties", "ties", "zero-draft", "near-deterministic", "tiny")
MIXED = "mixed"  # trial t draws from FAMILIES[t % len(FAMILIES)]


def _rows(count: int, vocab: int, rng: np.random.Generator, alpha: float = 1.0) -> np.ndarray:
    return rng.dirichlet(np.full(vocab, alpha), size=count)


def _clipped_ties_rows(count: int, vocab: int, rng: np.random.Generator, denominator: int = 12
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Rational rows where several tokens have p > q (all tied at min(1, p/q) = 1): q gets at
    least one unit of 1/denominator per token; p moves units of the other tokens (the largest
    first) onto a random set S of at least two tokens (one when V = 2), each of S gaining one
    unit or more."""
    target = np.empty((count, vocab), dtype=object)
    draft = np.empty((count, vocab), dtype=object)
    size = 1 if vocab == 2 else None
    for i in range(count):
        chosen_size = size or int(rng.integers(2, vocab))
        while True:
            cuts = np.sort(rng.integers(0, denominator - vocab + 1, size=vocab - 1))
            q = 1 + np.diff(np.concatenate([[0], cuts, [denominator - vocab]]))
            chosen = rng.permutation(vocab)[:chosen_size]
            spare = np.array([t for t in range(vocab) if t not in chosen])
            if q[spare].sum() >= chosen_size:
                break
        move = chosen_size + int(rng.integers(0, q[spare].sum() - chosen_size + 1))
        p = q.copy()
        for j in range(move):
            p[spare[np.argmax(p[spare])]] -= 1
            p[chosen[j % chosen_size]] += 1
        target[i] = [Fraction(int(x), denominator) for x in p]
        draft[i] = [Fraction(int(x), denominator) for x in q]
    return target, draft


def family_instance(family: str, vocab: int, depth: int, seed: int) -> Instance:
    """One random instance of an audit family (rows at every prefix; deterministic in seed).

    dirichlet           Dirichlet rows, concentration drawn from ALPHAS
    clipped-ties        several tokens with p > q per row: ties of the clipped ratio min(1, p/q)
                        (rational, multiples of 1/12)
    ties                exact p = q ties (ties_instance: draft rows copied from target rows)
    zero-draft          draft rows with zeros where the target is positive
    near-deterministic  target rows with one token at 1 - eps (eps 1e-2 or 1e-3); the draft
                        agrees on the top token half of the time
    tiny                probabilities of about 1e-6 next to large ones
    """
    rng = np.random.default_rng(seed)
    count = num_nodes(vocab, depth)
    name = f"{family}-V{vocab}-L{depth}-s{seed}"
    if family == "dirichlet":
        alpha = float(ALPHAS[int(rng.integers(len(ALPHAS)))])
        return dirichlet_instance(vocab, depth, alpha=alpha, seed=int(rng.integers(2**31)))
    if family == "ties":
        return ties_instance(vocab, depth, seed=int(rng.integers(2**31)))
    if family == "clipped-ties":
        return from_rows(*_clipped_ties_rows(count, vocab, rng), depth, name)
    target, draft = _rows(count, vocab, rng), _rows(count, vocab, rng)
    if family == "zero-draft":
        for row in draft:
            row[rng.permutation(vocab)[: int(rng.integers(1, vocab))]] = 0.0
    elif family == "near-deterministic":
        eps = float(rng.choice([1e-2, 1e-3]))
        top = rng.integers(vocab, size=count)
        same = rng.random(count) < 0.5
        other = (top + rng.integers(1, vocab, size=count)) % vocab
        target = eps * target
        target[np.arange(count), top] += 1 - eps
        draft = 0.3 * draft
        draft[np.arange(count), np.where(same, top, other)] += 0.7
    elif family == "tiny":
        for rows in (target, draft):
            rows[np.arange(count), rng.integers(vocab, size=count)] = 1e-6 * rng.random(count)
    else:
        raise BadArgument("family", f"must be one of {FAMILIES + (MIXED,)}, got {family!r}")
    target /= target.sum(1, keepdims=True)
    draft /= draft.sum(1, keepdims=True)
    return from_rows(target, draft, depth, name)


def audit_instance(vocab: int, depth: int, trial: int, ties: bool = False, seed: int = 0,
                   family: str | None = None) -> Instance:
    """The instance of one audit trial (deterministic in (seed, trial)). family: one of
    FAMILIES or "mixed" (trial t from FAMILIES[t % 6]); None: "ties" if ties else
    "dirichlet" (the instances of earlier versions, unchanged)."""
    family = family or ("ties" if ties else "dirichlet")
    if family == MIXED:
        family = FAMILIES[trial % len(FAMILIES)]
    rng = np.random.default_rng([seed, trial])
    instance_seed = int(rng.integers(2**31))
    if family == "ties":
        return ties_instance(vocab, depth, seed=instance_seed)
    if family == "dirichlet":
        alpha = float(ALPHAS[int(rng.integers(len(ALPHAS)))])
        return dirichlet_instance(vocab, depth, alpha=alpha, seed=instance_seed)
    return family_instance(family, vocab, depth, instance_seed)


def instance_family(instance: Instance) -> str:
    """The family an audit instance came from (from its name), or "given"."""
    for family in sorted(FAMILIES, key=len, reverse=True):
        if instance.name.startswith(family + "-"):
            return family
    return "given"


def audit(verifier: str, paths: int, vocab: int, depth: int, trials: int, ties: bool,
          seed: int = 0, draft_sampling: str = "iid",
          progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
          exact: bool = False, family: str | None = None) -> dict[str, Any]:
    """Audit a verifier's losslessness on `trials` random instances.

    paths K, vocab V, depth L: the instance sizes ((V^L)^K ordered configurations each).
    ties: use ties_instance (rational rows, many equal ratios) instead of Dirichlet rows.
    draft_sampling: "iid" or "without-replacement" (see verifiers.exact).
    progress: optional wrapper of the trial iterable (e.g. a progress bar).
    exact: run in exact rationals (ties instances are rational; Dirichlet float rows
    are then taken at their exact binary values).
    family: an instance family of audit_instance (None: "ties" if ties else "dirichlet").

    Returns {"verifier", "paths", "vocab", "depth", "trials", "ties", "seed",
    "draft_sampling", "exact", "claimed_lossless", "max_tv", "mean_tv", "worst_trial",
    "worst_instance" (Instance.to_json), "mean_block_efficiency", "configurations",
    "tolerance", "passed" (max_tv <= tolerance)}.
    Raises KeyError for an unknown verifier and ValueError for bad sizes.
    """
    spec = get_verifier(verifier)
    for name, value, low in (("paths", paths, 1), ("vocab", vocab, 2), ("depth", depth, 1),
                             ("trials", trials, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise BadArgument(name, f"must be an integer >= {low}, got {value!r}")
    if draft_sampling not in DRAFT_SAMPLING:
        raise BadArgument("draft_sampling", f"must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    configurations = (vocab**depth) ** paths
    if configurations > MAX_CONFIGURATIONS:
        raise BadArgument(
            "paths", f"(vocab^depth)^paths = {configurations} draft configurations per instance "
            f"(limit {MAX_CONFIGURATIONS}); lower paths, vocab or depth"
        )
    iterator: Iterable[int] = range(trials)
    if progress is not None:
        iterator = progress(iterator)
    tvs: list[float] = []
    efficiencies: list[float] = []
    worst_tv, worst_trial, worst_instance = -1.0, 0, None
    for trial in iterator:
        instance = audit_instance(vocab, depth, trial, ties, seed, family)
        result = exact_result(instance.model(exact=exact), verifier, paths=paths,
                              draft_sampling=draft_sampling)
        tv = float(result.total_variation)
        tvs.append(tv)
        efficiencies.append(float(result.block_efficiency))
        if tv > worst_tv:
            worst_tv, worst_trial, worst_instance = tv, trial, instance
    max_tv = max(tvs)
    return {
        "verifier": verifier,
        "paths": paths,
        "vocab": vocab,
        "depth": depth,
        "trials": trials,
        "ties": ties,
        "family": family or ("ties" if ties else "dirichlet"),
        "seed": seed,
        "draft_sampling": draft_sampling,
        "exact": exact,
        "claimed_lossless": spec.lossless,
        "max_tv": max_tv,
        "mean_tv": float(np.mean(tvs)),
        "worst_trial": worst_trial,
        "worst_instance": worst_instance.to_json() if worst_instance is not None else None,
        "mean_block_efficiency": float(np.mean(efficiencies)),
        "configurations": configurations,
        "tolerance": TOLERANCE,
        "passed": bool(max_tv <= TOLERANCE),
    }


# ---------------------------------------------------------------------------
# audit of foreign code: a verifier given as a sampler
# ---------------------------------------------------------------------------
#
# A sampler is user code, called through proofs.sandbox (a child process for a
# MODULE:FUNCTION spec, in this process for a function object) in one of its layouts:
#     batched    sampler(target_rows [B, K, L+1, V], draft_rows [B, K, L, V], paths [B, K, L],
#                rng) -> blocks [B, L+1] (accepted draft prefix + one token, padded with -1)
#                or a list of B token sequences
#     unbatched  the same without the B axis, one call per configuration
#     ragged     the flat layout of serving-engine rejection samplers (one chain per request,
#                K = 1; proofs.sandbox)
# target_rows[b, k, i] = p(. | first i tokens of path k), draft_rows the same with q.

SAMPLER_ALPHA = 1e-3  # family-wise error level of ALL the tests of one audit
MAX_RUNS = 1_000_000  # default cap of sampler runs per instance
RUNS_LIMIT = 10**9  # refused above (a run is counted, not stored: this bounds time, not memory)
TIME_LIMIT = 60.0  # default seconds of sampling per audit, shared by its instances
SAMPLER_TRIALS = 6  # default instances of a sampler audit (one per family of the mixed family)
POWER = 0.9  # power at which the detectable TV is stated
CONFIDENCE = 0.95  # level of the TV and block-efficiency intervals (finite-sample, valid)
SCREEN_RUNS = 2_000  # runs per instance when --search screens candidates
FIRST_BATCH, MAX_BATCH = 1024, 16384  # batches double from FIRST_BATCH up to MAX_BATCH
UNBATCHED_BATCH = 512  # configurations per sandbox call in the unbatched layout
REDRAWS = 2000  # rounds of redrawing clashing paths (without replacement) before giving up


def load_sampler(spec: str) -> Callable[..., Any]:
    """Import a sampler IN THIS PROCESS ('package.module:function' or 'file.py:function').
    Only for trusted code (tests, notebooks): the CLI never imports user code itself, it
    runs it through proofs.sandbox.SandboxedSampler. ValueError naming the spec otherwise."""
    try:
        return import_sampler(spec)
    except ValueError:
        raise
    except Exception as err:  # import errors of user code: one line, naming the spec
        raise BadArgument("sampler", f"cannot load {spec!r}: {type(err).__name__}: {err}") from None


def _draw_tokens(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of rows [..., V] (inverse CDF; never a zero-probability token)."""
    cdf = np.cumsum(rows, axis=-1)
    u = rng.random(rows.shape[:-1]) * cdf[..., -1]
    token = (cdf <= u[..., None]).sum(-1)
    token = np.minimum(token, rows.shape[-1] - 1)
    # rounding guard: move off a zero-probability token to the last positive one
    bad = np.take_along_axis(rows, token[..., None], -1)[..., 0] <= 0
    if bad.any():
        last = rows.shape[-1] - 1 - np.argmax((rows > 0)[..., ::-1], axis=-1)
        token = np.where(bad, last, token)
    return token


def draw_drafts(model: Any, paths: int, runs: int, rng: np.random.Generator,
                draft_sampling: str = "iid") -> np.ndarray:
    """[runs, K, L] draft paths drawn from the instance's draft rows (i.i.d., or without
    replacement by redrawing a path equal to an earlier one: q conditioned on distinct)."""
    vocab, depth = model.vocab_size, model.depth
    draft = np.asarray(model.to_float().draft, dtype=np.float64)

    def one_path(count: int) -> np.ndarray:
        tokens = np.zeros((count, depth), dtype=np.int64)
        code = np.zeros(count, dtype=np.int64)
        for d in range(depth):
            rows = draft[depth_offset(vocab, d) + code]
            tokens[:, d] = _draw_tokens(rows, rng)
            code = code * vocab + tokens[:, d]
        return tokens

    out = np.zeros((runs, paths, depth), dtype=np.int64)
    for k in range(paths):
        out[:, k] = one_path(runs)
        if draft_sampling == "without-replacement":
            for _ in range(REDRAWS):
                clash = np.zeros(runs, dtype=bool)
                for j in range(k):
                    clash |= (out[:, k] == out[:, j]).all(-1)
                if not clash.any():
                    break
                out[clash, k] = one_path(int(clash.sum()))
            else:
                raise BadArgument("paths", f"{REDRAWS} redraws did not give {paths} distinct paths "
                                 "(the draft law puts almost all its mass on fewer paths)")
    return out


def _request(model: Any, tokens: np.ndarray, rng: np.random.Generator, layout: str
             ) -> tuple[dict[str, Any], np.ndarray]:
    """The sampler's input for drafted paths tokens [B, K, L] in its layout, and the most
    draft tokens each configuration may accept ([B]: L, or the request's count if ragged)."""
    count, _, depth = tokens.shape
    vocab = model.vocab_size
    nodes = prefix_node_indices(tokens, vocab)  # [B, K, L+1]
    target = np.asarray(model.target, dtype=np.float64)[nodes]
    draft = np.asarray(model.draft, dtype=np.float64)[nodes[..., :-1]]
    base = {"count": count, "depth": depth, "vocab": vocab}
    if layout == "vllm":
        request, limits = vllm_request(tokens, target, draft, rng)
        return base | request, limits
    if layout == "sglang":
        request, limits = sglang_request(tokens, target, draft)
        return base | request, limits
    if layout != "ragged":
        limits = np.full(count, depth, dtype=np.int64)
        return base | {"target": target, "draft": draft, "paths": tokens}, limits
    limits = rng.integers(1, depth + 1, size=count)  # draft tokens per request, 1..L
    mask = np.arange(depth)[None, :] < limits[:, None]  # [B, L]
    bonus = _draw_tokens(target[np.arange(count), 0, limits], rng)
    return base | {"draft_token_ids": tokens[:, 0][mask], "num_draft_tokens": limits,
                   "draft_probs": draft[:, 0][mask], "target_probs": target[:, 0, :depth][mask],
                   "bonus_token_ids": bonus}, limits


def _continued_cells(blocks: np.ndarray, model: Any, rng: np.random.Generator) -> np.ndarray:
    """Index (shortlex, [V^(L+1)]) of each block continued by target sampling to L+1 tokens."""
    vocab, depth = model.vocab_size, model.depth
    target = np.asarray(model.target, dtype=np.float64)
    lengths = (blocks >= 0).sum(-1)
    code = np.zeros(len(blocks), dtype=np.int64)
    for d in range(depth + 1):
        token = blocks[:, d].clip(0, vocab - 1)
        sample = lengths <= d
        if sample.any():
            token = token.copy()
            token[sample] = _draw_tokens(target[depth_offset(vocab, d) + code[sample]], rng)
        code = code * vocab + token
    return code


def _malformed(blocks: np.ndarray, tokens: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """[B] True where a block is not a drafted prefix (of some path, at most `limits` long)
    plus one token."""
    depth = tokens.shape[2]
    lengths = (blocks >= 0).sum(-1)
    position = np.arange(depth)[None, None, :]
    equal = ((blocks[:, None, :depth] == tokens) | (position >= lengths[:, None, None] - 1))
    return ~(equal.all(-1).any(-1) & (lengths <= limits + 1))


class _Tally:
    """What an instance's runs add up to: continued-path counts, block-length counts,
    malformed blocks (with the first example)."""

    def __init__(self, vocab: int, depth: int):
        self.cells = np.zeros(vocab ** (depth + 1), dtype=np.int64)
        self.lengths = np.zeros(depth + 1, dtype=np.int64)
        self.runs = self.malformed = 0
        self.example: dict[str, Any] | None = None

    def add(self, blocks: np.ndarray, tokens: np.ndarray, limits: np.ndarray, model: Any,
            rng: np.random.Generator) -> None:
        bad = _malformed(blocks, tokens, limits)
        if bad.any() and self.example is None:
            i = int(np.flatnonzero(bad)[0])
            self.example = {"paths": tokens[i].tolist(), "block": blocks[i].tolist(),
                            "draft_tokens": int(limits[i])}
        self.malformed += int(bad.sum())
        good = blocks[~bad]
        self.cells += np.bincount(_continued_cells(good, model, rng), minlength=len(self.cells))
        self.lengths += np.bincount((good >= 0).sum(-1) - 1, minlength=len(self.lengths))
        self.runs += len(blocks)


def _optimum(instance: Instance, paths: int, draft_sampling: str) -> tuple[Any, float]:
    """(record, bound): the certified K-path optimum and the bound the efficiency test uses
    (the optimum plus its tolerance: a float optimum is within it of the exact one)."""
    record = lp_optimum(instance, paths=paths, draft_sampling=draft_sampling)
    return record, float(record.value) + tolerances.optimum_tolerance(record.certified)


def _sample(runner: Any, model: Any, paths: int, count: int, rng: np.random.Generator,
            layout: str, draft_sampling: str, tally: _Tally) -> None:
    """Draw `count` configurations, have the sampler answer them, add them to the tally."""
    tokens = draw_drafts(model, paths, count, rng, draft_sampling)
    step = UNBATCHED_BATCH if layout == "unbatched" else count
    for lo in range(0, count, step):
        part = tokens[lo : lo + step]
        request, limits = _request(model, part, rng, layout)
        tally.add(runner(request), part, limits, model, rng)


def _probabilities(instance: Instance, law: Callable[..., Any] | None = None, paths: int = 1,
                   draft_sampling: str = "iid") -> np.ndarray:
    """The exact law of paths of L+1 tokens the audit tests against, as float64 [V^(L+1)]:
    the target law, or with `law` (a law function DraftTree -> BlockLaw, verifiers.law) that
    law's exact output law on this instance (verifiers.exact, every draft configuration
    enumerated) continued by target sampling."""
    if law is None:
        model = instance.model(exact=instance.rational)
        return np.asarray([float(x) for x in model.target_path_probabilities(model.depth + 1)])
    model = instance.model(exact=False)
    emit = exact_result(model, law, paths=paths, draft_sampling=draft_sampling).emit
    probs = np.clip(np.asarray(continued_law(model, emit), dtype=np.float64), 0.0, None)
    return probs / probs.sum()


def audit_sampler_instance(runner: Any, instance: Instance, paths: int, max_runs: int,
                           level: float, seed: int = 0, layout: str = "batched",
                           draft_sampling: str = "iid", time_limit: float | None = None,
                           law: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Run the sampler on one instance until an e-process reaches 1/level (a rejection), a
    block is malformed, `max_runs` runs are drawn or `time_limit` seconds have passed; `level`
    is this instance's share of each test (law, efficiency). With `law` (a stated lossy law)
    the law test is against that law and the efficiency test is off. See audit_sampler."""
    start = time.perf_counter()
    model = instance.model(exact=False)
    vocab, depth = model.vocab_size, model.depth
    probs = _probabilities(instance, law, paths, draft_sampling)
    record, bound = _optimum(instance, paths, draft_sampling)
    rng = np.random.default_rng([seed, 2])  # the audit's draws (the sampler has its own stream)
    tally = _Tally(vocab, depth)
    log_threshold = float(np.log(1 / level))
    log_law = log_eff = 0.0
    batch = FIRST_BATCH
    while tally.runs < max_runs:
        _sample(runner, model, paths, min(batch, max_runs - tally.runs), rng, layout,
                draft_sampling, tally)
        batch = min(2 * batch, MAX_BATCH if layout != "unbatched" else 4 * UNBATCHED_BATCH)
        log_law = log_law_evalue(tally.cells, probs, vocab, depth + 1)
        log_eff = log_efficiency_evalue(tally.lengths, bound) if law is None else 0.0
        if tally.malformed or max(log_law, log_eff) >= log_threshold:
            break
        if time_limit is not None and time.perf_counter() - start >= time_limit:
            break
    n = int(tally.cells.sum())
    return _instance_record(instance, tally, probs, record, bound, log_law, log_eff,
                            log_threshold, level, n, time.perf_counter() - start)


def _instance_record(instance: Instance, tally: _Tally, probs: np.ndarray, record: Any,
                     bound: float, log_law: float, log_eff: float, log_threshold: float,
                     level: float, n: int, seconds: float) -> dict[str, Any]:
    vocab, depth = instance.vocab_size, instance.depth
    delta = 1 - CONFIDENCE
    freq = tally.cells / max(n, 1)
    tv = float(0.5 * np.abs(freq - probs).sum())
    cells = len(probs)
    # Bretagnolle-Huber-Carol: P(||p_hat - p||_1 >= e) <= (2^m - 2) exp(-n e^2 / 2)
    margin = 0.5 * float(np.sqrt(2 * (cells * np.log(2.0) + np.log(1 / delta)) / max(n, 1)))
    lengths = np.arange(1, depth + 2)
    be = float((tally.lengths * lengths).sum() / max(n, 1))
    # Hoeffding for values in [1, L+1], two-sided
    be_margin = depth * float(np.sqrt(np.log(2 / delta) / (2 * max(n, 1))))
    impossible = int(tally.cells[probs <= 0].sum())
    logs = law_component_logs(tally.cells, probs, vocab, depth + 1)
    token_tv = []  # TV of the law of token d (d = 1..L+1) of the continued block
    for d in range(1, depth + 2):
        shape = (vocab ** (d - 1), vocab, -1)
        token_tv.append(float(0.5 * np.abs(freq.reshape(shape).sum((0, 2))
                                           - probs.reshape(shape).sum((0, 2))).sum()))
    return {
        "instance": instance.name,
        "family": instance_family(instance),
        "runs": tally.runs,
        "malformed": tally.malformed,
        "example_malformed": tally.example,
        "impossible_outcomes": impossible,
        "level": level,
        "law_evalue": _exp(log_law),
        "law_rejected": bool(log_law >= log_threshold),
        "efficiency_evalue": _exp(log_eff),
        "efficiency_rejected": bool(log_eff >= log_threshold),
        "detectable_tv": (detectable_tv(probs, vocab, depth + 1, n, log_threshold, POWER)
                          if n else 1.0),
        "tv": tv,
        "tv_ci": [max(0.0, tv - margin), min(1.0, tv + margin)],
        "block_efficiency": be,
        "block_efficiency_ci": [be - be_margin, be + be_margin],
        "optimum": float(record.value),
        "optimum_exact": record.exact,
        "optimum_certified": bool(record.certified),
        "efficiency_bound": bound,
        "above_optimum": bool(log_eff >= log_threshold),
        "seconds": round(seconds, 3),
        "position": int(np.argmax(logs)) + 1,
        "position_log_evalues": [float(x) for x in logs],
        "token_tv": token_tv,
    }


def _exp(log_value: float) -> float:
    return float("inf") if log_value > 700 else float(np.exp(log_value))


def _failures(report: dict[str, Any], paths: int, law_name: str | None = None) -> list[str]:
    """One line per test this instance failed, naming the instance, its family and the test
    (law_name: the stated lossy law the law test was against, None for the target law)."""
    head = f"{report['instance']} (family {report['family']})"
    against = "the target law" if law_name is None else f"the stated law {law_name}"
    out = []
    if report["malformed"]:
        out.append(f"{head}: {report['malformed']} blocks are not a drafted prefix plus one token, "
                   f"e.g. {report['example_malformed']}")
    if report["impossible_outcomes"]:
        out.append(f"{head}: {report['impossible_outcomes']} blocks (continued by target sampling) "
                   f"have probability 0 under {against}")
    elif report["law_rejected"]:
        out.append(f"{head}: law test rejected: the emitted block, continued by target sampling, "
                   f"does not follow {against} (e-value {report['law_evalue']:.3g} >= "
                   f"1/{report['level']:.3g}; empirical TV {report['tv']:.4f} over "
                   f"{report['runs']:,} runs; furthest off at position {report['position']}: "
                   f"token {report['position']} of the block has empirical TV "
                   f"{report['token_tv'][report['position'] - 1]:.4f})")
    if report["efficiency_rejected"]:
        out.append(f"{head}: efficiency test rejected: E[tau+1] = {report['block_efficiency']:.4f} "
                   f"exceeds the {'certified' if report['optimum_certified'] else 'NOT certified'} "
                   f"{paths}-path optimum {report['optimum']:.6f} (e-value "
                   f"{report['efficiency_evalue']:.3g}): impossible for a lossless verifier")
    return out


def _screen(runner: Any, candidates: list[Instance], keep: int, paths: int, layout: str,
            draft_sampling: str, seed: int) -> tuple[list[Instance], list[dict[str, Any]]]:
    """--search: run every candidate SCREEN_RUNS times (draws not reused by the tests) and keep
    the `keep` whose first-token law (Pearson p-value) or block efficiency (z above the
    optimum) looks furthest from the target's."""
    scores = []
    for index, instance in enumerate(candidates):
        model = instance.model(exact=False)
        tally = _Tally(model.vocab_size, model.depth)
        _sample(runner, model, paths, SCREEN_RUNS, np.random.default_rng([seed, 7, index]),
                layout, draft_sampling, tally)
        probs = _probabilities(instance)
        first = tally.cells.reshape(model.vocab_size, -1).sum(1)
        expected = probs.reshape(model.vocab_size, -1).sum(1) * max(first.sum(), 1)
        keep_cells = expected > 0
        chi2 = float(((first - expected)[keep_cells] ** 2 / expected[keep_cells]).sum())
        p_first = float(stats.chi2.sf(chi2, max(int(keep_cells.sum()) - 1, 1)))
        lengths = np.repeat(np.arange(1, model.depth + 2), tally.lengths)
        _, bound = _optimum(instance, paths, draft_sampling)
        spread = float(lengths.std(ddof=1)) if len(lengths) > 1 else 0.0
        z = (float(lengths.mean()) - bound) / max(spread / np.sqrt(max(len(lengths), 1)), 1e-12)
        score = min(p_first, float(stats.norm.sf(z)))
        if tally.malformed:
            score = -1.0
        scores.append({"instance": instance.name, "family": instance_family(instance),
                       "first_token_p": p_first, "efficiency_z": z, "score": score})
    order = sorted(range(len(candidates)), key=lambda i: scores[i]["score"])[:keep]
    return [candidates[i] for i in order], scores


def _enough_paths(instance: Instance, paths: int) -> bool:
    """Whether K distinct paths of positive draft probability exist (without replacement)."""
    return int((np.asarray(instance.model().draft_path_probabilities()) > 0).sum()) >= paths


def _instances(given: list[Instance] | None, count: int, vocab: int, depth: int, ties: bool,
               seed: int, family: str | None, paths: int, draft_sampling: str) -> list[Instance]:
    """The instances to audit: the given ones, or `count` of the stream. Without replacement,
    an instance with fewer than K paths of positive draft probability cannot be drafted: a
    given one is refused (ValueError), a random one is skipped for the next trial."""
    if given is not None:
        if draft_sampling == "without-replacement":
            for instance in given:
                if not _enough_paths(instance, paths):
                    raise BadArgument("paths", f"{instance.name} has fewer than {paths} paths of "
                                     "positive draft probability; cannot draft them distinct")
        return list(given)
    out: list[Instance] = []
    trial = 0
    while len(out) < count:
        if trial >= 20 * count:
            raise BadArgument("paths", f"fewer than {count} of {trial} instances of this family have "
                             f"{paths} paths of positive draft probability (without replacement)")
        instance = audit_instance(vocab, depth, trial, ties, seed, family)
        trial += 1
        if draft_sampling != "without-replacement" or _enough_paths(instance, paths):
            out.append(instance)
    return out


def audit_sampler(sampler: Callable[..., Any] | str, paths: int = 2, vocab: int = 3,
                  depth: int = 2, trials: int = SAMPLER_TRIALS, ties: bool = False,
                  runs: int = MAX_RUNS,
                  seed: int = 0, batched: bool = True, alpha: float = SAMPLER_ALPHA,
                  draft_sampling: str = "iid", instances: list[Instance] | None = None,
                  name: str = "sampler", progress: Callable[[Iterable[int]], Iterable[int]] | None
                  = None, family: str | None = None, layout: str | None = None,
                  time_limit: float | None = TIME_LIMIT, call_timeout: float = CALL_TIMEOUT,
                  search: int = 0, load_timeout: float = LOAD_TIMEOUT, verbose: bool = False,
                  law: Callable[..., Any] | None = None, law_name: str | None = None
                  ) -> dict[str, Any]:
    """Audit foreign sampler code for losslessness and for an impossible block efficiency.

    sampler: a function (called in this process) or a 'FILE.py:FUNCTION' / 'MODULE:FUNCTION'
    spec (loaded and called in a child process: proofs.sandbox). layout: "batched",
    "unbatched" or "ragged" (default: batched unless batched=False).

    Instances: the given `instances`, or `trials` instances of `family` (audit_instance; None
    means "ties" if ties else "dirichlet"; "mixed" cycles through FAMILIES); with search = N,
    N candidates are screened (SCREEN_RUNS runs each, draws not reused) and the `trials` that
    look furthest from the target are audited.

    On each instance K paths are drawn from the draft rows, the sampler answers, and each block
    is continued by target sampling to L+1 tokens. Two anytime-valid tests (proofs.evalues) run
    after every batch: the LAW test (mixture e-process of the continued paths against the exact
    target law of paths, over the laws of the first d tokens, d = 1..L+1) and the EFFICIENCY
    test (betting e-process against E[tau+1] <= the certified K-path optimum, Lemma 4.1 of
    docs/theory.md). Each test of each instance runs at level alpha / (2 * instances), so by
    Ville's inequality and a union bound a lossless sampler fails the audit with probability
    at most alpha (the family-wise error level), whenever the sampling stops. An instance stops
    at a rejection, at a malformed block (not a drafted prefix plus one token), after `runs`
    runs or after its share of `time_limit` seconds.

    Reported per instance: the e-values, the TV detectable with probability POWER at the runs
    drawn (proofs.evalues.detectable_tv: simulated, for a deviation spread over all outcomes),
    the empirical TV of the continued law with a valid 95% interval (Bretagnolle-Huber-Carol
    over V^(L+1) cells), E[tau+1] with a valid 95% interval (Hoeffding), and the optimum.

    Returns {"sampler", "paths", "vocab", "depth", "trials", "family", "ties", "runs" (the cap),
    "seed", "draft_sampling", "layout", "alpha", "level", "power", "instances", "failures",
    "failed_instances" (Instance JSON of each failing instance), "worst_instance",
    "max_detectable_tv", "captured_output", "screened" (with search), "passed"}.
    Raises ValueError for bad arguments and proofs.sandbox.SamplerFailed when the sampler
    breaks its contract (exit, exception, hang, crash, malformed answer).

    Defaults are the CLI's (`speclp audit --sampler`): SAMPLER_TRIALS (6) instances,
    TIME_LIMIT (60 s; None: no time limit, the audit is then a function of the seed),
    MAX_RUNS runs per instance, call_timeout per call and load_timeout for the import of a
    spec's module (its own limit). verbose: one progress line per instance on stderr.
    law: a stated LOSSY law (a law function DraftTree -> BlockLaw, verifiers.law) that the
    sampler claims to follow exactly, e.g. an ensemble verifier's w p + (1 - w) q: the law test
    is then against that law's exact output law (verifiers.exact) and the efficiency test is
    off (a lossy law may exceed the lossless optimum); law_name names it in the failures.
    """
    layout = layout or ("batched" if batched else "unbatched")
    SamplerAuditSpec(  # its construction is the validation (each rule in one place)
        sampler, paths, vocab, depth, trials, ties, family if family is not None else
        ("ties" if ties else "dirichlet"), seed, runs, alpha, draft_sampling, layout,
        None if instances is None else tuple(instances), time_limit, call_timeout, load_timeout,
        search if instances is None else 0, name)
    if law is not None and search:
        raise BadArgument("search", "screens against the target law; not available with a stated law")
    if law is not None and not callable(law):
        raise BadArgument("law", f"must be a law function DraftTree -> BlockLaw, got {law!r}")
    chosen = _instances(instances, max(search, trials), vocab, depth, ties, seed, family, paths,
                        draft_sampling)
    runner = (SandboxedSampler(sampler, layout, seed, call_timeout, load_timeout)
              if isinstance(sampler, str) else InProcessSampler(sampler, layout, seed))
    try:
        if isinstance(runner, SandboxedSampler):
            runner.start()
        screened = None
        if search and instances is None:
            chosen, screened = _screen(runner, chosen, trials, paths, layout, draft_sampling, seed)
        level = alpha / (2 * len(chosen))
        share = None if time_limit is None else time_limit / len(chosen)
        iterator: Iterable[int] = range(len(chosen))
        if progress is not None:
            iterator = progress(iterator)
        reports, failures, failed = [], [], []
        for index in iterator:
            report = audit_sampler_instance(runner, chosen[index], paths, runs, level,
                                            seed=seed + index, layout=layout,
                                            draft_sampling=draft_sampling, time_limit=share,
                                            law=law)
            reports.append(report)
            lines = _failures(report, paths, law_name if law is not None else None)
            if verbose:
                print(f"audit {name}: instance {index + 1}/{len(chosen)} {report['instance']}: "
                      f"{report['runs']:,} runs in {report['seconds']:.1f} s, "
                      f"{'FAILED' if lines else 'passed'} (law e-value "
                      f"{report['law_evalue']:.3g}, threshold {1 / level:.3g})",
                      file=sys.stderr, flush=True)
            failures += lines
            if lines:
                failed.append(chosen[index])
        output = runner.captured_output()
    finally:
        runner.cleanup()
    worst = failed[0] if failed else chosen[int(np.argmax([r["law_evalue"] for r in reports]))]
    return {
        "sampler": name, "paths": paths, "vocab": vocab, "depth": depth, "trials": len(chosen),
        "family": family or ("ties" if ties else "dirichlet"), "ties": ties, "runs": runs,
        "seed": seed, "draft_sampling": draft_sampling, "layout": layout, "batched":
        layout == "batched", "alpha": alpha, "level": level, "power": POWER,
        "error_level": (f"family-wise error level {alpha:g}: each of the {2 * len(chosen)} tests "
                        f"(law and efficiency on {len(chosen)} instances) at {level:.3g}, "
                        "anytime-valid (e-processes, Ville's inequality)"),
        "instances": reports, "screened": screened,
        "max_detectable_tv": max(r["detectable_tv"] for r in reports),
        "failures": failures,
        "law": None if law is None else (law_name or getattr(law, "__name__", "stated law")),
        "failed_instances": [inst.to_json() for inst in failed],
        "worst_instance": worst.to_json(),
        "captured_output": output,
        "passed": not failures,
    }


# ---------------------------------------------------------------------------
# the audit as data: a spec in (VerifierAuditSpec, SamplerAuditSpec), run(spec), an AuditReport out
# ---------------------------------------------------------------------------

VERIFIER_TRIALS = 20  # default instances of a verifier audit (`speclp audit --verifier`)


class AuditStatus(Enum):
    """How an audit ended (the three outcomes the CLI's exit status distinguishes)."""

    PASSED = "passed"  # verifier: max TV <= tolerance; sampler: no test rejected, no malformed block
    FAILED = "failed"  # a verifier with TV > tolerance, or a sampler test rejected / a block malformed
    BROKEN = "broken"  # the sampler broke its contract (exits, raises, hangs, malformed answer)


MAX_TRIALS = inputs.MAX_TRIALS  # random instances of one audit
SAMPLER_SECONDS = {"time_limit": 7 * 24 * 3600, "call_timeout": 24 * 3600, "load_timeout": 24 * 3600}


def _check_instances(paths: int, vocab: int, depth: int, trials: int, seed: int,
                     draft_sampling: str, enumerated_paths: int) -> None:
    """The checks both audit specs make, in the order `speclp audit` reports them: the draft
    law, the sizes, the seed, the instance shape, distinct paths without replacement, and the
    exact law of `enumerated_paths` paths (lp.instance, verifiers.tree limits)."""
    inputs.choice("draft_sampling", draft_sampling, DRAFT_SAMPLING)
    for name, value, low in (("paths", paths, 1), ("vocab", vocab, 2), ("depth", depth, 1),
                             ("trials", trials, 1)):
        inputs.integer(name, value, low, MAX_TRIALS if name == "trials" else None)
    inputs.seed("seed", seed)
    problem = instance_size_problem(vocab, depth)
    if problem:
        raise BadArgument("vocab/depth", problem)
    if draft_sampling == "without-replacement" and paths > capped_power(vocab, depth):
        raise BadArgument("paths", f"cannot draft {paths} distinct paths out of "
                                   f"{capped_power(vocab, depth):,} (V={vocab}, L={depth})")
    check_enumeration("paths", vocab, depth, enumerated_paths)


def _family_of(family: str | None, ties: bool, default: str) -> str:
    """The family an audit draws from: `family`, else "ties" with ties, else `default`."""
    if family is None:
        return "ties" if ties else default
    inputs.choice("family", family, FAMILIES + (MIXED,))
    if ties and family != "ties":
        raise BadArgument("ties", f"means `family` ties; it contradicts `family` {family}")
    return family


@dataclass(frozen=True)
class VerifierAuditSpec:
    """An exact audit of a registered verifier as data (audit()'s arguments, `speclp audit
    --verifier`'s defaults). Construction is the validation: a wrong field raises BadArgument
    naming it (checks in the order `speclp audit` reports them); family None is "ties" with
    ties, else "dirichlet"."""

    verifier: str
    paths: int = 2
    vocab: int = 3
    depth: int = 2
    trials: int = VERIFIER_TRIALS
    ties: bool = False
    family: str | None = None
    seed: int = 0
    draft_sampling: str = "iid"
    exact: bool = False

    def __post_init__(self) -> None:
        _check_instances(self.paths, self.vocab, self.depth, self.trials, self.seed,
                         self.draft_sampling, self.paths)
        object.__setattr__(self, "family", _family_of(self.family, self.ties, "dirichlet"))
        try:
            get_verifier(self.verifier)
        except KeyError as err:
            raise BadArgument("verifier", err.args[0]) from None

    def run(self, progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> AuditReport:
        return run(self, progress)


@dataclass(frozen=True)
class SamplerAuditSpec:
    """A statistical audit of sampler code as data (audit_sampler()'s arguments with the
    defaults of `speclp audit --sampler`: layout None is "batched", paths None is 1 in the
    ragged and vllm layouts (one chain per request) and 2 otherwise, family None is "ties"
    with ties, else "mixed"; name None is the sampler's spec). Construction is the
    validation: a wrong field raises BadArgument naming it (`runs` is --max-runs), in the
    order `speclp audit` reports them; a spec string naming no file is refused here, one
    naming nothing callable when the audit runs."""

    sampler: str | Callable[..., Any]
    paths: int | None = None
    vocab: int = 3
    depth: int = 2
    trials: int = SAMPLER_TRIALS
    ties: bool = False
    family: str | None = None
    seed: int = 0
    runs: int = MAX_RUNS
    alpha: float = SAMPLER_ALPHA
    draft_sampling: str = "iid"
    layout: str | None = None
    instances: tuple[Instance, ...] | None = None
    time_limit: float | None = TIME_LIMIT
    call_timeout: float = CALL_TIMEOUT
    load_timeout: float = LOAD_TIMEOUT
    search: int = 0
    name: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.sampler, str) or callable(self.sampler)):
            raise BadArgument("sampler", f"must be a MODULE:FUNCTION spec or a function, "
                                         f"got {self.sampler!r}")
        layout = inputs.choice("layout", "batched" if self.layout is None else self.layout, LAYOUTS)
        paths = self.paths if self.paths is not None else (1 if layout in ("ragged", "vllm") else 2)
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "paths", paths)
        if layout in ("ragged", "vllm") and paths != 1:
            raise BadArgument("paths", f"the {layout} layout has one draft chain per request (K = 1), "
                                       f"got {paths}")
        _check_instances(paths, self.vocab, self.depth, self.trials, self.seed, self.draft_sampling, 1)
        self._check_sampling()
        object.__setattr__(self, "family", _family_of(self.family, self.ties, MIXED))
        if isinstance(self.sampler, str):
            split_spec(self.sampler)  # SpecError (BadArgument "sampler"): a spec naming no file
        if self.name is None:
            object.__setattr__(self, "name", self.sampler if isinstance(self.sampler, str) else "sampler")
        if self.instances is not None:
            object.__setattr__(self, "instances", tuple(self.instances))
            if not self.instances:
                raise BadArgument("instances", "give at least one instance, or None (random ones)")

    def _check_sampling(self) -> None:
        """runs, alpha, the time limits and search (after the sizes)."""
        inputs.integer("runs", self.runs, 2, RUNS_LIMIT)
        inputs.number("alpha", self.alpha, 0, 1, low_open=True)
        if not self.alpha < 1:
            raise BadArgument("alpha", f"must be < 1, got {self.alpha:g}")
        for name, most in SAMPLER_SECONDS.items():
            value = getattr(self, name)
            if value is not None or name != "time_limit":
                inputs.number(name, value, 0, most, low_open=True)
        inputs.integer("search", self.search, 0, 10_000)
        if self.search and self.search < self.trials:
            raise BadArgument("search", f"must be at least `trials` ({self.trials}), got {self.search}")
        if self.search and self.instances is not None:
            raise BadArgument("search", "screens random instances; it cannot be used with `instances`")

    def run(self, progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> AuditReport:
        return run(self, progress)


@dataclass(frozen=True)
class AuditReport:
    """The result of an audit spec, inspectable like scipy's OptimizeResult: the typed status,
    the failure lines, the files the failing instances were saved to (save()), and `record`,
    the whole payload (audit() / audit_sampler()'s dict; for a BROKEN sampler: the sampler,
    alpha, failures, the SamplerFailed record and the sampler's captured output). to_json() is
    the JSON of `speclp audit --json`."""

    spec: VerifierAuditSpec | SamplerAuditSpec
    status: AuditStatus
    record: dict[str, Any] = field(repr=False)
    failures: tuple[str, ...] = ()
    saved: tuple[str, ...] | None = None  # None: not saved (save() on a failed audit sets it)

    @property
    def passed(self) -> bool:
        return self.status is AuditStatus.PASSED

    def save(self, folder: str | Path) -> AuditReport:
        """Write the failing instances (verifier: the worst one) as Instance JSON files under
        `folder`; the report with `saved` set. A passed or BROKEN audit saves nothing."""
        if self.status is not AuditStatus.FAILED:
            return self
        s = self.spec
        if isinstance(s, VerifierAuditSpec):
            named = [(f"audit-{s.verifier}-K{s.paths}-V{s.vocab}-L{s.depth}-{s.family}-s{s.seed}.json",
                      self.record["worst_instance"])]
        else:
            stem = Path(str(s.sampler).rpartition(":")[2]).name
            named = [(f"audit-sampler-{stem}-K{s.paths}-V{s.vocab}-L{s.depth}-{s.family}-s{s.seed}-"
                      f"{index}.json", data) for index, data in enumerate(self.record["failed_instances"])]
        saved = []
        for filename, data in named:
            path = Path(folder) / filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1))
            saved.append(str(path))
        return replace(self, saved=tuple(saved))

    def to_json(self) -> dict[str, Any]:
        out = dict(self.record)
        if self.saved is not None:  # a verifier audit saves one file (its path), a sampler's a list
            out["saved"] = self.saved[0] if isinstance(self.spec, VerifierAuditSpec) else list(self.saved)
        return out


def run(spec: VerifierAuditSpec | SamplerAuditSpec,
        progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> AuditReport:
    """The audit a spec describes (audit() or audit_sampler()), as an AuditReport. progress:
    optional wrapper of the instance iterable. A sampler spec naming nothing callable raises
    BadArgument("sampler"); a sampler that breaks its contract is a BROKEN report."""
    if isinstance(spec, VerifierAuditSpec):
        record = audit(spec.verifier, spec.paths, spec.vocab, spec.depth, spec.trials, spec.ties,
                       seed=spec.seed, draft_sampling=spec.draft_sampling, exact=spec.exact,
                       family=spec.family, progress=progress)
        claimed = get_verifier(spec.verifier)
        record["lossless_claimed"] = claimed.lossless and spec.draft_sampling in claimed.draft_sampling
        failures = () if record["passed"] else (f"{spec.verifier} is not lossless: max TV "
                                                f"{record['max_tv']:.3g} > {record['tolerance']:g}",)
        return AuditReport(spec, AuditStatus.PASSED if record["passed"] else AuditStatus.FAILED,
                           record, failures)
    try:
        record = audit_sampler(spec.sampler, spec.paths, spec.vocab, spec.depth, spec.trials, spec.ties,
                               spec.runs, spec.seed, alpha=spec.alpha, draft_sampling=spec.draft_sampling,
                               instances=None if spec.instances is None else list(spec.instances),
                               name=spec.name, family=spec.family, layout=spec.layout,
                               time_limit=spec.time_limit, call_timeout=spec.call_timeout,
                               load_timeout=spec.load_timeout, search=spec.search, progress=progress)
    except SamplerFailed as err:
        if err.kind == "spec":  # the child's SpecError: the spec names nothing callable
            raise BadArgument("sampler", str(err).removeprefix("sampler: ")) from None
        line = f"sampler {spec.name} {err}"
        if err.where:
            line += f" (at {err.where})"
        if err.hint:
            line += f"; hint: {err.hint}"
        record = {"sampler": spec.name, "passed": False, "alpha": spec.alpha, "failures": [line],
                  "sampler_failure": err.record(), "captured_output": err.output}
        return AuditReport(spec, AuditStatus.BROKEN, record, (line,))
    return AuditReport(spec, AuditStatus.PASSED if record["passed"] else AuditStatus.FAILED, record,
                       tuple(record["failures"]))
