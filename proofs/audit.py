"""Losslessness audits: of a registered verifier's exact law, and of anyone's sampler code.

For each trial an instance is drawn (Dirichlet rows with a random concentration, or a
`ties_instance` with many equal ratios p/q), every ordered draft configuration is
enumerated, and the verifier's exact output law, continued by target sampling to
depth L+1, is compared with the target law in total variation (verifiers.exact).
A lossless verifier has TV 0; the audit passes when the largest TV over the trials is
at most `tolerance` (1e-12; float64 rounding stays far below it on these sizes).

    audit("gbv", paths=3, vocab=3, depth=2, trials=20, ties=True)
    -> {"verifier": "gbv", ..., "max_tv": 2e-16, "passed": True, "worst_instance": {...}}

Foreign code (`audit_sampler`, below) is audited statistically: a sampler function is
run on drafts drawn from random instances and its emitted blocks are tested against the
target law and against the certified K-path optimum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..lp import tolerances
from ..lp.instance import Instance, dirichlet_instance, ties_instance
from ..verifiers.exact import DRAFT_SAMPLING, exact_result
from ..verifiers.registry import get_verifier

TOLERANCE = tolerances.TOTAL_VARIATION
ALPHAS = (0.2, 0.5, 1.0, 3.0)  # Dirichlet concentrations drawn per trial (ties=False)
MAX_CONFIGURATIONS = 2_000_000  # ordered draft configurations per instance


def audit_instance(vocab: int, depth: int, trial: int, ties: bool, seed: int = 0) -> Instance:
    """The instance of one audit trial (deterministic in (seed, trial))."""
    rng = np.random.default_rng([seed, trial])
    instance_seed = int(rng.integers(2**31))
    if ties:
        return ties_instance(vocab, depth, seed=instance_seed)
    alpha = float(ALPHAS[int(rng.integers(len(ALPHAS)))])
    return dirichlet_instance(vocab, depth, alpha=alpha, seed=instance_seed)


def audit(verifier: str, paths: int, vocab: int, depth: int, trials: int, ties: bool,
          seed: int = 0, draft_sampling: str = "iid",
          progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
          exact: bool = False) -> dict[str, Any]:
    """Audit a verifier's losslessness on `trials` random instances.

    paths K, vocab V, depth L: the instance sizes ((V^L)^K ordered configurations each).
    ties: use ties_instance (rational rows, many equal ratios) instead of Dirichlet rows.
    draft_sampling: "iid" or "without-replacement" (see verifiers.exact).
    progress: optional wrapper of the trial iterable (e.g. a progress bar).
    exact: run in exact rationals (ties instances are rational; Dirichlet float rows
    are then taken at their exact binary values).

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
            raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling: must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    configurations = (vocab**depth) ** paths
    if configurations > MAX_CONFIGURATIONS:
        raise ValueError(
            f"paths: (vocab^depth)^paths = {configurations} draft configurations per instance "
            f"(limit {MAX_CONFIGURATIONS}); lower paths, vocab or depth"
        )
    iterator: Iterable[int] = range(trials)
    if progress is not None:
        iterator = progress(iterator)
    tvs: list[float] = []
    efficiencies: list[float] = []
    worst_tv, worst_trial, worst_instance = -1.0, 0, None
    for trial in iterator:
        instance = audit_instance(vocab, depth, trial, ties, seed)
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
# A sampler is any function
#     sampler(target_rows, draft_rows, paths, rng) -> blocks
#         target_rows float64 [B, K, L+1, V]  p(. | first i tokens of path k), i = 0..L
#         draft_rows  float64 [B, K, L, V]    q(. | first i tokens of path k), i = 0..L-1
#         paths       int64   [B, K, L]       the K drafted paths (drawn from the instance)
#         rng         numpy.random.Generator
#         blocks      int [B, L+1] (the emitted block: accepted draft prefix + one token,
#                     left-aligned, padded with -1) or a list of B token sequences
# With batched=False it is called once per draft configuration, on the same arrays
# without the leading B axis, and returns one token sequence.

SAMPLER_RUNS = 20_000  # sampler calls per instance (a CLI audit takes seconds)
SAMPLER_ALPHA = 1e-3  # family-wise level of the goodness-of-fit tests (Bonferroni over instances)
POWER = 0.9  # power at which the detectable TV is stated
CONFIDENCE = 0.95  # level of the TV and block-efficiency intervals
MIN_EXPECTED = 5.0  # cells with a smaller expected count are pooled for the chi-square test


def load_sampler(spec: str) -> Callable[..., Any]:
    """'package.module:function' or 'path/to/file.py:function' -> the function.

    Raises ValueError (naming the spec) when it cannot be imported or is not callable.
    """
    import importlib
    import importlib.util
    from pathlib import Path

    module_name, sep, function = spec.rpartition(":")
    if not sep or not module_name or not function:
        raise ValueError(f"sampler: expected MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise ValueError(f"sampler: no file {module_name!r}")
            loader_spec = importlib.util.spec_from_file_location(f"_speclp_sampler_{path.stem}", path)
            if loader_spec is None or loader_spec.loader is None:
                raise ValueError(f"sampler: cannot load {module_name!r}")
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        fn = getattr(module, function)
    except ValueError:
        raise
    except Exception as err:  # import errors of user code: one line, naming the spec
        raise ValueError(f"sampler: cannot load {spec!r}: {type(err).__name__}: {err}") from None
    if not callable(fn):
        raise ValueError(f"sampler: {spec!r} is not callable")
    return fn


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
    from ..verifiers.tree import depth_offset

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
            while True:
                clash = np.zeros(runs, dtype=bool)
                for j in range(k):
                    clash |= (out[:, k] == out[:, j]).all(-1)
                if not clash.any():
                    break
                out[clash, k] = one_path(int(clash.sum()))
    return out


def _call_sampler(sampler: Callable[..., Any], target: np.ndarray, draft: np.ndarray,
                  tokens: np.ndarray, rng: np.random.Generator, batched: bool,
                  depth: int) -> np.ndarray:
    """Blocks [B, L+1] (padded with -1) from the sampler; ValueError on a malformed answer."""
    count = tokens.shape[0]
    out = np.full((count, depth + 1), -1, dtype=np.int64)
    if batched:
        answer = sampler(target, draft, tokens, rng)
        sequences = list(answer) if not isinstance(answer, np.ndarray) else answer
        if len(sequences) != count:
            raise ValueError(f"sampler returned {len(sequences)} blocks for a batch of {count}")
    else:
        sequences = [sampler(target[b], draft[b], tokens[b], rng) for b in range(count)]
    for b, seq in enumerate(sequences):
        seq = np.asarray(seq, dtype=np.int64).reshape(-1)
        seq = seq[: np.argmax(seq < 0)] if (seq < 0).any() else seq
        if not 1 <= len(seq) <= depth + 1:
            raise ValueError(f"sampler returned a block of {len(seq)} tokens (allowed 1..{depth + 1})")
        out[b, : len(seq)] = seq
    return out


def _pooled_chi_square(counts: np.ndarray, probs: np.ndarray, level: float
                       ) -> tuple[float, float, int, int, float]:
    """(statistic, p-value, df, cells, detectable TV) of Pearson's test of counts against
    probs, cells with expected count < MIN_EXPECTED pooled (then merged with the smallest
    cell while the pool is still under it). Detectable TV: the smallest d such that every
    law at TV >= d from probs on the pooled cells is rejected at `level` with probability
    >= POWER (noncentral chi-square approximation; chi-square divergence >= (2 TV)^2)."""
    from scipy import optimize, stats

    n = counts.sum()
    expected = probs * n
    order = np.argsort(expected)
    small = [i for i in order if expected[i] < MIN_EXPECTED]
    large = [i for i in order if expected[i] >= MIN_EXPECTED]
    groups = [[i] for i in large]
    if small:
        pool = list(small)
        while groups and expected[pool].sum() < MIN_EXPECTED:
            pool += groups.pop(0)
        groups.append(pool)
    obs = np.array([counts[g].sum() for g in groups], dtype=np.float64)
    exp = np.array([expected[g].sum() for g in groups], dtype=np.float64)
    df = len(groups) - 1
    if df < 1:
        return 0.0, 1.0, 0, len(groups), 1.0
    statistic = float(((obs - exp) ** 2 / exp).sum())
    p_value = float(stats.chi2.sf(statistic, df))
    critical = stats.chi2.isf(level, df)

    def shortfall(lam: float) -> float:
        return float(stats.ncx2.sf(critical, df, lam)) - POWER

    lam = optimize.brentq(shortfall, 1e-9, 1e7)
    return statistic, p_value, df, len(groups), float(min(1.0, np.sqrt(lam / (4 * n))))


def audit_sampler_instance(sampler: Callable[..., Any], instance: Instance, paths: int,
                           runs: int = SAMPLER_RUNS, seed: int = 0, batched: bool = True,
                           level: float = SAMPLER_ALPHA, draft_sampling: str = "iid",
                           batch_size: int = 4096) -> dict[str, Any]:
    """Run a sampler `runs` times on one instance and test it (see audit_sampler)."""
    import time

    from scipy import stats

    from ..lp import optimum as lp_optimum
    from ..verifiers.exact import draft_tree
    from ..verifiers.tree import depth_offset

    start = time.perf_counter()
    model = instance.model(exact=False)
    vocab, depth = model.vocab_size, model.depth
    rng = np.random.default_rng(seed)
    tokens = draw_drafts(model, paths, runs, rng, draft_sampling)
    blocks = np.empty((runs, depth + 1), dtype=np.int64)
    for lo in range(0, runs, batch_size):
        part = tokens[lo : lo + batch_size]
        tree = draft_tree(model, part)
        target = tree.target_rows.numpy()
        draft = tree.draft_rows.numpy()
        blocks[lo : lo + len(part)] = _call_sampler(sampler, target, draft, part, rng, batched, depth)
    lengths = (blocks >= 0).sum(-1)
    # a block must be a drafted prefix (of some path) plus one token of the vocabulary
    in_range = ((blocks < vocab) | (blocks < 0)).all(-1)
    position = np.arange(depth)[None, None, :]
    prefix_ok = np.zeros(runs, dtype=bool)
    for k in range(paths):
        equal = ((blocks[:, None, :depth] == tokens[:, k : k + 1, :])
                 | (position >= lengths[:, None, None] - 1))
        prefix_ok |= equal.all(-1)[:, 0]
    malformed = ~(in_range & prefix_ok)
    # law of the first two tokens, continued by target sampling
    first = blocks[:, 0].clip(0, vocab - 1)
    second = blocks[:, 1].copy()
    short = lengths < 2
    if short.any():
        rows = np.asarray(model.target, dtype=np.float64)[depth_offset(vocab, 1) + first[short]]
        second[short] = _draw_tokens(rows, rng)
    cells = first * vocab + second.clip(0, vocab - 1)
    counts = np.bincount(cells[~malformed], minlength=vocab * vocab).astype(np.float64)
    exact_model = instance.model(exact=instance.rational)
    two = exact_model.target_path_probabilities(2)  # p(a) p(b|a), [V^2]
    probs = np.asarray([float(x) for x in two], dtype=np.float64)
    impossible = int(counts[probs == 0].sum())
    statistic, p_value, df, pooled, detectable = _pooled_chi_square(counts, probs, level)
    if impossible:
        p_value = 0.0
    n = counts.sum()
    tv = float(0.5 * np.abs(counts / max(n, 1) - probs).sum())
    delta = 1 - CONFIDENCE
    cell_count = vocab * vocab
    margin = 0.5 * float(np.sqrt(2 * (np.log(2.0**cell_count - 2) + np.log(1 / delta)) / max(n, 1)))
    be = float(lengths.mean())
    z = float(stats.norm.isf(delta / 2))
    be_margin = z * float(lengths.std(ddof=1)) / np.sqrt(runs) if runs > 1 else float("inf")
    record = lp_optimum(instance, paths=paths, draft_sampling=draft_sampling)
    optimum = record.value
    tolerance = tolerances.optimum_tolerance(record.certified)
    return {
        "instance": instance.name,
        "runs": runs,
        "malformed": int(malformed.sum()),
        "example_malformed": (None if not malformed.any() else
                              {"paths": tokens[malformed][0].tolist(),
                               "block": blocks[malformed][0].tolist()}),
        "p_value": p_value,
        "chi_square": statistic,
        "df": df,
        "pooled_cells": pooled,
        "impossible_outcomes": impossible,
        "detectable_tv": detectable,
        "tv": tv,
        "tv_ci": [max(0.0, tv - margin), min(1.0, tv + margin)],
        "block_efficiency": be,
        "block_efficiency_ci": [be - be_margin, be + be_margin],
        "optimum": optimum,
        "optimum_exact": record.exact,
        "optimum_certified": bool(record.certified),
        "above_optimum": bool(be - be_margin > optimum + tolerance),
        "seconds": round(time.perf_counter() - start, 3),
    }


def audit_sampler(sampler: Callable[..., Any], paths: int = 2, vocab: int = 3, depth: int = 2,
                  trials: int = 3, ties: bool = False, runs: int = SAMPLER_RUNS, seed: int = 0,
                  batched: bool = True, alpha: float = SAMPLER_ALPHA, draft_sampling: str = "iid",
                  instances: list[Instance] | None = None, name: str = "sampler",
                  progress: Callable[[Iterable[int]], Iterable[int]] | None = None
                  ) -> dict[str, Any]:
    """Audit foreign sampler code for losslessness and for an impossible block efficiency.

    On each of `trials` instances (audit_instance(vocab, depth, trial, ties, seed), or the
    given `instances`), K draft paths are drawn `runs` times from the draft rows and the
    sampler is called (in batches unless batched=False). The first two tokens of each
    emitted block (continued by target sampling when the block has one token) are tested
    against the exact target law p(a) p(b|a) by Pearson's chi-square test (cells pooled to
    expected counts >= 5; an outcome of target probability 0 gives p = 0). The audit
    fails when
      * some p-value is below alpha / (number of instances) (Bonferroni), or
      * some block is malformed (not a drafted prefix plus one token), or
      * the 95% interval of the block efficiency lies above the certified K-path optimum
        (impossible for a lossless verifier).
    Reported per instance: p-value, the TV detectable with probability POWER at that
    level (a power statement), the empirical TV of the two-token law with a finite-sample
    95% interval (Bretagnolle-Huber-Carol: P(||p_hat - p||_1 >= e) <= (2^m - 2) exp(-n e^2/2)),
    the block efficiency with a 95% normal-approximation interval, and the certified
    optimum (speclp.lp.optimum, column generation, certified).

    Returns {"sampler", "paths", "vocab", "depth", "trials", "ties", "runs", "seed",
    "draft_sampling", "alpha", "threshold", "power", "instances" (per-instance records),
    "min_p_value", "failures", "worst_instance" (Instance JSON of the instance with the
    smallest p-value, or the first failing one), "passed"}.
    Raises ValueError for bad sizes or a malformed sampler answer.
    """
    for field_name, value, low in (("paths", paths, 1), ("vocab", vocab, 2), ("depth", depth, 1),
                                   ("trials", trials, 1), ("runs", runs, 2)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{field_name}: must be an integer >= {low}, got {value!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha!r}")
    if draft_sampling not in DRAFT_SAMPLING:
        raise ValueError(f"draft_sampling: must be one of {DRAFT_SAMPLING}, got {draft_sampling!r}")
    chosen = instances if instances is not None else [audit_instance(vocab, depth, t, ties, seed)
                                                      for t in range(trials)]
    threshold = alpha / len(chosen)
    iterator: Iterable[int] = range(len(chosen))
    if progress is not None:
        iterator = progress(iterator)
    reports, failures = [], []
    worst, worst_p = None, 2.0
    for index in iterator:
        instance = chosen[index]
        report = audit_sampler_instance(sampler, instance, paths, runs, seed=seed + index,
                                        batched=batched, level=threshold,
                                        draft_sampling=draft_sampling)
        reports.append(report)
        failed = False
        if report["p_value"] < threshold:
            failures.append(f"{instance.name}: first-two-token law differs from the target law "
                            f"(p = {report['p_value']:.3g} < {threshold:.3g}, empirical TV "
                            f"{report['tv']:.4f})")
            failed = True
        if report["malformed"]:
            failures.append(f"{instance.name}: {report['malformed']} blocks are not a drafted prefix "
                            f"plus one token, e.g. {report['example_malformed']}")
            failed = True
        if report["above_optimum"]:
            failures.append(f"{instance.name}: block efficiency {report['block_efficiency']:.4f} "
                            f"(95% CI {report['block_efficiency_ci'][0]:.4f}..) lies above the "
                            f"{'certified' if report['optimum_certified'] else 'NOT certified'} "
                            f"{paths}-path optimum {report['optimum']:.6f}: impossible for a "
                            "lossless verifier")
            failed = True
        key = -1.0 if failed else report["p_value"]
        if key < worst_p:
            worst, worst_p = instance, key
    return {
        "sampler": name,
        "paths": paths, "vocab": vocab, "depth": depth, "trials": len(chosen), "ties": ties,
        "runs": runs, "seed": seed, "draft_sampling": draft_sampling, "batched": batched,
        "alpha": alpha, "threshold": threshold, "power": POWER,
        "instances": reports,
        "min_p_value": min(r["p_value"] for r in reports),
        "max_detectable_tv": max(r["detectable_tv"] for r in reports),
        "failures": failures,
        "worst_instance": worst.to_json() if worst is not None else None,
        "passed": not failures,
    }
