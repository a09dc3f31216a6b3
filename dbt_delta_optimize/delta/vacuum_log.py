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
    read_commit_bytes,
    read_threads,
)
from .log_files import SmallLogFiles, small_log_files
from .storage import Storage, join

__all__ = [
    "LAST_VACUUM_INFO",
    "LogFile",
    "LogFiles",
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


@dataclass
class LogFiles:
    """Files the log names, as columns: one list per field and no object per file (a compaction's 10,000
    tombstones cost a few list comprehensions, not 10,000 ``LogFile`` objects). ``dvs`` holds only the rows
    that carry a deletion vector: row -> (its relative file or None, its bytes). Iterating gives ``LogFile``
    objects (for callers that want them); built by the replay, read-only afterwards."""

    paths: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    deletion_timestamps: list[int] = field(default_factory=list)
    dvs: dict[int, tuple[str | None, int]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.paths)

    def __iter__(self) -> Iterator[LogFile]:
        dvs = self.dvs
        for i, (path, size, ts) in enumerate(zip(self.paths, self.sizes, self.deletion_timestamps)):
            dv = dvs.get(i)
            yield LogFile(path, size, ts) if dv is None else LogFile(path, size, ts, dv[0], dv[1])

    def extend(self, rows: list[Mapping[str, Any]], *, deletion: bool | list[bool]) -> None:
        """Append actions' ``add``/``remove``/``cdc`` objects (``deletion``: whose time is a deletion time)."""
        start = len(self.paths)
        self.paths.extend([str(r["path"]) for r in rows])
        self.sizes.extend([int(r.get("size") or 0) for r in rows])
        if deletion is True:
            self.deletion_timestamps.extend([int(r.get("deletionTimestamp") or 0) for r in rows])
        elif deletion is False:
            self.deletion_timestamps.extend([0] * len(rows))
        else:
            self.deletion_timestamps.extend(
                [int(r.get("deletionTimestamp") or 0) if d else 0 for r, d in zip(rows, deletion)]
            )
        self.add_dvs(start, [r.get("deletionVector") for r in rows])

    def add_dvs(self, start: int, dvs: list[Any]) -> None:
        """The deletion vectors of rows ``start..`` (most are None: one pass in C to find none)."""
        if dvs.count(None) == len(dvs):
            return
        for i, dv in enumerate(dvs, start):
            if dv:
                self.dvs[i] = (dv_relative_path(dv), int(dv.get("sizeInBytes") or 0))


def live_files(adds: Any) -> Iterator[LogFile]:
    """The live files of a snapshot's FileTable adds column (a pyarrow StructArray): path and DV."""
    paths = adds.field("path").to_pylist()
    names = [f.name for f in adds.type]
    dvs = adds.field("deletionVector").to_pylist() if "deletionVector" in names else [None] * len(paths)
    for path, dv in zip(paths, dvs):
        yield LogFile(path, 0, 0, dv_relative_path(dv))


#: A checkpoint's fields VACUUM reads, of its ``add`` and ``remove`` columns.
_CHECKPOINT_FIELDS = ("path", "size", "deletionTimestamp", "deletionVector")


def _checkpoint_columns(storage: Storage, root: str, names: Iterable[str], kind: str) -> dict[str, list[Any]]:
    """A checkpoint's ``add`` or ``remove`` actions as columns (path, size, deletion time, DV: only these
    are read, and each as one list from Arrow, not one dict per row); rows without a path are left out."""
    import pyarrow.parquet as pq

    where = checkpoint_files(storage, root, names)
    out: dict[str, list[Any]] = {f: [] for f in _CHECKPOINT_FIELDS}
    for path in where.parquet:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            if kind not in pf.schema_arrow.names:
                continue
            present = pf.schema_arrow.field(kind).type
            columns = [f"{kind}.{f}" for f in _CHECKPOINT_FIELDS if present.get_field_index(f) >= 0]
            table = pf.read(columns=columns)
        for chunk in table.column(kind).chunks:
            # flatten() applies the struct's own validity to its fields: a row that is not this kind reads None
            fields = dict(zip((f.name for f in chunk.type), chunk.flatten()))
            paths = fields["path"].to_pylist() if "path" in fields else [None] * len(chunk)
            keep = [i for i, p in enumerate(paths) if p is not None]
            for name in _CHECKPOINT_FIELDS:
                if name not in fields:
                    out[name].extend([None] * len(keep))
                    continue
                values = paths if name == "path" else fields[name].to_pylist()
                out[name].extend(values if len(keep) == len(values) else [values[i] for i in keep])
    rows = [action[kind] for action in where.json_actions if kind in action]
    for name in _CHECKPOINT_FIELDS:  # an action without a path is a KeyError: the log is refused, as before
        out[name].extend([r[name] if name == "path" else r.get(name) for r in rows])
    return out


def _checkpoint_files(storage: Storage, root: str, names: Iterable[str], kind: str, *, deletion: bool) -> LogFiles:
    """A checkpoint's ``add`` or ``remove`` files as ``LogFiles``."""
    cols = _checkpoint_columns(storage, root, names, kind)
    files = LogFiles(
        [str(p) for p in cols["path"]],
        [int(s or 0) for s in cols["size"]],
        [int(t or 0) for t in cols["deletionTimestamp"]] if deletion else [0] * len(cols["path"]),
    )
    files.add_dvs(0, cols["deletionVector"])
    return files


def parse_actions(data: bytes, root: str, version: int) -> list[dict[str, Any]]:
    """A commit's actions, parsed by orjson (a C codec: a 10,000-action compaction in a third of the standard
    library's time) as one JSON array; anything it does not take as plain objects, one a line, goes through
    ``parse_commit`` (the standard library's reading, and the typed error naming a damaged line)."""
    import orjson

    body = data.strip()
    try:
        parsed = orjson.loads(b"[" + body.replace(b"\n", b",") + b"]") if body else []
    except orjson.JSONDecodeError:
        return parse_commit(data, root, version)
    if len(parsed) != (body.count(b"\n") + 1 if body else 0) or not all(type(a) is dict for a in parsed):
        return parse_commit(data, root, version)
    return parsed


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
    _tombstones: dict[int, LogFiles] = field(default_factory=dict)
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
        """A commit's actions (``parse_actions``: a damaged line is a CorruptLogError naming it); its bytes are
        let go once parsed."""
        found = self._actions.get(version)
        if found is not None:
            return found
        data = self._bytes.pop(version, None)
        if data is None:
            data = self._read(version)
        parsed = parse_actions(data, self.root, version)
        if self.keep_actions:
            self._actions[version] = parsed
        return parsed


def _key(path: str) -> str:
    return unquote(path) if "%" in path else path


def _replay(
    reads: LogReads,
    version: int,
    on_commit: Callable[[list[dict[str, Any]]], None],
    on_checkpoint_adds: Callable[[LogFiles], None] | None = None,
) -> LogFiles:
    """The tombstones at ``version``: the newest checkpoint's (its adds, if asked, to ``on_checkpoint_adds``),
    then each commit's after it (its actions, in order, to ``on_commit``)."""
    storage, root, listing = reads.storage, reads.root, reads.listing()
    dead = LogFiles()
    cp = listing.checkpoint_at_or_before(version)
    if cp is not None:
        names = listing.checkpoints[cp]
        dead = _checkpoint_files(storage, root, names, "remove", deletion=True)
        if on_checkpoint_adds is not None:
            on_checkpoint_adds(_checkpoint_files(storage, root, names, "add", deletion=False))
    present = set(listing.commits)
    versions = [v for v in range(cp + 1 if cp is not None else 0, version + 1) if v in present]
    for actions in in_order(reads.actions, versions, threads=read_threads(storage)):  # replayed in order
        removes = [a["remove"] for a in actions if "remove" in a]
        if removes:
            dead.extend(removes, deletion=True)
        on_commit(actions)
    return dead


def _keys(paths: list[str]) -> list[str]:
    """The live set's keys: paths decoded (the log may encode a path one way in an add, another in its remove)."""
    return [unquote(p) if "%" in p else p for p in paths]


def read_state(reads: LogReads, version: int) -> tuple[LogFiles, LogFiles]:
    """(live files, tombstones) at ``version``, replayed from the newest checkpoint and the commits after it.

    Within a commit removes apply before adds, so a DELETE that swaps a file's deletion vector (an add of the
    path with its new DV and a remove with its old one) leaves the file live. Every remove is kept as a
    tombstone, even one a later add undid: that path is live then, and more tombstones only keep more files.
    The live set is a dict of decoded path -> the add (the log's object, or a checkpoint row's index): most
    of a compaction's adds are removed by a later commit, so nothing more is made of them until the end.
    """
    live: dict[str, Any] = {}
    checkpoint = LogFiles()

    def from_checkpoint(adds: LogFiles) -> None:
        nonlocal checkpoint
        checkpoint = adds
        live.update(zip(_keys(adds.paths), range(len(adds))))

    def apply(actions: list[dict[str, Any]]) -> None:
        removed = [str(a["remove"]["path"]) for a in actions if "remove" in a]
        for key in _keys(removed):
            live.pop(key, None)
        adds = [a["add"] for a in actions if "add" in a and "remove" not in a]
        if adds:
            live.update(zip(_keys([str(a["path"]) for a in adds]), adds))

    dead = _replay(reads, version, apply, from_checkpoint)
    out = LogFiles()
    out.extend([r for r in live.values() if type(r) is not int], deletion=False)
    if checkpoint.paths:  # a checkpoint row is its index in ``checkpoint``: those still live, copied over
        for i in (r for r in live.values() if type(r) is int):
            dv = checkpoint.dvs.get(i)
            if dv is not None:
                out.dvs[len(out.paths)] = dv
            out.paths.append(checkpoint.paths[i])
            out.sizes.append(checkpoint.sizes[i])
            out.deletion_timestamps.append(0)
    return out, dead


def read_tombstones(reads: LogReads, version: int) -> LogFiles:
    """Every remove at ``version`` (the checkpoint's and the commits' after it), without the live files:
    what a report needs first, as most tables have no expired tombstone to check against the live set.
    Kept on ``reads`` (a report's VACUUM estimate and its trends read them once); it must not be changed."""
    found = reads._tombstones.get(version)
    if found is None:
        found = reads._tombstones[version] = _replay(reads, version, lambda _actions: None)
    return found


def range_files(reads: LogReads, start: int, end: int) -> LogFiles:
    """Lite mode's input: the removes (with their deletion time) and change data files of commits start..end."""

    def actions(v: int) -> list[dict[str, Any]]:
        try:
            return reads.actions(v)
        except FileNotFoundError:  # the typed error naming the version
            return parse_actions(read_commit_bytes(reads.storage, reads.root, v), reads.root, v)

    out = LogFiles()
    for found in in_order(actions, range(start, end + 1), threads=read_threads(reads.storage)):  # in order
        picked = [a for a in found if "remove" in a or "cdc" in a]
        if picked:
            flags = ["remove" in a for a in picked]
            out.extend([a["remove"] if d else a["cdc"] for a, d in zip(picked, flags)], deletion=flags)
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
