"""The public operations: wire a table's snapshot, a plan and the Spark engine together."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .delta.snapshot import load_snapshot
from .engine.executor import OptimizeExecutor, ProgressCallback
from .errors import DeltaOptimizeError
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

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .plan.metrics import OptimizeMetrics
    from .plan.planner import OptimizePlan

__all__ = ["auto_compact", "optimize"]

log = logging.getLogger(__name__)


def optimize(
    spark: SparkSession | None,
    table: str,
    where: str | Sequence[str] | None = None,
    zorder_by: Sequence[str] | None = None,
    *,
    curve: str = "zorder",
    full: bool = False,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    **overrides: Any,
) -> OptimizeMetrics | OptimizePlan:
    """OPTIMIZE a Delta table (path or catalog name) like delta-spark, committed by our writer.

    Args:
        spark: session to use (None: the running one, else an embedded local session).
        table: table path, ``file:`` URI, or catalog name.
        where: partition predicate(s) in Spark SQL; several are ANDed.
        zorder_by: columns to cluster by (nested ``a.b`` and back-quoted names allowed).
        curve: ``"zorder"`` (delta-spark's) or ``"hilbert"`` (2-9 columns).
        full: re-cluster partitions whose files are already clustered by the same columns and curve.
        dry_run: return the OptimizePlan instead of running it; nothing is written.
        **overrides: per-call settings (min_file_size, max_file_size, max_threads, batch_size,
            max_deleted_rows_ratio, repartition_enabled, max_commit_attempts) over the session conf.

    Returns:
        OptimizeMetrics (or the plan, with dry_run).

    Raises:
        TableNotFoundError, NotADeltaTableError, InvalidPredicateError, InvalidConfigError,
        UnsupportedFeatureError, CommitConflictError.
    """
    from .engine.session import conf_getter, get_spark, resolve_table

    config = OptimizeConfig.resolve(None, overrides)  # validate overrides before starting Spark
    spark = get_spark(spark)
    config = OptimizeConfig.resolve(conf_getter(spark), overrides)
    location = resolve_table(table, spark)
    snapshot = load_snapshot(location)
    predicates = [where] if isinstance(where, str) else list(where or [])
    executor = OptimizeExecutor(
        spark, snapshot, predicates, list(zorder_by or []), config, progress=progress, curve=curve, full=full
    )
    if dry_run:
        return executor.plan()
    return executor.optimize()


def _triggering(location: str, since_version: int | None, latest: int) -> list[tuple[int, list[dict]]]:
    from .delta.snapshot import read_commit

    start = latest if since_version is None else since_version + 1
    return [(v, read_commit(location, v)) for v in range(max(start, 0), latest + 1)]


def _active_conf() -> ConfGetter:
    """The running Spark session's conf, if there is one (never starts Spark)."""
    import sys

    if "pyspark" not in sys.modules:
        return lambda _k: None
    from pyspark.sql import SparkSession

    from .engine.session import conf_getter

    active = SparkSession.getActiveSession()
    if active is None:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is None:
            return lambda _k: None
        active = SparkSession.builder.getOrCreate()
    return conf_getter(active)


def auto_compact(
    spark: SparkSession | None,
    table: str,
    since_version: int | None = None,
    *,
    enabled: bool | None = None,
    throw_on_error: bool | None = None,
    **overrides: Any,
) -> AutoCompactResult:
    """Run the auto-compaction hook for the write(s) after ``since_version`` (default: the latest commit).

    Args:
        spark: session for the compaction itself; None uses the running one, else an embedded one.
            It is only started when a compaction actually runs.
        table: path or catalog name (a name needs a session to resolve).
        since_version: the table version before the write; the commits after it are the trigger.
        enabled: force on/off (the dbt layer passes model settings); None follows delta-spark's confs.
        throw_on_error: raise instead of returning the error in the result; None reads
            ``spark.databricks.delta.postCommitHook.throwOnError`` (default false).
        **overrides: max_file_size, min_file_size, min_num_files, modified_partitions_only,
            non_blind_append, max_num_modified_partitions.
    """
    from .delta.snapshot import latest_version
    from .engine.session import conf_getter, is_path, resolve_table

    t0 = time.perf_counter()
    get_conf = _active_conf() if spark is None else conf_getter(spark)
    config = AutoCompactConfig.resolve(get_conf, overrides)
    raw_throw = get_conf(PREFIX + "postCommitHook.throwOnError")
    throw = (
        throw_on_error
        if throw_on_error is not None
        else (parse_bool(raw_throw, key="postCommitHook.throwOnError") if raw_throw else False)
    )
    location = table
    triggering: tuple[int, ...] = ()
    decision: AutoCompactDecision | None = None  # kept for the failure result: which partitions were tried

    def result(status: str, reason: str, decision: AutoCompactDecision | None = None, **kw: Any) -> AutoCompactResult:
        now = (time.perf_counter() - t0) * 1000
        return AutoCompactResult(
            table=location,
            status=status,
            reason=reason,
            since_version=since_version,
            triggering_versions=triggering,
            considered=decision.considered if decision else (),
            chosen=decision.chosen if decision else (),
            decision_ms=kw.pop("decision_ms", now),
            duration_ms=now,
            config=config,
            **kw,
        )

    try:
        if not is_path(table):
            from .engine.session import get_spark

            spark = get_spark(spark)
        location = resolve_table(table, spark)
        import pyarrow as pa
        from deltalake import DeltaTable

        latest = latest_version(location)
        dt = DeltaTable(location)
        meta = dt.metadata()
        is_on = enabled if enabled is not None else auto_compact_enabled(get_conf, dict(meta.configuration))
        if not is_on:
            return result(
                DISABLED,
                "auto compaction is not enabled (spark.databricks.delta.autoCompact.enabled or table property delta.autoOptimize.autoCompact)",
            )
        commits = _triggering(location, since_version, latest)
        triggering = tuple(v for v, _ in commits)
        info = {v: next((a["commitInfo"] for a in acts if "commitInfo" in a), {}) for v, acts in commits}
        data_commits = [(v, acts) for v, acts in commits if info[v].get("operation") not in ("OPTIMIZE", "REORG")]
        if not data_commits:
            if not commits:
                return result(SKIP_EMPTY_INGESTION, f"no commits after version {since_version}")
            return result(
                SKIP_OWN_COMMIT,
                "the triggering commits are OPTIMIZE commits: auto compaction never compacts its own output",
            )
        # delta-spark's isQualifiedForAutoCompact: nonBlindAppend only applies with modifiedPartitionsOnly.
        if (
            config.non_blind_append
            and config.modified_partitions_only
            and all(info[v].get("isBlindAppend") for v, _ in data_commits)
        ):
            return result(
                SKIP_BLIND_APPEND, "autoCompact.nonBlindAppend.enabled is set and the write was a blind append"
            )
        added = {unquote(a["add"]["path"]) for _, acts in data_commits for a in acts if "add" in a}
        if not added:
            return result(SKIP_EMPTY_INGESTION, "the triggering commits added no data files")
        columns = list(meta.partition_columns)
        actions = pa.table(dt.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        sizes = actions.column("size_bytes").to_pylist()
        part_cols = [actions.column(f"partition.{c}").to_pylist() for c in columns]
        keys = list(zip(*part_cols)) if columns else [()] * len(paths)
        touched = {k for p, k in zip(paths, keys) if unquote(p) in added}
        decision = decide(list(zip(keys, sizes)), touched, columns, config)
        decision_ms = (time.perf_counter() - t0) * 1000
        if not decision.run:
            return result(decision.status, decision.reason, decision, decision_ms=decision_ms)
        if decision.status == RUN_ON_ALL:
            chosen_paths = None  # the whole table, as delta-spark (no partition predicate)
        else:
            chosen = {tuple(c.partition[col] for col in columns) for c in decision.chosen}
            chosen_paths = {unquote(p) for p, k in zip(paths, keys) if k in chosen}
        metrics = _run(spark, location, chosen_paths, config)
        return result(decision.status, decision.reason, decision, metrics=metrics, decision_ms=decision_ms)
    except DeltaOptimizeError as exc:
        if throw:
            raise
        log.warning("auto compaction of %s failed: %s", location, exc)
        return result(FAILED, f"auto compaction failed: {exc}", decision, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        if throw:
            raise
        log.warning("auto compaction of %s failed: %s", location, exc, exc_info=True)
        return result(
            FAILED,
            f"auto compaction failed: {type(exc).__name__}: {exc}",
            decision,
            error=f"{type(exc).__name__}: {exc}",
        )


def _run(
    spark: SparkSession | None, location: str, chosen_paths: set[str] | None, config: AutoCompactConfig
) -> OptimizeMetrics:
    """Compact the chosen partitions (None: all) of the latest snapshot with the auto-compact sizes, as OPTIMIZE auto=true."""
    from .delta.snapshot import load_snapshot
    from .engine.executor import OptimizeExecutor
    from .engine.session import conf_getter, get_spark
    from .plan.config import OptimizeConfig
    from .plan.planner import raw_partition_key

    spark = get_spark(spark)
    snapshot = load_snapshot(location)
    raw_keys = (
        None
        if chosen_paths is None
        else {
            raw_partition_key(f, snapshot.partition_columns) for f in snapshot.files if unquote(f.path) in chosen_paths
        }
    )
    opt = OptimizeConfig.resolve(
        conf_getter(spark), {"min_file_size": config.small_file_threshold, "max_file_size": config.max_file_size}
    )
    executor = OptimizeExecutor(spark, snapshot, (), (), opt, is_auto_compact=True, partitions=raw_keys)
    return executor.optimize()
