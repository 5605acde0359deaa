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
                         "specinfer": {"mean": 0.0}} for k in (1, 3)}
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
        assert got["specinfer"] == {"mean": 0.0}  # no exact form used here: left as sampled
