"""Snapshots of a Delta table, read through deltalake (delta-rs) and a Storage.

deltalake does the log replay and checkpoint reading: it decides which files are live.
We then look up each live file's raw add action (tags, exact partition-value strings,
stats JSON, deletion vector) so removes can carry them over byte for byte. Every error of
the log reader becomes a typed error of ours that names the table and the version.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any
from urllib.parse import unquote

from .. import arrow_kernels as ak
from ..errors import CorruptLogError, DeltaOptimizeError, NotADeltaTableError, TableNotFoundError
from . import log as _log
from .actions import AddFile, DomainMetadata, Metadata, Protocol
from .column_mapping import mapping_mode, physical_fields, physical_partition_columns
from .file_table import FileTable, FileView, LogAdds, match_live, read_log_adds
from .lean_replay import checkpoint_rows, read_protocol_metadata
from .paths import check_external_path, check_log_path, data_file_location
from .storage import LocalStorage, Storage, join, storage_for, table_uri

__all__ = [
    "Snapshot",
    "check_external_paths",
    "file_counts",
    "latest_version",
    "load_snapshot",
    "open_table",
    "partition_key",
    "read_commit",
    "read_commits",
    "summarize",
    "update_snapshot",
]


@dataclass(frozen=True)
class Snapshot:
    """One version of a table: protocol, metadata, every live AddFile, and the store it lives in."""

    location: str
    version: int
    protocol: Protocol
    metadata: Metadata
    files: Sequence[AddFile]
    storage: Storage = field(default_factory=LocalStorage, compare=False, repr=False)
    #: the live add actions as Arrow columns: what planning, auto compaction and health read (built from
    #: ``files`` when a snapshot is made by hand)
    file_table: FileTable = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    #: deltalake's table this snapshot was read with (None when made by hand): ``delta_table_at`` moves it on
    delta_table: Any = field(default=None, compare=False, repr=False)
    #: the listing and commits the load read (None when made by hand): the run's later readers of this
    #: version's log (domains, the auto-compaction trigger) take them from here instead of the store
    log_cache: _log.LogCache | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.file_table is None:
            object.__setattr__(self, "file_table", FileTable.from_files(self.files, self.version))

    @property
    def log_dir(self) -> str:
        return join(self.location, _log.LOG_DIR)

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return self.metadata.partition_columns

    @property
    def configuration(self) -> Mapping[str, str]:
        return self.metadata.configuration

    @cached_property
    def schema(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.metadata.schema_string)
        return value

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

    @cached_property
    def domains(self) -> Mapping[str, DomainMetadata]:
        """Live domain metadata (``delta.clustering``, ``delta.rowTracking``, ...), read on first use."""
        features = set(self.protocol.writer_features or ())
        if "domainMetadata" not in features:
            return {}
        cache = self.cached_log()
        return _log.read_domains(cache.files, self.location, self.version, cache.listing, read=cache.read)

    def cached_log(self) -> _log.LogCache:
        """The log as this snapshot's load read it (listed again only for a snapshot made by hand)."""
        cache = self.log_cache
        if cache is None or cache.listing.latest < self.version:
            cache = _log.LogCache.listed(self.storage, self.location)
            object.__setattr__(self, "log_cache", cache)
        return cache

    def commits(self, versions: Sequence[int]) -> list[tuple[int, list[dict[str, Any]]]]:
        """The actions of some of this snapshot's commits, in order: those the load read are not read again,
        the others are read concurrently."""
        return [(v, _log.parse_commit(data, self.location, v)) for v, data in self.cached_log().commit_bytes(versions)]

    @cached_property
    def physical_data_fields(self) -> list[dict[str, Any]]:
        """The data fields as stored in Parquet: physical names and field ids under column mapping."""
        return physical_fields(self.data_fields, mapping_mode(self.configuration))

    @cached_property
    def physical_partition_columns(self) -> tuple[str, ...]:
        """The keys of the log's ``partitionValues`` (physical names under column mapping)."""
        return physical_partition_columns(self.schema, self.partition_columns, mapping_mode(self.configuration))

    def delta_table_at(self, version: int) -> Any:
        """deltalake's table at ``version`` (this one or a later one): the table this snapshot was read with,
        moved forward, so only the commits after it are read; else one loaded anew. Moving it on changes
        nothing here: every field of the snapshot was copied out of it on load."""
        dt = self.delta_table
        if dt is not None and dt.version() <= version:
            dt.load_as_version(version)
            return dt
        from deltalake import DeltaTable

        return DeltaTable(self.location, version=version, storage_options=dict(self.storage.options) or None)

    def file_path(self, add_path: str) -> str:
        """Location of a file named in the log; a relative path must stay inside the table root."""
        return data_file_location(self.location, add_path)

    @property
    def total_size(self) -> int:
        return sum(self.file_table.sizes)


def open_table(location: str, storage: Storage | None = None) -> tuple[str, Storage]:
    """(canonical root, storage) of a table location, checking that it holds a Delta log."""
    root = table_uri(location)
    storage = storage if storage is not None else storage_for(root)
    if storage.exists(join(root, _log.LOG_DIR)):  # the usual case, one probe (a round trip on a store)
        return root, storage
    if not storage.exists(root):
        raise TableNotFoundError(
            f"Table path '{location}' does not exist. Check the path (or the table name) and that the model was built."
        )
    raise NotADeltaTableError(
        f"'{location}' is not a Delta table: it has no _delta_log directory. "
        "Only Delta tables can be optimized (file_format: delta in dbt)."
    )


def latest_version(location: str, *, storage: Storage | None = None) -> int:
    """Newest committed version, found by listing the log (no replay)."""
    root, storage = open_table(location, storage)
    return _log.latest_version(storage, root)


def read_commit(location: str, version: int, *, storage: Storage | None = None) -> list[dict[str, Any]]:
    """The raw actions of one committed version, in file order."""
    root = table_uri(location)
    return _log.read_commit(storage if storage is not None else storage_for(root), root, version)


def read_commits(
    location: str, start: int, end: int | None = None, *, storage: Storage | None = None
) -> list[tuple[int, list[dict[str, Any]]]]:
    """Raw actions of versions start..end inclusive (end defaults to the latest)."""
    root, storage = open_table(location, storage)
    end = _log.latest_version(storage, root) if end is None else end
    return _log.read_commits(storage, root, start, end)


def _translate(exc: Exception, root: str, storage: Storage, version: int | None) -> DeltaOptimizeError:
    """deltalake's error as ours: unsupported protocol, corrupt log, missing version, or not a table."""
    from ..errors import StorageAccessError, UnsupportedFeatureError

    text = str(exc).split("\n", 1)[0].removeprefix("Kernel error: ")
    if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) and not isinstance(storage, LocalStorage):
        # deltalake raises a plain OSError for every object-store failure but a missing object: the store did not
        # answer, throttled or timed out (refused credentials fail earlier, in our own storage's first request).
        from .object_store import redact

        return StorageAccessError(
            f"The object store of '{root}' could not be read ({redact(text, storage.options)}). Nothing was written; this may succeed later. "
            "Check the endpoint, the network and the storage options.",
            retryable=True,
        )
    lowered = text.lower()
    if version is not None and ("end version" in lowered or "not found" in lowered or "version" in lowered):
        try:
            latest = _log.latest_version(storage, root)
        except DeltaOptimizeError:
            latest = None
        if latest is not None and not 0 <= version <= latest:
            return TableNotFoundError(
                f"Version {version} of '{root}' does not exist: the table's versions are 0..{latest}."
            )
    if "catalog" in lowered or "unsupported" in lowered or "reader features" in lowered or "protocol" in lowered:
        diagnosed = _log.diagnose(storage, root, version)
        if diagnosed is not None:
            return diagnosed
        return UnsupportedFeatureError(
            f"'{root}' uses a Delta protocol this tool cannot read ({text}). Nothing was written. "
            "Use an engine that supports the table's protocol (delta-spark), or skip this table."
        )
    diagnosed = _log.diagnose(storage, root, version)
    if diagnosed is not None:
        return diagnosed
    return CorruptLogError(f"The log of '{root}' cannot be read: {text}.", version=version)


def _delta_table(root: str, storage: Storage, version: int | None) -> Any:
    from deltalake import DeltaTable  # heavy import kept out of package import time
    from deltalake.exceptions import TableNotFoundError as DeltaRsNotFound

    try:
        return DeltaTable(root, version=version, storage_options=dict(storage.options) or None)
    except DeltaRsNotFound as exc:
        raise NotADeltaTableError(f"'{root}' is not a readable Delta table: {str(exc).splitlines()[0]}") from exc
    except Exception as exc:
        raise _translate(exc, root, storage, version) from exc


def _protocol_and_metadata(dt: Any) -> tuple[Protocol, Metadata]:
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
    return protocol, metadata


def _objects(dt: Any, root: str, storage: Storage, version: int) -> FileTable:
    """The slow path, one object per file: when some live path was not found among the raw adds."""
    import pyarrow as pa

    live = pa.table(dt.get_add_actions(flatten=False)).select(["path", "size_bytes", "modification_time"])
    raw = _log.raw_adds(storage, root, version, _log.list_log(storage, root))
    files, versions = [], []
    for row in live.to_pylist():
        found = raw.get(unquote(row["path"]))
        if found is None:  # should not happen; keep what deltalake told us
            added_in, action = (
                version,
                {
                    "path": row["path"],
                    "size": row["size_bytes"],
                    "modificationTime": row["modification_time"],
                },
            )
        else:
            added_in, action = found
        check_log_path(action["path"], version=added_in, table=root)
        files.append(AddFile.from_json(action))
        versions.append(added_in)
    return FileTable.from_files(files, versions)


def _check_paths(table: FileTable, root: str) -> None:
    """Every relative path must stay inside the root; only paths that could escape are looked at."""
    paths = table.column("path")
    suspicious = ak.match_substring_regex(paths, r"\.\.|[%:\x00]")  # "..", "%", NUL or ":", in one pass
    if not ak.any_(suspicious).as_py():
        return
    versions = table.versions
    for i in ak.indices_nonzero(suspicious).to_pylist():
        check_log_path(paths[i].as_py(), version=versions[i].as_py(), table=root)


def check_external_paths(snapshot: Snapshot, *, allow: bool = False) -> None:
    """Refuse a snapshot whose live files include one outside the table root (``paths.check_external_path``).

    Called right after the snapshot is loaded, before any data file is read. Only absolute paths are
    looked at (a relative one was checked on load), so a million relative paths cost one Arrow scan.
    """
    table = snapshot.file_table
    paths = table.column("path")
    absolute = ak.or_(ak.match_substring(paths, ":"), ak.starts_with(paths, "/"))  # a URI, or a POSIX path
    if not len(paths) or not ak.any_(absolute).as_py():
        return
    versions = table.versions
    for i in ak.indices_nonzero(absolute).to_pylist():
        check_external_path(paths[i].as_py(), root=snapshot.location, version=versions[i].as_py(), allow=allow)


#: From this many live files on, deltalake's table is let go once its live list is taken (see ``load_snapshot``).
RELEASE_DELTA_TABLE_FILES = 100_000


def _live_paths(dt: Any) -> Any:
    """deltalake's live paths (what decides which adds are live), copied: an array imported from deltalake
    keeps the whole batch it came with (every add's stats) alive while any of its columns is used."""
    import pyarrow as pa

    paths = pa.table(dt.get_add_actions(flatten=False)).column("path")
    return pa.concat_arrays([*paths.chunks, pa.array([], paths.type)])


def _live_files(
    live: Any,
    cache: _log.LogCache,
    version: int,
    prefetched: LogAdds | None,
    delta_table: Callable[[], Any],
) -> FileTable:
    root, storage = cache.root, cache.files
    if not len(live):
        return FileTable.from_files(())
    log = prefetched
    if log is None or log.version != version:  # deltalake saw a newer version than our listing: list again
        listing = _log.list_log(storage, root)
        log = read_log_adds(storage, root, version, listing, cache=cache if listing == cache.listing else None)
    table, missing = match_live(storage, root, log, live)
    if missing:
        return _objects(delta_table(), root, storage, version)
    _check_paths(table, root)
    return table


def _read_adds(cache: _log.LogCache, version: int | None, released: threading.Event) -> LogAdds | None:
    """The log's adds, read beside deltalake's replay; any failure is left to the main path, which reports it.

    A checkpoint of ``RELEASE_DELTA_TABLE_FILES`` rows or more is read only once deltalake's table was let
    go (``released``), so the two are never in memory together.
    """

    def before(rows: int) -> None:
        if rows >= RELEASE_DELTA_TABLE_FILES:
            released.wait()

    try:
        listing = cache.listing
        v = listing.latest if version is None else version
        return read_log_adds(cache.files, cache.root, v, listing, before, cache=cache)
    except Exception:
        return None


#: On a local disk, from this many checkpoint rows on, our own replay decides the live files
#: (``delta/lean_replay.py``); 0: at any size. deltalake's load only repeats what ours reads anyway (every add,
#: beside it in a thread), and costs a fresh process its import, its table and its add actions: 0.05-0.1 s of
#: a 5,000-file OPTIMIZE's 1.2 s (docs/performance.md, "Issue 45, the log read once"). Tests set it above
#: every table to take deltalake's path, which stays the fallback (and its errors the report) of any log our
#: replay finds unexpected. (Equal to deltalake's answer: tests/test_lean_replay_equal.py.)
LEAN_REPLAY_ROWS = 0
#: On an object store our own replay decides at any size: deltalake's load lists the log and reads every
#: commit after the checkpoint twice (each a round trip), beside our own read of the same files; ours reads
#: each log file once, concurrently.
LEAN_ON_STORES = True


def _lean_wanted(cache: _log.LogCache, version: int | None) -> bool:
    if LEAN_ON_STORES and not isinstance(cache.storage, LocalStorage):
        return True
    if LEAN_REPLAY_ROWS <= 0:  # no checkpoint footer read to decide
        return True
    return checkpoint_rows(cache.files, cache.root, version, cache.listing) >= LEAN_REPLAY_ROWS


def _lean_snapshot(cache: _log.LogCache, version: int | None) -> Snapshot | None:
    """A table's snapshot without deltalake: protocol, metadata and live files from our own projected replay
    (deltalake's load of every add with its stats was the peak of planning a large table, and on a store it
    reads the log again). None below ``LEAN_REPLAY_ROWS`` on a local disk, or when anything is unexpected:
    deltalake's path then reads it (and reports its problems)."""
    root, storage, listing = cache.root, cache.files, cache.listing
    try:
        if not _lean_wanted(cache, version):
            return None
        v = listing.latest if version is None else version
        if v not in listing.commits and v not in listing.checkpoints:
            return None
        cp = listing.checkpoint_at_or_before(v)
        after = [c for c in listing.commits if (cp is None or c > cp) and c <= v]
        with cache.parsing(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="ddo-log") as pool:
            ahead = pool.submit(lambda: list(cache.commit_bytes(after)))  # the commits while the checkpoint is read
            found = read_protocol_metadata(storage, root, v, listing, read=cache.read, parse=cache.parsed)
            ahead.exception()  # a failed read fails again, with its error, where it is needed
            if found is None:
                return None
            adds = read_log_adds(storage, root, v, listing, cache=cache)  # the commits parsed above, not again
        table, _ = match_live(storage, root, adds, None)
    except Exception:
        return None
    _check_paths(table, root)
    protocol, metadata = found
    return Snapshot(root, v, protocol, metadata, FileView(table), cache.storage, table, log_cache=cache)


def _listed(location: str, storage: Storage | None) -> _log.LogCache:
    """The table's root, storage and log listing: one listing (a probe first would be one more round trip
    on a store); only when it finds no log is the path looked at, to say what it is instead."""
    root = table_uri(location)
    storage = storage if storage is not None else storage_for(root)
    try:
        return _log.LogCache.listed(storage, root)
    except (DeltaOptimizeError, FileNotFoundError):
        open_table(location, storage)  # a missing path, or a folder without a log, named as such
        raise


def load_snapshot(location: str, version: int | None = None, *, storage: Storage | None = None) -> Snapshot:
    """Load a table snapshot (latest by default) through deltalake, every path checked.

    The log is listed once; its adds are read in a thread while deltalake loads the snapshot (both mostly
    outside the GIL), and the commits read are kept on the snapshot (``Snapshot.log_cache``). That thread is
    joined before this returns or raises: a read left running would still be using Arrow's threads when the
    interpreter exits, which aborts the process (apache/arrow#34314).
    """
    cache = _listed(location, storage)
    root, storage = cache.root, cache.storage
    lean = _lean_snapshot(cache, version)
    if lean is not None:
        return lean
    released = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ddo-log") as pool:  # exit joins the thread
        prefetched = pool.submit(_read_adds, cache, version, released)
        try:
            dt = _delta_table(root, storage, version)
        except BaseException:
            released.set()  # the reader may wait for it: let it end before the pool joins it
            raise
        try:
            v = dt.version()
            protocol, metadata = _protocol_and_metadata(dt)
            live = _live_paths(dt)
            if len(live) >= RELEASE_DELTA_TABLE_FILES:
                # deltalake holds every add with its stats (about 400 B a file): let it go before our own
                # columns are built beside it, so the two are never held at once. Only a checkpoint after
                # a commit needs it again (``delta_table_at`` then loads it anew).
                dt = None
            released.set()
            table = _live_files(
                live,
                cache,
                v,
                prefetched.result(),
                lambda: dt if dt is not None else _delta_table(root, storage, v),
            )
        except DeltaOptimizeError:
            raise
        except Exception as exc:
            raise _translate(exc, root, storage, version) from exc
        finally:
            released.set()
    return Snapshot(root, v, protocol, metadata, FileView(table), storage, table, delta_table=dt, log_cache=cache)


def update_snapshot(snapshot: Snapshot, *, storage: Storage | None = None) -> Snapshot:
    """The table's latest snapshot, moved on from one loaded before (as deltalake updates a loaded table): one
    listing from its version on, the new commits read concurrently, and the live files replayed from what the
    earlier load kept (its checkpoint and commits are not read again). ``storage``: the same store, e.g. with a
    request counter of its own. Loaded anew when the earlier one cannot be moved on (``LogCache.advanced``)."""
    storage = storage if storage is not None else snapshot.storage
    cache = snapshot.log_cache
    moved = cache.advanced(storage) if cache is not None else None
    if moved is None:
        return load_snapshot(snapshot.location, storage=storage)
    if moved.listing.latest == snapshot.version:
        return replace(snapshot, storage=storage, log_cache=moved)
    lean = _lean_snapshot(moved, None)
    return lean if lean is not None else load_snapshot(snapshot.location, storage=storage)


def file_counts(location: str, *, storage: Storage | None = None) -> tuple[int, int]:
    """(live files, live bytes): what a report needs, without the raw-action lookup of load_snapshot."""
    import pyarrow as pa

    root, storage = open_table(location, storage)
    dt = _delta_table(root, storage, None)
    try:
        sizes = pa.table(dt.get_add_actions(flatten=False)).column("size_bytes")
    except Exception as exc:
        raise _translate(exc, root, storage, None) from exc
    return len(sizes), int(ak.sum_(sizes).as_py() or 0)


def partition_key(values: Mapping[str, str | None], columns: Iterable[str]) -> tuple[str | None, ...]:
    """Raw partition tuple, with "" folded into null as delta-spark does (``FileTable.partition_codes``' rule)."""
    return tuple((values.get(c) or None) for c in columns)


def summarize(snapshot: Snapshot) -> dict[str, Any]:
    """A JSON-ready summary: version, protocol, schema shape, files and bytes per partition."""
    cols = snapshot.partition_columns
    codes, keys = snapshot.file_table.partition_codes(snapshot.physical_partition_columns)
    per: dict[tuple[str | None, ...], list[int]] = {}
    for code, size in zip(codes.to_pylist(), snapshot.file_table.sizes):
        per.setdefault(keys[code], []).append(size)
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


def load_log_snapshot(location: str, *, storage: Storage | None = None) -> Snapshot:
    """The latest version's protocol and metadata without its live files (an empty file table): for an
    operation that replays the file actions itself (VACUUM, ``delta/vacuum_log.py``) and commits only
    actions without files. Listing every live add through deltalake costs more than all of VACUUM."""
    root, storage = open_table(location, storage)
    dt = _delta_table(root, storage, None)
    try:
        version = dt.version()
        protocol, metadata = _protocol_and_metadata(dt)
    except DeltaOptimizeError:
        raise
    except Exception as exc:
        raise _translate(exc, root, storage, None) from exc
    # No file table: its Arrow columns would cost the pyarrow import (a third of a small VACUUM) for nothing.
    return Snapshot(root, version, protocol, metadata, (), storage, FileTable(None, None), delta_table=dt)
