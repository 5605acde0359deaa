"""Every verifier's law on a device, on real-model draft trees, against the CPU (issue 33, part 5).

Reads the dumps of benchmarks/dump_trees.py (full float32 rows of real drafted trees; each
file's sha256 checked against the manifest; numeric arrays only, np.load(allow_pickle=False))
and, for every registered verifier, computes on --device in float64 and float32, and on the
CPU in float64 as the reference:

  values  E[tau + 1] at every (K', L') cell of each tree, through the entry point the bench
          scores with (decode.scoring.score_grid: the one-pass grid laws of verifiers/grid.py,
          the per-cell law for verifiers without one)
  law     the block law at (K, L) (registry.block_law, what the engine verifies with), as the
          joint law of (emitted block, correction token) aggregated by tree node, so that
          paths with a common prefix are one node whichever path a device picks
  mass    max |sum of the law - 1| (stop probabilities and the joint), its most negative
          entry, and the values inside [1, L' + 1]

and reports the max abs difference from the reference per verifier and dtype (on --device cpu:
the CPU's float32 only). Then it runs the
verifier-step benchmark (benchmarks/verifier_step.py, small settings) on the device. Writes
gpu_laws.json and gpu_laws.md under --out; exits 1 on a difference or mass error beyond the
tolerances below (a verifier that refuses the vocabulary, khisti, is reported as skipped).

Tolerances (absolute; E[tau + 1] lies in [1, 5], law entries in [0, 1]):
  float64 on the device vs the CPU: 1e-12 (the same arithmetic up to the order of sums:
          rounding ~ log2(V) 2^-53 per sum, orders below that).
  float32 on the device vs float64 on the CPU: max(TOL32, SLACK32 x the CPU's own float32
          deviation on the same law), TOL32 = 1e-4, SLACK32 = 4, on values, law entries and
          mass. The dumped rows are float32, so both dtypes start from the same numbers and the
          difference is float32 arithmetic alone: sums of V <= 151,936 terms round at about
          log2(V) 2^-24 ~ 1e-6 of their size, and some laws amplify that: on the CPU, float32
          is within 2.2e-6 of float64 for every law on the smollm2 tree, but nodeopt's values
          on the qwen2.5-coder T = 0.6 tree are off by 3.8e-4 at K' >= 2 (float64 on rows
          perturbed by 1e-7 moves them by 4.5e-7 only: float32 arithmetic inside nodeopt, not
          the rows; benchmarks/results/gpu/README.md). So the CPU's float32 law ("cpu float32",
          computed first, reported, never failed: it is no device's error) is the yardstick,
          and a device's float32 may be 4x further from float64 than the CPU's, or 1e-4.
A verifier registered as possibly undefined (spectr_gbv as released) may lose mass by design
and branches on whether a correction row is all zero, so float32 rounding can move its value by
a finite amount: its masses and float32 differences are reported, not failed (float64: held).
The law's mass is checked against what the dumped rows allow: float32 rows sum to 1 only up to
their own rounding (row_defect, recorded), and the joint law sums correction rows.

    python benchmarks/gpu_laws.py --device cuda --out $OUT                 # on a GPU machine
    taskset -c 0 python benchmarks/gpu_laws.py --device cpu --out /tmp/gl --no-step
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from speclp.decode.scoring import score_cells, score_grid
from speclp.verifiers.law import REGISTRY, DraftTree
from speclp.verifiers.multipath import KHISTI_MAX_COMPANIONS, canonical_paths, shared_prefix
from speclp.verifiers.registry import block_law

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _device import device_name, pick_device, synced_seconds  # noqa: E402
from dump_trees import sha256_file  # noqa: E402  (the digest its manifests are written with)

ROOT = Path(__file__).resolve().parents[1]
DUMPS = ROOT / "benchmarks" / "results" / "gpu" / "trees"
TOL64 = 1e-12
TOL32 = 1e-4
SLACK32 = 4.0
ARRAYS = {"tokens": "i", "target_nodes": "f", "target_index": "i", "draft_nodes": "f",
          "draft_index": "i"}
MAX_MANIFEST_BYTES = 1 << 20


class DumpError(ValueError):
    """A dump or its manifest is not what gpu_laws reads (the message names the field)."""


# ---------------------------------------------------------------------------------------
# loading the dumps


def _shown(path: Path) -> str:
    """PATH relative to the repository when inside it (records name no home folders)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    if not path.is_file():
        raise DumpError(f"{path}: no manifest (run benchmarks/dump_trees.py)")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise DumpError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise DumpError(f"{path}: not JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != 1:
        raise DumpError(f"{path}: format: expected 1")
    files = manifest.get("files")
    if not isinstance(files, list) or not files:
        raise DumpError(f"{path}: files: expected a non-empty list")
    for i, entry in enumerate(files):
        if not isinstance(entry, dict):
            raise DumpError(f"{path}: files[{i}]: expected an object")
        name = entry.get("file")
        if not isinstance(name, str) or not name.endswith(".npz") or "/" in name or "\\" in name \
                or name.startswith("."):
            raise DumpError(f"{path}: files[{i}].file: expected a plain NAME.npz, got {name!r}")
        if not isinstance(entry.get("sha256"), str):
            raise DumpError(f"{path}: files[{i}].sha256: expected a hex string")
    return manifest


def load_dump(folder: Path, entry: dict[str, Any], max_trees: int | None = None) -> dict[str, Any]:
    """{"tokens" [N, K, L] int64, "target" [N, K, L+1, V], "draft" [N, K, L, V] float32 CPU
    tensors} of one manifest entry, after checking its sha256 and every array's shape."""
    path = folder / entry["file"]
    where = f"{path}"
    if not path.is_file():
        raise DumpError(f"{where}: missing")
    digest = sha256_file(path)
    if digest != entry["sha256"]:
        raise DumpError(f"{where}: sha256: the file's is {digest}, the manifest says {entry['sha256']}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in ARRAYS if name in data.files}
    except (ValueError, OSError) as err:
        raise DumpError(f"{where}: not a numeric .npz ({err})") from None
    for name, kind in ARRAYS.items():
        if name not in arrays:
            raise DumpError(f"{where}: {name}: missing")
        if arrays[name].dtype.kind != kind:
            raise DumpError(f"{where}: {name}: expected dtype kind {kind!r}, got {arrays[name].dtype}")
    tokens = arrays["tokens"]
    if tokens.ndim != 3 or 0 in tokens.shape:
        raise DumpError(f"{where}: tokens: expected [N, K, L], got {list(tokens.shape)}")
    trees, paths, depth = tokens.shape
    target_nodes, draft_nodes = arrays["target_nodes"], arrays["draft_nodes"]
    for name, nodes in (("target_nodes", target_nodes), ("draft_nodes", draft_nodes)):
        if nodes.ndim != 2 or nodes.dtype != np.float32:
            raise DumpError(f"{where}: {name}: expected float32 [M, V], got {nodes.dtype} "
                            f"{list(nodes.shape)}")
        if not np.isfinite(nodes).all() or (nodes < 0).any():
            raise DumpError(f"{where}: {name}: rows must be finite and >= 0")
    vocab = target_nodes.shape[1]
    if draft_nodes.shape[1] != vocab:
        raise DumpError(f"{where}: draft_nodes: V = {draft_nodes.shape[1]}, target_nodes has {vocab}")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise DumpError(f"{where}: tokens: outside [0, {vocab})")
    for name, nodes, shape in (("target_index", target_nodes, (trees, paths, depth + 1)),
                               ("draft_index", draft_nodes, (trees, paths, depth))):
        index = arrays[name]
        if index.shape != shape:
            raise DumpError(f"{where}: {name}: expected shape {list(shape)}, got {list(index.shape)}")
        if index.min() < 0 or index.max() >= nodes.shape[0]:
            raise DumpError(f"{where}: {name}: outside [0, {nodes.shape[0]})")
    keep = slice(0, max_trees)
    target = target_nodes[arrays["target_index"][keep]]
    draft = draft_nodes[arrays["draft_index"][keep]]
    drafted = np.take_along_axis(draft, tokens[keep][..., None], -1)
    if (drafted <= 0).any():
        raise DumpError(f"{where}: draft_nodes: a drafted token has draft probability 0")
    return {"tokens": torch.from_numpy(tokens[keep].astype(np.int64)),
            "target": torch.from_numpy(np.ascontiguousarray(target)),
            "draft": torch.from_numpy(np.ascontiguousarray(draft))}


# ---------------------------------------------------------------------------------------
# one verifier's law on one device and dtype


def node_law(name: str, tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor]:
    """(stop [B, K, L+1], joint [B, K, L+1, V]) of the block law at (K, L), the joint summed
    onto the lowest path through each node (multipath.canonical_paths)."""
    law = block_law(name, tree)
    joint = law.joint()
    canon = canonical_paths(shared_prefix(tree.tokens))  # [B, K, L+1]
    index = canon[..., None].expand_as(joint)
    return law.stop, torch.zeros_like(joint).scatter_add_(1, index, joint)


def evaluate(name: str, dump: dict[str, Any], device: torch.device, dtype: torch.dtype
             ) -> dict[str, Any]:
    """Values at every cell, the node law and its masses, of one verifier on one device/dtype
    (all brought back to the CPU in float64)."""
    tokens = dump["tokens"].to(device)
    target, draft = dump["target"].to(device), dump["draft"].to(device)
    _, paths, depth = tokens.shape
    cells = score_cells(paths, depth)
    out: dict[str, Any] = {}

    def run() -> None:
        out["values"] = score_grid([name], tokens, target, draft, cells, dtype=dtype, to_cpu=False)
        out["stop"], out["joint"] = node_law(name, DraftTree(tokens, target.to(dtype),
                                                             draft.to(dtype)))

    seconds = synced_seconds(run, device)
    values = np.stack([out["values"][cell][name].double().cpu().numpy() for cell in cells], -1)
    stop = out["stop"].double().cpu().numpy()
    joint = out["joint"].double().cpu().numpy()
    upper = np.array([d + 1 for _, d in cells], dtype=float)
    return {"cells": cells, "values": values, "joint": joint, "seconds": seconds,
            "stop_mass": float(np.abs(stop.sum((1, 2)) - 1).max()),
            "joint_mass": float(np.abs(joint.sum((1, 2, 3)) - 1).max()),
            "most_negative": float(min(joint.min(), stop.min(), 0.0)),
            "outside_range": float(max(np.maximum(1 - values, values - upper).max(), 0.0)),
            "grid_vs_law": float(np.abs(values[:, -1] - 1 - (stop * np.arange(depth + 1)).sum((1, 2))
                                        ).max())}


def mass_error(got: dict[str, Any], row_defect: float) -> float:
    """How far the law is from a probability law, beyond what its input rows allow: the
    dumped float32 rows sum to 1 only up to ROW_DEFECT (max |sum_v row - 1|), and a block
    law's joint sums the correction rows (normalised residuals, or target rows as dumped)
    with the stop probabilities as weights, so its mass may be off by that much."""
    return max(got["stop_mass"], max(got["joint_mass"] - row_defect, 0.0), -got["most_negative"],
               got["outside_range"])


def compare(reference: dict[str, Any], got: dict[str, Any], tolerance: float,
            check_mass: bool, row_defect: float = 0.0) -> dict[str, Any]:
    """The differences of GOT from REFERENCE and its masses, with pass/fail at TOLERANCE
    (masses at TOLERANCE + ROW_DEFECT, see mass_error)."""
    value_diff = float(np.abs(got["values"] - reference["values"]).max())
    law_diff = float(np.abs(got["joint"] - reference["joint"]).max())
    mass = mass_error(got, row_defect)
    failures = []
    if not value_diff <= tolerance:
        failures.append(f"values differ by {value_diff:.3g}")
    if not law_diff <= tolerance:
        failures.append(f"law differs by {law_diff:.3g}")
    if check_mass and not mass <= tolerance:
        failures.append(f"mass off by {mass:.3g}")
    if not got["grid_vs_law"] <= tolerance:
        failures.append(f"grid value at (K, L) and the law's E[tau + 1] differ by "
                        f"{got['grid_vs_law']:.3g}")
    return {"value_diff": value_diff, "law_diff": law_diff, "mass_error": mass,
            "stop_mass": got["stop_mass"],
            "joint_mass": got["joint_mass"], "most_negative": got["most_negative"],
            "outside_range": got["outside_range"], "grid_vs_law": got["grid_vs_law"],
            "mass_checked": check_mass, "seconds": got["seconds"], "tolerance": tolerance,
            "ok": not failures, "failures": failures}


def row_defect(dump: dict[str, Any]) -> float:
    """max |sum_v row - 1| over the dumped target and draft rows (float64 sums)."""
    return max(float((dump[k].double().sum(-1) - 1).abs().max()) for k in ("target", "draft"))


def float32_tolerance(yardstick: dict[str, Any]) -> float:
    """The tolerance of a device's float32 law: TOL32, or SLACK32 times the CPU's own float32
    deviation from float64 on the same law (values or law entries) where that is larger."""
    if "value_diff" not in yardstick:  # the CPU's float32 law failed to run: TOL32 alone
        return TOL32
    return max(TOL32, SLACK32 * max(yardstick["value_diff"], yardstick["law_diff"]))


def check_verifier(name: str, dump: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The reference (CPU float64) and every compared configuration of one verifier."""
    spec = REGISTRY[name]
    check_mass = not spec.may_be_undefined
    cpu = torch.device("cpu")
    _, paths, _ = dump["tokens"].shape
    vocab = dump["target"].shape[-1]
    if name == "khisti" and vocab ** (paths - 1) > KHISTI_MAX_COMPANIONS:
        # its law refuses this size, but only after enumerating V^(n-1) companions for the
        # smaller n (minutes at V = 49,152): refused here at once, with the law's reason
        return {"verifier": name, "skipped": f"khisti: V^(K-1) = {vocab}^{paths - 1} companion "
                                             f"tuples per node exceed {KHISTI_MAX_COMPANIONS}"}
    try:
        reference = evaluate(name, dump, cpu, torch.float64)
    except ValueError as err:  # a law for small vocabularies only (khisti)
        return {"verifier": name, "skipped": str(err).splitlines()[0]}
    configs = [("cpu float32", cpu, torch.float32, TOL32)]  # the yardstick: first
    if device.type != "cpu":
        configs += [(f"{device.type} float64", device, torch.float64, TOL64),
                    (f"{device.type} float32", device, torch.float32, None)]
    defect = dump.setdefault("row_defect", row_defect(dump))
    row: dict[str, Any] = {"verifier": name, "lossless": spec.lossless,
                           "reference": {"seconds": reference["seconds"],
                                         "mass_error": mass_error(reference, defect),
                                         "stop_mass": reference["stop_mass"],
                                         "joint_mass": reference["joint_mass"],
                                         "grid_vs_law": reference["grid_vs_law"],
                                         "values": {f"{k},{d}": [float(v) for v in
                                                                 reference["values"][:, j]]
                                                    for j, (k, d) in enumerate(reference["cells"])}},
                           "configs": {}}
    ref_ok = (not check_mass or mass_error(reference, defect) <= TOL64) \
        and reference["grid_vs_law"] <= TOL64
    row["reference"]["ok"] = ref_ok
    for label, where, dtype, tolerance in configs:
        if tolerance is None:  # a device's float32: held to the CPU's float32 (float32_tolerance)
            tolerance = float32_tolerance(row["configs"]["cpu float32"])
        try:
            got = evaluate(name, dump, where, dtype)
        except Exception as err:  # noqa: BLE001 - a failure on a device is a result to report
            row["configs"][label] = {"ok": False, "failures": [f"{type(err).__name__}: {err}"]}
            continue
        row["configs"][label] = compare(reference, got, tolerance, check_mass, defect)
        if dtype == torch.float32 and spec.may_be_undefined:
            # such a rule branches on whether a correction row is all zero, so float32
            # rounding can flip a branch and move the value by a finite amount (spectr_gbv on
            # smollm2 rows: 0.03): reported, not failed; float64 is held to TOL64
            row["configs"][label]["held"] = False
        if label == "cpu float32":
            # the yardstick: what float32 arithmetic does to this law on the CPU; reported
            # (within TOL32 or not), never failed: it is no device's error
            row["configs"][label]["held"] = False
    row["ok"] = ref_ok and all(c["ok"] or not c.get("held", True) for c in row["configs"].values())
    return row


# ---------------------------------------------------------------------------------------
# the verifier-step benchmark


def step_benchmark(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """benchmarks/verifier_step.py's run() at the --step-* settings (no figure)."""
    import verifier_step  # lazy: benchmarks/ is on sys.path; only when the step bench runs

    names = tuple(dict.fromkeys(["bv", *args.step_verifiers.split(",")]))
    unknown = [n for n in names if n not in verifier_step.VERIFIERS]
    if unknown:
        raise SystemExit(f"--step-verifiers: unknown {unknown}; known: {verifier_step.VERIFIERS}")
    step_args = argparse.Namespace(
        vocab=args.step_vocab, paths=args.step_paths, depths=args.step_depths, threads="1",
        dtypes=args.step_dtypes, rounds=args.step_rounds, device=str(device),
        peak_gbs=args.peak_gbs, seed=0, verifiers=names, breakdown=False)
    result = verifier_step.run(step_args)
    result["target_lines"] = verifier_step.target_lines(result)
    return result


# ---------------------------------------------------------------------------------------
# report


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Verifier laws on {result['device']} ({result['device_name']}) vs the CPU in float64",
             "", f"torch {result['torch']}, recorded {result['recorded_at']}; dumps "
             f"{result['dumps']} (commit {result['dump_commit']}); "
             f"tolerances: float64 {TOL64:g}, a device's float32 max({TOL32:g}, {SLACK32:g} x "
             "the CPU's float32 deviation; the cpu float32 rows are that yardstick, not held). "
             f"**{'PASS' if result['ok'] else 'FAIL'}** ({result['seconds']:.0f} s)", ""]
    for dump in result["files"]:
        lines += [f"## {dump['file']}: {dump['label']}, T = {dump['temperature']}, "
                  f"{dump['trees']} trees, K = {dump['paths']}, L = {dump['depth']}, V = {dump['vocab']}",
                  "", "| verifier | config | max abs diff values | max abs diff law | "
                  "max mass error | grid vs law | s | ok |", "|---|---|---|---|---|---|---|---|"]
        for row in dump["verifiers"]:
            if "skipped" in row:
                lines.append(f"| {row['verifier']} | skipped: {row['skipped']} | | | | | | |")
                continue
            ref = row["reference"]
            lines.append(f"| {row['verifier']} | cpu float64 (reference) | 0 | 0 | "
                         f"{ref['mass_error']:.1e} | "
                         f"{ref['grid_vs_law']:.1e} | {ref['seconds']:.2f} | "
                         f"{'yes' if ref['ok'] else 'NO'} |")
            for label, c in row["configs"].items():
                if "value_diff" not in c:
                    lines.append(f"| {row['verifier']} | {label} | {'; '.join(c['failures'])} "
                                 "| | | | | NO |")
                    continue
                lines.append(f"| {row['verifier']} | {label} | {c['value_diff']:.1e} | "
                             f"{c['law_diff']:.1e} | {c['mass_error']:.1e}"
                             f"{'' if c['mass_checked'] else ' (not checked)'} | "
                             f"{c['grid_vs_law']:.1e} | {c['seconds']:.2f} | "
                             f"{'yes' if c['ok'] else 'NO' if c.get('held', True) else 'no (not held)'} |")
        lines.append("")
    if "verifier_step_error" in result:
        lines += ["## Verifier step benchmark", "", f"FAILED: {result['verifier_step_error']}"]
    step = result.get("verifier_step")
    if step:
        lines += [f"## Verifier step on {step['device_name']} (block_law + sample_block, V = "
                  f"{step['vocab']}, median ms over {step['rounds']} rounds)", "",
                  "| dtype | K | L | " + " | ".join(step["configs"][0]["verifiers"]) + " |",
                  "|---|---|---|" + "---|" * len(step["configs"][0]["verifiers"])]
        for c in step["configs"]:
            lines.append(f"| {c['dtype']} | {c['paths']} | {c['depth']} | "
                         + " | ".join(f"{v['median_ms']:.2f}" for v in c["verifiers"].values()) + " |")
        lines += ["", *step.get("target_lines", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", default=str(DUMPS), help="folder of manifest.json and the .npz")
    parser.add_argument("--device", default=None, help="cuda (default where present) or cpu")
    parser.add_argument("--out", required=True, help="folder of gpu_laws.json and gpu_laws.md")
    parser.add_argument("--verifiers", default=None, help="comma list (default: every registered)")
    parser.add_argument("--files", default=None, help="comma list of dump files (default: all)")
    parser.add_argument("--max-trees", type=int, default=None, help="first N trees of each file")
    parser.add_argument("--no-step", dest="step", action="store_false",
                        help="skip the verifier-step benchmark")
    parser.add_argument("--step-vocab", type=int, default=151_936)
    parser.add_argument("--step-paths", default="2,3,4")
    parser.add_argument("--step-depths", default="4,8")
    parser.add_argument("--step-dtypes", default="float32,bfloat16")
    parser.add_argument("--step-rounds", type=int, default=5)
    parser.add_argument("--step-verifiers", default="bv,gbv,nodeopt,specinfer,bv_extended_rrs")
    parser.add_argument("--peak-gbs", type=float, default=None,
                        help="the device's peak memory bandwidth (GB/s), recorded beside")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    device = pick_device(args.device)
    names = args.verifiers.split(",") if args.verifiers else list(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        parser.error(f"--verifiers: unknown {unknown}; known: {', '.join(REGISTRY)}")
    if args.max_trees is not None and args.max_trees < 1:
        parser.error("--max-trees: need >= 1")
    folder = Path(args.dumps)
    try:
        manifest = read_manifest(folder)
        entries = manifest["files"]
        if args.files:
            wanted = args.files.split(",")
            missing = [w for w in wanted if w not in {e["file"] for e in entries}]
            if missing:
                raise DumpError(f"--files: not in the manifest: {missing}")
            entries = [e for e in entries if e["file"] in wanted]
        dumps = [(entry, load_dump(folder, entry, args.max_trees)) for entry in entries]
    except DumpError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "benchmark": "verifier laws on a device vs the CPU (float64 reference), real-model trees",
        "device": str(device), "device_name": device_name(device), "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(), "dumps": _shown(folder),
        "dump_commit": manifest.get("commit"),
        "tolerances": {"float64": TOL64, "float32": TOL32, "float32_slack": SLACK32,
                       "why": "see the module docstring of benchmarks/gpu_laws.py"},
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": []}
    ok = True
    for entry, dump in dumps:
        trees, paths, depth = dump["tokens"].shape
        record = {k: entry.get(k) for k in ("file", "label", "pair", "temperature",
                                             "draft_temperature", "sha256")}
        record.update(trees=trees, paths=paths, depth=depth, vocab=int(dump["target"].shape[-1]),
                      verifiers=[])
        for name in names:
            row = check_verifier(name, dump, device)
            record["verifiers"].append(row)
            ok &= row.get("ok", True)
            if "skipped" in row:
                status = f"skipped ({row['skipped']})"
            else:
                bad = [f"{label}: {', '.join(c['failures'])}"
                       + ("" if c.get("held", True) else " (not held)")
                       for label, c in row["configs"].items() if not c["ok"]]
                if not row["reference"]["ok"]:
                    bad.insert(0, f"cpu float64 reference: mass off by {row['reference']['mass_error']:.3g}"
                                  f" or grid vs law {row['reference']['grid_vs_law']:.3g}")
                status = ("ok" if row["ok"] else "FAILED") + (": " + "; ".join(bad) if bad else "")
            worst = {label: f"{c.get('value_diff', float('nan')):.1e}/{c.get('law_diff', float('nan')):.1e}"
                     for label, c in row.get("configs", {}).items()}
            print(f"{entry['file']} {name:16s} {status} {worst}", flush=True)
        record["row_defect"] = dump.get("row_defect")
        result["files"].append(record)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        result["ok"] = bool(ok)
        result["seconds"] = time.perf_counter() - start
        (out / "gpu_laws.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "gpu_laws.md").write_text(markdown(result))

    save()  # the laws' record stands even if the step benchmark below fails
    if args.step:
        try:
            result["verifier_step"] = step_benchmark(args, device)
        except Exception as err:  # noqa: BLE001 - recorded, and the run fails
            result["verifier_step_error"] = f"{type(err).__name__}: {err}"
            print(f"verifier step benchmark failed: {result['verifier_step_error']}", flush=True)
            ok = False
        save()
    print(f"{'PASS' if ok else 'FAIL'}: saved {out / 'gpu_laws.json'} and gpu_laws.md "
          f"({result['seconds']:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
