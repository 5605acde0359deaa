"""`speclp gap` at research sizes: every verifier exact, the optimum certified (issue 22).

For every shape (V, L, K) of SHAPES this runs `speclp gap INSTANCE --paths K --json` as a
fresh process (process start included) on a Dirichlet(1) instance (seed 1), and records
    wall seconds, CPU seconds (user + system: what the process itself used, which a shared
    machine's load does not inflate much), peak RSS of the process (os.wait4), the
    optimum's certificate ("certified"
    exactly, or "certified within w" by exact bounds), every verifier's evaluation (node
    recursion, selection law, single path, enumeration, or estimate) and its seconds;
twice: quiet (nothing of ours beside it) and loaded (two CPU-bound processes beside it).
The machine is shared: the 1-minute load average before each run is recorded with it.
Threads: OMP_NUM_THREADS = MKL_NUM_THREADS = 1 (HiGHS runs its simplex on one; `gap` runs its
float64 exact laws on numpy and does not import torch), so that the loaded run does not
oversubscribe the cores.

Side by side: the K-path optimum alone (speclp.lp.engine.optimum) in a fresh process, timed
the same way (the ratio gap / LP is the target's "<= 2x that LP solve"). In this process: the
exact law of every structure-aware verifier by the
structure (verifiers.structure) and by the enumeration it replaces (verifiers.exact with
enumeration="enumerated"), where the ordered tuples number at most ENUMERATED_LIMIT, both
timed, and their emit arrays compared (max |difference|).

    nice -n 15 python benchmarks/gap_speed.py [--shapes 4,3,3 8,2,3 ...] [--no-loaded] [--resume]

Writes benchmarks/results/gap_speed/gap_speed.json (after every shape: partial results
survive an interrupt; a run replaces the records of its shapes, --resume keeps them),
gap_speed.md and gap_speed.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "gap_speed"
SHAPES = [(3, 2, 3), (2, 3, 3), (3, 3, 2), (4, 3, 3), (8, 2, 3), (2, 6, 3),
          (8, 3, 4), (4, 4, 4), (2, 8, 3), (16, 2, 4)]
TARGETS = {(3, 2, 3): 1.5, (2, 3, 3): 1.5, (3, 3, 2): 1.5, (4, 3, 3): 5.0, (8, 2, 3): 5.0,
           (2, 6, 3): 5.0, (8, 3, 4): 60.0, (4, 4, 4): 60.0, (2, 8, 3): 60.0, (16, 2, 4): 60.0}
ENUMERATED_LIMIT = 30_000  # ordered K-tuples up to which the enumerated path is timed too (the
# machine is shared: at 262,144 tuples it costs 10-25 s per verifier)
TIME_LIMIT = 600  # seconds per gap process
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# Peak RSS of the gap process itself, read by /usr/bin/time (its %M line on stderr): Linux
# reports a child's ru_maxrss as at least the RSS of the process it was forked (vforked) from,
# and this process grows past 250 MiB once side_by_side has imported torch, which made the
# earlier records' peak RSS that of the benchmark, not of gap.
PEAK_RSS = ["/usr/bin/time", "-f", "PEAK_RSS_KB %M"] if Path("/usr/bin/time").exists() else []


def peak_rss_mib(stderr_text: str, usage: os.struct_rusage) -> float | None:
    """MiB from /usr/bin/time's line; without /usr/bin/time, None (ru_maxrss is inflated)."""
    for line in reversed(stderr_text.splitlines()):
        if line.startswith("PEAK_RSS_KB "):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def run_gap(instance: Path, paths: int) -> dict:
    """One `speclp gap --json` process: wall seconds, peak RSS (MiB), its JSON."""
    env = {**os.environ, **THREADS, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*PEAK_RSS, sys.executable, "-m", "speclp", "gap", str(instance),
                                 "--paths", str(paths), "--json",
                                 "--time-limit", str(TIME_LIMIT)], stdout=out, stderr=err,
                                env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode()
        err.seek(0)
        error_text = err.read().decode()
        error = error_text[-500:]
    record = {"wall_seconds": round(wall, 3),
              "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
              "peak_rss_mib": peak_rss_mib(error_text, usage),
              "exit": os.waitstatus_to_exitcode(status), "load_before": round(load, 2)}
    try:
        result = json.loads(text)
    except ValueError:
        record["error"] = error or text[-500:]
        return record
    opt = result.get("optimum", {})
    record["optimum"] = {"value": opt.get("value"), "certified": opt.get("certified"),
                         "certified_within": opt.get("certified_within"),
                         "seconds": opt.get("seconds"), "certificate": opt.get("certificate"),
                         "master": opt.get("master")}
    record["verifiers"] = {name: {"evaluation": v["evaluation"], "seconds": v["seconds"],
                                  "block_efficiency": v["block_efficiency"]}
                           for name, v in result.get("verifiers", {}).items()}
    record["estimates"] = [n for n, v in result.get("verifiers", {}).items()
                           if v["evaluation"] == "estimate"]
    return record


LP_SCRIPT = ("import sys, time; t = time.perf_counter(); from speclp.lp.engine import optimum; "
             "from speclp.lp.instance import load_instance; "
             "r = optimum(load_instance(sys.argv[1]), int(sys.argv[2]), time_limit=600); "
             "print(r.value, r.certified, r.certified_within, time.perf_counter() - t)")


def run_lp(instance: Path, paths: int) -> dict:
    """The K-path optimum alone (speclp.lp.engine.optimum, certified as gap certifies it) in a
    fresh process: the LP solve gap is compared with, timed the same way."""
    env = {**os.environ, **THREADS, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([*PEAK_RSS, sys.executable, "-c", LP_SCRIPT, str(instance),
                                 str(paths)], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode().split()
        err.seek(0)
        error_text = err.read().decode()
    return {"wall_seconds": round(wall, 3), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mib": peak_rss_mib(error_text, usage),
            "exit": os.waitstatus_to_exitcode(status),
            "value": float(text[0]) if text else None}


# The K-path optimum's phases (issue 30 part 4: where do the seconds of the LP go?), timed in
# CPU seconds (time.process_time: the machine is shared, its wall clock is not this process's)
# by wrapping the functions that do each phase; run in a fresh process per code version.
PROFILE_SCRIPT = """
import json, sys, time
clock = time.process_time
t0 = clock()
from speclp.lp import certify, colgen, engine
from speclp.lp.instance import dirichlet_instance
imported = clock() - t0
spent = {}
def timed(module, name, phase):
    inner = getattr(module, name)
    def wrapper(*args, **kwargs):
        start = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[phase] = spent.get(phase, 0.0) + clock() - start
    setattr(module, name, wrapper)
timed(colgen, "master_lp", "build the master LP (float and exact)")
timed(colgen, "_column_loop", "HiGHS: float column generation")
timed(colgen, "solve", "HiGHS: exact master's float solve")
timed(certify, "solve_sparse_exact", "exact basis solves (primal and dual)")
timed(certify, "_evaluate", "exact feasibility, reduced costs, objectives")
timed(colgen, "certify_master", "certify_master (all of the exact certificate)")
timed(engine, "selection_mixture", "optimal selection mixture (exact)")
timed(engine, "node_optimum", "mixture check: BV with the mixture's law")
vocab, depth, paths = (int(v) for v in sys.argv[1:4])
start = clock()
record = engine.optimum(dirichlet_instance(vocab, depth, seed=1), paths, time_limit=600)
total = clock() - start
print(json.dumps({"import_cpu": round(imported, 3), "optimum_cpu": round(total, 3),
                  "phases_cpu": {k: round(v, 3) for k, v in spent.items()},
                  "value": record.value, "exact": str(record.exact_value),
                  "certified": record.certified,
                  "certified_within": record.details.get("certified_within")}))
"""


def profile_lp(shape: tuple[int, int, int], roots: dict[str, str], repeats: int) -> dict:
    """The optimum at `shape` (Dirichlet(1), seed 1) under every code version of `roots`
    (label -> a PYTHONPATH whose `speclp` is that version), alternated `repeats` times in
    fresh processes: CPU and wall seconds, and the CPU seconds of each phase."""
    runs: dict[str, list] = {label: [] for label in roots}
    for _ in range(repeats):
        for label, root in roots.items():
            env = {**os.environ, **THREADS, "PYTHONPATH": root}
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", PROFILE_SCRIPT, *map(str, shape)],
                                  capture_output=True, text=True, env=env, timeout=TIME_LIMIT)
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                runs[label].append({"error": proc.stderr[-500:]})
                continue
            runs[label].append({**json.loads(proc.stdout.strip().splitlines()[-1]),
                                "wall_seconds": round(wall, 3),
                                "load_before": round(os.getloadavg()[0], 2)})
    return {"shape": list(shape), "roots": roots, "runs": runs}


def profile_markdown(result: dict) -> str:
    """Side by side: each version's median CPU seconds per phase over its runs."""
    labels = list(result["runs"])
    phases: list[str] = []
    for runs in result["runs"].values():
        for run in runs:
            phases += [p for p in run.get("phases_cpu", {}) if p not in phases]

    def median(label: str, key: str) -> str:
        values = [r["phases_cpu"].get(key, 0.0) if key in phases else r.get(key)
                  for r in result["runs"][label] if "error" not in r]
        values = [v for v in values if v is not None]
        return f"{float(np.median(values)):.3f}" if values else ""

    lines = [f"| {tuple(result['shape'])}: CPU seconds (median of "
             f"{len(next(iter(result['runs'].values())))} fresh processes) | "
             + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for key in ["optimum_cpu", *phases, "import_cpu", "wall_seconds"]:
        lines.append(f"| {key} | " + " | ".join(median(label, key) for label in labels) + " |")
    exact = {label: {r["exact"] for r in result["runs"][label] if "error" not in r}
             for label in labels}
    lines.append("| certified (every run) | " + " | ".join(
        str(all(r.get("certified") for r in result["runs"][label])) for label in labels) + " |")
    lines.append("| exact optimum, the same in every run of every version | "
                 + " | ".join(str(len(set().union(*exact.values())) == 1) for _ in labels) + " |")
    return "\n".join(lines) + "\n"


def burners(count: int) -> list[subprocess.Popen]:
    """CPU-bound processes (a busy loop each) for the loaded runs."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def side_by_side(vocab: int, depth: int, paths: int) -> dict:
    """Structure vs enumeration of every structure-aware verifier's exact law (float64)."""
    from speclp.lp.instance import dirichlet_instance
    from speclp.verifiers.exact import exact_result
    from speclp.verifiers.registry import compared_verifiers, get_verifier
    from speclp.verifiers.structure import evaluation_kind
    from speclp.verifiers.tree import ordered_tuple_count

    if ordered_tuple_count(vocab, depth, paths) > ENUMERATED_LIMIT:
        return {"skipped": f"more than {ENUMERATED_LIMIT:,} ordered tuples"}
    model = dirichlet_instance(vocab, depth, seed=1).model(exact=False)
    out = {}
    for name in compared_verifiers():
        if evaluation_kind(get_verifier(name), paths) is None:
            continue
        t0 = time.perf_counter()
        fast = exact_result(model, name, paths)
        t1 = time.perf_counter()
        slow = exact_result(model, name, paths, enumeration="enumerated")
        t2 = time.perf_counter()
        out[name] = {"structure_seconds": round(t1 - t0, 4),
                     "enumerated_seconds": round(t2 - t1, 4),
                     "structure": fast.enumeration, "enumerated": slow.enumeration,
                     "configurations": slow.configurations,
                     "max_difference": float(np.abs(fast.emit - slow.emit).max())}
    return out


def figure(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = []
    for r in records:  # the notes go under the shape, horizontal (readable), not into bars
        quiet = r.get("quiet", {})
        marks = []
        if quiet.get("estimates"):
            marks.append("est.: " + ",\n".join(quiet["estimates"]))
        opt = quiet.get("optimum") or {}
        if opt.get("certified_within") is not None:
            marks.append("opt. within w")
        elif opt and not opt.get("certified"):
            marks.append("opt. NOT cert.")
        labels.append("\n".join([f"({r['shape'][0]},{r['shape'][1]},{r['shape'][2]})", *marks]))
    x = np.arange(len(records))
    fig, ax = plt.subplots(figsize=(max(6.5, 1.0 * len(records) + 2), 4.6))
    # points, not bars: a bar's length means nothing on a log axis
    for offset, mode, colour in ((-0.12, "quiet", "tab:blue"), (0.12, "loaded", "tab:orange")):
        values = [r.get(mode, {}).get("wall_seconds", np.nan) for r in records]
        cpu = [r.get(mode, {}).get("cpu_seconds", np.nan) for r in records]
        ax.plot(x + offset, values, "o", ms=7, color=colour, ls="",
                label=f"{mode}: wall (process start included)")
        ax.plot(x + offset, cpu, "o", ms=7, mfc="white", mew=1.5, color=colour, ls="",
                label=f"{mode}: CPU of the process")
    ax.scatter(x, [TARGETS.get(tuple(r["shape"]), np.nan) for r in records], marker="_", s=600,
               color="black", label="target", zorder=3)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlim(-0.5, len(records) - 0.5)
    ax.set_xlabel("(V, L, K)")
    ax.set_ylabel("seconds")
    loads = [r.get("quiet", {}).get("load_before", np.nan) for r in records]
    ax.set_title("speclp gap: every verifier exact and the optimum certified, unless the note "
                 "under the shape says otherwise\n"
                 "(Dirichlet(1), seed 1; 1 thread; loaded = 2 CPU-bound processes beside it;\n"
                 f"shared 2-core machine, 1-min load {np.nanmin(loads):.0f}-{np.nanmax(loads):.0f}"
                 " before the quiet runs)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _lp_cell(record: dict, quiet: dict) -> str:
    lp = record.get("lp")
    if not lp or not lp.get("wall_seconds") or "wall_seconds" not in quiet:
        return ""
    return f"{lp['wall_seconds']} ({quiet['wall_seconds'] / lp['wall_seconds']:.2f}x)"


def markdown(records: list[dict]) -> str:
    lines = ["| (V, L, K) | target s | quiet wall s (CPU s) | LP alone wall s (ratio) | "
             "loaded wall s (CPU s) | peak RSS MiB | "
             "optimum | estimated | structure vs enumerated (sum of s) | target met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        quiet, loaded = r.get("quiet", {}), r.get("loaded", {})
        opt = quiet.get("optimum") or {}
        cert = ("certified" if opt.get("certified") else
                f"within {opt['certified_within']:.2g}" if opt.get("certified_within") is not None
                else _crash(quiet) or "NOT certified")
        side = r.get("side_by_side", {})
        if "skipped" in side or not side:
            pair = side.get("skipped", "")
        else:
            pair = (f"{sum(v['structure_seconds'] for v in side.values()):.2f} vs "
                    f"{sum(v['enumerated_seconds'] for v in side.values()):.2f}")
        lines.append(f"| {tuple(r['shape'])} | {TARGETS.get(tuple(r['shape']), '')} | "
                     f"{quiet.get('wall_seconds', '')} ({quiet.get('cpu_seconds', '')}; load "
                     f"{quiet.get('load_before', '')}) | {_lp_cell(r, quiet)} | "
                     f"{loaded.get('wall_seconds', '')} "
                     f"({loaded.get('cpu_seconds', '')}; load {loaded.get('load_before', '')}) | "
                     f"{max(quiet.get('peak_rss_mib') or 0, loaded.get('peak_rss_mib') or 0)} | "
                     f"{cert} | {', '.join(quiet.get('estimates', [])) or 'none'} | {pair} | "
                     f"{_met(r)} |")
    older = [str(tuple(r["shape"])) for r in records if not r.get("commit")]
    if older:
        lines += ["", f"Rows {', '.join(older)} come from an earlier code version (before the "
                  "numpy float64 path and the structure laws of traversal / spectr_gbv; their "
                  "\"estimated\" column is from then) and were not re-measured; their peak RSS is "
                  "that of the benchmark process. The other rows name the commit they ran on "
                  "in gap_speed.json (\"commit\"); their peak RSS is that of `gap` itself "
                  "(/usr/bin/time)."]
    return "\n".join(lines) + "\n"


def _crash(run: dict) -> str:
    """"gap exited N" (with "killed: out of memory?" for signal 9) when the run failed, else ""."""
    code = run.get("exit")
    if code in (None, 0):
        return ""
    killed = code in (137, -9) or "signal 9" in str(run.get("error", ""))
    return f"gap exited {code}" + (" (killed by signal 9: out of memory?)" if killed else "")


def _met(record: dict) -> str:
    """Issue 30 part 4: every verifier exact, the optimum certified (exactly or within w <=
    1e-9), quiet wall <= target (process start included), the 5 s shapes also <= 2x the LP
    alone, loaded <= 2x quiet. "yes", or what missed."""
    quiet, loaded, lp = record.get("quiet", {}), record.get("loaded", {}), record.get("lp", {})
    target = TARGETS.get(tuple(record["shape"]))
    wall = quiet.get("wall_seconds")
    if target is None or wall is None:
        return ""
    missed = [_crash(quiet)] if _crash(quiet) else []
    if quiet.get("estimates"):
        missed.append("estimated: " + ", ".join(quiet["estimates"]))
    opt = quiet.get("optimum") or {}
    within = opt.get("certified_within")
    if not opt.get("certified") and (within is None or within > 1e-9) and not _crash(quiet):
        missed.append("optimum not certified")
    if wall > target:
        missed.append(f"wall {wall:.3f} s > {target} s")
    if target == 5.0 and lp.get("wall_seconds") and wall > 2 * lp["wall_seconds"]:
        missed.append(f"{wall / lp['wall_seconds']:.2f}x LP")
    if loaded.get("wall_seconds") and loaded["wall_seconds"] > 2 * wall:
        missed.append(f"loaded {loaded['wall_seconds'] / wall:.2f}x quiet")
    if not loaded.get("wall_seconds"):
        missed.append("loaded not measured")
    return "yes" if not missed else "no: " + ", ".join(missed)


def _commit() -> str | None:
    """The commit of the code measured (with "+changes" when the work tree differs), or None."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", ".",
                                ":!benchmarks/results"],  # not the records being written
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+changes" if dirty else "")) or None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=None, help="V,L,K triples")
    parser.add_argument("--no-loaded", action="store_true", help="quiet runs only")
    parser.add_argument("--no-side-by-side", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="keep the recorded shapes (default: rerun the shapes given)")
    parser.add_argument("--figure-only", action="store_true",
                        help="redraw gap_speed.png from gap_speed.json (no run)")
    parser.add_argument("--profile-lp", default=None, metavar="V,L,K",
                        help="time the optimum's phases at one shape (CPU s) instead")
    parser.add_argument("--baseline", default=None, metavar="PATH",
                        help="with --profile-lp: a PYTHONPATH whose speclp is the code to "
                             "compare with (e.g. a `git archive` of an earlier commit)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.profile_lp:
        shape = tuple(int(v) for v in args.profile_lp.split(","))
        roots = {"this code": os.environ.get("PYTHONPATH", str(ROOT.parent))}
        if args.baseline:
            roots = {"baseline": args.baseline, **roots}
        result = profile_lp(shape, roots, args.repeats)
        result["command"] = " ".join(["python", "benchmarks/gap_speed.py", *sys.argv[1:]])
        OUT.mkdir(parents=True, exist_ok=True)
        name = "lp_profile_" + "".join(map(str, shape))
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=1))
        (OUT / f"{name}.md").write_text(profile_markdown(result))
        print(profile_markdown(result))
        return
    if args.figure_only:
        figure(json.loads((OUT / "gap_speed.json").read_text())["records"], OUT / "gap_speed.png")
        return
    shapes = ([tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes
              else SHAPES)
    from speclp.lp.instance import dirichlet_instance

    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / "gap_speed.json"
    records = json.loads(target.read_text())["records"] if target.exists() else []
    if not args.resume:  # a new run replaces the records of the shapes it runs
        records = [r for r in records if tuple(r["shape"]) not in set(shapes)]
    done = {tuple(r["shape"]) for r in records}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            if shape in done:
                continue
            vocab, depth, paths = shape
            instance = dirichlet_instance(vocab, depth, seed=1).save(
                Path(tmp) / f"d{vocab}-{depth}.json")
            record = {"shape": list(shape), "quiet": run_gap(instance, paths),
                      "lp": run_lp(instance, paths)}
            print(shape, "quiet", record["quiet"].get("wall_seconds"), "lp",
                  record["lp"].get("wall_seconds"), flush=True)
            if not args.no_loaded:
                busy = burners(2)
                try:
                    time.sleep(1.0)
                    record["loaded"] = run_gap(instance, paths)
                finally:
                    for proc in busy:
                        proc.kill()
                        proc.wait()
                print(shape, "loaded", record["loaded"].get("wall_seconds"), flush=True)
            if not args.no_side_by_side:
                record["side_by_side"] = side_by_side(vocab, depth, paths)
            records.append(record)
            record["command"] = " ".join(["python", "benchmarks/gap_speed.py", *sys.argv[1:]])
            record["commit"] = _commit()
            record["date"] = time.strftime("%Y-%m-%d", time.gmtime())
            target.write_text(json.dumps({"cpu_count": os.cpu_count(), "threads": THREADS,
                                          "records": records}, indent=1))
    (OUT / "gap_speed.md").write_text(markdown(records))
    figure(records, OUT / "gap_speed.png")
    print(markdown(records))


if __name__ == "__main__":
    main()
