"""Worker processes for the driver's bins (engine.bin_processes), and the commit's JSON on real commits.

A table of many small files written by delta-spark is compacted twice from the same copy: once with
its bins in worker processes, once in the driver's threads. Both commits must hold the same actions
(same removes, adds with the same size, stats and partition), both engines must read the same rows,
and each commit's add and remove lines must be byte for byte what ``json.dumps`` writes (the encoder
before orjson; tests/test_json_lines.py holds the codec itself). The pool itself: typed outcomes from
another process, a bin that fails does not stop the others, a cancelled bin stops, a bin stuck in a read
(a FIFO) is killed after the grace period, a process that dies fails its bin only, a bug ends the batch,
and no process outlives ``close``; every such test is bounded by pytest-timeout.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.actions import json_line
from dbt_delta_optimize.delta.snapshot import load_snapshot
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
        assert b"".join(json_line(json.loads(line)) for line in files) == b"".join(line + b"\n" for line in files)
        assert all(line == json.dumps(json.loads(line), separators=(",", ":")).encode() for line in files)


def test_processes_apply_deletion_vectors_with_pyarrow_loaded_without_numpy(
    spark, small_files, tmp_path, monkeypatch, caplog
):
    """The workers' pyarrow is loaded without numpy (``engine.fork_server_init``); a bin decodes deletion vectors
    with numpy all the same, and hands pyarrow a bitmap: the rows delta-spark reads are the rows committed."""
    src, _ = small_files
    dst = str(tmp_path / "dv")
    shutil.copytree(src, dst)
    spark.sql(f"ALTER TABLE delta.`{dst}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    spark.sql(f"DELETE FROM delta.`{dst}` WHERE id % 7 = 3")
    expected = rows_spark(spark, dst)
    snapshot_dvs = sum(1 for f in load_snapshot(dst).files if f.deletion_vector is not None)
    assert snapshot_dvs >= 30  # most files carry a deletion vector: the bins must apply them
    bin_processes.start_fork_server()  # warm: the 4 KB files go to processes (MIN_FILES lowered)
    monkeypatch.setattr(bin_processes, "MIN_FILES", 10)
    with caplog.at_level(logging.INFO, logger="dbt_delta_optimize.engine.bin_rewriter"):
        m = optimize(spark, dst)
    pids = {int(r.args[4]) for r in caplog.records if r.msg.startswith("bin %s rewritten in")}
    assert pids and os.getpid() not in pids, "the bins did not run in worker processes"
    assert m.num_files_added == 3 and m.deletion_vector_stats is not None
    assert_same_rows(spark, dst, expected)
    assert len(expected) == 3000 - len([i for i in range(3000) if i % 7 == 3])


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


def _bins(files: int, size: int, per_bin: int = 100) -> list:
    """Bins of ``files`` inputs of ``size`` bytes each (``pays`` reads only their inputs' sizes)."""
    from types import SimpleNamespace

    inputs = [SimpleNamespace(size=size) for _ in range(files)]
    return [SimpleNamespace(inputs=inputs[i : i + per_bin]) for i in range(0, files, per_bin)]


def test_processes_pay_for_many_files_up_to_256_kb_once_the_fork_server_runs():
    """The benchmark shapes (docs/performance.md): with the fork server up, processes won at 5.5, 40, 57 and
    200 KB; while it must start (0.6 s of imports), only at 5.5 KB."""
    for files, size in ((5000, 5_500), (1212, 40_000), (2000, 57_000), (1000, 200_000)):
        assert bin_processes.pays(_bins(files, size), workers=2, local=True, warm=True), (files, size)
        assert bin_processes.pays(_bins(files, size), workers=2, local=True, warm=False) == (size < 16_384)
    assert not bin_processes.pays(_bins(1000, 300 * 1024), workers=2, local=True, warm=True)  # large: threads
    assert not bin_processes.pays(_bins(999, 5_500), workers=2, local=True)  # too few files for a process
    assert not bin_processes.pays(_bins(2000, 5_500), workers=2, local=False)  # an object store: threads
    assert not bin_processes.pays(_bins(2000, 5_500), workers=1, local=True)
    assert not bin_processes.pays(_bins(2000, 5_500, per_bin=2000), workers=2, local=True)  # one bin


def test_start_fork_server_starts_the_server_the_workers_fork_from():
    """In a fresh process (no fork server yet): ``start_fork_server`` starts it, and the pool's next worker is
    forked by that server, not by one of its own (its parent is the server's pid; it ends when closed)."""
    code = (
        "from multiprocessing import forkserver\n"
        "from dbt_delta_optimize.engine import bin_processes as bp\n"
        "assert not bp.fork_server_running()\n"
        "bp.start_fork_server()\n"
        "assert bp.fork_server_running()\n"
        "server = forkserver._forkserver._forkserver_pid\n"
        "pool = bp.BinProcesses(2); w = pool._start()\n"
        "parent = int(open(f'/proc/{w.process.pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "pool.close()\n"
        "assert forkserver._forkserver._forkserver_pid == server\n"
        "print(parent == server, w.process.exitcode)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "0"]


def test_a_run_on_threads_starts_the_fork_server_for_the_next(spark, small_files, tmp_path, monkeypatch, caplog):
    """A real run whose bins processes would win with the server up, but which finds it down, runs its bins on
    threads and starts the server as it ends; with the server up, the same bins run in processes."""
    src, expected = small_files
    started: list[bool] = []
    for running, dst in ((False, "cold"), (True, "warm")):
        shutil.copytree(src, str(tmp_path / dst))
        monkeypatch.setattr(bin_processes, "MIN_FILES", 10)
        monkeypatch.setattr(bin_processes, "COLD_MAX_MEAN_FILE_BYTES", 1)  # cold: never pays here
        monkeypatch.setattr(bin_processes, "fork_server_running", lambda running=running: running)
        monkeypatch.setattr(bin_runner, "fork_server_running", lambda running=running: running)
        monkeypatch.setattr(bin_runner, "start_fork_server", lambda running=running: started.append(running))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="dbt_delta_optimize.engine.bin_rewriter"):
            m = optimize(spark, str(tmp_path / dst))
        monkeypatch.undo()
        assert m.num_files_removed == 180
        pids = {int(r.args[4]) for r in caplog.records if r.msg.startswith("bin %s rewritten in")}
        if running:
            assert pids and os.getpid() not in pids, "the bins did not run in worker processes"
        else:
            assert pids == {os.getpid()}, "a cold fork server was waited for"
        assert_same_rows(spark, str(tmp_path / dst), expected)
    assert started == [False], "the cold run did not start the fork server (or the warm run started it again)"


def _run_pool(pool, tasks) -> tuple[list, BaseException | None]:
    outcomes: list = []
    return outcomes, pool.run(tasks, outcomes.append)


def _ended(pool) -> bool:
    return bool(pool.processes()) and all(p.exitcode is not None for p in pool.processes())


def test_pool_outcomes_failures_and_close(tasks):
    broken = dataclasses.replace(
        tasks[1], inputs=(dataclasses.replace(tasks[1].inputs[0], path=tasks[1].inputs[0].path + ".gone"),)
    )
    pool = bin_processes.BinProcesses(2)
    try:
        outcomes, error = _run_pool(pool, [tasks[0], broken, tasks[2]])
        again, error2 = _run_pool(pool, [])  # the pool is kept across batches
    finally:
        pool.close()
    assert error is None and error2 is None and again == []
    by_bin = {o.bin_id: o for o in outcomes}
    assert isinstance(by_bin[tasks[0].bin_id], Rewritten) and isinstance(by_bin[tasks[2].bin_id], Rewritten)
    assert by_bin[tasks[0].bin_id].worker.pid != os.getpid()
    assert isinstance(by_bin[broken.bin_id], Failed) and by_bin[broken.bin_id].kind == "data_file"
    assert not os.path.exists(broken.output)
    assert len(pool.processes()) == 2 and _ended(pool)


def test_pool_release_ends_idle_processes_before_close(tasks):
    """The run's last batch done: ``release`` tells the idle processes to end, and they exit on their own
    (while the driver commits); the pool takes no more bins, and ``close`` still joins every one."""
    pool = bin_processes.BinProcesses(2)
    try:
        outcomes, error = _run_pool(pool, tasks[:2])
        assert error is None and all(isinstance(o, Rewritten) for o in outcomes)
        assert len(pool.processes()) == 2 and not _ended(pool)
        pool.release()
        for p in pool.processes():
            p.join(10)  # not close(): they end because they were told to
        assert _ended(pool) and all(p.exitcode == 0 for p in pool.processes())
        with pytest.raises(RuntimeError, match="released"):
            _run_pool(pool, tasks[2:3])
        pool.release()  # twice: nothing more to tell
    finally:
        pool.close()
    assert _ended(pool) and len(pool.processes()) == 2


def test_pool_stop_flag_stops_bins(tasks):
    pool = bin_processes.BinProcesses(2)
    try:
        pool.stop.value = 1  # what cancel() sets: a running bin stops at its next check and deletes its file
        outcomes, error = _run_pool(pool, tasks)
    finally:
        pool.close()
    assert error is None and len(outcomes) == len(tasks) and all(isinstance(o, NotStarted) for o in outcomes)
    assert not any(os.path.exists(t.output) for t in tasks)
    assert _ended(pool)


def test_pool_bug_in_a_bin_ends_the_batch(tasks):
    """A task that raises outside run_bin's typed failures (here: no store) ends the batch with that error, as
    in a driver thread; the others stop or finish, and the pool is not reused."""
    pool = bin_processes.BinProcesses(2)
    try:
        outcomes, error = _run_pool(pool, [dataclasses.replace(tasks[0], store=None), *tasks[1:]])
    finally:
        pool.close()
    assert isinstance(error, RuntimeError) and "AttributeError" in str(error)
    assert pool.cancelled and tasks[0].bin_id not in {o.bin_id for o in outcomes}
    assert all(isinstance(o, (Rewritten, NotStarted)) for o in outcomes)
    assert _ended(pool)


def _fifo_task(task, tmp_path):
    """The task with its first input a FIFO nobody writes to: opening it for reading never returns."""
    fifo = str(tmp_path / "stuck.parquet")
    os.mkfifo(fifo)
    first = dataclasses.replace(task.inputs[0], path=fifo)
    return dataclasses.replace(task, inputs=(first, *task.inputs[1:]))


def _in_thread(pool, tasks) -> tuple[threading.Thread, list, list]:
    outcomes: list = []
    result: list = []
    thread = threading.Thread(target=lambda: result.append(pool.run(tasks, outcomes.append)), daemon=True)
    thread.start()
    return thread, outcomes, result


@pytest.mark.timeout(120)
def test_pool_cancel_kills_a_bin_stuck_in_a_read(tasks, tmp_path, monkeypatch):
    """The hang of the first version: a bin blocked opening its input (a FIFO) never sees the stop flag. After
    a cancel, ``run`` returns once ``STUCK_SECONDS`` have passed, the stuck bin's process killed and joined,
    without an outcome for it (the bin is left); ``close`` then ends the rest."""
    monkeypatch.setattr(bin_processes, "STUCK_SECONDS", 1.0)
    stuck = _fifo_task(tasks[0], tmp_path)
    pool = bin_processes.BinProcesses(2)
    try:
        thread, outcomes, result = _in_thread(pool, [stuck, *tasks[1:]])
        deadline = time.monotonic() + 60
        while len(outcomes) < len(tasks) - 1 and time.monotonic() < deadline:  # every other bin is done
            time.sleep(0.05)
        assert len(outcomes) == len(tasks) - 1, outcomes
        pool.cancel()
        thread.join(60)
        assert not thread.is_alive(), "BinProcesses.run did not return after a cancel"
    finally:
        pool.close()
    assert result == [None]
    assert stuck.bin_id not in {o.bin_id for o in outcomes}
    assert all(isinstance(o, Rewritten) for o in outcomes)
    killed = [p for p in pool.processes() if p.exitcode == -signal.SIGKILL]
    assert len(killed) == 1 and _ended(pool)


@pytest.mark.timeout(120)
def test_pool_process_that_dies_fails_its_bin_only(tasks, tmp_path):
    """A worker process killed from outside while its bin runs: that bin fails (typed), the other bins are
    rewritten, no error ends the batch, and the next batch gets a new process in the dead one's place."""
    stuck = _fifo_task(tasks[0], tmp_path)
    pool = bin_processes.BinProcesses(2)
    try:
        thread, outcomes, result = _in_thread(pool, [stuck, *tasks[1:]])
        deadline = time.monotonic() + 60
        while len(outcomes) < len(tasks) - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        busy = [w.process for w in pool._live if w.task is not None and w.task.bin_id == stuck.bin_id]
        assert len(busy) == 1
        os.kill(busy[0].pid, signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive(), "BinProcesses.run did not return after its process died"
        for t in tasks[1:]:
            os.remove(t.output)
        more, error = _run_pool(pool, tasks[1:])  # the pool goes on, with a new process in the dead one's place
    finally:
        pool.close()
    assert result == [None] and error is None and len(more) == 2 and all(isinstance(o, Rewritten) for o in more)
    failed = [o for o in outcomes if o.bin_id == stuck.bin_id]
    assert len(failed) == 1 and isinstance(failed[0], Failed) and failed[0].kind == "internal"
    assert "killed by signal 9" in failed[0].message
    assert len(pool.processes()) == 3 and _ended(pool)


@pytest.mark.timeout(120)
def test_pool_close_while_a_batch_runs(tasks, tmp_path, monkeypatch):
    """``close`` from another thread (the run's end while a job still runs): it cancels, waits for the batch
    (whose stuck bin is killed), then ends every process; the pool takes no more bins."""
    monkeypatch.setattr(bin_processes, "STUCK_SECONDS", 1.0)
    pool = bin_processes.BinProcesses(2)
    thread, outcomes, result = _in_thread(pool, [_fifo_task(tasks[0], tmp_path), *tasks[1:]])
    deadline = time.monotonic() + 60
    while not any(w.task is not None for w in pool._live) and time.monotonic() < deadline:
        time.sleep(0.05)
    pool.close()
    thread.join(60)
    assert not thread.is_alive() and result == [None]
    assert tasks[0].bin_id not in {o.bin_id for o in outcomes}
    assert _ended(pool) and any(p.exitcode == -signal.SIGKILL for p in pool.processes())
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(tasks, outcomes.append)
