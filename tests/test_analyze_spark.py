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
        for action in _commit(path, v):
            if "add" in action:
                raw[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                raw.pop(action["remove"]["path"], None)
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
