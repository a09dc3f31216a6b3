"""Row tracking and in-commit timestamp invariants of a landed commit (PROTOCOL.md's writer requirements).

Checked against the version before the commit, so any writer's commit can be validated:

* ``row_id_missing``: row tracking is supported but an add lacks baseRowId or defaultRowCommitVersion.
* ``row_id_not_fresh``: an add's row ids are not above the previous high-water mark, or overlap another add's.
* ``row_commit_version_mismatch``: an add's defaultRowCommitVersion is not the commit's version.
* ``row_id_high_water_mark``: the ``delta.rowTracking`` domain is not raised to cover the new row ids.
* ``remove_row_id_mismatch``: a remove's baseRowId/defaultRowCommitVersion differ from the live file's.
* ``commit_info_not_first``: in-commit timestamps are on, but commitInfo is not the first action.
* ``in_commit_timestamp_invalid``: it has no inCommitTimestamp, or one not after the previous commit's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from ..delta.actions import COMMIT_INFO, AddFile, RemoveFile
from ..delta.in_commit_timestamps import commit_timestamp, ict_enabled, in_commit_timestamp
from ..delta.row_tracking import RowTracking, high_water_mark, winning_high_water_mark
from ..delta.storage import Storage
from ..errors import DeltaOptimizeError
from .findings import Finding
from .live_files import LiveFiles, norm_path

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = ["ROW_TRACKING_CODES", "check_row_tracking"]

ROW_TRACKING_CODES = (
    "row_id_missing",
    "row_id_not_fresh",
    "row_commit_version_mismatch",
    "row_id_high_water_mark",
    "remove_row_id_mismatch",
    "commit_info_not_first",
    "in_commit_timestamp_invalid",
)


def _row_ids(
    raw: Sequence[Mapping[str, Any]], version: int, before: Snapshot, adds: Sequence[AddFile]
) -> list[Finding]:
    out: list[Finding] = []
    mark = high_water_mark(before.domains)
    top = mark
    ranges: list[tuple[int, int, str]] = []
    for a in adds:
        if a.base_row_id is None or a.default_row_commit_version is None:
            out.append(Finding("row_id_missing", "no baseRowId/defaultRowCommitVersion on a new file", a.path))
            continue
        if a.default_row_commit_version != version:
            out.append(
                Finding(
                    "row_commit_version_mismatch",
                    f"defaultRowCommitVersion {a.default_row_commit_version}, expected {version}",
                    a.path,
                )
            )
        rows = a.num_records or 0
        if a.base_row_id <= mark:
            out.append(Finding("row_id_not_fresh", f"baseRowId {a.base_row_id} is not above the mark {mark}", a.path))
        ranges.append((a.base_row_id, a.base_row_id + rows - 1, a.path))
        top = max(top, a.base_row_id + rows - 1)
    ranges.sort()
    for (_, end, _), (start, _, path) in pairwise(ranges):
        if start <= end:
            out.append(Finding("row_id_not_fresh", f"row ids from {start} overlap another new file's", path))
    new_mark = winning_high_water_mark(raw, version)
    if top > mark and (new_mark is None or new_mark < top):
        out.append(
            Finding("row_id_high_water_mark", f"the delta.rowTracking mark is {new_mark}, new row ids reach {top}")
        )
    return out


def _removes(before: Snapshot, removes: Sequence[RemoveFile], files: LiveFiles) -> list[Finding]:
    root = before.location
    live = files.lookup(norm_path(r.path, root) for r in removes)
    out = []
    for r in removes:
        f = live.get(norm_path(r.path, root))
        if f is None or (r.base_row_id, r.default_row_commit_version) == (f.base_row_id, f.default_row_commit_version):
            continue
        out.append(
            Finding(
                "remove_row_id_mismatch",
                f"remove carries baseRowId/defaultRowCommitVersion {r.base_row_id}/{r.default_row_commit_version}, "
                f"the live file {f.base_row_id}/{f.default_row_commit_version}",
                r.path,
            )
        )
    return out


def _timestamps(raw: Sequence[Mapping[str, Any]], version: int, storage: Storage, root: str) -> list[Finding]:
    if not raw or COMMIT_INFO not in raw[0]:
        return [Finding("commit_info_not_first", "in-commit timestamps are enabled but commitInfo is not first")]
    ict = in_commit_timestamp(raw)
    if ict is None:
        return [Finding("in_commit_timestamp_invalid", "commitInfo has no inCommitTimestamp")]
    try:
        previous = commit_timestamp(storage, root, version - 1)
    except DeltaOptimizeError:  # the previous commit was cleaned up: nothing to compare with
        return []
    if ict <= previous:
        return [
            Finding(
                "in_commit_timestamp_invalid", f"inCommitTimestamp {ict} is not after the previous commit's {previous}"
            )
        ]
    return []


def check_row_tracking(
    raw: Sequence[Mapping[str, Any]],
    version: int,
    before: Snapshot | None,
    adds: Sequence[AddFile],
    removes: Sequence[RemoveFile],
    *,
    storage: Storage,
    live: LiveFiles | None = None,
) -> list[Finding]:
    """Findings for a landed commit at ``version`` (``before``: the table at version - 1; ``live``: its files)."""
    if before is None:
        return []
    findings: list[Finding] = []
    try:
        rt = RowTracking.of(before.protocol, before.metadata, table=before.location)
    except DeltaOptimizeError:
        rt = None
    if rt is not None and rt.assigns:
        findings += _row_ids(raw, version, before, adds)
        findings += _removes(before, removes, live or LiveFiles(before))
    if ict_enabled(before.metadata):
        findings += _timestamps(raw, version, storage, before.location)
    return findings
