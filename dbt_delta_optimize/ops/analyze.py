"""``analyze``: delta-spark's ``StatisticsCollection.recompute`` (Databricks' ``ANALYZE TABLE ... COMPUTE DELTA
STATISTICS``) for open-source Delta, committed by our writer.

Data skipping needs per-file stats in the log; files written with ``dataSkippingNumIndexedCols = 0``, by a
converter, or before a column was added to ``dataSkippingStatsColumns`` have none (or not for the columns
queried). ``analyze`` plans from the snapshot (``plan.analyze``: the files whose stats are missing or do
not cover the stats columns, or every file with ``all``), computes each file's stats exactly as
delta-spark writes them (``inspect.stats``: from the Parquet footer where it is exact, reading only the
columns it cannot answer for), and commits what recompute commits: an ``add`` for the same path with
``dataChange: false`` and the new stats, every other field kept, as ``COMPUTE STATS``.

Files with a deletion vector get the physical file's stats as wide bounds (``tightBounds: false``,
numRecords the physical rows), which is what delta-spark keeps for such files after a DELETE; delta-spark's
own recompute refuses tables with deletion vectors. Files are read by a thread pool in this process
through the table's Storage (pyarrow releases the GIL), not by Spark tasks: a path table needs no JVM.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile
from ..delta.commit import DEFAULT_MAX_COMMIT_ATTEMPTS, Transaction
from ..delta.snapshot import Snapshot, load_snapshot
from ..delta.stats_schema import STRING_PREFIX_KEY
from ..errors import ConcurrentDeleteDeleteError, ConcurrentDeleteReadError, InvalidArgumentError, ValidationError
from ..inspect.live_files import LiveFiles, norm_path
from ..inspect.log_cleanup import after_checkpoint
from ..inspect.validate_analyze import COMPUTE_STATS, validate_stats_actions
from ..plan.analyze import FILES_PER_COMMIT, AnalyzePlan, analyze_parameters, plan_analyze
from ..plan.predicate import select_partitions
from .arguments import check_where
from .pipeline import Session, gate
from .table import Table, open_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["AnalyzeMetrics", "analyze", "plan_analyze_table"]

log = logging.getLogger(__name__)

#: spark.databricks.io.skipping.stringPrefixLength: the session's stats prefix when the table sets none.
SESSION_PREFIX_KEY = "spark.databricks.io.skipping.stringPrefixLength"


@dataclass(frozen=True)
class FailedFile:
    """A file whose stats could not be computed (left as it was)."""

    path: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "error": self.error}


@dataclass(frozen=True)
class AnalyzeMetrics:
    """What one ``analyze`` did (or, with ``dry_run``, would do)."""

    table: str
    read_version: int
    dry_run: bool
    files_considered: int
    files_planned: int
    bytes_planned: int
    reasons: Mapping[str, int]
    stats_columns: tuple[str, ...]
    files_updated: int = 0
    #: files a concurrent commit removed or changed before ours landed: their new stats were dropped
    files_dropped: int = 0
    failed: tuple[FailedFile, ...] = ()
    versions: tuple[int, ...] = ()  #: the COMPUTE STATS commits written
    duration_s: float = 0.0
    paths: tuple[str, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> dict[str, Any]:
        """What a dry run reports (as an OptimizePlan's summary does)."""
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "readVersion": self.read_version,
            "dryRun": self.dry_run,
            "filesConsidered": self.files_considered,
            "filesPlanned": self.files_planned,
            "bytesPlanned": self.bytes_planned,
            "reasons": dict(self.reasons),
            "statsColumns": list(self.stats_columns),
            "filesUpdated": self.files_updated,
            "filesDropped": self.files_dropped,
            "failed": [f.to_dict() for f in self.failed],
            "versions": list(self.versions),
            "durationSeconds": round(self.duration_s, 3),
            "paths": list(self.paths[:100]),
        }


@dataclass(frozen=True)
class _StatsSettings:
    time_zone: str
    prefix: int | None


def _check_columns(columns: object) -> list[str] | None:
    if columns is None:
        return None
    items: Any = [c for c in columns.split(",") if c.strip()] if isinstance(columns, str) else columns
    if not isinstance(items, (list, tuple)) or not all(isinstance(c, str) and c.strip() for c in items):
        raise InvalidArgumentError(f"columns must be a list of column names (or 'a,b'), got {columns!r}.")
    return [c.strip() for c in items] or None


def _settings(session: Session, snapshot: Snapshot) -> _StatsSettings:
    settings = session.settings()
    prefix = None
    raw = settings.get_conf(SESSION_PREFIX_KEY)
    if STRING_PREFIX_KEY not in snapshot.configuration and raw:
        try:
            prefix = int(raw)
        except ValueError:
            raise InvalidArgumentError(f"{SESSION_PREFIX_KEY}={raw!r} is not an integer.") from None
    return _StatsSettings(settings.time_zone, prefix)


def _inexact_chunks(meta: Any) -> frozenset[tuple[int, int]]:
    """(row group, column) chunks whose min or max the writer marked truncated (arrow-rs does, by length)."""
    out = set()
    for r, rg in enumerate(meta.row_groups or ()):
        for c, chunk in enumerate(rg.columns or ()):
            st = chunk.meta_data.statistics if chunk.meta_data is not None else None
            if st is not None and (st.is_min_value_exact is False or st.is_max_value_exact is False):
                out.add((r, c))
    return frozenset(out)


def _file_stats(snapshot: Snapshot, f: AddFile, settings: _StatsSettings) -> str:
    """One file's stats: its footer decoded once (exactness flags pyarrow does not expose), its data read
    only for the columns the footer cannot answer for."""
    from ..inspect.stats import stats_from_metadata
    from ..tasks.parquet_footer import pyarrow_metadata, read_footer

    location = snapshot.file_path(f.path)
    with snapshot.storage.open_input(location) as fh:
        footer = read_footer(fh, location)
        return stats_from_metadata(
            pyarrow_metadata(footer),
            fh,
            snapshot.schema,
            snapshot.partition_columns,
            snapshot.configuration,
            protocol=snapshot.protocol,
            session_time_zone=settings.time_zone,
            string_prefix_length=settings.prefix,
            tight_bounds=f.deletion_vector is None,
            inexact_chunks=_inexact_chunks(footer.meta),
        )


def _compute(
    snapshot: Snapshot, files: Sequence[AddFile], settings: _StatsSettings, threads: int
) -> tuple[list[AddFile], list[FailedFile]]:
    """Each file's new add (same fields, dataChange false, new stats), read by ``threads`` threads."""

    def one(f: AddFile) -> AddFile | FailedFile:
        try:
            return replace(f, data_change=False, stats=_file_stats(snapshot, f, settings))
        except Exception as exc:  # a file we cannot read keeps its old stats; reported, never fatal
            log.warning("analyze: cannot compute stats of %s: %s", f.path, exc)
            return FailedFile(f.path, f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(files))), thread_name_prefix="ddo-analyze") as pool:
        out = list(pool.map(one, files))
    return [a for a in out if isinstance(a, AddFile)], [a for a in out if isinstance(a, FailedFile)]


def _still_live(latest: Snapshot, adds: Sequence[AddFile]) -> list[AddFile]:
    """The adds whose file is still live in ``latest`` with the same deletion vector, with its current fields."""
    live = LiveFiles(latest).lookup(norm_path(a.path, latest.location) for a in adds)
    out = []
    for a in adds:
        f = live.get(norm_path(a.path, latest.location))
        if f is not None and f.key == a.key:
            out.append(replace(f, data_change=False, stats=a.stats))
    return out


def _commit_once(snapshot: Snapshot, adds: Sequence[AddFile], plan: AnalyzePlan) -> int:
    from ..inspect.validate import validate_commit

    live = LiveFiles(snapshot)
    validate_stats_actions(snapshot, adds, live=live).raise_if_invalid()
    txn = Transaction(snapshot, after_checkpoint=after_checkpoint(snapshot))
    txn.track_read(adds)
    result = txn.commit(list(adds), COMPUTE_STATS, analyze_parameters(plan.predicates), {}, fresh_row_ids=False)
    before = snapshot if result.version == snapshot.version + 1 else None
    report = validate_commit(
        snapshot.location, result.version, storage=snapshot.storage, before=before, live=live if before else None
    )
    if not report.ok:
        raise ValidationError(
            f"COMPUTE STATS commit {result.version} of {snapshot.location} failed validation after landing: "
            f"{report.describe()}\nThis is a bug in dbt-delta-optimize, please report it. Only statistics changed; "
            f"to undo, RESTORE TABLE delta.`{snapshot.location}` TO VERSION AS OF {result.version - 1}."
        )
    return result.version


def _commit(snapshot: Snapshot, adds: Sequence[AddFile], plan: AnalyzePlan) -> tuple[int | None, int]:
    """Commit one batch; a concurrent commit that removed some files drops just those. Returns (version, dropped)."""
    pending = list(adds)
    for attempt in range(1, DEFAULT_MAX_COMMIT_ATTEMPTS + 1):
        if not pending:
            return None, len(adds) - len(pending)
        try:
            return _commit_once(snapshot, pending, plan), len(adds) - len(pending)
        except (ConcurrentDeleteReadError, ConcurrentDeleteDeleteError):
            latest = load_snapshot(snapshot.location, storage=snapshot.storage)
            kept = _still_live(latest, pending)
            if len(kept) == len(pending) or attempt == DEFAULT_MAX_COMMIT_ATTEMPTS:
                raise
            log.warning(
                "analyze: %d file(s) changed concurrently; their new stats are dropped", len(pending) - len(kept)
            )
            snapshot, pending = latest, kept
    raise AssertionError("unreachable: the last attempt commits or raises")


def _plan(
    table: Table, session: Session, *, columns: list[str] | None, all_files: bool, where: list[str], per_commit: int
) -> AnalyzePlan:
    snapshot = table.snapshot
    gate(snapshot)
    selection = select_partitions(snapshot, where, time_zone=session.settings().time_zone) if where else None
    return plan_analyze(
        snapshot, all_files=all_files, selection=selection, columns=columns, files_per_commit=per_commit
    )


def _metrics(plan: AnalyzePlan, *, dry_run: bool, started: float, **done: Any) -> AnalyzeMetrics:
    reasons: dict[str, int] = {}
    for r in plan.reasons.values():
        reasons[r] = reasons.get(r, 0) + 1
    return AnalyzeMetrics(
        table=plan.table,
        read_version=plan.read_version,
        dry_run=dry_run,
        files_considered=plan.files_considered,
        files_planned=len(plan.files),
        bytes_planned=plan.bytes,
        reasons=reasons,
        stats_columns=plan.stats_columns,
        duration_s=time.monotonic() - started,
        paths=tuple(f.path for f in plan.files),
        **done,
    )


def plan_analyze_table(
    spark: SparkSession | None,
    table: str | Table,
    *,
    columns: str | Sequence[str] | None = None,
    all: bool = False,
    where: str | Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> AnalyzePlan:
    """The files ``analyze`` would recompute stats for, from the log alone (no Spark for a path)."""
    session = Session(spark)
    handle = open_table(table, spark=spark, storage_options=storage_options, session=session)
    return _plan(
        handle,
        session,
        columns=_check_columns(columns),
        all_files=all,
        where=check_where(where),
        per_commit=FILES_PER_COMMIT,
    )


def analyze(
    spark: SparkSession | None,
    table: str | Table,
    *,
    columns: str | Sequence[str] | None = None,
    all: bool = False,
    where: str | Sequence[str] | None = None,
    dry_run: bool = False,
    storage_options: Mapping[str, str] | None = None,
    max_threads: int | None = None,
    files_per_commit: int = FILES_PER_COMMIT,
) -> AnalyzeMetrics:
    """Compute statistics, exactly as delta-spark writes them, for files that lack them (or all files).

    Args:
        spark: a session (None: the running one if any; a path table needs none).
        table: table path, URI, catalog name, or a ``Table`` from ``ops.table.open_table``.
        columns: only consider these stats columns (logical names, dotted for nested) when deciding
            which files lack stats; the stats written are always all of the table's stats columns.
        all: recompute every selected file's stats, not only the missing or incomplete ones.
        where: partition predicate(s), as for ``optimize``.
        dry_run: plan only; nothing is read beyond the log, nothing written.
        storage_options: object-store options (as deltalake's).
        max_threads: threads reading footers (default: 4 per core, at most 32).
        files_per_commit: files whose stats one commit carries.

    Returns:
        AnalyzeMetrics; ``failed`` lists files whose stats could not be computed (left unchanged).
    """
    started = time.monotonic()
    session = Session(spark)
    handle = open_table(table, spark=spark, storage_options=storage_options, session=session)
    plan = _plan(
        handle,
        session,
        columns=_check_columns(columns),
        all_files=all,
        where=check_where(where),
        per_commit=files_per_commit,
    )
    if dry_run or not plan.files:
        return _metrics(plan, dry_run=dry_run, started=started)
    threads = max_threads if max_threads is not None else min(32, 4 * (os.cpu_count() or 1))
    if threads < 1:
        raise InvalidArgumentError(f"max_threads must be >= 1, got {max_threads}.")
    settings = _settings(session, handle.snapshot)
    updated, dropped, versions, failed = 0, 0, [], []
    for batch in plan.batches:
        adds, bad = _compute(handle.snapshot, batch, settings, threads)
        failed.extend(bad)
        version, lost = _commit(handle.snapshot, adds, plan)
        dropped += lost
        updated += len(adds) - lost
        if version is not None:
            versions.append(version)
    return _metrics(
        plan,
        dry_run=False,
        started=started,
        files_updated=updated,
        files_dropped=dropped,
        failed=tuple(failed),
        versions=tuple(versions),
    )
