"""Catalog names resolve from the session catalog (no Delta log replay), and the dbt hook's cheap path."""

from __future__ import annotations

import json

import pytest

from dbt_delta_optimize.engine.session import resolve_table
from dbt_delta_optimize.errors import InvalidArgumentError, NotADeltaTableError, TableNotFoundError


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
