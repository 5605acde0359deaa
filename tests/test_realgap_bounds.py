"""The realgap bracket: certified lower (kept rows only) <= K-path optimum <= coarsened upper.

Independent values: the fine optimum from the enumerated full LP (certified in exact
rationals), the coarse upper bound from column generation (certified), and, with nothing
lumped, the exact laws of token-level sampling and NSS by enumeration of draft
configurations (verifiers/exact.py), which the kept-row formulas must reproduce.
"""

from __future__ import annotations

import numpy as np
import pytest
from speclp.experiments.realgap import exact_one_step, kept_lower_bounds
from speclp.lp import optimum
from speclp.lp.closed_form import one_step_optimum
from speclp.lp.coarsen import coarsen_instance, kept_edges
from speclp.lp.instance import dirichlet_instance
from speclp.verifiers.exact import exact_result


def float_edges(instance, width):
    target, draft, _ = kept_edges(instance, width, exact=False)
    return np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)


@pytest.mark.parametrize("vocab, depth, paths", [(3, 2, 2), (3, 3, 2), (2, 2, 3), (4, 1, 3)])
def test_without_lumping_the_kept_verifiers_are_token_level_and_nss(vocab, depth, paths):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=vocab + 10 * depth)
    target, draft = float_edges(inst, vocab)  # every token kept
    bounds = kept_lower_bounds(target, draft, vocab, depth, list(range(1, paths + 1)))
    model = inst.model()
    token = float(exact_result(model, "token", paths=1).block_efficiency)
    for k in range(1, paths + 1):
        values = bounds[str(k)]["values"]
        assert values["token-kept"] == pytest.approx(token, abs=1e-12)
        nss = float(exact_result(model, "nss", paths=k).block_efficiency)
        assert values["nss-kept"] == pytest.approx(nss, abs=1e-12)
        assert bounds[str(k)]["value"] == max(values.values())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("paths", [1, 2])
def test_lower_bound_optimum_upper_bound_on_small_instances(seed, paths):
    inst = dirichlet_instance(4, 2, alpha=0.6, seed=seed, denominator=64)
    fine = optimum(inst, paths, method="full")
    assert fine.certified
    for width in (1, 2, 3):
        coarse, _ = coarsen_instance(inst, width)
        upper = optimum(coarse, paths, method="colgen")
        assert upper.certified
        target, draft = float_edges(inst, width)
        lower = kept_lower_bounds(target, draft, width, 2, [paths])[str(paths)]["value"]
        assert lower <= float(fine.exact_value) + 1e-12 <= float(upper.exact_value) + 2e-12
        # the bound uses only kept rows: more kept tokens never lower it here
        if width > 1:
            narrower = kept_lower_bounds(*float_edges(inst, width - 1), width - 1, 2, [paths])
            assert narrower[str(paths)]["values"]["token-kept"] <= \
                kept_lower_bounds(target, draft, width, 2, [paths])[str(paths)][
                    "values"]["token-kept"] + 1e-12


def test_a_bound_from_renormalised_rows_is_caught():
    """The bound must use the FULL-vocabulary probabilities of the kept tokens. With rows
    renormalised over the kept tokens (docs/theory.md section 13.2: p = (1/2, 1/4, 1/4),
    q = (1/2, 1/2, 0), the two most likely target tokens kept) the same formula exceeds the
    optimum 1 + sum min(p, q) = 7/4, so the bracket check would fail on it."""
    opt = 1 + 0.5 + 0.25
    honest = kept_lower_bounds(np.array([[0.5, 0.25]]), np.array([[0.5, 0.5]]), 2, 1, [1])
    renormalised = kept_lower_bounds(np.array([[2 / 3, 1 / 3]]), np.array([[0.5, 0.5]]), 2, 1, [1])
    assert honest["1"]["value"] == pytest.approx(opt)
    assert renormalised["1"]["value"] == pytest.approx(1 + 0.5 + 1 / 3) and \
        renormalised["1"]["value"] > opt + 0.05
    with pytest.raises(ValueError, match="need edges"):
        kept_lower_bounds(np.ones((2, 3)) / 3, np.ones((2, 3)) / 3, 3, 2, [1])


def test_exact_one_step_values():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    q[2] = 0.0  # a token the draft never proposes
    q /= q.sum()
    optima = {str(k): {"value": float(one_step_optimum(p, q, [k])[0].value[0])} for k in (1, 3)}
    by_paths = {str(k): {"bv": {}, "nss": {}, "nodeopt": {}, "gbv": {},
                         "specinfer": {}, "rrsw": {"mean": 0.0}} for k in (1, 3)}
    exact_one_step(by_paths, p, q, [1, 3], optima)
    inst = dirichlet_instance(6, 1, seed=0)
    inst.target[0], inst.draft[0] = p, q
    model = inst.model()
    for k in (1, 3):
        got = by_paths[str(k)]
        assert got["bv"]["mean"] == pytest.approx(1 + np.minimum(p, q).sum())
        assert got["nss"]["mean"] == pytest.approx(
            float(exact_result(model, "nss", paths=k).block_efficiency), abs=1e-12)
        assert got["nodeopt"]["mean"] == pytest.approx(
            float(exact_result(model, "nodeopt", paths=k).block_efficiency), abs=1e-9)
        assert got["gbv"]["mean"] == pytest.approx(
            float(exact_result(model, "gbv", paths=k).block_efficiency), abs=1e-12)
        assert got["specinfer"]["mean"] == pytest.approx(
            float(exact_result(model, "specinfer", paths=k).block_efficiency), abs=1e-12)
        assert got["specinfer"]["exact"] and got["rrsw"] == {"mean": 0.0}  # no exact form: sampled


# ---------------------------------------------------------------------------------------
# the bracket of docs/theory.md section 13.5 (exact rationals on small instances)

from fractions import Fraction  # noqa: E402

from speclp.experiments.realgap import bracket_bounds  # noqa: E402
from speclp.lp.coarsen import (  # noqa: E402
    kept_credit,
    kept_value,
    prefix_upper_bound,
    tail_bound,
)
from speclp.lp.dual_bound import dual_upper_bound  # noqa: E402
from speclp.rationals import parse_fraction  # noqa: E402
from speclp.verifiers.exact import continued_law  # noqa: E402
from speclp.verifiers.tree import node_index, node_prefix, num_nodes  # noqa: E402

LOWER_NAMES = ["bv", "gbv", "nss", "nodeopt", "specinfer", "traversal"]


@pytest.mark.parametrize("vocab, depth, paths, seed", [(4, 2, 1, 0), (4, 2, 2, 1), (3, 3, 2, 2),
                                                       (4, 2, 3, 3), (3, 3, 1, 4)])
def test_bracket_holds_exactly_on_small_instances(vocab, depth, paths, seed):
    """lower <= OPT_K <= every upper candidate, in exact rationals, at every kept width; the
    fine optimum is the certified optimum of the full LP of the fine instance (independent)."""
    inst = dirichlet_instance(vocab, depth, alpha=0.6, seed=seed, denominator=64)
    fine = optimum(inst, paths, method="full")
    assert fine.certified
    opt = fine.exact_value
    for width in range(1, vocab + 1):
        target, draft, _ = kept_edges(inst, width)  # exact Fractions
        found = bracket_bounds(target, draft, width, depth, [paths], LOWER_NAMES)
        upper, lower = found["bounds"][str(paths)], found["lower"][str(paths)]
        low = parse_fraction(lower["exact"])
        assert low <= opt, (width, lower)
        assert opt <= parse_fraction(upper["exact"]), (width, upper)
        assert all(float(opt) <= v * (1 + 1e-15) for v in upper["candidates"].values())
        if width == vocab:  # nothing lumped: the coarse LP is the fine one, and its dual
            # bound (float multipliers, evaluated exactly) is tight to float precision
            assert parse_fraction(upper["exact"]) - opt < Fraction(1, 10**9)
            assert tail_bound(target, draft, width, depth, paths) == 0


def test_kept_credit_counts_the_leading_kept_tokens():
    width, depth = 2, 3
    credit = kept_credit(width, depth)
    assert len(credit) == num_nodes(width + 1, depth)
    for n in range(len(credit)):
        prefix = node_prefix(n, width + 1)
        lead = next((i for i, t in enumerate(prefix) if t == width), len(prefix))
        assert credit[n] == 1 + lead


def fine_law_of_coarse(inst, width, verifier, paths, at_exit):
    """The emit [N, V] over the fine tree of the fine verifier that runs `verifier` on the
    coarse images of the fine drafts (kept tokens map to their fine tokens) and ends its block
    at the first R, or at the bonus row: there at_exit(emit, u, rest, mass, accepted) spreads
    the coarse mass over the fine tokens `rest` outside the kept set of fine node u (accepted:
    the R was a drafted token the coarse verifier accepted, not its emitted one). Returns
    (emit, coarse emit, the kept tokens per coarse node)."""
    vocab, depth = inst.vocab_size, inst.depth
    coarse, tokens = coarsen_instance(inst, width)
    emit_c = exact_result(coarse.model(exact=True), verifier, paths=paths).emit
    emit = np.full((num_nodes(vocab, depth), vocab), Fraction(0), dtype=object)
    for n in range(emit_c.shape[0]):
        prefix = node_prefix(n, width + 1)
        for y in range(width + 1):
            mass = emit_c[n, y]
            if mass == 0:
                continue
            kept, fine_prefix, ended = 0, [], False
            for i, t in enumerate((*prefix, y)):
                u = node_index(fine_prefix, vocab)
                keep = list(tokens[kept]) if len(fine_prefix) < depth else []
                if t == width or not keep:  # R (or the bonus row): outside keep
                    at_exit(emit, u, [x for x in range(vocab) if x not in keep], mass, i < len(prefix))
                    ended = True
                    break
                fine_prefix.append(int(tokens[kept, t]))
                kept = width * kept + 1 + t
            assert ended or len(fine_prefix) == len(prefix) + 1
            if not ended:
                u = node_index(fine_prefix[:-1], vocab)
                emit[u, fine_prefix[-1]] += mass
    return emit, emit_c, tokens


def fine_law_of_truncated_coarse(inst, width, verifier, paths):
    """Lemma 13.3 made explicit: the fine verifier that runs `verifier` on the coarse images
    of the fine drafts and ends its block at the first R (a fresh target token from the
    non-kept part of that node's row). Returns its emit [N, V] over the fine tree."""
    target = inst.model(exact=True).target

    def fresh_target(emit, u, rest, mass, accepted):
        total = sum(target[u, x] for x in rest)
        for x in rest:
            emit[u, x] += mass * target[u, x] / total

    emit, emit_c, _ = fine_law_of_coarse(inst, width, verifier, paths, fresh_target)
    return emit, emit_c


@pytest.mark.parametrize("verifier", ["bv", "gbv", "nodeopt", "specinfer"])
def test_the_truncated_coarse_verifier_is_lossless_with_the_kept_value(verifier):
    inst = dirichlet_instance(3, 2, alpha=0.7, seed=5, denominator=32)
    fine = inst.model(exact=True)
    for width in (1, 2):
        emit, emit_c = fine_law_of_truncated_coarse(inst, width, verifier, 2)
        law = continued_law(fine, emit)
        assert list(law) == list(fine.target_path_probabilities(inst.depth + 1))  # exactly
        depths = np.array([len(node_prefix(n, 3)) for n in range(emit.shape[0])])
        value = (emit.sum(axis=1) * (depths + 1)).sum()
        assert value == kept_value(emit_c, width, inst.depth)


def test_prefix_bound_without_lumping_is_the_node_sum():
    inst = dirichlet_instance(3, 2, alpha=0.8, seed=7, denominator=16)
    target, draft, _ = kept_edges(inst, 3)
    model = inst.model(exact=True)
    p, q = model.node_probabilities("target"), model.node_probabilities("draft")
    for k in (1, 2, 3):
        expected = 1 + sum(min(p[z], 1 - (1 - q[z]) ** k) for z in range(1, len(p)))
        assert prefix_upper_bound(target, draft, 3, 2, k) == expected


def test_tail_bound_by_hand():
    # L = 2, M = 1: root keeps token a (p = 1/2, q = 3/4); node a keeps b (p = 1/3, q = 1/2)
    target = np.array([[Fraction(1, 2)], [Fraction(1, 3)]], dtype=object)
    draft = np.array([[Fraction(3, 4)], [Fraction(1, 2)]], dtype=object)
    # root: 2 levels x min(1/2, K 1/4); node a: 1 level x min(1/2 * 2/3, K 3/4 * 1/2)
    assert tail_bound(target, draft, 1, 2, 1) == 2 * Fraction(1, 4) + Fraction(1, 3)
    assert tail_bound(target, draft, 1, 2, 3) == 2 * Fraction(1, 2) + Fraction(1, 3)
    assert tail_bound(target, draft, 1, 2, 1, skip=1) == Fraction(1, 4)
    with pytest.raises(ValueError, match="target_kept"):
        tail_bound(target[:1], draft, 1, 2, 1)


def test_dual_bound_objective_defaults_to_depth_plus_one():
    inst = dirichlet_instance(3, 2, alpha=0.8, seed=3, denominator=16)
    result = optimum(inst, 2, method="colgen", certify=False)
    depths = np.array([len(node_prefix(n, 3)) for n in range(num_nodes(3, 2))])
    default = dual_upper_bound(inst, result.matching_duals, 2)
    assert dual_upper_bound(inst, result.matching_duals, 2, objective=depths + 1) == default
    assert default >= optimum(inst, 2, method="full").exact_value
    with pytest.raises(ValueError, match="objective"):
        dual_upper_bound(inst, result.matching_duals, 2, objective=depths[:-1])


# ---------------------------------------------------------------------------------------
# mass-driven kept trees (docs/theory.md section 13.6)

from speclp.experiments.realgap import lumped_mass  # noqa: E402
from speclp.lp.coarsen import (  # noqa: E402
    coarsened_instance,
    kept_count,
    kept_lower_values,
    kept_tree_from_padded,
    mass_kept_edges,
    padded_edges,
)


def test_depth_caps():
    from speclp.lp.coarsen import depth_caps

    assert depth_caps(8, 2) == [16, 8]
    assert depth_caps(4, 3) == [16, 8, 4]
    assert depth_caps(8, 4) == [13, 13, 13, 8]  # (13 + 1)^4 <= 40,000 < 15^4
    assert depth_caps(1, 3, max_paths=27) == [2, 2, 1]  # 3^3 = 27 paths


def test_kept_count_by_hand():
    # rows of 4 tokens, order 0..3; p(u) = 1/2, q(u) = 1/4, 2 levels left, K = 1
    p = np.array([0.5, 0.25, 0.125, 0.125])
    q = np.array([0.25, 0.25, 0.25, 0.25])
    order = np.arange(4)
    # weights by k kept: 2 min(p(u) rest_p, q(u) rest_q) = 2 min(1/2, 1/4), 2 min(1/4, 3/16),
    # 2 min(1/8, 1/8), 2 min(1/16, 1/16), 0  ->  1/2, 3/8, 1/4, 1/8, 0
    assert kept_count(p, q, order, 0.5, 0.25, 2, 4, 0.3, 1) == 2
    assert kept_count(p, q, order, 0.5, 0.25, 2, 4, 0.125, 1) == 3
    assert kept_count(p, q, order, 0.5, 0.25, 2, 4, 0.0, 1) == 4
    assert kept_count(p, q, order, 0.5, 0.25, 2, 2, 0.0, 1) == 2  # the cap
    assert kept_count(p, q, order, 0.5, 0.25, 2, 4, 0.5, 1) == 0  # small enough already
    # K = 3 paths: the draft cap 3 q(u) rest_q no longer binds first: 2 min(1/4, 9/16) = 1/2
    assert kept_count(p, q, order, 0.5, 0.25, 2, 4, 0.4, 3) == 2


def test_padding_with_dummy_tokens_changes_no_optimum_and_no_law():
    """A kept tree with 2 tokens per node laid out at slot width 3 (one dummy slot of
    probability 0 per node, and dummy nodes below it): the coarse optimum (certified
    exactly by column generation) and every verifier's kept value are those of width 2."""
    inst = dirichlet_instance(4, 2, alpha=0.7, seed=11, denominator=48)
    target, draft, tokens = kept_edges(inst, 2)
    nodes = [{"parent": None, "slot": 0, "tokens": list(tokens[0]), "p": list(target[0]),
              "q": list(draft[0])}]
    nodes += [{"parent": 0, "slot": j, "tokens": list(tokens[1 + j]), "p": list(target[1 + j]),
               "q": list(draft[1 + j])} for j in range(2)]
    nodes.append({"parent": 0, "slot": 2, "tokens": [], "p": [], "q": []})  # a node keeping 0
    te, de, padded_tokens, width, _ = padded_edges(nodes[:3], 2)
    assert width == 2 and (te == target).all()
    nodes[0] = {**nodes[0], "tokens": [*nodes[0]["tokens"], 3], "p": [*nodes[0]["p"], Fraction(0)],
                "q": [*nodes[0]["q"], Fraction(0)]}  # a third slot of probability 0: a dummy
    te3, de3, tok3, w3, _ = padded_edges(nodes, 2)
    assert w3 == 3 and te3.shape == (4, 3) and list(tok3[3]) == [-1, -1, -1]
    for paths in (1, 2):
        narrow = coarsened_instance(target, draft, 2, 2)
        wide = coarsened_instance(te3, de3, 3, 2)
        a, b = optimum(narrow, paths, method="colgen"), optimum(wide, paths, method="colgen")
        assert a.certified and b.certified and a.exact_value == b.exact_value
        names = ["bv", "gbv", "nss", "nodeopt"]
        assert kept_lower_values(narrow, 2, paths, names)["values"] == \
            kept_lower_values(wide, 3, paths, names)["values"]
        assert tail_bound(target, draft, 2, 2, paths) == tail_bound(te3, de3, 3, 2, paths)
        assert prefix_upper_bound(target, draft, 2, 2, paths) == \
            prefix_upper_bound(te3, de3, 3, 2, paths)


@pytest.mark.parametrize("vocab, depth, paths, seed", [(4, 2, 1, 20), (4, 2, 2, 21), (3, 3, 2, 22),
                                                       (5, 2, 3, 23)])
def test_mass_driven_bracket_holds_exactly(vocab, depth, paths, seed):
    """lower <= OPT_K <= upper in exact rationals on mass-driven (non-uniform) kept trees;
    OPT_K from the full LP of the fine instance (independent). epsilon 0 with cap V keeps
    every token that could be accepted outside (no tail): the bracket is then tight."""
    inst = dirichlet_instance(vocab, depth, alpha=0.5, seed=seed, denominator=64)
    fine = optimum(inst, paths, method="full")
    assert fine.certified
    opt = fine.exact_value
    sizes = set()
    for cap, epsilon in ((2, 0.2), (3, 0.05), (vocab, 0.02), (vocab, 0.0)):
        target, draft, tokens, width, overlap = mass_kept_edges(inst, cap, epsilon, paths)
        kept = int((tokens >= 0).sum())
        sizes.add(kept)
        found = bracket_bounds(target, draft, width, depth, [paths], LOWER_NAMES,
                               overlap=overlap)
        upper, lower = found["bounds"][str(paths)], found["lower"][str(paths)]
        assert parse_fraction(lower["exact"]) <= opt <= parse_fraction(upper["exact"]), \
            (cap, epsilon, lower, upper)
        plain = bracket_bounds(target, draft, width, depth, [paths], LOWER_NAMES)["lower"]
        assert lower["exit_credit"] and plain[str(paths)]["value"] <= lower["value"]
        mass = lumped_mass(kept_tree_from_padded(target, draft, width, depth))
        if epsilon == 0.0:
            assert 0 <= mass["lumped_target"] <= 1
            assert parse_fraction(upper["exact"]) - opt < Fraction(1, 10**9)
            assert tail_bound(target, draft, width, depth, paths) == 0  # nothing can leave
    assert len(sizes) >= 3  # the thresholds gave different trees


def test_mass_driven_tree_is_non_uniform_where_the_mass_is():
    """One heavy root token: its subtree is kept, the light ones keep no children."""
    inst = dirichlet_instance(4, 2, alpha=0.5, seed=3, denominator=64)
    inst.target[0] = np.array([0.85, 0.05, 0.05, 0.05])
    inst.draft[0] = np.array([0.7, 0.1, 0.1, 0.1])
    target, draft, tokens, width, overlap = mass_kept_edges(inst, 4, 0.06, 1, exact=False)
    kept_children = (tokens[1 : 1 + width] >= 0).sum(axis=1)  # per root slot
    heavy = int(np.nonzero(tokens[0] == 0)[0][0])
    assert kept_children[heavy] >= 1
    assert all(kept_children[j] == 0 for j in range(width) if j != heavy)
    mass = lumped_mass(kept_tree_from_padded(target, draft, width, 2))
    # the lumped mass is the sum over kept nodes of p(u) (1 - kept mass), by hand
    reach = {0: 1.0}
    total = 0.0
    for n in range(len(target)):
        if n in reach:
            total += reach[n] * (1 - target[n].sum())
            for j in range(width):
                if width * n + 1 + j < len(target):
                    reach[width * n + 1 + j] = reach[n] * target[n, j]
    assert mass["lumped_target"] == pytest.approx(total, abs=1e-12)


@pytest.fixture(scope="module")
def tiny_models():
    """Two tiny random Llama models (as tests/test_realgap.py: peaked rows)."""
    pytest.importorskip("torch")
    from tiny_models import peaked_llama_pair

    return list(peaked_llama_pair(40))


def test_mass_tree_rows_equal_plain_forwards(tiny_models):
    """Every kept edge of the mass-driven tree (a non-uniform tree: the tree-masked forwards
    see only each node's own ancestors) equals the row of a plain forward of its prefix; with
    epsilon 0 the tree is the complete one of decode.tree_rows.tree_rows."""
    import torch
    from speclp.decode.engine import probability_rows
    from speclp.decode.tree_rows import prefill, tree_rows
    from speclp.experiments.realgap import mass_tree_rows

    torch.set_num_threads(1)
    target, draft = tiny_models
    context = [4, 8, 15, 16]
    ready = prefill(target, draft, context, 1.0, 1.3)
    tree = mass_tree_rows(ready, 3, 4, 0.004, [1, 2])
    te, de, tokens, width = tree["target_edge"], tree["draft_edge"], tree["tokens"], tree["width"]
    counts = (tokens >= 0).sum(axis=1)
    assert len(set(counts[counts > 0].tolist())) > 1  # non-uniform
    checked, deepest = 0, 0
    for n in range(len(tokens)):
        if counts[n] == 0:
            continue
        prefix, m = [], n
        while m:
            parent, slot = divmod(m - 1, width)
            prefix.append(int(tokens[parent, slot]))
            m = parent
        sequence = context + prefix[::-1]
        with torch.no_grad():
            p = probability_rows(target(torch.tensor([sequence])).logits[0, -1], 1.0,
                                 dtype=torch.float64).numpy()
            q = probability_rows(draft(torch.tensor([sequence])).logits[0, -1], 1.3,
                                 dtype=torch.float64).numpy()
        k = counts[n]
        assert np.allclose(te[n, :k], p[tokens[n, :k]], atol=1e-9)
        assert np.allclose(de[n, :k], q[tokens[n, :k]], atol=1e-9)
        assert (te[n, k:] == 0).all() and (de[n, k:] == 0).all()
        checked += 1
        deepest = max(deepest, len(prefix))
    assert deepest == 2 and checked == int((counts > 0).sum()) <= tree["nodes"]
    full = mass_tree_rows(ready, 2, 3, 0.0, [1])  # depth caps 6, 3: every cap reached
    rows = tree_rows(target, draft, context, 6, 1, 1.0, 1.3, select="mix", prefilled=ready)
    assert full["width"] == 6
    for mine, theirs in ((full["target_edge"], rows.target_edge), (full["draft_edge"], rows.draft_edge)):
        assert np.allclose(mine[0], theirs[0], atol=1e-12)
        assert np.allclose(mine[1:7, :3], theirs[1:7, :3], atol=1e-12)
        assert (mine[1:7, 3:] == 0).all()


# ---------------------------------------------------------------------------------------
# the exit credit (docs/theory.md section 13.6, Lemma 13.8)

from speclp.lp.coarsen import exit_bonus, exit_overlap  # noqa: E402


def test_exit_overlap_by_hand():
    # outside the kept token 0: p = (1/4, 1/4) of mass 1/2, q = (1/2, 1/4) of mass 3/4
    p = np.array([Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)], dtype=object)
    q = np.array([Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)], dtype=object)
    # normalised: p_out = (1/2, 1/2), q_out = (2/3, 1/3): overlap 1/2 + 1/3
    assert exit_overlap(p, q, [0]) == Fraction(5, 6)
    assert exit_overlap(p, q, [0, 1, 2]) == 0  # nothing outside
    low = exit_overlap(p.astype(np.float64), q.astype(np.float64), [0])
    assert 5 / 6 * (1 - 2e-9) < low < 5 / 6  # lowered by the margin, never above
    bonus = exit_bonus(np.array([Fraction(1, 2), Fraction(1, 3)], dtype=object), 1, 2)
    # M = 1, L = 2, coarse tokens {0, R=1}: nodes (), 0, R, 00, 0R, R0, RR
    assert list(bonus) == [0, 0, Fraction(1, 2), 0, Fraction(1, 3), Fraction(1, 2), Fraction(1, 2)]


def fine_law_with_exit_credit(inst, width, verifier, paths):
    """Lemma 13.8 made explicit: as `fine_law_of_truncated_coarse`, but an ACCEPTED first R at
    u couples the lumped draft token x (law q outside S(u), renormalised) maximally with a
    fresh lumped target token t (p, the same): t = x is accepted and the block ends with a
    target token at ux; otherwise t is the correction. Returns (emit over the fine tree,
    coarse emit, overlap per kept node)."""
    vocab = inst.vocab_size
    fine = inst.model(exact=True)
    target, draft = fine.target, fine.draft

    def coupled_exit(emit, u, rest, mass, accepted):
        big_p = sum(target[u, x] for x in rest)
        big_q = sum(draft[u, x] for x in rest)
        for x in rest:
            p_out = target[u, x] / big_p
            both = min(p_out, draft[u, x] / big_q) if accepted and big_q else 0
            if both:
                child = u * vocab + 1 + x
                for z in range(vocab):
                    emit[child, z] += mass * both * target[child, z]
            emit[u, x] += mass * (p_out - both)

    emit, emit_c, tokens = fine_law_of_coarse(inst, width, verifier, paths, coupled_exit)
    fine_node = {0: 0}  # kept node -> fine node
    overlap = np.full(len(tokens), Fraction(0), dtype=object)
    for n in range(len(tokens)):
        u = fine_node[n]
        overlap[n] = exit_overlap(target[u], draft[u], list(tokens[n]))
        for j, t in enumerate(tokens[n]):
            fine_node[width * n + 1 + j] = u * vocab + 1 + int(t)
    return emit, emit_c, overlap


@pytest.mark.parametrize("verifier, vocab, depth, paths", [("bv", 3, 2, 1), ("gbv", 3, 2, 2),
                                                            ("nodeopt", 3, 2, 2),
                                                            ("specinfer", 4, 2, 2), ("bv", 3, 3, 1)])
def test_the_exit_credit_verifier_is_lossless_with_the_credited_value(verifier, vocab, depth, paths):
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=5 + vocab, denominator=32)
    fine = inst.model(exact=True)
    opt = optimum(inst, paths, method="full").exact_value
    credited = []
    for width in range(1, vocab):
        emit, emit_c, overlap = fine_law_with_exit_credit(inst, width, verifier, paths)
        law = continued_law(fine, emit)
        assert list(law) == list(fine.target_path_probabilities(depth + 1))  # lossless, exactly
        depths = np.array([len(node_prefix(n, vocab)) for n in range(emit.shape[0])])
        value = (emit.sum(axis=1) * (depths + 1)).sum()
        assert value == kept_value(emit_c, width, depth, overlap)
        assert kept_value(emit_c, width, depth) <= value <= opt
        credited.append(value - kept_value(emit_c, width, depth))
    assert max(credited) > 0  # the credit is not always zero here


def test_adaptive_bracket_on_mass_trees(tiny_models):
    import torch
    from speclp.decode.tree_rows import prefill
    from speclp.experiments.realgap import adaptive_bracket, mass_tree_rows

    torch.set_num_threads(1)
    target, draft = tiny_models
    context = [4, 8, 15, 16]
    ready = prefill(target, draft, context, 1.0, 1.3)
    args = (target, draft, context, 2, [1, 2], 1.0, 1.3, ready, ["bv", "gbv", "nss"])
    found = adaptive_bracket(*args, [2, 3], None, None, "mass")
    assert [e["cap"] for e in found["expansion"]] == [2, 3]
    for k in ("1", "2"):
        low, up = found["lower"][k], found["bounds"][k]
        assert low["exit_credit"] and low["value"] <= up["value"]
        assert up["certified"] and up["value"] == min(up["candidates"].values())
        # the record keeps the best of the trees: no tree's own bracket is narrower
        assert up["value"] - low["value"] <= min(e["bracket_width"][k] for e in found["expansion"]) + 1e-15
    # the second tree is at least as wide as the first at every kept node (same rule, smaller epsilon)
    first = mass_tree_rows(ready, 2, 2, found["expansion"][0]["epsilon"], [1, 2])
    assert found["expansion"][1]["nodes"] >= first["nodes"]
    assert len(adaptive_bracket(*args, [2, 3], 10.0, None, "mass")["expansion"]) == 1
    with pytest.raises(ValueError, match="expansion"):
        adaptive_bracket(*args, [2], None, None, "wide")


# ---------------------------------------------------------------------------------------
# the coarse LPs on their ragged path set (docs/theory.md section 13.7, Lemma 13.9)

from speclp.lp.coarse_lp import (  # noqa: E402
    ragged_coarse,
    ragged_dual_bound,
    ragged_optimum,
    ragged_upper_bound,
)


@pytest.mark.parametrize("vocab, depth, cap, epsilon, seed", [(4, 3, 2, 0.01, 0), (4, 3, 2, 0.05, 1),
                                                              (5, 2, 3, 0.02, 2), (3, 3, 3, 0.0, 3)])
@pytest.mark.parametrize("below_r", ["again", "terminal"])
def test_ragged_coarse_lp_is_the_padded_optimum(vocab, depth, cap, epsilon, seed, below_r):
    """Dropping the paths of probability 0 (dummy slots of a mass-driven tree) changes no
    coarse optimum: the padded instance's optimum, certified exactly by column generation
    (an independent engine), lies under the ragged master's exact weak-duality bound and within
    1e-9 of it; the ragged leaves are the padded paths of positive draft probability."""
    inst = dirichlet_instance(vocab, depth, alpha=0.5, seed=40 + seed, denominator=64)
    te, de, tokens, width, _ = mass_kept_edges(inst, cap, epsilon, 2)
    padded = coarsened_instance(te, de, width, depth, below_r=below_r)
    tree = ragged_coarse(te, de, width, depth, below_r)
    q_paths = padded.model(exact=True).draft_path_probabilities()
    assert tree.num_leaves == sum(1 for v in q_paths if v != 0)
    assert sorted(tree.leaf_q) == sorted(v for v in q_paths if v != 0)
    for paths in (1, 2, 3):
        exact = optimum(padded, paths, method="colgen")
        assert exact.certified
        bound, run = ragged_upper_bound(te, de, width, depth, paths, below_r)
        assert run.status == "optimal"
        assert exact.exact_value <= bound < exact.exact_value + Fraction(1, 10**9)
        assert run.value == pytest.approx(float(exact.exact_value), abs=1e-9)


def test_ragged_dual_bound_holds_for_any_multipliers():
    """Weak duality needs no optimal duals: random multipliers give a valid (loose) bound."""
    inst = dirichlet_instance(4, 3, alpha=0.5, seed=7, denominator=32)
    te, de, _, width, _ = mass_kept_edges(inst, 2, 0.02, 2)
    tree = ragged_coarse(te, de, width, 3)
    opt = optimum(coarsened_instance(te, de, width, 3), 2, method="colgen").exact_value
    rng = np.random.default_rng(0)
    for _ in range(5):
        theta = rng.normal(size=len(tree.edge_node))
        assert ragged_dual_bound(tree, theta, 2) >= opt
    tight = ragged_dual_bound(tree, ragged_optimum(tree, 2).matching_duals, 2)
    assert tight - opt < Fraction(1, 10**9)
    with pytest.raises(ValueError, match="theta"):
        ragged_dual_bound(tree, np.zeros(3), 2)
    with pytest.raises(ValueError, match="target_kept"):
        ragged_coarse(te[:2], de, width, 3)
    with pytest.raises(ValueError, match="below_r"):
        ragged_coarse(te, de, width, 3, "below")


@pytest.mark.parametrize("paths, seed", [(1, 50), (2, 51), (3, 52)])
def test_ragged_bracket_contains_the_fine_optimum(paths, seed):
    """bracket_bounds on the ragged LPs (the default) against the padded ones and against the
    fine optimum of the whole instance (certified by column generation at V = 4, L = 3)."""
    inst = dirichlet_instance(4, 3, alpha=0.5, seed=seed, denominator=64)
    opt = optimum(inst, paths, method="colgen")
    assert opt.certified
    for cap, epsilon in ((1, 0.05), (2, 0.01)):
        target, draft, _, width, overlap = mass_kept_edges(inst, cap, epsilon, paths)
        ragged = bracket_bounds(target, draft, width, 3, [paths], ["bv", "gbv", "nss"],
                                overlap=overlap)
        padded = bracket_bounds(target, draft, width, 3, [paths], ["bv", "gbv", "nss"],
                                overlap=overlap, lp_paths="padded")
        up, low = ragged["bounds"][str(paths)], ragged["lower"][str(paths)]
        assert parse_fraction(low["exact"]) <= opt.exact_value <= parse_fraction(up["exact"])
        assert up["lp_paths"] == "ragged"
        for name, value in padded["bounds"][str(paths)]["candidates"].items():
            assert up["candidates"][name] == pytest.approx(value, abs=1e-9), name
    with pytest.raises(ValueError, match="lp_paths"):
        bracket_bounds(target, draft, width, 3, [paths], ["bv"], lp_paths="wide")


def test_ragged_lp_out_of_time_gives_no_bound():
    """A master never solved (no time at all) gives no candidate, never a number."""
    inst = dirichlet_instance(3, 2, alpha=0.5, seed=9, denominator=32)
    te, de, _, width, _ = mass_kept_edges(inst, 2, 0.01, 1)
    bound, run = ragged_upper_bound(te, de, width, 2, 1, time_limit=0.0)
    assert bound is None and run.status == "time_limit" and run.matching_duals is None


# ---------------------------------------------------------------------------------------
# trees past the padded layout: kept_limit (docs/theory.md 13.6-13.7)


def test_kept_limit_lifts_the_padded_caps_and_bounds_the_kept_tokens(tiny_models):
    import torch
    from speclp.decode.tree_rows import prefill
    from speclp.experiments.realgap import adaptive_bracket, mass_tree_rows
    from speclp.lp.coarsen import depth_caps

    torch.set_num_threads(1)
    target, draft = tiny_models
    context = [4, 8, 15, 16]
    ready = prefill(target, draft, context, 1.0, 1.3)
    vocab = int(ready.target.root_row.shape[-1])
    padded = mass_tree_rows(ready, 4, 8, 0.0, [1, 2])  # epsilon 0: every node keeps its cap
    assert padded["width"] == 13 == depth_caps(8, 4)[0] and "target_edge" in padded
    limited = mass_tree_rows(ready, 4, 8, 0.0, [1, 2], kept_limit=60)
    tree = limited["tree"]
    assert "target_edge" not in limited and limited["kept_tokens"] == tree.kept_tokens() == 60
    # epsilon 0: in node order every node keeps min(its depth's cap 64 / 32 / 16 / 8, V, what
    # is left of the 60), so the root keeps past the padded cap of 13
    left, expected = 60, []
    for n in range(len(tree)):
        expected.append(min([64, 32, 16, 8][tree.level[n]], vocab, left))
        left -= expected[-1]
    assert [len(p) for p in tree.p] == expected and limited["width"] == expected[0] > 13
    found = adaptive_bracket(target, draft, context, 4, [1, 2], 1.0, 1.3, ready, ["bv", "nodeopt"],
                             [2, 4], None, None, "mass", kept_limit=40)
    for step in found["expansion"]:
        assert step["kept_tokens"] <= 40 and step["law_nodes"] >= step["kept_tokens"]
    for k in ("1", "2"):
        assert found["lower"][k]["value"] <= found["bounds"][k]["value"]
        assert found["lower"][k]["skipped"] == []


def test_kept_limit_enters_the_keys_only_when_set():
    from speclp.experiments.realgap import realgap_keys, width_schedule

    prompts = [{"id": "p0", "text": "def f():"}]
    args = (prompts, [2, 4], [1, 2])
    base = realgap_keys(*args, model_dtype="torch.float32", widths=[2, 4], time_budget=60.0)
    assert base == realgap_keys(*args, model_dtype="torch.float32", widths=[2, 4], time_budget=60.0,
                                kept_limit=None)
    assert all("kept_limit" not in key for key in base)
    limited = realgap_keys(*args, model_dtype="torch.float32", widths=[2, 4], time_budget=60.0,
                           kept_limit=500)
    assert all('"kept_limit":500' in key for key in limited) and not set(limited) & set(base)
    assert width_schedule(8, 4, [30, 4, 8]) == [4, 8]
    assert width_schedule(8, 4, [30, 4, 8], padded=False) == [4, 8, 30]


def test_the_kept_limit_flag_is_checked_and_reaches_run_realgap(tmp_path, monkeypatch):
    from speclp.cli import app
    from speclp.cli import realgap as cli_realgap
    from speclp.cli.realgap import MODE_RENORMALISED, RealgapSpec
    from speclp.experiments import realgap as realgap_library
    from speclp.inputs import BadArgument
    from typer.testing import CliRunner

    assert RealgapSpec(widths=(16,), depths=(4,), kept_limit=500).kept_limit == 500
    for bad, field in (({"widths": (16,), "depths": (4,)}, "widths"),  # padded: 17^4 > 40,000
                       ({"kept_limit": 0}, "kept_limit"),
                       ({"instances": MODE_RENORMALISED, "widths": (2,), "depths": (2,), "paths": (1, 2),
                         "kept_limit": 9}, "kept_limit")):
        with pytest.raises(BadArgument) as caught:
            RealgapSpec(**bad)
        assert caught.value.field == field
    seen: dict = {}

    class Stop(Exception):
        pass

    def fake_run(target, draft, prompt_list, depths, paths, out_file, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(realgap_library, "run_realgap", fake_run)  # realgap_full calls it
    monkeypatch.setattr(cli_realgap, "check_model_pair", lambda name: [name])
    monkeypatch.setattr(realgap_library, "recorded", lambda out_file, keys: True)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def f():\n")
    result = CliRunner().invoke(app, ["realgap", "--pair", "nosuchmodel", "--prompts", f"file:{prompts}",
                                      "--out", str(tmp_path / "out"), "--depth", "4", "--top", "8,16",
                                      "--kept-limit", "3000"])
    assert result.exit_code == 3 and "Stop" in result.stderr, result.output
    assert seen["kept_limit"] == 3000 and seen["widths"] == [8, 16]
