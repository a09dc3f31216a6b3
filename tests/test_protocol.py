"""The protocol gate: refused tables are named feature by feature and never touched.

Pure unit tests on ``ensure_write_supported`` first, then real tables made by delta-spark
(and delta-rs) for every feature we refuse or accept. "Accepted" is proven by an actual
rewrite commit that both engines then read back unchanged.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from dbt_delta_optimize.delta.actions import Metadata, Protocol
from dbt_delta_optimize.delta.commit import Transaction
from dbt_delta_optimize.delta.protocol import (
    SUPPORTED_WRITER_FEATURES,
    active_features,
    ensure_write_supported,
)
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.errors import UnsupportedFeatureError
from tests.helpers import data_files, log_snapshot, rows_deltars, rows_spark
from tests.test_commit import in_partition, rewrite

ALL_SUPPORTED_WRITERS = (
    "appendOnly",
    "invariants",
    "checkConstraints",
    "generatedColumns",
    "changeDataFeed",
    "timestampNtz",
)


def _meta(configuration=None, fields=None) -> Metadata:
    schema = {"type": "struct", "fields": fields or [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    return Metadata(id="m", schema_string=json.dumps(schema), partition_columns=(), configuration=configuration or {})


def _refused(protocol: Protocol, metadata: Metadata | None = None, table: str = "t") -> UnsupportedFeatureError:
    with pytest.raises(UnsupportedFeatureError) as ei:
        ensure_write_supported(protocol, metadata, table=table)
    assert "Nothing was written" in str(ei.value)
    return ei.value


# =========================================================================== unit tests
@pytest.mark.parametrize(
    "protocol",
    [
        Protocol(1, 1),
        Protocol(1, 2),
        Protocol(1, 3),
        Protocol(1, 4),
        Protocol(1, 7, None, ALL_SUPPORTED_WRITERS),
        Protocol(3, 7, ("timestampNtz",), ALL_SUPPORTED_WRITERS),
        Protocol(3, 7, ("v2Checkpoint",), ("v2Checkpoint", "clustering", "domainMetadata")),
        Protocol(2, 5),  # legacy column-mapping capability, but mode is none: not in use
        Protocol(2, 6),  # legacy identity capability without an identity column
    ],
    ids=lambda p: f"r{p.min_reader_version}w{p.min_writer_version}{'+f' if p.writer_features else ''}",
)
def test_accepted_protocols(protocol):
    ensure_write_supported(protocol, _meta())
    ensure_write_supported(protocol, None)


@pytest.mark.parametrize(
    "protocol, metadata, feature",
    [
        (Protocol(3, 7, ("deletionVectors",), ("deletionVectors",)), None, "deletionVectors"),
        (Protocol(1, 7, None, ("rowTracking", "domainMetadata")), None, "rowTracking"),
        (Protocol(1, 7, None, ("inCommitTimestamp",)), None, "inCommitTimestamp"),
        (Protocol(3, 7, ("typeWidening",), ("typeWidening",)), None, "typeWidening"),
        (Protocol(3, 7, ("typeWidening-preview",), ("typeWidening-preview",)), None, "typeWidening-preview"),
        (Protocol(1, 7, None, ("identityColumns",)), None, "identityColumns"),
        (Protocol(3, 7, ("variantType",), ("variantType",)), None, "variantType"),
        (Protocol(1, 7, None, ("someFutureFeature",)), None, "someFutureFeature"),
        (Protocol(3, 7, ("someFutureReaderFeature",), ()), None, "someFutureReaderFeature"),
        # legacy protocols: capability + actual use
        (Protocol(2, 5), _meta({"delta.columnMapping.mode": "name"}), "columnMapping"),
        (Protocol(2, 5), _meta({"delta.columnMapping.mode": "id"}), "columnMapping"),
        (
            Protocol(1, 6),
            _meta(fields=[{"name": "id", "type": "long", "nullable": True, "metadata": {"delta.identity.start": 1}}]),
            "identityColumns",
        ),
        # a property that turns a feature on, even if the protocol does not list it (yet)
        (Protocol(1, 2), _meta({"delta.enableDeletionVectors": "TRUE"}), "deletionVectors"),
    ],
)
def test_refused_features_are_named(protocol, metadata, feature):
    err = _refused(protocol, metadata, table="db.events")
    assert feature in err.features
    assert feature in str(err)
    assert "db.events" in str(err)


def test_multiple_features_in_one_error():
    err = _refused(
        Protocol(
            3,
            7,
            ("deletionVectors", "columnMapping"),
            ("deletionVectors", "columnMapping", "rowTracking", "domainMetadata", "appendOnly"),
        ),
        _meta({"delta.columnMapping.mode": "name"}),
    )
    assert err.features == ("columnMapping", "deletionVectors", "rowTracking")
    msg = str(err)
    for f in err.features:
        assert f in msg
    assert "appendOnly" not in msg  # supported features are not blamed
    assert msg.count("deletionVectors (") == 1  # listed once, with its reason


def test_reader_and_writer_versions_beyond_ours():
    err = _refused(Protocol(4, 7))
    assert "minReaderVersion 4" in str(err)
    err = _refused(Protocol(1, 8))
    assert "minWriterVersion 8" in str(err)


def test_active_features_legacy_mapping():
    _, w = active_features(Protocol(1, 4), _meta())
    assert w == {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
    r, w = active_features(Protocol(2, 5), _meta({"delta.columnMapping.mode": "name"}))
    assert "columnMapping" in r and "columnMapping" in w
    r, w = active_features(Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "appendOnly")))
    assert r == {"deletionVectors"} and w == {"deletionVectors", "appendOnly"}
    # clustering (unpartitioned only) and v2Checkpoint have their own real-table tests: test_liquid, test_v2_checkpoint
    assert set(ALL_SUPPORTED_WRITERS) | {"clustering", "domainMetadata", "v2Checkpoint"} == set(
        SUPPORTED_WRITER_FEATURES
    )


# =========================================================================== real tables
REFUSED = {
    "deletionVectors": "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
    "columnMapping": "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
    "rowTracking": "TBLPROPERTIES ('delta.enableRowTracking' = 'true')",
    "inCommitTimestamp": "TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')",
    "typeWidening": "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
}


def _assert_refused_untouched(path: str, expected_features: set[str]) -> None:
    log_before, files_before = log_snapshot(path), data_files(path)
    assert files_before, "the table should hold data"
    snap = load_snapshot(path)
    with pytest.raises(UnsupportedFeatureError) as ei:
        Transaction(snap)
    assert expected_features <= set(ei.value.features), ei.value.features
    for f in expected_features:
        assert f in str(ei.value)
    assert path in str(ei.value)
    assert log_snapshot(path) == log_before and data_files(path) == files_before


def _ctas(spark, path: str, clause: str, cols: str = "id, CAST(id AS STRING) AS s") -> None:
    spark.sql(f"CREATE TABLE delta.`{path}` USING delta {clause} AS SELECT {cols} FROM range(1, 3)")


@pytest.mark.spark
def test_spark_table_with_not_null_column_is_accepted(spark, tmp_path):
    path = str(tmp_path / "notnull")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT NOT NULL, s STRING) USING delta")
    snap = load_snapshot(path)
    assert snap.schema["fields"][0]["nullable"] is False
    assert "invariants" in active_features(snap.protocol, snap.metadata)[1]
    Transaction(snap)


@pytest.mark.spark
@pytest.mark.parametrize("feature", sorted(REFUSED))
def test_spark_table_with_feature_is_refused(spark, tmp_path, feature):
    path = str(tmp_path / feature)
    _ctas(spark, path, REFUSED[feature])
    _assert_refused_untouched(path, {feature})


@pytest.mark.spark
def test_spark_table_with_identity_column_is_refused(spark, tmp_path):
    path = str(tmp_path / "identity")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT GENERATED ALWAYS AS IDENTITY, s STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` (s) VALUES ('a')")
    _assert_refused_untouched(path, {"identityColumns"})


@pytest.mark.spark
def test_spark_table_with_several_features_lists_all(spark, tmp_path):
    path = str(tmp_path / "multi")
    _ctas(
        spark,
        path,
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name', "
        "'delta.enableInCommitTimestamps' = 'true')",
    )
    _assert_refused_untouched(path, {"deletionVectors", "columnMapping", "inCommitTimestamp"})


@pytest.mark.spark
def test_feature_enabled_later_is_refused(spark, tmp_path):
    """A table that was fine, then got deletion vectors: the gate follows the latest snapshot."""
    path = str(tmp_path / "later")
    _ctas(spark, path, "")
    Transaction(load_snapshot(path))  # accepted
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    _assert_refused_untouched(path, {"deletionVectors"})


ACCEPTED = {
    "appendOnly": ("TBLPROPERTIES ('delta.appendOnly' = 'true')", "id, CAST(id AS STRING) AS s", None),
    # NOT NULL columns are enforced as invariants; the writer feature comes with every table-features protocol.
    "invariants": ("TBLPROPERTIES ('delta.feature.invariants' = 'supported')", "id, CAST(id AS STRING) AS s", None),
    "checkConstraints": (
        "",
        "id, CAST(id AS STRING) AS s",
        "ALTER TABLE delta.`{p}` ADD CONSTRAINT id_pos CHECK (id > 0)",
    ),
    "changeDataFeed": ("TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')", "id, CAST(id AS STRING) AS s", None),
    "timestampNtz": ("", "id, TIMESTAMP_NTZ'2024-01-02 03:04:05' AS ts", None),
}


@pytest.mark.spark
@pytest.mark.parametrize("feature", list(ACCEPTED))
def test_spark_table_with_supported_feature_is_accepted(spark, tmp_path, feature):
    path = str(tmp_path / feature)
    clause, cols, alter = ACCEPTED[feature]
    _ctas(spark, path, clause, cols)
    if alter:
        spark.sql(alter.format(p=path))
    snap = load_snapshot(path)
    _, writers = active_features(snap.protocol, snap.metadata)
    assert feature in writers
    log_before = log_snapshot(path)
    Transaction(snap)  # no error, nothing written
    assert log_snapshot(path) == log_before


@pytest.mark.spark
def test_spark_table_with_generated_columns_is_accepted(spark, tmp_path):
    path = str(tmp_path / "gen")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, twice BIGINT GENERATED ALWAYS AS (id * 2)) USING delta")
    snap = load_snapshot(path)
    assert "generatedColumns" in active_features(snap.protocol, snap.metadata)[1]
    assert "delta.generationExpression" in snap.schema["fields"][1]["metadata"]
    Transaction(snap)


@pytest.mark.spark
def test_rewrite_on_table_with_all_supported_features(spark, tmp_path):
    """Every supported feature at once, and a real rewrite: both engines read the same rows after."""
    path = str(tmp_path / "all")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT NOT NULL, name STRING, part STRING, "
        "twice BIGINT GENERATED ALWAYS AS (id * 2), ts TIMESTAMP_NTZ) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.appendOnly' = 'true', 'delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT id_pos CHECK (id > 0)")
    spark.sql(
        f"INSERT INTO delta.`{path}` (id, name, part, ts) SELECT /*+ REPARTITION(3) */ id, CAST(id AS STRING), 'x', "
        "TIMESTAMP_NTZ'2024-01-02 03:04:05' + make_interval(0, 0, 0, 0, 0, 0, id) FROM range(1, 7)"
    )
    snap = load_snapshot(path)
    _, writers = active_features(snap.protocol, snap.metadata)
    assert set(ALL_SUPPORTED_WRITERS) <= writers, writers
    expected = rows_spark(spark, path)
    targets = in_partition(snap, part="x")
    assert len(targets) == 3
    res, add, _, _ = rewrite(snap, targets)
    assert res.version == snap.version + 1
    assert rows_spark(spark, path) == expected
    assert rows_deltars(path) == expected
    assert [f.path for f in load_snapshot(path).files] == [add.path]
    assert all(r[3] == 2 * r[0] for r in rows_spark(spark, path, ["id", "name", "part", "twice"]))
    # dataChange=false: the change data feed has rows for the insert and none for our commit.
    cdf = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(path)
    versions = [r._commit_version for r in cdf.select("_commit_version").collect()]
    assert len(versions) == 6 and res.version not in versions


def test_deltars_default_table_is_accepted(tmp_path):
    from deltalake import write_deltalake

    path = str(tmp_path / "rs")
    write_deltalake(path, pa.table({"id": pa.array([1, 2], pa.int64())}))
    snap = load_snapshot(path)
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 2)
    Transaction(snap)


def test_deltars_table_with_deletion_vectors_is_refused(tmp_path):
    from deltalake import write_deltalake

    path = str(tmp_path / "rs_dv")
    write_deltalake(
        path, pa.table({"id": pa.array([1, 2], pa.int64())}), configuration={"delta.enableDeletionVectors": "true"}
    )
    _assert_refused_untouched(path, {"deletionVectors"})
