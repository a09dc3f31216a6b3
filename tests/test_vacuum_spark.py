"""VACUUM against delta-spark 4.4 on twin copies of one table: the same files are left, in full and lite mode.

The table has deletion vectors, change data (``_change_data``), a ``_``-prefixed partition column, our
OPTIMIZE's tombstones, an old orphan, a young orphan and hidden files. Each case copies it twice (mtimes
kept), runs delta-spark's ``VACUUM`` on one copy and ours on the other, and compares the files left.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from dbt_delta_optimize.ops.optimize import optimize
from dbt_delta_optimize.ops.vacuum import vacuum

CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
OLD = time.time() - 10 * 86400


def _files(root: str) -> set[str]:
    out = set()
    for d, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root)
            if not rel.startswith("_delta_log"):
                out.add(rel)
    return out


def _debris(path: str) -> None:
    for rel in ("_p=a/orphan-old.parquet", "orphan-old.parquet", "_change_data/stray-old.parquet"):
        p = Path(path, rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"old")
        os.utime(p, (OLD, OLD))
    Path(path, "deletion_vector_00000000-0000-0000-0000-000000000000.bin").write_bytes(b"dv")
    os.utime(Path(path, "deletion_vector_00000000-0000-0000-0000-000000000000.bin"), (OLD, OLD))
    Path(path, "_p=b/orphan-young.parquet").write_bytes(b"young")
    for rel in (".hidden", "_hidden/x.parquet", "_p=a/.hidden.crc", "_delta_log/.keep"):
        p = Path(path, rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"h")
        os.utime(p, (OLD, OLD))


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vacuum") / "t")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id INT, v STRING, _p STRING) USING delta PARTITIONED BY (_p) "
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true', 'delta.enableChangeDataFeed'='true')"
    )
    for i in range(3):
        rows = [(i * 10 + j, f"v{j}", "a" if j % 2 else "b") for j in range(10)]
        spark.createDataFrame(rows, "id INT, v STRING, _p STRING").write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 0")
    spark.sql(f"UPDATE delta.`{path}` SET v = 'u' WHERE id = 3")
    metrics = optimize(spark, path)
    assert metrics.num_files_removed > 0
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 7")
    _debris(path)
    return path


def _twins(table: str, tmp_path: Path) -> tuple[str, str]:
    a, b = str(tmp_path / "spark"), str(tmp_path / "ours")
    shutil.copytree(table, a)
    shutil.copytree(table, b)
    return a, b


def _spark_vacuum(spark, path: str, clause: str) -> None:
    spark.conf.set(CHECK, "false")
    try:
        spark.sql(f"VACUUM '{path}' {clause}").collect()
    finally:
        spark.conf.unset(CHECK)


def _rows(spark, path: str) -> list:
    return sorted(spark.read.format("delta").load(path).collect())


@pytest.mark.parametrize(
    ("mode", "clause", "retain"),
    [("full", "RETAIN 0 HOURS", "0h"), ("lite", "LITE RETAIN 0 HOURS", "0h"), ("full", "RETAIN 1 HOURS", "1h")],
)
def test_same_files_left_as_delta_spark(spark, table, tmp_path, mode, clause, retain):
    a, b = _twins(table, tmp_path)
    before = _files(a)
    _spark_vacuum(spark, a, clause)
    metrics = vacuum(spark, b, retain=retain, mode=mode, allow_short_retention=True)
    assert _files(b) == _files(a)
    assert metrics.files_deleted == len({f for f in before - _files(b) if not f.endswith(".crc")}) > 0
    assert _rows(spark, b) == _rows(spark, a)
    # hidden files and the log are never touched
    assert {".hidden", "_hidden/x.parquet", "_p=a/.hidden.crc"} <= _files(b)
    assert os.path.exists(os.path.join(b, "_delta_log", ".keep"))
    if retain == "0h":
        kinds = {c.reason for c in metrics.files}
        assert {"expired tombstone", "unused deletion vector", "change data"} <= kinds
        # our commits record the run as delta-spark's do
        ops = [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{b}` LIMIT 2").collect()]
        assert ops == ["VACUUM END", "VACUUM START"]


def test_default_retention_deletes_nothing_young(spark, table, tmp_path):
    a, b = _twins(table, tmp_path)
    before = _files(b)
    spark.sql(f"VACUUM '{a}'").collect()
    metrics = vacuum(spark, b)
    assert _files(b) == _files(a)
    gone = before - _files(b)
    assert gone == {"_p=a/orphan-old.parquet", "orphan-old.parquet", "_change_data/stray-old.parquet",
                    "deletion_vector_00000000-0000-0000-0000-000000000000.bin"}  # fmt: skip
    assert all(os.path.getmtime(os.path.join(table, g)) < time.time() - 7 * 86400 for g in gone)
    assert metrics.files_deleted == 4 and metrics.retention_ms == 7 * 24 * 3600 * 1000


def test_dry_run_deletes_nothing_and_lists_what_delta_spark_would_delete(spark, table, tmp_path):
    a, b = _twins(table, tmp_path)
    before = _files(b)
    spark.conf.set(CHECK, "false")
    try:
        listed = {r.path for r in spark.sql(f"VACUUM '{a}' RETAIN 0 HOURS DRY RUN").collect()}
    finally:
        spark.conf.unset(CHECK)
    metrics = vacuum(spark, b, retain="0h", allow_short_retention=True, dry_run=True)
    assert _files(b) == before
    ours = {os.path.join(b, f["path"]) for f in metrics.to_dict()["files"]}
    theirs = {p.removeprefix("file:").replace(a, b, 1) for p in listed if os.path.isfile(p.removeprefix("file:"))}
    assert ours == theirs
    assert all(f["bytes"] > 0 for f in metrics.to_dict()["files"])


def test_lite_after_a_pruned_log_refuses_like_delta_spark_then_works_after_a_full_run(spark, table, tmp_path):
    from deltalake import DeltaTable

    from dbt_delta_optimize.errors import InvalidArgumentError

    a, b = _twins(table, tmp_path)
    for path in (a, b):
        dt = DeltaTable(path)
        dt.create_checkpoint()
        for v in range(dt.version()):  # what log cleanup leaves: a checkpoint, no earlier commits
            os.remove(os.path.join(path, "_delta_log", f"{v:020d}.json"))
    with pytest.raises(Exception, match=r"DELTA_CANNOT_VACUUM_LITE|VACUUM FULL"):
        _spark_vacuum(spark, a, "LITE RETAIN 0 HOURS")
    before = _files(b)
    with pytest.raises(InvalidArgumentError, match="Please run VACUUM FULL"):
        vacuum(spark, b, retain="0h", mode="lite", allow_short_retention=True)
    assert _files(b) == before
    vacuum(spark, b, retain="0h", allow_short_retention=True)
    spark.sql(f"DELETE FROM delta.`{b}` WHERE id = 11")  # a new tombstone for lite to find
    spark.sql(f"DELETE FROM delta.`{b}` WHERE id = 12")
    time.sleep(1)
    # ours works again from the full run, and so does delta-spark's lite (it reads our _last_vacuum_info)
    c = str(tmp_path / "spark-lite")
    shutil.copytree(b, c)
    metrics = vacuum(spark, b, retain="0h", mode="lite", allow_short_retention=True)
    _spark_vacuum(spark, c, "LITE RETAIN 0 HOURS")
    assert _files(b) == _files(c)
    assert metrics.eligible_start_version is not None


def test_a_catalog_table_and_a_file_uri_vacuum_as_its_path_does(spark, table, tmp_path):
    """A catalog name resolves to a ``file:`` URI (as dbt's tables do): the plan is the path's, file for file."""
    from dbt_delta_optimize.ops.table import open_table

    a, b = _twins(table, tmp_path)
    name = f"vacuum_by_name_{os.getpid()}"
    spark.sql(f"CREATE TABLE {name} USING delta LOCATION '{b}'")
    try:
        by_path = vacuum(spark, a, retain="0h", allow_short_retention=True, dry_run=True)
        expected = sorted(f.path for f in by_path.files)
        assert expected
        for given in (name, f"file:{b}", open_table(name, spark=spark)):
            plan = vacuum(spark, given, retain="0h", allow_short_retention=True, dry_run=True)
            assert sorted(f.path for f in plan.files) == expected, given
        done = vacuum(spark, name, retain="0h", allow_short_retention=True)
        assert done.files_deleted == len(expected) and not set(expected) & _files(b)
        assert _rows(spark, b) == _rows(spark, a)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


# ----------------------------------------------------------------------------- the cluster path (engine/vacuum_job)
def _twin(src: str, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def test_forced_spark_runner_lists_and_deletes_as_spark_jobs(spark, table, tmp_path, monkeypatch):
    """``task_runner="spark"`` on the local master: real Spark jobs (seen by the status tracker), the same plan
    and the same files left as the driver's threads."""
    from dbt_delta_optimize.engine.spark_engine import SparkEngine

    groups: list[str] = []
    original = SparkEngine.job_group

    def spy(self, group, description):  # type: ignore[no-untyped-def]
        groups.append(group)
        return original(self, group, description)

    monkeypatch.setattr(SparkEngine, "job_group", spy)
    a, b = _twin(table, tmp_path / "driver"), _twin(table, tmp_path / "spark")
    ours = vacuum(spark, a, retain="0h", allow_short_retention=True, task_runner="driver")
    assert (ours.listed_by, ours.deleted_by) == ("driver", "driver") and not groups
    dry = vacuum(spark, b, retain="0h", allow_short_retention=True, dry_run=True, task_runner="spark")
    assert dry.listed_by == "spark" and dry.files == ours.files and dry.files_listed == ours.files_listed
    done = vacuum(spark, b, retain="0h", allow_short_retention=True, task_runner="spark")
    assert (done.listed_by, done.deleted_by) == ("spark", "spark")
    assert (done.files_deleted, done.bytes_deleted, done.folders_deleted) == (
        ours.files_deleted,
        ours.bytes_deleted,
        ours.folders_deleted,
    )
    assert done.files_deleted > 0 and _files(b) == _files(a)
    tracker = spark.sparkContext.statusTracker()
    assert [g.split("-")[2] for g in groups] == ["list", "list", "delete"]
    for g in groups:
        jobs = tracker.getJobIdsForGroup(g)
        assert jobs and all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in jobs), g


@pytest.mark.slow
def test_standalone_cluster_vacuum_leaves_what_the_driver_and_delta_spark_leave(
    standalone_cluster,
    spark,
    table,
    tmp_path,
):
    """spark-submit's VACUUM lists and deletes on the executors (which lack the package: it is shipped)."""
    import json

    from tests.servers import EXECUTOR_PYTHON
    from tests.test_cluster import job_json, submit

    a, b, c = (_twin(table, tmp_path / n) for n in ("delta_spark", "cluster", "driver"))
    before = _files(b)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:  # spark-submit waits on its JVM meanwhile: the two overlap
        submitted = pool.submit(
            submit, standalone_cluster, "-v", "vacuum", b, "--retain", "0h", "--allow-short-retention", "--json"
        )
        _spark_vacuum(spark, a, "RETAIN 0 HOURS")
        local = vacuum(None, c, retain="0h", allow_short_retention=True)  # the local session: the driver's threads
        proc = submitted.result()
    metrics = job_json(proc.stdout)

    assert (metrics["listedBy"], metrics["deletedBy"]) == ("spark", "spark"), metrics
    assert (local.listed_by, local.deleted_by) == ("driver", "driver")
    assert _files(b) == _files(a) == _files(c) and _files(b) != before
    assert metrics["filesDeleted"] == local.files_deleted > 0 and metrics["bytesDeleted"] == local.bytes_deleted
    assert metrics["filesListed"] == local.files_listed and metrics["foldersDeleted"] == local.folders_deleted
    out = " ".join(proc.stdout.split())  # rich wraps the CLI's log lines
    # one task per top-level prefix (the two partitions and _change_data), each on the executors' Python
    listed = [x for x in out.split("vacuum: ")[1:] if " listed by " in x]
    assert sorted(x.split(" listed by ")[0] for x in listed) == ["_change_data", "_p=a", "_p=b"], out[-3000:]
    assert all(x.split(" listed by ")[1].startswith(EXECUTOR_PYTHON) for x in listed), out[-3000:]
    assert "got no listing from the Spark job" not in out and "got no outcome" not in out
    assert ".zip/dbt_delta_optimize/__init__.py" in out  # the package this run shipped
    ops = [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{b}` LIMIT 2").collect()]
    assert ops == ["VACUUM END", "VACUUM START"]
    assert json.loads(json.dumps(metrics))["readVersion"] == local.read_version


def test_in_commit_timestamps_find_the_commit_outside_the_retention_by_binary_search(spark, tmp_path, monkeypatch):
    """On a delta-spark table with in-commit timestamps, the newest commit at or before a time is the one its
    commitInfo's inCommitTimestamp says (read here commit by commit), found reading about log2(n) commits."""
    import json

    from dbt_delta_optimize.delta.snapshot import load_snapshot
    from dbt_delta_optimize.delta.storage import LocalStorage
    from dbt_delta_optimize.delta.vacuum_log import LogReads
    from dbt_delta_optimize.ops import vacuum as ops_vacuum

    path = str(tmp_path / "ict")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id INT) USING delta TBLPROPERTIES ('delta.enableInCommitTimestamps'='true')"
    )
    for i in range(11):
        spark.createDataFrame([(i,)], "id INT").write.format("delta").mode("append").save(path)
    log = Path(path, "_delta_log")
    ict = {}
    for f in sorted(log.glob("*.json")):
        info = json.loads(f.read_text().splitlines()[0])["commitInfo"]
        ict[int(f.name.split(".")[0])] = info["inCommitTimestamp"]
    assert len(ict) == 12 and list(ict.values()) == sorted(ict.values())
    snapshot = load_snapshot(path)
    reads_made: list[str] = []
    original = LocalStorage.read_bytes

    def counted(self, p):
        reads_made.append(p)
        return original(self, p)

    monkeypatch.setattr(LocalStorage, "read_bytes", counted)
    for version, ts in ict.items():
        for t, expected in ((ts, version), (ts - 1, version - 1 if version > 0 else None)):
            reads_made.clear()
            found = ops_vacuum._outside(snapshot, t, LogReads(LocalStorage(), snapshot.location))
            assert found == expected, (version, t)
            assert len(reads_made) <= 6  # 12 commits: log2 + 2, not all 12


def test_in_commit_timestamps_enabled_later_split_the_search_at_the_enablement(spark, tmp_path):
    """Before the enablement the commit files' times count (monotonized), from it on the in-commit timestamps:
    a time between them lands on the right side, as in DeltaHistoryManager.getActiveCommitAtTime."""
    import json

    from dbt_delta_optimize.delta.in_commit_timestamps import enablement
    from dbt_delta_optimize.delta.snapshot import load_snapshot
    from dbt_delta_optimize.delta.storage import LocalStorage
    from dbt_delta_optimize.delta.vacuum_log import LogReads
    from dbt_delta_optimize.ops import vacuum as ops_vacuum

    path = str(tmp_path / "later")
    for i in range(3):
        spark.createDataFrame([(i,)], "id INT").write.format("delta").mode("append").save(path)
    log = Path(path, "_delta_log")
    old = time.time() - 3600
    for v in range(3):  # the files' times an hour ago, a second apart
        os.utime(log / f"{v:020d}.json", (old + v, old + v))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableInCommitTimestamps'='true')")
    for i in range(3):
        spark.createDataFrame([(i,)], "id INT").write.format("delta").mode("append").save(path)
    snapshot = load_snapshot(path)
    found = enablement(snapshot.metadata)
    assert found is not None and found[0] == 3
    ict = {v: json.loads((log / f"{v:020d}.json").read_text().splitlines()[0])["commitInfo"]["inCommitTimestamp"]
           for v in range(3, 6)}  # fmt: skip

    def outside(t: int) -> int | None:
        return ops_vacuum._outside(snapshot, t, LogReads(LocalStorage(), snapshot.location))

    assert outside(int(old * 1000) - 1) is None
    assert outside(int(old * 1000) + 1000) == 1  # by the files' times
    assert outside(found[1] - 1) == 2  # after the last file time, before the enablement
    assert outside(found[1]) == 3
    assert outside(ict[5] - 1) == 4 and outside(ict[5]) == 5
