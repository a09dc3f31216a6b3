"""Snapshots of a Delta table, read through deltalake (delta-rs).

deltalake does the log replay and checkpoint reading: it decides which files are live.
We then look up each live file's raw add action (tags, exact partition-value strings,
stats JSON, deletion vector) so removes can carry them over byte for byte.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import unquote

from ..errors import NotADeltaTableError, TableNotFoundError
from .actions import ADD, AddFile, Metadata, Protocol
from .storage import local_path, table_uri

__all__ = ["Snapshot", "file_counts", "latest_version", "load_snapshot", "read_commit", "read_commits"]

_LOG = "_delta_log"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet$")


@dataclass(frozen=True)
class Snapshot:
    """One version of a table: protocol, metadata and every live AddFile."""

    location: str
    version: int
    protocol: Protocol
    metadata: Metadata
    files: tuple[AddFile, ...]

    @property
    def log_dir(self) -> str:
        return os.path.join(self.location, _LOG)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def configuration(self) -> Mapping[str, str]:
        return self.metadata.configuration

    @cached_property
    def schema(self) -> dict[str, Any]:
        return json.loads(self.metadata.schema_string)

    @cached_property
    def partition_types(self) -> dict[str, str]:
        """Partition column name -> Delta primitive type name ("string", "long", "date", "decimal(10,2)", ...)."""
        by_name = {f["name"]: f["type"] for f in self.schema["fields"]}
        return {c: by_name[c] if isinstance(by_name.get(c), str) else "string" for c in self.partition_columns}

    @cached_property
    def data_fields(self) -> list[dict[str, Any]]:
        """Schema fields that are stored in the data files (everything but partition columns)."""
        parts = set(self.partition_columns)
        return [f for f in self.schema["fields"] if f["name"] not in parts]

    def file_path(self, add_path: str) -> str:
        """Absolute local path of a file named in the log (relative URI-encoded or absolute URI)."""
        if "://" in add_path or add_path.startswith("file:"):
            return local_path(add_path)
        return os.path.join(self.location, unquote(add_path))

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def _check_location(location: str) -> str:
    path = table_uri(location)
    if not os.path.exists(path):
        raise TableNotFoundError(
            f"Table path '{location}' does not exist. Check the path (or the table name) and that the model was built."
        )
    if not os.path.isdir(os.path.join(path, _LOG)):
        raise NotADeltaTableError(
            f"'{location}' is not a Delta table: it has no _delta_log directory. "
            "Only Delta tables can be optimized (file_format: delta in dbt)."
        )
    return path


def latest_version(location: str) -> int:
    """Newest committed version, found by listing the log (no replay)."""
    path = _check_location(location)
    versions = [int(m.group(1)) for n in os.listdir(os.path.join(path, _LOG)) if (m := _COMMIT_RE.match(n))]
    if not versions:
        raise NotADeltaTableError(f"'{location}' has an empty _delta_log (no commits). It is not a Delta table yet.")
    return max(versions)


def read_commit(location: str, version: int) -> list[dict[str, Any]]:
    """The raw actions of one committed version, in file order."""
    path = os.path.join(table_uri(location), _LOG, f"{version:020d}.json")
    try:
        with open(path, "rb") as fh:
            return [json.loads(line) for line in fh.read().splitlines() if line.strip()]
    except FileNotFoundError as exc:
        raise TableNotFoundError(
            f"Version {version} of '{location}' is not in the log (it may have been cleaned up)."
        ) from exc


def read_commits(location: str, start: int, end: int | None = None) -> list[tuple[int, list[dict[str, Any]]]]:
    """Raw actions of versions start..end inclusive (end defaults to the latest)."""
    end = latest_version(location) if end is None else end
    return [(v, read_commit(location, v)) for v in range(start, end + 1)]


def _map_to_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return {k: v for k, v in value}  # pyarrow maps arrive as [(key, value), ...]


def _raw_adds(log_dir: str, version: int) -> dict[str, dict[str, Any]]:
    """Last add action per (decoded) path, from the newest checkpoint <= version and the commits after it.

    Liveness is *not* decided here (deltalake did that); this is a lookup of each live file's raw action.
    """
    names = os.listdir(log_dir)
    checkpoints: dict[int, list[str]] = {}
    for n in names:
        m = _CHECKPOINT_RE.match(n)
        if m and int(m.group(1)) <= version:
            checkpoints.setdefault(int(m.group(1)), []).append(n)
    start = 0
    adds: dict[str, dict[str, Any]] = {}
    if checkpoints:
        import pyarrow.parquet as pq

        cp = max(checkpoints)
        start = cp + 1
        for name in sorted(checkpoints[cp]):
            table = pq.read_table(os.path.join(log_dir, name), columns=[ADD])
            for row in table.column(ADD).to_pylist():
                if row is None:
                    continue
                row = {k: v for k, v in row.items() if v is not None}
                row["partitionValues"] = _map_to_dict(row.get("partitionValues"))
                if "tags" in row:
                    row["tags"] = _map_to_dict(row["tags"])
                adds[unquote(row["path"])] = row
    for v in range(start, version + 1):
        path = os.path.join(log_dir, f"{v:020d}.json")
        if not os.path.exists(path):
            continue
        with open(path, "rb") as fh:
            for line in fh:
                if b'"add"' not in line:
                    continue
                action = json.loads(line)
                if ADD in action:
                    adds[unquote(action[ADD]["path"])] = action[ADD]
    return adds


def load_snapshot(location: str, version: int | None = None) -> Snapshot:
    """Load a table snapshot (latest by default) through deltalake."""
    path = _check_location(location)
    from deltalake import DeltaTable  # heavy import kept out of package import time
    from deltalake.exceptions import TableNotFoundError as DeltaRsNotFound

    try:
        dt = DeltaTable(path, version=version)
    except DeltaRsNotFound as exc:
        raise NotADeltaTableError(f"'{location}' is not a readable Delta table: {exc}") from exc
    except Exception as exc:  # deltalake raises plain exceptions for bad versions
        if version is not None:
            raise TableNotFoundError(f"Version {version} of '{location}' cannot be loaded: {exc}") from exc
        raise
    v = dt.version()
    p = dt.protocol()
    protocol = Protocol(
        p.min_reader_version,
        p.min_writer_version,
        tuple(p.reader_features) if p.reader_features is not None else None,
        tuple(p.writer_features) if p.writer_features is not None else None,
    )
    m = dt.metadata()
    metadata = Metadata(
        id=m.id,
        schema_string=dt.schema().to_json(),
        partition_columns=tuple(m.partition_columns),
        configuration=dict(m.configuration),
        created_time=m.created_time,
        name=m.name,
        description=m.description,
    )
    import pyarrow as pa

    live = pa.table(dt.get_add_actions(flatten=False)).select(["path", "size_bytes", "modification_time"]).to_pylist()
    raw = _raw_adds(os.path.join(path, _LOG), v) if live else {}
    files = []
    for row in live:
        action = raw.get(unquote(row["path"]))
        if action is None:  # should not happen; keep what deltalake told us
            action = {"path": row["path"], "size": row["size_bytes"], "modificationTime": row["modification_time"]}
        files.append(AddFile.from_json(action))
    files.sort(key=lambda f: f.path)
    return Snapshot(path, v, protocol, metadata, tuple(files))


def file_counts(location: str) -> tuple[int, int]:
    """(live files, live bytes): what a report needs, without the raw-action lookup of load_snapshot."""
    path = _check_location(location)
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    dt = DeltaTable(path)
    sizes = pa.table(dt.get_add_actions(flatten=False)).column("size_bytes")
    return len(sizes), int(pc.sum(sizes).as_py() or 0)


def partition_key(values: Mapping[str, str | None], columns: Iterable[str]) -> tuple[str | None, ...]:
    """Raw partition tuple, with "" folded into null as delta-spark does."""
    return tuple((values.get(c) or None) for c in columns)


def summarize(snapshot: Snapshot) -> dict[str, Any]:
    """A JSON-ready summary: version, protocol, schema shape, files and bytes per partition."""
    cols = snapshot.partition_columns
    per: dict[tuple, list[int]] = {}
    for f in snapshot.files:
        per.setdefault(partition_key(f.partition_values, cols), []).append(f.size)
    return {
        "location": snapshot.location,
        "version": snapshot.version,
        "protocol": snapshot.protocol.to_json(),
        "partitionColumns": list(cols),
        "partitionTypes": snapshot.partition_types,
        "numColumns": len(snapshot.schema["fields"]),
        "configuration": dict(snapshot.configuration),
        "numFiles": len(snapshot.files),
        "sizeBytes": snapshot.total_size,
        "partitions": [
            {
                "partition": ", ".join(f"{c}={v}" for c, v in zip(cols, key)) or "(unpartitioned)",
                "numFiles": len(sizes),
                "sizeBytes": sum(sizes),
            }
            for key, sizes in sorted(per.items(), key=lambda kv: repr(kv[0]))
        ],
    }
