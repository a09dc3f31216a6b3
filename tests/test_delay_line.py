"""The bench's delay line (bench/delay_line.py) in front of a real moto server: every request is counted by kind
on a kept-alive connection, and each one waits a full round trip."""

from __future__ import annotations

import time

from bench.delay_line import DelayLine, Request, critical_path


def test_requests_by_kind_and_their_round_trips(s3_server):
    import obstore
    from obstore.store import S3Store

    bucket = s3_server.new_bucket()
    env = s3_server.env()
    port = int(s3_server.endpoint.rsplit(":", 1)[1])
    with DelayLine(("127.0.0.1", port), one_way_s=0.015) as line:
        store = S3Store(
            bucket,
            endpoint=line.endpoint,
            access_key_id=env["AWS_ACCESS_KEY_ID"],
            secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
            client_options={"allow_http": True},
        )
        steps = [
            lambda: obstore.put(store, "a.bin", b"x" * 200_000),  # a body larger than one read
            lambda: obstore.get(store, "a.bin").bytes(),
            lambda: obstore.get_range(store, "a.bin", start=0, end=10),
            lambda: obstore.head(store, "a.bin"),
            lambda: obstore.list(store, prefix="a").collect(),
            lambda: obstore.delete(store, ["a.bin"]),
        ]
        took = []
        for step in steps:
            t = time.monotonic()
            step()
            took.append(time.monotonic() - t)
        seen = line.requests()
    assert [r.kind for r in seen] == [
        "PUT",
        "GET",
        "RANGE_GET",
        "HEAD",
        "LIST",
        "BATCH_DELETE",
    ]  # obstore deletes in batches
    assert min(took) >= 0.030  # each request waited its round trip (the first one its handshake too)
    assert critical_path(seen) == 6  # one after another


def test_critical_path_counts_dependent_steps_not_requests():
    def r(start: float, end: float) -> Request:
        return Request("GET", "GET", "/", start, end)

    # three concurrent GETs, then two concurrent ones after them, then one: three round trips
    seen = [r(0, 1), r(0, 1.1), r(0.1, 1), r(1.2, 2), r(1.15, 2.1), r(2.2, 3)]
    assert critical_path(seen) == 3
    assert critical_path([]) == 0
