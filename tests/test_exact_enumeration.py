"""Exact verifier laws on fewer configurations (verifiers/exact.py) keep them exact.

References: the same law enumerated over ALL ordered K-tuples (enumeration="ordered"), and
a brute-force permutation of the drafted paths for the order_invariant declarations.
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from speclp.lp.instance import dirichlet_instance, from_rows, ties_instance
from speclp.verifiers.drafts import multiset_configurations, ordered_configurations
from speclp.verifiers.exact import LawMassError, draft_tree, exact_result
from speclp.verifiers.registry import block_law, get_verifier, verifier_names
from speclp.verifiers.tree import num_nodes, prefix_node_indices


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
@pytest.mark.parametrize("vocab,depth,paths,seed", [(2, 2, 3, 0), (3, 2, 2, 1), (2, 3, 2, 2)])
def test_smallest_enumeration_equals_ordered_tuples_exactly(vocab, depth, paths, seed,
                                                       draft_sampling):
    model = dirichlet_instance(vocab, depth, alpha=0.7, seed=seed, denominator=12).model(
        exact=True)
    for name in verifier_names(include_broken=True):
        fast = exact_result(model, name, paths, draft_sampling, enumeration="enumerated")
        reference = exact_result(model, name, paths, draft_sampling, enumeration="ordered")
        assert (fast.emit == reference.emit).all(), name  # exact rationals
        assert fast.block_efficiency == reference.block_efficiency
        spec = get_verifier(name)
        expected = ("single path" if not spec.multipath else
                    "multisets" if spec.order_invariant else "ordered")
        assert fast.enumeration == expected
        if expected != "ordered":
            assert fast.configurations < reference.configurations


def test_multiset_counts():
    model = dirichlet_instance(4, 3, seed=0).model()  # Dirichlet rows: every path has q > 0
    assert len(multiset_configurations(model, 3)) == math.comb(64 + 2, 3) == 45_760
    assert len(ordered_configurations(model, 3)) == 64**3
    ordered = ordered_configurations(model, 2, "without-replacement")
    assert len(ordered) == 64 * 63
    assert abs(ordered.weight.sum() - 1) < 1e-12


def per_configuration_law(model, configs, name):
    """[C, N, V] P(output node, token | configuration), exact, aggregated by node."""
    law = block_law(name, draft_tree(model, configs.tokens))
    joint = law.joint()  # [C, K, L+1, V]
    nodes = prefix_node_indices(configs.tokens, model.vocab_size)  # [C, K, L+1]
    out = np.empty((len(configs), num_nodes(model.vocab_size, model.depth), model.vocab_size),
                   dtype=object)
    out[...] = Fraction(0)
    rows = np.broadcast_to(np.arange(len(configs))[:, None, None], nodes.shape)
    np.add.at(out, (rows.reshape(-1), nodes.reshape(-1)), joint.reshape(-1, model.vocab_size))
    return out


@pytest.mark.parametrize("name", [n for n in verifier_names(include_broken=True)
                                  if get_verifier(n).order_invariant])
def test_declared_order_invariance_holds(name):
    """Permuting the drafted paths of every ordered tuple leaves the node-aggregated law of a
    verifier that declares order_invariant unchanged, configuration by configuration."""
    for inst in (dirichlet_instance(2, 2, alpha=0.7, seed=3, denominator=10),
                 ties_instance(3, 2, seed=1)):
        model = inst.model(exact=True)
        configs = ordered_configurations(model, 3)
        base = per_configuration_law(model, configs, name)
        for perm in itertools.permutations(range(3)):
            moved = configs.part(0, len(configs))
            moved.paths = configs.paths[:, list(perm)]
            assert (per_configuration_law(model, moved, name) == base).all(), (name, perm)


def test_an_order_dependent_verifier_is_caught():
    """The check above can fail: SpecInfer tries the drafted children in order."""
    model = dirichlet_instance(2, 2, alpha=0.7, seed=3, denominator=10).model(exact=True)
    configs = ordered_configurations(model, 2)
    moved = configs.part(0, len(configs))
    moved.paths = configs.paths[:, [1, 0]]
    assert not (per_configuration_law(model, moved, "specinfer")
                == per_configuration_law(model, configs, "specinfer")).all()


def test_single_path_verifiers_refuse_too_many_distinct_paths():
    model = dirichlet_instance(2, 1, seed=0, denominator=4).model(exact=True)
    with pytest.raises(ValueError, match="distinct"):
        exact_result(model, "bv", paths=3, draft_sampling="without-replacement")
    assert exact_result(model, "bv", paths=3).block_efficiency == \
        exact_result(model, "bv", paths=1).block_efficiency
    assert isinstance(exact_result(model, "bv", paths=3).block_efficiency, Fraction)
    assert np.isfinite(float(exact_result(model, "bv", paths=2,
                                          draft_sampling="without-replacement").total_variation))


@pytest.mark.parametrize("draft_sampling", ["iid", "without-replacement"])
def test_sampled_configurations_follow_the_draft_law(draft_sampling):
    # frequencies of the sampled ordered tuples against the enumerated probabilities
    # (verifiers.drafts.ordered_configurations, the independent reference): every tuple
    # within 5 binomial standard deviations, fixed seed
    from speclp.verifiers.exact import sample_configurations

    model = dirichlet_instance(2, 2, alpha=0.8, seed=5).model()
    samples = 40_000
    tokens = sample_configurations(model, 2, draft_sampling, samples, np.random.default_rng(7))
    configs = ordered_configurations(model, 2, draft_sampling)
    counts: dict[bytes, int] = {}
    for row in tokens:
        counts[row.tobytes()] = counts.get(row.tobytes(), 0) + 1
    probability = np.asarray(configs.probability, dtype=np.float64)
    assert probability.sum() == pytest.approx(1.0, abs=1e-12)
    seen = 0
    for toks, p in zip(np.asarray(configs.tokens), probability, strict=True):
        observed = counts.get(np.ascontiguousarray(toks, dtype=tokens.dtype).tobytes(), 0)
        seen += observed
        assert abs(observed - samples * p) <= 5 * np.sqrt(samples * p * (1 - p)) + 1
    assert seen == samples  # no tuple outside the support (without replacement: distinct)


# ---------------------------------------------------------------------------
# every law sums to one where it is made; rational rows stay rational
# ---------------------------------------------------------------------------

def _exact_scalars(values):
    """True when every entry is a Fraction or an int (never a float, never a bool)."""
    return all(isinstance(x, (Fraction, int)) and not isinstance(x, bool)
               for x in np.asarray(values).reshape(-1))


# rows (integer weights, normalised) on which traversal's walker used to divide int 0 by int 1
# and turn its law into floats (V = 3, L = 2, K = 3)
FLOATS_BEFORE = (
    [[2, 0, 2], [1, 3, 1], [0, 0, 2], [3, 0, 1], [0, 2, 1], [2, 1, 0], [1, 2, 2], [2, 3, 1],
     [2, 0, 1], [2, 1, 0], [1, 2, 1], [1, 0, 0], [0, 2, 2]],
    [[2, 1, 2], [2, 3, 1], [2, 2, 0], [0, 2, 1], [2, 2, 1], [3, 1, 2], [1, 2, 1], [1, 2, 1],
     [2, 1, 0], [2, 0, 3], [0, 3, 1], [1, 3, 0], [0, 2, 1]])


def _weights_instance(target, draft, depth):
    def rows(weights):
        out = np.empty((len(weights), len(weights[0])), dtype=object)
        for i, w in enumerate(weights):
            out[i] = [Fraction(x, sum(w)) for x in w]
        return out

    return from_rows(rows(target), rows(draft), depth, "weights")


@pytest.mark.parametrize("vocab,depth,paths,seed", [(3, 2, 3, 0), (2, 3, 2, 1), (3, 1, 3, 2)])
def test_every_registered_verifier_stays_rational(vocab, depth, paths, seed):
    """Every registered verifier, walked on rational rows (ties and zeros), gives exact
    outputs: its batch law on every ordered configuration and its exact law."""
    extra = [_weights_instance(*FLOATS_BEFORE, 2)] if (vocab, depth, paths) == (3, 2, 3) else []
    for inst in [ties_instance(vocab, depth, seed=seed),
                 dirichlet_instance(vocab, depth, alpha=0.4, seed=seed, denominator=5)] + extra:
        model = inst.model(exact=True)
        tree = draft_tree(model, ordered_configurations(model, paths).tokens)
        for name in verifier_names(include_broken=True):
            law = block_law(name, tree)
            assert _exact_scalars(law.stop) and _exact_scalars(law.correction), name
            for enumeration in ("auto", "ordered"):
                result = exact_result(model, name, paths, enumeration=enumeration)
                assert isinstance(result.block_efficiency, Fraction), name
                assert _exact_scalars(result.emit), name


def _halved(tree):
    law = block_law("bv", tree)
    return type(law)(law.stop / 2, law.correction)  # exact on rationals (Fraction / int)


def _bent_rows(tree):
    law = block_law("bv", tree)
    return type(law)(law.stop, law.correction * 3 / 4)


@pytest.mark.parametrize("law", [_halved, _bent_rows])
@pytest.mark.parametrize("exact", [True, False])
def test_a_law_that_does_not_sum_to_one_is_an_error(law, exact):
    model = dirichlet_instance(2, 2, seed=0, denominator=8).model(exact=exact)
    with pytest.raises(LawMassError, match=law.__name__ + r": .*configuration \[\[.*not 1"):
        exact_result(model, law, 1)


def test_float_rounding_is_not_a_mass_error():
    """float64 laws sum to one within 1e-12, not exactly: every verifier passes."""
    model = dirichlet_instance(3, 2, alpha=0.5, seed=3).model(exact=False)
    for name in verifier_names(include_broken=True):
        exact_result(model, name, 2, enumeration="ordered")


def test_spectr_gbv_undefined_mass_agrees_exact_and_float():
    inst = ties_instance(3, 2, seed=2)
    exact = exact_result(inst.model(exact=True), "spectr_gbv", 2, enumeration="ordered")
    floats = exact_result(inst.model(exact=False), "spectr_gbv", 2, enumeration="ordered")
    assert exact.undefined_configurations == floats.undefined_configurations > 0
    assert exact.undefined_mass == 1 - exact.emit.sum() > 0
    assert abs(floats.undefined_mass - float(exact.undefined_mass)) < 1e-12
    clean = exact_result(dirichlet_instance(3, 2, seed=2).model(exact=True), "spectr_gbv", 2)
    assert clean.undefined_configurations == 0 and clean.emit.sum() == 1
