"""Storage access behind a small interface, so object stores with conditional put can follow.

The only primitive a Delta commit needs is put-if-absent: a log entry either appears whole
or not at all, and never replaces another writer's entry.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol as TypingProtocol
from urllib.parse import unquote, urlparse

__all__ = ["LocalStorage", "Storage", "local_path", "storage_for", "table_uri"]


class Storage(TypingProtocol):
    """What the commit writer and executor need from a filesystem."""

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Write ``data`` at ``path`` atomically unless it exists. True if written, False if it existed."""

    def read_bytes(self, path: str) -> bytes: ...

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int: ...

    def list_dir(self, path: str) -> Iterator[str]: ...

    def delete(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...


class LocalStorage:
    """POSIX filesystem: write a temp file, then hard-link it into place (link fails if the target exists)."""

    def put_if_absent(self, path: str, data: bytes) -> bool:
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def list_dir(self, path: str) -> Iterator[str]:
        try:
            yield from sorted(os.listdir(path))
        except FileNotFoundError:
            return

    def delete(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def rename(self, src: str, dst: str) -> None:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)


def local_path(uri: str) -> str:
    """Filesystem path of a local table location given as a path or a ``file:`` URI."""
    if uri.startswith("file:"):
        parsed = urlparse(uri)
        return unquote(parsed.path)
    return uri


def table_uri(location: str) -> str:
    """Canonical absolute location (no trailing slash) for a local path or file URI."""
    scheme = urlparse(location).scheme
    if scheme and scheme != "file" and len(scheme) > 1:
        return location.rstrip("/")
    return str(Path(local_path(location)).expanduser().resolve())


def storage_for(location: str) -> Storage:
    scheme = urlparse(location).scheme
    if scheme and scheme != "file" and len(scheme) > 1:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"Storage scheme '{scheme}://' is not supported yet (only local paths and file: URIs). "
            "Run against a local or mounted path."
        )
    return LocalStorage()
