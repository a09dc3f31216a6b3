"""From a snapshot and a request to an OptimizePlan: pure, no Spark, milliseconds for small tables.

Combines the partitions the WHERE predicates matched (and, for auto compaction, the partitions it
chose), the typed partition values that make equal values share a bin, the incremental-clustering
skip, and delta-spark's candidate selection and bin packing (``planner``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..delta.actions import AddFile
from ..delta.snapshot import Snapshot
from .columnar import plan_columnar
from .config import OptimizeConfig
from .curve import ClusteringSpec, already_clustered
from .planner import OptimizePlan, RawKey, plan_optimize
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
    clustering: ClusteringSpec | None = None,
    zorder_by: Sequence[str] = (),
    full: bool = False,
    partitions: Iterable[RawKey] | None = None,
    is_auto_compact: bool = False,
) -> OptimizePlan:
    """Plan OPTIMIZE over the selected partitions (and ``partitions``, when auto compaction chose some)."""
    recorded = selection.predicate_strings or selection.predicate_sql
    matched = selection.matched
    if partitions is not None:
        chosen = frozenset(partitions)
        matched = chosen if matched is None else matched & chosen
        if snapshot.partition_columns:  # delta-spark: no predicate for an unpartitioned table
            recorded = (*recorded, partitions_predicate(chosen, snapshot))

    def skip(files: Sequence[AddFile]) -> bool:
        return clustering is not None and already_clustered(files, clustering)

    planner: Callable[..., OptimizePlan] = plan_optimize
    files: Any = snapshot.files
    if snapshot.file_table is not None:  # columns: no object per file (a million files plan in seconds)
        planner, files = plan_columnar, snapshot.file_table
    plan = planner(
        files,
        snapshot.physical_partition_columns,
        config,
        read_version=snapshot.version,
        mode="zorder" if clustering is not None else "compaction",
        matched_partitions=matched,
        normalize=lambda k: selection.normalized.get(k, k),
        skip_partition=skip if clustering is not None and not full else None,
    )
    return replace(
        plan,
        predicates=tuple(recorded),
        zorder_by=tuple(zorder_by),
        clustering=clustering,
        is_auto_compact=is_auto_compact,
    )
