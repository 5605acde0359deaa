"""Draft trees, the tree LP, selection rules against brute force, reuse, real rows."""

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch
from speclp.experiments.trees import TreesSpec, run_trees
from speclp.lp import optimum
from speclp.lp.full import check_tree_nodes
from speclp.lp.instance import dirichlet_instance, from_rows
from speclp.proofs.tree_selection import (
    RULES,
    draft_ranked_tree,
    gbv_shape,
    optimal_tree_value,
    reference_value,
    reranked_tree,
    reuse_probability,
    rule_value,
    subtree_model,
    tree_accepted,
)
from speclp.verifiers.tree import node_index, node_prefix, num_nodes
from tiny_models import tiny_llama_pair


def path_probability(model, prefix):
    """p(prefix) as a product of target rows along the prefix (independent of the module)."""
    prob = Fraction(1)
    for d, token in enumerate(prefix):
        prob *= model.target[node_index(prefix[:d], model.vocab_size), token]
    return prob


def walk_accepted(model, tree, first_free=False):
    """Brute force: enumerate every target sequence of length L+1, walk down the tree.

    first_free: the first token is accepted for free and the walk continues in the tree
    `tree[t]` (a set of prefixes below t, written without t).
    """
    vocab, depth = model.vocab_size, model.depth
    total = Fraction(0)
    for seq in itertools.product(range(vocab), repeat=depth + 1):
        prob = path_probability(model, seq)
        if prob == 0:
            continue
        if first_free:
            nodes, rest, accepted = tree[seq[0]], seq[1:], 1
        else:
            nodes, rest, accepted = tree, seq, 0
        for d in range(1, len(rest) + 1):
            if tuple(rest[:d]) not in nodes:
                break
            accepted += 1
        total += prob * accepted
    return total


def prefixes(tree, vocab):
    return {node_prefix(int(n), vocab) for n in tree}


def random_prefix_closed(vocab, depth, size, rng):
    nodes = set()
    frontier = [(t,) for t in range(vocab)]
    while len(nodes) < size and frontier:
        z = frontier.pop(int(rng.integers(len(frontier))))
        nodes.add(node_index(z, vocab))
        if len(z) < depth:
            frontier += [z + (t,) for t in range(vocab)]
    return np.array(sorted(nodes))


@pytest.mark.parametrize("seed", range(6))
def test_tree_lp_optimum_is_one_plus_sum_of_target_path_probabilities(seed):
    rng = np.random.default_rng(seed)
    vocab, depth = int(rng.integers(2, 4)), int(rng.integers(1, 4))
    inst = dirichlet_instance(vocab, depth, alpha=0.7, seed=seed, denominator=12)
    model = inst.model(exact=True)
    for budget in (1, int(rng.integers(2, num_nodes(vocab, depth)))):
        for tree in (draft_ranked_tree(model, budget), random_prefix_closed(vocab, depth, budget, rng)):
            rec = optimum(inst, tree_nodes=tree)
            assert rec.certified, rec.certificate
            expected = 1 + sum(path_probability(model, node_prefix(int(n), vocab)) for n in tree)
            assert rec.exact_value == expected and Fraction(rec.exact) == expected
            assert walk_accepted(model, prefixes(tree, vocab)) == expected - 1


def test_tree_lp_refuses_a_tree_that_is_not_prefix_closed():
    with pytest.raises(ValueError, match="prefix-closed"):
        check_tree_nodes(np.array([node_index((0, 1), 2)]), 2, 2)


def test_draft_ranking_is_top_n_by_draft_probability_and_prefix_closed():
    inst = dirichlet_instance(3, 3, seed=4, denominator=10)
    model = inst.model(exact=True)
    q = {node_prefix(i, 3): 1 for i in range(1)}
    for n in range(1, num_nodes(3, 3)):
        z = node_prefix(n, 3)
        prob = Fraction(1)
        for d, t in enumerate(z):
            prob *= model.draft[node_index(z[:d], 3), t]
        q[z] = prob
    for budget in (1, 4, 9, 39):
        tree = prefixes(draft_ranked_tree(model, budget), 3)
        assert len(tree) == budget
        assert all(z[:-1] in tree or len(z) == 1 for z in tree)
        outside = [q[z] for z in q if z and z not in tree]
        if outside:
            assert min(q[z] for z in tree) >= max(outside)


def test_rerank_beats_draft_ranking_when_the_draft_misranks_the_first_token():
    # V = 2, L = 2; the draft's root row is reversed, rows below are the target's
    third, three = Fraction(1, 4), Fraction(3, 4)
    target = np.array([[three, third]] + [[Fraction(1, 2), Fraction(1, 2)]] * 6, dtype=object)
    draft = target.copy()
    draft[0] = [third, three]
    model = from_rows(target, draft, 2).model(exact=True)
    for budget in range(1, 7):
        best = max(
            walk_accepted(model, {node_prefix(n, 2) for n in subset})
            for subset in itertools.combinations(range(1, 7), budget)
            if all((s - 1) // 2 == 0 or (s - 1) // 2 in subset for s in subset)
        )
        reranked = rule_value(model, "rerank", budget).accepted
        assert reranked == best  # rerank scores are exactly p(z) here: it is the optimum
        assert optimal_tree_value(model, budget)[0] == best
    assert rule_value(model, "draft", 1).accepted == third
    assert rule_value(model, "rerank", 1).accepted == three


def test_draft_ranking_is_optimal_for_a_perfect_draft():
    inst = dirichlet_instance(3, 2, seed=2, denominator=8)
    target = inst.target_exact
    model = from_rows(target, target.copy(), 2).model(exact=True)
    nodes = range(1, num_nodes(3, 2))
    for budget in (1, 3, 5):
        best = max(walk_accepted(model, {node_prefix(n, 3) for n in subset})
                   for subset in itertools.combinations(nodes, budget)
                   if all((s - 1) // 3 == 0 or (s - 1) // 3 in subset for s in subset))
        assert rule_value(model, "draft", budget).accepted == best


@pytest.mark.parametrize("seed", range(4))
def test_target_first_matches_brute_force_walk(seed):
    inst = dirichlet_instance(3, 3, alpha=0.8, seed=10 + seed, denominator=9)
    model = inst.model(exact=True)
    for budget in (1, 3, 7):
        value = rule_value(model, "target-first", budget)
        subtrees = {}
        for t in range(3):
            # draft-ranked tree below t, built by brute force from the draft rows
            below = [z for z in (node_prefix(n, 3) for n in range(1, num_nodes(3, 3))) if z[0] == t
                     and len(z) >= 2]
            qz = {z: np.prod([model.draft[node_index(z[:d], 3), z[d]] for d in range(1, len(z))])
                  for z in below}
            chosen = sorted(below, key=lambda z: (-qz[z], node_index(z, 3)))[:budget]
            subtrees[t] = {z[1:] for z in chosen}
        assert value.accepted == walk_accepted(model, subtrees, first_free=True)
        assert value.tokens_per_round == value.accepted + 1
        assert value.extra_target_rows == 1


def test_target_first_gbv_at_one_node_is_token_level_acceptance_below_t():
    inst = dirichlet_instance(3, 2, seed=5, denominator=10)
    model = inst.model(exact=True)
    value = rule_value(model, "target-first-gbv", 1)
    assert value.shape == (1, 1)
    expected = 1 + sum(
        model.target[0, t] * (1 + sum(min(model.target[1 + t, x], model.draft[1 + t, x]) for x in range(3)))
        for t in range(3))
    assert value.tokens_per_round == expected


def test_gbv_shape_respects_budget_and_configuration_cap():
    for vocab, depth, budget in [(4, 4, 8), (3, 3, 5), (4, 4, 64), (2, 2, 1)]:
        k, sub = gbv_shape(vocab, depth, budget)
        assert k * sub <= budget and sub <= depth - 1
        assert (vocab**sub) ** k <= 5000 or k == 1


def test_reuse_probability_closed_forms():
    inst = dirichlet_instance(3, 1, seed=7, denominator=12)
    model = inst.model(exact=True)
    p, q = model.target[0], model.draft[0]
    # K = 1: a rejected token is never the correction token; BV/token-level never reuse
    assert reuse_probability(model, "bv", 1) == 0
    assert reuse_probability(model, "token", 1) == 0
    # "bv" with K = 2 verifies path 0; the root correction is path 1's token with
    # probability sum_x q(x) (p(x) - q(x))_+
    expected = sum(q[x] * max(p[x] - q[x], 0) for x in range(3))
    assert reuse_probability(model, "bv", 2) == expected


def test_every_rule_is_exact_on_rational_instances():
    model = dirichlet_instance(2, 3, seed=1, denominator=6).model(exact=True)
    for rule in RULES:
        assert isinstance(rule_value(model, rule, 3).tokens_per_round, Fraction)
    with pytest.raises(ValueError, match="unknown rule"):
        rule_value(model, "nope", 3)
    tree = reranked_tree(model, 4)
    assert tree_accepted(model, tree) <= optimal_tree_value(model, 4)[0]


# ---------------------------------------------------------------------------
# real rows on tiny random models
# ---------------------------------------------------------------------------

def tiny_pair():
    return tiny_llama_pair(vocab=40, seed=0)


@pytest.mark.parametrize("select", ["target", "mix"])
def test_tree_rows_match_plain_forward_of_every_prefix(select):
    from speclp.decode.tree_rows import tree_rows

    target, draft = tiny_pair()
    context = [3, 7, 11, 2, 9]
    rows = tree_rows(target, draft, context, 3, 2, temperature=1.0, draft_temperature=1.5, select=select)
    assert rows.tokens.shape == (13, 3)
    with torch.no_grad():
        for node in range(13):
            seq = torch.tensor([context + rows.node_tokens(node)])
            p = torch.softmax(target(input_ids=seq).logits[0, -1].double(), -1)
            q = torch.softmax(draft(input_ids=seq).logits[0, -1].double() / 1.5, -1)
            np.testing.assert_allclose(rows.target_edge[node], p[rows.tokens[node]].numpy(), atol=1e-5)
            np.testing.assert_allclose(rows.draft_edge[node], q[rows.tokens[node]].numpy(), atol=1e-5)
            score = p + q if select == "mix" else p
            assert set(rows.tokens[node].tolist()) == set(torch.topk(score, 3).indices.tolist())
    np.testing.assert_allclose(rows.target.sum(1), 1.0, atol=1e-12)
    assert np.all(rows.covered_target <= 1 + 1e-9) and np.all(rows.covered_target > 0)


def test_run_trees_is_resumable(tmp_path):
    from speclp.experiments.realgap import load_jsonl

    target, draft = tiny_pair()
    prompts = [{"id": "p0", "tokens": [1, 2, 3, 4]}]
    out = tmp_path / "trees.jsonl"
    spec = TreesSpec(budgets=[2, 4], top=2, depth=3, contexts_per_prompt=2, every=2,
                     draft_temperature=1.5)
    first = run_trees(spec, target, draft, prompts, out)
    assert first["computed"] == 2
    again = run_trees(spec, target, draft, prompts, out)
    assert again["computed"] == 0 and again["reused"] == 2
    records = load_jsonl(out)
    assert len(records) == 2
    for r in records:
        values = r["values"]["renormalised"]
        for n in ("2", "4"):
            assert values["oracle"][n] >= values["draft"][n] - 1e-12
            # renormalising over the kept tokens only raises every p(z): the oracle can only grow
            assert r["values"]["candidate_exact"]["oracle"][n] <= values["oracle"][n] + 1e-12
        wt = r["walltime"]["rerank"]["2"]
        assert wt["overlapped_s_per_token_modelled"] <= wt["sequential_s_per_token"] + 1e-12


def test_engine_reuse_counts_corrections_that_are_drafted_children(tmp_path):
    from speclp.decode.engine import EngineConfig, SpeculativeEngine
    from speclp.decode.models import make_pair, wrap_model
    from speclp.experiments.realgap import load_jsonl
    from speclp.experiments.trees import run_engine_reuse, step_reuse

    target, draft = tiny_pair()
    pair = make_pair(wrap_model(target, "t"), wrap_model(draft, "d"))
    prompts = [{"id": "p0", "tokens": [1, 2, 3]}]
    # BV on one path never emits the rejected drafted token (docs/theory.md Lemma 14.1): no reuse
    engine = SpeculativeEngine(pair, verifier="bv",
                               config=EngineConfig(paths=1, depth=3, max_new_tokens=12,
                                                   record_steps=True, eos_token_ids=()))
    result = engine.generate([[1, 2, 3]], generator=torch.Generator().manual_seed(0))
    hits, total = step_reuse(result.steps)
    assert hits == 0 and total == len(result.steps) > 0
    # a test-local (lossy) law whose correction token is always path 1's first token, a
    # drafted child of the root: every row-step counts
    from speclp.verifiers.law import REGISTRY, BlockLaw, register

    def emit_drafted_child(tree):
        stop = torch.zeros(tree.batch, tree.paths, tree.depth + 1, dtype=tree.target_rows.dtype)
        stop[:, 0, 0] = 1
        correction = torch.zeros_like(tree.target_rows)
        correction[torch.arange(tree.batch), 0, 0, tree.tokens[:, 1, 0].long()] = 1
        return BlockLaw(stop, correction)

    register("test_emit_drafted_child", "test-local", multipath=True, lossless=False)(
        emit_drafted_child)
    try:
        engine = SpeculativeEngine(pair, verifier="test_emit_drafted_child",
                                   config=EngineConfig(paths=4, depth=2, max_new_tokens=12,
                                                       record_steps=True, eos_token_ids=()))
        result = engine.generate([[1, 2, 3]], generator=torch.Generator().manual_seed(0))
    finally:
        REGISTRY.pop("test_emit_drafted_child")
    hits, total = step_reuse(result.steps)
    assert hits == total > 0
    out = tmp_path / "engine.jsonl"
    spec = TreesSpec(engine_budgets=[8], engine_verifiers=["bv"], engine_tokens=8)
    run_engine_reuse(spec, pair, prompts, out)
    assert run_engine_reuse(spec, pair, prompts, out)["computed"] == 0
    (record,) = load_jsonl(out)
    assert (record["paths"], record["depth"]) == (2, 4) and record["row_steps"] > 0


# ---------------------------------------------------------------------------
# the references and what bounds what (issue 19: the oracle lay below target-first,
# target-first-gbv fell as the budget grew; both are right, and these checks say why)
# ---------------------------------------------------------------------------

def prefix_closed_subsets(vocab, depth, size):
    nodes = range(1, num_nodes(vocab, depth))
    for subset in itertools.combinations(nodes, size):
        chosen = set(subset)
        if all((s - 1) // vocab == 0 or (s - 1) // vocab in chosen for s in subset):
            yield subset


@pytest.mark.parametrize("vocab, depth, seed", [(2, 2, 0), (2, 3, 1), (3, 2, 2), (3, 2, 3)])
def test_oracle_is_the_best_fixed_tree_and_bounds_draft_and_rerank(vocab, depth, seed):
    model = dirichlet_instance(vocab, depth, alpha=0.6, seed=seed, denominator=10).model(exact=True)
    for budget in range(1, min(6, num_nodes(vocab, depth) - 1) + 1):
        best = max(walk_accepted(model, {node_prefix(n, vocab) for n in subset})
                   for subset in prefix_closed_subsets(vocab, depth, budget))
        assert reference_value(model, "oracle", budget) == best + 1
        for rule in ("draft", "rerank"):
            assert rule_value(model, rule, budget).tokens_per_round <= best + 1


@pytest.mark.parametrize("seed", range(3))
def test_target_first_is_a_fixed_tree_of_up_to_v_times_n_plus_1_nodes(seed):
    """target-first at budget N = target sampling on the fixed tree S = {first tokens} + t T_t
    (|S| <= V (N + 1)), so the oracle at |S| nodes bounds it, the oracle at N does not; and
    target-first-oracle (brute force: best N-node tree below each t) bounds it."""
    vocab, depth = 2, 3
    inst = dirichlet_instance(vocab, depth, alpha=0.8, seed=20 + seed, denominator=8)
    model = inst.model(exact=True)
    for budget in (1, 2, 3):
        value = rule_value(model, "target-first", budget).tokens_per_round
        fixed = {(t,) for t in range(vocab)}
        best_below = 0
        for t in range(vocab):
            sub = subtree_model(model, t, depth - 1)
            fixed |= {(t, *node_prefix(int(n), vocab)) for n in draft_ranked_tree(sub, budget)}
            best_below += model.target[0, t] * max(
                walk_accepted(sub, {node_prefix(n, vocab) for n in subset})
                for subset in prefix_closed_subsets(vocab, depth - 1, budget))
        assert len(fixed) <= vocab * (budget + 1)
        assert value == 1 + walk_accepted(model, fixed)
        assert value <= reference_value(model, "oracle", len(fixed))
        assert reference_value(model, "target-first-oracle", budget) == 2 + best_below >= value


def test_target_first_exceeds_the_oracle_of_the_same_budget():
    """V = 2, L = 2, root row (1/2, 1/2), the next token certain below each (a perfect draft):
    a fixed 1-node tree accepts 1/2, target-first gets its free token and the certain one."""
    half, one, zero = Fraction(1, 2), Fraction(1), Fraction(0)
    target = np.array([[half, half], [one, zero], [zero, one]] + [[half, half]] * 4, dtype=object)
    draft = target.copy()
    model = from_rows(target, draft, 2).model(exact=True)
    assert reference_value(model, "oracle", 1) == Fraction(3, 2)
    assert rule_value(model, "target-first", 1).tokens_per_round == 3
    assert reference_value(model, "target-first-oracle", 1) == 3
    assert optimum(from_rows(target, draft, 2), tree_nodes=optimal_tree_value(model, 1)[1]).exact_value \
        == Fraction(3, 2)  # the tree LP: no verifier of that fixed tree does better


def gbv_one_step_acceptance(p, q, paths):
    """GBV's L = 1 acceptance sum_x min(p(x), F(x)^K - F(x-)^K), F the CDF of q in the order
    of the key (p/q, x) (docs/theory.md section 9.4; proved symbolically at V = 2, K <= 3)."""
    order = sorted(range(len(p)), key=lambda x: (p[x] / q[x] if q[x] else float("inf"), x))
    total, below = Fraction(0), Fraction(0)
    for x in order:
        total += min(p[x], (below + q[x]) ** paths - below**paths)
        below += q[x]
    return total


def test_target_first_gbv_falls_when_gbv_falls_with_more_paths():
    """Below each first token p = q = (1/2, 1/2): BV (K = 1) accepts surely, GBV with K = 2
    skews the selected path to token 1 (3/4) and accepts 3/4; the K-path optimum does not fall."""
    half = Fraction(1, 2)
    target = np.array([[Fraction(1, 3), Fraction(2, 3)]] + [[half, half]] * 6, dtype=object)
    draft = np.array([[Fraction(2, 3), Fraction(1, 3)]] + [[half, half]] * 6, dtype=object)
    inst = from_rows(target, draft, 2)
    model = inst.model(exact=True)
    values = [rule_value(model, "target-first-gbv", n) for n in (1, 2, 3)]
    assert [v.shape for v in values] == [(1, 1), (2, 1), (3, 1)]
    for v, (paths, _) in zip(values, [v.shape for v in values], strict=True):
        accept = gbv_one_step_acceptance([half, half], [half, half], paths)
        assert v.tokens_per_round == 1 + (1 + accept)  # the free token, then BE = 1 + acceptance
    assert [v.tokens_per_round for v in values] == [3, Fraction(11, 4), Fraction(21, 8)]  # falls
    sub = from_rows(target[[1, 3, 4]], draft[[1, 3, 4]], 1)  # below token 0 (= below token 1)
    optima = [optimum(sub, paths=k) for k in (1, 2, 3)]
    assert all(rec.certified for rec in optima) and [rec.exact_value for rec in optima] == [2, 2, 2]


def test_summary_shapes_saturation_references_and_standard_error():
    from speclp.experiments.trees import summarize_trees

    def record(shift, prompt):
        shapes = {"2": [1, 2], "4": [2, 2], "8": [2, 2]}
        values = {"renormalised": {}, "candidate_exact": {}, "shapes": shapes}
        for name in ("draft", "target-first-gbv", "oracle", "target-first-oracle"):
            values["renormalised"][name] = {n: 2.0 + shift for n in ("2", "4", "8")}
        return {"values": values, "prompt": prompt}

    # prompts a (contexts 2.0, 2.0), b (3.0), c (4.0, 6.0): per-prompt means 2, 3, 5
    records = [record(0.0, "a"), record(0.0, "a"), record(1.0, "b"), record(2.0, "c"),
               record(4.0, "c")]
    summary = summarize_trees(records)
    assert [s["rule"] for s in summary[::3]] == ["draft", "target-first-gbv", "oracle",
                                                 "target-first-oracle"]
    assert [s["reference"] for s in summary[::3]] == [False, False, True, True]
    gbv = [s for s in summary if s["rule"] == "target-first-gbv"]
    assert [s["shape"] for s in gbv] == [[1, 2], [2, 2], [2, 2]]
    assert [s["saturated"] for s in gbv] == [False, False, True]
    assert all(s["shape"] is None for s in summary if s["rule"] != "target-first-gbv")
    assert summary[0]["tokens_per_round"] == pytest.approx(17 / 5, abs=1e-12)  # over contexts
    assert (summary[0]["contexts"], summary[0]["prompts"]) == (5, 3)
    # over prompts: sd of (2, 3, 5) = sqrt(7/3), / sqrt(3)
    assert summary[0]["tokens_per_round_se"] == pytest.approx(np.sqrt(7 / 3) / np.sqrt(3), abs=1e-12)


# ---------------------------------------------------------------------------
# the command (tiny random models in place of the pair)
# ---------------------------------------------------------------------------

@pytest.fixture
def tiny_cli_pair(monkeypatch):
    from speclp.cli import trees as cli_trees
    from speclp.decode.models import make_pair, wrap_model

    target, draft = tiny_pair()
    pair = make_pair(wrap_model(target, "tiny-t"), wrap_model(draft, "tiny-d"))
    loads = []

    def load_run_pair(name, prompts, threads):
        loads.append(name)
        for i, prompt in enumerate(prompts):
            prompt["tokens"] = [1 + i, 2, 3, 4]
        return pair

    monkeypatch.setattr(cli_trees, "load_run_pair", load_run_pair)
    return loads


def trees_cli(out, *extra):
    from speclp.cli import app
    from typer.testing import CliRunner

    return CliRunner().invoke(app, ["trees", "--pair", "smollm2-135m", "--prompts", "humaneval:2",
                                    "--budgets", "1,2,3", "--top", "2", "--depth", "3",
                                    "--contexts-per-prompt", "1", "--every", "2", "--no-timing",
                                    "--out", str(out), *extra])


def test_trees_command_shows_references_shapes_and_why(tmp_path, tiny_cli_pair):
    import json

    result = trees_cli(tmp_path / "t", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["contexts"] == 2 and out["stopped"] is None
    names = [s["rule"] for s in out["summary"]]
    assert names[-6:] == ["oracle"] * 3 + ["target-first-oracle"] * 3
    assert set(out["references"]) == {"oracle", "target-first-oracle"}
    gbv = [s for s in out["summary"] if s["rule"] == "target-first-gbv"]
    assert [tuple(s["shape"]) for s in gbv] == [gbv_shape(2, 3, n) for n in (1, 2, 3)]
    assert any("not monotone in N" in line for line in out["notes"])
    assert any("a bound for draft and rerank only" in line for line in out["notes"])
    table = trees_cli(tmp_path / "t")  # resumed: nothing recomputed, the table and the notes
    assert table.exit_code == 0, table.output
    assert "oracle (reference)" in table.stdout and "K x L'" in table.stdout
    assert "target-first-oracle (reference)" in table.stdout and "not monotone in N" in table.stdout


def test_trees_time_limit_keeps_finished_contexts_and_resumes(tmp_path, tiny_cli_pair):
    import json

    stopped = trees_cli(tmp_path / "t", "--time-limit", "1e-9", "--json")
    assert stopped.exit_code == 0, stopped.output
    out = json.loads(stopped.stdout)
    assert out["computed"] == 0 and "time limit of 1e-09 s" in out["stopped"][0]
    assert "rerun the same command to continue" in out["stopped"][0]
    done = json.loads(trees_cli(tmp_path / "t", "--json").stdout)
    assert done["computed"] == 2 and done["stopped"] is None
    for bad in ("0", "-1", "nan"):
        refused = trees_cli(tmp_path / "t", "--time-limit", bad)
        assert refused.exit_code == 2 and refused.stderr.startswith("error: --time-limit")


def test_trees_rules_refuse_a_reference(tmp_path, tiny_cli_pair):
    refused = trees_cli(tmp_path / "t", "--rules", "draft,oracle")
    assert refused.exit_code == 2
    assert "--rules: unknown rule 'oracle' (a reference, always shown; not a rule)" in refused.stderr
    assert tiny_cli_pair == []  # refused before the pair was loaded


def test_trees_cli_defaults_are_the_spec_defaults():
    from speclp.cli import load_command
    from speclp.experiments.trees import TreesSpec

    spec, params = TreesSpec(), {p.name: p.default for p in load_command("trees").params}
    assert params["budgets"] == ",".join(map(str, spec.budgets))
    assert params["rules"] == ",".join(spec.rules)
    assert (params["width"], params["depth"], params["pair"], params["prompts"]) == \
        (spec.top, spec.depth, spec.pair, spec.prompts)
    assert (params["contexts_per_prompt"], params["every"], params["temperature"], params["seed"]) == \
        (spec.contexts_per_prompt, spec.every, spec.temperature, spec.seed)
    assert params["engine_tokens"] == spec.engine_tokens


def test_a_fully_resumed_trees_run_loads_no_model(tmp_path, tiny_cli_pair, monkeypatch):
    """Every record asked for (contexts and engine runs) already in --out: the keys come from
    the flags and the prompt texts, so nothing is loaded and the report is the same."""
    import json

    from speclp.cli import trees as cli_trees

    args = ("--engine-budgets", "8", "--engine-tokens", "3", "--json")
    first = trees_cli(tmp_path / "t", *args)
    assert first.exit_code == 0, first.output
    done = json.loads(first.stdout)  # stdout is ONE JSON object; progress went to stderr
    assert (done["computed"], done["engine"]["computed"], tiny_cli_pair) == (2, 4, ["smollm2-135m"])
    assert "trees: 2/2 contexts" in first.stderr and "trees: engine runs: 4/4 runs" in first.stderr

    def loader(*args, **kwargs):
        raise AssertionError("a model was loaded by a fully resumed run")

    monkeypatch.setattr(cli_trees, "load_run_pair", loader)
    monkeypatch.setattr(cli_trees, "load_pair", loader)
    again = trees_cli(tmp_path / "t", *args)
    assert again.exit_code == 0, again.output
    resumed = json.loads(again.stdout)
    assert (resumed["computed"], resumed["reused"], resumed["engine"]["computed"]) == (0, 2, 0)
    same = lambda r: {k: v for k, v in r.items() if k not in ("computed", "reused", "engine")}  # noqa: E731
    assert same(resumed) == same(done)
    assert resumed["engine"]["summary"] == done["engine"]["summary"]
    # one record missing: the pair is needed (the loader is called)
    records = tmp_path / "t" / "smollm2-135m.jsonl"
    records.write_text("".join(records.read_text().splitlines(keepends=True)[:-1]))
    missing = trees_cli(tmp_path / "t", *args)
    assert missing.exit_code == 3 and "a model was loaded" in missing.output


def test_trees_command_reports_the_librarys_values(tmp_path, tiny_cli_pair):
    """The command's --json summary is summarize_trees of run_trees called directly on the
    same models, tokens and settings (a second path through the library)."""
    import json

    from speclp.cli.common import jsonable
    from speclp.experiments.prompts import read_prompts
    from speclp.experiments.store import load_jsonl
    from speclp.experiments.trees import summarize_trees

    result = trees_cli(tmp_path / "t", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["pair"] == "smollm2-135m (draft: same model at another temperature), draft temperature 1.5"
    target, draft = tiny_pair()
    prompts = read_prompts("humaneval:2")
    for i, prompt in enumerate(prompts):
        prompt["tokens"] = [1 + i, 2, 3, 4]  # as the fixture's loader tokenizes them
    spec = TreesSpec(pair="smollm2-135m", prompts="humaneval:2", budgets=[1, 2, 3], top=2, depth=3,
                     contexts_per_prompt=1, every=2, draft_temperature=1.5, no_timing=True)
    direct = tmp_path / "direct.jsonl"
    status = run_trees(spec, target, draft, prompts, direct, out["pair"])
    assert (status["computed"], out["computed"]) == (2, 2)
    expected = json.loads(json.dumps(jsonable(summarize_trees(load_jsonl(direct)))))
    assert out["summary"] == expected
