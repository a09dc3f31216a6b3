"""The Delta-native commit writer: optimistic concurrency over put-if-absent.

A transaction reads snapshot N, tracks the files it read, and tries to write N+1. If another
writer won that version, the winners' actions are checked against what we read; commits that
only appended files are rebased onto (snapshot isolation, as delta-spark does for
dataChange=false rewrites) and anything that removed a file we read, or changed metadata or
protocol, is a typed conflict with nothing of ours written.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

from .._version import __version__
from ..errors import (
    CommitFailedError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    InvalidConfigError,
    MetadataChangedError,
    ProtocolChangedError,
    TableNotFoundError,
)
from .actions import (
    ADD,
    DOMAIN_METADATA,
    METADATA,
    PROTOCOL,
    REMOVE,
    AddFile,
    CommitInfo,
    DomainMetadata,
    RemoveFile,
    json_line,
)
from .checkpoint_v2 import is_v2_policy, write_v2_checkpoint
from .in_commit_timestamps import commit_timestamp, ict_enabled, next_in_commit_timestamp
from .log import READ_THREADS, commit_path, in_order, parse_commit, read_commit_bytes, read_threads
from .protocol import ensure_write_supported
from .row_tracking import (
    MISSING_HIGH_WATER_MARK,
    ROW_TRACKING_DOMAIN,
    RowTracking,
    assign_fresh_row_ids,
    high_water_mark,
    high_water_mark_action,
    winning_high_water_mark,
)
from .snapshot import Snapshot
from .storage import Storage, join

__all__ = ["DEFAULT_MAX_COMMIT_ATTEMPTS", "CommitResult", "Transaction", "check_conflicts", "engine_info"]

log = logging.getLogger(__name__)

#: delta-spark's maxCommitAttempts is 10,000,000 (effectively unbounded); we cap retries.
DEFAULT_MAX_COMMIT_ATTEMPTS = 100
DEFAULT_CHECKPOINT_INTERVAL = 10


def engine_info() -> str:
    return f"dbt-delta-optimize/{__version__}"


@dataclass(frozen=True)
class CommitResult:
    version: int
    read_version: int
    attempts: int
    checkpoint_version: int | None = None
    rebased_over: tuple[int, ...] = field(default=())
    #: expired log files (and their bytes) the cleanup after this commit's checkpoint deleted
    log_files_deleted: int = 0
    log_bytes_deleted: int = 0


def _norm(path: str, root: str) -> str:
    """Comparable form of a log path: decoded and relative to the table root."""
    p = unquote(path)
    if p.startswith("file:"):
        p = p[5:]
        while p.startswith("//"):
            p = p[1:]
    if p.startswith("/") and p.startswith(root.rstrip("/") + "/"):
        p = p[len(root.rstrip("/")) + 1 :]
    return p


def check_conflicts(
    winning_version: int,
    winning_actions: Iterable[Mapping[str, Any]],
    *,
    read_paths: set[str],
    removed_paths: set[str],
    root: str,
    domains: Iterable[str] = (),
) -> None:
    """Raise the typed conflict a winning commit causes, or return if it is safe to rebase onto.

    Precedence follows delta-spark's ConflictChecker: protocol, then metadata, then domain metadata,
    then removed files. A winner's domainMetadata conflicts only with a domain this commit writes
    too (``domains``), except ``delta.rowTracking``, whose mark the rebase recomputes.
    A winning remove with dataChange=true (DELETE, UPDATE, MERGE, overwrite) of a file we read is a
    delete-read conflict even when we remove that file too: the rows we read changed. Only a
    dataChange=false remove (another compaction) of a file we also remove is a delete-delete conflict.
    """
    actions = list(winning_actions)
    if any(PROTOCOL in a for a in actions):
        raise ProtocolChangedError(
            f"Version {winning_version} changed the table's protocol while optimize was running. "
            "Nothing was committed; re-run optimize.",
            winning_version=winning_version,
        )
    if any(METADATA in a for a in actions):
        raise MetadataChangedError(
            f"Version {winning_version} changed the table's metadata (schema, partitioning or properties) "
            "while optimize was running. Nothing was committed; re-run optimize.",
            winning_version=winning_version,
        )
    theirs = {str(a[DOMAIN_METADATA].get("domain")) for a in actions if isinstance(a.get(DOMAIN_METADATA), Mapping)}
    clash = sorted((theirs & set(domains)) - {ROW_TRACKING_DOMAIN})
    if clash:
        raise MetadataChangedError(
            f"Version {winning_version} changed the domain metadata {', '.join(clash)} that this commit also writes. "
            "Nothing was committed; re-run optimize.",
            winning_version=winning_version,
        )
    delete_delete: list[str] = []
    delete_read: list[str] = []
    for action in actions:
        if REMOVE in action:
            p = _norm(action[REMOVE]["path"], root)
            data_change = action[REMOVE].get("dataChange", True) is not False
            if p in removed_paths and not data_change:
                delete_delete.append(p)
            elif p in read_paths or p in removed_paths:
                delete_read.append(p)
    if delete_read:
        raise ConcurrentDeleteReadError(
            f"Version {winning_version} deleted or rewrote {len(delete_read)} file(s) this commit read "
            f"(e.g. {delete_read[0]}). Nothing was committed; re-run optimize.",
            winning_version=winning_version,
            paths=tuple(delete_read),
        )
    if delete_delete:
        raise ConcurrentDeleteDeleteError(
            f"Version {winning_version} already compacted {len(delete_delete)} file(s) that this commit also removes "
            f"(e.g. {delete_delete[0]}); another optimize ran concurrently. "
            "Nothing was committed; re-run optimize.",
            winning_version=winning_version,
            paths=tuple(delete_delete),
        )


class Transaction:
    """One optimistic transaction against a snapshot. Not thread-safe; use one per commit."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        storage: Storage | None = None,
        max_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS,
        check_protocol: bool = True,
        ours: Collection[int] = (),
        after_checkpoint: Callable[[int], tuple[int, int]] | None = None,
    ) -> None:
        """``ours``: versions after the snapshot that this same run committed (earlier batches of one
        OPTIMIZE). They are checked and rebased over like any winner, but are not another writer's win,
        so they do not use up an attempt. ``after_checkpoint``: run once this commit wrote a checkpoint
        (delta-spark's ``doLogCleanup``, see ``inspect.log_cleanup.after_checkpoint``); returns (files,
        bytes) deleted. Its failure is a warning: the commit stands."""
        if max_attempts < 1:
            raise InvalidConfigError(f"max commit attempts must be >= 1, got {max_attempts}.")
        if check_protocol:
            ensure_write_supported(snapshot.protocol, snapshot.metadata, table=snapshot.location)
        self.snapshot = snapshot
        self.storage = storage if storage is not None else snapshot.storage
        self.max_attempts = max_attempts
        self.row_tracking = RowTracking.of(snapshot.protocol, snapshot.metadata, table=snapshot.location)
        self.in_commit_timestamps = ict_enabled(snapshot.metadata)
        self._read_paths: set[str] = set()
        self._committed = False
        self._ours = frozenset(ours)
        self._after_checkpoint = after_checkpoint

    @property
    def read_version(self) -> int:
        return self.snapshot.version

    def track_read(self, files: Iterable[AddFile]) -> None:
        """Declare files this transaction's output depends on (a concurrent remove of one is a conflict)."""
        self._read_paths.update(_norm(f.path, self.snapshot.location) for f in files)

    def _log_path(self, version: int) -> str:
        return commit_path(self.snapshot.location, version)

    def commit(
        self,
        actions: Sequence[AddFile | RemoveFile],
        operation: str,
        parameters: Mapping[str, Any],
        metrics: Mapping[str, Any] | None = None,
        *,
        fresh_row_ids: bool = True,
    ) -> CommitResult:
        """Write actions as the next version; rebase over safe winners; raise on conflicts.

        ``fresh_row_ids=False``: the adds are live files re-added with new metadata only (COMPUTE STATS,
        delta-spark's in-place file metadata update), so they keep their baseRowId and commit version.
        """
        if self._committed:
            raise CommitFailedError("This transaction has already committed; start a new one.")
        root = self.snapshot.location
        removed = {_norm(a.path, root) for a in actions if isinstance(a, RemoveFile)}
        read = self._read_paths | removed
        adds = [a for a in actions if isinstance(a, AddFile)]
        others = [a for a in actions if not isinstance(a, AddFile)]
        info = CommitInfo(
            operation=operation,
            operation_parameters=parameters,
            operation_metrics={k: str(v) for k, v in (metrics or {}).items()},
            read_version=self.read_version,
            timestamp=int(time.time() * 1000),
            engine_info=engine_info(),
            txn_id=str(uuid.uuid4()),
            tags=self.row_tracking.commit_tags(),
        )
        assigns = self.row_tracking.assigns and bool(adds) and fresh_row_ids
        mark = high_water_mark(self.snapshot.domains) if assigns else MISSING_HIGH_WATER_MARK
        previous = self._previous_timestamp(self.read_version, None)
        domains = (ROW_TRACKING_DOMAIN,) if assigns else ()

        version = self.read_version + 1
        #: every version between the snapshot and ours, as read for the conflict check (the checkpoint's input)
        rebased: list[tuple[int, list[dict[str, Any]]]] = []

        def rebase_over(version: int, winning: list[dict[str, Any]]) -> None:
            nonlocal mark, previous
            check_conflicts(version, winning, read_paths=read, removed_paths=removed, root=root, domains=domains)
            # Rebase: our row ids go above the winner's mark, our timestamp after the winner's.
            theirs = winning_high_water_mark(winning, version)
            mark = mark if theirs is None else max(mark, theirs)
            previous = self._previous_timestamp(version, winning)
            rebased.append((version, winning))

        ours: list[int] = []  # this run's own earlier batches right after the snapshot: not a lost attempt
        while version + len(ours) in self._ours:
            ours.append(version + len(ours))
        for v, data in zip(ours, in_order(self._read_commit, ours, threads=read_threads(self.storage))):
            rebase_over(v, self._parsed(v, data))
            self._note_commit(v, data)
        version += len(ours)
        for attempt in range(1, self.max_attempts + 1):
            payload = self._payload(info, adds, others, version, mark if assigns else None, previous)
            if self.storage.put_if_absent(self._log_path(version), payload):
                self._committed = True
                log.info("committed %s as version %d of %s (attempt %d)", operation, version, root, attempt)
                self._note_commit(version, payload)
                checkpoint = self._maybe_checkpoint(version, rebased, payload)
                files, size = self._clean_logs(checkpoint)
                versions = tuple(v for v, _ in rebased)
                return CommitResult(version, self.read_version, attempt, checkpoint, versions, files, size)
            # Someone won `version`: check it and every other winner up to the newest.
            for v, winning in self._winners(version):
                rebase_over(v, winning)
                version = v + 1
        raise CommitFailedError(
            f"Gave up committing {operation} to {root} after {self.max_attempts} attempts: other writers kept "
            f"winning (last tried version {version}). Nothing was committed. Raise "
            "spark.databricks.delta.maxCommitAttempts or re-run when the table is quieter."
        )

    def _read_commit(self, version: int) -> bytes | None:
        """One commit's bytes (kept by this run's log cache, or read); None when it does not exist (yet)."""
        cache = self.snapshot.log_cache
        if cache is not None and version in cache.commits:
            return cache.commits[version]
        try:
            return read_commit_bytes(self.storage, self.snapshot.location, version)
        except TableNotFoundError:
            return None

    def _parsed(self, version: int, data: bytes | None) -> list[dict[str, Any]]:
        if data is None:
            raise TableNotFoundError(f"Version {version} of '{self.snapshot.location}' is not in the log.")
        return parse_commit(data, self.snapshot.location, version)

    def _winners(self, first: int) -> list[tuple[int, list[dict[str, Any]]]]:
        """The commits from ``first`` (a version our put lost) up to the newest: read concurrently in windows
        that double (2, 4, ... 16 versions), up to the first version that does not exist. A lost commit costs
        the winners' GETs and one more, not a listing or a HEAD per version."""
        out: list[tuple[int, list[dict[str, Any]]]] = []
        window, start = 2, first
        threads = read_threads(self.storage)
        while True:
            versions = list(range(start, start + window))
            for v, data in zip(versions, in_order(self._read_commit, versions, threads=threads)):
                if data is None:
                    return out
                out.append((v, self._parsed(v, data)))
                self._note_commit(v, data)
            start, window = start + window, min(2 * window, READ_THREADS)

    def _note_commit(self, version: int, data: bytes | None) -> None:
        """A commit now in the log (ours, or a winner's we read): the run's log cache knows it and keeps it."""
        if data is not None and self.snapshot.log_cache is not None:
            self.snapshot.log_cache.note(f"{version:020d}.json", data, version=version)

    def _previous_timestamp(self, version: int, actions: Sequence[Mapping[str, Any]] | None) -> int | None:
        """The timestamp of ``version`` when this table has in-commit timestamps (ours must come after it)."""
        if not self.in_commit_timestamps or version < 0:
            return None
        if actions is None and self.snapshot.log_cache is not None and version <= self.snapshot.version:
            actions = self.snapshot.commits([version])[0][1]  # the snapshot's own commit: read by its load
        return commit_timestamp(self.storage, self.snapshot.location, version, actions)

    def _payload(
        self,
        info: CommitInfo,
        adds: Sequence[AddFile],
        others: Sequence[AddFile | RemoveFile],
        version: int,
        mark: int | None,
        previous: int | None,
    ) -> bytes:
        """The commit file for ``version``: commitInfo first (with its in-commit timestamp), then the actions.

        With row tracking (``mark`` given), new files get fresh row ids above ``mark`` and commit
        version ``version``, and a ``delta.rowTracking`` action records the new mark.
        """
        if previous is not None:
            info = replace(info, in_commit_timestamp=next_in_commit_timestamp(info.timestamp, previous))
        tail: list[DomainMetadata] = []
        if mark is not None:
            fresh, new_mark = assign_fresh_row_ids(adds, mark, version)
            adds = fresh
            if new_mark != mark:
                tail.append(high_water_mark_action(new_mark))
        head = json.dumps({"commitInfo": info.to_json()}, separators=(",", ":"))
        files = b"".join(
            a.json_line if isinstance(a, RemoveFile) else json_line({ADD: a.to_json()}) for a in [*adds, *others]
        )
        tail_lines = "".join(json.dumps({DOMAIN_METADATA: d.to_json()}, separators=(",", ":")) + "\n" for d in tail)
        return (head + "\n").encode() + files + tail_lines.encode()

    def _maybe_checkpoint(
        self, version: int, rebased: Sequence[tuple[int, Sequence[Mapping[str, Any]]]], payload: bytes
    ) -> int | None:
        """A checkpoint at ``version`` when the interval says so: written by us from the snapshot, the commits
        ``rebased`` over and ours (``payload``; ``checkpoint_v1``: nothing read again), else by deltalake (which
        loads the table at ``version``). Our commit is parsed again only for a checkpoint (10 ms for 5,000
        removes, which nine commits in ten do not need)."""
        try:
            interval = int(self.snapshot.configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
        except ValueError:
            interval = DEFAULT_CHECKPOINT_INTERVAL
        if interval <= 0 or version % interval != 0:
            return None
        try:
            commits = [*rebased, (version, parse_commit(payload, self.snapshot.location, version))]
            if not self._own_checkpoint(version, commits):
                self._deltalake_checkpoint(version)
            return version
        except Exception as exc:  # a missing checkpoint only slows readers down
            log.warning("checkpoint at version %d of %s failed: %s", version, self.snapshot.location, exc)
            return None

    def _own_checkpoint(self, version: int, commits: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]) -> bool:
        """Our checkpoint, when ``checkpoint_v1`` can write it (False, and why at debug level, when not)."""
        from .checkpoint_v1 import unsupported, write_checkpoint

        root = self.snapshot.location
        reason = unsupported(self.snapshot, version, commits)
        if reason is None:
            try:
                written = write_checkpoint(self.snapshot, version, commits, storage=self.storage)
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
            else:
                cache = self.snapshot.log_cache
                if cache is not None:
                    for name, size in written.files:
                        cache.note(name, size)
                return True
        log.debug("checkpoint at version %d of %s written by deltalake: %s", version, root, reason)
        return False

    def _deltalake_checkpoint(self, version: int) -> None:
        self.snapshot.delta_table_at(version).create_checkpoint()
        if is_v2_policy(self.snapshot.configuration):
            name = f"{version:020d}.checkpoint.parquet"
            write_v2_checkpoint(self.storage, self.snapshot.location, version, join(self.snapshot.log_dir, name))

    def _clean_logs(self, checkpoint: int | None) -> tuple[int, int]:
        """Expired log cleanup after our checkpoint; a failure never fails the commit (as delta-spark)."""
        if checkpoint is None or self._after_checkpoint is None:
            return (0, 0)
        try:
            return self._after_checkpoint(checkpoint)
        except Exception as exc:
            log.warning(
                "expired log cleanup after checkpoint %d of %s failed; the commit stands and nothing more is "
                "deleted until the next checkpoint: %s",
                checkpoint,
                self.snapshot.location,
                exc,
            )
            return (0, 0)
