"""How often a run reads a table's log on an object store: every request counted by the bench's delay line
(bench/delay_line.py) in front of a moto server.

On a store each request is a round trip and is billed: a run lists the log once, reads each log file at
most once, and reads a range of commits concurrently, not one after another.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake

from bench.delay_line import DelayLine, Request, critical_path
from dbt_delta_optimize.cli.main import cli
from tests.helpers import deltalake_table

#: 25 ms each way: a commit read after another's answer is a chain link ``critical_path`` counts.
ONE_WAY_S = 0.025


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket, the standard AWS variables set (pointing at moto itself until a line is put between)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server, f"s3://{s3_server.new_bucket()}"


def _append(url: str, commits: int) -> None:
    for i in range(commits):
        ids = list(range(i * 4, i * 4 + 4))
        data = pa.table({"id": ids, "part": [j % 4 for j in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")


def _line(server, monkeypatch, one_way_s: float) -> DelayLine:
    line = DelayLine(("127.0.0.1", int(server.endpoint.rsplit(":", 1)[1])), one_way_s=one_way_s)
    line.__enter__()
    monkeypatch.setenv("AWS_ENDPOINT_URL", line.endpoint)
    return line


def _log(seen: list[Request]) -> tuple[Counter[str], int]:
    """(GETs per log file name, LIST requests)."""
    gets = Counter(r.path.rsplit("/", 1)[-1] for r in seen if r.kind == "GET" and "/_delta_log/" in r.path)
    return gets, sum(1 for r in seen if r.kind == "LIST")


def _run(*args: str):
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res


def test_the_auto_compaction_decision_lists_once_and_reads_each_commit_once_concurrently(s3, monkeypatch):
    server, root = s3
    url = f"{root}/hook"
    _append(url, 8)  # 8 commits, 8 small files per partition: fewer than the 50 that would trigger
    line = _line(server, monkeypatch, ONE_WAY_S)
    try:
        res = _run("auto-compact", url, "--enable", "--json")
        seen = line.requests()
    finally:
        line.__exit__(None, None, None)
    assert json.loads(res.stdout)["status"] == "skipInsufficientFiles"
    gets, lists = _log(seen)
    # Before: 31 requests (the log listed 4 times, each commit read 3 or 4 times, partly one after another).
    assert lists == 1, seen
    assert set(gets) == {f"{v:020d}.json" for v in range(8)} and max(gets.values()) == 1, gets
    assert len(seen) <= 11, seen
    assert critical_path(seen) <= 4, seen  # list, then the commits at once (before: 13 round trips)


def test_optimize_reads_each_commit_file_at_most_once(s3, monkeypatch):
    server, root = s3
    url = f"{root}/opt"
    _append(url, 12)  # our commit is version 12: no checkpoint is due (every 10th), so only our reads count
    before = sorted(deltalake_table(url).column("id").to_pylist())
    line = _line(server, monkeypatch, 0.0)
    try:
        _run("optimize", url)
        seen = line.requests()
    finally:
        line.__exit__(None, None, None)
    gets, _ = _log(seen)
    commits = {n: c for n, c in gets.items() if n.endswith(".json")}
    # Before: each of the 12 commits was read 3 times (deltalake's load read them twice beside our own reader).
    assert set(commits) >= {f"{v:020d}.json" for v in range(12)}, commits
    assert max(commits.values()) == 1, commits  # the new commit 12 too: read back once by the validation
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    assert sorted(deltalake_table(url).column("id").to_pylist()) == before


def test_vacuum_reads_the_log_head_concurrently(s3, monkeypatch):
    server, root = s3
    url = f"{root}/vac"
    _append(url, 9)  # no checkpoint: the log head is the 9 commits, its protocol and metadata in the first
    line = _line(server, monkeypatch, ONE_WAY_S)
    try:
        _run("vacuum", url, "--retain", "0h", "--allow-short-retention", "--dry-run")
        seen = line.requests()
    finally:
        line.__exit__(None, None, None)
    gets, _ = _log(seen)
    assert {f"{v:020d}.json" for v in range(9)} <= set(gets) and max(gets.values()) == 1, gets
    log_reads = [r for r in seen if r.kind == "GET" and r.path.endswith(".json") and "/_delta_log/" in r.path]
    assert critical_path(log_reads) <= 3, log_reads  # before: 9, newest first one at a time


def test_maintain_scores_a_table_from_one_read_of_its_log(s3, monkeypatch):
    """Scoring, the log's facts, the trends and the last VACUUM all go on from the snapshot's load: one listing,
    each commit read once, in a few round trips (before: 37 requests in 30 round trips for 8 commits)."""
    server, root = s3
    url = f"{root}/maint"
    _append(url, 8)
    line = _line(server, monkeypatch, ONE_WAY_S)
    try:
        res = _run("maintain", url, "--dry-run", "--json")
        seen = line.requests()
    finally:
        line.__exit__(None, None, None)
    report = json.loads(res.stdout)
    [table] = report["tables"]
    assert table["status"] != "failed" and "error" not in (table["trends"] or {"error": "none"}), table
    gets, lists = _log(seen)
    assert lists == 1, seen
    assert set(gets) == {f"{v:020d}.json" for v in range(8)} and max(gets.values()) == 1, gets
    assert critical_path(seen) <= 4, seen


def _after_our_commit(seen: list[Request]) -> list[Request]:
    """The requests made once our commit's PUT was answered (the checkpoint, validation, cleanup, journal)."""
    put = next(r for r in seen if r.kind == "PUT" and r.path.endswith(".json") and "/_delta_log/" in r.path)
    return [r for r in seen if r.start >= put.end]


def _optimize_seen(server, monkeypatch, url: str) -> list[Request]:
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    line = _line(server, monkeypatch, 0.0)
    try:
        _run("optimize", url)
        return line.requests()
    finally:
        line.__exit__(None, None, None)


def test_the_checkpoint_after_our_commit_reads_nothing_again(s3, monkeypatch):
    """Our commit is version 10, a checkpoint version: the checkpoint is written from what the run holds. After
    the commit only the new commit is read (the validation), and log cleanup lists nothing more than a commit
    that writes no checkpoint does."""
    server, root = s3
    _append(f"{root}/ten", 10)
    _append(f"{root}/twelve", 12)
    before = sorted(deltalake_table(f"{root}/ten").column("id").to_pylist())
    seen = _optimize_seen(server, monkeypatch, f"{root}/ten")
    after = _after_our_commit(seen)
    log_after = Counter((r.kind, r.path.rsplit("/", 1)[-1]) for r in after if "/_delta_log/" in r.path)
    assert log_after == Counter(
        {
            ("PUT", f"{10:020d}.checkpoint.parquet"): 1,
            ("PUT", "_last_checkpoint"): 1,
            ("GET", f"{10:020d}.json"): 1,  # the validation reads the new commit back, once
        }
    ), log_after
    gets, _ = _log(seen)
    assert max(gets.values()) == 1, gets  # every log file read once in the whole run
    without = _after_our_commit(_optimize_seen(server, monkeypatch, f"{root}/twelve"))
    lists = [sum(1 for r in reqs if r.kind == "LIST") for reqs in (after, without)]
    assert lists[0] == lists[1], lists  # cleanup after the checkpoint planned from the load's listing
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    assert sorted(deltalake_table(f"{root}/ten").column("id").to_pylist()) == before
