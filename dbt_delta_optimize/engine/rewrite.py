"""Bin rewriting with Arrow: stream a bin's Parquet files into one file, inside a Spark task.

Compaction does not change rows, so it needs no Spark SQL plan: decoding and re-encoding the
files with Arrow's C++ Parquet reader and writer is several times cheaper than a DataFrame
``coalesce(1)`` write, and memory stays bounded (row groups are streamed and buffered up to
a byte target). The executor runs this as one Spark task per bin; anything the Arrow path
cannot represent faithfully (legacy-calendar files, unconvertible schemas) raises
:class:`NeedsSparkRewrite` and that bin is rewritten by Spark instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["NeedsSparkRewrite", "arrow_schema", "input_path", "rewrite_bin_task", "rewrite_files"]

#: Footer keys Spark writes when values use the legacy hybrid calendar (must be rebased by Spark).
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
DEFAULT_ROW_GROUP_BYTES = 128 * 1024 * 1024


class NeedsSparkRewrite(Exception):
    """This bin cannot be rewritten faithfully by Arrow; use the Spark DataFrame path."""


def _arrow_type(t: Any) -> Any:
    import pyarrow as pa

    if isinstance(t, str):
        simple = {
            "string": pa.string(),
            "long": pa.int64(),
            "integer": pa.int32(),
            "short": pa.int16(),
            "byte": pa.int8(),
            "float": pa.float32(),
            "double": pa.float64(),
            "boolean": pa.bool_(),
            "binary": pa.binary(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "timestamp_ntz": pa.timestamp("us"),
        }
        if t in simple:
            return simple[t]
        if t == "variant":  # the unshredded struct the table's writer used (delta/physical_layout.py)
            from ..delta.physical_layout import variant_arrow_type

            return variant_arrow_type()
        if t.startswith("decimal("):
            p, s = t[len("decimal(") : -1].split(",")
            return pa.decimal128(int(p), int(s))
        raise NeedsSparkRewrite(f"type {t} is not handled by the Arrow rewriter")
    kind = t.get("type")
    if kind == "struct":
        return pa.struct([_arrow_field(f) for f in t["fields"]])
    if kind == "array":
        return pa.list_(pa.field("element", _arrow_type(t["elementType"]), t.get("containsNull", True)))
    if kind == "map":
        return pa.map_(
            _arrow_type(t["keyType"]), pa.field("value", _arrow_type(t["valueType"]), t.get("valueContainsNull", True))
        )
    raise NeedsSparkRewrite(f"type {kind} is not handled by the Arrow rewriter")


def _arrow_field(f: Mapping[str, Any]) -> Any:
    """One Arrow field; a Parquet field id (column mapping's ``parquet.field.id``) goes into its metadata."""
    import pyarrow as pa

    field_id = (f.get("metadata") or {}).get("parquet.field.id")
    meta = None if field_id is None else {b"PARQUET:field_id": str(int(field_id)).encode()}
    return pa.field(f["name"], _arrow_type(f["type"]), True, metadata=meta)


def arrow_schema(fields: Sequence[Mapping[str, Any]]) -> Any:
    """Arrow schema of the table's data columns (physical Delta schema fields, partition columns excluded)."""
    import pyarrow as pa

    return pa.schema([_arrow_field(f) for f in fields])


def _field_id(field: Any) -> bytes | None:
    return (field.metadata or {}).get(b"PARQUET:field_id")


def _conform(table: Any, target: Any, *, by_id: bool = False) -> Any:
    """Reorder, cast and null-fill a file's columns to the table schema.

    Columns are matched by physical name case-insensitively, or (column mapping's id mode) by Parquet
    field id. A column the schema no longer has (a dropped column) is left out; a widened type
    (type widening: int -> long, float -> double, date -> timestamp_ntz, wider decimals) is cast.
    """
    import pyarrow as pa

    by_lower = {name.lower(): i for i, name in enumerate(table.column_names)}
    ids = {_field_id(f): i for i, f in enumerate(table.schema) if _field_id(f) is not None} if by_id else {}
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
                col = col.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise NeedsSparkRewrite(
                    f"column {field.name}: cannot convert {col.type} to {field.type}: {exc}"
                ) from exc
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)


def _live_row_groups(
    pf: Any, target: Any, deleted: Any, fill: Callable[[Any, int], Any] | None = None, *, by_id: bool = False
) -> Any:
    """A file's row groups in the table schema, without the rows its deletion vector deletes (by position).

    ``fill`` (the row tracking step) sees each row group with its physical start position, before the
    deleted rows are dropped, so row ids come from physical positions as the protocol defines them.
    """
    start = 0
    for rg in range(pf.num_row_groups):
        t = _conform(pf.read_row_group(rg), target, by_id=by_id)
        if fill is not None:
            t = fill(t, start)
        keep = deleted.keep(start, t.num_rows) if deleted is not None else None
        start += t.num_rows
        yield t if keep is None else t.filter(keep)


def input_path(item: str | Mapping[str, Any]) -> str:
    """An input of a bin: a path, or ``{"path", "deletionVector"}`` (the DV as logged) for a file with deleted rows."""
    return item if isinstance(item, str) else str(item["path"])


def rewrite_files(
    inputs: Sequence[str | Mapping[str, Any]],
    output: str,
    fields: Sequence[Mapping[str, Any]],
    *,
    compression: str = "snappy",
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    opener: Callable[[str], Any] | None = None,
    deleted: Callable[[Mapping[str, Any]], Any] | None = None,
    row_tracking: Mapping[str, Any] | None = None,
    by_id: bool = False,
) -> int:
    """Stream ``inputs`` (opened by ``opener``, else as local files) into one local Parquet file at ``output``.

    An input with a deletion vector loses the rows it deletes (``deleted`` decodes the DV into a
    ``DeletedRows``). ``row_tracking`` (``row_tracking_spec``): also write each row's stable row id
    and commit version, from its physical position (before deleted rows are dropped).
    Returns the number of rows written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = arrow_schema(_with_hidden_fields(fields, row_tracking))
    rows = 0
    buffered: list[Any] = []
    buffered_bytes = 0
    os.makedirs(os.path.dirname(output), exist_ok=True)
    writer = pq.ParquetWriter(
        output,
        target,
        compression=None if compression in ("none", "uncompressed") else compression,
        use_compliant_nested_type=True,
        coerce_timestamps="us",
        allow_truncated_timestamps=False,
        write_statistics=True,
    )
    try:
        for index, item in enumerate(inputs):
            path = input_path(item)
            dv = None if isinstance(item, str) else item.get("deletionVector")
            removed = deleted(dv) if dv and deleted is not None else None
            if dv and removed is None:
                raise ValueError(f"{path} has a deletion vector but no way to read it was given")
            pf = pq.ParquetFile(path if opener is None else opener(path), coerce_int96_timestamp_unit="us")
            meta = pf.metadata.metadata or {}
            if any(k in meta for k in _LEGACY_KEYS):
                raise NeedsSparkRewrite(f"{os.path.basename(path)} uses Spark's legacy hybrid calendar")
            for t in _live_row_groups(pf, target, removed, _row_tracking_filler(row_tracking, index), by_id=by_id):
                buffered.append(t)
                buffered_bytes += t.nbytes
                rows += t.num_rows
                if buffered_bytes >= row_group_bytes:
                    writer.write_table(
                        pa.concat_tables(buffered), row_group_size=max(1, sum(b.num_rows for b in buffered))
                    )
                    buffered, buffered_bytes = [], 0
        if buffered:
            writer.write_table(pa.concat_tables(buffered), row_group_size=max(1, sum(b.num_rows for b in buffered)))
    except BaseException:
        writer.close()
        try:
            os.unlink(output)
        except FileNotFoundError:
            pass
        raise
    writer.close()
    return rows


def _with_hidden_fields(
    fields: Sequence[Mapping[str, Any]], row_tracking: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    """The table's data fields, plus the materialized row tracking columns when they are kept."""
    from .row_tracking_columns import row_tracking_fields

    return [*fields, *(row_tracking_fields(row_tracking) if row_tracking else [])]


def _row_tracking_filler(row_tracking: Mapping[str, Any] | None, index: int) -> Callable[[Any, int], Any] | None:
    """The row tracking step for input ``index``, or None when the table does not track rows."""
    if not row_tracking:
        return None
    return lambda table, position: _keep_row_tracking(table, row_tracking, index, position)


def _keep_row_tracking(table: Any, row_tracking: Mapping[str, Any] | None, index: int, position: int) -> Any:
    """Row tracking step: fill the hidden columns of input ``index``'s rows from ``position`` on."""
    if not row_tracking:
        return table
    from .row_tracking_columns import fill_row_tracking, positions_from

    base_row_id, default_commit_version = row_tracking["files"][index]
    positions = positions_from(position, table.num_rows)
    return fill_row_tracking(table, positions, base_row_id, default_commit_version, row_tracking)


def rewrite_bin_task(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Body of the Spark task for one bin (runs on an executor; arguments and result are plain data).

    On an object store (``spec["store"]``: the table root and its storage options) the inputs are
    read through the store and the output is written to a local temporary file, then uploaded.
    """
    from ..delta.storage import LocalStorage, Storage, storage_for

    store = spec.get("store")
    if store is None:
        return _rewrite(spec, spec["output"], None, LocalStorage())
    import tempfile

    storage: Storage = storage_for(store["base"], store["options"])
    with tempfile.TemporaryDirectory(prefix="ddo-bin-") as tmp:
        local = os.path.join(tmp, "part.parquet")
        result = _rewrite(spec, local, storage.open_input, storage)
        if "fallback" not in result:
            storage.put_file(spec["output"], local)
    return result


def _rewrite(spec: Mapping[str, Any], output: str, opener: Callable[[str], Any] | None, storage: Any) -> dict[str, Any]:
    from ..delta.deletion_vectors import load_deleted_rows

    root = spec.get("root") or (spec.get("store") or {}).get("base", "")
    try:
        rows = rewrite_files(
            spec["inputs"],
            output,
            spec["fields"],
            compression=spec.get("compression", "snappy"),
            row_group_bytes=spec.get("row_group_bytes", DEFAULT_ROW_GROUP_BYTES),
            opener=opener,
            deleted=lambda dv: load_deleted_rows(dv, root=root, storage=storage),
            row_tracking=spec.get("row_tracking"),
            by_id=spec.get("by_id", False),
        )
    except NeedsSparkRewrite as exc:
        return {"fallback": str(exc)}
    return {"rows": rows, "size": os.stat(output).st_size}
