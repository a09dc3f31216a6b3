"""Health and history of a table given as a name, a path or an opened ``Table`` (front ends come here).

Health plans from the handle's snapshot (no second load); history reads only the commits it shows, so a
name or path is located, not opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .table import Table, locate, open_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..inspect.health import HealthReport
    from ..options import ConfGetter

__all__ = ["table_health", "table_history"]


def table_health(
    table: str | Table,
    *,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
    get_conf: ConfGetter | None = None,
    compare_version: int | None = None,
    min_file_size: int | str | None = None,
    trend_days: int | None = None,
) -> HealthReport:
    """``inspect.health.health_report`` of the table, opened once (or as the handle has it)."""
    from ..inspect.health import health_report
    from ..inspect.trends import trend_window

    trend_window(trend_days)  # bad input before the table is opened
    handle = open_table(table, spark=spark, storage_options=storage_options)
    return health_report(
        handle.snapshot,
        get_conf=get_conf,
        compare_version=compare_version,
        min_file_size=min_file_size,
        storage_options=handle.storage_options,
        trend_days=trend_days,
    )


def table_history(
    table: str | Table,
    limit: int = 20,
    *,
    spark: SparkSession | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The table's newest ``limit`` commits (``inspect.history.history``), newest first."""
    from ..inspect.history import history

    location, storage = locate(table, spark=spark, storage_options=storage_options)
    return history(location, limit, storage=storage)
