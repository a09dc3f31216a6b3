"""Model settings through real dbt (dbt-spark ``method: session``): a meta key other than the sizes takes effect
in the default mode, the results file names the settings in force and their source, run-operation's ``table:``,
``where:``, ``zorder_by:``, ``tag:``, ``*`` and ``settings:`` forms reach the work, and ``on_error: fail`` fails
the model. The models live in integration_tests/models/settings/, enabled by the var ``ddo_settings``."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from tests.dbt_project import DbtProject, files_per_partition, optimize_commits, session_project

pytestmark = [pytest.mark.slow, pytest.mark.spark]

MODEL = "ddo_it.events_settings"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = session_project(tmp_path_factory.mktemp("dbt-settings"))
    yield project
    project.close()


def _vars(batch: int, **more: object) -> str:
    return json.dumps({"ddo_settings": True, "batch": batch, **more})


def _compacted_bins(project: DbtProject, path: str, before: int) -> tuple[dict, int]:
    """The model's record of the latest run, and the OPTIMIZE commits it added."""
    record = project.by_table()[MODEL]
    return record, len(optimize_commits(path)) - before


@pytest.mark.timeout(1500)  # about 9 dbt commands (a JVM each with DDO_DBT_SUBPROCESS=1)
def test_model_settings_reach_the_work_through_dbt(project):
    project("seed")
    path = str(project.work / "wh" / "ddo_it.db" / "events_settings")

    # Two runs in the default mode: each auto compaction lands as one commit per bin (commit_every: 1).
    for batch in (0, 1):
        before = len(optimize_commits(path)) if batch else 0  # batch 0 creates the table
        project("run", "-s", "events_settings", "--vars", _vars(batch))
        record, commits = _compacted_bins(project, path, before)
        assert record["settings"]["commit_every"] == {"value": [1, None], "source": "meta"}
        assert record["settings"]["min_num_files"] == {"value": 2, "source": "meta"}
        assert record["settings"]["max_threads"] == {"value": 15, "source": "default"}
        if batch == 1 or record["status"] == "runOnModifiedPartitions":
            assert record["status"] == "runOnModifiedPartitions", record
            bins = record["auto_compact"]["metrics"]["numBins"]
            assert bins == len(record["auto_compact"]["chosen"]) == 2 and commits == bins, (record, commits)
            assert record["auto_compact"]["metrics"]["committedVersions"] == sorted(
                h["version"] for h in optimize_commits(path)[:commits]
            )
    assert set(files_per_partition(path).values()) == {1}

    # A write without hooks, then run-operation's table/where/zorder_by/settings form: one partition clustered.
    project("run", "-s", "events_settings", "--vars", _vars(2, use_post_hooks=False))
    assert min(files_per_partition(path).values()) > 1
    args = {
        "table": MODEL,
        "where": "event_date = '2024-01-01'",
        "zorder_by": ["user_id"],
        "settings": {"max_threads": 1, "order": "partition"},
    }
    out = project("run-operation", "optimize", "--args", json.dumps(args))
    (r,) = project.results()
    assert r["status"] == "optimized" and f"delta_optimize {MODEL}: optimize via spark" in out, r
    assert r["settings"]["max_threads"] == {"value": 1, "source": "args"}
    assert r["settings"]["order"] == {"value": "partition", "source": "args"}
    assert r["settings"]["commit_every"]["source"] == "default"  # table: names no model, so no meta
    last = optimize_commits(path)[0]
    assert json.loads(last["operationParameters"]["zOrderBy"]) == ["user_id"]
    assert "2024-01-01" in last["operationParameters"]["predicate"]
    counts = {str(k): v for k, v in files_per_partition(path).items()}
    assert counts["2024-01-01"] == 1 and counts["2024-01-02"] > 1, counts  # only the WHERE's partition

    # tag: selects the model, whose meta keys apply under run-operation's own settings (a dry run).
    version = DeltaTable(path).version()
    tag = json.dumps({"select": "tag:ddo_settings", "dry_run": True})
    project("run-operation", "optimize", "--args", tag, "--vars", _vars(2))  # the var enables the model
    (r,) = project.results()
    assert r["status"] == "planned" and r["settings"]["commit_every"] == {"value": [1, None], "source": "meta"}

    # * selects every model: purge plans the built one and skips the tables that are not there.
    project("run-operation", "purge", "--args", json.dumps({"select": "*", "dry_run": True}), "--vars", _vars(2))
    records = project.by_table()
    assert records[MODEL]["status"] == "planned" and records[MODEL]["settings"]["min_file_size"]["source"] == "fixed"
    assert len(records) > 1 and all(x["status"] == "skipped" for t, x in records.items() if t != MODEL)
    assert DeltaTable(path).version() == version  # dry runs write nothing

    # Bad run-operation settings: refused naming the key, nothing written.
    out = project("run-operation", "optimize", "--args", json.dumps({"table": MODEL, "settings": {"mode": "x"}}))
    assert "Unknown run-operation setting(s): mode" in out and DeltaTable(path).version() == version

    # on_error: fail: the hook's failure fails the model, with the hook's line.
    out = project.fails("run", "-s", "settings_fail", "--vars", _vars(0))
    assert "delta_optimize ddo_it.settings_fail: failed" in out
    (failed,) = project.results()
    assert failed["status"] == "failed" and failed["on_error"] == "fail" and "amount" in failed["error"]


@pytest.mark.timeout(900)  # two dbt commands of one one-row model (a passed interval: tests/test_vacuum_meta.py)
def test_vacuum_lite_every_runs_a_lite_vacuum_after_the_write_only_when_the_interval_passed(project):
    from dbt_delta_optimize.inspect.history import history

    table, path = "ddo_it.events_vacuum_lite", str(project.work / "wh" / "ddo_it.db" / "events_vacuum_lite")

    def run(batch: int, every: str) -> tuple[dict, list[dict]]:
        v = json.dumps({"ddo_vacuum_lite": True, "batch": batch, "lite_every": every})
        out = project("run", "-s", "events_vacuum_lite", "--vars", v)
        record = project.by_table()[table]
        assert record["status"] != "failed" and "error" not in record, record
        ends = [h for h in history(path, 50) if h["operation"] == "VACUUM END"]
        assert (f"delta_optimize {table}" in out) and (("vacuum lite" in out) == record["vacuum_lite"]["ran"])
        return record, ends

    first, ends = run(0, "7d")  # never vacuumed: due
    lite = first["vacuum_lite"]
    assert lite["due"] and lite["ran"] and lite["lastVacuum"] is None and lite["everyMs"] == 7 * 86_400_000
    assert lite["metrics"]["mode"] == "lite" and lite["metrics"]["retentionMs"] == 7 * 86_400_000  # the table's
    assert [e["version"] for e in ends] == [lite["metrics"]["endCommit"]] and ends[0]["vacuum"]["status"] == "COMPLETED"

    second, again = run(1, "7d")  # vacuumed a moment ago: not due, nothing committed
    assert second["vacuum_lite"]["due"] is False and second["vacuum_lite"]["ran"] is False
    assert second["vacuum_lite"]["lastVacuum"]["version"] == ends[0]["version"] and again == ends
    assert DeltaTable(path).to_pyarrow_table().num_rows == 2  # the rows the two writes appended
