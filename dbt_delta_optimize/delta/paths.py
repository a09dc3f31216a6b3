"""Paths named in the log are untrusted input: resolve them, and refuse those that escape the table.

Delta allows a data file's path to be relative to the table root (URI-encoded) or an absolute
URI (shallow clones). A relative path that normalises to somewhere outside the root
(``../x``, ``p=0/../../x``, an encoded ``..%2F``) or carries a NUL byte is refused, naming the
action's path and the version that added it. Absolute paths are never used to choose where output
goes (output folders come from partition values only), and one outside the root is refused unless
the caller allows external paths (``check_external_path``): a maintenance job usually runs with
wider rights than each table's writers, and must not copy another table's files into this one
because someone could append to its log.
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlparse

from ..errors import UnsafePathError
from .storage import join, local_path

__all__ = ["check_external_path", "check_log_path", "data_file_location", "is_absolute", "is_inside", "same_store"]


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


#: URL schemes that name the same store (Spark writes ``s3a://`` for what obstore and deltalake call ``s3://``).
_SAME_SCHEME = {"s3a": "s3", "file": ""}


def _split(location: str) -> tuple[str, str, str]:
    """(scheme, bucket or container, normalised path) of an absolute, decoded location; a local path has no scheme."""
    if "://" not in location and not location.startswith("file:"):
        return "", "", posixpath.normpath(location)
    u = urlparse(location)
    scheme = _SAME_SCHEME.get(u.scheme, u.scheme)
    if not scheme:  # file:/x, file:///x
        return "", "", posixpath.normpath(u.path or "/")
    return scheme, u.netloc, posixpath.normpath("/" + u.path.lstrip("/"))


def same_store(location: str, root: str) -> bool:
    """Whether an absolute location is in the store of ``root``: both local, or the same cloud and bucket/container."""
    a, b = _split(location), _split(root)
    return a[:2] == b[:2]


def is_inside(location: str, root: str) -> bool:
    """Whether an absolute location names a file under the table root ``root`` (a local path or a URL)."""
    if not same_store(location, root):
        return False
    path, base = _split(location)[2], _split(root)[2]
    return path != base and posixpath.commonpath([path, base]) == base


def check_external_path(add_path: str, *, root: str, version: int | None = None, allow: bool = False) -> None:
    """Refuse an absolute log path outside the table root, unless ``allow``; even then, one outside the table's store.

    A relative path (checked by ``check_log_path``) and an absolute one under the root pass. With ``allow``
    (shallow clones) a file elsewhere passes only when the table's own storage reaches it: the same local
    file system, or the same bucket or container (never credentials or stores the table does not name).
    """
    if not is_absolute(add_path):
        return
    location = unquote(add_path)
    if is_inside(location, root):
        return
    where = f" (added in version {version})" if version is not None else ""
    if not allow:
        raise UnsafePathError(
            f"The log of '{root}' names a data file {add_path!r}{where} outside the table root. Refusing to read it: "
            "a maintenance job must not copy files from elsewhere into this table. Nothing was read or written. "
            "If the table is a shallow clone, allow its external files with allow_external_paths "
            "(--allow-external-paths, or meta.delta_optimize.allow_external_paths: true in dbt).",
            version=version,
            path=add_path,
        )
    if not same_store(location, root):
        raise UnsafePathError(
            f"The log of '{root}' names a data file {add_path!r}{where} in another store than the table's. Even with "
            "allow_external_paths only files the table's own storage options reach are read. Nothing was read or "
            "written.",
            version=version,
            path=add_path,
        )
