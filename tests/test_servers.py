"""The test servers' own readiness checks (tests/servers.py), against a real HTTP server on 127.0.0.1.

The standalone master's UI answers ``/json/`` with an empty body for a moment while it starts; the poll
must read that as "no worker yet" and keep waiting, not fail the session's cluster fixture.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tests.servers import _alive_workers


@contextmanager
def _ui(body: bytes) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_alive_workers_reads_a_starting_masters_empty_page_as_none():
    for body in (b"", b"<html>starting</html>", b"[]", b'{"workers": ["?"]}'):
        with _ui(body) as ui:
            assert _alive_workers(ui) == 0, body
    workers = b'{"workers": [{"state": "ALIVE"}, {"state": "DEAD"}, {"state": "ALIVE"}]}'
    with _ui(workers) as ui:
        assert _alive_workers(ui) == 2


def test_alive_workers_is_zero_when_nothing_listens():
    with _ui(b"") as ui:
        pass
    assert _alive_workers(ui) == 0
