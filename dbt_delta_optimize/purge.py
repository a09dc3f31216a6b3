"""``purge``: delta-spark's ``REORG TABLE ... APPLY (PURGE)``, committed by our writer.

Deletion vectors make DELETE, UPDATE and MERGE cheap, but the deleted rows stay in the data files
until someone rewrites them (and VACUUM can only then free their bytes). A purge rewrites every
file that has a deletion vector with deleted rows, in the partitions the predicates match: as in
delta-spark, it is OPTIMIZE with ``minFileSize = 0`` and ``maxDeletedRowsRatio = 0``, one-file
bins kept, recorded as a ``REORG`` commit (``predicate``, ``applyPurge: true``). A table without
such files gets no commit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal, overload

from .api import _check_args, _options, _Request, _resolve_location, active_conf, locals_settings
from .plan.builder import build_plan
from .plan.config import ConfGetter, OptimizeConfig, OptimizeOptions
from .plan.predicate import select_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .delta.snapshot import Snapshot
    from .engine.executor import ProgressCallback
    from .plan.metrics import OptimizeMetrics
    from .plan.planner import OptimizePlan

__all__ = ["plan_purge", "purge"]


def _purge_plan(snapshot: Snapshot, request: _Request, get_conf: ConfGetter, *, time_zone: str) -> OptimizePlan:
    """delta-spark's DeltaPurgeOperation: every file with deleted rows, single-file bins kept."""
    config = OptimizeConfig.resolve(get_conf, request.options.overrides())
    config = replace(config, min_file_size=0, max_deleted_rows_ratio=0.0)
    selection = select_partitions(snapshot, request.where, time_zone=time_zone)
    return replace(build_plan(snapshot, config, selection=selection), operation="REORG")


def _plan_request(spark: SparkSession | None, request: _Request) -> OptimizePlan:
    location, session = _resolve_location(request.table, spark)
    snapshot = request.snapshot(location)
    if session is not None:
        from .engine.spark_engine import SparkEngine

        engine = SparkEngine(session)
        return _purge_plan(snapshot, request, engine.conf_getter, time_zone=engine.time_zone)
    get_conf = active_conf()
    return _purge_plan(snapshot, request, get_conf, time_zone=get_conf("spark.sql.session.timeZone") or "UTC")


@overload
def purge(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = ...,
    dry_run: Literal[False] = ...,
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    options: OptimizeOptions | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
    max_duration: float | str | None = ...,
) -> OptimizeMetrics: ...


@overload
def purge(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = ...,
    dry_run: Literal[True],
    progress: ProgressCallback | None = ...,
    storage_options: Mapping[str, str] | None = ...,
    options: OptimizeOptions | None = ...,
    max_file_size: int | str | None = ...,
    max_threads: int | None = ...,
    batch_size: int | str | None = ...,
    max_duration: float | str | None = ...,
) -> OptimizePlan: ...


def purge(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = None,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    storage_options: Mapping[str, str] | None = None,
    options: OptimizeOptions | None = None,
    max_file_size: int | str | None = None,
    max_threads: int | None = None,
    batch_size: int | str | None = None,
    max_duration: float | str | None = None,
) -> OptimizeMetrics | OptimizePlan:
    """Rewrite every file with deleted rows (REORG TABLE ... APPLY (PURGE)); the new files carry no DV.

    Args:
        spark: session to use (None: the running one, else an embedded local session).
        table: table path, ``file:`` URI, or catalog name.
        where: partition predicate(s), as for ``optimize``.
        dry_run: return the plan (the files to rewrite) instead; nothing is written.
        storage_options, options, max_file_size, max_threads, batch_size, max_duration: as for ``optimize``.

    Returns:
        OptimizeMetrics (``deletion_vector_stats`` says how many DVs and rows were purged), or the plan.
    """
    started = time.monotonic()
    where_list, _ = _check_args(table, where, None, "zorder")
    opts = _options(options, locals_settings(locals()))
    request = _Request(table, where_list, [], "zorder", False, opts, storage_options)
    if dry_run:
        return _plan_request(spark, request)
    from .engine.executor import OptimizeExecutor
    from .engine.session import get_spark
    from .engine.spark_engine import SparkEngine

    location, session = _resolve_location(table, spark)
    snapshot = request.snapshot(location)  # a missing table fails before a session starts
    engine = SparkEngine(get_spark(session))
    plan = _purge_plan(snapshot, request, engine.conf_getter, time_zone=engine.time_zone)
    return OptimizeExecutor(engine, snapshot, plan, progress=progress, started=started).optimize()


def plan_purge(
    spark: SparkSession | None,
    table: str,
    *,
    where: str | Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> OptimizePlan:
    """The files ``purge`` would rewrite, from the log alone (no Spark for a path)."""
    return purge(spark, table, where=where, dry_run=True, storage_options=storage_options)
