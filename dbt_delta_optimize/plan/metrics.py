"""OPTIMIZE metrics in delta-spark's shape (OptimizeMetrics), filled in completely.

delta-spark leaves endTimeMs, totalScheduledTasks and the parallelism stats empty; we fill them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot
    from .planner import Bin, OptimizePlan

__all__ = [
    "SPARK_METRICS_FIELDS",
    "DeletionVectorStats",
    "FileSizeMetrics",
    "OptimizeMetrics",
    "RunOutcome",
    "ZOrderFileStats",
    "ZOrderStats",
    "operation_metrics",
    "run_metrics",
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


@dataclass(frozen=True)
class FileSizeMetrics:
    min: int | None
    max: int | None
    avg: float
    total_files: int
    total_size: int

    @classmethod
    def of(cls, sizes: Sequence[int]) -> FileSizeMetrics:
        if not sizes:
            return cls(None, None, 0.0, 0, 0)
        return cls(min(sizes), max(sizes), sum(sizes) / len(sizes), len(sizes), sum(sizes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "min": self.min,
            "max": self.max,
            "avg": self.avg,
            "totalFiles": self.total_files,
            "totalSize": self.total_size,
        }


@dataclass(frozen=True)
class ZOrderFileStats:
    num: int
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"num": self.num, "size": self.size}


@dataclass(frozen=True)
class ZOrderStats:
    strategy_name: str
    input_cube_files: ZOrderFileStats
    input_other_files: ZOrderFileStats
    input_num_cubes: int
    merged_files: ZOrderFileStats
    num_output_cubes: int
    merged_num_cubes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategyName": self.strategy_name,
            "inputCubeFiles": self.input_cube_files.to_dict(),
            "inputOtherFiles": self.input_other_files.to_dict(),
            "inputNumCubes": self.input_num_cubes,
            "mergedFiles": self.merged_files.to_dict(),
            "numOutputCubes": self.num_output_cubes,
            "mergedNumCubes": self.merged_num_cubes,
        }


@dataclass(frozen=True)
class DeletionVectorStats:
    num_deletion_vectors_removed: int
    num_deletion_vector_rows_removed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "numDeletionVectorsRemoved": self.num_deletion_vectors_removed,
            "numDeletionVectorRowsRemoved": self.num_deletion_vector_rows_removed,
        }


@dataclass(frozen=True)
class OptimizeMetrics:
    """Returned by optimize(); same fields and camelCase names as delta-spark's OptimizeMetrics."""

    num_files_added: int
    num_files_removed: int
    files_added: FileSizeMetrics
    files_removed: FileSizeMetrics
    partitions_optimized: int
    z_order_stats: ZOrderStats | None
    num_bins: int
    num_batches: int
    total_considered_files: int
    total_files_skipped: int
    preserve_insertion_order: bool
    num_files_skipped_to_reduce_write_amplification: int
    num_bytes_skipped_to_reduce_write_amplification: int
    start_time_ms: int
    end_time_ms: int
    total_cluster_parallelism: int
    total_scheduled_tasks: int
    auto_compact_parallelism_stats: Mapping[str, Any] | None
    deletion_vector_stats: DeletionVectorStats | None
    num_table_columns: int
    num_table_columns_with_stats: int
    # Ours, beyond delta-spark: what the run decided and where it committed.
    path: str = ""
    committed_versions: tuple[int, ...] = field(default=())
    partitions_skipped_already_clustered: int = 0
    #: bins not run because the time budget ran out (or cancelled at its end), and their bytes
    num_bins_left: int = 0
    num_bytes_left: int = 0
    #: bins that failed while the others committed (max_failed_bins), with their cause
    failed_bins: tuple[Mapping[str, Any], ...] = field(default=())
    #: bins left out because a concurrent commit removed or changed one of their files
    dropped_bins: tuple[Mapping[str, Any], ...] = field(default=())
    #: the row-group copy: input row groups (and their compressed bytes) copied byte for byte or re-encoded
    row_groups_copied: int = 0
    bytes_copied: int = 0
    row_groups_reencoded: int = 0
    bytes_reencoded: int = 0
    #: the chunk merge: compressed bytes of small files' pages joined into new files unchanged (not re-encoded)
    bytes_joined: int = 0
    #: bins whose large row groups were re-encoded anyway, and why
    copy_fallbacks: tuple[Mapping[str, Any], ...] = field(default=())
    #: bins the Arrow rewriter could not write faithfully, rewritten by Spark instead, and why
    spark_fallbacks: tuple[Mapping[str, Any], ...] = field(default=())
    #: expired log files (and bytes) deleted after a checkpoint one of the run's commits wrote
    log_files_deleted: int = 0
    log_bytes_deleted: int = 0
    #: the requests the run made to the store, by kind, the bytes read and written, what the count covers, and
    #: when each phase began (``delta/requests.py``)
    requests: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if hasattr(v, "to_dict"):
                v = v.to_dict()
            elif isinstance(v, tuple):
                v = [dict(x) if isinstance(x, Mapping) else x for x in v]
            elif isinstance(v, Mapping):
                v = dict(v)
            out[_camel(f.name)] = v
        out["zOrderStats"] = out.pop("zOrderStats", None)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)


#: delta-spark 4.4's OptimizeMetrics struct fields, in order (the OPTIMIZE result's ``metrics`` column).
SPARK_METRICS_FIELDS = (
    "numFilesAdded",
    "numFilesRemoved",
    "filesAdded",
    "filesRemoved",
    "partitionsOptimized",
    "zOrderStats",
    "clusteringStats",
    "numBins",
    "numBatches",
    "totalConsideredFiles",
    "totalFilesSkipped",
    "preserveInsertionOrder",
    "numFilesSkippedToReduceWriteAmplification",
    "numBytesSkippedToReduceWriteAmplification",
    "startTimeMs",
    "endTimeMs",
    "totalClusterParallelism",
    "totalScheduledTasks",
    "autoCompactParallelismStats",
    "deletionVectorStats",
    "numTableColumns",
    "numTableColumnsWithStats",
)


def operation_metrics(added_sizes: Sequence[int], removed_sizes: Sequence[int], dvs_removed: int = 0) -> dict[str, str]:
    """commitInfo.operationMetrics exactly as delta-spark writes them (strings; percentiles by index)."""
    s = sorted(added_sizes)
    n = len(s)
    out = {
        "numAddedFiles": n,
        "numRemovedFiles": len(removed_sizes),
        "numAddedBytes": sum(s),
        "numRemovedBytes": sum(removed_sizes),
    }
    if n:
        out.update(
            minFileSize=s[0], p25FileSize=s[n // 4], p50FileSize=s[n // 2], p75FileSize=s[n * 3 // 4], maxFileSize=s[-1]
        )
    out["numDeletionVectorsRemoved"] = dvs_removed
    return {k: str(v) for k, v in out.items()}


@dataclass(frozen=True)
class RunOutcome:
    """What a run did: the sizes it added and removed, the bins it committed, and what it left or lost."""

    added: Sequence[int] = ()
    removed: Sequence[int] = ()
    bins: Sequence[Bin] = ()
    committed_versions: tuple[int, ...] = ()
    left: Sequence[Bin] = ()  #: not run: the time budget ran out
    failed: tuple[Mapping[str, Any], ...] = ()
    dropped: tuple[Mapping[str, Any], ...] = ()
    #: the row-group copy's counts, and the bins whose large row groups were re-encoded anyway
    row_groups_copied: int = 0
    bytes_copied: int = 0
    row_groups_reencoded: int = 0
    bytes_reencoded: int = 0
    bytes_joined: int = 0
    copy_fallbacks: tuple[Mapping[str, Any], ...] = ()
    #: bins Arrow could not write, rewritten by Spark
    spark_fallbacks: tuple[Mapping[str, Any], ...] = ()
    #: expired log cleanup after the commits' checkpoints
    log_files_deleted: int = 0
    log_bytes_deleted: int = 0


def run_metrics(
    plan: OptimizePlan, snapshot: Snapshot, outcome: RunOutcome, *, parallelism: int, tasks: int, start_ms: int
) -> OptimizeMetrics:
    """delta-spark's OptimizeMetrics of a run (``RunOutcome()`` for a plan with nothing to do), and ours."""
    partitions = {tuple(sorted(b.partition_values.items())) for b in outcome.bins}
    n_cols = len(snapshot.schema["fields"])
    try:
        indexed = int(snapshot.configuration.get("delta.dataSkippingNumIndexedCols", "32"))
    except ValueError:
        indexed = 32
    dv_files = [f for b in outcome.bins for f in b.files if f.deletion_vector is not None]
    zstats = None
    if plan.operation.kind == "zorder":  # delta-spark: no zOrderStats for liquid clustering
        other = ZOrderFileStats(len(outcome.removed), sum(outcome.removed))
        zstats = ZOrderStats("all", ZOrderFileStats(0, 0), other, 0, other, len(partitions))
    return OptimizeMetrics(
        num_files_added=len(outcome.added),
        num_files_removed=len(outcome.removed),
        files_added=FileSizeMetrics.of(outcome.added),
        files_removed=FileSizeMetrics.of(outcome.removed),
        partitions_optimized=len(partitions),
        z_order_stats=zstats,
        num_bins=len(outcome.bins),
        num_batches=len(outcome.committed_versions) if plan.config.batch_size is not None else 1,
        total_considered_files=len(plan.considered_files),
        total_files_skipped=len(plan.considered_files) - len(outcome.removed),
        preserve_insertion_order=False,
        num_files_skipped_to_reduce_write_amplification=0,
        num_bytes_skipped_to_reduce_write_amplification=0,
        start_time_ms=start_ms,
        end_time_ms=int(time.time() * 1000),
        total_cluster_parallelism=parallelism,
        total_scheduled_tasks=tasks,
        auto_compact_parallelism_stats=None,
        deletion_vector_stats=(
            DeletionVectorStats(
                len(dv_files), sum(f.deletion_vector.cardinality for f in dv_files if f.deletion_vector)
            )
            if dv_files
            else None
        ),
        num_table_columns=n_cols,
        num_table_columns_with_stats=n_cols if indexed < 0 else min(indexed, n_cols),
        path=snapshot.location,
        committed_versions=outcome.committed_versions,
        partitions_skipped_already_clustered=len(plan.skipped_partitions),
        num_bins_left=len(outcome.left),
        num_bytes_left=sum(b.size for b in outcome.left),
        failed_bins=outcome.failed,
        dropped_bins=outcome.dropped,
        row_groups_copied=outcome.row_groups_copied,
        bytes_copied=outcome.bytes_copied,
        row_groups_reencoded=outcome.row_groups_reencoded,
        bytes_reencoded=outcome.bytes_reencoded,
        bytes_joined=outcome.bytes_joined,
        copy_fallbacks=outcome.copy_fallbacks,
        spark_fallbacks=outcome.spark_fallbacks,
        log_files_deleted=outcome.log_files_deleted,
        log_bytes_deleted=outcome.log_bytes_deleted,
        requests=snapshot.storage.requests.to_dict(phases=True),
    )
