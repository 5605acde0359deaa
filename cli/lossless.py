"""`speclp lossless`: is my acceptance configuration lossless?

Takes an acceptance configuration (method, thresholds, the temperature and top-k / top-p the
target and the draft are sampled with, and what the verifier applies to each side) and says
lossless or not: lossless when a theorem covers the configuration (the verifier sees the
laws the tokens are sampled from, and the method is speculative sampling, the one-hot rule,
thresholds 1 / 1, or an ensemble with w = 1), else the exact TV of the configuration's output
law from the target law on the instances of the audit's families (proofs.config_law), with
the worst instance named. Exit 0 lossless, 1 lossy (the counterexample instance named), 2
bad input, 4 stopped by --time-limit before the last instance (no verdict; the JSON payload
has "status": "stopped: time limit" and "lossless": null).
"""

from __future__ import annotations

from typing import Any

import typer

from ..proofs.config_law import METHODS, ZERO_TV, AcceptanceConfig
from ..proofs.lossless_spec import SETTINGS, Losslessness, LosslessSpec
from . import options as option
from .common import ClaimFailed, Stopped, new_commands, run, table, working

commands = new_commands()

HELP = {
    "temperature": "The target's sampling temperature.",
    "target_top_k": "Top-k of the target law.",
    "target_top_p": "Top-p of the target law.",
    "draft_top_k": "Top-k the drafts are drawn with.",
    "draft_top_p": "Top-p the drafts are drawn with.",
    "verify_temperature": "Temperature the verifier applies to the target (default: --temperature).",
    "verify_target_top_k": "Top-k the verifier applies to the target (default: the target's).",
    "verify_target_top_p": "Top-p the verifier applies to the target (default: the target's).",
    "verify_draft_top_k": "Top-k the verifier applies to the draft probabilities (default: the "
                          "draft's).",
    "verify_draft_top_p": "Top-p the verifier applies to the draft probabilities (default: the "
                          "draft's).",
    "threshold_single": "--method threshold: accept when p(X) >= this (default 1).",
    "threshold_acc": "--method threshold: else accept with min(1, p(X) / this) (default 1).",
    "typical_epsilon": "--method typical: epsilon (default 0.09).",
    "typical_delta": "--method typical: delta (default 0.3).",
    "weight": "--method ensemble: w of w p + (1 - w) q (default 1).",
}
"""The help of each acceptance setting's flag (--NAME-WITH-DASHES)."""

def _setting(name: str, default: float | None = None) -> Any:
    """The option of an acceptance setting (AcceptanceConfig field `name`; None: not given,
    the library's default)."""
    return typer.Option(default, "--" + name.replace("_", "-"), help=HELP[name])


@commands.command("lossless")
def lossless(
    ctx: typer.Context,
    method: str = typer.Option(LosslessSpec.method, "--method", help=f"One of {', '.join(METHODS)}."),
    temperature: float = _setting("temperature", AcceptanceConfig.temperature),
    target_top_k: int = _setting("target_top_k"),
    target_top_p: float = _setting("target_top_p"),
    draft_top_k: int = _setting("draft_top_k"),
    draft_top_p: float = _setting("draft_top_p"),
    verify_temperature: float = _setting("verify_temperature"),
    verify_target_top_k: int = _setting("verify_target_top_k"),
    verify_target_top_p: float = _setting("verify_target_top_p"),
    verify_draft_top_k: int = _setting("verify_draft_top_k"),
    verify_draft_top_p: float = _setting("verify_draft_top_p"),
    threshold_single: float = _setting("threshold_single"),
    threshold_acc: float = _setting("threshold_acc"),
    typical_epsilon: float = _setting("typical_epsilon"),
    typical_delta: float = _setting("typical_delta"),
    weight: float = _setting("weight"),
    vocab: int = option.vocab(LosslessSpec.vocab),
    depth: int = option.depth(LosslessSpec.depth),
    trials: int = option.trials(LosslessSpec.trials, "Instances of the audit's mixed family (one per "
                                                     "family)."),
    seed: int = option.seed(LosslessSpec.seed, "Seed of the instances."),
    time_limit: float = option.time_limit(LosslessSpec.time_limit, "Seconds; no instance starts "
                                                                   "after it (exit 4, no verdict)."),
    as_json: bool = option.json(),
) -> None:
    """Is an acceptance configuration lossless? Exact TV if not."""

    def body() -> dict[str, Any]:
        settings = {name: ctx.params[name] for name in SETTINGS if ctx.params[name] is not None}
        return run_lossless(LosslessSpec(method, settings, vocab, depth, trials, seed, time_limit))

    run(body, as_json, _render)


def run_lossless(spec: LosslessSpec) -> dict[str, Any]:
    """config_report as the command's JSON; Stopped (exit 4) when the time limit passed before
    the last instance; ClaimFailed (exit 1) when the configuration is lossy."""
    method = spec.config.method
    with working(f"lossless {method}"):
        result = spec.run()
    report = result.to_json()
    if result.status is Losslessness.STOPPED:
        raise Stopped(f"lossless {method}: stopped at the {report['stopped']} after "
                      f"{report['trials_run']} of {spec.trials} instances: no verdict (a larger "
                      "--time-limit goes on)", report)
    if not report["lossless"]:
        raise ClaimFailed(f"{method} configuration is LOSSY: exact TV {report['max_tv']:.4g} "
                          f"from the target law on {report['worst_instance']}", report)
    return report


def _render(r: dict[str, Any]) -> None:
    if r.get("stopped"):
        return  # the STOPPED line says how far it got
    print(f"verdict: {r['verdict']}")
    table(f"exact TV of the output law from the target law (V = {r['vocab']}, "
          f"L = {r['depth']}, family {r['family']}, seed {r['seed']})",
          ["instance", "exact TV", "E[tau+1]"],
          [[i["instance"], f"{i['tv']:.6g}" if i["tv"] > ZERO_TV else f"0 (< {ZERO_TV:g})",
            f"{i['block_efficiency']:.4f}"]
           for i in r["instances"]])
