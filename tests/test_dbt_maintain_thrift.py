"""``dbt run-operation maintain`` over dbt-spark's thrift method: a real Spark Thrift Server, no Spark session.

The SQL path scores from the logs (the dbt host reads the warehouse) and runs the work as statements
through dbt's connection: the server's delta-spark makes the commits. What SQL cannot do (statistics)
is said in the report's notes.
"""

from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from tests.dbt_project import DbtProject

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def project(thrift_server, tmp_path_factory):
    p = DbtProject(
        tmp_path_factory.mktemp("dbt-maintain-thrift"),
        "thrift",
        {"DBT_DELTA_OPTIMIZE_THRIFT_PORT": str(thrift_server.port)},
    )
    p("deps")
    # The server is shared by the session's thrift tests: each module builds the project from an empty schema.
    thrift_server.query("DROP SCHEMA IF EXISTS ddo_it CASCADE")
    yield p
    p.close()


@pytest.mark.timeout(1800)
def test_maintain_over_thrift_runs_statements_and_says_what_sql_cannot(project, thrift_server):
    project("seed")
    project("build", "--vars", "{use_post_hooks: false}")
    project("run-operation", "maintain", "--args", "{select: '*', dry_run: true}")
    report = json.loads((project.work / "target" / "delta_maintenance.json").read_text())
    assert report["engine"] == "sql" and any("analyze" in n for n in report["notes"])
    listed = [t["table"] for t in report["tables"]]
    assert "ddo_it.events_snapshot" in listed and "ddo_it.events_view" not in listed
    assert {s["table"] for s in report["skipped"]} == {"ddo_it.parquet_model"}
    worst = next(t for t in report["tables"] if t["actions"])
    path = os.path.join(thrift_server.warehouse, "ddo_it.db", worst["table"].split(".")[1])
    version = DeltaTable(path).version()

    project("run-operation", "maintain", "--args", "{select: '*', max_tables: 1}")
    ran = json.loads((project.work / "target" / "delta_maintenance.json").read_text())
    by = {t["table"]: t for t in ran["tables"]}
    assert by[worst["table"]]["status"] == "done"
    assert all(a["metrics"]["engine"] == "sql" for a in by[worst["table"]]["ran"])
    assert DeltaTable(path).version() > version
    last = DeltaTable(path).history(1)[0]  # committed by the server's delta-spark
    assert last["operation"] in ("OPTIMIZE", "REORG")
    assert all(t["status"] in ("deferred", "nothing to do") for t in ran["tables"] if t["table"] != worst["table"])
