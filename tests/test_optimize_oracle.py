"""delta-spark 4.4's own OPTIMIZE as the oracle.

Each test copies one delta-spark-written table twice (shutil.copytree), runs our optimize on
one copy and ``OPTIMIZE`` (SQL or the DeltaTable API) on the other, with the same session
confs, and compares what each committed: the removed files, the file count per partition,
each new file's stats, the commitInfo and the returned metrics; and the rows both engines read.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.engine.results import metrics_row
from tests.helpers import log_versions, rows_deltars, rows_spark
from tests.test_optimize import (
    adds_removes,
    canon_rs,
    canon_spark,
    commit_info,
    counts,
    craft_timestamp_table,
    live_files,
    many_types_table,
    rs_append,
    spark_write,
)

CONF = "spark.databricks.delta.optimize."
MIN_SIZE = 16384

#: Fields delta-spark leaves unset or that depend on the writer, not on OPTIMIZE's decisions.
WRITER_DEPENDENT = {"filesAdded", "startTimeMs", "endTimeMs", "totalScheduledTasks"}


@contextmanager
def session_conf(spark, **confs: str) -> Iterator[None]:
    old = {k: spark.conf.get(CONF + k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(CONF + k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(CONF + k)
            else:
                spark.conf.set(CONF + k, v)


def two_copies(src: str, tmp_path) -> tuple[str, str]:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    return ours, theirs


def spark_optimize(spark, path: str, where: str | None = None):
    sql = f"OPTIMIZE delta.`{path}`" + (f" WHERE {where}" if where else "")
    return spark.sql(sql).collect()[0]


def new_versions(path: str, before: list[int]) -> list[int]:
    return [v for v in log_versions(path) if v not in before]


def stats_by_partition(path: str, version: int) -> dict[str, dict[str, Any]]:
    adds, _ = adds_removes(path, version)
    out = {}
    for a in adds:
        key = json.dumps(a["partitionValues"], sort_keys=True)
        assert key not in out, "one new file per partition expected"
        out[key] = json.loads(a["stats"])
    return out


def removed_paths(path: str, versions: list[int]) -> set[str]:
    return {r["path"] for v in versions for r in adds_removes(path, v)[1]}


def assert_same_stats(ours: str, v_ours: int, theirs: str, v_theirs: int) -> None:
    mine, ref = stats_by_partition(ours, v_ours), stats_by_partition(theirs, v_theirs)
    assert set(mine) == set(ref), "new files in the same partitions"
    for key in ref:
        for field in ("numRecords", "minValues", "maxValues", "nullCount"):
            assert mine[key].get(field) == ref[key].get(field), f"{field} of partition {key}"
        assert mine[key] == ref[key], f"stats of partition {key}"


def assert_same_metrics(ours_row, theirs_row) -> None:
    mine, ref = ours_row.metrics.asDict(recursive=True), theirs_row.metrics.asDict(recursive=True)
    assert list(ours_row.metrics.__fields__) == list(theirs_row.metrics.__fields__), "same struct fields, same order"
    for k in ref:
        if k in WRITER_DEPENDENT:
            continue
        assert mine[k] == ref[k], k
    assert mine["filesAdded"]["totalFiles"] == ref["filesAdded"]["totalFiles"]
    assert ref["endTimeMs"] == 0 and mine["endTimeMs"] >= mine["startTimeMs"] > 0  # we fill what delta-spark leaves 0


def assert_same_commit_info(ours: str, v_ours: int, theirs: str, v_theirs: int) -> None:
    mine, ref = commit_info(ours, v_ours), commit_info(theirs, v_theirs)
    assert mine["operation"] == ref["operation"] == "OPTIMIZE"
    assert mine["operationParameters"] == ref["operationParameters"]
    assert mine["isolationLevel"] == ref["isolationLevel"] == "SnapshotIsolation"
    assert mine["isBlindAppend"] == ref["isBlindAppend"] is False
    assert set(mine["operationMetrics"]) == set(ref["operationMetrics"])
    for k in ("numAddedFiles", "numRemovedFiles", "numRemovedBytes", "numDeletionVectorsRemoved"):
        assert mine["operationMetrics"][k] == ref["operationMetrics"][k], k


# --------------------------------------------------------------------------- the main oracle table
@pytest.fixture(scope="module")
def oracle_table(spark, tmp_path_factory):
    """Partitions 0, 1: three small files each; 2: a single small file; 3: three small files and
    one file above MIN_SIZE. Long strings (> 32 chars, truncated in stats), timestamps, decimals,
    a nested struct and nulls."""
    p = str(tmp_path_factory.mktemp("oracle") / "t")
    cols = [
        "id",
        "CASE WHEN id % 7 = 3 THEN NULL ELSE concat('a-string-that-is-longer-than-32-characters-', id) END AS name",
        "TIMESTAMP'2024-03-01 12:00:00.654321' + make_interval(0, 0, 0, CAST(id AS INT), 0, 0, id * 0.25) AS ts",
        "CAST(id * 3.125 - 20 AS DECIMAL(12, 3)) AS amount",
        "named_struct('a', id, 'b', CASE WHEN id % 2 = 0 THEN NULL ELSE concat('b', repeat('x', 40), id) END, "
        "  'inner', named_struct('c', id / 4.0)) AS st",
        "CASE WHEN id % 5 = 0 THEN NULL ELSE id % 3 = 0 END AS flag",
    ]
    spark_write(spark, p, 45, 3, [*cols, "element_at(array(0, 1, 3), CAST(id % 3 AS INT) + 1) AS part"], ["part"])
    spark_write(spark, p, 5, 1, [*cols, "2 AS part"], ["part"])
    big = [
        c
        if not c.endswith(" AS name")
        else "concat(sha2(CAST(id AS STRING), 512), sha2(CAST(id + 1 AS STRING), 512)) AS name"
        for c in cols
    ]
    spark_write(spark, p, 300, 1, [*big, "3 AS part"], ["part"])
    assert counts(p) == {(0,): 3, (1,): 3, (2,): 1, (3,): 4}
    large = [f for f in live_files(p) if f["size"] >= MIN_SIZE]
    assert len(large) == 1 and large[0]["key"] == (3,), "exactly one file above the minimum size, in partition 3"
    return p


def test_same_decisions_stats_and_metrics_as_delta_spark(spark, tmp_path, oracle_table):
    ours, theirs = two_copies(oracle_table, tmp_path)
    v0 = log_versions(ours)
    before_spark, before_rs = canon_spark(spark, ours), canon_rs(ours)
    assert before_spark == before_rs

    with session_conf(spark, minFileSize=str(MIN_SIZE)):
        mine = optimize(spark, ours)  # the session conf, not an override: both read the same setting
        ref = spark_optimize(spark, theirs)

    (vo,), (vt,) = new_versions(ours, v0), new_versions(theirs, v0)
    assert removed_paths(ours, [vo]) == removed_paths(theirs, [vt])
    assert counts(ours) == counts(theirs) == {(0,): 1, (1,): 1, (2,): 1, (3,): 2}
    assert_same_stats(ours, vo, theirs, vt)
    assert_same_commit_info(ours, vo, theirs, vt)
    assert_same_metrics(metrics_row(mine), ref)
    for path in (ours, theirs):
        assert canon_spark(spark, path) == before_spark
        assert canon_rs(path) == before_rs


def test_chained_where_predicates_match_delta_spark(spark, tmp_path, oracle_table):
    from delta.tables import DeltaTable as SparkDeltaTable

    ours, theirs = two_copies(oracle_table, tmp_path)
    v0 = log_versions(ours)
    with session_conf(spark, minFileSize=str(MIN_SIZE)):
        mine = optimize(spark, ours, where=["part >= 1", "part < 3"])
        ref = (
            SparkDeltaTable.forPath(spark, theirs)
            .optimize()
            .where("part >= 1")
            .where("part < 3")
            .executeCompaction()
            .collect()[0]
        )
    (vo,), (vt,) = new_versions(ours, v0), new_versions(theirs, v0)
    assert removed_paths(ours, [vo]) == removed_paths(theirs, [vt])
    assert counts(ours) == counts(theirs) == {(0,): 3, (1,): 1, (2,): 1, (3,): 4}
    assert_same_commit_info(ours, vo, theirs, vt)  # includes the recorded predicate strings
    assert_same_metrics(metrics_row(mine), ref)
    assert_same_stats(ours, vo, theirs, vt)


@pytest.mark.parametrize("batch_size", ["1", "1g"])
def test_batches_match_delta_spark(spark, tmp_path, batch_size):
    src = str(tmp_path / "src")
    spark_write(
        spark, src, 20, 2, ["id", "id % 5 AS part", "concat('v', repeat('w', CAST(id AS INT)))  AS value"], ["part"]
    )
    ours, theirs = two_copies(src, tmp_path)
    v0 = log_versions(ours)
    with session_conf(spark, batchSize=batch_size):
        mine = optimize(spark, ours)
        ref = spark_optimize(spark, theirs)
    vo, vt = new_versions(ours, v0), new_versions(theirs, v0)
    assert len(vo) == len(vt) == (5 if batch_size == "1" else 1)
    per_commit = lambda path, vs: {frozenset(r["path"] for r in adds_removes(path, v)[1]) for v in vs}  # noqa: E731
    assert per_commit(ours, vo) == per_commit(theirs, vt), "the same bins in the same commits"
    assert mine.num_batches == ref.metrics.numBatches == len(vt)
    assert_same_metrics(metrics_row(mine), ref)


def test_timestamp_formats_match_delta_spark(spark, tmp_path):
    src = str(tmp_path / "src")
    craft_timestamp_table(spark, src)
    ours, theirs = two_copies(src, tmp_path)
    before = rows_spark(spark, ours)
    mine = optimize(spark, ours)
    ref = spark_optimize(spark, theirs)
    assert mine.num_files_removed == ref.metrics.numFilesRemoved
    assert mine.num_files_added == ref.metrics.numFilesAdded
    assert counts(ours) == counts(theirs)
    assert rows_spark(spark, ours) == rows_spark(spark, theirs) == before


def test_empty_string_partition_from_deltars_matches_delta_spark(spark, tmp_path):
    """delta-rs logs "" partition values; delta-spark reads them as '' and compacts them into a
    file it logs as null. Our result must read the same as delta-spark's in both engines (we put
    "" and null into one file; delta-spark makes two, which is the one allowed difference)."""
    src = str(tmp_path / "src")
    rs_append(src, {"id": pa.array([1, 2, 3], pa.int64()), "part": ["a", "", None]}, ["part"], times=3)
    ours, theirs = two_copies(src, tmp_path)
    optimize(spark, ours)
    spark_optimize(spark, theirs)
    assert rows_spark(spark, ours) == rows_spark(spark, theirs)
    assert rows_deltars(ours) == rows_deltars(theirs)
    assert counts(ours) == {("a",): 1, (None,): 1}
    assert counts(theirs) == {("a",): 1, (None,): 2}


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_many_types_stats_match_delta_spark(spark, tmp_path, engine):
    src = str(tmp_path / "src")
    many_types_table(spark, src)
    ours, theirs = two_copies(src, tmp_path)
    v0 = log_versions(ours)
    before = canon_spark(spark, ours)
    mine = optimize(spark, ours, rewrite_engine=engine)
    ref = spark_optimize(spark, theirs)
    (vo,), (vt,) = new_versions(ours, v0), new_versions(theirs, v0)
    assert removed_paths(ours, [vo]) == removed_paths(theirs, [vt])
    assert_same_stats(ours, vo, theirs, vt)
    assert_same_metrics(metrics_row(mine), ref)
    assert canon_spark(spark, ours) == canon_spark(spark, theirs) == before
    assert canon_rs(ours) == canon_rs(theirs)


def test_max_file_size_splits_a_partition_into_bins_like_delta_spark(spark, tmp_path):
    src = str(tmp_path / "src")
    spark_write(spark, src, 24, 6, ["id", "id % 2 AS part", "concat('v', id) AS value"], ["part"])
    sizes = [f["size"] for f in live_files(src)]
    assert len(sizes) == 12
    max_size = 2 * max(sizes) + 10  # two files fit in a bin, three never do
    assert 3 * min(sizes) > max_size
    ours, theirs = two_copies(src, tmp_path)
    v0 = log_versions(ours)
    before = rows_spark(spark, ours)
    with session_conf(spark, maxFileSize=str(max_size)):
        mine = optimize(spark, ours)
        ref = spark_optimize(spark, theirs)
    (vo,), (vt,) = new_versions(ours, v0), new_versions(theirs, v0)
    assert removed_paths(ours, [vo]) == removed_paths(theirs, [vt])
    assert counts(ours) == counts(theirs) == {(0,): 3, (1,): 3}
    assert mine.num_bins == ref.metrics.numBins == 6
    assert_same_metrics(metrics_row(mine), ref)
    assert rows_spark(spark, ours) == rows_spark(spark, theirs) == before
