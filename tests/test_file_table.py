"""A snapshot's live files as Arrow columns (FileTable): the replay after a checkpoint, its fallbacks, from_files."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dbt_delta_optimize.delta.snapshot import load_snapshot


def _live(p: str) -> pa.Array:
    from deltalake import DeltaTable

    return pa.table(DeltaTable(p).get_add_actions(flatten=False)).column("path").combine_chunks()


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> str:
    """A checkpoint, then commits that remove a checkpointed file, re-add one path and add new files."""
    from deltalake import DeltaTable

    p = str(tmp_path_factory.mktemp("replay") / "t")
    for i in range(4):
        write_deltalake(
            p, pa.table({"id": [i], "part": ["x y" if i % 2 else "z"]}), partition_by=["part"], mode="append"
        )
    DeltaTable(p).create_checkpoint()
    log = os.path.join(p, "_delta_log")
    with open(os.path.join(log, f"{0:020d}.json")) as fh:
        first = next(json.loads(line)["add"] for line in fh if '"add"' in line)
    with open(os.path.join(log, f"{1:020d}.json")) as fh:
        second = next(json.loads(line)["add"] for line in fh if '"add"' in line)
    with open(os.path.join(log, f"{4:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "DELETE"}}) + "\n")
        fh.write(json.dumps({"remove": {"path": first["path"], "dataChange": True}}) + "\n")
        fh.write(json.dumps({"remove": {"path": second["path"], "dataChange": True}}) + "\n")
    with open(os.path.join(log, f"{5:020d}.json"), "w") as fh:  # the same path added back (a RESTORE does this)
        fh.write(json.dumps({"commitInfo": {"operation": "RESTORE"}}) + "\n")
        fh.write(json.dumps({"add": {**second, "tags": {"readded": "yes"}}}) + "\n")
    write_deltalake(p, pa.table({"id": [9], "part": ["z"]}), partition_by=["part"], mode="append")
    return p


def test_replay_after_a_checkpoint_matches_deltalake(checkpointed, monkeypatch):
    from dbt_delta_optimize.delta import file_table as ft
    from dbt_delta_optimize.delta.log import list_log
    from dbt_delta_optimize.delta.storage import LocalStorage

    def no_fallback(*_a):
        raise AssertionError("the replay disagreed with deltalake")

    monkeypatch.setattr(ft, "_matched_rows", no_fallback)
    storage, live = LocalStorage({}), _live(checkpointed)
    table, missing = ft.build_file_table(storage, checkpointed, 6, list_log(storage, checkpointed), live)
    assert missing == [] and len(table) == 4 == len(live)
    assert table.paths == sorted(live.to_pylist())
    assert table.paths == sorted(table.paths)
    assert [table.file(i).num_records for i in range(len(table))] == [1, 1, 1, 1]  # stats, read on demand
    by_path = dict(zip(table.paths, table.versions.to_pylist()))
    readded = [i for i in range(len(table)) if table.file(i).tags.get("readded") == "yes"]
    assert len(readded) == 1 and by_path[table.paths[readded[0]]] == 5  # the last add wins, with its version
    assert sorted(by_path.values()) == [3, 3, 5, 6]  # files from the checkpoint carry its version


def test_a_live_list_the_replay_does_not_give_falls_back_to_lookup(checkpointed):
    from dbt_delta_optimize.delta import file_table as ft
    from dbt_delta_optimize.delta.log import list_log
    from dbt_delta_optimize.delta.storage import LocalStorage

    storage, live = LocalStorage({}), _live(checkpointed)
    listing = list_log(storage, checkpointed)
    fewer = live.slice(1)
    table, missing = ft.build_file_table(storage, checkpointed, 6, listing, fewer)
    assert missing == [] and table.paths == sorted(fewer.to_pylist())
    more = pa.concat_arrays([live, pa.array(["part=q/not-in-the-log.parquet"])])
    table, missing = ft.build_file_table(storage, checkpointed, 6, listing, more)
    assert missing == ["part=q/not-in-the-log.parquet"] and len(table) == len(live)


def test_from_files_round_trips_and_sorts_by_path(checkpointed):
    """The snapshot's slow path and hand-built snapshots build their FileTable from AddFiles."""
    from dbt_delta_optimize.delta.file_table import FileTable

    files = list(load_snapshot(checkpointed).files)
    table = FileTable.from_files(list(reversed(files)), [7] * len(files))
    assert table.paths == sorted(f.path for f in files) and table.versions.to_pylist() == [7] * len(files)
    assert [table.file(i) for i in range(len(table))] == sorted(files, key=lambda f: f.path)
    assert len(FileTable.from_files(())) == 0 and FileTable.from_files(()).partition_keys(["part"]) == set()


def test_files_convert_every_field_as_from_json_does():
    """``FileTable.files`` converts a column at a time; each AddFile equals what ``AddFile.from_json`` makes of the
    same add: deletion vectors (with and without an offset), tags, row tracking, a clustering provider, a null
    partition value, dataChange false, no stats; and an add without a size is an error, as there."""
    from dbt_delta_optimize.delta.actions import AddFile, DeletionVector
    from dbt_delta_optimize.delta.checkpoint_adds import add_type
    from dbt_delta_optimize.delta.file_table import FileTable

    files = [
        AddFile("a.parquet", {"p": "1", "q": None}, 10, 1700, stats='{"numRecords":3}', tags={"t": "x"}),
        AddFile(
            "b.parquet",
            {"p": "2", "q": "z"},
            20,
            1800,
            data_change=False,
            deletion_vector=DeletionVector("u", "ab^cd", 34, 2, offset=1),
            base_row_id=7,
            default_row_commit_version=4,
            clustering_provider="liquid",
        ),
        AddFile(
            "c.parquet", {}, 30, 0, deletion_vector=DeletionVector("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@(", 30, 1)
        ),
    ]
    table = FileTable.from_files(files)
    assert table.files([2, 0, 1]) == [files[2], files[0], files[1]]
    assert table.files([0, 1, 2]) == [AddFile.from_json(f.to_json()) for f in files]
    no_size = {**files[0].to_json(), "size": None}
    broken = FileTable(pa.array([no_size], type=add_type()), pa.array([0], pa.int64()))
    with pytest.raises(KeyError):
        AddFile.from_json({k: v for k, v in no_size.items() if v is not None})
    with pytest.raises(KeyError):
        broken.files([0])
