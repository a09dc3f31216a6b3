"""``auto_compact``: decide from the log whether a write left enough small files, and only then compact.

One snapshot per hook: the decision counts the small files of the partitions the triggering commits
touched from the snapshot's FileTable, and the compaction plans from the same snapshot. Spark is
started only when a compaction actually runs (or a catalog name has to be resolved), so a skip
costs a log read. A table's log is read through the pipeline, so its errors are the same as
``optimize``'s (a corrupt commit names its version).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..delta.snapshot import Snapshot
from ..errors import DeltaOptimizeError
from ..options import PREFIX, ConfGetter, OptimizeOptions, parse_bool
from ..plan.autocompact import (
    DISABLED,
    FAILED,
    RUN_ON_ALL,
    SKIP_EMPTY_INGESTION,
    AutoCompactConfig,
    AutoCompactDecision,
    AutoCompactResult,
    auto_compact_enabled,
    decide_counts,
    partition_counts,
    partitions_of,
    trigger_skip,
)
from ..plan.builder import build_plan
from ..plan.config import OptimizeConfig
from ..plan.operation import REARRANGING_OPERATIONS, AutoCompact
from ..plan.predicate import select_partitions
from ..plan.run_commits import RunCommits, run_commits, to_epoch_ms
from .pipeline import Session, Target, execute, external_paths_gate, gate
from .table import Table, source_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..delta.file_table import RawKey
    from ..plan.metrics import OptimizeMetrics

__all__ = ["auto_compact", "compaction_overrides"]

log = logging.getLogger(__name__)

_DISABLED_REASON = (
    "auto compaction is not enabled "
    "(spark.databricks.delta.autoCompact.enabled or table property delta.autoOptimize.autoCompact)"
)


@dataclass(frozen=True)
class _Trigger:
    versions: tuple[int, ...]
    info: dict[int, Mapping[str, Any]]
    data_commits: list[tuple[int, list[dict[str, Any]]]]
    run: RunCommits

    @property
    def added(self) -> set[str]:
        """Decoded paths the data commits added."""
        from urllib.parse import unquote

        return {unquote(a["add"]["path"]) for _, acts in self.data_commits for a in acts if "add" in a}


def _info(actions: list[dict[str, Any]]) -> Mapping[str, Any]:
    info: Mapping[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    return info


#: Commits read at once while looking back for the first one stamped before the run started.
_BACK_STEP = 16


def _window(snapshot: Snapshot, since_version: int | None, started_ms: int | None) -> list[tuple[int, Any]]:
    """The commits the run may have made: after ``since_version``; else back from the latest to the first one
    stamped before ``started_ms`` (or the oldest the log still has); else the latest alone. Commits the
    snapshot's load read are not read again; the others are read concurrently, ``_BACK_STEP`` at a time."""
    from ..plan.run_commits import commit_time_ms

    latest = snapshot.version
    if since_version is not None:
        start = since_version + 1 if since_version <= latest else 0  # past the end: the table was made anew
        return snapshot.commits(range(start, latest + 1))
    if started_ms is None:
        return snapshot.commits([latest])
    listed = [v for v in snapshot.cached_log().listing.commits if v <= latest]  # cleaned-up ones are not listed
    commits: list[tuple[int, Any]] = []
    while listed:
        step, listed = listed[-_BACK_STEP:], listed[:-_BACK_STEP]
        for v, actions in reversed(snapshot.commits(step)):
            commits.append((v, actions))
            if (commit_time_ms(_info(actions)) or 0) < started_ms:
                return commits[::-1]
    return commits[::-1]


def _trigger(snapshot: Snapshot, since_version: int | None, started_ms: int | None = None) -> _Trigger:
    """The run's commits (``plan.run_commits``): after ``since_version``, or since ``started_ms``, or the latest."""
    commits = _window(snapshot, since_version, started_ms)
    info = {v: _info(acts) for v, acts in commits}
    run = run_commits(list(info.items()), latest=snapshot.version, since_version=since_version, started_ms=started_ms)
    counted = set(run.versions)
    data = [(v, acts) for v, acts in commits if v in counted and info[v].get("operation") not in REARRANGING_OPERATIONS]
    return _Trigger(run.versions, info, data, run)


@dataclass
class _Run:
    """One hook: its settings, what it found, and the result it reports."""

    session: Session
    target: Table | Target
    since_version: int | None
    config: AutoCompactConfig
    options: OptimizeOptions
    get_conf: ConfGetter
    t0: float
    location: str = ""
    triggering: tuple[int, ...] = ()
    decision: AutoCompactDecision | None = None
    decision_ms: float | None = None
    started_ms: int | None = None  #: the run's start (epoch ms): without since_version, the window's start
    run: RunCommits | None = None
    snapshot: Snapshot | None = None  #: the table as opened (its storage counts the hook's requests)

    def result(self, status: str, reason: str, **kw: Any) -> AutoCompactResult:
        now = (time.perf_counter() - self.t0) * 1000
        d = self.decision
        return AutoCompactResult(
            table=self.location or self.name,
            status=status,
            reason=reason,
            since_version=self.since_version,
            triggering_versions=self.triggering,
            considered=d.considered if d else (),
            chosen=d.chosen if d else (),
            decision_ms=self.decision_ms if self.decision_ms is not None else now,
            duration_ms=now,
            config=self.config,
            run=self.run,
            requests=self.snapshot.storage.requests.to_dict(phases=True) if self.snapshot is not None else {},
            **kw,
        )

    @property
    def name(self) -> str:
        return self.target.name if isinstance(self.target, Table) else self.target.table

    def _open(self) -> Snapshot:
        """The handle's snapshot as it is (no second load), or the named table opened once."""
        if isinstance(self.target, Table):
            self.location = self.target.location
            return self.target.snapshot
        self.location = self.target.location(self.session)
        return self.target.open(self.session)

    def throw(self, throw_on_error: bool | None) -> bool:
        if throw_on_error is not None:
            return throw_on_error
        raw = self.get_conf(PREFIX + "postCommitHook.throwOnError")
        return parse_bool(raw, key="postCommitHook.throwOnError") if raw else False

    def execute(self, enabled: bool | None, *, decide_only: bool = False) -> AutoCompactResult:
        snapshot = self.snapshot = self._open()
        is_on = enabled if enabled is not None else auto_compact_enabled(self.get_conf, snapshot.configuration)
        if not is_on:
            return self.result(DISABLED, _DISABLED_REASON)
        trigger = _trigger(snapshot, self.since_version, self.started_ms)
        self.triggering, self.run = trigger.versions, trigger.run
        skip = trigger_skip(self.since_version, [(v, trigger.info[v]) for v in trigger.versions], self.config)
        if skip is not None:
            return self.result(*skip)
        added = trigger.added
        if not added:
            return self.result(SKIP_EMPTY_INGESTION, "the triggering commits added no data files")
        small, total = partition_counts(snapshot, self.config.small_file_threshold)
        touched = partitions_of(snapshot, added)
        self.decision = decide_counts(small, total, touched, snapshot.partition_columns, self.config)
        self.decision_ms = (time.perf_counter() - self.t0) * 1000
        if not self.decision.run or decide_only:
            return self.result(self.decision.status, self.decision.reason)
        chosen = None
        if self.decision.status != RUN_ON_ALL:  # RUN_ON_ALL: the whole table, no partition predicate
            cols = snapshot.partition_columns
            chosen = frozenset(tuple(c.partition[col] for col in cols) for c in self.decision.chosen)
        metrics = self._compact(snapshot, chosen)
        return self.result(self.decision.status, self.decision.reason, metrics=metrics)

    def _compact(self, snapshot: Snapshot, chosen: frozenset[RawKey] | None) -> OptimizeMetrics:
        """Compact the chosen partitions (None: all) as OPTIMIZE auto=true: every OPTIMIZE setting the caller
        gave, with the auto-compact sizes in place of OPTIMIZE's own."""
        gate(snapshot)
        engine = self.session.engine()
        settings = self.session.settings()
        config = OptimizeConfig.resolve(settings.get_conf, compaction_overrides(self.options, self.config))
        selection = select_partitions(snapshot, (), time_zone=settings.time_zone)
        plan = build_plan(snapshot, config, selection=selection, operation=AutoCompact(chosen))
        return execute(engine, snapshot, external_paths_gate(snapshot, plan))


def compaction_overrides(options: OptimizeOptions, config: AutoCompactConfig) -> dict[str, Any]:
    """The OPTIMIZE overrides of an auto compaction: the caller's settings, sized by auto compaction."""
    sizes = {"min_file_size": config.small_file_threshold, "max_file_size": config.max_file_size}
    return {**options.overrides(), **sizes}


def auto_compact(
    spark: SparkSession | None,
    table: str | Table,
    since_version: int | None = None,
    *,
    enabled: bool | None = None,
    throw_on_error: bool | None = None,
    max_file_size: int | str | None = None,
    min_file_size: int | str | None = None,
    min_num_files: int | None = None,
    modified_partitions_only: bool | None = None,
    non_blind_append: bool | None = None,
    max_num_modified_partitions: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    decide_only: bool = False,
    options: OptimizeOptions | None = None,
    run_started_at: Any = None,
) -> AutoCompactResult:
    """Run the auto-compaction hook for the write(s) after ``since_version`` (default: the latest commit).

    Args:
        spark: session for the compaction itself; None uses the running one, else an embedded one.
            It is only started when a compaction actually runs.
        table: path or catalog name (a name needs a session to resolve), or a ``Table`` from
            ``ops.table.open_table`` (its snapshot is decided and planned from, not loaded again).
        since_version: the table version before the write; the commits after it are the trigger
            (-1: there was no table, every commit is).
        enabled: force on/off (the dbt layer passes model settings); None follows delta-spark's confs.
        throw_on_error: raise instead of returning the error in the result; None reads
            ``spark.databricks.delta.postCommitHook.throwOnError`` (default false).
        max_file_size ... max_num_modified_partitions: overrides of delta-spark's ``autoCompact.*``
            settings (``options.AUTO_COMPACT_OPTIONS``).
        storage_options: object-store settings under deltalake's keys (as for ``optimize``).
        decide_only: return the decision (status, reason, chosen partitions) without compacting; for
            a table given by path no Spark is started (the dbt hooks then compact through SQL).
        options: the OPTIMIZE settings of the compaction itself (time budget, commit_every, threads,
            validation ...); its sizes are auto compaction's (``min_file_size``/``max_file_size`` above).
        run_started_at: when the writing run started (a datetime, ISO string or epoch ms; dbt's
            ``run_started_at``): without ``since_version``, the commits stamped since then are the trigger
            (``plan.run_commits``: another engine's commits among them are not counted).
    """
    overrides = {
        "max_file_size": max_file_size,
        "min_file_size": min_file_size,
        "min_num_files": min_num_files,
        "modified_partitions_only": modified_partitions_only,
        "non_blind_append": non_blind_append,
        "max_num_modified_partitions": max_num_modified_partitions,
    }
    t0 = time.perf_counter()
    session = Session(spark)
    get_conf = session.conf()
    config = AutoCompactConfig.resolve(get_conf, {k: v for k, v in overrides.items() if v is not None})
    source = source_of(table, storage_options)
    run = _Run(session, source, since_version, config, options or OptimizeOptions(), get_conf, t0)
    run.started_ms = to_epoch_ms(run_started_at)
    try:
        return run.execute(enabled, decide_only=decide_only)
    except DeltaOptimizeError as exc:
        if run.throw(throw_on_error):
            raise
        log.warning("auto compaction of %s failed: %s", run.location or run.name, exc)
        return run.result(FAILED, f"auto compaction failed: {exc}", error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        if run.throw(throw_on_error):
            raise
        log.warning("auto compaction of %s failed: %s", run.location or run.name, exc, exc_info=True)
        return run.result(
            FAILED, f"auto compaction failed: {type(exc).__name__}: {exc}", error=f"{type(exc).__name__}: {exc}"
        )
