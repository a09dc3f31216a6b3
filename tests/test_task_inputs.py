"""A bin's inputs read in a task: only the columns the table uses are decoded, and each row group comes out in
the table's schema whether it needed a reorder only (the fast path) or casts and null-filled columns.

Pure Arrow, no Spark: milliseconds.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.tasks.arrow_schema import NeedsSparkRewrite, conform
from dbt_delta_optimize.tasks.inputs import _leaves, _TargetColumns, read_live_tables
from dbt_delta_optimize.tasks.messages import InputFile

TARGET = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


def test_a_reorder_with_extra_columns_keeps_every_value_and_drops_the_extra():
    # Spark-written files may also hold the partition column, after the data columns and in another order.
    raw = pa.table(
        {
            "score": pa.array([0.5, 1.5], pa.float64()),
            "ID": pa.array([1, 2], pa.int64()),
            "name": ["a", "b"],
            "part": pa.array([7, 7], pa.int32()),
        }
    )
    out = conform(raw, TARGET)
    assert out.schema.equals(TARGET, check_metadata=False)
    assert out.to_pydict() == {"id": [1, 2], "name": ["a", "b"], "score": [0.5, 1.5]}


def test_casts_and_missing_columns_still_take_the_full_path():
    raw = pa.table({"id": pa.array([1, 2], pa.int32()), "score": pa.array([1.0, 2.0], pa.float64())})
    out = conform(raw, TARGET)
    assert out.schema.equals(TARGET, check_metadata=False)
    assert out.to_pydict() == {"id": [1, 2], "name": [None, None], "score": [1.0, 2.0]}
    with pytest.raises(NeedsSparkRewrite, match="column id"):
        conform(pa.table({"id": ["not a number"]}), TARGET)


def test_only_the_columns_the_table_uses_are_read():
    columns = _TargetColumns(TARGET)
    assert columns.to_read(("id", "name", "score")) is None  # all of them: no projection
    assert columns.to_read(("id", "Name", "score", "part")) == ["id", "Name", "score"]
    assert columns.disjoint(("x", "y")) and not columns.disjoint(("ID",))
    mapped = pa.schema([pa.field("id", pa.int64(), metadata={b"PARQUET:field_id": b"1"})])
    assert _TargetColumns(mapped).to_read(("col-1", "part")) is None  # physical names, matched by id later


def test_files_holding_the_partition_column_read_back_in_the_table_schema(tmp_path):
    root = str(tmp_path)
    rows = [
        pa.table({"id": [1, 2], "name": ["a", "b"], "score": [0.5, 1.5], "part": pa.array([3, 3], pa.int32())}),
        pa.table({"part": pa.array([3], pa.int32()), "score": [2.5], "name": ["c"], "id": [3]}),
        pa.table({"id": pa.array([4], pa.int32()), "name": ["d"], "score": [3.5]}),
    ]
    inputs = []
    for i, t in enumerate(rows):
        path = str(tmp_path / f"f{i}.parquet")
        pq.write_table(t, path)
        inputs.append(InputFile(path=path, size=(tmp_path / f"f{i}.parquet").stat().st_size))
    tables = list(read_live_tables(storage_for(root), root, inputs, TARGET, local=True, by_id=False, row_tracking=None))
    assert all(t.schema.equals(TARGET, check_metadata=False) for t in tables)
    assert pa.concat_tables(tables).to_pydict() == {
        "id": [1, 2, 3, 4],
        "name": ["a", "b", "c", "d"],
        "score": [0.5, 1.5, 2.5, 3.5],
    }


def _variety() -> list[pa.Table]:
    """Files whose columns are one leaf each, nested with several leaves, one-leaf nested, dotted names (also
    spelling a nested field), extension logical types, INT96 timestamps, and columns the table does not use."""
    n = 3
    s = pa.array([{"a": i, "b": str(i)} for i in range(n)], pa.struct([("a", pa.int64()), ("b", pa.string())]))
    tables = [
        pa.table({"id": [1, 2, 3], "part": pa.array([7, 7, 7], pa.int32()), "name": ["a", "b", "c"]}),
        pa.table({"s": s, "id": [1, 2, 3], "l": pa.array([[1], [], [2, 3]], pa.list_(pa.int64())), "x": [0, 0, 0]}),
        pa.table({"one": pa.array([{"a": 1}] * n, pa.struct([("a", pa.int64())])), "id": [4, 5, 6], "y": [1, 1, 1]}),
        pa.table(
            {
                "s.a": [9, 9, 9],
                "s": s,
                "id": [7, 8, 9],
                "m": pa.array([[("k", 1)]] * n, pa.map_(pa.string(), pa.int64())),
            }
        ),
        pa.table({"id": [1, 2, 3], "ts": pa.array([0, 10**12, None], pa.timestamp("ns")), "z": [1.0, 2.0, 3.0]}),
        # one leaf a column, but a dotted name also spells the struct's field: ParquetFile reads both leaves
        pa.table({"o.a": [1, 2, 3], "o": pa.array([{"a": 1}] * n, pa.struct([("a", pa.int64())])), "x": [0, 0, 0]}),
    ]
    if hasattr(pa, "uuid") and hasattr(pa, "json_"):
        ext = pa.table(
            {
                "id": [1, 2, 3],
                "u": pa.array([bytes(range(16))] * n, pa.uuid()),
                "j": pa.array(['{"k": 1}'] * n, pa.json_()),
                "w": [0, 0, 0],
            }
        )
        tables.append(ext)
    return tables


@pytest.mark.parametrize("case", range(7))
def test_the_bare_reader_reads_what_parquet_file_reads(tmp_path, case):
    # Small inputs are opened with pyarrow's ParquetReader instead of its ParquetFile wrapper: the same options
    # (the wrapper's defaults in the pyarrow installed) and the same leaves for the same names read.
    from dbt_delta_optimize.tasks.inputs import open_inputs

    tables = _variety()
    if case >= len(tables):
        pytest.skip("this pyarrow has no uuid/json extension types")
    table = tables[case]
    path = str(tmp_path / "f.parquet")
    # without the Arrow schema in the footer, as Spark writes: the reader alone maps logical types to Arrow ones
    int96 = "ts" in table.column_names
    pq.write_table(table, path, use_deprecated_int96_timestamps=int96, row_group_size=2, store_schema=False)
    uses = [f for f in table.schema if f.name not in ("part", "x", "y", "w", "z")]
    target = pa.schema(uses)
    columns = _TargetColumns(target)
    [(_, reader, _)] = open_inputs(storage_for(str(tmp_path)), [InputFile(path, os.path.getsize(path))], local=True)
    wrapped = pq.ParquetFile(path, coerce_int96_timestamp_unit="us")
    assert reader.schema_arrow.equals(wrapped.schema_arrow, check_metadata=True)
    names = tuple(reader.schema_arrow.names)
    for read in (list(names), list(reversed(names)), ["s.a"], ["s"], ["o.a"], ["l"], ["nothing"], []):
        assert _leaves(reader.column_paths, read) == wrapped._get_column_indices(read)
    got = columns.indices(reader, names)
    assert got == (None if columns.to_read(names) is None else wrapped._get_column_indices(columns.to_read(names)))
    assert got == columns.indices(reader, names)  # remembered for the next file of the same names
    for rg in range(reader.num_row_groups):
        mine = reader.read_row_group(rg, column_indices=got, use_threads=False)
        theirs = wrapped.read_row_group(rg, columns=columns.to_read(names), use_threads=False)
        assert mine.equals(theirs, check_metadata=True)


def test_large_files_opened_by_path_read_the_same_rows(tmp_path, monkeypatch):
    # Files over WHOLE_FILE_BYTES are opened by path (ParquetFile's reader, pre-buffered), not read into memory.
    from dbt_delta_optimize.tasks import inputs as inputs_module

    root = str(tmp_path)
    t = pa.table(
        {"part": pa.array([1, 1, 1], pa.int32()), "score": [0.5, 1.5, 2.5], "id": [1, 2, 3], "name": list("abc")}
    )
    path = str(tmp_path / "f.parquet")
    pq.write_table(t, path, row_group_size=2)
    inputs = [InputFile(path=path, size=os.path.getsize(path))]

    def read() -> pa.Table:
        tables = read_live_tables(storage_for(root), root, inputs, TARGET, local=True, by_id=False, row_tracking=None)
        return pa.concat_tables(list(tables))

    in_memory = read()
    monkeypatch.setattr(inputs_module, "WHOLE_FILE_BYTES", 0)
    by_path = read()
    assert by_path.equals(in_memory)
    assert by_path.to_pydict() == {"id": [1, 2, 3], "name": ["a", "b", "c"], "score": [0.5, 1.5, 2.5]}


@pytest.mark.parametrize("key", [b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96", None])
def test_a_file_in_the_legacy_calendar_is_refused_by_name(tmp_path, key):
    from dbt_delta_optimize.tasks.inputs import open_inputs

    meta = {b"org.apache.spark.version": b"3.0.0", **({key: b""} if key else {})}
    path = str(tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"id": [1]}).replace_schema_metadata(meta), path)
    opened = open_inputs(storage_for(str(tmp_path)), [InputFile(path, os.path.getsize(path))], local=True)
    if key is None:
        assert next(opened)[1].metadata.num_rows == 1
        return
    with pytest.raises(NeedsSparkRewrite, match=r"part-0\.parquet uses Spark's legacy hybrid calendar"):
        next(opened)
