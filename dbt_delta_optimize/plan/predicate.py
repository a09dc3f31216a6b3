"""WHERE predicates on partition columns: parsed by sqlglot into a small safe language, evaluated in Python.

A predicate comes from a CLI flag or a dbt model's config, so it is untrusted: it is never run
as SQL. sqlglot (Spark dialect) parses it; the tree is compiled into Python closures over the
typed partition values, allowing only column references to partition columns, literals,
comparisons, AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL, [I]LIKE, arithmetic and an allow-list of
pure functions. Anything else (``reflect``, ``java_method``, subqueries, other columns) is
refused by name. Semantics are Spark SQL's (non-ANSI) on partition values: see ``sql_values``.
No JVM is needed, so a dry run plans in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..delta.file_table import FileTable, RawKey
from ..errors import InvalidArgumentError, InvalidPredicateError
from .predicate_nodes import Scope
from .sql_values import cast_value, delta_type

if TYPE_CHECKING:
    from .predicate_compile import Compiled

__all__ = ["PartitionSelection", "SnapshotLike", "parse_predicates", "select_partitions"]


class SnapshotLike(Protocol):
    """What predicate evaluation needs of a snapshot."""

    @property
    def partition_columns(self) -> tuple[str, ...]: ...

    @property
    def partition_types(self) -> dict[str, str]: ...

    @property
    def physical_partition_columns(self) -> tuple[str, ...]: ...

    @property
    def file_table(self) -> FileTable: ...


@dataclass(frozen=True)
class PartitionSelection:
    """Which raw partition keys the predicates matched, and each key's typed (normalized) value."""

    matched: frozenset[RawKey] | None  # None: no predicate, every partition
    normalized: Mapping[RawKey, Hashable]
    predicate_sql: tuple[str, ...]
    #: each predicate as delta-spark records it in operationParameters.predicate (Catalyst's toString)
    predicate_strings: tuple[str, ...] = ()


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise InvalidArgumentError(
            f"A WHERE predicate must be a string, got {type(text).__name__} {text!r}: "
            "give a condition on partition columns, e.g. \"date = '2024-01-01'\"."
        )
    if not text.strip():
        raise InvalidPredicateError(
            f"Empty WHERE predicate {text!r}: give a condition on partition columns, e.g. \"date = '2024-01-01'\"."
        )
    return text


def _compile_all(predicates: Sequence[str], scope: Scope) -> list[Compiled]:
    if not predicates:
        return []
    from .predicate_compile import compile_predicate, parse_predicate  # sqlglot: imported when a predicate comes

    return [compile_predicate(parse_predicate(_check_text(p)), _check_text(p), scope) for p in predicates]


def parse_predicates(
    predicates: Sequence[str], partition_columns: Sequence[str], partition_types: Mapping[str, str] | None = None
) -> list[str]:
    """Validate each predicate (safe language, partition columns only); returns each one's canonical SQL."""
    types = {c: delta_type((partition_types or {}).get(c, "string")) for c in partition_columns}
    return [c.sql for c in _compile_all(predicates, Scope(types, "UTC"))]


def _typed(key: RawKey, columns: Sequence[str], types: Mapping[str, str], tz: str) -> tuple[Any, ...]:
    values = []
    for column, raw in zip(columns, key):
        name = types[column]
        kind = delta_type(name)
        params = _decimal_params(name) if kind == "decimal" else (38, 18)
        values.append(cast_value(raw, "string", kind, tz, params))
    return tuple(values)


def _decimal_params(name: str) -> tuple[int, int]:
    inner = name[name.index("(") + 1 : name.index(")")] if "(" in name else "10,0"
    p, s = (int(x) for x in inner.split(","))
    return p, s


def _matches(compiled: Sequence[Compiled], row: Mapping[str, Any]) -> bool:
    return all(c.evaluate(row) is True for c in compiled)


def select_partitions(
    snapshot: SnapshotLike, predicates: Sequence[str] = (), *, time_zone: str = "UTC"
) -> PartitionSelection:
    """Evaluate predicates over the snapshot's distinct partitions (typed by Spark's cast of the log's strings)."""
    if isinstance(predicates, str):
        predicates = [predicates]
    columns = list(snapshot.partition_columns)
    types = dict(snapshot.partition_types)
    scope = Scope({c: delta_type(types[c]) for c in columns}, time_zone)
    compiled = _compile_all(predicates, scope)
    sql = tuple(c.sql for c in compiled)
    strings = tuple(c.catalyst for c in compiled)
    if not columns:
        if not compiled:
            return PartitionSelection(None, {(): ()}, sql, strings)
        return PartitionSelection(frozenset({()}) if _matches(compiled, {}) else frozenset(), {(): ()}, sql, strings)
    # The log keys partition values by physical name (column mapping); predicates use logical names.
    keys = snapshot.file_table.partition_keys(snapshot.physical_partition_columns)
    normalized: dict[RawKey, Hashable] = {}
    matched: set[RawKey] = set()
    lowered = [c.lower() for c in columns]
    for key in keys:
        typed = _typed(key, columns, types, time_zone)
        normalized[key] = typed
        if compiled and _matches(compiled, dict(zip(lowered, typed))):
            matched.add(key)
    return PartitionSelection(frozenset(matched) if compiled else None, normalized, sql, strings)


#: A compiled predicate's evaluator: typed partition values by lower-cased column name -> SQL value.
Evaluator = Callable[[Mapping[str, Any]], Any]
