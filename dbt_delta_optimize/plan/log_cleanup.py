"""Which expired ``_delta_log`` files may go: delta-spark 4.4's metadata cleanup, as a pure plan.

delta-spark (``MetadataCleanup.cleanUpExpiredLogs``, run by ``checkpointAndCleanUpDeltaLog`` after each
checkpoint when ``delta.enableExpiredLogCleanup`` is true) deletes commits, checksums and checkpoints
whose file modification time is before the cutoff: now minus ``delta.logRetentionDuration`` (30 days),
truncated to midnight UTC. It walks the sorted listing in groups that each start at a complete
checkpoint (``BufferingLogDeletionIterator``); a group goes only when its last file is expired and older
than the checkpoint ``_last_checkpoint`` names, so every version kept is covered by a kept checkpoint
and the commits after it. Timestamps that do not increase with the version are adjusted to the
previous file's + 1 ms, as delta-spark does, so time travel by timestamp answers the same afterwards.

Beyond delta-spark: a listing with a hole in its commit versions, or whose ``_last_checkpoint`` names
no complete checkpoint, is refused (``CorruptLogError``) before anything is deleted; log compaction
files wholly before the oldest kept checkpoint go too (delta-spark leaves them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from ..delta.file_info import Listed
from ..errors import CorruptLogError
from .vacuum import DAY_MS, parse_interval_ms

__all__ = [
    "DEFAULT_LOG_RETENTION",
    "LogCleanupPlan",
    "LogName",
    "cleanup_enabled",
    "log_cutoff_ms",
    "log_retention_ms",
    "parse_log_name",
    "plan_log_cleanup",
    "plan_sidecar_cleanup",
    "sidecar_checkpoints",
]

DEFAULT_LOG_RETENTION = "interval 30 days"

# delta-spark's FileNames regexes (whole-name matches).
_COMMIT = re.compile(r"(\d+)\.json")
_CHECKSUM = re.compile(r"(\d+)\.crc")
_CHECKPOINT = re.compile(r"(\d+)\.checkpoint((\.\d+\.\d+)?\.parquet|\.[^.]+\.(json|parquet))")
_COMPACTED = re.compile(r"(\d+)\.(\d+)\.compacted\.json")
_STAGED = re.compile(r"(\d+)\.([^.]+)\.json")

Kind = Literal["commit", "checksum", "checkpoint", "compacted"]


@dataclass(frozen=True)
class LogName:
    """What a ``_delta_log`` file name says: its kind, version, and (multi-part checkpoints) part count."""

    kind: Kind
    version: int
    parts: int | None = None
    end_version: int | None = None

    @property
    def uses_sidecars(self) -> bool:
        """A single-file or V2 checkpoint (delta-spark's ``FormatUsesSidecars``), not a multi-part one."""
        return self.kind == "checkpoint" and self.parts is None


def parse_log_name(name: str) -> LogName | None:
    """The kind and version of a log file name; None for anything else (``_last_checkpoint``, temp files)."""
    if m := _COMMIT.fullmatch(name):
        return LogName("commit", int(m[1]))
    if m := _CHECKSUM.fullmatch(name):
        return LogName("checksum", int(m[1]))
    if m := _CHECKPOINT.fullmatch(name):
        segments = name.split(".")
        parts = int(segments[3]) if len(segments) == 5 else None
        return LogName("checkpoint", int(m[1]), parts)
    if m := _COMPACTED.fullmatch(name):
        return LogName("compacted", int(m[1]), end_version=int(m[2]))
    return None


def cleanup_enabled(configuration: Mapping[str, str]) -> bool:
    """``delta.enableExpiredLogCleanup`` (true unless set to false)."""
    return str(configuration.get("delta.enableExpiredLogCleanup", "true")).strip().lower() != "false"


def log_retention_ms(configuration: Mapping[str, str]) -> int:
    """``delta.logRetentionDuration`` in milliseconds (30 days by default)."""
    text = configuration.get("delta.logRetentionDuration", DEFAULT_LOG_RETENTION)
    try:
        return parse_interval_ms(text)
    except ValueError as exc:
        raise CorruptLogError(
            f"delta.logRetentionDuration is {text!r}, not an interval such as 'interval 30 days'; "
            "fix the table property (ALTER TABLE ... SET TBLPROPERTIES)."
        ) from exc


def log_cutoff_ms(now_ms: int, retention_ms: int) -> int:
    """``truncateDay(now - retention)``: midnight UTC at or before it (so cleanup moves a day at a time)."""
    return (now_ms - retention_ms) // DAY_MS * DAY_MS


@dataclass(frozen=True)
class LogCleanupPlan:
    """The log files to delete (names relative to ``_delta_log``), and why the rest stays."""

    cutoff_ms: int
    last_checkpoint: int | None
    delete: tuple[Listed, ...] = ()
    staged: tuple[Listed, ...] = ()
    oldest_kept_checkpoint: int | None = None
    #: Hadoop's ``.name.crc`` checksums of deleted files (Hadoop's local file system deletes them with the file)
    checksums: tuple[Listed, ...] = ()

    @property
    def files(self) -> tuple[Listed, ...]:
        return (*self.delete, *self.checksums, *self.staged)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def deletes_checkpoint(self) -> bool:
        return any((n := parse_log_name(f.path)) is not None and n.kind == "checkpoint" for f in self.delete)


def _version(f: Listed) -> int:
    name = parse_log_name(f.path)
    assert name is not None
    return name.version


class _Groups:
    """delta-spark's ``BufferingLogDeletionIterator`` over one sorted listing."""

    def __init__(self, cutoff_ms: int, max_version: int) -> None:
        self.cutoff_ms = cutoff_ms
        self.max_version = max_version
        self.buffer: list[Listed] = []
        self.partial: dict[tuple[int, int], list[Listed]] = {}
        self.deleted: list[Listed] = []
        self.last: Listed | None = None

    def flush(self) -> None:
        tail = self.buffer[-1] if self.buffer else None
        if tail is not None and tail.mtime_ms <= self.cutoff_ms and _version(tail) <= self.max_version:
            self.deleted.extend(self.buffer)
        self.buffer = []

    def add(self, f: Listed, name: LogName) -> None:
        last = self.last
        if last is None:
            self.buffer.append(f)
        elif _version(last) < name.version and last.mtime_ms >= f.mtime_ms:
            f = f._replace(mtime_ms=last.mtime_ms + 1)  # delta-spark's timestamp adjustment
            self.buffer.append(f)
        elif name.kind == "checkpoint" and f.size > 0:
            self._checkpoint(f, name)
        else:
            self.buffer.append(f)
        self.last = f

    def _checkpoint(self, f: Listed, name: LogName) -> None:
        if name.parts is None:
            self.flush()
            self.buffer.append(f)
            return
        key = (name.version, name.parts)
        parts = self.partial.setdefault(key, [])
        parts.append(f)
        if len(parts) == name.parts:
            self.flush()
            self.buffer.extend(self.partial.pop(key))


def _complete_checkpoints(names: Sequence[tuple[Listed, LogName]]) -> set[int]:
    """Versions with a complete checkpoint: a single/V2 file, or every part of a multi-part one."""
    seen: dict[tuple[int, int], int] = {}
    complete: set[int] = set()
    for f, n in names:
        if n.kind != "checkpoint" or f.size <= 0:
            continue
        if n.parts is None:
            complete.add(n.version)
            continue
        seen[(n.version, n.parts)] = seen.get((n.version, n.parts), 0) + 1
        if seen[(n.version, n.parts)] == n.parts:
            complete.add(n.version)
    return complete


def _check_listing(named: Sequence[tuple[Listed, LogName]], last_checkpoint: int, root: str) -> None:
    """Refuse a listing cleanup must not act on: a hole in commit versions, or no such checkpoint."""
    commits = sorted({n.version for _, n in named if n.kind == "commit"})
    for before, after in pairwise(commits):
        if after != before + 1:
            raise CorruptLogError(
                f"Log cleanup refused for {root}: commits {before + 1}..{after - 1} are missing from _delta_log "
                "(a gap). Nothing was deleted; restore the missing commits or check the store's listing.",
                version=before + 1,
            )
    if last_checkpoint not in _complete_checkpoints(named):
        raise CorruptLogError(
            f"Log cleanup refused for {root}: _last_checkpoint names version {last_checkpoint}, but _delta_log "
            "holds no complete checkpoint at that version. Nothing was deleted.",
            version=last_checkpoint,
        )


def _assert_covered(plan: LogCleanupPlan, named: Sequence[tuple[Listed, LogName]], root: str) -> None:
    """The rule the plan must hold: every deleted version is below a complete checkpoint that stays."""
    gone = {f.path for f in plan.files}
    kept = [(f, n) for f, n in named if f.path not in gone]
    anchor = min(_complete_checkpoints(kept), default=None)
    top = max((_version(f) for f in plan.delete), default=-1)
    if plan.delete and (anchor is None or top >= anchor):
        raise CorruptLogError(f"Log cleanup refused for {root}: the plan would leave version {top} uncovered.")


def plan_log_cleanup(
    listing: Sequence[Listed],
    *,
    last_checkpoint: int | None,
    configuration: Mapping[str, str],
    now_ms: int,
    staged: Sequence[Listed] = (),
    root: str = "",
) -> LogCleanupPlan:
    """The expired log files to delete, from a listing of ``_delta_log`` (names, sizes, modification times),
    the version ``_last_checkpoint`` names, the table properties and the current time.

    ``staged``: the listing of ``_delta_log/_staged_commits`` (unbackfilled commits of coordinated
    tables); those up to the newest deleted commit go too, as in delta-spark.
    """
    cutoff = log_cutoff_ms(now_ms, log_retention_ms(configuration))
    if last_checkpoint is None:
        return LogCleanupPlan(cutoff, None)
    named = sorted(
        ((f, n) for f in listing if not f.is_dir and (n := parse_log_name(f.path)) is not None),
        key=lambda fn: fn[0].path,
    )
    _check_listing(named, last_checkpoint, root)
    groups = _Groups(cutoff, last_checkpoint - 1)
    for f, n in named:
        if n.kind != "compacted":
            groups.add(f, n)
    deleted = {f.path for f in groups.deleted}
    kept_anchor = min(_complete_checkpoints([(f, n) for f, n in named if f.path not in deleted]), default=None)
    compacted = [
        f
        for f, n in named
        if n.kind == "compacted"
        and deleted
        and n.end_version is not None
        and kept_anchor is not None
        and n.end_version < kept_anchor
    ]
    top_commit = max((n.version for f, n in named if n.kind == "commit" and f.path in deleted), default=-1)
    stale = [f for f in staged if (m := _STAGED.fullmatch(f.path.rsplit("/", 1)[-1])) and int(m[1]) <= top_commit]
    by_path = {f.path: f for f, _ in named}
    delete = tuple(by_path[f.path] for f in groups.deleted) + tuple(compacted)
    hidden = {f.path: f for f in listing if f.path.startswith(".") and f.path.endswith(".crc")}
    checksums = tuple(hidden[c] for f in delete if (c := f".{f.path}.crc") in hidden)
    plan = LogCleanupPlan(cutoff, last_checkpoint, delete, tuple(stale), kept_anchor, checksums)
    _assert_covered(plan, named, root)
    return plan


def sidecar_checkpoints(listing: Sequence[Listed], plan: LogCleanupPlan) -> tuple[str, ...]:
    """The checkpoints that stay and may name sidecars (single-file and V2): read them for the next step."""
    gone = {f.path for f in plan.delete}
    return tuple(
        f.path for f in listing if f.path not in gone and (n := parse_log_name(f.path)) is not None and n.uses_sidecars
    )


def plan_sidecar_cleanup(sidecars: Sequence[Listed], referenced: set[str], cutoff_ms: int) -> tuple[Listed, ...]:
    """Sidecars (names under ``_delta_log/_sidecars``) that no kept checkpoint names and that are older than
    the cutoff (younger ones may belong to a checkpoint being written), as delta-spark deletes them."""
    return tuple(
        f for f in sidecars if not f.is_dir and f.mtime_ms < cutoff_ms and f.path.rsplit("/", 1)[-1] not in referenced
    )
