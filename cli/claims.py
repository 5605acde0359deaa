"""`speclp check class-equals-full | node-form | bv-optimal`: claims checked on random
Dirichlet instances (speclp.proofs.class_claims, speclp.proofs.bv_optimal).

class-equals-full and node-form are the claims on the selection class of docs/theory.md
sections 5.5 and 7.1 (class = full is Theorem 5.5; node-form is looser in general);
bv-optimal is Theorem 3.3. Exit 0 when the claim held on every trial, 1 with the
counterexample (printed and saved) on the first trial where it fails, 2 on bad input, 4 when
--time-limit passed before the last trial (no trial starts after it; nothing saved; the JSON
payload has "passed": false and "status": "stopped: time limit"). The
flags build a spec of speclp.proofs.claim_specs (ClassClaimSpec, BvOptimalSpec: its
construction is the validation, its defaults the library's ClaimSettings); only --save-dir
(a folder) is checked here.
"""

from __future__ import annotations

from typing import Any

import typer

from ..lp.engine import BACKENDS
from ..proofs.claim_specs import BV, CLASS, BvOptimalSpec, ClassClaimSpec
from ..verifiers.drafts import DRAFT_SAMPLING
from . import options as option
from . import validate as check
from .common import ClaimFailed, Stopped, new_commands, progress, run, table

CLAIM_HELP = {
    "class-equals-full": 'Selection-class optimum ("select one path, then BV") = full K-path LP '
                         "optimum? (docs/theory.md Theorem 5.5: it is; this tests the proof and "
                         "both programs.)",
    "node-form": "Node-level form (per-depth set budgets on beta) optimum = class (or full) "
                 "optimum? (docs/theory.md section 7.1: looser in general; counterexamples exist.)",
}

TIME_LIMIT_HELP = "Seconds; no trial starts after it (exit 4, nothing saved)."

commands = new_commands()
check_group = new_commands(help="Check a claim of the theory; exit 1 with a counterexample if it fails.")
commands.add_typer(check_group, name="check")


def _counts(counts: Any, trials: int) -> str:
    """'full 100/100, class 99/100' from {"full": 100, "class": 99}."""
    if not isinstance(counts, dict):
        return str(counts)
    return ", ".join(f"{name} {count}/{trials}" for name, count in counts.items())


def _stop_if_stopped(result: dict[str, Any]) -> None:
    """Stopped (exit 4) when the check's time limit ended it before its last trial."""
    if result.get("stopped"):
        done = result["trials_run"]
        held = " (each of them held)" if done else ""
        raise Stopped(f"{result['claim']}: stopped at the {result['stopped']} after {done} of "
                      f"{result['trials']} trials{held}: neither passed nor failed; nothing saved "
                      "(a larger --time-limit goes on)", result)


def _render(r: dict[str, Any]) -> None:
    if r.get("stopped"):
        return  # the STOPPED line says how far it got
    if r["passed"]:
        rows = [[key, counts["<"], counts["="], counts[">"], f"{r['max_abs_difference'][key]:.3g}"]
                for key, counts in r["relations"].items()]
        title = (f"claim {r['claim']}: HOLDS on {r['trials']} trials "
                 f"(V={r['vocab']}, L={r['depth']}, K={r['paths']}, {r['draft_sampling']}, "
                 f"{'rational 1/' + str(r['denominator']) if r['rational'] else 'float'} rows; "
                 f"certified: {_counts(r['certified'], r['trials'])})")
        table(title, ["comparison", "<", "=", ">", "max |difference|"], rows)
        if r.get("gbv_note"):
            table("note", ["note"], [[r["gbv_note"]]])
        return
    ce = r["counterexample"]
    rows = [["instance", ce["instance"]], ["seed", r["seed"]], ["saved", r["saved"]],
            ["kind", r["kind"]]]
    for name in ("full", "class", "node_form", "gbv", "bv"):
        rec = ce.get(name)
        if rec:
            status = "certified" if rec.get("certified") else "NOT certified"
            if name in ("gbv", "bv"):
                status = "exact law" if rec.get("certified") else "float64 law"
            label = f"{name} block efficiency" if name in ("gbv", "bv") else f"{name} optimum"
            shown = rec.get("exact") or rec["value"]
            rows.append([label, f"{shown}  ({rec['value']:.15g}, {status})"])
    for key, comp in ce["comparisons"].items():
        difference = f"{comp['difference']:.6g}"
        if comp["exact_difference"] is not None:
            exact = comp["exact_difference"]
            difference += f" (exact {exact})" if len(exact) <= 40 else " (exact)"
        rows.append([key, f"{comp['relation']}  difference {difference}"])
    if ce.get("class", {}).get("leaf_law"):
        rows.append(["class optimal skewed law r",
                     ", ".join(f"{float(v):.6g}" for v in ce["class"]["leaf_law"])])
    for bug in r["bugs"]:
        rows.append(["BUG", bug])
    table(f"counterexample to {r['claim']}", ["quantity", "value"], rows)


def _check(spec: ClassClaimSpec) -> dict[str, Any]:
    """The body of class-equals-full / node-form: the claim; ClaimFailed on a counterexample."""
    bar = lambda it: progress(it, spec.trials, f"{spec.claim} V={spec.vocab} L={spec.depth} "  # noqa: E731
                                               f"K={spec.paths}", spec.time_limit)
    result = spec.run(bar).to_json()
    _stop_if_stopped(result)
    if not result["passed"]:
        what = "BUG (a theorem failed)" if result["kind"] == "bug" else result["kind"]
        instance = result["counterexample"]["instance"]
        raise ClaimFailed(f"{result['claim']}: {what} on {instance}: {result['message']}"
                          + "".join(f"; BUG: {bug}" for bug in result["bugs"])
                          + f" (instance saved to {result['saved']})", result)
    return result


@check_group.command("node-form", help=CLAIM_HELP["node-form"])
@check_group.command("class-equals-full", help=CLAIM_HELP["class-equals-full"])
def check_class_claim_cmd(
    ctx: typer.Context,
    trials: int = option.trials(CLASS.trials),
    vocab: int = option.vocab(CLASS.vocab),
    depth: int = option.depth(CLASS.depth),
    paths: int = option.paths(CLASS.paths),
    seed: int = option.seed(CLASS.seed, "First seed."),
    alpha: float = option.concentration(CLASS.alpha),
    denominator: int = option.denominator(CLASS.denominator),
    draft_sampling: str = option.draft_sampling(CLASS.draft_sampling,
                                                f"Draft law: {' or '.join(DRAFT_SAMPLING)}."),
    against: str = typer.Option(None, "--against",
                                help="node-form only: compare the node form with class (default) "
                                     "or full."),
    backend: str = option.backend(BACKENDS, CLASS.backend),
    save_dir: str = option.save_dir(CLASS.save_dir, option.COUNTEREXAMPLE_HELP),
    time_limit: float = option.time_limit(ClassClaimSpec.time_limit, TIME_LIMIT_HELP),
    as_json: bool = option.json(),
) -> None:
    """The two claims on the selection class (one command function, registered under both
    names: the name invoked, ctx.info_name, is the claim)."""

    def body() -> dict[str, Any]:
        check.output_dir("--save-dir", save_dir)
        return _check(ClassClaimSpec(ctx.info_name, trials, vocab, depth, paths, seed, alpha,
                                     denominator, draft_sampling, backend, against, save_dir,
                                     time_limit))

    run(body, as_json, _render)


def _render_bv(r: dict[str, Any]) -> None:
    if r.get("stopped"):
        return  # the STOPPED line says how far it got
    if r["passed"]:
        table("claim bv-optimal: HOLDS", ["trials", "V", "L", "certified", "max |LP - BV| (float)",
                                          "max TV (float64)"],
              [[r["trials"], r["vocab"], r["depth"], f"{r['certified']}/{r['trials']}",
                f"{r['max_float_gap_lp_vs_bv']:.3g}", f"{r['max_tv_float64']:.3g}"]])
        return
    ce = r["counterexample"]
    table("counterexample", ["quantity", "value"], [
        ["instance", ce["instance"]], ["saved", r["saved"]],
        ["full LP optimum", ce["lp_full"]["value"]], ["node LP optimum", ce["lp_node"]["value"]],
        [f"{r['verifier']} block efficiency", ce["block_efficiency"]],
        ["TV (float64)", ce["tv_float64"]], ["failures", "; ".join(ce["failures"])]])


@check_group.command("bv-optimal")
def check_bv_optimal_cmd(
    trials: int = option.trials(BV.trials),
    vocab: int = option.vocab(BV.vocab),
    depth: int = option.depth(BV.depth),
    seed: int = option.seed(BV.seed, "First seed."),
    alpha: float = option.concentration(BV.alpha),
    denominator: int = option.denominator(BV.denominator),
    verifier: str = typer.Option(BvOptimalSpec.verifier, "--verifier", help="Verifier claimed optimal (bv)."),
    backend: str = option.backend(BACKENDS, BV.backend),
    save_dir: str = option.save_dir(BV.save_dir, option.COUNTEREXAMPLE_HELP),
    time_limit: float = option.time_limit(BvOptimalSpec.time_limit, TIME_LIMIT_HELP),
    as_json: bool = option.json(),
) -> None:
    """Full LP optimum = node LP optimum = exact BV block efficiency, BV lossless
    (docs/theory.md Theorem 3.3)."""

    def body() -> dict[str, Any]:
        check.output_dir("--save-dir", save_dir)
        spec = BvOptimalSpec(trials, vocab, depth, seed, alpha, denominator, verifier, backend,
                             save_dir, time_limit)
        result = spec.run(lambda it: progress(it, trials, f"bv-optimal V={vocab} L={depth}",
                                              time_limit)).to_json()
        _stop_if_stopped(result)
        if not result["passed"]:
            failures = "; ".join(result["counterexample"]["failures"])
            name = result["counterexample"]["instance"]
            raise ClaimFailed(f"{verifier} is not LP-optimal/lossless on {name}: "
                              f"{failures} (instance saved to {result['saved']})", result)
        return result

    run(body, as_json, _render_bv)
