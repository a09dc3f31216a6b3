"""The row-group copy end to end: tables written by delta-spark and by delta-rs, compacted by our OPTIMIZE.

The copy threshold is set to a few KB so that the tiny test files' row groups count as large.
That a row group was copied is proven on the bytes (its column chunks appear verbatim in the new
file); the rows are read back by delta-spark, deltalake, pyarrow and DuckDB, and delta-spark's
own OPTIMIZE runs on the result. Bins that must not be copied (deletion vectors on an input,
row ids not materialized, Z-order) are shown re-encoded and correct.
"""

from __future__ import annotations

import decimal
import json
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.tasks.parquet_footer import chunk_span, footer_of_bytes
from tests.helpers import _key, _norm

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEY = "spark.dbt_delta_optimize.rowGroupCopyMinBytes"
MIN_BYTES = 2048
SPARK_EXPRS = [
    "id",
    "concat(cast(id as string), repeat('x', cast(id % 13 as int))) as s",
    "cast(id / 7 as decimal(12, 3)) as d",
    "timestamp_seconds(id * 3600) as ts",
    "date_add(date'2020-01-01', cast(id % 1000 as int)) as dt",
    "case when id % 5 = 0 then null else array(id, id + 1) end as arr",
    "map(cast(id % 3 as string), cast(id as double) / 3) as m",
    "named_struct('x', cast(id % 100 as int), 'y', cast(id as string)) as st",
    "id % 2 = 0 as b",
]


@pytest.fixture
def copy_on(spark):
    spark.conf.set(KEY, str(MIN_BYTES))
    yield
    spark.conf.unset(KEY)


def rows_spark(spark, path: str, columns: list[str] | None = None) -> list[tuple]:
    """Every row as delta-spark reads it (structs as dicts, so that both engines' rows compare)."""
    df = spark.read.format("delta").load(path)
    cols = columns or sorted(df.columns)
    rows = (r.asDict(recursive=True) for r in df.select(*cols).collect())
    return sorted((tuple(_norm(r[c]) for c in cols) for r in rows), key=_key)


def rows_deltars(path: str, columns: list[str] | None = None) -> list[tuple]:
    t = DeltaTable(path).to_pyarrow_table()
    cols = columns or sorted(t.column_names)
    return sorted((tuple(_norm(r[c]) for c in cols) for r in t.select(cols).to_pylist()), key=_key)


def assert_same_rows(spark, path: str, expected: list[tuple]) -> None:
    assert rows_spark(spark, path) == expected, "delta-spark reads different rows"
    assert rows_deltars(path) == expected, "delta-rs reads different rows"


def _files(path: str) -> list[str]:
    return sorted(DeltaTable(path).file_uris())


def _local(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def _groups_of(data: bytes, name: str) -> list[bytes]:
    """Each row group's column-chunk bytes in one file (what a copy moves verbatim)."""
    out = []
    for rg in footer_of_bytes(data, name).meta.row_groups:
        spans = [chunk_span(c) for c in rg.columns]
        out.append(data[spans[0][0] : spans[-1][1]])
    return out


def _groups(files: list[str]) -> list[bytes]:
    out = []
    for f in files:
        with open(_local(f), "rb") as fh:
            out += _groups_of(fh.read(), f)
    return out


def _copied(groups: list[bytes], path: str) -> int:
    """How many of these row groups appear byte for byte in the table's current files."""
    datas = []
    for f in _files(path):
        with open(_local(f), "rb") as fh:
            datas.append(fh.read())
    return sum(1 for g in groups if any(d.find(g) >= 0 for d in datas))


def _duck(files: list[str]) -> list[tuple]:
    listed = ", ".join(f"'{_local(f)}'" for f in files)
    return duckdb.sql(
        f"select * exclude (filename) from read_parquet([{listed}], filename=true) order by id"
    ).fetchall()


def _pyarrow_rows(files: list[str]) -> list[dict]:
    table = pa.concat_tables([pq.read_table(_local(f)) for f in files], promote_options="permissive")
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _check_compaction(spark, path: str, before_files: list[str], before: list[tuple], copied_at_least: int) -> None:
    """One new file holds every row; large row groups copied; four readers agree; Spark's splits see each row once."""
    after_files = _files(path)
    assert len(after_files) == 1
    assert _copied(_groups(before_files), path) >= copied_at_least
    assert_same_rows(spark, path, before)
    # pyarrow and DuckDB: the new file holds exactly the rows of the old files (still on disk: not vacuumed).
    assert _duck(after_files) == _duck(before_files)
    assert [r["id"] for r in _pyarrow_rows(after_files)] == sorted(r["id"] for r in _pyarrow_rows(before_files))
    # Spark splits a file by row-group midpoints: with 4 splits per file, every row group is still read once.
    split = max(1024, os.path.getsize(_local(after_files[0])) // 4)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
    try:
        df = spark.read.format("delta").load(path)
        assert df.count() == len(before) == df.select("id").distinct().count()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def _then_delta_spark_optimizes(spark, path: str, append) -> None:
    append()
    expected = rows_spark(spark, path)
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    assert len(_files(path)) == 1
    assert_same_rows(spark, path, expected)


def test_delta_spark_files_are_copied(spark, tmp_path, copy_on):
    path = str(tmp_path / "spark_written")
    spark.range(0, 3000, 1, 3).selectExpr(*SPARK_EXPRS).write.format("delta").save(path)
    spark.range(6000, 6004, 1, 1).selectExpr(*SPARK_EXPRS).write.format("delta").mode("append").save(path)
    before_files, before = _files(path), rows_spark(spark, path)
    assert len(before_files) == 4
    m = optimize(spark, path)
    assert (m.num_files_removed, m.num_files_added) == (4, 1)
    _check_compaction(spark, path, before_files, before, copied_at_least=3)
    # Spark wrote INT96 timestamps and integer decimals: the output is written the same way (so they copy).
    schema = pq.ParquetFile(_local(_files(path)[0])).schema
    assert [schema.column(i).physical_type for i in (2, 3)] == ["INT64", "INT96"]

    def append() -> None:
        spark.range(7000, 7010, 1, 1).selectExpr(*SPARK_EXPRS).write.format("delta").mode("append").save(path)

    _then_delta_spark_optimizes(spark, path, append)


def _rs_batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": [None if i % 9 == 0 else f"row {i} " + "y" * (i % 17) for i in ids],
            "d": pa.array(
                [None if i % 4 == 0 else decimal.Decimal(i * 1000 + 7).scaleb(-3) for i in ids], pa.decimal128(18, 3)
            ),
            "arr": pa.array([[i, -i] if i % 3 else None for i in ids], pa.list_(pa.int64())),
            "m": pa.array([[(f"k{i % 4}", i / 4)] for i in ids], pa.map_(pa.string(), pa.float64())),
            "st": pa.array(
                [{"x": i % 50, "z": f"z{i}"} for i in ids], pa.struct([("x", pa.int32()), ("z", pa.string())])
            ),
        }
    )


def test_delta_rs_files_are_copied(spark, tmp_path, copy_on):
    path = str(tmp_path / "rs_written")
    for k in range(3):
        write_deltalake(path, _rs_batch(k * 1000, 1000), mode="append")
    write_deltalake(path, _rs_batch(9000, 3), mode="append")
    before_files, before = _files(path), rows_spark(spark, path)
    m = optimize(spark, path)
    assert (m.num_files_removed, m.num_files_added) == (4, 1)
    _check_compaction(spark, path, before_files, before, copied_at_least=3)
    _then_delta_spark_optimizes(spark, path, lambda: write_deltalake(path, _rs_batch(20_000, 5), mode="append"))


def test_files_with_deletion_vectors_are_re_encoded_and_the_rest_copied(spark, tmp_path, copy_on):
    path = str(tmp_path / "dv")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING, b BOOLEAN) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true')"
    )
    spark.range(0, 3000, 1, 3).selectExpr(*SPARK_EXPRS[:2], "id % 2 = 0 as b").write.format("delta").mode(
        "append"
    ).save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id IN (5, 6)")  # both in the first file: one DV
    logs = sorted(n for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".json"))
    with open(os.path.join(path, "_delta_log", logs[-1])) as fh:  # the DELETE's commit
        actions = [json.loads(line) for line in fh]
    with_dv = [a["add"]["path"] for a in actions if "add" in a and a["add"].get("deletionVector")]
    assert len(with_dv) == 1
    before_files, before = _files(path), rows_spark(spark, path)
    clean = [f for f in before_files if not f.endswith(with_dv[0])]
    optimize(spark, path)
    assert len(_files(path)) == 1
    assert _copied(_groups(clean), path) == 2  # the files without a DV
    assert _copied(_groups([f for f in before_files if f not in clean]), path) == 0
    # deltalake 1.6 reads no table with the deletionVectors feature: delta-spark, pyarrow and DuckDB do.
    assert rows_spark(spark, path) == before
    assert _duck(_files(path)) == [r for r in _duck(before_files) if r[0] not in (5, 6)]
    assert 5 not in {r[0] for r in rows_spark(spark, path, ["id"])}


def _triples(spark, path: str) -> list[tuple]:
    q = f"SELECT id, _metadata.row_id, _metadata.row_commit_version FROM delta.`{path}`"
    return sorted(tuple(r) for r in spark.sql(q).collect())


def test_row_ids_are_kept_copying_materialized_row_groups(spark, tmp_path, copy_on):
    """Row tracking: fresh files (ids not materialized) are re-encoded with their ids; ours, materialized, are copied."""
    path = str(tmp_path / "rt")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING) USING delta TBLPROPERTIES ('delta.enableRowTracking'='true')"
    )
    spark.range(0, 6000, 1, 2).selectExpr(*SPARK_EXPRS[:2]).write.format("delta").mode("append").save(path)
    before = _triples(spark, path)
    optimize(spark, path)  # nothing materialized yet: re-encoded, ids written into the hidden columns
    assert _triples(spark, path) == before
    materialized = _files(path)
    spark.range(6000, 9000, 1, 1).selectExpr(*SPARK_EXPRS[:2]).write.format("delta").mode("append").save(path)
    before = _triples(spark, path)
    optimize(spark, path)
    assert _triples(spark, path) == before
    assert _copied(_groups(materialized), path) == 1


def test_z_order_never_copies(spark, tmp_path, copy_on):
    path = str(tmp_path / "z")
    for k in range(2):
        write_deltalake(path, _rs_batch(k * 3000, 3000), mode="append")
    before_files, before = _files(path), rows_spark(spark, path)
    optimize(spark, path, zorder_by=["id"])
    assert _copied(_groups(before_files), path) == 0
    assert_same_rows(spark, path, before)


def test_copy_off_re_encodes(spark, tmp_path):
    spark.conf.set(KEY, "0")
    try:
        path = str(tmp_path / "off")
        for k in range(2):
            write_deltalake(path, _rs_batch(k * 3000, 3000), mode="append")
        before_files, before = _files(path), rows_spark(spark, path)
        optimize(spark, path)
    finally:
        spark.conf.unset(KEY)
    assert _copied(_groups(before_files), path) == 0
    assert_same_rows(spark, path, before)
    assert os.path.getsize(_local(_files(path)[0])) > 0


def test_copy_on_an_object_store(spark, s3_server, monkeypatch, copy_on):
    """On S3 (moto) the inputs are read through our storage in ranges and the output is uploaded: same bytes."""
    from dbt_delta_optimize.delta.storage import storage_for

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_server.new_bucket()}/t"
    for k in range(2):
        write_deltalake(url, _rs_batch(k * 1000, 1000), mode="append")
    write_deltalake(url, _rs_batch(5000, 3), mode="append")
    storage = storage_for(url)
    before_files, before = sorted(DeltaTable(url).file_uris()), rows_deltars(url)
    large = [g for f in before_files for g in _groups_of(storage.read_bytes(f), f) if len(g) >= MIN_BYTES]
    assert len(large) == 2
    optimize(spark, url)
    (after,) = DeltaTable(url).file_uris()
    out = storage.read_bytes(after)
    assert all(out.find(g) >= 0 for g in large)
    assert rows_deltars(url) == before
    assert pq.read_table(pa.BufferReader(out)).num_rows == 2003
