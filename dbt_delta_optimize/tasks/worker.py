"""The task side's entry point: decode a message, run it, encode its outcome.

Spark reuses its Python worker processes across tasks (``spark.python.worker.reuse``, on by
default), so one store client per process serves every bin that process rewrites: connections and
credentials are set up once, not once per bin. So does one pool of fetch threads with its byte window
(``tasks.fetch_pool``): the bins a process runs at once (the driver's threads on a local master) share
one bound on GETs in flight and bytes held. This process-wide state is the one piece of module-level
state in the package, and it lives only on the task side.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .bin_task import run_bin
from .fetch_pool import FetchPool
from .messages import (
    DeletedFiles,
    DeleteTask,
    ListedPrefix,
    ListTask,
    Outcome,
    Rewritten,
    StatsComputed,
    StatsTask,
    StoreRef,
    Task,
    decode_task,
    encode,
)

if TYPE_CHECKING:
    from ..delta.storage import Storage

__all__ = ["fetch_pool", "run_task", "run_text", "serve_bins", "task_storage"]

_STORES: dict[tuple[str, tuple[tuple[str, str], ...]], Storage] = {}
_FETCH: list[FetchPool] = []
_LOCK = threading.Lock()
#: A bin worker process's stop flag (``serve_bins``): the driver sets it to cancel the bins running there.
_STOP: list[Any] = []


def task_storage(store: StoreRef) -> tuple[Storage, bool]:
    """This process's storage for a table (built once per root and options); True when it is local."""
    from ..delta.storage import LocalStorage, storage_for

    key = (store.root, tuple(sorted(store.options.items())))
    with _LOCK:
        storage = _STORES.get(key)
        if storage is None:
            storage = _STORES[key] = storage_for(store.root, store.options)
    return storage, isinstance(storage, LocalStorage)


def fetch_pool() -> FetchPool:
    """This process's pool for small input files on object stores, made on the first bin that needs it."""
    with _LOCK:
        if not _FETCH:
            _FETCH.append(FetchPool())
        return _FETCH[0]


def run_task(task: Task, stop: Callable[[], bool] | None = None) -> Outcome:
    """One task (a bin to rewrite, a file's stats for analyze, or a VACUUM listing or delete batch), with this
    process's storage for its table; the outcome says what the task asked of the store."""
    shared, local = task_storage(task.store)
    storage = _counted(shared)
    outcome = _run(task, storage, local, stop)
    if isinstance(outcome, (Rewritten, StatsComputed, ListedPrefix, DeletedFiles)):
        outcome = dataclasses.replace(outcome, requests=storage.requests.to_dict())
    return outcome


def _counted(storage: Storage) -> Storage:
    """A view of the process's storage (the same store client) with a request counter of this task's own."""
    from ..delta.requests import RequestCounter

    if dataclasses.is_dataclass(storage) and any(f.name == "requests" for f in dataclasses.fields(storage)):
        counted: Storage = dataclasses.replace(storage, requests=RequestCounter())
        return counted
    return storage


def _run(task: Task, storage: Storage, local: bool, stop: Callable[[], bool] | None) -> Outcome:
    if isinstance(task, StatsTask):
        from .stats_task import run_stats

        return run_stats(task, storage)
    if isinstance(task, (ListTask, DeleteTask)):
        from .vacuum_task import run_delete, run_list

        return run_list(task, storage) if isinstance(task, ListTask) else run_delete(task, storage)
    return run_bin(task, storage, local=local, stop=stop, fetch=None if local else fetch_pool())


def run_text(text: str) -> str:
    """One message in, one outcome out (JSON text both ways): what a Spark task runs."""
    return encode(run_task(decode_task(text)))


def serve_bins(conn: Any, stop: Any) -> None:
    """A bin worker process of the driver's pool (``engine.bin_processes``): bins in, outcomes out on its
    pipe (pickled both ways, no JSON text), until it gets None or the driver's end closes. ``stop`` is the
    run's stop flag (a byte of shared memory, nonzero once cancelled), asked between row groups as the
    driver's threads ask theirs. Ctrl-C is the driver's to handle: it cancels, then ends this process."""
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STOP[:] = [stop]
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            outcome: Any = run_task(task, _stopped)
        except Exception as exc:  # run_bin types every bin failure: this is a bug, which ends the batch
            outcome = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        conn.send(outcome)


def _stopped() -> bool:
    return bool(_STOP[0].value)
