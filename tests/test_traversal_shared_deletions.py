"""sibling_recursion (traversal's exact law) with the parent's deletions shared across the
child groups that delete the same siblings first (issue 30), against the implementation it
replaced, kept here verbatim as the oracle: exactly in rationals (hypothesis, ties, zeros),
to rounding in float64; and the lexsort merge of (key, weight) pairs against np.unique."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp.instance import dirichlet_instance, ties_instance
from speclp.verifiers.multipath import traversal_child_weight, traversal_delete
from speclp.verifiers.structure import (
    _distinct_pairs,
    _Level,
    _sibling_groups,
    _zeros,
    sibling_evaluations_bound,
    sibling_recursion,
)
from speclp.verifiers.tree import TreeModel, depth_offset, num_nodes
from strategies import rational_instance

# --- the oracle: the code before issue 30, verbatim ---------------------------------------

def per_pair_sibling_recursion(model: TreeModel, paths: int, child_weight: Callable[..., Any],
                      delete: Callable[..., Any]) -> tuple[np.ndarray, int]:
    """sibling_recursion before issue 30 (the deletions per (key, child group) pair), verbatim."""
    vocab, depth = model.vocab_size, model.depth
    target = model.target if model.exact else np.asarray(model.target, dtype=np.float64)
    draft = model.draft if model.exact else np.asarray(model.draft, dtype=np.float64)
    one = target[0, 0] * 0 + 1
    levels = [_Level({}, [], [], [])]
    levels[0].key(0, paths, one)
    blocks: list[list[tuple[np.ndarray, ...]]] = []
    evaluations = 0
    for d in range(depth):
        level, nxt = levels[d], _Level({}, [], [], [])
        levels.append(nxt)
        blocks.append([])
        counts_of = np.asarray(level.paths)
        for m in range(1, paths + 1):
            ids = np.nonzero(counts_of == m)[0]
            if len(ids) == 0:
                continue
            sequence, counts, multiplicity = _sibling_groups(vocab, m)
            nodes = np.asarray(level.node)[ids]
            q = draft[nodes]  # [A, V]
            prob = multiplicity[None, :] * one
            for i in range(m):
                prob = prob * np.power(q[:, sequence[:, i]], counts[:, i][None, :])
            a_idx, g_idx = np.nonzero(prob != 0)
            evaluations += len(a_idx)
            weight = np.array([level.weight[k] for k in ids[a_idx]],
                              dtype=object if model.exact else np.float64)
            node = nodes[a_idx]
            p_row, q_row = target[node], draft[node]
            rows = np.arange(len(a_idx))
            child = np.full((len(a_idx), m), -1, dtype=np.int64)
            code = node - depth_offset(vocab, d)
            for i in range(m):
                active = counts[g_idx, i] > 0
                token = sequence[g_idx, i]
                entry = child_weight(weight, p_row[rows, token], q_row[rows, token])
                child_node = depth_offset(vocab, d + 1) + code * vocab + token
                size = counts[g_idx, i]
                live = np.nonzero(active)[0]
                if model.exact:
                    entry_list = entry.tolist()
                    for r in live.tolist():
                        child[r, i] = nxt.key(int(child_node[r]), int(size[r]), entry_list[r])
                elif len(live):  # float64: merge equal (node, m, w) rows first, vectorised
                    triples = np.stack([child_node[live].astype(np.float64),
                                        size[live].astype(np.float64),
                                        np.asarray(entry, dtype=np.float64)[live]], 1)
                    distinct, inverse = np.unique(triples, axis=0, return_inverse=True)
                    found = np.array([nxt.key(int(n), int(m), float(w)) for n, m, w in
                                      distinct.tolist()], dtype=np.int64)
                    child[live, i] = found[inverse.reshape(-1)]
                w_new, p_new, q_new = delete(weight, p_row, q_row,
                                             token[:, None] == np.arange(vocab)[None, :])
                weight = np.where(active, w_new, weight)
                p_row = np.where(active[:, None], p_new, p_row)
                q_row = np.where(active[:, None], q_new, q_row)
            accept = weight if d > 0 else weight * 0 + one  # the root is accepted w.p. 1
            blocks[d].append((ids[a_idx], prob[a_idx, g_idx], child, accept, p_row, node))
    # R bottom-up
    leaves = levels[depth]
    reject = [None] * (depth + 1)
    reject[depth] = one - np.array(leaves.weight, dtype=object if model.exact else np.float64)
    for d in range(depth - 1, -1, -1):
        out = _zeros(model, (len(levels[d].node),))
        for key, prob, child, accept, _, _ in blocks[d]:
            term = prob * (one - accept)
            for i in range(child.shape[1]):
                term = term * np.where(child[:, i] >= 0, reject[d + 1][child[:, i]], one)
            np.add.at(out, key, term)
        reject[d] = out
    # mass top-down, emit
    emit = _zeros(model, (num_nodes(vocab, depth), vocab))
    mass = _zeros(model, (1,))
    mass[0] = mass[0] + one
    for d in range(depth):
        nxt_mass = _zeros(model, (len(levels[d + 1].node),))
        for key, prob, child, accept, p_row, node in blocks[d]:
            reach = mass[key] * prob
            for i in range(child.shape[1]):
                active = child[:, i] >= 0
                np.add.at(nxt_mass, child[active, i], reach[active])
                reach = reach * np.where(active, reject[d + 1][child[:, i]], one)
            np.add.at(emit, node, (reach * accept)[:, None] * p_row)
        mass = nxt_mass
    leaf_nodes = np.asarray(leaves.node, dtype=np.int64)
    leaf_weight = np.array(leaves.weight, dtype=object if model.exact else np.float64)
    np.add.at(emit, leaf_nodes, (mass * leaf_weight)[:, None] * target[leaf_nodes])
    return emit, evaluations



def _both(model, paths):
    new, count = sibling_recursion(model, paths, traversal_child_weight, traversal_delete)
    old, old_count = per_pair_sibling_recursion(model, paths, traversal_child_weight,
                                                traversal_delete)
    assert count == old_count  # the same (key, group) pairs are evaluated
    return new, old


@st.composite
def cases(draw: Any) -> tuple[Any, int]:
    vocab = draw(st.integers(2, 4))
    depth = draw(st.integers(1, 3 if vocab < 4 else 2))
    paths = draw(st.integers(1, 4 if vocab < 4 else 3))
    return rational_instance(draw, vocab, depth), paths


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_shared_deletions_equal_the_per_pair_oracle_exactly(case):
    instance, paths = case
    new, old = _both(instance.model(exact=True), paths)
    assert new.dtype == object and (new == old).all()
    assert new.sum() == 1


@pytest.mark.parametrize("instance,paths", [(dirichlet_instance(4, 3, 0.3, seed=2), 4),
                                            (ties_instance(3, 3), 4),
                                            (dirichlet_instance(5, 2, 1.0, seed=8), 4)])
def test_shared_deletions_on_dirichlet_and_ties(instance, paths):
    new, old = _both(instance.model(exact=True), paths)
    assert (new == old).all()
    floats, old_floats = _both(instance.model(exact=False), paths)
    assert np.abs(floats - old_floats).max() < 1e-14
    assert np.abs(floats - new.astype(float)).max() < 1e-13


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.integers(0, 5), min_size=1, max_size=40), data=st.data())
def test_distinct_pairs_agrees_with_unique(keys, data):
    values = np.array(data.draw(st.lists(st.sampled_from([0.0, -0.0, 0.5, 1.0, 1 / 3]),
                                         min_size=len(keys), max_size=len(keys))))
    keys = np.array(keys, dtype=np.int64)
    first, inverse = _distinct_pairs(keys, values)
    pairs = list(zip(keys.tolist(), values.tolist(), strict=True))
    assert len(first) == len(set(pairs))  # -0.0 == 0.0, as dict keys
    assert len(set(inverse.tolist())) == len(first)
    for r, g in enumerate(inverse.tolist()):
        assert keys[first[g]] == keys[r] and values[first[g]] == values[r]


def _keys_without_merging(vocab: int, depth: int, paths: int) -> int:
    """The (key, group) pairs of the recursion with a key per history instead of per weight:
    a child key is (its parent key, the siblings deleted before it, its token, its n paths),
    the groups read off _sibling_groups' enumeration of V^m ordered tuples."""
    keys = {((), paths)}
    pairs = 0
    for _ in range(depth):
        nxt = set()
        for history, m in keys:
            sequence, counts, _ = _sibling_groups(vocab, m)
            pairs += len(sequence)
            for g in range(len(sequence)):
                for i in range(int((counts[g] > 0).sum())):
                    n = int(counts[g, i])
                    nxt.add((history + ((tuple(sequence[g, :i].tolist()), int(sequence[g, i]), n),), n))
        keys = nxt
    return pairs


@pytest.mark.parametrize("vocab,depth,paths", [(2, 1, 2), (2, 2, 1), (2, 3, 3), (3, 3, 3),
                                               (4, 2, 4), (3, 2, 4), (5, 2, 3)])
def test_sibling_bound_counts_the_keys_without_weight_merging(vocab, depth, paths):
    assert sibling_evaluations_bound(vocab, depth, paths) == _keys_without_merging(vocab, depth, paths)


@pytest.mark.parametrize("vocab,depth,paths,seed", [(3, 3, 3, 0), (4, 2, 4, 1), (2, 4, 4, 2)])
def test_evaluations_within_the_bound_on_generic_rows(vocab, depth, paths, seed):
    """Positive irrational-ish float rows (alpha 5: ratios near 1, few weights clipped to 1,
    so few merges): the pairs evaluated stay within the bound."""
    model = dirichlet_instance(vocab, depth, 5.0, seed=seed).model(exact=False)
    _, count = sibling_recursion(model, paths, traversal_child_weight, traversal_delete)
    assert count <= sibling_evaluations_bound(vocab, depth, paths)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), rows=st.integers(1, 6), vocab=st.integers(2, 5))
def test_float_delete_equals_the_generic_delete(data, rows, vocab):
    """traversal_delete's numpy float64 path against the generic formula (ops.safe_div),
    on rows with zeros and ties, weights 0..1 (w = 1 and w p = q give mass 0 rows)."""
    from speclp.verifiers import ops

    def row():
        w = data.draw(st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(any))
        return np.array(w, dtype=np.float64) / sum(w)

    p_row, q_row = np.stack([row() for _ in range(rows)]), np.stack([row() for _ in range(rows)])
    weight = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=rows,
                                         max_size=rows)))
    token = np.array(data.draw(st.lists(st.integers(0, vocab - 1), min_size=rows, max_size=rows)))
    deleted = token[:, None] == np.arange(vocab)[None, :]
    raw = ops.positive_part(weight[:, None] * p_row - q_row)
    mass = ops.total(raw, -1)
    removed = ops.where(deleted, 0, q_row)
    expected = (ops.safe_div(mass, mass + 1 - weight), ops.safe_div(raw, mass[:, None]),
                ops.safe_div(removed, ops.total(removed, -1, keepdim=True)))
    for got, want in zip(traversal_delete(weight, p_row, q_row, deleted), expected, strict=True):
        assert got.dtype == np.float64 and (got == want).all()
