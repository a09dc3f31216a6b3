"""The table's physical schema in Arrow, and a file's row groups conformed to it.

Delta's schema JSON maps to Arrow types one to one for the types the Arrow rewriter handles;
anything else raises ``NeedsSparkRewrite`` and that bin is rewritten by Spark instead. A file's
columns are matched by physical name (case-insensitively, as Spark does) or, in column mapping's
id mode, by Parquet field id; a dropped column is left out, a missing one null-filled, and a
widened type (type widening) cast.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..arrow_kernels import cast

__all__ = [
    "NeedsSparkRewrite",
    "arrow_schema",
    "conform",
    "hidden_fields",
    "with_hidden_fields",
]


class NeedsSparkRewrite(Exception):
    """This bin cannot be rewritten faithfully by Arrow; use the Spark DataFrame path."""


_SIMPLE = {
    "string": "string",
    "long": "int64",
    "integer": "int32",
    "short": "int16",
    "byte": "int8",
    "float": "float32",
    "double": "float64",
    "boolean": "bool_",
    "binary": "binary",
    "date": "date32",
}


def _arrow_type(t: Any) -> Any:
    import pyarrow as pa

    if isinstance(t, str):
        if t in _SIMPLE:
            return getattr(pa, _SIMPLE[t])()
        if t == "timestamp":
            return pa.timestamp("us", tz="UTC")
        if t == "timestamp_ntz":
            return pa.timestamp("us")
        if t == "variant":  # the unshredded struct the table's writer used (delta/physical_layout.py)
            from ..delta.physical_layout import variant_arrow_type

            return variant_arrow_type()
        if t.startswith("decimal("):
            p, s = t[len("decimal(") : -1].split(",")
            return pa.decimal128(int(p), int(s))
        raise NeedsSparkRewrite(f"type {t} is not handled by the Arrow rewriter")
    kind = t.get("type")
    if kind == "struct":
        return pa.struct([arrow_field(f) for f in t["fields"]])
    if kind == "array":
        return pa.list_(pa.field("element", _arrow_type(t["elementType"]), t.get("containsNull", True)))
    if kind == "map":
        return pa.map_(
            _arrow_type(t["keyType"]), pa.field("value", _arrow_type(t["valueType"]), t.get("valueContainsNull", True))
        )
    raise NeedsSparkRewrite(f"type {kind} is not handled by the Arrow rewriter")


def arrow_field(f: Mapping[str, Any]) -> Any:
    """One Arrow field; a Parquet field id (column mapping's ``parquet.field.id``) goes into its metadata."""
    import pyarrow as pa

    field_id = (f.get("metadata") or {}).get("parquet.field.id")
    meta = None if field_id is None else {b"PARQUET:field_id": str(int(field_id)).encode()}
    return pa.field(f["name"], _arrow_type(f["type"]), True, metadata=meta)


def arrow_schema(fields: Sequence[Mapping[str, Any]]) -> Any:
    """Arrow schema of the table's data columns (physical Delta schema fields, partition columns excluded)."""
    import pyarrow as pa

    return pa.schema([arrow_field(f) for f in fields])


def hidden_fields(row_id: str, commit_version: str) -> list[dict[str, Any]]:
    """Row tracking's two hidden columns as Delta schema fields (longs), written after the data fields."""
    return [{"name": name, "type": "long", "nullable": True, "metadata": {}} for name in (row_id, commit_version)]


def with_hidden_fields(fields: Sequence[Mapping[str, Any]], row_tracking: Any) -> list[Mapping[str, Any]]:
    """The table's data fields, plus the materialized row tracking columns when they are kept."""
    if row_tracking is None:
        return list(fields)
    return [*fields, *hidden_fields(row_tracking.row_id, row_tracking.commit_version)]


def _field_id(field: Any) -> bytes | None:
    return (field.metadata or {}).get(b"PARQUET:field_id")


def _column_index(table: Any, by_id: bool) -> tuple[dict[str, int], dict[bytes, int]]:
    by_lower = {name.lower(): i for i, name in enumerate(table.column_names)}
    ids = {fid: i for i, f in enumerate(table.schema) if (fid := _field_id(f)) is not None} if by_id else {}
    return by_lower, ids


def _same_columns(table: Any, target: Any, by_lower: dict[str, int]) -> Any:
    """The table's columns in target order when each has the target's type (a reorder only), else None."""
    indices = [by_lower.get(f.name.lower()) for f in target]
    if any(i is None for i in indices):
        return None
    picked = table.select(indices)
    if not picked.schema.equals(target, check_metadata=False):
        return None
    return picked.rename_columns(target.names)


def conform(table: Any, target: Any, *, by_id: bool = False) -> Any:
    """Reorder, cast and null-fill a file's columns to the table schema.

    A table already in the target schema (the common case: files written by the same writer) is
    returned as is, without a per-column pass.
    """
    import pyarrow as pa

    if table.schema.equals(target, check_metadata=False) and (not by_id or table.schema.equals(target, True)):
        return table
    by_lower, ids = _column_index(table, by_id)
    if not by_id and table.num_columns == len(by_lower):
        same = _same_columns(table, target, by_lower)
        if same is not None:
            return same
    columns = []
    for field in target:
        fid = _field_id(field)  # the hidden row-tracking columns have no id: matched by name
        i = ids.get(fid) if by_id and ids and fid is not None else by_lower.get(field.name.lower())
        if i is None:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(i)
        if not col.type.equals(field.type):
            try:
                col = cast(col, field.type)  # safe: a lossy conversion raises
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise NeedsSparkRewrite(
                    f"column {field.name}: cannot convert {col.type} to {field.type}: {exc}"
                ) from exc
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)
