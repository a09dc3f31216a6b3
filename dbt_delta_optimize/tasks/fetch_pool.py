"""Small input files fetched whole, concurrently, by threads every bin of a process shares, inside a byte window.

On an object store a small file costs a round trip (10-50 ms) and almost no bandwidth, so a compaction of
many small files is paced by how many GETs are in flight: 1,000 files at 64 in flight take 16 round trips,
at 5 in flight 200. The bins a process runs at once (the driver's threads on a local master, or one Spark
task per Python worker) each fetch ahead of the file they decode; a per-bin pool would multiply threads
and memory by the bins, so one pool per process (held by ``tasks.worker``) bounds both: ``threads`` GETs
in flight and ``window_bytes`` of fetched bytes not yet decoded, across every bin.

A bin with nothing fetched ahead always gets its next file, over the window if need be: each bin makes
progress whatever the others hold, so the window can never deadlock (it overshoots by at most one file
per bin, and such a file is small by definition).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["FETCH_THREADS", "FETCH_WINDOW_BYTES", "FetchPool"]

T = TypeVar("T")

#: GETs in flight across the bins of a process: enough to cover a 20-50 ms round trip with small files.
FETCH_THREADS = 64
#: Bytes fetched and not yet decoded, across the bins of a process.
FETCH_WINDOW_BYTES = 256 * 1024 * 1024


class FetchPool:
    """Threads for whole-file fetches and the byte window they share; thread-safe."""

    def __init__(self, *, threads: int = FETCH_THREADS, window_bytes: int = FETCH_WINDOW_BYTES) -> None:
        self.threads = threads
        self.window_bytes = window_bytes
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ddo-fetch")
        self._lock = threading.Lock()
        self._held = 0

    @property
    def held(self) -> int:
        """Bytes reserved now (fetched or being fetched, not yet released by their bin)."""
        with self._lock:
            return self._held

    def reserve(self, size: int, *, must: bool) -> bool:
        """Take ``size`` bytes of the window; False when it is full, unless ``must`` (the bin has nothing ahead)."""
        with self._lock:
            if not must and self._held + size > self.window_bytes:
                return False
            self._held += size
            return True

    def release(self, size: int) -> None:
        with self._lock:
            self._held -= size

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        return self._pool.submit(fn, *args)

    def shutdown(self, *, wait: bool = False) -> None:
        """Stop the threads once their fetches end (a pool made for one call; the process's lives on)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)
