"""One-pass grid laws (verifiers.grid, issue 33 part 1): every (K', L') cell from one pass per
K' equals the per-cell law on the cut tree (registry.block_law on decode.scoring.cut_tree):
exactly on rational rows, to 1e-12 on float64 rows. Trees are drawn by hypothesis with small
vocabularies, rows of small integer weights (zeros and ties in both rows, equal p and q rows),
drafted tokens only where q > 0 and repeated paths; rows are a function of the prefix, as in
every drafted tree."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from speclp.decode.scoring import cut_tree, score_cells, score_grid
from speclp.verifiers.grid import bv_prefix_accepted, grid_values
from speclp.verifiers.law import DraftTree
from speclp.verifiers.registry import block_law
from speclp.verifiers.single_path import bv_path_law

GRID_VERIFIERS = ("token", "bv", "gbv", "gbv_clipped", "nodeopt", "spectr", "specinfer", "rrsw",
                  "naive_tree", "nss", "khisti", "bv_extended", "bv_extended_rrs")


@st.composite
def trees(draw, max_vocab: int = 4, max_paths: int = 3, max_depth: int = 3):
    """(tokens [B, K, L] int64, target [B, K, L+1, V], draft [B, K, L, V] rational rows)."""
    vocab = draw(st.integers(2, max_vocab))
    paths = draw(st.integers(1, max_paths))
    depth = draw(st.integers(1, max_depth))
    batch = draw(st.integers(1, 2))
    weights = st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(any)
    rows: dict[tuple, list[Fraction]] = {}

    def row(key: tuple) -> list[Fraction]:
        if key not in rows:
            if key[0] == "q" and draw(st.booleans()) and ("p", *key[1:]) in rows:
                rows[key] = rows[("p", *key[1:])]  # q = p at this node
            else:
                w = draw(weights)
                rows[key] = [Fraction(x, sum(w)) for x in w]
        return rows[key]

    tokens = np.zeros((batch, paths, depth), dtype=np.int64)
    target = np.empty((batch, paths, depth + 1, vocab), dtype=object)
    draft = np.empty((batch, paths, depth, vocab), dtype=object)
    for b in range(batch):
        for k in range(paths):
            if k and draw(st.booleans()):  # repeat an earlier path (shared nodes down to a leaf)
                copy = draw(st.integers(0, k - 1))
                tokens[b, k], target[b, k], draft[b, k] = tokens[b, copy], target[b, copy], draft[b, copy]
                continue
            prefix: tuple = (b,)
            for i in range(depth + 1):
                target[b, k, i] = row(("p", *prefix))
                if i == depth:
                    break
                q = row(("q", *prefix))
                draft[b, k, i] = q
                token = draw(st.sampled_from([t for t in range(vocab) if q[t] > 0]))
                tokens[b, k, i] = token
                prefix = (*prefix, token)
    return tokens, target, draft


def _floats(tokens, target, draft) -> DraftTree:
    as_float = np.vectorize(float, otypes=[np.float64])
    return DraftTree(torch.as_tensor(tokens), torch.as_tensor(as_float(target)),
                     torch.as_tensor(as_float(draft)))


@settings(max_examples=30, deadline=None)
@given(trees())
def test_grid_equals_the_per_cell_laws_in_float64(drawn):
    tree = _floats(*drawn)
    cells = score_cells(tree.paths, tree.depth)
    for name in GRID_VERIFIERS:
        grid = grid_values(name, tree, cells)
        assert grid is not None and set(grid) == set(cells), name
        for cell in cells:
            expected = block_law(name, cut_tree(tree, *cell)).block_efficiency()
            assert torch.allclose(grid[cell], expected, rtol=0, atol=1e-12), (name, cell)


@settings(max_examples=20, deadline=None)
@given(trees(max_vocab=3, max_paths=3, max_depth=3))
def test_grid_equals_the_per_cell_laws_exactly_on_rational_rows(drawn):
    tree = DraftTree(*drawn)
    cells = score_cells(tree.paths, tree.depth)
    for name in GRID_VERIFIERS:
        grid = grid_values(name, tree, cells)
        for cell in cells:
            expected = block_law(name, cut_tree(tree, *cell)).block_efficiency()
            got = grid[cell]
            assert all(isinstance(v, (Fraction, int)) for v in got), name  # exact, never float
            assert list(got) == list(expected), (name, cell)


def test_bv_prefix_equals_bv_on_every_cut_path_with_ties_and_zeros():
    """BV's E[tau] on each prefix of one path equals bv_path_law on the path cut there; the
    path has a zero draft entry off the path, a tie p = q and a weight that saturates."""
    third, half = Fraction(1, 3), Fraction(1, 2)
    target = np.array([[[half, half, 0], [third, third, third], [1, 0, 0], [0, half, half]]],
                      dtype=object)  # [1, L+1 = 4, V = 3]
    draft = np.array([[[half, 0, half], [third, third, third], [half, half, 0]]], dtype=object)
    tokens = np.array([[0, 1, 0]])
    accepted = bv_prefix_accepted(tokens, target, draft)
    for length in range(1, 4):
        stop, _ = bv_path_law(tokens[:, :length], target[:, : length + 1], draft[:, :length])
        assert accepted[length][0] == sum(i * stop[0, i] for i in range(length + 1))
    # by hand at L' = 1: w_1 = min(1, (1/2) / (1/2)) = 1, so tau = 1 surely
    assert accepted[1][0] == 1


def test_score_grid_one_pass_equals_cell_by_cell_and_falls_back_without_a_grid_law():
    """score_grid(one_pass=True) equals one_pass=False at every cell, also for a verifier with
    no grid law (traversal: evaluated per cell) and in float32 rows to float32 rounding."""
    generator = torch.Generator().manual_seed(3)
    batch, paths, depth, vocab = 2, 3, 3, 7
    rows: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
    tokens = torch.zeros(batch, paths, depth, dtype=torch.long)
    target = torch.zeros(batch, paths, depth + 1, vocab, dtype=torch.float64)
    draft = torch.zeros(batch, paths, depth, vocab, dtype=torch.float64)
    for b in range(batch):
        for k in range(paths):
            prefix: tuple = (b,)
            for i in range(depth + 1):
                if prefix not in rows:
                    rows[prefix] = (torch.softmax(torch.randn(vocab, generator=generator,
                                                              dtype=torch.float64), -1),
                                    torch.softmax(torch.randn(vocab, generator=generator,
                                                              dtype=torch.float64), -1))
                p, q = rows[prefix]
                target[b, k, i] = p
                if i == depth:
                    break
                draft[b, k, i] = q
                tokens[b, k, i] = torch.multinomial(q, 1, generator=generator)[0]
                prefix = (*prefix, int(tokens[b, k, i]))
    names = ("bv", "gbv", "nodeopt", "spectr", "specinfer", "traversal")
    cells = score_cells(paths, depth)
    assert grid_values("traversal", DraftTree(tokens, target, draft), cells) is None
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 2e-5)):
        one = score_grid(names, tokens, target, draft, cells, dtype=dtype, one_pass=True)
        each = score_grid(names, tokens, target, draft, cells, dtype=dtype, one_pass=False)
        for cell in cells:
            for name in names:
                assert torch.allclose(one[cell][name], each[cell][name], rtol=0, atol=tolerance), (
                    dtype, name, cell)


@pytest.mark.parametrize("name", ["spectr", "nodeopt", "gbv"])
def test_grid_serves_exactly_the_cells_asked(name):
    """One cell asked (K = 2, L = 1): that cell only, equal to the law on the whole tree."""
    tokens = np.array([[[0], [1]]])
    third = Fraction(1, 3)
    target = np.array([[[[third, 2 * third], [Fraction(1, 2)] * 2]] * 2], dtype=object)
    draft = np.array([[[[Fraction(1, 2)] * 2]] * 2], dtype=object)
    tree = DraftTree(tokens, target, draft)
    grid = grid_values(name, tree, [(2, 1)])
    assert set(grid) == {(2, 1)}
    assert list(grid[(2, 1)]) == list(block_law(name, tree).block_efficiency())


def test_a_law_function_with_a_grid_attribute_is_used_and_unknown_names_give_none(monkeypatch):
    """The hook of verifiers.grid: a registered law function's `grid` attribute serves the
    cells; a name that is not registered has no grid law (None)."""
    from speclp.verifiers.law import REGISTRY

    calls = []

    def fake_grid(tree, cells):
        calls.append(cells)
        return {cell: "served" for cell in cells}

    monkeypatch.setattr(REGISTRY["traversal"].law, "grid", fake_grid, raising=False)
    tree = DraftTree(np.array([[[0]]]), np.array([[[[0.5, 0.5], [0.5, 0.5]]]]),
                     np.array([[[[0.5, 0.5]]]]))
    assert grid_values("traversal", tree, [(1, 1)]) == {(1, 1): "served"} and calls == [[(1, 1)]]
    assert grid_values("no_such_verifier", tree, [(1, 1)]) is None
