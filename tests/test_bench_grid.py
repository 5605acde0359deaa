"""One drafted tree answers every (K', L'): the grid estimator of `speclp bench`.

The first K' of K i.i.d. drafted paths cut to depth L' are K' i.i.d. paths of depth L', so
the mean over sampled (K, L) trees of a verifier's exact conditional E[tau + 1] on the cut
tree is an unbiased estimate of the exact block efficiency at (K', L'). Checked against the
exact enumeration (verifiers/exact.py) of the depth-L' sub-instance at K' paths.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from speclp.decode.engine import cell_name, cut_tree, score_cells, score_grid, score_tree
from speclp.verifiers.exact import draft_tree, exact_result
from speclp.verifiers.law import DraftTree
from speclp.verifiers.registry import block_law
from speclp.verifiers.tree import TreeModel, num_nodes

VOCAB, DEPTH, PATHS = 3, 3, 3
NAMES = ("bv", "token", "gbv", "nodeopt", "specinfer", "nss")


def instance(seed: int, vocab: int = VOCAB, depth: int = DEPTH) -> TreeModel:
    """Independent Dirichlet(1/2) target and draft rows at every node (peaked, unequal)."""
    rng = np.random.default_rng(seed)
    count = num_nodes(vocab, depth)
    return TreeModel(rng.dirichlet(np.full(vocab, 0.5), size=count),
                     rng.dirichlet(np.full(vocab, 0.5), size=count), depth)


def sub_instance(model: TreeModel, depth: int) -> TreeModel:
    """The same rows to depth `depth` (shortlex: the first num_nodes(V, depth) nodes)."""
    count = num_nodes(model.vocab_size, depth)
    return TreeModel(model.target[:count], model.draft[:count], depth)


def sample_paths(model: TreeModel, paths: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """[count, paths, L] i.i.d. draft paths (drawn node by node from the draft rows)."""
    vocab = model.vocab_size
    tokens = np.zeros((count, paths, model.depth), dtype=np.int64)
    node = np.zeros((count, paths), dtype=np.int64)  # shortlex index of the current prefix
    for i in range(model.depth):
        rows = model.draft[node]  # [count, paths, V]
        u = rng.random((count, paths, 1))
        token = (rows.cumsum(-1) < u).sum(-1).clip(max=vocab - 1)
        tokens[:, :, i] = token
        node = node * vocab + 1 + token  # child index in shortlex order
    return tokens


def test_grid_means_converge_to_the_exact_block_efficiency_of_every_cell() -> None:
    model = instance(7)
    rng = np.random.default_rng(1)
    samples = 6000
    tree = draft_tree(model, sample_paths(model, PATHS, samples, rng))
    cells = score_cells(PATHS, DEPTH)
    assert len(cells) == PATHS * DEPTH
    grid = score_grid(NAMES, tree.tokens, tree.target_rows, tree.draft_rows, cells)
    worst = 0.0
    for k, depth in cells:
        sub = sub_instance(model, depth)
        for name in NAMES:
            exact = float(exact_result(sub, name, paths=k).block_efficiency)
            values = grid[(k, depth)][name].numpy()
            assert values.shape == (samples,)
            sd = values.std(ddof=1) / np.sqrt(samples)
            # 4.5 standard errors: over 54 (cell, verifier) pairs a false failure has
            # probability < 54 * 7e-6; a tiny floor for cells where every tree gives one value
            assert abs(values.mean() - exact) <= 4.5 * sd + 1e-12, (k, depth, name, exact)
            worst = max(worst, abs(values.mean() - exact) / max(sd, 1e-12))
    # the cells differ: deeper and wider trees accept more, so the test is not vacuous
    bv = {c: float(exact_result(sub_instance(model, c[1]), "bv", paths=1).block_efficiency)
          for c in cells}
    assert bv[(1, 3)] > bv[(1, 1)] + 0.1


def test_a_wrong_cut_is_detected() -> None:
    """Scoring the first K' paths at the FULL depth instead of L' misses the exact value of
    (K', L' < L) by many standard errors: the comparison above can fail."""
    model = instance(7)
    rng = np.random.default_rng(2)
    samples = 6000
    tree = draft_tree(model, sample_paths(model, PATHS, samples, rng))
    wrong = block_law("gbv", cut_tree(tree, 2, DEPTH)).block_efficiency().numpy()
    exact = float(exact_result(sub_instance(model, 1), "gbv", paths=2).block_efficiency)
    sd = wrong.std(ddof=1) / np.sqrt(samples)
    assert abs(wrong.mean() - exact) > 10 * sd


def test_grid_cells_equal_the_laws_on_cut_trees_and_single_path_sharing() -> None:
    model = instance(3)
    rng = np.random.default_rng(4)
    tree = draft_tree(model, sample_paths(model, PATHS, 50, rng))
    seconds: dict[str, float] = {}
    grid = score_grid(NAMES, tree.tokens, tree.target_rows, tree.draft_rows,
                      score_cells(PATHS, DEPTH), max_elements=PATHS * (DEPTH + 1) * VOCAB * 7,
                      seconds=seconds)  # chunks of 7 trees
    assert set(seconds) == set(NAMES)
    for (k, depth), scores in grid.items():
        cut = cut_tree(tree, k, depth)
        assert cut.paths == k and cut.depth == depth
        for name in NAMES:
            direct = block_law(name, cut).block_efficiency()
            assert torch.allclose(scores[name], direct, atol=1e-12, rtol=0)
        # bv and token read path 0 only: equal at every K'
        for name in ("bv", "token"):
            assert torch.equal(scores[name], grid[(1, depth)][name])
    whole = score_tree(NAMES, tree.tokens, tree.target_rows, tree.draft_rows)
    for name in NAMES:
        assert torch.equal(whole[name], grid[(PATHS, DEPTH)][name])
    assert cell_name((4, 8)) == "4,8"
    with pytest.raises(ValueError, match="cells must lie"):
        score_grid(NAMES, tree.tokens, tree.target_rows, tree.draft_rows, [(PATHS + 1, 1)])


def test_shared_key_orders_give_the_same_bits_with_fewer_sorts(monkeypatch) -> None:
    """score_grid's share_sorts: every cell's value equal bit for bit (torch.equal) to the
    unshared evaluation, with fewer row sorts (each distinct node row sorted once)."""
    gen = torch.Generator().manual_seed(0)
    batch, paths, depth, vocab = 2, 3, 3, 300
    target = torch.softmax(3 * torch.randn(batch, paths, depth + 1, vocab, generator=gen), -1)
    draft = torch.softmax(3 * torch.randn(batch, paths, depth, vocab, generator=gen), -1)
    target[:, :, 0], draft[:, :, 0] = target[:, :1, 0], draft[:, :1, 0]  # one root row
    tokens = torch.randint(0, vocab, (batch, paths, depth), generator=gen)
    tokens[:, :, 0] = torch.arange(paths)  # distinct first tokens: no other shared prefix
    tree = DraftTree(tokens, target, draft)
    calls = {"sorts": 0}
    original = torch.sort

    def counted(*args, **kwargs):
        calls["sorts"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "sort", counted)
    results, sorts = [], []
    for share in (False, True):
        calls["sorts"] = 0
        results.append(score_grid(("gbv", "spectr"), tree.tokens, tree.target_rows,
                                  tree.draft_rows, score_cells(3, 3), torch.float32,
                                  share_sorts=share, one_pass=False))  # cell by cell
        sorts.append(calls["sorts"])
    for cell, by_name in results[0].items():
        for name, values in by_name.items():
            assert torch.equal(values, results[1][cell][name]), (cell, name)
    assert sorts[1] < sorts[0] / 2, sorts


# ---------------------------------------------------------------------------
# the command on tiny models: the library's summary of its records; a fully resumed run
# loads no model
# ---------------------------------------------------------------------------

def bench_cli(out, *extra, prompts="humaneval:2"):
    """(--json object, stderr) of a bench run on the tiny pair; a failed run: the result."""
    import json

    from speclp.cli import app
    from typer.testing import CliRunner

    before = torch.get_num_threads()
    try:
        result = CliRunner().invoke(app, [
            "bench", "--pair", "smollm2-135m,smollm2-135m", "--prompts", prompts,
            "--verifiers", "bv,gbv", "--paths", "1,2", "--depth", "2", "--max-new-tokens", "4",
            "--batch", "2", "--baseline", "--device", "cpu", "--dtype", "fp32", "--threads", "1",
            "--out", str(out), "--json", *extra])
    finally:
        torch.set_num_threads(before)
    if result.exit_code != 0:
        return result
    return json.loads(result.stdout), result.stderr  # json.loads: stdout is ONE object


def test_a_fully_resumed_bench_run_loads_no_model(tmp_path, monkeypatch) -> None:
    import json

    from speclp.cli import bench as cli_bench
    from speclp.cli.common import jsonable
    from speclp.decode import models
    from speclp.experiments.bench import load_records, summarize_bench
    from tiny_models import tiny_loaded_pair

    loads = []

    def tiny(name, *args, **kwargs):
        loads.append(name)
        return tiny_loaded_pair(name)

    monkeypatch.setattr(cli_bench, "load_pair", tiny)
    first, log = bench_cli(tmp_path)
    assert (first["computed"], first["reused"], len(loads)) == (4, 0, 1)  # 2 prompts x (grid, baseline)
    assert "bench: 2/2 batch runs" in log  # stderr is not a terminal here: plain lines
    # the rows are the library's summary of the records the command wrote (one run here)
    expected = json.loads(json.dumps(jsonable(summarize_bench(load_records(tmp_path)))))
    assert first["runs"] == expected and len(expected) == 5  # 4 cells (K', L') + baseline

    def loader(*args, **kwargs):
        raise AssertionError("a model was loaded by a fully resumed run")

    for module in (cli_bench, models):
        monkeypatch.setattr(module, "load_pair", loader)
    monkeypatch.setattr(models, "load_model", loader)
    again, _ = bench_cli(tmp_path)
    assert (again["computed"], again["reused"]) == (0, 4)
    assert again["runs"] == first["runs"] and again["figures"] == first["figures"]
    more = bench_cli(tmp_path, prompts="humaneval:3")  # a third prompt missing: the loader is called
    assert more.exit_code == 3 and "a model was loaded" in more.output
