"""The collector pause around the driver's per-file steps: nested, across threads, and restoring the caller's state."""

from __future__ import annotations

import gc
import threading

import pytest

from dbt_delta_optimize.engine.gc_pause import collector_paused


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_resumed_after():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_resume_only_at_the_outermost_end():
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_resumed_after_an_error():
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_caller_that_disabled_it_keeps_it_disabled():
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_resume_when_the_last_ends():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first pause ended: still paused by this one

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert gc.isenabled()


def test_an_optimize_builds_its_tasks_results_and_commit_with_the_collector_paused(tmp_path, monkeypatch):
    """Through a real run (deltalake's table, our Arrow bins in the driver, our commit): the pause reaches both
    steps, the collector runs again after, and the rows are the same."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    import dbt_delta_optimize.engine.executor as executor
    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.engine.bin_rewriter import BinRewriter

    path = str(tmp_path / "t")
    for i in range(4):
        write_deltalake(path, pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}), mode="append")
    seen: dict[str, bool] = {}
    commit, tasks, result = executor.commit_batch, BinRewriter.tasks, BinRewriter.result

    def commit_batch(*args, **kwargs):
        seen["commit"] = gc.isenabled()
        return commit(*args, **kwargs)

    def spy_tasks(self, *args, **kwargs):
        seen["tasks"] = gc.isenabled()
        return tasks(self, *args, **kwargs)

    def spy_result(self, *args, **kwargs):
        seen["result"] = gc.isenabled()
        return result(self, *args, **kwargs)

    monkeypatch.setattr(executor, "commit_batch", commit_batch)
    monkeypatch.setattr(BinRewriter, "result", spy_result)
    monkeypatch.setattr(BinRewriter, "tasks", spy_tasks)
    m = optimize(None, path, task_runner="driver")
    assert (m.num_files_removed, m.num_files_added) == (4, 1)
    assert seen == {"commit": False, "tasks": False, "result": False}
    assert gc.isenabled()
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == list(range(40))
