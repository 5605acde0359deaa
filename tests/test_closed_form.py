"""The one-step (L = 1) closed form (lp/closed_form.py) against the LP and brute force.

Independent references: the certified enumerated LP (method "full"), brute-force
minimisation over ALL token subsets with Q(H) from enumerated ordered draws, docs/theory.md sections 8.2-8.4
anchors (p = (.5,.3,.2), q = (.2,.3,.5), K = 2: .86 i.i.d., .9857 without replacement).
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from speclp.lp import optimum
from speclp.lp.closed_form import MAX_ENUMERATED_VOCAB, one_step_optimum
from speclp.lp.instance import dirichlet_instance, from_rows

P_ANCHOR = [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)]
Q_ANCHOR = [Fraction(1, 5), Fraction(3, 10), Fraction(1, 2)]


def inside_probability(q, members, paths, draft_sampling):
    """Q(H) = P(all K drafts lie in H), by enumerating ordered draws."""
    members = set(members)
    total = Fraction(0)
    tokens = range(len(q))
    draws = (itertools.product(tokens, repeat=paths) if draft_sampling == "iid"
             else itertools.permutations(tokens, paths))
    for seq in draws:
        if not set(seq) <= members:
            continue
        probability, used = Fraction(1), Fraction(0)
        for t in seq:
            probability *= q[t] if draft_sampling == "iid" else q[t] / (1 - used)
            used += q[t]
        total += probability
    return total


def brute_force(p, q, paths, draft_sampling):
    """min over all H of p(H) + 1 - Q(H), and the minimisers."""
    scores = {}
    for size in range(len(p) + 1):
        for members in itertools.combinations(range(len(p)), size):
            scores[members] = (sum((p[t] for t in members), Fraction(0)) + 1
                               - inside_probability(q, members, paths, draft_sampling))
    best = min(scores.values())
    return best, [h for h, s in scores.items() if s == best]


def exact_row(values):
    return np.array(values, dtype=object)


def one_step_instance(p, q):
    vocab = len(p)
    uniform = [Fraction(1, vocab)] * vocab
    return from_rows(np.array([p] + [uniform] * vocab, dtype=object),
                     np.array([q] + [uniform] * vocab, dtype=object), 1)


def test_anchors():
    p, q = exact_row(P_ANCHOR), exact_row(Q_ANCHOR)
    iid = one_step_optimum(p, q, 2)
    assert iid.acceptance[0] == Fraction(43, 50)  # .86 (Khisti et al.)
    assert set(iid.threshold_set(0).tolist()) == {1, 2}  # the two smallest p/q
    without = one_step_optimum(p, q, 2, "without-replacement")
    assert abs(float(without.acceptance[0]) - 0.9857) < 5e-5
    inst = one_step_instance(P_ANCHOR, Q_ANCHOR)
    assert optimum(inst, 2, "without-replacement", method="full").exact_value == \
        1 + without.acceptance[0]


def random_law(rng, n, zeros, denominator):
    weights = [0 if rng.random() < zeros else int(rng.integers(1, denominator + 1))
               for _ in range(n)]
    if sum(weights) == 0:
        weights[int(rng.integers(n))] = 1
    return [Fraction(w, sum(weights)) for w in weights]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(2, 5), paths=st.integers(1, 4))
def test_iid_threshold_sets_equal_the_brute_force_minimum(seed, vocab, paths):
    rng = np.random.default_rng(seed)
    p = random_law(rng, vocab, zeros=0.2, denominator=6)
    q = random_law(rng, vocab, zeros=0.2, denominator=6)
    result = one_step_optimum(exact_row(p), exact_row(q), paths)
    best, minimisers = brute_force(p, q, paths, "iid")
    assert result.acceptance[0] == best
    assert tuple(sorted(result.threshold_set(0).tolist())) in minimisers
    # float64 rows give the same value within 1e-12
    floats = one_step_optimum(np.array([float(x) for x in p]), np.array([float(x) for x in q]),
                              paths)
    assert abs(floats.acceptance[0] - float(best)) <= 1e-12


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), vocab=st.integers(3, 5), paths=st.integers(2, 4))
def test_without_replacement_equals_the_brute_force_minimum(seed, vocab, paths):
    """The enumerated minimum is the brute-force one; and (an open claim, module docstring
    of lp/closed_form.py) a threshold set attains it: a failure here is a counterexample."""
    rng = np.random.default_rng(seed)
    p = random_law(rng, vocab, zeros=0.2, denominator=6)
    q = random_law(rng, vocab, zeros=0.0, denominator=6)
    paths = min(paths, vocab - 1)
    result = one_step_optimum(exact_row(p), exact_row(q), paths, "without-replacement")
    best, minimisers = brute_force(p, q, paths, "without-replacement")
    assert result.acceptance[0] == best
    assert result.sets[0] in minimisers
    assert result.threshold_attains == [True], (p, q, paths)


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
@pytest.mark.parametrize("vocab,paths,seed", [(2, 2, 0), (3, 2, 1), (3, 3, 2), (4, 2, 3),
                                              (4, 3, 4), (5, 2, 5), (5, 4, 6), (6, 3, 7)])
def test_closed_form_equals_the_certified_lp(vocab, paths, seed, draft_sampling):
    inst = dirichlet_instance(vocab, 1, alpha=0.6, seed=seed, denominator=20)
    model = inst.model(exact=True)
    if draft_sampling == "without-replacement":
        paths = min(paths, sum(1 for x in model.draft[0] if x != 0))
    closed = one_step_optimum(model.target[0], model.draft[0], paths, draft_sampling)
    lp = optimum(inst, paths, draft_sampling, method="full")
    assert lp.certified, lp.certificate
    assert closed.value[0] == lp.exact_value  # exact rationals


def test_batch_and_many_paths_agree_with_single_rows():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.full(40, 0.3), size=6)
    q = rng.dirichlet(np.full(40, 0.3), size=6)
    q[:, :3] = 0.0  # tokens the draft never proposes
    q /= q.sum(axis=1, keepdims=True)
    results = one_step_optimum(p, q, [1, 2, 5])
    for k, result in zip([1, 2, 5], results, strict=True):
        assert result.value.shape == (6,)
        for b in range(6):
            single = one_step_optimum(p[b], q[b], k)
            assert single.value[0] == pytest.approx(result.value[b], abs=1e-15)
            exact = one_step_optimum(exact_row([Fraction(x) for x in p[b]]),
                                     exact_row([Fraction(x) for x in q[b]]), k)
            assert abs(float(exact.value[0]) - result.value[b]) <= 1e-12
            members = result.threshold_set(b)
            h_p, h_q = p[b, members].sum(), q[b, members].sum()
            assert h_p + 1 - h_q**k == pytest.approx(result.acceptance[b], abs=1e-12)
    # K = 1: alpha* = sum min(p, q) (single-draft speculative sampling is optimal)
    assert np.allclose(results[0].acceptance, np.minimum(p, q).sum(axis=1), atol=1e-12)


def test_large_vocabulary_is_monotone_in_paths():
    """V = 151,936 (a real vocabulary) with K = 1..8 in one call (a quadratic path would not
    finish); the measured speed target lives in benchmarks/closed_form.py."""
    rng = np.random.default_rng(0)
    vocab = 151_936
    p, q = rng.dirichlet(np.full(vocab, 0.1)), rng.dirichlet(np.full(vocab, 0.1))
    results = one_step_optimum(p, q, list(range(1, 9)))
    values = [r.acceptance[0] for r in results]
    assert all(0 <= a <= 1 for a in values)
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:], strict=False))
    assert values[0] == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)


def test_without_replacement_refuses_large_vocabularies():
    vocab = MAX_ENUMERATED_VOCAB + 1
    row = np.full(vocab, 1.0 / vocab)
    with pytest.raises(ValueError, match="without-replacement.*2\\^17"):
        one_step_optimum(row, row, 2, "without-replacement")


def test_bad_arguments():
    row = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="paths"):
        one_step_optimum(row, row, 0)
    with pytest.raises(ValueError, match="draft_sampling"):
        one_step_optimum(row, row, 2, "sometimes")
    with pytest.raises(ValueError, match="shape|both"):
        one_step_optimum(row, np.array([1.0]), 2)


def test_entry_point_uses_the_closed_form_at_depth_one():
    inst = dirichlet_instance(6, 1, alpha=0.5, seed=9, denominator=30)
    record = optimum(inst, 3)
    assert record.method == "closed-form" and record.certified
    assert record.exact_value == optimum(inst, 3, method="colgen").exact_value
    assert record.details["threshold_set"] is not None
    assert math.isclose(record.value, float(record.exact_value))
