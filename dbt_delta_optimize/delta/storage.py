"""Storage behind one small interface, passed into every operation and never bypassed.

The only primitive a Delta commit needs from a store is put-if-absent: a log entry either
appears whole or not at all, and never replaces another writer's entry. Everything else
(reading the log, statting and moving data files, listing folders) is plain file access.

Locations are absolute: a local path, a ``file:`` URI, or (with an object-store backend) a
URI such as ``s3://bucket/table``. Backends join and split them with ``/``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from typing import Protocol as TypingProtocol
from urllib.parse import unquote, urlparse

from ..errors import InvalidArgumentError
from .file_info import FileInfo, Listed
from .requests import RequestCounter

__all__ = ["FileInfo", "LocalStorage", "Storage", "join", "local_path", "storage_for", "storage_of", "table_uri"]


def _read_whole(path: str) -> bytes:
    """A local file's bytes in as few system calls as it takes: one ``fstat`` and, for a file that does not
    change while read, one ``read`` (a buffered ``open().read()`` costs about 4 us more a file, which tiny
    files' compactions pay 5,000 times: docs/performance.md). Reads on to the end, so a short read (a
    network or FUSE mount) or a file that grew gives the same bytes as ``open().read()``, and an error
    names the file as ``open`` does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)  # asking one byte more than the size: exactly ``size`` back is the end
        if len(data) == size:
            return data
        parts, got = [data], len(data)
        while chunk := os.read(fd, max(size + 1 - got, 1 << 16)):
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)
    except OSError as exc:
        if exc.filename is None:  # read's own errors (a folder: EISDIR) name no file
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise
    finally:
        os.close(fd)


class Storage(TypingProtocol):
    """What the log reader, the commit writer and the executor need from a store.

    Contract (as delta-kernel-rs's storage handler): listings are sorted by name; ``put_if_absent``
    is atomic and never overwrites; a missing file raises ``FileNotFoundError`` from ``read_bytes``,
    ``stat`` and ``open_input``; ``delete`` of a missing file is not an error.
    """

    @property
    def options(self) -> Mapping[str, str]:
        """Options for deltalake (``storage_options``), so both libraries see the same store."""
        ...

    @property
    def requests(self) -> RequestCounter:
        """The requests made through this storage (one counter per call's storage: ``delta/requests.py``)."""
        ...

    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Write ``data`` at ``path`` atomically unless it exists. True if written, False if it existed."""
        ...

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write or replace ``path`` atomically (checkpoint pointers, manifests; never commits)."""
        ...

    def read_bytes(self, path: str) -> bytes: ...

    def put_file(self, path: str, local: str) -> None:
        """Store the local file ``local`` at ``path`` (overwriting): how a rewritten data file gets there."""
        ...

    def open_input(self, path: str) -> BinaryIO:
        """A seekable binary reader (what pyarrow's Parquet reader takes)."""
        ...

    def open_output(self, path: str) -> BinaryIO:
        """A sequential binary writer creating or replacing ``path``; the file appears whole at ``close()``
        on object stores (a streaming multipart upload), so no local copy is needed."""
        ...

    def exists(self, path: str) -> bool: ...

    def stat(self, path: str) -> FileInfo: ...

    def list_dir(self, path: str) -> Iterator[str]:
        """Names (not paths) directly under ``path``, sorted; nothing if it does not exist."""
        ...

    def makedirs(self, path: str) -> None:
        """Make sure a folder can hold files (a no-op on object stores)."""
        ...

    def delete(self, path: str) -> None: ...

    def delete_tree(self, path: str) -> None:
        """Delete a folder and everything under it (missing is fine)."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` (replacing ``dst``); used for staged files we own."""
        ...

    def is_empty_dir(self, path: str) -> bool: ...

    def walk(self, path: str, skip: Callable[[str], bool], *, by_prefix: bool = True) -> Iterator[Listed]:
        """Every file (and folder) under ``path``, streamed, relative to it; folders whose name ``skip``
        accepts are not entered (and files it accepts not yielded). Parallel by top-level folder on object
        stores (``by_prefix``: when the caller expects folders there, such as partitions)."""
        ...

    def list_top(self, path: str, skip: Callable[[str], bool]) -> tuple[list[Listed], list[str]]:
        """One level of ``walk``: what it yields directly under ``path`` (files; folders too where the store
        has them), and the names of the folders it would enter (a listing split by top-level prefix)."""
        ...

    def list_after(self, path: str, after: str, *, below: str | None = None) -> list[Listed]:
        """The files directly under ``path`` whose names sort after ``after`` (and before ``below``), sorted,
        with size and modification time: one listing that starts there (S3's ``start-after``), so a reader
        that knows the log up to a version lists only what came since."""
        ...

    def delete_many(self, paths: Sequence[str]) -> int:
        """Delete files (batched: S3 DeleteObjects, parallel elsewhere); missing ones are skipped.
        Returns how many were deleted (on object stores, how many were asked: a store does not say)."""
        ...

    def remove_empty_dir(self, path: str) -> bool:
        """Remove a folder if it is empty (never its content); False if it is not, or stores have no folders."""
        ...


def _scan_local(base: str, rel: str, skip: Callable[[str], bool]) -> Iterator[list[Listed]]:
    """One folder tree under ``base``, depth first, with ``os.scandir`` (one stat per entry on Linux): each
    folder's entries as one list (at most ``_SCAN_BATCH``)."""
    stack = [rel]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(base, current) if current else base))
        except (FileNotFoundError, NotADirectoryError):
            continue
        head = f"{current}/" if current else ""
        for i in range(0, len(entries), _SCAN_BATCH):
            found = [f for e in entries[i : i + _SCAN_BATCH] if not skip(e.name) and (f := _listed(e, head + e.name))]
            stack.extend(f.path for f in found if f.is_dir)
            yield found


#: Entries of one folder read into one list at most (a listing stays a stream, bounded by this).
_SCAN_BATCH = 1000


def _listed(e: os.DirEntry[str], path: str) -> Listed | None:
    """One entry with its size and time; None if it went away since the folder was read (a writer's temp file)."""
    try:
        st = e.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    if e.is_dir(follow_symlinks=False):
        return Listed(path, 0, int(st.st_mtime * 1000), True)
    return Listed(path, st.st_size, int(st.st_mtime * 1000))


def _unlink_all(paths: Sequence[str]) -> int:
    """Delete in this thread: every path is tried, then the first error other than a file already gone."""
    n, error = _unlink_chunk(paths)
    if error is not None:
        raise error
    return n


def _unlink_chunk(paths: Sequence[str]) -> tuple[int, OSError | None]:
    """One thread's share: (files deleted, the first error other than a file already gone)."""
    n, error, unlink = 0, None, os.unlink
    for p in paths:
        try:
            unlink(p)
            n += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            error = error or exc
    return n, error


#: From this many paths on, local deletes run in threads (``_bulk_unlink``) ...
_BULK_DELETE = 2_000
#: ... one per core, at least two and at most this many.
_DELETE_THREADS = 16


def _delete_threads() -> int:
    return max(2, min(_DELETE_THREADS, os.cpu_count() or 2))


def _present(paths: Sequence[str]) -> list[str]:
    """The paths whose folder holds their name (one folder read each): lite mode's ``.name.crc`` sidecars
    are mostly not there, and 10,000 failed unlinks cost more than reading the folder."""
    by_dir: dict[str, list[str]] = {}
    for p in paths:
        folder, _, name = p.rpartition("/")
        by_dir.setdefault(folder, []).append(name)
    out: list[str] = []
    for folder, names in by_dir.items():
        try:
            there = set(os.listdir(folder or "/"))
        except (FileNotFoundError, NotADirectoryError):
            continue
        out.extend(f"{folder}/{n}" for n in names if n in there)
    return out


def _bulk_unlink(paths: Sequence[str]) -> int:
    """Many local deletes in a thread per core, each thread a contiguous run of the paths (mostly its own
    folders): an unlink runs in the kernel with the GIL released. More threads than cores only contend for
    the folders' locks: 10,000 fresh 0.5 KB files on this 2-core machine (five rounds, quiet), in 100
    folders / in one, one thread 129 / 115 ms, 2 threads 81 / 84 ms, 16 threads (the earlier choice) 95 /
    91 ms contiguous and 112 / 103 ms interleaved, with 0.13 against 0.16-0.18 s of CPU; with three busy
    processes beside, 2 threads stayed the fastest. Exact as the one-thread loop: a path not there (its
    folder read first, or gone since) is neither deleted nor counted; every other path is tried, then the
    first other error (a folder, no permission) is raised. The pool is joined before this returns or
    raises."""
    from concurrent.futures import ThreadPoolExecutor

    there = _present(paths)
    if not there:
        return 0
    total = len(there)
    k = min(_delete_threads(), -(-total // 64))
    runs = [there[i * total // k : (i + 1) * total // k] for i in range(k)]
    with ThreadPoolExecutor(k, thread_name_prefix="ddo-unlink") as pool:
        done = list(pool.map(_unlink_chunk, runs))
    for _, error in done:
        if error is not None:
            raise error
    return sum(n for n, _ in done)


@dataclass(frozen=True)
class LocalStorage:
    """POSIX filesystem: write a temp file, then hard-link it into place (link fails if the target exists)."""

    _options: Mapping[str, str] = field(default_factory=dict)
    #: file operations counted as a store's requests would be (a read is a GET, a folder read a LIST ...)
    requests: RequestCounter = field(default_factory=RequestCounter, compare=False, repr=False)

    @property
    def options(self) -> Mapping[str, str]:
        return self._options

    def put_if_absent(self, path: str, data: bytes) -> bool:
        directory = os.path.dirname(path)
        # "ddo-" marks the temp file as ours, so a cleanup after a kill never touches another writer's.
        tmp = os.path.join(directory, f".{os.path.basename(path)}.ddo-{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        self.requests.count("PUT", written=len(data))
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.requests.count("PUT", written=len(data))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)

    def read_bytes(self, path: str) -> bytes:
        data = _read_whole(path)
        self.requests.count("GET", read=len(data))
        return data

    def put_file(self, path: str, local: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(local, path)
        self.requests.count("PUT", written=os.path.getsize(path))

    def open_input(self, path: str) -> BinaryIO:
        fh = open(path, "rb")  # noqa: SIM115 (the caller closes it)
        self.requests.count("GET")  # the bytes it reads are not counted locally
        return fh

    def open_output(self, path: str) -> BinaryIO:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.requests.count("PUT")
        return open(path, "wb")

    def exists(self, path: str) -> bool:
        self.requests.count("HEAD")
        return os.path.exists(path)

    def stat(self, path: str) -> FileInfo:
        self.requests.count("HEAD")
        st = os.stat(path)
        return FileInfo(st.st_size, int(st.st_mtime * 1000))

    def list_dir(self, path: str) -> Iterator[str]:
        self.requests.count("LIST")
        try:
            names = sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return
        yield from names

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def delete(self, path: str) -> None:
        self.requests.count("DELETE")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rename(self, src: str, dst: str) -> None:
        self.requests.count("COPY")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)

    def is_empty_dir(self, path: str) -> bool:
        self.requests.count("LIST")
        try:
            return not os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def walk(self, path: str, skip: Callable[[str], bool], *, by_prefix: bool = True) -> Iterator[Listed]:
        top, dirs = self.list_top(path, skip)
        yield from top
        self.requests.count("LIST", len(dirs))  # one walk per top-level folder
        # In this thread: a stat of a cached inode costs microseconds, and threads taking turns on the GIL
        # cost more than they overlap (100 folders of 101 files on 2 cores: 46 ms here, 80 ms on 2 threads,
        # 140 ms on 4). A caller that wants the walk to overlap its own work runs it in a thread (VACUUM).
        base = local_path(path)
        for d in dirs:
            for batch in _scan_local(base, d, skip):
                yield from batch

    def list_top(self, path: str, skip: Callable[[str], bool]) -> tuple[list[Listed], list[str]]:
        self.requests.count("LIST")
        try:
            entries = list(os.scandir(local_path(path)))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        found = [f for e in entries if not skip(e.name) and (f := _listed(e, e.name)) is not None]
        return found, [f.path for f in found if f.is_dir]

    def list_after(self, path: str, after: str, *, below: str | None = None) -> list[Listed]:
        found, _ = self.list_top(path, lambda name: name <= after or (below is not None and name >= below))
        return sorted((f for f in found if not f.is_dir), key=lambda f: f.path)

    def delete_many(self, paths: Sequence[str]) -> int:
        local = [local_path(p) for p in paths]
        self.requests.count("DELETE", len(local))
        if len(local) < _BULK_DELETE:
            return _unlink_all(local)
        return _bulk_unlink(local)

    def remove_empty_dir(self, path: str) -> bool:
        try:
            os.rmdir(local_path(path))
            return True
        except OSError:  # not empty (a writer put a file there), or gone
            return False


def join(base: str, *parts: str) -> str:
    """Join location parts with ``/`` (locations are local paths or URIs, never Windows paths)."""
    out = base.rstrip("/")
    for p in parts:
        if p:
            out = f"{out}/{p.lstrip('/')}"
    return out


def local_path(uri: str) -> str:
    """Filesystem path of a local table location given as a path or a ``file:`` URI."""
    if uri.startswith("file:"):
        parsed = urlparse(uri)
        return unquote(parsed.path)
    return uri


def _scheme(location: str) -> str:
    scheme = urlparse(location).scheme
    return scheme if scheme and scheme != "file" and len(scheme) > 1 else ""


def table_uri(location: str) -> str:
    """Canonical absolute location (no trailing slash) for a local path or file URI."""
    if _scheme(location):
        return location.rstrip("/")
    return str(Path(local_path(location)).expanduser().resolve())


def storage_for(location: str, options: Mapping[str, str] | None = None) -> Storage:
    """The storage backend for a location: a local path or ``file:`` URI, or an object-store URL."""
    scheme = _scheme(location)
    if not scheme:
        return LocalStorage(dict(options or {}))
    from .object_store import SCHEMES, ObjectStorage  # not for a local path: a fresh VACUUM compiles less

    if scheme not in SCHEMES:
        raise InvalidArgumentError(
            f"Storage scheme '{scheme}://' is not supported. Use a local path, or s3:// (s3a://), "
            "abfss:// (abfs://, az://) or gs://."
        )
    return ObjectStorage(location.rstrip("/"), dict(options or {}))


def storage_of(location: str, options: Mapping[str, str] | None = None) -> Storage:
    """The storage of a table given as a path, ``file:`` URI or URL: ``storage_for`` its canonical location."""
    return storage_for(table_uri(location), options)
