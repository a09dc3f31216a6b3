"""The executor validates its planned actions before committing and the landed commit after."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.engine import bin_rewriter as br
from dbt_delta_optimize.errors import ValidationError
from tests.helpers import assert_same_rows, data_files, log_snapshot, rows_spark


def _table(spark, path):
    for i in range(3):
        spark.range(i * 30, (i + 1) * 30).selectExpr("id", "id % 2 AS p").repartition(2).write.format("delta").mode(
            "append"
        ).partitionBy("p").save(path)


def test_bad_planned_add_is_caught_before_the_commit_and_nothing_is_written(spark, tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    _table(spark, path)
    before_rows, before_log, before_files = rows_spark(spark, path), log_snapshot(path), data_files(path)
    real = br.BinRewriter._result
    planned = []

    def wrong_size(self, b, adds, *a, **k):  # every rewrite path (Arrow task or Spark) ends here
        adds = tuple(dataclasses.replace(add, size=add.size + 1) for add in adds)  # a size the file does not have
        planned.extend(adds)
        return real(self, b, adds, *a, **k)

    monkeypatch.setattr(br.BinRewriter, "_result", wrong_size)
    with pytest.raises(ValidationError, match="add_size_mismatch"):
        optimize(spark, path)
    assert planned, "no bin was rewritten: the check had nothing to catch"
    assert log_snapshot(path) == before_log
    assert data_files(path) == before_files
    assert_same_rows(spark, path, before_rows)


def test_validation_refuses_rows_that_do_not_add_up_and_can_be_turned_off(spark, tmp_path):
    """Stats in the log that claim more rows than a file holds: validated (the default), the batch is refused
    naming the file and nothing is written; with validate_commits=False the commit lands, and the validator,
    run on that version, finds exactly what the check would have refused."""
    import json
    import os

    from deltalake import write_deltalake

    from dbt_delta_optimize.errors import CorruptLogError
    from dbt_delta_optimize.inspect.validate import validate_commit

    path = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(path, pa.table({"id": list(range(i * 10, i * 10 + 10)), "p": [i % 2] * 10}), mode="append")
    log = os.path.join(path, "_delta_log", f"{1:020d}.json")
    with open(log) as fh:
        actions = [json.loads(line) for line in fh]
    lied = next(a["add"] for a in actions if "add" in a)
    lied["stats"] = json.dumps({**json.loads(lied["stats"]), "numRecords": 99})
    with open(log, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    before_rows, before_log, before_files = rows_spark(spark, path), log_snapshot(path), data_files(path)
    with pytest.raises(CorruptLogError, match="claim 99 rows") as info:
        optimize(spark, path)
    assert lied["path"] in str(info.value)
    assert log_snapshot(path) == before_log and data_files(path) == before_files
    m = optimize(spark, path, validate_commits=False)
    (version,) = m.committed_versions
    report = validate_commit(path, version)
    assert not report.ok and "row_count_mismatch" in report.codes, report.describe()
    assert_same_rows(spark, path, before_rows)  # the stats lied, the data did not: every row is still there
