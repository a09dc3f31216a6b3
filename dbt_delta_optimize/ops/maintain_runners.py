"""The actions ``maintain`` can run, one runner each: an opened table in, the operation's metrics out.

Each runner calls the same operation as the single-table command (``ops.purge``, ``ops.optimize`` ...),
so validation and safety are that command's. ``RUNNERS`` maps an action to its runner; an action
without one is estimated and listed but reported as "unavailable" when its turn comes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DeltaOptimizeError
from ..plan.liquid import is_clustered_table
from ..plan.maintenance import ActionEstimate
from .analyze import analyze
from .table import Table
from .vacuum import vacuum

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
    """``ops.vacuum``, with the table's own retention and every safety check of the command.

    A vacuum that fails raises (its VACUUM END commit says FAILED), which fails the action.
    """
    result: Mapping[str, Any] = vacuum(request.spark, request.table).to_dict()
    return result


def run_analyze(request: ActionRequest) -> Mapping[str, Any]:
    """``ops.analyze``: statistics for the files without them (the indexed columns).

    Files whose stats could not be computed make the action fail (the others were committed).
    """
    metrics = analyze(request.spark, request.table)
    out: Mapping[str, Any] = metrics.to_dict()
    if metrics.failed:
        raise DeltaOptimizeError(f"{len(metrics.failed)} file(s) failed to analyze; the others committed")
    return out


#: The actions that run.
RUNNERS: Mapping[str, Runner] = {
    "purge": run_purge,
    "optimize": run_optimize,
    "analyze": run_analyze,
    "vacuum": run_vacuum,
}
