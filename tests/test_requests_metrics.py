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
import pytest
from deltalake import DeltaTable, write_deltalake

from bench.delay_line import DelayLine
from dbt_delta_optimize.delta.requests import RequestCounter, json_kind

#: the kinds deltalake's log replay makes beside ours
DELTALAKE_KINDS = ("GET", "LIST")


def _env(server, endpoint: str) -> dict[str, str]:
    """The environment that reaches ``server`` at ``endpoint`` (the server itself, or a proxy in front of it)."""
    if hasattr(server, "new_bucket"):
        return {**server.env(), "AWS_ENDPOINT_URL": endpoint}
    return {**server.env(), "AZURITE_BLOB_STORAGE_URL": endpoint}  # Azurite's address is an environment setting


def _port(server) -> int:
    return int(_direct(server).rsplit(":", 1)[1])


def _direct(server) -> str:
    return str(getattr(server, "endpoint", None) or server.url)


def _table(server, appends: int, monkeypatch) -> str:
    for key, value in _env(server, _direct(server)).items():
        monkeypatch.setenv(key, value)
    url = f"s3://{server.new_bucket()}/t" if hasattr(server, "new_bucket") else f"az://{server.new_container()}/t"
    for i in range(appends):
        data = pa.table({"id": list(range(i * 20, i * 20 + 20)), "p": [i % 2] * 20})
        write_deltalake(url, data, partition_by=["p"], mode="append")
    return url


def test_optimize_json_counts_the_requests_the_proxy_saw(s3_server, monkeypatch):
    url = _table(s3_server, 8, monkeypatch)
    with DelayLine(("127.0.0.1", _port(s3_server)), one_way_s=0) as line:
        env = _env(s3_server, line.endpoint)
        cmd = [sys.executable, "-m", "dbt_delta_optimize.cli.main", "optimize", url, "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**_environ(), **env}, timeout=300)
        seen = line.counts()
    assert out.returncode == 0, out.stderr
    metrics = json.loads(out.stdout)
    req = metrics["requests"]
    assert metrics["numFilesRemoved"] == 8 and metrics["numFilesAdded"] == 2
    assert set(req["byKind"]) <= {json_kind(k) for k in seen}
    for kind in seen:
        ours, proxy = req["byKind"].get(json_kind(kind), 0), seen[kind]
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


@pytest.mark.parametrize("cloud", ["s3", "azure"])
def test_vacuum_counts_every_request_it_made(cloud, request, monkeypatch):
    """VACUUM reads the log itself (no deltalake on a plain log): its count is the proxy's, kind by kind."""
    from dbt_delta_optimize.api import optimize, vacuum

    server = request.getfixturevalue("s3_server" if cloud == "s3" else "azure_server")
    url = _table(server, 6, monkeypatch)
    optimize(None, url)
    with DelayLine(("127.0.0.1", _port(server)), one_way_s=0) as line:
        with monkeypatch.context() as through:
            for key, value in _env(server, line.endpoint).items():
                through.setenv(key, value)
            m = vacuum(None, url, retain="0h", allow_short_retention=True)
        seen = line.counts()
    assert m.files_deleted == 6
    assert m.requests["byKind"] == {json_kind(k): n for k, n in seen.items()}
    assert m.to_dict()["requests"]["byKind"]["batchDelete"] == 1  # the six files in one batch
    assert [p["phase"] for p in m.requests["phases"]] == ["open", "plan", "delete"]
    assert len(DeltaTable(url).file_uris()) == 2


def test_a_task_brings_its_counts_back():
    counter = RequestCounter()
    counter.count("GET", read=10)
    task = RequestCounter()
    task.count("GET", 2, read=5)
    task.count("PUT", written=7)
    task.count("RANGE_GET")
    counter.merge(task.to_dict())
    counter.merge({})
    d = counter.to_dict()
    assert d["byKind"] == {"get": 3, "rangeGet": 1, "put": 1} and d["bytesRead"] == 15 and d["bytesWritten"] == 7
    assert d["total"] == 5 and "phases" not in d and counter.by_kind()["RANGE_GET"] == 1


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_the_project_page_sums_the_requests_of_what_ran():
    from dbt_delta_optimize.inspect.project_page import project_rows

    def ran(action: str, kinds: dict[str, int], read: int, written: int) -> dict:
        requests = {"byKind": kinds, "bytesRead": read, "bytesWritten": written, "total": sum(kinds.values())}
        return {
            "action": action,
            "status": "done",
            "seconds": 1.0,
            "predictedSeconds": 1.0,
            "metrics": {"requests": requests},
        }

    report = {
        "tables": [
            {
                "rank": 1,
                "table": "a",
                "ran": [ran("compact", {"get": 3, "put": 1}, 3072, 2048), ran("vacuum", {"list": 2}, 0, 0)],
            },
            {"rank": 2, "table": "b", "ran": []},
        ]
    }
    a, b = project_rows(report)
    assert a["requests"] == "6 (3 get, 1 put, 2 list); 3.0 KiB read, 2.0 KiB written", a["requests"]
    assert b["requests"] == "-"
