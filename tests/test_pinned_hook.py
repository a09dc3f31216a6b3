"""The post-hook after its pre-hook on an object store: the pre-hook's snapshot moved on, not loaded again.

Every request is seen by the bench's delay line (bench/delay_line.py) in front of a moto server: a post-hook that
decides there is nothing to do lists the log from the pinned version and reads the new commits, at most 3 round
trips (issue 44); the snapshot it decides from is the one a fresh load gives.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from bench.delay_line import DelayLine, critical_path

#: 25 ms each way: a request made after another's answer is a link ``critical_path`` counts.
ONE_WAY_S = 0.025


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket, the standard AWS variables set (pointing at moto itself until a line is put between)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server, f"s3://{s3_server.new_bucket()}"


def _append(url: str, commits: int, start: int = 0) -> None:
    for i in range(start, start + commits):
        ids = list(range(i * 4, i * 4 + 4))
        write_deltalake(url, pa.table({"id": ids, "part": [j % 4 for j in ids]}), partition_by=["part"], mode="append")


def _same(a, b) -> None:
    assert a.version == b.version and a.protocol == b.protocol and a.metadata == b.metadata
    assert a.file_table.paths == b.file_table.paths and a.file_table.sizes == b.file_table.sizes
    # the version that added each file: exact from the commits replayed, a checkpoint's own for the adds it holds
    assert all(x <= y for x, y in zip(a.file_table.versions.to_pylist(), b.file_table.versions.to_pylist()))


def test_a_snapshot_moved_on_is_a_fresh_load_and_reads_only_the_new_commits(s3):
    from dbt_delta_optimize.delta.snapshot import load_snapshot, update_snapshot
    from dbt_delta_optimize.delta.storage import storage_of
    from dbt_delta_optimize.ops.table import _own_counter

    _, root = s3
    url = f"{root}/t"
    _append(url, 8)
    before = load_snapshot(url, storage=storage_of(url))
    _append(url, 3, start=8)
    DeltaTable(url).create_checkpoint()  # a checkpoint among the new commits is not needed: the old one serves
    DeltaTable(url).delete("id < 8")  # removes
    storage = _own_counter(before.storage)
    after = update_snapshot(before, storage=storage)
    _same(after, load_snapshot(url, storage=storage_of(url)))
    assert after.version == 11 and len(after.file_table) == 36
    # one listing from version 7 on, the four new commits; the checkpoint and the commits read before are kept
    assert storage.requests.to_dict()["byKind"] == {"list": 1, "get": 4}
    assert before.storage.requests.to_dict()["byKind"] == {"list": 1, "get": 8}  # the pre-hook's own count
    same = update_snapshot(after, storage=_own_counter(after.storage))
    assert same.version == 11 and same.storage.requests.to_dict()["byKind"] == {"list": 1}


def test_a_table_made_anew_in_its_place_is_loaded_anew(s3):
    """The log listed on from the pinned version is another table's when the path was emptied and written again
    (its version 3 is not the one listed before): the snapshot is loaded, never mixed with the old commits."""
    import obstore

    from dbt_delta_optimize.delta.snapshot import load_snapshot, update_snapshot
    from dbt_delta_optimize.delta.storage import storage_of

    _, root = s3
    url = f"{root}/t"
    _append(url, 4)
    before = load_snapshot(url, storage=storage_of(url))
    store = before.storage._store
    keys = [m["path"] for chunk in obstore.list(store, "t/") for m in chunk]
    obstore.delete(store, keys)
    _append(url, 6, start=100)
    after = update_snapshot(before)
    _same(after, load_snapshot(url, storage=storage_of(url)))
    assert after.version == 5 and all(v >= 0 for v in after.file_table.versions.to_pylist())
    assert set(after.file_table.paths).isdisjoint(before.file_table.paths)


def test_pinned_snapshots_are_bounded_taken_once_and_shared_by_threads(tmp_path):
    from dbt_delta_optimize.ops.table import PinnedSnapshots, open_table

    tables = []
    for i in range(4):
        path = str(tmp_path / f"t{i}")
        _append(path, i + 1)
        tables.append(open_table(path))
    pinned = PinnedSnapshots(max_tables=3, max_files=100)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(pinned.pin, tables))
    assert len(pinned) == 3  # the oldest went first
    kept = [t for t in tables if pinned.take(t.location, t.version, None) is not None]
    assert len(kept) == 3 and len(pinned) == 0
    pinned.pin(tables[3])
    assert pinned.take(tables[3].location, tables[3].version + 1, None) is None  # another version: not this one
    assert pinned.take(tables[3].location, tables[3].version, {"k": "v"}) is None  # other storage options
    assert pinned.take(tables[3].location, tables[3].version, None) is tables[3].snapshot
    small = PinnedSnapshots(max_files=len(tables[3].snapshot.file_table) - 1)
    small.pin(tables[3])  # larger than the bound alone: not kept
    assert len(small) == 0


@pytest.mark.spark
def test_the_post_hook_after_its_pre_hook_lists_once_and_reads_the_new_commit(spark, s3, monkeypatch, tmp_path):
    """Through the dbt bridge: the pre-hook pins version 7 and keeps the snapshot; the model writes version 8;
    the post-hook lists the log from version 7 on and reads commit 8 (2 requests, 2 round trips), and decides
    there is nothing to compact. A post-hook in another process (a fresh bridge) loads the whole log instead."""
    from dbt_delta_optimize.dbt.bridge import Bridge

    server, root = s3
    url = f"{root}/hook"
    _append(url, 8)  # 8 small files per partition: fewer than the 50 that would trigger
    target = str(tmp_path / "target")
    line = DelayLine(("127.0.0.1", int(server.endpoint.rsplit(":", 1)[1])), one_way_s=ONE_WAY_S)
    with line:
        monkeypatch.setenv("AWS_ENDPOINT_URL", line.endpoint)
        bridge = Bridge()
        bridge.record_version(url, invocation_id="inv", target_path=target)
        _append(url, 1, start=8)  # the model's write
        line.reset()
        r = bridge.run_model(url, {}, invocation_id="inv", target_path=target)
        seen = line.requests()
        bridge.record_version(url, invocation_id="inv2", target_path=target)
        _append(url, 1, start=9)
        line.reset()
        fresh = Bridge().run_model(url, {}, invocation_id="inv2", target_path=target)  # nothing pinned there
        loaded = line.requests()
    assert r["status"] == "skipInsufficientFiles", r
    assert r["auto_compact"]["sinceVersion"] == 7 and r["auto_compact"]["triggeringVersions"] == [8], r
    assert (r["files_before"], r["files_after"]) == (36, 36), r
    kinds = Counter(q.kind for q in seen)
    gets = [q.path.rsplit("/", 1)[-1] for q in seen if q.kind == "GET"]
    assert kinds == {"LIST": 1, "GET": 1} and gets == [f"{8:020d}.json"], seen
    assert len(seen) == 2 and critical_path(seen) <= 3, seen
    assert r["auto_compact"]["requests"]["total"] == 2, r["auto_compact"]["requests"]  # the post-hook's own
    assert fresh["status"] == "skipInsufficientFiles" and fresh["auto_compact"]["triggeringVersions"] == [9], fresh
    assert len(loaded) >= 10, loaded  # the whole log: a listing and its ten commits


@pytest.mark.parametrize("where", ["local", "s3"])
def test_list_after_lists_the_names_after_one_and_stops_below_another(where, s3, tmp_path):
    from dbt_delta_optimize.delta.storage import join, storage_for

    _, root = s3
    base = str(tmp_path) if where == "local" else f"{root}/dir"
    storage = storage_for(base)
    for name in ["00001.json", "00002.checkpoint.parquet", "00002.json", "00003.json", "_last", "_side/x.parquet"]:
        if where == "local":
            storage.makedirs(join(base, name.rsplit("/", 1)[0]) if "/" in name else base)
        storage.write_bytes(join(base, name), name.encode())
    found = storage.list_after(base, "00001.json", below="_")
    assert [f.path for f in found] == ["00002.checkpoint.parquet", "00002.json", "00003.json"]
    assert [f.size for f in found] == [len(f.path) for f in found] and all(f.mtime_ms > 0 for f in found)
    assert [f.path for f in storage.list_after(base, "00003.json")] == ["_last"]  # folders' contents are not listed
    assert storage.list_after(base, "zzz") == []


def test_a_log_the_load_refuses_still_pins_its_version_and_keeps_nothing(s3):
    """The pre-hook must not lose the run's start: a damaged commit is the post-hook's to report."""
    import obstore

    from dbt_delta_optimize.delta.storage import storage_for
    from dbt_delta_optimize.ops.table import PinnedSnapshots, pin_version

    _, root = s3
    url = f"{root}/bad"
    _append(url, 3)
    obstore.put(storage_for(url)._store, f"bad/_delta_log/{2:020d}.json", b"{not json\n")
    pinned = PinnedSnapshots()
    assert pin_version(url, pinned) == 2 and len(pinned) == 0
    assert pin_version(f"{root}/nothing-here", pinned) == -1 and len(pinned) == 0
    assert pin_version(f"{root}/t-ok", pinned) == -1
    _append(f"{root}/t-ok", 2)
    assert pin_version(f"{root}/t-ok", pinned) == 1 and len(pinned) == 1
