"""Writing one Parquet file to a sequential sink: copied row groups, re-encoded row groups, a new footer.

The sink is written once, front to back (a local file, a streaming multipart upload): positions
are counted here, never asked of the sink. Copied column chunks are read in large blocks, the next
block read in a helper thread while this one is written. Their footer entries move with them:
offsets shifted, page index and bloom filter offsets dropped (those structures are not copied),
statistics a reader of the new file must not trust removed.
"""

from __future__ import annotations

import copy as _copy
import io
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from .parquet_footer import (
    MAGIC,
    Footer,
    chunk_span,
    encode,
    footer_of_bytes,
    is_int96,
    leaf_paths,
    read_exactly,
    schema_difference,
    thrift,
)

__all__ = ["ParquetOutput", "Sink", "Written", "rg_bytes", "span"]

_BLOCK = 32 * 1024 * 1024  #: one read while copying (bounds memory: at most two blocks in flight)


class Sink(Protocol):
    """Where the output goes: written front to back, never sought or read."""

    def write(self, data: bytes, /) -> Any: ...


def rg_bytes(rg: Any) -> int:
    """A row group's compressed bytes (what a copy moves)."""
    return sum(c.meta_data.total_compressed_size for c in rg.columns if c.meta_data is not None)


def read_range(fh: BinaryIO, start: int, length: int, path: str) -> bytes:
    """Exactly ``length`` bytes from ``start`` (a short file is a DataFileError, never a short copy)."""
    fh.seek(start)
    return read_exactly(fh, length, path)


def blocks(fh: BinaryIO, start: int, end: int, path: str, pool: ThreadPoolExecutor) -> Iterator[bytes]:
    """The bytes [start, end) of a file in blocks, the next block read while the caller writes this one."""
    offsets = list(range(start, end, _BLOCK))
    pending = pool.submit(read_range, fh, offsets[0], min(_BLOCK, end - offsets[0]), path) if offsets else None
    for i in range(len(offsets)):
        assert pending is not None
        data = pending.result()
        nxt = offsets[i + 1] if i + 1 < len(offsets) else None
        pending = pool.submit(read_range, fh, nxt, min(_BLOCK, end - nxt), path) if nxt is not None else None
        yield data


def clean_statistics(md: Any) -> None:
    """Keep only statistics a reader of the output may trust as written by its writer.

    Inexact (truncated) bounds and INT96 bounds are dropped, as are the deprecated min/max when the
    exact ``min_value``/``max_value`` are absent (old writers ordered those by signed bytes).
    Null counts stay. A dropped bound only means "unknown": the add action's stats read those values.
    """
    st = md.statistics
    if st is None:
        return
    inexact = st.is_max_value_exact is False or st.is_min_value_exact is False
    if inexact or is_int96(md) or st.min_value is None or st.max_value is None:
        st = _copy.copy(st)
        st.min = st.max = st.min_value = st.max_value = None
        st.is_max_value_exact = st.is_min_value_exact = None
        md.statistics = st


def _moved_chunk(chunk: Any, delta: int, path: list[bytes], clean: bool) -> Any:
    """A column chunk's footer entry after its bytes moved by ``delta``."""
    c = _copy.copy(chunk)
    md = c.meta_data = _copy.copy(chunk.meta_data)
    md.data_page_offset += delta
    if md.dictionary_page_offset is not None and md.dictionary_page_offset > 0:
        md.dictionary_page_offset += delta
    md.bloom_filter_offset = md.bloom_filter_length = None
    md.path_in_schema = path
    if clean:
        clean_statistics(md)
    c.file_offset = chunk.file_offset + delta if chunk.file_offset else 0
    c.offset_index_offset = c.offset_index_length = c.column_index_offset = c.column_index_length = None
    return c


def moved_row_group(rg: Any, delta: int, paths: list[list[bytes]], ordinal: int, *, clean: bool) -> Any:
    """A row group's footer entry after its bytes moved by ``delta``, as row group ``ordinal`` of the output."""
    columns = [_moved_chunk(c, delta, p, clean) for c, p in zip(rg.columns, paths)]
    out = _copy.copy(rg)
    out.columns = columns
    out.file_offset = chunk_span(columns[0])[0] if columns else None
    out.total_compressed_size = sum(c.meta_data.total_compressed_size for c in columns)
    out.ordinal = ordinal if ordinal < 2**15 else None
    return out


def span(rg: Any) -> tuple[int, int]:
    """(start, end) of a row group's column chunks in its file."""
    spans = [chunk_span(c) for c in rg.columns]
    return min(s for s, _ in spans), max(e for _, e in spans)


@dataclass(frozen=True)
class Written:
    """What went into one output file."""

    rows: int
    size: int  #: bytes written to the sink
    row_groups_copied: int
    bytes_copied: int  #: compressed bytes of the copied row groups
    row_groups_reencoded: int  #: input row groups decoded and re-encoded
    bytes_reencoded: int  #: their compressed bytes in the inputs
    row_groups_written: int
    footer: bytes  #: the new footer (Thrift): the output's metadata without reading the output back


class ParquetOutput:
    """One Parquet file written front to back: copied row groups, re-encoded ones, then the footer.

    ``reference``: the footer pyarrow writes for ``target`` with ``writer_kwargs`` (no rows); the
    output takes its schema, key-value metadata, created_by and column orders, and re-encoded rows
    are written with the same settings, so every row group fits that one schema.
    """

    def __init__(
        self, sink: Sink, reference: Footer, target: Any, writer_kwargs: dict[str, Any], row_group_bytes: int
    ) -> None:
        self.sink = sink
        self.reference = reference
        self.target = target
        self.kwargs = writer_kwargs
        self.row_group_bytes = row_group_bytes
        self.paths = leaf_paths(reference.meta.schema)
        self.position = 0
        self.row_groups: list[Any] = []
        self.rows = 0
        self.buffered: list[Any] = []
        self.buffered_bytes = 0
        self.counts = {"copied": 0, "bytes_copied": 0, "reencoded": 0, "bytes_reencoded": 0}
        self.write(MAGIC)

    def write(self, data: bytes) -> None:
        self.sink.write(data)
        self.position += len(data)

    def copy(self, fh: BinaryIO, footer: Footer, indices: list[int], pool: ThreadPoolExecutor) -> None:
        """Copy consecutive row groups of one input as one byte range; record their moved footer entries."""
        groups = [footer.meta.row_groups[i] for i in indices]
        start, end = span(groups[0])[0], span(groups[-1])[1]
        delta = self.position - start
        if self._server_copy(fh, start, end, footer.path):
            self.position += end - start
        else:
            done = self._kernel_copy(fh, start, end, footer.path)
            for block in blocks(fh, done, end, footer.path, pool):
                self.write(block)
        for rg in groups:
            self.row_groups.append(moved_row_group(rg, delta, self.paths, len(self.row_groups), clean=True))
            self.rows += rg.num_rows
            self.counts["copied"] += 1
            self.counts["bytes_copied"] += rg_bytes(rg)

    def _server_copy(self, fh: BinaryIO, start: int, end: int, path: str) -> bool:
        """Let a sink that can (an S3 upload: ``copy_range``) copy [start, end) of ``path`` inside the store;
        False when the bytes must be written here (no such sink, or it declined)."""
        copy_range = getattr(self.sink, "copy_range", None)
        if copy_range is None:
            return False
        return bool(copy_range(path, start, end, lambda s, n: read_range(fh, s, n, path)))

    def _kernel_copy(self, fh: BinaryIO, start: int, end: int, path: str) -> int:
        """Copy what it can of [start, end) inside the kernel (``os.copy_file_range``: no byte passes through
        Python, and a filesystem with reflinks shares the blocks) when input and output are both local files;
        returns where the block copy must go on from (``start`` when it does not apply)."""
        copy_range = getattr(os, "copy_file_range", None)
        fileno = getattr(self.sink, "fileno", None)
        if copy_range is None or fileno is None or end <= start:
            return start
        try:
            src = fh.fileno()
            dst = fileno()
        except (OSError, ValueError, io.UnsupportedOperation):  # an object store's reader or writer
            return start
        flush = getattr(self.sink, "flush", None)
        if flush is not None:  # what a buffered sink holds goes first
            flush()
        offset = start
        while offset < end:
            try:
                n = copy_range(src, dst, end - offset, offset_src=offset)
            except OSError:  # not between these two files (another filesystem, no support): copy the rest
                return offset
            if n == 0:
                from ..errors import DataFileError

                raise DataFileError(
                    f"{path} ended {end - offset} bytes early while reading it", path=path, reason="truncated"
                )
            offset += n
            self.position += n
        return offset

    def reencode(self, table: Any, source_bytes: int) -> None:
        """Buffer a small row group's rows; write a merged row group once enough are buffered."""
        self.counts["reencoded"] += 1
        self.counts["bytes_reencoded"] += source_bytes
        if table.num_rows:
            self.buffered.append(table)
            self.buffered_bytes += table.nbytes
        if self.buffered_bytes >= self.row_group_bytes:
            self.flush()

    def flush(self) -> None:
        """Encode the buffered rows as one row group (pyarrow, in memory) and append its column chunks."""
        if not self.buffered:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables(self.buffered)
        self.buffered, self.buffered_bytes = [], 0
        buf = io.BytesIO()
        with pq.ParquetWriter(buf, self.target, **self.kwargs) as writer:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
        data = buf.getbuffer()
        written = footer_of_bytes(data)
        diff = schema_difference(written.meta.schema, self.reference.meta.schema)
        if diff is not None:
            from ..errors import ValidationError

            raise ValidationError(f"the row-group copy's re-encoded rows do not have the output's schema: {diff}")
        groups = written.meta.row_groups
        start, end = span(groups[0])[0], span(groups[-1])[1]
        delta = self.position - start
        self.write(bytes(data[start:end]))
        for rg in groups:
            self.row_groups.append(moved_row_group(rg, delta, self.paths, len(self.row_groups), clean=False))
            self.rows += rg.num_rows

    def close(self) -> Written:
        """Write the footer: every row group, the reference's schema and key-value metadata."""
        self.flush()
        ref = self.reference.meta
        meta = thrift().FileMetaData(
            version=ref.version,
            schema=ref.schema,
            num_rows=self.rows,
            row_groups=self.row_groups,
            key_value_metadata=ref.key_value_metadata,
            created_by=ref.created_by,
            column_orders=ref.column_orders,
        )
        raw = encode(meta)
        self.write(raw + len(raw).to_bytes(4, "little") + MAGIC)
        c = self.counts
        return Written(
            self.rows,
            self.position,
            c["copied"],
            c["bytes_copied"],
            c["reencoded"],
            c["bytes_reencoded"],
            len(self.row_groups),
            raw,
        )
