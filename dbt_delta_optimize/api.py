"""The public operations: wire a table's snapshot, a plan and the Spark engine together.

``plan_optimize`` starts no JVM for a table given by path (predicates are evaluated in Python);
``optimize`` runs the plan on Spark and commits it with our writer; ``auto_compact`` decides from
the log whether a write left enough small files, and only then starts Spark.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, overload

from .delta.snapshot import Snapshot, check_external_paths, load_snapshot
from .delta.storage import storage_for, table_uri
from .engine.executor import OptimizeExecutor, ProgressCallback
from .errors import DeltaOptimizeError, InvalidArgumentError
from .plan.autocompact import AutoCompactConfig, AutoCompactResult
from .plan.builder import build_plan
from .plan.config import ConfGetter, OptimizeConfig, OptimizeOptions, Order
from .plan.curve import clustering_spec
from .plan.liquid import build_liquid_plan, clustering_columns, is_clustered_table, liquid_spec
from .plan.predicate import select_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .plan.metrics import OptimizeMetrics
    from .plan.planner import OptimizePlan

__all__ = ["OptimizeOptions", "auto_compact", "optimize", "plan_optimize"]

log = logging.getLogger(__name__)

Curve = Literal["zorder", "hilbert"]


def _no_conf(_key: str) -> str | None:
    return None


def active_conf() -> ConfGetter:
    """The running Spark session's conf, if there is one (never starts Spark)."""
    if "pyspark" not in sys.modules:
        return _no_conf
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from .engine.session import conf_getter

    active = SparkSession.getActiveSession()
    if active is None:
        if SparkContext._active_spark_context is None:
            return _no_conf
        active = SparkSession.builder.getOrCreate()
    getter: ConfGetter = conf_getter(active)
    return getter


def _check_args(table: object, where: object, zorder_by: object, curve: object) -> tuple[list[str], list[str]]:
    """Argument types checked up front: a wrong type is an InvalidArgumentError, never a TypeError later."""
    if not isinstance(table, str) or not table.strip():
        raise InvalidArgumentError(f"table must be a path or a catalog name (a non-empty string), got {table!r}.")
    predicates: Any = [where] if isinstance(where, str) else where if where is not None else []
    if not isinstance(predicates, (list, tuple)) or not all(isinstance(p, str) for p in predicates):
        raise InvalidArgumentError(f"where must be a string or a list of strings, got {where!r}.")
    if isinstance(zorder_by, str):
        raise InvalidArgumentError(
            f"zorder_by must be a list of column names, got the string {zorder_by!r}; write [{zorder_by!r}]."
        )
    if not isinstance(zorder_by, (list, tuple, type(None))):
        raise InvalidArgumentError(f"zorder_by must be a list of column names, got {zorder_by!r}.")
    columns = list(zorder_by) if zorder_by is not None else []
    if not all(isinstance(c, str) for c in columns):
        raise InvalidArgumentError(f"zorder_by must be a list of column names, got {zorder_by!r}.")
    if curve not in ("zorder", "hilbert"):
        raise InvalidArgumentError(f"curve must be 'zorder' or 'hilbert', got {curve!r}.")
    return list(predicates), columns


@dataclass(frozen=True)
class _Request:
    table: str
    where: list[str]
    zorder_by: list[str]
    curve: Curve
    full: bool
    options: OptimizeOptions
    storage_options: Mapping[str, str] | None = None
    allow_external_paths: bool = False

    def snapshot(self, location: str) -> Snapshot:
        """The table's snapshot through its storage (an object store gets ``storage_options``); a live file
        outside the table root is refused here, before any data is read, unless external paths are allowed."""
        snapshot = load_snapshot(location, storage=storage_for(table_uri(location), self.storage_options))
        check_external_paths(snapshot, allow=self.allow_external_paths)
        return snapshot


def _plan(snapshot: Snapshot, request: _Request, get_conf: ConfGetter, *, time_zone: str) -> OptimizePlan:
    config = OptimizeConfig.resolve(get_conf, request.options.overrides())
    if is_clustered_table(snapshot.protocol) and (cluster_by := clustering_columns(snapshot)):
        return _liquid_plan(snapshot, request, config, cluster_by, get_conf)
    selection = select_partitions(snapshot, request.where, time_zone=time_zone)
    spec = None
    if request.zorder_by:
        spec = clustering_spec(
            request.zorder_by,
            request.curve,
            schema=snapshot.schema,
            partition_columns=snapshot.partition_columns,
            configuration=snapshot.configuration,
            get_conf=get_conf,
        )
    return build_plan(
        snapshot, config, selection=selection, clustering=spec, zorder_by=request.zorder_by, full=request.full
    )


def _liquid_plan(
    snapshot: Snapshot, request: _Request, config: OptimizeConfig, columns: list[str], get_conf: ConfGetter
) -> OptimizePlan:
    """A clustered table is clustered by its own columns; like delta-spark, no WHERE and no ZORDER BY."""
    if request.zorder_by:
        raise InvalidArgumentError(
            f"{snapshot.location} is a liquid clustered table (CLUSTER BY {', '.join(columns)}): OPTIMIZE clusters "
            f"it by those columns and cannot Z-order it (delta-spark: DELTA_CLUSTERING_WITH_ZORDER_BY). Remove "
            f"--zorder-by {','.join(request.zorder_by)}, or change the columns with ALTER TABLE ... CLUSTER BY."
        )
    if request.where:
        raise InvalidArgumentError(
            f"{snapshot.location} is a liquid clustered table: OPTIMIZE takes no WHERE predicate "
            "(delta-spark: DELTA_CLUSTERING_WITH_PARTITION_PREDICATE). Remove --where; already clustered "
            "files are left alone anyway."
        )
    spec = liquid_spec(snapshot, columns, get_conf)
    return build_liquid_plan(snapshot, config, spec, full=request.full, get_conf=get_conf)


def _options(options: OptimizeOptions | None, values: dict[str, Any]) -> OptimizeOptions:
    base = options or OptimizeOptions()
    given = {k: v for k, v in values.items() if v is not None}
    merged = replace(base, **given)
    OptimizeConfig.resolve(None, merged.overrides())  # invalid values fail here, before any session starts
    return merged


def _local_time_zone() -> str:
    return os.environ.get("TZ") or "UTC"


def _resolve_location(table: str, spark: SparkSession | None) -> tuple[str, SparkSession | None]:
    from .engine.session import get_spark, is_path, resolve_table

    if is_path(table):
        return table, spark
    session = get_spark(spark)
    return resolve_table(table, session), session


@overload
def optimize(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = ...,
    zorder_by: Sequence[str] | None = ...,
    curve: Curve = ...,
    full: bool = ...,
    dry_run: Literal[False] = ...,
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    allow_external_paths: bool = ...,
    options: OptimizeOptions | None = ...,
    min_file_size: int | str | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
    max_deleted_rows_ratio: float | None = ...,
    repartition_enabled: bool | None = ...,
    max_commit_attempts: int | None = ...,
    rewrite_engine: Literal["arrow", "spark"] | None = ...,
    validate_commits: bool | None = ...,
    max_duration: float | str | None = ...,
    max_failed_bins: int | None = ...,
    order: Order | None = ...,
    commit_every: int | str | None = ...,
) -> OptimizeMetrics: ...


@overload
def optimize(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = ...,
    zorder_by: Sequence[str] | None = ...,
    curve: Curve = ...,
    full: bool = ...,
    dry_run: Literal[True],
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    allow_external_paths: bool = ...,
    options: OptimizeOptions | None = ...,
    min_file_size: int | str | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
    max_deleted_rows_ratio: float | None = ...,
    repartition_enabled: bool | None = ...,
    max_commit_attempts: int | None = ...,
    rewrite_engine: Literal["arrow", "spark"] | None = ...,
    validate_commits: bool | None = ...,
    max_duration: float | str | None = ...,
    max_failed_bins: int | None = ...,
    order: Order | None = ...,
    commit_every: int | str | None = ...,
) -> OptimizePlan: ...


def optimize(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = None,
    zorder_by: Sequence[str] | None = None,
    curve: Curve = "zorder",
    full: bool = False,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    storage_options: Mapping[str, str] | None = None,
    allow_external_paths: bool = False,
    options: OptimizeOptions | None = None,
    min_file_size: int | str | None = None,
    max_file_size: int | str | None = None,
    max_threads: int | None = None,
    batch_size: int | str | None = None,
    max_deleted_rows_ratio: float | None = None,
    repartition_enabled: bool | None = None,
    max_commit_attempts: int | None = None,
    rewrite_engine: Literal["arrow", "spark"] | None = None,
    validate_commits: bool | None = None,
    max_duration: float | str | None = None,
    max_failed_bins: int | None = None,
    order: Order | None = None,
    commit_every: int | str | None = None,
) -> OptimizeMetrics | OptimizePlan:
    """OPTIMIZE a Delta table (path or catalog name) like delta-spark, committed by our writer.

    Args:
        spark: session to use (None: the running one, else an embedded local session).
        table: table path, ``file:`` URI, or catalog name.
        where: partition predicate(s) in Spark SQL's syntax (a safe subset); several are ANDed.
        zorder_by: columns to cluster by (nested ``a.b`` and back-quoted names allowed).
        curve: ``"zorder"`` (delta-spark's) or ``"hilbert"`` (2-9 columns).
        full: re-cluster partitions whose files are already clustered by the same columns and curve.
        dry_run: return the OptimizePlan instead (same as ``plan_optimize``); nothing is written.
        storage_options: object-store settings under deltalake's keys (``AWS_ENDPOINT_URL``,
            ``AZURE_STORAGE_ACCOUNT_NAME`` ...); the cloud's environment variables fill in the rest.
        allow_external_paths: read live files outside the table root (a shallow clone's); by default
            such a table is refused before any data is read. Even then only files in the table's store.
        options: per-call settings as one value; the keyword settings below override its fields.
        min_file_size, max_file_size, max_threads, batch_size, max_deleted_rows_ratio,
            repartition_enabled, max_commit_attempts, rewrite_engine, validate_commits: per-call
            overrides of the session conf (delta-spark's ``spark.databricks.delta.optimize.*`` keys).
        max_duration: wall-clock budget (seconds, or ``"25s"``, ``"10m"``, ``"1h"``): no bin starts
            after it; what is done is committed and the metrics say what was left.
        max_failed_bins: bins that may fail (reported in the metrics) while the others commit.
        order: which bins run first: ``files-desc`` (default), ``bytes-desc``, ``partition``, ``oldest-first``.
        commit_every: commit finished bins every N bins (an int) or every period (``"30s"``).

    Returns:
        OptimizeMetrics (the plan with ``dry_run=True``).

    Raises:
        TableNotFoundError, NotADeltaTableError, InvalidPredicateError, InvalidConfigError,
        UnsupportedFeatureError, CorruptLogError, DataFileError, CommitConflictError.
    """
    started = time.monotonic()  # a time budget counts from here
    where_list, columns = _check_args(table, where, zorder_by, curve)
    opts = _options(options, dict(locals_settings(locals())))
    request = _Request(table, where_list, columns, curve, full, opts, storage_options, allow_external_paths)
    if dry_run:
        return _plan_request(spark, request)
    from .engine.session import get_spark
    from .engine.spark_engine import SparkEngine

    location, session = _resolve_location(table, spark)
    snapshot = request.snapshot(location)  # a missing table fails before a session starts
    engine = SparkEngine(get_spark(session))
    plan = _plan(snapshot, request, engine.conf_getter, time_zone=engine.time_zone)
    return OptimizeExecutor(engine, snapshot, plan, progress=progress, started=started).optimize()


_SETTINGS = tuple(f for f in OptimizeOptions.__dataclass_fields__)


def locals_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The per-call settings among a function's arguments."""
    return {k: values[k] for k in _SETTINGS if k in values}


def _plan_request(spark: SparkSession | None, request: _Request) -> OptimizePlan:
    location, session = _resolve_location(request.table, spark)
    snapshot = request.snapshot(location)
    if session is not None:
        from .engine.spark_engine import SparkEngine

        engine = SparkEngine(session)
        return _plan(snapshot, request, engine.conf_getter, time_zone=engine.time_zone)
    get_conf = active_conf()
    return _plan(snapshot, request, get_conf, time_zone=get_conf("spark.sql.session.timeZone") or _local_time_zone())


def plan_optimize(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = None,
    zorder_by: Sequence[str] | None = None,
    curve: Curve = "zorder",
    full: bool = False,
    storage_options: Mapping[str, str] | None = None,
    allow_external_paths: bool = False,
    options: OptimizeOptions | None = None,
    min_file_size: int | str | None = None,
    max_file_size: int | str | None = None,
    max_threads: int | None = None,
    batch_size: int | str | None = None,
    max_deleted_rows_ratio: float | None = None,
    repartition_enabled: bool | None = None,
    max_commit_attempts: int | None = None,
    rewrite_engine: Literal["arrow", "spark"] | None = None,
    validate_commits: bool | None = None,
    max_duration: float | str | None = None,
    max_failed_bins: int | None = None,
    order: Order | None = None,
    commit_every: int | str | None = None,
) -> OptimizePlan:
    """What ``optimize`` would do, decided from the log alone; nothing is written.

    For a table given by path no Spark is started: settings come from ``spark``'s conf when a
    session is given or already running, else from delta-spark's defaults and the arguments.
    """
    where_list, columns = _check_args(table, where, zorder_by, curve)
    opts = _options(options, locals_settings(locals()))
    request = _Request(table, where_list, columns, curve, full, opts, storage_options, allow_external_paths)
    return _plan_request(spark, request)


# ----------------------------------------------------------------------------- auto compaction
def auto_compact(
    spark: SparkSession | None,
    table: str,
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
        max_file_size, min_file_size, min_num_files, modified_partitions_only, non_blind_append,
            max_num_modified_partitions: overrides of delta-spark's ``autoCompact.*`` settings.
        storage_options: object-store settings under deltalake's keys (as for ``optimize``).
    """
    from .autocompact_run import AutoCompactRun

    overrides = {
        "max_file_size": max_file_size,
        "min_file_size": min_file_size,
        "min_num_files": min_num_files,
        "modified_partitions_only": modified_partitions_only,
        "non_blind_append": non_blind_append,
        "max_num_modified_partitions": max_num_modified_partitions,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    t0 = time.perf_counter()
    get_conf = active_conf() if spark is None else _session_conf(spark)
    config = AutoCompactConfig.resolve(get_conf, overrides)
    run = AutoCompactRun(spark, table, since_version, config, get_conf, t0, storage_options=storage_options)
    try:
        return run.execute(enabled)
    except DeltaOptimizeError as exc:
        if run.throw(throw_on_error):
            raise
        log.warning("auto compaction of %s failed: %s", run.location, exc)
        return run.failed(f"auto compaction failed: {exc}", exc)
    except Exception as exc:
        if run.throw(throw_on_error):
            raise
        log.warning("auto compaction of %s failed: %s", run.location, exc, exc_info=True)
        return run.failed(f"auto compaction failed: {type(exc).__name__}: {exc}", exc)


def _session_conf(spark: SparkSession) -> ConfGetter:
    from .engine.session import conf_getter

    getter: ConfGetter = conf_getter(spark)
    return getter
