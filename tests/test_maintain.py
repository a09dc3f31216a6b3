"""``maintain`` end to end on real tables: the ranked queue, what runs, the budget, failures, the CLI, the page.

Tables are written in one commit each (``maintenance_tables``); the runs go through the real
operations (``ops.optimize``, ``ops.purge``, ``ops.vacuum``, ``ops.analyze``) and, for the CLI, a
real process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from deltalake import DeltaTable

from dbt_delta_optimize.errors import InvalidArgumentError, InvalidConfigError
from dbt_delta_optimize.ops import maintain_runners
from dbt_delta_optimize.ops.maintain import maintain
from tests.helpers import browser_probe, data_files, log_snapshot
from tests.maintenance_tables import hidden_check_tables, make_table


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


def _logs(tables: dict[str, str]) -> dict[str, dict[str, bytes]]:
    return {k: log_snapshot(p) for k, p in tables.items()}


def _log_actions(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _rows(path: str) -> int:
    return int(DeltaTable(path).to_pyarrow_table().num_rows)  # read: count() trusts stats, F has none


def test_the_issues_five_tables_dry_run_then_max_tables_then_a_second_run(tmp_path):
    t = hidden_check_tables(str(tmp_path))
    rows = {k: _rows(p) for k, p in t.items()}
    before = _logs(t)
    e_files = data_files(t["E"])
    e_tombstoned = {r["remove"]["path"] for r in _log_actions(t["E"], 1) if "remove" in r}
    assert len(e_tombstoned) == 3 and e_tombstoned < e_files
    names = ["F", "E", "C", "B", "A", "A", "./A"]  # given out of order, A three times
    dry = cli("maintain", *names, "--dry-run", "--json", cwd=str(tmp_path))
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)["tables"]
    order = [e["table"] for e in listed]
    assert sorted(order) == ["A", "B", "C", "E", "F"] and order[:2] == ["A", "B"] and order[-1] == "C"  # each once
    assert [e["rank"] for e in listed] == [1, 2, 3, 4, 5]
    by = {e["table"]: e for e in listed}
    assert by["A"]["score"] > by["B"]["score"] > 0
    assert by["A"]["actions"] == ["optimize"] and by["B"]["actions"] == ["optimize"]
    assert by["C"]["actions"] == [] and by["C"]["score"] == 0
    assert by["E"]["actions"] == ["vacuum"] and by["E"]["benefit"]["reclaimableFiles"] == 3
    assert by["F"]["actions"] == ["analyze"] and by["F"]["benefit"]["filesWithoutStats"] == 1
    for e in listed:
        assert {"table", "rank", "actions", "score", "benefit", "cost", "reason"} <= set(e)
    assert _logs(t) == before  # a dry run writes nothing

    one = cli("maintain", *names, "--max-tables", "1", "--json", cwd=str(tmp_path))
    assert one.returncode == 0, one.stderr
    report = {e["table"]: e for e in json.loads(one.stdout)["tables"]}
    assert report["A"]["status"] == "done" and report["A"]["ran"][0]["metrics"]["numFilesRemoved"] == 160
    assert {report[k]["status"] for k in "BEF"} == {"deferred"} and report["C"]["status"] == "nothing to do"
    after_one = _logs(t)
    assert after_one["A"] != before["A"]
    assert all(after_one[k] == before[k] for k in "BCEF")  # only A changed
    assert len(DeltaTable(t["A"]).file_uris()) == 1 and _rows(t["A"]) == rows["A"]

    second = cli("maintain", *names, "--json", cwd=str(tmp_path))
    assert second.returncode == 0, second.stderr
    again = {e["table"]: e for e in json.loads(second.stdout)["tables"]}
    assert again["A"]["actions"] == [] and again["C"]["actions"] == []
    assert again["B"]["status"] == "done" and len(DeltaTable(t["B"]).file_uris()) == 1
    assert again["E"]["actions"] == ["vacuum"] and again["F"]["actions"] == ["analyze"]
    assert {again[k]["status"] for k in "EF"} == {"done"}
    assert [r["status"] for k in "EF" for r in again[k]["ran"]] == ["done", "done"]
    # VACUUM deleted E's three expired tombstoned files, and nothing else
    assert again["E"]["ran"][0]["metrics"]["filesDeleted"] == 3
    assert e_files - data_files(t["E"]) == e_tombstoned and data_files(t["E"]) == e_files - e_tombstoned
    assert e_files - e_tombstoned == {a["path"] for a in _adds(t["E"])}
    # ANALYZE gave F's file its statistics
    f_adds = _adds(t["F"])
    assert len(f_adds) == 1 and json.loads(f_adds[0]["stats"])["numRecords"] == rows["F"]
    after = _logs(t)
    assert after["C"] == before["C"]
    assert {k: _rows(p) for k, p in t.items()} == rows

    # maintain's scoring sees VACUUM's commits (and _last_vacuum_info) and the new stats: nothing left for E, F
    third = cli("maintain", *names, "--json", cwd=str(tmp_path))
    assert third.returncode == 0, third.stderr
    last = {e["table"]: e for e in json.loads(third.stdout)["tables"]}
    assert [last[k]["actions"] for k in "ABCEF"] == [[]] * 5
    assert {k: _rows(p) for k, p in t.items()} == rows


def _adds(path: str) -> list[dict]:
    """The live add actions, replayed from the JSON log (these tables have no checkpoint)."""
    live: dict[str, dict] = {}
    log = os.path.join(path, "_delta_log")
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        for action in _log_actions(path, int(name.split(".")[0])):
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return list(live.values())


def test_the_dry_run_prints_the_ranked_queue_as_a_table(tmp_path):
    t = hidden_check_tables(str(tmp_path))
    out = cli("maintain", *t, "--dry-run", cwd=str(tmp_path))  # the names, relative to the working directory
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = lines[0]
    for column in ("table", "actions", "benefit", "cost", "score", "why"):
        assert column in header
    order = [line.split()[1] for line in lines[2:-1] if line.split() and line.split()[0].isdigit()]
    assert order[:2] == ["A", "B"] and order[-1] == "C" and sorted(order) == ["A", "B", "C", "E", "F"]
    assert "160 small files" in out.stdout and "nothing to do" in out.stdout


def test_bad_input_exits_2_and_writes_nothing(tmp_path):
    t = hidden_check_tables(str(tmp_path))
    before = _logs(t)
    for args in (["--only", "optimize,defrag"], ["--budget", "soon"], ["--max-tables", "0"]):
        out = cli("maintain", t["A"], *args, cwd=str(tmp_path))
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert out.stderr.startswith("error:") and "Traceback" not in out.stderr
    assert _logs(t) == before
    with pytest.raises(InvalidArgumentError):
        maintain(None, t["A"], dry_run=True)  # a string, not a list
    for bad in ("0s", 0, -1.5, True):
        with pytest.raises(InvalidConfigError):
            maintain(None, [t["A"]], budget=bad, dry_run=True)


def test_a_failed_table_is_reported_and_the_others_run(tmp_path):
    t = hidden_check_tables(str(tmp_path))
    missing = str(tmp_path / "nope")
    corrupt = make_table(str(tmp_path / "corrupt"), 4)
    with open(os.path.join(corrupt, "_delta_log", f"{1:020d}.json"), "w") as fh:
        fh.write("{not json\n")
    out = cli("maintain", missing, t["B"], corrupt, "--json", cwd=str(tmp_path))
    assert out.returncode in (1, 2), out.stderr
    report = {e["table"]: e for e in json.loads(out.stdout)["tables"]}
    assert report[missing]["status"] == "failed" and report[missing]["error"]
    assert report[corrupt]["status"] == "failed"
    assert report["B"]["status"] == "done" if "B" in report else report[t["B"]]["status"] == "done"
    assert len(DeltaTable(t["B"]).file_uris()) == 1


def test_an_action_that_fails_stops_its_table_only(tmp_path, monkeypatch):
    t = hidden_check_tables(str(tmp_path))

    def broken(request):
        if request.table.name == t["A"]:
            raise RuntimeError("disk on fire")
        return maintain_runners.run_optimize(request)

    monkeypatch.setitem(maintain_runners.RUNNERS, "optimize", broken)
    before = log_snapshot(t["A"])
    report = maintain(None, [t["A"], t["B"]])
    by = {o.table: o for o in report.tables}
    assert by[t["A"]].status == "failed" and "disk on fire" in (by[t["A"]].error or "")
    assert by[t["B"]].status == "done" and report.exit_code == 1
    assert log_snapshot(t["A"]) == before


def test_an_analyze_with_a_file_it_cannot_read_fails_the_action(tmp_path):
    """F's only file is not Parquet any more: ANALYZE lists it as failed, which fails maintain's action."""
    path = make_table(str(tmp_path / "F"), 1, stats=False)
    (name,) = data_files(path)
    with open(os.path.join(path, name), "wb") as fh:
        fh.write(b"not parquet")
    before = log_snapshot(path)
    report = maintain(None, [path])
    (table,) = report.tables
    assert table.status == "failed" and "1 file(s) failed to analyze" in (table.error or "")
    assert report.exit_code == 1 and log_snapshot(path) == before


def test_no_new_work_after_the_budget_and_a_second_run_continues(tmp_path, monkeypatch):
    """Each rewrite is the real one, then holds its worker 1.2 s: a 1 s budget lets only the worst table start."""
    paths = [make_table(str(tmp_path / f"t{n:02d}"), n) for n in (12, 8, 5, 3)]

    def slow(request):
        out = maintain_runners.run_optimize(request)
        time.sleep(1.2)
        return out

    monkeypatch.setitem(maintain_runners.RUNNERS, "optimize", slow)
    first = maintain(None, paths, budget=1, workers=1)
    status = [(o.table, o.status) for o in first.tables]
    assert status[0] == (paths[0], "done")
    assert [s for _, s in status[1:]] == ["deferred"] * 3
    assert all(
        o.deferred_reason == "budget spent" and o.score is not None and o.score.score > 0 for o in first.tables[1:]
    )
    assert first.wall_seconds < 1 + 1.2 + 1.0  # the one started table's time past the budget, no more
    second = maintain(None, paths, budget=1, workers=1)
    assert [o.table for o in second.tables if o.status == "done"] == [paths[1]]  # the next worst
    assert second.tables[0].table == paths[1]


def test_tables_run_concurrently_on_the_pool_and_predicted_sits_beside_actual(tmp_path):
    paths = [make_table(str(tmp_path / f"t{n}"), 4 + n) for n in range(4)]
    report = maintain(None, paths, workers=2)
    assert report.workers == 2 and {o.status for o in report.tables} == {"done"}
    for o in report.tables:
        (ran,) = o.ran
        assert ran.seconds > 0 and ran.predicted_seconds > 0 and ran.predicted_raw_seconds > 0
        assert len(DeltaTable(o.table).file_uris()) == 1


def test_the_previous_runs_actual_seconds_calibrate_the_prediction(tmp_path):
    t = make_table(str(tmp_path / "t"), 6)
    state = str(tmp_path / "state.json")
    out = cli("maintain", t, "--state", state, "--json", cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    with open(state) as fh:
        ran = json.load(fh)["tables"][0]["ran"][0]
    factor = ran["seconds"] / ran["predictedRawSeconds"]
    shutil.rmtree(t)
    make_table(t, 6)
    dry = cli("maintain", t, "--state", state, "--dry-run", "--json", cwd=str(tmp_path))
    est = json.loads(dry.stdout)["tables"][0]["estimates"][0]["cost"]
    assert est["calibration"] == "previous run"
    assert est["seconds"] == pytest.approx(est["rawSeconds"] * min(5.0, max(0.2, factor)), rel=0.01, abs=0.002)


def test_the_project_page_in_a_real_browser(tmp_path):
    t = hidden_check_tables(str(tmp_path / "tables"))
    page = str(tmp_path / "project.html")
    out = cli("maintain", *t.values(), "--html", page, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    # what the browser reports back: rows, verdicts, and whether every chart decoded to a picture
    seen = browser_probe(
        page,
        "{rows: [...document.querySelectorAll('tr.table-row')].map(r => [r.dataset.table,"
        " r.querySelector('.verdict').textContent]),"
        "images: [...document.images].map(i => [i.id, i.complete, i.naturalWidth])}",
        str(tmp_path),
    )
    verdicts = {name: verdict for name, verdict in seen["rows"]}
    assert list(verdicts)[:2] == [t["A"], t["B"]] and list(verdicts)[-1] == t["C"]  # rank order
    # compacted, vacuumed, analyzed by this run
    assert verdicts[t["A"]] == verdicts[t["B"]] == verdicts[t["E"]] == verdicts[t["F"]] == "maintained"
    assert verdicts[t["C"]] == "healthy"
    ids = {i for i, complete, width in seen["images"] if complete and width > 0}
    assert ids == {"chart-scores", "chart-sizes", "chart-cost"}
