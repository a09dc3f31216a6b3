"""Validation of data-rearranging commits (OPTIMIZE, REORG): before they are written and after they land.

A compaction must never change what a reader sees. Whoever wrote it (us, delta-spark or delta-rs),
such a commit only swaps live files for new files holding the same rows, so it can be checked
against the version it was applied to (V-1) without reading any data: every finding has a stable
string code that tests, the CLI and the executor's guard can rely on.

Finding codes (see ``CODES``):

* ``data_change_true``: an add or remove has dataChange=true.
* ``remove_not_live``: a removed path was not live at V-1.
* ``remove_size_mismatch``: a remove's size differs from the live file's.
* ``remove_dv_mismatch``: a remove's deletion vector differs from the live file's.
* ``remove_duplicate`` / ``add_duplicate``: the same path removed / added twice.
* ``add_missing_file``: an added file is not in storage.
* ``add_size_mismatch``: an added file's size on disk differs from the recorded size.
* ``add_already_live``: an added path was already live at V-1.
* ``path_added_and_removed``: one path is both added and removed.
* ``partition_values_mismatch``: an add's partition values match none of the removes', or rows moved
  between partitions ("" and null are the same value; typed values are compared as values).
* ``row_count_mismatch``: the adds hold a different number of rows than the removes.
* ``row_count_unknown``: a file's rows are known neither from stats nor from its Parquet footer.
* ``stats_unparsable``: an add's stats are not a JSON object of the Delta stats shape.
* ``stats_num_records_mismatch``: an add's numRecords differs from its Parquet footer's row count.
* ``stats_min_gt_max``: a column's (possibly nested) minValue is greater than its maxValue.
* ``stats_null_count_gt_records``: a column's nullCount exceeds numRecords.
* ``action_malformed``: an add/remove action lacks required fields.
* ``unexpected_action``: a metaData or protocol action inside a data-rearranging commit.
* ``commit_info_missing`` / ``commit_info_malformed``: commitInfo absent, or in neither reference
  engine's shape (delta-spark and ours: string metrics, predicate/zOrderBy parameters; delta-rs:
  numeric camelCase metrics, targetSize/predicate parameters).
* ``metrics_mismatch``: operationMetrics disagree with the commit's actions (file counts, bytes).
* row tracking and in-commit timestamps (``ROW_TRACKING_CODES``, see ``validate_row_tracking``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..delta.actions import ADD, COMMIT_INFO, METADATA, PROTOCOL, REMOVE, AddFile, RemoveFile
from ..delta.storage import Storage, storage_for, table_uri
from ..errors import InvalidArgumentError
from ..plan.operation import REARRANGING_OPERATIONS as _REARRANGING
from .findings import Finding, ValidationReport
from .live_files import LiveFiles, norm_path
from .validate_actions import RemovesCheck, check_actions
from .validate_analyze import COMPUTE_STATS, STATS_CODES, check_stats_actions, check_stats_commit_info
from .validate_commit_info import DELTA_RS, DELTA_SPARK, OTHER, OURS, check_commit_info, commit_engine
from .validate_row_tracking import ROW_TRACKING_CODES, check_row_tracking

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = [
    "CODES",
    "DELTA_RS",
    "DELTA_SPARK",
    "OTHER",
    "OURS",
    "REARRANGING_OPERATIONS",
    "CheckedActions",
    "Finding",
    "ValidationReport",
    "commit_engine",
    "latest_rearranging_version",
    "validate_actions",
    "validate_commit",
]

#: Operations whose commits only rearrange data (every action dataChange=false): ``plan.operation``'s.
REARRANGING_OPERATIONS = _REARRANGING

CODES = (
    "data_change_true",
    "remove_not_live",
    "remove_size_mismatch",
    "remove_dv_mismatch",
    "remove_duplicate",
    "add_missing_file",
    "add_size_mismatch",
    "add_already_live",
    "add_duplicate",
    "path_added_and_removed",
    "partition_values_mismatch",
    "row_count_mismatch",
    "row_count_unknown",
    "stats_unparsable",
    "stats_num_records_mismatch",
    "stats_min_gt_max",
    "stats_null_count_gt_records",
    "action_malformed",
    "unexpected_action",
    "commit_info_missing",
    "commit_info_malformed",
    "metrics_mismatch",
    *ROW_TRACKING_CODES,
    *STATS_CODES,
)


@dataclass(frozen=True)
class CheckedActions:
    """Actions ``validate_actions`` found clean against ``snapshot``, as they were committed.

    A landed commit holding exactly these actions (parsed back from the log, compared field by field)
    needs no second pass over their files; its commitInfo and row tracking are still checked.
    """

    snapshot: Snapshot
    adds: tuple[AddFile, ...]
    removes: tuple[RemoveFile, ...]
    report: ValidationReport

    def covers(self, before: Snapshot | None, adds: Sequence[AddFile], removes: Sequence[RemoveFile]) -> bool:
        return (
            self.report.ok
            and before is self.snapshot
            and list(adds) == list(self.adds)
            and list(removes) == list(self.removes)
        )


def validate_actions(
    snapshot: Snapshot,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    *,
    operation: str = "OPTIMIZE",
    check_footers: bool = True,
    live: LiveFiles | None = None,
    checked_removes: RemovesCheck | None = None,
) -> ValidationReport:
    """Check planned actions against the snapshot they were planned on, before they are committed.

    Pure (no Spark): the added files must already be in place. ``check_footers`` also compares
    each add's numRecords with its Parquet footer (one small read per added file). ``live``: the
    snapshot's live files, when the caller validates the landed commit against them afterwards.
    ``checked_removes``: the removes checked bin by bin as the bins finished (``RemovesCheck``).
    """
    findings: list[Finding] = []
    added, removed = check_actions(
        snapshot.location,
        snapshot,
        list(adds),
        list(removes),
        findings,
        storage=snapshot.storage,
        check_footers=check_footers,
        live=live,
        checked_removes=checked_removes,
    )
    return ValidationReport(
        table=snapshot.location,
        version=None,
        operation=operation,
        ok=not findings,
        findings=tuple(findings),
        adds=len(adds),
        removes=len(removes),
        rows_added=added,
        rows_removed=removed,
        engine=OURS,
        read_version=snapshot.version,
    )


def _operation(raw: Sequence[Mapping[str, Any]]) -> str | None:
    info = next((a[COMMIT_INFO] for a in raw if COMMIT_INFO in a), None)
    op = info.get("operation") if isinstance(info, Mapping) else None
    return op if isinstance(op, str) else None


def _looks_rearranging(raw: Sequence[Mapping[str, Any]]) -> bool:
    """No commitInfo, and only file actions with dataChange=false: validate it as a rearranging commit."""
    if any(COMMIT_INFO in a for a in raw):
        return False
    files = [a.get(ADD) or a.get(REMOVE) for a in raw if ADD in a or REMOVE in a]
    return bool(files) and all(isinstance(f, Mapping) and f.get("dataChange") is False for f in files)


def latest_rearranging_version(table: str, *, storage: Storage | None = None) -> int:
    """The newest OPTIMIZE/REORG commit of a table (what ``validate`` checks when no version is given)."""
    from ..delta.snapshot import latest_version, read_commit

    root = table_uri(table)
    storage = storage if storage is not None else storage_for(root)
    latest = latest_version(root, storage=storage)
    for v in range(latest, -1, -1):
        try:
            raw = read_commit(root, v, storage=storage)
        except Exception:  # cleaned up by log retention: nothing older is readable either
            break
        if _operation(raw) in REARRANGING_OPERATIONS or _looks_rearranging(raw):
            return v
    raise InvalidArgumentError(
        f"'{table}' has no OPTIMIZE or REORG commit in its log (versions 0..{latest}): nothing to validate. "
        "Pass --version of a data-rearranging commit."
    )


def _parse_actions(raw: Sequence[Mapping[str, Any]], findings: list[Finding]) -> tuple[list[AddFile], list[RemoveFile]]:
    adds: list[AddFile] = []
    removes: list[RemoveFile] = []
    for action in raw:
        for kind in (ADD, REMOVE):
            if kind not in action:
                continue
            body = action[kind]
            try:
                if not isinstance(body, Mapping) or not isinstance(body.get("path"), str):
                    raise KeyError("path")
                if kind == ADD:
                    adds.append(AddFile.from_json(body))
                else:
                    removes.append(RemoveFile.from_json(body))
            except (KeyError, TypeError, ValueError) as exc:
                findings.append(Finding("action_malformed", f"{kind} action cannot be read ({exc}): {str(body)[:120]}"))
        for kind in (METADATA, PROTOCOL):
            if kind in action:
                findings.append(Finding("unexpected_action", f"a {kind} action in a data-rearranging commit"))
    return adds, removes


def _check_is_rearranging(
    table: str, version: int, info: Any, adds: Sequence[AddFile], removes: Sequence[RemoveFile], findings: list[Finding]
) -> None:
    if info is None:
        if (adds or removes) and not any(a.data_change for a in adds) and not any(r.data_change for r in removes):
            findings.append(Finding("commit_info_missing", "the commit has no commitInfo action"))
            return
        raise InvalidArgumentError(
            f"Version {version} of '{table}' has no commitInfo and changes data: it is not a data-rearranging commit."
        )
    operation = info.get("operation") if isinstance(info, Mapping) else None
    if operation not in REARRANGING_OPERATIONS:
        raise InvalidArgumentError(
            f"Version {version} of '{table}' is a {operation or 'unnamed'} commit; only data-rearranging commits "
            f"({', '.join(sorted(REARRANGING_OPERATIONS))}) can be validated. Pass --version of an OPTIMIZE commit."
        )


def _removed_sizes(removes: Sequence[RemoveFile], files: LiveFiles, root: str) -> list[int | None]:
    live = files.lookup(norm_path(r.path, root) for r in removes if r.size is None)
    return [
        r.size if r.size is not None else (f.size if (f := live.get(norm_path(r.path, root))) is not None else None)
        for r in removes
    ]


def _stats_report(
    root: str,
    version: int,
    info: Any,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    before: Snapshot,
    findings: list[Finding],
    storage: Storage,
    check_footers: bool,
    live: LiveFiles | None,
) -> ValidationReport:
    """A landed COMPUTE STATS commit: its actions against V-1 (``validate_analyze``) and its commitInfo."""
    live = live if live is not None and live.snapshot is before else LiveFiles(before)
    check_stats_actions(before, adds, removes, findings, storage=storage, live=live, check_footers=check_footers)
    findings.extend(check_stats_commit_info(info))
    return ValidationReport(
        table=root,
        version=version,
        operation=COMPUTE_STATS,
        ok=not findings,
        findings=tuple(findings),
        adds=len(adds),
        removes=len(removes),
        rows_added=None,
        rows_removed=None,
        engine=commit_engine(info) if info is not None else None,
        read_version=info.get("readVersion") if isinstance(info, Mapping) else None,
    )


def _read_landed(
    root: str, version: int, storage: Storage, before: Snapshot | None, checked: CheckedActions | None
) -> tuple[list[dict[str, Any]], list[RemoveFile] | None]:
    """The commit's raw actions; without the lines of the removes ``checked`` holds when they are there as
    written (``inspect.landed``: those removes are returned instead of being parsed again)."""
    from ..delta.log import parse_commit, read_commit_bytes
    from .landed import landed_actions

    data = read_commit_bytes(storage, root, version)
    if checked is None or before is None or before is not checked.snapshot:
        return parse_commit(data, root, version), None
    return landed_actions(data, root, version, checked.removes)


def validate_commit(
    table: str,
    version: int | None = None,
    *,
    check_footers: bool = True,
    storage: Storage | None = None,
    before: Snapshot | None = None,
    live: LiveFiles | None = None,
    checked: CheckedActions | None = None,
) -> ValidationReport:
    """Validate a landed data-rearranging commit against version - 1 (default: the latest OPTIMIZE/REORG);
    a COMPUTE STATS commit (delta-spark's stats recompute, our ``analyze``) is checked as one.

    ``before``: the table at version - 1 when the caller has it (the writer of the commit), so the log
    is not replayed again; ``live``: its live files, already looked up by the caller's own check;
    ``checked``: the actions the writer validated before committing (their file checks are not redone
    when the landed commit holds exactly them). Raises InvalidArgumentError when the version is not a data-rearranging
    commit, and TableNotFoundError / NotADeltaTableError for a missing table or version.
    """
    from ..delta.snapshot import latest_version, load_snapshot

    root = table_uri(table)
    storage = storage if storage is not None else storage_for(root)
    if version is None or before is None or before.version != version - 1:
        before = None
        latest = latest_version(root, storage=storage)
        if version is None:
            version = latest_rearranging_version(root, storage=storage)
        if version < 0 or version > latest:
            raise InvalidArgumentError(f"Version {version} of '{table}' does not exist (latest is {latest}).")
    raw, known = _read_landed(root, version, storage, before, checked)
    findings: list[Finding] = []
    info = next((a[COMMIT_INFO] for a in raw if COMMIT_INFO in a), None)
    adds, removes = _parse_actions(raw, findings)
    removes = known if known is not None else removes
    if _operation(raw) == COMPUTE_STATS and version > 0:
        before = before if before is not None else load_snapshot(root, version - 1, storage=storage)
        return _stats_report(root, version, info, adds, removes, before, findings, storage, check_footers, live)
    _check_is_rearranging(table, version, info, adds, removes, findings)
    if before is None and version > 0:
        before = load_snapshot(root, version - 1, storage=storage)
    live = live if live is not None and before is not None and live.snapshot is before else LiveFiles(before)
    if checked is not None and checked.covers(before, adds, removes):
        added, removed = checked.report.rows_added, checked.report.rows_removed
    else:
        added, removed = check_actions(
            root, before, adds, removes, findings, storage=storage, check_footers=check_footers, live=live
        )
    if info is not None:
        findings.extend(check_commit_info(info, version, adds, removes, _removed_sizes(removes, live, root)))
    findings.extend(check_row_tracking(raw, version, before, adds, removes, storage=storage, live=live))
    return ValidationReport(
        table=root,
        version=version,
        operation=_operation(raw),
        ok=not findings,
        findings=tuple(findings),
        adds=len(adds),
        removes=len(removes),
        rows_added=added,
        rows_removed=removed,
        engine=commit_engine(info) if info is not None else None,
        read_version=info.get("readVersion") if isinstance(info, Mapping) else None,
    )
