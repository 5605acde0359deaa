"""Multi-path scale: the K-path full LP by column generation (selection master), certified.

    python benchmarks/multipath_scale.py [--quick] [--resume] [--out DIR]

Writes benchmarks/results/multipath_scale.{json,md,png}. Targets (2-core machine):
  * (V, L, K) = (3, 2, 3), (2, 3, 3), (3, 3, 2): solved and certified within 2 s each
  * (4, 3, 3), (8, 2, 3), (2, 6, 3): solved within 30 s, certified within 60 s
  * the largest instance solved within 5 minutes (a ladder of growing instances; it stops
    at the first solve over 300 s or when the ladder's time budget is spent)
Instances: Dirichlet(1) float rows, seed 0, i.i.d. drafting; the exact data are the float
rows renormalised exactly (large denominators: the hardest case for the certificate).
For the small targets the direct full LP (speclp.lp.full.full_lp + HiGHS) is solved
too, as a reference for the value and the time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from speclp.lp.colgen import certify_master, solve_colgen
from speclp.lp.full import estimate_full_lp, full_lp
from speclp.lp.instance import dirichlet_instance
from speclp.lp.solve import solve

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ladder_args, pyplot, resumed_records, save_figure, save_records, seconds_log_axes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SMALL = [(3, 2, 3), (2, 3, 3), (3, 3, 2)]
MEDIUM = [(4, 3, 3), (8, 2, 3), (2, 6, 3)]
LADDER = [(2, 8, 3), (3, 5, 4), (4, 4, 4), (8, 3, 4), (2, 10, 4), (4, 5, 4), (16, 2, 5)]
SOLVE_LIMIT_S = 300.0
CERTIFY_IF_SOLVED_WITHIN_S = 30.0
LADDER_BUDGET_S = 600.0


def bench(vocab: int, depth: int, paths: int, group: str, certify: bool | float = True,
          reference: bool = False) -> dict[str, Any]:
    """certify: True, False, or a number of seconds (certify only if solved that fast)."""
    inst = dirichlet_instance(vocab, depth, seed=0)
    result = solve_colgen(inst, paths=paths, certify=False, time_limit=SOLVE_LIMIT_S)
    structure = result.master
    rec: dict[str, Any] = {
        "group": group, "V": vocab, "L": depth, "K": paths,
        "configurations": structure.count_configurations(),
        "full_lp_variables_estimate": None,
        "master_columns": result.lp.num_vars, "master_rows": result.lp.num_eq,
        "status": result.status, "value": result.value, "iterations": result.iterations,
        "solve_s": result.seconds,
    }
    rec["full_lp_variables_estimate"] = estimate_full_lp(inst.model(), paths)["variables"]
    if not isinstance(certify, bool):
        certify = result.seconds <= certify
    if certify and result.status == "optimal":
        start = time.perf_counter()
        _, _, cert, missed = certify_master(structure, result.lp.meta["priorities"],
                                     result.solution)
        if missed is not None:  # float pricing stopped early: let solve_colgen finish it
            cert = solve_colgen(inst, paths=paths, certify=True).certificate
            rec["certificate_note"] = "exact pricing added columns; re-solved with certify=True"
        rec["certify_s"] = time.perf_counter() - start
        rec["solve_and_certify_s"] = rec["solve_s"] + rec["certify_s"]
        rec["certified"] = bool(cert.certified)
        rec["certified_value"] = str(cert.value) if cert.certified else None
        rec["certificate_reason"] = cert.reason
    if reference:
        lp = full_lp(inst, paths=paths, exact=False)
        direct = solve(lp)
        rec.update({"direct_variables": lp.num_vars, "direct_solve_s": direct.seconds,
                    "direct_gap": abs(direct.value - result.value)})
    return rec


def key(rec: dict[str, Any]) -> str:
    return f"V{rec['V']}-L{rec['L']}-K{rec['K']}"


def run(out: Path, quick: bool = False, resume: bool = False) -> dict[str, Any]:
    path, records, done = resumed_records(out, "multipath_scale", resume, key)

    def add(rec: dict[str, Any]) -> None:
        records.append(rec)
        print(format_record(rec), flush=True)
        save_records(path, records, summarise(records))

    for v, l_, k in SMALL:
        if f"V{v}-L{l_}-K{k}" not in done:
            add(bench(v, l_, k, "small", reference=True))
    for v, l_, k in MEDIUM:
        if f"V{v}-L{l_}-K{k}" not in done:
            add(bench(v, l_, k, "medium"))
    budget_start = time.perf_counter()
    for v, l_, k in [] if quick else LADDER:
        if f"V{v}-L{l_}-K{k}" in done:
            continue
        if time.perf_counter() - budget_start > LADDER_BUDGET_S:
            break
        probe = bench(v, l_, k, "ladder", certify=CERTIFY_IF_SOLVED_WITHIN_S)
        add(probe)
        if probe["status"] != "optimal":
            break
    summary = summarise(records)
    save_records(path, records, summary)
    (out / "multipath_scale.md").write_text(markdown(records, summary))
    plot(records, out / "multipath_scale.png")
    return summary


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    small = [r for r in records if r["group"] == "small"]
    medium = [r for r in records if r["group"] == "medium"]
    solved = [r for r in records if r["status"] == "optimal" and r["solve_s"] <= SOLVE_LIMIT_S]
    largest = max(solved, key=lambda r: r["configurations"]) if solved else None
    return {
        "small_solved_and_certified_within_2s": bool(small) and all(
            r.get("certified") and r["solve_and_certify_s"] <= 2.0 for r in small),
        "small_max_solve_and_certify_s": max((r.get("solve_and_certify_s", 0) for r in small),
                                             default=None),
        "medium_solved_within_30s": bool(medium) and all(
            r["status"] == "optimal" and r["solve_s"] <= 30 for r in medium),
        "medium_certified_within_60s": bool(medium) and all(
            r.get("certified") and (r.get("certify_s") or 1e9) <= 60 for r in medium),
        "medium_max_solve_s": max((r["solve_s"] for r in medium), default=None),
        "medium_max_certify_s": max((r.get("certify_s") or 0 for r in medium), default=None),
        "largest_solved_within_5min": largest and {
            "instance": key(largest), "configurations": largest["configurations"],
            "full_lp_variables_estimate": largest["full_lp_variables_estimate"],
            "solve_s": largest["solve_s"], "certified": largest.get("certified")},
    }


def format_record(rec: dict[str, Any]) -> str:
    text = (f"{rec['group']:7s} {key(rec):12s} configs {rec['configurations']:>13,}  "
            f"full-LP vars ~{rec['full_lp_variables_estimate']:>13,}  master "
            f"{rec['master_columns']:>6} x {rec['master_rows']:<5} {rec['status']:9s} "
            f"value {rec['value']:.10f}  it {rec['iterations']:4d}  solve {rec['solve_s']:7.2f}s")
    if "certify_s" in rec:
        text += f"  certify {rec['certify_s']:6.2f}s {'certified' if rec['certified'] else 'NOT'}"
    if "direct_solve_s" in rec:
        text += f"  direct {rec['direct_solve_s']:.2f}s (gap {rec['direct_gap']:.1e})"
    return text


def markdown(records: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    cols = ["group", "V", "L", "K", "configurations", "full_lp_variables_estimate",
            "master_columns", "master_rows", "iterations", "value", "solve_s", "certify_s",
            "certified", "direct_solve_s", "direct_gap"]

    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.3e}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    lines = ["# Multi-path scale: column generation on the K-path full LP", "",
             "Selection master (speclp.lp.colgen.solve_colgen): rows = P path rows + N V "
             "matching rows; columns = P (L+1) V single-path outputs + N - 1 A(z) + one "
             "column per generated selection priority. Certificate: the master rebuilt with "
             "exact data and certified from its basis (iterative refinement when needed), "
             "then every column of the full LP priced exactly through the greedy selection "
             "(speclp.lp.colgen.certify_master). Seconds on a shared 2-core "
             "machine; Dirichlet(1) float instances, seed 0, i.i.d. drafts.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        lines.append("| " + " | ".join(cell(r.get(c)) for c in cols) + " |")
    lines += ["", "## Targets", "", "```", json.dumps(summary, indent=1), "```", ""]
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    rs = sorted(records, key=lambda r: r["configurations"])
    xs = [r["configurations"] for r in rs]
    ax.plot(xs, [r["solve_s"] for r in rs], "s-", label="column generation solve")
    cert = [(r["configurations"], r["certify_s"]) for r in rs if r.get("certify_s") is not None]
    if cert:
        ax.plot(*zip(*cert, strict=True), "^-", label="exact certificate")
    direct = [(r["configurations"], r["direct_solve_s"]) for r in rs if "direct_solve_s" in r]
    if direct:
        ax.plot(*zip(*direct, strict=True), "o", label="direct full LP (HiGHS)")
    for r in rs:
        ax.annotate(key(r), (r["configurations"], r["solve_s"]), fontsize=7,
                    textcoords="offset points", xytext=(3, 3))
    seconds_log_axes(ax, "draft configurations (multisets of K paths)",
                     "K-path full LP by column generation")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = ladder_args(__doc__, RESULTS, argv)
    print(json.dumps(run(args.out, args.quick, args.resume), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
