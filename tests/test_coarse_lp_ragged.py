"""The realgap bracket on a RAGGED kept tree (docs/theory.md 13.7, Lemmas 13.9-13.10).

Independent values: the padded computation of the same kept tree (the coarse instance in the
complete (W + 1)-ary layout, whose verifier laws come from verifiers.exact on every node, and
the padded prefix / tail sums of lp.coarsen), in exact rationals; the fine optimum of a
small instance certified by column generation.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.experiments.realgap import (
    bracket_bounds,
    lower_verifiers,
    tree_kept_lower_bounds,
)
from speclp.lp import optimum
from speclp.lp.coarse_lp import ragged_coarse, ragged_coarse_tree
from speclp.lp.coarsen import (
    coarse_nodes,
    coarsened_instance,
    depth_caps,
    kept_lower_values,
    kept_masses,
    kept_tree,
    kept_tree_from_padded,
    mass_kept_edges,
    padded_edges,
    prefix_upper_bound,
    tail_bound,
    tree_lower_values,
    tree_masses,
    tree_prefix_upper_bound,
    tree_tail_bound,
)
from speclp.lp.instance import dirichlet_instance
from speclp.rationals import parse_fraction
from speclp.verifiers.ragged import ragged_model, ragged_node_mass, ragged_work

RAGGED = ["bv", "token", "gbv", "gbv_clipped", "nodeopt", "specinfer", "rrsw", "naive_tree",
          "spectr", "nss", "khisti"]



def padded_kept_lower_bounds(te: np.ndarray, de: np.ndarray, width: int, depth: int,
                             paths: int) -> dict[str, float]:
    """token-kept / nss-kept by their formulas on the complete W-ary layout (docs/theory.md
    13.4): the reference the ragged sums are checked against (float64)."""
    count = (width**depth - 1) // (width - 1) if width > 1 else depth
    first_leaf = (width ** (depth - 1) - 1) // (width - 1) if width > 1 else depth - 1
    reach = np.zeros(count)
    reach[0] = 1.0
    token = 1.0
    for n in range(count):
        step = reach[n] * np.minimum(te[n], de[n])
        token += float(step.sum())
        if n < first_leaf:
            reach[width * n + 1 : width * n + 1 + width] = step
    f = np.zeros((count, paths + 1))
    for n in range(count - 1, -1, -1):
        below = (f[width * n + 1 : width * n + 1 + width] if n < first_leaf
                 else np.zeros((width, paths + 1)))
        for m in range(1, paths + 1):
            j = np.arange(1, m + 1)
            binom = (np.array([comb(m, int(i)) for i in j])[None]
                     * de[n][:, None] ** j[None] * (1 - de[n][:, None]) ** (m - j)[None])
            f[n, m] = float((te[n] * (binom * (1 + below[:, 1 : m + 1])).sum(1)).sum())
    return {"token-kept": token, "nss-kept": 1.0 + f[0, paths]}

def random_nodes(draw_int, depth: int, width: int, exact: bool, rng=None) -> list[dict]:
    """A ragged kept tree: every node keeps 0..width tokens; its kept edges and the rest are
    small non-negative integers over their sum (zeros and ties are frequent)."""
    nodes: list[dict] = []
    level = [(None, 0)]
    for d in range(depth):
        nxt = []
        for parent, slot in level:
            k = draw_int(0, width)
            rows = []
            for _ in range(2):
                weights = [draw_int(0, 3) for _ in range(k + 1)]
                if sum(weights) == 0:
                    weights[-1] = 1
                total = sum(weights)
                row = [Fraction(w, total) for w in weights[:k]]
                rows.append(row if exact else [float(x) for x in row])
            overlap = Fraction(draw_int(0, 4), 4)
            nodes.append({"parent": parent, "slot": slot, "tokens": list(range(k)), "p": rows[0],
                          "q": rows[1], "overlap": overlap if exact else float(overlap)})
            here = len(nodes) - 1
            if d + 1 < depth:
                nxt += [(here, j) for j in range(k)]
        level = nxt
    return nodes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), depth=st.integers(1, 3), width=st.integers(1, 3), paths=st.integers(1, 2))
def test_ragged_laws_and_sums_equal_the_padded_ones_exactly(data, depth, width, paths):
    draw_int = lambda lo, hi: data.draw(st.integers(lo, hi))  # noqa: E731
    nodes = random_nodes(draw_int, depth, width, exact=True)
    tree = kept_tree(nodes, depth)
    te, de, _, w, overlap = padded_edges(nodes, depth)
    assert w == tree.width
    # the prefix and tail sums
    masses = kept_masses(te, de, w, depth)
    for skip in (0, 1):
        assert tree_tail_bound(tree, paths, skip) == tail_bound(te, de, w, depth, paths, skip, masses)
    assert tree_prefix_upper_bound(tree, paths) == prefix_upper_bound(te, de, w, depth, paths, masses)
    # the ragged LP trees
    for below in ("again", "terminal"):
        mine, theirs = ragged_coarse_tree(tree, below), ragged_coarse(te, de, w, depth, below)
        assert mine.leaf_q == theirs.leaf_q and mine.edge_p == theirs.edge_p
        assert (mine.parent == theirs.parent).all()
    # every ragged law, credited with and without the exit credit, against the padded laws
    coarse = coarsened_instance(te, de, w, depth)
    names = data.draw(st.lists(st.sampled_from(RAGGED), min_size=1, max_size=3, unique=True))
    padded = kept_lower_values(coarse, w, paths, names, overlap=overlap)
    ragged = tree_lower_values(tree, paths, names)
    assert ragged["values"] == padded["values"] and not ragged["unsupported"]
    plain = kept_lower_values(coarse, w, paths, names)
    assert tree_lower_values(tree, paths, names, exit_credit=False)["values"] == plain["values"]
    # the token-kept / nss-kept formulas (float64 both)
    mine = tree_kept_lower_bounds(tree, [paths])[str(paths)]["values"]
    theirs = padded_kept_lower_bounds(te.astype(np.float64), de.astype(np.float64), w, depth, paths)
    for name in mine:
        assert mine[name] == pytest.approx(theirs[name], abs=1e-12)


def test_float_rows_of_the_ragged_model_are_the_padded_instance_rows_bitwise():
    rng = np.random.default_rng(3)
    draw_int = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    nodes = random_nodes(draw_int, 3, 3, exact=False)
    for node in nodes:  # irrational-looking floats: rounding matters
        node["p"] = [x * 0.999 for x in node["p"]]
        node["q"] = [x * (1 - 1e-7) for x in node["q"]]
    tree = kept_tree(nodes, 3)
    te, de, _, w, overlap = padded_edges(nodes, 3)
    model = coarsened_instance(te, de, w, 3).model()
    laws = coarse_nodes(tree)
    # the padded index of every ragged node, from its tokens
    index = np.zeros(len(laws.model), dtype=np.int64)
    for n in range(1, len(laws.model)):
        index[n] = (w + 1) * index[laws.model.parent[n]] + 1 + laws.model.token[n]
    assert np.array_equal(laws.model.target, model.target[index])
    levels = laws.model.level < 3
    assert np.array_equal(laws.model.draft[levels], model.draft[index[levels]])
    positive = model.node_probabilities("draft") > 0
    assert sorted(index.tolist()) == sorted(set(np.nonzero(positive)[0].tolist()) | {0})
    padded = kept_lower_values(coarsened_instance(te, de, w, 3), w, 2, RAGGED, overlap=overlap)
    ragged = tree_lower_values(tree, 2, RAGGED, coarse=laws)
    for name in RAGGED:
        assert float(ragged["values"][name]) == pytest.approx(float(padded["values"][name]),
                                                              abs=1e-12)


@pytest.mark.parametrize("paths, seed", [(1, 60), (2, 61), (3, 62)])
def test_bracket_on_a_tree_alone_contains_the_fine_optimum(paths, seed):
    """bracket_bounds given only the ragged tree (no padded rows: every law ragged) against
    the padded-row call and the fine optimum (colgen, certified, V = 4, L = 3)."""
    inst = dirichlet_instance(4, 3, alpha=0.5, seed=seed, denominator=64)
    opt = optimum(inst, paths, method="colgen")
    assert opt.certified
    names = ["bv", "gbv", "nodeopt", "nss"]
    for cap, epsilon in ((1, 0.05), (2, 0.01)):
        te, de, _, width, overlap = mass_kept_edges(inst, cap, epsilon, paths)
        tree = kept_tree_from_padded(te, de, width, 3, overlap)
        alone = bracket_bounds(None, None, width, 3, [paths], names, tree=tree)
        arrays = bracket_bounds(te, de, width, 3, [paths], names, overlap=overlap)
        up, low = alone["bounds"][str(paths)], alone["lower"][str(paths)]
        assert parse_fraction(low["exact"]) <= opt.exact_value <= parse_fraction(up["exact"])
        assert low["exact"] == arrays["lower"][str(paths)]["exact"] and low["exit_credit"]
        assert up["candidates"] == arrays["bounds"][str(paths)]["candidates"]


def test_verifiers_without_a_ragged_law_fall_back_or_are_skipped():
    inst = dirichlet_instance(3, 2, alpha=0.5, seed=4, denominator=32)
    te, de, _, width, overlap = mass_kept_edges(inst, 2, 0.01, 2)
    tree = kept_tree_from_padded(te, de, width, 2, overlap)
    assert tree_lower_values(tree, 2, ["traversal", "bv"])["unsupported"] == ["traversal"]
    found = bracket_bounds(None, None, width, 2, [2], ["traversal", "bv"], tree=tree)
    padded = kept_lower_values(coarsened_instance(te, de, width, 2), width, 2, ["traversal"],
                               overlap=overlap)
    assert found["lower"]["2"]["values"]["traversal-kept"] == float(padded["values"]["traversal"])
    assert ragged_work(coarse_nodes(tree).model, "traversal", 2) is None
    with pytest.raises(ValueError, match="verifier"):
        ragged_node_mass(coarse_nodes(tree).model, "traversal", 2)
    small = tree_lower_values(tree, 2, ["specinfer", "bv"], max_size=1)
    assert small["skipped"] == ["specinfer", "bv"] and small["values"] == {}


def test_ragged_model_and_kept_tree_refuse_bad_input():
    rows = np.array([[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="^parent"):
        ragged_model([-1, 1], [-1, 0], rows, rows, 1)
    with pytest.raises(ValueError, match="^token"):
        ragged_model([-1, 0], [-1, 0], rows, np.array([[0.0, 1.0], [0.5, 0.5]]), 1)
    with pytest.raises(ValueError, match="^depth"):
        ragged_model([-1, 0], [-1, 1], rows, rows, 0)
    with pytest.raises(ValueError, match="^rows"):
        ragged_model([-1, 0], [-1, 1], rows, rows[:1], 1)
    node = {"parent": None, "slot": 0, "tokens": [0], "p": [0.5], "q": [0.5]}
    with pytest.raises(ValueError, match="^nodes"):
        kept_tree([{**node, "parent": 0}], 2)
    with pytest.raises(ValueError, match=r"^nodes\[1\]"):
        kept_tree([node, {**node, "parent": 0, "slot": 3}], 2)
    with pytest.raises(ValueError, match=r"^nodes\[0\]"):
        kept_tree([{**node, "p": []}], 2)


def test_kept_tree_fills_unlisted_children_and_masses():
    """A node of depth < L - 1 whose kept token has no listed child keeps nothing there."""
    root = {"parent": None, "slot": 0, "tokens": [7, 9], "p": [Fraction(1, 2), Fraction(1, 4)],
            "q": [Fraction(1, 3), Fraction(1, 3)]}
    child = {"parent": 0, "slot": 1, "tokens": [3], "p": [Fraction(1, 5)], "q": [Fraction(1, 2)]}
    tree = kept_tree([root, child], 3)
    # slot 0 of the root, and slot 0 of node 1 (depth 1 < L - 1), keep nothing
    assert len(tree) == 4 and tree.child[0] == [2, 1] and tree.child[1] == [3]
    assert tree.p[2] == tree.p[3] == [] and tree.width == 2 and tree.overlap is None
    p, q = tree_masses(tree)
    assert p == [1, Fraction(1, 4), Fraction(1, 2), Fraction(1, 20)]
    assert q == [1, Fraction(1, 3), Fraction(1, 3), Fraction(1, 6)]
    # by hand: prefix head 1 + min(1/2, 1/3) + min(1/4, 1/3) + min(1/20, 1/6) at K = 1
    head = 1 + Fraction(1, 3) + Fraction(1, 4) + Fraction(1, 20)
    tail = (3 * min(Fraction(1, 4), Fraction(1, 3)) + 2 * min(Fraction(1, 4) * Fraction(4, 5),
            Fraction(1, 3) * Fraction(1, 2)) + 2 * min(Fraction(1, 2), Fraction(1, 3))
            + 1 * min(Fraction(1, 20), Fraction(1, 6)))
    assert tree_tail_bound(tree, 1) == tail
    assert tree_prefix_upper_bound(tree, 1) == head + tail


def test_depth_caps_without_the_padded_bound():
    assert depth_caps(8, 4, None) == [64, 32, 16, 8]
    assert depth_caps(8, 4) == [13, 13, 13, 8]  # (13 + 1)^4 <= 40,000 < 15^4


def test_lower_verifiers_with_ragged_laws_cover_the_recorded_best():
    """The verifiers that gave the recorded lower bounds (nodeopt, gbv, bv) have ragged laws."""
    names = lower_verifiers(None)
    assert {"nodeopt", "gbv", "bv"} <= set(names) and {"nodeopt", "gbv", "bv"} <= set(RAGGED)
