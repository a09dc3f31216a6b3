"""AddFile statistics for a Parquet file we wrote, equal to what delta-spark 4.4 writes.

delta-spark computes a file's stats while writing it (``StatisticsCollection.statsCollector``:
``count(*)``, ``min``/``max`` per stats column with string truncation, ``sum(isNull)`` null counts,
serialised by ``to_json``). Our executor writes compacted files itself, so it rebuilds the same
JSON from the written file's Parquet footer, without a Spark job.

The footer cannot answer everything: Spark writes no statistics for INT96 timestamps (its default
timestamp encoding) nor for chunks whose min+max exceed 4 KiB, column-chunk null counts of an
array/map leaf mix null arrays with empty ones and null elements, and writers other than
parquet-java (pyarrow's parquet-cpp) leave NaN out of float/double bounds, where Spark's max is NaN. ``stats_from_parquet`` (footer
only) leaves such values out, which data skipping reads as "unknown"; ``stats_from_file`` reads just
those columns' data to fill them in, so its output matches delta-spark.

Known differences, both numeric no-ops (readers parse the same values):
* ``-0.0`` vs ``0.0``: Spark keeps whichever zero came first in row order; a footer only knows the
  sign of its min/max, so footer-derived zero bounds may differ in sign (the data path is exact).
* floats/doubles are printed with the shortest-repr rule of JDK >= 19 ``Float/Double.toString``;
  JDK 17's FloatingDecimal sometimes prints more digits for the same value (``1.9999999999999998E23``
  for ``2.0E23``, ``-1.68127662E15`` for float ``-1.6812766E15``; mostly huge integral magnitudes).
  Both parse to the same double/float32.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from ..delta.stats_schema import (
    DEFAULT_NUM_INDEXED_COLS,
    DEFAULT_STRING_PREFIX_LENGTH,
    StatsField,
    configured_string_prefix_length,
    parse_stats_columns,
    stats_columns,
)
from .stats_footer import LeafStats, collect_leaf_stats, fill_from_data
from .stats_format import (
    format_date,
    format_timestamp,
    format_timestamp_ntz,
    has_tight_bounds,
    java_float_string,
    json_string,
    render_value,
    truncate_max_string,
    truncate_min_string,
)

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from ..delta.actions import Protocol


__all__ = [
    "DEFAULT_NUM_INDEXED_COLS",
    "DEFAULT_STRING_PREFIX_LENGTH",
    "StatsField",
    "configured_string_prefix_length",
    "format_date",
    "format_timestamp",
    "format_timestamp_ntz",
    "java_float_string",
    "parse_stats_columns",
    "stats_columns",
    "stats_from_file",
    "stats_from_metadata",
    "stats_from_parquet",
    "truncate_max_string",
    "truncate_min_string",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Renderer:
    """Renders one file's stats JSON exactly as delta-spark's ``to_json`` of its stats struct."""

    by_path: Mapping[tuple[str, ...], LeafStats]
    prefix: int
    time_zone: str

    def has_bounds(self, f: StatsField, path: tuple[str, ...]) -> bool:
        """delta-spark only aggregates min/max over eligible columns present in the file; a struct
        with none of those is left out of minValues/maxValues (not even ``{}``)."""
        if f.is_struct:
            return any(self.has_bounds(c, (*path, c.name)) for c in f.children or ())
        return f.has_min_max and self.by_path[path].target is not None

    def value_of(self, leaf: LeafStats, which: str) -> str | None:
        if not leaf.field.has_min_max or not leaf.min_max_known or leaf.all_null:
            return None
        v = leaf.min if which == "min" else leaf.max
        if v is not None and leaf.field.type == "string":
            v = truncate_min_string(v, self.prefix) if which == "min" else truncate_max_string(v, self.prefix)
        return None if v is None else render_value(v, leaf.field.type, self.time_zone)

    def leaf(self, f: StatsField, path: tuple[str, ...], which: str) -> str | None:
        leaf = self.by_path[path]
        if which == "null":
            return None if leaf.null_count is None else str(int(leaf.null_count))
        return self.value_of(leaf, which) if f.has_min_max else None

    def obj(self, fs: Sequence[StatsField], parent: tuple[str, ...], which: str) -> str:
        parts = []
        for f in fs:
            path = (*parent, f.name)
            if f.is_struct:
                keep = self.has_bounds(f, path) if which != "null" else f.has_leaf_below
                rendered = self.obj(f.children or (), path, which) if keep else None
            else:
                rendered = self.leaf(f, path, which)
            if rendered is not None:
                parts.append(f"{json_string(f.name)}:{rendered}")
        return "{" + ",".join(parts) + "}"


def _render(
    num_rows: int,
    fields: Sequence[StatsField],
    leaves: list[LeafStats],
    *,
    prefix: int,
    time_zone: str,
    tight_bounds: bool | None,
) -> str:
    """``tight_bounds`` None: no ``tightBounds`` key (a table without deletion vectors)."""
    r = _Renderer({leaf.path: leaf for leaf in leaves}, prefix, time_zone)
    out = [f'"numRecords":{num_rows}']
    if any(r.has_bounds(f, (f.name,)) for f in fields):
        out.append(f'"minValues":{r.obj(fields, (), "min")}')
        out.append(f'"maxValues":{r.obj(fields, (), "max")}')
    if any(f.has_leaf_below for f in fields):
        out.append(f'"nullCount":{r.obj(fields, (), "null")}')
    if tight_bounds is not None:
        out.append(f'"tightBounds":{"true" if tight_bounds else "false"}')
    return "{" + ",".join(out) + "}"


def _stats(
    metadata: pq.FileMetaData,
    path: str | BinaryIO | Callable[[], BinaryIO] | None,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    protocol: Protocol | None,
    session_time_zone: str,
    string_prefix_length: int | None,
    tight_bounds: bool = True,
    inexact: frozenset[tuple[int, int]] = frozenset(),
) -> str:
    fields = stats_columns(schema, partition_columns, configuration)
    prefix = (
        string_prefix_length if string_prefix_length is not None else configured_string_prefix_length(configuration)
    )
    num_rows, leaves = collect_leaf_stats(metadata, fields, inexact)
    if path is not None:
        fill_from_data(path, metadata, leaves)
    return _render(
        num_rows,
        fields,
        leaves,
        prefix=prefix,
        time_zone=session_time_zone,
        tight_bounds=tight_bounds if has_tight_bounds(protocol, configuration) else None,
    )


def stats_from_parquet(
    metadata: pq.FileMetaData,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    *,
    protocol: Protocol | None = None,
    session_time_zone: str = "UTC",
    string_prefix_length: int | None = None,
) -> str:
    """Stats JSON from the footer alone; values the footer cannot give are left out (= unknown).

    ``protocol`` decides ``tightBounds`` (deletion-vector tables); without it the table property
    ``delta.enableDeletionVectors`` does. ``session_time_zone`` is Spark's session zone, which
    delta-spark's to_json uses for timestamp bounds. ``string_prefix_length`` overrides the table
    property / session default (``spark.databricks.io.skipping.stringPrefixLength``).
    """
    return _stats(
        metadata, None, schema, partition_columns, configuration, protocol, session_time_zone, string_prefix_length
    )


def stats_from_metadata(
    metadata: pq.FileMetaData,
    source: str | BinaryIO | Callable[[], BinaryIO],
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    *,
    protocol: Protocol | None = None,
    session_time_zone: str = "UTC",
    string_prefix_length: int | None = None,
    tight_bounds: bool = True,
    inexact_chunks: frozenset[tuple[int, int]] = frozenset(),
) -> str:
    """``stats_from_file`` for a file whose footer is at hand (the writer's own, or one analyze decoded):
    ``source`` (a path, a binary file, or a function opening one) is read only for the columns the footer
    cannot answer for. ``inexact_chunks``: (row group, column) chunks whose bounds are truncated."""
    return _stats(
        metadata,
        source,
        schema,
        partition_columns,
        configuration,
        protocol,
        session_time_zone,
        string_prefix_length,
        tight_bounds,
        inexact_chunks,
    )


def stats_from_file(
    path: str | BinaryIO,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    *,
    protocol: Protocol | None = None,
    session_time_zone: str = "UTC",
    string_prefix_length: int | None = None,
    read_data: bool = True,
    tight_bounds: bool = True,
) -> str:
    """Stats JSON for a Parquet file (a local path or an open binary file): its footer, plus (``read_data``)
    the data of only those columns the footer cannot answer for (INT96 timestamps, oversized strings, null
    arrays/maps).

    ``tight_bounds=False`` (on a table with deletion vectors) records the physical file's stats as wide
    bounds, as delta-spark does for a file with a deletion vector (``updateStatsToWideBounds``): the
    bounds and null counts are of every row in the file, deleted ones included."""
    import pyarrow.parquet as pq

    metadata = pq.read_metadata(path)
    return _stats(
        metadata,
        path if read_data else None,
        schema,
        partition_columns,
        configuration,
        protocol,
        session_time_zone,
        string_prefix_length,
        tight_bounds,
    )
