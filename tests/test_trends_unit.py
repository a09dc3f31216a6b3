"""The daily trends from hand-built commits (``inspect.trends``), and maintain's run history (pure, milliseconds)."""

from __future__ import annotations

import json

import pytest

from dbt_delta_optimize.errors import InvalidConfigError
from dbt_delta_optimize.inspect.sparklines import cost_sparkline, sparkline, trend_rows
from dbt_delta_optimize.inspect.trends import DAY_MS, LogCommit, Totals, TrendInputs, daily_trends, trend_window
from dbt_delta_optimize.plan.maintenance_history import (
    MAX_RUNS,
    deferral_streak,
    history_of,
    request_count,
    run_record,
    runs_of,
)

NOW = 20_000 * DAY_MS + 15 * 3_600_000  # 1970 + 20,000 days, 15:00 UTC
STATS = json.dumps({"numRecords": 1, "minValues": {}, "maxValues": {}, "nullCount": {}})


def day(n: float) -> int:
    """n days before today's midnight (n < 0: after it), plus noon."""
    return (NOW // DAY_MS - int(n)) * DAY_MS + 12 * 3_600_000 - (1 if n != int(n) else 0)


def add(path: str, size: int, *, stats: bool = True, data_change: bool = True) -> dict:
    a = {"path": path, "size": size, "partitionValues": {}, "dataChange": data_change}
    if stats:
        a["stats"] = STATS
    return {"add": a}


def remove(path: str, size: int, ts: int, *, stats: bool | None = None) -> dict:
    r = {"path": path, "size": size, "deletionTimestamp": ts, "dataChange": True}
    if stats is not None:
        r["stats"] = STATS if stats else None
    return {"remove": r}


def info(op: str, **metrics: object) -> dict:
    return {"commitInfo": {"operation": op, "operationMetrics": {k: str(v) for k, v in metrics.items()}}}


def commit(v: int, ts: int, *actions: dict) -> LogCommit:
    return LogCommit(v, ts, list(actions))


def inputs(current: Totals, **kw: object) -> TrendInputs:
    base: dict = {"now_ms": NOW, "days": 5, "current": current, "small_below": 100, "retention_ms": 2 * DAY_MS}
    base.update(kw)
    return TrendInputs(**base)


def series(t, key: str) -> list:
    return [d[key] for d in t.daily]


def test_the_days_follow_the_log_from_the_state_before_the_window():
    # before the window: a (50 B, stats), b (500 B, no stats), c (60 B, stats)
    commits = [
        commit(5, day(3), info("WRITE"), add("d", 70)),  # +d
        commit(6, day(3) + 1, info("COMPUTE STATS"), add("b", 500, data_change=False)),  # b gets stats
        commit(  # OPTIMIZE: a, c, d -> e
            7,
            day(2),
            info("OPTIMIZE"),
            remove("a", 50, day(2), stats=True),
            remove("c", 60, day(2)),
            remove("d", 70, day(2)),
            add("e", 180),
        ),
        commit(8, day(0), info("WRITE"), add("f", 10, stats=False)),  # today
    ]
    current = Totals(files=3, bytes=690, small=1, lacking=1)  # b, e, f; small: f; lacking: f
    t = daily_trends(commits, inputs(current))
    assert [d["date"] for d in t.daily][-1] == "2024-10-04" and len(t.daily) == 5
    assert series(t, "files") == [3, 4, 2, 2, 3]
    assert series(t, "bytes") == [610, 680, 680, 680, 690]
    assert series(t, "smallFiles") == [2, 3, 0, 0, 1]
    assert series(t, "statsCoverage") == [round(2 / 3, 4), 1.0, 1.0, 1.0, round(2 / 3, 4)]
    assert series(t, "commits") == [0, 2, 1, 0, 1]
    assert series(t, "maintenanceCommits") == [0, 1, 1, 0, 0]
    # the OPTIMIZE's tombstones: 180 B retained from day -2, reclaimable after two days (retention)
    assert series(t, "retainedBytes") == [0, 0, 180, 180, 180]
    assert series(t, "reclaimableBytes") == [0, 0, 0, 0, 180]
    assert t.upcoming == () and series(t, "requests") == [None] * 5 and not t.has_requests


def test_ten_thousand_tombstones_inside_the_retention_say_when_they_are_reclaimable():
    removed = [remove(f"p{i}", 1000, day(1) + i) for i in range(10_000)]
    commits = [commit(3, day(1), info("DELETE"), *removed, add("q", 5000))]
    t = daily_trends(commits, inputs(Totals(1, 5000, 0, 0), retention_ms=7 * DAY_MS)).to_dict()
    assert t["reclaimableBytes"] == 0 and t["retainedBytes"] == 10_000_000
    assert t["nextReclaim"] == {"date": "2024-10-10", "bytes": 10_000_000, "files": 10_000}
    assert [d["retainedBytes"] for d in t["daily"]] == [0, 0, 0, 10_000_000, 10_000_000]


def test_a_vacuum_deletes_the_tombstones_before_its_cutoff_and_its_span_is_maintenance_time():
    old = [("old1", 300, day(9)), ("old2", 200, day(1))]  # from the checkpoint: removed before / in the window
    commits = [
        commit(
            10,
            day(1),
            {"commitInfo": {"operation": "VACUUM START", "operationParameters": {"specifiedRetentionMillis": "0"}}},
        ),
        commit(
            11,
            day(1) + 4500,
            {"commitInfo": {"operation": "VACUUM END", "operationParameters": {"status": "COMPLETED"}}},
        ),
    ]
    t = daily_trends(commits, inputs(Totals(0, 0, 0, 0), tombstones=old, days=3))
    # old1 was removed before the START (cutoff = its time, retention 0): gone from day -1 on; old2 after it stays
    assert series(t, "retainedBytes") == [300, 200, 200]
    assert series(t, "maintenanceSeconds") == [0.0, 4.5, 0.0]
    # a tombstone whose path is live again (a re-add) retains nothing
    again = daily_trends(commits, inputs(Totals(1, 200, 0, 0), tombstones=old, days=3, live_paths=frozenset({"old2"})))
    assert series(again, "retainedBytes") == [300, 0, 0]


def test_seconds_and_requests_come_from_the_commits_metrics_when_they_are_there():
    commits = [
        commit(1, day(1), info("OPTIMIZE", executionTimeMs=2500, numRequests=40), add("x", 5)),
        commit(2, day(1) + 1, info("COMPUTE STATS", startTimeMs=1000, endTimeMs=1500, getRequests=3, putRequests=4)),
        commit(3, day(0), info("WRITE", execution_time_ms=9000), add("y", 5)),  # not maintenance: counted as a commit
    ]
    t = daily_trends(commits, inputs(Totals(2, 10, 2, 0), days=2))
    assert series(t, "maintenanceSeconds") == [3.0, 0.0]
    assert series(t, "requests") == [47, 0] and t.to_dict()["requestsKnown"]


def test_days_before_the_oldest_commit_read_are_unknown():
    commits = [commit(0, day(2), info("CREATE TABLE"), add("a", 10))]
    t = daily_trends(commits, inputs(Totals(1, 10, 1, 0), since_ms=day(2)))
    assert series(t, "files") == [None, None, 1, 1, 1]
    assert t.to_dict()["knownSince"] == "2024-10-02"
    rows = trend_rows(t.to_dict())
    assert {r["key"] for r in rows} == {
        "files",
        "bytes",
        "smallFiles",
        "statsCoverage",
        "retainedBytes",
        "reclaimableBytes",
        "maintenanceSeconds",
    }
    files = next(r for r in rows if r["key"] == "files")
    assert files["first"] == "1" and files["last"] == "1" and 'data-metric="files"' in files["svg"]


def test_the_window_is_checked():
    assert trend_window(None) == 30 and trend_window("7") == 7
    for bad in (0, -1, "x", True, 4000):
        with pytest.raises(InvalidConfigError, match="trend_days"):
            trend_window(bad)


def test_a_sparkline_draws_known_days_and_leaves_gaps_for_unknown_ones():
    svg = sparkline([None, 1, 3, None, 2], metric="m", title="t <x>", dates=["a", "b", "c", "d", "e"])
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 2  # one run of two, one lone point, the last dot
    assert "t &lt;x&gt;" in svg and "<x>" not in svg
    assert sparkline([], metric="m", title="t").count("<polyline") == 0


def report(status: dict[str, str], *, when: str, dry_run: bool = False) -> dict:
    tables = []
    for name, s in status.items():
        entry = {"table": name, "status": s, "actions": ["optimize"], "cost": {"seconds": 2.0}, "ran": []}
        if s == "done":
            entry["ran"] = [
                {"action": "optimize", "status": "done", "seconds": 3.0, "predictedSeconds": 2.0, "metrics": {}}
            ]
        if s == "deferred":
            entry["deferredReason"] = "budget spent"
        tables.append(entry)
    return {"tables": tables, "generatedAt": when, "dryRun": dry_run}


def test_the_state_history_counts_deferrals_in_a_row_and_keeps_predicted_against_actual():
    nights = [
        {"A": "done", "B": "deferred"},
        {"A": "done", "B": "deferred"},
        {"A": "deferred", "B": "deferred"},
    ]
    runs: list[dict] = []
    for i, night in enumerate(nights):
        state = report(night, when=f"2024-10-0{i + 1}T02:00:00+00:00")
        state["history"] = [*runs, run_record(state)]
        runs = history_of(state)
    assert len(runs) == 3
    assert deferral_streak(runs, "B") == 3 and deferral_streak(runs, "A") == 1 and deferral_streak(runs, "C") == 0
    a = runs_of(runs, "A", "2024-10-02")
    assert [r["generatedAt"][:10] for r in a] == ["2024-10-02", "2024-10-03"]
    assert a[0]["actualSeconds"] == 3.0 and a[0]["ranPredictedSeconds"] == 2.0 and "actualSeconds" not in a[1]
    assert a[0]["ran"] == [{"action": "optimize", "status": "done", "seconds": 3.0, "predictedSeconds": 2.0}]
    svg = cost_sparkline(runs_of(runs, "A"))
    assert svg is not None and 'class="behind"' in svg and "predicted 2.0s" in svg
    assert cost_sparkline(runs_of(runs, "B")) is None
    # a state file from before the history is one run; a dry run's is none; the history is capped
    assert len(history_of(report({"B": "deferred"}, when="x"))) == 1
    assert history_of(report({"B": "deferred"}, when="x", dry_run=True)) == []
    long = {"history": [run_record(report({"B": "deferred"}, when=str(i))) for i in range(MAX_RUNS + 5)]}
    assert len(history_of(long)) == MAX_RUNS - 1 and deferral_streak(history_of(long), "B") == MAX_RUNS - 1


def test_request_counts_are_read_defensively():
    assert request_count({"numRequests": "12", "getRequests": 99}) == 12
    assert request_count({"getRequests": 3, "listRequests": "4", "other": 1}) == 7
    assert request_count({"numFiles": 3}) is None and request_count(None) is None
    assert request_count({"requests": True}) is None
