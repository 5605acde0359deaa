"""`speclp audit`: losslessness of a registered verifier (exact) or of anyone's sampler code
(statistical, `--sampler MODULE:FUNCTION`)."""

from __future__ import annotations

from typing import Any

import typer

from ..lp.instance import load_instance
from ..proofs.audit import (
    MAX_RUNS,
    RUNS_LIMIT,
    SAMPLER_ALPHA,
    SAMPLER_TRIALS,
    TIME_LIMIT,
    VERIFIER_TRIALS,
    AuditReport,
    AuditStatus,
    SamplerAuditSpec,
    VerifierAuditSpec,
)
from ..proofs.audit import run as run_audit
from ..proofs.sandbox import CALL_TIMEOUT, LAYOUTS, LOAD_TIMEOUT
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, given, new_commands, progress, run, stderr, table

commands = new_commands()
SAMPLER_ONLY = ("search", "layout", "runs", "call_timeout", "load_timeout", "time_limit", "alpha",
                "unbatched", "instance")  # parameters an audit of --verifier does not use (refused, exit 2)


@commands.command()
def audit(
    ctx: typer.Context,
    verifier: str = typer.Option(None, "--verifier", help="Registered verifier name (exact audit; "
                                 "a wrong name prints the list)."),
    sampler: str = typer.Option(None, "--sampler", help="MODULE:FUNCTION or FILE.py:FUNCTION: a "
                                "sampler (target_rows, draft_rows, paths, rng) -> blocks, run in a "
                                "child process and audited statistically (see README)."),
    paths: int = option.paths(None, "Draft paths K (default 2; 1 with --layout ragged or vllm)."),
    vocab: int = option.vocab(3),
    depth: int = option.depth(2),
    trials: int = option.trials(None, f"Random instances (default {VERIFIER_TRIALS} for --verifier, "
                                f"{SAMPLER_TRIALS} for --sampler: one per family with --family "
                                f"mixed; {SAMPLER_TRIALS})."),
    ties: bool = typer.Option(False, "--ties", help="Instances with many equal ratios p/q, one-hot "
                              "and zero entries (the same as --family ties)."),
    family: str = typer.Option(None, "--family", help="Instance family: dirichlet, clipped-ties, "
                               "ties, zero-draft, near-deterministic, tiny, or mixed (all in turn; "
                               "the default of --sampler; --verifier: dirichlet)."),
    seed: int = option.seed(0, "Seed of the instance stream (and of the draws)."),
    draft_sampling: str = option.draft_sampling(),
    exact: bool = typer.Option(False, "--exact", help="--verifier: exact rational arithmetic "
                               "(refused with --sampler: a sampler is audited statistically)."),
    runs: int = typer.Option(MAX_RUNS, "--max-runs", "--runs", help="--sampler: most sampler runs "
                             f"per instance (at most {RUNS_LIMIT:,}); sampling stops earlier on a "
                             "rejection or at --time-limit."),
    time_limit: float = option.time_limit(TIME_LIMIT, "--sampler: seconds of sampling for the "
                                          "whole audit, shared by its instances."),
    call_timeout: float = typer.Option(CALL_TIMEOUT, "--call-timeout", help="--sampler: seconds "
                                       "one call of the sampler (one batch) may take before the "
                                       "sampler counts as hung (exit 1)."),
    load_timeout: float = typer.Option(LOAD_TIMEOUT, "--load-timeout", help="--sampler: seconds "
                                       "the import of the sampler's module may take (its own "
                                       "limit; a module that hangs at import fails it)."),
    alpha: float = typer.Option(SAMPLER_ALPHA, "--alpha", help="--sampler: family-wise error "
                                "level of all the tests of the audit."),
    unbatched: bool = typer.Option(False, "--unbatched", help="--sampler: call it once per draft "
                                   "configuration (no leading batch axis); = --layout unbatched."),
    layout: str = typer.Option(None, "--layout", help="--sampler: batched (default), unbatched, or "
                               "ragged (the flat layout of serving-engine rejection samplers), "
                               "vllm (flat batch, per-request draft counts, optional draft "
                               "probabilities) or sglang (a tree with retrieve-index / next-token / "
                               "next-sibling arrays); see README."),
    search: int = typer.Option(0, "--search", help="--sampler: screen N random instances and "
                               "audit the --trials that look furthest from the target."),
    instance: str = typer.Option(None, "--instance", help="--sampler: audit this instance file "
                                 "instead of random ones."),
    save_dir: str = option.save_dir(),
    as_json: bool = option.json(),
) -> None:
    """Audit a verifier or anyone's sampler for losslessness.

    --verifier: largest TV distance of the verifier's exact output law (continued by target
    sampling) from the target law over random instances; exit 1 (worst instance saved) when
    TV > 1e-12. --sampler: run foreign sampler code in a child process on drafts of random
    instances; anytime-valid tests of the emitted block (continued by target sampling to L+1
    tokens) against the exact target law and of its block efficiency against the certified
    K-path optimum, all at one family-wise error level (--alpha); exit 1 (failing instances
    saved) when a test rejects, a block is malformed, or the sampler breaks its contract
    (exits, raises, hangs past --call-timeout, returns a malformed answer)."""
    run(_audit_body(ctx), as_json, _render_sampler if sampler is not None else _render_verifier)


def _audit_body(ctx: typer.Context):
    """The command's body: flags -> spec (exit 2 on bad input), run(spec), the verdict."""
    def body() -> dict[str, Any]:
        spec = audit_spec(ctx)
        if isinstance(spec, VerifierAuditSpec):
            report = run_audit(spec, progress=lambda it: progress(it, spec.trials,
                                                                  f"audit {spec.verifier}"))
            return _verifier_verdict(report, ctx.params["save_dir"])
        count = len(spec.instances) if spec.instances else spec.trials
        report = run_audit(spec, progress=lambda it: progress(it, count, "audit sampler",
                                                              time_limit=spec.time_limit))
        return _sampler_verdict(report, ctx.params["save_dir"])
    return body


def audit_spec(ctx: typer.Context) -> VerifierAuditSpec | SamplerAuditSpec:
    """Flags -> the spec of the mode they choose (ctx.params: every flag by parameter name).
    The CLI checks what only flags have (the mode, flags the mode does not use, --save-dir,
    the --instance file); the spec's construction checks the rest (BadArgument, exit 2)."""
    o = dict(ctx.params)
    if (o["verifier"] is None) == (o["sampler"] is None):
        raise BadInput("--verifier: give exactly one of --verifier and --sampler")
    if o["sampler"] is not None:
        if o["instance"] is not None:
            overridden = given(ctx, "vocab", "depth", "trials", "family", "ties")
            if overridden:
                raise BadInput(f"{overridden[0]}: --instance fixes the instance (its V, L and rows); "
                               "drop it")
        return _sampler_spec(o)
    unused = given(ctx, *SAMPLER_ONLY)
    if unused:
        raise BadInput(f"{unused[0]}: applies to --sampler only (the sampler audit); an audit of "
                       "--verifier does not use it, drop it")
    check.output_dir("--save-dir", o["save_dir"])
    return VerifierAuditSpec(o["verifier"], **_given_or_default(o, paths=2, trials=VERIFIER_TRIALS),
                             vocab=o["vocab"], depth=o["depth"], ties=o["ties"], family=o["family"],
                             seed=o["seed"], draft_sampling=o["draft_sampling"], exact=o["exact"])


def _given_or_default(o: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """The flags whose default depends on the mode (None on the command line): given, or
    the mode's default."""
    return {name: default if o[name] is None else o[name] for name, default in defaults.items()}


def _verifier_verdict(report: AuditReport, save_dir: str) -> dict[str, Any]:
    """The JSON of a passed audit; ClaimFailed (exit 1, the worst instance saved) otherwise."""
    if report.status is AuditStatus.FAILED:
        report = report.save(save_dir)
        raise ClaimFailed(f"{report.failures[0]} (worst instance saved to {report.saved[0]})",
                          report.to_json())
    return report.to_json()


def _sampler_spec(o: dict[str, Any]) -> SamplerAuditSpec:
    """The --sampler spec: the flags only the CLI has (--exact, --unbatched, --save-dir,
    --search with --instance, the --instance file), then SamplerAuditSpec (the rest)."""
    if o["exact"]:
        raise BadInput("--exact: applies to --verifier (exact laws); a sampler is audited "
                       "statistically, drop --exact")
    layout = o["layout"]
    if o["unbatched"]:
        if layout in LAYOUTS and layout != "unbatched":
            raise BadInput(f"--unbatched: means --layout unbatched; it contradicts --layout {layout}")
        layout = "unbatched" if layout is None else layout
    check.output_dir("--save-dir", o["save_dir"])
    chosen = None
    if o["instance"] is not None:
        if o["search"]:
            raise BadInput("--search: screens random instances; it cannot be used with --instance")
        check.input_path("--instance", o["instance"])
        chosen = (load_instance(o["instance"]),)  # InstanceError -> exit 2 naming the file
    return SamplerAuditSpec(o["sampler"], o["paths"], o["vocab"], o["depth"],
                            **_given_or_default(o, trials=SAMPLER_TRIALS), ties=o["ties"],
                            family=o["family"], seed=o["seed"], runs=o["runs"], alpha=o["alpha"],
                            draft_sampling=o["draft_sampling"], layout=layout, instances=chosen,
                            time_limit=o["time_limit"], call_timeout=o["call_timeout"],
                            load_timeout=o["load_timeout"], search=o["search"])


def _sampler_verdict(report: AuditReport, save_dir: str) -> dict[str, Any]:
    """The JSON of a passed audit; ClaimFailed (exit 1) when the sampler broke its contract
    (one line) or failed (the failing instances saved)."""
    sampler = report.spec.name
    if report.status is AuditStatus.BROKEN:
        raise ClaimFailed(report.failures[0], report.to_json())
    output = report.record["captured_output"]
    if output:
        stderr.print(f"note: the sampler printed {len(output)} characters "
                     "(kept out of the output; in the JSON as captured_output)",
                     markup=False, highlight=False, soft_wrap=True)
    if report.status is AuditStatus.FAILED:
        report = report.save(save_dir)
        saved = report.saved or ()
        raise ClaimFailed(f"{sampler}: " + "; ".join(report.failures)
                          + f" ({len(saved)} failing instance(s) saved: {', '.join(saved)})",
                          report.to_json())
    return report.to_json()


def _render_verifier(r: dict[str, Any]) -> None:
    verdict = "lossless on every trial" if r["passed"] else "LOSSY"
    table(f"audit {r['verifier']}: {verdict}",
          ["K", "V", "L", "trials", "instances", "draft sampling", "max TV", "mean TV",
           "mean E[tau+1]"],
          [[r["paths"], r["vocab"], r["depth"], r["trials"], "ties" if r["ties"] else "Dirichlet",
            r["draft_sampling"], f"{r['max_tv']:.3g}", f"{r['mean_tv']:.3g}",
            f"{r['mean_block_efficiency']:.6f}"]])


def _render_sampler(r: dict[str, Any]) -> None:
    if "instances" not in r:  # the sampler broke its contract before any instance finished
        for failure in r["failures"]:
            print(f"FAILED: {failure}")
        return
    verdict = "no evidence of loss" if r["passed"] else "FAILED"
    rows = []
    for i in r["instances"]:
        rows.append([i["instance"], i["family"], f"{i['runs']:,}", f"{i['law_evalue']:.3g}",
                     f"{i['efficiency_evalue']:.3g}", f"{i['detectable_tv']:.4f}",
                     f"{i['tv']:.4f} [{i['tv_ci'][0]:.4f}, {i['tv_ci'][1]:.4f}]",
                     f"{i['block_efficiency']:.4f} [{i['block_efficiency_ci'][0]:.4f}, "
                     f"{i['block_efficiency_ci'][1]:.4f}]",
                     f"{i['optimum']:.6f}" + ("" if i["optimum_certified"] else " NOT certified"),
                     i["malformed"]])
    table(f"audit {r['sampler']} (K={r['paths']}, layout {r['layout']}): {verdict}",
          ["instance", "family", "runs", "law e-value", "efficiency e-value",
           f"TV detectable (power {r['power']:g})", "empirical TV [95% CI]",
           "E[tau+1] [95% CI]", "K-path optimum", "malformed"], rows)
    if r.get("screened"):
        families = ", ".join(dict.fromkeys(x["family"] for x in r["screened"]))
        print(f"search: screened {len(r['screened'])} instances ({families}) on separate draws; "
              "audited the ones above, furthest from the target (first-token law or block "
              "efficiency)")
    print(f"{r['error_level']}; a test rejects when its e-value reaches 1/{r['level']:.3g}.")
    if r["passed"]:
        print(f"passed: would have detected TV >= {r['max_detectable_tv']:.4f} with probability "
              f"{r['power']:g} on every instance (a deviation spread over all outcomes of the "
              "block continued to L+1 tokens; simulated at the runs drawn)")
    for failure in r["failures"]:
        print(f"FAILED: {failure}")
