"""VACUUM's task bodies on a cluster: list top-level prefixes of a table, or delete a batch of its files.

They run in a Spark task (``engine.vacuum_job``) with the table's storage opened there from plain data,
and in the driver for a prefix or a batch the job left without an outcome. The listing is exactly what
``Storage.walk`` yields under the prefix, with the same hidden-name rule as the driver's listing
(``plan.vacuum.is_hidden``, ``.name.crc`` sidecars seen), paths relative to the table root: the plan is
made on the driver from it, as from the driver's own listing.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..delta.file_info import Listed
from ..delta.storage import join
from ..plan.vacuum import is_hidden
from .messages import DeletedFiles, DeleteTask, Failed, FailureKind, ListedPrefix, ListTask

if TYPE_CHECKING:
    from ..delta.storage import Storage

__all__ = ["delete_batch", "list_prefix", "listing_skip", "run_delete", "run_list"]


def listing_skip(partition_columns: Sequence[str]) -> Callable[[str], bool]:
    """The names a VACUUM listing does not enter: hidden ones, but ``.name.crc`` sidecars are seen."""
    columns = tuple(partition_columns)
    return lambda name: is_hidden(name, columns) and not name.endswith(".crc")


def list_prefix(storage: Storage, root: str, prefix: str, partition_columns: Sequence[str]) -> Iterator[Listed]:
    """Everything under ``root/prefix`` (relative to ``root``); ``prefix`` empty: the whole table in one
    streamed listing (a table without partition folders, as the driver lists it)."""
    skip = listing_skip(partition_columns)
    if not prefix:
        yield from storage.walk(root, skip, by_prefix=False)
        return
    head = prefix + "/"
    for entry in storage.walk(join(root, prefix), skip, by_prefix=True):
        yield Listed(head + entry.path, entry.size, entry.mtime_ms, entry.is_dir)


def delete_batch(storage: Storage, root: str, paths: Sequence[str], sidecars: Sequence[str] = ()) -> int:
    """Delete files (relative to ``root``) in one bulk call, then their sidecars (not counted)."""
    deleted = storage.delete_many([join(root, p) for p in paths]) if paths else 0
    if sidecars:
        storage.delete_many([join(root, s) for s in sidecars])
    return deleted


def _failed(bin_id: int, exc: Exception, path: str) -> Failed:
    from ..errors import StorageAccessError

    kind: FailureKind = "storage" if isinstance(exc, (StorageAccessError, OSError)) else "internal"
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    retryable = bool(getattr(exc, "retryable", False))
    return Failed(bin_id, kind, type(exc).__name__, message, path, retryable=retryable, trace=traceback.format_exc())


def run_list(task: ListTask, storage: Storage) -> ListedPrefix | Failed:
    """A Spark task's listing of its prefixes: files as ``(path, size, mtime)``, folders as paths."""
    from .bin_task import worker_info

    files: list[tuple[str, int, int]] = []
    folders: list[str] = []
    prefix = ""
    try:
        for prefix in task.prefixes:
            for e in list_prefix(storage, task.store.root, prefix, task.partition_columns):
                if e.is_dir:
                    folders.append(e.path)
                else:
                    files.append((e.path, e.size, e.mtime_ms))
    except Exception as exc:
        return _failed(task.bin_id, exc, join(task.store.root, prefix))
    return ListedPrefix(task.bin_id, tuple(files), tuple(folders), worker_info())


def run_delete(task: DeleteTask, storage: Storage) -> DeletedFiles | Failed:
    """A Spark task's deletes: the batch's files, then their sidecars."""
    from .bin_task import worker_info

    try:
        deleted = delete_batch(storage, task.store.root, task.paths, task.sidecars)
    except Exception as exc:
        where = join(task.store.root, task.paths[0].split("/", 1)[0]) if task.paths else task.store.root
        return _failed(task.bin_id, exc, where)
    return DeletedFiles(task.bin_id, deleted, sum(task.sizes), worker_info())
