"""The executor validates its planned actions before committing and the landed commit after."""

from __future__ import annotations

import dataclasses

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
    real = br.BinRewriter._add_file

    def wrong_size(self, *a, **k):
        add = real(self, *a, **k)
        return dataclasses.replace(add, size=add.size + 1)  # a size the file does not have

    monkeypatch.setattr(br.BinRewriter, "_add_file", wrong_size)
    with pytest.raises(ValidationError, match="add_size_mismatch"):
        optimize(spark, path)
    assert log_snapshot(path) == before_log
    assert data_files(path) == before_files
    assert_same_rows(spark, path, before_rows)


def test_validation_can_be_turned_off_and_a_clean_run_validates(spark, tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    _table(spark, path)
    calls = []
    import dbt_delta_optimize.inspect.validate as v

    real_commit = v.validate_commit
    monkeypatch.setattr(v, "validate_commit", lambda *a, **k: calls.append(a) or real_commit(*a, **k))
    m = optimize(spark, path)
    assert calls and calls[0][1] == m.committed_versions[0]
    calls.clear()
    _table(spark, path)
    optimize(spark, path, validate_commits=False)
    assert calls == []
