"""Everything in flight on object stores, counted through the bench's delay line (bench/delay_line.py) in front of
a real moto S3 server or Azurite: small inputs fetched many at once across a run's bins, VACUUM's deletes in
batches of 1,000 keys sent together, and ``maintain`` opening its tables at once. The line adds 10 ms each way
so that requests sent together are seen together; nothing here asserts a time.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake

from bench.delay_line import DelayLine, Request
from bench.in_flight import max_in_flight
from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.tasks.fetch_pool import FetchPool
from dbt_delta_optimize.tasks.inputs import open_inputs
from dbt_delta_optimize.tasks.messages import InputFile
from tests.helpers import deltalake_table


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _line_env(store: str, server, line: DelayLine) -> dict[str, str]:
    """The cloud's standard variables for ``server``, its endpoint replaced by the delay line's."""
    if store == "s3":
        return {**server.env(), "AWS_ENDPOINT_URL": line.endpoint}
    return {**server.env(), "AZURITE_BLOB_STORAGE_URL": line.endpoint}


@pytest.fixture(params=["s3", "azure"])
def store(request, monkeypatch):
    """(kind, server, fresh bucket or container URL), the server's variables set as a user would."""
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        root, port = f"s3://{server.new_bucket()}", int(server.endpoint.rsplit(":", 1)[1])
    else:
        server = request.getfixturevalue("azure_server")
        root, port = f"az://{server.new_container()}", int(server.url.rsplit(":", 1)[1])
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    return request.param, server, root, port


def _point_at(monkeypatch, store, line: DelayLine) -> None:
    kind, server, _, _ = store
    for key, value in _line_env(kind, server, line).items():
        monkeypatch.setenv(key, value)


def _back(monkeypatch, store) -> None:
    """The server's own endpoint again (the delay line is closed)."""
    for key, value in store[1].env().items():
        monkeypatch.setenv(key, value)


def _data(requests: list[Request]) -> list[Request]:
    return [r for r in requests if r.kind == "GET" and "_delta_log" not in r.path]


def test_a_compaction_of_200_small_files_has_dozens_of_gets_in_flight(store, monkeypatch):
    """Two bins of 100 one-kilobyte files: the old per-bin pools of 8 threads never had more than 16 GETs
    in flight; the process's shared pool has dozens, and every row is still there once."""
    _, _, root, port = store
    url = f"{root}/small"
    ids = list(range(2000))
    for i in range(100):  # one file per partition each
        part = ids[i * 20 : (i + 1) * 20]
        write_deltalake(url, pa.table({"id": part, "p": [j % 2 for j in part]}), partition_by=["p"], mode="append")
    with DelayLine(("127.0.0.1", port), one_way_s=0.010) as line:
        _point_at(monkeypatch, store, line)
        res = _run("optimize", url, "--json")
        seen = line.requests()
    _back(monkeypatch, store)
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.stdout)
    assert metrics["numFilesRemoved"] == 200 and metrics["numFilesAdded"] == 2
    data = _data(seen)
    assert len(data) == 200  # one GET per input file
    assert max_in_flight(data) >= 32, max_in_flight(data)
    assert max_in_flight(data) <= 64  # the process's pool bounds them
    assert sorted(deltalake_table(url).column("id").to_pylist()) == ids


def test_the_fetch_window_bounds_the_bytes_held_and_keeps_the_order(tmp_path):
    """Files come back in their order; the bytes fetched and not yet decoded stay within the window plus one
    file, and go back to zero when a bin stops early."""
    root = str(tmp_path)
    storage = storage_for(root)
    inputs = []
    for i in range(40):
        path = f"{root}/f{i}.parquet"
        pq.write_table(pa.table({"id": [i] * (50 + i)}), path)
        inputs.append(InputFile(path, os.path.getsize(path)))
    biggest = max(f.size for f in inputs)
    pool = FetchPool(threads=8, window_bytes=3 * biggest)
    try:
        held = []
        got = []
        for _, pf, _ in open_inputs(storage, inputs, local=False, fetch=pool):
            held.append(pool.held)
            got.append(pf.read_all().column("id")[0].as_py())
        assert got == list(range(40))
        assert max(held) <= pool.window_bytes + biggest
        assert pool.held == 0
        stopped = open_inputs(storage, inputs, local=False, fetch=pool)
        next(stopped)
        stopped.close()
        pool.shutdown(wait=True)  # fetches under way give their bytes back as they end, cancelled ones at once
        assert pool.held == 0
    finally:
        pool.shutdown()


def _orphans(root: str, n: int) -> None:
    storage = storage_for(root)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: storage.write_bytes(f"{root}/orphan-{i:05d}.parquet", b"x"), range(n)))


def test_vacuum_deletes_in_batches_of_1000_keys_sent_together(store, monkeypatch):
    """Files no version needs: 2,100 on S3 are three DeleteObjects of at most 1,000 keys; 600 on Azurite are
    three blob batches of at most 256 (obstore's split; Azurite runs them one by one, slowly); in flight
    together either way. The table's own files stay."""
    kind, _, root, port = store
    url = f"{root}/vac"
    write_deltalake(url, pa.table({"id": list(range(10))}))
    n = 2100 if kind == "s3" else 600
    _orphans(url, n)
    with DelayLine(("127.0.0.1", port), one_way_s=0.010) as line:
        _point_at(monkeypatch, store, line)
        res = _run("vacuum", url, "--retain", "0h", "--allow-short-retention", "--json")
        seen = line.requests()
    _back(monkeypatch, store)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["filesDeleted"] == n
    batches = [r for r in seen if r.kind == "BATCH_DELETE"]
    per = 1000 if kind == "s3" else 256
    sizes = [min(1000, n - i) for i in range(0, n, 1000)]
    assert len(batches) == sum(math.ceil(s / per) for s in sizes)
    assert not [r for r in seen if r.kind == "DELETE"]
    assert max_in_flight(batches) >= 2
    assert sorted(deltalake_table(url).column("id").to_pylist()) == list(range(10))


def test_maintain_dry_run_opens_its_tables_at_once(s3_server, monkeypatch):
    """Six tables on S3: their log reads overlap (the old pool opened two at a time), and the queue's order
    is the same as table by table."""
    bucket = s3_server.new_bucket()
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    tables = [f"s3://{bucket}/t{i}" for i in range(6)]
    for i, url in enumerate(tables):
        for j in range(2 + i):  # a different number of small files each: a ranked queue
            write_deltalake(url, pa.table({"id": [j]}), mode="append")
    port = int(s3_server.endpoint.rsplit(":", 1)[1])
    with DelayLine(("127.0.0.1", port), one_way_s=0.010) as line:
        monkeypatch.setenv("AWS_ENDPOINT_URL", line.endpoint)
        res = _run("maintain", *tables, "--dry-run", "--json", "--workers", "1")
        seen = line.requests()
    assert res.exit_code == 0, res.output
    ranked = [t["table"] for t in json.loads(res.stdout)["tables"]]
    assert sorted(ranked) == sorted(tables)
    spans = {}
    for r in seen:
        name = next((t for t in tables if f"/{t.rsplit('/', 1)[1]}/" in r.path + "/"), None)
        if name is not None:
            first, last = spans.get(name, (r.start, r.end))
            spans[name] = (min(first, r.start), max(last, r.end))
    assert len(spans) == len(tables)
    at_once = max_in_flight([Request("T", "T", t, a, b) for t, (a, b) in spans.items()])
    assert at_once >= 3, spans
    report = json.loads(res.stdout)["tables"]
    assert [t["rank"] for t in report] == list(range(1, len(tables) + 1))
    # the queue's own order (worst first, then by name), whichever table's log was read first
    assert ranked == [t["table"] for t in sorted(report, key=lambda t: (not t["actions"], -t["score"], t["table"]))]
