"""Reading the ``_delta_log`` folder through a Storage: listing, commits, raw add actions.

deltalake does the log replay (which files are live); this module reads what replay does not
expose (one commit's raw actions, each live file's exact add action) and diagnoses a log that
replay refused, so the user gets a typed error that names the version instead of a library message.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import unquote

from ..errors import CorruptLogError, NotADeltaTableError, TableNotFoundError
from .actions import ADD, DOMAIN_METADATA, METADATA, PROTOCOL, DomainMetadata, loads
from .checkpoint_v2 import checkpoint_files, choose_checkpoint
from .file_info import Listed
from .log_files import SmallLogFiles, small_log_files
from .storage import LocalStorage, Storage, join

__all__ = [
    "LOG_DIR",
    "READ_THREADS",
    "LogCache",
    "LogListing",
    "commit_bytes",
    "commit_path",
    "diagnose",
    "in_order",
    "latest_version",
    "list_log",
    "log_listing",
    "parse_commit",
    "raw_adds",
    "read_commit",
    "read_commit_bytes",
    "read_commits",
    "read_domains",
    "read_threads",
]

T = TypeVar("T")
R = TypeVar("R")

#: Log reads in flight at once: on an object store each is a round trip, so a range of commits read one
#: after another costs one round trip per commit; 16 at a time cover a 20-50 ms round trip.
READ_THREADS = 16

LOG_DIR = "_delta_log"
_COMMIT_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet$")
_V2_CHECKPOINT_RE = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)$")


@dataclass(frozen=True)
class LogListing:
    """The commit versions and checkpoint files found in one listing of the log folder."""

    commits: tuple[int, ...]
    checkpoints: dict[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def latest(self) -> int:
        return max(self.commits[-1] if self.commits else -1, max(self.checkpoints, default=-1))

    def checkpoint_at_or_before(self, version: int) -> int | None:
        return max((v for v in self.checkpoints if v <= version), default=None)


@dataclass
class LogCache:
    """What one load of a snapshot read of the log, for the later readers of the same run: the listing, and
    the commits' bytes (a commit never changes once written; on an object store every read is a round trip),
    kept up to ``budget`` bytes in all."""

    storage: Storage
    root: str
    listing: LogListing
    #: ``storage`` for the log's checkpoint files: on a store the small ones are read whole, once (``log_files``)
    files: Storage
    budget: int = 64 << 20
    commits: dict[int, bytes] = field(default_factory=dict, repr=False)
    #: each listed commit's (modification time in ms, size, entity tag) where the listing gave them (a store's):
    #: ``advanced`` tells by it that the log it lists on from is the one listed here, not a table made anew
    stamps: dict[int, tuple[int, int, str | None]] = field(default_factory=dict, repr=False)
    #: the listing's files (name -> size and modification time) and folders under ``_delta_log``, and the log
    #: files this run wrote or read since (``note``): what expired log cleanup plans from, without listing
    #: again. None when the listing gave names only (a local table: listing it again costs nothing).
    entries: dict[str, Listed] | None = field(default=None, repr=False)
    folders: tuple[str, ...] = ()
    _reading: dict[int, Future[bytes]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: each commit's parsed actions while ``parsing`` is on (None: off)
    _parsed: dict[int, list[dict[str, Any]]] | None = field(default=None, repr=False)

    @classmethod
    def listed(cls, storage: Storage, root: str) -> LogCache:
        """The log listed once: on a store with each file's size, so a small checkpoint is read in one request."""
        files = small_log_files(storage)
        if not isinstance(files, SmallLogFiles):
            return cls(storage, root, list_log(storage, root), files)
        log_dir = join(root, LOG_DIR)
        found, folders = storage.list_top(log_dir, lambda name: False)
        listing = log_listing([*(f.path for f in found if not f.is_dir), *folders], root)
        files.sizes.update({join(log_dir, f.path): f.size for f in found if not f.is_dir})
        entries = {f.path: f for f in found if not f.is_dir}
        return cls(storage, root, listing, files, stamps=_stamps(found), entries=entries, folders=tuple(folders))

    def advanced(self, storage: Storage | None = None) -> LogCache | None:
        """This log moved on to its latest version by one listing that starts at its last commit (S3's
        ``start-after``): the new commits are listed, the commits and checkpoint files read so far are kept
        (read through ``storage``, e.g. a view with a request counter of its own). None when it cannot be moved
        on: the listing gave no modification times (a local log), the last commit is not there as it was listed
        (the table made anew, the log cleaned up), or the new commits have a gap: then load it anew."""
        latest = self.listing.latest
        if latest not in self.stamps or not self.listing.commits or self.listing.commits[-1] != latest:
            return None
        storage = storage if storage is not None else self.storage
        after = f"{latest - 1:020d}.json" if latest > 0 else ""  # the last commit itself is listed again
        found = storage.list_after(join(self.root, LOG_DIR), after, below="_")
        stamps = _stamps(found)
        if stamps.get(latest) != self.stamps[latest]:
            return None
        new = sorted(v for v in stamps if v > latest)
        if new != list(range(latest + 1, latest + 1 + len(new))):
            return None
        files = self.files.over(storage) if isinstance(self.files, SmallLogFiles) else storage
        listing = LogListing((*self.listing.commits, *new), dict(self.listing.checkpoints))
        with self._lock:
            kept = dict(self.commits)
        return LogCache(storage, self.root, listing, files, self.budget, kept, stamps={**self.stamps, **stamps})

    def note(self, name: str, data: bytes | int, *, version: int | None = None) -> None:
        """A file this run wrote (or a winner's commit it read) under ``_delta_log``: its size, modified now; a
        commit's bytes (``version``) are kept too, as it never changes."""
        size = data if isinstance(data, int) else len(data)
        if version is not None and not isinstance(data, int) and version not in self.commits and size <= self.budget:
            self.commits[version] = data
            self.budget -= size
        if self.entries is not None:
            self.entries[name] = Listed(name, size, int(time.time() * 1000))

    def forget(self, names: Iterable[str]) -> None:
        """Log files deleted since the listing (expired log cleanup)."""
        if self.entries is not None:
            for name in names:
                self.entries.pop(name, None)

    def read(self, version: int) -> bytes:
        """One commit's bytes: kept, or read (a missing one is a TableNotFoundError naming it) and kept. A read
        already in flight on another thread is waited for, not made twice."""
        data = self.commits.get(version)
        if data is not None:
            return data
        with self._lock:
            running = self._reading.get(version)
            if running is None:
                mine: Future[bytes] = Future()
                self._reading[version] = mine
        if running is not None:
            return running.result()
        try:
            data = read_commit_bytes(self.storage, self.root, version)
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        else:
            if len(data) <= self.budget:
                self.commits[version] = data
                self.budget -= len(data)
            mine.set_result(data)
            return data
        finally:
            with self._lock:
                self._reading.pop(version, None)

    @contextmanager
    def parsing(self) -> Iterator[None]:
        """Keep each commit's parsed actions (``parsed``) until the block ends: a snapshot's load reads the
        protocol and metadata, then the adds, from the same commits, and should parse them once."""
        self._parsed = {}
        try:
            yield
        finally:
            self._parsed = None

    def parsed(self, version: int, data: bytes) -> list[dict[str, Any]]:
        """``parse_commit`` of a commit's bytes, parsed once while ``parsing`` is on (its actions are not changed
        by their readers)."""
        memo = self._parsed
        if memo is None:
            return parse_commit(data, self.root, version)
        found = memo.get(version)
        if found is None:
            found = memo[version] = parse_commit(data, self.root, version)
        return found

    def commit_bytes(self, versions: Sequence[int]) -> Iterator[tuple[int, bytes]]:
        """(version, bytes) in order, the ones not kept read concurrently (``in_order``)."""
        return zip(versions, in_order(self.read, versions, threads=read_threads(self.storage)))


def _stamps(found: Iterable[Listed]) -> dict[int, tuple[int, int, str | None]]:
    """Commit version -> (modification time in ms, size, entity tag) of the commits among listed files."""
    return {
        int(m.group(1)): (f.mtime_ms, f.size, f.etag) for f in found if not f.is_dir and (m := _COMMIT_RE.match(f.path))
    }


def commit_path(root: str, version: int) -> str:
    return join(root, LOG_DIR, f"{version:020d}.json")


def list_log(storage: Storage, root: str) -> LogListing:
    """Commits and checkpoints in the log folder (sorted); raises if the table has no log."""
    return log_listing(storage.list_dir(join(root, LOG_DIR)), root)


def log_listing(names: Iterable[str], root: str) -> LogListing:
    """The commits and checkpoints among the names in a log folder (``list_log`` from a listing at hand)."""
    commits: list[int] = []
    checkpoints: dict[int, list[str]] = {}
    for name in names:
        if m := _COMMIT_RE.match(name):
            commits.append(int(m.group(1)))
        elif (m := _CHECKPOINT_RE.match(name)) or (m := _V2_CHECKPOINT_RE.match(name)):
            checkpoints.setdefault(int(m.group(1)), []).append(name)
    if not commits and not checkpoints:
        raise NotADeltaTableError(
            f"'{root}' has an empty _delta_log (no commits): it is not a Delta table yet. "
            "Only Delta tables can be optimized (file_format: delta in dbt)."
        )
    return LogListing(tuple(sorted(commits)), {v: tuple(sorted(n)) for v, n in checkpoints.items()})


def latest_version(storage: Storage, root: str) -> int:
    """Newest committed version, found by listing the log (no replay)."""
    return list_log(storage, root).latest


def parse_commit(data: bytes, root: str, version: int) -> list[dict[str, Any]]:
    """A commit's actions: parsed as one JSON array (one call, not one per line: a 10,000-action commit
    parses in half the time; its lines joined without splitting them first, then without blank lines), and
    line by line only when that fails, for the error naming the line."""
    body = data.strip()
    try:
        parsed = loads(b"[" + body.replace(b"\n", b",") + b"]")
        count = body.count(b"\n") + 1
    except ValueError:  # blank lines leave empty elements: join the non-blank ones
        lines = [line for line in data.splitlines() if line.strip()]
        try:
            parsed, count = loads(b"[" + b",".join(lines) + b"]"), len(lines)
        except ValueError:
            parsed = None
    if parsed is not None and len(parsed) == count and all(isinstance(a, dict) for a in parsed):
        return cast("list[dict[str, Any]]", parsed)
    return _parse_each(data, root, version)


def _parse_each(data: bytes, root: str, version: int) -> list[dict[str, Any]]:
    actions: list[dict[str, Any]] = []
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as exc:
            raise CorruptLogError(
                f"Version {version} of '{root}' is corrupt: line {n} of {version:020d}.json is not valid JSON "
                f"({exc}). Restore the file from a backup, or RESTORE the table to an earlier version.",
                version=version,
            ) from exc
        if not isinstance(action, dict):
            raise CorruptLogError(
                f"Version {version} of '{root}' is corrupt: line {n} of {version:020d}.json is not a JSON object.",
                version=version,
            )
        actions.append(action)
    return actions


def in_order(fn: Callable[[T], R], items: Sequence[T], *, threads: int = READ_THREADS) -> Iterator[R]:
    """``fn`` of each item, yielded in the items' order, with up to ``threads`` calls in flight (a range of
    log files read concurrently, each still handled in version order). A failure is raised when its item's
    turn comes; the calls not started yet are dropped and the pool is joined on the way out."""
    if len(items) < 2 or threads <= 1:
        yield from map(fn, items)
        return
    window = 2 * threads  # submitted ahead: results wait in order, a bounded few in memory
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="ddo-log-read") as pool:
        pending: deque[Future[R]] = deque(pool.submit(fn, item) for item in items[:window])
        at = len(pending)
        try:
            while pending:
                result = pending.popleft().result()
                if at < len(items):
                    pending.append(pool.submit(fn, items[at]))
                    at += 1
                yield result
        finally:
            for future in pending:
                future.cancel()


def read_threads(storage: Storage) -> int:
    """Reads in flight for ``in_order`` on ``storage``: one locally (a local read costs no round trip, and a
    thread per read would cost more than it saves), ``READ_THREADS`` on an object store."""
    return 1 if isinstance(storage, LocalStorage) else READ_THREADS


def read_commit_bytes(storage: Storage, root: str, version: int) -> bytes:
    """One commit file's bytes; a missing one is a TableNotFoundError naming the version."""
    try:
        return storage.read_bytes(commit_path(root, version))
    except FileNotFoundError as exc:
        raise TableNotFoundError(
            f"Version {version} of '{root}' is not in the log (it may have been cleaned up by log retention)."
        ) from exc


def read_commit(storage: Storage, root: str, version: int) -> list[dict[str, Any]]:
    """The raw actions of one committed version, in file order."""
    return parse_commit(read_commit_bytes(storage, root, version), root, version)


def commit_bytes(storage: Storage, root: str, versions: Sequence[int]) -> Iterator[tuple[int, bytes]]:
    """(version, bytes) of some commits in their order, read concurrently (``in_order``)."""
    return zip(
        versions, in_order(lambda v: read_commit_bytes(storage, root, v), versions, threads=read_threads(storage))
    )


def read_commits(storage: Storage, root: str, start: int, end: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """Raw actions of versions start..end inclusive (read concurrently, parsed in order)."""
    return [(v, parse_commit(data, root, v)) for v, data in commit_bytes(storage, root, range(start, end + 1))]


def _map_to_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    return dict(value)  # pyarrow maps arrive as [(key, value), ...]


def _add_row(row: dict[str, Any]) -> dict[str, Any]:
    row = {k: v for k, v in row.items() if v is not None}
    row["partitionValues"] = _map_to_dict(row.get("partitionValues"))
    if "tags" in row:
        row["tags"] = _map_to_dict(row["tags"])
    return row


def _checkpoint_adds(storage: Storage, root: str, names: Iterable[str]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Adds of one checkpoint: classic parts, or a V2 checkpoint's top-level file and sidecars."""
    import pyarrow.parquet as pq

    names = tuple(names)
    version = int(names[0][:20])
    where = checkpoint_files(storage, root, names)
    adds: dict[str, tuple[int, dict[str, Any]]] = {}
    for path in where.parquet:
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            if ADD not in pf.schema_arrow.names:
                continue
            table = pf.read(columns=[ADD])
        for row in table.column(ADD).to_pylist():
            if row is not None:
                row = _add_row(row)
                adds[unquote(row["path"])] = (version, row)
    for action in where.json_actions:
        if ADD in action:
            adds[unquote(action[ADD]["path"])] = (version, action[ADD])
    return adds


def raw_adds(storage: Storage, root: str, version: int, listing: LogListing) -> dict[str, tuple[int, dict[str, Any]]]:
    """Last add action per decoded path, with the version that wrote it, up to ``version``.

    Liveness is *not* decided here (deltalake did that); this is a lookup of each live file's raw
    action, from the newest checkpoint at or before ``version`` and the commits after it.
    """
    cp = listing.checkpoint_at_or_before(version)
    adds = _checkpoint_adds(storage, root, listing.checkpoints[cp]) if cp is not None else {}
    start = cp + 1 if cp is not None else 0
    present = set(listing.commits)
    versions = [v for v in range(start, version + 1) if v in present]
    read = lambda v: storage.read_bytes(commit_path(root, v))  # noqa: E731
    for v, data in zip(versions, in_order(read, versions, threads=read_threads(storage))):
        for line in data.splitlines():
            if b'"add"' not in line:
                continue
            action = json.loads(line)
            if ADD in action:
                adds[unquote(action[ADD]["path"])] = (v, action[ADD])
    return adds


def _checkpoint_domains(storage: Storage, root: str, names: Iterable[str]) -> list[dict[str, Any]]:
    """domainMetadata rows of a checkpoint: classic or V2 Parquet (a column), or V2 JSON (lines)."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for name in choose_checkpoint(names):
        path = join(root, LOG_DIR, name)
        if name.endswith(".json"):
            for line in storage.read_bytes(path).splitlines():
                if line.strip() and b'"domainMetadata"' in line:
                    rows.append(json.loads(line)[DOMAIN_METADATA])
            continue
        with storage.open_input(path) as fh:
            pf = pq.ParquetFile(fh)
            if DOMAIN_METADATA not in pf.schema_arrow.names:
                continue
            rows.extend(r for r in pf.read(columns=[DOMAIN_METADATA]).column(0).to_pylist() if r is not None)
    return rows


def read_domains(
    storage: Storage, root: str, version: int, listing: LogListing, *, read: Callable[[int], bytes] | None = None
) -> dict[str, DomainMetadata]:
    """Live domain metadata at ``version``: the newest action per domain, tombstones dropped (``read``: a
    commit's bytes, from a ``LogCache``)."""
    cp = listing.checkpoint_at_or_before(version)
    found: dict[str, DomainMetadata] = {}
    if cp is not None:
        for row in _checkpoint_domains(storage, root, listing.checkpoints[cp]):
            dm = DomainMetadata.from_json(row)
            found[dm.domain] = dm
    present = set(listing.commits)
    versions = [v for v in range((cp + 1) if cp is not None else 0, version + 1) if v in present]
    reader = read if read is not None else (lambda v: storage.read_bytes(commit_path(root, v)))
    for data in in_order(reader, versions, threads=read_threads(storage)):
        for line in data.splitlines():
            if b'"domainMetadata"' not in line:
                continue
            action = json.loads(line)
            if DOMAIN_METADATA in action:
                dm = DomainMetadata.from_json(action[DOMAIN_METADATA])
                found[dm.domain] = dm
    return {name: dm for name, dm in found.items() if not dm.removed}


def _gap(listing: LogListing, version: int | None) -> str | None:
    end = listing.latest if version is None else version
    cp = listing.checkpoint_at_or_before(end)
    start = cp + 1 if cp is not None else 0
    missing = sorted(set(range(start, end + 1)) - set(listing.commits))
    if not missing:
        return None
    return f"versions are not contiguous: commit {missing[0]} is missing (expected {start}..{end})"


def _protocol_problem(protocol: Any) -> str | None:
    if not isinstance(protocol, dict):
        return "the protocol action is not an object"
    reader, writer = protocol.get("minReaderVersion"), protocol.get("minWriterVersion")
    if not isinstance(reader, int) or not isinstance(writer, int):
        return f"invalid protocol (minReaderVersion={reader!r}, minWriterVersion={writer!r})"
    return None


def _find_protocol_and_metadata(
    storage: Storage, root: str, versions: Iterable[int]
) -> tuple[dict[str, Any] | None, bool, int | None]:
    protocol: dict[str, Any] | None = None
    protocol_version: int | None = None
    has_metadata = False
    for v in sorted(versions, reverse=True):
        for action in read_commit(storage, root, v):
            if PROTOCOL in action and protocol is None:
                protocol, protocol_version = action[PROTOCOL], v
            has_metadata = has_metadata or METADATA in action
        if protocol is not None and has_metadata:
            break
    return protocol, has_metadata, protocol_version


def diagnose(storage: Storage, root: str, version: int | None = None) -> CorruptLogError | None:
    """Why replay of this log fails, as a typed error naming the version (None when nothing is found).

    Called only after deltalake refused the log, so its cost does not matter: it lists the log,
    parses every commit since the last checkpoint and looks for the protocol and metadata.
    """
    listing = list_log(storage, root)
    gap = _gap(listing, version)
    if gap:
        return CorruptLogError(f"The log of '{root}' is corrupt: {gap}. Restore the missing commit file.")
    end = listing.latest if version is None else version
    cp = listing.checkpoint_at_or_before(end)
    commits = [v for v in listing.commits if (cp is None or v > cp) and v <= end]
    try:
        protocol, has_metadata, at = _find_protocol_and_metadata(storage, root, commits)
    except CorruptLogError as exc:
        return exc
    if cp is not None:
        return None  # protocol and metadata may be in the checkpoint: nothing more to say cheaply
    if protocol is None:
        return CorruptLogError(f"The log of '{root}' is corrupt: no protocol action in any commit.", version=0)
    if not has_metadata:
        return CorruptLogError(f"The log of '{root}' is corrupt: no metadata (metaData) action in any commit.")
    problem = _protocol_problem(protocol)
    if problem:
        return CorruptLogError(f"The log of '{root}' is corrupt at version {at}: {problem}.", version=at)
    return None
