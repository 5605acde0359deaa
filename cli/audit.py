"""`speclp audit`: losslessness of a registered verifier (exact) or of anyone's sampler code
(statistical, `--sampler MODULE:FUNCTION`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from . import validate as check
from .common import BadInput, ClaimFailed, new_commands, progress, run, table

commands = new_commands()


@commands.command()
def audit(
    verifier: str = typer.Option(None, "--verifier", help="Registered verifier name (exact audit; "
                                 "a wrong name prints the list)."),
    sampler: str = typer.Option(None, "--sampler", help="MODULE:FUNCTION or FILE.py:FUNCTION: a "
                                "sampler (target_rows, draft_rows, paths, rng) -> blocks, audited "
                                "statistically (see README)."),
    paths: int = typer.Option(2, "--paths", help="Draft paths K."),
    vocab: int = typer.Option(3, "--vocab", help="Vocabulary size V."),
    depth: int = typer.Option(2, "--depth", help="Depth L."),
    trials: int = typer.Option(None, "--trials", help="Random instances (default 20 for --verifier, "
                               "3 for --sampler)."),
    ties: bool = typer.Option(False, "--ties", help="Instances with many equal ratios p/q, one-hot "
                              "and zero entries."),
    seed: int = typer.Option(0, "--seed", help="Seed of the instance stream (and of the draws)."),
    draft_sampling: str = typer.Option("iid", "--draft-sampling", help="iid or without-replacement."),
    exact: bool = typer.Option(False, "--exact", help="--verifier: exact rational arithmetic."),
    runs: int = typer.Option(20_000, "--runs", help="--sampler: calls per instance."),
    alpha: float = typer.Option(1e-3, "--alpha", help="--sampler: family-wise test level."),
    unbatched: bool = typer.Option(False, "--unbatched", help="--sampler: call it once per draft "
                                   "configuration (no leading batch axis)."),
    instance: str = typer.Option(None, "--instance", help="--sampler: audit this instance file "
                                 "instead of random ones."),
    save_dir: str = typer.Option("counterexamples", "--save-dir", help="Where a failing instance is saved."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Audit a verifier or anyone's sampler for losslessness.

    --verifier: largest TV distance of the verifier's exact output law (continued by target
    sampling) from the target law over random instances; exit 1 (worst instance saved) when
    TV > 1e-12. --sampler: run foreign sampler code on drafts of random instances; chi-square
    test of the first two emitted tokens (p-value and detectable TV), TV and block efficiency
    with 95% intervals against the certified K-path optimum; exit 1 (instance saved) when the
    test rejects, a block is malformed, or the efficiency is impossibly high."""
    if (verifier is None) == (sampler is None):
        body = _bad("--verifier: give exactly one of --verifier and --sampler")
    elif sampler is not None:
        body = _sampler_body(sampler, paths, vocab, depth, trials if trials is not None else 3, ties,
                             seed, draft_sampling, runs, alpha, unbatched, instance, save_dir)
    else:
        body = _verifier_body(verifier, paths, vocab, depth, trials if trials is not None else 20,
                              ties, seed, draft_sampling, exact, save_dir)
    run(body, as_json, _render_sampler if sampler is not None else _render_verifier)


def _bad(message: str):
    def body() -> dict[str, Any]:
        raise BadInput(message)
    return body


def _check_common(paths: int, vocab: int, depth: int, trials: int, seed: int, draft_sampling: str,
                  save_dir: str) -> None:
    """The checks --verifier and --sampler share (cli/validate.py), before any work."""
    check.choice("--draft-sampling", draft_sampling, ("iid", "without-replacement"))
    for flag, value, low in (("--paths", paths, 1), ("--vocab", vocab, 2), ("--depth", depth, 1),
                             ("--trials", trials, 1)):
        check.integer(flag, value, low)
    check.seed("--seed", seed)
    check.output_dir("--save-dir", save_dir)
    check.instance_shape("--vocab/--depth", vocab, depth)
    if draft_sampling == "without-replacement" and paths > check.path_count(vocab, depth):
        raise BadInput(f"--paths: cannot draft {paths} distinct paths out of "
                       f"{check.path_count(vocab, depth):,} (V={vocab}, L={depth})")


def _verifier_body(verifier, paths, vocab, depth, trials, ties, seed, draft_sampling, exact, save_dir):
    def body() -> dict[str, Any]:
        from ..proofs.audit import audit as run_audit
        from ..verifiers.registry import get_verifier

        _check_common(paths, vocab, depth, trials, seed, draft_sampling, save_dir)
        check.enumeration("--paths", vocab, depth, paths)
        try:
            spec = get_verifier(verifier)
        except KeyError as err:
            raise BadInput(f"--verifier: {err.args[0]}") from None
        try:
            result = run_audit(verifier, paths, vocab, depth, trials, ties, seed=seed,
                               draft_sampling=draft_sampling, exact=exact,
                               progress=lambda it: progress(it, trials, f"audit {verifier}"))
        except ValueError as err:
            raise BadInput(str(err)) from None
        result["lossless_claimed"] = spec.lossless and draft_sampling in spec.draft_sampling
        if not result["passed"]:
            path = Path(save_dir) / (f"audit-{verifier}-K{paths}-V{vocab}-L{depth}-"
                                     f"{'ties' if ties else 'dirichlet'}-s{seed}.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result["worst_instance"], indent=1))
            result["saved"] = str(path)
            raise ClaimFailed(f"{verifier} is not lossless: max TV {result['max_tv']:.3g} > "
                              f"{result['tolerance']:g} (worst instance saved to {path})", result)
        return result
    return body


def _sampler_body(sampler, paths, vocab, depth, trials, ties, seed, draft_sampling, runs, alpha,
                  unbatched, instance, save_dir):
    def body() -> dict[str, Any]:
        from ..lp.instance import load_instance
        from ..proofs.audit import audit_sampler, load_sampler

        _check_common(paths, vocab, depth, trials, seed, draft_sampling, save_dir)
        check.integer("--runs", runs, 2)
        if not 0 < alpha < 1:
            raise BadInput(f"--alpha: must be in (0, 1), got {alpha}")
        try:
            fn = load_sampler(sampler)
        except ValueError as err:
            raise BadInput(f"--sampler: {err}") from None
        chosen = None
        if instance is not None:
            chosen = [load_instance(instance)]  # InstanceError -> exit 2 naming the file
        count = len(chosen) if chosen else trials
        try:
            result = audit_sampler(fn, paths, vocab, depth, trials, ties, runs, seed,
                                   batched=not unbatched, alpha=alpha, draft_sampling=draft_sampling,
                                   instances=chosen, name=sampler,
                                   progress=lambda it: progress(it, count, "audit sampler"))
        except ValueError as err:
            raise BadInput(f"--sampler: {err}") from None
        if not result["passed"]:
            stem = Path(sampler.rpartition(":")[2]).name
            path = Path(save_dir) / (f"audit-sampler-{stem}-K{paths}-V{vocab}-L{depth}-"
                                     f"{'ties' if ties else 'dirichlet'}-s{seed}.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result["worst_instance"], indent=1))
            result["saved"] = str(path)
            raise ClaimFailed(f"{sampler}: " + "; ".join(result["failures"])
                              + f" (instance saved to {path})", result)
        return result
    return body


def _render_verifier(r: dict[str, Any]) -> None:
    verdict = "lossless on every trial" if r["passed"] else "LOSSY"
    table(f"audit {r['verifier']}: {verdict}",
          ["K", "V", "L", "trials", "instances", "draft sampling", "max TV", "mean TV",
           "mean E[tau+1]"],
          [[r["paths"], r["vocab"], r["depth"], r["trials"], "ties" if r["ties"] else "Dirichlet",
            r["draft_sampling"], f"{r['max_tv']:.3g}", f"{r['mean_tv']:.3g}",
            f"{r['mean_block_efficiency']:.6f}"]])


def _render_sampler(r: dict[str, Any]) -> None:
    verdict = "no evidence of loss" if r["passed"] else "FAILED"
    rows = []
    for i in r["instances"]:
        rows.append([i["instance"], i["runs"], f"{i['p_value']:.3g}", f"{i['detectable_tv']:.4f}",
                     f"{i['tv']:.4f} [{i['tv_ci'][0]:.4f}, {i['tv_ci'][1]:.4f}]",
                     f"{i['block_efficiency']:.4f} [{i['block_efficiency_ci'][0]:.4f}, "
                     f"{i['block_efficiency_ci'][1]:.4f}]",
                     f"{i['optimum']:.6f}" + ("" if i["optimum_certified"] else " NOT certified"),
                     "IMPOSSIBLE" if i["above_optimum"] else "ok", i["malformed"]])
    table(f"audit {r['sampler']} (K={r['paths']}, level {r['threshold']:.2g} per instance, "
          f"power {r['power']:g}): {verdict}",
          ["instance", "runs", "p-value", f"TV detectable (power {r['power']:g})",
           "TV [95% CI]", "E[tau+1] [95% CI]", "K-path optimum", "vs optimum", "malformed"], rows)
    for failure in r["failures"]:
        print(f"FAILED: {failure}")
