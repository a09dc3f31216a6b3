"""Several producers streamed into one iterator through a bounded queue (parallel listing by prefix).

Memory stays bounded by the queue, whatever the number of files; closing the iterator early stops the
producers and joins their threads, so no thread outlives the call (a process must not abort at exit).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import islice
from typing import Generic, TypeVar

__all__ = ["Prefetched", "merged"]

T = TypeVar("T")
_DONE = object()


class _Pool(Generic[T]):
    """Worker threads taking producers from a queue and putting their items into a bounded one."""

    def __init__(self, producers: Sequence[Callable[[], Iterable[T]]], threads: int, buffer: int) -> None:
        self.out: queue.Queue[object] = queue.Queue(maxsize=buffer)
        self.todo: queue.Queue[Callable[[], Iterable[T]]] = queue.Queue()
        for p in producers:
            self.todo.put(p)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.workers = [threading.Thread(target=self._work, daemon=True) for _ in range(threads)]
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            for w in self.workers:
                w.start()

    def _put(self, item: object) -> bool:
        while not self.stop.is_set():
            try:
                self.out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    producer = self.todo.get_nowait()
                except queue.Empty:
                    return
                for item in producer():
                    if not self._put(item):
                        return
        except BaseException as exc:  # handed to the consumer
            self.errors.append(exc)
            self.stop.set()
        finally:
            self.out.put(_DONE)  # always delivered: the consumer drains the queue until every worker is done

    def items(self) -> Iterator[T]:
        self.start()
        running = len(self.workers)
        try:
            while running and not self.errors:
                item = self.out.get()
                if item is _DONE:
                    running -= 1
                else:
                    yield item  # type: ignore[misc]
            if self.errors:
                raise self.errors[0]
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        for w in self.workers:
            while w.is_alive():
                try:
                    while True:
                        self.out.get_nowait()
                except queue.Empty:
                    pass
                w.join(timeout=0.05)


def _chunks(producer: Callable[[], Iterable[T]], size: int) -> Iterator[list[T]]:
    it = iter(producer())
    while chunk := list(islice(it, size)):
        yield chunk


def merged(producers: Sequence[Callable[[], Iterable[T]]], *, threads: int = 8, buffer: int = 10_000) -> Iterator[T]:
    """Items of every producer (each run in a worker thread), in no fixed order; the first error is raised."""
    if len(producers) <= 1:
        for p in producers:
            yield from p()
        return
    yield from _Pool(producers, min(threads, len(producers)), buffer).items()


class Prefetched(Generic[T]):
    """One producer started now in its own thread, its items taken later through a bounded queue.

    VACUUM lists the table while it replays the log: the listing waits on the file system, the replay on
    the interpreter, so they overlap. ``close`` stops and joins the thread, whether or not it was read.
    """

    def __init__(self, producer: Callable[[], Iterable[T]], *, buffer: int = 100_000, chunk: int = 1_000) -> None:
        # items cross the queue in chunks: a lock round trip per item costs more than the overlap gains
        self._pool = _Pool([partial(_chunks, producer, chunk)], 1, max(1, buffer // chunk))
        self._pool.start()

    def __iter__(self) -> Iterator[T]:
        for chunk in self._pool.items():
            yield from chunk

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Prefetched[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
