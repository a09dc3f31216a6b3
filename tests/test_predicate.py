"""Partition predicates: a safe language evaluated in Python, with Spark SQL's semantics (checked against Spark)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from dbt_delta_optimize.delta.actions import AddFile
from dbt_delta_optimize.delta.file_table import FileTable
from dbt_delta_optimize.errors import InvalidArgumentError, InvalidPredicateError
from dbt_delta_optimize.plan.predicate import parse_predicates, select_partitions

TYPES = {
    "s": "string",
    "i": "integer",
    "l": "long",
    "d": "date",
    "ts": "timestamp",
    "dec": "decimal(10,2)",
    "b": "boolean",
    "x": "double",
}
COLUMNS = tuple(TYPES)
ROWS = [
    ("a", "1", "10", "2024-01-01", "2024-01-01 00:00:00", "1.50", "true", "0.5"),
    ("a b", "2", "20", "2024-02-29", "2024-01-01T00:00:00.000000Z", "2.00", "false", "-1.0"),
    ("a'b", "-3", "9000000000", "2023-12-31", "2024-06-15 12:30:45.123456", "-0.01", "true", "NaN"),
    ("100%", "0", "0", "2024-12-01", "2023-03-01 23:59:59", "99999999.99", "false", "1e3"),
    ("ünï", "7", "-5", "2024-01-15", "2024-01-01 01:00:00", "0.00", None, "3.25"),
    ("_x", None, None, None, None, None, None, None),
    (None, "5", "5", "2024-01-02", "2024-01-02 00:00:00", "5.55", "true", "2"),
    ("10", "10", "10", "2024-10-10", "2024-10-10 10:10:10", "10.10", "true", "10"),
    ("", "11", "11", "2024-11-11", "2024-11-11 11:11:11", "11.11", "false", "11"),
]

PREDICATES = [
    "i >= 2",
    "i > 1 AND l < 100",
    "i = 1 OR s = 'a b'",
    "NOT i = 1",
    "i != 2",
    "i <> 2",
    "s = 'a'",
    "s = 'a''b'",
    "s = 'a\\'b'",
    "s IS NULL",
    "s IS NOT NULL",
    "i IS NULL OR i < 0",
    "i IN (1, 2, 7)",
    "i NOT IN (1, 2)",
    "i IN (1, NULL)",
    "i NOT IN (1, NULL)",
    "i BETWEEN 1 AND 7",
    "i NOT BETWEEN 1 AND 7",
    "s LIKE 'a%'",
    "s LIKE '%\\%'",
    "s LIKE '\\_%'",
    "s NOT LIKE 'a%'",
    "s ILIKE 'A%'",
    "d >= '2024-01-15'",
    "d = DATE '2024-02-29'",
    "d < '2024'",
    "ts >= '2024-01-01'",
    "ts = TIMESTAMP '2024-01-01 00:00:00'",
    "ts > '2024-01-01 00:30:00'",
    "dec > 1.5",
    "dec = '2.00'",
    "dec >= 10",
    "b = true",
    "b",
    "NOT b",
    "x > 0",
    "x = 'NaN'",
    "i = '1'",
    "s = 10",
    "l > 5000000000",
    "i + l > 20",
    "i * 2 = 14",
    "i % 2 = 1",
    "i / 2 > 1",
    "-i > 0",
    "year(d) = 2023",
    "month(d) = 2 AND day(d) = 29",
    "dayofmonth(d) = 1",
    "lower(s) = 'ünï'",
    "upper(s) = 'A B'",
    "substring(s, 1, 1) = 'a'",
    "substr(s, -1) = 'b'",
    "concat(s, '-', i) = 'a-1'",
    "coalesce(i, 99) = 99",
    "trim(s) = 'a b'",
    "length(s) = 3",
    "abs(i) = 3",
    "CAST(i AS STRING) = '1'",
    "CAST(s AS INT) = 10",
    "CAST(d AS TIMESTAMP) = ts",
    "to_date(ts) = d",
    "to_date(s, 'yyyy-MM-dd') IS NULL",
    "date(ts) >= '2024-06-01'",
    "i <=> NULL",
    "(i = 1)",
    "`s` = 'a'",
    "S = 'a'",
]


@dataclass(frozen=True)
class FakeSnapshot:
    partition_columns: tuple[str, ...]
    partition_types: dict[str, str]
    files: tuple[AddFile, ...]

    @property
    def physical_partition_columns(self) -> tuple[str, ...]:
        return self.partition_columns

    @property
    def file_table(self) -> FileTable:
        return FileTable.from_files(self.files)


def snapshot() -> FakeSnapshot:
    files = tuple(AddFile(f"f{n}.parquet", dict(zip(COLUMNS, row)), 1, 1) for n, row in enumerate(ROWS))
    return FakeSnapshot(COLUMNS, TYPES, files)


def _matched(predicate: str, tz: str = "UTC") -> set[tuple]:
    sel = select_partitions(snapshot(), [predicate], time_zone=tz)
    assert sel.matched is not None
    return set(sel.matched)


def test_no_predicate_selects_everything_and_normalizes_every_key():
    sel = select_partitions(snapshot())
    assert sel.matched is None and len(sel.normalized) == len(ROWS)


def test_equal_timestamps_in_two_formats_normalize_together():
    sel = select_partitions(snapshot())
    a = next(v for k, v in sel.normalized.items() if k[0] == "a")
    b = next(v for k, v in sel.normalized.items() if k[0] == "a b")
    assert a[4] == b[4]


def test_several_predicates_are_anded():
    assert select_partitions(snapshot(), ["i >= 1", "i <= 2"]).matched == _matched("i >= 1 AND i <= 2")


def test_unpartitioned_table():
    snap = FakeSnapshot((), {}, (AddFile("f", {}, 1, 1),))
    assert select_partitions(snap, ["1 = 1"]).matched == frozenset({()})
    assert select_partitions(snap, ["1 = 2"]).matched == frozenset()


@pytest.mark.parametrize(
    "predicate,needle",
    [
        ("reflect('java.lang.Thread','sleep',120000L) IS NULL", "reflect"),
        ("java_method('java.lang.Runtime', 'getRuntime') IS NULL", "java_method"),
        ("rand() > 0.5", "RAND"),
        ("current_date() > d", "CURRENT_DATE"),
        ("i = (SELECT 1)", "subquery"),
        ("EXISTS (SELECT 1)", "subquery"),
        ("value > 1", "non-partition column 'value'"),
        ("t.i = 1", "non-partition column"),
        ("i IN (SELECT 1)", "subquery"),
        ("transform(array(1), v -> v) IS NULL", "TRANSFORM"),
        ("i = 1 AND", "Cannot parse"),
    ],
)
def test_anything_outside_the_language_is_refused_by_name(predicate, needle):
    with pytest.raises(InvalidPredicateError, match=needle):
        select_partitions(snapshot(), [predicate])


def test_bad_argument_types_are_typed_errors():
    with pytest.raises(InvalidArgumentError):
        select_partitions(snapshot(), [123])  # type: ignore[list-item]
    with pytest.raises(InvalidPredicateError, match="Empty"):
        parse_predicates(["  "], COLUMNS)


def test_planning_imports_no_spark():
    code = (
        "import sys; from tests.test_predicate import snapshot, PREDICATES;"
        "from dbt_delta_optimize.plan.predicate import select_partitions;"
        "[select_partitions(snapshot(), [p]) for p in PREDICATES];"
        "assert 'pyspark' not in sys.modules and 'py4j' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))


# ----------------------------------------------------------------------------- Spark is the oracle
def typed_frame(spark):
    """The raw strings cast by Spark (built after the session time zone is set: casts bind it at analysis)."""
    from pyspark.sql.types import StringType, StructField, StructType

    raw = [f"r_{c}" for c in COLUMNS]
    folded = [[v or None for v in r] for r in ROWS]  # "" in the log is null, as delta-spark reads it
    df = spark.createDataFrame(folded, StructType([StructField(n, StringType()) for n in raw]))
    return df.selectExpr(
        *[f"`{r}`" for r in raw], *[f"CAST(`{r}` AS {TYPES[c]}) AS `{c}`" for r, c in zip(raw, COLUMNS)]
    )


@pytest.mark.spark
@pytest.mark.parametrize("tz", ["UTC", "America/Los_Angeles"])
def test_same_partitions_as_spark(spark, tz):
    spark.conf.set("spark.sql.session.timeZone", tz)
    spark.conf.set("spark.sql.ansi.enabled", "false")  # dbt-spark forces it off; our semantics are non-ANSI
    raw = [f"r_{c}" for c in COLUMNS]
    mismatches = []
    try:
        frame = typed_frame(spark)
        for p in PREDICATES:
            theirs = {tuple(r[n] for n in raw) for r in frame.where(p).select(*raw).collect()}
            ours = _matched(p, tz)
            if ours != theirs:
                mismatches.append(f"{p}: ours {sorted(ours, key=repr)} spark {sorted(theirs, key=repr)}")
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.unset("spark.sql.ansi.enabled")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.spark
def test_recorded_predicate_strings_are_catalysts(spark):
    parser = spark._jsparkSession.sessionState().sqlParser()
    for p in [
        "i >= 1",
        "s = 'a'",
        "i = 1 AND l = 2",
        "i = 1 OR NOT i = 2",
        "d >= '2024-01-01'",
        "i IN (1,2)",
        "i <=> 1",
    ]:
        (ours,) = select_partitions(snapshot(), [p]).predicate_strings
        assert ours == parser.parseExpression(p).toString(), p
