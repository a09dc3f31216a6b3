"""Requests in the metrics: what an operation reports it asked of the store, checked against what a proxy in front
of a real moto server saw (bench/delay_line.py, no added latency).

Our counter covers the requests made through our Storage; deltalake's own log reads (GETs and LISTs of the
log when a snapshot is loaded) go past it, so for those two kinds ours is a lower bound of the proxy's count,
and for every other kind the two are equal.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.delay_line import DelayLine
from dbt_delta_optimize.delta.requests import RequestCounter

#: the kinds deltalake's log replay makes beside ours
DELTALAKE_KINDS = ("GET", "LIST")


def _table(server, appends: int) -> str:
    url = f"s3://{server.new_bucket()}/t"
    opts = server.env()
    for i in range(appends):
        data = pa.table({"id": list(range(i * 20, i * 20 + 20)), "p": [i % 2] * 20})
        write_deltalake(url, data, partition_by=["p"], mode="append", storage_options=opts)
    return url


def _port(server) -> int:
    return int(server.endpoint.rsplit(":", 1)[1])


def test_optimize_json_counts_the_requests_the_proxy_saw(s3_server):
    url = _table(s3_server, 8)
    with DelayLine(("127.0.0.1", _port(s3_server)), one_way_s=0) as line:
        env = {**s3_server.env(), "AWS_ENDPOINT_URL": line.endpoint}
        cmd = [sys.executable, "-m", "dbt_delta_optimize.cli.main", "optimize", url, "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**_environ(), **env}, timeout=300)
        seen = line.counts()
    assert out.returncode == 0, out.stderr
    metrics = json.loads(out.stdout)
    req = metrics["requests"]
    assert metrics["numFilesRemoved"] == 8 and metrics["numFilesAdded"] == 2
    for kind in set(seen) | set(req["byKind"]):
        ours, proxy = req["byKind"].get(kind, 0), seen.get(kind, 0)
        if kind in DELTALAKE_KINDS:
            assert 0 < ours <= proxy, (kind, req["byKind"], seen)
        else:
            assert ours == proxy, (kind, req["byKind"], seen)
    assert req["total"] == sum(req["byKind"].values())
    # every input was read whole (one GET each), and the new files and the commit were written
    assert req["bytesRead"] >= metrics["filesRemoved"]["totalSize"]
    assert req["bytesWritten"] > metrics["filesAdded"]["totalSize"]
    assert "deltalake" in req["scope"]
    phases = [p["phase"] for p in req["phases"]]
    assert phases == ["open", "plan", "rewrite", "commit"]
    starts = [p["startS"] for p in req["phases"]]
    assert starts == sorted(starts) and req["endS"] >= starts[-1]


def test_vacuum_counts_every_request_it_made(s3_server):
    """VACUUM reads the log itself (no deltalake on a plain log): its count is the proxy's, kind by kind."""
    from dbt_delta_optimize.api import optimize, vacuum

    url = _table(s3_server, 6)
    optimize(None, url, storage_options=s3_server.env())
    with DelayLine(("127.0.0.1", _port(s3_server)), one_way_s=0) as line:
        opts = {**s3_server.env(), "AWS_ENDPOINT_URL": line.endpoint}
        m = vacuum(None, url, retain="0h", allow_short_retention=True, storage_options=opts)
        seen = line.counts()
    assert m.files_deleted == 6
    assert m.requests["byKind"] == seen
    assert m.to_dict()["requests"]["byKind"]["BATCH_DELETE"] == 1  # the six files in one DeleteObjects
    assert [p["phase"] for p in m.requests["phases"]] == ["open", "plan", "delete"]
    assert len(DeltaTable(url, storage_options=s3_server.env()).file_uris()) == 2


def test_a_task_brings_its_counts_back():
    counter = RequestCounter()
    counter.count("GET", read=10)
    task = RequestCounter()
    task.count("GET", 2, read=5)
    task.count("PUT", written=7)
    counter.merge(task.to_dict())
    counter.merge({})
    d = counter.to_dict()
    assert d["byKind"] == {"GET": 3, "PUT": 1} and d["bytesRead"] == 15 and d["bytesWritten"] == 7
    assert d["total"] == 4 and "phases" not in d


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
