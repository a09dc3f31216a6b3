"""What VACUUM reads from the log: live files with their DVs, tombstones, a range of commits' removes and
change data, commit timestamps, and ``_delta_log/_last_vacuum_info`` (delta-spark's record for lite mode).

Paths stay as the log writes them (URL-encoded, relative or absolute); ``plan/vacuum.py`` relativizes.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .checkpoint_v2 import checkpoint_files
from .in_commit_timestamps import in_commit_timestamp
from .log import (
    LOG_DIR,
    LogCache,
    LogListing,
    commit_path,
    in_order,
    log_listing,
    parse_commit,
    read_commit,
    read_threads,
)
from .log_files import SmallLogFiles, small_log_files
from .storage import Storage, join

__all__ = [
    "LAST_VACUUM_INFO",
    "LogFile",
    "LogReads",
    "added_since",
    "commit_ict",
    "dv_relative_path",
    "live_files",
    "range_files",
    "read_last_vacuum",
    "read_state",
    "read_tombstones",
    "write_last_vacuum",
]

LAST_VACUUM_INFO = "_last_vacuum_info"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True)
class LogFile:
    """A file a log action names: a live add or a tombstone (its deletion time) with its DV file, or change data.

    ``path`` is the log's path (URL-encoded, relative or absolute); ``dv_path`` the relative path of a
    UUID-relative deletion vector file (an absolute one is never deleted, as in delta-spark).
    """

    path: str
    size: int = 0
    deletion_timestamp: int = 0
    dv_path: str | None = None
    dv_size: int = 0


def dv_relative_path(dv: Mapping[str, Any] | None) -> str | None:
    """The root-relative file of a UUID-relative deletion vector (PROTOCOL.md); None for inline or absolute."""
    if not dv or dv.get("storageType") != "u":
        return None
    text = str(dv.get("pathOrInlineDv") or "")
    if len(text) < 20:
        return None
    from .deletion_vectors import z85_decode  # only for a DV: a table without any compiles less

    prefix, encoded = text[:-20], text[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return f"{prefix}/{name}" if prefix else name


def _log_file(action: Mapping[str, Any], *, deletion: bool) -> LogFile:
    dv = action.get("deletionVector")
    ts = int(action.get("deletionTimestamp") or 0) if deletion else 0
    return LogFile(
        str(action["path"]),
        int(action.get("size") or 0),
        ts,
        dv_relative_path(dv),
        int(dv.get("sizeInBytes") or 0) if dv else 0,
    )


def live_files(adds: Any) -> Iterator[LogFile]:
    """The live files of a snapshot's FileTable adds column (a pyarrow StructArray): path and DV."""
    paths = adds.field("path").to_pylist()
    names = [f.name for f in adds.type]
    dvs = adds.field("deletionVector").to_pylist() if "deletionVector" in names else [None] * len(paths)
    for path, dv in zip(paths, dvs):
        yield LogFile(path, 0, 0, dv_relative_path(dv))


def _checkpoint_actions(storage: Storage, root: str, names: Iterable[str], kind: str) -> Iterator[dict[str, Any]]:
    """A checkpoint's ``add`` or ``remove`` actions (path, size, deletion time and DV only)."""
    import pyarrow.parquet as pq

    where = checkpoint_files(storage, root, names)
    wanted = ("path", "size", "deletionTimestamp", "deletionVector")
    for path in where.parquet:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            if kind not in pf.schema_arrow.names:
                continue
            present = pf.schema_arrow.field(kind).type
            columns = [f"{kind}.{f}" for f in wanted if present.get_field_index(f) >= 0]
            table = pf.read(columns=columns)
        for row in table.column(kind).to_pylist():
            if row is not None and row.get("path") is not None:
                yield row
    for action in where.json_actions:
        if kind in action:
            yield action[kind]


@dataclass
class LogReads:
    """The log as one operation reads it: its listing once, and each commit once (a commit file never
    changes once written; on an object store every read is a round trip). VACUUM's log head reads the
    newest commits' bytes, the replay their actions; ``keep_actions`` (lite mode) keeps the parsed actions
    for ``range_files``, which reads some commits again."""

    storage: Storage
    root: str
    keep_actions: bool = False
    _listing: LogListing | None = None
    _mtimes: dict[int, int] = field(default_factory=dict)
    _bytes: dict[int, bytes] = field(default_factory=dict)
    _actions: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    _tombstones: dict[int, list[LogFile]] = field(default_factory=dict)
    #: a snapshot's load's reads of the log (``LogCache``), when these reads go on from them: its commits
    #: are not read again, the others are read through it
    _cache: LogCache | None = None

    def __post_init__(self) -> None:
        # On a store the listing's sizes let a small checkpoint be read in one request, once (``log_files``).
        self.storage = small_log_files(self.storage)

    @classmethod
    def over(cls, cache: LogCache, *, keep_actions: bool = False) -> LogReads:
        """The reads that go on from a snapshot's load: its listing (with each commit's modification time, which
        a store's listing gave: ``LogCache.stamps``), its checkpoint files and commits, none read again."""
        mtimes = {v: stamp[0] for v, stamp in cache.stamps.items()}
        return cls(cache.files, cache.root, keep_actions, _listing=cache.listing, _mtimes=mtimes, _cache=cache)

    def _read(self, version: int) -> bytes:
        if self._cache is not None:
            return self._cache.read(version)
        return self.storage.read_bytes(commit_path(self.root, version))

    def listing(self) -> LogListing:
        """The log's commits and checkpoints, from one listing that also gives each commit's modification
        time (``commit_ict``, VACUUM's retention cut: no second listing, a full scan of the bucket on some servers)."""
        if self._listing is None:
            files, folders = self.storage.list_top(join(self.root, LOG_DIR), lambda name: False)
            log_dir = join(self.root, LOG_DIR)
            for f in files:
                if (m := _COMMIT_RE.match(f.path)) is not None:
                    self._mtimes[int(m.group(1))] = f.mtime_ms
                if isinstance(self.storage, SmallLogFiles) and not f.is_dir:
                    self.storage.sizes[join(log_dir, f.path)] = f.size
            self._listing = log_listing([*(f.path for f in files if not f.is_dir), *folders], self.root)
        return self._listing

    def commit_mtimes(self) -> dict[int, int]:
        """Each listed commit's modification time (ms)."""
        self.listing()
        return self._mtimes

    def commit(self, version: int, *, keep: bool = True) -> bytes:
        """A commit's bytes (kept for ``actions`` unless ``keep`` is off: a read of many commits)."""
        data = self._bytes.get(version)
        if data is None:
            data = self._read(version)
            if keep:
                self._bytes[version] = data
        return data

    def actions(self, version: int) -> list[dict[str, Any]]:
        """A commit's actions (``parse_commit``: a damaged line is a CorruptLogError naming it); its bytes are
        let go once parsed."""
        found = self._actions.get(version)
        if found is not None:
            return found
        data = self._bytes.pop(version, None)
        if data is None:
            data = self._read(version)
        parsed = parse_commit(data, self.root, version)
        if self.keep_actions:
            self._actions[version] = parsed
        return parsed


def _key(path: str) -> str:
    return unquote(path) if "%" in path else path


def _replay(
    reads: LogReads,
    version: int,
    on_commit: Callable[[list[dict[str, Any]]], None],
    on_checkpoint_add: Callable[[Mapping[str, Any]], None] | None = None,
) -> list[LogFile]:
    """The tombstones at ``version``: the newest checkpoint's (its adds, if asked, to ``on_checkpoint_add``),
    then each commit's after it (its actions, in order, to ``on_commit``)."""
    storage, root, listing = reads.storage, reads.root, reads.listing()
    dead: list[LogFile] = []
    cp = listing.checkpoint_at_or_before(version)
    if cp is not None:
        names = listing.checkpoints[cp]
        dead.extend(_log_file(r, deletion=True) for r in _checkpoint_actions(storage, root, names, "remove"))
        if on_checkpoint_add is not None:
            for a in _checkpoint_actions(storage, root, names, "add"):
                on_checkpoint_add(a)
    present = set(listing.commits)
    versions = [v for v in range(cp + 1 if cp is not None else 0, version + 1) if v in present]
    for actions in in_order(reads.actions, versions, threads=read_threads(storage)):  # replayed in order
        dead.extend(_log_file(a["remove"], deletion=True) for a in actions if "remove" in a)
        on_commit(actions)
    return dead


def read_state(reads: LogReads, version: int) -> tuple[list[LogFile], list[LogFile]]:
    """(live files, tombstones) at ``version``, replayed from the newest checkpoint and the commits after it.

    Within a commit removes apply before adds, so a DELETE that swaps a file's deletion vector (an add of the
    path with its new DV and a remove with its old one) leaves the file live. Every remove is kept as a
    tombstone, even one a later add undid: that path is live then, and more tombstones only keep more files.
    Adds stay the log's dicts until the end: most of a compaction's adds are removed by a later commit.
    """
    live: dict[str, Mapping[str, Any]] = {}

    def add(a: Mapping[str, Any]) -> None:
        live[_key(str(a["path"]))] = a

    def apply(actions: list[dict[str, Any]]) -> None:
        for action in actions:
            if "remove" in action:
                live.pop(_key(str(action["remove"]["path"])), None)
        for action in actions:
            if "add" in action and "remove" not in action:
                add(action["add"])

    dead = _replay(reads, version, apply, add)
    return [_log_file(a, deletion=False) for a in live.values()], dead


def read_tombstones(reads: LogReads, version: int) -> list[LogFile]:
    """Every remove at ``version`` (the checkpoint's and the commits' after it), without the live files:
    what a report needs first, as most tables have no expired tombstone to check against the live set.
    Kept on ``reads`` (a report's VACUUM estimate and its trends read them once); the list must not be changed."""
    found = reads._tombstones.get(version)
    if found is None:
        found = reads._tombstones[version] = _replay(reads, version, lambda _actions: None)
    return found


def range_files(reads: LogReads, start: int, end: int) -> list[LogFile]:
    """Lite mode's input: the removes (with their deletion time) and change data files of commits start..end."""

    def actions(v: int) -> list[dict[str, Any]]:
        try:
            return reads.actions(v)
        except FileNotFoundError:
            return read_commit(reads.storage, reads.root, v)  # raises the typed error naming the version

    out: list[LogFile] = []
    for found in in_order(actions, range(start, end + 1), threads=read_threads(reads.storage)):  # in order
        for action in found:
            if "remove" in action:
                out.append(_log_file(action["remove"], deletion=True))
            elif "cdc" in action:
                out.append(_log_file(action["cdc"], deletion=False))
    return out


def _commit_if_any(storage: Storage, root: str, version: int) -> list[dict[str, Any]] | None:
    """A commit's actions, or None when it is not there (one GET: no HEAD and folder listing first)."""
    try:
        data = storage.read_bytes(commit_path(root, version))
    except FileNotFoundError:
        return None
    return parse_commit(data, root, version)


def added_since(storage: Storage, root: str, version: int) -> tuple[set[str], set[str]]:
    """(paths, DV paths) that commits after ``version`` added: what a concurrent writer made live again."""
    paths: set[str] = set()
    dvs: set[str] = set()
    v = version + 1
    while (actions := _commit_if_any(storage, root, v)) is not None:
        for action in actions:
            add = action.get("add") or action.get("remove")
            if add is None:
                continue
            if "add" in action:
                paths.add(str(add["path"]))
            dv = dv_relative_path(add.get("deletionVector"))
            if dv is not None:
                dvs.add(dv)
        v += 1
    return paths, dvs


def commit_ict(reads: LogReads, version: int) -> int:
    """A commit's in-commit timestamp (its first line, the commitInfo the protocol puts first; the whole
    commit when that line is not it), else the file's modification time (as DeltaHistoryManager)."""
    data = reads.commit(version, keep=False)
    first = data.split(b"\n", 1)[0]
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    found = in_commit_timestamp([head]) if isinstance(head, dict) else None
    if found is None:
        found = in_commit_timestamp(parse_commit(data, reads.root, version))
    return found if found is not None else reads.commit_mtimes().get(version, 0)


def read_last_vacuum(storage: Storage, root: str) -> int | None:
    """``latestCommitVersionOutsideOfRetentionWindow`` of the last vacuum (None: none recorded, or unreadable)."""
    try:
        data = json.loads(storage.read_bytes(join(root, LOG_DIR, LAST_VACUUM_INFO)))
    except (FileNotFoundError, ValueError):
        return None
    value = data.get("latestCommitVersionOutsideOfRetentionWindow") if isinstance(data, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def write_last_vacuum(storage: Storage, root: str, version: int) -> None:
    """Record where the next lite run starts (delta-spark's format, so its VACUUM LITE reads it too)."""
    payload = json.dumps({"latestCommitVersionOutsideOfRetentionWindow": version}).encode()
    storage.write_bytes(join(root, LOG_DIR, LAST_VACUUM_INFO), payload)
