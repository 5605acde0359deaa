"""`speclp sweep` (resumable optimality-gap grids) and `speclp plot` (their figures)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from ..experiments.plots import (
    NotBenchRecords,
    NotSweepResults,
    is_bench_results,
    plot_bench,
    plot_realgap,
    plot_results,
    plot_trees,
    record_kind,
    trees_title,
)
from ..experiments.store import RESULTS_ROOT, ResultsFolderError, default_out, load_jsonl
from ..experiments.sweep import (
    DEFAULT_ALPHA,
    FORMATS,
    PlotResult,
    ResultStore,
    SweepSpec,
    SweepStatus,
    check_cluster,
)
from ..lp.engine import BACKENDS, DEFAULT_TIME_LIMIT
from . import options as option
from . import validate as check
from .common import BadInput, ClaimFailed, new_commands, progress, refuse_given, run, stderr, table
from .gap import parse_verifiers

commands = new_commands()
DEFAULTS = {f.name: f.default for f in dataclasses.fields(SweepSpec)}  # the flags' defaults
TASK_TIME_LIMIT_HELP = ("Seconds for each task's optimum; a task past it is an error (said on stderr), "
                        "left unfinished for a rerun.")


def _listed(name: str) -> str:
    """A list field's default as its comma-separated flag value."""
    return ",".join(str(v) for v in DEFAULTS[name])


@commands.command()
def sweep(
    ctx: typer.Context,
    vocab: str = typer.Option(_listed("vocab"), "--vocab", help="Vocabulary sizes V, comma-separated."),
    depth: str = typer.Option(_listed("depth"), "--depth", help="Depths L."),
    paths: str = option.paths(_listed("paths"), "Numbers K of draft paths."),
    alpha: str = typer.Option(None, "--alpha",
                              help="Dirichlet concentrations (family dirichlet; default 1 when "
                                   "no --temperature)."),
    temperature: str = typer.Option(None, "--temperature",
                                    help="Draft temperatures (family temperature)."),
    trials: int = option.trials(DEFAULTS["trials"], "Instances per grid cell."),
    seed: int = option.seed(DEFAULTS["seed"], "First seed (seeds seed..seed+trials-1)."),
    draft_sampling: str = option.draft_sampling(),
    backend: str = option.backend(BACKENDS, DEFAULTS["backend"]),
    no_certify: bool = typer.Option(False, "--no-certify",
                                    help="Skip exact certificates (optima labelled so)."),
    method: str = option.method("Optimum engine: auto (closed form at L = 1, else colgen), "
                                "colgen or full (the enumerated LP)."),
    max_variables: int = typer.Option(DEFAULTS["max_variables"], "--max-variables",
                                      help="Size guard of --method full: full LP variables per "
                                           "cell."),
    max_enumerated: int = option.max_enumerated(DEFAULTS["max_enumerated"],
        "Configurations one verifier's exact law may enumerate; above it the block efficiency is "
        "ESTIMATED from --samples sampled configurations (rows say estimate, with a 95% CI)."),
    samples: int = option.samples(DEFAULTS["samples"]),
    verifiers: str = typer.Option(None, "--verifiers",
                                  help="Verifiers, comma-separated (default: gap's default, every "
                                       "registered lossless verifier and the ones not claimed "
                                       "lossless; an unknown name: exit 2)."),
    skip_large: bool = typer.Option(False, "--skip-large",
                                    help="Leave out cells over the size guard (else exit 2)."),
    out: str = typer.Option(None, "--out",
                            help="Results folder (resumable; default ./speclp-results/sweep)."),
    new_out: bool = option.new_out("sweep"),
    fmt: str = typer.Option("parquet", "--format", help="parquet or csv."),
    workers: int = typer.Option(1, "--workers", help="Worker processes."),
    time_limit: float = option.time_limit(DEFAULT_TIME_LIMIT, TASK_TIME_LIMIT_HELP),
    cluster: str = typer.Option(None, "--cluster",
                                help="Dask scheduler address, or 'local' for a LocalCluster."),
    as_json: bool = option.json(),
) -> None:
    """Optimality gaps over a grid of random instances, one row per (instance, verifier).

    Resumable: rerun the same command after an interrupt; finished instances are kept.
    Exit 1 when any verifier exceeded an optimum or was lossy (rows are saved first).
    """

    def body() -> dict[str, Any]:
        refuse_unused(ctx, method, cluster)
        spec, out_path = sweep_spec(
            vocab=vocab, depth=depth, paths=paths, alpha=alpha, temperature=temperature,
            trials=trials, seed=seed, draft_sampling=draft_sampling, backend=backend,
            no_certify=no_certify, method=method, max_variables=max_variables,
            max_enumerated=max_enumerated, samples=samples, verifiers=verifiers, out=out, fmt=fmt,
            workers=workers)
        address = check_cluster(cluster)  # BadArgument("cluster") -> --cluster
        return run_sweep_command(spec, out_path, out, fmt, workers, address, skip_large, new_out,
                                 time_limit)

    run(body, as_json, render_sweep)


def _plot_records(path: Path, target: Path) -> dict[str, Any]:
    """`speclp plot` on JSONL records: each file drawn by the figure of the command that wrote it
    (bench, realgap, trees). Records that are not readable are bad input (exit 2); an error
    while drawing readable records is an internal error (exit 3), never bad input."""
    files = [path] if path.is_file() else sorted(path.glob("*.jsonl"))
    by_kind: dict[str | None, list[Path]] = {}
    for f in files:
        by_kind.setdefault(record_kind(load_jsonl(f)), []).append(f)
    skipped = {f.name: "not bench, realgap or trees records (drawn by the script that wrote them)"
               for f in by_kind.pop(None, [])}
    unknown = not by_kind
    if unknown:  # nothing recognised: the bench reader says what is missing
        by_kind["bench"], skipped = files, {}
    target.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    if "bench" in by_kind:
        try:  # only the reading of the records is bad input; a drawing error is internal
            drawn = plot_bench(_records(by_kind["bench"]), target / "bench")
        except NotBenchRecords as err:
            what = "no bench, realgap or trees records" if unknown else "not readable bench records"
            raise BadInput(f"RESULTS: {path}: {what} ({err})") from None
        figures["bench"] = {"files": [str(f) for f in drawn],
                            "note": "E[tau+1] per verifier on the same trees against K, paired "
                                    "differences to bv, 95% CI"}
    if "realgap" in by_kind:
        drawn = plot_realgap(_records(by_kind["realgap"]), target)
        figures["realgap"] = {"files": [str(f) for f in drawn],
                              "note": "certified bracket of the optimum and every verifier's "
                                      "E[tau+1] per context"}
    for f in by_kind.get("trees", []):
        records = load_jsonl(f)
        figures[f"trees {f.stem}"] = {
            "files": plot_trees(records, target / f.stem, title=trees_title(records)),
            "note": "tokens per round per tree-selection rule and budget; modelled walltime"}
    return {"out": str(target), "kind": "+".join(sorted(by_kind)), "figures": figures,
            "skipped": skipped}


def _records(files: list[Path]) -> list[dict[str, Any]]:
    return [r for f in files for r in load_jsonl(f)]


@commands.command()
def plot(
    results: str = typer.Argument(..., help="Sweep directory / results file, or bench results."),
    out: str = typer.Option(None, "--out",
                            help="Figure folder (default ./speclp-results/NAME_figures)."),
    as_json: bool = option.json(),
) -> None:
    """Optimality-gap figures (PNG and PDF) from a sweep, or benchmark figures."""

    def body() -> dict[str, Any]:
        path = check.input_path("RESULTS", results, allow_dir=True)
        default = RESULTS_ROOT / f"{path.resolve().name}_figures"
        target = check.output_dir("--out", default if out is None else out)
        if is_bench_results(path):
            return PlotResult.of(_plot_records(path, target)).to_json()
        try:  # only the reading of RESULTS is bad input; a drawing error is internal (exit 3)
            drawn = plot_results(path, target)
        except (FileNotFoundError, NotSweepResults) as err:
            raise BadInput(f"RESULTS: {err}") from None
        return PlotResult.of(drawn).to_json()

    def render(r: dict[str, Any]) -> None:
        for name, reason in r.get("skipped", {}).items():
            stderr.print(f"skipped {name}: {reason}", markup=False, highlight=False, soft_wrap=True)
        table(f"figures in {r['out']}", ["figure", "files", "note"],
              [[name, ", ".join(f["files"]), f.get("note", "")]
               for name, f in r["figures"].items()])

    run(body, as_json, render)


def refuse_unused(ctx: typer.Context, method: str, cluster: str | None) -> None:
    """Refuse (exit 2) a flag the chosen mode does not use: --max-variables (the size guard of
    --method full) and --workers with a scheduler address (it brings its own workers)."""
    if method != "full":
        refuse_given(ctx, ("max_variables",), "the size guard of --method full; without "
                     "--method full it is not used, drop it")
    if cluster not in (None, "local"):
        refuse_given(ctx, ("workers",), "a scheduler address brings its own workers; "
                     "--workers applies without --cluster or with --cluster local")


def sweep_spec(*, vocab: str, depth: str, paths: str, alpha: str | None, temperature: str | None,
               trials: int, seed: int, draft_sampling: str, backend: str, no_certify: bool,
               method: str, max_variables: int, max_enumerated: int, samples: int,
               verifiers: str | None, out: str | None, fmt: str, workers: int
               ) -> tuple[SweepSpec, Path]:
    """Flags -> (SweepSpec, results folder), exit 2 before any work: the flags that are not
    spec fields (--format, --workers, --out) are checked here, the comma lists parsed; every
    rule on a spec field is SweepSpec's (BadArgument, its field mapped to the flag)."""
    check.choice("--format", fmt, FORMATS)
    check.integer("--workers", workers, 1, check.MAX_WORKERS)
    alphas = check.float_list("--alpha", alpha) if alpha is not None else []
    temperatures = check.float_list("--temperature", temperature) if temperature is not None else []
    if alpha is None and temperature is None:
        alphas = list(DEFAULT_ALPHA)
    spec = SweepSpec(vocab=check.int_list("--vocab", vocab), depth=check.int_list("--depth", depth),
                     paths=check.int_list("--paths", paths), alpha=alphas, temperature=temperatures,
                     trials=trials, seed=seed, draft_sampling=draft_sampling, backend=backend,
                     certify=not no_certify, method=method, max_variables=max_variables,
                     max_enumerated=max_enumerated, samples=samples,
                     verifiers=parse_verifiers("--verifiers", verifiers))
    out_path = check.output_dir("--out", default_out("sweep") if out is None else out)
    return spec, out_path


def run_sweep_command(spec: SweepSpec, out_path: Path, out: str | None, fmt: str, workers: int,
                      address: str | None, skip_large: bool, new_out: bool,
                      time_limit: float = DEFAULT_TIME_LIMIT) -> dict[str, Any]:
    """Run (or resume) the sweep into out_path (SweepSpec.run: a SweepResult) as the command's
    JSON; ClaimFailed (exit 1) on a claim violation; an interrupt keeps the finished instances
    (exit 130). A task that ends in an error says so on stderr when it happens."""
    try:
        result = spec.run(
            out_path, fmt=fmt, workers=workers, cluster=address,
            skip_large=skip_large, new_folder=new_out, time_limit=time_limit,
            progress=lambda it, total: progress(it, total, f"sweep -> {out_path}"),
            on_result=_say_error)
    except ResultsFolderError as err:
        raise BadInput(f"--out: {err}") from None
    except KeyboardInterrupt:
        done = len(ResultStore(out_path, fmt).done())
        stderr.print(f"interrupted: {done} finished instances are saved in {out_path}; rerun "
                     "the same command to resume", markup=False)
        raise typer.Exit(130) from None
    if result.status is SweepStatus.VIOLATED:
        raise ClaimFailed(f"{len(result.violations)} claim violations, first: "
                          f"{result.violations[0]} (rows saved in {out})", result.to_json())
    return result.to_json()


def _say_error(result: dict[str, Any]) -> None:
    """One stderr line for a task that ended in an error (it stays unfinished)."""
    if "error" in result:
        stderr.print(f"task {result['instance_id']} not finished: {result['error']}", markup=False,
                     highlight=False, soft_wrap=True)


def render_sweep(r: dict[str, Any]) -> None:
    """The summary table of `speclp sweep`."""
    s = r["summary"]
    rows = [["tasks (instance, K)", r["tasks"]], ["finished before this run", r["done_before"]],
            ["computed now", r["computed"]], ["errors", len(r["errors"])],
            ["rows", r["rows"]], ["optimum certified exactly", f"{s['optimum_certified']}/"
                                                               f"{s['instances']}"],
            ["optimum certified within w (exact bounds)",
             f"{s.get('optimum_certified_within', 0)}/{s['instances']}" + (
                 f" (largest w {s['optimum_certified_within_max']:.3g})"
                 if s.get("optimum_certified_within_max") is not None else "")],
            ["complete", r["complete"]], ["results", r["results_file"] or r["out"]]]
    lossy = set(s.get("lossy_verifiers", []))
    if s.get("mean_gap_per_verifier"):
        rows.append([f"mean gap to optimum (|gap| < {s.get('gap_zero_tolerance', 0):.0e} "
                     "written 0)", "lossless verifiers by mean gap, then the LOSSY ones"])
    for name, mean in s.get("mean_gap_per_verifier", {}).items():
        per_k = s.get("mean_gap_per_verifier_per_K", {}).get(name, {})
        label = (f"LOSSY {name} (optimum is no bound)" if name in lossy
                 else f"{name} mean gap to optimum")
        rows.append([label, f"{mean:.6g}" + (
            "  (" + ", ".join(f"K={k}: {v:.4g}" for k, v in per_k.items()) + ")"
            if per_k else "")])
    if "gbv_below_bv" in s:
        b = s["gbv_below_bv"]
        rows.append(["GBV < BV (tol 1e-12, exact rows)",
                     f"{b['count']}/{b['of']} ({b['fraction']:.3f})"])
    if s.get("estimated_rows"):
        rows.append(["ESTIMATED rows (sampled configurations, 95% CI)",
                     f"{s['estimated_rows']} in cells {', '.join(s['estimated_cells'])}"])
    for cell in r["skipped_cells"]:
        rows.append([f"skipped V={cell['vocab']} L={cell['depth']} K={cell['paths']}",
                     cell["reason"]])
    for err in r["errors"][:5]:
        rows.append([f"error {err['instance_id']}", err["error"]])
    table(f"sweep {r['out']}", ["quantity", "value"], rows)
