"""experiments.sweep.forget_tasks: drop the rows of chosen tasks so that a rerun of the same
sweep recomputes exactly those tasks and keeps every other row as it was."""

import pytest
from speclp.experiments.store import FolderBusy
from speclp.experiments.sweep import ResultStore, SweepSpec, forget_tasks, run_sweep
from speclp.inputs import BadArgument

ID = "dirichlet-V2-L1-a1-s0-K2-iid"


def spec():
    return SweepSpec(vocab=[2], depth=[1], paths=[1, 2], alpha=[1.0], trials=1,
                     verifiers=["bv", "specinfer"])


def test_forget_then_rerun_recomputes_only_those_tasks(tmp_path):
    first = run_sweep(spec(), tmp_path, batch=1)  # one part file per task
    assert first["complete"] and (tmp_path / "results.parquet").exists()
    store = ResultStore(tmp_path)
    before = store.load()
    assert set(before["instance_id"]) == {ID, ID.replace("K2", "K1")}
    assert forget_tasks(tmp_path, [ID]) == {"rows": 2, "parts": 1}
    assert store.done() == {ID.replace("K2", "K1")}
    assert not (tmp_path / "results.parquet").exists()  # stale once rows are gone
    again = run_sweep(spec(), tmp_path)
    assert again["computed"] == 1 and again["complete"]
    after = store.load()
    kept = after[after["instance_id"] != ID]
    redone = after[after["instance_id"] == ID]
    assert len(after) == len(before) == 4
    assert set(kept["run_id"]) == {first["run_id"]}  # untouched rows keep their run
    assert set(redone["run_id"]) == {again["run_id"]}  # the forgotten task ran again


def test_forget_refuses_unknown_ids_and_a_busy_folder(tmp_path):
    run_sweep(spec(), tmp_path)
    with pytest.raises(BadArgument, match="instance_ids"):
        forget_tasks(tmp_path, ["dirichlet-V9-L1-a1-s0-K2-iid"])
    from speclp.experiments.store import _try_lock

    with open(tmp_path / ".lock", "a+") as holder:
        assert _try_lock(holder)  # another run writing the folder
        with pytest.raises(FolderBusy):
            forget_tasks(tmp_path, [ID])
    assert ID in ResultStore(tmp_path).done()  # nothing removed while busy
