"""No reader loses a table: every engine that read a table before our commit reads it after, the same rows.

For each table feature a small table is built by delta-spark (three inserts over three partitions), then
every rewrite path commits in turn on its own partition of the same table: Arrow, Spark, Z-order, and
purge (REORG ... PURGE) over the whole table; a liquid table is clustered, then purged. After each commit
delta-spark and deltalake (its pyarrow dataset where it reads the table, and its own DataFusion scan) must
read exactly the rows they read before; a reader that could not read the table before (deltalake and type
widening) is not asked to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.purge import purge
from tests.helpers import _key, _norm

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_PART = "CAST(id % 3 AS STRING)"


@dataclass(frozen=True)
class Feature:
    columns: str
    select: str  #: the rows of one insert, from range({lo}, {hi})
    properties: dict[str, str] = field(default_factory=dict)
    after: tuple[str, ...] = ()  #: DDL/DML after the inserts ({t} is the table)
    layout: str = "PARTITIONED BY (part)"
    deltalake_reads: bool = True  #: deltalake 1.6 reads the table (it does not read type widening)


FEATURES = {
    "variant": Feature(
        "id BIGINT, v VARIANT, part STRING",
        f'SELECT id, parse_json(format_string(\'{{"a": %d, "b": ["x", %d]}}\', id, id)), {_PART}',
    ),
    "type_widening": Feature(
        "id BIGINT, n INT, s SHORT, part STRING",
        f"SELECT id, CAST(id AS INT), CAST(id AS SHORT), {_PART}",
        {"delta.enableTypeWidening": "true"},
        (
            "ALTER TABLE {t} ALTER COLUMN n TYPE BIGINT",
            "ALTER TABLE {t} ALTER COLUMN s TYPE INT",
            "INSERT INTO {t} VALUES (1000, 5000000000, 70000, '0')",
        ),
        deltalake_reads=False,
    ),
    "column_mapping": Feature(
        "id BIGINT, amount INT, junk STRING, part STRING",
        f"SELECT id, CAST(id AS INT), 'j', {_PART}",
        {"delta.columnMapping.mode": "name"},
        ("ALTER TABLE {t} RENAME COLUMN amount TO `total amount`", "ALTER TABLE {t} DROP COLUMN junk"),
    ),
    "deletion_vectors": Feature(
        "id BIGINT, x STRING, part STRING",
        f"SELECT id, concat('v', id), {_PART}",
        {"delta.enableDeletionVectors": "true"},
        ("DELETE FROM {t} WHERE id % 4 = 1",),
    ),
    "v2_checkpoints": Feature(
        "id BIGINT, x STRING, part STRING",
        f"SELECT id, concat('v', id), {_PART}",
        {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2"},
    ),
    "domain_metadata": Feature(  # row tracking keeps its high-water mark in the delta.rowTracking domain
        "id BIGINT, x STRING, part STRING",
        f"SELECT id, concat('v', id), {_PART}",
        {"delta.enableRowTracking": "true"},
    ),
    "timestamp_ntz": Feature(
        "id BIGINT, ts TIMESTAMP_NTZ, part STRING",
        f"SELECT id, TIMESTAMP_NTZ'2024-01-02 03:04:05' + make_interval(0, 0, 0, 0, 0, 0, id), {_PART}",
    ),
    "liquid": Feature(
        "id BIGINT, x STRING",
        "SELECT id, concat('v', id % 3)",
        {"delta.enableDeletionVectors": "true"},
        ("DELETE FROM {t} WHERE id % 4 = 1",),
        layout="CLUSTER BY (id)",
    ),
}


def _build(spark, path: str, feature: Feature) -> None:
    t = f"delta.`{path}`"
    props = ", ".join(f"'{k}' = '{v}'" for k, v in feature.properties.items())
    spark.sql(
        f"CREATE TABLE {t} ({feature.columns}) USING delta {feature.layout}"
        + (f" TBLPROPERTIES ({props})" if props else "")
    )
    for i in range(3):
        spark.sql(f"INSERT INTO {t} " + feature.select + f" FROM range({i * 6}, {i * 6 + 6})")
    for statement in feature.after:
        spark.sql(statement.format(t=t))


def _deltalake_readers(path: str) -> dict[str, list[tuple] | str]:
    """Rows per deltalake reader (its pyarrow dataset, its DataFusion scan), or the error it raised."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from tests.helpers import deltalake_table

    def rows(table) -> list[tuple]:
        cols = sorted(table.column_names)
        return sorted((tuple(_norm(r[c]) for c in cols) for r in table.select(cols).to_pylist()), key=_key)

    out: dict[str, list[tuple] | str] = {}
    for name, read in (
        ("dataset", lambda: deltalake_table(path)),
        ("scan", lambda: pa.RecordBatchReader.from_stream(DeltaTable(path).scan()).read_all()),
    ):
        try:
            out[name] = rows(read())
        except Exception as exc:  # a reader that cannot read this table: recorded, compared below
            out[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return out


def _spark_rows(spark, path: str) -> list[tuple]:
    """Rows as delta-spark reads them, columns sorted by name; a variant as its JSON text."""
    from pyspark.sql.types import VariantType

    df = spark.read.format("delta").load(path)
    kinds = {f.name: f.dataType for f in df.schema.fields}
    cols = sorted(kinds)
    exprs = [f"to_json(`{c}`)" if isinstance(kinds[c], VariantType) else f"`{c}`" for c in cols]
    return sorted((tuple(_norm(x) for x in r) for r in df.selectExpr(*exprs).collect()), key=_key)


def _paths(feature: Feature) -> list[tuple[str, dict]]:
    """(path, optimize arguments): one partition each, then purge over the whole table."""
    if feature.layout.startswith("CLUSTER BY"):
        return [("liquid", {}), ("purge", {})]
    return [
        ("arrow", {"where": "part = '0'", "rewrite_engine": "arrow"}),
        ("spark", {"where": "part = '1'", "rewrite_engine": "spark"}),
        ("zorder", {"where": "part = '2'", "zorder_by": ["id"]}),
        ("purge", {}),
    ]


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_every_reader_reads_the_same_rows_after_every_path(spark, tmp_path, name):
    feature = FEATURES[name]
    path = str(tmp_path / name)
    _build(spark, path, feature)
    spark_before, deltalake_before = _spark_rows(spark, path), _deltalake_readers(path)
    assert len(spark_before) >= 12
    if feature.deltalake_reads:  # the test means something for deltalake: it does read this table
        assert not isinstance(deltalake_before["scan"], str), deltalake_before["scan"]
        assert len(deltalake_before["scan"]) == len(spark_before)
    committed = 0
    for how, kwargs in _paths(feature):
        files = len(load_snapshot(path).files)
        if how == "purge":
            m = purge(spark, path)
        else:
            m = optimize(spark, path, **kwargs)
        committed += len(m.committed_versions)
        assert _spark_rows(spark, path) == spark_before, f"delta-spark reads other rows after {how}"
        after = _deltalake_readers(path)
        for reader, rows in deltalake_before.items():
            if isinstance(rows, str):
                continue  # it could not read the table before; nothing to keep
            assert after[reader] == rows, f"deltalake's {reader} reads other rows after {how}: {after[reader]!s:.300}"
        assert len(load_snapshot(path).files) <= files
    assert committed >= len(_paths(feature)) - 1  # every path but purge commits (purge too where rows were deleted)
