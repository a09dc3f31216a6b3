"""In-commit timestamps (PROTOCOL.md "In-Commit Timestamps"): a commit's time is in its commitInfo.

With ``delta.enableInCommitTimestamps`` the commitInfo must come first and carry
``inCommitTimestamp`` = max(now, previous commit's timestamp + 1), so history and time travel by
timestamp stay monotonic whatever the clocks of the writers and the store say. Commits older than
``delta.inCommitTimestampEnablementVersion`` have no such field: their time is the commit file's
modification time (delta-spark's InCommitTimestampUtils, DeltaHistoryManager).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .actions import COMMIT_INFO, Metadata
from .log import commit_path
from .storage import Storage

__all__ = [
    "ENABLEMENT_TIMESTAMP",
    "ENABLEMENT_VERSION",
    "ICT_ENABLED",
    "commit_timestamp",
    "enablement",
    "ict_enabled",
    "in_commit_timestamp",
    "next_in_commit_timestamp",
]

ICT_ENABLED = "delta.enableInCommitTimestamps"
ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"


def ict_enabled(metadata: Metadata) -> bool:
    return (metadata.configuration.get(ICT_ENABLED) or "").strip().lower() == "true"


def enablement(metadata: Metadata) -> tuple[int, int] | None:
    """(version, timestamp) from which commits carry in-commit timestamps; None when all of them do."""
    cfg = metadata.configuration
    version, ts = cfg.get(ENABLEMENT_VERSION), cfg.get(ENABLEMENT_TIMESTAMP)
    if version is None or ts is None:
        return None
    try:
        return int(version), int(ts)
    except ValueError:
        return None


def in_commit_timestamp(actions: Sequence[Mapping[str, Any]]) -> int | None:
    """The inCommitTimestamp of a commit's commitInfo (None when absent)."""
    for action in actions:
        info = action.get(COMMIT_INFO)
        if isinstance(info, Mapping):
            value = info.get("inCommitTimestamp")
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def commit_timestamp(
    storage: Storage, root: str, version: int, actions: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """When ``version`` committed: its inCommitTimestamp, else its commit file's modification time."""
    from .log import read_commit

    found = in_commit_timestamp(actions if actions is not None else read_commit(storage, root, version))
    if found is not None:
        return found
    return storage.stat(commit_path(root, version)).modification_time_ms


def next_in_commit_timestamp(now_ms: int, previous_ms: int) -> int:
    """max(now, previous + 1): strictly after the commit before it, even if this clock is behind."""
    return max(now_ms, previous_ms + 1)
