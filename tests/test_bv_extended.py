"""Extended BV (verifiers/bv_extended.py; docs/theory.md section 19).

References, none of them the law code itself:
- an independent tree walk (below, written from the rule's description with BV's coins
  eta_i ~ Bernoulli(h_i), tau = the largest passing index, and recursive rejection written
  out) enumerated exactly over every drawn path, coin and token (tests/brute_force.py);
- the target law (losslessness: total variation exactly 0 in rationals);
- BV's exact value (the floor), on every instance of an exhaustive grid and on the recorded
  adversarial instances where nodeopt is below BV;
- the enumeration over ordered draft tuples (verifiers.exact) for the structured law.
"""

import json
from fractions import Fraction
from itertools import product
from pathlib import Path

import numpy as np
import pytest
from brute_force import Chooser, Rows, enumerate_outcomes, law_blocks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from speclp.lp.instance import dirichlet_instance, from_rows
from speclp.verifiers.bv_extended import extended_bv_law, extended_bv_structured
from speclp.verifiers.exact import block_efficiency_from_emit, exact_result, exact_total_variation
from speclp.verifiers.registry import compared_verifiers, get_verifier
from speclp.verifiers.tree import num_nodes
from strategies import rational_instances

HITS = (Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "beyond" / "adversarial"
        / "hits.jsonl")


# --- the independent tree walk ---------------------------------------------------------

def _bv_walk(ch: Chooser, rows: Rows, start: tuple, path: tuple) -> tuple[int, list[Fraction] | None]:
    """BV from node `start` along the tokens `path` below it, by its coins: returns (tau,
    residual row) with residual None when tau = len(path) (the bonus case)."""
    w, weights, residuals, h = Fraction(1), [Fraction(1)], [], []
    for i in range(len(path) + 1):
        node = start + path[:i]
        if i > 0:
            p, q = rows.p(node[:-1]), rows.q(node[:-1])
            w = min(Fraction(1), w * p[path[i - 1]] / q[path[i - 1]])
            weights.append(w)
        if i < len(path):
            raw = [max(w * a - b, Fraction(0)) for a, b in zip(rows.p(node), rows.q(node), strict=True)]
            z = sum(raw)
            residuals.append([x / z for x in raw] if z else raw)
            h.append(z / (z + 1 - w) if z + 1 - w else Fraction(0))
        else:
            h.append(w)
    tau = 0
    for i in range(1, len(path) + 1):  # eta_i for every i, tau = the largest passing one
        if ch.bernoulli(h[i]):
            tau = i
    return tau, (None if tau == len(path) else residuals[tau])


def extended_walk(rows: Rows, paths: int):
    """Draw K paths; BV on the first available path; at its end, recursive rejection against
    its residual over the other available paths' children; through a drafted child, again."""
    def run(ch: Chooser) -> tuple:
        drafts = rows.draw_paths(ch, paths)
        node: tuple = ()
        available = list(range(paths))
        while True:
            j = available[0]
            tau, residual = _bv_walk(ch, rows, node, drafts[j][len(node):])
            v = drafts[j][: len(node) + tau]
            if residual is None:
                return v + (ch.token(rows.p(v)),)
            others = [k for k in available if k != j and drafts[k][: len(v)] == v]
            current, q = residual, rows.q(v)
            chosen = None
            for k in others:  # SpecInfer's recursive rejection, with replacement
                c = drafts[k][len(v)]
                if ch.bernoulli(min(Fraction(1), current[c] / q[c])):
                    chosen = c
                    break
                raw = [max(a - b, Fraction(0)) for a, b in zip(current, q, strict=True)]
                total = sum(raw)
                current = [x / total for x in raw] if total else raw
            if chosen is None:
                return v + (ch.token(current),)
            node = v + (chosen,)
            available = [k for k in others if drafts[k][: len(node)] == node]
            if len(node) == rows.depth:
                return node + (ch.token(rows.p(node)),)
    return run


def exact_model(vocab, depth, alpha, seed):
    return dirichlet_instance(vocab, depth, alpha, seed=seed)


@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 0), (2, 2, 3, 1), (3, 2, 2, 2),
                                                    (2, 3, 2, 3), (2, 2, 4, 5)])
def test_law_equals_independent_tree_walk(vocab, depth, paths, seed):
    instance = exact_model(vocab, depth, 0.7, seed)
    model = instance.model(exact=True)
    walk = enumerate_outcomes(extended_walk(Rows(instance), paths))
    enumerated = exact_result(model, "bv_extended_rrs", paths, enumeration="ordered")
    assert law_blocks(enumerated.emit, vocab) == {k: v for k, v in walk.items() if v}
    structured = extended_bv_structured(model, paths, "specinfer")
    assert (structured == enumerated.emit).all()


# --- losslessness, structure = enumeration, floor: random rational instances ------------

@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=rational_instances(), paths=st.integers(1, 3),
       fallback=st.sampled_from(["specinfer", "optimal", "rrsw", "khisti"]))
def test_lossless_exactly_and_structure_equals_enumeration(instance, paths, fallback):
    model = instance.model(exact=True)
    result = exact_result(model, lambda tree: extended_bv_law(tree, fallback=fallback), paths,
                          enumeration="ordered")
    assert result.total_variation_exact == 0
    assert (extended_bv_structured(model, paths, fallback) == result.emit).all()
    assert result.block_efficiency >= exact_result(model, "bv", paths).block_efficiency


def test_structured_law_float_matches_rational():
    instance = exact_model(3, 3, 0.5, 4)
    exact = extended_bv_structured(instance.model(exact=True), 3)
    floats = extended_bv_structured(instance.model(exact=False), 3)
    assert np.abs(floats - np.vectorize(float)(exact)).max() < 1e-12


def test_torch_law_float32_matches_float64():
    torch = pytest.importorskip("torch")
    from speclp.verifiers.exact import draft_tree
    from speclp.verifiers.tree import all_paths

    model = exact_model(3, 2, 0.5, 6).model(exact=False)
    tokens = np.stack([all_paths(3, 2)[[0, 4, 4]], all_paths(3, 2)[[8, 3, 1]]])  # [B=2, K=3, L]
    tree = draft_tree(model, tokens)
    law64 = extended_bv_law(tree)
    tree32 = type(tree)(tree.tokens, tree.target_rows.to(torch.float32),
                        tree.draft_rows.to(torch.float32))
    law32 = extended_bv_law(tree32)
    assert torch.allclose(law32.stop.double(), law64.stop, atol=1e-6)
    assert torch.allclose(law64.stop.sum((1, 2)), torch.ones(2, dtype=torch.float64))


# --- the floor: exhaustive grid and the adversarial instances ----------------------------

HALVES = [(Fraction(1), Fraction(0)), (Fraction(1, 2), Fraction(1, 2)), (Fraction(0), Fraction(1))]


def test_never_below_bv_on_every_halves_instance_v2_l2_k2():
    """Every instance with rows in {0, 1/2, 1} at V = 2, L = 2 (the 3 target and 3 draft rows
    of depth < L; depth-L rows give the bonus token only and do not change the value):
    3^6 = 729 instances, exact, both steps."""
    below, strictly_above = 0, 0
    leaf = [HALVES[1]] * 4
    for rows in product(range(3), repeat=6):
        target = np.array([HALVES[r] for r in rows[:3]] + leaf, dtype=object)
        draft = np.array([HALVES[r] for r in rows[3:]] + leaf, dtype=object)
        model = from_rows(target, draft, 2).model(exact=True)
        bv = exact_result(model, "bv", 2).block_efficiency
        for step in ("optimal", "specinfer"):
            value = block_efficiency_from_emit(model, extended_bv_structured(model, 2, step))
            below += value < bv
            strictly_above += value > bv
    assert below == 0
    assert strictly_above > 0  # the floor is not an identity


def _hit_model(record):
    rows = [np.array([[Fraction(int(w), sum(r)) for w in r] for r in record[key]], dtype=object)
            for key in ("target_weights", "draft_weights")]
    return from_rows(rows[0], rows[1], record["depth"]).model(exact=True)


def test_never_below_bv_on_recorded_adversarial_hits():
    """The instances of benchmarks/nodeopt_adversarial.py where nodeopt is below BV: every one
    in float64 (margin >= -1e-12), the first of every (rule, shape) group in exact rationals."""
    records = [json.loads(line) for line in HITS.read_text().splitlines() if line.strip()]
    assert len(records) >= 100
    groups = set()
    for record in records:
        model = _hit_model(record)
        paths = record["paths"]
        floats = model.to_float()
        margin = (block_efficiency_from_emit(floats, extended_bv_structured(floats, paths))
                  - exact_result(floats, "bv", paths).block_efficiency)
        assert margin >= -1e-12, record
        group = (record["rule"], record["vocab"], record["depth"], paths)
        if group not in groups:
            groups.add(group)
            value = block_efficiency_from_emit(model, extended_bv_structured(model, paths))
            assert value >= exact_result(model, "bv", paths).block_efficiency, record
    assert len(groups) >= 15


def test_issue_counterexample_instances_above_bv():
    """nodeopt's two exact counterexamples of the issue: extended BV is at least BV."""
    f = Fraction
    target = np.array([[f(1, 20), f(17, 20), f(1, 10)], [f(9, 10), f(1, 20), f(1, 20)],
                       [f(0), f(0), f(1)], [f(1, 10), f(3, 10), f(3, 5)]]
                      + [[f(1, 3)] * 3] * 9, dtype=object)
    draft = np.array([[f(1, 10), f(9, 10), f(0)], [f(1, 2), f(1, 2), f(0)], [f(1), f(0), f(0)],
                      [f(9, 10), f(0), f(1, 10)]] + [[f(1, 3)] * 3] * 9, dtype=object)
    model = from_rows(target, draft, 2).model(exact=True)
    value = exact_result(model, "bv_extended", 3).block_efficiency
    assert value >= f(779, 400)  # BV = the optimum there (THEORY.md 4b)
    assert exact_result(model, "nodeopt", 3).block_efficiency == f(170329, 88000)


# --- registration ------------------------------------------------------------------------

def test_registered_and_compared():
    for name, step in (("bv_extended", "optimal"), ("bv_extended_rrs", "specinfer")):
        spec = get_verifier(name)
        assert spec.lossless and spec.multipath and spec.draft_sampling == ("iid",)
        assert spec.options == {"fallback": step}
        assert name in compared_verifiers()


def test_unknown_fallback_is_refused_by_name():
    model = exact_model(2, 1, 1.0, 0).model(exact=True)
    with pytest.raises(ValueError, match="fallback"):
        extended_bv_structured(model, 2, fallback="nope")


def test_total_variation_helper_agrees():
    model = exact_model(2, 2, 1.0, 9).model(exact=True)
    emit = extended_bv_structured(model, 2)
    reference = exact_result(model, "bv", 2)  # lossless: same continued law as BV's
    from speclp.verifiers.exact import continued_law

    assert exact_total_variation(continued_law(model, emit), continued_law(model, reference.emit)) == 0


@pytest.mark.parametrize("verifier", ["bv_extended", "bv_extended_rrs"])
def test_no_host_synchronisation_inside_a_step(verifier):
    """The counter of tests/test_devices.py (item, tolist, bool, ... on tensors) reads 0 in a
    step on a float32 tree above the optimal step's support (pooled cells), shared prefixes
    included; the law sums to 1."""
    torch = pytest.importorskip("torch")
    from speclp.verifiers.law import sample_block
    from speclp.verifiers.registry import block_law
    from test_devices import _big_tree, counted_syncs

    tree = _big_tree()
    block_law(verifier, tree)  # first call outside: lazy imports
    with counted_syncs() as calls:
        law = block_law(verifier, tree)
    assert calls["count"] == 0, calls["where"]
    path, accepted, _ = sample_block(law, torch.Generator().manual_seed(1))
    assert law.stop[0, int(path[0]), int(accepted[0])] > 0
    assert abs(float(law.joint().double().sum()) - 1) <= 1e-4


def test_below_probe_reproduces_the_recursion_and_stays_lossless():
    """The design-space probe (below = a registered verifier on the subtree below the first
    fallback, run through exact_result): with extended BV itself below it equals the recursion
    exactly; with nodeopt below it is lossless (TV exactly 0) and still at least BV."""
    from speclp.verifiers.exact import continued_law

    model = exact_model(2, 3, 0.6, 11).model(exact=True)
    recursion = extended_bv_structured(model, 3, "specinfer")
    def run(name):
        return lambda submodel, m: exact_result(submodel, name, m).emit

    assert (extended_bv_structured(model, 3, "specinfer", below=run("bv_extended_rrs")) == recursion).all()
    probe = extended_bv_structured(model, 3, "specinfer", below=run("nodeopt"))
    bv = exact_result(model, "bv", 3)
    assert exact_total_variation(continued_law(model, probe), continued_law(model, bv.emit)) == 0
    assert block_efficiency_from_emit(model, probe) >= bv.block_efficiency


@pytest.mark.parametrize("fallback", ["optimal", "specinfer", "rrsw"])
@pytest.mark.parametrize("paths", [2, 3, 4])
def test_torch_steps_match_the_exact_law_on_the_same_trees(fallback, paths):
    """The torch law (its own step code: optimal_step_rule's cell-level pick, the in-place
    recursive rejection) against the rational law of the same drafted trees (the generic node
    rules on exact rows), every tree of K paths drawn from a fixed pool that makes shared
    prefixes, repeated paths and splits at every depth frequent (fallback nodes at every depth,
    and several per depth at K = 4)."""
    pytest.importorskip("torch")
    from speclp.verifiers.exact import draft_tree
    from speclp.verifiers.tree import all_paths

    instance = exact_model(3, 3, 0.4, 21)
    pool = all_paths(3, 3)[[0, 1, 3, 4, 9, 13, 26]]  # shared prefixes of lengths 0..2
    rng = np.random.default_rng(paths)
    tokens = pool[rng.integers(0, len(pool), size=(24, paths))]  # [B, K, L]
    exact = extended_bv_law(draft_tree(instance.model(exact=True), tokens), fallback=fallback)
    floats = extended_bv_law(draft_tree(instance.model(exact=False), tokens), fallback=fallback)
    stop = np.vectorize(float)(exact.stop)
    assert np.abs(floats.stop.numpy() - stop).max() < 1e-12
    joint = np.vectorize(float)(exact.stop[..., None] * exact.correction)
    assert np.abs(floats.joint().numpy() - joint).max() < 1e-12
    assert abs(stop.sum(axis=(1, 2)) - 1).max() < 1e-12


# --- the ceiling of the family (docs/theory.md Proposition 19.5) --------------------------

@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 2, 30), (3, 2, 3, 31), (2, 3, 3, 32)])
def test_family_ceiling_bounds_every_member_exactly(vocab, depth, paths, seed):
    """In rationals: the ceiling is at least the value of extended BV with every step and with
    nodeopt below the first fallback (members of the family), and at least BV's."""
    from speclp.verifiers.bv_extended import family_ceiling

    model = exact_model(vocab, depth, 0.7, seed).model(exact=True)
    ceiling = family_ceiling(model, paths)
    members = [extended_bv_structured(model, paths, step) for step in ("optimal", "specinfer", "rrsw")]
    members.append(extended_bv_structured(
        model, paths, "specinfer", below=lambda sub, m: exact_result(sub, "nodeopt", m).emit))
    for emit in members:
        assert ceiling >= block_efficiency_from_emit(model, emit)
    assert ceiling > exact_result(model, "bv", paths).block_efficiency


@pytest.mark.parametrize("vocab,paths,seed", [(2, 2, 33), (3, 3, 34), (4, 4, 35)])
def test_family_ceiling_is_attained_at_depth_one_and_is_bv_at_one_path(vocab, paths, seed):
    """Closed cases of the bound, exactly: at L = 1 the single-step-optimal step attains it
    (a fresh start at depth L emits its bonus token: nothing is lost below), and with K = 1 no
    other path exists, so the ceiling is BV's value."""
    from speclp.verifiers.bv_extended import family_ceiling

    model = exact_model(vocab, 1, 0.6, seed).model(exact=True)
    optimal = block_efficiency_from_emit(model, extended_bv_structured(model, paths, "optimal"))
    assert family_ceiling(model, paths) == optimal
    deeper = exact_model(vocab, 2, 0.6, seed).model(exact=True)
    assert family_ceiling(deeper, 1) == exact_result(deeper, "bv", 1).block_efficiency


# --- the one-pass grid law (verifiers.grid's hook) ------------------------------------------

@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 3, 40), (2, 3, 3, 41), (3, 2, 2, 42)])
@pytest.mark.parametrize("name,fallback", [("bv_extended", "optimal"),
                                           ("bv_extended_rrs", "specinfer")])
def test_grid_averaged_over_every_drafted_tree_is_the_exact_value_of_every_cell(
        vocab, depth, paths, seed, name, fallback):
    """The grid law on every ordered tuple of K drafted paths (rational rows), weighted by the
    tuple's draft probability, gives at cell (K', L') the exact E[tau + 1] of K' i.i.d. paths
    of depth L': the structured recursion (extended_bv_structured, checked against the tree
    walk above) on the instance cut to depth L'."""
    from speclp.decode.scoring import score_cells
    from speclp.verifiers.exact import draft_tree
    from speclp.verifiers.grid import grid_values
    from speclp.verifiers.tree import TreeModel, all_paths, prefix_node_indices

    model = exact_model(vocab, depth, 0.6, seed).model(exact=True)
    singles = all_paths(vocab, depth)  # [P, L]
    choice = np.array(list(product(range(len(singles)), repeat=paths)))  # [C, K]
    tokens = singles[choice]  # [C, K, L]
    nodes = prefix_node_indices(tokens, vocab)  # [C, K, L+1]
    chance = np.ones(len(tokens), dtype=object)
    for k in range(paths):
        for i in range(depth):
            chance = chance * model.draft[nodes[:, k, i], tokens[:, k, i]]
    cells = score_cells(paths, depth)
    grid = grid_values(name, draft_tree(model, tokens), cells)
    assert set(grid) == set(cells)
    for cell_paths, cell_depth in cells:
        count = num_nodes(vocab, cell_depth)
        cut = TreeModel(model.target[:count], model.draft[:count], cell_depth)
        expected = block_efficiency_from_emit(cut, extended_bv_structured(cut, cell_paths, fallback))
        assert (chance * grid[(cell_paths, cell_depth)]).sum() == expected, (cell_paths, cell_depth)


def test_grid_equals_the_per_cell_law_on_four_paths_with_ties_zeros_and_repeats():
    """K = 4 (two fallback slots per depth) and K = 5, float64 to 1e-12 and rationals exactly,
    on hypothesis trees of tests/test_grid.py (zeros and ties in the rows, q = p rows, repeated
    paths)."""
    import torch
    from speclp.decode.scoring import cut_tree, score_cells
    from speclp.verifiers.grid import grid_values
    from speclp.verifiers.law import DraftTree
    from speclp.verifiers.registry import block_law
    from test_grid import _floats, trees

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(trees(max_vocab=3, max_paths=5, max_depth=3), st.sampled_from(["bv_extended",
                                                                          "bv_extended_rrs"]))
    def check(drawn, name):
        for tree in (_floats(*drawn), DraftTree(*drawn)):
            cells = score_cells(tree.paths, tree.depth)
            grid = grid_values(name, tree, cells)
            for cell in cells:
                expected = block_law(name, cut_tree(tree, *cell)).block_efficiency()
                if isinstance(expected, torch.Tensor):
                    assert torch.allclose(grid[cell], expected, rtol=0, atol=1e-12), cell
                else:
                    assert list(grid[cell]) == list(expected), cell

    check()


def test_grid_refuses_cells_outside_the_tree():
    from speclp.verifiers.bv_extended import extended_bv_grid
    from speclp.verifiers.exact import draft_tree
    from speclp.verifiers.tree import all_paths

    model = exact_model(2, 2, 0.5, 7).model(exact=True)
    tree = draft_tree(model, np.stack([all_paths(2, 2)[[0, 3]]]))
    with pytest.raises(ValueError, match="K'"):
        extended_bv_grid(tree, [(3, 1)])
    with pytest.raises(ValueError, match="L'"):
        extended_bv_grid(tree, [(2, 3)])


def test_bench_defaults_drive_with_bv_extended_rrs_and_score_it_never_below_bv(tmp_path, monkeypatch):
    """`speclp bench` with no --verifiers and no --drive (tiny pair, tests/tiny_models.py):
    the records name bv_extended_rrs as the drive and score every default verifier, nodeopt
    and bv_extended_rrs included; bv_extended_rrs's summed E[tau + 1 | tree] is at least BV's
    at every cell (Theorem 19.2 holds tree by tree; float32 scores, so up to 1e-4)."""
    import json

    import torch
    from speclp.cli import app
    from speclp.cli import bench as cli_bench
    from speclp.experiments.bench import BenchSpec, load_records
    from tiny_models import tiny_loaded_pair
    from typer.testing import CliRunner

    monkeypatch.setattr(cli_bench, "load_pair", lambda name, *a, **k: tiny_loaded_pair(name))
    before = torch.get_num_threads()
    try:
        result = CliRunner().invoke(app, [
            "bench", "--pair", "smollm2-135m,smollm2-135m", "--prompts", "humaneval:2",
            "--paths", "3", "--depth", "3", "--max-new-tokens", "6", "--batch", "2",
            "--device", "cpu", "--dtype", "fp32", "--threads", "1", "--out", str(tmp_path), "--json"])
    finally:
        torch.set_num_threads(before)
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    records = [r for r in load_records(tmp_path) if "scores" in r]
    defaults = BenchSpec()
    assert defaults.drive == "bv_extended_rrs" and {"nodeopt", "bv_extended_rrs"} <= set(defaults.verifiers)
    assert records and all(r["drive"] == "bv_extended_rrs" for r in records)
    for record in records:
        assert record["scored"] == sorted(defaults.verifiers)
        assert record["scores"]["bv_extended_rrs"] >= record["scores"]["bv"] - 1e-4
        assert len(record["grid"]) == 9  # every (K', L') <= (3, 3)
        for cell, scores in record["grid"].items():
            assert scores["bv_extended_rrs"] >= scores["bv"] - 1e-4, (cell, scores)
