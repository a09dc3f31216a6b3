"""From a snapshot and a request to an OptimizePlan: pure, no Spark, milliseconds for small tables.

Combines the partitions the WHERE predicates matched (and, for auto compaction, the partitions it
chose), the typed partition values that make equal values share a bin, the incremental-clustering
skip, a purge's fixed settings, and delta-spark's candidate selection and bin packing (``planner``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..delta.actions import AddFile
from ..delta.file_table import RawKey
from ..delta.snapshot import Snapshot
from ..options import PURGE_FIXED
from .config import OptimizeConfig
from .curve import already_clustered
from .operation import AutoCompact, Compact, Operation, Purge, ZOrder
from .planner import OptimizePlan, batches_of, select_bins
from .predicate import PartitionSelection

__all__ = ["build_plan", "partitions_predicate"]


def _literal(v: str | None) -> str:
    return "NULL" if v is None else "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"


def partitions_predicate(keys: Iterable[RawKey], snapshot: Snapshot) -> str:
    """delta-spark's auto-compaction predicate: OR of ANDs of ``col <=> CAST('v' AS type)``."""
    cols = snapshot.partition_columns
    types = snapshot.partition_types
    if not cols:
        return "true"
    terms = [
        "(" + " AND ".join(f"(`{c}` <=> CAST({_literal(v)} AS {types[c]}))" for c, v in zip(cols, key)) + ")"
        for key in sorted(keys, key=repr)
    ]
    return " OR ".join(terms) if terms else "false"


def build_plan(
    snapshot: Snapshot,
    config: OptimizeConfig,
    *,
    selection: PartitionSelection,
    operation: Operation | None = None,
) -> OptimizePlan:
    """Plan a compaction, Z-order, purge or auto compaction over the selected partitions (for auto
    compaction, also only the partitions it chose). A liquid table's plan is ``liquid.build_liquid_plan``."""
    op: Operation = operation if operation is not None else Compact()
    recorded = selection.predicate_strings or selection.predicate_sql
    matched = selection.matched
    if isinstance(op, AutoCompact) and op.partitions is not None:
        chosen = op.partitions
        matched = chosen if matched is None else matched & chosen
        if snapshot.partition_columns:  # delta-spark: no predicate for an unpartitioned table
            recorded = (*recorded, partitions_predicate(chosen, snapshot))
    if isinstance(op, Purge):  # delta-spark's DeltaPurgeOperation: every file with deleted rows
        config = replace(config, **PURGE_FIXED)
    spec = op.clustering
    skip = None
    if isinstance(op, ZOrder) and not op.full:

        def skip(files: Sequence[AddFile]) -> bool:
            return already_clustered(files, op.spec)

    selected = select_bins(
        snapshot.file_table,
        snapshot.physical_partition_columns,
        config,
        mode="zorder" if spec is not None else "compaction",
        matched_partitions=matched,
        normalize=lambda k: selection.normalized.get(k, k),
        skip_partition=skip,
    )
    return OptimizePlan(
        read_version=snapshot.version,
        operation=op,
        config=config,
        considered_files=selected.considered,
        bins=selected.bins,
        batches=batches_of(selected.bins, config),
        skipped_partitions=selected.skipped_partitions,
        predicates=tuple(recorded),
    )
