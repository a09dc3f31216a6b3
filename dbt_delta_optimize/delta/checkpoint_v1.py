"""Our own checkpoint after our commit, from what the commit already holds (PROTOCOL.md "Checkpoints").

deltalake's ``create_checkpoint`` loads the table again at the new version: on an object store the log is
listed and every commit after the last checkpoint read again, a round trip each, before a byte is written.
The commit holds that state already: the snapshot it planned from (the live adds as Arrow columns; the log's
listing and commits in ``Snapshot.log_cache``, a small checkpoint held whole) and the commits since (the
winners it rebased over, and its own). The checkpoint is that state, written as delta-spark writes one:

- one row per action: protocol, metaData, the live domainMetadata, txn (those updated within
  ``delta.setTransactionRetentionDuration`` when it is set), the live adds, and the tombstones (removes
  newer than ``delta.deletedFileRetentionDuration``), adds and removes with dataChange=false
  (``InMemoryLogReplay``);
- ``remove`` without stats and tags; ``add`` with its stats as JSON (``delta.checkpoint.writeStatsAsJson``)
  and never ``stats_parsed`` or ``partitionValues_parsed``: a table that asks for them
  (``delta.checkpoint.writeStatsAsStruct=true``) gets deltalake's checkpoint, as before;
- ``_last_checkpoint`` with version, size, sizeInBytes and numOfAddFiles.

Under ``delta.checkpointPolicy=v2`` the same rows become a UUID-named V2 checkpoint and its sidecar
(``checkpoint_v2.write_v2_from_table``). The non-file actions and tombstones at the snapshot's version are
read from its checkpoint (only those columns) and its commits (held). Whatever this module does not
handle is a reason (``unsupported``), and the caller lets deltalake write the checkpoint instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import unquote

from .. import arrow_kernels as ak
from ..options.values import parse_interval_ms
from .actions import ADD, DOMAIN_METADATA, METADATA, PROTOCOL, REMOVE, TXN
from .arrow_arrays import all_false, mask_without
from .checkpoint_adds import add_type
from .checkpoint_v2 import all_null, checkpoint_files, is_v2_policy, write_v2_from_table
from .log import LOG_DIR, LogCache
from .snapshot import Snapshot
from .storage import Storage, join

__all__ = ["WrittenCheckpoint", "checkpoint_schema", "checkpoint_table", "unsupported", "write_checkpoint"]

LAST_CHECKPOINT = "_last_checkpoint"
#: delta-spark's default ``delta.deletedFileRetentionDuration``: tombstones younger than this stay in a checkpoint.
DEFAULT_TOMBSTONE_RETENTION = "interval 1 week"
#: Rows per Parquet row group: our readers read a checkpoint one row group at a time.
ROW_GROUP_ROWS = 1 << 17
#: The fields a checkpoint's remove keeps (no stats, no tags: PROTOCOL.md "Checkpoint Schema").
REMOVE_FIELDS = (
    "path",
    "deletionTimestamp",
    "dataChange",
    "extendedFileMetadata",
    "partitionValues",
    "size",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)
_NON_FILE = (PROTOCOL, METADATA, TXN, DOMAIN_METADATA, REMOVE)
#: A field every action of each kind has: a row group whose statistics say it is null in every row holds none.
_REQUIRED_LEAF = {
    PROTOCOL: "protocol.minReaderVersion",
    METADATA: "metaData.id",
    TXN: "txn.appId",
    DOMAIN_METADATA: "domainMetadata.domain",
    REMOVE: "remove.path",
}

Key = tuple[str, str | None]  #: (decoded path, deletion vector id): the log's identity of a file action


@cache
def checkpoint_schema() -> Any:
    """The Arrow schema of a V1 checkpoint (every field nullable: a row holds one action)."""
    import pyarrow as pa

    string_map = pa.map_(pa.string(), pa.string())
    strings = pa.list_(pa.string())
    add = add_type()
    removes = {f.name: f for f in add}
    removes.update({"deletionTimestamp": pa.field("deletionTimestamp", pa.int64())})
    removes.update({"extendedFileMetadata": pa.field("extendedFileMetadata", pa.bool_())})
    return pa.schema(
        [
            ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
            ("add", add),
            ("remove", pa.struct([removes[name] for name in REMOVE_FIELDS])),
            (
                "metaData",
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("name", pa.string()),
                        ("description", pa.string()),
                        ("format", pa.struct([("provider", pa.string()), ("options", string_map)])),
                        ("schemaString", pa.string()),
                        ("partitionColumns", strings),
                        ("configuration", string_map),
                        ("createdTime", pa.int64()),
                    ]
                ),
            ),
            (
                "protocol",
                pa.struct(
                    [
                        ("minReaderVersion", pa.int32()),
                        ("minWriterVersion", pa.int32()),
                        ("readerFeatures", strings),
                        ("writerFeatures", strings),
                    ]
                ),
            ),
            (
                "domainMetadata",
                pa.struct([("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]),
            ),
        ]
    )


def _dv_id(dv: Any) -> str | None:
    """A raw deletionVector's unique id (None for none), as ``DeletionVector.unique_id``."""
    if not dv:
        return None
    base = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    return base if dv.get("offset") is None else f"{base}@{dv['offset']}"


def _key(action: Mapping[str, Any]) -> Key:
    return (unquote(str(action["path"])), _dv_id(action.get("deletionVector")))


@dataclass
class _Replay:
    """The log's actions other than the live adds, replayed: the newest protocol, metaData, txn per app and
    domain, the tombstones; and, for the commits after the snapshot (``after``), their adds and removes."""

    protocol: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] | None = None
    txns: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    domains: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    tombstones: dict[Key, Mapping[str, Any]] = field(default_factory=dict)
    added: dict[Key, Mapping[str, Any]] = field(default_factory=dict)  #: after the snapshot, live
    removed: set[Key] = field(default_factory=set)  #: after the snapshot
    after: bool = False

    def apply(self, action: Mapping[str, Any]) -> None:
        if ADD in action:
            key = _key(action[ADD])
            self.tombstones.pop(key, None)
            if self.after:
                self.added[key] = action[ADD]
        elif REMOVE in action:
            key = _key(action[REMOVE])
            self.tombstones[key] = action[REMOVE]
            if self.after:
                self.added.pop(key, None)
                self.removed.add(key)
        elif PROTOCOL in action:
            self.protocol = action[PROTOCOL]
        elif METADATA in action:
            self.metadata = action[METADATA]
        elif TXN in action:
            self.txns[str(action[TXN]["appId"])] = action[TXN]
        elif DOMAIN_METADATA in action:
            dm = action[DOMAIN_METADATA]
            if dm.get("removed"):
                self.domains.pop(str(dm["domain"]), None)
            else:
                self.domains[str(dm["domain"])] = dm


def _read_checkpoint(files: Storage, root: str, names: Sequence[str], replay: _Replay) -> None:
    """The checkpoint's non-add actions into ``replay``: only those columns, only row groups holding some."""
    import pyarrow.parquet as pq

    where = checkpoint_files(files, root, names)
    for path in where.parquet:
        with files.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            kinds = [k for k in _NON_FILE if k in pf.schema_arrow.names]
            meta = pf.metadata
            groups = [
                g
                for g in range(pf.num_row_groups)
                if any(not all_null(meta.row_group(g), _REQUIRED_LEAF[k]) for k in kinds)
            ]
            if not groups:
                continue
            present = pf.schema_arrow.field(REMOVE).type if REMOVE in kinds else None
            columns = [
                *(k for k in kinds if k != REMOVE),
                *(f"{REMOVE}.{f}" for f in REMOVE_FIELDS if present is not None and present.get_field_index(f) >= 0),
            ]
            table = pf.read_row_groups(groups, columns=columns, use_threads=False)
        for kind in kinds:
            column = table.column(kind)
            for row in ak.filter_(column, ak.is_valid(column)).to_pylist():
                replay.apply({kind: row})
    for action in where.json_actions:
        replay.apply(action)


def _replay_to(snapshot: Snapshot, cache: LogCache) -> _Replay | str:
    """The log up to the snapshot's version, replayed (a reason when its commits are not all listed)."""
    from .log import parse_commit

    listing, version = cache.listing, snapshot.version
    cp = listing.checkpoint_at_or_before(version)
    first = 0 if cp is None else cp + 1
    versions = [v for v in listing.commits if first <= v <= version]
    if versions != list(range(first, version + 1)):
        return f"the listing lacks commits between {first} and {version}"
    replay = _Replay()
    if cp is not None:
        _read_checkpoint(cache.files, cache.root, listing.checkpoints[cp], replay)
    for v, data in cache.commit_bytes(versions):
        for action in parse_commit(data, cache.root, v):
            replay.apply(action)
    return replay


def unsupported(snapshot: Snapshot, version: int, commits: Sequence[tuple[int, Sequence[Any]]]) -> str | None:
    """Why this module cannot write the checkpoint at ``version`` (None when it can)."""
    conf = snapshot.configuration
    if snapshot.log_cache is None:
        return "the snapshot was not read from the log"
    if str(conf.get("delta.checkpoint.writeStatsAsStruct", "false")).strip().lower() == "true":
        return "delta.checkpoint.writeStatsAsStruct asks for stats_parsed and partitionValues_parsed"
    if str(conf.get("delta.checkpoint.writeStatsAsJson", "true")).strip().lower() != "true":
        return "delta.checkpoint.writeStatsAsJson is not true"
    if [v for v, _ in commits] != list(range(snapshot.version + 1, version + 1)):
        return f"the commits after version {snapshot.version} up to {version} are not all at hand"
    for key in ("delta.deletedFileRetentionDuration", "delta.setTransactionRetentionDuration"):
        if key in conf:
            try:
                parse_interval_ms(conf[key])
            except ValueError:
                return f"{key} is not an interval ({conf[key]!r})"
    return None


def _all_fields(snapshot: Snapshot) -> Any:
    """Every field of the snapshot's live adds (the held ones, the others read from the log once)."""
    import pyarrow as pa

    table = snapshot.file_table
    held = {f.name for f in table.adds.type}
    target = add_type()
    wanted = [f.name for f in target if f.name not in held and f.name not in table.null_fields]
    read = table.lazy.read(wanted) if wanted and table.lazy is not None else None
    children = []
    for f in target:
        if f.name in held:
            child = table.adds.field(f.name)
            children.append(child if child.type == f.type else ak.cast(child, f.type))
        elif read is not None and read.type.get_field_index(f.name) >= 0:
            children.append(read.field(f.name))
        else:
            children.append(pa.nulls(len(table), f.type))
    return pa.StructArray.from_arrays(children, fields=list(target))


def _without_data_change(adds: Any) -> Any:
    import pyarrow as pa

    index = adds.type.get_field_index("dataChange")
    children = [adds.field(i) for i in range(adds.type.num_fields)]
    children[index] = all_false(len(adds))
    return pa.StructArray.from_arrays(children, fields=list(adds.type))


def _live_adds(snapshot: Snapshot, replay: _Replay) -> Any:
    """The snapshot's live adds less those the commits after it removed or added again, then theirs."""
    import pyarrow as pa

    adds = _all_fields(snapshot)
    touched = {k[0] for k in replay.removed} | {k[0] for k in replay.added}
    if touched and len(adds):
        decoded = snapshot.file_table.decoded_paths()
        hits = ak.indices_nonzero(ak.is_in(decoded, pa.array(sorted(touched), pa.string())))
        if len(hits):
            rows = ak.take(adds, hits).to_pylist()
            again = {k[0] for k in replay.added}
            drop = {
                int(i)
                for i, row in zip(hits.to_pylist(), rows)
                if _key(row) in replay.removed or unquote(row["path"]) in again
            }
            adds = ak.filter_(adds, mask_without(len(adds), drop))
    if replay.added:
        adds = pa.concat_arrays([adds, pa.array(list(replay.added.values()), add_type())])
    return _without_data_change(adds)


def _retention_ms(conf: Mapping[str, str], key: str, default: str | None) -> int | None:
    text = conf.get(key, default)
    return None if text is None else parse_interval_ms(text)


def checkpoint_table(
    snapshot: Snapshot, commits: Sequence[tuple[int, Sequence[Mapping[str, Any]]]], *, now_ms: int | None = None
) -> Any:
    """The checkpoint's rows (a pyarrow Table of ``checkpoint_schema``) for the snapshot with ``commits`` (every
    version after it, in order) applied. Check ``unsupported`` first."""
    import pyarrow as pa

    cache = snapshot.log_cache
    assert cache is not None
    replay = _replay_to(snapshot, cache)
    if isinstance(replay, str):
        raise ValueError(replay)
    replay.after = True
    for _, actions in commits:
        for action in actions:
            replay.apply(action)
    if replay.protocol is None or replay.metadata is None:
        raise ValueError("no protocol or metaData in the log")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    conf = snapshot.configuration
    tombstone_ms = _retention_ms(conf, "delta.deletedFileRetentionDuration", DEFAULT_TOMBSTONE_RETENTION)
    txn_ms = _retention_ms(conf, "delta.setTransactionRetentionDuration", None)
    assert tombstone_ms is not None
    txns = [t for t in replay.txns.values() if txn_ms is None or (t.get("lastUpdated") or 0) > now - txn_ms]
    tombstones = sorted(
        (
            {**r, "dataChange": False}
            for r in replay.tombstones.values()
            if (r.get("deletionTimestamp") or 0) > now - tombstone_ms
        ),
        key=lambda r: str(r["path"]),
    )
    schema = checkpoint_schema()
    metadata = {**replay.metadata, "format": replay.metadata.get("format") or {"provider": "parquet", "options": {}}}
    sections = [
        (PROTOCOL, [replay.protocol]),
        (METADATA, [metadata]),
        (DOMAIN_METADATA, list(replay.domains.values())),
        (TXN, txns),
        (ADD, _live_adds(snapshot, replay)),
        (REMOVE, tombstones),
    ]
    tables = []
    for name, rows in sections:
        if not len(rows):
            continue
        column = rows if isinstance(rows, pa.Array) else pa.array(rows, schema.field(name).type)
        tables.append(
            pa.Table.from_arrays(
                [column if f.name == name else pa.nulls(len(column), f.type) for f in schema], schema=schema
            )
        )
    return pa.concat_tables(tables)


@dataclass(frozen=True)
class WrittenCheckpoint:
    """A checkpoint just written: the files under ``_delta_log`` (name, size), ``_last_checkpoint`` last."""

    version: int
    files: tuple[tuple[str, int], ...]
    num_adds: int


def _parquet_bytes(table: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=ROW_GROUP_ROWS, compression="snappy", store_schema=False)
    return bytes(sink.getvalue().to_pybytes())


def write_checkpoint(
    snapshot: Snapshot,
    version: int,
    commits: Sequence[tuple[int, Sequence[Mapping[str, Any]]]],
    *,
    storage: Storage | None = None,
    now_ms: int | None = None,
) -> WrittenCheckpoint:
    """Write the checkpoint at ``version`` (classic, or V2 under the v2 policy) and ``_last_checkpoint``.

    The checkpoint file appears whole (one write) before ``_last_checkpoint`` names it."""
    storage = storage if storage is not None else snapshot.storage
    table = checkpoint_table(snapshot, commits, now_ms=now_ms)
    log_dir = join(snapshot.location, LOG_DIR)
    num_adds = int(ak.sum_(ak.is_valid(table.column(ADD))).as_py() or 0)
    written: list[tuple[str, int]] = []
    if is_v2_policy(snapshot.configuration):
        v2 = write_v2_from_table(storage, snapshot.location, version, table)
        last: dict[str, int] = v2.last_checkpoint
        written.append((v2.top, v2.top_size))
    else:
        data = _parquet_bytes(table)
        name = f"{version:020d}.checkpoint.parquet"
        storage.write_bytes(join(log_dir, name), data)
        last = {"version": version, "size": table.num_rows, "sizeInBytes": len(data), "numOfAddFiles": num_adds}
        written.append((name, len(data)))
    pointer = json.dumps(last).encode()
    storage.write_bytes(join(log_dir, LAST_CHECKPOINT), pointer)
    written.append((LAST_CHECKPOINT, len(pointer)))
    return WrittenCheckpoint(version, tuple(written), num_adds)
