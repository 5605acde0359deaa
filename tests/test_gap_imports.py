"""`speclp gap` on a rational instance imports no torch: SpecTr's rho in exact rationals
(issue 30 part 4).

The rho of SpecTr's K-SEQ on exact rows was a float64 torch bisection followed by an exact
check of three candidates; it is now a bisection on the exact sign of h (no floats, no torch).
Checked here: no torch in a gap process on rational instances; the new rho against the old
path (a transcription of the removed code, run on torch); the new rho against the definition
(h(rho) >= 0 > h(rho - step), h evaluated by the rule's own _kseq_gap, a second implementation).
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from speclp.lp.instance import dirichlet_instance, ties_instance
from speclp.rationals import parse_fraction
from speclp.verifiers import ops
from speclp.verifiers.multipath import EXACT_RHO_STEPS, _kseq_gap, exact_kseq_rho_row, kseq_rho

GAP_SCRIPT = """
import runpy, sys
sys.argv = ["speclp", "gap", sys.argv[1], "--paths", sys.argv[2], "--json"]
try:
    runpy.run_module("speclp", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exit_:
    code = exit_.code
print()
print("TORCH_IMPORTED", "torch" in sys.modules, "EXIT", code)
"""


def _rational_instances():
    return [dirichlet_instance(3, 2, seed=3, denominator=12),
            dirichlet_instance(2, 3, seed=1, denominator=10),
            ties_instance(3, 2, seed=2, denominator=6)]


@pytest.mark.parametrize("case, paths", [(0, 3), (1, 2), (2, 3)])
def test_gap_on_rational_instance_imports_no_torch(tmp_path, case, paths):
    """A gap run on a rational instance (SpecTr evaluated exactly, lossless, rational) leaves
    torch out of sys.modules (it did import torch before: SpecTr's rho ran on torch)."""
    path = _rational_instances()[case].save(tmp_path / "instance.json")
    proc = subprocess.run([sys.executable, "-c", GAP_SCRIPT, str(path), str(paths)],
                          capture_output=True, text=True, timeout=300)
    *body, last = proc.stdout.strip().splitlines()
    assert last == "TORCH_IMPORTED False EXIT 0", (last, proc.stderr[-2000:])
    result = json.loads("\n".join(body))
    spectr = result["verifiers"]["spectr"]
    assert spectr["evaluation"] != "estimate"
    assert spectr["tv_exact"] == "0"  # rho >= rho*: the exact law is lossless
    value = parse_fraction(spectr["exact"])
    assert isinstance(value, Fraction) and 1 <= value <= result["instance"]["depth"] + 1


def _old_exact_rho(target: np.ndarray, draft: np.ndarray, count: np.ndarray,
                   most: int) -> np.ndarray:
    """The removed path, transcribed: a float64 torch bisection per row, then the smallest of
    (rho (1 + 1e-12), rho, 1) whose exact gap is >= 0 (else n), as exact rationals."""
    torch = pytest.importorskip("torch")
    from speclp.verifiers.multipath import _kseq_rho_bisection

    floats = np.array([float(_kseq_rho_bisection(
        torch.as_tensor(ops.as_float64(target[r:r + 1])),
        torch.as_tensor(ops.as_float64(draft[r:r + 1])),
        torch.as_tensor(count[r:r + 1]), most, None)[0]) for r in range(len(count))])
    one = target[..., 0] * 0 + 1
    rho = ops.where(count == 0, one, one * count)
    candidates = [np.array([Fraction(min(x * (1 + 1e-12), 1e300)) for x in floats], dtype=object),
                  np.array([Fraction(x) for x in floats], dtype=object), one]
    for candidate in candidates:
        candidate = ops.minimum(candidate, rho)
        ok = _kseq_gap(target, draft, candidate, count, most) >= 0
        rho = ops.where(ok, candidate, rho)
    return rho


def _all_counts(instance, paths: int):
    """Every (row, n) of an instance for n = 0..paths: target and draft rows [R, V], counts [R]."""
    rows = len(instance.target_exact)
    return (np.tile(instance.target_exact, (paths + 1, 1)),
            np.tile(instance.draft_exact, (paths + 1, 1)), np.repeat(np.arange(paths + 1), rows))


OLD_PATH_CASES = [  # (instance, rows where the old float path's rho differed here: x86-64, AVX512)
    (dirichlet_instance(2, 3, seed=1, denominator=10), 0),
    (dirichlet_instance(2, 2, seed=0, denominator=12), 0),
    (dirichlet_instance(4, 2, seed=5, denominator=24), 0),
    (dirichlet_instance(3, 2, seed=3, denominator=12), 1),
    (ties_instance(3, 2, seed=2, denominator=6), 1),
    (dirichlet_instance(3, 3, seed=0, denominator=12), 4),
]


@pytest.mark.parametrize("case", range(len(OLD_PATH_CASES)))
def test_exact_rho_against_old_path_on_instances(case):
    """Every (row, n <= 4) of an instance: the exact rho equals the old path's value exactly,
    but for the listed rows where the old float bisection mis-signed h near rho* (it kept
    float64 rounding's sign in a late step, or fell back to its 1e-12 bump); there the
    old rho is above the new one, which is valid too (h >= 0 exactly): the old one was not
    the tight bisection end. The first three instances agree on every row. (How many rows
    differ depends on float64 rounding in torch's sums and pow: recorded, bounded by 3%.)"""
    instance, differing = OLD_PATH_CASES[case]
    target, draft, count = _all_counts(instance, 4)
    new = kseq_rho(target, draft, count, 4)
    old = _old_exact_rho(target, draft, count, 4)
    assert all(isinstance(v, Fraction) for v in new)
    unequal = new != old
    if differing == 0:
        assert not unequal.any()
    assert unequal.sum() <= 0.03 * len(new)  # float rounding decides the sign only near rho*
    assert (new[unequal] < old[unequal]).all()
    assert (old[unequal] - new[unequal] <= Fraction(1, 10 ** 11)).all()
    assert (_kseq_gap(target, draft, new, count, 4) >= 0).all()


def _bisection_on_kseq_gap(target, draft, count):
    """A second implementation of the exact rho: the same bisection, h from the rule's own
    _kseq_gap (every token's min(q, p / rho), no sort, no prefix sums), all rows at once."""
    one = np.array([Fraction(1)] * len(count), dtype=object)
    low, high = one, np.array([Fraction(max(int(n), 1)) for n in count], dtype=object)
    at_one = _kseq_gap(target, draft, one, count, 4) >= 0
    for _ in range(EXACT_RHO_STEPS):
        middle = (low + high) / 2
        ok = _kseq_gap(target, draft, middle, count, 4) >= 0
        high = np.where(ok, middle, high)
        low = np.where(ok, low, middle)
    return np.where(at_one, one, high)


def test_exact_rho_equals_a_second_implementation():
    """kseq_rho on exact rows equals the bisection replayed on _kseq_gap, on every (row, n) of
    two instances (one with ties)."""
    for instance in (dirichlet_instance(4, 2, seed=2, denominator=100),
                     ties_instance(3, 2, seed=4, denominator=6)):
        target, draft, count = _all_counts(instance, 4)
        assert list(kseq_rho(target, draft, count, 4)) == list(
            _bisection_on_kseq_gap(target, draft, count))


def _random_rational_rows(rng: np.random.Generator, rows: int, vocab: int, denominator: int):
    raw = rng.integers(0, denominator, size=(2, rows, vocab))
    raw[..., 0] += 1  # no all-zero row
    raw[1, : rows // 4] = raw[0, : rows // 4]  # some draft rows equal the target (ratio 1 ties)
    return [np.array([[Fraction(int(x), int(row.sum())) for x in row] for row in part],
                     dtype=object) for part in raw]


def test_exact_rho_is_the_tight_bisection_end_and_never_above_the_old_path():
    """Random rational rows with zeros and ties, n = 0..4: h(rho) >= 0 exactly (lossless);
    rho = 1 or h(rho - (n - 1) / 2^48) < 0 (the bisection's lower end: tight to one step);
    and rho <= the old path's rho (its float steps could only land above the exact end)."""
    rng = np.random.default_rng(7)
    equal = total = 0
    for vocab, denominator in ((2, 5), (3, 8), (5, 997), (8, 12), (16, 100)):
        target, draft = _random_rational_rows(rng, 24, vocab, denominator)
        count = rng.integers(0, 5, size=24)
        rho = kseq_rho(target, draft, count, 4)
        old = _old_exact_rho(target, draft, count, 4)
        assert (_kseq_gap(target, draft, rho, count, 4) >= 0).all()
        step = np.array([Fraction(max(int(n), 1) - 1, 2 ** EXACT_RHO_STEPS) for n in count],
                        dtype=object)
        above_one = rho > 1
        below = _kseq_gap(target[above_one], draft[above_one], (rho - step)[above_one],
                          count[above_one], 4)
        assert (below < 0).all()
        assert (rho <= old).all()
        equal += int((rho == old).sum())
        total += len(rho)
    assert equal >= 0.9 * total  # the float path mis-signs h only near rho* (rare)


def test_exact_rho_row_against_a_hand_solved_cubic():
    """V = 2, n = 2, p = (1/2, 1/2), q = (3/4, 1/4): the ratios are 2/3 and 2, so for rho in
    (1, 2) beta(rho) = (1/2) / rho + 1/4 and h(rho) = 1/2 + rho/4 - 1 + (3/4 - 1/(2 rho))^2;
    16 rho^2 h(rho) = 4 rho^3 + rho^2 - 12 rho + 4, whose root in (1, 2) is rho*."""
    half = Fraction(1, 2)
    rho = exact_kseq_rho_row([half, half], [Fraction(3, 4), Fraction(1, 4)], 2)
    roots = [r.real for r in np.roots([4, 1, -12, 4]) if abs(r.imag) < 1e-12 and 1 < r.real < 2]
    assert len(roots) == 1 and isinstance(rho, Fraction)
    assert abs(float(rho) - roots[0]) <= 1e-13
    cubic = 4 * rho ** 3 + rho ** 2 - 12 * rho + 4  # exact: >= 0 at rho, < 0 one step below
    below = rho - Fraction(1, 2 ** EXACT_RHO_STEPS)
    assert cubic >= 0 > 4 * below ** 3 + below ** 2 - 12 * below + 4
    assert exact_kseq_rho_row([half, half], [half, half], 3) == 1  # p = q: h(1) = 0
