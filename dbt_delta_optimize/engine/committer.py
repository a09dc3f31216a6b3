"""Commit one batch of an OPTIMIZE: validate, commit with our writer, retry what is safe, check what landed.

The writer (``delta.commit.Transaction``) rebases over concurrent appends by itself. A concurrent
metadata or protocol change is retried here, as delta-spark's ``commitAndRetry`` does, but only
when every file the batch compacted is still live with the same deletion vector and the partition
columns did not change; anything else stays the writer's typed conflict, with nothing of ours written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.commit import CommitResult, Transaction
from ..delta.protocol import ensure_write_supported
from ..delta.snapshot import Snapshot, load_snapshot
from ..errors import MetadataChangedError, ProtocolChangedError, ValidationError
from ..plan.metrics import operation_metrics
from ..plan.planner import Bin, OptimizePlan
from .data_files import lying_stats

if TYPE_CHECKING:
    from ..inspect.findings import ValidationReport

__all__ = ["commit_batch", "operation_parameters"]

log = logging.getLogger(__name__)


def operation_parameters(plan: OptimizePlan) -> dict[str, Any]:
    """commitInfo.operationParameters as delta-spark writes them (Catalyst strings, compact JSON)."""
    return {
        "predicate": json.dumps(list(plan.predicates), separators=(",", ":")),
        "zOrderBy": json.dumps(list(plan.zorder_by), separators=(",", ":")),
        "clusterBy": "[]",
        "auto": plan.is_auto_compact,
    }


def _still_safe(snapshot: Snapshot, files_read: Sequence[AddFile]) -> Snapshot | None:
    """The latest snapshot if every compacted file is still live (same DV) and partitioning is unchanged."""
    latest = load_snapshot(snapshot.location, storage=snapshot.storage)
    ensure_write_supported(latest.protocol, latest.metadata, table=latest.location)
    live = {f.key for f in latest.files}
    gone = [f.path for f in files_read if f.key not in live]
    if gone or latest.partition_columns != snapshot.partition_columns:
        log.warning("Aborting the compaction: %d compacted file(s) changed: %s", len(gone), gone[:5])
        return None
    return latest


def _check_landed(snapshot: Snapshot, version: int) -> None:
    """Re-read the commit that just landed; a finding here is a bug, reported with the way back."""
    from ..inspect.validate import validate_commit

    report = validate_commit(snapshot.location, version, storage=snapshot.storage)
    if not report.ok:
        raise ValidationError(
            f"OPTIMIZE commit {version} of {snapshot.location} failed validation after landing: "
            f"{report.describe()}\nThis is a bug in dbt-delta-optimize, please report it. The table's rows are "
            f"unchanged by a valid OPTIMIZE; to be safe, RESTORE TABLE delta.`{snapshot.location}` "
            f"TO VERSION AS OF {version - 1}."
        )


def _check_planned(snapshot: Snapshot, files_read: Sequence[AddFile], report: ValidationReport) -> None:
    """Refuse a batch whose planned actions fail validation; rows that differ from lying stats say so."""
    if report.ok:
        return
    if "row_count_mismatch" in report.codes:
        lie = lying_stats(snapshot, files_read)
        if lie is not None:
            raise lie
    report.raise_if_invalid()


def commit_batch(
    snapshot: Snapshot, plan: OptimizePlan, batch: Sequence[Bin], adds: list[AddFile], removes: list[RemoveFile]
) -> CommitResult:
    """Commit one batch; on a metadata/protocol conflict, retry if every compacted file is still live."""
    from ..inspect.validate import validate_actions

    config = plan.config
    files_read = [f for b in batch for f in b.files]
    dvs = sum(1 for f in files_read if f.deletion_vector is not None)
    metrics = operation_metrics([a.size for a in adds], [r.size or 0 for r in removes], dvs)
    actions: list[AddFile | RemoveFile] = [*adds, *removes]
    for attempt in range(1, config.max_commit_attempts + 1):
        if config.validate_commits:
            _check_planned(snapshot, files_read, validate_actions(snapshot, adds, removes))
        txn = Transaction(snapshot, max_attempts=config.max_commit_attempts)
        txn.track_read(files_read)
        try:
            result = txn.commit(actions, "OPTIMIZE", operation_parameters(plan), metrics)
        except (MetadataChangedError, ProtocolChangedError) as exc:
            latest = _still_safe(snapshot, files_read) if attempt < config.max_commit_attempts else None
            if latest is None:
                raise
            log.info("Retrying commit after checking for semantic conflicts (%s)", exc)
            snapshot = latest
            continue
        if config.validate_commits:
            _check_landed(snapshot, result.version)
        return result
    raise AssertionError("unreachable: the last attempt either commits or raises")
