"""Build / solve / certify times of the full LP and the node LP against LP size.

    python benchmarks/lp_scale.py
    options: --quick (small ladder), --resume (keep finished records), --out DIR

Writes benchmarks/results/lp_scale.{json,md,png}. Targets checked (2-core machine):
  * full LP with >= 1e5 variables solved (HiGHS) in <= 10 s
  * exact certificate of a >= 1e4-variable LP in <= 5 s
  * closed-form node optimum over >= 1e6 nodes in <= 5 s
  * the largest full LP solved within 60 s (ladder stops at the first solve over 60 s)
Full-LP instances: Dirichlet(1) float rows (seed 0); certificates via solve_exact (HiGHS
basis, exact check, iterative refinement when the float basis is only approximately
optimal). cvxpy (CLARABEL) runs only up to CVXPY_MAX_VARS variables.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from speclp.lp.certify import solve_exact
from speclp.lp.full import full_lp
from speclp.lp.instance import dirichlet_instance
from speclp.lp.node import node_lp, node_optimum
from speclp.lp.solve import solve
from speclp.verifiers.tree import TreeModel, num_nodes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ladder_args, pyplot, resumed_records, save_figure, save_records, seconds_log_axes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CVXPY_MAX_VARS = 60_000
SOLVE_LIMIT_S = 60.0
FULL_LADDER = [  # (V, L, K), increasing size
    (2, 3, 1), (3, 3, 1), (2, 4, 2), (3, 3, 2), (2, 5, 2), (2, 6, 2), (3, 4, 2), (2, 5, 3),
    (2, 7, 2), (2, 6, 3), (3, 5, 2), (2, 8, 2),
]
QUICK_FULL = FULL_LADDER[:6]
NODE_LADDER = [(2, 6), (3, 5), (2, 10), (4, 6), (2, 14), (3, 10), (2, 17)]
QUICK_NODE = NODE_LADDER[:4]
CLOSED_FORM = [(2, 19), (4, 10), (10, 6)]


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - start


def random_model(vocab: int, depth: int, seed: int = 0) -> TreeModel:
    """Float Dirichlet(1) rows straight into a TreeModel (no JSON round trip: fast at 1e6)."""
    rng = np.random.default_rng(seed)
    count = num_nodes(vocab, depth)
    return TreeModel(rng.dirichlet(np.ones(vocab), count), rng.dirichlet(np.ones(vocab), count),
                     depth)


def bench_full(vocab: int, depth: int, paths: int) -> dict[str, Any]:
    inst = dirichlet_instance(vocab, depth, seed=0)
    lp, build_s = timed(full_lp, inst, paths=paths)
    rec: dict[str, Any] = {"kind": "full", "V": vocab, "L": depth, "K": paths,
                           "variables": lp.num_vars, "rows": lp.num_eq, "nonzeros": lp.nnz,
                           "build_s": build_s}
    (solution, cert), total_s = timed(solve_exact, lp, time_limit=SOLVE_LIMIT_S)
    rec.update({"highs_status": solution.status, "highs_value": solution.value,
                "highs_solve_s": solve_time(solution), "solve_and_certify_s": total_s})
    rec["certified"] = cert.certified
    rec["certify_s"] = cert.seconds
    rec["refinement_rounds"] = solution.info.get("refinement_rounds", 0)
    rec["certified_value"] = str(cert.value) if cert.certified else None
    rec["certificate_reason"] = cert.reason
    if lp.num_vars <= CVXPY_MAX_VARS and solution.optimal:
        cvx = solve(lp, backend="cvxpy")
        rec.update({"cvxpy_s": cvx.seconds, "cvxpy_status": cvx.status,
                    "cvxpy_gap": abs(cvx.value - solution.value)})
    return rec


def solve_time(solution: Any) -> float:
    """Seconds of the HiGHS solve alone (solve_exact adds refinement time on top)."""
    return float(solution.info.get("solve_s", solution.seconds))


def bench_node(vocab: int, depth: int) -> dict[str, Any]:
    model = random_model(vocab, depth)
    lp, build_s = timed(node_lp, model)
    rec: dict[str, Any] = {"kind": "node", "V": vocab, "L": depth, "K": 1,
                           "variables": lp.num_vars, "rows": lp.num_ub, "nonzeros": lp.nnz,
                           "build_s": build_s}
    (solution, cert), _ = timed(solve_exact, lp, time_limit=SOLVE_LIMIT_S)
    rec.update({"highs_status": solution.status, "highs_value": solution.value,
                "highs_solve_s": solve_time(solution), "certified": cert.certified,
                "certify_s": cert.seconds, "certificate_reason": cert.reason,
                "refinement_rounds": solution.info.get("refinement_rounds", 0)})
    (beta, value), closed_s = timed(node_optimum, model)
    rec.update({"closed_form_s": closed_s, "closed_form_gap": abs(float(value) - solution.value)})
    if lp.num_vars <= CVXPY_MAX_VARS:
        cvx = solve(lp, backend="cvxpy")
        rec.update({"cvxpy_s": cvx.seconds, "cvxpy_status": cvx.status,
                    "cvxpy_gap": abs(cvx.value - solution.value)})
    return rec


def bench_closed_form(vocab: int, depth: int) -> dict[str, Any]:
    model = random_model(vocab, depth)
    (beta, value), seconds = timed(node_optimum, model)
    return {"kind": "closed", "V": vocab, "L": depth, "nodes": int(len(beta)),
            "closed_form_s": seconds, "value": float(value)}


def key(rec: dict[str, Any]) -> str:
    return f"{rec['kind']}-V{rec['V']}-L{rec['L']}-K{rec.get('K', 1)}"


def run(out: Path, quick: bool = False, resume: bool = False) -> dict[str, Any]:
    path, records, done = resumed_records(out, "lp_scale", resume, key)

    def save() -> None:
        save_records(path, records, summarise(records))

    def add(rec: dict[str, Any]) -> None:
        records.append(rec)
        print(format_record(rec), flush=True)
        save()

    for vocab, depth, paths in QUICK_FULL if quick else FULL_LADDER:
        if f"full-V{vocab}-L{depth}-K{paths}" in done:
            continue
        try:
            rec = bench_full(vocab, depth, paths)
        except ValueError as err:  # refused as too large
            print(f"full V={vocab} L={depth} K={paths}: {err}", file=sys.stderr)
            break
        add(rec)
        if rec["highs_status"] != "optimal" or rec["highs_solve_s"] > SOLVE_LIMIT_S:
            break
    for vocab, depth in QUICK_NODE if quick else NODE_LADDER:
        if f"node-V{vocab}-L{depth}-K1" not in done:
            add(bench_node(vocab, depth))
    for vocab, depth in CLOSED_FORM[:1] if quick else CLOSED_FORM:
        if f"closed-V{vocab}-L{depth}-K1" not in done:
            add(bench_closed_form(vocab, depth))
    summary = summarise(records)
    save()
    (out / "lp_scale.md").write_text(markdown(records, summary))
    plot(records, out / "lp_scale.png")
    return summary


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    full = [r for r in records if r["kind"] == "full" and r.get("highs_status") == "optimal"]
    big = [r for r in full if r["variables"] >= 1e5]
    certs = [r for r in records if r.get("certified") and r["variables"] >= 1e4]
    closed = [r for r in records if r["kind"] == "closed" and r["nodes"] >= 1e6]
    within = [r for r in full if r["highs_solve_s"] <= SOLVE_LIMIT_S]
    largest = max(within, key=lambda r: r["variables"]) if within else None
    fastest_big = min(big, key=lambda r: r["highs_solve_s"]) if big else None
    fastest_cert = min(certs, key=lambda r: r["certify_s"]) if certs else None
    fastest_closed = min(closed, key=lambda r: r["closed_form_s"]) if closed else None
    return {
        "full_lp_1e5_vars_solve_s": fastest_big and fastest_big["highs_solve_s"],
        "full_lp_1e5_vars_instance": fastest_big and key(fastest_big),
        "target_full_1e5_within_10s": bool(fastest_big and fastest_big["highs_solve_s"] <= 10),
        "certificate_1e4_vars_s": fastest_cert and fastest_cert["certify_s"],
        "certificate_1e4_vars_instance": fastest_cert and key(fastest_cert),
        "target_certificate_within_5s": bool(fastest_cert and fastest_cert["certify_s"] <= 5),
        "closed_form_1e6_nodes_s": fastest_closed and fastest_closed["closed_form_s"],
        "target_closed_form_within_5s": bool(fastest_closed
                                             and fastest_closed["closed_form_s"] <= 5),
        "largest_full_lp_within_60s": largest and {
            "instance": key(largest), "variables": largest["variables"],
            "nonzeros": largest["nonzeros"], "solve_s": largest["highs_solve_s"]},
        "all_certified": all(r.get("certified", True) for r in records),
    }


def format_record(rec: dict[str, Any]) -> str:
    parts = [f"{key(rec):22s}"]
    for name in ("variables", "nodes", "nonzeros"):
        if name in rec:
            parts.append(f"{name} {rec[name]:>9,}")
    for name in ("build_s", "highs_solve_s", "certify_s", "cvxpy_s", "closed_form_s"):
        if rec.get(name) is not None:
            parts.append(f"{name[:-2]} {rec[name]:7.3f}s")
    if "certified" in rec:
        parts.append("certified" if rec["certified"] else "NOT certified")
    return "  ".join(parts)


def markdown(records: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v)

    cols = ["kind", "V", "L", "K", "variables", "nonzeros", "build_s", "highs_solve_s",
            "certify_s", "refinement_rounds", "certified", "cvxpy_s", "cvxpy_gap",
            "closed_form_s"]
    lines = ["# LP scale benchmark", "",
             "Times in seconds on the shared 2-core machine; HiGHS 1.16 (simplex below 5e4 "
             "nonzeros, IPX + crossover above), certificate = exact basis solve (python-flint) "
             "plus iterative refinement when needed; cvxpy = CLARABEL at 1e-12 tolerances.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in records:
        if r["kind"] == "closed":
            continue
        lines.append("| " + " | ".join(cell(r.get(c)) for c in cols) + " |")
    lines += ["", "Closed-form node optimum:", "", "| V | L | nodes | seconds |",
              "|---|---|---|---|"]
    for r in records:
        if r["kind"] == "closed":
            lines.append(f"| {r['V']} | {r['L']} | {r['nodes']:,} | {r['closed_form_s']:.3f} |")
    lines += ["", "## Targets", "", "```", json.dumps(summary, indent=1), "```", ""]
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], path: Path) -> None:
    fig, axes = pyplot().subplots(1, 2, figsize=(12, 4.5))
    for ax, kind in zip(axes, ("full", "node"), strict=True):
        rs = sorted((r for r in records if r["kind"] == kind), key=lambda r: r["variables"])
        for field, label, marker in (("build_s", "build", "o"),
                                     ("highs_solve_s", "HiGHS solve", "s"),
                                     ("certify_s", "exact certificate", "^"),
                                     ("cvxpy_s", "cvxpy CLARABEL", "x"),
                                     ("closed_form_s", "closed form", "d")):
            pts = [(r["variables"], r[field]) for r in rs if r.get(field) is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker=marker, label=label)
        seconds_log_axes(ax, "LP variables", f"{kind} LP")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = ladder_args(__doc__, RESULTS, argv)
    summary = run(args.out, args.quick, args.resume)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
