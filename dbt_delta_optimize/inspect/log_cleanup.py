"""Expired log cleanup through our ``Storage``: list ``_delta_log`` once, plan (``plan.log_cleanup``), delete.

Run after a checkpoint by the commit writer (``Transaction(after_checkpoint=...)``, as delta-spark's
``checkpointAndCleanUpDeltaLog``) and by ``vacuum`` with ``clean_logs``. Everything is planned from one
listing before the first delete; nothing is listed again in between, so a concurrent writer's new
files (all newer than the checkpoint the plan keeps) are never candidates.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..delta.checkpoint_v2 import SIDECAR_DIR, checkpoint_files
from ..delta.file_info import Listed
from ..delta.snapshot import Snapshot
from ..delta.storage import Storage, join
from ..errors import CorruptLogError
from ..plan.log_cleanup import (
    cleanup_enabled,
    parse_log_name,
    plan_log_cleanup,
    plan_sidecar_cleanup,
    sidecar_checkpoints,
)

__all__ = ["KnownLog", "LogCleanupResult", "after_checkpoint", "clean_expired_logs"]

log = logging.getLogger(__name__)

_STAGED_DIR = "_staged_commits"
_LAST_CHECKPOINT = "_last_checkpoint"


@dataclass(frozen=True)
class LogCleanupResult:
    """What log cleanup deleted (or, in a dry run, would delete): paths relative to ``_delta_log``."""

    files: tuple[str, ...] = ()
    bytes: int = 0
    cutoff_ms: int = 0
    dry_run: bool = False

    @property
    def files_deleted(self) -> int:
        return 0 if self.dry_run else len(self.files)

    @property
    def bytes_deleted(self) -> int:
        return 0 if self.dry_run else self.bytes

    def to_dict(self) -> dict[str, object]:
        return {
            "files": list(self.files),
            "num_files": len(self.files),
            "bytes": self.bytes,
            "cutoff_ms": self.cutoff_ms,
            "dry_run": self.dry_run,
        }


def _top_level(name: str) -> bool:
    """Skip ``_sidecars``, ``_staged_commits`` and ``_last_checkpoint`` (listed or read on their own)."""
    return name.startswith("_")


def _list(storage: Storage, path: str, skip: Callable[[str], bool]) -> list[Listed]:
    return [f for f in storage.walk(path, skip, by_prefix=False) if not f.is_dir and "/" not in f.path]


def _last_checkpoint(storage: Storage, log_dir: str) -> int | None:
    try:
        return int(json.loads(storage.read_bytes(join(log_dir, _LAST_CHECKPOINT)))["version"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(
            f"Log cleanup refused: {join(log_dir, _LAST_CHECKPOINT)} is not a checkpoint pointer ({exc}). "
            "Nothing was deleted; the next checkpoint rewrites it."
        ) from exc


def _referenced_sidecars(storage: Storage, root: str, names: tuple[str, ...]) -> set[str]:
    refs: set[str] = set()
    for name in names:
        refs.update(p.rsplit("/", 1)[-1] for p in checkpoint_files(storage, root, [name]).parquet)
    return refs


@dataclass(frozen=True)
class KnownLog:
    """What a run already knows of ``_delta_log``, so cleanup lists nothing: its files (the load's listing plus
    what the run wrote since), whether ``_staged_commits`` exists, and the checkpoint it just wrote."""

    files: tuple[Listed, ...]
    staged_folder: bool
    last_checkpoint: int


def _known(snapshot: Snapshot, version: int) -> KnownLog | None:
    """The log as the snapshot's load listed it and this run wrote it, when that holds the checkpoint at
    ``version`` (ours); None when it does not say (a local listing, deltalake's checkpoint): then list."""
    cache = snapshot.log_cache
    entries = cache.entries if cache is not None else None
    if cache is None or entries is None:
        return None
    files = tuple(f for name, f in entries.items() if not _top_level(name) and "/" not in name)
    if not any(
        (n := parse_log_name(f.path)) is not None and n.kind == "checkpoint" and n.version == version for f in files
    ):
        return None
    return KnownLog(files, _STAGED_DIR in cache.folders, version)


def clean_expired_logs(
    storage: Storage,
    root: str,
    configuration: Mapping[str, str],
    *,
    v2_checkpoints: bool = False,
    now_ms: int | None = None,
    dry_run: bool = False,
    known: KnownLog | None = None,
) -> LogCleanupResult:
    """Delete the table's expired log files (commits, checksums, checkpoints, then unreferenced sidecars).

    ``known``: the log as the caller knows it (nothing listed or read then, but the sidecars when a
    checkpoint goes). Raises ``CorruptLogError`` before any delete when the listing is odd (a gap in
    commit versions).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    log_dir = join(root, "_delta_log")
    if known is None:
        listing = _list(storage, log_dir, _top_level)
        staged = _list(storage, join(log_dir, _STAGED_DIR), lambda _: False)
        last_checkpoint = _last_checkpoint(storage, log_dir)
    else:
        listing = list(known.files)
        staged = _list(storage, join(log_dir, _STAGED_DIR), lambda _: False) if known.staged_folder else []
        last_checkpoint = known.last_checkpoint
    plan = plan_log_cleanup(
        listing,
        last_checkpoint=last_checkpoint,
        configuration=configuration,
        now_ms=now,
        staged=staged,
        root=root,
    )
    paths = [join(log_dir, f.path) for f in (*plan.delete, *plan.checksums)]
    paths += [join(log_dir, _STAGED_DIR, f.path) for f in plan.staged]
    size = plan.bytes
    sidecars: tuple[Listed, ...] = ()
    if plan.deletes_checkpoint and v2_checkpoints:
        found = _list(storage, join(log_dir, SIDECAR_DIR), lambda _: False)
        if found:
            refs = _referenced_sidecars(storage, root, sidecar_checkpoints(listing, plan))
            sidecars = plan_sidecar_cleanup(found, refs, plan.cutoff_ms)
    names = [f.path for f in plan.files] + [f"{SIDECAR_DIR}/{f.path}" for f in sidecars]
    result = LogCleanupResult(tuple(names), size + sum(f.size for f in sidecars), plan.cutoff_ms, dry_run)
    if dry_run or not names:
        return result
    # Commits, checksums and checkpoints first (oldest first, as delta-spark), sidecars once nothing names them.
    storage.delete_many(paths)
    if sidecars:
        storage.delete_many([join(log_dir, SIDECAR_DIR, f.path) for f in sidecars])
    log.info(
        "log cleanup of %s: deleted %d log files (%d bytes) older than %d",
        root,
        len(names),
        result.bytes,
        plan.cutoff_ms,
    )
    return result


def after_checkpoint(snapshot: Snapshot) -> Callable[[int], tuple[int, int]]:
    """The commit writer's hook: delta-spark's ``doLogCleanup`` once a checkpoint is written (when
    ``delta.enableExpiredLogCleanup`` is on); returns (files, bytes) deleted. On a store the snapshot's
    listing and what the run wrote since are the listing (``_known``): nothing is listed again."""

    def run(version: int) -> tuple[int, int]:
        if not cleanup_enabled(snapshot.configuration):
            return (0, 0)
        features = set(snapshot.protocol.writer_features or ())
        done = clean_expired_logs(
            snapshot.storage,
            snapshot.location,
            snapshot.configuration,
            v2_checkpoints="v2Checkpoint" in features,
            known=_known(snapshot, version),
        )
        if snapshot.log_cache is not None and done.files_deleted:
            snapshot.log_cache.forget(done.files)
        return (done.files_deleted, done.bytes_deleted)

    return run
