"""VACUUM's log replay as columns (delta/vacuum_log.py): the same files, sizes, deletion times and deletion
vectors as a row-by-row reading of the same log, from commits and from a Parquet checkpoint. Pure: no Spark."""

from __future__ import annotations

import json
import os
import uuid
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.delta.log import parse_commit
from dbt_delta_optimize.delta.storage import LocalStorage
from dbt_delta_optimize.delta.vacuum_log import (
    LogFile,
    LogFiles,
    LogReads,
    dv_relative_path,
    parse_actions,
    range_files,
    read_state,
    read_tombstones,
)
from dbt_delta_optimize.errors import CorruptLogError
from tests.test_deletion_vectors import z85_encode


def _dv(prefix: str = "", size: int = 40) -> dict[str, object]:
    return {"storageType": "u", "pathOrInlineDv": prefix + z85_encode(uuid.uuid4().bytes), "offset": 1,
            "sizeInBytes": size, "cardinality": 2}  # fmt: skip


def _add(path: str, size: int = 10, dv: dict[str, object] | None = None) -> dict[str, object]:
    a: dict[str, object] = {
        "path": path,
        "size": size,
        "partitionValues": {},
        "modificationTime": 1,
        "dataChange": True,
    }
    if dv is not None:
        a["deletionVector"] = dv
    return {"add": a}


def _remove(path: str, ts: int, size: int | None = 10, dv: dict[str, object] | None = None) -> dict[str, object]:
    r: dict[str, object] = {"path": path, "deletionTimestamp": ts, "dataChange": True}
    if size is not None:
        r["size"] = size
    if dv is not None:
        r["deletionVector"] = dv
    return {"remove": r}


def _write(root: str, version: int, actions: list[dict[str, object]]) -> None:
    os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def _row_by_row(actions_by_version: list[list[dict[str, object]]]) -> tuple[set[tuple], set[tuple]]:
    """The oracle: every action as one row, removes before adds within a commit, paths matched decoded."""

    def file(a: dict, deletion: bool) -> tuple:
        dv = a.get("deletionVector")
        return (str(a["path"]), int(a.get("size") or 0), int(a.get("deletionTimestamp") or 0) if deletion else 0,
                dv_relative_path(dv), int(dv.get("sizeInBytes") or 0) if dv else 0)  # fmt: skip

    live: dict[str, tuple] = {}
    dead: list[tuple] = []
    for actions in actions_by_version:
        for a in actions:
            if "remove" in a:
                dead.append(file(a["remove"], True))
                live.pop(unquote(a["remove"]["path"]), None)
        for a in actions:
            if "add" in a:
                live[unquote(a["add"]["path"])] = file(a["add"], False)
    return set(live.values()), set(dead)


def _as_set(files: LogFiles) -> set[tuple]:
    return {(f.path, f.size, f.deletion_timestamp, f.dv_path, f.dv_size) for f in files}


def _log(root: str) -> list[list[dict[str, object]]]:
    meta = {"metaData": {"id": "x", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                         "schemaString": '{"type":"struct","fields":[]}', "configuration": {}}}  # fmt: skip
    swap_old, swap_new = _dv("ab", 41), _dv("", 42)
    v0 = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, meta,
          *(_add(f"p=1/f{i}.parquet", 10 + i) for i in range(5)), _add("p%3D2/enc.parquet", 7),
          _add("p=1/dv.parquet", 9, swap_old)]  # fmt: skip
    v1 = [_remove("p=1/f0.parquet", 100), _remove("p=2/enc.parquet", 101, None),
          _remove("p=1/dv.parquet", 102, 9, swap_old), _add("p=1/dv.parquet", 9, swap_new),
          _add("p=1/new.parquet", 3), {"cdc": {"path": "_change_data/c.parquet", "size": 5}}]  # fmt: skip
    v2 = [_remove("p=1/new.parquet", 103, 3), {"cdc": {"path": "_change_data/d.parquet", "size": 6}},
          _remove("p=1/gone.parquet", 104, 8, _dv("", 43))]  # fmt: skip
    for v, actions in enumerate((v0, v1, v2)):
        _write(root, v, actions)
    return [v0, v1, v2]


def test_the_columns_hold_what_a_row_by_row_replay_of_the_commits_finds(tmp_path):
    root = str(tmp_path)
    log = _log(root)
    live, dead = read_state(LogReads(LocalStorage(), root), 2)
    want_live, want_dead = _row_by_row(log)
    assert _as_set(live) == want_live and len(live) == len(want_live) == 5
    assert _as_set(dead) == want_dead and len(dead) == 5
    assert any(f.dv_path and f.dv_path.startswith("ab/") for f in dead)  # a UUID-relative DV with a prefix
    assert list(read_tombstones(LogReads(LocalStorage(), root), 2)) == list(dead)
    got = list(range_files(LogReads(LocalStorage(), root), 1, 2))  # removes and change data, in log order
    assert [f.path for f in got] == ["p=1/f0.parquet", "p=2/enc.parquet", "p=1/dv.parquet", "_change_data/c.parquet",
                                     "p=1/new.parquet", "_change_data/d.parquet", "p=1/gone.parquet"]  # fmt: skip
    assert [f.deletion_timestamp for f in got] == [100, 101, 102, 0, 103, 0, 104]
    assert got[1].size == 0 and got[3].size == 5 and got[6].dv_size == 43


def test_a_checkpoints_columns_hold_what_its_rows_hold(tmp_path):
    """A Parquet checkpoint at version 1 (adds with and without DVs, removes, null rows of other actions)."""
    root = str(tmp_path)
    log = _log(root)
    live, _ = _row_by_row(log[:2])
    dv_type = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                         ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])  # fmt: skip
    add_type = pa.struct([("path", pa.string()), ("size", pa.int64()), ("deletionVector", dv_type)])
    rm_type = pa.struct([("path", pa.string()), ("size", pa.int64()), ("deletionTimestamp", pa.int64()),
                         ("deletionVector", dv_type)])  # fmt: skip
    adds = [a["add"] for actions in log[:2] for a in actions if "add" in a]
    adds = [a for a in adds if a["path"] in {f[0] for f in live}]
    removes = [a["remove"] for actions in log[:2] for a in actions if "remove" in a]
    rows_add = [*({k: a.get(k) for k in ("path", "size", "deletionVector")} for a in adds), *([None] * len(removes))]
    rows_rm = [*([None] * len(adds)), *({k: r.get(k) for k in ("path", "size", "deletionTimestamp",
                                                                 "deletionVector")} for r in removes)]  # fmt: skip
    table = pa.table({"add": pa.array(rows_add, add_type), "remove": pa.array(rows_rm, rm_type)})
    pq.write_table(table, os.path.join(root, "_delta_log", f"{1:020d}.checkpoint.parquet"), row_group_size=3)
    os.remove(os.path.join(root, "_delta_log", f"{0:020d}.json"))  # only the checkpoint can say version 0's adds
    got_live, got_dead = read_state(LogReads(LocalStorage(), root), 2)
    want_live, want_dead = _row_by_row([[{"add": a} for a in adds] + [{"remove": r} for r in removes], log[2]])
    assert _as_set(got_live) == want_live and len(got_live) == 5
    assert _as_set(got_dead) == want_dead and len(got_dead) == 5


def test_orjson_reads_what_the_standard_library_reads_and_a_damaged_line_is_named(tmp_path):
    plain = b'{"add":{"path":"a b\\u00e9.parquet","size":1}}\n\n{"remove":{"path":"x","deletionTimestamp":2}}\n'
    assert parse_actions(plain, "/t", 3) == parse_commit(plain, "/t", 3)
    odd = b'{"commitInfo":{"x":NaN}}\n{"add":{"path":"a","size":1}}\n'  # NaN: orjson refuses, json takes it
    assert parse_actions(odd, "/t", 3)[1] == {"add": {"path": "a", "size": 1}}
    assert parse_actions(b"", "/t", 3) == [] == parse_commit(b"", "/t", 3)
    with pytest.raises(CorruptLogError, match="line 2"):
        parse_actions(b'{"add":{"path":"a"}}\n{"add":\n', "/t", 3)
    with pytest.raises(CorruptLogError, match="not a JSON object"):
        parse_actions(b'{"add":{"path":"a"}}\n[1]\n', "/t", 3)


def test_iterating_the_columns_gives_the_log_files():
    files = LogFiles()
    files.extend([{"path": "a", "size": 3}, {"path": "b", "deletionVector": {"storageType": "i"}}], deletion=False)
    files.extend([{"path": "c", "size": 1, "deletionTimestamp": 9}], deletion=True)
    assert list(files) == [LogFile("a", 3), LogFile("b", 0, 0, None, 0), LogFile("c", 1, 9)]
