"""`speclp lossless`: is my acceptance configuration lossless?

Takes an acceptance configuration (method, thresholds, the temperature and top-k / top-p the
target and the draft are sampled with, and what the verifier applies to each side) and says
lossless or not: lossless when a theorem covers the configuration (the verifier sees the
laws the tokens are sampled from, and the method is speculative sampling, the one-hot rule,
thresholds 1 / 1, or an ensemble with w = 1), else the exact TV of the configuration's output
law from the target law on the instances of the audit's families (proofs.config_law), with
the worst instance named. Exit 0 lossless, 1 lossy (the counterexample instance named), 2
bad input.
"""

from __future__ import annotations

from typing import Any

import typer

from ..proofs.config_law import METHODS, ZERO_TV, AcceptanceConfig, config_report
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, new_commands, run, table, working

commands = new_commands()


@commands.command("lossless")
def lossless(
    method: str = typer.Option("speculative", "--method", help=f"One of {', '.join(METHODS)}."),
    temperature: float = typer.Option(1.0, "--temperature", help="The target's sampling "
                                      "temperature."),
    target_top_k: int = typer.Option(None, "--target-top-k", help="Top-k of the target law."),
    target_top_p: float = typer.Option(None, "--target-top-p", help="Top-p of the target law."),
    draft_top_k: int = typer.Option(None, "--draft-top-k", help="Top-k the drafts are drawn with."),
    draft_top_p: float = typer.Option(None, "--draft-top-p", help="Top-p the drafts are drawn with."),
    verify_temperature: float = typer.Option(None, "--verify-temperature", help="Temperature the "
                                             "verifier applies to the target (default: "
                                             "--temperature)."),
    verify_target_top_k: int = typer.Option(None, "--verify-target-top-k", help="Top-k the "
                                            "verifier applies to the target (default: the "
                                            "target's)."),
    verify_target_top_p: float = typer.Option(None, "--verify-target-top-p", help="Top-p the "
                                              "verifier applies to the target (default: the "
                                              "target's)."),
    verify_draft_top_k: int = typer.Option(None, "--verify-draft-top-k", help="Top-k the "
                                           "verifier applies to the draft probabilities "
                                           "(default: the draft's)."),
    verify_draft_top_p: float = typer.Option(None, "--verify-draft-top-p", help="Top-p the "
                                             "verifier applies to the draft probabilities "
                                             "(default: the draft's)."),
    threshold_single: float = typer.Option(None, "--threshold-single", help="--method threshold: "
                                           "accept when p(X) >= this (default 1)."),
    threshold_acc: float = typer.Option(None, "--threshold-acc", help="--method threshold: else "
                                        "accept with min(1, p(X) / this) (default 1)."),
    typical_epsilon: float = typer.Option(None, "--typical-epsilon", help="--method typical: "
                                          "epsilon (default 0.09)."),
    typical_delta: float = typer.Option(None, "--typical-delta", help="--method typical: delta "
                                        "(default 0.3)."),
    weight: float = typer.Option(None, "--weight", help="--method ensemble: w of w p + (1 - w) q "
                                 "(default 1)."),
    vocab: int = option.vocab(3),
    depth: int = option.depth(2),
    trials: int = option.trials(6, "Instances of the audit's mixed family (one per family)."),
    seed: int = option.seed(0, "Seed of the instances."),
    as_json: bool = option.json(),
) -> None:
    """Is an acceptance configuration lossless? Exact TV if not."""

    def body() -> dict[str, Any]:
        check.choice("--method", method, METHODS)
        own = {"threshold": ("threshold_single", "threshold_acc"),
               "typical": ("typical_epsilon", "typical_delta"), "ensemble": ("weight",)}
        given = {"threshold_single": threshold_single, "threshold_acc": threshold_acc,
                 "typical_epsilon": typical_epsilon, "typical_delta": typical_delta,
                 "weight": weight}
        for name, value in given.items():
            if value is not None and name not in own.get(method, ()):
                raise BadInput(f"--{name.replace('_', '-')}: does not apply to --method {method}")
        check.integer("--vocab", vocab, 2, 6)
        check.integer("--depth", depth, 1, 3)
        check.integer("--trials", trials, 1, 60)
        check.seed("--seed", seed)
        settings = {"method": method, "temperature": temperature, "target_top_k": target_top_k,
                    "target_top_p": target_top_p, "draft_top_k": draft_top_k,
                    "draft_top_p": draft_top_p, "verify_temperature": verify_temperature,
                    "verify_target_top_k": verify_target_top_k,
                    "verify_target_top_p": verify_target_top_p,
                    "verify_draft_top_k": verify_draft_top_k,
                    "verify_draft_top_p": verify_draft_top_p}
        settings |= {name: value for name, value in given.items() if value is not None}
        config = AcceptanceConfig(**settings)
        try:
            config.check()
        except ValueError as err:
            field, _, text = str(err).partition(": ")
            raise BadInput(f"--{field.replace('_', '-')}: {text}") from None
        with working(f"lossless {method}"):
            report = config_report(config, vocab, depth, trials, seed)
        if not report["lossless"]:
            raise ClaimFailed(f"{method} configuration is LOSSY: exact TV {report['max_tv']:.4g} "
                              f"from the target law on {report['worst_instance']}", report)
        return report

    def render(r: dict[str, Any]) -> None:
        print(f"verdict: {r['verdict']}")
        table(f"exact TV of the output law from the target law (V = {r['vocab']}, "
              f"L = {r['depth']}, family {r['family']}, seed {r['seed']})",
              ["instance", "exact TV", "E[tau+1]"],
              [[i["instance"], f"{i['tv']:.6g}" if i["tv"] > ZERO_TV else f"0 (< {ZERO_TV:g})",
                f"{i['block_efficiency']:.4f}"]
               for i in r["instances"]])

    run(body, as_json, render)
