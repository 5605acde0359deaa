"""Coarsened instances bound the fine K-path optimum from above (the L = 1 closed form = LP
is tests/test_closed_form.py).

Fine optima come from the enumerated full LP (certified in exact rationals), coarse optima
from column generation (certified): two different solvers. Instances are rational, so
every comparison is exact.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp import optimum
from speclp.lp.coarsen import coarsen_instance, coarsened_rows
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.tree import all_paths


def fine_optimum(instance, paths: int) -> Fraction:
    record = optimum(instance, paths, method="full")  # the enumerated LP, certified
    assert record.certified, record.certificate
    return record.exact_value


def coarse_optimum(instance, paths: int) -> Fraction:
    record = optimum(instance, paths, method="colgen")  # column generation, certified
    assert record.certified, record.certificate
    return record.exact_value


def image(path: tuple[int, ...], kept: dict[tuple[int, ...], list[int]], width: int) -> tuple:
    """phi: kept slots while the prefix is kept; the first other token and all after it -> R."""
    out: list[int] = []
    lumped = False
    for i, token in enumerate(path):
        slots = None if lumped else kept.get(tuple(path[:i]))
        if slots is not None and token in slots:
            out.append(slots.index(token))
        else:
            out.append(width)
            lumped = True
    return tuple(out)


def push_forward(fine_prob, vocab: int, depth: int, kept, width: int) -> dict[tuple, Fraction]:
    out: dict[tuple, Fraction] = {}
    for path, prob in zip(all_paths(vocab, depth), fine_prob, strict=True):
        key = image(tuple(int(t) for t in path), kept, width)
        out[key] = out.get(key, Fraction(0)) + prob
    return out


@pytest.mark.parametrize("vocab, depth, width", [(3, 2, 1), (3, 2, 2), (4, 2, 2), (3, 3, 2)])
def test_coarse_rows_are_the_push_forward_of_the_fine_rows(vocab, depth, width):
    inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=vocab + depth, denominator=30)
    coarse, tokens = coarsen_instance(inst, width)
    assert coarse.rational and coarse.vocab_size == width + 1
    # kept tokens per fine kept prefix, from the returned table (shortlex over slots)
    kept: dict[tuple[int, ...], list[int]] = {}
    index = 0
    level = [()]
    for _ in range(depth):
        nxt = []
        for prefix in level:
            kept[prefix] = [int(t) for t in tokens[index]]
            index += 1
            nxt += [prefix + (t,) for t in kept[prefix]]
        level = nxt
    fine, rough = inst.model(exact=True), coarse.model(exact=True)
    # paths of length L under both models (the bonus rows at depth L are not constrained)
    for fine_prob, coarse_prob in (
        (fine.draft_path_probabilities(depth), rough.draft_path_probabilities(depth)),
        (fine.target_path_probabilities(depth), rough.target_path_probabilities(depth)),
    ):
        push = push_forward(fine_prob, vocab, depth, kept, width)
        for path, prob in zip(all_paths(width + 1, depth), coarse_prob, strict=True):
            assert push.get(tuple(int(t) for t in path), Fraction(0)) == prob


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("paths", [1, 2, 3])
def test_coarse_optimum_bounds_the_fine_optimum_and_is_tight_without_lumping(seed, paths):
    inst = dirichlet_instance(3, 2, alpha=0.7, seed=seed, denominator=24)
    fine = fine_optimum(inst, paths)
    values = []
    for width in (1, 2, 3):
        coarse, _ = coarsen_instance(inst, width)
        value = coarse_optimum(coarse, paths)
        assert value >= fine
        values.append(value)
    assert values[-1] == fine  # M = V: nothing lumped, the remainder has probability 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vocab=st.integers(2, 3), depth=st.integers(1, 2), width=st.integers(1, 3),
       paths=st.integers(1, 3), seed=st.integers(0, 10_000),
       select=st.sampled_from(["mix", "target", "draft"]))
def test_coarse_upper_bound_property(vocab, depth, width, paths, seed, select):
    width = min(width, vocab)
    inst = dirichlet_instance(vocab, depth, alpha=0.6, seed=seed, denominator=20)
    coarse, _ = coarsen_instance(inst, width, select=select)
    assert coarse_optimum(coarse, paths) >= fine_optimum(inst, paths)


def test_coarsened_rows_check_shapes_and_float_rows_sum_to_one():
    rng = np.random.default_rng(0)
    kept_t = rng.dirichlet(np.ones(5), size=1 + 3)[:, :3]  # M = 3 of 5 tokens, L = 2
    kept_d = rng.dirichlet(np.ones(5), size=1 + 3)[:, :3]
    rows_t, rows_d = coarsened_rows(kept_t, kept_d, 3, 2)
    assert rows_t.shape == (1 + 4 + 16, 4)
    assert np.allclose(rows_t.sum(1), 1, atol=1e-12) and np.allclose(rows_d.sum(1), 1, atol=1e-12)
    with pytest.raises(ValueError, match="target_kept"):
        coarsened_rows(kept_t[:2], kept_d, 3, 2)



def test_terminal_rows_refuse_everything_below_r():
    from speclp.lp.coarsen import kept_lower_values
    from speclp.verifiers.tree import node_index

    inst = dirichlet_instance(3, 2, alpha=0.7, seed=1, denominator=16)
    again, _ = coarsen_instance(inst, 1)
    terminal, _ = coarsen_instance(inst, 1, below_r="terminal")
    below = node_index((1,), 2)  # the node R (width 1: slot 1 is R)
    assert list(again.draft_exact[below]) == [Fraction(0), Fraction(1)]
    assert list(terminal.draft_exact[below]) == [Fraction(1), Fraction(0)]
    assert list(terminal.target_exact[below]) == list(again.target_exact[below])
    # the kept rows themselves are the same in both
    assert list(terminal.draft_exact[0]) == list(again.draft_exact[0])
    with pytest.raises(ValueError, match="below_r"):
        coarsen_instance(inst, 1, below_r="nowhere")
    found = kept_lower_values(again, 1, 2, ["bv", "specinfer"], max_size=0)
    assert found == {"values": {}, "skipped": ["bv", "specinfer"]}
