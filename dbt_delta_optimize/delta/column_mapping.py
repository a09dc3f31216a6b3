"""Column mapping (PROTOCOL.md "Column Mapping"): logical schema names -> physical Parquet names and field ids.

With ``delta.columnMapping.mode`` = ``name`` or ``id``, data files and the log use each field's
physical name (``delta.columnMapping.physicalName``), stable across renames, and Parquet field ids
(``delta.columnMapping.id``); users keep writing logical names. A dropped column's physical name is
no longer in the schema, so its data in old files is never read back; a re-added column of the same
logical name gets a new physical name. This module turns the logical schema into the physical one
that readers and writers use (delta-spark's ``DeltaColumnMapping.createPhysicalSchema``): fields
renamed to their physical names, each carrying Spark's ``parquet.field.id`` metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "FIELD_ID_KEY",
    "ID_KEY",
    "PHYSICAL_NAME_KEY",
    "MappingMode",
    "mapping_mode",
    "physical_column_path",
    "physical_fields",
    "physical_partition_columns",
]

MODE_KEY = "delta.columnMapping.mode"
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
ID_KEY = "delta.columnMapping.id"
#: Spark's StructField metadata key for the Parquet field id (ParquetUtils.FIELD_ID_METADATA_KEY).
FIELD_ID_KEY = "parquet.field.id"

MappingMode = Literal["none", "name", "id"]


def mapping_mode(configuration: Mapping[str, str]) -> MappingMode:
    """The table's column mapping mode ("none" when unset)."""
    mode = (configuration.get(MODE_KEY) or "none").lower()
    if mode == "name":
        return "name"
    if mode == "id":
        return "id"
    return "none"


def _physical_type(t: Any) -> Any:
    if isinstance(t, str):
        return t
    kind = t.get("type")
    if kind == "struct":
        return {**t, "fields": [_physical_field(f) for f in t.get("fields", ())]}
    if kind == "array":
        return {**t, "elementType": _physical_type(t["elementType"])}
    if kind == "map":
        return {**t, "keyType": _physical_type(t["keyType"]), "valueType": _physical_type(t["valueType"])}
    return t


def _physical_field(f: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(f.get("metadata") or {})
    out_meta: dict[str, Any] = {k: v for k, v in meta.items() if not k.startswith("delta.columnMapping.")}
    if ID_KEY in meta:
        out_meta[FIELD_ID_KEY] = int(meta[ID_KEY])
    return {
        **f,
        "name": meta.get(PHYSICAL_NAME_KEY, f["name"]),
        "type": _physical_type(f["type"]),
        "metadata": out_meta,
    }


def physical_fields(fields: Sequence[Mapping[str, Any]], mode: MappingMode) -> list[dict[str, Any]]:
    """The fields as stored in Parquet: physical names and field ids at every level (unchanged for "none")."""
    if mode == "none":
        return [dict(f) for f in fields]
    return [_physical_field(f) for f in fields]


def _physical_name(f: Mapping[str, Any], mode: MappingMode) -> str:
    name: str = f["name"]
    if mode == "none":
        return name
    return str((f.get("metadata") or {}).get(PHYSICAL_NAME_KEY, name))


def physical_partition_columns(
    schema: Mapping[str, Any], partition_columns: Sequence[str], mode: MappingMode
) -> tuple[str, ...]:
    """Partition columns by physical name: the keys of ``partitionValues`` in the log."""
    if mode == "none":
        return tuple(partition_columns)
    by_name = {f["name"].lower(): f for f in schema.get("fields", ())}
    return tuple(_physical_name(by_name[c.lower()], mode) if c.lower() in by_name else c for c in partition_columns)


def physical_column_path(
    fields: Sequence[Mapping[str, Any]], path: Sequence[str], mode: MappingMode
) -> tuple[str, ...]:
    """A logical column path (struct fields only, resolved case-insensitively) as physical names."""
    out: list[str] = []
    current: Sequence[Mapping[str, Any]] = fields
    for part in path:
        found = next((f for f in current if f["name"].lower() == part.lower()), None)
        if found is None:
            raise KeyError(".".join(path))
        out.append(_physical_name(found, mode))
        t = found["type"]
        current = t.get("fields", ()) if isinstance(t, dict) and t.get("type") == "struct" else ()
    return tuple(out)
