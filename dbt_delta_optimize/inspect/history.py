"""Recent commits of a table, with OPTIMIZE metrics of every engine in one shape.

delta-spark (and we) write string metrics named numAddedFiles/numAddedBytes/...; delta-rs writes
numbers named numFilesAdded with sizes inside JSON strings (filesAdded.totalSize). A user comparing
compactions by different engines on one table wants one set of columns, so each entry carries:
version, timestamp, operation, engine, auto, filesAdded, filesRemoved, bytesAdded, bytesRemoved,
predicate and zOrderBy (and ``vacuum``: a VACUUM START / END commit's numbers and status). Counts the metrics do not give are taken from the commit's actions.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..delta.actions import ADD, COMMIT_INFO, REMOVE
from ..delta.storage import Storage, storage_for, table_uri
from ..errors import InvalidArgumentError
from ..options.values import metric_int
from .validate_commit_info import DELTA_RS, commit_engine

__all__ = ["history", "last_operation", "normalize_commit"]


def _json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return None
    return v


def _string_list(v: Any) -> list[str] | None:
    """delta-spark's '["a","b"]' parameters as a list; a plain non-JSON string as a one-item list."""
    if v is None:
        return None
    if isinstance(v, list):
        return [str(x) for x in v]
    parsed = _json(v)
    if isinstance(parsed, list):
        return [str(x) for x in parsed]
    return [str(v)] if str(v).strip() else []


def _bool(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")


def normalize_commit(version: int, actions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One history entry from a commit's raw actions (commitInfo metrics first, actions as fallback)."""
    info = next((a[COMMIT_INFO] for a in actions if COMMIT_INFO in a), None) or {}
    adds = [a[ADD] for a in actions if ADD in a]
    removes = [a[REMOVE] for a in actions if REMOVE in a]
    raw_params, raw_metrics = info.get("operationParameters"), info.get("operationMetrics")
    params: Mapping[str, Any] = raw_params if isinstance(raw_params, Mapping) else {}
    metrics: Mapping[str, Any] = raw_metrics if isinstance(raw_metrics, Mapping) else {}
    engine = commit_engine(info) if info else "other"
    operation = info.get("operation")

    files_added = files_removed = bytes_added = bytes_removed = None
    if engine == DELTA_RS or "numFilesAdded" in metrics:
        files_added, files_removed = (
            metric_int(metrics.get("numFilesAdded")),
            metric_int(metrics.get("numFilesRemoved")),
        )
        fa, fr = _json(metrics.get("filesAdded")), _json(metrics.get("filesRemoved"))
        bytes_added = metric_int(fa.get("totalSize")) if isinstance(fa, Mapping) else None
        bytes_removed = metric_int(fr.get("totalSize")) if isinstance(fr, Mapping) else None
    if operation == "OPTIMIZE" or "numAddedFiles" in metrics:
        files_added = files_added if files_added is not None else metric_int(metrics.get("numAddedFiles"))
        files_removed = files_removed if files_removed is not None else metric_int(metrics.get("numRemovedFiles"))
        bytes_added = bytes_added if bytes_added is not None else metric_int(metrics.get("numAddedBytes"))
        bytes_removed = bytes_removed if bytes_removed is not None else metric_int(metrics.get("numRemovedBytes"))
    # Fallback (metrics disabled, other operations): count the actions themselves.
    if files_added is None:
        files_added = len(adds)
    if files_removed is None:
        files_removed = len(removes)
    if bytes_added is None:
        bytes_added = sum(metric_int(a.get("size")) or 0 for a in adds)
    if bytes_removed is None:
        sizes = [metric_int(r.get("size")) for r in removes]
        bytes_removed = sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None

    zorder = _string_list(params.get("zOrderBy"))
    ts = metric_int(info.get("inCommitTimestamp")) or metric_int(info.get("timestamp"))
    return {
        "version": version,
        "timestamp": ts,
        "time": (
            datetime.datetime.fromtimestamp(ts / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
            if ts is not None
            else None
        ),
        "operation": operation,
        "engine": engine,
        "engineInfo": info.get("engineInfo") or info.get("clientVersion"),
        "readVersion": metric_int(info.get("readVersion")),
        "auto": _bool(params.get("auto")),
        "filesAdded": files_added,
        "filesRemoved": files_removed,
        "bytesAdded": bytes_added,
        "bytesRemoved": bytes_removed,
        "predicate": _string_list(params.get("predicate")),
        "zOrderBy": zorder,
        # delta-rs records no Z-order columns, only that its planner ran a Z-order.
        "zOrder": bool(zorder) or metrics.get("plannerStrategy") == "zOrder",
        "dataChange": any(a.get("dataChange", True) is not False for a in adds + removes),
        "vacuum": _vacuum(operation, params, metrics),
    }


#: What VACUUM START and VACUUM END record (delta-spark's names; ours are the same).
_VACUUM_KEYS = (
    "numFilesToDelete",
    "sizeOfDataToDelete",
    "numDeletedFiles",
    "numVacuumedDirectories",
    "status",
    "specifiedRetentionMillis",
    "defaultRetentionMillis",
)


def _vacuum(operation: Any, params: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """A VACUUM START / END commit's parameters and metrics (numbers as numbers); None for other operations."""
    if operation not in ("VACUUM START", "VACUUM END"):
        return None
    found = {**params, **metrics}
    out: dict[str, Any] = {}
    for k in _VACUUM_KEYS:
        if k in found:
            n = metric_int(found[k])
            out[k] = n if n is not None and k != "status" else found[k]
    return out


def _entries(root: str, storage: Storage, start: int, limit: int, *, threads: int = 16) -> Iterator[dict[str, Any]]:
    """Normalised commits from ``start`` downwards, at most ``limit``, stopping where the log was cleaned up.
    Read concurrently, ``threads`` at a time (each a round trip on a store), with no probe before each read."""
    from ..delta.log import commit_path, in_order, parse_commit, read_threads

    def read(v: int) -> bytes | None:
        try:
            return storage.read_bytes(commit_path(root, v))
        except FileNotFoundError:
            return None

    versions = range(start, max(start - limit, -1), -1)
    for v, data in zip(versions, in_order(read, versions, threads=min(threads, read_threads(storage)))):
        if data is None:
            return  # older entries were cleaned up (only checkpoints remain)
        yield normalize_commit(v, parse_commit(data, root, v))


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgumentError(f"limit must be a whole number >= 1, got {limit!r}.")


def history(table: str, limit: int = 20, *, storage: Storage | None = None) -> list[dict[str, Any]]:
    """The ``limit`` most recent commits, newest first, normalised (see the module doc).

    Versions whose log entry was cleaned up are skipped (as deltalake's history does).
    """
    from ..delta.snapshot import latest_version

    _check_limit(limit)
    root = table_uri(table)
    storage = storage if storage is not None else storage_for(root)
    return list(_entries(root, storage, latest_version(root, storage=storage), limit))


def last_operation(
    table: str,
    operation: str = "OPTIMIZE",
    *,
    at_version: int | None = None,
    limit: int = 1000,
    storage: Storage | None = None,
) -> dict[str, Any] | None:
    """The newest commit at or before ``at_version`` whose operation is ``operation``, or None.

    Looks back at most ``limit`` commits so a long log cannot make a health page slow.
    """
    from ..delta.snapshot import latest_version

    _check_limit(limit)
    root = table_uri(table)
    storage = storage if storage is not None else storage_for(root)
    start = at_version if at_version is not None else latest_version(root, storage=storage)
    # A few reads ahead only: the operation looked for is usually among the newest commits.
    found = (e for e in _entries(root, storage, start, limit, threads=4) if e["operation"] == operation)
    return next(found, None)
