"""extended_bv_structured's per-node aggregation (issue 30) against the implementation it
replaced, kept here verbatim as the oracle (per_path_structured: one fallback step per
(path below u, depth, m)), exactly in rationals; the claim it rests on (BV's residual at a
node reads the prefix from the fresh start only) checked on bv_path_law itself; chunking;
and the work bound counted against the rule rows actually evaluated."""

from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers import bv_extended, ops
from speclp.verifiers.bv_extended import (
    EMPTY_SAFE,
    _as_numpy,
    _as_rows,
    _ordered_tuples,
    _step,
    _subtree_nodes,
    _zeros,
    extended_bv_structured,
    fallback_rule,
    fresh_start_work,
)
from speclp.verifiers.single_path import bv_path_law
from speclp.verifiers.tree import TreeModel, all_paths, depth_offset, num_nodes
from strategies import rational_instance

FALLBACKS = ["optimal", "specinfer", "rrsw", "khisti"]


# --- the oracle: the code before issue 30, verbatim ---------------------------------------

def per_path_structured(model: TreeModel, paths: int, fallback: str = "optimal",
                           below: Any = "extended") -> np.ndarray:
    """The implementation before issue 30 (one fallback step per path and m), verbatim."""
    rule = fallback_rule(fallback)
    vocab, depth = model.vocab_size, model.depth
    nodes_total = num_nodes(vocab, depth)
    emit = _zeros(model, (nodes_total, vocab))
    fresh = _zeros(model, (nodes_total, paths + 1))  # P(fresh start at u with m paths)
    fresh[0, paths] = fresh[0, paths] + 1
    one = model.target[0, 0] * 0 + 1
    for d in range(depth + 1):
        start, width = depth_offset(vocab, d), vocab**d
        if d == depth:  # the bonus token at a leaf
            leaves = slice(start, start + width)
            emit[leaves] = emit[leaves] + fresh[leaves].sum(axis=1)[:, None] * model.target[leaves]
            break
        if d > 0 and below != "extended":
            for u, m in zip(*np.nonzero(fresh[start:start + width] != 0), strict=True):
                sub = _subtree_nodes(vocab, depth, start + u, d)
                submodel = TreeModel(model.target[sub], model.draft[sub], depth - d)
                law = below(submodel, int(m))
                emit[sub] = emit[sub] + fresh[start + u, m] * law
            continue
        suffixes = all_paths(vocab, depth - d)  # [P, L-d] every path below a depth-d node
        codes = [np.zeros(len(suffixes), dtype=np.int64)]
        for i in range(depth - d):
            codes.append(codes[-1] * vocab + suffixes[:, i])
        for m in range(1, paths + 1):
            active = np.nonzero(fresh[start:start + width, m] != 0)[0]
            if len(active) == 0:
                continue
            # absolute node of u y[:i] for every (active u, path y below), [A, P, L-d+1]
            nodes = np.stack([depth_offset(vocab, d + i) + active[:, None] * vocab**i
                              + codes[i][None, :] for i in range(depth - d + 1)], -1)
            nodes = nodes.reshape(-1, depth - d + 1)
            tokens = np.broadcast_to(suffixes[None], (len(active), *suffixes.shape)).reshape(
                -1, depth - d)
            # q(y[:i] | u), i = 0..L-d
            reach = [np.full(len(nodes), one, dtype=object) if model.exact
                     else np.ones(len(nodes))]
            for i in range(depth - d):
                reach.append(reach[-1] * model.draft[nodes[:, i], tokens[:, i]])
            keep = np.nonzero(reach[-1] != 0)[0]
            nodes, tokens = nodes[keep], tokens[keep]
            reach = [r[keep] for r in reach]
            mass = np.repeat(fresh[start + active, m], len(suffixes))[keep]  # [P']
            index = tokens if model.exact else ops.host_index(tokens)
            path_stop, path_rows = bv_path_law(index, _as_rows(model, model.target[nodes]),
                                               _as_rows(model, model.draft[nodes[:, :-1]]))
            weight = mass[:, None] * _as_numpy(path_stop) * reach[-1][:, None]  # [P', L-d+1]
            path_rows = _as_numpy(path_rows)
            leaf = nodes[:, -1]
            np.add.at(emit, leaf, weight[:, -1, None] * model.target[leaf])
            for i in range(depth - d):
                v = nodes[:, i]
                f = weight[:, i]
                residual = path_rows[:, i]
                _per_path_fallback(model, rule, fallback, v, d + i, f, residual, reach[i], m - 1, emit,
                                   fresh, one)
    return emit


def _per_path_fallback(model: TreeModel, rule: Any, fallback: str, v: np.ndarray, depth_v: int,
                       f: np.ndarray,
              residual: np.ndarray, q_v: np.ndarray, others: int, emit: np.ndarray,
              fresh: np.ndarray, one: Any) -> None:
    """The step at fallback nodes v [S] (mass f, target residual [S, V]); the n other paths
    through v are Binomial(others, q(v|u)), their children i.i.d. q(.|v)."""
    vocab = model.vocab_size
    live = np.nonzero(f != 0)[0]
    v, f, residual, q_v = v[live], f[live], residual[live], q_v[live]
    if len(v) == 0:
        return
    for n in range(others + 1):
        chance = comb(others, n) * one * q_v**n * (one - q_v) ** (others - n)  # [S]
        if n == 0:
            np.add.at(emit, v, (f * chance)[:, None] * residual)
            continue
        tuples, first, count = _ordered_tuples(vocab, n)
        q = model.draft[v][:, tuples]  # [S, T, n]
        prob = q[..., 0]
        for i in range(1, n):
            prob = prob * q[..., i]
        weight = (f * chance)[:, None] * prob  # [S, T]
        slot, which = np.nonzero(weight != 0)
        if len(slot) == 0:
            continue
        children = tuples[which]
        through = np.ones(children.shape, dtype=bool)
        firsts = first[which]
        res = _as_rows(model, residual[slot])
        drafts = _as_rows(model, model.draft[v[slot]])
        children_t = children
        if not model.exact:
            through, children_t, firsts = (ops.host_index(through), ops.host_index(children),
                                           ops.host_index(firsts))
        accept, correction = _step(rule, res, drafts, through, children_t, firsts,
                                   fallback in EMPTY_SAFE)
        accept, correction = _as_numpy(accept), _as_numpy(correction)
        w = weight[slot, which]
        np.add.at(emit, v[slot], (w * (1 - accept.sum(axis=1)))[:, None] * correction)
        code = v[slot] - depth_offset(vocab, depth_v)
        child = depth_offset(vocab, depth_v + 1) + code[:, None] * vocab + children  # [S', n]
        np.add.at(fresh, (child.reshape(-1), count[which].reshape(-1)),
                  (w[:, None] * accept).reshape(-1))



# --- the aggregated law equals the oracle exactly ----------------------------------------

@st.composite
def cases(draw: Any) -> tuple[Any, int, str]:
    vocab = draw(st.integers(2, 3))
    depth = draw(st.integers(1, 3 if vocab == 2 else 2))
    paths = draw(st.integers(1, 4 if vocab == 2 else 3))
    return rational_instance(draw, vocab, depth), paths, draw(st.sampled_from(FALLBACKS))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_aggregated_equals_per_path_oracle_exactly(case):
    instance, paths, fallback = case
    model = instance.model(exact=True)
    new = extended_bv_structured(model, paths, fallback)
    assert new.dtype == object and all(isinstance(x, Fraction) for x in new.ravel())
    assert (new == per_path_structured(model, paths, fallback)).all()
    assert new.sum() == 1


@pytest.mark.parametrize("vocab,depth,paths,fallback", [(2, 3, 4, "optimal"), (3, 3, 3, "specinfer"),
                                                        (4, 2, 3, "optimal"), (3, 2, 4, "rrsw")])
def test_aggregated_equals_oracle_on_dirichlet_rationals(vocab, depth, paths, fallback):
    model = dirichlet_instance(vocab, depth, 0.5, seed=vocab + 10 * depth + 100 * paths).model(exact=True)
    new = extended_bv_structured(model, paths, fallback)
    assert (new == per_path_structured(model, paths, fallback)).all()
    assert new.sum() == 1


@pytest.mark.parametrize("fallback", ["optimal", "specinfer"])
def test_aggregated_float_equals_oracle_float_and_rationals(fallback):
    instance = dirichlet_instance(3, 3, 0.4, seed=7)
    floats = extended_bv_structured(instance.model(exact=False), 4, fallback)
    assert floats.dtype == np.float64
    oracle = per_path_structured(instance.model(exact=False), 4, fallback)
    assert np.abs(floats - oracle).max() < 1e-14
    exact = extended_bv_structured(instance.model(exact=True), 4, fallback)
    assert np.abs(floats - exact.astype(float)).max() < 1e-14


def _count_rule_rows(monkeypatch) -> list[int]:
    """Record the (node, ordered tuple) rows of every fallback rule call, through either
    evaluation (the grouped optimal step or the generic _step)."""
    calls: list[int] = []
    step, grouped = bv_extended._step, bv_extended._optimal_step_grouped
    monkeypatch.setattr(bv_extended, "_step", lambda *a: calls.append(len(a[1])) or step(*a))
    monkeypatch.setattr(bv_extended, "_optimal_step_grouped",
                        lambda *a: calls.append(len(a[2])) or grouped(*a))
    return calls


@pytest.mark.parametrize("fallback", ["optimal", "specinfer"])
def test_chunks_of_one_node_give_the_same_law(monkeypatch, fallback):
    model = dirichlet_instance(3, 2, 0.3, seed=3).model(exact=True)
    whole = extended_bv_structured(model, 4, fallback)
    monkeypatch.setattr(bv_extended, "CHUNK_ELEMENTS", 1)  # one node per rule call
    calls = _count_rule_rows(monkeypatch)
    assert (extended_bv_structured(model, 4, fallback) == whole).all()
    assert calls and max(calls) <= 3**3  # one node's ordered 3-tuples at most


# --- the claim: BV's residual at v reads the prefix u..v only ---------------------------

def _residual_from_prefix(model: TreeModel, nodes: list[int], tokens: list[int]) -> list[Fraction]:
    """(w_i p - q)_+ / Z at the last node of `nodes`, w from the prefix: w_0 = 1,
    w_j = min(1, w_(j-1) p(y_j) / q(y_j)), written out in Fractions."""
    w = Fraction(1)
    for node, token in zip(nodes[:-1], tokens, strict=True):
        w = min(Fraction(1), w * model.target[node, token] / model.draft[node, token])
    raw = [max(w * a - b, Fraction(0)) for a, b in zip(model.target[nodes[-1]], model.draft[nodes[-1]],
                                                       strict=True)]
    z = sum(raw)
    return [x / z for x in raw] if z else raw


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), vocab=st.integers(2, 3), depth=st.integers(1, 3))
def test_bv_residual_at_a_node_is_a_function_of_the_prefix(data, vocab, depth):
    """bv_path_law's residual row at depth i equals, on every path y below u through v =
    u y[:i], the closed form from the prefix alone (positive draft along it: the paths the
    structured law keeps)."""
    model = rational_instance(data.draw, vocab, depth).model(exact=True)
    d = data.draw(st.integers(0, depth - 1))
    u = depth_offset(vocab, d) + data.draw(st.integers(0, vocab**d - 1))
    suffixes = all_paths(vocab, depth - d)
    code = u - depth_offset(vocab, d)
    nodes = np.array([[depth_offset(vocab, d + i) + code * vocab**i
                       + sum(int(y[j]) * vocab ** (i - 1 - j) for j in range(i))
                       for i in range(depth - d + 1)] for y in suffixes])
    positive = np.array([all(model.draft[nodes[p, i], suffixes[p, i]] != 0 for i in range(depth - d))
                         for p in range(len(suffixes))])
    if not positive.any():
        return
    nodes, suffixes = nodes[positive], suffixes[positive]
    _, rows = bv_path_law(suffixes, model.target[nodes], model.draft[nodes[:, :-1]])
    for p in range(len(suffixes)):
        for i in range(depth - d):
            expected = _residual_from_prefix(model, list(nodes[p, :i + 1]), list(suffixes[p, :i]))
            assert list(rows[p, i]) == expected


# --- the work bound -----------------------------------------------------------------------

def test_fresh_start_work_closed_form_and_counted_rule_rows(monkeypatch):
    """The bound against its formula summed by hand, and the rule rows actually evaluated on
    an all-positive instance: at least the root's fresh start (every node of depth < L with
    every ordered n-tuple, 1 <= n < K), at most the bound less BV's rows."""
    # (2, 2, 3): BV rows 4 (3 + 2 + 1) = 24; nodes below depth d: 3, 2, 0; tuples 1 + 2 + 4 = 7
    assert fresh_start_work(2, 2, 3) == 24 + (3 + 2) * 7
    # (8, 4, 4): BV rows 4096 * 15; nodes 585 + 584 + 576 + 512; tuples 1 + 8 + 64 + 512
    assert fresh_start_work(8, 4, 4) == 4096 * 15 + (585 + 584 + 576 + 512) * 585
    vocab, depth, paths = 3, 3, 3
    model = dirichlet_instance(vocab, depth, 1.0, seed=5).model(exact=False)
    assert (model.draft > 0).all()
    rows = _count_rule_rows(monkeypatch)
    extended_bv_structured(model, paths, "optimal")
    root = num_nodes(vocab, depth - 1) * (vocab + vocab**2)
    bv_rows = sum(vocab**depth * (depth - d + 1) for d in range(depth + 1))
    assert root <= sum(rows) <= fresh_start_work(vocab, depth, paths) - bv_rows
    assert fresh_start_work(8, 4, 4) < 5e7 and fresh_start_work(16, 2, 4) < 5e7


def test_torch_float_rows_take_the_generic_step_and_agree():
    """Within ops.torch_float64() the rows are torch tensors: the optimal step runs as
    optimal_step_rule on expanded rows, and gives the numpy grouped law to rounding."""
    pytest.importorskip("torch")
    model = dirichlet_instance(3, 2, 0.5, seed=9).model(exact=False)
    numpy_law = extended_bv_structured(model, 4, "optimal")
    with ops.torch_float64():
        torch_law = extended_bv_structured(model, 4, "optimal")
    assert np.abs(numpy_law - torch_law).max() < 1e-14
