"""The table Databricks makes by default, after a few months of DML: every feature at once.

Column mapping (a renamed column with a space, a dropped column), deletion vectors left by DELETE
and UPDATE, row tracking, in-commit timestamps and a widened type, on one partitioned table. Each
rewrite path must keep the rows, each row's id and commit version, and leave a table delta-spark
still optimizes.
"""

from __future__ import annotations

import shutil

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.snapshot import load_snapshot, read_commit
from dbt_delta_optimize.inspect.validate import validate_commit

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_COLUMNS = "id, `first name`, `total amount`, part, _metadata.row_id, _metadata.row_commit_version"


def _rows(spark, path: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.sql(f"SELECT {_COLUMNS} FROM delta.`{path}`").collect())


@pytest.fixture(scope="module")
def databricks_template(spark, tmp_path_factory):
    p = str(tmp_path_factory.mktemp("dbx") / "t")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, `first name` STRING, amount INT, junk STRING, part STRING) "
        "USING delta PARTITIONED BY (part) TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.enableDeletionVectors' = 'true', 'delta.enableRowTracking' = 'true', "
        "'delta.enableInCommitTimestamps' = 'true', 'delta.enableTypeWidening' = 'true')"
    )
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{p}` SELECT id + {i * 100}, concat('n', id % 7), CAST(id AS INT), 'j', "
            f"IF(id % 2 = 0, 'a', 'b') FROM range(0, 30)"
        )
    spark.sql(f"ALTER TABLE delta.`{p}` RENAME COLUMN amount TO `total amount`")
    spark.sql(f"ALTER TABLE delta.`{p}` DROP COLUMN junk")
    spark.sql(f"ALTER TABLE delta.`{p}` ALTER COLUMN `total amount` TYPE BIGINT")
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (999, 'big', 5000000000, 'a'), (998, 'big', 7, 'b')")
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 5 = 0")
    spark.sql(f"UPDATE delta.`{p}` SET `first name` = 'updated' WHERE id % 7 = 1")
    return p


@pytest.mark.parametrize("how", ["arrow", "spark", "zorder"])
def test_every_default_feature_at_once(spark, databricks_template, tmp_path, how):
    p = str(tmp_path / "t")
    shutil.copytree(databricks_template, p)
    snap = load_snapshot(p)
    assert any(f.deletion_vector is not None for f in snap.files), "DML left deletion vectors"
    before = _rows(spark, p)
    kwargs = {"zorder_by": ["`first name`"]} if how == "zorder" else {"rewrite_engine": how}
    m = optimize(spark, p, **kwargs)
    (version,) = m.committed_versions
    after = load_snapshot(p)
    assert len(after.files) < len(snap.files)
    assert all(f.deletion_vector is None for f in after.files)
    assert _rows(spark, p) == before
    assert validate_commit(p, version).ok
    actions = read_commit(p, version)
    assert "inCommitTimestamp" in actions[0]["commitInfo"], "commitInfo first, with its timestamp"
    assert "junk" not in {c.lower() for c in spark.read.format("delta").load(p).columns}
    # delta-spark still optimizes and reads the table the same afterwards
    spark.sql(f"OPTIMIZE delta.`{p}`").collect()
    assert _rows(spark, p) == before


def test_liquid_table_with_row_tracking_and_deletion_vectors(spark, tmp_path):
    """CLUSTER BY with delta-spark's defaults (row tracking, DVs): clustered, ids and rows kept."""
    p = str(tmp_path / "liquid")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, x STRING) USING delta CLUSTER BY (id, x) "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true', 'delta.enableDeletionVectors' = 'true')"
    )
    for i in range(4):
        spark.sql(f"INSERT INTO delta.`{p}` SELECT id * 4 + {i}, concat('v', id % 5) FROM range(0, 25)")
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 9 = 2")
    before_files = len(load_snapshot(p).files)
    query = f"SELECT id, x, _metadata.row_id, _metadata.row_commit_version FROM delta.`{p}`"
    before = sorted(tuple(r) for r in spark.sql(query).collect())
    m = optimize(spark, p)
    (version,) = m.committed_versions
    after = load_snapshot(p)
    assert len(after.files) < before_files
    assert all(f.deletion_vector is None for f in after.files)
    assert all(f.clustering_provider == "liquid" and f.tags.get("ZCUBE_ID") for f in after.files)
    assert sorted(tuple(r) for r in spark.sql(query).collect()) == before
    assert validate_commit(p, version).ok
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{p}`").collect()[0]
    assert list(detail.clusteringColumns) == ["id", "x"]
    spark.sql(f"OPTIMIZE delta.`{p}`").collect()
    assert sorted(tuple(r) for r in spark.sql(query).collect()) == before
