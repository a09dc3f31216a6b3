"""How a table's writer lays a Delta type out in Parquet, so that a rewrite writes the same layout.

A rewrite must not change what a file looks like to a reader: every engine that read the table before
our commit must read it after. Spark 4.2's Parquet writer, left to its defaults, writes a variant column
*shredded* (``metadata``, an optional ``value`` and a ``typed_value`` tree it infers from the data):
delta-spark reads that back, but deltalake, which expects the unshredded struct, then fails with "field
'value' of type binary has nulls", and a table without the ``variantShredding`` feature must not hold
shredded files at all (PROTOCOL.md, "Variant Data Type" / "Variant Shredding").

The unshredded layout Spark and delta-spark write is a struct of two required binaries, ``value`` then
``metadata``; delta-spark's own writer (TransactionalWrite) turns schema inference for shredding on only
when the table sets ``delta.enableVariantShredding``. This module says what to write; the rewriters
(Arrow and Spark) ask it. It also says when a data file's stored types are not ones the table's types
can be read from (``column_mismatch``), so a failed rewrite can name the file and the column.
Pure: no I/O, no Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "SHREDDING_PROPERTY",
    "VARIANT_CHILDREN",
    "column_mismatch",
    "has_variant",
    "shredding_enabled",
    "spark_write_options",
    "variant_arrow_type",
]

#: The table property that allows shredded variant files (delta-spark's DeltaConfigs.ENABLE_VARIANT_SHREDDING).
SHREDDING_PROPERTY = "delta.enableVariantShredding"
#: Spark's writer option (SQLConf.VARIANT_INFER_SHREDDING_SCHEMA) that delta-spark sets per write.
_INFER_SHREDDING = "spark.sql.variant.inferShreddingSchema"
#: The children of an unshredded variant, in Spark's order: (name, nullable).
VARIANT_CHILDREN: tuple[tuple[str, bool], ...] = (("value", False), ("metadata", False))


def _types(t: Any) -> Any:
    """Every type nested in a Delta schema type (itself included)."""
    yield t
    if isinstance(t, Mapping):
        kind = t.get("type")
        if kind == "struct":
            for f in t.get("fields", ()):
                yield from _types(f["type"])
        elif kind == "array":
            yield from _types(t["elementType"])
        elif kind == "map":
            yield from _types(t["keyType"])
            yield from _types(t["valueType"])


def has_variant(fields: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any column of these Delta schema fields is or holds a variant."""
    return any(t == "variant" for f in fields for t in _types(f["type"]))


def shredding_enabled(configuration: Mapping[str, str]) -> bool:
    """Whether the table allows shredded variant files (its ``delta.enableVariantShredding`` property)."""
    return str(configuration.get(SHREDDING_PROPERTY, "false")).strip().lower() == "true"


def spark_write_options(fields: Sequence[Mapping[str, Any]], configuration: Mapping[str, str]) -> dict[str, str]:
    """Options for Spark's Parquet writer so that it writes this table's layout (as delta-spark's writer sets them).

    A writer option, not a session conf: it holds for this write whatever the session says.
    """
    if not has_variant(fields):
        return {}
    return {_INFER_SHREDDING: "true" if shredding_enabled(configuration) else "false"}


def variant_arrow_type() -> Any:
    """The Arrow type of an unshredded variant: ``struct<value: binary not null, metadata: binary not null>``."""
    import pyarrow as pa

    return pa.struct([pa.field(name, pa.binary(), nullable) for name, nullable in VARIANT_CHILDREN])


_INT_BITS = {"byte": 8, "short": 16, "integer": 32, "long": 64}


def _textual(a: Any) -> bool:
    import pyarrow.types as pt

    return bool(
        pt.is_string(a)
        or pt.is_large_string(a)
        or pt.is_binary(a)
        or pt.is_large_binary(a)
        or pt.is_string_view(a)
        or pt.is_binary_view(a)
        or pt.is_fixed_size_binary(a)
    )


def _primitive_reads(t: str, a: Any) -> bool:
    """Whether a column of Delta primitive type ``t`` can be read from stored Arrow type ``a`` (widening allowed)."""
    import pyarrow.types as pt

    if t in _INT_BITS:
        return bool(pt.is_integer(a)) and a.bit_width <= _INT_BITS[t]
    checks: dict[str, Callable[[], bool]] = {
        "float": lambda: pt.is_floating(a) and a.bit_width <= 32,
        "double": lambda: pt.is_floating(a) or pt.is_integer(a),
        "string": lambda: _textual(a),
        "binary": lambda: _textual(a),
        "boolean": lambda: pt.is_boolean(a),
        "date": lambda: pt.is_date(a),
        "timestamp": lambda: pt.is_timestamp(a) or pt.is_date(a),
        "timestamp_ntz": lambda: pt.is_timestamp(a) or pt.is_date(a),
        "variant": lambda: pt.is_struct(a),
    }
    if t.startswith("decimal"):
        return bool(pt.is_decimal(a) or pt.is_integer(a))
    check = checks.get(t)
    return True if check is None else bool(check())  # a type we do not know: the reader decides


def _reads(t: Any, a: Any) -> bool:
    import pyarrow.types as pt

    if pt.is_null(a):
        return True
    if pt.is_dictionary(a):
        a = a.value_type
    if isinstance(t, str):
        return _primitive_reads(t, a)
    kind = t.get("type") if isinstance(t, Mapping) else None
    if kind == "struct":
        return bool(pt.is_struct(a))
    if kind == "array":
        return bool(pt.is_list(a) or pt.is_large_list(a) or pt.is_fixed_size_list(a) or pt.is_list_view(a))
    if kind == "map":
        return bool(pt.is_map(a))
    return True


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else str(t.get("type", t))


def column_mismatch(fields: Sequence[Mapping[str, Any]], file_schema: Any) -> str | None:
    """Why a data file's stored columns cannot be read as the table's (physical) ``fields``; None if they can.

    Columns are matched by name, case-insensitively, as Spark does; a column the file lacks reads as
    null and is no mismatch. Narrower stored types the table widened to (type widening) are fine.
    """
    stored = {f.name.lower(): f for f in file_schema}
    for f in fields:
        found = stored.get(str(f["name"]).lower())
        if found is not None and not _reads(f["type"], found.type):
            return f"its column {found.name!r} is stored as {found.type}, which the table's {_type_name(f['type'])} cannot be read from"
    return None
