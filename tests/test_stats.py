"""AddFile stats from a Parquet footer must equal what delta-spark 4.4 writes for the same rows.

The oracle is delta-spark itself: each Spark test writes a tiny Delta table (one file per
partition) and compares ``stats_from_file`` on that very file with the ``stats`` string in the log,
byte for byte. Where a difference is unavoidable it is asserted explicitly, never hidden.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import json
import math
import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from dbt_delta_optimize.delta.actions import Protocol
from dbt_delta_optimize.delta.snapshot import Snapshot, load_snapshot
from dbt_delta_optimize.inspect.stats import (
    StatsField,
    format_date,
    format_timestamp,
    format_timestamp_ntz,
    java_float_string,
    parse_stats_columns,
    stats_columns,
    stats_from_file,
    stats_from_parquet,
    truncate_max_string,
    truncate_min_string,
)

UTC = dt.timezone.utc
EMOJI = "\U0001f600"
MAX_CP = "\U0010ffff"


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _write_delta(
    spark, path: str, df, *, props: dict[str, str] | None = None, partition_by: list[str] | None = None
) -> Snapshot:
    """Create the table (DDL from df, nullable columns, table properties) and append df as one file per partition."""
    cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
    parts = f" PARTITIONED BY ({', '.join(f'`{p}`' for p in partition_by)})" if partition_by else ""
    tprops = f" TBLPROPERTIES ({', '.join(f'{k!r} = {v!r}' for k, v in props.items())})" if props else ""
    spark.sql(f"CREATE TABLE delta.`{path}` ({cols}) USING delta{parts}{tprops}")
    df.coalesce(1).write.format("delta").mode("append").save(path)
    return load_snapshot(path)


def _ours(snap: Snapshot, add, *, footer_only: bool = False, **kw: Any) -> str:
    path = snap.file_path(add.path)
    if footer_only:
        import pyarrow.parquet as pq

        return stats_from_parquet(
            pq.read_metadata(path),
            snap.schema,
            snap.partition_columns,
            snap.configuration,
            protocol=snap.protocol,
            **kw,
        )
    return stats_from_file(path, snap.schema, snap.partition_columns, snap.configuration, protocol=snap.protocol, **kw)


def _assert_matches_delta(snap: Snapshot, **kw: Any) -> None:
    assert snap.files
    for add in snap.files:
        assert add.stats
        assert _ours(snap, add, **kw) == add.stats


def _drop(stats: dict, *paths: str) -> dict:
    """A copy of parsed stats without the given dotted keys (e.g. "minValues.ts")."""
    out = json.loads(json.dumps(stats))
    for p in paths:
        *parents, last = p.split(".")
        node = out
        for k in parents:
            node = node[k]
        del node[last]
    return out


@contextlib.contextmanager
def _conf(spark, key: str, value: str) -> Iterator[None]:
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def _leaf_names(fields: tuple[StatsField, ...], prefix: str = "") -> list[str]:
    out = []
    for f in fields:
        if f.is_struct:
            out += _leaf_names(f.children or (), f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


# --------------------------------------------------------------------------------------------
# against delta-spark
# --------------------------------------------------------------------------------------------

MANY_TYPES = (
    "id int, b tinyint, s smallint, l bigint, f float, d double, dec decimal(10,2), big decimal(38,3), "
    "tiny decimal(10,8), txt string, uni string, emo string, cut string, flag boolean, bin binary, day date, "
    "ts timestamp, ntz timestamp_ntz, st struct<x:int,y:struct<z:string,w:boolean>>, arr array<int>, "
    "m map<string,int>, nothing int, MixedCase string"
)


@pytest.mark.spark
def test_many_types_match_delta(spark, tmp_path):
    """Numbers, decimals, NaN/infinities, long/unicode/escaped strings, temporal types, nested
    structs, arrays/maps with nulls, an all-null column and a mixed-case name, in one file."""
    rows = [
        (
            1,
            1,
            -2,
            3_000_000_000,
            1.5,
            math.nan,
            Decimal("1.25"),
            Decimal("12345678901234567890.123"),
            Decimal("0.00000001"),
            "abc",
            "\u00e9" * 40,
            EMOJI * 40,
            "a" * 31 + EMOJI + "zzz",
            True,
            b"ab",
            dt.date(2024, 1, 2),
            dt.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
            dt.datetime(2024, 1, 1, 0, 0, 0, 987654),
            (1, ("q", True)),
            [1, 2],
            {"k": 1},
            None,
            "Mixed",
        ),
        (
            2,
            -1,
            2,
            -3,
            -3.25,
            math.inf,
            Decimal("-1.25"),
            None,
            Decimal("-0.00000123"),
            'q"u\\o\n\t\r\b\f\x01\x1f/\u2028\x7f',
            "z",
            EMOJI * 39 + "\U0001f601",
            "a" * 32 + "\x7f" + "x",
            False,
            None,
            dt.date(1, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999900, tzinfo=UTC),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            None,
            None,
            None,
            None,
            None,
        ),
        (
            3,
            None,
            None,
            None,
            None,
            -math.inf,
            None,
            None,
            None,
            "b" * 40,
            None,
            None,
            None,
            None,
            None,
            dt.date(9999, 12, 31),
            None,
            None,
            (None, None),
            [],
            {},
            None,
            "a" * 33,
        ),
        (
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            "",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            (5, ("a", None)),
            [None],
            {"n": None},
            None,
            None,
        ),
    ]
    snap = _write_delta(spark, str(tmp_path / "t"), spark.createDataFrame(rows, MANY_TYPES))
    _assert_matches_delta(snap)

    # Spot checks of what delta-spark wrote (documents the behaviours we replicate).
    theirs = json.loads(snap.files[0].stats)
    assert theirs["minValues"]["ts"] == "1969-12-31T23:59:59.999Z"  # micros truncated to millis, UTC "Z"
    assert theirs["maxValues"]["ntz"] == "9999-12-31T23:59:59.999"
    assert theirs["maxValues"]["d"] == "NaN" and theirs["minValues"]["d"] == "-Infinity"
    assert theirs["minValues"]["emo"] == EMOJI * 32  # min: first 32 code points
    assert theirs["maxValues"]["emo"] == EMOJI * 16 + MAX_CP  # max: 32 UTF-16 units + tie-breaker
    assert theirs["maxValues"]["cut"] == "a" * 31 + EMOJI + "\x7f"  # surrogate pair kept whole
    assert "nothing" not in theirs["minValues"] and theirs["nullCount"]["nothing"] == 4
    assert "flag" not in theirs["minValues"] and "bin" not in theirs["maxValues"]  # nullCount only
    assert theirs["nullCount"]["st"] == {"x": 2, "y": {"z": 2, "w": 3}}
    assert theirs["nullCount"]["arr"] == 1 and theirs["nullCount"]["m"] == 1  # only null arrays/maps count

    # Footer only: INT96 timestamps have no Parquet statistics and null arrays/maps cannot be told
    # from null elements, so those values are left out (unknown); everything else is identical.
    footer = json.loads(_ours(snap, snap.files[0], footer_only=True))
    assert footer == _drop(theirs, "minValues.ts", "maxValues.ts", "nullCount.arr", "nullCount.m")


@pytest.mark.spark
def test_multiple_row_groups(spark, tmp_path):
    """A file written the way our executor writes (plain Spark Parquet, TIMESTAMP_MICROS) with many
    row groups: per-row-group statistics combine to delta-spark's stats for the same rows."""
    df = spark.range(0, 3000).selectExpr(
        "cast(id as int) as i",
        "case when id % 7 = 0 then null else concat('k', cast(id * 7919 % 3000 as string)) end as s",
        # zeros of both signs, +0.0 first in row order (so Spark's min is 0.0, the footer's -0.0)
        "case when id = 1700 then cast('NaN' as double) when id = 2998 then -cast(0 as double) "
        "when id % 2 = 0 then cast(0 as double) else id / 3.0 end as d",
        "timestamp_micros(id * 1000001 + 7) as ts",
        "named_struct('x', case when id % 5 = 0 then null else id end) as st",
        "case when id % 11 = 0 then null else array(id) end as arr",
    )
    snap = _write_delta(spark, str(tmp_path / "t"), df)
    _assert_matches_delta(snap)
    (add,) = snap.files

    out = str(tmp_path / "rewritten")
    with _conf(spark, "spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"):
        spark.read.parquet(snap.file_path(add.path)).coalesce(1).write.option("parquet.block.size", "4096").parquet(out)
    (path,) = glob.glob(os.path.join(out, "*.parquet"))
    import pyarrow.parquet as pq

    md = pq.read_metadata(path)
    assert md.num_row_groups > 3
    ours = stats_from_file(path, snap.schema, snap.partition_columns, snap.configuration)
    assert ours == add.stats

    # The footer alone knows everything here but the null-array count and the sign of the zero
    # minimum (Spark keeps the first zero in row order; the data path resolves it exactly).
    footer = json.loads(stats_from_parquet(md, snap.schema, snap.partition_columns, snap.configuration))
    theirs = json.loads(add.stats)
    assert footer == _drop(theirs, "nullCount.arr")  # -0.0 == 0.0 for json equality
    assert footer["minValues"]["ts"] == theirs["minValues"]["ts"] == "1970-01-01T00:00:00.000Z"


@pytest.mark.spark
def test_pyarrow_written_file(spark, tmp_path):
    """Files written by pyarrow (parquet-cpp, our Arrow rewriter's writer) have different footer
    semantics: NaN is left out of float bounds (unsafe as a max), zero bounds are normalised to
    -0.0/+0.0, decimals are fixed-length binary. Stats must still equal delta-spark's."""
    import pyarrow.parquet as pq

    rows = [
        (
            1,
            1.5,
            math.nan,
            0.0,
            Decimal("-1.25"),
            "b" * 40,
            dt.datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC),
            (1, "q"),
            [1],
        ),
        (2, math.nan, math.nan, -0.0, Decimal("3.50"), EMOJI * 20, None, None, None),
        (3, -2.0, None, 4.0, None, "a", dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), (None, None), []),
    ] * 50
    schema = "i int, f float, allnan double, z double, dec decimal(10,2), s string, ts timestamp, st struct<x:int,y:string>, arr array<int>"
    snap = _write_delta(spark, str(tmp_path / "t"), spark.createDataFrame(rows, schema))
    (add,) = snap.files
    table = pq.read_table(snap.file_path(add.path), coerce_int96_timestamp_unit="us")
    out = str(tmp_path / "arrow.parquet")
    pq.write_table(
        table, out, row_group_size=40, use_compliant_nested_type=True, coerce_timestamps="us", write_statistics=True
    )
    md = pq.read_metadata(out)
    assert md.created_by.startswith("parquet-cpp") and md.num_row_groups > 1
    assert stats_from_file(out, snap.schema, snap.partition_columns, snap.configuration) == add.stats
    # Footer only: float/double bounds are left out (a parquet-cpp max may hide a NaN), so is the
    # null-array count; everything else is identical.
    footer = json.loads(stats_from_parquet(md, snap.schema, snap.partition_columns, snap.configuration))
    theirs = json.loads(add.stats)
    assert theirs["maxValues"]["f"] == "NaN"
    drop = [f"{b}.{c}" for b in ("minValues", "maxValues") for c in ("f", "allnan", "z")]
    assert footer == _drop(theirs, *drop, "nullCount.arr")


NESTED = (
    "select 1 as a, named_struct('x', 2, 'y', named_struct('z', repeat('z', 40), 'w', 4L), 'v', 5.5d) as st, "
    "repeat('q', 40) as c, array(1) as arr, 7 as d, true as flag"
)


@pytest.mark.spark
@pytest.mark.parametrize(
    "props",
    [
        {"delta.dataSkippingNumIndexedCols": "3"},
        {"delta.dataSkippingNumIndexedCols": "0"},
        {"delta.dataSkippingNumIndexedCols": "-1", "delta.dataSkippingStringPrefixLength": "5"},
        {"delta.dataSkippingStatsColumns": "c, ST.y"},
        {"delta.dataSkippingStatsColumns": "`d`,st.`x`"},
    ],
    ids=["numIndexed3", "numIndexed0", "all-prefix5", "statsColumns-struct", "statsColumns-quoted"],
)
def test_stats_column_selection_matches_delta(spark, tmp_path, props):
    snap = _write_delta(spark, str(tmp_path / "t"), spark.sql(NESTED), props=props)
    _assert_matches_delta(snap)


@pytest.mark.spark
def test_partitioned_table(spark, tmp_path):
    """Partition columns are never in stats, nor counted against dataSkippingNumIndexedCols."""
    df = spark.sql(
        "select * from values ('p1', 1, 'x', 10L), ('p1', 2, 'y', 20L), ('p2', 3, 'z', 30L) as t(p, a, b, c)"
    )
    snap = _write_delta(
        spark, str(tmp_path / "t"), df, props={"delta.dataSkippingNumIndexedCols": "2"}, partition_by=["p"]
    )
    assert len(snap.files) == 2
    _assert_matches_delta(snap)
    assert all(set(json.loads(f.stats)["nullCount"]) == {"a", "b"} for f in snap.files)


@pytest.mark.spark
def test_column_mapping_and_deletion_vectors(spark, tmp_path):
    """Stats keys are physical names under column mapping; DV tables get ``tightBounds``."""
    df = spark.sql("select 1 as `Col A`, named_struct('Inner', 'v') as st, 2.5d as d")
    props = {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"}
    snap = _write_delta(spark, str(tmp_path / "t"), df, props=props)
    _assert_matches_delta(snap)
    theirs = json.loads(snap.files[0].stats)
    assert theirs["tightBounds"] is True
    assert "Col A" not in theirs["minValues"]
    # Without a protocol, the table property decides tightBounds.
    add = snap.files[0]
    path = snap.file_path(add.path)
    assert stats_from_file(path, snap.schema, snap.partition_columns, snap.configuration) == add.stats
    no_dv = Protocol(3, 7, ("columnMapping",), ("columnMapping",))
    assert "tightBounds" not in stats_from_file(
        path, snap.schema, snap.partition_columns, snap.configuration, protocol=no_dv
    )


@pytest.mark.spark
def test_columns_missing_from_file(spark, tmp_path):
    """delta-spark writes files without columns the data lacks: they count as all-null, no bounds
    (and a struct with no present column is absent from minValues/maxValues, not ``{}``)."""
    path = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{path}` (a int, b int, st struct<q:int,r:string>, arr array<int>) USING delta")
    spark.sql("select 1 as a union all select 2").coalesce(1).write.format("delta").mode("append").save(path)
    snap = load_snapshot(path)
    _assert_matches_delta(snap)
    assert json.loads(snap.files[0].stats)["nullCount"] == {"a": 0, "b": 2, "st": {"q": 2, "r": 2}, "arr": 2}


@pytest.mark.spark
def test_variant_and_dotted_names(spark, tmp_path):
    """A variant is a Parquet group but a Delta leaf (null count only); names may contain dots."""
    df = spark.sql(
        """select parse_json('{"a":1}') as v, 1 as `we.ird`, array(1) as `a.b` """
        "union all select null, 2, null"
    )
    snap = _write_delta(spark, str(tmp_path / "t"), df)
    _assert_matches_delta(snap)
    assert json.loads(snap.files[0].stats)["nullCount"] == {"v": 1, "we.ird": 0, "a.b": 1}


@pytest.mark.spark
def test_session_time_zone(spark, tmp_path):
    """Timestamp bounds are rendered in the session time zone (historic LMT offsets keep seconds)."""
    df = spark.createDataFrame(
        [
            (
                dt.datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=UTC),
                dt.datetime(1900, 1, 1, tzinfo=UTC),
                dt.datetime(2024, 1, 1),
            )
        ],
        "ts timestamp, old timestamp, ntz timestamp_ntz",
    )
    for tz in ("America/Los_Angeles", "Asia/Kolkata"):
        with _conf(spark, "spark.sql.session.timeZone", tz):
            snap = _write_delta(spark, str(tmp_path / tz.replace("/", "_")), df)
        _assert_matches_delta(snap, session_time_zone=tz)
    theirs = json.loads(snap.files[0].stats)
    assert theirs["minValues"]["ts"] == "2024-01-01T05:30:00.500+05:30"
    assert theirs["minValues"]["old"] == "1900-01-01T05:21:10.000+05:21:10"


@pytest.mark.spark
def test_floats_zeros_and_oversized_strings(spark, tmp_path):
    """Signed zeros (Spark keeps the first zero in row order), float/double formatting, NaN, and
    strings whose min+max exceed Parquet's 4 KiB statistics limit (no footer stats at all)."""
    rows = [
        (-0.0, 0.0, -0.0, 0.0, 1.0, 1e10, 1e-5, 0.1, "x" * 5000),
        (0.0, -0.0, -0.0, -0.0, math.nan, 1.7976931348623157e308, 0.001, 3.4e38, "a" * 3000),
        (5.0, -5.0, None, 7.0, 2.0, 1234567.0, 5e-324, 1.4e-45, "b"),
    ]
    schema = "z1 double, z2 double, z3 float, z4 float, nanmix double, big double, small double, f32 float, huge string"
    snap = _write_delta(spark, str(tmp_path / "t"), spark.createDataFrame(rows, schema))
    _assert_matches_delta(snap)
    theirs = json.loads(snap.files[0].stats)
    raw = snap.files[0].stats
    mins, maxs = raw.split('"maxValues"')
    assert '"z1":-0.0' in mins and '"z4":0.0' in mins and '"z2":0.0' in maxs and '"z3":-0.0' in maxs
    assert theirs["maxValues"]["huge"] == "x" * 32 + "\x7f"

    # Footer only: the oversized string column has neither bounds nor a null count, and the zero
    # bounds of z1/z2/z4 have an ambiguous sign (numerically equal either way).
    footer = json.loads(_ours(snap, snap.files[0], footer_only=True))
    assert footer == _drop(theirs, "minValues.huge", "maxValues.huge", "nullCount.huge")


@pytest.mark.spark
def test_jdk17_float_formatting_difference_is_value_preserving(spark, tmp_path):
    """Known, documented difference: we print floats/doubles like JDK >= 19's Double/Float.toString
    (shortest repr). JDK 17's FloatingDecimal sometimes prints more digits for the same value, e.g.
    2e23 -> "1.9999999999999998E23", float -1.6812766E15 -> "-1.68127662E15" (never for the ~80k
    everyday values we sampled). Both strings parse to the same double / float32, so data skipping
    is unaffected; with Spark on JDK >= 19 the strings are identical."""
    import struct

    def f32(v: float) -> float:
        return struct.unpack("<f", struct.pack("<f", v))[0]

    df = spark.createDataFrame([(2e23, -1681276624961536.0)], "d double, f float")
    snap = _write_delta(spark, str(tmp_path / "t"), df)
    (add,) = snap.files
    ours, theirs = json.loads(_ours(snap, add)), json.loads(add.stats)
    assert '"d":2.0E23' in _ours(snap, add) and '"f":-1.6812766E15' in _ours(snap, add)
    for bound in ("minValues", "maxValues"):
        assert ours[bound]["d"] == theirs[bound]["d"]
        assert f32(ours[bound]["f"]) == f32(theirs[bound]["f"])
    assert ours["nullCount"] == theirs["nullCount"] and ours["numRecords"] == theirs["numRecords"]


@pytest.mark.spark
def test_empty_file(spark, tmp_path):
    """delta-spark never writes an empty file, so the oracle is its stats expression evaluated over
    no rows: count 0, min/max/sum(isNull) null (left out), structs still present as {}."""
    out = str(tmp_path / "empty")
    spark.createDataFrame([], "i int, s string, st struct<a:int>, b boolean").coalesce(1).write.parquet(out)
    (path,) = glob.glob(os.path.join(out, "*.parquet"))
    schema = {
        "type": "struct",
        "fields": [
            {"name": "i", "type": "integer", "nullable": True, "metadata": {}},
            {"name": "s", "type": "string", "nullable": True, "metadata": {}},
            {
                "name": "st",
                "type": {
                    "type": "struct",
                    "fields": [{"name": "a", "type": "integer", "nullable": True, "metadata": {}}],
                },
                "nullable": True,
                "metadata": {},
            },
            {"name": "b", "type": "boolean", "nullable": True, "metadata": {}},
        ],
    }
    oracle = spark.sql(
        "select to_json(named_struct('numRecords', count(*), "
        "'minValues', named_struct('i', min(i), 's', substring(min(s), 0, 32), 'st', named_struct('a', min(st.a))), "
        "'maxValues', named_struct('i', max(i), 's', max(s), 'st', named_struct('a', max(st.a))), "
        "'nullCount', named_struct('i', sum(if(i is null, 1, 0)), 's', sum(if(s is null, 1, 0)), "
        "'st', named_struct('a', sum(if(st.a is null, 1, 0))), 'b', sum(if(b is null, 1, 0))))) "
        f"from parquet.`{out}`"
    ).collect()[0][0]
    assert oracle == '{"numRecords":0,"minValues":{"st":{}},"maxValues":{"st":{}},"nullCount":{"st":{}}}'
    assert stats_from_file(path, schema, [], {}) == oracle


# --------------------------------------------------------------------------------------------
# pure unit tests
# --------------------------------------------------------------------------------------------


def _f(name: str, t: Any, **md: str) -> dict[str, Any]:
    return {"name": name, "type": t, "nullable": True, "metadata": md}


def _struct(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields)}


SCHEMA = _struct(
    _f("a", "long"),
    _f("st", _struct(_f("x", "integer"), _f("y", _struct(_f("z", "string"), _f("w", "long"))), _f("v", "double"))),
    _f("c", "string"),
    _f("arr", {"type": "array", "elementType": "integer", "containsNull": True}),
    _f("d", "integer"),
)


def test_stats_columns_num_indexed_cols():
    assert _leaf_names(stats_columns(SCHEMA, [], {})) == ["a", "st.x", "st.y.z", "st.y.w", "st.v", "c", "arr", "d"]
    assert _leaf_names(stats_columns(SCHEMA, [], {"delta.dataSkippingNumIndexedCols": "3"})) == ["a", "st.x", "st.y.z"]
    assert _leaf_names(stats_columns(SCHEMA, [], {"delta.dataSkippingNumIndexedCols": "7"})) == [
        "a",
        "st.x",
        "st.y.z",
        "st.y.w",
        "st.v",
        "c",
        "arr",
    ]
    assert stats_columns(SCHEMA, [], {"delta.dataSkippingNumIndexedCols": "0"}) == ()
    assert len(_leaf_names(stats_columns(SCHEMA, [], {"delta.dataSkippingNumIndexedCols": "-1"}))) == 8
    wide = _struct(*[_f(f"c{i}", "integer") for i in range(40)])
    assert _leaf_names(stats_columns(wide, [], {})) == [f"c{i}" for i in range(32)]
    # partition columns are dropped before counting
    assert _leaf_names(stats_columns(wide, ["C0", "c5"], {"delta.dataSkippingNumIndexedCols": "5"})) == [
        "c1",
        "c2",
        "c3",
        "c4",
        "c6",
    ]


def test_stats_columns_named():
    cfg = {"delta.dataSkippingStatsColumns": "C, ST.y"}
    assert _leaf_names(stats_columns(SCHEMA, [], cfg)) == ["st.y.z", "st.y.w", "c"]  # schema order, case-insensitive
    cfg = {"delta.dataSkippingStatsColumns": "st, st.x"}  # delta-spark: sub-paths win over the whole struct
    assert _leaf_names(stats_columns(SCHEMA, [], cfg)) == ["st.x"]
    assert stats_columns(SCHEMA, [], {"delta.dataSkippingStatsColumns": " "}) == ()
    odd = _struct(_f("we.ird", "integer"), _f("x`y", "string"))
    assert _leaf_names(stats_columns(odd, [], {"delta.dataSkippingStatsColumns": "`we.ird`,`x``y`"})) == [
        "we.ird",
        "x`y",
    ]
    # the named list wins over numIndexedCols
    cfg = {"delta.dataSkippingStatsColumns": "d", "delta.dataSkippingNumIndexedCols": "1"}
    assert _leaf_names(stats_columns(SCHEMA, [], cfg)) == ["d"]


def test_stats_columns_column_mapping():
    schema = _struct(
        _f("Col A", "integer", **{"delta.columnMapping.physicalName": "col-1"}),
        _f(
            "st",
            _struct(_f("In", "string", **{"delta.columnMapping.physicalName": "col-3"})),
            **{"delta.columnMapping.physicalName": "col-2"},
        ),
    )
    assert _leaf_names(stats_columns(schema, [], {"delta.columnMapping.mode": "name"})) == ["col-1", "col-2.col-3"]
    assert _leaf_names(
        stats_columns(schema, [], {"delta.columnMapping.mode": "name", "delta.dataSkippingStatsColumns": "st.in"})
    ) == ["col-2.col-3"]
    assert _leaf_names(stats_columns(schema, [], {})) == ["Col A", "st.In"]


def test_parse_stats_columns():
    assert parse_stats_columns("a, b.c ,`d.e`.f") == [("a",), ("b", "c"), ("d.e", "f")]
    assert parse_stats_columns("") == []
    for bad in ("a,,b", "a.", "`a", "a b"):
        with pytest.raises(ValueError):
            parse_stats_columns(bad)


def test_truncate_strings():
    assert truncate_min_string("a" * 40, 32) == "a" * 32
    assert truncate_min_string(EMOJI * 40, 32) == EMOJI * 32  # Spark substring counts code points
    assert truncate_max_string("a" * 32, 32) == "a" * 32
    assert truncate_max_string("a" * 33, 32) == "a" * 32 + "\x7f"
    assert truncate_max_string("a" * 32 + "\xff", 32) == "a" * 32 + MAX_CP
    assert truncate_max_string("a" * 32 + "\x7f", 32) == "a" * 32 + MAX_CP
    assert truncate_max_string(EMOJI * 17, 32) == EMOJI * 16 + MAX_CP  # Java length: UTF-16 units
    assert truncate_max_string("a" * 31 + EMOJI + "z", 32) == "a" * 31 + EMOJI + "\x7f"
    assert truncate_max_string("a" * 32 + MAX_CP * 3 + "b", 32) == "a" * 32 + MAX_CP * 3 + "\x7f"
    assert truncate_max_string("a" * 32 + MAX_CP * 3, 32) == "a" * 32 + MAX_CP * 3  # ran off the end
    assert truncate_max_string("a" * 32 + MAX_CP * 40, 32) is None  # beyond 2 * prefix: no max
    assert truncate_max_string("ab", 0) is None and truncate_max_string("", 0) == ""


def test_java_float_strings():
    cases = {
        1.0: "1.0",
        100.0: "100.0",
        0.1: "0.1",
        0.001: "0.001",
        1234567.0: "1234567.0",
        1e7: "1.0E7",
        1e10: "1.0E10",
        1e-5: "1.0E-5",
        0.00099: "9.9E-4",
        123.456: "123.456",
        -2.5: "-2.5",
        -0.0: "-0.0",
        5e-324: "4.9E-324",
        1.7976931348623157e308: "1.7976931348623157E308",
        2e23: "2.0E23",
    }
    for value, expected in cases.items():
        assert java_float_string(value) == expected, value
    floats = {0.1: "0.1", 3.4e38: "3.4E38", 1.4e-45: "1.4E-45", 123456.7: "123456.7", 1e7: "1.0E7", 2e-44: "2.0E-44"}
    for value, expected in floats.items():
        import struct

        f32 = struct.unpack("<f", struct.pack("<f", value))[0]
        assert java_float_string(f32, single=True) == expected, value


def test_temporal_formatting():
    assert format_date(0) == "1970-01-01"
    assert format_date(-719528) == "0000-01-01"
    assert format_date(2932897) == "+10000-01-01"
    assert format_date(-719529) == "-0001-12-31"
    assert format_timestamp(123_456) == "1970-01-01T00:00:00.123Z"
    assert format_timestamp(-1) == "1969-12-31T23:59:59.999Z"  # floor, not toward zero
    assert format_timestamp(0, "America/Los_Angeles") == "1969-12-31T16:00:00.000-08:00"
    assert format_timestamp(0, "+05:30") == "1970-01-01T05:30:00.000+05:30"
    assert format_timestamp_ntz(253402300799999999) == "9999-12-31T23:59:59.999"
