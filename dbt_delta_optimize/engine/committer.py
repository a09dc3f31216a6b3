"""Commit one batch of an OPTIMIZE: validate, commit with our writer, retry what is safe, check what landed.

The writer (``delta.commit.Transaction``) rebases over concurrent appends by itself. A concurrent
metadata or protocol change is retried here, as delta-spark's ``commitAndRetry`` does, but only
when every file the batch compacted is still live with the same deletion vector and the partition
columns did not change; anything else stays the writer's typed conflict, with nothing of ours written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile
from ..delta.commit import CommitResult, Transaction
from ..delta.protocol import ensure_write_supported
from ..delta.snapshot import Snapshot, load_snapshot
from ..errors import (
    CommitConflictError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    MetadataChangedError,
    ProtocolChangedError,
    ValidationError,
)
from ..inspect.live_files import LiveFiles
from ..plan.metrics import operation_metrics
from ..plan.planner import Bin, OptimizePlan
from .bin_rewriter import BinResult
from .data_files import lying_stats

if TYPE_CHECKING:
    from ..inspect.findings import ValidationReport
    from ..inspect.validate import CheckedActions
    from ..inspect.validate_actions import RemovesCheck

__all__ = ["BatchCommit", "DroppedBin", "commit_batch", "operation_parameters"]

log = logging.getLogger(__name__)


def operation_parameters(plan: OptimizePlan) -> dict[str, Any]:
    """commitInfo.operationParameters as delta-spark writes them (Catalyst strings, compact JSON)."""
    return plan.commit_parameters()


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


def _check_landed(snapshot: Snapshot, version: int, live: LiveFiles, checked: CheckedActions | None) -> None:
    """Re-read the commit that just landed; a finding here is a bug, reported with the way back.

    Without a concurrent commit between (the usual case) the snapshot we planned on is the version
    before it, so the log is not replayed again.
    """
    from ..inspect.validate import validate_commit

    report = validate_commit(
        snapshot.location, version, storage=snapshot.storage, before=snapshot, live=live, checked=checked
    )
    if not report.ok:
        raise ValidationError(
            f"OPTIMIZE commit {version} of {snapshot.location} failed validation after landing: "
            f"{report.describe()}\nThis is a bug in dbt-delta-optimize, please report it. The table's rows are "
            f"unchanged by a valid OPTIMIZE; to be safe, RESTORE TABLE delta.`{snapshot.location}` "
            f"TO VERSION AS OF {version - 1}."
        )


def _log_cleanup(snapshot: Snapshot) -> Callable[[int], tuple[int, int]]:
    """``inspect.log_cleanup.after_checkpoint``, imported when a commit wrote a checkpoint (one in ten by
    default): its modules (log cleanup's plan, VACUUM's log rules) are about 25 ms of a fresh process's
    imports that the other commits never use."""

    def run(version: int) -> tuple[int, int]:
        from ..inspect.log_cleanup import after_checkpoint

        return after_checkpoint(snapshot)(version)

    return run


def _check_planned(snapshot: Snapshot, files_read: Sequence[AddFile], report: ValidationReport) -> None:
    """Refuse a batch whose planned actions fail validation; rows that differ from lying stats say so."""
    if report.ok:
        return
    if "row_count_mismatch" in report.codes:
        lie = lying_stats(snapshot, files_read)
        if lie is not None:
            raise lie
    report.raise_if_invalid()


@dataclass(frozen=True)
class DroppedBin:
    """A bin left out of a commit because a concurrent commit removed or changed one of its files."""

    bin: Bin
    winning_version: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": dict(self.bin.partition_values),
            "files": len(self.bin.files),
            "bytes": self.bin.size,
            "winningVersion": self.winning_version,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class BatchCommit:
    """What one commit of finished bins did: its version (None if every bin was dropped), and which bins."""

    result: CommitResult | None
    committed: tuple[BinResult, ...]
    dropped: tuple[DroppedBin, ...] = ()


def _split_live(latest: Snapshot, results: Sequence[BinResult]) -> tuple[list[BinResult], list[BinResult]]:
    """(bins whose every input is still live in ``latest``, the others)."""
    live = {f.key for f in latest.files}
    kept = [r for r in results if all(f.key in live for f in r.bin.files)]
    gone = [r for r in results if not all(f.key in live for f in r.bin.files)]
    return kept, gone


def _drop_conflicting(
    snapshot: Snapshot, results: Sequence[BinResult], exc: CommitConflictError
) -> tuple[Snapshot, list[BinResult], list[DroppedBin]]:
    """After a concurrent DELETE/UPDATE/MERGE or compaction: keep the bins whose inputs are all still live.

    Raises the conflict again if no bin lost an input (then the conflict is not one dropping bins
    can solve) or the table's protocol or partitioning changed.
    """
    latest = load_snapshot(snapshot.location, storage=snapshot.storage)
    ensure_write_supported(latest.protocol, latest.metadata, table=latest.location)
    if latest.partition_columns != snapshot.partition_columns:
        raise exc
    kept, gone = _split_live(latest, results)
    if not gone:
        raise exc
    reason = f"{type(exc).__name__}: a concurrent commit removed or changed an input file"
    dropped = [DroppedBin(r.bin, exc.winning_version, reason) for r in gone]
    log.warning(
        "Dropping %d bin(s) whose files a concurrent commit changed; committing the other %d", len(gone), len(kept)
    )
    return latest, kept, dropped


def commit_batch(
    snapshot: Snapshot,
    plan: OptimizePlan,
    results: Sequence[BinResult],
    *,
    ours: Sequence[int] = (),
    checked_removes: RemovesCheck | None = None,
) -> BatchCommit:
    """Commit finished bins as one OPTIMIZE commit.

    ``ours``: the versions earlier batches of this run committed (not another writer's win). ``checked_removes``:
    the bins' removes checked against ``snapshot`` as they finished (used while the commit is of exactly them).
    A concurrent commit that removed files some bins read drops only those bins (their outputs are the caller's
    to delete); a metadata/protocol change is retried if every compacted file is still live and the partitioning
    is unchanged. Anything else stays a typed conflict.
    """
    kept, dropped = list(results), list[DroppedBin]()
    config = plan.config
    for attempt in range(1, config.max_commit_attempts + 1):
        if not kept:
            return BatchCommit(None, (), tuple(dropped))
        try:
            result = _commit_once(snapshot, plan, kept, ours, checked_removes)
        except (ConcurrentDeleteReadError, ConcurrentDeleteDeleteError) as exc:
            if attempt == config.max_commit_attempts:
                raise
            snapshot, kept, newly = _drop_conflicting(snapshot, kept, exc)
            dropped.extend(newly)
            continue
        except (MetadataChangedError, ProtocolChangedError) as exc:
            files_read = [f for r in kept for f in r.bin.files]
            latest = _still_safe(snapshot, files_read) if attempt < config.max_commit_attempts else None
            if latest is None:
                raise
            log.info("Retrying commit after checking for semantic conflicts (%s)", exc)
            snapshot = latest
            continue
        return BatchCommit(result, tuple(kept), tuple(dropped))
    raise AssertionError("unreachable: the last attempt either commits or raises")


def _commit_once(
    snapshot: Snapshot,
    plan: OptimizePlan,
    results: Sequence[BinResult],
    ours: Sequence[int],
    checked_removes: RemovesCheck | None = None,
) -> CommitResult:
    from ..inspect.validate import CheckedActions, validate_actions

    config = plan.config
    adds = [a for r in results for a in r.adds]
    removes = [rm for r in results for rm in r.removes]
    files_read = [f for r in results for f in r.bin.files]
    dvs = sum(1 for f in files_read if f.deletion_vector is not None)
    metrics = operation_metrics([a.size for a in adds], [r.size or 0 for r in removes], dvs)
    if checked_removes is not None and checked_removes.covers(snapshot, removes):
        live = checked_removes.live  # every input remembered already, bin by bin
    else:
        checked_removes, live = None, LiveFiles(snapshot)  # the removes' live files, looked up once for both checks
        if plan.read_version == snapshot.version:  # the bins' inputs are this version's live files
            live.remember(files_read)  # so they are not converted from Arrow a second time
    checked = None
    if config.validate_commits:
        report = validate_actions(snapshot, adds, removes, live=live, checked_removes=checked_removes)
        _check_planned(snapshot, files_read, report)
        checked = CheckedActions(snapshot, tuple(adds), tuple(removes), report)
    txn = Transaction(
        snapshot, max_attempts=config.max_commit_attempts, ours=ours, after_checkpoint=_log_cleanup(snapshot)
    )
    txn.track_read(files_read)
    result = txn.commit([*adds, *removes], plan.commit_name, operation_parameters(plan), metrics)
    if config.validate_commits:
        _check_landed(snapshot, result.version, live, checked)
    return result
