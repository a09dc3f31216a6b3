"""Delta transaction-log actions as frozen dataclasses.

Field names follow the Delta protocol (PROTOCOL.md); ``to_json``/``from_json`` round-trip
the exact log shape so a RemoveFile carries everything its AddFile had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

__all__ = [
    "ADD",
    "COMMIT_INFO",
    "METADATA",
    "PROTOCOL",
    "REMOVE",
    "AddFile",
    "CommitInfo",
    "DeletionVector",
    "DomainMetadata",
    "Metadata",
    "Protocol",
    "RemoveFile",
    "json_line",
    "loads",
    "parse_stats",
]

ADD = "add"
REMOVE = "remove"
METADATA = "metaData"
PROTOCOL = "protocol"
COMMIT_INFO = "commitInfo"
TXN = "txn"
CDC = "cdc"
DOMAIN_METADATA = "domainMetadata"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if isinstance(d, MappingProxyType):  # already a frozen copy (an AddFile's own, carried to its RemoveFile)
        return d
    return MappingProxyType(dict(d)) if d else _EMPTY


def loads(text: str | bytes) -> Any:
    """``json.loads`` by orjson (a C codec, 2.5 to 3 times faster on log lines and stats), the standard
    library for what orjson refuses (NaN, integers beyond 64 bits, invalid UTF-8), so the value is the same."""
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def json_line(obj: Mapping[str, Any]) -> bytes:
    """Compact JSON of one object and its newline: byte for byte what ``json.dumps(o, separators=(",", ":"))``
    writes, by orjson (3 times faster per action of a large commit) when its text is ASCII, else by the
    standard library (which escapes the rest as ``\\uXXXX``). The one ASCII character the two write
    differently is DEL, which orjson leaves raw; a raw DEL byte can only be inside a string (delta-spark
    ends truncated string maxima with it), so it is escaped as json does. For add and remove actions,
    which hold no floats (orjson writes ``1e-7`` where json writes ``1e-07``)."""
    import orjson

    try:
        encoded = orjson.dumps(obj)
    except (orjson.JSONEncodeError, TypeError):  # an integer beyond 64 bits, a type orjson does not take
        encoded = b"\x80"
    if encoded.isascii():
        return encoded.replace(b"\x7f", b"\\u007f") + b"\n"
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def parse_stats(stats: str | None) -> dict[str, Any] | None:
    """Parse an AddFile's JSON stats string; None when absent or unparsable."""
    if not stats:
        return None
    try:
        value = loads(stats)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Protocol:
    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
        }
        if self.reader_features is not None:
            out["readerFeatures"] = list(self.reader_features)
        if self.writer_features is not None:
            out["writerFeatures"] = list(self.writer_features)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Protocol:
        rf, wf = d.get("readerFeatures"), d.get("writerFeatures")
        return cls(
            int(d["minReaderVersion"]),
            int(d["minWriterVersion"]),
            tuple(rf) if rf is not None else None,
            tuple(wf) if wf is not None else None,
        )


@dataclass(frozen=True)
class Metadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    created_time: int | None = None
    name: str | None = None
    description: str | None = None

    @property
    def schema(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.schema_string)
        return value

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Metadata:
        return cls(
            id=d["id"],
            schema_string=d["schemaString"],
            partition_columns=tuple(d.get("partitionColumns") or ()),
            configuration=_frozen(d.get("configuration")),
            created_time=d.get("createdTime"),
            name=d.get("name"),
            description=d.get("description"),
        )


@dataclass(frozen=True)
class DomainMetadata:
    """A named configuration string kept in the log (PROTOCOL.md "Domain Metadata").

    The newest action per domain wins; ``removed`` tombstones it. ``delta.*`` domains belong to
    table features (``delta.clustering``, ``delta.rowTracking``); others belong to writers.
    """

    domain: str
    configuration: str
    removed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"domain": self.domain, "configuration": self.configuration, "removed": self.removed}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DomainMetadata:
        return cls(str(d["domain"]), str(d.get("configuration") or ""), bool(d.get("removed", False)))

    @property
    def config(self) -> dict[str, Any]:
        """The configuration parsed as JSON (every ``delta.*`` domain is JSON); {} when it is not an object."""
        try:
            value = json.loads(self.configuration)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class DeletionVector:
    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @property
    def unique_id(self) -> str:
        """Same key delta-spark uses to tell two DVs of one path apart."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> DeletionVector | None:
        if not d:
            return None
        return cls(d["storageType"], d["pathOrInlineDv"], int(d["sizeInBytes"]), int(d["cardinality"]), d.get("offset"))


@dataclass(frozen=True)
class AddFile:
    """A live data file. ``path`` is as written in the log (relative and URI-encoded, or absolute)."""

    path: str
    partition_values: Mapping[str, str | None]
    size: int
    modification_time: int
    data_change: bool = True
    stats: str | None = None
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    deletion_vector: DeletionVector | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_values", _frozen(self.partition_values))
        object.__setattr__(self, "tags", _frozen(self.tags))

    @property
    def parsed_stats(self) -> dict[str, Any] | None:
        return parse_stats(self.stats)

    @cached_property
    def num_records(self) -> int | None:
        """numRecords of the stats, parsed once (validation and planning ask for it per file)."""
        st = self.parsed_stats
        n = st.get("numRecords") if st else None
        return int(n) if n is not None else None

    @property
    def key(self) -> tuple[str, str | None]:
        """(path, DV id): the identity delta-spark's conflict checks use."""
        return (self.path, self.deletion_vector.unique_id if self.deletion_vector else None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        if self.stats is not None:
            out["stats"] = self.stats
        if self.tags:
            out["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        if self.clustering_provider is not None:
            out["clusteringProvider"] = self.clustering_provider
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AddFile:
        return cls(
            path=d["path"],
            partition_values=d.get("partitionValues") or {},
            size=int(d["size"]),
            modification_time=int(d.get("modificationTime") or 0),
            data_change=bool(d.get("dataChange", True)),
            stats=d.get("stats"),
            tags=d.get("tags") or {},
            deletion_vector=DeletionVector.from_json(d.get("deletionVector")),
            base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
            clustering_provider=d.get("clusteringProvider"),
        )

    @classmethod
    def from_row(
        cls,
        path: str | None,
        partition_values: list[tuple[str, str | None]] | None,
        size: int | None,
        modification_time: int | None,
        data_change: bool | None,
        stats: str | None,
        tags: list[tuple[str, str]] | None,
        deletion_vector: dict[str, Any] | None,
        base_row_id: int | None,
        default_row_commit_version: int | None,
        clustering_provider: str | None,
    ) -> AddFile:
        """One add's fields as Arrow's columns give them (maps as pairs, in ``checkpoint_adds.add_type``'s order): the
        AddFile ``from_json`` makes of that add, without a dict per row (``FileTable.files``). A missing path or
        size is an error, as there; null fields take the protocol's defaults."""
        if path is None or size is None:
            raise KeyError("path" if path is None else "size")
        dv = {k: v for k, v in deletion_vector.items() if v is not None} if deletion_vector else None
        return cls(
            path=path,
            partition_values=dict(partition_values) if partition_values else {},
            size=int(size),
            modification_time=int(modification_time or 0),
            data_change=True if data_change is None else bool(data_change),
            stats=stats,
            tags=dict(tags) if tags else {},
            deletion_vector=DeletionVector.from_json(dv),
            base_row_id=base_row_id,
            default_row_commit_version=default_row_commit_version,
            clustering_provider=clustering_provider,
        )

    def remove(self, deletion_timestamp: int, *, data_change: bool = False) -> RemoveFile:
        """The RemoveFile that retires this file, carrying its metadata over (extendedFileMetadata)."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=self.partition_values,
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


@dataclass(frozen=True)
class RemoveFile:
    path: str
    deletion_timestamp: int | None
    data_change: bool = False
    extended_file_metadata: bool = True
    partition_values: Mapping[str, str | None] = field(default_factory=lambda: _EMPTY)
    size: int | None = None
    stats: str | None = None
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    deletion_vector: DeletionVector | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_values", _frozen(self.partition_values))
        object.__setattr__(self, "tags", _frozen(self.tags))

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.path, self.deletion_vector.unique_id if self.deletion_vector else None)

    @cached_property
    def json_line(self) -> bytes:
        """The action's line in a commit (``json_line``), made once: OPTIMIZE makes it as each bin finishes,
        while other bins run, so the commit after the last bin does not encode thousands of removes."""
        return json_line({REMOVE: self.to_json()})

    @cached_property
    def reads_back(self) -> bool:
        """Whether ``json_line`` reads back as this very action: then a landed commit holding that line holds
        this action, and OPTIMIZE's check after landing need not parse it again (``inspect.landed``)."""
        return RemoveFile.from_json(loads(self.json_line)[REMOVE]) == self

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "dataChange": self.data_change}
        if self.deletion_timestamp is not None:
            out["deletionTimestamp"] = self.deletion_timestamp
        out["extendedFileMetadata"] = self.extended_file_metadata
        if self.extended_file_metadata:
            out["partitionValues"] = dict(self.partition_values)
            if self.size is not None:
                out["size"] = self.size
        if self.stats is not None:
            out["stats"] = self.stats
        if self.tags:
            out["tags"] = dict(self.tags)
        if self.deletion_vector is not None:
            out["deletionVector"] = self.deletion_vector.to_json()
        if self.base_row_id is not None:
            out["baseRowId"] = self.base_row_id
        if self.default_row_commit_version is not None:
            out["defaultRowCommitVersion"] = self.default_row_commit_version
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RemoveFile:
        return cls(
            path=d["path"],
            deletion_timestamp=d.get("deletionTimestamp"),
            data_change=bool(d.get("dataChange", True)),
            extended_file_metadata=bool(d.get("extendedFileMetadata", False)),
            partition_values=d.get("partitionValues") or {},
            size=d.get("size"),
            stats=d.get("stats"),
            tags=d.get("tags") or {},
            deletion_vector=DeletionVector.from_json(d.get("deletionVector")),
            base_row_id=d.get("baseRowId"),
            default_row_commit_version=d.get("defaultRowCommitVersion"),
        )


@dataclass(frozen=True)
class CommitInfo:
    """commitInfo in delta-spark's shape: string-valued operationMetrics, SnapshotIsolation."""

    operation: str
    operation_parameters: Mapping[str, Any]
    operation_metrics: Mapping[str, str]
    read_version: int
    timestamp: int
    engine_info: str
    txn_id: str
    isolation_level: str = "SnapshotIsolation"
    is_blind_append: bool = False
    #: set when the table has in-commit timestamps (then this commitInfo must be the commit's first action)
    in_commit_timestamp: int | None = None
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def to_json(self) -> dict[str, Any]:
        head: dict[str, Any] = (
            {} if self.in_commit_timestamp is None else {"inCommitTimestamp": self.in_commit_timestamp}
        )
        tail: dict[str, Any] = {"tags": dict(self.tags)} if self.tags else {}
        return {
            **head,
            "timestamp": self.timestamp,
            "operation": self.operation,
            "operationParameters": dict(self.operation_parameters),
            "readVersion": self.read_version,
            "isolationLevel": self.isolation_level,
            "isBlindAppend": self.is_blind_append,
            "operationMetrics": {k: str(v) for k, v in self.operation_metrics.items()},
            **tail,
            "engineInfo": self.engine_info,
            "txnId": self.txn_id,
        }
