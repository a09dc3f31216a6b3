"""What VACUUM would free and when it last ran, read from the log alone (no listing of the table).

The bytes are a log-based estimate: the tombstones removed longer ago than the table's
``delta.deletedFileRetentionDuration`` and the deletion-vector files only such tombstones use. Files the
log never named (debris of failed jobs, which a full VACUUM also deletes) are not counted: finding them
takes a listing, which a health report and a post-hook must not pay for.

The last run is the newest ``VACUUM END`` commit (delta-spark's and ours, when vacuum logging is on), else
the time ``_delta_log/_last_vacuum_info`` was written (a run with logging off still writes it). The log
keeps a tombstone after VACUUM deleted its file, so tombstones removed before the last completed run's
cutoff (its VACUUM START's time minus the retention it ran with; for ``_last_vacuum_info``, its time minus
the table's retention) are not counted again.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

from ..delta.log import LOG_DIR
from ..delta.snapshot import Snapshot
from ..delta.storage import join
from ..delta.vacuum_log import LAST_VACUUM_INFO, LogReads, dv_relative_path, read_tombstones
from ..plan.vacuum import parse_interval_ms, protected_paths, relative_path

__all__ = ["DEFAULT_RETENTION", "VacuumState", "last_vacuum", "table_retention_ms", "vacuum_state"]

DEFAULT_RETENTION = "interval 1 week"
#: Commits searched back for the last VACUUM END (a long log cannot make a report or a hook slow).
LOOKBACK = 1000
#: ``_last_vacuum_info`` written within this of a VACUUM END belongs to that run.
SAME_RUN_MS = 60_000


@dataclass(frozen=True)
class VacuumState:
    """The estimate of what VACUUM (table retention) would free, and the last run (None: none found)."""

    retention_ms: int
    files: int
    bytes: int
    dv_files: int
    dv_bytes: int
    last_vacuum: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "retentionMs": self.retention_ms,
            "reclaimableFiles": self.files,
            "reclaimableBytes": self.bytes,
            "reclaimableDvFiles": self.dv_files,
            "reclaimableDvBytes": self.dv_bytes,
            "estimate": "from the log: expired tombstones and their unused deletion vectors; "
            "files the log never named are not counted",
            "lastVacuum": dict(self.last_vacuum) if self.last_vacuum is not None else None,
        }


def table_retention_ms(configuration: dict[str, str] | Any) -> int:
    """The table's ``delta.deletedFileRetentionDuration`` (7 days unless set); an unreadable one reads as 7 days."""
    text = configuration.get("delta.deletedFileRetentionDuration", DEFAULT_RETENTION)
    try:
        return parse_interval_ms(text)
    except ValueError:
        return parse_interval_ms(DEFAULT_RETENTION)


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="seconds")


def _commit_info(data: bytes) -> dict[str, Any]:
    for line in data.splitlines():
        if b'"commitInfo"' in line:
            info = json.loads(line).get("commitInfo")
            return info if isinstance(info, dict) else {}
    return {}


def _timestamp(info: dict[str, Any]) -> int | None:
    ts = info.get("inCommitTimestamp") or info.get("timestamp")
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


def _start_cutoff(info: dict[str, Any], ts: int) -> int | None:
    """What a VACUUM START's run deleted before: its time minus the retention it ran with."""
    params = info.get("operationParameters") or {}
    retention = params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis"))
    try:
        return ts - int(retention) if retention is not None else None
    except (TypeError, ValueError):
        return None


def _from_commits(snapshot: Snapshot, since_ms: int | None, limit: int) -> dict[str, Any] | None:
    """The newest VACUUM END at or before the snapshot, looking back until ``since_ms`` or ``limit`` commits;
    with ``deletedBeforeMs`` from its VACUUM START when that is in reach (a completed run deleted the
    tombstones removed before it)."""
    cache = snapshot.cached_log()  # the load's listing and the commits it read: not read again
    present = set(cache.listing.commits)
    found: dict[str, Any] | None = None
    for v in range(snapshot.version, max(snapshot.version - limit, -1), -1):
        if v not in present:
            break  # older commits were cleaned up
        info = _commit_info(cache.read(v))
        ts, operation = _timestamp(info), info.get("operation")
        if found is not None:
            if operation == "VACUUM START" and ts is not None and found["status"] == "COMPLETED":
                found["deletedBeforeMs"] = _start_cutoff(info, ts)
            if operation == "VACUUM START":
                break
        elif operation == "VACUUM END" and ts is not None:
            params = info.get("operationParameters") or {}
            metrics = info.get("operationMetrics") or {}
            found = {"version": v, "timestamp": ts, "time": _iso(ts), "status": params.get("status")}
            found.update(filesDeleted=metrics.get("numDeletedFiles"), source="VACUUM END commit")
        elif since_ms is not None and ts is not None and ts < since_ms:
            break  # commits are older than the window: no run in it
    return found


def _from_last_vacuum_info(snapshot: Snapshot) -> dict[str, Any] | None:
    try:
        info = snapshot.storage.stat(join(snapshot.location, LOG_DIR, LAST_VACUUM_INFO))
    except FileNotFoundError:
        return None
    ts = info.modification_time_ms
    cutoff = ts - table_retention_ms(snapshot.configuration)  # as if it ran at the table's retention
    return {
        "version": None,
        "timestamp": ts,
        "time": _iso(ts),
        "status": None,
        "source": LAST_VACUUM_INFO,
        "deletedBeforeMs": cutoff,
    }


def last_vacuum(snapshot: Snapshot, *, since_ms: int | None = None, limit: int = LOOKBACK) -> dict[str, Any] | None:
    """When VACUUM last ran (``timestamp`` in ms, ``time``, ``status``, ``source``), None if not found.

    ``since_ms``: only a run at or after it matters (a post-hook's interval), so the search stops there.
    """
    marker = _from_last_vacuum_info(snapshot)
    if marker is not None and since_ms is not None and marker["timestamp"] >= since_ms:
        return marker  # one stat answers the hook
    found = _from_commits(snapshot, since_ms, limit)
    if found is None or (marker is not None and marker["timestamp"] > found["timestamp"] + SAME_RUN_MS):
        return marker  # a later run with logging off (a run writes the file just after its VACUUM END)
    return found


#: Log paths whose decoded form is not already the relative path ``relative_path`` gives (absolute, or not
#: normalized): matched one by one; every other live path is compared as it is, in Arrow.
_ODD_PATH = r"^/|://|^file:|//|(^|/)\.\.?(/|$)|/$|^$"


def _live_uses(snapshot: Snapshot, paths: set[str], dvs: set[str]) -> set[str]:
    """Which of ``paths`` (relative, decoded) and ``dvs`` (relative DV files) a live file still uses; the live
    set is compared in Arrow, without one Python object per live file."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table, root, used = snapshot.file_table, snapshot.location, set[str]()
    if paths and len(table):
        decoded = table.decoded_paths()
        used.update(decoded.filter(pc.is_in(decoded, value_set=pa.array(sorted(paths), pa.string()))).to_pylist())
        odd = pc.match_substring_regex(decoded, _ODD_PATH)
        for raw in table.column("path").filter(odd).to_pylist():
            rel = relative_path(raw, root)
            if rel in paths:
                used.add(rel)
    if dvs and len(table) and table.has_deletion_vectors():
        column = table.column("deletionVector")
        for dv in column.filter(pc.is_valid(column)).to_pylist():
            rel = dv_relative_path(dv)
            if rel in dvs:
                used.add(rel)
    return used


def vacuum_state(snapshot: Snapshot, *, now_ms: int, reads: LogReads | None = None) -> VacuumState:
    """The log-based estimate of what VACUUM would free at the table's retention, and its last run.

    The tombstones are read first; the live files are consulted only for those in the window, and in Arrow.
    ``reads``: the log as the caller reads it already (a health report's trends read the same tombstones).
    """
    storage, root = snapshot.storage, snapshot.location
    retention = table_retention_ms(snapshot.configuration)
    delete_before = now_ms - retention
    dead = read_tombstones(reads if reads is not None else LogReads(storage, root), snapshot.version)
    last = last_vacuum(snapshot)
    done = (last or {}).get("deletedBeforeMs") or 0  # what the last completed run already deleted
    window = [t for t in dead if done <= t.deletion_timestamp < delete_before]
    if not window:
        return VacuumState(retention, 0, 0, 0, 0, last)
    protected = protected_paths(root, [], dead, delete_before)  # young tombstones and their DVs
    rels = {t.path: relative_path(t.path, root) for t in window}
    live = _live_uses(
        snapshot,
        {r for r in rels.values() if r is not None and r not in protected},
        {t.dv_path for t in window if t.dv_path is not None and t.dv_path not in protected},
    )
    files: dict[str, int] = {}
    dvs: dict[str, int] = {}
    for t in window:
        rel = rels[t.path]
        if rel is not None and rel not in protected and rel not in live:
            files[rel] = t.size
        if t.dv_path is not None and t.dv_path not in protected and t.dv_path not in live:
            dvs[t.dv_path] = t.dv_size
    return VacuumState(retention, len(files), sum(files.values()), len(dvs), sum(dvs.values()), last)
