"""Symbolic proofs (speclp.proofs.symbolic) and the standalone checker of shipped proofs.

Independent references: exact rational arithmetic (fractions) for the algebra, the numeric
engine (exact laws and certified LP optima on concrete instances) for the symbolic laws
and counterexamples, and the sympy-only checker for every exported proof.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers_proofs import (
    CERTIFICATES,
    CHECKER,
    combination_negative,
    dual_changed,
    first,
    load_module,
    root_condition_dropped,
    split_outcomes,
    witness_outside,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from speclp.lp import optimum
from speclp.lp.instance import instance_from_json
from speclp.proofs.symbolic.algebra import RationalFunction, Ring, to_fmpq, to_fraction
from speclp.proofs.symbolic.cells import Branch, Cell
from speclp.proofs.symbolic.claims import CLAIMS
from speclp.proofs.symbolic.export import strict_document
from speclp.proofs.symbolic.prove import prove
from speclp.proofs.symbolic.shapes import make_shape
from speclp.verifiers.exact import configurations, exact_result
from speclp.verifiers.exact import draft_tree as make_draft_tree
from speclp.verifiers.registry import block_law


def load_checker():
    return load_module("speclp_proof_checker", CHECKER)


# ---------------------------------------------------------------------------
# algebra: rational functions against fractions at random points
# ---------------------------------------------------------------------------

RING = Ring(["a", "b", "c"])
small = st.fractions(min_value=-3, max_value=3, max_denominator=7)


def poly_strategy():
    terms = st.lists(st.tuples(st.integers(-4, 4), st.tuples(*[st.integers(0, 2)] * 3)),
                     min_size=1, max_size=4)
    return terms.map(lambda ts: RING.ctx.from_dict({m: c for c, m in ts}) if any(
        c for c, _ in ts) else RING.one)


@settings(max_examples=60, deadline=None)
@given(poly_strategy(), poly_strategy(), poly_strategy(), st.tuples(small, small, small))
def test_rational_function_arithmetic_matches_fractions(f, g, h, point):
    x = RationalFunction.make(f, RING.one, RING)
    y = RationalFunction.make(g, RING.one, RING)
    z = RationalFunction.make(h, RING.one, RING)
    q = [to_fmpq(v) for v in point]
    values = {k: to_fraction(v.evaluate(q)) for k, v in (("x", x), ("y", y), ("z", z))}
    checks = [(x + y * z, values["x"] + values["y"] * values["z"]),
              (x - y, values["x"] - values["y"])]
    if not z.is_zero() and values["z"] != 0:
        checks.append((x / z + y, values["x"] / values["z"] + values["y"]))
    for expr, expected in checks:
        assert to_fraction(expr.evaluate(q)) == expected
    if not z.is_zero():
        w = (x * z) / z
        assert (w - x).is_zero()  # canonical form: the quotient cancels exactly


def test_substitution_matches_evaluation():
    a, b, c = (RING.variable(i) for i in range(3))
    f = a * b - c * c + 3
    value = (b + 1) / (c + 2)
    g = f.substitute(0, value)
    for point in ([Fraction(1, 2), Fraction(2, 3), Fraction(5, 7)], [Fraction(-1), 2, 3]):
        q = [to_fmpq(v) for v in point]
        moved = list(q)
        moved[0] = value.evaluate(q)
        assert g.evaluate(q) == f.evaluate(moved)


# ---------------------------------------------------------------------------
# cells: decisions are proved or split, never guessed
# ---------------------------------------------------------------------------

def test_undecided_comparison_branches_and_decided_one_does_not():
    shape = make_shape(2, 1)
    root = Cell.root(shape)
    p0 = root.model().target[0, 0]
    q0 = root.model().draft[0, 0]
    with root.active():
        with pytest.raises(Branch) as branch:
            _ = p0 < q0
        assert {"<", ">="} == set(branch.value.outcomes)
        assert bool(p0 >= 0)  # a domain condition
        assert bool(1 - p0 >= 0)
        assert bool(p0 + q0 <= 2)  # needs a certificate: (1 - p0) + (1 - q0) >= 0
    derived = [f for f in root.facts if f.kind == "derived"]
    assert derived, "the last comparison should have been proved by a certificate"


def test_symbolic_bv_law_agrees_with_exact_law_at_witnesses():
    """Run BV's law on every cell of (V, L) = (2, 1); at each cell's witness the symbolic
    block efficiency equals the exact law of the concrete instance (numeric engine)."""
    from speclp.proofs.symbolic.explore import explore
    from speclp.verifiers.exact import aggregate, block_efficiency_from_emit

    shape = make_shape(2, 1)

    def compute(cell):
        model = cell.model()
        configs = configurations(model, 1)
        law = block_law("bv", make_draft_tree(model, configs.tokens))
        return block_efficiency_from_emit(model, aggregate(model, configs, law))

    tree = explore(shape, compute)
    leaves = tree.leaves()
    assert len(leaves) >= 3
    for node in leaves:
        for point in node.cell.samples[:3]:
            inst = instance_from_json(shape.instance_json(point))
            exact = exact_result(inst.model(exact=True), "bv").block_efficiency
            assert to_fraction(node.result.evaluate(point)) == Fraction(exact)


# ---------------------------------------------------------------------------
# proofs of the smallest shapes, exported and re-checked
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bv21():
    return prove("bv-optimal", 2, 1)


def test_bv_optimal_v2_l1_is_proved_and_checks(bv21, tmp_path):
    assert bv21.holds and bv21.complete
    assert bv21.counts["kept"] >= 3 and bv21.counts["failing"] == 0
    checker = load_checker()
    path = tmp_path / "proof.json"
    path.write_text(json.dumps(strict_document(bv21.document)))
    report = checker.check_file(str(path))
    assert report["nodes"].get("leaf", 0) == bv21.counts["kept"]
    # the full document (statement, summary, LP matrices, ...) is not a strict file
    with pytest.raises(checker.ProofError, match="is not read by the checker"):
        checker.check_document(bv21.document)


def _tampered(doc, change):
    bad = copy.deepcopy(doc)
    change(bad)
    return bad


def _negative_coefficient_or_flipped_condition(d):
    if not combination_negative(d):
        first(d, "leaf")["conditions"][0][1] = "<"


# tamper kinds shared with tests/test_certificate_tampers.py (there: on the shipped files)
TAMPERED = {
    "dual": dual_changed,
    "witness": witness_outside,
    "split": split_outcomes(lambda o: o[:1]),
    "root": root_condition_dropped,
    "fact": _negative_coefficient_or_flipped_condition,
}


@pytest.mark.parametrize("name", list(TAMPERED))
def test_checker_rejects_tampered_proofs(bv21, name):
    checker = load_checker()
    checker.Checker(strict_document(bv21.document)).check()  # untampered: accepted
    bad = _tampered(strict_document(bv21.document), TAMPERED[name])
    with pytest.raises(checker.ProofError):
        checker.Checker(bad).check()


def test_token_optimal_v2_l2_is_refuted_by_a_counterexample_the_engine_confirms():
    """The shipped refutation (`speclp prove token-optimal --vocab 2 --depth 2`, minutes, so
    regenerated by speclp.proofs.symbolic.ship rather than here): at its rational point
    the engine's certified LP optimum exceeds token-level verification's exact block
    efficiency by the difference the proof found on the cell."""
    path = CERTIFICATES / "refuted" / "token-optimal-V2-L2.json"
    refutation = json.loads(path.read_text())  # strict: instance, point, the engine's value
    ce = refutation["counterexample"]
    inst = instance_from_json(ce["instance"])
    record = optimum(inst, 1, method="full")
    token = Fraction(exact_result(inst.model(exact=True), "token").block_efficiency)
    assert record.certified
    assert record.exact_value > token  # the token-level verifier is not optimal here
    assert Fraction(ce["engine"]["token_block_efficiency"]) == token
    readable = (CERTIFICATES / "refuted" / "token-optimal-V2-L2.md").read_text()
    assert f"`{record.exact_value - token}`" in readable  # the difference at the point


def test_gbv_k1_is_bv_v2_l1():
    """Proved and re-checked; the check says something: with GBV's skewed rows of K = 2 in
    place of K = 1 (not BV's rows) the checker rejects the same file."""
    run = prove("gbv-k1-is-bv", 2, 1)
    assert run.holds and run.complete
    doc = strict_document(run.document)
    checker = load_checker()
    assert checker.check_document(doc)["nodes"]["leaf"] == run.counts["kept"]
    rows = checker.skewed_rows
    checker.skewed_rows = lambda ar, inst, best, paths, orders: rows(ar, inst, best, 2, orders)
    try:
        with pytest.raises(checker.ProofError, match="(differs from BV|depend on the key order)"):
            checker.check_document(doc)
    finally:
        checker.skewed_rows = rows


def test_l1_optimum_v2_k2_without_replacement():
    run = prove("l1-optimum", 2, 1, 2, "without-replacement")
    assert run.holds and run.complete
    assert run.counts["excluded"] >= 1  # q with one positive token cannot draw 2 distinct


def test_claims_listed():
    assert set(CLAIMS) == {"bv-optimal", "token-optimal", "l1-optimum", "gbv-k1-is-bv",
                           "gbv-l1-closed-form"}


# ---------------------------------------------------------------------------
# shipped proofs: every one re-checks with the standalone checker
# ---------------------------------------------------------------------------

SHIPPED = sorted(CERTIFICATES.glob("*.json.gz"))


# Shapes of ship.SHIPPED without a shipped proof (issue 13 left them open; the reasons are in
# proofs/certificates/README.md). A new proof must be shipped, not added here.
NOT_SHIPPED = {
    "bv-optimal-V2-L2", "gbv-l1-closed-form-V3-L1-K3",
    "l1-optimum-V3-L1-K1", "l1-optimum-V3-L1-K1-without-replacement",
    "l1-optimum-V3-L1-K2", "l1-optimum-V3-L1-K2-without-replacement",
    "l1-optimum-V3-L1-K3", "l1-optimum-V3-L1-K3-without-replacement",
}


def test_proofs_are_shipped():
    """Every listed shape is shipped except NOT_SHIPPED, and each of those is named in the
    certificates README with its reason (so the documented state cannot drift)."""
    names = {p.name.removesuffix(".json.gz") for p in SHIPPED}
    from speclp.proofs.symbolic.prove import proof_stem
    from speclp.proofs.symbolic.ship import SHIPPED as LISTED

    listed = {proof_stem(*shape) for shape in LISTED}
    assert NOT_SHIPPED <= listed
    assert listed - NOT_SHIPPED <= names, f"missing shipped proofs: {sorted(listed - NOT_SHIPPED - names)}"
    readme = (CERTIFICATES / "README.md").read_text()
    for stem in NOT_SHIPPED:
        base = stem.removesuffix("-without-replacement")
        assert base.rsplit("-K", 1)[0] in readme, f"{stem} is not shipped and not explained"


SLOW_BYTES = 100_000  # gzipped proofs above this take a minute or more to re-check here
# (bv-optimal V = 3, L = 1: 8,575 cells, about 110 s of checker CPU; it runs in the suite too)


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=[pytest.mark.slow] if p.stat().st_size > SLOW_BYTES else [],
                 id=p.name.removesuffix(".json.gz")) for p in SHIPPED])
def test_shipped_proof_rechecks(path):
    checker = load_checker()
    report = checker.check_file(str(path))
    entry = json.loads((CERTIFICATES / "index.json").read_text())[path.name.removesuffix(".json.gz")]
    assert entry["proved"]
    assert report["nodes"].get("leaf", 0) == entry["cells"]["kept"]


def test_shipped_refutation_rechecks():
    """The checker verifies the refutation of token-optimal at (2, 2) by its own laws: the
    token law's value at the file's instance is 7/4, BV's law (a feasible point of the
    rebuilt LP) gives 2 (docs/theory.md section 3.3)."""
    report = load_checker().check_file(str(CERTIFICATES / "refuted" / "token-optimal-V2-L2.json"))
    assert report["refuted"] and report["verifier_value"] == "7/4"
    assert report["feasible_value"] == "2"


def test_progress_shares_sum_to_one_and_time_limit_stops():
    shares = []
    run = prove("bv-optimal", 2, 1, progress=shares.append)
    assert run.complete and not run.stopped
    assert len(shares) == run.counts["kept"] + run.counts["empty"]
    assert abs(sum(shares) - 1) < 1e-9
    stopped = prove("bv-optimal", 2, 1, time_limit=0.0)
    assert stopped.stopped.startswith("time limit") and not stopped.complete
    assert stopped.counts["unexplored"] >= 1


def test_checker_is_standalone():
    """The checker runs as a script importing nothing from speclp."""
    source = CHECKER.read_text()
    assert "speclp" not in "\n".join(line for line in source.splitlines()
                                     if line.startswith(("import", "from")))
    smallest = min(SHIPPED, key=lambda p: p.stat().st_size)
    out = subprocess.run([sys.executable, str(CHECKER), str(smallest)], capture_output=True,
                         text=True, cwd="/")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK")


# ---------------------------------------------------------------------------
# CLI contract
# ---------------------------------------------------------------------------

def test_cli_prove_json_and_bad_input(tmp_path):
    from speclp.cli import app
    from typer.testing import CliRunner

    runner = CliRunner()
    result = runner.invoke(app, ["prove", "bv-optimal", "--vocab", "2", "--depth", "1",
                                 "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["proved"] is True and Path(out["json"]).exists() and Path(out["markdown"]).exists()
    bad = runner.invoke(app, ["prove", "l1-optimum", "--vocab", "2", "--depth", "2",
                              "--out", str(tmp_path)])
    assert bad.exit_code == 2
    assert "--depth" in bad.output and "Traceback" not in bad.output
    unknown = runner.invoke(app, ["prove", "nonsense", "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and "CLAIM" in unknown.output
    refused = runner.invoke(app, ["prove", "token-optimal", "--draft-sampling",
                                  "without-replacement", "--out", str(tmp_path)])
    assert refused.exit_code == 2 and "--draft-sampling" in refused.output
    limit = runner.invoke(app, ["prove", "bv-optimal", "--vocab", "2", "--depth", "2",
                                "--time-limit", "0.001", "--out", str(tmp_path / "limited")])
    # stopped by the limit: its own status 4, neither a refutation (1) nor a bug (3)
    assert limit.exit_code == 4 and "STOPPED" in limit.output and "time limit" in limit.output
    assert "CLAIM FAILED" not in limit.output
    assert not (tmp_path / "limited").exists()  # nothing half-written
    limit = runner.invoke(app, ["prove", "bv-optimal", "--vocab", "2", "--depth", "2", "--json",
                                "--time-limit", "0.001", "--out", str(tmp_path / "limited")])
    payload = json.loads(limit.stdout)
    assert limit.exit_code == 4 and payload["proved"] is False
    assert payload["status"] == "stopped: time limit"
    assert out["status"] == "proved"
    written = json.loads(Path(out["json"]).read_text())  # strict: what the checker reads
    assert "summary" not in written and "statement" not in written
    assert load_checker().check_document(written)["nodes"]["leaf"] > 0
    bad_limit = runner.invoke(app, ["prove", "bv-optimal", "--time-limit", "0",
                                    "--out", str(tmp_path)])
    assert bad_limit.exit_code == 2 and "--time-limit" in bad_limit.output


@pytest.mark.parametrize("claim,flags,named", [
    ("bv-optimal", ["--paths", "1"], "--paths"),
    ("gbv-k1-is-bv", ["--paths", "1"], "--paths"),
    ("token-optimal", ["--paths", "2"], "--paths"),
    ("bv-optimal", ["--draft-sampling", "iid"], "--draft-sampling"),
    ("gbv-l1-closed-form", ["--draft-sampling", "iid"], "--draft-sampling"),
])
def test_cli_prove_refuses_flags_the_claim_does_not_use(tmp_path, claim, flags, named):
    """A flag the claim does not use is bad input (exit 2, one line naming it), even at the
    value the claim would take; nothing runs and nothing is written."""
    from speclp.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["prove", claim, *flags, "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert f"error: {named}:" in result.output and "takes" in result.output
    assert not (tmp_path / "x").exists()


def test_cli_prove_accepts_the_flags_a_claim_uses(tmp_path):
    from speclp.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["prove", "l1-optimum", "--paths", "2", "--draft-sampling",
                                      "without-replacement", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "proved"


def test_numpy_object_arrays_keep_working():
    """The ops additions (min / max through the values' own methods) leave Fractions alone."""
    from speclp.verifiers import ops

    a = np.array([Fraction(1, 2), Fraction(3, 2)], dtype=object)
    assert list(ops.minimum(a, 1)) == [Fraction(1, 2), 1]
    assert list(ops.positive_part(a - 1)) == [0, Fraction(1, 2)]


def test_poly_text_is_flints_text():
    """poly_text (the leak-free text of a polynomial, the key of every sign and fact lookup)
    gives flint's own str() character for character: signs, unit and huge coefficients,
    powers, constants and the zero polynomial, on random polynomials of a real shape's ring."""
    import random

    from speclp.proofs.symbolic.algebra import poly_text

    ring = make_shape(3, 1).ring
    rng = random.Random(27)
    for _ in range(1500):
        terms = {}
        for _ in range(rng.randint(0, 7)):
            monom = tuple(rng.choice((0, 0, 0, 1, 2, 3)) for _ in range(ring.nvars))
            terms[monom] = rng.choice((1, -1, 2, -3, 10**25, -7 * 10**30, rng.randint(-60, 60)))
        poly = ring.ctx.from_dict(terms)
        assert poly_text(poly) == str(poly)
    assert poly_text(ring.zero) == "0" == str(ring.zero)
    assert poly_text(-ring.one * 5) == "-5"


@pytest.mark.parametrize(("claim", "vocab", "paths", "sampling"), [
    ("bv-optimal", 2, 1, "iid"), ("l1-optimum", 2, 2, "iid"),
    ("l1-optimum", 2, 2, "without-replacement")])
def test_proof_document_unchanged_by_leak_free_text(monkeypatch, claim, vocab, paths, sampling):
    """The memory fixes of issue 27 part 4 (poly_text instead of flint's leaking str; finished
    split and empty cells releasing their samples and caches) change no proof: the whole
    document (seconds aside) equals the one produced with flint's str as the text of every
    polynomial and nothing released, as before the fixes."""
    from speclp.proofs.symbolic import algebra, cells, explore, export, positivity
    from speclp.proofs.symbolic import prove as prove_module

    def without_seconds(document):
        out = copy.deepcopy(document)
        del out["summary"]["seconds"]
        return out

    after = without_seconds(prove(claim, vocab, 1, paths, sampling).document)
    for module in (algebra, cells, explore, export, positivity, prove_module):
        monkeypatch.setattr(module, "poly_text", str)
    monkeypatch.setattr(explore, "_release", lambda node: None)
    before = without_seconds(prove(claim, vocab, 1, paths, sampling).document)
    assert after["summary"]["complete"] and after["summary"]["holds"]
    assert json.dumps(after) == json.dumps(before)


# ---------------------------------------------------------------------------
# resumable proofs (issue 27 follow-up): the journal of ship / prove
# ---------------------------------------------------------------------------

RESUMED_STEM = "l1-optimum-V2-L1-K2-without-replacement"  # 57 nodes, 2 outside the domain


def _interrupting_progress(after: int):
    """A ship._Progress stand-in that raises KeyboardInterrupt (as SIGINT does) at its
    after-th call, i.e. in the middle of a step of the exploration."""
    class Interrupting:
        def __init__(self, stem, every):
            self.calls = 0

        def __call__(self, share):
            self.calls += 1
            if self.calls >= after:
                raise KeyboardInterrupt

    return Interrupting


def test_interrupted_ship_run_resumes_to_the_same_certificate(tmp_path, monkeypatch):
    """ship stopped twice in the middle of the proof (SIGINT: KeyboardInterrupt at the 9th,
    then the 20th call of the progress hook, which counts the journal's cells too) keeps its
    journal, writes nothing, and the third run finishes from the journal with a certificate
    byte for byte the one of an uninterrupted run (gzip mtime 0); the journal is removed
    once the proof is written."""
    from speclp.proofs.symbolic import ship

    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    assert ship.main(["--only", RESUMED_STEM, "--out", str(clean)]) == 0
    journal = ship.journal_path(resumed, RESUMED_STEM)
    lines = []
    for after in (9, 20):
        with monkeypatch.context() as patch:
            patch.setattr(ship, "_Progress", _interrupting_progress(after))
            assert ship.main(["--only", RESUMED_STEM, "--out", str(resumed)]) == 130
        assert not (resumed / f"{RESUMED_STEM}.json.gz").exists()
        lines.append(len(journal.read_text().splitlines()))
    assert 2 <= lines[0] < lines[1] < 57  # header + steps; the second run went further
    assert ship.main(["--only", RESUMED_STEM, "--out", str(resumed)]) == 0
    assert not journal.exists()
    name = f"{RESUMED_STEM}.json.gz"
    assert (resumed / name).read_bytes() == (clean / name).read_bytes()
    assert ship.main(["--only", RESUMED_STEM, "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / name).read_bytes() == (clean / name).read_bytes()


def _clean_document(run):
    doc = copy.deepcopy(run.document)
    del doc["summary"]["seconds"]
    return json.dumps(doc)


@pytest.fixture(scope="module")
def gbv_v2k2():
    return _clean_document(prove("gbv-l1-closed-form", 2, 1, 2))


def _interrupt(journal, after, **options):
    calls = []

    def progress(share):
        calls.append(share)
        if len(calls) >= after:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prove("gbv-l1-closed-form", 2, 1, 2, progress=progress, journal=journal, **options)


def test_journal_ignores_a_cut_last_line_and_refuses_other_settings(tmp_path, gbv_v2k2):
    from speclp.proofs.symbolic.journal import JournalError

    journal = tmp_path / "j.jsonl"
    _interrupt(journal, 6)
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"k":7,"kids":[1')  # killed while writing a line
    with pytest.raises(JournalError, match="settings.seed"):
        prove("gbv-l1-closed-form", 2, 1, 2, seed=1, journal=journal)
    with pytest.raises(JournalError, match="settings.stop_at_first_failure"):
        prove("gbv-l1-closed-form", 2, 1, 2, stop_at_first_failure=True, journal=journal)
    run = prove("gbv-l1-closed-form", 2, 1, 2, journal=journal)
    assert run.resumed == len(whole.splitlines()) - 1 >= 1
    assert _clean_document(run) == gbv_v2k2
    text = journal.read_text()
    assert text.startswith(whole.decode()) and '{"k":7,"kids":[1' + "\n" not in text
    # a bad line that is not the last one is an error naming it
    lines = whole.splitlines(keepends=True)
    journal.write_bytes(lines[0] + b"not json\n" + b"".join(lines[1:]))
    with pytest.raises(JournalError, match="line 2 is not JSON"):
        prove("gbv-l1-closed-form", 2, 1, 2, journal=journal)


def test_journal_refuses_steps_the_code_does_not_reproduce(tmp_path, gbv_v2k2):
    """A re-run step is compared with its record: a record whose failure flag, cache additions
    or documents differ from what the code computes is refused; a record out of the stack's
    order too; settings.code guards the rest (refused unless journal_same_code=False)."""
    import base64
    import zlib

    from speclp.proofs.symbolic.journal import JournalError

    journal = tmp_path / "j.jsonl"
    _interrupt(journal, 8)
    header, *records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert records[0]["k"] == 0 and records[0]["push"]

    def write(head, recs):
        journal.write_text("".join(json.dumps(r) + "\n" for r in [head, *recs]))

    def payload(record):
        return json.loads(zlib.decompress(base64.b64decode(record["z"])))

    def with_payload(record, data):
        return {**record, "z": base64.b64encode(zlib.compress(json.dumps(data).encode())).decode()}

    # the root's record (re-run: the root is an ancestor of every open node)
    root = payload(records[0])
    doc = copy.deepcopy(root)
    doc["docs"][0][1]["split"]["poly"] = "Integer(7)"
    for bad, what in ((dict(records[0], fail=True), "fail"),
                      (dict(records[0], cache=[]), "cache"),
                      (with_payload(records[0], doc), "docs")):
        write(header, [bad, *records[1:]])
        with pytest.raises(JournalError, match=what):
            prove("gbv-l1-closed-form", 2, 1, 2, journal=journal)
    write(header, [records[0], dict(records[1], k=records[1]["k"] + 1), *records[2:]])
    with pytest.raises(JournalError, match="not next on the stack"):
        prove("gbv-l1-closed-form", 2, 1, 2, journal=journal)
    other = {**header, "settings": {**header["settings"], "code": "0" * 32}}
    write(other, records)
    with pytest.raises(JournalError, match="settings.code"):
        prove("gbv-l1-closed-form", 2, 1, 2, journal=journal)
    run = prove("gbv-l1-closed-form", 2, 1, 2, journal=journal, journal_same_code=False)
    assert _clean_document(run) == gbv_v2k2


def test_time_limit_keeps_the_journal_and_a_rerun_goes_on(tmp_path, gbv_v2k2):
    journal = tmp_path / "j.jsonl"
    _interrupt(journal, 4)
    before = journal.read_text()
    stopped = prove("gbv-l1-closed-form", 2, 1, 2, journal=journal, time_limit=0.0)
    assert stopped.stopped.startswith("time limit") and stopped.counts["unexplored"] >= 1
    assert journal.read_text() == before
    shares = []
    run = prove("gbv-l1-closed-form", 2, 1, 2, journal=journal, progress=shares.append)
    assert _clean_document(run) == gbv_v2k2 and run.complete
    assert abs(sum(shares) - 1) < 1e-9  # the journal's finished cells count as done


def test_sigterm_is_an_interrupt_inside_ship():
    import os
    import signal

    from speclp.proofs.symbolic import ship

    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), ship.terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10**7):  # the handler runs at the next bytecode boundary
            pass
    assert signal.getsignal(signal.SIGTERM) is previous
