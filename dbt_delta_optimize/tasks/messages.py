"""What crosses between the driver and a Spark task: frozen dataclasses, one JSON encoding.

The driver turns each bin into a ``BinTask``; a task answers with exactly one outcome:
``Rewritten`` (the new file, its size and its stats), ``Fallback`` (Arrow cannot write this bin
faithfully: Spark does it), ``Failed`` (with a typed kind and the file it concerns) or
``NotStarted`` (the time budget was spent before the task began). An outcome is data, never a
failed Spark job whose text the driver would have to parse.

The same JSON text travels on classic sessions (an RDD of messages, outcomes through an
accumulator) and on Spark Connect (a DataFrame, outcomes as rows). This module imports only the
standard library: executors import it, and so does the stdlib-only bootstrap that answers when
they cannot import this package at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

__all__ = [
    "DEFAULT_ROW_GROUP_BYTES",
    "BinTask",
    "CopyReport",
    "DeleteTask",
    "DeletedFiles",
    "Failed",
    "FailureKind",
    "Fallback",
    "InputFile",
    "ListTask",
    "ListedPrefix",
    "NotStarted",
    "Outcome",
    "Rewritten",
    "RowTrackingColumns",
    "StatsComputed",
    "StatsSpec",
    "StatsTask",
    "StoreRef",
    "Task",
    "WorkerInfo",
    "decode_outcome",
    "decode_task",
    "encode",
]

#: Row groups are buffered up to about this many bytes of Arrow data before they are written.
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024

FailureKind = Literal["data_file", "storage", "cannot_import", "internal"]


@dataclass(frozen=True)
class StoreRef:
    """Where the table lives, and the options a task needs to open its store (empty for a local table)."""

    root: str
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InputFile:
    """One file of a bin: its location, its size from the log, and what the log says about its rows."""

    path: str
    size: int
    #: the deletion vector exactly as logged (``DeletionVector.to_json()``), when rows were deleted
    deletion_vector: Mapping[str, Any] | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None


@dataclass(frozen=True)
class RowTrackingColumns:
    """The hidden columns that keep each row's stable id and commit version (row tracking)."""

    row_id: str
    commit_version: str


@dataclass(frozen=True)
class StatsSpec:
    """What a task needs to compute a new file's Delta stats exactly as delta-spark writes them."""

    schema: Mapping[str, Any]  #: the table's logical schema (JSON)
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str]
    protocol: Mapping[str, Any] | None  #: the table's protocol action (decides tightBounds)
    time_zone: str  #: Spark's session time zone (timestamp bounds)
    #: the session's spark.databricks.io.skipping.stringPrefixLength where the table sets no prefix
    string_prefix_length: int | None = None


@dataclass(frozen=True)
class BinTask:
    """Rewrite ``inputs`` (one bin) into one Parquet file at ``output`` and report what was written."""

    bin_id: int
    store: StoreRef
    inputs: tuple[InputFile, ...]
    output: str
    fields: tuple[Mapping[str, Any], ...]  #: physical data fields of the table (Delta schema JSON)
    compression: str
    by_id: bool  #: column mapping's id mode: match Parquet columns by field id
    row_tracking: RowTrackingColumns | None
    stats: StatsSpec
    deadline: float | None = None  #: epoch seconds after which the task does not start the bin
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    #: input row groups this large (compressed) are copied byte for byte; 0: no input is that large (or off)
    copy_min_bytes: int = 0
    #: the inputs' pages may be joined where a column allows it (``tasks.chunk_merge``); off with the copy
    merge_pages: bool = False


@dataclass(frozen=True)
class WorkerInfo:
    """Where a task ran: interpreter, host, process, and the file our package was imported from."""

    python: str
    host: str
    pid: int
    package: str | None


@dataclass(frozen=True)
class CopyReport:
    """What the row-group copy did for a bin: row groups and bytes copied verbatim or re-encoded, and why not."""

    row_groups_copied: int = 0
    bytes_copied: int = 0
    row_groups_reencoded: int = 0
    bytes_reencoded: int = 0
    fallback: bool = False  #: the whole bin was re-encoded (``reasons`` has the one reason)
    #: (kind, detail) of why the bin, or some inputs' large row groups, were re-encoded
    reasons: tuple[tuple[str, str], ...] = ()
    #: the chunk merge: compressed bytes of the pages joined unchanged, and the columns whose pages were joined
    bytes_joined: int = 0
    columns_joined: int = 0


@dataclass(frozen=True)
class Rewritten:
    """The bin's file was written at its output location."""

    bin_id: int
    size: int
    rows: int
    stats: str
    modification_time: int  #: milliseconds since the epoch
    worker: WorkerInfo
    seconds: float = 0.0
    copy: CopyReport | None = None  #: set when the row-group copy was considered
    requests: Mapping[str, Any] = field(default_factory=dict)  #: what the task asked of the store (``to_dict``)


@dataclass(frozen=True)
class Fallback:
    """Arrow cannot write this bin faithfully (a legacy calendar, a type it does not map): use Spark."""

    bin_id: int
    reason: str


@dataclass(frozen=True)
class Failed:
    """The bin could not be rewritten; ``path`` names the input (or output) the failure concerns.

    ``retryable``: a store that may answer later. ``trace``: the task's Python traceback, which the
    driver logs at debug level only (``--debug`` shows where in the task it failed; nothing else does).
    """

    bin_id: int
    kind: FailureKind
    error_type: str
    message: str
    path: str | None = None
    retryable: bool = False
    trace: str | None = None


@dataclass(frozen=True)
class NotStarted:
    """The task began after the time budget's deadline, so it did nothing."""

    bin_id: int
    reason: str


@dataclass(frozen=True)
class StatsTask:
    """``analyze``: compute one data file's Delta stats (``bin_id`` numbers the file within its job)."""

    bin_id: int
    store: StoreRef
    location: str  #: the data file, as the table's storage names it
    stats: StatsSpec
    tight_bounds: bool  #: False for a file with a deletion vector (wide bounds)


@dataclass(frozen=True)
class StatsComputed:
    """The file's stats JSON, and where it was computed."""

    bin_id: int
    stats: str
    worker: WorkerInfo
    requests: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ListTask:
    """VACUUM on a cluster: list top-level folders of the table (``prefixes``, relative; usually one), or with
    the one prefix empty the whole table (one without partition folders), through the table's storage."""

    bin_id: int
    store: StoreRef
    prefixes: tuple[str, ...]
    partition_columns: tuple[str, ...]  #: which ``_x=`` folders are partitions, not hidden names


@dataclass(frozen=True)
class ListedPrefix:
    """The prefixes' files as ``(path, size, mtime_ms)`` and their folders, paths relative to the table root."""

    bin_id: int
    files: tuple[tuple[str, int, int], ...]
    folders: tuple[str, ...]
    worker: WorkerInfo
    requests: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteTask:
    """VACUUM on a cluster: delete a batch of files of one top-level prefix (paths relative to the root),
    with their Hadoop checksum sidecars."""

    bin_id: int
    store: StoreRef
    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    sidecars: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeletedFiles:
    """How many of a batch's files were deleted (a store's bulk delete counts what it was asked) and their bytes."""

    bin_id: int
    files: int
    bytes: int
    worker: WorkerInfo
    requests: Mapping[str, Any] = field(default_factory=dict)


Outcome = Rewritten | Fallback | Failed | NotStarted | StatsComputed | ListedPrefix | DeletedFiles
Task = BinTask | StatsTask | ListTask | DeleteTask

_OUTCOMES: dict[str, type[Outcome]] = {
    c.__name__: c for c in (Rewritten, Fallback, Failed, NotStarted, StatsComputed, ListedPrefix, DeletedFiles)
}


def _plain(value: Any) -> Any:
    """json's hook for what it cannot write itself: a dataclass (its fields, shallow) or a read-only mapping."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__} in a task message")


def encode(message: Task | Outcome) -> str:
    """One line of JSON, tagged with the message's type (no deep copy: json walks the fields itself)."""
    return json.dumps({"type": type(message).__name__, **_plain(message)}, separators=(",", ":"), default=_plain)


def _stats_spec(d: Mapping[str, Any]) -> StatsSpec:
    return StatsSpec(**{**d, "partition_columns": tuple(d["partition_columns"])})


def decode_task(text: str) -> Task:
    d = json.loads(text)
    kind = d.pop("type", None)
    if kind == "StatsTask":
        return StatsTask(**{**d, "store": StoreRef(**d["store"]), "stats": _stats_spec(d["stats"])})
    if kind == "ListTask":
        return ListTask(d["bin_id"], StoreRef(**d["store"]), tuple(d["prefixes"]), tuple(d["partition_columns"]))
    if kind == "DeleteTask":
        return DeleteTask(
            d["bin_id"], StoreRef(**d["store"]), tuple(d["paths"]), tuple(d["sizes"]), tuple(d["sidecars"])
        )
    if kind != "BinTask":
        raise ValueError(f"not a task message: {text[:80]}")
    rt = d.get("row_tracking")
    return BinTask(
        **{
            **d,
            "store": StoreRef(**d["store"]),
            "inputs": tuple(InputFile(**i) for i in d["inputs"]),
            "fields": tuple(d["fields"]),
            "row_tracking": RowTrackingColumns(**rt) if rt else None,
            "stats": _stats_spec(d["stats"]),
        }
    )


def decode_outcome(text: str) -> Outcome:
    d = json.loads(text)
    kind = _OUTCOMES.get(d.pop("type", ""))
    if kind is None:
        raise ValueError(f"not an outcome message: {text[:80]}")
    if kind in (StatsComputed, DeletedFiles):
        d["worker"] = WorkerInfo(**d["worker"])
    if kind is ListedPrefix:
        return ListedPrefix(
            d["bin_id"],
            tuple(map(tuple, d["files"])),
            tuple(d["folders"]),
            WorkerInfo(**d["worker"]),
            d.get("requests", {}),
        )
    if kind is Rewritten:
        d["worker"] = WorkerInfo(**d["worker"])
        copy = d.get("copy")
        d["copy"] = CopyReport(**{**copy, "reasons": tuple(tuple(r) for r in copy["reasons"])}) if copy else None
    return kind(**d)
