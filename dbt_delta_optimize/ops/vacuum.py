"""``vacuum``: delta-spark 4.4's ``VACUUM [LITE|FULL] [RETAIN n HOURS] [DRY RUN]``, without a JVM for a path.

Every check happens before the first delete: the protocol gate (``vacuumProtocolCheck`` included), the
retention (a retention shorter than the table's ``delta.deletedFileRetentionDuration`` is refused unless
``allow_short_retention``), and lite mode's log coverage. Then, as delta-spark does, an empty
``VACUUM START`` commit (when vacuum logging is on), the deletes, and ``VACUUM END``. Between the plan and
the first delete the log is read again: a file a concurrent commit made live (a RESTORE, a re-add) is
not deleted. After a run, ``_delta_log/_last_vacuum_info`` records the newest commit outside the retention,
in delta-spark's format, after a full run too: lite mode then works again from there (delta-io/delta#4162).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

from ..delta.file_info import Listed
from ..delta.parallel import Prefetched
from ..delta.protocol import ensure_write_supported
from ..delta.storage import LocalStorage, Storage, join
from ..delta.vacuum_log import (
    LogFiles,
    LogReads,
    added_since,
    commit_ict,
    live_files,
    range_files,
    read_last_vacuum,
    read_state,
    write_last_vacuum,
)
from ..errors import CorruptLogError, InvalidArgumentError, InvalidConfigError, NotADeltaTableError
from ..options import VACUUM_OPTIONS, TaskRunner, resolve_values
from ..plan.vacuum import (
    Candidate,
    VacuumPlan,
    active_commit_at,
    active_ict_commit,
    is_hidden,
    lite_range,
    parse_interval_ms,
    parse_retain_ms,
    plan_lite,
    plan_vacuum,
    protected_paths,
    relative_path,
    retention_problem,
)
from .arguments import check_table
from .pipeline import Session, Target
from .table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..delta.snapshot import Snapshot
    from ..engine.vacuum_job import ClusterVacuum, SparkListing
    from ..inspect.log_cleanup import LogCleanupResult

__all__ = ["VacuumMetrics", "vacuum"]

log = logging.getLogger(__name__)

VacuumMode = Literal["full", "lite"]
#: delta-spark logs vacuums by default on these schemes (``VacuumCommandImpl.supportedFsForLogging``).
_LOGGED_SCHEMES = ("", "file", "wasbs", "wasbss", "abfs", "abfss", "adl", "gs", "hdfs", "az", "azure")
DEFAULT_RETENTION = "interval 1 week"
#: Deletes per batch (and per progress report) on a local table, and per Spark task on a cluster.
BATCH = 5000
#: Keys per delete request on an object store (S3 DeleteObjects' most; obstore splits Azure's into its
#: batches of 256), and such requests in flight at once.
OBJECT_BATCH = 1000
DELETE_THREADS = 8
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class VacuumMetrics:
    """What one VACUUM did (or, dry run, would do)."""

    table: str
    mode: VacuumMode
    dry_run: bool
    retention_ms: int  #: the retention applied
    table_retention_ms: int  #: the table's delta.deletedFileRetentionDuration
    delete_before_ms: int  #: files older than this (and not needed) were deleted
    files_deleted: int
    bytes_deleted: int
    folders_deleted: int
    files_listed: int
    read_version: int
    eligible_start_version: int | None = None
    eligible_end_version: int | None = None
    start_commit: int | None = None  #: the VACUUM START version (vacuum logging)
    end_commit: int | None = None
    kept_by_concurrent_commits: int = 0  #: planned deletes a concurrent commit made live again
    duration_s: float = 0.0
    files: tuple[Candidate, ...] = field(default=(), repr=False)
    log_cleanup: LogCleanupResult | None = None  #: with ``clean_logs``: the expired log files (deleted or listed)
    #: who listed the table (full mode): ``driver``, ``spark`` (a Spark job on a cluster) or ``mixed``
    listed_by: str | None = None
    deleted_by: str | None = None  #: who deleted the files (not a dry run), as ``listed_by``
    #: the requests made to the store, by kind, bytes read and written, the scope and phases (``delta/requests.py``)
    requests: Mapping[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """What a dry run records (as an OptimizePlan's summary does): the metrics and the files."""
        return self.to_dict()

    def to_dict(self, *, include_files: bool | None = None) -> dict[str, Any]:
        """JSON-ready; the files (with bytes and why) are listed in a dry run unless told otherwise."""
        out: dict[str, Any] = {
            "table": self.table,
            "mode": self.mode,
            "dryRun": self.dry_run,
            "retentionMs": self.retention_ms,
            "tableRetentionMs": self.table_retention_ms,
            "deleteBeforeMs": self.delete_before_ms,
            "filesDeleted": self.files_deleted,
            "bytesDeleted": self.bytes_deleted,
            "foldersDeleted": self.folders_deleted,
            "filesListed": self.files_listed,
            "readVersion": self.read_version,
            "eligibleStartVersion": self.eligible_start_version,
            "eligibleEndVersion": self.eligible_end_version,
            "startCommit": self.start_commit,
            "endCommit": self.end_commit,
            "keptByConcurrentCommits": self.kept_by_concurrent_commits,
            "durationS": round(self.duration_s, 3),
            "listedBy": self.listed_by,
            "deletedBy": self.deleted_by,
            "requests": dict(self.requests),
        }
        if self.log_cleanup is not None:
            out["logFilesDeleted"] = self.log_cleanup.files_deleted
            out["logBytesDeleted"] = self.log_cleanup.bytes_deleted
            out["logCleanup"] = self.log_cleanup.to_dict()
        if self.dry_run if include_files is None else include_files:
            out["files"] = [{"path": c.path, "bytes": c.size, "reason": c.reason} for c in self.files]
        return out


def _table_retention_ms(snapshot: Snapshot) -> int:
    text = snapshot.configuration.get("delta.deletedFileRetentionDuration", DEFAULT_RETENTION)
    try:
        return parse_interval_ms(text)
    except ValueError:
        raise InvalidConfigError(
            f"The table property delta.deletedFileRetentionDuration of {snapshot.location} is {text!r}, not an "
            "interval such as 'interval 7 days'. Fix the property (ALTER TABLE ... SET TBLPROPERTIES). Nothing was deleted."
        ) from None


def _retain_ms(retain: str | float | None) -> int | None:
    if retain is None:
        return None
    try:
        return parse_retain_ms(retain)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"retain: {exc} Give a duration such as 168h, 7d or 0h (hours if no unit)."
            if "0 hours" not in str(exc)
            else f"retain: {exc}"
        ) from None


def _logging_on(setting: bool | None, location: str) -> bool:
    if setting is not None:
        return setting
    scheme = urlparse(location).scheme if "://" in location else ""
    return scheme in _LOGGED_SCHEMES


def _lite_plan(table: Table, protected: set[str], delete_before: int, reads: LogReads) -> tuple[VacuumPlan, int | None]:
    snapshot, storage, root = table.snapshot, table.storage, table.location
    outside = _outside(snapshot, delete_before, reads)
    listing = reads.listing()
    earliest = listing.commits[0] if listing.commits else snapshot.version
    try:
        found = lite_range(
            earliest=earliest,
            snapshot_version=snapshot.version,
            outside=outside,
            last_vacuum=read_last_vacuum(storage, root),
        )
    except ValueError as exc:
        raise InvalidArgumentError(f"{table.name}: {exc} Nothing was deleted.") from None
    if found is None:
        return VacuumPlan(), outside
    start, end = found
    files = range_files(reads, start, end)
    local = isinstance(storage, LocalStorage)  # Hadoop's local file system leaves `.name.crc` sidecars
    plan = plan_lite(
        root, files, protected=protected, delete_before=delete_before, start=start, end=end, sidecars=local
    )
    return plan, outside


def _outside(snapshot: Snapshot, delete_before: int, reads: LogReads) -> int | None:
    """The newest commit at or before ``delete_before`` (delta-spark's latestCommitVersionOutsideOfRetention):
    by the commit files' modification times, or, where in-commit timestamps are on, by a binary search of
    them (DeltaHistoryManager.getActiveCommitAtTime)."""
    from ..delta.in_commit_timestamps import enablement, ict_enabled

    commits = [(v, ts) for v, ts in sorted(reads.commit_mtimes().items()) if v <= snapshot.version]
    if not commits or not ict_enabled(snapshot.metadata):
        return active_commit_at(commits, delete_before)
    earliest = commits[0][0]
    found = enablement(snapshot.metadata)
    if found is not None and found[1] > delete_before:  # ICT came later: the commits before it, by file time
        return active_commit_at([c for c in commits if c[0] < found[0]], delete_before)
    start = max(earliest, found[0]) if found is not None else earliest
    versions = [v for v, _ in commits if v >= start]
    return active_ict_commit(versions, delete_before, partial(commit_ict, reads))


def _walk(table: Table) -> Iterator[Listed]:
    columns = table.snapshot.partition_columns
    # hidden names are not entered, but `.name.crc` sidecars are seen (deleted with their files); asked once per
    # listed name, so a name that starts with neither '.' nor '_' (most of them) is never hidden without a call
    return table.storage.walk(
        table.location,
        lambda name: name[:1] in "._" and is_hidden(name, columns) and not name.endswith(".crc"),
        by_prefix=bool(columns),
    )


def _planned(
    opened: Table,
    mode: VacuumMode,
    delete_before: int,
    reads: LogReads,
    *,
    also_live: bool,
    cluster: ClusterVacuum | None = None,
) -> tuple[VacuumPlan, int | None, str | None]:
    """The plan, lite's newest commit outside the retention, and who listed. In full mode the table is listed
    in a thread (on a cluster: by a Spark job) while the log is replayed; the listing is bounded by its queue,
    and joined however this ends."""
    listing: Prefetched[Listed] | SparkListing | None = None
    if mode == "full":
        listing = cluster.listing() if cluster is not None else Prefetched(partial(_walk, opened))
    try:
        live, dead = _read_state(opened, reads)
        protected = protected_paths(opened.location, live, dead, delete_before)
        if also_live:  # deltalake's replay is there already: keep what either one calls live
            protected |= protected_paths(opened.location, live_files(opened.snapshot.file_table.adds), (), 0)
        if listing is None:
            return (*_lite_plan(opened, protected, delete_before, reads), None)
        expired = [p for p, ts in zip(dead.paths, dead.deletion_timestamps) if ts < delete_before]
        plan = plan_vacuum(
            opened.location,
            listing,
            protected=protected,
            delete_before=delete_before,
            partition_columns=opened.snapshot.partition_columns,
            tombstone_paths=expired,
        )
        return plan, None, listing.listed_by if not isinstance(listing, Prefetched) else "driver"
    finally:
        if listing is not None:
            listing.close()


def _guard(table: Table, plan: VacuumPlan) -> tuple[VacuumPlan, int]:
    """The plan minus what commits after the snapshot made live (or gave a DV): read just before deleting."""
    paths, dvs = added_since(table.storage, table.location, table.version)
    live = {r for p in paths if (r := relative_path(p, table.location)) is not None} | dvs
    kept = sum(1 for c in plan.files if c.path in live)
    return (plan.without(live), kept) if kept else (plan, 0)


def _delete(storage: Storage, root: str, plan: VacuumPlan, progress: Progress | None) -> tuple[int, int]:
    paths = [join(root, c.path) for c in plan.files]
    deleted = _delete_files(storage, paths, progress)
    if plan.sidecars:
        storage.delete_many([join(root, s) for s in plan.sidecars])
    folders = sum(1 for d in plan.folders if storage.remove_empty_dir(join(root, d)))
    return deleted, folders


def _delete_files(storage: Storage, paths: list[str], progress: Progress | None) -> int:
    """Delete ``paths``: on an object store every request of ``OBJECT_BATCH`` keys goes out at once (up to
    ``DELETE_THREADS`` in flight), progress reported as each one ends; a local table in ``BATCH`` steps
    (``LocalStorage.delete_many`` spreads each over its own threads). A failed request raises once the
    requests in flight end; none not yet started is sent."""
    if isinstance(storage, LocalStorage) or len(paths) <= OBJECT_BATCH:
        deleted = 0
        step = BATCH if progress is not None else max(1, len(paths))  # batches only to report progress
        for i in range(0, len(paths), step):
            deleted += storage.delete_many(paths[i : i + step])
            if progress is not None:
                progress(min(i + step, len(paths)), len(paths))
        return deleted
    chunks = [paths[i : i + OBJECT_BATCH] for i in range(0, len(paths), OBJECT_BATCH)]
    deleted = done = 0
    pool = ThreadPoolExecutor(min(DELETE_THREADS, len(chunks)), thread_name_prefix="ddo-vacuum-delete")
    try:
        asked = {pool.submit(storage.delete_many, c): len(c) for c in chunks}
        for fut in as_completed(asked):
            deleted += fut.result()
            done += asked[fut]
            if progress is not None:
                progress(done, len(paths))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return deleted


def _open(name: str, storage_options: Mapping[str, str] | None, session: Session) -> tuple[Table, LogReads]:
    """The table with its protocol and metadata only (the live files come from ``read_state``), and the
    log's listing and commits read for it."""
    from ..delta.snapshot import load_log_snapshot
    from ..delta.storage import storage_for, table_uri

    name = check_table(name)
    # A path with a slash is a path (engine.session.is_path): no need to import the Spark side to say so.
    location = name if "/" in name else Target(name, storage_options).location(session)
    storage = storage_for(table_uri(location), storage_options)
    reads = LogReads(storage, table_uri(location))
    snapshot = _head_snapshot(location, reads) or load_log_snapshot(location, storage=storage)
    return Table(name, location, storage_options, snapshot), reads


def _head_snapshot(location: str, reads: LogReads) -> Snapshot | None:
    """The snapshot from the log's newest protocol and metadata (``delta/log_head.py``), no deltalake replay;
    None when that read is not plain (deltalake then loads it, and its errors name the problem)."""
    from ..delta.file_table import FileTable
    from ..delta.log_head import read_head
    from ..delta.snapshot import Snapshot, open_table

    storage, root = reads.storage, reads.root
    try:
        listing = reads.listing()  # no probe first: a listing is one round trip, a probe two on a store
    except NotADeltaTableError:
        open_table(location, storage)  # a missing path, or a folder without a log, named as such
        raise
    try:
        head = read_head(storage, root, listing, read=reads.commit)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    if head is None:
        return None
    version, protocol, metadata = head
    return Snapshot(root, version, protocol, metadata, (), storage, FileTable(None, None))


def _read_state(table: Table, reads: LogReads) -> tuple[LogFiles, LogFiles]:
    """Live files and tombstones; a log our replay cannot parse gets deltalake's diagnosis (a typed error)."""
    storage, root = table.storage, table.location
    try:
        return read_state(reads, table.snapshot.version)
    except (ValueError, KeyError, TypeError) as exc:
        from ..delta.snapshot import load_log_snapshot

        load_log_snapshot(root, storage=storage)  # raises the typed error when deltalake refuses the log too
        raise CorruptLogError(f"The log of '{root}' cannot be read for VACUUM ({exc}). Nothing was deleted.") from exc


def _cluster(session: Session, task_runner: str, opened: Table) -> ClusterVacuum | None:
    """On a cluster master (or ``task_runner`` spark) the listing and the deletes run as Spark jobs."""
    engine = session.task_engine(task_runner)
    if engine is None:
        return None
    from ..engine.vacuum_job import ClusterVacuum

    snapshot = opened.snapshot
    return ClusterVacuum(engine, opened.storage, opened.location, snapshot.partition_columns, opened.name)


def _cleanup_after_checkpoint(snapshot: Snapshot, version: int) -> tuple[int, int]:
    from ..inspect.log_cleanup import after_checkpoint  # only once a commit wrote a checkpoint

    return after_checkpoint(snapshot)(version)


def _commit(snapshot: Snapshot, operation: str, parameters: Mapping[str, Any], metrics: Mapping[str, Any]) -> int:
    from ..delta.commit import Transaction  # a dry run and an unlogged VACUUM (s3) never commit

    return (
        Transaction(snapshot, after_checkpoint=partial(_cleanup_after_checkpoint, snapshot))
        .commit([], operation, parameters, metrics)
        .version
    )


def _clean_logs(opened: Table, enabled: bool, *, dry_run: bool) -> LogCleanupResult | None:
    """``clean_logs``: delta-spark's expired log cleanup on demand (after the data files; listed in a dry run)."""
    if not enabled:
        return None
    from ..inspect.log_cleanup import LogCleanupResult, clean_expired_logs
    from ..plan.log_cleanup import cleanup_enabled

    snapshot = opened.snapshot
    if not cleanup_enabled(snapshot.configuration):
        log.warning("%s: delta.enableExpiredLogCleanup is false; no log files are cleaned up.", opened.name)
        return LogCleanupResult(dry_run=dry_run)
    v2 = "v2Checkpoint" in set(snapshot.protocol.writer_features or ())
    return clean_expired_logs(
        opened.storage, opened.location, snapshot.configuration, v2_checkpoints=v2, dry_run=dry_run
    )


def vacuum(
    spark: SparkSession | None,
    table: str | Table,
    *,
    retain: str | float | None = None,
    mode: VacuumMode = "full",
    dry_run: bool = False,
    allow_short_retention: bool | None = None,
    vacuum_logging: bool | None = None,
    clean_logs: bool | None = None,
    storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    task_runner: TaskRunner | None = None,
) -> VacuumMetrics:
    """Delete the files no version inside the retention needs; see the module's docstring for the rules.

    ``retain`` defaults to the table's ``delta.deletedFileRetentionDuration`` (7 days); a number is hours.
    Spark is used only to resolve a catalog name and read the session's conf; a path needs no JVM. On a cluster
    master (``task_runner`` auto; ``spark`` forces it, ``driver`` never) the listing and the deletes run as
    Spark jobs split by top-level prefix (``engine.vacuum_job``); the plan is made here either way.
    """
    started = time.monotonic()
    if mode not in ("full", "lite"):
        raise InvalidArgumentError(f"mode must be 'full' or 'lite', got {mode!r}.")
    retain_ms = _retain_ms(retain)
    session = Session(spark)
    overrides = {
        "allow_short_retention": allow_short_retention,
        "vacuum_logging": vacuum_logging,
        "clean_logs": clean_logs,
        "task_runner": task_runner,
    }
    no_spark = spark is None and "pyspark" not in sys.modules  # no session to read (and no Spark import)
    settings = resolve_values(VACUUM_OPTIONS, None if no_spark else session.conf(), overrides, what="vacuum")
    opened, reads = (table, None) if isinstance(table, Table) else _open(table, storage_options, session)
    snapshot = opened.snapshot
    # Paths are planned against the canonical root: a catalog resolves to a ``file:`` URI, the log reader to a path.
    opened = dataclasses.replace(opened, location=snapshot.location)
    if reads is None or reads.root != opened.location:
        reads = LogReads(opened.storage, opened.location)
    reads.keep_actions = mode == "lite"  # lite's range reads commits the replay parsed
    ensure_write_supported(snapshot.protocol, snapshot.metadata, table=opened.name)
    table_ms = _table_retention_ms(snapshot)
    problem = retention_problem(retain_ms, table_ms, allow_short=bool(settings["allow_short_retention"]))
    if problem is not None:
        raise InvalidArgumentError(f"{opened.name}: {problem}")
    retention = table_ms if retain_ms is None else retain_ms
    delete_before = int(time.time() * 1000) - retention

    runner = settings["task_runner"]  # without Spark imported only ``spark`` starts (or connects) a session
    cluster = None if no_spark and runner != "spark" else _cluster(session, runner, opened)
    opened.storage.requests.mark("plan")
    plan, outside, listed_by = _planned(
        opened, mode, delete_before, reads, also_live=isinstance(table, Table), cluster=cluster
    )

    def metrics(p: VacuumPlan, **done: Any) -> VacuumMetrics:
        return VacuumMetrics(
            opened.name, mode, dry_run, retention, table_ms, delete_before,
            done.get("files", len(p.files)), p.bytes, done.get("folders", len(p.folders)), p.files_listed,
            snapshot.version, p.eligible_start_version, p.eligible_end_version, done.get("start"),
            done.get("end"), done.get("kept", 0), time.monotonic() - started, p.files,
            _clean_logs(opened, settings["clean_logs"], dry_run=dry_run), listed_by, done.get("by"),
            requests=opened.storage.requests.to_dict(phases=True),
        )  # fmt: skip

    if dry_run:
        return metrics(plan)
    opened.storage.requests.mark("delete")
    logged = _logging_on(settings["vacuum_logging"], opened.location)
    start = None
    if logged:
        start = _commit(
            snapshot,
            "VACUUM START",
            {
                "retentionCheckEnabled": not settings["allow_short_retention"],
                "defaultRetentionMillis": table_ms,
                **({"specifiedRetentionMillis": retain_ms} if retain_ms is not None else {}),
            },
            {"numFilesToDelete": len(plan.files), "sizeOfDataToDelete": plan.bytes},
        )
    plan, kept = _guard(opened, plan)
    try:
        if cluster is not None and plan.files:
            files, folders = cluster.delete(plan, progress, batch=BATCH)
        else:
            files, folders = _delete(opened.storage, opened.location, plan, progress)
    except BaseException:
        if logged:
            _commit(snapshot, "VACUUM END", {"status": "FAILED"}, {})
        raise
    end = None
    if logged:
        end = _commit(
            snapshot,
            "VACUUM END",
            {"status": "COMPLETED"},
            {"numDeletedFiles": files, "numVacuumedDirectories": folders},
        )
    if mode == "full":
        outside = _outside(snapshot, delete_before, reads)
    if outside is not None:
        write_last_vacuum(opened.storage, opened.location, outside)
    log.info("vacuumed %s: %d files (%d bytes), %d folders", opened.name, files, plan.bytes, folders)
    by = cluster.deleted_by if cluster is not None and plan.files else "driver"
    return metrics(plan, files=files, folders=folders, start=start, end=end, kept=kept, by=by)
