"""A bin's inputs read in a task: only the columns the table uses are decoded, and each row group comes out in
the table's schema whether it needed a reorder only (the fast path) or casts and null-filled columns.

Pure Arrow, no Spark: milliseconds.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.tasks.arrow_schema import NeedsSparkRewrite, conform
from dbt_delta_optimize.tasks.inputs import _TargetColumns, read_live_tables
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
