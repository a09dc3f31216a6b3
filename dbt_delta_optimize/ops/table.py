"""An opened table: the one handle every operation takes (name, location, storage options, snapshot).

Opening reads the log once. An operation given a handle plans from its snapshot instead of loading the
table again, and the caller decides when to look again (``Table.refresh``), as delta-rs's operations take
a snapshot and delta-kernel-rs's ``SnapshotBuilder`` builds one. Front ends (CLI, dbt, ``python/``) get
their handles here and never open a table through ``delta/`` or ``engine/`` themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..delta.snapshot import Snapshot
from ..delta.storage import Storage
from .arguments import check_table
from .pipeline import Session, Target, open_snapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Table", "locate", "open_table", "source_of", "table_version"]


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
    from ..delta.storage import storage_of
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
    from ..delta.storage import storage_of

    if isinstance(table, Table):
        return table.location, table.storage
    location = Target(check_table(table), storage_options).location(Session(spark))
    return location, storage_of(location, storage_options)
