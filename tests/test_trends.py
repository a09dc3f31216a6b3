"""Trends on a real table with thirty days of history, against the log and deltalake; the pages in a real browser.

The table is written by the real writers (the fixture's first commit as delta-spark writes it, deltalake's
appends, OPTIMIZE, DELETE and VACUUM, and our own COMPUTE STATS), then each commit is moved to a chosen day:
its commitInfo timestamp, its removes' deletionTimestamp and its file's modification time. deltalake loads
each day's version for the expected live files; the tombstones are read from the raw log; the bytes retained
today are the data files on disk that are not live.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.inspect.health import health_report
from dbt_delta_optimize.inspect.table_trends import table_trends
from dbt_delta_optimize.inspect.trends import DAY_MS
from dbt_delta_optimize.ops.analyze import analyze
from tests.helpers import browser_probe, data_files
from tests.maintenance_tables import make_table

SMALL = 1000  #: the small-file threshold the trends are asked for (between the fixture's sizes)
RETENTION = 2 * DAY_MS  #: the table's delta.deletedFileRetentionDuration


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [f"v{i:06d}" for i in range(n)]})


def _log(root: str, v: int) -> str:
    return os.path.join(root, "_delta_log", f"{v:020d}.json")


def _actions(root: str, v: int) -> list[dict]:
    with open(_log(root, v), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _move(root: str, v: int, ts: int) -> None:
    """Commit ``v`` happened at ``ts``: its commitInfo, its removes' deletion time and its file's mtime."""
    out = []
    for a in _actions(root, v):
        if "commitInfo" in a:
            a["commitInfo"]["timestamp"] = ts
        if "remove" in a:
            a["remove"]["deletionTimestamp"] = ts
        out.append(json.dumps(a))
    with open(_log(root, v), "w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")
    os.utime(_log(root, v), (ts / 1000, ts / 1000))


def a_month(root: str, now: int) -> dict[int, int]:
    """The table and when each version happened (ms)."""
    make_table(root, 5, stats=False, configuration={"delta.deletedFileRetentionDuration": "interval 2 days"})
    write_deltalake(root, _rows(1000, 10), mode="append")  # v1
    analyze(None, root)  # v2: COMPUTE STATS re-adds the five files with statistics
    write_deltalake(root, _rows(1100, 10), mode="append")  # v3
    DeltaTable(root).optimize.compact()  # v4: seven files into one
    DeltaTable(root).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)  # v5, v6
    DeltaTable(root).delete("id < 5")  # v7: the compacted file rewritten
    write_deltalake(root, _rows(2000, 10), mode="append")  # v8
    DeltaTable(root).delete("id >= 2000")  # v9: v8's file removed
    when = {
        0: now - 29 * DAY_MS,
        1: now - 25 * DAY_MS,
        2: now - 20 * DAY_MS,
        3: now - 15 * DAY_MS,
        4: now - 10 * DAY_MS,
        5: now - 8 * DAY_MS - DAY_MS // 2,
        6: now - 8 * DAY_MS - DAY_MS // 2 + 2000,
        7: now - 3 * DAY_MS,
        8: now - DAY_MS,
        9: now - 600_000,
    }
    assert sorted(int(n[:20]) for n in os.listdir(os.path.join(root, "_delta_log")) if n.endswith(".json")) == list(
        when
    )
    assert [_actions(root, v)[0]["commitInfo"]["operation"] for v in (2, 4, 5, 6)] == [
        "COMPUTE STATS",
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
    ]
    for v, ts in when.items():
        _move(root, v, ts)
    return when


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).date().isoformat()


def _ends(now: int, days: int) -> list[int]:
    first = now // DAY_MS - (days - 1)
    return [(first + i + 1) * DAY_MS for i in range(days - 1)] + [now]


def expected_day(root: str, when: dict[int, int], end: int) -> dict | None:
    """What the log says at ``end``: deltalake's live files at the last version by then, and the raw log's
    tombstones not live and not deleted by a VACUUM by then."""
    versions = [v for v, ts in when.items() if ts <= end]
    if not versions:
        return None
    at = max(versions)
    adds = pa.table(DeltaTable(root, version=at).get_add_actions(flatten=True)).to_pylist()
    live = {a["path"] for a in adds}
    newest: dict[str, tuple[int, int]] = {}
    cutoff = None
    for v in range(at + 1):
        acts = _actions(root, v)
        info = acts[0]["commitInfo"]
        if info["operation"] == "VACUUM START":
            start = when[v] - int(info["operationParameters"]["specifiedRetentionMillis"])
        if info["operation"] == "VACUUM END" and info["operationParameters"]["status"] == "COMPLETED":
            cutoff = start
        for a in acts:
            if "remove" in a:
                newest[a["remove"]["path"]] = (a["remove"]["deletionTimestamp"], a["remove"]["size"])
    kept = {p: ds for p, ds in newest.items() if p not in live and (cutoff is None or ds[0] >= cutoff)}
    files = len(adds)
    return {
        "files": files,
        "bytes": sum(a["size_bytes"] for a in adds),
        "smallFiles": sum(1 for a in adds if a["size_bytes"] < SMALL),
        "statsCoverage": round(sum(1 for a in adds if a["num_records"] is not None) / files, 4) if files else 1.0,
        "retainedBytes": sum(s for _, s in kept.values()),
        "retainedFiles": len(kept),
        "reclaimableBytes": sum(s for d, s in kept.values() if d + RETENTION < end),
    }


NUMBERS = ("files", "bytes", "smallFiles", "statsCoverage", "retainedBytes", "retainedFiles", "reclaimableBytes")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("trends") / "t")
    now = int(time.time() * 1000)
    return root, now, a_month(root, now)


@pytest.mark.parametrize("days", [31, 30, 7])
def test_each_days_numbers_are_what_the_log_says(history, days):
    root, now, when = history
    snapshot = load_snapshot(root)
    adds = pa.table(DeltaTable(root).get_add_actions(flatten=True)).to_pylist()
    lacking = sum(1 for a in adds if a["num_records"] is None)
    t = table_trends(snapshot, now_ms=now, days=days, small_below=SMALL, lacking=lacking).to_dict()
    assert len(t["daily"]) == days and t["to"] == _date(now)
    known = 0
    for point, end in zip(t["daily"], _ends(now, days)):
        want = expected_day(root, when, end)
        got = {k: point[k] for k in NUMBERS}
        if want is None:  # before the table's first commit
            assert set(got.values()) == {None}, point
            continue
        known += 1
        assert got == want, (point["date"], got, want)
    # 30 and 31 days reach back to version 0 (read: the days before it are unknown); 7 days stop at the
    # first commit older than the window (read, not applied: the state after it began the window)
    assert t["knownSince"] == (_date(when[0]) if days > 7 else None)
    assert known == (30 if days > 7 else 7)
    assert t["commitsRead"] == (10 if days > 7 else 3)
    # per day: the commits, the maintenance commits (COMPUTE STATS, OPTIMIZE, VACUUM) and the VACUUM's 2 s
    start = (now // DAY_MS - (days - 1)) * DAY_MS
    ops = {v: _actions(root, v)[0]["commitInfo"]["operation"] for v in when}
    for point in t["daily"]:
        on = [v for v, ts in when.items() if ts >= start and _date(ts) == point["date"]]
        assert point["commits"] == len(on)
        assert point["maintenanceCommits"] == sum(1 for v in on if ops[v] != "WRITE" and ops[v] != "DELETE")
        assert point["maintenanceSeconds"] == (2.0 if 6 in on else 0.0)
    if days > 7:  # the COMPUTE STATS commit lifted the coverage: before it one file in six had stats
        daily = {d["date"]: d for d in t["daily"]}
        assert (
            daily[_date(when[1])]["statsCoverage"] == round(1 / 6, 4) and daily[_date(when[2])]["statsCoverage"] == 1.0
        )
    # today: the bytes the tombstones retain are the data files on disk that are not live
    on_disk = data_files(root) - {a["path"] for a in adds}
    assert t["retainedBytes"] == sum(os.path.getsize(os.path.join(root, p)) for p in on_disk) > 0
    assert t["daily"][-1]["retainedFiles"] == len(on_disk) == 2
    # v7's tombstone is three days old (past the two-day retention); v9's becomes reclaimable in two days
    v7 = next(a["remove"]["size"] for a in _actions(root, 7) if "remove" in a)
    v9 = next(a["remove"]["size"] for a in _actions(root, 9) if "remove" in a)
    assert t["reclaimableBytes"] == v7
    due = _date(when[9] + RETENTION)
    assert t["upcoming"] == [{"date": due, "bytes": v9, "files": 1}] and t["nextReclaim"] == t["upcoming"][0]
    assert t["requestsKnown"] is False and {d["requests"] for d in t["daily"]} == {None}


def test_a_checkpoint_and_a_cleaned_up_log_leave_the_days_before_the_oldest_commit_unknown(history, tmp_path):
    root, now, when = history
    copy = str(tmp_path / "t")
    shutil.copytree(root, copy)
    for v in when:  # copytree keeps the commits' modification times; make sure of it
        os.utime(_log(copy, v), (when[v] / 1000, when[v] / 1000))
    DeltaTable(copy).create_checkpoint()  # at version 9: the live files and the unexpired tombstones
    for v in range(7):  # log retention cleaned versions 0..6 up
        os.remove(_log(copy, v))
    snapshot = load_snapshot(copy)
    assert snapshot.version == 9
    t = table_trends(snapshot, now_ms=now, days=30, small_below=SMALL, lacking=0).to_dict()
    assert t["knownSince"] == _date(when[7]) and t["commitsRead"] == 3
    for point, end in zip(t["daily"], _ends(now, 30)):
        got = {k: point[k] for k in NUMBERS}
        if end < when[7]:
            assert set(got.values()) == {None}, point
        else:  # what the whole log says about those days
            assert got == expected_day(root, when, end), (point["date"], got)
    assert (
        t["upcoming"]
        == table_trends(load_snapshot(root), now_ms=now, days=30, small_below=SMALL, lacking=0).to_dict()["upcoming"]
    )


def test_health_gives_the_trends_and_agrees_with_its_vacuum_estimate(history):
    root, _, _ = history
    report = health_report(root, min_file_size=SMALL, trend_days=30).to_dict()
    t = report["trends"]
    assert t["days"] == 30 and t["reclaimableBytes"] == report["vacuum"]["reclaimableBytes"] > 0
    today = t["daily"][-1]
    assert today["files"] == report["numFiles"] and today["bytes"] == report["sizeBytes"]
    assert today["smallFiles"] == report["smallFiles"]["optimize"]
    assert today["statsCoverage"] == 1.0 and report["statistics"]["filesWithoutStats"] == 0


def cli(*args: str, cwd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run(
        [sys.executable, "-m", "dbt_delta_optimize.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


SPARKS = (
    "[...document.querySelectorAll('svg.spark')].map(s => [s.dataset.metric,"
    " Math.round(s.getBoundingClientRect().width), s.querySelectorAll('polyline').length,"
    " s.querySelector('title').textContent])"
)


def test_the_pages_show_the_trends_reclaim_dates_and_deferral_streaks_in_a_browser(history, tmp_path):
    root, _, _ = history
    tables = {"H": root}
    for name, n in (("S1", 3), ("S2", 4), ("S3", 6)):  # written without statistics: analyze has work on each
        tables[name] = make_table(str(tmp_path / name), n, stats=False)
    page, state = str(tmp_path / "project.html"), str(tmp_path / "state.json")
    args = [*tables.values(), "--only", "analyze", "--max-tables", "1", "--state", state]
    for _ in range(2):  # S3 first, then S2; S1 waits both nights
        out = cli("maintain", *args, "--html", page, "--json", cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr
    report = {t["table"]: t for t in json.loads(out.stdout)["tables"]}
    assert [report[tables[k]]["deferredStreak"] for k in ("S1", "S2", "S3", "H")] == [2, 0, 0, 0]
    assert report[tables["S2"]]["status"] == "done" and report[tables["S1"]]["status"] == "deferred"
    with open(state, encoding="utf-8") as fh:
        assert len(json.load(fh)["history"]) == 2
    h = report[root]["trends"]
    assert h["days"] == 30 and h["nextReclaim"]["bytes"] > 0
    seen = browser_probe(
        page,
        "{rows: [...document.querySelectorAll('tr.table-row')].map(r => [r.dataset.table,"
        " r.querySelector('td.streak').textContent, r.querySelector('td.tombstones').textContent,"
        " r.querySelectorAll('svg.spark').length]), sparks: " + SPARKS + "}",
        str(tmp_path),
    )
    rows = {name: (streak, tomb, n) for name, streak, tomb, n in seen["rows"]}
    assert rows[tables["S1"]][0] == "2" and rows[tables["S2"]][0] == "0"
    due = h["nextReclaim"]["date"]
    assert f"reclaimable on {due}" in rows[root][1]
    # every row: files, bytes, small files, coverage, retained, maintenance seconds; a run's cost where work ran
    assert rows[root][2] == 6 and rows[tables["S2"]][2] == 7 and rows[tables["S3"]][2] == 7
    assert all(width > 0 for _, width, _, _ in seen["sparks"])
    files = [title for metric, _, lines, title in seen["sparks"] if metric == "files" and lines]
    assert any("files, last 30 days" in t for t in files)

    health_page = str(tmp_path / "health.html")
    out = cli("health", root, "--html", health_page, "--trend-days", "30", "--min-file-size", "1000", cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert f"reclaimable on {due}" in out.stdout
    seen = browser_probe(
        health_page,
        "{metrics: [...document.querySelectorAll('#trends tr[data-metric]')].map(r => [r.dataset.metric,"
        " r.cells[3].textContent]), next: document.getElementById('next-reclaim').textContent, sparks: " + SPARKS + "}",
        str(tmp_path),
    )
    metrics = dict(seen["metrics"])
    assert list(metrics) == [
        "files",
        "bytes",
        "smallFiles",
        "statsCoverage",
        "retainedBytes",
        "reclaimableBytes",
        "maintenanceSeconds",
    ]
    assert metrics["files"] == str(h["daily"][-1]["files"]) and metrics["statsCoverage"] == "100%"
    assert seen["next"].endswith(f"reclaimable on {due}")
    assert len(seen["sparks"]) == 7 and all(w > 0 and lines >= 1 for _, w, lines, _ in seen["sparks"])


def test_a_trend_window_out_of_range_is_refused_before_any_table_is_read(tmp_path):
    for command in ("health", "maintain"):
        out = cli(command, str(tmp_path / "nosuch"), "--trend-days", "5000", cwd=str(tmp_path))
        assert out.returncode == 2 and "trend_days must be at most 3650" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
        zero = cli(command, str(tmp_path / "nosuch"), "--trend-days", "0", cwd=str(tmp_path))
        assert zero.returncode == 2 and "--trend-days" in zero.stderr
