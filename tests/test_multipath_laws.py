"""Exact laws of the multi-path verifiers: losslessness, anchors, bounds, references.

Expected values come from THEORY.md anchors or from derivations written out here,
never from the program's own output.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy import stats
from speclp.lp.instance import dirichlet_instance, from_rows, ties_instance
from speclp.verifiers.exact import configurations, draft_tree, exact_result
from speclp.verifiers.gbv import gbv_selection
from speclp.verifiers.law import sample_block
from speclp.verifiers.registry import block_law, get_verifier, verifier_names
from speclp.verifiers.tree import all_paths, node_index

MULTIPATH = ["gbv", "gbv_clipped", "specinfer", "rrsw", "naive_tree", "khisti", "spectr", "nss",
             "traversal"]
LOSSLESS = verifier_names()  # every registered lossless verifier (single-path ones too)
TV_TOLERANCE = 1e-12

# sizes (K, V, L) with at most 729 ordered configurations (V^L)^K
GRID = [(k, v, l) for k in (1, 2, 3) for v in (2, 3) for l in (1, 2, 3) if (v**l) ** k <= 729]


def test_registry_has_the_multipath_verifiers():
    names = verifier_names(include_broken=True)
    for name in MULTIPATH + ["gbv_broken"]:
        assert name in names
    assert not get_verifier("gbv_broken").lossless
    assert "gbv_broken" not in LOSSLESS


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_float64_grid(name):
    """TV(continued output, target) <= 1e-12 for Dirichlet and ties instances, K 1..3."""
    for paths, vocab, depth in GRID:
        seed = 100 * paths + 10 * vocab + depth
        for inst in (dirichlet_instance(vocab, depth, alpha=0.5, seed=seed),
                     dirichlet_instance(vocab, depth, alpha=3.0, seed=seed + 1),
                     ties_instance(vocab, depth, seed=seed)):
            result = exact_result(inst.model(), name, paths=paths)
            assert result.total_variation <= TV_TOLERANCE, (name, paths, vocab, depth, inst.name)
            assert abs(float(result.emit.sum()) - 1) <= TV_TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("name", MULTIPATH)
def test_lossless_float64_largest(name):
    """K = 3, V = 3, L = 3: 19,683 ordered configurations."""
    inst = dirichlet_instance(3, 3, alpha=0.7, seed=7)
    assert exact_result(inst.model(), name, paths=3).total_variation <= TV_TOLERANCE


@pytest.mark.parametrize("name", MULTIPATH)
@pytest.mark.parametrize("paths,vocab,depth", [(1, 2, 2), (2, 2, 2), (2, 3, 1), (3, 2, 2),
                                               (2, 2, 3)])
def test_lossless_exact_rationals(name, paths, vocab, depth):
    """Same law code on Fractions: TV exactly 0 and total mass exactly 1."""
    for inst in (ties_instance(vocab, depth, seed=paths + depth),
                 dirichlet_instance(vocab, depth, alpha=1.0, seed=depth, denominator=12)):
        assert inst.rational
        result = exact_result(inst.model(exact=True), name, paths=paths)
        assert result.emit.sum() == 1
        assert result.total_variation == 0, (name, inst.name)


def test_gbv_broken_is_caught_on_ties():
    """Pitfall (a): first-child-wins selection with a token-id CDF is not lossless."""
    worst = max(exact_result(ties_instance(3, 2, seed=s).model(exact=True), "gbv_broken",
                             paths=2).total_variation for s in range(3))
    assert worst > 1e-3


# ---------------------------------------------------------------------------
# K = 1 reductions
# ---------------------------------------------------------------------------

def _laws(inst, names, paths, exact):
    model = inst.model(exact=exact)
    configs = configurations(model, paths)
    tree = draft_tree(model, configs.tokens)
    return [block_law(name, tree) for name in names]


@pytest.mark.parametrize("pair", [("gbv", "bv"), ("gbv_clipped", "bv"), ("traversal", "bv"),
                                  ("specinfer", "token"), ("rrsw", "token"), ("naive_tree", "token"),
                                  ("khisti", "token"),
                                  ("spectr", "token")])
def test_single_path_reductions(pair):
    """With K = 1: GBV and traversal are BV; SpecInfer, RRSw, NaiveTree, Khisti and K-SEQ are
    token level.

    Float64: equal to 1e-15; rationals: exactly equal (rows where stop is 0 may differ).
    """
    for inst in (dirichlet_instance(3, 3, alpha=0.5, seed=3), ties_instance(2, 3, seed=5)):
        a, b = _laws(inst, pair, 1, exact=False)
        assert torch.max(torch.abs(a.stop - b.stop)) <= 1e-15
        assert torch.max(torch.abs(a.joint() - b.joint())) <= 1e-15
        a, b = _laws(inst, pair, 1, exact=True)
        assert (a.stop == b.stop).all()
        assert (a.joint() == b.joint()).all()


# ---------------------------------------------------------------------------
# anchors (THEORY.md section 4) and bounds
# ---------------------------------------------------------------------------

def _anchor_instance():
    """p = (.5, .3, .2), q = (.2, .3, .5) at the root; depth-1 rows arbitrary."""
    p = [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]
    q = [Fraction(1, 5), Fraction(3, 10), Fraction(1, 2)]
    target = np.empty((4, 3), dtype=object)
    draft = np.empty((4, 3), dtype=object)
    target[:] = [p] * 4
    draft[:] = [q] * 4
    return from_rows(target, draft, depth=1, name="anchor")


@pytest.mark.parametrize("name,accepted", [
    ("specinfer", Fraction(76, 100)),  # THEORY anchor (RRS)
    # RRS without replacement: only X1 = 2 is rejected (mass .5 * .6 = .3); the residual
    # is the point mass on 0; a new child exists iff X2 != 2 (.5), then X2 ~ (.4, .6, 0)
    # is accepted iff X2 = 0 (.4): .7 + .3 * .5 * .4 = .76.
    ("rrsw", Fraction(76, 100)),
    # NaiveTree: sum min(p, q) + sum (p - q)_+ (1 - (1 - q)^(K-1)) = .7 + .3 * .2 = .76
    ("naive_tree", Fraction(76, 100)),
    ("traversal", Fraction(76, 100)),  # at L = 1 traversal is RRS without replacement
    # GBV: ratios 2.5 > 1 > .4, law of the max r = (1 - .8^2, .8^2 - .5^2, .5^2)
    # = (.36, .39, .25); BV at L = 1 accepts sum min(p, r) = .36 + .3 + .2 = .86.
    ("gbv", Fraction(86, 100)),
    # NSS: sum p (1 - (1 - q)^2) = .5 * .36 + .3 * .51 + .2 * .75 = .483
    ("nss", Fraction(483, 1000)),
])
def test_single_step_anchors_exact(name, accepted):
    inst = _anchor_instance()
    result = exact_result(inst.model(exact=True), name, paths=2)
    assert result.block_efficiency - 1 == accepted
    assert result.total_variation == 0
    floats = exact_result(inst.model(), name, paths=2)
    assert abs(float(floats.block_efficiency) - 1 - float(accepted)) <= 1e-12


def test_kseq_anchor():
    """THEORY anchor: K-SEQ acceptance 0.7914 (4 decimals), K = 2 i.i.d."""
    inst = _anchor_instance()
    for model in (inst.model(), inst.model(exact=True)):
        result = exact_result(model, "spectr", paths=2)
        assert round(float(result.block_efficiency) - 1, 4) == 0.7914
        assert float(result.total_variation) <= TV_TOLERANCE


def _single_step_optimum(p, q, paths):
    """Hu et al. / Khisti (L = 1): alpha* = 1 - max_B [p(B) - (1 - (1 - q(B))^K)]."""
    vocab = len(p)
    best = 0.0
    for size in range(vocab + 1):
        for subset in itertools.combinations(range(vocab), size):
            p_b, q_b = sum(p[x] for x in subset), sum(q[x] for x in subset)
            best = max(best, p_b - (1 - (1 - q_b) ** paths))
    return 1 - best


def _union_bound(inst, paths):
    """1 + sum over nodes z (depth 1..L) of min(p(z), 1 - (1 - q(z))^K).

    A(z) = P(tau >= |z|, output starts with z) is at most p(z) (target matching) and at
    most P(z is in the drafted tree) = 1 - (1 - q(z))^K.
    """
    model = inst.model()
    bound = 1.0
    for depth in range(1, inst.depth + 1):
        p = model.target_path_probabilities(depth)
        q = model.draft_path_probabilities(depth)
        bound += float(np.minimum(p, 1 - (1 - q) ** paths).sum())
    return bound


@pytest.mark.parametrize("name", MULTIPATH + ["bv", "token"])
def test_block_efficiency_bounds(name):
    for paths, vocab, depth in GRID:
        inst = dirichlet_instance(vocab, depth, alpha=0.5, seed=paths * 7 + vocab + depth)
        be = float(exact_result(inst.model(), name, paths=paths).block_efficiency)
        assert 1 - 1e-12 <= be <= _union_bound(inst, paths) + 1e-12
        if depth == 1:
            p, q = inst.target[0], inst.draft[0]
            assert be <= 1 + _single_step_optimum(p, q, paths) + 1e-12
        if paths == 1:  # BV is optimal among single-path verifiers (THEORY section 3)
            bv = float(exact_result(inst.model(), "bv", paths=1).block_efficiency)
            assert be <= bv + 1e-12


# ---------------------------------------------------------------------------
# independent references for GBV and traversal (pure Python, exact)
# ---------------------------------------------------------------------------

def _row(rows, prefix, vocab):
    return list(rows[node_index(prefix, vocab)])


def _greedy_key(model, prefix, token, clip):
    p = _row(model.target, prefix, model.vocab_size)
    q = _row(model.draft, prefix, model.vocab_size)
    ratio = p[token] / q[token] if q[token] else Fraction(0)
    return (min(ratio, 1) if clip else ratio, token)


def _reference_gbv(model, paths_tokens, clip):
    """Greedy path and r(.|u) along it from the law of the maximum of K i.i.d. paths.

    Every length-L path gets its lexicographic key; F(y) = q-mass of paths <= y and
    r(y) = F(y)^K - F(y^-)^K; r(x|u) = r(prefix u x) / r(prefix u).
    """
    vocab, depth, paths = model.vocab_size, model.depth, len(paths_tokens)
    everything = [tuple(int(t) for t in row) for row in all_paths(vocab, depth)]

    def key(path):
        return tuple(_greedy_key(model, path[:i], path[i], clip) for i in range(depth))

    def q_path(path):
        out = Fraction(1)
        for i in range(depth):
            out *= _row(model.draft, path[:i], vocab)[path[i]]
        return out

    ranked = sorted(everything, key=key)
    law, cumulative = {}, Fraction(0)
    for path in ranked:
        before = cumulative
        cumulative += q_path(path)
        law[path] = cumulative**paths - before**paths
    best = max((tuple(int(t) for t in path) for path in paths_tokens), key=key)
    rows = []
    for i in range(depth):
        mass = sum(v for z, v in law.items() if z[:i] == best[:i])
        rows.append([sum(v for z, v in law.items() if z[: i + 1] == best[:i] + (x,)) / mass
                     for x in range(vocab)])
    return best, rows


@pytest.mark.parametrize("clip", [False, True])
def test_gbv_skewed_rows_match_law_of_the_maximum(clip):
    for seed, (vocab, depth, paths) in enumerate([(2, 2, 2), (3, 2, 3), (2, 3, 3), (3, 1, 2)]):
        inst = ties_instance(vocab, depth, seed=seed) if seed % 2 else \
            dirichlet_instance(vocab, depth, seed=seed, denominator=10)
        model = inst.model(exact=True)
        configs = configurations(model, paths)
        pick = np.random.default_rng(seed).choice(len(configs.probability), size=12)
        tree = draft_tree(model, configs.tokens[pick])
        selected, skewed = gbv_selection(tree, clip=clip)
        for b in range(len(pick)):
            best, rows = _reference_gbv(model, configs.tokens[pick][b], clip)
            assert tuple(int(t) for t in tree.tokens[b, selected[b]]) == best
            assert [list(r) for r in skewed[b]] == rows


def _reference_traversal(model, paths_tokens):
    """Traversal verification on one drafted tree, literally: returns {(node, y): prob}.

    Children in order of first appearance. Repeat: take the first leaf (follow first
    remaining children), recompute every remaining weight top-down from the current rows
    (w(root) and updated weights stay), accept w.p. its weight (the root: 1); on
    rejection delete it and update the parent (residual, weight Z/(Z+1-w), draft row
    without the token).
    """
    vocab = model.vocab_size
    children, p_rows, q_rows = {(): []}, {}, {}
    for path in paths_tokens:
        path = tuple(int(t) for t in path)
        for i in range(len(path)):
            node, child = path[:i], path[: i + 1]
            if child not in children:
                children[child] = []
                children[node].append(child)
    for node in children:
        p_rows[node] = _row(model.target, node, vocab)
        q_rows[node] = _row(model.draft, node, vocab) if len(node) < model.depth else None
    weight, updated = {(): Fraction(1)}, {()}

    def refresh(node):
        for child in children[node]:
            if child not in updated:
                q = q_rows[node][child[-1]]
                weight[child] = min(Fraction(1), weight[node] * p_rows[node][child[-1]] / q)
            refresh(child)

    out, reach = {}, Fraction(1)
    while True:
        refresh(())
        node = ()
        while children[node]:
            node = children[node][0]
        accept = Fraction(1) if node == () else weight[node]
        for y in range(vocab):
            out[(node, y)] = out.get((node, y), 0) + reach * accept * p_rows[node][y]
        if node == ():
            return out
        reach *= 1 - accept
        parent, token = node[:-1], node[-1]
        children[parent].remove(node)
        w, p, q = weight[parent], p_rows[parent], q_rows[parent]
        raw = [max(w * a - b, Fraction(0)) for a, b in zip(p, q, strict=True)]
        z = sum(raw)
        p_rows[parent] = [x / z for x in raw] if z else raw
        weight[parent] = z / (z + 1 - w) if z + 1 - w else Fraction(0)
        kept = [Fraction(0) if x == token else v for x, v in enumerate(q)]
        q_rows[parent] = [v / sum(kept) for v in kept] if sum(kept) else kept
        updated.add(parent)


def test_traversal_matches_literal_reference():
    for seed, (vocab, depth, paths) in enumerate([(2, 2, 3), (3, 2, 3), (2, 3, 3), (3, 3, 2)]):
        inst = dirichlet_instance(vocab, depth, seed=seed, denominator=8) if seed % 2 else \
            ties_instance(vocab, depth, seed=seed)
        model = inst.model(exact=True)
        configs = configurations(model, paths)
        pick = np.random.default_rng(seed).choice(len(configs.probability), size=15)
        tree = draft_tree(model, configs.tokens[pick])
        law = block_law("traversal", tree)
        joint = law.joint()
        for b in range(len(pick)):
            expected = _reference_traversal(model, configs.tokens[pick][b])
            got = {}
            for k in range(paths):
                for i in range(depth + 1):
                    node = tuple(int(t) for t in configs.tokens[pick][b][k][:i])
                    for y in range(vocab):
                        if joint[b, k, i, y] != 0:
                            got[(node, y)] = got.get((node, y), 0) + joint[b, k, i, y]
            assert {key: v for key, v in expected.items() if v != 0} == got


# ---------------------------------------------------------------------------
# structure, dtypes, sampling
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", MULTIPATH + ["gbv_broken"])
def test_law_is_a_distribution(name):
    inst = ties_instance(3, 2, seed=11)
    (law,) = _laws(inst, [name], 3, exact=True)
    assert (law.stop >= 0).all() and (law.correction >= 0).all()
    assert (law.stop.sum(axis=(1, 2)) == 1).all()
    sums = law.correction.sum(axis=-1)
    assert ((sums == 1) | (law.stop == 0)).all()


@pytest.mark.parametrize("name", MULTIPATH)
def test_float32_matches_float64(name):
    inst = dirichlet_instance(3, 2, alpha=0.8, seed=4)
    model = inst.model()
    configs = configurations(model, 3)
    laws = [block_law(name, draft_tree(model, configs.tokens, dtype=dtype))
            for dtype in (torch.float32, torch.float64)]
    assert laws[0].stop.dtype == torch.float32
    assert torch.max(torch.abs(laws[0].joint().double() - laws[1].joint())) <= 2e-5
    assert torch.max(torch.abs(laws[0].block_efficiency().double()
                               - laws[1].block_efficiency())) <= 2e-5


@pytest.mark.parametrize("name", ["gbv", "specinfer", "spectr", "traversal", "rrsw", "naive_tree",
                                  "nss", "khisti"])
def test_sampling_matches_exact_law(name):
    """sample_block on one drafted tree repeated 40,000 times: chi-square against the law."""
    inst = dirichlet_instance(3, 2, alpha=1.0, seed=2)
    model = inst.model()
    tokens = np.array([[[0, 1], [0, 2], [1, 0]]])  # a tree with a shared first token
    law = block_law(name, draft_tree(model, np.repeat(tokens, 40_000, axis=0)))
    generator = torch.Generator().manual_seed(1234)
    path, accepted, token = sample_block(law, generator)
    joint = law.joint()[0].reshape(-1).numpy()
    cells = (path * 3 + accepted) * 3 + token
    counts = np.bincount(cells.numpy(), minlength=joint.size)
    assert counts[joint == 0].sum() == 0
    keep = joint > 0
    result = stats.chisquare(counts[keep], joint[keep] / joint[keep].sum() * counts.sum())
    assert result.pvalue > 1e-3
