"""The other table features: each one a real delta-spark table optimized by us, read back by delta-spark.

timestampNtz, checkConstraints, generatedColumns, identityColumns (the high-water mark untouched),
changeDataFeed (no CDC file), appendOnly, vacuumProtocolCheck and variantType are honoured by a
dataChange=false rewrite; variantShredding is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.protocol import active_features
from dbt_delta_optimize.delta.snapshot import load_snapshot, read_commit
from dbt_delta_optimize.errors import UnsupportedFeatureError
from tests.helpers import data_files, log_snapshot, log_versions, rows_spark

pytestmark = pytest.mark.spark


def _identity(path: str) -> dict:
    (field,) = [f for f in load_snapshot(path).schema["fields"] if f["name"] == "id"]
    return {k: v for k, v in field["metadata"].items() if k.startswith("delta.identity")}


def test_every_safe_feature_at_once(spark, tmp_path):
    p = str(tmp_path / "features")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT GENERATED ALWAYS AS IDENTITY, n BIGINT NOT NULL, "
        "twice BIGINT GENERATED ALWAYS AS (n * 2), ts TIMESTAMP_NTZ, part STRING) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.appendOnly' = 'true', 'delta.enableChangeDataFeed' = 'true', "
        "'delta.feature.vacuumProtocolCheck' = 'supported')"
    )
    spark.sql(f"ALTER TABLE delta.`{p}` ADD CONSTRAINT n_pos CHECK (n > 0)")
    for i in range(3):
        spark.sql(
            f"INSERT INTO delta.`{p}` (n, ts, part) SELECT id, TIMESTAMP_NTZ'2024-01-02 03:04:05' + "
            f"make_interval(0, 0, 0, 0, 0, 0, id), 'x' FROM range({i * 5 + 1}, {i * 5 + 6})"
        )
    snap = load_snapshot(p)
    _, writers = active_features(snap.protocol, snap.metadata)
    wanted = {"identityColumns", "changeDataFeed", "appendOnly", "vacuumProtocolCheck", "checkConstraints"}
    assert wanted | {"generatedColumns", "timestampNtz", "invariants"} <= writers, writers
    expected, mark = rows_spark(spark, p), _identity(p)
    assert "delta.identity.highWaterMark" in mark
    m = optimize(spark, p)
    assert m.num_files_removed == len(snap.files) > 1 and m.num_files_added == 1
    (version,) = m.committed_versions
    actions = read_commit(p, version)
    assert not [a for a in actions if "cdc" in a or "metaData" in a or "protocol" in a]
    assert not os.path.exists(os.path.join(p, "_change_data"))  # OPTIMIZE writes no CDC file
    assert rows_spark(spark, p) == expected and _identity(p) == mark  # the high-water mark is untouched
    cdf = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(p)
    assert version not in {r._commit_version for r in cdf.select("_commit_version").collect()}
    # delta-spark still enforces what the table says, after our commit
    spark.sql(f"INSERT INTO delta.`{p}` (n, ts, part) VALUES (100, NULL, 'x')")
    new_id = spark.sql(f"SELECT id FROM delta.`{p}` WHERE n = 100").collect()[0].id
    assert new_id > max(r[0] for r in rows_spark(spark, p, ["id"]) if r[0] != new_id)
    with pytest.raises(Exception, match=r"(?i)append"):
        spark.sql(f"DELETE FROM delta.`{p}` WHERE n = 100")
    with pytest.raises(Exception, match=r"(?i)constraint|n_pos"):
        spark.sql(f"INSERT INTO delta.`{p}` (n, ts, part) VALUES (-1, NULL, 'x')")


def test_variant_columns_are_rewritten_faithfully(spark, tmp_path):
    p = str(tmp_path / "variant")
    spark.sql(f"CREATE TABLE delta.`{p}` (id BIGINT, v VARIANT) USING delta")
    for i in range(3):
        spark.sql(
            f'INSERT INTO delta.`{p}` SELECT id, parse_json(format_string(\'{{"a": %d, "b": ["x", %d]}}\', id, id)) '
            f"FROM range({i * 4}, {i * 4 + 4})"
        )
    snap = load_snapshot(p)
    assert {"variantType"} <= active_features(snap.protocol, snap.metadata)[1] or "variantType-preview" in (
        snap.protocol.writer_features or ()
    )

    def rows() -> list:
        return sorted(spark.sql(f"SELECT id, to_json(v) AS j FROM delta.`{p}`").collect())

    expected = rows()
    theirs = str(tmp_path / "theirs")
    shutil.copytree(p, theirs)
    m = optimize(spark, p)  # the Arrow rewriter has no variant type: the bin is rewritten by Spark
    assert m.num_files_removed == len(snap.files) > 1 and m.num_files_added == 1
    assert rows() == expected
    spark.sql(f"OPTIMIZE delta.`{theirs}`")
    (ours_file,), (their_file,) = load_snapshot(p).files, load_snapshot(theirs).files
    ours_stats, their_stats = json.loads(ours_file.stats), json.loads(their_file.stats)
    for key in ("numRecords", "minValues", "maxValues", "nullCount"):
        assert ours_stats.get(key) == their_stats.get(key), key
    assert spark.sql(f"SELECT count(*) c FROM delta.`{p}` WHERE variant_get(v, '$.a', 'int') = 5").collect()[0].c == 1
    (f,) = load_snapshot(p).files
    assert json.loads(f.stats)["numRecords"] == 12


def test_variant_shredding_is_refused_before_writing(spark, tmp_path):
    p = str(tmp_path / "shredded")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, v VARIANT) USING delta "
        "TBLPROPERTIES ('delta.enableVariantShredding' = 'true')"
    )
    for i in range(2):
        spark.sql(f"INSERT INTO delta.`{p}` SELECT id, parse_json('{{\"a\": 1}}') FROM range({i}, {i + 1})")
    log, files = log_snapshot(p), data_files(p)
    versions = log_versions(p)
    with pytest.raises(UnsupportedFeatureError, match="variantShredding"):
        optimize(spark, p)
    assert log_snapshot(p) == log and data_files(p) == files and log_versions(p) == versions
