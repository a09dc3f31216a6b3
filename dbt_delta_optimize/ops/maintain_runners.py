"""The actions ``maintain`` can run, one runner each: an opened table in, the operation's metrics out.

Each runner calls the same operation as the single-table command (``ops.purge``, ``ops.optimize`` ...),
so validation and safety are that command's. ``RUNNERS`` maps an action to its runner; an action
without one is estimated and listed but reported as "unavailable" when its turn comes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plan.liquid import is_clustered_table
from ..plan.maintenance import ActionEstimate
from .table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RUNNERS", "ActionRequest", "Runner", "run_analyze", "run_optimize", "run_purge", "run_vacuum"]

#: The shortest time budget handed to a rewrite (options.parse_duration refuses less than a second).
_MIN_DURATION = 1.0


@dataclass(frozen=True)
class ActionRequest:
    """One action to run: the session, the table as it is now, what was estimated, and its time allowance."""

    spark: SparkSession | None
    table: Table
    estimate: ActionEstimate
    max_duration: float | None  #: seconds left for this table (the per-table cap and the budget)


Runner = Callable[[ActionRequest], Mapping[str, Any]]


def _duration(request: ActionRequest) -> float | None:
    return None if request.max_duration is None else max(_MIN_DURATION, request.max_duration)


def _failed_bins(metrics: Any) -> Mapping[str, Any]:
    """The metrics as JSON; bins that failed make the action fail (the rest committed)."""
    out: Mapping[str, Any] = metrics.to_dict()
    if metrics.failed_bins:
        from ..errors import DeltaOptimizeError

        raise DeltaOptimizeError(f"{len(metrics.failed_bins)} bin(s) failed; the others committed")
    return out


def run_purge(request: ActionRequest) -> Mapping[str, Any]:
    """``ops.purge``: rewrite the files with deleted rows (REORG ... APPLY (PURGE))."""
    from .purge import purge

    return _failed_bins(purge(request.spark, request.table, max_duration=_duration(request)))


def run_optimize(request: ActionRequest) -> Mapping[str, Any]:
    """``ops.optimize``: a compaction; a liquid table is clustered by its own columns, a Z-ordered one by its
    files' Z-order columns (incremental: partitions already clustered are left alone)."""
    from .optimize import optimize

    zorder = request.estimate.benefit.get("clusteredBy")
    liquid = is_clustered_table(request.table.snapshot.protocol)
    metrics = optimize(
        request.spark,
        request.table,
        zorder_by=list(zorder) if zorder and not liquid else None,
        max_duration=_duration(request),
    )
    return _failed_bins(metrics)


def run_vacuum(request: ActionRequest) -> Mapping[str, Any]:
    """``ops.vacuum`` (issue 33), with the table's own retention and every safety check of the command.

    Imported by name so this module does not depend on it before it exists; plug it in by adding
    ``"vacuum": run_vacuum`` to ``RUNNERS``.
    """
    module = importlib.import_module(f"{__package__}.vacuum")
    result: Mapping[str, Any] = module.vacuum(request.spark, request.table).to_dict()
    return result


def run_analyze(request: ActionRequest) -> Mapping[str, Any]:
    """``ops.analyze`` (issue 34): statistics for the files without them (the indexed columns).

    Imported by name, as ``run_vacuum``; plug it in by adding ``"analyze": run_analyze`` to ``RUNNERS``.
    """
    module = importlib.import_module(f"{__package__}.analyze")
    result: Mapping[str, Any] = module.analyze(request.spark, request.table).to_dict()
    return result


#: The actions that run. vacuum and analyze are added when their operations are merged.
RUNNERS: Mapping[str, Runner] = {
    "purge": run_purge,
    "optimize": run_optimize,
}
