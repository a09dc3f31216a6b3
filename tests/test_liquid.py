"""Liquid clustering (CLUSTER BY tables): our OPTIMIZE against delta-spark 4.4's ClusteringStrategy."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.actions import AddFile
from dbt_delta_optimize.plan.liquid import ZCUBE_ID, ZCUBE_ZORDER_BY, select_liquid_files
from tests.helpers import data_files, log_snapshot, log_versions, rows_deltars, rows_spark


# =========================================================================== file selection (pure)
def _f(path: str, size: int = 10, cube: str | None = None, by: str = '["id","x"]', provider: str | None = None):
    tags = {ZCUBE_ID: cube, ZCUBE_ZORDER_BY: by} if cube else {}
    provider = provider or ("liquid" if cube else None)
    return AddFile(
        path=path, partition_values={}, size=size, modification_time=0, tags=tags, clustering_provider=provider
    )


def _paths(files: list[AddFile]) -> list[str]:
    return sorted(f.path for f in files)


def test_lone_zcube_is_left_alone_new_files_merge_into_it():
    cols = ["id", "x"]
    cube = [_f("a", cube="c1"), _f("b", cube="c1")]
    assert select_liquid_files(cube, cols, full=False, min_cube_size=1000) == []
    assert select_liquid_files(cube, cols, full=True, min_cube_size=1000) == [], "FULL keeps a lone ZCube too"
    new = [*cube, _f("n")]
    assert _paths(select_liquid_files(new, cols, full=False, min_cube_size=1000)) == ["a", "b", "n"]
    two = [*cube, _f("c", cube="c2")]
    assert _paths(select_liquid_files(two, cols, full=False, min_cube_size=1000)) == ["a", "b", "c"]


def test_large_zcubes_and_foreign_clusterings_are_skipped_unless_full():
    cols = ["id", "x"]
    big = [_f("a", 600, cube="big"), _f("b", 600, cube="big")]
    files = [*big, _f("n"), _f("m")]
    assert _paths(select_liquid_files(files, cols, full=False, min_cube_size=1000)) == ["m", "n"]
    foreign = [_f("o", cube="old", by='["x"]'), _f("p", provider="other-provider"), _f("n")]
    assert _paths(select_liquid_files(foreign, cols, full=False, min_cube_size=1000)) == ["n"]
    assert _paths(select_liquid_files(foreign, cols, full=True, min_cube_size=1000)) == ["n", "o", "p"]


def test_dbt_setting_and_checkpoint_choice():
    from dbt_delta_optimize.dbt.settings import parse_settings
    from dbt_delta_optimize.delta.checkpoint_v2 import choose_checkpoint

    assert parse_settings({"liquid_clustered_by": "user_id, amount"}).liquid_clustered_by == ("user_id", "amount")
    v2 = "00000000000000000004.checkpoint.076981c6-4017-476b-b3d8-b3763fc6f3ba.json"
    classic = "00000000000000000004.checkpoint.parquet"
    assert choose_checkpoint([classic, v2]) == (v2,), "one complete checkpoint, never a union"
    parts = [
        "00000000000000000004.checkpoint.0000000002.0000000002.parquet",
        "00000000000000000004.checkpoint.0000000001.0000000002.parquet",
    ]
    assert choose_checkpoint(parts) == tuple(sorted(parts))


# =========================================================================== real tables
def _clustered(spark, path: str, inserts: int = 4, start: int = 0) -> None:
    if start == 0:
        spark.sql(
            f"CREATE TABLE delta.`{path}` (id BIGINT, x STRING, v DOUBLE) USING delta CLUSTER BY (id, x) "
            "TBLPROPERTIES ('delta.enableRowTracking'='false')"
        )
    for i in range(start, start + inserts):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i}, 'a{i % 3}', {i}.5), ({100 - i}, 'b', NULL)")


def _actions(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json")) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _optimize(*args: str):
    return CliRunner().invoke(cli, ["optimize", *args, "--json"], catch_exceptions=False)


def _clustering_columns(spark, path: str) -> list[str]:
    return list(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["clusteringColumns"])


@pytest.mark.spark
@pytest.mark.slow
def test_optimize_clusters_a_cluster_by_table_incrementally(spark, tmp_path):
    p = str(tmp_path / "t")
    _clustered(spark, p)
    before = rows_spark(spark, p)
    files_before = len(data_files(p))
    r = _optimize(p)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["numFilesAdded"] >= 1 and out["zOrderStats"] is None
    v = log_versions(p)[-1]
    actions = _actions(p, v)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    params = info["operationParameters"]
    assert (params["clusterBy"], params["zOrderBy"], params["isFull"]) == ('["id","x"]', "[]", False)
    adds = [a["add"] for a in actions if "add" in a]
    assert adds and all(a["clusteringProvider"] == "liquid" for a in adds)
    assert {a["tags"][ZCUBE_ZORDER_BY] for a in adds} == {'["id","x"]'} and len(
        {a["tags"][ZCUBE_ID] for a in adds}
    ) == 1
    assert len(adds) < files_before, "fewer files"
    assert rows_spark(spark, p) == before and rows_deltars(p) == before
    assert _clustering_columns(spark, p) == ["id", "x"]

    # incremental: a lone ZCube is left alone (no commit), new data is merged with it
    r = _optimize(p)
    assert r.exit_code == 0 and json.loads(r.stdout)["numFilesRemoved"] == 0
    assert log_versions(p)[-1] == v
    _clustered(spark, p, inserts=2, start=10)
    before = rows_spark(spark, p)
    r = _optimize(p)
    assert r.exit_code == 0 and json.loads(r.stdout)["numFilesRemoved"] == len(adds) + 4
    assert rows_spark(spark, p) == before and rows_deltars(p) == before

    # delta-spark reads our ZCube as its own: its OPTIMIZE runs and finds nothing to do
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (55, 'z', 1.0)")
    before = rows_spark(spark, p)
    metrics = spark.sql(f"OPTIMIZE delta.`{p}`").collect()[0]["metrics"]
    assert metrics["numFilesAdded"] == 1 and metrics["numFilesRemoved"] >= 2
    assert rows_spark(spark, p) == before and _clustering_columns(spark, p) == ["id", "x"]


@pytest.mark.spark
@pytest.mark.slow
def test_zorder_and_where_refused_full_reclusters_changed_columns(spark, tmp_path):
    p = str(tmp_path / "t")
    _clustered(spark, p, inserts=3)
    log_before, files_before = log_snapshot(p), data_files(p)
    r = CliRunner().invoke(cli, ["optimize", p, "--zorder-by", "v"], catch_exceptions=False)
    assert r.exit_code == 2 and "liquid clustered" in r.stderr and "zorder-by" in r.stderr
    assert "Traceback" not in r.stderr
    r = CliRunner().invoke(cli, ["optimize", p, "--where", "id > 1"], catch_exceptions=False)
    assert r.exit_code == 2 and "WHERE" in r.stderr
    assert log_snapshot(p) == log_before and data_files(p) == files_before

    assert _optimize(p).exit_code == 0
    spark.sql(f"ALTER TABLE delta.`{p}` CLUSTER BY (x, id)")
    v = log_versions(p)[-1]
    r = _optimize(p)  # the ZCube clustered by (id, x) is not ours to merge without FULL
    assert r.exit_code == 0 and json.loads(r.stdout)["numFilesRemoved"] == 0 and log_versions(p)[-1] == v
    before = rows_spark(spark, p)
    r = _optimize(p, "--full")
    assert r.exit_code == 0 and json.loads(r.stdout)["numFilesRemoved"] >= 1
    actions = _actions(p, v + 1)
    assert next(a["commitInfo"] for a in actions if "commitInfo" in a)["operationParameters"]["isFull"] is True
    assert {a["add"]["tags"][ZCUBE_ZORDER_BY] for a in actions if "add" in a} == {'["x","id"]'}
    assert rows_spark(spark, p) == before and _clustering_columns(spark, p) == ["x", "id"]
