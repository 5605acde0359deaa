"""benchmarks/dump_trees.py and benchmarks/gpu_laws.py (issue 33, part 5) on a tiny dump.

The dump is made here from two tiny random models (one drafted tree, K = 2, L = 2, V = 40);
the committed real-model dumps are not read (they are large). Checks: the dumped rows are the
models' rows (plain forwards, a second implementation); gpu_laws on the CPU reports the
reference values that a closed form gives (token-level E[tau + 1] along path 0; GBV at
K' = 1, L' = 1 is BV is token-level); a difference beyond the tolerance, a changed file and a
pickled array are refused.
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from speclp.decode.models import wrap_model  # noqa: E402
from speclp.decode.sampling import probability_rows  # noqa: E402
from tiny_models import tiny_llama_pair  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VOCAB, PATHS, DEPTH = 40, 2, 2
PROMPTS = [[3, 9, 4, 1], [5, 2, 7]]
DRAFT_T = 1.3


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


dump_trees = _load("dump_trees")
gpu_laws = _load("gpu_laws")


@pytest.fixture(scope="module")
def tiny_dump(tmp_path_factory):
    """(folder, arrays, models) of a one-tree dump of the tiny pair."""
    target, draft = (wrap_model(m, f"tiny-{i}") for i, m in enumerate(tiny_llama_pair(VOCAB, seed=3)))
    arrays = dump_trees.collect_trees(target, draft, PROMPTS, PATHS, DEPTH, 1.0, DRAFT_T, count=1,
                                      seed=0, max_steps=3)
    folder = tmp_path_factory.mktemp("dump")
    entry = dump_trees.write_dump(folder, "tiny", arrays, {"label": "tiny pair", "temperature": 1.0})
    dump_trees.write_manifest(folder, [entry], {"commit": "test"})
    return folder, arrays, (target, draft)


def plain_rows(model, sequence, temperature):
    with torch.no_grad():
        logits = model.model(torch.tensor([sequence])).logits[0]
    return probability_rows(logits, temperature, dtype=torch.float64).numpy()


def test_dumped_rows_are_the_models_rows(tiny_dump):
    folder, arrays, (target, draft) = tiny_dump
    manifest = gpu_laws.read_manifest(folder)
    dump = gpu_laws.load_dump(folder, manifest["files"][0])
    assert dump["tokens"].shape == (1, PATHS, DEPTH) and dump["target"].shape == (1, PATHS, DEPTH + 1, VOCAB)
    assert dump["target"].dtype == torch.float32 and dump["draft"].shape == (1, PATHS, DEPTH, VOCAB)
    context = list(arrays["context"][: arrays["context_end"][0]])
    prompt = PROMPTS[int(arrays["prompt"][0])]
    assert context[: len(prompt)] == prompt and (len(context) > len(prompt)) == (int(arrays["step"][0]) > 0)
    worst = 0.0
    for k in range(PATHS):
        path = dump["tokens"][0, k].tolist()
        p = plain_rows(target, context + path, 1.0)[len(context) - 1:]  # [L+1, V]
        q = plain_rows(draft, context + path[:-1], DRAFT_T)[len(context) - 1:]  # [L, V]
        worst = max(worst, np.abs(dump["target"][0, k].numpy() - p).max(),
                    np.abs(dump["draft"][0, k].numpy() - q).max())
    assert worst < 1e-5  # float32 engine rows against plain float64-softmax forwards
    # distinct rows are stored once and rebuilt bit for bit
    rows = np.random.default_rng(0).random((3, 2, 5)).astype(np.float32)
    rows[1, 1] = rows[0, 0]
    nodes, index = dump_trees.distinct_rows(rows)
    assert nodes.shape == (5, 5) and np.array_equal(nodes[index], rows)


def token_closed_form(tokens, target, draft):
    """E[tau + 1] of token-level speculative sampling on path 0 cut to each depth l:
    1 + sum_{l' <= l} prod_{i < l'} min(1, p_i(x_i) / q_i(x_i)), in float64."""
    x = tokens[0, 0]
    p = target[0, 0, np.arange(DEPTH), x].astype(np.float64)
    q = draft[0, 0, np.arange(DEPTH), x].astype(np.float64)
    reach = np.cumprod(np.minimum(1.0, p / q))
    return 1 + np.cumsum(reach)  # [L]: cut to depth 1..L


def test_cpu_run_reports_the_closed_form_and_passes(tiny_dump, tmp_path):
    folder, _, _ = tiny_dump
    code = gpu_laws.main(["--dumps", str(folder), "--device", "cpu", "--out", str(tmp_path),
                          "--verifiers", "token,gbv", "--step-vocab", "64", "--step-paths", "2",
                          "--step-depths", "2", "--step-dtypes", "float32", "--step-rounds", "1",
                          "--step-verifiers", "gbv"])
    assert code == 0
    result = json.loads((tmp_path / "gpu_laws.json").read_text())
    assert result["ok"] and (tmp_path / "gpu_laws.md").read_text().count("| token |") == 2
    dump = gpu_laws.load_dump(folder, gpu_laws.read_manifest(folder)["files"][0])
    expected = token_closed_form(dump["tokens"].numpy(), dump["target"].numpy(), dump["draft"].numpy())
    rows = {row["verifier"]: row for row in result["files"][0]["verifiers"]}
    for k in range(1, PATHS + 1):
        for d in range(1, DEPTH + 1):
            assert abs(rows["token"]["reference"]["values"][f"{k},{d}"][0] - expected[d - 1]) <= 1e-12
    assert abs(rows["gbv"]["reference"]["values"]["1,1"][0] - expected[0]) <= 1e-12  # GBV = BV at K' = 1
    # the float32 rows sum to 1 only up to their rounding; the law's mass is off by no more
    defect = max(np.abs(dump[k].numpy().astype(np.float64).sum(-1) - 1).max() for k in ("target", "draft"))
    assert 0 < defect < 1e-6 and result["files"][0]["row_defect"] == pytest.approx(defect, abs=1e-15)
    for row in rows.values():
        f32 = row["configs"]["cpu float32"]  # the yardstick: reported, not held
        assert f32["held"] is False
        assert f32["value_diff"] <= gpu_laws.TOL32 and f32["law_diff"] <= gpu_laws.TOL32
        assert row["reference"]["stop_mass"] <= 1e-12 and row["reference"]["joint_mass"] <= defect + 1e-12
    step = result["verifier_step"]
    assert {c["paths"] for c in step["configs"]} == {2}
    assert set(step["configs"][0]["verifiers"]) == {"bv", "gbv"}


def test_a_difference_beyond_the_tolerance_fails(tiny_dump, tmp_path, monkeypatch):
    folder, _, _ = tiny_dump
    dump = gpu_laws.load_dump(folder, gpu_laws.read_manifest(folder)["files"][0])
    reference = gpu_laws.evaluate("gbv", dump, torch.device("cpu"), torch.float64)
    defect = gpu_laws.row_defect(dump)
    assert gpu_laws.compare(reference, reference, gpu_laws.TOL64, True, defect)["ok"]
    assert not gpu_laws.compare(reference, reference, gpu_laws.TOL64, True)["ok"]  # rows' own defect
    shifted = {**reference, "values": reference["values"] + 1e-11}
    assert gpu_laws.compare(reference, shifted, gpu_laws.TOL64, True, defect)["failures"] == [
        "values differ by 1e-11"]
    assert gpu_laws.compare(reference, shifted, gpu_laws.TOL32, True, defect)["ok"]
    joint = reference["joint"].copy()
    joint[0, 0, 0, :2] += [2e-4, -2e-4]  # mass kept, law moved
    moved = {**reference, "joint": joint}
    assert gpu_laws.compare(reference, moved, gpu_laws.TOL32, True, defect)["failures"] == [
        "law differs by 0.0002"]
    heavy = {**reference, "stop_mass": 1e-3}
    assert not gpu_laws.compare(reference, heavy, gpu_laws.TOL32, True, defect)["ok"]
    assert gpu_laws.compare(reference, heavy, gpu_laws.TOL32, False, defect)["ok"]  # possibly undefined
    # a device's float32 is held to the CPU's own float32 deviation (x SLACK32) or TOL32
    assert gpu_laws.float32_tolerance({"value_diff": 1e-3, "law_diff": 2e-4}) == 4e-3
    assert gpu_laws.float32_tolerance({"value_diff": 1e-7, "law_diff": 0.0}) == gpu_laws.TOL32
    assert gpu_laws.float32_tolerance({"ok": False, "failures": ["RuntimeError"]}) == gpu_laws.TOL32
    # a reference beyond its tolerance fails the run (exit 1)
    monkeypatch.setattr(gpu_laws, "TOL64", -1.0)
    assert gpu_laws.main(["--dumps", str(folder), "--device", "cpu", "--out", str(tmp_path),
                          "--verifiers", "gbv", "--no-step"]) == 1
    failed = json.loads((tmp_path / "gpu_laws.json").read_text())
    assert not failed["ok"] and not failed["files"][0]["verifiers"][0]["reference"]["ok"]


def test_changed_or_pickled_dumps_are_refused(tiny_dump, tmp_path, capsys):
    folder, arrays, _ = tiny_dump
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "manifest.json").write_text((folder / "manifest.json").read_text())
    data = bytearray((folder / "tiny.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (changed / "tiny.npz").write_bytes(bytes(data))
    assert gpu_laws.main(["--dumps", str(changed), "--device", "cpu", "--out", str(tmp_path / "o"),
                          "--no-step"]) == 2
    err = capsys.readouterr().err.strip()
    assert "tiny.npz: sha256: the file's is" in err and len(err.splitlines()) == 1
    # an object array (pickle) with a matching sha256 is still refused
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    np.savez(pickled / "tiny.npz", **{**arrays, "tokens": np.array([object()], dtype=object)})
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][0]["sha256"] = dump_trees.sha256_file(pickled / "tiny.npz")
    (pickled / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(gpu_laws.DumpError, match="not a numeric .npz"):
        gpu_laws.load_dump(pickled, manifest["files"][0])
    manifest["files"][0]["file"] = "../tiny.npz"
    (pickled / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(gpu_laws.DumpError, match=r"files\[0\]\.file"):
        gpu_laws.read_manifest(pickled)


def test_run_specs_are_checked():
    assert dump_trees.parse_run("qwen2.5-coder:0.6:1:3:3", 4, 4) == ("qwen2.5-coder", 0.6, 1, 3, 3)
    assert dump_trees.parse_run("smollm2-135m:1.0:2", 4, 2) == ("smollm2-135m", 1.0, 2, 4, 2)
    for bad in ("smollm2-135m:1.0", "p:x:1", "p:1.0:0", "p:1.0:1:5:1", "p:-1:1", ":1.0:1"):
        with pytest.raises(SystemExit, match="^--run: "):
            dump_trees.parse_run(bad, 4, 4)
