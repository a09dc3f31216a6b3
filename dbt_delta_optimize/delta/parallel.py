"""Several producers streamed into one iterator through a bounded queue (parallel listing by prefix).

Memory stays bounded by the queue, whatever the number of files; closing the iterator early stops the
producers and joins their threads, so no thread outlives the call (a process must not abort at exit).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

__all__ = ["merged"]

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
        for w in self.workers:
            w.start()
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


def merged(producers: Sequence[Callable[[], Iterable[T]]], *, threads: int = 8, buffer: int = 10_000) -> Iterator[T]:
    """Items of every producer (each run in a worker thread), in no fixed order; the first error is raised."""
    if len(producers) <= 1:
        for p in producers:
            yield from p()
        return
    yield from _Pool(producers, min(threads, len(producers)), buffer).items()
