"""Our own debris after a killed run: journal what a run will write, and clean up after dead runs.

A run writes new data files into the table's partition folders before it commits them. If the
process is killed in between, those files are in no commit: they are invisible to readers but take
space forever (VACUUM only removes files older than the retention period, and only on engines that
run it). So before a run writes a file it records the file's path in a small manifest under
``_delta_optimize_staging/<run id>/manifest.json``. The next run (or the ``clean`` command) finds the
manifests of dead runs (the owner process is gone on this host, or the run is older than a safe age)
and deletes exactly the files they name that no commit since the run's read version added, the
staging folder, the partition folders the run created if they are empty, and our own log temp files.
Another writer's files are never touched: only paths our manifests name, and temp files we named.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

from .log import LOG_DIR, list_log, read_commit
from .storage import Storage, join

__all__ = [
    "STAGING_DIR",
    "TEMP_MARKER",
    "CleanResult",
    "RunJournal",
    "RunManifest",
    "clean_debris",
    "find_debris",
]

STAGING_DIR = "_delta_optimize_staging"
MANIFEST = "manifest.json"
#: Marks log temp files written by our put-if-absent, so cleanup never touches another writer's.
TEMP_MARKER = "ddo"
_TEMP_RE = re.compile(r"^\.\d{20}\.json\.ddo-[0-9a-f]+\.tmp$")
#: A run older than this is dead whatever its pid says (a pid can be reused; hosts differ on clusters).
DEFAULT_MAX_AGE_MS = 6 * 3600 * 1000
#: A log temp file lives for milliseconds; one older than this belongs to a killed commit.
TEMP_MAX_AGE_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class RunManifest:
    """What one run is about to write (relative log paths), and who the run is."""

    run_id: str
    host: str
    pid: int
    started_ms: int
    read_version: int
    files: tuple[str, ...] = ()
    created_dirs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "host": self.host,
            "pid": self.pid,
            "startedMs": self.started_ms,
            "readVersion": self.read_version,
            "files": list(self.files),
            "createdDirs": list(self.created_dirs),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunManifest:
        return cls(
            run_id=str(d["runId"]),
            host=str(d["host"]),
            pid=int(d["pid"]),
            started_ms=int(d["startedMs"]),
            read_version=int(d["readVersion"]),
            files=tuple(str(f) for f in d.get("files", ())),
            created_dirs=tuple(str(x) for x in d.get("createdDirs", ())),
        )


@dataclass
class RunJournal:
    """The manifest of the running process, persisted before every file it announces is written."""

    storage: Storage
    root: str
    read_version: int
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    _manifest: RunManifest | None = None

    @property
    def folder(self) -> str:
        """This run's staging folder (Spark-written files land here before they are moved into place)."""
        return join(self.root, STAGING_DIR, self.run_id)

    @property
    def manifest(self) -> RunManifest:
        if self._manifest is None:
            self._manifest = RunManifest(
                self.run_id, socket.gethostname(), os.getpid(), int(time.time() * 1000), self.read_version
            )
        return self._manifest

    def intend(self, files: Iterable[str], created_dirs: Iterable[str] = ()) -> None:
        """Record files (relative, as in the log) before they are written; survives a kill after this."""
        m = self.manifest
        self._manifest = replace(
            m,
            files=(*m.files, *files),
            created_dirs=(*m.created_dirs, *(d for d in created_dirs if d not in m.created_dirs)),
        )
        payload = json.dumps(self._manifest.to_json(), separators=(",", ":")).encode()
        self.storage.write_bytes(join(self.folder, MANIFEST), payload)

    def close(self) -> None:
        """The run is over (committed or cleaned up): drop its staging folder and manifest."""
        self.storage.delete_tree(self.folder)
        staging = join(self.root, STAGING_DIR)
        if self.storage.is_empty_dir(staging):
            self.storage.delete_tree(staging)


@dataclass(frozen=True)
class CleanResult:
    """What a cleanup removed: data files, staging folders of dead runs, log temp files, empty folders."""

    data_files: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()
    log_temp_files: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()
    live_runs: tuple[str, ...] = ()

    @property
    def removed(self) -> int:
        return len(self.data_files) + len(self.runs) + len(self.log_temp_files) + len(self.folders)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataFiles": list(self.data_files),
            "runs": list(self.runs),
            "logTempFiles": list(self.log_temp_files),
            "folders": list(self.folders),
            "liveRuns": list(self.live_runs),
        }


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_dead(m: RunManifest, now_ms: int, max_age_ms: int, alive: Callable[[int], bool]) -> bool:
    if now_ms - m.started_ms > max_age_ms:
        return True
    return m.host == socket.gethostname() and m.pid != os.getpid() and not alive(m.pid)


def _manifests(storage: Storage, root: str) -> list[tuple[str, RunManifest | None]]:
    out: list[tuple[str, RunManifest | None]] = []
    for run in storage.list_dir(join(root, STAGING_DIR)):
        try:
            data = json.loads(storage.read_bytes(join(root, STAGING_DIR, run, MANIFEST)))
            out.append((run, RunManifest.from_json(data)))
        except FileNotFoundError:
            out.append((run, None))
        except (ValueError, KeyError, TypeError):
            out.append((run, None))  # a manifest cut short by the kill: the folder is still ours
    return out


def _committed_since(storage: Storage, root: str, version: int) -> set[str]:
    listing = list_log(storage, root)
    added: set[str] = set()
    for v in listing.commits:
        if v > version:
            for action in read_commit(storage, root, v):
                if "add" in action:
                    added.add(unquote(action["add"]["path"]))
    return added


def _orphans(storage: Storage, root: str, dead: list[RunManifest]) -> tuple[list[str], list[str]]:
    if not dead:
        return [], []
    committed = _committed_since(storage, root, min(m.read_version for m in dead))
    files = sorted({unquote(f) for m in dead for f in m.files} - committed)
    dirs = sorted({d for m in dead for d in m.created_dirs}, key=lambda d: -d.count("/"))
    return files, dirs


def _stale_temp_files(storage: Storage, root: str, now_ms: int) -> list[str]:
    out = []
    log_dir = join(root, LOG_DIR)
    for name in storage.list_dir(log_dir):
        if not _TEMP_RE.match(name):
            continue
        try:
            age = now_ms - storage.stat(join(log_dir, name)).modification_time_ms
        except FileNotFoundError:
            continue
        if age > TEMP_MAX_AGE_MS:
            out.append(name)
    return out


def find_debris(
    storage: Storage,
    root: str,
    *,
    now_ms: int | None = None,
    max_age_ms: int = DEFAULT_MAX_AGE_MS,
    alive: Callable[[int], bool] = _pid_alive,
) -> CleanResult:
    """What ``clean_debris`` would remove now (nothing is deleted)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    dead: list[RunManifest] = []
    dead_runs: list[str] = []
    live: list[str] = []
    for run, m in _manifests(storage, root):
        if m is None or _is_dead(m, now, max_age_ms, alive):
            dead_runs.append(run)
            if m is not None:
                dead.append(m)
        else:
            live.append(run)
    files, dirs = _orphans(storage, root, dead)
    temps = _stale_temp_files(storage, root, now)
    return CleanResult(tuple(files), tuple(dead_runs), tuple(temps), tuple(dirs), tuple(live))


def clean_debris(
    storage: Storage,
    root: str,
    *,
    dry_run: bool = False,
    now_ms: int | None = None,
    max_age_ms: int = DEFAULT_MAX_AGE_MS,
    alive: Callable[[int], bool] = _pid_alive,
) -> CleanResult:
    """Remove what dead runs of ours left behind; returns what was (or, dry run, would be) removed."""
    found = find_debris(storage, root, now_ms=now_ms, max_age_ms=max_age_ms, alive=alive)
    if dry_run:
        return found
    for f in found.data_files:
        storage.delete(join(root, f))
    for run in found.runs:
        storage.delete_tree(join(root, STAGING_DIR, run))
    for name in found.log_temp_files:
        storage.delete(join(root, LOG_DIR, name))
    removed_dirs = []
    for d in found.folders:
        if storage.is_empty_dir(join(root, d)):
            storage.delete_tree(join(root, d))
            removed_dirs.append(d)
    staging = join(root, STAGING_DIR)
    if storage.is_empty_dir(staging):
        storage.delete_tree(staging)
    return replace(found, folders=tuple(removed_dirs))
