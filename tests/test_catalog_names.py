"""Catalog names resolve from the session catalog (no Delta log replay), and the dbt hook's cheap path."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from dbt_delta_optimize.engine.session import catalog_start_reason, resolve_table
from dbt_delta_optimize.errors import InvalidArgumentError, NotADeltaTableError, TableNotFoundError
from dbt_delta_optimize.ops.pipeline import Session, Target


@pytest.fixture
def no_describe_detail(spark, monkeypatch):
    """Fail if DESCRIBE DETAIL is issued (the fast path must answer)."""
    real = type(spark).sql

    def sql(self, query, *a, **kw):
        if "DESCRIBE DETAIL" in query.upper():
            pytest.fail(f"fast path expected, got {query}")
        return real(self, query, *a, **kw)

    monkeypatch.setattr(type(spark), "sql", sql)


@pytest.fixture
def tables(spark, tmp_path):
    spark.sql("CREATE SCHEMA IF NOT EXISTS ddo_names")
    spark.range(0, 4, 1, 2).write.format("delta").saveAsTable("ddo_names.managed")
    ext = str(tmp_path / "ext")
    spark.range(0, 4, 1, 2).write.format("delta").save(ext)
    spark.sql(f"CREATE TABLE ddo_names.external USING delta LOCATION '{ext}'")
    spark.range(0, 4).write.format("parquet").saveAsTable("ddo_names.pq")
    spark.sql("CREATE OR REPLACE VIEW ddo_names.v AS SELECT * FROM ddo_names.managed")
    detail = {n: _detail_location(spark, f"ddo_names.{n}") for n in ("managed", "external")}
    yield {"ext": ext, "detail": detail}
    spark.sql("DROP SCHEMA ddo_names CASCADE")


def _detail_location(spark, name):
    return spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]["location"]


def test_names_resolve_to_describe_detail_location_without_describe_detail(spark, tables, no_describe_detail):
    expected = tables["detail"]
    assert resolve_table("ddo_names.managed", spark) == expected["managed"]
    assert resolve_table("`ddo_names`.`external`", spark) == expected["external"]
    assert expected["external"].rstrip("/").endswith(tables["ext"].rstrip("/"))
    spark.sql("USE ddo_names")
    try:
        assert resolve_table("managed", spark) == expected["managed"]  # the current schema
    finally:
        spark.sql("USE default")


def test_non_delta_missing_and_views_are_typed_errors(spark, tables, no_describe_detail):
    with pytest.raises(NotADeltaTableError, match="parquet table, not Delta"):
        resolve_table("ddo_names.pq", spark)
    with pytest.raises(TableNotFoundError, match=r"ddo_names\.nope"):
        resolve_table("ddo_names.nope", spark)
    with pytest.raises(NotADeltaTableError, match="view"):
        resolve_table("ddo_names.v", spark)
    with pytest.raises(InvalidArgumentError, match="not a valid table name"):
        resolve_table("ddo_names.t; DROP TABLE x", spark)


def test_three_part_names_fall_back_to_describe_detail(spark, tables):
    assert resolve_table("spark_catalog.ddo_names.managed", spark) == _detail_location(spark, "ddo_names.managed")


def test_hook_that_skips_reads_the_log_once_and_reports_counts(spark, tables, tmp_path, monkeypatch):
    """Nothing qualifies: one catalog lookup per hook, one snapshot for the decision and the counts (its
    FileTable: no second view of the live files), files unchanged."""
    from dbt_delta_optimize.dbt import bridge as dbt_bridge
    from dbt_delta_optimize.delta import snapshot

    monkeypatch.setenv("DBT_TARGET_PATH", str(tmp_path))
    reads: list[str] = []
    real_counts = snapshot.file_counts
    monkeypatch.setattr(snapshot, "file_counts", lambda loc, **k: reads.append(loc) or real_counts(loc, **k))
    loads: list[str] = []
    real_load = snapshot.load_snapshot
    monkeypatch.setattr(snapshot, "load_snapshot", lambda loc, *a, **k: loads.append(loc) or real_load(loc, *a, **k))
    bridge = dbt_bridge.Bridge()
    bridge.record_version("ddo_names.managed", invocation_id="names")
    spark.range(10, 12, 1, 1).write.format("delta").mode("append").saveAsTable("ddo_names.managed")
    r = bridge.run_model(
        "ddo_names.managed", {"min_num_files": 50}, model="managed", file_format="delta", invocation_id="names"
    )
    assert r["status"] == "skipInsufficientFiles", r
    from deltalake import DeltaTable

    live = DeltaTable(r["location"]).get_add_actions(flatten=True)  # counted apart from the hook's snapshot
    assert r["files_before"] == live.num_rows == 3 and r["bytes_before"] == sum(live.column("size_bytes").to_pylist())
    assert (r["files_after"], r["bytes_after"]) == (r["files_before"], r["bytes_before"])  # nothing committed
    assert len(reads) == 0 and len(loads) == 1  # the counts come from the one snapshot the decision read
    saved = json.loads((tmp_path / "delta_optimize_results.json").read_text())[-1]
    assert saved["auto_compact"]["sinceVersion"] == 0 and saved["auto_compact"]["triggeringVersions"] == [1]
    assert saved["files_after"] == 3


# ----------------------------------------------------------------------------- names no catalog can hold
SCRIPT = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")
#: The JDK prints this line itself when a JVM starts (Spark enables the vector incubator module).
JDK_LINE = "Using incubator modules"
#: What could give a new embedded session another catalog than its own local metastore.
CATALOG_ENV = (
    "SPARK_REMOTE",
    "PYSPARK_SUBMIT_ARGS",
    "SPARK_CONF_DIR",
    "HIVE_CONF_DIR",
    "HADOOP_CONF_DIR",
    "SPARK_HOME",
)


def _no_catalog_env(home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CATALOG_ENV}
    env["DBT_DELTA_OPTIMIZE_HOME"] = str(home)  # where the embedded session's metastore would be: none there
    return env


@pytest.mark.parametrize(
    "args",
    [
        ["vacuum", "nosuch"],
        ["analyze", "nosuch"],
        ["info", "db.nosuch"],
        ["vacuum", "other_catalog.db.nosuch"],
        ["maintain", "{table}", "nosuch", "--dry-run"],
    ],
)
def test_a_name_no_catalog_can_hold_is_refused_without_starting_spark(tmp_path, args):
    """No session, no Spark Connect address, no configuration and no local metastore: the name cannot be a
    table, and the answer comes without a JVM (exit 2, one line; the time is measured, not asserted)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"id": [1, 2]}))
    args = [a.format(table=table) for a in args]
    r = subprocess.run(
        [SCRIPT, *args], cwd=tmp_path, env=_no_catalog_env(tmp_path / "home"), capture_output=True, text=True
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert JDK_LINE not in r.stderr and "starting Spark" not in r.stderr, r.stderr
    missing = next(a for a in args if "nosuch" in a)
    lines = [ln for ln in r.stderr.splitlines() if missing in ln]
    assert len(lines) == 1 and "was not found" in lines[0] and "no Spark session runs" in lines[0], r.stderr
    if args[0] != "maintain":
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and r.stdout == ""
    assert not os.path.exists(tmp_path / "home" / "spark" / "metastore_db")


class _WouldStart(Session):
    """A session that would be a new embedded one; starting it is where the test stops."""

    def embedded(self) -> bool:
        return True

    def spark(self):
        raise RuntimeError("would start Spark now")


def test_a_name_the_catalog_may_hold_says_why_spark_starts(tmp_path, monkeypatch, caplog):
    for name in CATALOG_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DBT_DELTA_OPTIMIZE_HOME", str(tmp_path))
    with pytest.raises(TableNotFoundError, match=r"metastore \(.*\) does not exist"):
        Target("db.t").location(_WouldStart(None))
    metastore = tmp_path / "spark" / "metastore_db"
    metastore.mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="dbt_delta_optimize"), pytest.raises(RuntimeError, match="would"):
        Target("db.t").location(_WouldStart(None))
    assert [r.getMessage() for r in caplog.records] == [
        f"resolving 'db.t' in the catalog: starting Spark (local metastore at {metastore})"
    ]
    assert catalog_start_reason("spark_catalog.db.t") == f"local metastore at {metastore}"
    with pytest.raises(TableNotFoundError, match="no catalog 'other'"):
        catalog_start_reason("other.db.t")
    with pytest.raises(InvalidArgumentError, match="not a valid table name"):
        catalog_start_reason("db.t; DROP TABLE x")


def test_configuration_that_may_point_elsewhere_starts_spark(tmp_path, monkeypatch):
    for name in CATALOG_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DBT_DELTA_OPTIMIZE_HOME", str(tmp_path))  # no local metastore
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "hive-site.xml").write_text("<configuration/>")
    monkeypatch.setenv("HIVE_CONF_DIR", str(conf))
    assert catalog_start_reason("nosuch") == f"the metastore of {conf / 'hive-site.xml'}"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.sql.catalog.x=y pyspark-shell")
    assert "PYSPARK_SUBMIT_ARGS" in catalog_start_reason("nosuch")
