"""Worker processes for the driver's bins (engine.bin_processes) and the commit's JSON codec.

A table of many small files written by delta-spark is compacted twice from the same copy: once with
its bins in worker processes, once in the driver's threads. Both commits must hold the same actions
(same removes, adds with the same size, stats and partition), both engines must read the same rows,
and each commit's add and remove lines must be byte for byte what ``json.dumps`` writes (the encoder
before orjson). The pool itself: typed outcomes from another process, a bin that fails does not stop
the others, a cancelled bin stops, and no process outlives ``close``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.actions import json_lines
from dbt_delta_optimize.engine import bin_processes, bin_runner
from dbt_delta_optimize.tasks.messages import Failed, NotStarted, Rewritten
from tests.helpers import assert_same_rows, rows_spark


def _commit_lines(path: str, version: int) -> list[bytes]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), "rb") as fh:
        return fh.read().splitlines()


def _actions(lines: list[bytes]) -> tuple[list[dict], list[dict]]:
    parsed = [json.loads(line) for line in lines]
    adds = sorted((a["add"] for a in parsed if "add" in a), key=lambda a: json.dumps(a["partitionValues"]))
    removes = sorted((a["remove"] for a in parsed if "remove" in a), key=lambda r: r["path"])
    return adds, removes


@pytest.fixture(scope="module")
def small_files(spark, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("procs") / "src")
    (
        spark.range(0, 3000, 1, 60)
        .selectExpr("id", "CAST(id % 3 AS INT) AS part", "uuid() AS payload", "id * 0.5 AS score")
        .write.format("delta")
        .partitionBy("part")
        .save(path)
    )
    return path, rows_spark(spark, path)


def _run(spark, src: str, dst: str, monkeypatch, caplog, *, processes: bool) -> tuple[list[bytes], set[int]]:
    shutil.copytree(src, dst)
    if processes:
        monkeypatch.setattr(bin_processes, "MIN_FILES", 10)
    else:
        monkeypatch.setattr(bin_runner, "pays", lambda *a, **k: False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dbt_delta_optimize.engine.bin_rewriter"):
        m = optimize(spark, dst)
    monkeypatch.undo()
    assert m.num_files_removed == 180 and m.num_files_added == 3
    pids = {int(r.args[4]) for r in caplog.records if r.msg.startswith("bin %s rewritten in")}
    return _commit_lines(dst, m.committed_versions[-1]), pids


def test_processes_commit_what_threads_commit(spark, small_files, tmp_path, monkeypatch, caplog):
    src, expected = small_files
    in_procs, proc_pids = _run(spark, src, str(tmp_path / "procs"), monkeypatch, caplog, processes=True)
    in_threads, thread_pids = _run(spark, src, str(tmp_path / "threads"), monkeypatch, caplog, processes=False)
    assert thread_pids == {os.getpid()}
    assert proc_pids and os.getpid() not in proc_pids, "the bins did not run in worker processes"
    for dst in ("procs", "threads"):
        assert_same_rows(spark, str(tmp_path / dst), expected)
    adds_p, removes_p = _actions(in_procs)
    adds_t, removes_t = _actions(in_threads)
    assert [r["path"] for r in removes_p] == [r["path"] for r in removes_t]
    strip = ("deletionTimestamp",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in removes_p] == [
        {k: v for k, v in r.items() if k not in strip} for r in removes_t
    ]
    same = ("partitionValues", "size", "stats", "dataChange")
    assert [{k: a[k] for k in same} for a in adds_p] == [{k: a[k] for k in same} for a in adds_t]
    for lines in (in_procs, in_threads):  # orjson's lines are json.dumps's, byte for byte
        files = [line for line in lines if line.startswith((b'{"add"', b'{"remove"'))]
        assert len(files) == 183
        assert json_lines([json.loads(line) for line in files]) == b"".join(line + b"\n" for line in files)
        assert all(line == json.dumps(json.loads(line), separators=(",", ":")).encode() for line in files)


def test_json_lines_is_json_dumps():
    objects = [
        {"remove": {"path": "a=%C3%A9/x.parquet", "partitionValues": {"a": "é", "b": None}, "size": 12}},
        {"add": {"path": "p", "stats": '{"minValues":{"s":"\\u0000\\n\\t\\"x\\\\"}}', "tags": {"k": "\x7f"}}},
        {"add": {"path": "q", "partitionValues": {"c": "\x01\x1f\u2028"}, "size": 2**62, "dataChange": False}},
        {"remove": {"path": "big", "size": 2**70}},  # beyond orjson's integers
        {"add": {"path": "日本/x.parquet", "partitionValues": {"d": "\ud83d\ude00"}}},
    ]
    for chosen in ([objects[0]], [objects[2]], objects[:3], objects, [objects[4]], []):
        want = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in chosen).encode()
        assert json_lines(chosen) == want


@pytest.fixture()
def tasks(spark, small_files, tmp_path, monkeypatch):
    """The bin tasks of one compaction, captured as the driver made them (the table copy stays in place)."""
    from dbt_delta_optimize.engine import task_runner

    src, _ = small_files
    dst = str(tmp_path / "t")
    shutil.copytree(src, dst)
    captured = []
    real = task_runner.TaskJob.start

    def capture(self):
        captured.extend(pickle.loads(pickle.dumps(self.tasks)))
        return real(self)

    monkeypatch.setattr(task_runner.TaskJob, "start", capture)
    monkeypatch.setattr(bin_runner, "pays", lambda *a, **k: False)
    optimize(spark, dst)
    monkeypatch.undo()
    for t in captured:  # written and committed: remove the outputs so the tasks can run again
        os.remove(t.output)
    return captured


def test_pool_outcomes_failures_and_close(tasks):
    import dataclasses

    broken = dataclasses.replace(
        tasks[1], inputs=(dataclasses.replace(tasks[1].inputs[0], path=tasks[1].inputs[0].path + ".gone"),)
    )
    pool = bin_processes.BinProcesses(2)
    try:
        processes = pool._processes()
        outcomes = [f.result() for f in [pool.submit(tasks[0]), pool.submit(broken), pool.submit(tasks[2])]]
        processes = pool._processes()
    finally:
        pool.close()
    assert isinstance(outcomes[0], Rewritten) and isinstance(outcomes[2], Rewritten)
    assert outcomes[0].worker.pid != os.getpid()
    assert isinstance(outcomes[1], Failed) and outcomes[1].kind == "data_file"
    assert not os.path.exists(broken.output)
    assert processes and not any(p.is_alive() for p in processes)


def test_pool_cancel_stops_bins(tasks):
    pool = bin_processes.BinProcesses(2)
    try:
        pool.stop.value = 1  # what cancel() sets: a running bin stops at its next check and deletes its file
        outcomes = [f.result() for f in [pool.submit(t) for t in tasks]]
        pool.cancel()
        with pytest.raises(RuntimeError):  # a cancelled pool takes no more bins
            pool.submit(tasks[0])
    finally:
        pool.close()
    assert outcomes and all(isinstance(o, NotStarted) for o in outcomes)
    assert not any(os.path.exists(t.output) for t in tasks)
