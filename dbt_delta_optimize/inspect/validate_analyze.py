"""Checks of a ``COMPUTE STATS`` commit (delta-spark's ``StatisticsCollection.recompute``, and ours).

Such a commit re-adds live files with new ``stats`` and nothing else changed: no remove, every add
``dataChange: false`` naming a file live at V-1 with the same deletion vector, and every field but
``stats`` (partition values, size, modification time, tags, row-tracking fields) equal to the live
file's. Its stats must be well formed and their ``numRecords`` equal to the Parquet footer's rows
(physical rows, also when a deletion vector applies). No data is read, only footers.

Finding codes, added to ``validate.CODES``: ``stats_add_not_live`` (the path, with that deletion
vector, is not live at V-1), ``stats_add_changed_file`` (a field other than stats differs from the
live file's), ``stats_missing`` (an add without stats). The others are the rearranging checks' codes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.paths import data_file_location
from .findings import Finding, ValidationReport
from .live_files import LiveFiles, norm_path
from .validate_commit_info import OURS
from .validate_stats import check_stats, stats_types

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot
    from ..delta.storage import Storage

__all__ = ["COMPUTE_STATS", "STATS_CODES", "check_stats_actions", "check_stats_commit_info", "validate_stats_actions"]

COMPUTE_STATS = "COMPUTE STATS"
STATS_CODES = ("stats_add_not_live", "stats_add_changed_file", "stats_missing")

_KEPT: tuple[str, ...] = ("partition_values", "size", "modification_time", "tags", "deletion_vector")
_KEPT += ("base_row_id", "default_row_commit_version", "clustering_provider")


def _footer_rows(storage: Storage, root: str, path: str) -> int | None:
    try:
        import pyarrow.parquet as pq

        with storage.open_input(data_file_location(root, path)) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    except Exception:  # missing or unreadable: reported by the caller
        return None


def _check_one(a: AddFile, live: AddFile | None, types: Mapping[tuple[str, ...], str], found: list[Finding]) -> bool:
    """Findings of one add against its live file; True when its footer should be compared."""
    if a.data_change:
        found.append(Finding("data_change_true", "add has dataChange=true in a COMPUTE STATS commit", a.path))
    if live is None or live.key != a.key:
        found.append(Finding("stats_add_not_live", "the file (with this deletion vector) is not live at V-1", a.path))
        return False
    changed = [name for name in _KEPT if getattr(a, name) != getattr(live, name)]
    if changed:
        found.append(
            Finding("stats_add_changed_file", f"fields other than stats changed: {', '.join(changed)}", a.path)
        )
    if a.stats is None:
        found.append(Finding("stats_missing", "the add carries no stats", a.path))
        return False
    findings, _ = check_stats(a.path, a.stats, types)
    found.extend(findings)
    return not findings


def check_stats_actions(
    before: Snapshot,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    found: list[Finding],
    *,
    storage: Storage,
    live: LiveFiles | None = None,
    check_footers: bool = True,
) -> None:
    """Every check of a COMPUTE STATS commit's actions against V-1 (``before``)."""
    root = before.location
    for r in removes:
        found.append(Finding("unexpected_action", "a remove in a COMPUTE STATS commit", r.path))
    live = live if live is not None else LiveFiles(before)
    by_path = live.lookup(norm_path(a.path, root) for a in adds)
    types = stats_types(before)
    seen: set[str] = set()
    for a in adds:
        p = norm_path(a.path, root)
        if p in seen:
            found.append(Finding("add_duplicate", "the same path is added twice", a.path))
            continue
        seen.add(p)
        if not _check_one(a, by_path.get(p), types, found) or not check_footers:
            continue
        n, rows = a.num_records, _footer_rows(storage, root, a.path)
        if rows is None:
            found.append(Finding("add_missing_file", "the file or its footer cannot be read", a.path))
        elif n != rows:
            msg = f"stats say numRecords={n}, the Parquet footer has {rows} rows"
            found.append(Finding("stats_num_records_mismatch", msg, a.path))


def check_stats_commit_info(info: Mapping[str, Any] | None) -> list[Finding]:
    """delta-spark's ComputeStats commitInfo: operation COMPUTE STATS, predicate a JSON list of strings."""
    if info is None:
        return [Finding("commit_info_missing", "the commit has no commitInfo action")]
    params = info.get("operationParameters")
    raw = params.get("predicate") if isinstance(params, Mapping) else None
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return [Finding("commit_info_malformed", f"operationParameters.predicate is not a JSON list: {raw!r}")]
    return []


def validate_stats_actions(
    snapshot: Snapshot, adds: Sequence[AddFile], *, live: LiveFiles | None = None, check_footers: bool = True
) -> ValidationReport:
    """Check a COMPUTE STATS commit's adds before they are committed, against the snapshot they were planned on."""
    found: list[Finding] = []
    check_stats_actions(snapshot, adds, (), found, storage=snapshot.storage, live=live, check_footers=check_footers)
    return ValidationReport(
        table=snapshot.location,
        version=None,
        operation=COMPUTE_STATS,
        ok=not found,
        findings=tuple(found),
        adds=len(adds),
        removes=0,
        rows_added=None,
        rows_removed=None,
        engine=OURS,
        read_version=snapshot.version,
    )
