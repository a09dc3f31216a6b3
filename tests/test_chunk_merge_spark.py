"""The chunk merge end to end: a table delta-spark wrote, compacted by our OPTIMIZE with its pages joined.

The same table is compacted twice, once with the merge (the default) and once with the byte copies off,
which re-encodes every value. Both results are read back by delta-spark and by delta-rs and compared
row for row with the table before; the add actions' statistics of the two runs are the same; and
delta-spark's own OPTIMIZE rewrites the merged files after another append.
"""

from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from dbt_delta_optimize.api import optimize
from tests.test_row_group_copy import assert_same_rows, rows_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: A flat table as dbt models make them: ids, uuids and measures (pages Spark writes PLAIN, joined), low
#: cardinality labels and dates (dictionary pages, re-encoded), INT96 timestamps and integer decimals
#: (another physical type than the output's, re-encoded), nulls.
EXPRS = [
    "id",
    "cast(id % 3 as int) as part",
    "uuid() as payload",
    "rand(11) as score",
    "cast(id * 7 % 100 as string) as label",
    "date_add(date'2024-01-01', cast(id % 365 as int)) as day",
    "case when id % 6 = 0 then null else concat('n', cast(id * 7919 as string)) end as maybe",
    "id % 2 = 0 as even",
    "timestamp_seconds(id * 61) as ts",
    "cast(id / 7 as decimal(12, 3)) as amount",
]


def _write(spark, path: str, start: int, rows: int, files: int) -> None:
    df = spark.range(start, start + rows, 1, files).selectExpr(*EXPRS)
    df.write.format("delta").mode("append").partitionBy("part").save(path)


def _last_adds(path: str) -> dict[str, dict]:
    """The stats of the last commit's add actions, by partition (one new file a partition)."""
    log = os.path.join(path, "_delta_log")
    last = max(f for f in os.listdir(log) if f.endswith(".json"))
    out = {}
    with open(os.path.join(log, last)) as fh:
        for line in fh:
            add = json.loads(line).get("add")
            if add:
                out[add["partitionValues"]["part"]] = json.loads(add["stats"])
    return out


def _last_add_actions(path: str) -> list[dict]:
    log = os.path.join(path, "_delta_log")
    last = max(f for f in os.listdir(log) if f.endswith(".json"))
    with open(os.path.join(log, last)) as fh:
        return [json.loads(line)["add"] for line in fh if '"add"' in line[:10]]


def _rows_deltars(path: str) -> list[dict]:
    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def test_delta_spark_files_are_merged_with_the_rows_and_stats_of_a_rewrite(spark, tmp_path):
    merged, rewritten = str(tmp_path / "merged"), str(tmp_path / "rewritten")
    for k in range(4):
        _write(spark, merged, k * 6000, 6000, 2)
    shutil.copytree(merged, rewritten)
    before, before_rs = rows_spark(spark, merged), _rows_deltars(merged)
    assert len(DeltaTable(merged).file_uris()) == 24

    m = optimize(spark, merged)
    off = optimize(spark, rewritten, row_group_copy_min_bytes=0)
    assert (m.num_files_removed, m.num_files_added) == (off.num_files_removed, off.num_files_added) == (24, 3)
    assert m.bytes_joined > 0 and off.bytes_joined == 0
    assert m.to_dict()["bytesJoined"] == m.bytes_joined
    # the same requests and bytes read; the bytes written are the new files' (a merged file's pages are the inputs')
    assert m.requests["byKind"] == off.requests["byKind"] and m.requests["bytesRead"] == off.requests["bytesRead"]
    written = sum(a["size"] for a in _last_add_actions(merged))
    assert m.requests["bytesWritten"] >= written > 0

    # the joined columns kept Spark's pages; the others were written by pyarrow, with a dictionary where it pays
    out = pq.ParquetFile(DeltaTable(merged).file_uris()[0].removeprefix("file://"))
    chunks = {out.metadata.row_group(0).column(i).path_in_schema: out.metadata.row_group(0).column(i) for i in range(9)}
    assert not chunks["payload"].has_dictionary_page and chunks["label"].has_dictionary_page

    for path in (merged, rewritten):
        assert_same_rows(spark, path, before)
        assert _rows_deltars(path) == before_rs
    assert _last_adds(merged) == _last_adds(rewritten)

    _write(spark, merged, 100_000, 300, 1)
    expected = rows_spark(spark, merged)
    spark.sql(f"OPTIMIZE delta.`{merged}`").collect()
    assert_same_rows(spark, merged, expected)


def test_bins_run_as_spark_tasks_merge_too(spark, tmp_path):
    """The merge is the task's: bins run by Spark's Python workers (the package shipped to them) join pages too."""
    path = str(tmp_path / "tasks")
    for k in range(2):
        _write(spark, path, k * 6000, 6000, 2)
    before = rows_spark(spark, path)
    m = optimize(spark, path, task_runner="spark")
    assert m.num_files_added == 3 and m.bytes_joined > 0
    assert_same_rows(spark, path, before)


def test_a_column_missing_from_older_files_sends_the_bin_to_the_usual_rewrite(spark, tmp_path):
    """A column added later is missing from the older files: the bin is rewritten the usual way (nulls filled)."""
    path = str(tmp_path / "evolved")
    for k in range(2):
        _write(spark, path, k * 6000, 6000, 2)
    spark.range(20_000, 26_000, 1, 2).selectExpr(*EXPRS, "id * 3 as extra").write.format("delta").mode("append").option(
        "mergeSchema", "true"
    ).partitionBy("part").save(path)
    before = rows_spark(spark, path)
    m = optimize(spark, path)
    assert m.num_files_added == 3 and m.bytes_joined == 0
    assert_same_rows(spark, path, before)
    t = DeltaTable(path).to_pyarrow_table()
    assert t.filter(pa.compute.is_null(t["extra"])).num_rows == 12_000
