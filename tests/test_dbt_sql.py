"""The SQL-connection path's pure parts: statements, quoting, what the server answers, which engine runs.

The end-to-end proof is tests/test_dbt_thrift.py (real dbt, a real Spark Thrift Server); these pin the
quoting rules and the parsing of the server's answers in milliseconds.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import sqlglot

from dbt_delta_optimize.dbt import sql_statements as sql
from dbt_delta_optimize.dbt.connection import SparkTarget, adapter_method
from dbt_delta_optimize.dbt.settings import ModelSettings
from dbt_delta_optimize.dbt.sql_engine import TableEntry, ignored_settings, server_message
from dbt_delta_optimize.errors import InvalidArgumentError


def _unescape(literal: str) -> str:
    """Spark's reading of a string literal (unescapeSQLString) for the escapes we emit."""
    assert literal[0] == literal[-1] == "'"
    out, i, body = [], 0, literal[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt == "u":
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(nxt)
            i += 2
            continue
        assert ch != "'", f"an unescaped quote in {literal!r}"
        out.append(ch)
        i += 1
    return "".join(out)


@pytest.mark.parametrize(
    "value",
    ["plain", "it's", "back\\slash", "${env:HOME}", "x' OR '1'='1", "a\nb\tc", "\\'", "''", "ünï`code", "--", ""],
)
def test_string_literals_hold_exactly_the_value_and_no_substitution(value):
    literal = sql.string_literal(value)
    assert _unescape(literal) == value
    assert "${" not in literal and "\n" not in literal


def test_random_strings_round_trip_through_the_literal():
    rng = random.Random(7)
    alphabet = "ab'\\\"$`{}%_;- \n\tü"
    for _ in range(500):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert _unescape(sql.string_literal(value)) == value


def test_identifiers_are_backquoted_and_names_split_on_dots():
    assert sql.quote_identifier("a`b") == "`a``b`"
    assert sql.table_name("analytics.events") == "`analytics`.`events`"
    assert sql.table_name("cat.`my.schema`.t") == "`cat`.`my.schema`.`t`"
    with pytest.raises(InvalidArgumentError, match="not a table name"):
        sql.table_name("a.b.c.d")
    with pytest.raises(InvalidArgumentError, match=r"\$\{"):
        sql.table_name("s.${env:HOME}")
    assert sql.optimize("s.t", zorder_by=["user_id", "`b.c`.d"]) == "OPTIMIZE `s`.`t` ZORDER BY (`user_id`, `b.c`.`d`)"


def test_partition_predicates_are_typed_null_safe_and_parse_as_one_expression():
    pred = sql.partitions_predicate(
        [{"d": "2024-01-01", "k": "it's"}, {"d": None, "k": "x"}], ["d", "k"], {"d": "date", "k": "string"}
    )
    assert "`d` <=> CAST(NULL AS DATE)" in pred and "CAST('it\\'s' AS STRING)" in pred
    tree = sqlglot.parse_one(pred, read="spark")
    assert isinstance(tree, sqlglot.exp.Or) and len(list(tree.find_all(sqlglot.exp.NullSafeEQ))) == 4
    with pytest.raises(InvalidArgumentError, match="cannot be used"):
        sql.partitions_predicate([{"d": "1"}], ["d"], {"d": "int); DROP TABLE x; --"})
    assert sql.sql_type("decimal(10, 2)") == "DECIMAL(10,2)"


def test_statements_and_confs():
    assert sql.purge("s.t", where=["(`d` <=> CAST('1' AS INT))"]) == (
        "REORG TABLE `s`.`t` WHERE ((`d` <=> CAST('1' AS INT))) APPLY (PURGE)"
    )
    assert sql.set_conf("spark.databricks.delta.optimize.maxFileSize", 1024) == (
        "SET spark.databricks.delta.optimize.maxFileSize=1024"
    )
    with pytest.raises(InvalidArgumentError):
        sql.set_conf("spark.x; DROP", 1)
    with pytest.raises(InvalidArgumentError):
        sql.set_conf("spark.x", "1; DROP")  # type: ignore[arg-type]
    assert sql.restore_conf("spark.x", "1073741824") == "SET spark.x=1073741824"
    assert sql.restore_conf("spark.x", None) == "RESET spark.x"
    assert sql.restore_conf("spark.x", "1g; DROP TABLE t") == "RESET spark.x"


def test_describe_table_extended_rows_give_format_location_and_columns():
    rows = [
        ("id", "bigint"),
        ("event_date", "date"),
        ("# Partition Information", ""),
        ("# col_name", "data_type"),
        ("event_date", "date"),
        ("", ""),
        ("# Detailed Table Information", ""),
        ("Type", "MANAGED"),
        ("Location", "file:/wh/s.db/t"),
        ("Provider", "delta"),
    ]
    entry = TableEntry.from_rows([{"col_name": a, "data_type": b, "comment": None} for a, b in rows])
    assert entry == TableEntry("delta", "file:/wh/s.db/t", {"id": "bigint", "event_date": "date"})
    view = TableEntry.from_rows(
        [{"col_name": "# Detailed Table Information"}, {"col_name": "Type", "data_type": "VIEW"}]
    )
    assert view.format == "view"


def test_a_refusal_is_the_servers_message_without_its_stack():
    raw = (
        "Runtime Error\n  Database Error\n    org.apache.hive.service.cli.HiveSQLException: Error running query: "
        "[DELTA_FAILED_RECOGNIZE_PREDICATE] org.apache.spark.sql.delta.DeltaAnalysisException: "
        "[DELTA_FAILED_RECOGNIZE_PREDICATE] Cannot recognize the predicate '(())'\n"
        "    \tat org.apache.spark.sql.hive.thriftserver.HiveThriftServerErrors$.runningQueryError(X.scala:43)\n"
    )
    assert server_message(Exception(raw)) == "[DELTA_FAILED_RECOGNIZE_PREDICATE] Cannot recognize the predicate '(())'"


def test_settings_sql_cannot_carry_are_named():
    from dbt_delta_optimize.options import OptimizeOptions

    assert (
        ignored_settings(ModelSettings(mode="optimize", zorder_by=("a",), options=OptimizeOptions(min_file_size=5)))
        == []
    )
    hilbert = ModelSettings(curve="hilbert", options=OptimizeOptions(max_duration=60.0))
    assert ignored_settings(hilbert) == ["curve=hilbert", "max_duration=60.0"]


def _adapter(method=None, kind="spark"):
    credentials = SimpleNamespace(type=kind) if method is None else SimpleNamespace(method=method, type=kind)
    return SimpleNamespace(config=SimpleNamespace(credentials=credentials), execute=lambda *a, **k: None)


def test_the_method_comes_from_the_adapters_credentials(monkeypatch):
    from dbt.adapters.spark.connections import SparkConnectionMethod

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert adapter_method(_adapter(SparkConnectionMethod.THRIFT)) == "thrift"  # a StrEnum, as dbt-spark has it
    assert adapter_method(_adapter(None, kind="databricks")) == "databricks"
    assert adapter_method(None) is None
    thrift = SparkTarget.parse({"adapter": _adapter(SparkConnectionMethod.THRIFT), "remote": None})
    assert (thrift.method, thrift.engine, thrift.usable) == ("thrift", "sql", True)
    session = SparkTarget.parse({"adapter": _adapter(SparkConnectionMethod.SESSION)})
    assert session.engine == "spark"
    connect = SparkTarget.parse({"adapter": _adapter(SparkConnectionMethod.HTTP), "remote": "sc://h:15002"})
    assert connect.engine == "connect"  # Connect, when configured, takes precedence over the SQL connection
    assert SparkTarget.parse({"method": "odbc"}).engine == "none"  # no adapter handed over: nothing to run on
    assert SparkTarget.parse({"adapter": _adapter("odbc"), "read_log": False}).sql_connection().read_log is False


def test_the_where_clause_names_the_partitions_our_plan_rewrites(tmp_path):
    """Over SQL the server compacts what our planner chose: its partitions, or the whole table (no WHERE)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from dbt_delta_optimize.api import plan_optimize
    from dbt_delta_optimize.dbt.sql_engine import plan_partitions, where_chunks
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    path = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(path, pa.table({"id": [i, i + 1], "p": ["a", "b"]}), mode="append", partition_by=["p"])
    write_deltalake(path, pa.table({"id": [9], "p": ["c"]}), mode="append", partition_by=["p"])  # one file: left alone
    snap = load_snapshot(path)
    chosen = plan_partitions(plan_optimize(None, path), snap)
    assert sorted(c["p"] for c in chosen) == ["a", "b"]
    (where,) = where_chunks(chosen, snap.partition_types, snap.partition_columns)
    assert sql.optimize("s.t", where=where) == (
        "OPTIMIZE `s`.`t` WHERE ((`p` <=> CAST('a' AS STRING)) OR (`p` <=> CAST('b' AS STRING)))"
    )
    assert plan_partitions(plan_optimize(None, path, where="p = 'a'"), snap) == [{"p": "a"}]
    write_deltalake(path, pa.table({"id": [10], "p": ["c"]}), mode="append", partition_by=["p"])
    snap = load_snapshot(path)
    assert plan_partitions(plan_optimize(None, path), snap) is None  # every partition: no WHERE at all
    assert where_chunks(None, snap.partition_types, snap.partition_columns) == [()]


def test_without_the_log_the_runs_commits_come_from_describe_history():
    """delta_optimize_read_log: false: DESCRIBE HISTORY's rows (timestamp, engineInfo) find the run's commits as the
    log does; another engine's commit among them is not counted."""
    import datetime as dt

    from dbt_delta_optimize.dbt.sql_engine import TableDetail
    from dbt_delta_optimize.dbt.sql_hooks import _estimated_decision

    spark, rs = "Apache-Spark/4.0.0 Delta-Lake/4.0.0", "delta-rs.1.6"
    at = [dt.datetime(2026, 11, 1, 12, 0, s) for s in range(6)]
    rows = [
        {"version": v, "timestamp": at[v], "operation": op, "engineInfo": e}
        for v, op, e in [(0, "CREATE TABLE AS SELECT", spark), (1, "WRITE", spark), (2, "WRITE", rs),
                         (3, "WRITE", spark), (4, "WRITE", spark), (5, "WRITE", spark)]
    ]  # fmt: skip
    asked: list[tuple[int | None, int]] = []

    def history(since: int | None, latest: int, *, back: int = 1) -> list[dict[str, object]]:
        asked.append((since, back))
        start = latest - back + 1 if since is None else since + 1
        return [r for r in rows[::-1] if int(r["version"]) >= start]  # type: ignore[call-overload]

    table = SimpleNamespace(version=lambda: 5, history=history, detail=lambda: TableDetail(None, (), (), 12, 1200))
    s = ModelSettings(min_num_files=2)
    out, _ = _estimated_decision(table, None, s, at[2])  # no pre-hook: the run started with version 2
    assert out["triggeringVersions"] == [3, 4, 5] and out["runCommits"]["basis"] == "started", out
    assert out["runCommits"]["notCounted"][0]["version"] == 2 and out["status"] == "runOnModifiedPartitions"
    out, _ = _estimated_decision(table, -1, s, None)  # the pre-hook found no table: every commit but delta-rs's
    assert out["triggeringVersions"] == [0, 1, 3, 4, 5] and out["runCommits"]["count"] == 5, out
    assert asked == [(None, 200), (-1, 1)]
