"""A delay line in front of a local object store: every byte waits ``one_way_s`` in each direction, and every
HTTP request is counted by kind, with its start and end.

moto and Azurite answer on loopback in well under a millisecond, so a bench against them measures CPU and
hides what dominates a real bucket: 10-50 ms before each request's first byte, and a bill per request. This
proxy adds that latency (not a bandwidth limit, unless ``bytes_per_s`` is given: the two are separate knobs)
and sees each request, so a bench can report requests per kind and the round trips on the critical path.

    with DelayLine(("127.0.0.1", moto_port), one_way_s=0.010) as line:   # a 20 ms round trip
        ...  # point the client at line.endpoint
        line.requests()                                                   # what was asked, when

No dependency: asyncio on a thread of its own. A new connection costs one round trip (TCP's handshake), as it
does over a network.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

__all__ = ["DelayLine", "Request", "critical_path", "kind_of"]

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Request:
    """One HTTP request seen by the proxy: its kind, path and when it started and its answer ended."""

    kind: str
    method: str
    path: str
    start: float
    end: float


def kind_of(method: str, target: str, headers: dict[str, str]) -> str:
    """S3 and Azure Blob requests by what they cost: LIST, GET, RANGE_GET, HEAD, PUT, COPY, DELETE, BATCH_DELETE."""
    query = parse_qs(urlsplit(target).query, keep_blank_values=True)
    if method == "GET":
        if "list-type" in query or query.get("comp") == ["list"] or "delimiter" in query or "prefix" in query:
            return "LIST"
        return "RANGE_GET" if ("range" in headers or "x-ms-range" in headers) else "GET"
    if method == "PUT":
        return "COPY" if ("x-amz-copy-source" in headers or "x-ms-copy-source" in headers) else "PUT"
    if method == "POST":
        if "delete" in query or query.get("comp") == ["batch"]:
            return "BATCH_DELETE"
        return "POST"
    return method  # HEAD, DELETE


@dataclass
class _Pending:
    """Requests sent on one connection and not answered yet (HTTP/1.1 answers them in order)."""

    items: list[tuple[str, str, str, float]] = field(default_factory=list)


class _HttpScanner:
    """Finds message boundaries in one direction of an HTTP/1.1 stream (heads, Content-Length, chunked)."""

    def __init__(self) -> None:
        self.buf = b""
        self.body_left = 0
        self.chunked = False

    def feed(self, data: bytes) -> list[tuple[str, dict[str, str]]]:
        """The message heads completed by ``data`` (start line, lower-cased headers); bodies are skipped."""
        self.buf += data
        heads: list[tuple[str, dict[str, str]]] = []
        while True:
            if self.body_left:
                take = min(self.body_left, len(self.buf))
                self.buf, self.body_left = self.buf[take:], self.body_left - take
                if self.body_left:
                    return heads
            if self.chunked and not self._skip_chunks():
                return heads
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return heads
            head, self.buf = self.buf[:end].decode("latin-1"), self.buf[end + 4 :]
            line, *rest = head.split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}
            heads.append((line, headers))
            self.chunked = headers.get("transfer-encoding", "").lower() == "chunked"
            self.body_left = 0 if self.chunked else self._length(line, headers)

    def _length(self, line: str, headers: dict[str, str]) -> int:
        if line.startswith("HTTP/") and (self.no_body or line.split(" ")[1] in ("204", "304")):
            return 0
        return int(headers.get("content-length", "0") or 0)

    no_body = False  # set by the response side while the answer is to a HEAD

    def _skip_chunks(self) -> bool:
        """Consume chunked body data; True when the body ended."""
        while True:
            eol = self.buf.find(b"\r\n")
            if eol < 0:
                return False
            size = int(self.buf[:eol].split(b";")[0] or b"0", 16)
            if size == 0:
                end = self.buf.find(b"\r\n\r\n", eol)
                if end < 0 and self.buf[eol : eol + 4] != b"\r\n\r\n":
                    return False
                self.buf = self.buf[(end if end >= 0 else eol) + 4 :]
                self.chunked = False
                return True
            if len(self.buf) < eol + 2 + size + 2:
                return False
            self.buf = self.buf[eol + 2 + size + 2 :]


class DelayLine:
    """A TCP proxy on 127.0.0.1 that delays each direction by ``one_way_s`` and records every HTTP request."""

    def __init__(self, upstream: tuple[str, int], *, one_way_s: float, bytes_per_s: float | None = None):
        self.upstream = upstream
        self.one_way_s = one_way_s
        self.bytes_per_s = bytes_per_s
        self._log: list[Request] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-line", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DelayLine:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result()
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    # ------------------------------------------------------------------ what was seen
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._log)

    def reset(self) -> None:
        with self._lock:
            self._log.clear()

    def counts(self) -> dict[str, int]:
        return dict(Counter(r.kind for r in self.requests()))

    # ------------------------------------------------------------------ the proxy
    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await asyncio.sleep(2 * self.one_way_s)  # TCP's handshake: one round trip before the first byte
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            client_w.close()
            return
        pending = _Pending()
        up_scan, down_scan = _HttpScanner(), _HttpScanner()
        up = asyncio.ensure_future(self._pipe(client_r, server_w, lambda d: self._sent(d, up_scan, pending)))
        down = asyncio.ensure_future(self._pipe(server_r, client_w, lambda d: self._answered(d, down_scan, pending)))
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the line closes: end this connection quietly
            pass
        finally:
            for task in (up, down):
                task.cancel()
            for w in (server_w, client_w):
                w.close()

    def _sent(self, data: bytes, scan: _HttpScanner, pending: _Pending) -> None:
        now = time.monotonic()
        for line, headers in scan.feed(data):
            method, _, rest = line.partition(" ")
            target = rest.rpartition(" ")[0]
            pending.items.append((kind_of(method, target, headers), method, urlsplit(target).path, now))

    def _answered(self, data: bytes, scan: _HttpScanner, pending: _Pending) -> None:
        scan.no_body = bool(pending.items) and pending.items[0][1] == "HEAD"
        for line, _ in scan.feed(data):
            if line.split(" ")[1:2] == ["100"] or not pending.items:  # 100-continue: the real answer follows
                continue
            kind, method, path, start = pending.items.pop(0)
            with self._lock:
                self._log.append(Request(kind, method, path, start, time.monotonic() + self.one_way_s))
            scan.no_body = bool(pending.items) and pending.items[0][1] == "HEAD"

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: Callable[[bytes], None]
    ) -> None:
        """Forward ``reader`` to ``writer``, each chunk ``one_way_s`` after it arrived (order kept, no rate cap)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send_later(queue, writer))
        try:
            while data := await reader.read(_CHUNK):
                seen(data)
                queue.put_nowait((time.monotonic() + self.one_way_s, data))
            queue.put_nowait((time.monotonic() + self.one_way_s, b""))
            await sender
        finally:
            sender.cancel()

    async def _send_later(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        budget_t = time.monotonic()
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.write_eof() if writer.can_write_eof() else None
                return
            if self.bytes_per_s:
                budget_t = max(budget_t, time.monotonic()) + len(data) / self.bytes_per_s
                await asyncio.sleep(max(0.0, budget_t - time.monotonic()))
            writer.write(data)
            await writer.drain()


def critical_path(requests: Iterable[Request]) -> int:
    """Round trips on the critical path: the longest chain of requests each started after the last one's answer."""
    by_start = sorted(requests, key=lambda r: r.start)
    by_end = sorted(range(len(by_start)), key=lambda i: by_start[i].end)
    longest = [0] * len(by_start)  # the longest chain ending with request i
    before, j = 0, 0  # the longest chain among requests answered before the current start
    for i, r in enumerate(by_start):
        while j < len(by_end) and by_start[by_end[j]].end <= r.start:
            before = max(before, longest[by_end[j]])  # answered before r started, so already visited
            j += 1
        longest[i] = before + 1
    return max(longest, default=0)
