"""`speclp gap`: every verifier against the certified K-path optimum on one instance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..lp.engine import BACKENDS
from ..lp.instance import Instance
from ..proofs.gap import GapSpec, OptimumNotFound
from ..verifiers.registry import REGISTRY, compared_verifiers, verifier_names
from . import options as option
from . import validate as check
from .common import ClaimFailed, new_commands, run, stderr, table, working

SHORT_FRACTION = 24  # the table shows an exact fraction up to this many characters (--json: all)
NOT_CLAIMED = [n for n, s in REGISTRY.items() if not s.lossless and not s.draft_sampling]
BROKEN = [n for n in verifier_names(include_broken=True) if n not in compared_verifiers()]


commands = new_commands()


def _label(record: dict[str, Any]) -> str:
    """'certified' or 'NOT certified: reason' for an optimum record."""
    if record.get("certified"):
        return "certified"
    if record.get("certified_within") is not None:
        return f"certified within {record['certified_within']:.3g} (exact bounds, not exactly)"
    return f"NOT certified: {record.get('certificate') or record.get('reason') or 'unknown'}"


def short_fraction(text: str | None) -> str:
    """The exact fraction when it is short, else a pointer to --json (which holds it)."""
    if not text:
        return ""
    return text if len(text) <= SHORT_FRACTION else f"({len(text)} chars: --json)"


def parse_verifiers(flag: str, text: str | None) -> list[str] | None:
    """Names of a comma-separated --verifiers value (None: the default comparison). An empty
    list and unknown names are refused by the spec (proofs.gap.available_verifiers)."""
    if text is None:
        return None
    return [v.strip() for v in text.split(",") if v.strip()]


def status_text(v: dict[str, Any]) -> str:
    """The status cell of a verifier row: TV (exact or float64), estimate, or not claimed."""
    estimate, undefined = v.get("estimate"), v.get("undefined")
    if undefined is not None:
        return (f"undefined on {undefined['count']} {undefined['unit']} of mass "
                f"{undefined['mass']:.6g}: no block efficiency")
    if estimate is not None:
        return (f"ESTIMATE: 95% CI [{estimate['ci_low']:.6g}, {estimate['ci_high']:.6g}] "
                f"from {estimate['samples']} sampled configurations; TV not checked")
    if v.get("tv_kind") == "exact":
        tv = "TV 0 (exact)" if v["tv_exact"] == "0" else f"TV {v['tv']:.3g} (exact > 0)"
    else:
        tv = f"TV {v['tv']:.2g} (float64)"
    if not v["lossless_claimed"]:
        return f"not claimed lossless: {tv}; reported, not checked"
    return tv


@commands.command()
def gap(
    instance: str = typer.Argument(..., help="Instance JSON file."),
    paths: int = option.paths(GapSpec.paths, "Number K of draft paths."),
    draft_sampling: str = option.draft_sampling(GapSpec.draft_sampling),
    verifiers: str = typer.Option(
        None, "--verifiers",
        help="Verifiers to compare, comma-separated (default: every registered lossless one, "
             f"and the ones not claimed lossless: {', '.join(NOT_CLAIMED) or 'none'}, reported "
             f"without a claim; the deliberately broken {', '.join(BROKEN)} only by name). "
             "An unknown name: exit 2."),
    method: str = option.method("Optimum engine: auto (= colgen), colgen or full (the "
                                "enumerated LP, small instances only)."),
    backend: str = option.backend(BACKENDS, GapSpec.backend, "LP backend of --method full"),
    save_dir: str = option.save_dir(),
    time_limit: float = option.time_limit(GapSpec.time_limit, "Seconds for the optimum (colgen or full LP); "
                                                 "when hit: one line, exit 1."),
    max_enumerated: int = option.max_enumerated(GapSpec.max_enumerated,
        "Draft configurations one verifier's exact law may enumerate (drafts without "
        "replacement, single-path verifiers, the deliberately broken variants); above it the "
        "block efficiency is estimated from --samples "
        "sampled configurations. Laws by structure take up to max(this, 5e7) evaluations."),
    samples: int = option.samples(GapSpec.samples),
    seed: int = option.seed(GapSpec.seed, "Seed of the sampled configurations."),
    as_json: bool = option.json(),
) -> None:
    """Every verifier's exact block efficiency E[tau + 1] against the K-path LP optimum.

    Exit 1 when a verifier claimed lossless exceeds the optimum (tolerance 1e-9 certified,
    1e-7 not) or is lossy (exact TV > 0, or float64 TV > 1e-12): the numbers are printed and
    the instance saved; also exit 1, with one line, when the optimum is not found within
    --time-limit. A verifier not claimed lossless under the draft law (see --verifiers) is
    reported with its TV and never fails the command. Exact laws use the structure of i.i.d.
    drafting (node recursion, or BV against the selection law); a verifier whose exact law
    would cost more than --max-enumerated gets an ESTIMATE (mean over sampled
    configurations, 95% confidence interval), labelled so. The table shows floats and the
    exact fractions when short; --json has them all.
    """

    def body() -> dict[str, Any]:
        spec = gap_spec(instance, paths, draft_sampling, verifiers, method, backend, save_dir,
                        time_limit, max_enumerated, samples, seed)
        return run_gap(spec, save_dir)

    run(body, as_json, render_gap)


def gap_spec(instance: str, paths: int, draft_sampling: str, verifiers: str | None, method: str,
             backend: str, save_dir: str, time_limit: float, max_enumerated: int, samples: int,
             seed: int) -> GapSpec:
    """Flags -> GapSpec, whose construction is the validation (BadArgument naming the field,
    exit 2 before any work); the CLI checks only what flags alone have (the --verifiers list,
    --save-dir) and reads the instance file once the spec's fields are checked, refusing a
    size over the limits as --paths."""
    chosen = parse_verifiers("--verifiers", verifiers)
    check.output_dir("--save-dir", save_dir)

    def read(spec: GapSpec) -> Instance:
        return check.instance_file(instance, spec.paths, spec.draft_sampling, size_flag="--paths",
                                   method=spec.method, exact_laws=False)

    return GapSpec(read, paths, draft_sampling=draft_sampling, backend=backend,
                   verifiers=None if chosen is None else tuple(chosen), method=method,
                   time_limit=time_limit, max_enumerated=max_enumerated, samples=samples,
                   seed=seed)


def run_gap(spec: GapSpec, save_dir: str) -> dict[str, Any]:
    """spec.run() as the command's JSON; the instance saved and ClaimFailed (exit 1) when a
    claim fails or the optimum is not found."""
    inst = spec.instance
    with working(f"gap {inst.name} K={spec.paths}"):
        try:
            result = spec.run().to_json()
        except OptimumNotFound as err:
            raise ClaimFailed(str(err), {"error": str(err), "optimum": err.record}) from None
    if result["failures"]:
        saved = inst.save(Path(save_dir) / f"gap-K{spec.paths}-{inst.name}.json")
        result["saved"] = str(saved)
        raise ClaimFailed(f"{'; '.join(result['failures'])} (instance saved to {saved})", result)
    return result


def render_gap(r: dict[str, Any]) -> None:
    """The table of `speclp gap` (floats, short exact fractions, status per verifier)."""
    if "verifiers" not in r:  # the optimum was not found: the one line says why
        return
    inst, opt, class_row = r["instance"], r["optimum"], r["class_optimum"]
    rows = [[f"K-path optimum ({opt['method']})", f"{opt['value']:.12g}",
             short_fraction(opt["exact"]), "", "", "", _label(opt)],
            ["class optimum (select + BV)", f"{class_row['value']:.12g}",
             short_fraction(class_row["exact"]), "0", "1", "",
             "= K-path optimum (theorem; same solve)"]]
    for name, v in r["verifiers"].items():
        defined = v["block_efficiency"] is not None
        rows.append([name, f"{v['block_efficiency']:.12g}" if defined else "undefined",
                     short_fraction(v.get("exact")), f"{v['gap']:.3g}" if defined else "",
                     f"{v['ratio']:.6f}" if defined else "", v.get("evaluation", ""),
                     status_text(v)])
    title = (f"{inst['name']}  V={inst['vocab_size']} L={inst['depth']} K={r['paths']} "
             f"({r['draft_sampling']})  E[tau + 1]")
    table(title, ["quantity", "value", "exact", "gap to optimum", "ratio", "law by", "status"],
          rows)
    not_claimed = [n for n, v in r["verifiers"].items() if not v["lossless_claimed"]]
    if not_claimed:
        stderr.print(f"not claimed lossless under {r['draft_sampling']} drafts (reported, "
                     f"never a failure): {', '.join(not_claimed)}", markup=False)
