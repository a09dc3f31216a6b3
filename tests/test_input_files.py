"""A bin's task inputs read from the file table's columns: the same messages as one AddFile at a time."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dbt_delta_optimize.delta.actions import AddFile, DeletionVector
from dbt_delta_optimize.delta.file_table import FileTable, FileView, RowSlice
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.engine.input_files import bin_inputs, input_file
from dbt_delta_optimize.errors import CorruptLogError


@pytest.fixture
def snapshot(tmp_path):
    """A real table's snapshot: its root and path rules are what the inputs' locations are made from."""
    write_deltalake(str(tmp_path / "t"), pa.table({"id": [1]}))
    return load_snapshot(str(tmp_path / "t"))


def _files(n: int, *, ids: bool = True) -> list[AddFile]:
    """Files with escaped names and partition values, every third with a deletion vector, row ids when ``ids``."""
    return [
        AddFile(
            path=f"p=a%20{i % 2}/part-{i:05d}%3A.parquet",
            partition_values={"p": f"a {i % 2}"},
            size=1000 + i,
            modification_time=i,
            data_change=False,
            stats=f'{{"numRecords":{i}}}',
            deletion_vector=DeletionVector("u", f"ab{i:018d}", 1, 40, i % 5 + 1) if i % 3 == 0 else None,
            base_row_id=10 * i if ids else None,
            default_row_commit_version=i % 4 if ids else None,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("keep_ids", [False, True])
@pytest.mark.parametrize("rows", ["list", "range", "numpy", "slice"])
def test_columns_give_the_messages_addfiles_give(snapshot, keep_ids, rows):
    table = FileTable.from_files(_files(40))
    picked = {
        "list": [3, 7, 8, 21, 30, 39, 0],
        "range": range(5, 25),
        "numpy": np.array([2, 4, 6, 9, 12, 33]),
        "slice": RowSlice(pa.array(range(40), pa.int64()), 10, 31),  # a bin of the planner: a slice of its rows
    }[rows]
    view = FileView(table, picked)
    got = bin_inputs(snapshot, view, keep_ids=keep_ids)
    expected = tuple(input_file(snapshot, f, keep_ids=keep_ids) for f in FileView(table, picked))
    assert got == expected and len(got) == len(view)
    assert any(i.deletion_vector is not None for i in got) or rows == "range"
    assert all(i.path.startswith(snapshot.location) for i in got)
    assert all((i.base_row_id is not None) == keep_ids for i in got)


def test_a_tuple_of_addfiles_is_taken_as_it_is(snapshot):
    files = tuple(_files(6))
    assert bin_inputs(snapshot, files, keep_ids=True) == tuple(input_file(snapshot, f, keep_ids=True) for f in files)


@pytest.mark.parametrize("as_view", [True, False])
def test_a_file_without_row_ids_is_refused_by_name(snapshot, as_view):
    files = _files(5)
    files[2] = AddFile(path="p=a/no-ids.parquet", partition_values={"p": "a"}, size=7, modification_time=0)
    source = FileView(FileTable.from_files(files), range(5)) if as_view else tuple(files)
    with pytest.raises(CorruptLogError, match=r"no-ids\.parquet.*baseRowId/defaultRowCommitVersion"):
        bin_inputs(snapshot, source, keep_ids=True)
    assert len(bin_inputs(snapshot, source, keep_ids=False)) == 5  # ids are needed only when the table keeps them
