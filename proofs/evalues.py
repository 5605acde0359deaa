"""Anytime-valid tests of the sampler audit (docs/theory.md section 15.5): e-processes.

An e-process E_n >= 0 for a null H0 has E[E_tau] <= 1 at every stopping time tau under H0,
so by Ville's inequality P(sup_n E_n >= 1/a) <= a: an audit may look after every batch, stop
on clear evidence, or run until a time or sample budget is spent, and the level a still holds.

Law test (H0: the outcome cells are i.i.d. with the exact law pi).
    For one partition of the outcomes into cells g and a concentration c, the Bayes mixture of
    the multinomial likelihood ratios under the prior Dirichlet(c pi_g) is

        E_{c} = Gamma(c) / Gamma(c + n) * prod_g Gamma(c pi_g + n_g) / (Gamma(c pi_g) pi_g^n_g),

    a nonnegative martingale with mean 1 under H0 (a mixture of likelihood ratios of i.i.d.
    laws). It depends on the counts only, so it is evaluated in closed form after each batch.
    Cells are never required to have large expected counts: validity holds for any partition
    fixed before sampling (the prior is centred on pi, so sparse cells keep their null
    probability until data say otherwise). The audit averages E over several partitions (the
    laws of the first d tokens, d = 1..L+1, of the block continued by target sampling) and
    concentrations c (a grid from 10 to 10^6): an average of e-processes is one. An outcome of
    probability 0 under H0 gives E = infinity.

Efficiency test (H0: E[tau + 1] <= m0, the certified K-path optimum plus its tolerance).
    For bets 0 <= lambda <= 1 / (2 (m0 - 1)), prod_i (1 + lambda (x_i - m0)) is a nonnegative
    supermartingale under H0 (x_i >= 1 keeps every factor >= 1/2). The audit averages a grid of
    constant bets; the product depends only on how often each block length occurred.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, logsumexp

CONCENTRATIONS = tuple(10.0**k for k in range(1, 7))  # c of the Dirichlet mixtures
BET_GRID = tuple(2.0**-k for k in range(0, 10))  # fractions of the largest bet


def law_components(probs: np.ndarray, vocab: int, depth: int) -> list[tuple[int, np.ndarray]]:
    """The partitions of the law test: for d = 1..depth, the law of the first d tokens of a
    path of `depth` tokens (probs [V^depth], shortlex) as (d, pi_d [V^d])."""
    return [(d, probs.reshape(vocab**d, -1).sum(1)) for d in range(1, depth + 1)]


def log_law_evalue(counts: np.ndarray, probs: np.ndarray, vocab: int, depth: int,
                   concentrations: tuple[float, ...] = CONCENTRATIONS) -> float:
    """log of the averaged mixture e-value of the full-path counts [V^depth] against probs.

    +inf when a cell of probability 0 has a count (an impossible outcome)."""
    return float(log_law_evalues(np.asarray(counts)[None], probs, vocab, depth, concentrations)[0])


def log_law_evalues(counts: np.ndarray, probs: np.ndarray, vocab: int, depth: int,
                    concentrations: tuple[float, ...] = CONCENTRATIONS) -> np.ndarray:
    """log_law_evalue of every row of counts [S, V^depth] (vectorised over S)."""
    counts = np.asarray(counts, dtype=np.float64)
    logs = []
    for d, pi in law_components(probs, vocab, depth):
        n_d = counts.reshape(len(counts), vocab**d, -1).sum(2)
        keep = pi > 0
        pi, n_d = pi[keep], n_d[:, keep]
        n = n_d.sum(1)
        base = -(n_d * np.log(pi)).sum(1)
        for c in concentrations:
            logs.append(gammaln(c) - gammaln(c + n)
                        + (gammaln(c * pi + n_d) - gammaln(c * pi)).sum(1) + base)
    out = logsumexp(np.stack(logs), axis=0) - np.log(len(logs))
    impossible = (counts[:, probs <= 0] > 0).any(1)
    return np.where(impossible, np.inf, out)


def law_component_logs(counts: np.ndarray, probs: np.ndarray, vocab: int, depth: int,
                       concentrations: tuple[float, ...] = CONCENTRATIONS) -> np.ndarray:
    """[depth] the log mixture e-value of each partition of the law test alone (the law of the
    first d tokens, d = 1..depth; averaged over the concentrations): a diagnostic naming the
    first position whose law is off, not a test of its own (the test averages all of them)."""
    counts = np.asarray(counts, dtype=np.float64)
    out = np.zeros(depth)
    for index, (d, pi) in enumerate(law_components(probs, vocab, depth)):
        n_d = counts.reshape(vocab**d, -1).sum(1)
        if (n_d[pi <= 0] > 0).any():
            out[index] = np.inf
            continue
        keep = pi > 0
        pi, n_d = pi[keep], n_d[keep]
        n = n_d.sum()
        base = -(n_d * np.log(pi)).sum()
        logs = [gammaln(c) - gammaln(c + n) + (gammaln(c * pi + n_d) - gammaln(c * pi)).sum()
                + base for c in concentrations]
        out[index] = logsumexp(logs) - np.log(len(logs))
    return out


def log_efficiency_evalue(length_counts: np.ndarray, bound: float) -> float:
    """log of the averaged betting e-value against H0: E[block length] <= bound, from the
    counts of block lengths 1..len(length_counts)."""
    lengths = np.arange(1, len(length_counts) + 1, dtype=np.float64)
    counts = np.asarray(length_counts, dtype=np.float64)
    largest = 0.5 / max(bound - 1.0, 1e-12)
    logs = [float((counts * np.log1p(largest * f * (lengths - bound))).sum()) for f in BET_GRID]
    return float(logsumexp(logs) - np.log(len(logs)))


def least_favourable_split(probs: np.ndarray) -> np.ndarray:
    """Signs +1 / -1 splitting the cells of positive probability into two halves of nearly
    equal mass (greedy, largest first); 0 for cells of probability 0."""
    signs = np.zeros(len(probs))
    mass = [0.0, 0.0]
    for i in np.argsort(-probs, kind="stable"):
        if probs[i] <= 0:
            continue
        side = 0 if mass[0] <= mass[1] else 1
        signs[i] = 1.0 if side == 0 else -1.0
        mass[side] += probs[i]
    return signs


def shifted_law(probs: np.ndarray, tv: float, signs: np.ndarray) -> np.ndarray:
    """probs moved by total variation `tv` in proportion to probs within each half: the
    deviation of smallest chi-square divergence (2 tv)^2 that a TV of tv allows."""
    up, down = probs * (signs > 0), probs * (signs < 0)
    return probs + tv * (up / up.sum() - down / down.sum())


def detectable_tv(probs: np.ndarray, vocab: int, depth: int, runs: int, log_threshold: float,
                  power: float = 0.9, simulations: int = 200, seed: int = 0) -> float:
    """The smallest TV d (bisection, 12 steps) at which the law test, run on `runs` outcomes,
    rejects the shifted law (shifted_law: a deviation spread over every cell in proportion to
    its probability) with probability >= power; simulated with `simulations` multinomial
    draws per step. 1.0 when even the largest such shift is not detected."""
    signs = least_favourable_split(probs)
    if not (signs > 0).any() or not (signs < 0).any() or runs < 1:
        return 1.0
    top = min(float(probs[signs > 0].sum()), float(probs[signs < 0].sum()))
    rng = np.random.default_rng(seed)

    def rate(d: float) -> float:
        law = np.clip(shifted_law(probs, d, signs), 0, None)
        draws = rng.multinomial(runs, law / law.sum(), size=simulations)
        return float(np.mean(log_law_evalues(draws, probs, vocab, depth) >= log_threshold))

    if rate(top) < power:
        return 1.0
    low, high = 0.0, top
    for _ in range(12):
        mid = 0.5 * (low + high)
        if rate(mid) >= power:
            high = mid
        else:
            low = mid
    return float(high)
