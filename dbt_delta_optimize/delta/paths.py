"""Paths named in the log are untrusted input: resolve them, and refuse those that escape the table.

Delta allows a data file's path to be relative to the table root (URI-encoded) or an absolute
URI (shallow clones). A relative path that normalises to somewhere outside the root
(``../x``, ``p=0/../../x``, an encoded ``..%2F``) or carries a NUL byte is refused, naming the
action's path and the version that added it. Absolute paths are read but never used to choose
where output goes (output folders come from partition values only).
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote

from ..errors import UnsafePathError
from .storage import join, local_path

__all__ = ["check_log_path", "data_file_location", "is_absolute"]


def is_absolute(add_path: str) -> bool:
    """Whether a log path is an absolute URI or path (not relative to the table root)."""
    return "://" in add_path or add_path.startswith(("file:", "/"))


def _unsafe(add_path: str, *, version: int | None, table: str, why: str) -> UnsafePathError:
    where = f" (added in version {version})" if version is not None else ""
    return UnsafePathError(
        f"The log of '{table}' names a data file {add_path!r}{where} that {why}. "
        "Refusing to touch this table: a log entry must not point outside the table. "
        "Check who wrote that commit, and remove the entry with a RESTORE to an earlier version.",
        version=version,
        path=add_path,
    )


def check_log_path(add_path: str, *, version: int | None = None, table: str = "table") -> str:
    """The decoded, normalised relative path of a log entry, or UnsafePathError.

    Absolute paths and URIs are returned decoded and unchanged (readable, never a write target).
    """
    if not isinstance(add_path, str) or not add_path:
        raise _unsafe(repr(add_path), version=version, table=table, why="is empty or not a string")
    decoded = unquote(add_path)
    if "\x00" in decoded:
        raise _unsafe(add_path, version=version, table=table, why="contains a NUL byte")
    if is_absolute(add_path):
        return decoded
    norm = posixpath.normpath(decoded)
    if norm == ".." or norm.startswith("../") or norm.startswith("/") or norm in (".", ""):
        raise _unsafe(add_path, version=version, table=table, why="resolves outside the table root")
    return norm


def data_file_location(root: str, add_path: str) -> str:
    """Absolute location of a file named in the log, checked against the table root."""
    if is_absolute(add_path):
        return local_path(add_path) if add_path.startswith("file:") else add_path
    return join(root, check_log_path(add_path, table=root))
