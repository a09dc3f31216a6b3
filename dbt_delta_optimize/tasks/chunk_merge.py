"""Chunk merge: compact a bin of small files by joining their column chunks' pages, bytes unchanged.

Decoding and re-encoding every value is most of what compacting small files costs (docs/performance.md,
"Issue 45, pages joined"). A Parquet data page is self-contained: its header, levels and values need
nothing from the pages around it, except a dictionary page, which a chunk's pages share. So a column
whose chunks in every input hold no dictionary page is written as the concatenation of those chunks'
pages, compressed bytes unchanged: one output row group, one chunk per column, many pages. Its
statistics are the inputs' merged (null counts added, bounds compared in the column's sort order).

A column is joined only when that is exactly right: its Parquet type equals the output's (name,
physical and logical type, repetition, field id), every chunk is compressed with the output's codec,
uses only self-contained encodings, sits inside its file's data, and has exact statistics to merge.
Every other column (dictionary-encoded, another type, untrusted bounds) is read from the inputs and
re-encoded with pyarrow as the usual rewrite does, and its chunk placed beside the joined ones. The
plan is made from the inputs' footers alone, before a byte is written; a bin that cannot be merged
(nested columns, a missing column, legacy calendar values, nothing worth joining) is rewritten the
usual way with nothing to undo.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from ..errors import ValidationError
from . import thrift_compact as tc
from .arrow_schema import conform
from .parquet_copy import LEGACY_CALENDAR_KEYS, UNTRUSTED_WRITERS, WriterOptions, writer_kwargs
from .parquet_footer import MAGIC
from .thrift_compact import Fields

__all__ = ["MergeInput", "MergePlan", "Merged", "Sink", "plan_merge", "read_inputs", "reference_footer", "write_merge"]

#: Encodings whose pages need nothing from another page of the chunk (no dictionary).
_SELF_CONTAINED = frozenset({"PLAIN", "RLE", "BIT_PACKED"})
#: A joined chunk's pages are its inputs' pages: below this average size per input a column is re-encoded, so an
#: output is never a file of tiny pages (each page compresses alone and carries its own header).
MIN_CHUNK_BYTES = 4096
#: Writers whose byte-array bounds are exact (never truncated): parquet-mr (Spark) and Arrow C++ (pyarrow).
_EXACT_BYTES_WRITERS = ("parquet-mr version 1.", "parquet-cpp-arrow version ")
_TYPE = {"BOOLEAN": 0, "INT32": 1, "INT64": 2, "FLOAT": 4, "DOUBLE": 5, "BYTE_ARRAY": 6, "FIXED_LEN_BYTE_ARRAY": 7}
_PACK = {"INT32": "<i", "INT64": "<q", "FLOAT": "<f", "DOUBLE": "<d"}
_SIGNED = frozenset(_PACK)
_ENCODING = {
    "PLAIN": 0,
    "PLAIN_DICTIONARY": 2,
    "RLE": 3,
    "BIT_PACKED": 4,
    "DELTA_BINARY_PACKED": 5,
    "DELTA_LENGTH_BYTE_ARRAY": 6,
    "DELTA_BYTE_ARRAY": 7,
    "RLE_DICTIONARY": 8,
    "BYTE_STREAM_SPLIT": 9,
}
_CODEC = {"UNCOMPRESSED": 0, "SNAPPY": 1, "GZIP": 2, "BROTLI": 4, "LZ4": 5, "ZSTD": 6, "LZ4_RAW": 7}
#: Logical types of a byte array ordered as unsigned bytes (what Python's ``bytes`` comparison does).
_BYTES_ORDERED = frozenset({"NONE", "STRING", "ENUM", "JSON", "BSON"})


class Sink(Protocol):
    """Where the output goes: written front to back (slices of the inputs as memoryviews), never sought or read."""

    def write(self, data: bytes | memoryview, /) -> Any: ...


@dataclass(frozen=True)
class MergeInput:
    """One input file held in memory, with pyarrow's reading of its footer."""

    path: str
    data: bytes
    meta: Any  #: pyarrow ``FileMetaData``


@dataclass(frozen=True)
class MergePlan:
    """Which output columns are joined, and where each output column is in each input."""

    inputs: tuple[MergeInput, ...]
    names: tuple[str, ...]  #: the output's columns, in order
    joined: tuple[bool, ...]  #: per output column: pages joined (else re-encoded)
    index: tuple[tuple[int, ...], ...]  #: ``index[i][c]``: output column ``c``'s position in input ``i``

    @property
    def rows(self) -> int:
        """The rows of the inputs' row groups (what their chunks hold; a file's own total is not trusted)."""
        return sum(int(i.meta.row_group(rg).num_rows) for i in self.inputs for rg in range(i.meta.num_row_groups))


@dataclass(frozen=True)
class Merged:
    """What ``write_merge`` wrote: rows, bytes, joined columns and their bytes, and the new footer (Thrift)."""

    rows: int
    size: int
    columns_joined: int
    bytes_joined: int  #: compressed bytes of the joined pages
    footer: bytes = field(repr=False)
    metadata: Any = field(repr=False)  #: pyarrow's ``FileMetaData`` of ``footer`` (for the add action's stats)


def read_inputs(paths: Sequence[str], read: Callable[[str], bytes]) -> list[MergeInput]:
    """Each input read whole (``read``: the store's ``read_bytes``, one request a file, its bytes counted) with its
    footer as pyarrow reads it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = []
    for path in paths:
        data = read(path)
        out.append(MergeInput(path, data, pq.read_metadata(pa.BufferReader(data))))
    return out


# ---------------------------------------------------------------------------- planning
def _sortable(column: Any) -> bool:
    """Whether Python's order of the column's raw values is Parquet's order for it (so bounds merge exactly)."""
    physical, logical = column.physical_type, column.logical_type.type
    if physical in ("INT32", "INT64"):
        return not str(column.converted_type).startswith("UINT") and '"isSigned": false' not in (
            column.logical_type.to_json()
        )
    if physical == "BYTE_ARRAY":
        return logical in _BYTES_ORDERED and column.converted_type != "DECIMAL"
    return physical in ("BOOLEAN", "FLOAT", "DOUBLE")


def _chunk_ok(item: MergeInput, chunk: Any, rows: int, codec: str, data_end: int) -> bool:
    """Whether one chunk's pages can be moved as they are, with exact statistics to merge."""
    if chunk.compression != codec or chunk.has_dictionary_page or chunk.file_path or chunk.num_values != rows:
        return False
    if not set(chunk.encodings) <= _SELF_CONTAINED:
        return False
    start = chunk.data_page_offset
    if start < len(MAGIC) or start + chunk.total_compressed_size > data_end:
        return False
    st = chunk.statistics if chunk.is_stats_set else None
    if st is None or not st.has_null_count:
        return False
    if not st.has_min_max:
        return bool(st.null_count == chunk.num_values)  # all null: no bounds to merge
    if chunk.physical_type == "BYTE_ARRAY" and not _bytes_exact(item):
        return False
    lo, hi = st.min_raw, st.max_raw
    return not (isinstance(lo, float) and (math.isnan(lo) or math.isnan(hi)))


_DATA_PAGE, _DATA_PAGE_V2 = 0, 3


def _pages_ok(data: bytes, start: int, size: int, num_values: int) -> bool:
    """Whether the chunk's bytes are data pages that tile it exactly and hold its values, each page's checksum
    (when its writer wrote one) matching: a damaged input is never moved unread into a new file. The usual
    rewrite then decodes it and reports the damage, typed."""
    import zlib

    pos, end, values = start, start + size, 0
    view = memoryview(data)
    try:
        while pos < end:
            header, pos = tc.read_struct(view, pos)
            kind, length, crc = header.get(1), header.get(3), header.get(4)
            body = header.get(5 if kind == _DATA_PAGE else 8)
            if kind not in (_DATA_PAGE, _DATA_PAGE_V2) or not isinstance(body, dict) or not isinstance(length, int):
                return False
            if length < 0 or pos + length > end:
                return False
            if crc is not None and zlib.crc32(view[pos : pos + length]) != crc & 0xFFFFFFFF:
                return False
            values += int(body.get(1, -1))
            pos += length
    except ValueError:  # a header that does not decode
        return False
    return pos == end and values == num_values


def _bytes_exact(item: MergeInput) -> bool:
    return str(item.meta.created_by or "").startswith(_EXACT_BYTES_WRITERS)


class _Damaged(Exception):
    """An input's chunk is not the pages its footer describes: the bin goes to the usual rewrite."""


def _joinable(plan_inputs: Sequence[MergeInput], index: Sequence[Sequence[int]], c: int, codec: str) -> bool:
    """Whether output column ``c`` is joined: every chunk fits and they are large enough on average. Their pages
    are then walked (``_pages_ok``); a damaged one raises ``_Damaged``."""
    chunks = []
    for item, positions in zip(plan_inputs, index):
        data_end = len(item.data) - 8 - int(item.meta.serialized_size)
        for rg in range(item.meta.num_row_groups):
            group = item.meta.row_group(rg)
            if not _chunk_ok(item, group.column(positions[c]), group.num_rows, codec, data_end):
                return False
            chunks.append((item, group.column(positions[c])))
    if not chunks or sum(ch.total_compressed_size for _, ch in chunks) < MIN_CHUNK_BYTES * len(plan_inputs):
        return False
    for item, ch in chunks:
        if not _pages_ok(item.data, ch.data_page_offset, ch.total_compressed_size, ch.num_values):
            raise _Damaged(f"{item.path}: the pages of column {ch.path_in_schema!r} are not what its footer says")
    return True


def _positions(item: MergeInput, reference: Any) -> tuple[tuple[int, ...], tuple[bool, ...]] | str:
    """Where each output column is in one input, and whether its Parquet type is the output's; or why not."""
    schema = item.meta.schema
    by_name = {schema.column(j).path: j for j in range(len(schema))}
    positions, same = [], []
    for c in range(len(reference.schema)):
        want = reference.schema.column(c)
        j = by_name.get(want.path)
        if j is None:
            return f"{item.path} has no column {want.path!r}"
        positions.append(j)
        same.append(bool(schema.column(j).equals(want)) and _sortable(want))
    return tuple(positions), tuple(same)


def _bin_reason(inputs: Sequence[MergeInput], reference: Any) -> str | None:
    schema = reference.schema
    if any(schema.column(c).max_repetition_level or "." in schema.column(c).path for c in range(len(schema))):
        return "the table has nested columns"
    for item in inputs:
        if item.data[: len(MAGIC)] != MAGIC:
            return f"{item.path} does not start with Parquet's magic bytes"
        keys = item.meta.metadata or {}
        if any(k in keys for k in LEGACY_CALENDAR_KEYS):
            return f"{item.path} uses Spark's legacy hybrid calendar"
        if str(item.meta.created_by or "").startswith(UNTRUSTED_WRITERS):
            return f"{item.path} was written by {item.meta.created_by}, whose chunk sizes are not trusted"
    return None


def _unmaterialized(item: MergeInput, positions: Sequence[int], columns: Sequence[int]) -> bool:
    """Whether a row-tracking column may hold a null in this input (the usual rewrite fills those)."""
    for rg in range(item.meta.num_row_groups):
        for c in columns:
            chunk = item.meta.row_group(rg).column(positions[c])
            st = chunk.statistics if chunk.is_stats_set else None
            if st is None or not st.has_null_count or st.null_count != 0:
                return True
    return False


def plan_merge(
    inputs: Sequence[MergeInput], reference: Any, *, codec: str, materialized: Sequence[str] = ()
) -> MergePlan | str:
    """Decide from the footers alone which columns a bin joins; or say why it joins none.

    ``reference``: pyarrow's ``FileMetaData`` of the output schema as the usual rewrite writes it (no rows);
    ``codec``: the output's compression as Parquet names it (``SNAPPY``); ``materialized``: row tracking's
    columns, which must hold no null in any input (else the usual rewrite fills them).
    """
    why = _bin_reason(inputs, reference)
    if why is not None:
        return why
    tracked = [c for c in range(len(reference.schema)) if reference.schema.column(c).path in materialized]
    index, same = [], [True] * len(reference.schema)
    for item in inputs:
        found = _positions(item, reference)
        if isinstance(found, str):
            return found
        if tracked and _unmaterialized(item, found[0], tracked):
            return f"{item.path} has row tracking columns not materialized in every row"
        index.append(found[0])
        same = [a and b for a, b in zip(same, found[1])]
    try:
        joined = tuple(s and _joinable(inputs, index, c, codec) for c, s in enumerate(same))
    except _Damaged as exc:
        return str(exc)
    if not any(joined):
        return "no column's pages can be joined"
    names = tuple(reference.schema.column(c).path for c in range(len(reference.schema)))
    return MergePlan(tuple(inputs), names, joined, tuple(index))


# ---------------------------------------------------------------------------- footer entries
def _pack(physical: str, value: Any) -> bytes:
    if physical in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"):
        return bytes(value)
    if physical == "BOOLEAN":
        return b"\x01" if value else b"\x00"
    return struct.pack(_PACK[physical], value)


def _order_key(value: Any) -> Any:
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else value


def _statistics(physical: str, nulls: int | None, bounds: tuple[Any, Any] | None) -> Fields:
    """A ``Statistics`` struct: null count and exact bounds; the deprecated min/max too where pyarrow writes
    them (signed orders), so a merged chunk reads like one of pyarrow's."""
    lo, hi = (None, None) if bounds is None else (_pack(physical, bounds[0]), _pack(physical, bounds[1]))
    old = physical in _SIGNED
    return [
        (1, tc.BINARY, hi if old else None),
        (2, tc.BINARY, lo if old else None),
        (3, tc.I64, nulls),
        (5, tc.BINARY, hi),
        (6, tc.BINARY, lo),
    ]


def _merged_bounds(chunks: Sequence[Any], physical: str) -> tuple[Any, Any] | None:
    """The joined chunk's bounds, compared in the column's order; a zero bound is written as Parquet says
    writers write it (-0.0 as a minimum, +0.0 as a maximum), as pyarrow does in the usual rewrite."""
    bounded = [c.statistics for c in chunks if c.statistics.has_min_max]
    if not bounded:
        return None
    lo = min((s.min_raw for s in bounded), key=_order_key)
    hi = max((s.max_raw for s in bounded), key=_order_key)
    if physical in ("FLOAT", "DOUBLE"):
        lo = -0.0 if lo == 0 else lo
        hi = 0.0 if hi == 0 else hi
    return lo, hi


@dataclass(frozen=True)
class _Chunk:
    """What a column chunk's footer entry says, wherever its pages came from."""

    physical: str
    encodings: frozenset[str]
    codec: str
    num_values: int
    uncompressed: int
    compressed: int
    data_page: int  #: offset of the first data page in the output
    dictionary_page: int | None
    statistics: Fields | None

    def encode(self, name: str) -> Fields:
        md: Fields = [
            (1, tc.I32, _TYPE[self.physical]),
            (2, tc.LIST, (tc.I32, sorted(_ENCODING[e] for e in self.encodings))),
            (3, tc.LIST, (tc.BINARY, [name.encode("utf-8")])),
            (4, tc.I32, _CODEC[self.codec]),
            (5, tc.I64, self.num_values),
            (6, tc.I64, self.uncompressed),
            (7, tc.I64, self.compressed),
            (9, tc.I64, self.data_page),
            (11, tc.I64, self.dictionary_page),
            (12, tc.STRUCT, self.statistics),
        ]
        start = self.data_page if self.dictionary_page is None else min(self.data_page, self.dictionary_page)
        return [(2, tc.I64, start), (3, tc.STRUCT, md)]


# ---------------------------------------------------------------------------- writing
class _Output:
    """The output file written front to back, the position counted here (the sink is never asked)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.position = 0

    def write(self, data: bytes | memoryview) -> None:
        self.sink.write(data)
        self.position += len(data)


def _joined_chunk(out: _Output, plan: MergePlan, c: int) -> _Chunk:
    """Append every input's chunk of output column ``c``, pages unchanged."""
    start = out.position
    chunks = []
    for item, positions in zip(plan.inputs, plan.index):
        view = memoryview(item.data)
        for rg in range(item.meta.num_row_groups):
            chunk = item.meta.row_group(rg).column(positions[c])
            begin = chunk.data_page_offset
            out.write(view[begin : begin + chunk.total_compressed_size])
            chunks.append(chunk)
    physical = chunks[0].physical_type
    nulls = sum(int(ch.statistics.null_count) for ch in chunks)
    return _Chunk(
        physical,
        frozenset(e for ch in chunks for e in ch.encodings),
        chunks[0].compression,
        sum(ch.num_values for ch in chunks),
        sum(ch.total_uncompressed_size for ch in chunks),
        out.position - start,
        start,
        None,
        _statistics(physical, nulls, _merged_bounds(chunks, physical)),
    )


def _moved_chunk(out: _Output, data: bytes, chunk: Any) -> _Chunk:
    """Append a chunk of the re-encoded file (dictionary page and data pages) at the output's position."""
    begin = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    begin = min(begin, chunk.data_page_offset)
    delta = out.position - begin
    out.write(memoryview(data)[begin : begin + chunk.total_compressed_size])
    st = chunk.statistics if chunk.is_stats_set else None
    bounds = (st.min_raw, st.max_raw) if st is not None and st.has_min_max else None
    nulls = int(st.null_count) if st is not None and st.has_null_count else None
    return _Chunk(
        chunk.physical_type,
        frozenset(chunk.encodings),
        chunk.compression,
        chunk.num_values,
        chunk.total_uncompressed_size,
        chunk.total_compressed_size,
        chunk.data_page_offset + delta,
        chunk.dictionary_page_offset + delta if chunk.has_dictionary_page else None,
        _statistics(chunk.physical_type, nulls, bounds) if nulls is not None or bounds else None,
    )


def _reencoded(plan: MergePlan, target: Any, write: Callable[[Any, BinaryIO], None]) -> tuple[bytes, Any] | None:
    """The re-encoded columns as one row group of a file pyarrow wrote (its bytes and pyarrow's footer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n for n, j in zip(plan.names, plan.joined) if not j]
    if not names:
        return None
    sub = pa.schema([target.field(n) for n in names])
    tables = []
    for item in plan.inputs:
        pf = pq.ParquetFile(pa.BufferReader(item.data), metadata=item.meta, coerce_int96_timestamp_unit="us")
        tables.append(conform(pf.read(columns=names, use_threads=False), sub))  # as the usual rewrite conforms
    buf = io.BytesIO()
    write(pa.concat_tables(tables).combine_chunks(), buf)
    data = buf.getvalue()
    return data, pq.read_metadata(pa.BufferReader(data))


def reference_footer(target: Any) -> bytes:
    """The footer (Thrift bytes) pyarrow writes for the output schema as the usual rewrite does, with no rows:
    the merged file takes its schema, key-value metadata, created_by and column orders."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.ParquetWriter(buf, target, **writer_kwargs(WriterOptions(), "snappy")).close()
    data = buf.getvalue()
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length : -8]


def _columns(out: _Output, plan: MergePlan, reference: Any, reencoded: tuple[bytes, Any] | None) -> list[_Chunk]:
    sub = {}
    if reencoded is not None:
        sub_meta = reencoded[1]
        sub = {sub_meta.schema.column(k).path: k for k in range(len(sub_meta.schema))}
        if sub_meta.num_row_groups != 1:
            raise ValidationError("the chunk merge's re-encoded columns came out as more than one row group")
    chunks = []
    for c, name in enumerate(plan.names):
        if plan.joined[c]:
            chunks.append(_joined_chunk(out, plan, c))
            continue
        assert reencoded is not None
        k = sub[name]
        if not reencoded[1].schema.column(k).equals(reference.schema.column(c)):
            raise ValidationError(f"the chunk merge re-encoded column {name!r} with another Parquet type")
        chunks.append(_moved_chunk(out, reencoded[0], reencoded[1].row_group(0).column(k)))
    return chunks


def _footer(reference: bytes, plan: MergePlan, chunks: Sequence[_Chunk], end: int) -> bytes:
    ref = tc.fields(reference)
    unknown = sorted(set(ref) - {1, 2, 3, 4, 5, 6, 7})
    if unknown:
        raise ValidationError(f"the output schema's footer has fields {unknown} the chunk merge does not write")
    rows = plan.rows
    group: Fields = [
        (1, tc.LIST, (tc.STRUCT, [ch.encode(n) for ch, n in zip(chunks, plan.names)])),
        (2, tc.I64, sum(ch.uncompressed for ch in chunks)),
        (3, tc.I64, rows),
        (5, tc.I64, len(MAGIC)),
        (6, tc.I64, end - len(MAGIC)),
        (7, tc.I16, 0),
    ]
    return tc.encode_struct(
        [
            (1, ref[1]),
            (2, ref[2]),
            (3, tc.I64, rows),
            (4, tc.LIST, (tc.STRUCT, [group] if rows else [])),
            *[(k, ref[k]) for k in (5, 6, 7) if k in ref],
        ]
    )


def write_merge(
    plan: MergePlan, sink: Sink, *, target: Any, reference: bytes, write: Callable[[Any, BinaryIO], None]
) -> Merged:
    """Write the bin ``plan`` describes into ``sink``: one Parquet file of one row group, front to back.

    ``reference``: ``reference_footer(target)``; ``write(table, buffer)``: the usual rewrite's writer, for
    the re-encoded columns. The new footer is read back by pyarrow and checked before it is returned.
    """
    from .parquet_footer import footer_metadata

    ref_meta = footer_metadata(reference)
    reencoded = _reencoded(plan, target, write)
    out = _Output(sink)
    out.write(MAGIC)
    chunks = _columns(out, plan, ref_meta, reencoded)
    raw = _footer(reference, plan, chunks, out.position)
    meta = footer_metadata(raw)
    _check(meta, ref_meta, plan, chunks)
    out.write(raw + len(raw).to_bytes(4, "little") + MAGIC)
    joined = sum(ch.compressed for ch, j in zip(chunks, plan.joined) if j)
    return Merged(plan.rows, out.position, sum(plan.joined), joined, raw, meta)


def _check(meta: Any, reference: Any, plan: MergePlan, chunks: Sequence[_Chunk]) -> None:
    """The footer as pyarrow reads it says what was written: the schema, the rows, each chunk's place."""
    ok = meta.schema.equals(reference.schema) and meta.num_rows == plan.rows
    if ok and plan.rows:
        group = meta.row_group(0)
        ok = group.num_rows == plan.rows and all(
            group.column(c).data_page_offset == ch.data_page
            and group.column(c).total_compressed_size == ch.compressed
            and group.column(c).num_values == ch.num_values == plan.rows  # flat columns: one value a row
            for c, ch in enumerate(chunks)
        )
    if not ok:
        raise ValidationError("the chunk merge's footer does not read back as written")
