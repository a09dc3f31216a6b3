"""Reading min/max/null counts/row counts of a Parquet file from its footer (and, where the
footer cannot tell, from the data), decoded to the values delta-spark would have collected."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .. import arrow_kernels as ak
from ..delta.stats_schema import FLOATING_TYPES, INTEGRAL_TYPES, StatsField, stats_leaves
from .stats_format import (
    GREGORIAN_START_DAYS,
    GREGORIAN_START_MICROS,
    LEGACY_KEYS,
    NAN_AWARE_WRITERS,
    decimal_scale,
    f32,
)

if TYPE_CHECKING:
    import pyarrow.parquet as pq


# Reading the footer
# --------------------------------------------------------------------------------------------


log = logging.getLogger(__name__)


@dataclass
class LeafStats:
    """What we know of one stats leaf; ``None`` values are unknown until data fills them in."""

    path: tuple[str, ...]
    field: StatsField
    target: tuple[str, ...] | None  # resolved path of the column in the file; None if missing
    null_count: int | None = None
    min: Any = None
    max: Any = None
    min_max_known: bool = True  # False: some chunk lacked min/max while having values
    all_null: bool = False  # no non-null value in the file: min/max are null (omitted)
    zero_ambiguous: bool = False  # a float bound is a zero whose sign depends on row order


@dataclass
class _FileColumns:
    """Parquet leaf columns by path: non-repeated primitive leaves, and the leaf indices under each
    array/map/struct (a Delta leaf may be a Parquet group: arrays, maps, variant)."""

    leaves: dict[tuple[str, ...], int] = field(default_factory=dict)
    groups: dict[tuple[str, ...], list[int]] = field(default_factory=dict)

    def resolve(self, path: tuple[str, ...]) -> tuple[str, ...] | None:
        """Exact path, else the unique case-insensitive match (Spark resolves names that way)."""
        if path in self.leaves or path in self.groups:
            return path
        low = tuple(p.lower() for p in path)
        hits = [p for p in (*self.leaves, *self.groups) if tuple(x.lower() for x in p) == low]
        return hits[0] if len(hits) == 1 else None


def _storage(t: Any) -> Any:
    import pyarrow as pa

    return t.storage_type if isinstance(t, pa.ExtensionType) else t


def _is_list(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _leaf_count(t: Any) -> int:
    """How many Parquet leaf columns an Arrow type occupies."""
    import pyarrow as pa

    t = _storage(t)
    if pa.types.is_struct(t):
        return sum(_leaf_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaf_count(t.key_type) + _leaf_count(t.item_type)
    if _is_list(t):
        return _leaf_count(t.value_type)
    return 1


def _walk_field(out: _FileColumns, f: Any, path: tuple[str, ...], idx: int) -> int:
    """Record one Arrow field's leaves and groups starting at leaf ``idx``; returns the next index."""
    import pyarrow as pa

    t = _storage(f.type)
    n = _leaf_count(t)
    nested = pa.types.is_map(t) or _is_list(t)
    if pa.types.is_struct(t) or nested:
        out.groups[path] = list(range(idx, idx + n))
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            idx = _walk_field(out, t.field(i), (*path, t.field(i).name), idx)
        return idx
    if n == 1 and not nested:
        out.leaves[path] = idx
    return idx + n


def _columns_from_paths(metadata: pq.FileMetaData) -> _FileColumns:
    """Fallback from Parquet's dotted column paths (should not be needed)."""
    out = _FileColumns()
    for i in range(metadata.num_columns):
        col = metadata.schema.column(i)
        parts = tuple(col.path.split("."))
        if col.max_repetition_level == 0:
            out.leaves[parts] = i
        for k in range(1, len(parts)):
            out.groups.setdefault(parts[:k], []).append(i)
    return out


def _file_columns(metadata: pq.FileMetaData) -> _FileColumns:
    out, idx = _FileColumns(), 0
    for f in metadata.schema.to_arrow_schema():
        idx = _walk_field(out, f, (f.name,), idx)
    return out if idx == metadata.num_columns else _columns_from_paths(metadata)


def _chunk_null_count(row_group: Any, col: int) -> int | None:
    st = row_group.column(col).statistics
    if st is None or not st.has_null_count:
        return None
    return int(st.null_count)


def _spark_gt(a: Any, b: Any) -> bool:
    """a > b in Spark's ordering: NaN above everything, -0.0 == 0.0."""
    if isinstance(a, float) or isinstance(b, float):
        an, bn = math.isnan(a), math.isnan(b)
        if an or bn:
            return an and not bn
    return bool(a > b)


def _decode_decimal(raw: Any, col: Any, t: str) -> Decimal:
    unscaled = int.from_bytes(raw, "big", signed=True) if isinstance(raw, (bytes, bytearray)) else int(raw)
    file_scale = col.scale if col.scale is not None and col.scale >= 0 else 0
    want = decimal_scale(t)
    if want is not None and want > file_scale:
        unscaled *= 10 ** (want - file_scale)
        file_scale = want
    sign = 1 if unscaled < 0 else 0
    return Decimal((sign, tuple(int(d) for d in str(abs(unscaled))), -file_scale))


_UNIT_TO_MICROS: dict[str, Any] = {
    "milliseconds": lambda v: v * 1000,
    "microseconds": lambda v: v,
    "nanoseconds": lambda v: v // 1000,
}


def _decode_timestamp(raw: Any, col: Any, legacy: bool) -> int:
    if col.physical_type != "INT64":
        raise _Unknown
    lt = json.loads(col.logical_type.to_json()) if col.logical_type is not None else {}
    unit = lt.get("timeUnit") if lt.get("Type") == "Timestamp" else None
    if unit is None:
        unit = {"TIMESTAMP_MILLIS": "milliseconds", "TIMESTAMP_MICROS": "microseconds"}.get(str(col.converted_type))
    if unit not in _UNIT_TO_MICROS:
        raise _Unknown
    v: int = _UNIT_TO_MICROS[unit](int(raw))
    if legacy and v < GREGORIAN_START_MICROS:
        raise _Unknown
    return v


def _decode_date(raw: Any, legacy: bool) -> int:
    v = int(raw)
    if legacy and v < GREGORIAN_START_DAYS:
        raise _Unknown
    return v


def _decode_raw(raw: Any, col: Any, t: str, legacy: bool) -> Any:
    """A footer min/max (physical value) as the Python value we render for Delta type ``t``."""
    if t == "string":
        return bytes(raw).decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    if t.startswith("decimal"):
        return _decode_decimal(raw, col, t)
    if t in ("timestamp", "timestamp_ntz"):
        return _decode_timestamp(raw, col, legacy)
    if t == "date":
        return _decode_date(raw, legacy)
    if t in INTEGRAL_TYPES:
        return int(raw)
    if t in FLOATING_TYPES:
        return f32(float(raw)) if t == "float" else float(raw)
    raise _Unknown


class _Unknown(Exception):
    """A footer value we cannot translate faithfully."""


@dataclass
class _Footer:
    """One file's footer, as the stats pass reads it."""

    metadata: Any
    cols: _FileColumns
    legacy: bool
    nan_in_bounds: bool
    row_groups: list[Any]
    #: (row group, column) chunks whose min or max the writer marked inexact (truncated): never trusted
    inexact: frozenset[tuple[int, int]] = frozenset()


def _group_null_count(footer: _Footer, target: tuple[str, ...]) -> int | None:
    """Null count of an array/map/variant leaf: 0 when provable from the footer, else unknown.

    A null array/map writes a null into every one of its leaf columns, so a leaf with no nulls
    at all proves there is no null array. Otherwise the count needs the data.
    """
    for c in footer.cols.groups[target]:
        if all(_chunk_null_count(rg, c) == 0 for rg in footer.row_groups):
            return 0
    return None


def _merge_bound(lo: Any, hi: Any, a: Any, b: Any, t: str, st: Any) -> tuple[Any, Any]:
    if t == "string":  # compare as UTF-8 bytes, like Spark and Parquet
        a_key, b_key = bytes(st.min_raw), bytes(st.max_raw)
        lo = (a_key, a) if lo is None or a_key < lo[0] else lo
        hi = (b_key, b) if hi is None or b_key > hi[0] else hi
        return lo, hi
    lo = a if lo is None or _spark_gt(lo, a) else lo
    hi = b if hi is None or _spark_gt(b, hi) else hi
    return lo, hi


def _chunk_bounds(footer: _Footer, col_idx: int, t: str) -> tuple[Any, Any, list[tuple[Any, Any]]] | None:
    """(min, max, per-row-group bounds) over all chunks of a column; None when a chunk cannot tell."""
    col_schema = footer.metadata.schema.column(col_idx)
    lo: Any = None
    hi: Any = None
    rg_bounds: list[tuple[Any, Any]] = []
    for rg_idx, rg in enumerate(footer.row_groups):
        st = rg.column(col_idx).statistics
        if (rg_idx, col_idx) in footer.inexact and rg.num_rows:
            return None  # a truncated bound (is_min/max_value_exact false): the data must tell
        if st is not None and st.has_min_max:
            try:
                a = _decode_raw(st.min_raw, col_schema, t, footer.legacy)
                b = _decode_raw(st.max_raw, col_schema, t, footer.legacy)
            except _Unknown:
                return None
            if t != "string":
                rg_bounds.append((a, b))
            lo, hi = _merge_bound(lo, hi, a, b, t, st)
        elif not (st is not None and st.has_null_count and st.null_count == rg.num_rows):
            return None  # values present but no min/max in the footer (an all-null chunk adds nothing)
    if t == "string":
        lo = lo[1] if lo is not None else None
        hi = hi[1] if hi is not None else None
    return lo, hi, rg_bounds


def _fill_leaf(leaf: LeafStats, footer: _Footer, col_idx: int) -> None:
    counts = [_chunk_null_count(rg, col_idx) for rg in footer.row_groups]
    leaf.null_count = sum(c for c in counts if c is not None) if all(c is not None for c in counts) else None
    t = leaf.field.type
    if not leaf.field.has_min_max:
        return
    bounds = None if (t in FLOATING_TYPES and not footer.nan_in_bounds) else _chunk_bounds(footer, col_idx, t)
    if bounds is None:
        leaf.min_max_known = False
        return
    lo, hi, rg_bounds = bounds
    if t in FLOATING_TYPES and (lo == 0 or hi == 0):
        lo, hi, leaf.zero_ambiguous = _zero_bounds(lo, hi, rg_bounds)
    leaf.min, leaf.max = lo, hi
    leaf.all_null = lo is None


def collect_leaf_stats(
    metadata: pq.FileMetaData,
    fields: Sequence[StatsField],
    inexact: frozenset[tuple[int, int]] = frozenset(),
) -> tuple[int, list[LeafStats]]:
    """Footer pass: numRecords and whatever each stats leaf's column chunks tell; ``inexact``: the
    (row group, column) chunks whose bounds the writer marked truncated (pyarrow does not say)."""
    num_rows = int(metadata.num_rows)
    footer = _Footer(
        metadata,
        _file_columns(metadata),
        any(k in (metadata.metadata or {}) for k in LEGACY_KEYS),
        # parquet-java (Spark's writer) orders NaN above everything in float/double min/max, like Spark;
        # parquet-cpp (pyarrow) and others leave NaN out, so their max may hide a NaN: never trust it.
        (metadata.created_by or "").startswith(NAN_AWARE_WRITERS),
        [metadata.row_group(i) for i in range(metadata.num_row_groups)],
        inexact,
    )
    out: list[LeafStats] = []
    for path, f in stats_leaves(fields):
        target = footer.cols.resolve(path)
        leaf = LeafStats(path, f, target)
        out.append(leaf)
        if target is None:
            # Not in the file (schema evolution): delta-spark counts every row as null, no min/max.
            leaf.null_count, leaf.all_null = num_rows, True
        elif num_rows == 0:
            leaf.all_null = True  # Spark's min/max and sum() over no rows are all null
        elif target not in footer.cols.leaves:  # array, map, variant...: null count only
            leaf.null_count = _group_null_count(footer, target)
        else:
            _fill_leaf(leaf, footer, footer.cols.leaves[target])
    return num_rows, out


def _neg_zero(v: float) -> bool:
    return v == 0 and math.copysign(1.0, v) < 0


def _zero_bounds(lo: float, hi: float, rg_bounds: list[tuple[float, float]]) -> tuple[float, float, bool]:
    """Signs of zero bounds. Spark keeps the first zero in row order (-0.0 == 0.0 for it) while
    Parquet orders -0.0 < 0.0, so the footer fixes the sign only when one kind of zero is absent."""
    ambiguous = False
    if lo == 0:  # nothing negative: a -0.0 exists iff some chunk's min is -0.0
        if not any(_neg_zero(a) for a, _ in rg_bounds):
            lo = 0.0
        elif all(_neg_zero(b) for _, b in rg_bounds):
            lo = -0.0  # every chunk holds only -0.0 (and nulls)
        else:
            ambiguous = True
    if hi == 0:  # nothing positive or NaN: a +0.0 exists iff some chunk's max is +0.0
        if all(_neg_zero(b) or b < 0 for _, b in rg_bounds):
            hi = -0.0
        elif all(a == 0 and not _neg_zero(a) for a, _ in rg_bounds):
            hi = 0.0  # every chunk holds only +0.0
        else:
            ambiguous = True
    return lo, hi, ambiguous


# --------------------------------------------------------------------------------------------
# Filling gaps from the data
# --------------------------------------------------------------------------------------------


def _navigate(chunk: Any, names: Sequence[str]) -> Any:
    """Child array at ``names`` below a struct array, with ancestors' nulls applied."""
    import pyarrow as pa

    arr = chunk
    for name in names:
        t = arr.type
        i = t.get_field_index(name)
        if i < 0:
            low = [j for j in range(t.num_fields) if t.field(j).name.lower() == name.lower()]
            i = low[0]
        arr = arr.flatten()[i] if isinstance(arr, pa.StructArray) else arr.field(i)
    return arr


def _first_zero(values: Any) -> float:
    """The first zero in row order: Spark keeps the earliest of tied (-0.0 == 0.0) values."""
    for chunk in values.chunks:
        i = ak.index(chunk, 0.0).as_py()
        if i is not None and i >= 0:
            return float(chunk[i].as_py())
    return 0.0


def _data_min_max(values: Any, t: str) -> tuple[Any, Any]:
    """Spark's min/max of a column read back from the file."""
    import pyarrow as pa

    if values.null_count == len(values):
        return None, None
    if t in FLOATING_TYPES:
        values = ak.cast(values, pa.float64())
        nan = ak.is_nan(values)
        has_nan = bool(ak.any_(nan).as_py())
        rest = ak.filter_(values, ak.invert(ak.fill_null(nan, False)))
        mm = ak.min_max(rest)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None:
            return math.nan, math.nan
        if lo == 0:
            lo = _first_zero(values)
        if has_nan:
            hi = math.nan
        elif hi == 0:
            hi = _first_zero(values)
        return lo, hi
    if t in ("timestamp", "timestamp_ntz"):
        if not pa.types.is_timestamp(values.type) or values.type.unit != "us":
            values = ak.cast(values, pa.timestamp("us", getattr(values.type, "tz", None)))  # also date -> ntz
        values = ak.cast(values, pa.int64())
    elif t == "date":
        values = ak.cast(values, pa.int32())
    elif t == "string" and not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        values = ak.cast(values, pa.string())
    mm = ak.min_max(values)
    return mm["min"].as_py(), mm["max"].as_py()


def fill_from_data(path: Any, metadata: pq.FileMetaData, leaves: list[LeafStats]) -> None:
    """Read only the columns the footer could not answer for, and compute what delta-spark would."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    todo = [
        leaf
        for leaf in leaves
        if leaf.target is not None
        and (leaf.null_count is None or leaf.zero_ambiguous or (leaf.field.has_min_max and not leaf.min_max_known))
    ]
    if not todo or metadata.num_rows == 0:
        return
    pf = pq.ParquetFile(path() if callable(path) else path, coerce_int96_timestamp_unit="us")
    tops = sorted({leaf.target[0] for leaf in todo if leaf.target})
    table = pf.read(columns=tops, use_threads=False)  # callers read files in parallel (analyze, bin tasks)
    for leaf in todo:
        assert leaf.target is not None
        try:
            column = table.column(leaf.target[0])
            values = pa.chunked_array([_navigate(c, leaf.target[1:]) for c in column.chunks])
            if leaf.null_count is None:
                leaf.null_count = values.null_count
            if leaf.field.has_min_max and (leaf.zero_ambiguous or not leaf.min_max_known):
                leaf.min, leaf.max = _data_min_max(values, leaf.field.type)
                leaf.min_max_known = True
                leaf.zero_ambiguous = False
                leaf.all_null = leaf.min is None
        except (pa.ArrowException, KeyError, IndexError, TypeError, ValueError) as exc:
            # Unexpected layout: leave the value out (unknown), which is always safe for readers.
            log.warning("stats: cannot read %s from %s (%s); leaving it out", ".".join(leaf.target), path, exc)


# --------------------------------------------------------------------------------------------
# Assembling the JSON
# --------------------------------------------------------------------------------------------
