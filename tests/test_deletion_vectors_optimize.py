"""Tables with deletion vectors, made by delta-spark (DELETE, UPDATE, MERGE), optimized and purged by us.

Every rewrite is read back by delta-spark and by deltalake (its SQL reader applies DVs) row for
row; the new files carry no DV and their stats equal those delta-spark's own OPTIMIZE writes on a
copy; delta-spark's OPTIMIZE, DESCRIBE DETAIL, VACUUM and RESTORE still work afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.snapshot import load_snapshot, read_commit
from dbt_delta_optimize.inspect.validate import validate_commit
from dbt_delta_optimize.plan.autocompact import logical_size, partition_counts
from dbt_delta_optimize.purge import purge
from tests.helpers import _key, _norm, log_versions, rows_spark

pytestmark = pytest.mark.spark


def rows_deltars(path: str, storage_options: dict[str, str] | None = None) -> list[tuple]:
    """deltalake's rows through its SQL reader (its Arrow dataset refuses the deletionVectors reader feature)."""
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(path, storage_options=storage_options)
    t = QueryBuilder().register("t", dt).execute("SELECT * FROM t").read_all()
    import pyarrow as pa

    data = pa.table(t)
    cols = sorted(data.column_names)
    return sorted((tuple(_norm(r[c]) for c in cols) for r in data.select(cols).to_pylist()), key=_key)


def dv_files(path: str) -> list:
    return [f for f in load_snapshot(path).files if f.deletion_vector is not None]


def _stats(path: str) -> list[tuple]:
    """(numRecords, minValues, maxValues, nullCount) of every live file, sorted."""
    out = []
    for f in load_snapshot(path).files:
        s = json.loads(f.stats)
        out.append(
            (
                s["numRecords"],
                json.dumps(s["minValues"], sort_keys=True),
                json.dumps(s["maxValues"], sort_keys=True),
                json.dumps(s["nullCount"], sort_keys=True),
            )
        )
    return sorted(out)


@pytest.fixture(scope="module")
def dv_table(spark, tmp_path_factory) -> str:
    """A partitioned table whose files got deletion vectors from a DELETE, an UPDATE and a MERGE."""
    p = str(tmp_path_factory.mktemp("dv") / "t")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, name STRING, part STRING) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{p}` SELECT /*+ REPARTITION(2) */ id, CAST(id AS STRING), "
            f"IF(id % 2 = 0, 'a', 'b') FROM range({i * 40}, {i * 40 + 40})"
        )
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 5 = 0")
    spark.sql(f"UPDATE delta.`{p}` SET name = concat(name, '-u') WHERE id % 7 = 1")
    spark.sql(
        f"MERGE INTO delta.`{p}` t USING (SELECT id FROM range(0, 120, 11)) s ON t.id = s.id WHEN MATCHED THEN DELETE"
    )
    assert len(dv_files(p)) >= 6, "the DML should have left deletion vectors"
    return p


def _copy(src: str, dst) -> str:
    shutil.copytree(src, str(dst))
    return str(dst)


def _check_dv_commit(p: str, before_dvs: list) -> dict:
    """The commit removed every DV file with its exact descriptor, added files without DV, and validates."""
    version = log_versions(p)[-1]
    actions = read_commit(p, version)
    removes = {a["remove"]["path"]: a["remove"] for a in actions if "remove" in a}
    adds = [a["add"] for a in actions if "add" in a]
    for f in before_dvs:
        assert removes[f.path]["deletionVector"] == f.deletion_vector.to_json()
    assert adds and all("deletionVector" not in a for a in adds)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operationMetrics"]["numDeletionVectorsRemoved"] == str(len(before_dvs))
    report = validate_commit(p, version)
    assert report.ok, report.describe()
    return info


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_optimize_drops_deleted_rows_like_delta_spark(spark, dv_table, tmp_path, engine):
    p = _copy(dv_table, tmp_path / "ours")
    theirs = _copy(dv_table, tmp_path / "theirs")
    expected = rows_spark(spark, p)
    assert rows_deltars(p) == expected
    before_dvs = dv_files(p)
    m = optimize(spark, p, rewrite_engine=engine)
    assert m.num_files_added == 2 and m.deletion_vector_stats is not None
    assert m.deletion_vector_stats.num_deletion_vectors_removed == len(before_dvs)
    assert m.deletion_vector_stats.num_deletion_vector_rows_removed == sum(
        f.deletion_vector.cardinality for f in before_dvs
    )
    _check_dv_commit(p, before_dvs)
    assert rows_spark(spark, p) == expected and rows_deltars(p) == expected
    assert not dv_files(p)
    # the same stats as delta-spark's own OPTIMIZE of a copy (live rows only)
    spark.sql(f"OPTIMIZE delta.`{theirs}`")
    assert _stats(p) == _stats(theirs)
    if engine == "spark":
        return
    # delta-spark keeps working on the table: OPTIMIZE, DESCRIBE DETAIL, RESTORE, VACUUM
    spark.sql(f"OPTIMIZE delta.`{p}`")
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{p}`").collect()[0]
    assert detail.numFiles == 2 and "deletionVectors" in detail.tableFeatures
    spark.sql(f"RESTORE TABLE delta.`{p}` TO VERSION AS OF {m.committed_versions[0] - 1}")
    assert rows_spark(spark, p) == expected and len(dv_files(p)) == len(before_dvs)
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    try:
        spark.sql(f"VACUUM delta.`{p}` RETAIN 0 HOURS")
    finally:
        spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = true")
    assert rows_spark(spark, p) == expected


def test_lone_file_mostly_deleted_is_rewritten(spark, tmp_path):
    """delta-io/delta#5781: a lone file 60% deleted; delta-spark's OPTIMIZE leaves it, ours rewrites it."""
    p = str(tmp_path / "lone")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, s STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(f"INSERT INTO delta.`{p}` SELECT /*+ COALESCE(1) */ id, CAST(id AS STRING) FROM range(100)")
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id < 60")
    (lone,) = dv_files(p)
    assert lone.deletion_vector.cardinality == 60 and lone.num_records == 100
    theirs = _copy(p, tmp_path / "theirs")
    expected = rows_spark(spark, p)
    spark.sql(f"OPTIMIZE delta.`{theirs}`")
    assert len(dv_files(theirs)) == 1  # delta-spark did not rewrite it
    res = CliRunner().invoke(cli, ["optimize", p, "--min-file-size", "1", "--json"])  # large by size: ratio decides
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["numFilesRemoved"] == 1
    (new,) = load_snapshot(p).files
    assert new.path != lone.path and new.deletion_vector is None and new.num_records == 40
    assert rows_spark(spark, p) == expected and rows_deltars(p) == expected
    _check_dv_commit(p, [lone])


def test_zorder_on_dv_table(spark, dv_table, tmp_path):
    p = _copy(dv_table, tmp_path / "z")
    expected = rows_spark(spark, p)
    before_dvs = dv_files(p)
    optimize(spark, p, zorder_by=["id"])
    assert not dv_files(p)
    assert rows_spark(spark, p) == expected and rows_deltars(p) == expected
    _check_dv_commit(p, before_dvs)
    assert sum(f.num_records for f in load_snapshot(p).files) == len(expected)


def test_purge_api_and_cli(spark, dv_table, tmp_path):
    p = _copy(dv_table, tmp_path / "purge")
    expected = rows_spark(spark, p)
    in_a = [f for f in dv_files(p) if f.partition_values["part"] == "a"]
    plan = purge(None, p, where="part = 'a'", dry_run=True)
    assert plan.commit_name == "REORG" and sorted(f.path for f in plan.files_to_rewrite) == sorted(f.path for f in in_a)
    # only partition a, through the CLI
    res = CliRunner().invoke(cli, ["purge", p, "--where", "part = 'a'", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["numFilesRemoved"] == len(in_a)
    info = _check_dv_commit(p, in_a)
    assert info["operation"] == "REORG" and info["operationParameters"]["applyPurge"] is True
    assert {f.partition_values["part"] for f in dv_files(p)} == {"b"}
    # the rest through the API; every file with deleted rows is rewritten, even alone in its bin
    rest = dv_files(p)
    m = purge(spark, p, max_file_size=1)  # one file per bin: single-file bins are kept
    assert m.num_files_removed == len(rest) == m.num_bins
    _check_dv_commit(p, rest)
    assert not dv_files(p) and rows_spark(spark, p) == expected and rows_deltars(p) == expected
    # a second purge is a no-op: no new version
    versions = log_versions(p)
    res = CliRunner().invoke(cli, ["purge", p])
    assert res.exit_code == 0 and "nothing to purge" in res.output
    assert log_versions(p) == versions
    spark.sql(f"DESCRIBE HISTORY delta.`{p}`").collect()  # delta-spark reads our REORG commits


def test_auto_compaction_counts_dv_files_by_live_bytes(dv_table):
    """delta-spark's counters use estLogicalFileSize: a file with most rows deleted counts as small."""
    assert logical_size(1000, 100, 60) == 400 and logical_size(1000, None, 60) == 1000
    snap = load_snapshot(dv_table)
    heavy = max(dv_files(dv_table), key=lambda f: f.deletion_vector.cardinality / f.num_records)
    live = logical_size(heavy.size, heavy.num_records, heavy.deletion_vector.cardinality)
    assert live < heavy.size
    for view in (snap, dataclasses.replace(snap, files=tuple(snap.files), file_table=None)):
        small, _ = partition_counts(view, live + 1)  # a threshold between its live and physical bytes
        assert small.get((heavy.partition_values["part"],), 0) >= 1
        physical = sum(1 for f in snap.files if f.partition_values == heavy.partition_values and f.size <= live)
        assert small[(heavy.partition_values["part"],)] > physical


def test_dv_table_on_s3_through_the_arrow_store_path(spark, s3_server, tmp_path, monkeypatch):
    from deltalake import DeltaTable

    from dbt_delta_optimize.delta.storage import storage_for

    local = str(tmp_path / "local")
    spark.sql(
        f"CREATE TABLE delta.`{local}` (id BIGINT, s STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(f"INSERT INTO delta.`{local}` SELECT /*+ REPARTITION(3) */ id, CAST(id AS STRING) FROM range(60)")
    spark.sql(f"DELETE FROM delta.`{local}` WHERE id % 4 = 0")
    expected = rows_spark(spark, local)
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_server.new_bucket()}/dv"
    store = storage_for(url)
    for root, _, names in os.walk(local):
        for n in names:
            if not n.endswith(".crc"):
                full = os.path.join(root, n)
                store.put_file(f"{url}/{os.path.relpath(full, local)}", full)
    before_dvs = dv_files(url)
    assert before_dvs
    for args in (["optimize", url, "--json"], ["optimize", url, "--zorder-by", "id", "--json"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0, res.output
        assert not dv_files(url) and rows_deltars(url) == expected
    assert DeltaTable(url).history(2)[1]["operationMetrics"]["numDeletionVectorsRemoved"] == str(len(before_dvs))
    assert CliRunner().invoke(cli, ["validate", url]).exit_code == 0


def test_auto_compaction_runs_on_dv_files(spark, dv_table, tmp_path):
    """No file is smaller than the threshold on disk, but DV files are by their live bytes: AC compacts them."""
    from dbt_delta_optimize.api import auto_compact

    p = _copy(dv_table, tmp_path / "ac")
    snap = load_snapshot(p)
    threshold = min(f.size for f in snap.files)
    expected = rows_spark(spark, p)
    before_dvs = dv_files(p)
    operations = {
        v: [a["commitInfo"]["operation"] for a in read_commit(p, v) if "commitInfo" in a] for v in log_versions(p)
    }
    delete_version = next(v for v, ops in operations.items() if ops == ["DELETE"])
    r = auto_compact(
        spark, p, delete_version, enabled=True, min_num_files=2, min_file_size=threshold, max_file_size=10**9
    )
    assert r.status == "runOnModifiedPartitions" and r.metrics is not None, r.reason
    assert r.metrics.deletion_vector_stats is not None
    assert rows_spark(spark, p) == expected and rows_deltars(p) == expected
    assert len(dv_files(p)) < len(before_dvs)
    assert validate_commit(p, log_versions(p)[-1]).ok


def test_purge_bad_input_is_exit_2_and_writes_nothing(spark, dv_table, tmp_path):
    res = CliRunner().invoke(cli, ["purge", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr
    versions = log_versions(dv_table)
    res = CliRunner().invoke(cli, ["purge", dv_table, "--where", "id > 3"])
    assert res.exit_code == 2 and "non-partition column" in res.stderr, res.output
    res = CliRunner().invoke(cli, ["purge", dv_table, "--dry-run", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["filesToRewrite"] == len(dv_files(dv_table))
    assert log_versions(dv_table) == versions
