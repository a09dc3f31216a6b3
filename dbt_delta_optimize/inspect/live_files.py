"""A snapshot's live files, looked up by path without building an AddFile per live file.

Validating a commit compares each removed path with the live file of that path at the version
before. A table may hold a million live files while a commit touches a few thousand, so the paths
are matched in Arrow against the snapshot's FileTable and only the matched rows become AddFiles.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .. import arrow_kernels as ak
from ..delta.actions import AddFile
from ..delta.storage import local_path

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = ["LiveFiles", "norm_path"]


def norm_path(path: str, root: str) -> str:
    """Comparable form of a log path: URI-decoded, scheme stripped, relative to the table root."""
    p = unquote(path)
    if p.startswith("file:"):
        p = local_path(path)
    root = root.rstrip("/")
    if p.startswith(root + "/"):
        p = p[len(root) + 1 :]
    return p


class LiveFiles:
    """The live files of ``snapshot`` (None: an empty table) by normalized path; lookups are cached."""

    def __init__(self, snapshot: Snapshot | None) -> None:
        self.snapshot = snapshot
        self.root = snapshot.location if snapshot is not None else ""
        self._found: dict[str, AddFile | None] = {}
        self._keys: Any = None
        self._all: dict[str, AddFile] | None = None

    @property
    def version(self) -> int:
        return self.snapshot.version if self.snapshot is not None else -1

    def _key_column(self) -> Any:
        """Every live path, normalized, as an Arrow array in FileTable row order.

        Paths as delta-spark writes them (relative, nothing escaped) are their own normal form: only a
        table with escaped, absolute or URI paths pays for normalizing each one in Python.
        """
        import pyarrow as pa

        if self._keys is None:
            assert self.snapshot is not None and self.snapshot.file_table is not None
            raw = self.snapshot.file_table.adds.field("path")
            odd = ak.or_(ak.match_substring_regex(raw, "[%:]"), ak.starts_with(raw, "/"))
            plain = len(raw) == 0 or not ak.any_(odd).as_py()
            self._keys = raw if plain else pa.array([norm_path(p, self.root) for p in raw.to_pylist()], pa.string())
        return self._keys

    def lookup(self, paths: Iterable[str]) -> dict[str, AddFile | None]:
        """The live file of each normalized path (None when no live file has it)."""
        wanted = [p for p in dict.fromkeys(paths) if p not in self._found]
        if wanted:
            self._found.update(self._fetch(wanted))
        return self._found

    def _fetch(self, wanted: list[str]) -> dict[str, AddFile | None]:
        snap = self.snapshot
        if snap is None:
            return dict.fromkeys(wanted)
        if snap.file_table is None:
            if self._all is None:
                self._all = {norm_path(f.path, self.root): f for f in snap.files}
            return {p: self._all.get(p) for p in wanted}
        import pyarrow as pa

        rows = ak.index_in(pa.array(wanted, pa.string()), self._key_column()).to_pylist()
        hits = [(p, r) for p, r in zip(wanted, rows) if r is not None]
        files = snap.file_table.files([r for _, r in hits]) if hits else []
        out: dict[str, AddFile | None] = dict.fromkeys(wanted)
        out.update((p, f) for (p, _), f in zip(hits, files))
        return out

    def remember(self, files: Iterable[AddFile]) -> None:
        """Files the caller read from this very snapshot (a bin's inputs): looked up without converting
        their rows from Arrow a second time. Passing files of another snapshot would be a bug."""
        for f in files:
            self._found.setdefault(norm_path(f.path, self.root), f)

    def get(self, path: str) -> AddFile | None:
        """The live file of a normalized path."""
        return self.lookup([path])[path]

    def __contains__(self, path: str) -> bool:
        return self.get(path) is not None
