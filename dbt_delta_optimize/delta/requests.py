"""The requests one operation made to its store, by kind, and the bytes it read and wrote.

On S3, ADLS and GCS every request costs a round trip (10-50 ms) and is billed, so an operation reports
what it asked for. One ``RequestCounter`` is carried by the ``Storage`` object of one call (a fresh one
per ``storage_for``) and counted by the storage's methods themselves; code in a task counts on a view of
its process's storage with a counter of its own, and the task's outcome brings the counts back to the
driver's counter (``merge``). No module-level state.

What it covers (``SCOPE``): requests made through this package's ``Storage``. deltalake's own reads
(the log replay of ``DeltaTable`` loads) and botocore's server-side copies (``delta/s3_copy.py``) do not
go through it and are not counted; ``bench/latency.py`` measures how many requests a proxy sees beside.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["KINDS", "SCOPE", "RequestCounter"]

#: The kinds, by what they cost: listings (per page), whole and ranged reads, metadata reads, writes (a part of
#: a multipart upload is a PUT; starting and completing one a POST), copies inside the store, deletes.
KINDS = ("LIST", "GET", "RANGE_GET", "HEAD", "PUT", "POST", "COPY", "DELETE", "BATCH_DELETE")

SCOPE = (
    "requests made through dbt-delta-optimize's storage layer (log and data reads and writes, listings, deletes; "
    "ranged reads of a large file counted per read its reader made); not deltalake's own log reads, nor S3 "
    "server-side copies"
)


class RequestCounter:
    """Thread-safe counts by kind, bytes read and written, and when each phase of the operation began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._read = 0
        self._written = 0
        self._phases: list[tuple[str, float]] = [("open", time.time())]

    def count(self, kind: str, n: int = 1, *, read: int = 0, written: int = 0) -> None:
        with self._lock:
            if n:
                self._counts[kind] = self._counts.get(kind, 0) + n
            self._read += read
            self._written += written

    def merge(self, other: Mapping[str, Any]) -> None:
        """Add counts reported as ``to_dict()`` (a task's, brought back in its outcome)."""
        if not other:
            return
        with self._lock:
            for kind, n in dict(other.get("byKind", {})).items():
                self._counts[kind] = self._counts.get(kind, 0) + int(n)
            self._read += int(other.get("bytesRead", 0))
            self._written += int(other.get("bytesWritten", 0))

    def mark(self, phase: str) -> None:
        """The operation enters ``phase`` now (wall clock, so another process's timestamps compare with it)."""
        with self._lock:
            self._phases.append((phase, time.time()))

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def by_kind(self) -> dict[str, int]:
        with self._lock:
            return {k: self._counts[k] for k in (*KINDS, *sorted(set(self._counts) - set(KINDS))) if k in self._counts}

    def to_dict(self, *, phases: bool = False) -> dict[str, Any]:
        """JSON-ready: ``byKind``, ``total``, ``bytesRead``, ``bytesWritten``, ``scope``; with ``phases`` the wall
        time (epoch seconds) at which each phase began, in order."""
        kinds = self.by_kind()
        with self._lock:
            out: dict[str, Any] = {
                "total": sum(kinds.values()),
                "byKind": kinds,
                "bytesRead": self._read,
                "bytesWritten": self._written,
                "scope": SCOPE,
            }
            if phases:
                out["phases"] = [{"phase": p, "startS": round(t, 6)} for p, t in self._phases]
                out["endS"] = round(time.time(), 6)
        return out
