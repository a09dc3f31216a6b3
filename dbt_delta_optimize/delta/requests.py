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
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "PUT_PART", "SCOPE", "ObjectRequests", "Pages", "RequestCounter", "json_kind"]

#: The kinds, by what they cost: listings (per page), whole and ranged reads, metadata reads, writes (a part of
#: a multipart upload is a PUT; starting and completing one a POST), copies inside the store, deletes.
KINDS = ("LIST", "GET", "RANGE_GET", "HEAD", "PUT", "POST", "COPY", "DELETE", "BATCH_DELETE")


def json_kind(kind: str) -> str:
    """A kind as a camelCase JSON key (``RANGE_GET`` -> ``rangeGet``), as every key of our JSON is written."""
    head, *rest = kind.lower().split("_")
    return head + "".join(p.capitalize() for p in rest)


#: camelCase JSON key -> kind
_KIND_OF_KEY = {json_kind(k): k for k in KINDS}

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
            for key, n in dict(other.get("byKind", {})).items():
                kind = _KIND_OF_KEY.get(str(key), str(key))
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
        """JSON-ready: ``byKind`` (``get``, ``rangeGet``, ``list``, ``batchDelete`` ...), ``total``, ``bytesRead``,
        ``bytesWritten``, ``scope``; with ``phases`` the wall time (epoch seconds) at which each phase began."""
        kinds = {json_kind(k): n for k, n in self.by_kind().items()}
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


#: ``obstore.put`` uploads in parts of this size (multipart above one part)
PUT_PART = 5 << 20
#: obstore's functions -> the one request each makes (``put`` is counted by size, ``list`` by pages, ``delete`` by
#: its keys, ``open_writer`` when it closes; ``open_reader`` asks for the size first)
_KIND_OF = {"get": "GET", "head": "HEAD", "list_with_delimiter": "LIST", "open_reader": "HEAD"}


@dataclass(frozen=True)
class ObjectRequests:
    """How obstore's calls turn into requests on a cloud (checked against a proxy in front of moto and Azurite,
    tests/test_requests_metrics.py): a key deleted alone is a batch of one on S3 and Azure, Azure batches 256
    keys and S3 1,000, a listing page holds 1,000 entries (Azure 5,000), an upload above one part is multipart."""

    counter: RequestCounter
    cloud: str  #: aws, azure or gcp

    def call(self, name: str, args: tuple[Any, ...]) -> None:
        if name == "delete":
            self.deletes(len(args[-1]) if isinstance(args[-1], list) else 1)
        elif name == "rename":
            self.counter.count("COPY")
            self.deletes(1)
        elif name in _KIND_OF:
            self.counter.count(_KIND_OF[name])

    def deletes(self, keys: int) -> None:
        if self.cloud == "gcp":
            self.counter.count("DELETE", keys)
        else:
            self.counter.count("BATCH_DELETE", -(-keys // (1000 if self.cloud == "aws" else 256)))

    def upload(self, size: int, part: int) -> None:
        """An upload of ``size`` bytes by parts of ``part``: S3 and GCS start and complete a multipart upload with
        a POST each, Azure completes it with a PUT of the block list."""
        if size <= part:
            self.counter.count("PUT", written=size)
            return
        parts = -(-size // part)
        if self.cloud == "azure":
            self.counter.count("PUT", parts + 1, written=size)
        else:
            self.counter.count("POST", 2)
            self.counter.count("PUT", parts, written=size)

    @property
    def page(self) -> int:
        return 5000 if self.cloud == "azure" else 1000

    def more_pages(self, entries: int) -> None:
        """A delimiter listing of ``entries`` names (counted as one LIST when asked): its pages beyond the first."""
        self.counter.count("LIST", max(0, -(-entries // self.page) - 1))

    def pages(self) -> Pages:
        return Pages(self.counter, self.page)


class Pages:
    """A streamed listing's requests, counted when it ends: one per page, at least one."""

    def __init__(self, counter: RequestCounter, page: int) -> None:
        self._counter, self._page, self._entries = counter, page, 0

    def got(self, n: int) -> None:
        self._entries += n

    def close(self) -> None:
        self._counter.count("LIST", max(1, -(-self._entries // self._page)))
