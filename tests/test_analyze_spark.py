"""``analyze`` against real delta-spark 4.4 tables: the stats it commits are delta-spark's own, delta-spark
skips files with them, and the rows never change."""

from __future__ import annotations

import json
import os

import pytest

from dbt_delta_optimize.ops.analyze import analyze
from tests.helpers import assert_same_rows, log_versions, rows_deltars, rows_spark

pytestmark = pytest.mark.spark


def _commit(path: str, version: int) -> list[dict]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _live_adds(spark, path: str) -> dict[str, dict]:
    """path -> the live add action, replayed from the JSON commits (the tables here have no checkpoint)."""
    raw: dict[str, dict] = {}
    for v in log_versions(path):
        actions = _commit(path, v)
        for action in actions:  # a DELETE with deletion vectors removes and re-adds a path in one commit
            if "remove" in action:
                raw.pop(action["remove"]["path"], None)
        for action in actions:
            if "add" in action:
                raw[action["add"]["path"]] = action["add"]
    assert len(raw) == spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["numFiles"]
    return raw


def _files_read(spark, path: str, condition: str) -> int:
    """How many files delta-spark's scan reads for a filter (the scan's numFiles metric)."""
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        df = spark.read.format("delta").load(path).where(condition)
        df.collect()
        leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
        counts = []
        for i in range(leaves.size()):
            metrics = leaves.apply(i).metrics()
            if metrics.contains("numFiles"):
                counts.append(int(metrics.apply("numFiles").value()))
        assert counts, "no file scan in the plan"
        return sum(counts)
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")


def test_backfill_num_indexed_cols_zero(spark, tmp_path):
    """(a) 20 files written without stats, switched to 32: analyze makes delta-spark skip to <= 2 files."""
    p = str(tmp_path / "t")
    spark.conf.set("spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols", "0")
    try:
        spark.range(0, 2000).selectExpr("id", "id * 2 AS v", "cast(id AS string) AS s").repartitionByRange(
            20, "id"
        ).write.format("delta").save(p)
    finally:
        spark.conf.unset("spark.databricks.delta.properties.defaults.dataSkippingNumIndexedCols")
    adds = _live_adds(spark, p)
    assert len(adds) == 20 and all("minValues" not in json.loads(a["stats"]) for a in adds.values())
    assert _files_read(spark, p, "id = 1234") == 20
    spark.sql(f"ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '32')")
    before = rows_spark(spark, p)

    m = analyze(spark, p)

    assert m.files_planned == 20 and m.files_updated == 20 and m.reasons == {"incomplete": 20} and m.ok
    last = _commit(p, log_versions(p)[-1])
    info = next(a["commitInfo"] for a in last if "commitInfo" in a)
    assert info["operation"] == "COMPUTE STATS" and info["operationParameters"] == {"predicate": '["true"]'}
    new = [a["add"] for a in last if "add" in a]
    assert len(new) == 20 and not any(a["dataChange"] for a in new) and not any("remove" in a for a in last)
    for a in new:  # every field but stats kept
        old = adds[a["path"]]
        assert {k: v for k, v in a.items() if k not in ("stats", "dataChange")} == {
            k: v for k, v in old.items() if k not in ("stats", "dataChange")
        }
    assert _files_read(spark, p, "id = 1234") <= 2
    assert_same_rows(spark, p, before)
    # nothing left to do: a second run plans nothing and writes nothing
    v = log_versions(p)[-1]
    assert analyze(spark, p).files_planned == 0 and log_versions(p)[-1] == v


TYPES_SQL = """
SELECT
  id,
  CASE WHEN id % 5 = 0 THEN NULL ELSE concat(repeat('x', 40), cast(id AS string)) END AS long_s,
  CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', cast(id % 9 AS string)) END AS short_s,
  CASE WHEN id % 11 = 0 THEN double('NaN') WHEN id % 3 = 0 THEN NULL ELSE id / 7.0 + 0.5 END AS d,
  float(id) / 3 + 0.25 AS f,
  date_add(DATE'2020-02-28', cast(id AS int)) AS dt,
  timestamp_micros(1700000000123456 + id * 3600000001) AS ts,
  CASE WHEN id % 4 = 0 THEN NULL ELSE cast(id * 1.25 AS decimal(12, 3)) END AS dec,
  cast(id AS decimal(30, 2)) AS big_dec,
  named_struct('a', id * 3, 'b', CASE WHEN id % 2 = 0 THEN NULL ELSE concat(repeat('é', 35), 'z') END,
               'c', named_struct('x', cast(id AS short))) AS st,
  id % 2 = 0 AS flag,
  unhex('ABCD') AS bin,
  array(id, id + 1) AS arr
FROM range(0, 120)
"""


def test_all_types_equal_delta_spark(spark, tmp_path):
    """(b) analyze --all on a table delta-spark wrote with its own stats: every key of every file equal."""
    p = str(tmp_path / "types")
    spark.sql(TYPES_SQL).repartition(3, "id").write.format("delta").save(p)
    spark_stats = {k: json.loads(a["stats"]) for k, a in _live_adds(spark, p).items()}
    assert all("minValues" in s for s in spark_stats.values())
    before, before_rs = rows_spark(spark, p), rows_deltars(p)

    m = analyze(spark, p, all=True)

    assert m.files_updated == 3 and m.reasons == {"all": 3}
    last = _commit(p, log_versions(p)[-1])
    ours = {a["add"]["path"]: json.loads(a["add"]["stats"]) for a in last if "add" in a}
    assert set(ours) == set(spark_stats)
    for path, theirs in spark_stats.items():
        for key in ("numRecords", "minValues", "maxValues", "nullCount"):
            assert ours[path].get(key) == theirs.get(key), (path, key, ours[path].get(key), theirs.get(key))
        assert ours[path] == theirs
    # the two engines read some types differently (float widening), each the same as before analyze
    assert rows_spark(spark, p) == before and rows_deltars(p) == before_rs


def _no_stats_table(spark, path: str, props: str, *, files: int = 4, rows: int = 400, partitioned: bool = False):
    """A table written by delta-spark with ``dataSkippingNumIndexedCols = 0`` (no column stats) in ``files`` files."""
    part = "PARTITIONED BY (part)" if partitioned else ""
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id LONG, s STRING, part INT) USING delta {part} "
        f"TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '0'{', ' + props if props else ''})"
    )
    spark.range(0, rows).selectExpr(
        "id", "concat('x', cast(id AS string)) AS s", "cast(id % 4 AS int) AS part"
    ).repartitionByRange(files, "id").write.format("delta").mode("append").save(path)
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '32')")


def _last_adds(path: str) -> list[dict]:
    return [a["add"] for a in _commit(path, log_versions(path)[-1]) if "add" in a]


def test_deletion_vectors_and_row_tracking(spark, tmp_path):
    """(c) A file with a deletion vector gets its physical stats as wide bounds (tightBounds false), the
    others tight; DVs, baseRowId and defaultRowCommitVersion are kept, and row ids do not change."""
    p = str(tmp_path / "dv")
    _no_stats_table(spark, p, "'delta.enableDeletionVectors' = 'true', 'delta.enableRowTracking' = 'true'")
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id < 50")
    before_adds = _live_adds(spark, p)
    assert sum(1 for a in before_adds.values() if a.get("deletionVector")) == 1
    ids = sorted(tuple(r) for r in spark.read.format("delta").load(p).selectExpr("id", "_metadata.row_id").collect())
    before = rows_spark(spark, p)

    m = analyze(spark, p)

    assert m.files_updated == 4
    for a in _last_adds(p):
        old, st = before_adds[a["path"]], json.loads(a["stats"])
        assert a.get("deletionVector") == old.get("deletionVector")
        assert a["baseRowId"] == old["baseRowId"] and a["defaultRowCommitVersion"] == old["defaultRowCommitVersion"]
        if old.get("deletionVector"):
            assert st["tightBounds"] is False and st["numRecords"] == 100 and st["minValues"]["id"] == 0
        else:
            assert st["tightBounds"] is True and st["numRecords"] == 100
    assert_same_rows(spark, p, before)
    after_ids = sorted(
        tuple(r) for r in spark.read.format("delta").load(p).selectExpr("id", "_metadata.row_id").collect()
    )
    assert after_ids == ids
    assert _files_read(spark, p, "id = 250") == 1
    assert spark.read.format("delta").load(p).where("id < 50").count() == 0


def test_deletion_vector_stats_equal_delta_spark(spark, tmp_path):
    """(c) delta-spark's recompute refuses tables with deletion vectors; the stats it computes itself for
    a file with a DV and no stats (a DELETE's StatsCollectionUtils.computeStats, setBoundsToWide) are the
    physical file's footer stats with tightBounds false. analyze --all writes exactly those for such a
    file, and tight bounds for the others."""
    p = str(tmp_path / "dvspark")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id LONG, s STRING, d DOUBLE, st STRUCT<a: INT>) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        spark.range(0, 300).selectExpr(
            "id",
            "CASE WHEN id % 5 = 0 THEN NULL ELSE concat(repeat('y', 40), cast(id AS string)) END AS s",
            "CASE WHEN id % 7 = 0 THEN double('NaN') ELSE id / 3.0 END AS d",
            "named_struct('a', cast(id AS int)) AS st",
        ).repartitionByRange(3, "id").write.format("delta").mode("append").save(p)
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    assert all(not a.get("stats") for a in _live_adds(spark, p).values())
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id IN (0, 1, 2, 3)")  # delta-spark fetches the file's stats
    theirs = {k: json.loads(a["stats"]) for k, a in _live_adds(spark, p).items() if a.get("deletionVector")}
    assert len(theirs) == 1 and next(iter(theirs.values()))["tightBounds"] is False
    before, before_rs = rows_spark(spark, p), rows_deltars(p)

    m = analyze(spark, p, all=True)

    assert m.files_updated == 3 and m.ok
    ours = {a["path"]: (a, json.loads(a["stats"])) for a in _last_adds(p)}
    for path, st in theirs.items():  # delta-spark's footer collector gives no bound for d here (NaN in it);
        mine = ours[path][1]  # ours come from the data as its write path does: the same values, and d
        assert {k: v for k, v in mine.items() if k not in ("minValues", "maxValues")} == {
            k: v for k, v in st.items() if k not in ("minValues", "maxValues")
        }
        assert st["numRecords"] == 100 and st["nullCount"]["s"] == 20
        for key in ("minValues", "maxValues"):
            assert {k: v for k, v in mine[key].items() if k in st[key]} == st[key]
            assert set(mine[key]) - set(st[key]) == {"d"}
        assert mine["maxValues"]["d"] == "NaN" and mine["minValues"]["d"] == 0.333333  # id 0 is NaN
    for add, st in ours.values():
        if not add.get("deletionVector"):
            assert st["tightBounds"] is True and st["numRecords"] == 100 and st["minValues"]["id"] % 100 == 0
    assert rows_spark(spark, p) == before and rows_deltars(p) == before_rs  # each engine as before


def test_column_mapping_physical_names(spark, tmp_path):
    """(c) Under column mapping the stats are keyed by physical names, also after a rename."""
    p = str(tmp_path / "cm")
    _no_stats_table(spark, p, "'delta.columnMapping.mode' = 'name'")
    spark.sql(f"ALTER TABLE delta.`{p}` RENAME COLUMN s TO renamed")
    schema = json.loads(
        next(a["metaData"] for v in reversed(log_versions(p)) for a in _commit(p, v) if "metaData" in a)["schemaString"]
    )
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in schema["fields"]}
    before, before_rs = rows_spark(spark, p), rows_deltars(p)

    m = analyze(spark, p)

    assert m.files_updated == 4
    for a in _last_adds(p):
        st = json.loads(a["stats"])
        assert set(st["minValues"]) == {physical["id"], physical["renamed"], physical["part"]}
    # each engine reads what it read before (deltalake 1.6 and delta-spark differ on this renamed, mapped table)
    assert rows_spark(spark, p) == before and rows_deltars(p) == before_rs
    assert _files_read(spark, p, "id = 250") == 1
    assert _files_read(spark, p, "renamed = 'x5'") == 1


def test_where_and_concurrent_delete(spark, tmp_path, monkeypatch):
    """(c) --where recomputes one partition (recorded as the commit's predicate); a concurrent DELETE
    that removed some planned files wins: their new stats are dropped, the rest commit."""
    import dbt_delta_optimize.ops.analyze as ops_analyze

    p = str(tmp_path / "part")
    _no_stats_table(spark, p, "", partitioned=True)
    m = analyze(spark, p, where="part = 2")
    assert (
        m.files_planned
        == m.files_updated
        == len([a for a in _live_adds(spark, p).values() if a["partitionValues"]["part"] == "2"])
    )
    info = next(a["commitInfo"] for a in _commit(p, log_versions(p)[-1]) if "commitInfo" in a)
    assert info["operation"] == "COMPUTE STATS"
    predicate = json.loads(info["operationParameters"]["predicate"])
    assert len(predicate) == 1 and "part" in predicate[0] and "2" in predicate[0]
    for a in _live_adds(spark, p).values():
        assert ("minValues" in json.loads(a["stats"])) == (a["partitionValues"]["part"] == "2")

    original = ops_analyze._compute

    def compute_then_delete(*args, **kwargs):
        out = original(*args, **kwargs)
        spark.sql(f"DELETE FROM delta.`{p}` WHERE part = 1")  # wins the race: removes part=1's files
        return out

    monkeypatch.setattr(ops_analyze, "_compute", compute_then_delete)
    part1 = len([a for a in _live_adds(spark, p).values() if a["partitionValues"]["part"] == "1"])
    expected = [r for r in rows_spark(spark, p) if r[1] != 1]  # columns sorted: id, part, s

    m = analyze(spark, p)

    assert m.files_dropped == part1 > 0 and m.files_updated == m.files_planned - part1
    live = _live_adds(spark, p).values()
    assert all("minValues" in json.loads(a["stats"]) for a in live)
    assert not any(a["partitionValues"]["part"] == "1" for a in live)
    assert_same_rows(spark, p, expected)


def test_stats_columns_changed_after_write(spark, tmp_path):
    """(c) A column added to dataSkippingStatsColumns after the write: those files are incomplete, and
    analyze gives them the new column's stats (checked against delta-spark's own aggregation)."""
    from dbt_delta_optimize.errors import InvalidArgumentError

    p = str(tmp_path / "sc")
    spark.range(0, 300).selectExpr("id", "concat('v', cast(id * 7 % 100 AS string)) AS s").repartitionByRange(
        3, "id"
    ).write.format("delta").option("delta.dataSkippingStatsColumns", "id").save(p)
    assert all("s" not in json.loads(a["stats"])["minValues"] for a in _live_adds(spark, p).values())
    assert analyze(spark, p, dry_run=True).files_planned == 0
    spark.sql(f"ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('delta.dataSkippingStatsColumns' = 'id,s')")
    with pytest.raises(InvalidArgumentError, match="dataSkippingStatsColumns"):
        analyze(spark, p, columns=["nope"])
    plan = analyze(spark, p, columns="s", dry_run=True)
    assert plan.files_planned == 3 and plan.reasons == {"incomplete": 3} and plan.files_updated == 0

    m = analyze(spark, p)

    assert m.files_updated == 3
    expected = {
        r["f"]: (r["lo"], r["hi"])
        for r in spark.read.format("delta")
        .load(p)
        .groupBy("_metadata.file_name")
        .agg({"s": "min"})
        .withColumnRenamed("min(s)", "lo")
        .join(
            spark.read.format("delta")
            .load(p)
            .groupBy("_metadata.file_name")
            .agg({"s": "max"})
            .withColumnRenamed("max(s)", "hi"),
            "file_name",
        )
        .withColumnRenamed("file_name", "f")
        .collect()
    }
    for a in _last_adds(p):
        st = json.loads(a["stats"])
        assert (st["minValues"]["s"], st["maxValues"]["s"]) == expected[os.path.basename(a["path"])]
        assert st["nullCount"] == {"id": 0, "s": 0}


def test_session_string_prefix_length(spark, tmp_path):
    """(c) spark.databricks.io.skipping.stringPrefixLength (delta-spark's session default when the table sets
    no prefix) is honoured by analyze (equal to delta-spark's stats written under it) and by our writer."""
    from dbt_delta_optimize.api import optimize

    p = str(tmp_path / "prefix")
    spark.conf.set("spark.databricks.io.skipping.stringPrefixLength", "5")
    try:
        spark.range(0, 60).selectExpr("id", "concat('abcdefgh', cast(100 + id AS string)) AS s").repartition(
            3
        ).write.format("delta").save(p)
        theirs = {k: json.loads(a["stats"]) for k, a in _live_adds(spark, p).items()}
        assert {s["minValues"]["s"] for s in theirs.values()} == {"abcde"}
        m = analyze(spark, p, all=True)
        assert m.files_updated == 3
        assert {a["path"]: json.loads(a["stats"]) for a in _last_adds(p)} == theirs
        optimize(spark, p)
        (new,) = _live_adds(spark, p).values()
        st = json.loads(new["stats"])
        assert st["minValues"]["s"] == "abcde" and st["maxValues"]["s"] == "abcde\x7f" and st["numRecords"] == 60
    finally:
        spark.conf.unset("spark.databricks.io.skipping.stringPrefixLength")
