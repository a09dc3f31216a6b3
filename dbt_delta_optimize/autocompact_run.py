"""One auto-compaction run: decide from the log (no Spark), then compact what was chosen (Spark).

The decision reads the triggering commits and the live files' sizes through deltalake; Spark is
started only when a compaction actually runs, so a skip costs a log read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .plan.autocompact import (
    DISABLED,
    FAILED,
    RUN_ON_ALL,
    SKIP_BLIND_APPEND,
    SKIP_EMPTY_INGESTION,
    SKIP_OWN_COMMIT,
    AutoCompactConfig,
    AutoCompactDecision,
    AutoCompactResult,
    auto_compact_enabled,
    decide,
)
from .plan.config import PREFIX, ConfGetter, OptimizeConfig, parse_bool
from .plan.planner import RawKey

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .delta.storage import Storage
    from .plan.metrics import OptimizeMetrics

__all__ = ["AutoCompactRun"]

_DISABLED_REASON = (
    "auto compaction is not enabled "
    "(spark.databricks.delta.autoCompact.enabled or table property delta.autoOptimize.autoCompact)"
)


@dataclass
class _Trigger:
    versions: tuple[int, ...]
    info: dict[int, Mapping[str, Any]]
    data_commits: list[tuple[int, list[dict[str, Any]]]]


@dataclass
class AutoCompactRun:
    spark: SparkSession | None
    table: str
    since_version: int | None
    config: AutoCompactConfig
    get_conf: ConfGetter
    t0: float
    location: str = ""
    storage_options: Mapping[str, str] | None = None
    triggering: tuple[int, ...] = ()
    decision: AutoCompactDecision | None = None
    decision_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.location = self.table

    @property
    def storage(self) -> Storage:
        """The table's storage, with this run's options (an object store's settings)."""
        from .delta.storage import storage_for, table_uri

        return storage_for(table_uri(self.location), self.storage_options)

    # ------------------------------------------------------------------ results
    def result(self, status: str, reason: str, **kw: Any) -> AutoCompactResult:
        now = (time.perf_counter() - self.t0) * 1000
        d = self.decision
        return AutoCompactResult(
            table=self.location,
            status=status,
            reason=reason,
            since_version=self.since_version,
            triggering_versions=self.triggering,
            considered=d.considered if d else (),
            chosen=d.chosen if d else (),
            decision_ms=self.decision_ms if self.decision_ms is not None else now,
            duration_ms=now,
            config=self.config,
            **kw,
        )

    def failed(self, reason: str, exc: BaseException) -> AutoCompactResult:
        return self.result(FAILED, reason, error=f"{type(exc).__name__}: {exc}")

    def throw(self, throw_on_error: bool | None) -> bool:
        if throw_on_error is not None:
            return throw_on_error
        raw = self.get_conf(PREFIX + "postCommitHook.throwOnError")
        return parse_bool(raw, key="postCommitHook.throwOnError") if raw else False

    # ------------------------------------------------------------------ deciding
    def _trigger(self, latest: int) -> _Trigger:
        from .delta.snapshot import read_commit

        start = latest if self.since_version is None else self.since_version + 1
        storage = self.storage
        commits = [(v, read_commit(self.location, v, storage=storage)) for v in range(max(start, 0), latest + 1)]
        info: dict[int, Mapping[str, Any]] = {
            v: next((a["commitInfo"] for a in acts if "commitInfo" in a), {}) for v, acts in commits
        }
        data = [(v, acts) for v, acts in commits if info[v].get("operation") not in ("OPTIMIZE", "REORG")]
        return _Trigger(tuple(v for v, _ in commits), info, data)

    def _skip_reason(self, trigger: _Trigger) -> tuple[str, str] | None:
        if not trigger.data_commits:
            if not trigger.versions:
                return SKIP_EMPTY_INGESTION, f"no commits after version {self.since_version}"
            return SKIP_OWN_COMMIT, (
                "the triggering commits are OPTIMIZE commits: auto compaction never compacts its own output"
            )
        # delta-spark's isQualifiedForAutoCompact: nonBlindAppend only applies with modifiedPartitionsOnly.
        cfg = self.config
        blind = all(trigger.info[v].get("isBlindAppend") for v, _ in trigger.data_commits)
        if cfg.non_blind_append and cfg.modified_partitions_only and blind:
            return SKIP_BLIND_APPEND, "autoCompact.nonBlindAppend.enabled is set and the write was a blind append"
        return None

    def execute(self, enabled: bool | None) -> AutoCompactResult:
        import pyarrow as pa
        from deltalake import DeltaTable

        from .delta.snapshot import latest_version
        from .engine.session import get_spark, is_path, resolve_table

        if not is_path(self.table):
            self.spark = get_spark(self.spark)
        self.location = resolve_table(self.table, self.spark)
        latest = latest_version(self.location, storage=self.storage)
        dt = DeltaTable(self.location, storage_options=dict(self.storage.options) or None)
        meta = dt.metadata()
        is_on = enabled if enabled is not None else auto_compact_enabled(self.get_conf, dict(meta.configuration))
        if not is_on:
            return self.result(DISABLED, _DISABLED_REASON)
        trigger = self._trigger(latest)
        self.triggering = trigger.versions
        skip = self._skip_reason(trigger)
        if skip is not None:
            return self.result(*skip)
        added = {unquote(a["add"]["path"]) for _, acts in trigger.data_commits for a in acts if "add" in a}
        if not added:
            return self.result(SKIP_EMPTY_INGESTION, "the triggering commits added no data files")
        columns = list(meta.partition_columns)
        actions = pa.table(dt.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        part_cols = [actions.column(f"partition.{c}").to_pylist() for c in columns]
        keys = list(zip(*part_cols)) if columns else [()] * len(paths)
        touched = {k for p, k in zip(paths, keys) if unquote(p) in added}
        sizes = actions.column("size_bytes").to_pylist()
        if "deletionVectors" in (dt.protocol().writer_features or ()):  # count DV files by their live bytes
            from .delta.snapshot import load_snapshot
            from .plan.autocompact import logical_sizes

            live = logical_sizes(load_snapshot(self.location, storage=self.storage))
            sizes = [live.get(unquote(p), s) for p, s in zip(paths, sizes)]
        self.decision = decide(list(zip(keys, sizes)), touched, columns, self.config)
        self.decision_ms = (time.perf_counter() - self.t0) * 1000
        if not self.decision.run:
            return self.result(self.decision.status, self.decision.reason)
        chosen_paths = None
        if self.decision.status != RUN_ON_ALL:  # RUN_ON_ALL: the whole table, no partition predicate
            chosen = {tuple(c.partition[col] for col in columns) for c in self.decision.chosen}
            chosen_paths = {unquote(p) for p, k in zip(paths, keys) if k in chosen}
        metrics = self._compact(chosen_paths)
        return self.result(self.decision.status, self.decision.reason, metrics=metrics)

    # ------------------------------------------------------------------ compacting
    def _compact(self, chosen_paths: set[str] | None) -> OptimizeMetrics:
        """Compact the chosen partitions (None: all) with the auto-compact sizes, as OPTIMIZE auto=true."""
        from .delta.snapshot import check_external_paths, load_snapshot
        from .engine.executor import OptimizeExecutor
        from .engine.session import get_spark
        from .engine.spark_engine import SparkEngine
        from .plan.autocompact import partitions_of
        from .plan.builder import build_plan
        from .plan.predicate import select_partitions

        engine = SparkEngine(get_spark(self.spark))
        snapshot = load_snapshot(self.location, storage=self.storage)
        check_external_paths(snapshot)  # before any data file is read (auto compaction never reads outside the root)
        raw_keys: set[RawKey] | None = None if chosen_paths is None else partitions_of(snapshot, chosen_paths)
        sizes = {"min_file_size": self.config.small_file_threshold, "max_file_size": self.config.max_file_size}
        config = OptimizeConfig.resolve(engine.conf_getter, sizes)
        selection = select_partitions(snapshot, (), time_zone=engine.time_zone)
        plan = build_plan(snapshot, config, selection=selection, partitions=raw_keys, is_auto_compact=True)
        return OptimizeExecutor(engine, snapshot, plan).optimize()
