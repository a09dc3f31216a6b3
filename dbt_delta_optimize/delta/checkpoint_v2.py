"""V2 checkpoints (PROTOCOL.md "V2 Checkpoint"), read and written.

Reading: a V2 checkpoint is one top-level file (``n.checkpoint.<uuid>.json`` or ``.parquet``, or a
classic-named Parquet file with a ``checkpointMetadata`` row) whose file actions may live in
``sidecar`` files under ``_delta_log/_sidecars/``. Our raw-add readers need the Parquet files that
hold adds and any actions written inline in a JSON top-level file; this module lists them.

Writing: under ``delta.checkpointPolicy=v2`` only V2 checkpoints may be written. deltalake writes a
classic checkpoint; we turn its content into a UUID-named V2 checkpoint: the non-file actions and
``checkpointMetadata`` in the top-level Parquet file, the add and remove actions in one sidecar.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .storage import Storage, join

__all__ = [
    "SIDECAR_DIR",
    "CheckpointFiles",
    "V2Written",
    "all_null",
    "checkpoint_files",
    "choose_checkpoint",
    "has_checkpoint_metadata",
    "is_v2_policy",
    "write_v2_checkpoint",
    "write_v2_from_table",
]

_LOG_DIR = "_delta_log"
SIDECAR_DIR = "_sidecars"
_UUID_NAMED = re.compile(r"^\d{20}\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)$")
_FILE_ACTIONS = ("add", "remove")
_V2_ACTIONS = ("checkpointMetadata", "sidecar")


def is_v2_policy(configuration: Any) -> bool:
    return str(configuration.get("delta.checkpointPolicy", "classic")).lower() == "v2"


@dataclass(frozen=True)
class CheckpointFiles:
    """Where one checkpoint's actions are: Parquet files (top level and sidecars) and inline JSON actions."""

    parquet: tuple[str, ...]
    json_actions: tuple[dict[str, Any], ...] = ()


def choose_checkpoint(names: Iterable[str]) -> tuple[str, ...]:
    """One checkpoint among those at a version: a UUID-named V2 one if any (each is complete), else the classic parts."""
    names = sorted(names)
    v2 = [n for n in names if _UUID_NAMED.match(n)]
    return (v2[0],) if v2 else tuple(names)


def _sidecar_path(root: str, path: str) -> str:
    if "://" in path or path.startswith("/"):
        return path
    return join(root, _LOG_DIR, SIDECAR_DIR, path)


def all_null(row_group: Any, leaf: str) -> bool:
    """Whether a Parquet row group's statistics prove column ``leaf`` (a dotted path) null in every row
    (False when they do not say)."""
    for i in range(row_group.num_columns):
        column = row_group.column(i)
        if column.path_in_schema == leaf:
            stats = column.statistics
            return stats is not None and stats.has_null_count and stats.null_count == row_group.num_rows
    return False


def _parquet_sidecars(storage: Storage, path: str) -> list[str]:
    """The sidecar files a Parquet checkpoint names (only row groups whose statistics allow one are read).

    Nulls are dropped in Python, not with ``pyarrow.compute`` (a tenth of a fresh VACUUM's imports)."""
    import pyarrow.parquet as pq

    with storage.open_input(path) as fh:
        pf = pq.ParquetFile(fh)
        if "sidecar" not in pf.schema_arrow.names:
            return []
        groups = [g for g in range(pf.num_row_groups) if not all_null(pf.metadata.row_group(g), "sidecar.path")]
        if not groups:
            return []
        column = pf.read_row_groups(groups, columns=["sidecar"], use_threads=False).column(0)
        return [r["path"] for r in column.to_pylist() if r is not None]


def checkpoint_files(storage: Storage, root: str, names: Iterable[str]) -> CheckpointFiles:
    """The files holding one checkpoint's actions (classic parts, or a V2 top-level file and its sidecars)."""
    parquet: list[str] = []
    inline: list[dict[str, Any]] = []
    sidecars: list[str] = []
    for name in choose_checkpoint(names):
        path = join(root, _LOG_DIR, name)
        if name.endswith(".json"):
            for line in storage.read_bytes(path).splitlines():
                if not line.strip():
                    continue
                action = json.loads(line)
                if "sidecar" in action:
                    sidecars.append(action["sidecar"]["path"])
                else:
                    inline.append(action)
        elif name.endswith(".parquet"):
            parquet.append(path)
            sidecars.extend(_parquet_sidecars(storage, path))
    parquet.extend(_sidecar_path(root, p) for p in sidecars)
    return CheckpointFiles(tuple(parquet), tuple(inline))


# ------------------------------------------------------------------ writing
def has_checkpoint_metadata(storage: Storage, path: str) -> bool:
    """True if a Parquet checkpoint follows the V2 spec (it has a ``checkpointMetadata`` row)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with storage.open_input(path) as fh:
        pf = pq.ParquetFile(fh)
        if "checkpointMetadata" not in pf.schema_arrow.names:
            return False
        return bool(pc.any(pc.is_valid(pf.read(columns=["checkpointMetadata"]).column(0))).as_py())


def _nullable_type(t: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable_type(f.type), nullable=True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _nullable_type(t.item_type))
    if pa.types.is_list(t):
        return pa.list_(_nullable_type(t.value_type))
    return t


def _nullable(table: Any) -> Any:
    """Every field nullable: a checkpoint row holds one action, so the other actions' required fields are null."""
    import pyarrow as pa

    schema = pa.schema([pa.field(f.name, _nullable_type(f.type), nullable=True) for f in table.schema])
    return table.cast(schema)


def write_v2_checkpoint(storage: Storage, root: str, version: int, classic: str) -> str:
    """A UUID-named V2 checkpoint with one sidecar (delta-spark's layout), from deltalake's checkpoint ``classic``.

    deltalake's classic-named file stays if it follows the V2 spec (checkpointMetadata; the protocol
    allows it, and clients that only know classic names then fail with a protocol error rather than
    a missing checkpoint); a V1-spec one is removed, as the v2 policy allows only V2-spec checkpoints,
    and ``_last_checkpoint`` is rewritten. Returns the top-level file name.
    """
    import pyarrow.parquet as pq

    with storage.open_input(classic) as fh:
        table = pq.ParquetFile(fh).read()  # synchronous, unlike pq.read_table's scanner (apache/arrow#34314)
    written = write_v2_from_table(storage, root, version, table)
    if has_checkpoint_metadata(storage, classic):
        return written.top
    storage.write_bytes(join(root, _LOG_DIR, "_last_checkpoint"), json.dumps(written.last_checkpoint).encode())
    storage.delete(classic)
    return written.top


@dataclass(frozen=True)
class V2Written:
    """A V2 checkpoint just written: its top-level file and sidecar (names and sizes), and what
    ``_last_checkpoint`` says of it."""

    top: str
    top_size: int
    sidecar: str
    sidecar_size: int
    last_checkpoint: dict[str, int]


def write_v2_from_table(storage: Storage, root: str, version: int, table: Any) -> V2Written:
    """A UUID-named V2 checkpoint with one sidecar (delta-spark's layout) holding the actions of ``table``
    (a classic checkpoint's rows, without checkpointMetadata or sidecar rows of its own).

    Writes the sidecar first, then the top-level file (its appearance makes the checkpoint exist);
    ``_last_checkpoint`` is the caller's to write.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    file_rows = pc.or_(
        *[pc.is_valid(table.column(c)) if c in table.column_names else pa.scalar(False) for c in _FILE_ACTIONS]
    )
    file_rows = pc.fill_null(file_rows, False)
    files = _nullable(table.filter(file_rows).select([c for c in _FILE_ACTIONS if c in table.column_names]))
    v2_rows = pc.or_(
        *[pc.is_valid(table.column(c)) if c in table.column_names else pa.scalar(False) for c in _V2_ACTIONS]
    )
    keep = pc.invert(pc.or_(file_rows, pc.fill_null(v2_rows, False)))
    # add and remove stay as (null) columns: delta-spark reads them from the top-level file too
    others = _nullable(table.filter(keep).drop_columns([c for c in _V2_ACTIONS if c in table.column_names]))
    num_adds = int(pc.sum(pc.is_valid(files.column("add"))).as_py() or 0) if "add" in files.column_names else 0

    sidecar_name = f"{version:020d}.checkpoint.0000000001.0000000001.{uuid.uuid4()}.parquet"
    sidecar_path = join(root, _LOG_DIR, SIDECAR_DIR, sidecar_name)
    storage.makedirs(join(root, _LOG_DIR, SIDECAR_DIR))
    sink = pa.BufferOutputStream()
    pq.write_table(files, sink)
    sidecar_bytes = sink.getvalue().to_pybytes()
    storage.write_bytes(sidecar_path, sidecar_bytes)
    now = int(time.time() * 1000)
    tags = pa.map_(pa.string(), pa.string())
    extra = pa.table(
        {
            "checkpointMetadata": pa.array(
                [{"version": version, "tags": None}, None],
                pa.struct([("version", pa.int64()), ("tags", tags)]),
            ),
            "sidecar": pa.array(
                [
                    None,
                    {"path": sidecar_name, "sizeInBytes": len(sidecar_bytes), "modificationTime": now, "tags": None},
                ],
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("sizeInBytes", pa.int64()),
                        ("modificationTime", pa.int64()),
                        ("tags", tags),
                    ]
                ),
            ),
        }
    )
    top = pa.concat_tables([others, extra], promote_options="default")
    top_name = f"{version:020d}.checkpoint.{uuid.uuid4()}.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(top, sink)
    top_bytes = sink.getvalue().to_pybytes()
    storage.write_bytes(join(root, _LOG_DIR, top_name), top_bytes)
    last = {
        "version": version,
        "size": top.num_rows + files.num_rows,
        "sizeInBytes": len(top_bytes) + len(sidecar_bytes),
        "numOfAddFiles": num_adds,
    }
    return V2Written(top_name, len(top_bytes), sidecar_name, len(sidecar_bytes), last)
