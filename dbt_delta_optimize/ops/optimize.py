"""``optimize`` and ``plan_optimize``: delta-spark's OPTIMIZE (compaction, Z-order, liquid clustering).

Both take the pipeline's one path (``pipeline``); ``plan_optimize`` stops at the plan, so a table
given by path needs no JVM. What to plan is decided here: a clustered table is clustered by its own
columns, a Z-order request clusters every selected partition, anything else is a compaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, overload

from ..delta.snapshot import Snapshot
from ..errors import InvalidArgumentError
from ..options import OptimizeOptions, Order, RewriteEngine, TaskRunner
from ..plan.builder import build_plan
from ..plan.config import OptimizeConfig
from ..plan.curve import clustering_spec
from ..plan.liquid import build_liquid_plan, clustering_columns, is_clustered_table, liquid_spec
from ..plan.operation import Compact, Operation, ZOrder
from ..plan.predicate import select_partitions
from .arguments import Curve, check_curve, check_where, check_zorder, keyword_settings
from .pipeline import Planner, Settings, plan_only, run
from .table import Table, source_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..engine.executor import ProgressCallback
    from ..plan.metrics import OptimizeMetrics
    from ..plan.planner import OptimizePlan

__all__ = ["optimize", "plan_optimize"]


def _planner(where: list[str], zorder_by: list[str], curve: Curve, full: bool, options: OptimizeOptions) -> Planner:
    def plan(snapshot: Snapshot, settings: Settings) -> OptimizePlan:
        config = OptimizeConfig.resolve(settings.get_conf, options.overrides())
        if is_clustered_table(snapshot.protocol) and (cluster_by := clustering_columns(snapshot)):
            return _liquid_plan(snapshot, settings, config, cluster_by, where, zorder_by, full)
        selection = select_partitions(snapshot, where, time_zone=settings.time_zone)
        operation: Operation = Compact()
        if zorder_by:
            spec = clustering_spec(
                zorder_by,
                curve,
                schema=snapshot.schema,
                partition_columns=snapshot.partition_columns,
                configuration=snapshot.configuration,
                get_conf=settings.get_conf,
            )
            operation = ZOrder(tuple(zorder_by), spec, full)
        return build_plan(snapshot, config, selection=selection, operation=operation)

    return plan


def _liquid_plan(
    snapshot: Snapshot,
    settings: Settings,
    config: OptimizeConfig,
    columns: list[str],
    where: list[str],
    zorder_by: list[str],
    full: bool,
) -> OptimizePlan:
    """A clustered table is clustered by its own columns; like delta-spark, no WHERE and no ZORDER BY."""
    if zorder_by:
        raise InvalidArgumentError(
            f"{snapshot.location} is a liquid clustered table (CLUSTER BY {', '.join(columns)}): OPTIMIZE clusters "
            f"it by those columns and cannot Z-order it (delta-spark: DELTA_CLUSTERING_WITH_ZORDER_BY). Remove "
            f"--zorder-by {','.join(zorder_by)}, or change the columns with ALTER TABLE ... CLUSTER BY."
        )
    if where:
        raise InvalidArgumentError(
            f"{snapshot.location} is a liquid clustered table: OPTIMIZE takes no WHERE predicate "
            "(delta-spark: DELTA_CLUSTERING_WITH_PARTITION_PREDICATE). Remove --where; already clustered "
            "files are left alone anyway."
        )
    spec = liquid_spec(snapshot, columns, settings.get_conf)
    return build_liquid_plan(snapshot, config, spec, full=full, get_conf=settings.get_conf)


@overload
def optimize(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = ...,
    zorder_by: Sequence[str] | None = ...,
    curve: Curve = ...,
    full: bool = ...,
    dry_run: Literal[False] = ...,
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    options: OptimizeOptions | None = ...,
    min_file_size: int | str | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
    max_deleted_rows_ratio: float | None = ...,
    repartition_enabled: bool | None = ...,
    max_commit_attempts: int | None = ...,
    rewrite_engine: RewriteEngine | None = ...,
    validate_commits: bool | None = ...,
    max_duration: float | str | None = ...,
    max_failed_bins: int | None = ...,
    order: Order | None = ...,
    commit_every: int | str | None = ...,
    allow_external_paths: bool | None = ...,
    row_group_copy_min_bytes: int | str | None = ...,
    task_runner: TaskRunner | None = ...,
) -> OptimizeMetrics: ...


@overload
def optimize(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = ...,
    zorder_by: Sequence[str] | None = ...,
    curve: Curve = ...,
    full: bool = ...,
    dry_run: Literal[True],
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    options: OptimizeOptions | None = ...,
    min_file_size: int | str | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
    max_deleted_rows_ratio: float | None = ...,
    repartition_enabled: bool | None = ...,
    max_commit_attempts: int | None = ...,
    rewrite_engine: RewriteEngine | None = ...,
    validate_commits: bool | None = ...,
    max_duration: float | str | None = ...,
    max_failed_bins: int | None = ...,
    order: Order | None = ...,
    commit_every: int | str | None = ...,
    allow_external_paths: bool | None = ...,
    row_group_copy_min_bytes: int | str | None = ...,
    task_runner: TaskRunner | None = ...,
) -> OptimizePlan: ...


@keyword_settings
def optimize(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = None,
    zorder_by: Sequence[str] | None = None,
    curve: Curve = "zorder",
    full: bool = False,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    storage_options: Mapping[str, str] | None = None,
    options: OptimizeOptions | None = None,
    min_file_size: int | str | None = None,
    max_file_size: int | str | None = None,
    max_threads: int | None = None,
    batch_size: int | str | None = None,
    max_deleted_rows_ratio: float | None = None,
    repartition_enabled: bool | None = None,
    max_commit_attempts: int | None = None,
    rewrite_engine: RewriteEngine | None = None,
    validate_commits: bool | None = None,
    max_duration: float | str | None = None,
    max_failed_bins: int | None = None,
    order: Order | None = None,
    commit_every: int | str | None = None,
    allow_external_paths: bool | None = None,
    row_group_copy_min_bytes: int | str | None = None,
    task_runner: TaskRunner | None = None,
) -> OptimizeMetrics | OptimizePlan:
    """OPTIMIZE a Delta table (path or catalog name) like delta-spark, committed by our writer.

    Args:
        spark: session to use (None: the running one, else an embedded local session, started only
            when there is work to run or a catalog name to resolve).
        table: table path, ``file:`` URI, catalog name, or a ``Table`` opened by ``ops.table.open_table``
            (its snapshot is planned from, not loaded again).
        where: partition predicate(s) in Spark SQL's syntax (a safe subset); several are ANDed.
        zorder_by: columns to cluster by (nested ``a.b`` and back-quoted names allowed).
        curve: ``"zorder"`` (delta-spark's) or ``"hilbert"`` (2-9 columns).
        full: re-cluster partitions whose files are already clustered by the same columns and curve.
        dry_run: return the OptimizePlan instead (same as ``plan_optimize``); nothing is written.
        storage_options: object-store settings under deltalake's keys (``AWS_ENDPOINT_URL``,
            ``AZURE_STORAGE_ACCOUNT_NAME`` ...); the cloud's environment variables fill in the rest.
        options: per-call settings as one value; the keyword settings below override its fields.
        min_file_size ... task_runner: per-call settings over the session conf, each
            declared once in ``dbt_delta_optimize.options`` (docs/settings.md).

    Returns:
        OptimizeMetrics (the plan with ``dry_run=True``).

    Raises:
        TableNotFoundError, NotADeltaTableError, InvalidPredicateError, InvalidConfigError,
        UnsupportedFeatureError, CorruptLogError, DataFileError, CommitConflictError.
    """
    started = time.monotonic()  # a time budget counts from here
    target = source_of(table, storage_options)
    planner = _planner(
        check_where(where), check_zorder(zorder_by), check_curve(curve), full, options or OptimizeOptions()
    )
    if dry_run:
        return plan_only(spark, target, planner)
    return run(spark, target, planner, progress=progress, started=started)


@keyword_settings
def plan_optimize(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = None,
    zorder_by: Sequence[str] | None = None,
    curve: Curve = "zorder",
    full: bool = False,
    storage_options: Mapping[str, str] | None = None,
    options: OptimizeOptions | None = None,
    min_file_size: int | str | None = None,
    max_file_size: int | str | None = None,
    max_threads: int | None = None,
    batch_size: int | str | None = None,
    max_deleted_rows_ratio: float | None = None,
    repartition_enabled: bool | None = None,
    max_commit_attempts: int | None = None,
    rewrite_engine: RewriteEngine | None = None,
    validate_commits: bool | None = None,
    max_duration: float | str | None = None,
    max_failed_bins: int | None = None,
    order: Order | None = None,
    commit_every: int | str | None = None,
    allow_external_paths: bool | None = None,
    row_group_copy_min_bytes: int | str | None = None,
    task_runner: TaskRunner | None = None,
) -> OptimizePlan:
    """What ``optimize`` would do, decided from the log alone; nothing is written.

    The same gate as ``optimize``: a table it would refuse is refused here, with the same error. For a
    table given by path no Spark is started: settings come from ``spark``'s conf when a session is
    given or already running, else from delta-spark's defaults and the arguments.
    """
    target = source_of(table, storage_options)
    planner = _planner(
        check_where(where), check_zorder(zorder_by), check_curve(curve), full, options or OptimizeOptions()
    )
    return plan_only(spark, target, planner)
