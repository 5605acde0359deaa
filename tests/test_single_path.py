"""Exact laws of token-level verification and BV: anchors, losslessness, sampling."""

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from speclp.lp.instance import bv_toy, dirichlet_instance, ties_instance
from speclp.verifiers.exact import configurations, draft_tree, exact_result
from speclp.verifiers.law import sample_block
from speclp.verifiers.registry import block_law, verifier_names


@pytest.mark.parametrize("depth,bv,token", [
    (2, Fraction(11, 9), Fraction(10, 9)),
    (3, Fraction(5, 3), Fraction(38, 27)),
    (4, Fraction(166, 81), Fraction(130, 81)),
])
def test_toy_anchors_exact(depth, bv, token):
    """THEORY.md section 2: expected accepted tokens on the toy instance."""
    model = bv_toy(depth).model(exact=True)
    assert exact_result(model, "bv").block_efficiency - 1 == bv
    assert exact_result(model, "token").block_efficiency - 1 == token
    assert exact_result(model, "bv").total_variation == 0
    floats = bv_toy(depth).model()
    assert abs(float(exact_result(floats, "bv").block_efficiency) - float(bv + 1)) < 1e-12


@settings(max_examples=25, deadline=None)
@given(vocab=st.integers(2, 4), depth=st.integers(1, 3), seed=st.integers(0, 10**6),
       alpha=st.sampled_from([0.1, 0.5, 1.0, 3.0]))
def test_lossless_float64(vocab, depth, seed, alpha):
    inst = dirichlet_instance(vocab, depth, alpha=alpha, seed=seed)
    for name in ("bv", "token"):
        result = exact_result(inst.model(), name)
        assert result.total_variation <= 1e-12
        total = result.emit.sum()
        assert abs(total - 1) <= 1e-12


@settings(max_examples=10, deadline=None)
@given(vocab=st.integers(2, 3), depth=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_lossless_exact_and_bv_beats_token(vocab, depth, seed):
    for inst in (dirichlet_instance(vocab, depth, seed=seed, denominator=10),
                 ties_instance(vocab, depth, seed=seed)):
        model = inst.model(exact=True)
        bv = exact_result(model, "bv")
        token = exact_result(model, "token")
        assert bv.total_variation == 0 and token.total_variation == 0
        assert bv.block_efficiency >= token.block_efficiency


def test_broken_bv_is_caught():
    """Stopping at the first failed test (instead of the largest passing index) is lossy."""
    assert "bv_first_failure" not in verifier_names()
    result = exact_result(bv_toy(3).model(exact=True), "bv_first_failure")
    assert result.total_variation > Fraction(1, 10)


def literal_bv_sample(tokens, p_rows, q_rows, rng):
    """BV exactly as written in THEORY.md section 2, by sampling (independent of the law code)."""
    depth = len(tokens)
    w = [1.0]
    for i in range(depth):
        w.append(min(1.0, w[-1] * p_rows[i][tokens[i]] / q_rows[i][tokens[i]]))
    h = [None]
    for i in range(1, depth):
        z = np.maximum(w[i] * p_rows[i] - q_rows[i], 0).sum()
        h.append(z / (z + 1 - w[i]) if z + 1 - w[i] > 0 else 0.0)
    h.append(w[depth])
    eta = rng.random(depth + 1)
    passing = [i for i in range(1, depth + 1) if eta[i] <= h[i]]
    tau = max(passing) if passing else 0
    if tau == depth:
        row = p_rows[depth]
    else:
        row = np.maximum(w[tau] * p_rows[tau] - q_rows[tau], 0)
        row = row / row.sum()
    return tau, rng.choice(len(row), p=row)


def test_law_matches_literal_algorithm_and_sampler():
    """Chi-square: the law vs. the literal algorithm and vs. sample_block (fixed seeds)."""
    from scipy.stats import chisquare

    inst = dirichlet_instance(3, 3, alpha=1.0, seed=7)
    model = inst.model()
    tokens = np.array([[[1, 2, 0]]])
    tree = draft_tree(model, tokens)
    law = block_law("bv", tree)
    joint = law.joint()[0, 0].numpy()  # [L+1, V]
    n = 40_000
    rng = np.random.default_rng(0)
    p_rows = tree.target_rows[0, 0].numpy()
    q_rows = tree.draft_rows[0, 0].numpy()
    counts = np.zeros_like(joint)
    for _ in range(n):
        tau, y = literal_bv_sample(tokens[0, 0], p_rows, q_rows, rng)
        counts[tau, y] += 1
    mask = joint.reshape(-1) > 0
    assert counts.reshape(-1)[~mask].sum() == 0
    stat = chisquare(counts.reshape(-1)[mask], joint.reshape(-1)[mask] * n)
    assert stat.pvalue > 1e-4
    gen = torch.Generator().manual_seed(0)
    batch = law.__class__(law.stop.expand(n, -1, -1), law.correction.expand(n, -1, -1, -1))
    _, accepted, token = sample_block(batch, gen)
    counts2 = np.zeros_like(joint)
    np.add.at(counts2, (accepted.numpy(), token.numpy()), 1)
    stat2 = chisquare(counts2.reshape(-1)[mask], joint.reshape(-1)[mask] * n)
    assert stat2.pvalue > 1e-4


def test_float32_matches_float64():
    inst = dirichlet_instance(4, 3, alpha=0.7, seed=2)
    configs = configurations(inst.model(), 1)
    law64 = block_law("bv", draft_tree(inst.model(), configs.tokens))
    law32 = block_law("bv", draft_tree(inst.model(), configs.tokens, dtype=torch.float32))
    assert torch.allclose(law64.joint(), law32.joint().double(), atol=1e-5)
