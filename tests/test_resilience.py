"""Beyond OPTIMIZE: a time budget, bins dropped (not the run) on concurrent DML, failure isolation, partial commits.

Every test checks the rows with both engines (no loss, no resurrection) and the metrics.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.debris import STAGING_DIR
from dbt_delta_optimize.engine import bin_processes
from dbt_delta_optimize.errors import InvalidConfigError
from dbt_delta_optimize.plan.config import OptimizeConfig, parse_duration
from dbt_delta_optimize.plan.ordering import order_bins
from dbt_delta_optimize.plan.planner import Bin
from tests.helpers import (
    assert_same_rows,
    data_files,
    deltalake_table,
    log_versions,
    rows_deltars,
    rows_spark,
    tasks_the_scheduler_runs,
)


def _table(path: str, partitions: int, files: int = 2) -> None:
    """delta-rs table: ``files`` appends, each one small file in every partition."""
    for f in range(files):
        ids = [p * 1000 + f for p in range(partitions)]
        write_deltalake(
            path,
            pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array([p % partitions for p in range(partitions)])}),
            partition_by=["part"],
            mode="append",
        )


def _files_per_partition(path: str) -> Counter:
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return Counter(actions.column("partition.part").to_pylist())


def _optimize_commits(path: str) -> list[dict]:
    return [h for h in DeltaTable(path).history() if h["operation"] == "OPTIMIZE"]


# --------------------------------------------------------------------------- pure parts
@pytest.mark.parametrize("text,seconds", [("25s", 25), ("10m", 600), ("1h", 3600), ("1.5", 1.5), (90, 90)])
def test_durations(text, seconds):
    assert parse_duration(text, key="max_duration") == seconds


@pytest.mark.parametrize("bad", ["", "soon", "-5s", "0", "10d", "8000000", True])
def test_bad_durations_name_the_key(bad):
    with pytest.raises(InvalidConfigError, match="max_duration"):
        parse_duration(bad, key="max_duration")


def test_commit_every_is_bins_or_a_period():
    assert OptimizeConfig.resolve(None, {"commit_every": 20}).commit_every_bins == 20
    assert OptimizeConfig.resolve(None, {"commit_every": "5m"}).commit_every_seconds == 300
    with pytest.raises(InvalidConfigError, match="commit_every"):
        OptimizeConfig.resolve(None, {"commit_every": "often"})


def test_bin_orders():
    from dbt_delta_optimize.delta.actions import AddFile

    def add(name: str, size: int, mtime: int) -> AddFile:
        return AddFile(path=name, partition_values={}, size=size, modification_time=mtime, data_change=True)

    a = Bin({"p": "b"}, (add("a1", 10, 5), add("a2", 10, 6)))
    b = Bin({"p": "a"}, (add("b1", 100, 9), add("b2", 1, 9), add("b3", 1, 9)))
    c = Bin({"p": None}, (add("c1", 500, 1), add("c2", 1, 2)))
    assert order_bins([a, b, c], "files-desc") == [b, a, c]
    assert order_bins([a, b, c], "bytes-desc") == [c, b, a]
    assert order_bins([a, b, c], "partition") == [b, a, c]
    assert order_bins([a, b, c], "oldest-first") == [c, a, b]


# --------------------------------------------------------------------------- Spark
def test_budget_commits_what_is_done_and_the_next_run_finishes(spark, tmp_path, monkeypatch):
    """The budget runs out during the first bin, whatever the machine's load: one bin commits, the rest is left.

    The budget counts from the call. The first bin is made slow deterministically in the task itself (the
    driver's one thread runs the bins one after another): it ends only once the budget is surely spent, so no
    other bin may start; planning on a loaded machine has the whole budget (10 s) to get the first bin going.
    """
    from dbt_delta_optimize.tasks import worker

    p = str(tmp_path / "t")
    _table(p, partitions=6)
    before = rows_deltars(p)
    budget = 10.0
    real = worker.run_bin
    started: list[int] = []

    def slow_first(task, *a, **k):
        started.append(task.bin_id)
        outcome = real(task, *a, **k)
        if len(started) == 1:  # the budget started when optimize() was called, after `called`
            time.sleep(max(0.0, called + budget + 0.5 - time.monotonic()))
        return outcome

    monkeypatch.setattr(worker, "run_bin", slow_first)
    called = time.monotonic()
    m = optimize(spark, p, max_threads=1, max_duration=budget, task_runner="driver")
    assert len(started) == 6  # every bin reached its task: the five after the first were not started by it
    assert len(m.committed_versions) == 1 and m.num_bins == 1 and m.num_files_removed == 2
    assert m.num_bins_left == 5 and m.num_bytes_left > 0 and m.failed_bins == () and m.dropped_bins == ()
    assert sorted(_files_per_partition(p).values()) == [1, 2, 2, 2, 2, 2]
    assert_same_rows(spark, p, before)
    rest = optimize(spark, p)  # plans only what is still small
    assert rest.num_bins == 5 and rest.num_bins_left == 0
    assert set(_files_per_partition(p).values()) == {1}
    assert_same_rows(spark, p, before)
    assert not os.path.exists(os.path.join(p, STAGING_DIR))


def test_cli_budget_line_and_json(spark, tmp_path):
    p = str(tmp_path / "t")
    _table(p, partitions=3)
    res = CliRunner().invoke(cli, ["optimize", p, "--max-duration", "0.001", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["numBinsLeft"] == 3 and out["committedVersions"] == [] and out["numFilesRemoved"] == 0
    res = CliRunner().invoke(cli, ["optimize", p, "--max-duration", "soon"])
    assert res.exit_code == 2 and "max_duration" in res.stderr and "25s" in res.stderr


def test_concurrent_deltalake_delete_drops_only_its_partitions(spark, tmp_path):
    """A delta-rs DELETE in partitions 0 and 11 lands while optimize rewrites 12: the other 10 commit after it."""
    p = str(tmp_path / "t")
    _table(p, partitions=12)
    v0 = log_versions(p)[-1]

    def delete(done, total, *_):
        if done == total:
            DeltaTable(p).delete("part = 0 OR part = 11")

    m = optimize(spark, p, max_threads=1, progress=delete)
    (ours,) = m.committed_versions
    assert ours == v0 + 2 and DeltaTable(p).history(2)[1]["operation"] == "DELETE"
    assert sorted(d["partition"]["part"] for d in m.dropped_bins) == ["0", "11"]
    assert all(d["winningVersion"] == v0 + 1 for d in m.dropped_bins)
    assert m.num_bins == 10 and _files_per_partition(p) == Counter({k: 1 for k in range(1, 11)})
    expected = [r for r in rows_deltars(p) if r[1] not in (0, 11)]  # after the DELETE
    assert len(expected) == 20
    assert rows_deltars(p) == expected and rows_spark(spark, p) == expected
    assert _strays(p) == set(), "the dropped bins' files are deleted"


def _live(p: str) -> set[str]:
    return set(pa.table(DeltaTable(p).get_add_actions(flatten=True)).column("path").to_pylist())


def _rows_without(spark, p: str, *parts: int) -> tuple[list[tuple], list[tuple]]:
    """Rows outside some partitions, read by both engines with partition pruning (their files are unreadable)."""
    where = " AND ".join(f"part != {part}" for part in parts)
    t = deltalake_table(p, columns=["id", "part"], file_pruning_predicate=where)
    rs = sorted(zip(t.column("id").to_pylist(), t.column("part").to_pylist()))
    sp = sorted((r["id"], r["part"]) for r in spark.read.format("delta").load(p).where(where).collect())
    return rs, sp


def test_a_corrupt_file_fails_its_bin_and_the_others_commit(spark, tmp_path):
    p = str(tmp_path / "t")
    _table(p, partitions=4)
    intact = sorted((r[0], r[1]) for r in rows_deltars(p, ["id", "part"]) if r[1] != 2)
    victim = sorted(f for f in _live(p) if f.startswith("part=2/"))[0]
    with open(os.path.join(p, victim), "r+b") as fh:
        fh.write(b"garbage!")
    res = CliRunner().invoke(cli, ["optimize", p, "--max-failed-bins", "1", "--max-threads", "1", "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    (failed,) = out["failedBins"]
    assert failed["partition"] == {"part": "2"} and "DataFileError" in failed["error"] and victim in failed["error"]
    assert out["numBins"] == 3 and len(out["committedVersions"]) == 1
    assert _files_per_partition(p) == Counter({0: 1, 1: 1, 2: 2, 3: 1})
    assert _rows_without(spark, p, 2) == (intact, intact)
    assert _strays(p) == set()
    res = CliRunner().invoke(cli, ["optimize", p, "--max-threads", "1"])  # default: all or nothing
    assert res.exit_code == 1 and victim in res.stderr and "Traceback" not in res.stderr
    assert len(_optimize_commits(p)) == 1


KILLED_BETWEEN_COMMITS = """
import os, signal, sys
import dbt_delta_optimize.engine.executor as ex

real = ex.commit_batch
calls = []

def commit_then_die(*args, **kwargs):
    if calls:
        os.kill(os.getpid(), signal.SIGKILL)  # the second partial commit never happens
    calls.append(1)
    return real(*args, **kwargs)

ex.commit_batch = commit_then_die
from dbt_delta_optimize.api import optimize
optimize(None, sys.argv[1], max_threads=1, commit_every=1)
"""


def test_killed_between_partial_commits_keeps_the_first_and_a_rerun_finishes(spark, tmp_path):
    p = str(tmp_path / "t")
    _table(p, partitions=3)
    before = rows_deltars(p)
    env = {**os.environ, "DBT_DELTA_OPTIMIZE_HOME": str(tmp_path / "home")}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BETWEEN_COMMITS, p], env=env, capture_output=True, timeout=600
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert len(_optimize_commits(p)) == 1 and sorted(_files_per_partition(p).values()) == [1, 2, 2]
    assert rows_deltars(p) == before and rows_spark(spark, p) == before
    m = optimize(spark, p)
    assert m.num_bins == 2 and set(_files_per_partition(p).values()) == {1}
    assert rows_deltars(p) == before and rows_spark(spark, p) == before
    assert _strays(p) == set()
    assert not os.path.exists(os.path.join(p, STAGING_DIR))


def _strays(p: str) -> set[str]:
    """Parquet files on disk that no commit added and kept, nor removed (kept until VACUUM): debris."""
    removed = set()
    log = os.path.join(p, "_delta_log")
    for name in os.listdir(log):
        if name.endswith(".json"):
            with open(os.path.join(log, name)) as fh:
                removed |= {json.loads(line).get("remove", {}).get("path") for line in fh}
    on_disk = {f for f in data_files(p) if f.endswith(".parquet")}
    return on_disk - _live(p) - removed


# --------------------------------------------------------------------------- commit-every, grace, failures, DVs
def test_commit_every_bins_and_periods_from_the_cli_and_the_api(spark, tmp_path):
    """--commit-every 2 commits every two bins; a period commits when it has passed since the last commit:
    5m never passes in this run (one commit at the end); 1s does after every bin made to take 1.1 s."""
    every_two, five_minutes, one_second = (str(tmp_path / n) for n in ("two", "five", "one"))
    for p in (every_two, five_minutes, one_second):
        _table(p, partitions=4)
    before = rows_deltars(every_two)
    # one commit attempt each: the second batch is not a conflict with the first, which this run committed
    res = CliRunner().invoke(
        cli,
        ["optimize", every_two, "--commit-every", "2", "--max-threads", "1", "--max-commit-attempts", "1", "--json"],
    )
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["committedVersions"]) == 2 and len(_optimize_commits(every_two)) == 2
    res = CliRunner().invoke(cli, ["optimize", five_minutes, "--commit-every", "5m", "--max-threads", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["committedVersions"]) == 1 and len(_optimize_commits(five_minutes)) == 1
    res = CliRunner().invoke(cli, ["optimize", five_minutes, "--commit-every", "often"])
    assert res.exit_code == 2 and "commit_every" in res.stderr

    def slow(*_):
        time.sleep(1.1)

    m = optimize(spark, one_second, max_threads=1, commit_every="1s", progress=slow)
    assert len(m.committed_versions) == 4 and m.num_bins == 4
    for p in (every_two, five_minutes, one_second):
        assert set(_files_per_partition(p).values()) == {1}
        assert_same_rows(spark, p, before)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("task_runner", ["driver", "spark", "processes"])
def test_bins_still_running_when_the_grace_period_ends_are_cancelled(spark, tmp_path, task_runner, monkeypatch, caplog):
    """A bin that never finishes (its input is a FIFO nobody writes to): the budget runs out, the grace period
    ends, and the run returns with that bin left and nothing of it committed. As Spark tasks the job is
    cancelled; in the driver's threads the stuck one is left behind after a bounded wait (it cannot be
    interrupted), and deletes what it wrote if it ever wakes; in worker processes (``task_runner`` auto with
    many small files) the stuck bin's process is killed, and every process is joined before the run returns."""
    pools: list[bin_processes.BinProcesses] = []
    in_processes = task_runner == "processes"
    if in_processes:
        task_runner = "auto"
        monkeypatch.setattr(bin_processes, "MIN_FILES", 1)  # three bins of two files: processes as for 1,000
        monkeypatch.setattr(bin_processes, "STUCK_SECONDS", 2.0)
        real_init = bin_processes.BinProcesses.__init__

        def init(self, workers):
            real_init(self, workers)
            pools.append(self)

        monkeypatch.setattr(bin_processes.BinProcesses, "__init__", init)
        warm = bin_processes.BinProcesses(1)  # the fork server up (its imports), so the bins start within the budget
        warm._start()
        warm.close()
        pools.clear()
    p = str(tmp_path / "t")
    _table(p, partitions=3)
    stuck = sorted(f for f in _live(p) if f.startswith("part=2/"))[0]
    os.unlink(os.path.join(p, stuck))
    os.mkfifo(os.path.join(p, stuck))  # opening it for reading blocks until a writer comes: none will
    intact = _rows_without(spark, p, 2)
    stuck_files = {f for f in _live(p) if f.startswith("part=2/")}
    m = optimize(spark, p, max_threads=3, max_duration="2s", task_runner=task_runner)  # returns, the bin left
    assert tasks_the_scheduler_runs(spark) == 0  # Spark killed the cancelled task before the run returned
    assert m.num_bins_left >= 1 and m.num_bins + m.num_bins_left == 3, m
    assert {f for f in _live(p) if f.startswith("part=2/")} == stuck_files  # the stuck bin changed nothing
    assert m.num_files_removed == 2 * m.num_bins
    assert _rows_without(spark, p, 2) == intact
    assert _strays(p) == set() and not os.path.exists(os.path.join(p, STAGING_DIR))
    if in_processes:  # the bins ran in worker processes, none outlived the run
        assert len(pools) == 1 and pools[0].processes()
        assert all(proc.exitcode is not None for proc in pools[0].processes())
        # the stuck bin's process is killed, and said so, when that bin started within the budget (the rule
        # with a warm fork server)
        killed = [proc.exitcode for proc in pools[0].processes()].count(-signal.SIGKILL)
        said = sum("their processes are killed" in r.getMessage() for r in caplog.records)
        assert killed == said <= 1  # 0 only when, on a loaded machine, the budget ran out before it started


def test_max_failed_bins_beyond_one(spark, tmp_path):
    """Two unreadable files in two partitions: with --max-failed-bins 2 both fail and are reported while the
    other three commit (exit 1); with 1, the second failure fails the run and nothing is committed."""
    p = str(tmp_path / "t")
    _table(p, partitions=5)
    victims = [sorted(f for f in _live(p) if f.startswith(f"part={k}/"))[0] for k in (1, 3)]
    for victim in victims:
        with open(os.path.join(p, victim), "r+b") as fh:
            fh.write(b"garbage!")
    intact = _rows_without(spark, p, 1, 3)
    v0 = log_versions(p)[-1]
    res = CliRunner().invoke(cli, ["optimize", p, "--max-failed-bins", "1", "--max-threads", "1"])
    assert res.exit_code == 1 and any(v in res.stderr for v in victims), res.output
    assert log_versions(p)[-1] == v0 and _strays(p) == set()  # all or nothing beyond the allowance
    res = CliRunner().invoke(cli, ["optimize", p, "--max-failed-bins", "2", "--max-threads", "1", "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert sorted(f["partition"]["part"] for f in out["failedBins"]) == ["1", "3"]
    assert all("DataFileError" in f["error"] for f in out["failedBins"])
    assert out["numBins"] == 3 and len(out["committedVersions"]) == 1
    assert _files_per_partition(p) == Counter({0: 1, 1: 2, 2: 1, 3: 2, 4: 1})
    assert _rows_without(spark, p, 1, 3) == intact and len(intact[0]) == 6
    assert _strays(p) == set()


def test_concurrent_delete_adding_deletion_vectors_drops_only_that_bin(spark, tmp_path):
    """delta-spark DELETEs rows (deletion vectors) in one partition while we optimize: that bin is dropped (its
    rows stay deleted, never resurrected), the other bins commit after the DELETE."""
    p = str(tmp_path / "dv")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, part INT) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    for i in range(2):
        spark.sql(f"INSERT INTO delta.`{p}` SELECT id, CAST(id % 4 AS INT) FROM range({i * 40}, {i * 40 + 40}, 1, 1)")
    before = rows_spark(spark, p)
    v0 = log_versions(p)[-1]

    def delete(done, total, *_):
        if done == total:  # every bin is rewritten, nothing committed yet
            spark.sql(f"DELETE FROM delta.`{p}` WHERE part = 0 AND id % 3 = 0")

    m = optimize(spark, p, max_threads=1, progress=delete)
    history = DeltaTable(p).history(2)
    assert history[1]["operation"] == "DELETE" and history[0]["operation"] == "OPTIMIZE"
    assert any(a.get("deletionVector") for _, a in _adds(p, v0 + 1)), "the DELETE wrote deletion vectors"
    (ours,) = m.committed_versions
    assert ours == v0 + 2
    assert [d["partition"]["part"] for d in m.dropped_bins] == ["0"] and m.dropped_bins[0]["winningVersion"] == v0 + 1
    assert m.num_bins == 3 and _files_per_partition(p) == Counter({0: 2, 1: 1, 2: 1, 3: 1})
    expected = [r for r in before if not (r[1] == 0 and r[0] % 3 == 0)]
    assert len(expected) == len(before) - 7
    assert_same_rows(spark, p, expected)  # delta-spark, and deltalake's own scan (it reads deletion vectors)
    assert _strays(p) == set()


def _adds(p: str, version: int) -> list[tuple[int, dict]]:
    with open(os.path.join(p, "_delta_log", f"{version:020d}.json")) as fh:
        return [(version, a["add"]) for a in map(json.loads, fh) if "add" in a]
