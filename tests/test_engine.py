"""The speculative-decoding engine on tiny random models (fast) and on SmolLM2-135M.

Tiny models: 2-layer Qwen2/Llama built from a config with a large lm_head scale so that
rows are peaked and target and draft differ (acceptance well below 1), vocabulary 4 for
the statistical tests (cheap exact law of two tokens).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers_torch import one_thread  # noqa: F401 (an autouse fixture: importing it applies it here)
from scipy import stats

transformers = pytest.importorskip(
    "transformers", reason="needs the models extra: pip install 'speclp[models]'"
)

from speclp.decode.engine import (  # noqa: E402
    EngineConfig,
    SpeculativeEngine,
    build_tree,
    generate_autoregressive,
    probability_rows,
)
from speclp.decode.models import LoadedModel, VocabularyMismatch, wrap_model  # noqa: E402
from speclp.verifiers.law import REGISTRY, BlockLaw, DraftTree, register  # noqa: E402
from speclp.verifiers.registry import verifier_names  # noqa: E402


def tiny_model(
    seed: int, vocab: int, family: str = "qwen2", scale: float = 3.0, attn: str = "sdpa",
    hidden: int = 32,
) -> LoadedModel:
    """A 2-layer random causal LM; lm_head ~ N(0, scale^2 / hidden) gives peaked rows."""
    torch.manual_seed(seed)
    config_class = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}[family]
    config = config_class(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation=attn
    )
    with torch.no_grad():
        model.lm_head.weight.normal_(0, scale / hidden**0.5)
    return wrap_model(model, f"tiny-{family}-{seed}")


def full_rows(model: LoadedModel, sequence: list[int]) -> torch.Tensor:
    """[len, V] logits of a plain forward over the whole sequence (no cache)."""
    with torch.no_grad():
        return model.model(torch.tensor([sequence])).logits[0]


# ---------------------------------------------------------------------------------------
# deterministic checks


def test_probability_rows_temperature_and_top_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(probability_rows(logits, 1.0), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top = probability_rows(logits, 1.0, top_p=0.8)  # 0.5 + 0.3 reaches 0.8
    assert torch.allclose(top, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    top = probability_rows(logits, 1.0, top_p=0.81)
    assert torch.allclose(top, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    assert torch.equal(probability_rows(logits, 0.0), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    cold = probability_rows(logits, 0.5)
    assert torch.allclose(cold, torch.tensor([[0.25, 0.09, 0.0225, 0.0025]]) / 0.365)


def test_build_tree_deduplicates_shared_prefixes() -> None:
    tokens = torch.tensor([[[1, 2, 3], [1, 2, 0], [2, 2, 3]], [[0, 0, 0], [0, 0, 0], [0, 0, 0]]])
    tree = build_tree(tokens)
    node_of, node_tokens, node_depth, ancestor, real = (tree.node_of, tree.tokens, tree.depth,
                                                        tree.ancestor, tree.real)
    assert node_tokens.shape == (2, 8) and ancestor.shape == (2, 8, 8)
    fixed = build_tree(tokens, compact=False)  # 1 + K L nodes, the same real ones
    assert fixed.tokens.shape == (2, 10) and torch.equal(fixed.node_of, node_of)
    assert torch.equal(fixed.real[:, :8], real) and not fixed.real[:, 8:].any()
    # row 0: nodes (1), (1,2), (1,2,3), (1,2,0), (2), (2,2), (2,2,3) -> 7 + root; row 1: 3 + root
    assert real.sum(1).tolist() == [8, 4]
    assert node_of[0, 0].tolist() == [0, 1, 2, 3]
    assert node_of[0, 1].tolist() == [0, 1, 2, 4]
    assert node_of[1, 2].tolist() == node_of[1, 0].tolist()
    assert node_tokens[0, node_of[0, 1, 3]] == 0 and node_depth[0, node_of[0, 2, 2]] == 2
    # node (1,2,0) sees root, (1), (1,2) and itself, not (1,2,3) nor path 2's nodes
    seen = ancestor[0, node_of[0, 1, 3]].nonzero()[:, 0].tolist()
    assert seen == sorted([0, 1, 2, 4])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_pass_rows_equal_per_path_forwards(attn: str) -> None:
    """Every target/draft row the verifier saw equals a plain forward over context + path.

    Covers the tree mask, position ids, prefix sharing, ragged prompts and the cache
    roll-back over several steps (fp32, tolerance 1e-5).
    """
    target = tiny_model(0, vocab=32, attn=attn)
    draft = tiny_model(1, vocab=32, family="llama", attn=attn)
    config = EngineConfig(
        paths=3, depth=3, max_new_tokens=14, record_steps=True, eos_token_ids=(), temperature=1.0
    )
    engine = SpeculativeEngine(target, draft, "bv", config)
    result = engine.generate(
        [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10]], generator=torch.Generator().manual_seed(0)
    )
    assert [len(t) for t in result.tokens] == [14, 14, 14]
    assert len(result.steps) >= 4 and any(s.accepted.max() > 0 for s in result.steps)
    worst = 0.0
    for step in result.steps:
        for b, context in enumerate(step.contexts):
            n = len(context)
            for k in range(config.paths):
                path = step.tree.tokens[b, k].tolist()
                p = probability_rows(full_rows(target, context + path), 1.0)[n - 1 :]
                q = probability_rows(full_rows(draft, context + path), 1.0)[n - 1 : n - 1 + 3]
                worst = max(
                    worst,
                    float((p - step.tree.target_rows[b, k]).abs().max()),
                    float((q - step.tree.draft_rows[b, k]).abs().max()),
                )
    assert worst < 1e-5
    # equal prefixes carry exactly equal rows (the verifiers rely on it)
    shared = 0
    for step in result.steps:
        tokens = step.tree.tokens
        for i in range(1, config.depth + 1):
            same = (tokens[:, :, None, :i] == tokens[:, None, :, :i]).all(-1)  # [B, K, K]
            for b, k, j in same.nonzero().tolist():
                shared += k != j
                assert torch.equal(step.tree.target_rows[b, k, i], step.tree.target_rows[b, j, i])
                if i < config.depth:
                    assert torch.equal(step.tree.draft_rows[b, k, i], step.tree.draft_rows[b, j, i])
    assert shared > 0
    # the committed output is context + accepted prefix + correction, step after step
    for before, after in zip(result.steps, result.steps[1:], strict=False):
        for b, row in enumerate(after.rows):
            if row in before.rows:
                i = before.rows.index(row)
                tau = int(before.accepted[i])
                block = before.tree.tokens[i, int(before.path[i]), :tau].tolist()
                assert after.contexts[b] == before.contexts[i] + block + [int(before.token[i])]


def test_eos_and_max_new_tokens_and_callback() -> None:
    target, draft = tiny_model(0, vocab=8), tiny_model(1, vocab=8)
    streamed: dict[int, list[int]] = {0: [], 1: []}
    config = EngineConfig(paths=2, depth=4, max_new_tokens=9, eos_token_ids=())
    engine = SpeculativeEngine(target, draft, "token", config)
    out = engine.generate(
        [[1, 2], [3]],
        generator=torch.Generator().manual_seed(1),
        callback=lambda r, toks: streamed[r].extend(toks),
    )
    assert [len(t) for t in out.tokens] == [9, 9] and streamed == dict(enumerate(out.tokens))
    m = out.metrics
    assert m["generated_tokens"] == 18 and m["row_steps"] >= m["target_calls"] >= 3
    assert sum(m["accepted_histogram"]) == m["row_steps"]
    assert 1 <= m["block_efficiency"] <= 5 and m["tokens_per_call"] <= m["block_efficiency"]
    assert m["draft_s"] > 0 and m["target_s"] > 0 and m["verifier_s"] > 0
    assert 1 < m["target_nodes_per_call"] <= 1 + 2 * 4
    # EOS: stop at the first EOS (kept), whatever the block held after it (one row, so the
    # random stream is the same until the row stops)
    alone = SpeculativeEngine(target, draft, "token", config).generate(
        [[1, 2]], generator=torch.Generator().manual_seed(1))
    eos = alone.tokens[0][3]
    config = EngineConfig(paths=2, depth=4, max_new_tokens=9, eos_token_ids=(eos,))
    again = SpeculativeEngine(target, draft, "token", config).generate(
        [[1, 2]], generator=torch.Generator().manual_seed(1))
    first = alone.tokens[0].index(eos)
    assert again.tokens[0] == alone.tokens[0][: first + 1]


def test_pair_with_different_vocabularies_is_refused() -> None:
    with pytest.raises(VocabularyMismatch, match="16.*12|12.*16"):
        SpeculativeEngine(tiny_model(0, vocab=16), tiny_model(1, vocab=12), "bv")


def test_autoregressive_baseline_matches_target_first_token() -> None:
    target = tiny_model(0, vocab=4)
    runs = 4000
    out = generate_autoregressive(
        target,
        [[1, 2, 3]] * runs,
        max_new_tokens=1,
        eos_token_ids=(),
        generator=torch.Generator().manual_seed(0),
    )
    counts = np.bincount([t[0] for t in out.tokens], minlength=4)
    p = probability_rows(full_rows(target, [1, 2, 3])[-1], 1.0).double().numpy()
    assert chi_square_pvalue(counts, p) > 1e-3


# ---------------------------------------------------------------------------------------
# losslessness: joint law of the first two generated tokens

VOCAB, PATHS, DEPTH, RUNS = 4, 3, 2, 40_000
TEMPERATURE, TOP_P = 0.9, 0.95
PROMPT = [1, 2, 3]
# Power: for any alternative at total variation TV from the target law, Cauchy-Schwarz gives
# the chi-square non-centrality lambda = RUNS * sum (p' - p)^2 / p >= RUNS (2 TV)^2 = 64 at
# TV = 0.02; with <= 15 degrees of freedom and alpha = 1e-3 the power is above 0.99.
ALPHA = 1e-3


@pytest.fixture(scope="module")
def stat_pair() -> tuple[LoadedModel, LoadedModel, np.ndarray]:
    """(target, draft, exact [V, V] law of the first two target-sampled tokens)."""
    target = tiny_model(10, vocab=VOCAB, family="llama", scale=1.5, hidden=16)
    draft = tiny_model(11, vocab=VOCAB, family="qwen2", scale=1.5, hidden=16)
    first = probability_rows(full_rows(target, PROMPT)[-1].double(), TEMPERATURE, TOP_P)
    joint = np.zeros((VOCAB, VOCAB))
    for t in range(VOCAB):
        second = probability_rows(full_rows(target, PROMPT + [t])[-1].double(), TEMPERATURE, TOP_P)
        joint[t] = (first[t] * second).numpy()
    return target, draft, joint


def two_token_counts(
    target: LoadedModel, draft: LoadedModel, verifier: str, paths: int = PATHS, seed: int = 0
) -> tuple[np.ndarray, dict]:
    config = EngineConfig(
        paths=paths,
        depth=DEPTH,
        temperature=TEMPERATURE,
        top_p=TOP_P,
        max_new_tokens=2,
        eos_token_ids=(),
        law_dtype=torch.float64,
    )
    out = SpeculativeEngine(target, draft, verifier, config).generate(
        [PROMPT] * RUNS, generator=torch.Generator().manual_seed(seed)
    )
    pairs = np.array(out.tokens)
    counts = np.bincount(pairs[:, 0] * VOCAB + pairs[:, 1], minlength=VOCAB**2)
    return counts.reshape(VOCAB, VOCAB), out.metrics


def chi_square_pvalue(counts: np.ndarray, law: np.ndarray) -> float:
    """Pearson chi-square of counts against a law; cells expected < 5 are pooled; a count in
    a cell of probability 0 gives p-value 0."""
    counts, law = counts.reshape(-1), law.reshape(-1)
    if counts[law <= 1e-15].sum() > 0:
        return 0.0
    expected = law * counts.sum()
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


def test_statistical_pair_is_informative(stat_pair) -> None:
    """The instance must make verifiers work: q far from p, several likely cells."""
    target, draft, joint = stat_pair
    p = probability_rows(full_rows(target, PROMPT)[-1], TEMPERATURE, TOP_P)
    q = probability_rows(full_rows(draft, PROMPT)[-1], TEMPERATURE, TOP_P)
    overlap = float(torch.minimum(p, q).sum())
    assert 0.2 < overlap < 0.9, overlap
    assert (joint > 0.02).sum() >= 5


@pytest.mark.parametrize("verifier", verifier_names())
def test_engine_is_lossless_on_first_two_tokens(stat_pair, verifier: str) -> None:
    target, draft, joint = stat_pair
    counts, metrics = two_token_counts(target, draft, verifier)
    pvalue = chi_square_pvalue(counts, joint)
    tv = 0.5 * np.abs(counts / counts.sum() - joint).sum()
    assert pvalue > ALPHA, f"{verifier}: p = {pvalue:.2e}, empirical TV {tv:.4f}"
    if verifier != "nss":
        assert metrics["block_efficiency"] > 1.05  # drafts were really used


def _always_accept(tree: DraftTree) -> BlockLaw:
    """Deliberately lossy: accept path 0 entirely, bonus token from p(.|X_1..L)."""
    stop = torch.zeros(tree.batch, tree.paths, tree.depth + 1, dtype=tree.target_rows.dtype)
    stop[:, 0, -1] = 1
    return BlockLaw(stop, tree.target_rows.clone())


BROKEN = [n for n in verifier_names(include_broken=True) if n not in verifier_names()]


@pytest.mark.parametrize("broken", ["test_always_accept", *BROKEN])
def test_lossy_verifier_is_detected(stat_pair, broken: str) -> None:
    """The same test fails on lossy laws: a test-local one and every registered broken one."""
    target, draft, joint = stat_pair
    if broken == "test_always_accept":
        register(broken, "test-local lossy law", multipath=False, lossless=False)(_always_accept)
    try:
        counts, _ = two_token_counts(target, draft, broken)
    finally:
        if broken == "test_always_accept":
            del REGISTRY[broken]
    assert chi_square_pvalue(counts, joint) < 1e-6


def test_gbv_with_one_path_equals_bv_token_for_token(stat_pair) -> None:
    target, draft, _ = stat_pair
    config = EngineConfig(
        paths=1, depth=4, temperature=TEMPERATURE, max_new_tokens=24, eos_token_ids=()
    )
    prompts = [PROMPT, [0], [2, 2, 2, 1]] * 20
    outs = [
        SpeculativeEngine(target, draft, name, config)
        .generate(prompts, generator=torch.Generator().manual_seed(7))
        .tokens
        for name in ("gbv", "bv")
    ]
    assert outs[0] == outs[1]


# ---------------------------------------------------------------------------------------
# paired scoring: every scored verifier's law on the same drafted trees


def test_paired_scores_are_the_laws_on_the_recorded_trees() -> None:
    from speclp.verifiers.registry import block_law

    target, draft = tiny_model(20, vocab=12), tiny_model(21, vocab=12)
    scored = ("bv", "gbv", "specinfer", "traversal")
    config = EngineConfig(paths=3, depth=3, max_new_tokens=10, eos_token_ids=(),
                          record_steps=True, score=scored, law_dtype=torch.float64,
                          score_elements=3 * 4 * 12)  # one row per chunk: exercises chunking
    prompts = [[1, 2], [3], [4, 5, 6]]
    out = SpeculativeEngine(target, draft, "gbv", config).generate(
        prompts, generator=torch.Generator().manual_seed(3))
    per_prompt = out.metrics["per_prompt"]
    expected = {r: dict.fromkeys(scored, 0.0) for r in range(len(prompts))}
    steps = dict.fromkeys(range(len(prompts)), 0)
    for step in out.steps:
        tree = DraftTree(step.tree.tokens, step.tree.target_rows.double(),
                         step.tree.draft_rows.double())
        for name in scored:
            values = block_law(name, tree).block_efficiency()
            for b, r in enumerate(step.rows):
                expected[r][name] += float(values[b])
        for r in step.rows:
            steps[r] += 1
    for r, entry in enumerate(per_prompt):
        assert entry["row_steps"] == steps[r]
        assert entry["generated_tokens"] == len(out.tokens[r]) == 10
        for name in scored:
            assert entry["scores"][name] == pytest.approx(expected[r][name], abs=1e-9)
        # the driver's own exact value (float64 law) is its score
        assert entry["expected_block_efficiency"] == pytest.approx(entry["scores"]["gbv"], abs=1e-9)
    assert sum(e["row_steps"] for e in per_prompt) == out.metrics["row_steps"]
    assert sum(e["accepted_plus_one"] for e in per_prompt) == pytest.approx(
        out.metrics["row_steps"] * out.metrics["block_efficiency"])
    assert set(out.metrics["score_seconds"]) == set(scored) and out.metrics["score_s"] > 0


def test_scoring_does_not_change_the_decoded_tokens() -> None:
    target, draft = tiny_model(22, vocab=10), tiny_model(23, vocab=10)
    plain = EngineConfig(paths=2, depth=3, max_new_tokens=12, eos_token_ids=())
    scored = EngineConfig(paths=2, depth=3, max_new_tokens=12, eos_token_ids=(),
                          score=("bv", "spectr"))
    outs = [SpeculativeEngine(target, draft, "specinfer", c).generate(
        [[1, 2, 3], [4]], generator=torch.Generator().manual_seed(5)).tokens for c in (plain, scored)]
    assert outs[0] == outs[1]
    with pytest.raises(KeyError, match="unknown verifier"):
        SpeculativeEngine(target, draft, "bv", EngineConfig(score=("nope",)))


def test_paired_bv_score_is_unbiased_for_the_realised_block_efficiency() -> None:
    """Scored bv at K = 3 (path 0 only) and the realised tau + 1 of bv driving at K = 1 estimate
    the same per-step mean: the two 99.9% intervals must overlap (pooled over many rows)."""
    target, draft = tiny_model(24, vocab=6, scale=1.5), tiny_model(25, vocab=6, scale=1.5)
    prompts = [[1, 2, 3]] * 300
    scored = SpeculativeEngine(target, draft, "gbv", EngineConfig(
        paths=3, depth=2, max_new_tokens=1, eos_token_ids=(), score=("bv",))).generate(
        prompts, generator=torch.Generator().manual_seed(11))
    realised = SpeculativeEngine(target, draft, "bv", EngineConfig(
        paths=1, depth=2, max_new_tokens=1, eos_token_ids=())).generate(
        prompts, generator=torch.Generator().manual_seed(12))
    a = np.array([e["scores"]["bv"] for e in scored.metrics["per_prompt"]])
    b = np.array([e["accepted_plus_one"] for e in realised.metrics["per_prompt"]], dtype=float)
    z = abs(a.mean() - b.mean()) / np.sqrt(a.var() / len(a) + b.var() / len(b))
    assert z < 3.3, (a.mean(), b.mean(), z)
    assert a.std() < b.std()  # the exact conditional value has less variance than a draw


# ---------------------------------------------------------------------------------------
# host reads per step


# Tensor methods that read device memory on the host. (.numpy() is left out: it works on
# CPU tensors only, as a zero-copy view; a CUDA tensor needs .cpu() first, which is counted.
# verifiers/gbv.py sorts CPU keys in numpy that way.)
SYNCING = ("tolist", "item", "__bool__", "__int__", "__float__", "__index__", "cpu")


def count_host_reads(monkeypatch, run) -> int:
    """Calls of the Tensor methods that read a tensor on the host, made by the engine during
    the decoding steps (prefill and the models' own forwards excluded)."""
    import speclp.decode.engine as engine_module
    import speclp.decode.generate as generate_module

    state = {"count": 0, "on": True}
    for name in SYNCING:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            if state["on"]:
                state["count"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def quiet(function):
        def wrapped(*args, **kwargs):
            before, state["on"] = state["on"], False
            try:
                return function(*args, **kwargs)
            finally:
                state["on"] = before
        return wrapped

    monkeypatch.setattr(engine_module.SlotCache, "forward", quiet(engine_module.SlotCache.forward))
    monkeypatch.setattr(generate_module, "prefill", quiet(generate_module.prefill))
    monkeypatch.setattr(generate_module, "step_metrics", quiet(generate_module.step_metrics))
    run()
    monkeypatch.undo()
    return state["count"]


@pytest.mark.parametrize("compact, per_step", [(False, 1), (True, 2)])
def test_the_engine_reads_the_device_once_per_step(monkeypatch, compact: bool, per_step: int) -> None:
    target, draft = tiny_model(30, vocab=9), tiny_model(31, vocab=9)
    config = EngineConfig(paths=3, depth=3, max_new_tokens=9, eos_token_ids=(2,),
                          compact_tree=compact)
    out = {}

    def run():
        out["r"] = SpeculativeEngine(target, draft, "gbv", config).generate(
            [[1, 2], [3], [4, 5, 6]], generator=torch.Generator().manual_seed(2))

    reads = count_host_reads(monkeypatch, run)
    steps = out["r"].metrics["target_calls"]
    assert steps >= 3 and reads == per_step * steps, (reads, steps)
    # the counter sees a read where there is one (a check that can fail)
    assert count_host_reads(monkeypatch, lambda: torch.ones(3).sum().item()) == 1


def test_the_fixed_tree_decodes_the_same_law() -> None:
    """Padding the tree to 1 + K L nodes changes only the batch shape of the target pass:
    same rows up to float rounding, hence the same tokens here."""
    target, draft = tiny_model(32, vocab=9), tiny_model(33, vocab=9)
    outs = []
    for compact in (True, False):
        config = EngineConfig(paths=3, depth=3, max_new_tokens=10, eos_token_ids=(),
                              compact_tree=compact, law_dtype=torch.float64)
        outs.append(SpeculativeEngine(target, draft, "specinfer", config).generate(
            [[1, 2], [3]], generator=torch.Generator().manual_seed(4)))
    assert outs[0].tokens == outs[1].tokens
    for a, b in zip(outs[0].metrics["per_prompt"], outs[1].metrics["per_prompt"], strict=True):
        assert a["expected_block_efficiency"] == pytest.approx(b["expected_block_efficiency"],
                                                               abs=1e-5)


def test_one_target_pass_per_step_and_the_prompt_is_never_recomputed(monkeypatch) -> None:
    """Every model forward is recorded: the target runs once for the prefill (the prompt
    heads) and then ONCE per step over the tree only (at most 1 + K L nodes, never the
    context); the draft runs L forwards per step, the first over at most 2 uncached tokens."""
    import speclp.decode.cache as cache_module

    target, draft = tiny_model(40, vocab=11), tiny_model(41, vocab=11)
    paths, depth = 3, 4
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8], [3, 9, 9, 4, 1, 2]]
    calls = []
    original = cache_module.SlotCache.forward

    def recorded(self, tokens, *args, **kwargs):
        calls.append((self.model, int(tokens.shape[1])))
        return original(self, tokens, *args, **kwargs)

    monkeypatch.setattr(cache_module.SlotCache, "forward", recorded)
    config = EngineConfig(paths=paths, depth=depth, max_new_tokens=12, eos_token_ids=())
    result = SpeculativeEngine(target, draft, "gbv", config).generate(
        prompts, generator=torch.Generator().manual_seed(0))
    steps = result.metrics["target_calls"]
    on_target = [n for model, n in calls if model is target.model]
    on_draft = [n for model, n in calls if model is draft.model]
    assert on_target[0] == max(len(p) for p in prompts) - 1  # the prefill of the heads
    assert len(on_target) == 1 + steps  # one tree pass per step
    assert all(n <= 1 + paths * depth for n in on_target[1:])  # tree nodes only
    assert len(on_draft) == 1 + depth * steps
    assert all(n <= 2 for n in on_draft[1::depth])  # the uncached committed tokens only
