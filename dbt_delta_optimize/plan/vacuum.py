"""VACUUM's decisions, pure: which files to delete and why, from the log's facts and a listing.

delta-spark 4.4's ``VacuumCommand.gc`` is the reference. A file is kept when a version inside the
retention may need it: a live file, a tombstone removed at or after ``delete_before``, the deletion
vector of either, and every folder above them. Anything else under the table root is deleted when its
modification time (a tombstone's ``deletionTimestamp`` in lite mode) is older than ``delete_before``:
expired tombstones, deletion vectors no kept file uses, change data files and, in full mode, debris
the log never named. Hidden names (``_x``, ``.x``) are never looked into, except ``_change_data``,
``_delta_index`` and ``col=value`` partition folders (``DeltaTableUtils.isHiddenDirectory``); so
``_delta_log`` is never touched. Lite mode reads only the commits since the last vacuum
(``lite_range``) and refuses, as delta-spark does, when the log no longer holds them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import Any, Literal, NamedTuple
from urllib.parse import unquote

from ..delta.file_info import Listed
from ..delta.paths import is_absolute, is_inside
from ..delta.vacuum_log import LogFile, LogFiles
from ..options.values import parse_interval_ms

__all__ = [
    "LITE_REFUSAL",
    "Candidate",
    "Listed",
    "LogFile",
    "LogFiles",
    "Reason",
    "VacuumPlan",
    "active_commit_at",
    "active_ict_commit",
    "is_hidden",
    "lite_range",
    "monotonize",
    "parse_interval_ms",
    "parse_retain_ms",
    "plan_lite",
    "plan_vacuum",
    "protected_paths",
    "relative_path",
    "retention_problem",
]

VacuumMode = Literal["full", "lite"]
Reason = Literal["expired tombstone", "unused deletion vector", "change data", "untracked file", "empty folder"]
HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS
#: delta-spark's DELTA_CANNOT_VACUUM_LITE, with what to do about it.
LITE_REFUSAL = (
    "VACUUM LITE cannot delete all eligible files as some files are not referenced by the Delta log. "
    "Please run VACUUM FULL (--mode full); lite works again from that run on."
)


class Candidate(NamedTuple):
    """One path VACUUM deletes (relative to the root), its size and why (a named tuple: one object per deleted
    file, made in a fifth of a frozen dataclass's time, with no dict for the garbage collector to count)."""

    path: str
    size: int
    reason: Reason


@dataclass(frozen=True)
class VacuumPlan:
    """What a run deletes: files, then folders left empty (deepest first), and what it looked at."""

    files: tuple[Candidate, ...] = ()
    folders: tuple[str, ...] = ()
    #: Hadoop checksum sidecars (``.name.crc``) of deleted files, deleted with them as Hadoop's local file
    #: system does (not counted: hidden files delta-spark's listing does not see either)
    sidecars: tuple[str, ...] = ()
    files_listed: int = 0
    folders_listed: int = 0
    eligible_start_version: int | None = None
    eligible_end_version: int | None = None

    @cached_property
    def bytes(self) -> int:
        """Summed once (a run reads it three times; 10,000 files cost milliseconds each time)."""
        return sum(c.size for c in self.files)

    def without(self, paths: Iterable[str]) -> VacuumPlan:
        """The plan minus ``paths`` (files a concurrent commit added back), and their folders."""
        drop = set(paths)
        keep_dirs = {d for p in drop for d in _parents(p)}
        return VacuumPlan(
            tuple(c for c in self.files if c.path not in drop),
            tuple(d for d in self.folders if d not in keep_dirs),
            tuple(s for s in self.sidecars if _crc_of(s) not in drop),
            self.files_listed,
            self.folders_listed,
            self.eligible_start_version,
            self.eligible_end_version,
        )


# ----------------------------------------------------------------------------- durations
_RETAIN_UNITS = {"ms": 1, "s": 1000, "m": 60 * 1000, "h": HOUR_MS, "d": DAY_MS, "w": 7 * DAY_MS}
_RETAIN_WORDS = {"hour": "h", "hours": "h", "day": "d", "days": "d", "minute": "m", "minutes": "m"}


def parse_retain_ms(value: Any) -> int:
    """Milliseconds of ``--retain``: ``168h``, ``7d``, ``30m``, ``0h``, a number of hours (as ``RETAIN n HOURS``),
    or a Delta interval (``interval 7 days``). Negative values are refused, as delta-spark does."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        hours = float(value)
        if hours < 0:
            raise ValueError("Retention period for Vacuum can't be less than 0 hours.")
        return round(hours * HOUR_MS)
    text = str(value).strip().lower()
    if text.startswith("interval"):
        return parse_interval_ms(text)
    parts = text.split()
    if len(parts) == 2 and parts[1] in _RETAIN_WORDS:
        text = parts[0] + _RETAIN_WORDS[parts[1]]
    unit = text.lstrip("-0123456789.")
    number = text[: len(text) - len(unit)]
    try:
        amount = float(number)
    except ValueError:
        raise ValueError(f"not a duration: {value!r}") from None
    if amount < 0:
        raise ValueError("Retention period for Vacuum can't be less than 0 hours.")
    if unit not in ("", *_RETAIN_UNITS):
        raise ValueError(f"not a duration: {value!r}")
    return round(amount * _RETAIN_UNITS.get(unit, HOUR_MS))


def retention_problem(retain_ms: int | None, table_retention_ms: int, *, allow_short: bool) -> str | None:
    """delta-spark's ``checkRetentionPeriodSafety``: why a retention is refused (None: it is not)."""
    if retain_ms is None or allow_short or retain_ms >= table_retention_ms:
        return None
    hours = -(-table_retention_ms // HOUR_MS)
    return (
        f"The specified VACUUM retention ({retain_ms / HOUR_MS:g}h) is shorter than the table's "
        f"delta.deletedFileRetentionDuration ({hours}h) and may corrupt the table if any writes are in progress, "
        "or break readers and change-data consumers of older versions. Nothing was deleted. If no writes or "
        "reads of old versions are running, pass --allow-short-retention (allow_short_retention=True; "
        "delta-spark: spark.databricks.delta.retentionDurationCheck.enabled=false)."
    )


# ----------------------------------------------------------------------------- paths
def is_hidden(name: str, partition_columns: Sequence[str], *, iceberg: bool = False) -> bool:
    """delta-spark's ``DeltaTableUtils.isHiddenDirectory`` for one path component."""
    if iceberg and name == "metadata":
        return True
    return (
        name.startswith((".", "_"))
        and not name.startswith(("_delta_index", "_change_data"))
        and not any(name.startswith(c + "=") for c in partition_columns)
    )


def _plain(path: str) -> bool:
    """A relative path that decoding and normalising leave as it is (most paths in a log): nothing to do."""
    if not path or path[0] == "/" or path[-1] in "/.":
        return False
    return not ("%" in path or ":" in path or ".." in path or "//" in path or "./" in path)


def relative_path(log_path: str, root: str) -> str | None:
    """The decoded path of a log entry relative to ``root``; None when it lives outside the table."""
    if _plain(log_path):
        return log_path
    decoded = unquote(log_path)
    if not is_absolute(log_path):
        return posixpath.normpath(decoded)
    location = decoded[5:] if decoded.startswith("file:") and not decoded.startswith("file://") else decoded
    if location.startswith("file://"):
        location = location[7:]
    if not is_inside(location, root):
        return None
    base = root.rstrip("/").split("://", 1)[-1]
    if "://" in root:
        base = base.split("/", 1)[1] if "/" in base else ""
    tail = location.split("://", 1)[-1]
    if "://" in location:
        tail = tail.split("/", 1)[1] if "/" in tail else ""
    rel = posixpath.relpath(posixpath.normpath("/" + tail), posixpath.normpath("/" + base))
    return None if rel.startswith("..") else rel


def _crc_of(sidecar: str) -> str:
    """The file a ``.name.crc`` sidecar belongs to."""
    folder, _, name = sidecar.rpartition("/")
    base = name[1:-4]
    return f"{folder}/{base}" if folder else base


def _crc_for(path: str) -> str:
    folder, _, name = path.rpartition("/")
    return f"{folder}/.{name}.crc" if folder else f".{name}.crc"


def _parents(path: str) -> Iterable[str]:
    parent = posixpath.dirname(path)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)


def protected_paths(
    root: str, live: Iterable[LogFile] | LogFiles, tombstones: Iterable[LogFile] | LogFiles, delete_before: int
) -> set[str]:
    """delta-spark's valid files: live files, tombstones removed at or after ``delete_before``, their DV
    files, and every folder above them (relative, decoded). ``LogFiles`` are read as columns."""
    out: set[str] = set()
    chained: set[str] = set()  # folders whose parents are all in ``out`` already (one lookup per file)

    def keep(path: str, dv_path: str | None) -> None:
        rel = path if _plain(path) else relative_path(path, root)
        if rel is not None:
            out.add(rel)
            folder = rel.rpartition("/")[0]
            if folder and folder not in chained:
                chained.add(folder)
                out.add(folder)
                out.update(_parents(folder))
        if dv_path is not None:
            out.add(dv_path)

    for files, young in ((live, None), (tombstones, delete_before)):
        if isinstance(files, LogFiles):
            stamps = files.deletion_timestamps
            rows = range(len(files)) if young is None else [i for i, ts in enumerate(stamps) if ts >= young]
            paths, dvs = files.paths, files.dvs
            for i in rows:
                dv = dvs.get(i) if dvs else None
                keep(paths[i], dv[0] if dv is not None else None)
        else:
            for f in files:
                if young is None or f.deletion_timestamp >= young:
                    keep(f.path, f.dv_path)
    return out


def _reason(path: str, expired: set[str] | frozenset[str]) -> Reason:
    name = path.rpartition("/")[2]  # posixpath.basename, without its call overhead (once per deleted file)
    if path in expired:
        return "expired tombstone"
    if name.startswith("deletion_vector_") and name.endswith(".bin"):
        return "unused deletion vector"
    if path.startswith("_change_data/") or "/_change_data/" in path:
        return "change data"
    return "untracked file"


@dataclass
class _Folders:
    """Folders seen, and which hold something that stays."""

    seen: set[str] = field(default_factory=set)
    busy: set[str] = field(default_factory=set)
    #: folders whose whole chain of parents is in ``seen`` already (a folder's files cost one lookup)
    chained: set[str] = field(default_factory=set)

    def file(self, folder: str, stays: bool) -> None:
        """A file in ``folder`` (``""``: the root) that stays or goes (the caller's loop asks first whether the
        folder is marked already, so that most files cost one set lookup and no call)."""
        if not folder:
            return
        self.chained.add(folder)
        for d in (folder, *_parents(folder)):
            self.seen.add(d)
            if stays:
                self.busy.add(d)

    def empty(self, protected: set[str]) -> tuple[str, ...]:
        gone = self.seen - self.busy - protected
        return tuple(sorted(gone, key=lambda d: (-d.count("/"), d)))


def plan_vacuum(
    root: str,
    listing: Iterable[Listed],
    *,
    protected: set[str],
    delete_before: int,
    partition_columns: Sequence[str] = (),
    tombstone_paths: Iterable[str] = (),
    iceberg: bool = False,
) -> VacuumPlan:
    """Full mode: every listed file older than ``delete_before`` that no kept version needs, then the folders
    this leaves empty. The listing may hold hidden paths: they are skipped here as delta-spark's listing does."""
    expired = {r for p in tombstone_paths if (r := relative_path(p, root)) is not None}
    files: list[Candidate] = []
    folders = _Folders()
    n_files = n_dirs = 0
    crcs: list[str] = []
    visible: dict[str, bool] = {"": True}  # folder -> no hidden name on its path (one check per folder)
    for entry in listing:
        folder, _, name = entry.path.rpartition("/")
        shown = visible.get(folder)
        if shown is None:
            shown = visible[folder] = not any(
                is_hidden(p, partition_columns, iceberg=iceberg) for p in folder.split("/")
            )
        if not shown:
            continue
        if (name[:1] in "._" or iceberg) and is_hidden(name, partition_columns, iceberg=iceberg):
            if name.startswith(".") and name.endswith(".crc") and not entry.is_dir:
                crcs.append(entry.path)
            continue
        if entry.is_dir:
            n_dirs += 1
            folders.seen.add(entry.path)
            continue
        n_files += 1
        path = entry.path
        if entry.mtime_ms < delete_before and path not in protected:
            if folder not in folders.chained:
                folders.file(folder, stays=False)
            files.append(Candidate(path, entry.size, _reason(path, expired)))
        elif folder not in folders.busy:
            folders.file(folder, stays=True)
    gone = {c.path for c in files}
    sidecars = tuple(c for c in crcs if _crc_of(c) in gone)
    return VacuumPlan(tuple(sorted(files, key=lambda c: c.path)), folders.empty(protected), sidecars, n_files, n_dirs)


_NONE: frozenset[str] = frozenset()


def _rows(files: Iterable[LogFile] | LogFiles) -> Iterator[tuple[str, int, int, str | None, int]]:
    """(path, size, deletion time, DV file, DV bytes) of each file; ``LogFiles`` read as columns."""
    if not isinstance(files, LogFiles):
        return ((f.path, f.size, f.deletion_timestamp, f.dv_path, f.dv_size) for f in files)
    if not files.dvs:
        return zip(files.paths, files.sizes, files.deletion_timestamps, repeat(None), repeat(0))
    dvs = files.dvs
    return (
        (p, s, t, *(dvs.get(i) or (None, 0)))
        for i, (p, s, t) in enumerate(zip(files.paths, files.sizes, files.deletion_timestamps))
    )


def plan_lite(
    root: str,
    log_files: Iterable[LogFile],
    *,
    protected: set[str],
    delete_before: int,
    start: int | None,
    end: int | None,
    sidecars: bool = False,
) -> VacuumPlan:
    """Lite mode: the tombstones (and their DVs) and change data files of commits ``start..end`` that are past
    ``delete_before`` and that no kept version needs. Nothing is listed; a file already gone is skipped later."""
    found: dict[str, Candidate] = {}
    for path, size, ts, dv_path, dv_size in _rows(log_files):
        if ts >= delete_before:
            continue
        rel = path if _plain(path) else relative_path(path, root)
        if rel is not None and rel not in protected:
            cdc = ts == 0 and _reason(rel, _NONE) == "change data"
            found[rel] = Candidate(rel, size, "change data" if cdc else "expired tombstone")
        if dv_path is not None and dv_path not in protected:
            found[dv_path] = Candidate(dv_path, dv_size, "unused deletion vector")
    files = tuple(sorted(found.values(), key=lambda c: c.path))
    crcs = tuple(_crc_for(c.path) for c in files) if sidecars else ()  # unseen: deleted if they are there
    return VacuumPlan(files, (), crcs, 0, 0, start, end)


# ----------------------------------------------------------------------------- lite mode's commit range
def monotonize(timestamps: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(version, timestamp) sorted by version with each timestamp after the one before (DeltaHistoryManager)."""
    out: list[tuple[int, int]] = []
    for version, ts in timestamps:
        if out and out[-1][1] >= ts:
            ts = out[-1][1] + 1
        out.append((version, ts))
    return out


def active_commit_at(commits: Sequence[tuple[int, int]], time_ms: int) -> int | None:
    """The newest version committed at or before ``time_ms`` (monotonized); None when the earliest is later."""
    found = None
    for version, ts in monotonize(commits):
        if ts <= time_ms:
            found = version
        else:
            break
    return found


def active_ict_commit(versions: Sequence[int], time_ms: int, ict_of: Callable[[int], int]) -> int | None:
    """The newest of ``versions`` (sorted) whose in-commit timestamp is at or before ``time_ms``; None when
    the first one's is later. In-commit timestamps only grow, so this is a binary search: about log2(n)
    commits read instead of every one (DeltaHistoryManager.getActiveCommitAtTimeFromICTRange)."""
    if not versions or ict_of(versions[0]) > time_ms:
        return None
    low, high = 0, len(versions) - 1  # ict_of(versions[low]) <= time_ms throughout
    while low < high:
        mid = (low + high + 1) // 2
        if ict_of(versions[mid]) <= time_ms:
            low = mid
        else:
            high = mid - 1
    return versions[low]


def lite_range(
    *, earliest: int, snapshot_version: int, outside: int | None, last_vacuum: int | None
) -> tuple[int, int] | None:
    """The commits lite mode reads (inclusive), None when there is nothing to read; ValueError when the log
    no longer holds them (``VacuumCommand.getFilesFromDeltaLog``)."""
    if outside is None:
        return None
    if earliest != 0 and (last_vacuum is None or last_vacuum < earliest):
        raise ValueError(LITE_REFUSAL)
    start = min(snapshot_version, last_vacuum + 1 if last_vacuum is not None else earliest)
    if start > outside:
        return None
    return start, outside
