"""OPTIMIZE (compaction) end to end, ported from delta-spark's OptimizeCompactionSuite,
OptimizeMetricsSuite and OptimizeConflictSuite (behaviour numbers from the reference, §5).

Every table is written by delta-spark (and, where it makes sense, by delta-rs), optimized by
``dbt_delta_optimize.optimize`` and read back by BOTH engines, row for row against what they
read before. File layouts are read through delta-rs's log replay (not through our snapshot
reader), so a wrong commit cannot hide behind our own code.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.engine.bin_rewriter import BinRewriter
from dbt_delta_optimize.engine.executor import STAGING_DIR
from dbt_delta_optimize.engine.results import metrics_row
from dbt_delta_optimize.errors import (
    DataFileError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPredicateError,
    NotADeltaTableError,
    TableNotFoundError,
)
from dbt_delta_optimize.plan.metrics import OptimizeMetrics
from tests.helpers import (
    assert_same_rows,
    data_files,
    deltalake_table,
    log_snapshot,
    log_versions,
    rows_deltars,
    rows_spark,
)

ENGINES = ["arrow", "spark"]
SPARK_VERSION_KEY = b"org.apache.spark.version"  # Spark writes it into every footer; pyarrow never does
HISTORY_METRIC_KEYS = {
    "numAddedFiles",
    "numAddedBytes",
    "numRemovedFiles",
    "numRemovedBytes",
    "minFileSize",
    "p25FileSize",
    "p50FileSize",
    "p75FileSize",
    "maxFileSize",
    "numDeletionVectorsRemoved",
}


# --------------------------------------------------------------------------- table builders
def spark_write(
    spark,
    path: str,
    n: int,
    files: int,
    exprs: Iterable[str],
    partition_by: Iterable[str] = (),
    mode: str = "append",
) -> None:
    """Write ``range(n)`` split into ``files`` contiguous slices (one file per slice and partition)."""
    df = spark.range(0, n, 1, files).selectExpr(*exprs)
    w = df.write.format("delta").mode(mode)
    pb = list(partition_by)
    if pb:
        w = w.partitionBy(*pb)
    w.save(path)


def rs_append(path: str, data: dict[str, Any], partition_by: list[str] | None = None, times: int = 1) -> None:
    """Append the same pyarrow table ``times`` times with delta-rs (one file per partition each time)."""
    t = pa.table(data)
    for _ in range(times):
        write_deltalake(path, t, partition_by=partition_by, mode="append")


def copy_table(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


# --------------------------------------------------------------------------- table inspection
def live_files(path: str) -> list[dict[str, Any]]:
    """Live add actions by delta-rs's replay: path, size and typed partition values."""
    t = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    pcols = [c for c in t.column_names if c.startswith("partition.")]
    out = []
    for r in t.to_pylist():
        out.append({"path": r["path"], "size": r["size_bytes"], "key": tuple(r[c] for c in pcols)})
    return out


def files_by_partition(path: str) -> dict[tuple, set[str]]:
    out: dict[tuple, set[str]] = {}
    for f in live_files(path):
        out.setdefault(f["key"], set()).add(f["path"])
    return out


def counts(path: str) -> dict[tuple, int]:
    return {k: len(v) for k, v in files_by_partition(path).items()}


def spark_file_count(spark, path: str) -> int:
    """Number of live files as delta-spark's own snapshot sees them."""
    return len(spark.read.format("delta").load(path).inputFiles())


def commit_actions(path: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def commit_info(path: str, version: int) -> dict[str, Any]:
    return next(a["commitInfo"] for a in commit_actions(path, version) if "commitInfo" in a)


def adds_removes(path: str, version: int) -> tuple[list[dict], list[dict]]:
    acts = commit_actions(path, version)
    return [a["add"] for a in acts if "add" in a], [a["remove"] for a in acts if "remove" in a]


def optimize_checked(spark, path: str, **kw: Any) -> OptimizeMetrics:
    """Run optimize; both engines must read exactly the rows delta-spark read before."""
    before = rows_spark(spark, path)
    assert rows_deltars(path) == before, "test setup: the two engines disagree before optimize"
    m = optimize(spark, path, **kw)
    assert isinstance(m, OptimizeMetrics)
    assert_same_rows(spark, path, before)
    return m


def assert_optimize_commit(path: str, version: int, removed: set[str] | None = None) -> None:
    """Version is an OPTIMIZE of ours: dataChange=false everywhere, removes = ``removed`` if given."""
    info = commit_info(path, version)
    assert info["operation"] == "OPTIMIZE"
    assert info["isolationLevel"] == "SnapshotIsolation"
    assert info["isBlindAppend"] is False
    adds, removes = adds_removes(path, version)
    assert adds and removes
    assert all(a["dataChange"] is False for a in adds + removes)
    assert all(a.get("stats") for a in adds), "every compacted file must carry stats"
    if removed is not None:
        assert {r["path"] for r in removes} == removed


# --------------------------------------------------------------------------- shared templates
@pytest.fixture(scope="module")
def template_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("templates")


@pytest.fixture(scope="module")
def five_parts(spark, template_dir):
    """delta-spark table: 5 partitions (part 0..4) with 2 files each, 20 rows."""
    p = str(template_dir / "five_parts")
    spark_write(spark, p, 20, 2, ["id", "id % 5 as part", "concat('v', id) as value"], ["part"])
    assert counts(p) == {(i,): 2 for i in range(5)}
    return p


@pytest.fixture(scope="module")
def two_cols(spark, template_dir):
    """delta-spark table partitioned by (date string, part int): 8 partitions with 2 files each."""
    p = str(template_dir / "two_cols")
    spark_write(
        spark,
        p,
        16,
        2,
        [
            "id",
            "CASE WHEN id % 2 = 0 THEN '2017-10-10' ELSE '2017-10-11' END AS date",
            "CAST((id % 8) DIV 2 AS INT) AS part",
            "concat('v', id) AS value",
        ],
        ["date", "part"],
    )
    assert set(counts(p).values()) == {2} and len(counts(p)) == 8
    return p


# =========================================================================== behaviour 1
@pytest.mark.parametrize("engine", ENGINES)
def test_unpartitioned_two_small_files_one_new_version(spark, tmp_path, engine):
    p = str(tmp_path / "t")
    spark_write(spark, p, 10, 2, ["id", "CAST(id AS STRING) AS value"])
    before = files_by_partition(p)[()]
    assert len(before) == 2
    versions = log_versions(p)

    m = optimize_checked(spark, p, rewrite_engine=engine)

    new_version = versions[-1] + 1
    assert log_versions(p) == [*versions, new_version], "exactly one new version"
    assert m.committed_versions == (new_version,)
    after = files_by_partition(p)[()]
    assert len(after) == 1 and not (after & before)
    assert spark_file_count(spark, p) == 1
    assert_optimize_commit(p, new_version, removed=before)
    assert (m.num_files_removed, m.num_files_added, m.num_bins, m.partitions_optimized) == (2, 1, 1, 1)


def test_unpartitioned_deltars_table(spark, tmp_path):
    p = str(tmp_path / "rs")
    rs_append(p, {"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", None, "c"]}, times=3)
    versions = log_versions(p)
    m = optimize_checked(spark, p)
    assert log_versions(p) == [*versions, versions[-1] + 1]
    assert len(files_by_partition(p)[()]) == 1
    assert (m.num_files_removed, m.num_files_added) == (3, 1)


def test_optimize_by_catalog_name(spark, tmp_path):
    # External table registered over a path.
    p = str(tmp_path / "ext")
    spark_write(spark, p, 10, 2, ["id", "CAST(id AS STRING) AS value"])
    spark.sql(f"CREATE TABLE ddo_opt_by_name USING delta LOCATION '{p}'")
    try:
        before = rows_spark(spark, p)
        v = log_versions(p)
        m = optimize(spark, "ddo_opt_by_name")
        assert log_versions(p) == [*v, v[-1] + 1]
        assert len(files_by_partition(p)[()]) == 1
        assert m.num_files_removed == 2
        assert_same_rows(spark, p, before)
        assert sorted(r.id for r in spark.table("ddo_opt_by_name").collect()) == list(range(10))
    finally:
        spark.sql("DROP TABLE IF EXISTS ddo_opt_by_name")

    # Managed table (saveAsTable), by qualified name.
    spark.range(0, 6, 1, 3).write.format("delta").saveAsTable("ddo_managed")
    try:
        loc = spark.sql("DESCRIBE DETAIL default.ddo_managed").collect()[0]["location"]
        loc = loc[len("file:") :] if loc.startswith("file:") else loc
        assert len(files_by_partition(loc)[()]) == 3
        before = rows_spark(spark, loc)
        m = optimize(spark, "default.ddo_managed")
        assert m.num_files_removed == 3 and m.num_files_added == 1
        assert len(files_by_partition(loc)[()]) == 1
        assert_same_rows(spark, loc, before)
        assert spark.sql("SELECT count(*) AS n FROM ddo_managed").collect()[0]["n"] == 6
    finally:
        spark.sql("DROP TABLE IF EXISTS ddo_managed")


# =========================================================================== behaviour 2
def test_no_optimize_job_threads_remain(spark, tmp_path, monkeypatch):
    p = str(tmp_path / "t")
    rs_append(p, {"id": pa.array([0, 1, 2], pa.int64()), "part": pa.array([0, 1, 2], pa.int64())}, ["part"], times=2)
    started: list[str] = []
    start = threading.Thread.start

    def recording_start(thread):  # every thread the run starts, however fast its bins end
        started.append(thread.name)
        return start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    m = optimize(spark, p, max_threads=3)
    monkeypatch.undo()
    assert m.num_bins == 3
    # The bins really ran in threads named OptimizeJob (so the check below is not vacuous) ...
    assert any(n.startswith("OptimizeJob") for n in started), started
    # ... and none of them is left running afterwards.
    assert [t.name for t in threading.enumerate() if t.name.startswith("OptimizeJob")] == []


# =========================================================================== behaviour 3
def test_predicate_on_non_partition_column_rejected(spark, tmp_path):
    p = str(tmp_path / "t")
    spark_write(spark, p, 8, 2, ["id % 2 AS id", "id AS value"], ["id"])
    log0, files0 = log_snapshot(p), data_files(p)
    with pytest.raises(InvalidPredicateError) as ei:
        optimize(spark, p, where="value < 4")
    assert (
        "Predicate references non-partition column 'value'. Only the partition columns may be referenced: [id]"
        in str(ei.value)
    )
    assert log_snapshot(p) == log0
    assert data_files(p) == files0


# =========================================================================== behaviour 4
@pytest.mark.parametrize("writer", ["delta-spark", "delta-rs"])
@pytest.mark.parametrize("engine", ENGINES)
def test_partitioned_every_partition_ends_with_one_file(spark, tmp_path, engine, writer):
    p = str(tmp_path / "t")
    if writer == "delta-spark":
        spark_write(spark, p, 12, 3, ["id", "id % 3 AS part", "concat('v', id) AS value"], ["part"])
    else:
        rs_append(
            p,
            {
                "id": pa.array([0, 1, 2, 3], pa.int64()),
                "part": pa.array([0, 1, 2, 0], pa.int64()),
                "value": ["a", "b", None, "d"],
            },
            ["part"],
            times=3,
        )
    before = files_by_partition(p)
    assert all(len(v) == 3 for v in before.values()) and len(before) == 3
    versions = log_versions(p)

    m = optimize_checked(spark, p, rewrite_engine=engine)

    assert log_versions(p) == [*versions, versions[-1] + 1], "one commit for all partitions"
    after = files_by_partition(p)
    assert set(after) == set(before)
    for key, paths in after.items():
        assert len(paths) == 1 and not (paths & before[key]), key
    assert spark_file_count(spark, p) == 3
    assert_optimize_commit(p, versions[-1] + 1, removed=set().union(*before.values()))
    assert (m.num_files_removed, m.num_files_added, m.partitions_optimized, m.num_bins) == (9, 3, 3, 3)


# =========================================================================== behaviour 6
def _large_small_table(spark, path: str, layout: str, writer: str) -> None:
    """Partition i holds one large file if layout[i] == 'L', else five 1-row files."""
    large = [i for i, c in enumerate(layout) if c == "L"]
    small = [i for i, c in enumerate(layout) if c == "S"]
    if writer == "delta-spark":
        if large:
            arr = ",".join(map(str, large))
            spark_write(
                spark,
                path,
                200 * len(large),
                1,
                [
                    "id",
                    f"element_at(array({arr}), CAST(id % {len(large)} AS INT) + 1) AS part",
                    "sha2(CAST(id AS STRING), 512) AS value",
                ],
                ["part"],
            )
        if small:
            arr = ",".join(map(str, small))
            spark_write(
                spark,
                path,
                5 * len(small),
                5,
                [
                    "id",
                    f"element_at(array({arr}), CAST(id % {len(small)} AS INT) + 1) AS part",
                    "CAST(id AS STRING) AS value",
                ],
                ["part"],
            )
    else:
        import hashlib

        if large:
            ids = list(range(200 * len(large)))
            rs_append(
                path,
                {
                    "id": pa.array(ids, pa.int64()),
                    "part": pa.array([large[i % len(large)] for i in ids], pa.int64()),
                    "value": [hashlib.sha512(str(i).encode()).hexdigest() for i in ids],
                },
                ["part"],
            )
        for k in range(5):
            rs_append(
                path,
                {
                    "id": pa.array([1000 * k + s for s in small], pa.int64()),
                    "part": pa.array(small, pa.int64()),
                    "value": [str(k)] * len(small),
                },
                ["part"],
            )


@pytest.mark.parametrize(
    "layout,writer",
    [("LSLS", "delta-spark"), ("SSL", "delta-rs"), ("LSS", "delta-rs"), ("SLLS", "delta-rs")],
)
def test_large_files_untouched_small_partitions_compacted(spark, tmp_path, layout, writer):
    min_size = 4096
    p = str(tmp_path / "t")
    _large_small_table(spark, p, layout, writer)
    files = live_files(p)
    before = files_by_partition(p)
    for i, c in enumerate(layout):
        sizes = [f["size"] for f in files if f["key"] == (i,)]
        if c == "L":
            assert len(sizes) == 1 and sizes[0] > min_size, "setup: the large file must not be a candidate"
        else:
            assert len(sizes) == 5 and max(sizes) < min_size
    versions = log_versions(p)

    m = optimize_checked(spark, p, min_file_size=min_size)

    assert log_versions(p) == [*versions, versions[-1] + 1], "a single commit"
    after = files_by_partition(p)
    for i, c in enumerate(layout):
        assert len(after[(i,)]) == 1
        if c == "L":
            assert after[(i,)] == before[(i,)], "single-file partitions are left untouched"
        else:
            assert not (after[(i,)] & before[(i,)])
    n_small, n_large = layout.count("S"), layout.count("L")
    assert m.num_bins == n_small and m.num_files_removed == 5 * n_small and m.num_files_added == n_small
    assert m.total_considered_files == 5 * n_small + n_large
    assert m.total_files_skipped == n_large


# =========================================================================== behaviour 7
@pytest.mark.parametrize("writer", ["delta-spark", "delta-rs"])
def test_where_compacts_only_matching_partition(spark, tmp_path, writer):
    p = str(tmp_path / "t")
    if writer == "delta-spark":
        spark_write(spark, p, 12, 3, ["id % 2 AS id", "id AS value"], ["id"])
    else:
        rs_append(
            p, {"id": pa.array([0, 1, 0, 1], pa.int64()), "value": pa.array([1, 2, 3, 4], pa.int64())}, ["id"], times=3
        )
    before = files_by_partition(p)
    assert len(before[(0,)]) == 3 and len(before[(1,)]) == 3
    versions = log_versions(p)

    m = optimize_checked(spark, p, where="id = 0")

    after = files_by_partition(p)
    assert len(after[(0,)]) == 1
    assert after[(1,)] == before[(1,)]
    assert log_versions(p) == [*versions, versions[-1] + 1]
    assert m.total_considered_files == 3 and m.partitions_optimized == 1 and m.num_files_removed == 3


# =========================================================================== behaviour 8
def test_null_and_empty_partition_values_share_the_null_partition(spark, tmp_path):
    p = str(tmp_path / "t")
    spark_write(
        spark,
        p,
        20,
        2,
        ["id", "CASE id % 4 WHEN 0 THEN 'a' WHEN 1 THEN 'b' WHEN 2 THEN NULL ELSE '' END AS part"],
        ["part"],
    )
    assert counts(p) == {("a",): 2, ("b",): 2, (None,): 2}

    optimize_checked(spark, p)

    assert counts(p) == {("a",): 1, ("b",): 1, (None,): 1}
    got = {
        r["part"]: r["n"]
        for r in spark.read.format("delta").load(p).groupBy("part").count().withColumnRenamed("count", "n").collect()
    }
    assert got == {"a": 5, "b": 5, None: 10}


def test_null_partition_deltars(spark, tmp_path):
    p = str(tmp_path / "t")
    rs_append(p, {"id": pa.array([1, 2, 3], pa.int64()), "part": ["a", None, None]}, ["part"], times=3)
    assert counts(p) == {("a",): 3, (None,): 3}
    optimize_checked(spark, p)
    assert counts(p) == {("a",): 1, (None,): 1}
    new = commit_actions(p, log_versions(p)[-1])
    null_adds = [a["add"] for a in new if "add" in a and a["add"]["partitionValues"]["part"] is None]
    assert len(null_adds) == 1 and json.loads(null_adds[0]["stats"])["numRecords"] == 6


def test_empty_string_partition_value_written_by_deltars_becomes_null(spark, tmp_path):
    """delta-rs logs "" for an empty-string value (delta-rs reads it as null, delta-spark as '').

    We compact "" and null together (both mean null to the protocol) and write the result as
    null, as delta-spark's own OPTIMIZE writes a "" partition; so neither engine sees a null
    become '' (the oracle suite checks this equals delta-spark's result).
    """
    p = str(tmp_path / "t")
    rs_append(p, {"id": pa.array([1, 2, 3], pa.int64()), "part": ["a", "", None]}, ["part"], times=2)
    spark_before = rows_spark(spark, p)
    rs_before = rows_deltars(p)
    assert sum(1 for r in spark_before if r[1] == "") == 2  # the two engines disagree before

    m = optimize(spark, p)

    assert m.num_bins == 2 and m.num_files_removed == 6
    assert rows_deltars(p) == rs_before
    # delta-spark now reads the former '' rows as null too, i.e. exactly what delta-rs reads.
    expected = sorted(((i, None if s == "" else s) for i, s in spark_before), key=repr)
    assert sorted(rows_spark(spark, p), key=repr) == expected == sorted(rs_before, key=repr)
    adds, _ = adds_removes(p, m.committed_versions[0])
    assert sorted(repr(a["partitionValues"]["part"]) for a in adds) == ["'a'", "None"]


def _our_jobs(spark) -> dict[int, tuple[str, int]]:
    """Spark's own record of the jobs our runs started: job id -> (job group, tasks)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    out = {}
    for i in range(jobs.size()):
        job = jobs.apply(i)
        group = job.jobGroup()
        if group.isDefined() and group.get().startswith("dbt-delta-optimize-"):
            out[job.jobId()] = (group.get(), job.numTasks())
    return out


def _four_partitions(p: str) -> None:
    n = 40
    rs_append(
        p,
        {"id": pa.array(range(n), pa.int64()), "part": pa.array([i % 4 for i in range(n)], pa.int64())},
        ["part"],
        times=3,
    )


def test_the_arrow_bins_of_a_batch_are_the_tasks_of_one_spark_job(spark, tmp_path):
    """Four partitions, four bins: one Spark job with four tasks (not one job per bin)."""
    p = str(tmp_path / "t")
    _four_partitions(p)
    before = rows_spark(spark, p)
    before_jobs = set(_our_jobs(spark))
    m = optimize_checked(spark, p, task_runner="spark")  # on a local master the driver would run them
    assert m.num_bins == 4 and m.num_files_removed == 12 and m.num_files_added == 4
    new = {j: v for j, v in _our_jobs(spark).items() if j not in before_jobs}
    assert len(new) == 1, new
    ((_group, tasks),) = new.values()
    assert tasks == 4
    assert m.total_scheduled_tasks == 4
    assert_same_rows(spark, p, before)


def test_on_a_local_master_the_driver_runs_the_arrow_bins_without_a_spark_job(spark, tmp_path):
    """The default on local[N]: the same bins, rewritten by the driver's threads; Spark runs no job for them."""
    p = str(tmp_path / "t")
    _four_partitions(p)
    before = rows_spark(spark, p)
    before_jobs = set(_our_jobs(spark))
    m = optimize_checked(spark, p)
    assert m.num_bins == 4 and m.num_files_removed == 12 and m.num_files_added == 4
    assert set(_our_jobs(spark)) == before_jobs
    assert_same_rows(spark, p, before)


# =========================================================================== behaviour 9 / 11
def test_two_partition_columns_and_predicate(spark, tmp_path, two_cols):
    p = copy_table(two_cols, str(tmp_path / "t"))
    before = files_by_partition(p)
    m = optimize_checked(spark, p, where="date='2017-10-10' AND part=3")
    after = files_by_partition(p)
    assert len(after[("2017-10-10", 3)]) == 1
    assert {k: v for k, v in after.items() if k != ("2017-10-10", 3)} == {
        k: v for k, v in before.items() if k != ("2017-10-10", 3)
    }
    assert m.partitions_optimized == 1 and m.total_considered_files == 2


def test_multiple_predicates_are_anded(spark, tmp_path, two_cols):
    p = copy_table(two_cols, str(tmp_path / "t"))
    before = files_by_partition(p)
    versions = log_versions(p)
    m = optimize_checked(spark, p, where=["date = '2017-10-10'", "part = 3"])
    after = files_by_partition(p)
    assert len(after[("2017-10-10", 3)]) == 1
    assert sum(1 for k in after if after[k] != before[k]) == 1
    assert m.num_files_removed == 2 and log_versions(p) == [*versions, versions[-1] + 1]
    # Both predicates are recorded, as delta-spark's chained .where() does.
    params = commit_info(p, versions[-1] + 1)["operationParameters"]
    assert len(json.loads(params["predicate"])) == 2


# =========================================================================== behaviour 10
@pytest.mark.parametrize("max_threads", [2, 1])
def test_bins_of_different_partitions_run_concurrently(spark, tmp_path, monkeypatch, max_threads):
    p = str(tmp_path / "t")
    rs_append(
        p,
        {"id": pa.array(range(10), pa.int64()), "part": pa.array([i % 2 for i in range(10)], pa.int64())},
        ["part"],
        times=10,
    )
    assert counts(p) == {(0,): 10, (1,): 10}
    intervals: list[tuple[float, float]] = []
    barrier = threading.Barrier(2, timeout=20)
    orig = BinRewriter.rewrite_with_spark

    def rewrite(self, *a, **kw):
        if max_threads == 2:
            barrier.wait()  # fails (BrokenBarrierError) unless both bins are in flight together
        start = time.monotonic()
        try:
            return orig(self, *a, **kw)
        finally:
            intervals.append((start, time.monotonic()))

    monkeypatch.setattr(BinRewriter, "rewrite_with_spark", rewrite)
    m = optimize_checked(spark, p, max_threads=max_threads, rewrite_engine="spark")
    assert m.num_bins == 2 and counts(p) == {(0,): 1, (1,): 1}
    (_a0, a1), (b0, _b1) = sorted(intervals)
    if max_threads == 2:
        assert b0 < a1, "the two bins' rewrites overlap in time"
    else:
        assert b0 >= a1, "max_threads=1 runs the bins one after the other"


# =========================================================================== behaviour 12 / 13
@pytest.mark.parametrize(
    "batch_size,where,commits,compacted",
    [
        (1, None, 5, {0, 1, 2, 3, 4}),
        ("1g", None, 1, {0, 1, 2, 3, 4}),
        (1, "part <= 1", 2, {0, 1}),
        ("1g", "part <= 1", 1, {0, 1}),
    ],
)
def test_batching_commits(spark, tmp_path, five_parts, batch_size, where, commits, compacted):
    p = copy_table(five_parts, str(tmp_path / "t"))
    before = files_by_partition(p)
    versions = log_versions(p)

    m = optimize_checked(spark, p, where=where, batch_size=batch_size)

    new_versions = list(range(versions[-1] + 1, versions[-1] + 1 + commits))
    assert log_versions(p) == versions + new_versions
    assert list(m.committed_versions) == new_versions
    assert m.num_batches == commits and m.num_bins == len(compacted)
    for v in new_versions:
        assert_optimize_commit(p, v)
        if batch_size == 1:  # one bin (2 files of one partition) per commit
            adds, removes = adds_removes(p, v)
            assert len(adds) == 1 and len(removes) == 2
    after = files_by_partition(p)
    for part in range(5):
        if part in compacted:
            assert len(after[(part,)]) == 1
        else:
            assert after[(part,)] == before[(part,)]


# =========================================================================== behaviour 14
def test_empty_partitioned_table_with_batching(spark, tmp_path):
    p = str(tmp_path / "t")
    spark.createDataFrame([], "id long, part int").write.format("delta").partitionBy("part").save(p)
    log0 = log_snapshot(p)
    m = optimize(spark, p, batch_size=1)
    assert log_snapshot(p) == log0, "no new version"
    assert rows_spark(spark, p) == [] and rows_deltars(p) == []
    assert (m.num_bins, m.num_batches, m.num_files_added, m.total_considered_files) == (0, 0, 0, 0)
    m = optimize(spark, p)
    assert m.num_batches == 1 and log_snapshot(p) == log0


# =========================================================================== behaviour 16
def craft_timestamp_table(spark, path: str) -> None:
    """Two files logged with ts '2024-01-01T00:00:00.000000Z' (delta-spark's format) and two copies
    of them logged with '2024-01-01 00:00:00': the same instant in two string formats."""
    spark_write(spark, path, 6, 2, ["id", "TIMESTAMP'2024-01-01 00:00:00' AS ts"], ["ts"])
    v0 = log_versions(path)[-1]
    adds, _ = adds_removes(path, v0)
    assert {a["partitionValues"]["ts"] for a in adds} == {"2024-01-01T00:00:00.000000Z"}
    lines = [
        {
            "commitInfo": {
                "timestamp": int(time.time() * 1000),
                "operation": "WRITE",
                "operationParameters": {"mode": "Append"},
                "readVersion": v0,
                "isBlindAppend": True,
            }
        }
    ]
    from urllib.parse import unquote

    for a in adds:
        d, name = a["path"].rsplit("/", 1)
        new_name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
        shutil.copyfile(os.path.join(path, unquote(d), name), os.path.join(path, unquote(d), new_name))
        add = dict(a, path=f"{d}/{new_name}", partitionValues={"ts": "2024-01-01 00:00:00"})
        lines.append({"add": add})
    with open(os.path.join(path, "_delta_log", f"{v0 + 1:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")


def test_timestamp_partition_values_in_two_formats_are_one_partition(spark, tmp_path):
    p = str(tmp_path / "t")
    craft_timestamp_table(spark, p)
    assert spark_file_count(spark, p) == 4
    assert len(rows_spark(spark, p)) == 12
    versions = log_versions(p)

    m = optimize_checked(spark, p)

    assert m.num_bins == 1 and m.num_files_removed == 4 and m.partitions_optimized == 1
    assert spark_file_count(spark, p) == 1
    assert log_versions(p) == [*versions, versions[-1] + 1]
    assert spark.read.format("delta").load(p).where("ts = TIMESTAMP'2024-01-01 00:00:00'").count() == 12


# =========================================================================== behaviours 25-29
def test_metrics_match_the_snapshot(spark, tmp_path, five_parts):
    p = copy_table(five_parts, str(tmp_path / "t"))
    start = live_files(p)
    m = optimize_checked(spark, p)
    end = live_files(p)
    start_paths = {f["path"] for f in start}
    added = [f["size"] for f in end if f["path"] not in start_paths]
    removed = [f["size"] for f in start]

    assert m.num_files_added == len(end) == len(added) == 5
    assert m.num_files_removed == len(start) == 10
    assert (m.files_added.min, m.files_added.max) == (min(added), max(added))
    assert (m.files_added.total_size, m.files_added.total_files) == (sum(added), len(added))
    assert m.files_added.avg == pytest.approx(sum(added) / len(added))
    assert (m.files_removed.min, m.files_removed.max) == (min(removed), max(removed))
    assert (m.files_removed.total_size, m.files_removed.total_files) == (sum(removed), len(removed))
    assert m.total_considered_files == 10 and m.total_files_skipped == 0
    assert m.partitions_optimized == 5 and m.num_bins == 5 and m.num_batches == 1
    assert m.num_table_columns == 3 and m.num_table_columns_with_stats == 3
    assert m.z_order_stats is None and m.deletion_vector_stats is None
    assert m.start_time_ms > 0 and m.end_time_ms >= m.start_time_ms
    assert m.total_cluster_parallelism == spark.sparkContext.defaultParallelism
    assert m.path == p

    row = metrics_row(m)
    assert row.path == p
    assert row.metrics.numFilesAdded == 5 and row.metrics.numFilesRemoved == 10
    assert row.metrics.filesAdded.totalSize == sum(added) and row.metrics.filesRemoved.min == min(removed)
    assert row.metrics.zOrderStats is None and row.metrics.numBatches == 1
    assert "committedVersions" not in row.metrics.asDict()  # ours, not delta-spark's schema

    d = json.loads(m.to_json())
    assert (
        d["numFilesAdded"] == 5
        and d["filesRemoved"]["totalFiles"] == 10
        and d["committedVersions"] == list(m.committed_versions)
    )


def test_history_operation_metrics_and_parameters(spark, tmp_path, five_parts):
    p = copy_table(five_parts, str(tmp_path / "t"))
    m = optimize(spark, p, where="part >= 1")
    (version,) = m.committed_versions
    h = spark.sql(f"DESCRIBE HISTORY delta.`{p}` LIMIT 1").collect()[0]
    assert h["version"] == version and h["operation"] == "OPTIMIZE"
    om = h["operationMetrics"]
    assert set(om) == HISTORY_METRIC_KEYS
    adds, removes = adds_removes(p, version)
    sizes = sorted(a["size"] for a in adds)
    n = len(sizes)
    assert n == 4
    assert om["numAddedFiles"] == "4" and om["numRemovedFiles"] == "8"
    assert om["numAddedBytes"] == str(sum(sizes))
    assert om["numRemovedBytes"] == str(sum(r["size"] for r in removes))
    assert om["minFileSize"] == str(sizes[0]) and om["maxFileSize"] == str(sizes[-1])
    assert (om["p25FileSize"], om["p50FileSize"], om["p75FileSize"]) == (
        str(sizes[n // 4]),
        str(sizes[n // 2]),
        str(sizes[n * 3 // 4]),
    )
    assert om["numDeletionVectorsRemoved"] == "0"
    params = h["operationParameters"]
    assert json.loads(params["predicate"]) == ["('part >= 1)"]  # Catalyst toString, as delta-spark records it
    assert params["zOrderBy"] == "[]" and params["auto"] == "false"
    assert h["isolationLevel"] == "SnapshotIsolation" and h["isBlindAppend"] is False


def test_second_optimize_is_a_noop(spark, tmp_path):
    p = str(tmp_path / "t")
    spark_write(spark, p, 10, 2, ["id", "CAST(id AS STRING) AS value"])
    first = optimize(spark, p)
    assert first.num_files_added == 1
    log1 = log_snapshot(p)

    m = optimize_checked(spark, p)

    assert log_snapshot(p) == log1, "no new commit"
    assert (m.num_files_added, m.num_files_removed) == (0, 0)
    assert m.files_added.min is None and m.files_added.max is None
    assert m.files_removed.min is None and m.files_removed.max is None
    assert (m.partitions_optimized, m.num_bins, m.num_batches) == (0, 0, 1)
    assert (m.total_considered_files, m.total_files_skipped) == (1, 1)
    assert m.z_order_stats is None and m.committed_versions == ()
    assert m.end_time_ms >= m.start_time_ms > 0


def test_num_table_columns_with_stats(spark, tmp_path):
    p = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (c1 INT, c2 INT, c3 STRING, c4 INT, c5 STRING) USING delta "
        "TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '3')"
    )
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (1, 2, 'a', 4, 'x'), (5, 6, 'b', 8, 'y')")
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (9, 10, 'c', 12, 'z')")
    m = optimize_checked(spark, p)
    assert m.num_table_columns == 5 and m.num_table_columns_with_stats == 3
    (add,), _ = adds_removes(p, m.committed_versions[0])
    stats = json.loads(add["stats"])
    assert set(stats["nullCount"]) == {"c1", "c2", "c3"} and stats["numRecords"] == 3


# =========================================================================== many types, both engines
MANY_TYPES_SQL = """
SELECT
  id,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(id AS INT) END AS i,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(id AS SHORT) END AS sh,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(id AS BYTE) END AS by,
  CASE WHEN id % 5 = 0 THEN NULL ELSE concat('string-value-longer-than-thirty-two-chars-', id) END AS str,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(id * 1.25 - 7 AS DECIMAL(10, 2)) END AS dec,
  CASE WHEN id % 6 = 5 THEN NULL ELSE date_add(DATE'2024-02-27', CAST(id AS INT)) END AS d,
  CASE WHEN id % 6 = 5 THEN NULL ELSE TIMESTAMP'2024-01-01 00:00:00.123456' + make_interval(0, 0, 0, CAST(id AS INT), 0, 0, id * 1.5) END AS ts,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(TIMESTAMP'1999-12-31 23:59:59.999999' + make_interval(0, 0, 0, 0, CAST(id AS INT), 0, 0) AS TIMESTAMP_NTZ) END AS tsn,
  CASE WHEN id % 6 = 5 THEN NULL ELSE id % 2 = 0 END AS flag,
  CASE WHEN id % 7 = 0 THEN double('NaN') WHEN id % 7 = 1 THEN NULL WHEN id % 7 = 2 THEN -0.0 ELSE id / 3.0 END AS dbl,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(id / 7.0 AS FLOAT) END AS fl,
  CASE WHEN id % 6 = 5 THEN NULL ELSE CAST(concat('bin', id) AS BINARY) END AS bin,
  CASE WHEN id % 6 = 5 THEN NULL ELSE named_struct('a', id, 'b', CASE WHEN id % 3 = 0 THEN NULL ELSE concat('x', id) END,
       'n', named_struct('c', id * 2.5)) END AS st,
  CASE WHEN id % 4 = 0 THEN NULL ELSE array(id, NULL, id + 1) END AS arr,
  CASE WHEN id % 4 = 1 THEN NULL ELSE map(concat('k', id), id, 'z', NULL) END AS mp,
  CASE WHEN id % 4 = 2 THEN NULL ELSE array(named_struct('q', CAST(id AS STRING))) END AS arr_st,
  id % 2 AS part
FROM range(0, 36, 1, 3)
"""


def _canon(v: Any) -> Any:
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, dict):
        return tuple(sorted((k, _canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_canon(x) for x in v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def canon_rows(table: pa.Table) -> list[tuple]:
    cols = sorted(table.column_names)
    return sorted((tuple(_canon(r[c]) for c in cols) for r in table.select(cols).to_pylist()), key=repr)


def canon_spark(spark, path: str) -> list[tuple]:
    return canon_rows(spark.read.format("delta").load(path).toArrow())


def canon_rs(path: str) -> list[tuple]:
    return canon_rows(deltalake_table(path))


def many_types_table(spark, path: str) -> None:
    spark.sql(MANY_TYPES_SQL).write.format("delta").partitionBy("part").save(path)


@pytest.mark.parametrize("engine", ENGINES)
def test_many_types_round_trip_both_engines(spark, tmp_path, caplog, engine):
    p = str(tmp_path / "t")
    many_types_table(spark, p)
    assert counts(p) == {(0,): 3, (1,): 3}
    spark_before, rs_before = canon_spark(spark, p), canon_rs(p)
    assert spark_before == rs_before and len(spark_before) == 36
    before = files_by_partition(p)

    with caplog.at_level(logging.WARNING, logger="dbt_delta_optimize"):
        m = optimize(spark, p, rewrite_engine=engine)

    assert m.num_files_added == 2 and m.num_files_removed == 6
    assert canon_spark(spark, p) == spark_before
    assert canon_rs(p) == rs_before
    assert not [r for r in caplog.records if "instead of Arrow" in r.getMessage()], "no fallback to Spark"
    new = [f for k, paths in files_by_partition(p).items() for f in paths if f not in before[k]]
    assert len(new) == 2
    for rel in new:
        meta = pq.ParquetFile(os.path.join(p, rel)).metadata.metadata or {}
        # pyarrow writes no Spark footer key: proves which engine really wrote the file
        assert (SPARK_VERSION_KEY in meta) == (engine == "spark"), rel


def test_arrow_is_the_default_engine(spark, tmp_path, caplog):
    p = str(tmp_path / "t")
    spark_write(spark, p, 8, 2, ["id", "id % 2 AS part"], ["part"])
    before = files_by_partition(p)
    with caplog.at_level(logging.WARNING, logger="dbt_delta_optimize"):
        optimize_checked(spark, p)
    assert not [r for r in caplog.records if "instead of Arrow" in r.getMessage()]
    for k, paths in files_by_partition(p).items():
        (rel,) = paths - before[k]
        meta = pq.ParquetFile(os.path.join(p, rel)).metadata.metadata or {}
        assert SPARK_VERSION_KEY not in meta


# =========================================================================== no stray files
@pytest.mark.parametrize("engine", ENGINES)
def test_only_new_part_files_and_one_commit_are_written(spark, tmp_path, engine):
    p = str(tmp_path / "t")
    spark_write(spark, p, 12, 3, ["id", "id % 2 AS part", "concat('v', id) AS value"], ["part"])
    files0, log0 = data_files(p), log_snapshot(p)
    m = optimize(spark, p, rewrite_engine=engine)
    (version,) = m.committed_versions
    from urllib.parse import unquote

    adds, _ = adds_removes(p, version)
    assert data_files(p) - files0 == {unquote(a["path"]) for a in adds}
    assert files0 <= data_files(p), "removed files stay until VACUUM"
    assert set(log_snapshot(p)) - set(log0) == {f"{version:020d}.json"}, "no .crc or other log files of ours"
    assert not os.path.exists(os.path.join(p, STAGING_DIR))
    assert not any(os.path.basename(f) == "_SUCCESS" or f.endswith(".crc") for f in data_files(p) - files0)


@pytest.mark.parametrize("engine", ENGINES)
def test_corrupt_input_file_aborts_without_commit_or_leftovers(spark, tmp_path, engine):
    p = str(tmp_path / "t")
    spark_write(spark, p, 12, 3, ["id", "id % 2 AS part", "concat('v', id) AS value"], ["part"])
    # Corrupt one file of the bin that runs second (bins run in partition order with max_threads=1),
    # so the first bin's output exists and must be cleaned up.
    victim = sorted(files_by_partition(p)[(1,)])[0]
    with open(os.path.join(p, victim), "r+b") as fh:
        fh.seek(0)
        fh.write(b"NOTPARQUET" * 20)
    crc = os.path.join(p, os.path.dirname(victim), "." + os.path.basename(victim) + ".crc")
    if os.path.exists(crc):
        os.unlink(crc)  # so Spark reports the bad Parquet, not a checksum mismatch
    files0, log0 = data_files(p), log_snapshot(p)
    with pytest.raises(DataFileError) as info:
        optimize(spark, p, rewrite_engine=engine, max_threads=1)
    assert info.value.path == victim and "not a Parquet file" in str(info.value)
    assert "\n" not in str(info.value) and "Py4J" not in str(info.value)
    assert log_snapshot(p) == log0
    assert data_files(p) == files0
    assert not os.path.exists(os.path.join(p, STAGING_DIR))


def test_failing_bin_leaves_no_commit_and_no_files(spark, tmp_path, monkeypatch, five_parts):
    p = copy_table(five_parts, str(tmp_path / "t"))
    files0, log0 = data_files(p), log_snapshot(p)
    before = rows_spark(spark, p)
    orig = BinRewriter.result  # where the driver takes each finished bin's outcome
    calls = []

    def rewrite(self, b, *a, **kw):
        calls.append(b)
        if len(calls) == 3:
            raise RuntimeError("boom in bin 3")
        return orig(self, b, *a, **kw)

    monkeypatch.setattr(BinRewriter, "result", rewrite)
    with pytest.raises(RuntimeError, match="boom in bin 3"):
        optimize(spark, p, max_threads=1)
    # Bins 1-2 finished (their files were written); the single worker may already have taken bin 4.
    assert len(calls) >= 3
    assert log_snapshot(p) == log0
    assert data_files(p) == files0, "the two finished bins' files are deleted"
    assert_same_rows(spark, p, before)


def test_failing_batch_keeps_earlier_batches(spark, tmp_path, monkeypatch, five_parts):
    """With batching, earlier batches are committed (delta-spark's incremental progress); the
    failing batch leaves nothing behind."""
    p = copy_table(five_parts, str(tmp_path / "t"))
    files0 = data_files(p)
    versions = log_versions(p)
    before = rows_spark(spark, p)
    orig = BinRewriter.result  # where the driver takes each finished bin's outcome
    calls = []

    def rewrite(self, b, *a, **kw):
        calls.append(b)
        if len(calls) == 2:
            raise RuntimeError("boom in batch 2")
        return orig(self, b, *a, **kw)

    monkeypatch.setattr(BinRewriter, "result", rewrite)
    with pytest.raises(RuntimeError, match="boom in batch 2"):
        optimize(spark, p, batch_size=1)
    assert log_versions(p) == [*versions, versions[-1] + 1]
    from urllib.parse import unquote

    adds, _ = adds_removes(p, versions[-1] + 1)
    assert data_files(p) - files0 == {unquote(a["path"]) for a in adds}
    assert_same_rows(spark, p, before)


# =========================================================================== concurrent writers
def test_concurrent_property_change_is_retried(spark, tmp_path, five_parts):
    p = copy_table(five_parts, str(tmp_path / "t"))
    before = rows_spark(spark, p)
    versions = log_versions(p)
    fired = []

    def progress(done, total, *_):
        if done == total and not fired:
            fired.append(done)
            spark.sql(f"ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('ddo.test' = 'concurrent')")

    m = optimize(spark, p, progress=progress)

    assert fired
    alter, ours = versions[-1] + 1, versions[-1] + 2
    assert log_versions(p) == [*versions, alter, ours]
    assert m.committed_versions == (ours,)
    assert commit_info(p, alter)["operation"] == "SET TBLPROPERTIES"
    assert_optimize_commit(p, ours)
    assert counts(p) == {(i,): 1 for i in range(5)}
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{p}`").collect()}
    assert props.get("ddo.test") == "concurrent", "the concurrent change survives our commit"
    assert_same_rows(spark, p, before)


def test_concurrent_delete_drops_only_the_bin_it_touched(spark, tmp_path, five_parts):
    """A DELETE lands while optimize runs: the bin of the deleted file's partition is dropped, the rest commit."""
    from urllib.parse import unquote

    p = copy_table(five_parts, str(tmp_path / "t"))
    versions = log_versions(p)
    files0 = data_files(p)

    def progress(done, total, *_):
        if done == total:
            spark.sql(f"DELETE FROM delta.`{p}` WHERE part = 2 AND id = 7")

    m = optimize(spark, p, progress=progress)

    delete, ours = versions[-1] + 1, versions[-1] + 2
    assert log_versions(p) == [*versions, delete, ours] and m.committed_versions == (ours,)
    assert commit_info(p, delete)["operation"] == "DELETE"
    assert_optimize_commit(p, ours)
    assert [d["partition"] for d in m.dropped_bins] == [{"part": "2"}] and m.dropped_bins[0]["winningVersion"] == delete
    assert m.num_bins == 4 and m.num_files_removed == 8
    after = counts(p)
    assert {k: v for k, v in after.items() if k != (2,)} == {(i,): 1 for i in (0, 1, 3, 4)}
    adds, _ = adds_removes(p, delete)
    spark_new = {unquote(a["path"]) for a in adds}
    spark_new |= {os.path.join(os.path.dirname(f), f".{os.path.basename(f)}.crc") for f in spark_new}
    ours_new = {unquote(a["path"]) for a in adds_removes(p, ours)[0]}
    assert data_files(p) - files0 == spark_new | ours_new, "the dropped bin's file is deleted, nothing else is left"
    expected = rows_spark(spark, copy_table(five_parts, str(tmp_path / "expected")))
    expected = [r for r in expected if r[0] != 7]
    assert len(expected) == 19
    assert_same_rows(spark, p, expected)  # the deleted row does not come back


# =========================================================================== bad input
@pytest.fixture(scope="module")
def bad_input_table(spark, template_dir):
    p = str(template_dir / "bad_input")
    spark_write(spark, p, 8, 2, ["id", "id % 2 AS part"], ["part"])
    return p


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"where": "id < 4"}, InvalidPredicateError, "non-partition column 'id'"),
        ({"where": "part = = 1"}, InvalidPredicateError, "Cannot parse"),
        ({"where": "part >"}, InvalidPredicateError, "Cannot parse"),
        ({"where": ""}, InvalidPredicateError, "Empty WHERE"),
        ({"where": "part IN (SELECT 1)"}, InvalidPredicateError, "subquery"),
        ({"where": "EXISTS (SELECT 1)"}, InvalidPredicateError, "subquery"),
        ({"where": "no_such_col = 1"}, InvalidPredicateError, "no_such_col"),
        ({"min_file_size": -1}, InvalidConfigError, "negative"),
        ({"max_file_size": "-5m"}, InvalidConfigError, "max_file_size"),
        ({"max_file_size": 0}, InvalidConfigError, "max_file_size"),
        ({"batch_size": 0}, InvalidConfigError, "batch_size"),
        ({"max_threads": 0}, InvalidConfigError, "max_threads"),
        ({"min_file_size": "12 parsecs"}, InvalidConfigError, "min_file_size"),
        ({"rewrite_engine": "duckdb"}, InvalidConfigError, "rewrite_engine"),
        ({"max_deleted_rows_ratio": 1.5}, InvalidConfigError, "max_deleted_rows_ratio"),
        ({"bogus_setting": 1}, TypeError, "bogus_setting"),  # typed keyword-only API: Python refuses it
        ({"zorder_by": "xy"}, InvalidArgumentError, "write ['xy']"),
        ({"where": 123}, InvalidArgumentError, "where must be a string"),
        ({"max_file_size": 2**70}, InvalidConfigError, "a long"),
        ({"where": "reflect('java.lang.Thread','sleep',120000L) IS NULL"}, InvalidPredicateError, "reflect"),
    ],
)
def test_bad_input_is_a_typed_error_and_writes_nothing(spark, bad_input_table, kwargs, error, message):
    p = bad_input_table
    log0, files0 = log_snapshot(p), data_files(p)
    with pytest.raises(error) as ei:
        optimize(spark, p, **kwargs)
    assert message in str(ei.value)
    assert log_snapshot(p) == log0 and data_files(p) == files0


def test_missing_path_is_table_not_found(spark, tmp_path):
    with pytest.raises(TableNotFoundError) as ei:
        optimize(spark, str(tmp_path / "nope"))
    assert type(ei.value) is TableNotFoundError and "does not exist" in str(ei.value)
    assert not os.path.exists(tmp_path / "nope")


def test_unknown_catalog_name_is_table_not_found(spark):
    with pytest.raises(TableNotFoundError) as ei:
        optimize(spark, "ddo_no_such_table")
    assert "ddo_no_such_table" in str(ei.value)


def test_parquet_directory_is_not_a_delta_table(spark, tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), str(d / "part-0.parquet"))
    pq.write_table(pa.table({"x": [3]}), str(d / "part-1.parquet"))
    with pytest.raises(NotADeltaTableError) as ei:
        optimize(spark, str(d))
    assert "_delta_log" in str(ei.value)
    assert sorted(os.listdir(d)) == ["part-0.parquet", "part-1.parquet"]


def test_dry_run_writes_nothing(spark, tmp_path, five_parts):
    p = copy_table(five_parts, str(tmp_path / "t"))
    log0, files0 = log_snapshot(p), data_files(p)
    plan = optimize(spark, p, dry_run=True, where="part < 3", batch_size=1)
    assert len(plan.bins) == 3 and len(plan.batches) == 3 and len(plan.files_to_rewrite) == 6
    assert log_snapshot(p) == log0 and data_files(p) == files0


def test_predicate_matching_no_partition_is_a_noop(spark, bad_input_table):
    log0 = log_snapshot(bad_input_table)
    m = optimize(spark, bad_input_table, where="part = 99")
    assert (m.total_considered_files, m.num_bins, m.num_files_removed, m.committed_versions) == (0, 0, 0, ())
    assert log_snapshot(bad_input_table) == log0


# =========================================================================== more concurrency
def test_concurrent_append_does_not_conflict(spark, tmp_path, five_parts):
    """Snapshot isolation: an append between plan and commit is rebased over, not a conflict."""
    p = copy_table(five_parts, str(tmp_path / "t"))
    before = rows_spark(spark, p)
    versions = log_versions(p)

    def progress(done, total, *_):
        if done == total:
            spark.sql(f"INSERT INTO delta.`{p}` VALUES (100, 0, 'appended')")

    m = optimize(spark, p, progress=progress)
    append, ours = versions[-1] + 1, versions[-1] + 2
    assert m.committed_versions == (ours,)
    assert commit_info(p, append)["operation"] == "WRITE"
    assert_optimize_commit(p, ours)
    assert len(files_by_partition(p)[(0,)]) == 2, "the compacted file plus the appended one"
    assert_same_rows(
        spark, p, sorted([*before, (100, 0, "appended")], key=lambda r: tuple((x is None, repr(x)) for x in r))
    )


def test_concurrent_delta_spark_optimize_of_one_partition_drops_that_bin(spark, tmp_path, five_parts):
    from urllib.parse import unquote

    p = copy_table(five_parts, str(tmp_path / "t"))
    before = rows_spark(spark, p)
    versions = log_versions(p)

    def progress(done, total, *_):
        if done == total:
            spark.sql(f"OPTIMIZE delta.`{p}` WHERE part = 4")

    m = optimize(spark, p, progress=progress)
    theirs, ours = versions[-1] + 1, versions[-1] + 2
    assert log_versions(p) == [*versions, theirs, ours] and m.committed_versions == (ours,)
    assert commit_info(p, theirs)["engineInfo"].startswith("Apache-Spark")
    assert [d["partition"] for d in m.dropped_bins] == [{"part": "4"}]
    assert "ConcurrentDeleteDeleteError" in m.dropped_bins[0]["reason"]
    assert counts(p) == {(i,): 1 for i in range(5)}
    assert {unquote(a["path"]).split("/")[0] for a in adds_removes(p, ours)[0]} == {f"part={i}" for i in range(4)}
    assert_same_rows(spark, p, before)


def test_concurrent_protocol_upgrade_to_unsupported_feature_aborts(spark, tmp_path, five_parts):
    from dbt_delta_optimize.errors import UnsupportedFeatureError

    p = copy_table(five_parts, str(tmp_path / "t"))
    before = rows_spark(spark, p)
    versions = log_versions(p)
    files0 = data_files(p)

    def progress(done, total, *_):
        if done == total:
            spark.sql(f"ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('delta.enableVariantShredding' = 'true')")

    with pytest.raises(UnsupportedFeatureError, match="variantShredding"):
        optimize(spark, p, progress=progress)
    assert log_versions(p) == [*versions, versions[-1] + 1]
    assert data_files(p) == files0
    assert rows_spark(spark, p) == before


# =========================================================================== paths and partition values
def test_checkpoint_written_at_interval_is_readable(spark, tmp_path):
    p = str(tmp_path / "t")
    rs_append(p, {"id": pa.array([1, 2], pa.int64()), "part": pa.array([0, 1], pa.int64())}, ["part"], times=10)
    assert log_versions(p)[-1] == 9
    m = optimize_checked(spark, p)
    assert m.committed_versions == (10,)
    assert os.path.exists(os.path.join(p, "_delta_log", f"{10:020d}.checkpoint.parquet"))
    assert counts(p) == {(0,): 1, (1,): 1}
    # delta-spark can keep writing on top of our commit and checkpoint
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (3, 0)")
    assert spark.read.format("delta").load(p).count() == 21
    assert len(rows_deltars(p)) == 21


@pytest.mark.parametrize("writer", ["delta-spark", "delta-rs"])
def test_special_characters_and_typed_partition_values(spark, tmp_path, writer):
    p = str(tmp_path / "t")
    specials = ["a b/c%d", "x=y&z?", "ünï €", "#[brackets]:colon"]
    if writer == "delta-spark":
        arr = ", ".join("'" + s.replace("'", "\\'") + "'" for s in specials)
        spark_write(
            spark,
            p,
            16,
            2,
            [
                "id",
                f"element_at(array({arr}), CAST(id % 4 AS INT) + 1) AS s",
                "date_add(DATE'2024-02-28', CAST(id % 2 AS INT)) AS d",
            ],
            ["s", "d"],
        )
    else:
        rs_append(
            p,
            {
                "id": pa.array(range(8), pa.int64()),
                "s": [specials[i % 4] for i in range(8)],
                "d": pa.array(
                    [datetime.date(2024, 2, 28) + datetime.timedelta(days=i % 2) for i in range(8)], pa.date32()
                ),
            },
            ["s", "d"],
            times=2,
        )
    before = counts(p)
    assert set(before.values()) == {2} and len(before) == 4
    m = optimize_checked(spark, p)
    assert m.num_bins == 4
    assert counts(p) == {k: 1 for k in before}
    from urllib.parse import unquote

    for a in adds_removes(p, m.committed_versions[0])[0]:
        assert os.path.exists(os.path.join(p, unquote(a["path"]))), a["path"]


def test_file_uri_table_path(spark, tmp_path):
    p = str(tmp_path / "t")
    rs_append(p, {"id": pa.array([1, 2], pa.int64())}, times=2)
    before = rows_spark(spark, p)
    m = optimize(spark, "file://" + p)
    assert m.num_files_removed == 2 and len(files_by_partition(p)[()]) == 1
    assert_same_rows(spark, p, before)


# =========================================================================== schema evolution
@pytest.mark.parametrize("engine", ENGINES)
def test_files_from_before_a_schema_change(spark, tmp_path, caplog, engine):
    """Older files lack a top-level column and a nested field added later (mergeSchema)."""
    p = str(tmp_path / "t")
    spark_write(spark, p, 6, 2, ["id", "id % 2 AS part", "named_struct('a', id) AS st"], ["part"])
    spark.range(6, 12, 1, 2).selectExpr(
        "id", "id % 2 AS part", "named_struct('a', id, 'b', concat('b', id)) AS st", "concat('new', id) AS extra"
    ).write.format("delta").mode("append").option("mergeSchema", "true").partitionBy("part").save(p)
    assert counts(p) == {(0,): 4, (1,): 4}
    before_spark, before_rs = canon_spark(spark, p), canon_rs(p)
    assert before_spark == before_rs
    assert sum(1 for r in before_spark if r[0] is None) == 6  # 'extra' (sorted first) is null in old rows

    with caplog.at_level(logging.WARNING, logger="dbt_delta_optimize"):
        m = optimize(spark, p, rewrite_engine=engine)

    assert m.num_files_removed == 8 and counts(p) == {(0,): 1, (1,): 1}
    assert canon_spark(spark, p) == before_spark
    assert canon_rs(p) == before_rs
    for a in adds_removes(p, m.committed_versions[0])[0]:
        st = json.loads(a["stats"])
        assert st["numRecords"] == 6 and st["nullCount"]["extra"] == 3 and st["nullCount"]["st"]["b"] == 3
