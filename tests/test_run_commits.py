"""Which commits a run made (plan.run_commits), and auto compaction deciding from all of them.

The decision is pure (commitInfo in, versions out); the hook's path is then run on a real table that
deltalake writes to: one commit per "batch", each into its own partition, as a microbatch backfill does.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.ops.auto_compact import auto_compact
from dbt_delta_optimize.plan.run_commits import commit_time_ms, run_commits, to_epoch_ms

SPARK = "Apache-Spark/4.0.0 Delta-Lake/4.0.0"


def _info(op: str, ms: int, engine: str = SPARK) -> dict[str, object]:
    return {"operation": op, "timestamp": ms, "engineInfo": engine}


#: a table created by a 4-batch microbatch run at t=1000..1003, after an earlier run's commits
BACKFILL = [
    (0, _info("CREATE TABLE AS SELECT", 100)),
    (1, _info("WRITE", 200)),
    (2, _info("OPTIMIZE", 300)),
    (3, _info("CREATE OR REPLACE TABLE AS SELECT", 1000)),
    (4, _info("WRITE", 1001)),
    (5, _info("WRITE", 1002)),
    (6, _info("WRITE", 1003)),
]


def test_a_pinned_version_takes_every_commit_after_it():
    run = run_commits(BACKFILL, latest=6, since_version=2)
    assert run.basis == "pinned" and run.versions == (3, 4, 5, 6) and run.batches == 4
    assert "version 2" in run.reason


def test_no_table_before_the_run_pins_before_version_0():
    run = run_commits(BACKFILL[:1], latest=0, since_version=-1)
    assert run.versions == (0,) and run.batches == 1 and "no table" in run.reason


def test_without_a_pin_the_commits_since_the_run_started_are_the_runs():
    run = run_commits(BACKFILL, latest=6, started_ms=999)
    assert run.basis == "started" and run.versions == (3, 4, 5, 6) and run.to_dict()["count"] == 4
    assert run_commits(BACKFILL, latest=6, started_ms=1002).versions == (5, 6)


def test_a_clock_ahead_of_the_drivers_falls_back_to_the_latest_commit():
    run = run_commits(BACKFILL, latest=6, started_ms=5000)
    assert run.versions == (6,) and "clock" in run.reason


def test_neither_known_is_the_latest_commit_alone():
    run = run_commits(BACKFILL, latest=6)
    assert run.basis == "latest" and run.versions == (6,)


def test_a_pin_past_the_logs_end_means_the_table_was_made_anew():
    run = run_commits(BACKFILL[:2], latest=1, since_version=7)
    assert run.versions == (0, 1) and "recreated" in run.reason


def test_another_writers_commit_in_the_window_is_not_counted():
    commits = [*BACKFILL[:5], (5, _info("WRITE", 1002, "delta-rs:py-1.6.6")), BACKFILL[6]]
    run = run_commits(commits, latest=6, since_version=2)
    assert run.versions == (3, 4, 6) and run.batches == 3
    ((version, why),) = run.not_counted
    assert version == 5 and "delta-rs" in why and run.to_dict()["notCounted"][0]["version"] == 5
    # OPTIMIZE commits in the window stay listed (they decide skipOwnCommit), never as a batch
    run = run_commits([*BACKFILL, (7, _info("OPTIMIZE", 1004, "dbt-delta-optimize/0.1"))], latest=7, since_version=2)
    assert run.versions == (3, 4, 5, 6, 7) and run.batches == 4 and not run.not_counted


def test_times_in_every_form():
    moment = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.timezone.utc)
    ms = int(moment.timestamp() * 1000)
    assert to_epoch_ms(moment) == to_epoch_ms(moment.replace(tzinfo=None)) == ms
    assert to_epoch_ms("2026-11-01T12:00:00+00:00") == to_epoch_ms("2026-11-01T12:00:00Z") == ms
    assert to_epoch_ms(None) is None and to_epoch_ms(ms) == ms
    assert commit_time_ms({"inCommitTimestamp": 5, "timestamp": 9}) == 5
    assert commit_time_ms({"timestamp": moment}) == ms  # a DESCRIBE HISTORY row
    with pytest.raises(TypeError):
        to_epoch_ms(True)


def _backfill(path: str, days: range, files: int) -> None:
    """Per day, ``files`` commits of one small file each into that day's partition (deltalake writes one file
    per partition and call)."""
    for day in days:
        for i in range(files):
            data = pa.table({"d": [f"2026-11-0{day}"], "id": [day * 100 + i]})
            write_deltalake(path, data, mode="append", partition_by=["d"])


def test_every_batch_of_a_backfill_is_decided_on(tmp_path):
    """Four days of commits after a pin of -1: all four partitions are chosen, not the last commit's alone."""
    path = str(tmp_path / "t")
    _backfill(path, range(1, 5), 2)
    r = auto_compact(None, path, -1, enabled=True, min_num_files=2, decide_only=True)
    assert r.triggering_versions == tuple(range(8)) and r.run is not None and r.run.batches == 8
    assert sorted(c.partition["d"] for c in r.chosen) == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert r.to_dict()["runCommits"]["basis"] == "pinned"
    # the old default (no pin, no start): the last batch's partition only
    assert [
        c.partition["d"] for c in auto_compact(None, path, None, enabled=True, min_num_files=2, decide_only=True).chosen
    ] == ["2026-11-04"]


def test_without_a_pin_the_runs_start_finds_its_batches(tmp_path):
    """An earlier run's commits (before the start) are not the run's; the run's six are."""
    path = str(tmp_path / "t")
    _backfill(path, range(1, 2), 2)
    start = DeltaTable(path).history(1)[0]["timestamp"] + 1
    _backfill(path, range(2, 5), 2)
    r = auto_compact(None, path, None, enabled=True, min_num_files=2, decide_only=True, run_started_at=start)
    assert r.run is not None and r.run.basis == "started" and r.triggering_versions == (2, 3, 4, 5, 6, 7)
    assert sorted(c.partition["d"] for c in r.chosen) == ["2026-11-02", "2026-11-03", "2026-11-04"]
