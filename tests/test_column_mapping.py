"""Column mapping (name and id modes) and type widening, on tables delta-spark created and altered.

Each table has a renamed column with a space in its name, a dropped column (whose data is still in
the old files and must not come back), a dropped-then-re-added column of the same name, a nested
struct, an array of structs and a map of structs, and a renamed partition column. We optimize it
(Arrow and Spark rewrites, Z-order on the renamed column, ``--where`` on a logical name, the CLI);
delta-spark must read the same rows, and our files must carry physical names, field ids and stats
keyed by physical names exactly as delta-spark's own OPTIMIZE writes them.
delta-rs (deltalake 1.6) reads column-mapped tables as nulls and refuses type widening, so only
delta-spark reads them back here.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.column_mapping import physical_column_path, physical_fields
from dbt_delta_optimize.plan.curve import COLUMNS_TAG
from tests.helpers import log_versions, rows_spark
from tests.test_optimize import adds_removes

ROW = "({i}, 'n{i}', named_struct('a', {i}, 'b', 'b{i}'), array(named_struct('x', {i})), map('k', named_struct('y', {i})), {tail})"


def _mapped_table(spark, path: str, mode: str) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id INT, `first name` STRING, s STRUCT<a: INT, b: STRING>, "
        "arr ARRAY<STRUCT<x: INT>>, m MAP<STRING, STRUCT<y: INT>>, gone STRING, p STRING) USING delta "
        f"PARTITIONED BY (p) TBLPROPERTIES ('delta.columnMapping.mode'='{mode}', "
        "'delta.minReaderVersion'='2', 'delta.minWriterVersion'='5')"
    )
    spark.sql(
        f"INSERT INTO delta.`{path}` VALUES "
        + ", ".join(ROW.format(i=i, tail=f"'old{i}', 'p{i % 2}'") for i in range(0, 6))
    )
    for i in range(6, 10):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES " + ROW.format(i=i, tail=f"'old{i}', 'p{i % 2}'"))
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN `first name` TO `given name`")
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN p TO `the part`")
    spark.sql(f"ALTER TABLE delta.`{path}` DROP COLUMN gone")
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMN (gone STRING)")
    for i in range(10, 14):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES " + ROW.format(i=i, tail=f"'p{i % 2}', 'new{i}'"))


@pytest.fixture(scope="module")
def mapped_tables(spark, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cm")
    out = {}
    for mode in ("name", "id"):
        out[mode] = str(root / mode)
        _mapped_table(spark, out[mode], mode)
    return out


def _copy(src: str, dest: Any) -> str:
    shutil.copytree(src, str(dest))
    return str(dest)


def _schema(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    return json.loads(DeltaTable(path).schema().to_json())


def _check_physical(path: str, version: int) -> list[dict[str, Any]]:
    """Every file the commit added: Parquet physical names and field ids, log keys by physical names."""
    schema = _schema(path)
    data = [f for f in schema["fields"] if f["name"] != "the part"]
    want = {f["name"]: f["metadata"]["parquet.field.id"] for f in physical_fields(data, "name")}
    part = physical_column_path(schema["fields"], ["the part"], "name")[0]
    adds, removes = adds_removes(path, version)
    assert adds and removes
    for a in adds:
        assert set(a["partitionValues"]) == {part}
        names = pq.read_schema(os.path.join(path, a["path"]))
        got = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in names}
        assert got == want  # the dropped column's old data is not in the new files
        struct = names.field(physical_column_path(schema["fields"], ["s"], "name")[0]).type
        assert all(struct.field(i).metadata and b"PARQUET:field_id" in struct.field(i).metadata for i in range(2))
        stats = json.loads(a["stats"])
        assert set(stats["minValues"]) <= set(want), "stats are keyed by physical names"
    return adds


def _files(path: str) -> list[dict[str, Any]]:
    """The live add actions as the log has them (partition values keyed by physical names)."""
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    return [{"path": f.path, "partitionValues": dict(f.partition_values)} for f in load_snapshot(path).files]


def _gone_values(spark, path: str) -> list[Any]:
    return sorted((r[0] for r in spark.read.format("delta").load(path).select("gone").collect()), key=str)


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["name", "id"])
@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_compaction_keeps_rows_names_and_ids(spark, mapped_tables, tmp_path, mode, engine, caplog):
    path = _copy(mapped_tables[mode], tmp_path / "t")
    before = rows_spark(spark, path)
    gone_before = _gone_values(spark, path)
    assert gone_before.count(None) == 10  # the dropped column's data is hidden
    p0_before = [f for f in _files(path) if "p0" in f["partitionValues"].values()]
    p1_before = [f for f in _files(path) if "p1" in f["partitionValues"].values()]
    m = optimize(spark, path, where="`the part` = 'p0'", rewrite_engine=engine)
    assert m.num_files_removed == len(p0_before) > 1 and m.num_files_added == 1
    assert [f for f in _files(path) if "p1" in f["partitionValues"].values()] == p1_before
    assert rows_spark(spark, path) == before
    assert _gone_values(spark, path) == gone_before, "a dropped column's data came back"
    _check_physical(path, log_versions(path)[-1])
    assert "with Spark instead of Arrow" not in caplog.text  # the Arrow path handled the mapping itself


@pytest.mark.spark
def test_zorder_renamed_column_with_space_cli(spark, mapped_tables, tmp_path):
    path = _copy(mapped_tables["name"], tmp_path / "t")
    before = rows_spark(spark, path)
    args = ["optimize", path, "--zorder-by", "`given name`", "--where", "`the part` = 'p1'", "--max-file-size", "10k"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert rows_spark(spark, path) == before
    version = log_versions(path)[-1]
    adds = _check_physical(path, version)
    assert len(adds) > 1 and all(json.loads(a["tags"][COLUMNS_TAG]) == ["given name"] for a in adds)
    # the curve used the renamed column's data: the files hold disjoint ranges of it
    name = physical_column_path(_schema(path)["fields"], ["given name"], "name")[0]
    ranges = sorted((s["minValues"][name], s["maxValues"][name]) for s in (json.loads(a["stats"]) for a in adds))
    assert all(hi < lo for (_, hi), (lo, _) in itertools.pairwise(ranges)), ranges
    # delta-spark's own operations still work on what we committed
    spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (`given name`)")
    assert spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["numFiles"] == 2
    spark.sql(f"VACUUM delta.`{path}`").collect()
    spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {version}")
    assert rows_spark(spark, path) == before


def _stats_by_partition(path: str, version: int) -> dict[str, dict[str, Any]]:
    adds, _ = adds_removes(path, version)
    return {json.dumps(a["partitionValues"]): json.loads(a["stats"]) for a in adds}


@pytest.mark.spark
@pytest.mark.parametrize("mode", ["name", "id"])
def test_stats_equal_delta_spark_optimize(spark, mapped_tables, tmp_path, mode):
    ours = _copy(mapped_tables[mode], tmp_path / "ours")
    theirs = _copy(mapped_tables[mode], tmp_path / "theirs")
    optimize(spark, ours)
    spark.sql(f"OPTIMIZE delta.`{theirs}`")
    got, want = _stats_by_partition(ours, log_versions(ours)[-1]), _stats_by_partition(theirs, log_versions(theirs)[-1])
    assert got.keys() == want.keys()
    for key, stats in want.items():
        stats.pop("tightBounds", None)
        assert {k: got[key].get(k) for k in stats} == stats
    assert rows_spark(spark, ours) == rows_spark(spark, theirs)


# ------------------------------------------------------------------ type widening


@pytest.fixture(scope="module")
def widened_table(spark, tmp_path_factory) -> str:
    p = str(tmp_path_factory.mktemp("tw") / "t")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (c INT, f FLOAT, d DATE, dec DECIMAL(5,2), ts TIMESTAMP_NTZ) USING delta "
        "TBLPROPERTIES ('delta.enableTypeWidening'='true')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{p}` VALUES ({i}, {i}.5, DATE'2024-01-0{i + 1}', {i}.25, "
            f"TIMESTAMP_NTZ'2024-01-01 10:00:0{i}')"
        )
    for column, t in (("c", "BIGINT"), ("f", "DOUBLE"), ("d", "TIMESTAMP_NTZ"), ("dec", "DECIMAL(10,4)")):
        spark.sql(f"ALTER TABLE delta.`{p}` ALTER COLUMN {column} TYPE {t}")
    spark.sql(
        f"INSERT INTO delta.`{p}` VALUES (10000000000, 1e300, TIMESTAMP_NTZ'2025-01-01 01:02:03', "
        "123456.1234, TIMESTAMP_NTZ'2024-01-01 10:00:09')"
    )
    return p


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_type_widening_rewrites_in_the_current_type(spark, widened_table, tmp_path, engine):
    path = _copy(widened_table, tmp_path / "t")
    before = rows_spark(spark, path)
    schema_before = _schema(path)
    assert schema_before["fields"][0]["metadata"]["delta.typeChanges"]
    m = optimize(spark, path, rewrite_engine=engine)
    assert m.num_files_removed == 4 and m.num_files_added == 1
    assert rows_spark(spark, path) == before
    assert _schema(path) == schema_before  # delta.typeChanges kept untouched
    (add,) = adds_removes(path, log_versions(path)[-1])[0]
    written = pq.read_schema(os.path.join(path, add["path"]))
    assert [str(f.type) for f in written] == ["int64", "double", "timestamp[us]", "decimal128(10, 4)", "timestamp[us]"]
    stats = json.loads(add["stats"])
    assert stats["minValues"]["c"] == 0 and stats["maxValues"]["c"] == 10000000000
    assert stats["minValues"]["d"] == "2024-01-01T00:00:00.000" and stats["maxValues"]["dec"] == 123456.1234


# ------------------------------------------------------------------ no JVM


def _cm(i: int, physical: str) -> dict[str, Any]:
    return {"delta.columnMapping.id": i, "delta.columnMapping.physicalName": physical}


NESTED = [
    {
        "name": "the s",
        "type": {
            "type": "struct",
            "fields": [{"name": "a", "type": "integer", "nullable": True, "metadata": _cm(2, "col-a")}],
        },
        "nullable": True,
        "metadata": _cm(1, "col-s"),
    },
    {
        "name": "arr",
        "type": {
            "type": "array",
            "elementType": {
                "type": "struct",
                "fields": [{"name": "x", "type": "long", "nullable": True, "metadata": _cm(4, "col-x")}],
            },
            "containsNull": True,
        },
        "nullable": True,
        "metadata": {**_cm(3, "col-arr"), "delta.typeChanges": [{"fromType": "integer", "toType": "long"}]},
    },
]


def test_physical_fields_rename_every_level_and_keep_other_metadata():
    got = physical_fields(NESTED, "id")
    assert [f["name"] for f in got] == ["col-s", "col-arr"]
    assert got[0]["metadata"] == {"parquet.field.id": 1}
    assert got[0]["type"]["fields"][0]["name"] == "col-a" and got[0]["type"]["fields"][0]["metadata"] == {
        "parquet.field.id": 2
    }
    assert got[1]["type"]["elementType"]["fields"][0]["name"] == "col-x"
    assert got[1]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    assert physical_fields(NESTED, "none") == NESTED
    assert physical_column_path(NESTED, ["THE S", "A"], "name") == ("col-s", "col-a")
    assert physical_column_path(NESTED, ["the s", "a"], "none") == ("the s", "a")
    with pytest.raises(KeyError):
        physical_column_path(NESTED, ["nope"], "name")


def test_arrow_rewrite_matches_columns_by_field_id_in_id_mode(tmp_path):
    """id mode: a file whose Parquet names differ (e.g. converted from Iceberg) is read by field id."""
    import pyarrow as pa

    from tests.helpers import arrow_rewrite

    def fid(i: int) -> dict[bytes, bytes]:
        return {b"PARQUET:field_id": str(i).encode()}

    src = str(tmp_path / "in.parquet")
    schema = pa.schema([pa.field("other", pa.int32(), metadata=fid(7)), pa.field("k", pa.int32(), metadata=fid(8))])
    pq.write_table(pa.table({"other": [1, 2], "k": [10, 20]}, schema=schema), src)
    fields = [
        {"name": "k", "type": "long", "nullable": True, "metadata": {"parquet.field.id": 7}},
        {"name": "dropped_id", "type": "integer", "nullable": True, "metadata": {"parquet.field.id": 9}},
    ]
    out = str(tmp_path / "out" / "by_id.parquet")
    assert arrow_rewrite([src], out, fields, by_id=True).rows == 2
    written = pq.read_table(out)
    assert written.to_pydict() == {"k": [1, 2], "dropped_id": [None, None]}  # by id, widened to long
    assert written.schema.field("k").metadata == fid(7)
    out = str(tmp_path / "out" / "by_name.parquet")
    arrow_rewrite([src], out, fields)
    assert pq.read_table(out).to_pydict() == {"k": [10, 20], "dropped_id": [None, None]}


def _mirror(storage: Any, src: str, dest: str, *, upload: bool) -> None:
    """Copy a table between a local folder and the store: upload every file, or download the log and live files."""
    from urllib.parse import unquote

    from dbt_delta_optimize.delta.storage import join

    if upload:
        for folder, _, names in os.walk(src):
            for n in names:
                local = os.path.join(folder, n)
                storage.put_file(join(dest, os.path.relpath(local, src)), local)
        return
    logs = [n for n in storage.list_dir(join(src, "_delta_log")) if n.endswith(".json")]
    paths = {f"_delta_log/{n}" for n in logs}
    for n in logs:
        for line in storage.read_bytes(join(src, "_delta_log", n)).decode().splitlines():
            add = json.loads(line).get("add")
            if add:
                paths.add(unquote(add["path"]))
    for rel in paths:
        try:
            data = storage.read_bytes(join(src, rel))
        except Exception:  # a file an earlier commit removed may be gone; the live ones are all there
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        with open(os.path.join(dest, rel), "wb") as fh:
            fh.write(data)


@pytest.mark.spark
def test_mapped_table_on_s3_keeps_names_ids_and_rows(spark, mapped_tables, s3_server, monkeypatch, tmp_path):
    """On an object store rows go through Arrow in Spark tasks (store_io): the same physical names and ids."""
    from dbt_delta_optimize.delta.storage import storage_for

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_server.new_bucket()}/t"
    storage = storage_for(url, {})
    _mirror(storage, mapped_tables["id"], url, upload=True)
    before = rows_spark(spark, mapped_tables["id"])
    for args in (["--where", "`the part` = 'p0'"], ["--zorder-by", "`given name`", "--where", "`the part` = 'p1'"]):
        r = CliRunner().invoke(cli, ["optimize", url, *args])
        assert r.exit_code == 0, r.output
    local = str(tmp_path / "back")
    _mirror(storage, url, local, upload=False)
    assert rows_spark(spark, local) == before
    versions = log_versions(local)
    for v in versions[-2:]:
        _check_physical(local, v)
