"""The reference LP-optimal verifier (proofs/reference.py): the column-generation master's
optimal mixture of priorities, run as a verifier, is lossless and reaches the certified
optimum EXACTLY. The law is enumerated configuration by configuration (verifiers.exact),
independently of the certificate (which checked the mixture's r against the LP)."""

from fractions import Fraction

import pytest
from speclp.lp import optimum
from speclp.lp.instance import dirichlet_instance
from speclp.proofs.reference import mixture_law, reference_check
from speclp.verifiers.exact import exact_result

# (draft sampling, V, L, K, alpha, seed): small rational instances (rows in multiples of 1/20);
# without replacement only where K distinct paths can be drawn (K <= the drafted support)
CASES = [
    ("iid", 2, 1, 2, 1.0, 0), ("iid", 3, 1, 3, 0.5, 1), ("iid", 4, 1, 2, 1.0, 2),
    ("iid", 2, 2, 2, 1.0, 3), ("iid", 3, 2, 2, 0.5, 4), ("iid", 2, 2, 3, 2.0, 5),
    ("iid", 2, 3, 2, 1.0, 6),
    ("without-replacement", 3, 1, 2, 1.0, 0), ("without-replacement", 4, 1, 3, 2.0, 1),
    ("without-replacement", 2, 2, 2, 1.0, 3), ("without-replacement", 3, 2, 2, 2.0, 4),
    ("without-replacement", 2, 2, 3, 2.0, 5),
]


@pytest.mark.parametrize("draft_sampling,vocab,depth,paths,alpha,seed", CASES)
def test_reference_reaches_the_certified_optimum_exactly(draft_sampling, vocab, depth, paths,
                                                         alpha, seed):
    instance = dirichlet_instance(vocab, depth, alpha=alpha, seed=seed, denominator=20)
    out = reference_check(instance, paths, verifiers=("bv",), draft_sampling=draft_sampling)
    assert out["certified"]
    reference = out["reference"]
    assert reference["total_variation"] == 0.0  # computed exactly: Fraction(0)
    assert reference["equals_optimum"]
    assert Fraction(reference["block_efficiency"]) == Fraction(out["optimum"]["exact"])
    assert out["passed"]
    # no practical verifier beats the certified optimum
    for name, scored in out["verifiers"].items():
        assert Fraction(scored["block_efficiency"]) <= Fraction(out["optimum"]["exact"]), name


def test_reference_law_on_float_rows_matches_the_exact_one():
    """The same law function on torch float64 rows (the engine's path) agrees with the exact law
    to 1e-12."""
    instance = dirichlet_instance(3, 2, alpha=1.0, seed=7, denominator=20)
    record = optimum(instance, paths=2, method="colgen")
    law = mixture_law(record.mixture, 3, 2)
    exact = exact_result(instance.model(exact=True), law, paths=2)
    floats = exact_result(instance.model(exact=False), law, paths=2)
    assert exact.block_efficiency == record.exact_value
    assert abs(float(floats.block_efficiency) - float(exact.block_efficiency)) <= 1e-12
    assert float(floats.total_variation) <= 1e-12


def test_a_wrong_mixture_is_caught():
    """The check can fail: the mixture of ANOTHER instance run on this one is lossy or below
    the optimum, and reference_check's exact comparison says so."""
    here = dirichlet_instance(2, 2, alpha=1.0, seed=3, denominator=20)
    other = dirichlet_instance(2, 2, alpha=1.0, seed=8, denominator=20)
    record = optimum(other, paths=2, method="colgen")
    result = exact_result(here.model(exact=True), mixture_law(record.mixture, 2, 2), paths=2)
    own = optimum(here, paths=2, method="colgen").exact_value
    assert result.total_variation != 0 or result.block_efficiency != own
