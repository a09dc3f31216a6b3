"""``analyze`` on a path table without a JVM (deltalake writes it), and the COMPUTE STATS validator."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pyarrow as pa
import pytest

from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.inspect.validate import validate_commit
from dbt_delta_optimize.inspect.validate_analyze import validate_stats_actions
from dbt_delta_optimize.ops.analyze import analyze
from tests.helpers import log_versions, rows_deltars


def _table(path: str) -> None:
    from deltalake import write_deltalake

    for i in range(3):
        data = pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()), "s": [f"v{j}" for j in range(10)]})
        write_deltalake(path, data, mode="append", configuration={"delta.dataSkippingNumIndexedCols": "1"})


def test_path_table_without_spark_and_its_commit_validates(tmp_path):
    p = str(tmp_path / "t")
    _table(p)
    snap = load_snapshot(p)
    with open(os.path.join(p, "_delta_log", "00000000000000000000.json"), encoding="utf-8") as fh:
        lines = [json.loads(x) for x in fh]
    assert any("metaData" in a for a in lines)
    rows = rows_deltars(p)
    plan = analyze(None, p, dry_run=True)
    assert plan.files_planned == 0  # deltalake honoured dataSkippingNumIndexedCols = 1: id is covered
    m = analyze(None, p, all=True)
    assert m.files_updated == 3 and m.versions == (snap.version + 1,)
    report = validate_commit(p, m.versions[0])
    assert report.ok and report.operation == "COMPUTE STATS", report.describe()
    assert rows_deltars(p) == rows
    new = load_snapshot(p)
    for f in new.files:
        st = json.loads(f.stats or "{}")
        assert st["numRecords"] == 10 and set(st["minValues"]) == {"id"} and st["nullCount"] == {"id": 0}


def test_validator_findings(tmp_path):
    p = str(tmp_path / "t")
    _table(p)
    snap = load_snapshot(p)
    f = snap.files[0]
    good = replace(
        f, data_change=False, stats='{"numRecords":10,"minValues":{"id":0},"maxValues":{"id":9},"nullCount":{"id":0}}'
    )
    assert validate_stats_actions(snap, [good]).ok
    cases = {
        "data_change_true": replace(good, data_change=True),
        "stats_add_changed_file": replace(good, size=good.size + 1),
        "stats_add_not_live": replace(good, path="nope.parquet"),
        "stats_num_records_mismatch": replace(good, stats='{"numRecords":11}'),
        "stats_min_gt_max": replace(good, stats='{"numRecords":10,"minValues":{"id":9},"maxValues":{"id":0}}'),
        "stats_missing": replace(good, stats=None),
    }
    for code, add in cases.items():
        report = validate_stats_actions(snap, [add])
        assert not report.ok and code in report.codes, (code, report.codes)
    assert "add_duplicate" in validate_stats_actions(snap, [good, good]).codes


def test_a_tampered_landed_commit_is_reported(tmp_path):
    p = str(tmp_path / "t")
    _table(p)
    m = analyze(None, p, all=True)
    v = m.versions[0]
    name = os.path.join(p, "_delta_log", f"{v:020d}.json")
    with open(name, encoding="utf-8") as fh:
        actions = [json.loads(x) for x in fh]
    for a in actions:
        if "add" in a:
            a["add"]["size"] += 1
        if "commitInfo" in a:
            a["commitInfo"]["operationParameters"] = {"predicate": "true"}
    with open(name, "w", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    report = validate_commit(p, v)
    assert not report.ok and {"stats_add_changed_file", "commit_info_malformed"} <= set(report.codes)
    assert log_versions(p)[-1] == v


def test_bad_arguments_fail_before_anything_is_written(tmp_path):
    from dbt_delta_optimize.errors import InvalidArgumentError, InvalidPredicateError

    p = str(tmp_path / "t")
    _table(p)
    v = log_versions(p)[-1]
    with pytest.raises(InvalidArgumentError):
        analyze(None, p, columns=[1])  # type: ignore[list-item]
    with pytest.raises(InvalidPredicateError):
        analyze(None, p, where="id = 1")  # not a partition column
    with pytest.raises(InvalidArgumentError):
        analyze(None, p, all=True, max_threads=0)
    assert log_versions(p)[-1] == v


def test_cli(tmp_path):
    from click.testing import CliRunner

    from dbt_delta_optimize.cli.main import cli

    p = str(tmp_path / "t")
    _table(p)
    v = log_versions(p)[-1]
    r = CliRunner().invoke(cli, ["analyze", p, "--all", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["dryRun"] and out["filesPlanned"] == 3 and out["reasons"] == {"all": 3} and log_versions(p)[-1] == v
    r = CliRunner().invoke(cli, ["analyze", p, "--columns", "s"])
    assert r.exit_code == 2 and "dataSkippingStatsColumns" in r.stderr and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["analyze", p, "--all"])
    assert r.exit_code == 0 and "computed statistics of 3 of 3 file(s)" in r.stdout, r.output
    assert f"version(s) {v + 1}" in r.stdout and log_versions(p)[-1] == v + 1
    r = CliRunner().invoke(cli, ["analyze", str(tmp_path / "missing")])
    assert r.exit_code == 2 and r.stderr.startswith("error:")


def test_truncated_footer_bounds_are_not_trusted(tmp_path):
    """delta-rs (arrow-rs) truncates string bounds to 64 bytes and marks them inexact, which pyarrow does not
    expose: analyze reads those columns' data, so the max gets delta-spark's prefix and tie-breaker."""
    from deltalake import write_deltalake

    from dbt_delta_optimize.inspect.stats import stats_from_file

    p = str(tmp_path / "t")
    long = "\u00e9" * 40 + "z"  # 82 UTF-8 bytes: truncated in the footer
    write_deltalake(p, pa.table({"s": ["a", long]}))
    (name,) = [n for n in os.listdir(p) if n.endswith(".parquet")]
    footer_only = json.loads(stats_from_file(os.path.join(p, name), _SCHEMA_S, (), {}, read_data=False))
    m = analyze(None, p, all=True)
    assert m.files_updated == 1
    st = json.loads(load_snapshot(p).files[0].stats or "{}")
    assert st["maxValues"]["s"] == "\u00e9" * 32 + "\U0010ffff"  # truncateMaxStringAgg of the real max
    assert footer_only["maxValues"]["s"] != st["maxValues"]["s"]  # what trusting the footer would have written
    assert st["minValues"]["s"] == "a" and st["nullCount"] == {"s": 0} and st["numRecords"] == 2


_SCHEMA_S = {"type": "struct", "fields": [{"name": "s", "type": "string", "nullable": True, "metadata": {}}]}


def test_health_reports_statistics_coverage(tmp_path):
    from dbt_delta_optimize.delta.actions import AddFile, Metadata, Protocol
    from dbt_delta_optimize.delta.snapshot import Snapshot
    from dbt_delta_optimize.inspect.health import health_report
    from dbt_delta_optimize.inspect.health_stats import statistics_coverage

    p = str(tmp_path / "t")
    _table(p)  # dataSkippingNumIndexedCols = 1: only id has stats
    report = health_report(p).to_dict()["statistics"]
    assert report["statsColumns"] == ["id"] and report["filesWithoutStats"] == 0 and report["filesIncomplete"] == 0
    assert report["recommendation"] is None

    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "note", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    long_note = {
        "numRecords": 1,
        "minValues": {"id": 1, "note": "x" * 32},
        "maxValues": {"id": 1, "note": "x" * 32 + "\x7f"},
        "nullCount": {"id": 0, "note": 0, "gone": 0},
    }
    files = [AddFile("a", {}, 1, 1, stats=json.dumps(long_note)), AddFile("b", {}, 1, 1)]
    snap = Snapshot(p, 1, Protocol(1, 2), Metadata("x", json.dumps(schema), ()), tuple(files))
    st = statistics_coverage(snap)
    assert st["filesWithoutStats"] == 1 and st["columnsWithoutStats"] == {"id": 1, "note": 1}
    assert st["staleColumns"] == {"gone": 1} and st["freeTextColumns"] == ["note"]
    assert st["recommendation"] == f"dbt-delta-optimize analyze {p}"
    covered = Snapshot(p, 1, Protocol(1, 2), Metadata("x", json.dumps(schema), ()), (files[0],) * 1)
    padded = {**long_note, "nullCount": {"id": 0, "note": 0, "pad": {f"c{i}": 0 for i in range(300)}}}
    covered = replace(covered, files=(AddFile("a", {}, 1, 1, stats=json.dumps(padded)),), file_table=None)
    st = statistics_coverage(covered)
    assert st["avgStatsBytes"] > 2048 and "dataSkippingStatsColumns' = 'id'" in st["recommendation"]


def test_python_job_runs_analyze(tmp_path):
    """python/optimize_job.py analyze: the CLI under the session spark-submit would configure, metrics as JSON."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "python"))
    try:
        from optimize_job import cli_args
    finally:
        sys.path.pop(0)
    assert cli_args(["analyze", "t", "--all", "-v"]) == ["-v", "analyze", "t", "--all", "--json"]
    p = str(tmp_path / "t")
    _table(p)
    env = {**os.environ, "PYTHONPATH": root}
    proc = subprocess.run(
        [sys.executable, os.path.join(root, "python", "optimize_job.py"), "analyze", p, "--all"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["filesUpdated"] == 3 and out["versions"] == [3]
