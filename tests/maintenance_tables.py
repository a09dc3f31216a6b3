"""Delta tables for maintenance tests, written in one commit each (fast: no 160 appends).

The data files are real Parquet files (pyarrow); the log is written by hand as delta-spark writes
it: protocol, metaData and one add per file (with or without statistics), and optionally a second
commit that removes files (tombstones with a chosen deletionTimestamp; the files stay on disk, as
they do until VACUUM). delta-spark and deltalake read these tables.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}},
    ],
}
DAY_MS = 86_400_000


def _write_file(root: str, rows: range) -> tuple[str, int, str]:
    name = f"part-{uuid.uuid4().hex}.snappy.parquet"
    data = pa.table({"id": pa.array(list(rows), pa.int64()), "v": pa.array([f"v{i:06d}" for i in rows])})
    pq.write_table(data, os.path.join(root, name))
    ids, vs = data.column("id").to_pylist(), data.column("v").to_pylist()
    stats = {
        "numRecords": len(ids),
        "minValues": {"id": min(ids), "v": min(vs)},
        "maxValues": {"id": max(ids), "v": max(vs)},
        "nullCount": {"id": 0, "v": 0},
    }
    return name, os.path.getsize(os.path.join(root, name)), json.dumps(stats)


def _commit(root: str, version: int, actions: list[dict], operation: str, ts: int) -> None:
    info = {"commitInfo": {"timestamp": ts, "operation": operation, "operationParameters": {}, "isBlindAppend": True}}
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "w") as fh:
        for a in [info, *actions]:
            fh.write(json.dumps(a) + "\n")


def make_table(
    root: str,
    files: int,
    *,
    rows_per_file: int = 10,
    stats: bool = True,
    removed: int = 0,
    removed_days_ago: float = 10.0,
    created_days_ago: float = 1.0,
    configuration: dict[str, str] | None = None,
) -> str:
    """A table of ``files`` live files (plus ``removed`` removed ``removed_days_ago`` days ago); returns ``root``."""
    os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)
    now = int(time.time() * 1000)
    created = now - int(created_days_ago * DAY_MS)
    adds = []
    for k in range(files + removed):
        name, size, st = _write_file(root, range(k * rows_per_file, (k + 1) * rows_per_file))
        add = {"path": name, "partitionValues": {}, "size": size, "modificationTime": created, "dataChange": True}
        if stats:
            add["stats"] = st
        adds.append(add)
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": [],
        "configuration": configuration or {},
        "createdTime": created,
    }
    first = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}, {"metaData": meta}]
    _commit(root, 0, first + [{"add": a} for a in adds], "WRITE", created)
    if removed:
        when = now - int(removed_days_ago * DAY_MS)
        removes = [
            {"remove": {"path": a["path"], "deletionTimestamp": when, "dataChange": True, "size": a["size"]}}
            for a in adds[files:]
        ]
        _commit(root, 1, removes, "DELETE", when)
        for a in adds[files:]:  # written before they were removed (VACUUM deletes by the file's own age too)
            os.utime(os.path.join(root, a["path"]), (when / 1000, when / 1000))
    return root


def hidden_check_tables(base: str) -> dict[str, str]:
    """The issue's five tables: A 160 small files, B 10, C compact (one file), E tombstones past retention,
    F written without statistics."""
    return {
        "A": make_table(os.path.join(base, "A"), 160),
        "B": make_table(os.path.join(base, "B"), 10),
        "C": make_table(os.path.join(base, "C"), 1, rows_per_file=1000),
        "E": make_table(os.path.join(base, "E"), 1, removed=3, removed_days_ago=10),
        "F": make_table(os.path.join(base, "F"), 1, stats=False),
    }
