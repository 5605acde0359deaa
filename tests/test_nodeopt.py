"""The single-step optimum as a selection rule (verifiers.single_step) and the nodeopt verifier.

Expected values are derived independently of the code under test: the optimum by brute force
over every token set (docs/theory.md sections 8.1, 8.3 state it over ratio prefixes), the selection
polytope by brute force over every set, the laws by enumerating every draft tuple through
the rule's own selection step, the concave majorant by brute force over chords, and the
block efficiency by the closed form of BV with the selected path's law (docs/theory.md sections 3.3, 12.3).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from speclp.cli import app
from speclp.decode.engine import EngineConfig, SpeculativeEngine
from speclp.lp import optimum
from speclp.lp.closed_form import one_step_optimum
from speclp.lp.instance import dirichlet_instance, from_rows, ties_instance
from speclp.proofs.audit import audit, audit_sampler
from speclp.verifiers.exact import exact_result
from speclp.verifiers.law import DraftTree
from speclp.verifiers.nodeopt import nodeopt_law
from speclp.verifiers.registry import block_law
from speclp.verifiers.single_step import (
    capacity,
    closer_to_draft,
    nested_partitions,
    ratio_bucket,
    ratio_cells,
    single_step_optimum,
    threshold_optimum,
)
from speclp.verifiers.tree import node_index, num_nodes
from typer.testing import CliRunner

F = Fraction


# ---------------------------------------------------------------------------
# strategies and brute-force references
# ---------------------------------------------------------------------------

@st.composite
def node_rows(draw, max_vocab: int = 5, max_paths: int = 4):
    """(a, q, n): rational rows (zeros allowed), a possibly a sub-probability."""
    vocab = draw(st.integers(2, max_vocab))
    paths = draw(st.integers(1, max_paths))

    def row() -> list[Fraction]:
        weights = draw(st.lists(st.integers(0, 6), min_size=vocab, max_size=vocab))
        if sum(weights) == 0:
            weights[draw(st.integers(0, vocab - 1))] = 1
        return [F(w, sum(weights)) for w in weights]

    q = row()
    kind = draw(st.sampled_from(["independent", "equal", "permuted"]))
    a = row() if kind == "independent" else list(q)
    if kind == "permuted":  # many equal ratios
        a = [a[i] for i in draw(st.permutations(range(vocab)))]
    scale = draw(st.sampled_from([F(1), F(1), F(3, 4), F(1, 3)]))
    return [scale * x for x in a], q, paths


def as_rows(*rows: list[Fraction]) -> list[np.ndarray]:
    return [np.array([r], dtype=object) for r in rows]


def optimum_over_all_sets(a, q, n) -> Fraction:
    vocab = len(a)
    return min(sum((a[x] for x in h), F(0)) + 1 - sum((q[x] for x in h), F(0)) ** n
               for m in range(vocab + 1) for h in itertools.combinations(range(vocab), m))


def in_selection_polytope(r, q, n) -> bool:
    vocab = len(r)
    if sum(r) != 1 or min(r) < 0:
        return False
    return all(sum(r[x] for x in s) <= 1 - (1 - sum(q[x] for x in s)) ** n
               for m in range(1, vocab + 1) for s in itertools.combinations(range(vocab), m))


def enumerated_laws(rule, q, n):
    """(law [V], count law [n+1][V]) of the rule, by enumerating every draw tuple and asking
    the rule's selection step (not its closed-form law)."""
    vocab = len(q)
    law = [F(0)] * vocab
    counts = [[F(0)] * vocab for _ in range(n + 1)]
    for draws in itertools.product(range(vocab), repeat=n):
        weight = math.prod((q[x] for x in draws), start=F(1))
        if weight == 0:
            continue
        chosen = rule.select(np.array([draws]), np.ones((1, n), dtype=bool))[0]
        assert sum(chosen) == 1
        for j, x in enumerate(draws):
            law[x] += weight * chosen[j]
            counts[draws.count(x)][x] += weight * chosen[j]
    return law, counts


# ---------------------------------------------------------------------------
# the single-step optimum and the nested-partition rule
# ---------------------------------------------------------------------------

@settings(max_examples=120, deadline=None)
@given(node_rows())
def test_closed_form_is_the_minimum_over_every_set(rows):
    a, q, n = rows
    value, low = single_step_optimum(*as_rows(a, q), n)
    assert value[0] == optimum_over_all_sets(a, q, n)
    low_set = [x for x in range(len(a)) if low[0, x]]
    assert sum((a[x] for x in low_set), F(0)) + 1 - sum((q[x] for x in low_set), F(0)) ** n \
        == value[0]


@settings(max_examples=120, deadline=None)
@given(node_rows())
def test_rule_law_is_reachable_and_attains_the_optimum(rows):
    a, q, n = rows
    rule = nested_partitions(*as_rows(a, q), n)
    r = list(rule.law()[0])
    assert in_selection_polytope(r, q, n)
    assert sum(min(x, y) for x, y in zip(a, r, strict=True)) == optimum_over_all_sets(a, q, n)


@settings(max_examples=60, deadline=None)
@given(node_rows(max_vocab=4, max_paths=3))
def test_rule_law_and_count_law_are_those_of_its_selection(rows):
    a, q, n = rows
    rule = nested_partitions(*as_rows(a, q), n)
    law, counts = enumerated_laws(rule, q, n)
    assert law == list(rule.law()[0])
    for y in range(len(q)):
        rho = rule.count_law(np.array([y]))[0]
        assert list(rho) == [counts[m][y] for m in range(n + 1)]


def triple_times(mass, height, cap) -> list[Fraction]:
    """theta_b = min over i < b < k with x_i < x_b < x_k of bend(A)/bend(G), clamped to [0, 1];
    1 at x = 0, at the last boundary and where no triple exists (module docstring of
    verifiers.single_step), by brute force over all triples."""
    points = len(mass)
    out = []
    for b in range(points):
        times = [F(1)]
        for i in range(b):
            for k in range(b + 1, points):
                if mass[i] < mass[b] < mass[k]:
                    span, left, right = mass[k] - mass[i], mass[k] - mass[b], mass[b] - mass[i]
                    bend_a = height[b] * span - height[i] * left - height[k] * right
                    bend_g = cap[b] * span - cap[i] * left - cap[k] * right
                    times.append(bend_a / bend_g)
        value = min(F(1), max(F(0), min(times)))
        out.append(F(1) if mass[b] == 0 or b == points - 1 else value)
    return out


@settings(max_examples=120, deadline=None)
@given(node_rows(max_vocab=6), st.sampled_from([None, 1, 2, 3]), st.integers(0, 2))
def test_kinetic_boundary_times_equal_the_triple_formula(rows, support, singletons):
    a, q, n = rows
    if n == 1:
        return
    cells = ratio_cells(*as_rows(a, q), support=support, singletons=singletons)
    rule = nested_partitions(*as_rows(a, q), n, cells=cells)
    assert list(rule.theta[0]) == triple_times(rule.mass[0], rule.target[0], rule.capacity[0])


@settings(max_examples=80, deadline=None)
@given(node_rows())
def test_cumulative_law_is_target_minus_concave_majorant(rows):
    """R_b = A_b - LCM(A - G)_b at every boundary after the never-drafted tokens (q = 0, which
    the rule returns with probability 0; module docstring), majorant by brute force."""
    a, q, n = rows
    if n == 1:
        return
    rule = nested_partitions(*as_rows(a, q), n)
    x, height, cap = rule.mass[0], rule.target[0], rule.capacity[0]
    start = sum(1 for v in q if v == 0)  # boundaries 0..start sit at x = 0
    e = [h - g for h, g in zip(height, cap, strict=True)]
    cumulative = np.concatenate([[F(0)], np.cumsum(rule.rate[0] * rule.cells.width[0])])
    assert all(v == 0 for v in cumulative[: start + 1])
    points = range(start, len(x))
    for b in points:
        chords = [e[b]] + [e[i] + (e[k] - e[i]) * (x[b] - x[i]) / (x[k] - x[i])
                           for i in points for k in points if x[i] <= x[b] <= x[k] and x[i] < x[k]]
        assert cumulative[b] == height[b] - max(chords)


@settings(max_examples=60, deadline=None)
@given(node_rows(max_vocab=6, max_paths=3), st.integers(1, 5), st.integers(0, 3))
def test_pooled_layout_is_reachable_and_below_the_optimum(rows, support, singletons):
    """V > support: singletons plus ratio buckets (tokens of one bucket returned together)."""
    a, q, n = rows
    cells = ratio_cells(*as_rows(a, q), support=support, singletons=singletons)
    rule = nested_partitions(*as_rows(a, q), n, cells=cells)
    r = list(rule.law()[0])
    assert in_selection_polytope(r, q, n)
    assert sum(min(x, y) for x, y in zip(a, r, strict=True)) <= optimum_over_all_sets(a, q, n)
    if support >= len(a):
        assert r == list(nested_partitions(*as_rows(a, q), n).law()[0])
    if len(a) ** n <= 216:
        law, _ = enumerated_laws(rule, q, n)
        assert law == r


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_torch_rows_match_exact_rows(dtype, tolerance):
    rng = np.random.default_rng(3)
    for _ in range(20):
        vocab, n = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        a = [F(int(v), 97) for v in rng.multinomial(97, rng.dirichlet([0.5] * vocab))]
        q = [F(int(v), 89) for v in rng.multinomial(89, rng.dirichlet([0.5] * vocab))]
        exact = nested_partitions(*as_rows(a, q), n)
        rows = [torch.tensor([[float(v) for v in r]], dtype=dtype) for r in (a, q)]
        floats = nested_partitions(*rows, n)
        expected = np.array([float(v) for v in exact.law()[0]])
        assert np.abs(floats.law()[0].double().numpy() - expected).max() <= tolerance
        token = torch.tensor([int(np.argmax([float(v) for v in q]))])
        counts = np.array([float(v) for v in exact.count_law(token.numpy())[0]])
        assert np.abs(floats.count_law(token)[0].double().numpy() - counts).max() <= tolerance


def test_ratio_buckets_are_half_octaves_on_every_backend():
    a = [1.0, 0.5, 0.3, 0.0, 1e-9, 0.2, 0.7]
    q = [0.25, 0.5, 0.2, 0.1, 0.3, 0.0, 0.5]
    # ratios 4, 1, 1.5, 0, 3.3e-9, inf (q = 0), 1.4: bucket 13 - floor(2 log2 r) with the half
    # octave split at 1.5 2^e (float32 leading mantissa bit), clamped to 0..25
    expected = [9, 13, 12, 25, 25, 0, 13]
    assert ratio_bucket(torch.tensor([a]), torch.tensor([q]), 26)[0].tolist() == expected
    assert ratio_bucket(np.array([a]), np.array([q]), 26)[0].tolist() == expected
    exact = [np.array([[F(x).limit_denominator(10**12) for x in row]], dtype=object)
             for row in (a, q)]
    assert ratio_bucket(*exact, 26)[0].tolist() == expected


def test_single_step_anchor_from_theory():
    """docs/theory.md sections 8.3, 10.11: p = (.5, .3, .2), q = (.2, .3, .5), K = 2 i.i.d.: optimal .86."""
    a, q = [F(1, 2), F(3, 10), F(1, 5)], [F(1, 5), F(3, 10), F(1, 2)]
    value, _ = single_step_optimum(*as_rows(a, q), 2)
    assert value[0] == F(86, 100)
    r = nested_partitions(*as_rows(a, q), 2).law()[0]
    assert sum(min(x, y) for x, y in zip(a, r, strict=True)) == F(86, 100)


def test_capacity_is_the_probability_of_some_draw():
    assert capacity(F(1, 3), 2) == 1 - F(2, 3) ** 2


# ---------------------------------------------------------------------------
# the nodeopt verifier
# ---------------------------------------------------------------------------

def _rational_instance(vocab: int, depth: int, seed: int):
    if seed % 3 == 0:
        return ties_instance(vocab, depth, seed=seed)
    return dirichlet_instance(vocab, depth, alpha=[0.3, 1.0][seed % 2], seed=seed, denominator=24)


@pytest.mark.parametrize("vocab,paths", [(2, 1), (2, 2), (2, 3), (2, 4), (3, 2), (3, 3), (4, 2),
                                         (4, 3)])
def test_nodeopt_at_depth_one_is_the_certified_optimum(vocab, paths):
    """L = 1: block efficiency exactly the certified full-LP optimum (and 1 + alpha*)."""
    for seed in range(3):
        inst = _rational_instance(vocab, 1, seed)
        model = inst.model(exact=True)
        result = exact_result(model, "nodeopt", paths=paths)
        assert result.total_variation == 0
        record = optimum(model, paths=paths, method="full")  # the enumerated LP, certified
        assert record.certified, record.certificate
        assert result.block_efficiency == record.exact_value, (inst.name, paths)
        alpha, _ = single_step_optimum(model.target[:1], model.draft[:1], paths)
        assert result.block_efficiency == 1 + alpha[0]


@pytest.mark.parametrize("vocab,depth,paths", [(2, 2, 2), (2, 3, 2), (3, 2, 2), (2, 2, 3)])
def test_nodeopt_lossless_exact_rationals(vocab, depth, paths):
    for seed in range(2):
        inst = _rational_instance(vocab, depth, seed)
        result = exact_result(inst.model(exact=True), "nodeopt", paths=paths)
        assert result.emit.sum() == 1
        assert result.total_variation == 0


def class_value(model, paths: int) -> Fraction:
    """1 + sum_z beta(z), beta(z) = min(r(z), p(t|u) beta(u)) (BV with the selected path's law
    r, docs/theory.md sections 3.3, 12.3), r built node by node from the rule's law and count law with the
    law of N tracked along the path (module docstring of verifiers.nodeopt)."""
    vocab, depth = model.vocab_size, model.depth
    total = F(1)
    stack = [((), {paths: F(1)}, F(1), F(1))]  # (node, law of N, r(node), beta(node))
    while stack:
        node, counts, reach, beta = stack.pop()
        if len(node) == depth:
            continue
        index = node_index(node, vocab)
        p, q = model.target[index], model.draft[index]
        law = [F(0)] * vocab
        count_law = {}
        for n, weight in counts.items():
            rule = nested_partitions(*as_rows(list(p), list(q)), n)
            law = [x + weight * y for x, y in zip(law, rule.law()[0], strict=True)]
            for x in range(vocab):
                for m, value in enumerate(rule.count_law(np.array([x]))[0]):
                    count_law[x, m] = count_law.get((x, m), F(0)) + weight * value
        for x in range(vocab):
            if law[x] == 0:
                continue
            child_beta = min(reach * law[x], p[x] * beta)
            total += child_beta
            child_counts = {m: count_law[x, m] / law[x] for m in range(1, paths + 1)
                            if count_law.get((x, m), 0) != 0}
            stack.append((node + (x,), child_counts, reach * law[x], child_beta))
    return total


@pytest.mark.parametrize("vocab,depth,paths", [(2, 2, 2), (2, 2, 3), (3, 2, 2), (2, 3, 2)])
def test_nodeopt_law_equals_bv_with_its_path_law(vocab, depth, paths):
    for seed in (1, 2):
        model = _rational_instance(vocab, depth, seed).model(exact=True)
        assert exact_result(model, "nodeopt", paths=paths).block_efficiency == \
            class_value(model, paths)


def _equal_rows(vocab: int, depth: int):
    rows = np.empty((num_nodes(vocab, depth), vocab), dtype=object)
    rows[:] = [F(1, vocab)] * vocab
    return from_rows(rows, rows.copy(), depth)


@pytest.mark.parametrize("vocab,depth,paths", [(2, 1, 2), (2, 1, 3), (3, 2, 2), (3, 2, 3)])
def test_nodeopt_keeps_every_token_when_target_equals_draft(vocab, depth, paths):
    """p = q: every drafted token is accepted (BV and the optimum give L + 1; GBV does not)."""
    result = exact_result(_equal_rows(vocab, depth).model(exact=True), "nodeopt", paths=paths)
    assert result.block_efficiency == depth + 1


def _prefix_rows(prefix: tuple[int, ...], vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and draft rows of a node, a deterministic function of the prefix."""
    generator = torch.Generator().manual_seed(hash(prefix) % (2**31))
    logits = 2 * torch.randn(vocab, generator=generator)
    noise = torch.randn(vocab, generator=generator)
    return torch.softmax(logits, -1), torch.softmax(logits + noise, -1)


def test_nodeopt_runs_on_large_vocabularies_in_float32():
    """V > support (pooled tail runs), float32: a law of total mass 1 on a valid drafted tree."""

    batch, paths, depth, vocab = 2, 3, 3, 500
    generator = torch.Generator().manual_seed(0)
    tokens = torch.zeros(batch, paths, depth, dtype=torch.long)
    target = torch.zeros(batch, paths, depth + 1, vocab)
    draft = torch.zeros(batch, paths, depth, vocab)
    for b in range(batch):
        for k in range(paths):
            prefix = (b,)
            for i in range(depth + 1):
                p, q = _prefix_rows(prefix, vocab)
                target[b, k, i] = p
                if i < depth:
                    draft[b, k, i] = q
                    tokens[b, k, i] = torch.multinomial(q, 1, generator=generator)[0]
                    prefix = prefix + (int(tokens[b, k, i]),)
    tokens[:, 1] = tokens[:, 0]  # two identical paths: shared nodes all the way down
    target[:, 1], draft[:, 1] = target[:, 0], draft[:, 0]
    law = block_law("nodeopt", DraftTree(tokens, target, draft))
    assert law.stop.dtype == torch.float32
    mass = law.joint().double().sum((1, 2, 3))
    assert torch.allclose(mass, torch.ones(batch, dtype=torch.float64), atol=1e-5)
    assert (law.stop >= -1e-7).all()


# ---------------------------------------------------------------------------
# L = 1: the optimum as a verifier (issue 12, part 1): random rational instances, audit
# ---------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(node_rows(max_vocab=4, max_paths=3))
def test_depth_one_verifier_is_the_certified_optimum_on_random_rational_rows(rows):
    """nodeopt at L = 1 on random rational rows (zeros, equal rows, permuted ratios, any K):
    exact TV 0 and exact block efficiency = the certified enumerated LP (independent of the
    threshold code). i.i.d. drafting only: the nested-partition law assumes i.i.d. children
    (without replacement the hitting function is not a function of q(S); the reference
    verifier of proofs/reference.py covers that scheme, tests/test_reference.py)."""
    a, q, paths = rows
    total = sum(a, F(0))
    target = [x / total for x in a]  # a probability row
    vocab = len(q)
    uniform = [F(1, vocab)] * vocab  # rows below the leaves (unused at L = 1)
    model = from_rows(np.array([target] + [uniform] * vocab, dtype=object),
                      np.array([q] + [uniform] * vocab, dtype=object), 1).model(exact=True)
    result = exact_result(model, "nodeopt", paths=paths)
    assert result.total_variation == 0
    record = optimum(model, paths=paths, method="full")
    assert record.certified, record.certificate
    assert result.block_efficiency == record.exact_value


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("vocab,paths", [(3, 3), (5, 2), (6, 3)])
def test_depth_one_verifier_passes_the_exact_audit(vocab, paths, ties):
    report = audit("nodeopt", paths=paths, vocab=vocab, depth=1, trials=4, ties=ties, seed=3,
                   exact=True)
    assert report["max_tv"] == 0 and report["passed"], report["worst_instance"]


def test_depth_one_verifier_passes_the_sampler_audit():
    """Sampling draws from the law: the statistical audit of the sampled verifier (chi-square
    against the target, block efficiency interval against the certified optimum)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import law_samplers  # lazy: examples/ is put on sys.path just above

    report = audit_sampler(law_samplers.sampler_for("nodeopt"), paths=3, vocab=4, depth=1,
                           trials=1, runs=20_000, seed=2, name="nodeopt")
    assert report["passed"], report["failures"]
    (inst,) = report["instances"]
    assert inst["optimum_certified"] and not inst["above_optimum"]
    assert inst["malformed"] == 0 and inst["impossible_outcomes"] == 0


def test_depth_one_cli_audit_exits_zero():

    result = CliRunner().invoke(app, ["audit", "--verifier", "nodeopt", "--paths", "3", "--vocab",
                                      "4", "--depth", "1", "--trials", "5", "--exact", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] and out["max_tv"] == 0


def test_nodeopt_drives_the_engine_and_its_time_is_in_the_split():
    """Real decoding (tiny random LMs, V = 64): nodeopt is picked up from the registry, the
    verifier's time is its own column of the draft / target / verifier / other split, and the
    split adds up to the decoding time (losslessness in the engine: tests/test_engine.py runs
    every registered verifier, nodeopt included)."""
    from test_engine import tiny_model  # lazy: a sibling test module (its fixtures)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target, draft = tiny_model(20, vocab=64), tiny_model(21, vocab=64, family="llama")
        config = EngineConfig(paths=3, depth=3, max_new_tokens=6, eos_token_ids=())
        out = SpeculativeEngine(target, draft, "nodeopt", config).generate(
            [[1, 2, 3]] * 2, generator=torch.Generator().manual_seed(0))
    finally:
        torch.set_num_threads(threads)
    m = out.metrics
    assert all(len(t) == 6 for t in out.tokens)
    assert m["verifier_s"] > 0 and m["draft_s"] > 0 and m["target_s"] > 0
    split = m["draft_s"] + m["target_s"] + m["verifier_s"] + m["other_s"]
    assert abs(split - m["decode_s"]) <= 0.05 * m["decode_s"] + 1e-3, (split, m["decode_s"])
    assert 1 <= m["block_efficiency"] <= config.depth + 1


@settings(max_examples=60, deadline=None)
@given(node_rows(max_vocab=6, max_paths=4))
def test_one_threshold_implementation_on_every_backend(rows):
    """threshold_optimum is the L = 1 closed form of speclp.lp (one implementation): exact
    rows give lp.closed_form's value and set; torch float64 and numpy float64 rows agree with
    the exact value to 1e-12."""

    a, q, n = rows
    total = sum(a, F(0))
    p = [x / total for x in a]
    exact_value, high, order = threshold_optimum(*as_rows(p, q), n)
    lp = one_step_optimum(np.array(p, dtype=object), np.array(q, dtype=object), n)
    assert lp.acceptance[0] == exact_value[0] == optimum_over_all_sets(p, q, n)
    assert sorted(lp.threshold_set(0).tolist()) == sorted(order[0, high[0]:].tolist())
    rows_float = [np.array([[float(x) for x in r]]) for r in (p, q)]
    for backend in (lambda r: r, torch.from_numpy):
        value, _, _ = threshold_optimum(*(backend(r) for r in rows_float), n)
        assert abs(float(value[0]) - float(exact_value[0])) <= 1e-12


# ---------------------------------------------------------------------------
# issue 20, part 0: nodeopt and BV; the other node rules (merged tail, closer to the draft)
# ---------------------------------------------------------------------------

def _model_with_rows(vocab: int, depth: int, rows: dict) -> object:
    """Exact model: uniform rows everywhere except rows[prefix] = (p, q)."""
    size = num_nodes(vocab, depth)
    target = np.empty((size, vocab), dtype=object)
    draft = np.empty((size, vocab), dtype=object)
    for i in range(size):
        target[i] = [F(1, vocab)] * vocab
        draft[i] = [F(1, vocab)] * vocab
    for prefix, (p, q) in rows.items():
        target[node_index(prefix, vocab)] = p
        draft[node_index(prefix, vocab)] = q
    return from_rows(target, draft, depth).model(exact=True)


def _nodeopt_value(model, paths: int, rule: str) -> Fraction:
    law = exact_result(model, lambda tree: nodeopt_law(tree, support=None, rule=rule), paths=paths)
    assert law.total_variation == 0
    return law.block_efficiency


def test_issue_20_counterexample_nodeopt_below_bv_exactly():
    """The exact counterexample of issue 20 (V = 3, L = 2, K = 3; rows below the depth-1 nodes
    uniform, never read by the block efficiency at L = 2 except as bonus rows): the registered
    nodeopt is 1051/88000 below BV, which equals the certified optimum; the closer-to-the-draft
    rule puts 1/10 on token 0 at the root (the draft's mass) and reaches BV."""
    rows = {(): ([F(1, 20), F(17, 20), F(1, 10)], [F(1, 10), F(9, 10), F(0)]),
            (0,): ([F(9, 10), F(1, 20), F(1, 20)], [F(1, 2), F(1, 2), F(0)]),
            (1,): ([F(0), F(0), F(1)], [F(1), F(0), F(0)]),
            (2,): ([F(1, 10), F(3, 10), F(3, 5)], [F(9, 10), F(0), F(1, 10)])}
    model = _model_with_rows(3, 2, rows)
    bv = exact_result(model, "bv", paths=3).block_efficiency
    assert bv == F(779, 400)
    assert exact_result(model, "nodeopt", paths=3).block_efficiency == F(170329, 88000)
    assert _nodeopt_value(model, 3, "nested") - bv == F(-1051, 88000)
    record = optimum(model, paths=3, method="full")
    assert record.certified and record.exact_value == bv
    assert _nodeopt_value(model, 3, "closer") == bv
    root = model.target[:1], model.draft[:1]
    assert list(closer_to_draft(*root, 3).law()[0]) == [F(1, 10), F(9, 10), F(0)]
    assert nested_partitions(*root, 3).law()[0][0] == F(3, 50)


def test_no_node_optimal_rule_is_always_above_bv():
    """docs/theory.md, Proposition 10.3: V = 2, L = 3, K = 2. Root p = (1/3, 2/3), q = (0, 1);
    node (1): p = (1/4, 3/4), q = (1/2, 1/2) (alpha* = 1 forces r = p there); node (1, 0):
    p = (0, 1), q = (2/3, 1/3); every other row uniform. BV = 3 = the certified optimum (by
    hand: 1 + 2/3 + (1/6 + 1/2) + (1/6 + 1/2)), and ANY rule attaining the single-step optimum
    at every node gives at most 3 - 1/36: here each of the three node rules gives exactly that."""
    rows = {(): ([F(1, 3), F(2, 3)], [F(0), F(1)]),
            (1,): ([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)]),
            (1, 0): ([F(0), F(1)], [F(2, 3), F(1, 3)])}
    model = _model_with_rows(2, 3, rows)
    bv = exact_result(model, "bv", paths=2).block_efficiency
    assert bv == 1 + F(2, 3) + (F(1, 6) + F(1, 2)) + (F(1, 6) + F(1, 2)) == 3
    record = optimum(model, paths=2, method="full")
    assert record.certified and record.exact_value == 3
    for rule in ("nested", "merged", "closer"):
        assert _nodeopt_value(model, 2, rule) == 3 - F(1, 36), rule


@pytest.mark.parametrize("rule", ["merged", "closer"])
@settings(max_examples=60, deadline=None)
@given(rows=node_rows(max_vocab=4, max_paths=3))
def test_other_node_rules_attain_the_optimum_and_their_law_is_their_selection(rule, rows):
    """The merged-tail rule and the closer-to-the-draft rule: reachable laws that attain the
    single-step optimum (brute force over every set), whose closed-form law and count law are
    those of their own selection step (enumerated over every draw tuple)."""
    a, q, n = rows
    if rule == "merged":
        made = nested_partitions(*as_rows(a, q), n, merge_tail=True)
    else:
        made = closer_to_draft(*as_rows(a, q), n)
    r = list(made.law()[0])
    assert in_selection_polytope(r, q, n)
    assert sum(min(x, y) for x, y in zip(a, r, strict=True)) == optimum_over_all_sets(a, q, n)
    law, counts = enumerated_laws(made, q, n)
    assert law == r
    for y in range(len(q)):
        rho = made.count_law(np.array([y]))[0]
        assert list(rho) == [counts[m][y] for m in range(n + 1)]


def test_closer_rule_keeps_the_draft_where_the_draft_is_optimal():
    """When q itself attains the single-step optimum (every drafted token has p <= q and the
    optimal high-ratio set has no draft mass), the closer rule returns q; the nested rule does
    not (it favours higher ratios)."""
    a, q = [F(1, 20), F(17, 20), F(1, 10)], [F(1, 10), F(9, 10), F(0)]
    for n in (2, 3, 4):
        assert list(closer_to_draft(*as_rows(a, q), n).law()[0]) == q
        assert list(nested_partitions(*as_rows(a, q), n).law()[0]) != q
