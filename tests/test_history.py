"""History: OPTIMIZE commits of delta-rs, delta-spark (manual and auto compaction) and ours on one
table, normalised into one shape, with numbers checked against each commit's own actions."""

from __future__ import annotations

import json
import os
import shutil

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.cli.inspect import health, validate
from dbt_delta_optimize.cli.inspect import history as history_cmd
from dbt_delta_optimize.errors import InvalidArgumentError, TableNotFoundError
from dbt_delta_optimize.inspect.history import history
from dbt_delta_optimize.inspect.validate import validate_commit

CLI = click.Group(commands=[validate, health, history_cmd])
KEYS = {
    "version",
    "timestamp",
    "operation",
    "engine",
    "auto",
    "filesAdded",
    "filesRemoved",
    "bytesAdded",
    "bytesRemoved",
    "predicate",
    "zOrderBy",
}


def run_cli(*args: str):
    return CliRunner().invoke(CLI, list(args), catch_exceptions=False)


def rs_append(path: str, start: int) -> None:
    t = pa.table(
        {"id": pa.array(range(start, start + 6), pa.int64()), "part": pa.array([i % 2 for i in range(6)], pa.int64())}
    )
    write_deltalake(path, t, partition_by=["part"], mode="append")


def actions(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def from_actions(path: str, version: int) -> tuple[int, int, int, int]:
    acts = actions(path, version)
    adds = [a["add"] for a in acts if "add" in a]
    removes = [a["remove"] for a in acts if "remove" in a]
    return len(adds), len(removes), sum(a["size"] for a in adds), sum(r["size"] for r in removes)


def numbers(entry: dict) -> tuple[int, int, int, int]:
    return entry["filesAdded"], entry["filesRemoved"], entry["bytesAdded"], entry["bytesRemoved"]


@pytest.fixture(scope="module")
def mixed(spark, tmp_path_factory):
    """One table compacted by all three engines (delta-spark twice: ZORDER with WHERE, and auto compaction)."""
    from dbt_delta_optimize.api import optimize

    p = str(tmp_path_factory.mktemp("history") / "t")
    rs_append(p, 0)
    rs_append(p, 10)
    DeltaTable(p).optimize.compact(partition_filters=[("part", "=", "1")])  # v2
    rs_append(p, 20)
    rs_append(p, 30)
    spark.sql(f"OPTIMIZE delta.`{p}` WHERE part = 0 ZORDER BY (id)")  # v5
    spark.conf.set("spark.databricks.delta.autoCompact.enabled", "true")
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "2")
    try:  # v6 append, v7 delta-spark's auto compaction
        spark.range(40, 48, 1, 2).selectExpr("id", "id % 2 AS part").write.format("delta").mode("append").save(p)
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.enabled")
        spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")
    rs_append(p, 50)
    rs_append(p, 60)
    m = optimize(spark, p, where="part = 1")  # v10
    assert m.committed_versions == (10,)
    rs_append(p, 70)
    DeltaTable(p).optimize.z_order(["id"])  # v12
    return p


@pytest.mark.slow
def test_three_engines_normalised(mixed):
    h = history(mixed, limit=50)
    assert [e["version"] for e in h] == list(range(12, -1, -1))
    assert all(set(e) >= KEYS for e in h)
    by_v = {e["version"]: e for e in h}
    optimizes = {v for v, e in by_v.items() if e["operation"] == "OPTIMIZE"}
    assert optimizes == {2, 5, 7, 10, 12}
    for v in by_v:
        assert numbers(by_v[v]) == from_actions(mixed, v), v
        assert by_v[v]["timestamp"] > 0 and by_v[v]["time"].endswith("+00:00")

    rs = by_v[2]
    assert (rs["engine"], rs["auto"], rs["predicate"], rs["zOrderBy"], rs["zOrder"]) == (
        "delta-rs",
        False,
        ["part = '1'"],
        None,
        False,
    )
    assert numbers(rs)[:2] == (1, 2)
    ds = by_v[5]
    assert (ds["engine"], ds["auto"], ds["zOrderBy"], ds["zOrder"]) == ("delta-spark", False, ["id"], True)
    assert len(ds["predicate"]) == 1 and "part" in ds["predicate"][0]
    auto = by_v[7]
    assert (auto["engine"], auto["auto"], auto["zOrderBy"]) == ("delta-spark", True, [])
    ours = by_v[10]
    assert (ours["engine"], ours["auto"], ours["zOrderBy"], ours["zOrder"]) == ("dbt-delta-optimize", False, [], False)
    assert len(ours["predicate"]) == 1 and "part" in ours["predicate"][0]
    assert ours["engineInfo"].startswith("dbt-delta-optimize/")
    rz = by_v[12]
    assert (rz["engine"], rz["zOrder"], rz["zOrderBy"]) == ("delta-rs", True, None)
    assert (by_v[6]["operation"], by_v[6]["engine"], by_v[6]["dataChange"]) == ("WRITE", "delta-spark", True)
    assert (by_v[0]["operation"], by_v[0]["engine"], numbers(by_v[0])[:2]) == ("WRITE", "delta-rs", (2, 0))

    # Every engine's OPTIMIZE, auto compaction included, validates clean.
    for v in sorted(optimizes):
        r = validate_commit(mixed, v)
        assert r.ok, r.describe()


@pytest.mark.slow
def test_limit_and_metrics_fallback(mixed, tmp_path):
    assert [e["version"] for e in history(mixed, limit=3)] == [12, 11, 10]
    assert len(history(mixed)) == 13  # default limit 20
    with pytest.raises(InvalidArgumentError):
        history(mixed, limit=0)
    with pytest.raises(TableNotFoundError):
        history(str(tmp_path / "missing"))
    # Metrics disabled (delta-spark's history.metricsEnabled=false): the numbers come from the actions.
    p = str(tmp_path / "t")
    shutil.copytree(mixed, p)
    for v in (2, 5, 10):
        acts = actions(p, v)
        for a in acts:
            if "commitInfo" in a:
                a["commitInfo"].pop("operationMetrics")
        with open(os.path.join(p, "_delta_log", f"{v:020d}.json"), "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in acts) + "\n")
    full = {e["version"]: e for e in history(mixed)}
    for e in history(p):
        assert numbers(e) == numbers(full[e["version"]])
    # Versions whose log entries were cleaned up (a checkpoint remains) end the history.
    DeltaTable(p).create_checkpoint()
    for v in range(0, 4):
        os.unlink(os.path.join(p, "_delta_log", f"{v:020d}.json"))
    assert [e["version"] for e in history(p, limit=50)] == list(range(12, 3, -1))


@pytest.mark.slow
def test_cli_history(mixed, tmp_path):
    res = run_cli("history", mixed, "--json", "--limit", "5")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == history(mixed, limit=5)
    res = run_cli("history", mixed)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert len(lines) == 2 + 13 and lines[0].split()[:4] == ["version", "time", "operation", "engine"], res.stdout
    rows = {int(line.split()[0]): line for line in lines[2:]}
    assert sorted(rows) == list(range(13))
    assert "OPTIMIZE" in rows[10] and "dbt-delta-optimize" in rows[10] and "where" in rows[10]
    assert "zOrderBy=id" in rows[5] and "auto=false" in rows[5]
    assert "auto=true" in rows[7]
    res = run_cli("history", str(tmp_path / "missing"))
    assert res.exit_code == 2 and res.stderr.startswith("error:")
    res = run_cli("history", mixed, "--limit", "0")
    assert res.exit_code == 2
