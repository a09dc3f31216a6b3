"""``purge``: delta-spark's ``REORG TABLE ... APPLY (PURGE)``, committed by our writer.

Deletion vectors make DELETE, UPDATE and MERGE cheap, but the deleted rows stay in the data files
until someone rewrites them (and VACUUM can only then free their bytes). A purge rewrites every
file that has a deletion vector with deleted rows, in the partitions the predicates match: as in
delta-spark, it is OPTIMIZE with ``minFileSize = 0`` and ``maxDeletedRowsRatio = 0``, one-file
bins kept, recorded as a ``REORG`` commit (``predicate``, ``applyPurge: true``). A table without
such files gets no commit. It takes the same path as ``optimize`` (``pipeline``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal, overload

from ..delta.snapshot import Snapshot
from ..options import OptimizeOptions, Order, RewriteEngine, TaskRunner
from ..plan.builder import build_plan
from ..plan.config import OptimizeConfig
from ..plan.operation import Purge
from ..plan.predicate import select_partitions
from .arguments import check_where, keyword_settings
from .pipeline import Planner, Settings, plan_only, run
from .table import Table, source_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..engine.executor import ProgressCallback
    from ..plan.metrics import OptimizeMetrics
    from ..plan.planner import OptimizePlan

__all__ = ["plan_purge", "purge"]


def _planner(where: list[str], options: OptimizeOptions) -> Planner:
    """delta-spark's DeltaPurgeOperation: every file with deleted rows, single-file bins kept."""

    def plan(snapshot: Snapshot, settings: Settings) -> OptimizePlan:
        config = OptimizeConfig.resolve(settings.get_conf, options.overrides())
        selection = select_partitions(snapshot, where, time_zone=settings.time_zone)
        return build_plan(snapshot, config, selection=selection, operation=Purge())

    return plan


@overload
def purge(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = ...,
    dry_run: Literal[False] = ...,
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    options: OptimizeOptions | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
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
def purge(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = ...,
    dry_run: Literal[True],
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    options: OptimizeOptions | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
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
def purge(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = None,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    storage_options: Mapping[str, str] | None = None,
    options: OptimizeOptions | None = None,
    max_file_size: int | str | None = None,
    max_threads: int | None = None,
    batch_size: int | str | None = None,
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
    """Rewrite every file with deleted rows (REORG TABLE ... APPLY (PURGE)); the new files carry no DV.

    Args:
        spark: session to use (None: the running one, else an embedded local session).
        table: table path, ``file:`` URI, catalog name, or a ``Table`` opened by ``ops.table.open_table``
            (its snapshot is planned from, not loaded again).
        where: partition predicate(s), as for ``optimize``.
        dry_run: return the plan (the files to rewrite) instead; nothing is written.
        storage_options, options: as for ``optimize``.
        max_file_size ... task_runner: as for ``optimize``; a purge fixes ``min_file_size``
            and ``max_deleted_rows_ratio`` to 0 (``options.PURGE_FIXED``).

    Returns:
        OptimizeMetrics (``deletion_vector_stats`` says how many DVs and rows were purged), or the plan.
    """
    started = time.monotonic()
    target = source_of(table, storage_options)
    planner = _planner(check_where(where), options or OptimizeOptions())
    if dry_run:
        return plan_only(spark, target, planner)
    return run(spark, target, planner, progress=progress, started=started)


def plan_purge(
    spark: SparkSession | None,
    table: str | Table,
    *,
    where: str | Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> OptimizePlan:
    """The files ``purge`` would rewrite, from the log alone (no Spark for a path), through the same gate."""
    return purge(spark, table, where=where, dry_run=True, storage_options=storage_options)
