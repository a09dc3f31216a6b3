"""An opened table: the one handle every operation takes (name, location, storage options, snapshot).

Opening reads the log once. An operation given a handle plans from its snapshot instead of loading the
table again, and the caller decides when to look again (``Table.refresh``), as delta-rs's operations take
a snapshot and delta-kernel-rs's ``SnapshotBuilder`` builds one. Front ends (CLI, dbt, ``python/``) get
their handles here and never open a table through ``delta/`` or ``engine/`` themselves.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..delta.requests import RequestCounter
from ..delta.snapshot import Snapshot
from ..delta.storage import LocalStorage, Storage, storage_of
from .arguments import check_table
from .pipeline import Session, Target, open_snapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "PinnedSnapshots",
    "Table",
    "locate",
    "open_pinned",
    "open_table",
    "pin_version",
    "source_of",
    "table_version",
]


@dataclass(frozen=True)
class Table:
    """A table as opened once: how the caller named it, where it lives, and its latest snapshot then."""

    name: str  #: a path or catalog name, as the caller gave it
    location: str  #: the table root (a catalog name resolved)
    storage_options: Mapping[str, str] | None
    snapshot: Snapshot

    @property
    def storage(self) -> Storage:
        return self.snapshot.storage

    @property
    def version(self) -> int:
        return self.snapshot.version

    @property
    def target(self) -> Target:
        """The table as a ``Target`` (its location, so no catalog lookup is made again)."""
        return Target(self.location, self.storage_options)

    def counts(self) -> tuple[int, int]:
        """(live files, live bytes) of the snapshot: what a report shows before and after, without a read."""
        return len(self.snapshot.file_table), sum(self.snapshot.file_table.sizes)

    def open(self, session: Session) -> Snapshot:
        """The pipeline's source protocol: the snapshot opened already (no second load)."""
        return self.snapshot

    def _named(self, name: str) -> Table:
        return self if name == self.name else Table(name, self.location, self.storage_options, self.snapshot)

    def refresh(self) -> Table:
        """The same table at its latest version, read through the same storage (after a write)."""
        from ..delta.snapshot import load_snapshot

        return Table(self.name, self.location, self.storage_options, load_snapshot(self.location, storage=self.storage))


def open_table(
    table: str | Table,
    *,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    session: Session | None = None,
) -> Table:
    """Open a table by path or catalog name (a name needs Spark, the only reason to start it here).

    A ``Table`` is returned as it is: the caller decides when to refresh. Errors are the log reader's:
    TableNotFoundError, NotADeltaTableError, CorruptLogError, StorageAccessError.
    """
    if isinstance(table, Table):
        return table
    name = check_table(table)
    location = Target(name, storage_options).location(session or Session(spark))
    return Table(name, location, storage_options, open_snapshot(location, storage_options))


def _key(location: str, version: int, storage_options: Mapping[str, str] | None) -> tuple[Any, ...]:
    return (location, version, tuple(sorted((storage_options or {}).items())))


class PinnedSnapshots:
    """The snapshots dbt's pre-hooks loaded, for the post-hook of the same model in the same process.

    Keyed by table location, version and storage options; bounded (the oldest go first past ``max_tables``
    tables or ``max_files`` live files in all; a table larger than that is not kept); thread-safe (dbt runs
    models in threads). A post-hook takes its table's snapshot out and moves it on to the latest version
    (``delta.snapshot.update_snapshot``: one listing, the new commits) instead of loading the table again.
    Held by the caller's long-lived object (the dbt bridge), not by this module.
    """

    def __init__(self, *, max_tables: int = 16, max_files: int = 2_000_000) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[Any, ...], Snapshot] = OrderedDict()
        self.max_tables, self.max_files = max_tables, max_files

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    def pin(self, handle: Table) -> None:
        """Keep ``handle``'s snapshot for the post-hook (not when it alone is over the bound)."""
        if len(handle.snapshot.file_table) > self.max_files:
            return
        with self._lock:
            self._kept[_key(handle.location, handle.version, handle.storage_options)] = handle.snapshot
            while len(self._kept) > self.max_tables or (
                sum(len(s.file_table) for s in self._kept.values()) > self.max_files
            ):
                self._kept.popitem(last=False)

    def take(self, location: str, version: int, storage_options: Mapping[str, str] | None) -> Snapshot | None:
        """The snapshot pinned at ``version`` of the table at ``location``, removed from the cache; None if none."""
        with self._lock:
            return self._kept.pop(_key(location, version, storage_options), None)


def _own_counter(storage: Storage) -> Storage:
    """The same store (its client and connections) with a request counter of its own: a later operation's
    metrics count its own requests only."""
    if dataclasses.is_dataclass(storage) and any(f.name == "requests" for f in dataclasses.fields(storage)):
        fresh: Storage = dataclasses.replace(cast(Any, storage), requests=RequestCounter())
        return fresh
    return storage


def pin_version(
    table: str,
    pinned: PinnedSnapshots,
    *,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """A pre-hook's version of the table (-1: no Delta table there yet). On an object store the table is opened
    (one listing, its log read concurrently) and its snapshot kept in ``pinned`` for the post-hook; a local
    table's log is only listed (reading it again costs no round trip)."""
    from ..errors import DeltaOptimizeError, NotADeltaTableError, TableNotFoundError

    name = check_table(table)
    try:
        location = Target(name, storage_options).location(Session(spark))
    except (NotADeltaTableError, TableNotFoundError):  # a catalog name with no table yet: the run creates it
        return -1
    if isinstance(storage_of(location, storage_options), LocalStorage):
        return table_version(location, storage_options=storage_options)
    try:
        handle = open_table(location, spark=spark, storage_options=storage_options)
    except (NotADeltaTableError, TableNotFoundError):  # no table (or no log) there yet
        return -1
    except DeltaOptimizeError:  # a log the load refuses still pins the run's commits: the post-hook says why
        return table_version(location, storage_options=storage_options)
    pinned.pin(Table(name, location, storage_options, handle.snapshot))
    return handle.version


def open_pinned(
    table: str,
    pinned: PinnedSnapshots,
    version: int | None,
    *,
    session: Session | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Table:
    """A post-hook's table: the snapshot its pre-hook pinned at ``version`` in this process, moved on to the
    latest version (``update_snapshot``: no second load), else the table opened (``open_table``)."""
    from ..delta.snapshot import update_snapshot

    name = check_table(table)
    location = Target(name, storage_options).location(session or Session(None))
    kept = pinned.take(location, version, storage_options) if version is not None and version >= 0 else None
    if kept is None:
        return open_table(location, session=session, storage_options=storage_options)._named(name)
    return Table(name, location, storage_options, update_snapshot(kept, storage=_own_counter(kept.storage)))


def source_of(table: str | Table, storage_options: Mapping[str, str] | None) -> Table | Target:
    """What the pipeline opens: the handle itself, or a checked name to open (once) on the way."""
    if isinstance(table, Table):
        return table
    return Target(check_table(table), storage_options)


def table_version(
    table: str, *, spark: SparkSession | None = None, storage_options: Mapping[str, str] | None = None
) -> int:
    """The table's latest version, by listing its log (no replay); -1 when there is no Delta table there yet."""
    from ..delta.snapshot import latest_version
    from ..errors import NotADeltaTableError, TableNotFoundError

    try:
        location = Target(check_table(table), storage_options).location(Session(spark))
        return latest_version(location, storage=storage_of(location, storage_options))
    except (NotADeltaTableError, TableNotFoundError):  # no table (or no log) there yet
        return -1


def locate(
    table: str | Table, *, spark: SparkSession | None = None, storage_options: Mapping[str, str] | None = None
) -> tuple[str, Storage]:
    """Where a table lives and the storage that reaches it, without reading its log (history, validation).

    A handle gives its own; a catalog name is resolved through Spark (the only reason to start it).
    """
    if isinstance(table, Table):
        return table.location, table.storage
    location = Target(check_table(table), storage_options).location(Session(spark))
    return location, storage_of(location, storage_options)
