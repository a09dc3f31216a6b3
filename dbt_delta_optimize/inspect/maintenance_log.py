"""What maintenance scoring needs from the log beyond the live files: tombstones and recent commits.

Read through the snapshot's own storage (no data file is opened): the remove actions of the newest
checkpoint and of the commits the log still holds (at most ``lookback`` of them, newest first), and
each commit's operation, timestamp and rewrite metrics. A checkpoint drops tombstones that were past
retention when it was written; the commit files before it still hold them, which is why commits before
the checkpoint are read too (within ``lookback``).
"""

from __future__ import annotations

import json
from typing import Any

from ..delta.actions import COMMIT_INFO, REMOVE
from ..delta.checkpoint_v2 import checkpoint_files
from ..delta.snapshot import Snapshot
from ..delta.storage import Storage
from ..plan.maintenance import CommitSummary, LogFacts, Tombstone

__all__ = ["DEFAULT_LOOKBACK", "commit_summary", "read_log_facts"]

#: Commits read back from the snapshot's version (so a long log cannot make scoring slow).
DEFAULT_LOOKBACK = 1000


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def commit_summary(version: int, info: dict[str, Any]) -> CommitSummary:
    """A commitInfo as aging and calibration need it (delta-spark's string metrics or numbers)."""
    metrics = info.get("operationMetrics") if isinstance(info.get("operationMetrics"), dict) else {}
    assert isinstance(metrics, dict)
    duration = _int(metrics.get("executionTimeMs"))
    start, end = _int(metrics.get("startTimeMs")), _int(metrics.get("endTimeMs"))
    if duration is None and start is not None and end is not None and end >= start:
        duration = end - start
    ts = _int(info.get("inCommitTimestamp")) or _int(info.get("timestamp"))
    operation = info.get("operation") if isinstance(info.get("operation"), str) else None
    params = info.get("operationParameters") if isinstance(info.get("operationParameters"), dict) else {}
    assert isinstance(params, dict)
    retention = _int(params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis")))
    cutoff = ts - retention if operation == "VACUUM START" and ts is not None and retention is not None else None
    return CommitSummary(
        version,
        ts,
        operation,
        _int(metrics.get("numRemovedBytes")) or 0,
        _int(metrics.get("numAddedBytes")) or 0,
        duration,
        cutoff,
    )


def _tombstone(remove: dict[str, Any]) -> Tombstone | None:
    path = remove.get("path")
    if not isinstance(path, str):
        return None
    return Tombstone(path, _int(remove.get("size")), _int(remove.get("deletionTimestamp")))


def _checkpoint_tombstones(storage: Storage, root: str, names: tuple[str, ...]) -> list[Tombstone]:
    import pyarrow.parquet as pq

    where = checkpoint_files(storage, root, names)
    out = [t for a in where.json_actions if REMOVE in a and (t := _tombstone(a[REMOVE])) is not None]
    for path in where.parquet:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            if REMOVE not in pf.schema_arrow.names:
                continue
            have = pf.schema_arrow.field(REMOVE).type
            cols = [f"{REMOVE}.{c}" for c in ("path", "size", "deletionTimestamp") if have.get_field_index(c) >= 0]
            rows = pf.read(columns=cols).column(REMOVE).to_pylist()
        out.extend(t for r in rows if r and (t := _tombstone(r)) is not None)
    return out


def read_log_facts(snapshot: Snapshot, *, now_ms: int, lookback: int = DEFAULT_LOOKBACK) -> LogFacts:
    """Tombstones (checkpoint's, then the commits') and commit summaries (newest first) up to ``snapshot.version``.

    Read from the snapshot's load (``Snapshot.cached_log``): its listing, its checkpoint files and the commits it
    read are not read again; the others are read concurrently."""
    cache = snapshot.cached_log()
    listing = cache.listing
    cp = listing.checkpoint_at_or_before(snapshot.version)
    tombstones = _checkpoint_tombstones(cache.files, cache.root, listing.checkpoints[cp]) if cp is not None else []
    commits: list[CommitSummary] = []
    present = set(listing.commits)
    versions: list[int] = []
    for v in range(snapshot.version, max(snapshot.version - lookback, -1), -1):
        if v not in present:
            break  # cleaned up by log retention: only the checkpoint remains before this
        versions.append(v)
    for v, data in cache.commit_bytes(versions):
        info: dict[str, Any] = {}
        for line in data.splitlines():
            if b'"remove"' in line or b'"commitInfo"' in line:
                action = json.loads(line)
                if REMOVE in action and (t := _tombstone(action[REMOVE])) is not None:
                    tombstones.append(t)
                elif COMMIT_INFO in action and isinstance(action[COMMIT_INFO], dict):
                    info = action[COMMIT_INFO]
        commits.append(commit_summary(v, info))
    return LogFacts(now_ms, tuple(tombstones), tuple(commits))
