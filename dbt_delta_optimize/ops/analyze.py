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
numRecords the physical rows, as PROTOCOL.md requires). That is what delta-spark itself computes for such a
file (a DML with deletion vectors on a file without stats: ``StatsCollectionUtils.computeStats`` with
``setBoundsToWide``); its ``recompute`` refuses tables with deletion vectors, and no delta-spark path writes
tight bounds for a file with a DV. Where delta-spark's footer collector gives no bound (timestamps, decimals,
doubles it cannot trust from a footer) ours still do, computed as its write path computes them.

Each file is one task (``tasks.stats_task``), run as compaction's bins are: the driver's threads through the
table's Storage on a local master or without a session (a path table needs no JVM), one Spark job per
commit batch on a cluster (``engine.stats_job``), files the executors cannot take computed in the driver.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile
from ..delta.commit import DEFAULT_MAX_COMMIT_ATTEMPTS, Transaction
from ..delta.snapshot import Snapshot, load_snapshot
from ..delta.stats_schema import session_string_prefix_length
from ..delta.storage import LocalStorage
from ..errors import ConcurrentDeleteDeleteError, ConcurrentDeleteReadError, InvalidArgumentError, ValidationError
from ..inspect.live_files import LiveFiles, norm_path
from ..inspect.log_cleanup import after_checkpoint
from ..inspect.validate_analyze import COMPUTE_STATS, validate_stats_actions
from ..options import ANALYZE_OPTIONS, TaskRunner, resolve_values
from ..plan.analyze import FILES_PER_COMMIT, AnalyzePlan, analyze_parameters, plan_analyze
from ..plan.predicate import select_partitions
from ..tasks.messages import Failed, StatsComputed, StatsSpec, StatsTask, StoreRef
from ..tasks.stats_task import file_stats
from .arguments import check_where
from .pipeline import Session, gate
from .table import Table, open_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..engine.spark_engine import SparkEngine

__all__ = ["AnalyzeMetrics", "analyze", "plan_analyze_table"]

log = logging.getLogger(__name__)


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
    #: the requests made to the store (``delta/requests.py``: by kind, bytes read and written, and the scope)
    requests: Mapping[str, Any] = field(default_factory=dict)

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
            "requests": dict(self.requests),
        }


def _check_columns(columns: object) -> list[str] | None:
    if columns is None:
        return None
    items: Any = [c for c in columns.split(",") if c.strip()] if isinstance(columns, str) else columns
    if not isinstance(items, (list, tuple)) or not all(isinstance(c, str) and c.strip() for c in items):
        raise InvalidArgumentError(f"columns must be a list of column names (or 'a,b'), got {columns!r}.")
    return [c.strip() for c in items] or None


def _spec(session: Session, snapshot: Snapshot, get_conf: Any) -> StatsSpec:
    """What computing a file's stats needs, as a task message carries it."""
    return StatsSpec(
        schema=snapshot.schema,
        partition_columns=tuple(snapshot.partition_columns),
        configuration=dict(snapshot.configuration),
        protocol=snapshot.protocol.to_json(),
        time_zone=session.settings().time_zone,
        string_prefix_length=session_string_prefix_length(snapshot.configuration, get_conf),
    )


def _store(snapshot: Snapshot) -> StoreRef:
    """The table root and the options a Spark task needs to open it (as compaction's tasks get them)."""
    if isinstance(snapshot.storage, LocalStorage):
        return StoreRef(snapshot.location, {})
    from ..delta.object_store import task_options

    return StoreRef(snapshot.location, task_options(snapshot.location, snapshot.storage.options))


def _one(snapshot: Snapshot, f: AddFile, spec: StatsSpec) -> AddFile | FailedFile:
    try:
        stats = file_stats(snapshot.storage, snapshot.file_path(f.path), spec, tight_bounds=f.deletion_vector is None)
        return replace(f, data_change=False, stats=stats)
    except Exception as exc:  # a file we cannot read keeps its old stats; reported, never fatal
        log.warning("analyze: cannot compute stats of %s: %s", f.path, exc)
        return FailedFile(f.path, f"{type(exc).__name__}: {exc}")


def _in_driver(
    snapshot: Snapshot, files: Sequence[AddFile], spec: StatsSpec, threads: int
) -> list[AddFile | FailedFile]:
    """Each file's new add (same fields, dataChange false, new stats), computed by ``threads`` threads here."""
    if not files:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(files))), thread_name_prefix="ddo-analyze") as pool:
        return list(pool.map(lambda f: _one(snapshot, f, spec), files))


def _on_cluster(
    engine: SparkEngine, snapshot: Snapshot, files: Sequence[AddFile], spec: StatsSpec, threads: int
) -> list[AddFile | FailedFile]:
    """One Spark job, a task per file; files the executors could not take (no package or pyarrow there, or a
    job that ended early) are computed in the driver."""
    from ..engine.stats_job import run_stats_job

    store = _store(snapshot)
    tasks = [
        StatsTask(i, store, snapshot.file_path(f.path), spec, f.deletion_vector is None) for i, f in enumerate(files)
    ]
    outcomes = run_stats_job(engine, tasks, table=snapshot.location)
    out: list[AddFile | FailedFile | None] = []
    for i, f in enumerate(files):
        o = outcomes.get(i)
        if isinstance(o, StatsComputed):
            snapshot.storage.requests.merge(o.requests)
            log.info(
                "stats of %s computed by %s on %s, package from %s",
                f.path,
                o.worker.python,
                o.worker.host,
                o.worker.package,
            )
            out.append(replace(f, data_change=False, stats=o.stats))
        elif isinstance(o, Failed):
            log.warning("analyze: cannot compute stats of %s: %s: %s", f.path, o.error_type, o.message)
            out.append(FailedFile(f.path, f"{o.error_type}: {o.message}"))
        else:
            out.append(None)
    rest = [f for f, o in zip(files, out) if o is None]
    if rest:
        log.warning("analyze: %d file(s) got no stats from the Spark job; computing them in the driver", len(rest))
    done = iter(_in_driver(snapshot, rest, spec, threads))
    return [o if o is not None else next(done) for o in out]


def _compute(
    snapshot: Snapshot, files: Sequence[AddFile], spec: StatsSpec, threads: int, engine: SparkEngine | None
) -> tuple[list[AddFile], list[FailedFile]]:
    out = (
        _in_driver(snapshot, files, spec, threads)
        if engine is None
        else _on_cluster(engine, snapshot, files, spec, threads)
    )
    return [a for a in out if isinstance(a, AddFile)], [a for a in out if isinstance(a, FailedFile)]


def _cluster_engine(session: Session, task_runner: str) -> SparkEngine | None:
    """The engine when the stats tasks run as a Spark job (a running cluster session, or ``spark``); else None."""
    return session.task_engine(task_runner)


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
    files_per_commit: int | None = None,
    task_runner: TaskRunner | None = None,
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
        max_threads: files computed at once (``spark.dbt_delta_optimize.analyze.maxThreads``; default 4 per
            core, at most 32).
        files_per_commit: files whose stats one commit carries (``...analyze.filesPerCommit``, 10,000).
        task_runner: auto (the driver's threads on a local master or without a session; a Spark job per
            commit batch on a cluster), driver, or spark (``...analyze.taskRunner``).

    Returns:
        AnalyzeMetrics; ``failed`` lists files whose stats could not be computed (left unchanged).
    """
    started = time.monotonic()
    session = Session(spark)
    no_spark = spark is None and "pyspark" not in sys.modules  # no session to read (and no Spark import)
    get_conf = None if no_spark else session.conf()
    knobs = resolve_values(
        ANALYZE_OPTIONS,
        get_conf,
        {"max_threads": max_threads, "files_per_commit": files_per_commit, "task_runner": task_runner},
        what="analyze",
    )
    handle = open_table(table, spark=spark, storage_options=storage_options, session=session)
    plan = _plan(
        handle,
        session,
        columns=_check_columns(columns),
        all_files=all,
        where=check_where(where),
        per_commit=knobs["files_per_commit"],
    )
    if dry_run or not plan.files:
        return _metrics(plan, dry_run=dry_run, started=started, requests=handle.storage.requests.to_dict())
    threads = knobs["max_threads"] or min(32, 4 * (os.cpu_count() or 1))
    spec = _spec(session, handle.snapshot, get_conf)
    engine = _cluster_engine(session, knobs["task_runner"])
    updated, dropped, versions, failed = 0, 0, [], []
    for batch in plan.batches:
        adds, bad = _compute(handle.snapshot, batch, spec, threads, engine)
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
        requests=handle.storage.requests.to_dict(),
    )
