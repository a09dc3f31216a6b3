"""WHERE predicates on partition columns, parsed and evaluated by Spark on typed partition values.

Spark is used only on the table's distinct partition tuples (a handful of rows), so predicates
have exactly Spark SQL's semantics (casts, time zone, null handling) without reading any data.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..delta.snapshot import Snapshot
from ..errors import InvalidPredicateError
from ..plan.planner import RawKey, raw_partition_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PartitionSelection", "parse_predicates", "select_partitions"]

_SUBQUERY_NODES = {
    "ScalarSubquery",
    "Exists",
    "ListQuery",
    "InSubquery",
    "LateralSubquery",
    "UnresolvedTableValuedFunction",
}
_RAW = "__ddo_raw_{}__"


@dataclass(frozen=True)
class PartitionSelection:
    """Which raw partition keys the predicates matched, and each key's typed (normalized) value."""

    matched: frozenset[RawKey] | None  # None: no predicate, every partition
    normalized: dict[RawKey, Hashable]
    predicate_sql: tuple[str, ...]
    #: each parsed predicate's Catalyst ``toString`` (e.g. ``('part >= 1)``): what delta-spark
    #: records in operationParameters.predicate
    predicate_strings: tuple[str, ...] = ()


def _children(jexpr):
    seq = jexpr.children()
    return [seq.apply(i) for i in range(seq.size())]


def parse_predicates(spark: SparkSession, predicates: Sequence[str], partition_columns: Sequence[str]) -> list[str]:
    """Parse each predicate with Spark's SQL parser; reject subqueries and non-partition columns.

    Returns the canonical SQL of each predicate (evaluable again by Spark).
    """
    return [sql for sql, _ in _parse_predicates(spark, predicates, partition_columns)]


def _parse_predicates(
    spark: SparkSession, predicates: Sequence[str], partition_columns: Sequence[str]
) -> list[tuple[str, str]]:
    """(canonical SQL, Catalyst toString) of each predicate, validated as parse_predicates documents."""
    parser = spark._jsparkSession.sessionState().sqlParser()
    lowered = {c.lower(): c for c in partition_columns}
    out = []
    for text in predicates:
        if not isinstance(text, str) or not text.strip():
            raise InvalidPredicateError(
                f"Empty WHERE predicate {text!r}: give a condition on partition columns, e.g. \"date = '2024-01-01'\"."
            )
        try:
            jexpr = parser.parseExpression(text)
        except Exception as exc:  # py4j wraps ParseException
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InvalidPredicateError(
                f"Cannot parse WHERE predicate {text!r}: {first}. Write a Spark SQL condition on partition columns."
            ) from None
        stack = [jexpr]
        bad_cols: list[str] = []
        while stack:
            e = stack.pop()
            name = e.getClass().getSimpleName()
            if name in _SUBQUERY_NODES:
                raise InvalidPredicateError(
                    f"WHERE predicate {text!r} contains a subquery; only conditions on partition columns are allowed."
                )
            if name == "UnresolvedAttribute":
                seq = e.nameParts()
                parts = [seq.apply(i) for i in range(seq.size())]
                col = parts[0] if parts else e.name()
                if col.lower() not in lowered:
                    bad_cols.append(".".join(parts))
            stack.extend(_children(e))
        if bad_cols:
            raise InvalidPredicateError(
                f"Predicate references non-partition column '{bad_cols[0]}'. "
                f"Only the partition columns may be referenced: [{', '.join(partition_columns)}]."
            )
        out.append((jexpr.sql(), jexpr.toString()))
    if len(out) != len(predicates):
        raise InvalidPredicateError("internal: predicate count mismatch (please report)")
    return out


def select_partitions(spark: SparkSession, snapshot: Snapshot, predicates: Sequence[str] = ()) -> PartitionSelection:
    """Evaluate predicates over the snapshot's distinct partitions (typed by casting the log's strings)."""
    cols = list(snapshot.partition_columns)
    parsed = _parse_predicates(spark, predicates, cols) if predicates else []
    sql = tuple(p for p, _ in parsed)
    strings = tuple(s for _, s in parsed)
    if not cols:
        # Unpartitioned: a column-free predicate (e.g. "true") still has to hold.
        if sql:
            value = spark.sql(f"SELECT ({' AND '.join(f'({p})' for p in sql)}) AS ok").collect()[0]["ok"]
            return PartitionSelection(frozenset({()}) if value else frozenset(), {(): ()}, sql, strings)
        return PartitionSelection(None, {(): ()}, sql, strings)
    keys = sorted({raw_partition_key(f, cols) for f in snapshot.files}, key=repr)
    if not keys:
        return PartitionSelection(frozenset() if sql else None, {}, sql, strings)
    from pyspark.sql.types import StringType, StructField, StructType

    raw_names = [_RAW.format(i) for i in range(len(cols))]
    schema = StructType([StructField(n, StringType(), True) for n in raw_names])
    df = spark.createDataFrame([list(k) for k in keys], schema)
    types = snapshot.partition_types
    typed = df.selectExpr(
        *[f"`{r}`" for r in raw_names],
        *[f"CAST(`{r}` AS {types[c]}) AS `{c}`" for r, c in zip(raw_names, cols)],
    )
    if sql:
        typed = typed.where(" AND ".join(f"({p})" for p in sql))
    try:
        rows = typed.collect()
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidPredicateError(
            f"WHERE predicate {json.dumps(list(predicates))} cannot be evaluated: {msg}"
        ) from None
    normalized: dict[RawKey, Hashable] = {}
    matched = set()
    for r in rows:
        raw = tuple(r[n] for n in raw_names)
        normalized[raw] = tuple(r[c] for c in cols)
        matched.add(raw)
    if sql:
        # normalized values are needed for every key the planner will see, not just matches
        return PartitionSelection(frozenset(matched), normalized, sql, strings)
    return PartitionSelection(None, normalized, sql, strings)
