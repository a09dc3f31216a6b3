"""What the hooks keep under dbt's target path, for one dbt invocation.

* ``delta_optimize_results.json``: a JSON list with one record per hook or run-operation call of
  the current invocation. The first record of a new invocation replaces the file, so it never
  grows across runs; every record carries its ``invocation_id``.
* ``delta_optimize_versions.json``: the pre-hook's table versions (``{"invocation_id": ...,
  "versions": {table: version}}``), read and dropped by the model's post-hook. Keyed by the
  invocation id, a version left by an earlier run (a model that failed between its hooks) is
  never used by a later one. This replaces in-process state: the file is the hand-over.

dbt runs models in threads of one process (``--threads``): every read-modify-write holds the
bridge's lock, and every write goes to a unique temporary file that ``os.replace`` moves into
place, so a reader never sees half a file and no update is lost.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RESULTS_FILE", "TARGET_PATH_OPTION", "VERSIONS_FILE", "InvocationFiles", "invocation_id", "target_path"]

RESULTS_FILE = "delta_optimize_results.json"
VERSIONS_FILE = "delta_optimize_versions.json"
#: How an unwritable file under the target path is named in the refusal (dbt's flag, or DBT_TARGET_PATH).
TARGET_PATH_OPTION = "dbt's target path (--target-path)"


def _dbt_flag(name: str) -> Any:
    try:
        from dbt import flags
    except ImportError:  # pragma: no cover - dbt is a dependency; keep the bridge usable without it
        return None
    get_flags: Any = flags.get_flags
    return getattr(get_flags(), name, None)


def target_path(explicit: str | None = None) -> str:
    """dbt's target path: ``explicit`` (the macros pass ``flags.TARGET_PATH``), dbt's ``--target-path`` flag,
    ``$DBT_TARGET_PATH``, else ``target``; a relative one is under the project directory, as dbt resolves it."""
    path = explicit or _dbt_flag("TARGET_PATH") or os.environ.get("DBT_TARGET_PATH") or "target"
    root = _dbt_flag("PROJECT_DIR") or os.getcwd()
    return os.path.join(str(root), str(path))


def invocation_id(explicit: str | None = None) -> str:
    """The dbt invocation's id: ``explicit`` (the macros pass ``invocation_id``), else dbt's own for this process."""
    if explicit:
        return str(explicit)
    from dbt_common.invocation import get_invocation_id

    return str(get_invocation_id())


def _read(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _write(path: str, value: Any) -> None:
    """Write ``value`` as JSON through a temporary file of this write alone, then replace ``path`` atomically."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(value, fh, indent=2, default=str)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@dataclass(frozen=True)
class InvocationFiles:
    """The results and pre-hook files of one invocation under one target path, guarded by ``lock``."""

    target_path: str
    invocation_id: str
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def results_path(self) -> str:
        return os.path.join(self.target_path, RESULTS_FILE)

    @property
    def versions_path(self) -> str:
        return os.path.join(self.target_path, VERSIONS_FILE)

    def check_writable(self) -> None:
        """Refuse (OutputPathError) before any work when the results file cannot be written there."""
        from ..ops.outputs import check_output

        check_output(self.results_path, option=TARGET_PATH_OPTION, make_folder=True)

    def results(self) -> list[dict[str, Any]]:
        """This invocation's records, in the order they were appended."""
        data = _read(self.results_path)
        records = data if isinstance(data, list) else []
        return [r for r in records if isinstance(r, dict) and r.get("invocation_id") == self.invocation_id]

    def append_result(self, record: Mapping[str, Any]) -> None:
        """Add one record; records of an earlier invocation are dropped from the file."""
        with self.lock:
            records = self.results()
            records.append({**record, "invocation_id": self.invocation_id})
            _write(self.results_path, records)

    def _versions(self) -> dict[str, int]:
        data = _read(self.versions_path)
        if not isinstance(data, dict) or data.get("invocation_id") != self.invocation_id:
            return {}
        versions = data.get("versions")
        return {str(k): v for k, v in versions.items() if isinstance(v, int)} if isinstance(versions, dict) else {}

    def save_version(self, table: str, version: int) -> None:
        """The pre-hook: ``table`` was at ``version`` before this invocation's write."""
        with self.lock:
            versions = self._versions()
            versions[table] = version
            _write(self.versions_path, {"invocation_id": self.invocation_id, "versions": versions})

    def pop_version(self, table: str) -> int | None:
        """The post-hook: the version the pre-hook saved for ``table`` in this invocation (then forgotten)."""
        with self.lock:
            versions = self._versions()
            version = versions.pop(table, None)
            if version is not None:
                _write(self.versions_path, {"invocation_id": self.invocation_id, "versions": versions})
            return version
