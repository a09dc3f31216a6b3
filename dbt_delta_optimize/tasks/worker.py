"""The task side's entry point: decode a message, run it, encode its outcome.

Spark reuses its Python worker processes across tasks (``spark.python.worker.reuse``, on by
default), so one store client per process serves every bin that process rewrites: connections and
credentials are set up once, not once per bin. This process-wide cache is the one piece of
module-level state in the package, and it lives only on the task side.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .bin_task import run_bin
from .messages import StoreRef, decode_task, encode

if TYPE_CHECKING:
    from ..delta.storage import Storage

__all__ = ["run_text", "task_storage"]

_STORES: dict[tuple[str, tuple[tuple[str, str], ...]], Storage] = {}
_LOCK = threading.Lock()


def task_storage(store: StoreRef) -> tuple[Storage, bool]:
    """This process's storage for a table (built once per root and options); True when it is local."""
    from ..delta.storage import LocalStorage, storage_for

    key = (store.root, tuple(sorted(store.options.items())))
    with _LOCK:
        storage = _STORES.get(key)
        if storage is None:
            storage = _STORES[key] = storage_for(store.root, store.options)
    return storage, isinstance(storage, LocalStorage)


def run_text(text: str) -> str:
    """One message in, one outcome out (JSON text both ways)."""
    task = decode_task(text)
    storage, local = task_storage(task.store)
    return encode(run_bin(task, storage, local=local))
