"""The log's small checkpoint files read whole, once per run, on an object store.

pyarrow reads a Parquet file through a seekable reader: on a store that is a HEAD for its size, then one
ranged GET for the footer and one per column chunk, each a round trip; and a run opens the same checkpoint
several times (its sidecars, protocol and metadata, adds, stats on demand). A listing already gave each
file's size, so a checkpoint up to ``WHOLE_BYTES`` is read in one GET and kept for the run's other readers.
Every other call goes to the store underneath.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from .file_info import FileInfo, Listed
from .requests import RequestCounter
from .storage import LocalStorage, Storage

__all__ = ["WHOLE_BYTES", "SmallLogFiles", "small_log_files"]

#: Checkpoint files up to this size are read in one request and kept (larger ones are read in ranges).
WHOLE_BYTES = 32 << 20


@dataclass(frozen=True)
class SmallLogFiles:
    """A Storage whose ``open_input`` of a listed file up to ``WHOLE_BYTES`` reads it whole once and keeps it."""

    base: Storage
    #: full path -> size, from a listing (filled in when the listing is made)
    sizes: dict[str, int] = field(default_factory=dict)
    _kept: dict[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def options(self) -> Mapping[str, str]:
        return self.base.options

    @property
    def requests(self) -> RequestCounter:
        return self.base.requests

    def over(self, base: Storage) -> SmallLogFiles:
        """The files kept so far, with every other call going to ``base`` (the same store, a counter of its own)."""
        return SmallLogFiles(base, dict(self.sizes), dict(self._kept))

    def open_input(self, path: str) -> BinaryIO:
        data = self._kept.get(path)
        if data is None:
            size = self.sizes.get(path)
            if size is None or size > WHOLE_BYTES:
                return self.base.open_input(path)
            data = self.base.read_bytes(path)
            self._kept[path] = data
        return io.BytesIO(data)

    def read_bytes(self, path: str) -> bytes:
        data = self._kept.get(path)
        return data if data is not None else self.base.read_bytes(path)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self.base.put_if_absent(path, data)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.base.write_bytes(path, data)

    def put_file(self, path: str, local: str) -> None:
        self.base.put_file(path, local)

    def open_output(self, path: str) -> BinaryIO:
        return self.base.open_output(path)

    def exists(self, path: str) -> bool:
        return self.base.exists(path)

    def stat(self, path: str) -> FileInfo:
        return self.base.stat(path)

    def list_dir(self, path: str) -> Iterator[str]:
        return self.base.list_dir(path)

    def makedirs(self, path: str) -> None:
        self.base.makedirs(path)

    def delete(self, path: str) -> None:
        self.base.delete(path)

    def delete_tree(self, path: str) -> None:
        self.base.delete_tree(path)

    def rename(self, src: str, dst: str) -> None:
        self.base.rename(src, dst)

    def is_empty_dir(self, path: str) -> bool:
        return self.base.is_empty_dir(path)

    def walk(self, path: str, skip: Callable[[str], bool], *, by_prefix: bool = True) -> Iterator[Listed]:
        return self.base.walk(path, skip, by_prefix=by_prefix)

    def list_top(self, path: str, skip: Callable[[str], bool]) -> tuple[list[Listed], list[str]]:
        return self.base.list_top(path, skip)

    def list_after(self, path: str, after: str, *, below: str | None = None) -> list[Listed]:
        return self.base.list_after(path, after, below=below)

    def delete_many(self, paths: Sequence[str]) -> int:
        return self.base.delete_many(paths)

    def remove_empty_dir(self, path: str) -> bool:
        return self.base.remove_empty_dir(path)


def small_log_files(storage: Storage) -> Storage:
    """``storage`` itself when local (a local open costs nothing) or already wrapped, else a SmallLogFiles of it."""
    if isinstance(storage, (LocalStorage, SmallLogFiles)):
        return storage
    return SmallLogFiles(storage)
