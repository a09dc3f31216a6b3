"""One bin rewritten inside a Spark task: its inputs streamed through Arrow into one new Parquet file.

Compaction does not change rows, so it needs no Spark SQL plan: decoding and re-encoding with
Arrow's C++ Parquet reader and writer is several times cheaper than a DataFrame ``coalesce(1)``
write, and memory stays bounded (row groups are streamed and buffered up to a byte target). The
new file goes straight to its final place: a local file, or a streaming multipart upload to an
object store (no local temporary copy). Its Delta stats are computed here from the footer the
writer just produced, so the driver reads nothing back.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .arrow_schema import NeedsSparkRewrite, arrow_schema, with_hidden_fields
from .inputs import InputFileError, filler, live_rows, read_live_tables
from .messages import (
    BinTask,
    CopyReport,
    Failed,
    FailureKind,
    Fallback,
    NotStarted,
    Outcome,
    Rewritten,
    StatsSpec,
    WorkerInfo,
)

if TYPE_CHECKING:
    from ..delta.storage import Storage
    from .fetch_pool import FetchPool

__all__ = ["run_bin", "spec_stats", "worker_info"]

#: A column whose dictionary page holds more than this share of its chunk's bytes is mostly distinct
#: values: dictionary encoding only costs time there (the writer would fill a dictionary, then give up).
_DICTIONARY_SHARE = 0.5


class _Counting:
    """A write-only file that counts the bytes passing through to ``raw`` (an object store upload)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.written = 0
        self.closed = False

    def write(self, data: Any) -> int:
        n = len(memoryview(data))
        self.raw.write(data)
        self.written += n
        return n

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
            self.closed = True


def _writer(where: Any, target: Any, compression: str, dictionary: list[str] | bool) -> Any:
    import pyarrow.parquet as pq

    return pq.ParquetWriter(
        where,
        target,
        compression=None if compression in ("none", "uncompressed") else compression,
        use_dictionary=dictionary,
        use_compliant_nested_type=True,
        coerce_timestamps="us",
        allow_truncated_timestamps=False,
        write_statistics=True,
    )


def _write(tables: Iterable[Any], where: Any, task: BinTask, target: Any) -> tuple[int, Any]:
    """Stream ``tables`` into one Parquet file at ``where``; (rows, footer metadata).

    Row groups are buffered up to ``task.row_group_bytes`` (Arrow buffer sizes: ``nbytes`` walks
    every array for its slice offsets, 13 us per small table). Many small tables make a row group
    of many short chunks, which the writer encodes chunk by chunk: they are joined into one first.
    """
    writer = None
    rows = 0
    buffered: list[Any] = []
    size = 0
    try:
        for t in tables:
            buffered.append(t)
            size += t.get_total_buffer_size()
            rows += t.num_rows
            if size >= task.row_group_bytes:
                writer = writer or _writer(where, target, task.compression, _dictionary(buffered, target))
                _write_row_group(writer, buffered)
                buffered, size = [], 0
        writer = writer or _writer(where, target, task.compression, _dictionary(buffered, target))
        if buffered:
            _write_row_group(writer, buffered)
    finally:
        if writer is not None:
            writer.close()
    return rows, writer.writer.metadata


#: Above this many buffered tables a row group is joined into contiguous arrays before it is encoded.
_JOIN_CHUNKS = 16


def _write_row_group(writer: Any, buffered: list[Any]) -> None:
    import pyarrow as pa

    table = pa.concat_tables(buffered)
    if len(buffered) > _JOIN_CHUNKS:
        table = table.combine_chunks()
    writer.write_table(table, row_group_size=max(1, table.num_rows))


#: Rows of the first tables at hand that ``_dictionary`` judges the columns from.
_SAMPLE_ROWS = 10_000


def _dictionary(buffered: list[Any], target: Any) -> list[str] | bool:
    """Columns worth dictionary-encoding, judged from the first rows at hand (a cheap distinct count).

    A column of mostly distinct values (ids, uuids, measures) only costs time in a dictionary: the
    writer fills one, then gives up. Nested schemas keep the writer's default (dictionary on), since
    a per-column list would have to name their leaves. Only the first tables up to ``_SAMPLE_ROWS``
    rows are joined for the sample, not every buffered one.
    """
    import pyarrow as pa

    if not buffered or any(pa.types.is_nested(f.type) for f in target):
        return True
    head, n = [], 0
    for t in buffered:
        head.append(t)
        n += t.num_rows
        if n >= _SAMPLE_ROWS:
            break
    # contiguous: count_distinct over one chunk a column, not over each small file's (1 ms of a 6 ms choice)
    sample = pa.concat_tables(head).slice(0, _SAMPLE_ROWS).combine_chunks()
    return [field.name for field in target if _repetitive(sample.column(field.name))]


#: Rows of the sample a column is probed on first: all of them distinct there says "unique" at a fifth of the cost.
_PROBE_ROWS = 2_000


def _repetitive(column: Any) -> bool:
    """Whether a sample column has few enough distinct values to be worth a dictionary.

    Ids, uuids and measures are the usual columns, and each is unique in any sample: when the first
    ``_PROBE_ROWS`` values are all distinct (valid and different) it is judged unique without hashing the
    rest, 0.4-1.0 ms a column of a 10,000-row sample (docs/performance.md, "Issue 45, the bins' floor and
    the last serial work"). A column repetitive there (or with nulls) is counted over the whole sample as before.
    """
    from ..arrow_kernels import count_distinct

    n = len(column)
    if n == 0:
        return True
    if n > _PROBE_ROWS and count_distinct(column.slice(0, _PROBE_ROWS)).as_py() == _PROBE_ROWS:
        return False
    return bool(count_distinct(column).as_py() <= _DICTIONARY_SHARE * n)


def worker_info() -> WorkerInfo:
    """Where this task runs (interpreter, host, process, the package's file), as outcomes report it."""
    import socket
    import sys

    module = sys.modules.get(__name__.rsplit(".", 2)[0])
    return WorkerInfo(sys.executable, socket.gethostname(), os.getpid(), getattr(module, "__file__", None))


def spec_stats(
    spec: StatsSpec,
    metadata: Any,
    source: Any,
    *,
    tight_bounds: bool = True,
    inexact_chunks: frozenset[tuple[int, int]] = frozenset(),
) -> str:
    """A file's stats JSON from its footer (and ``source`` for the columns the footer cannot answer for),
    with what a task message says of the table: the writer's new files and analyze's files alike."""
    from ..delta.actions import Protocol
    from ..inspect.stats import stats_from_metadata

    return stats_from_metadata(
        metadata,
        source,
        spec.schema,
        spec.partition_columns,
        spec.configuration,
        protocol=Protocol.from_json(spec.protocol) if spec.protocol is not None else None,
        session_time_zone=spec.time_zone,
        string_prefix_length=spec.string_prefix_length,
        tight_bounds=tight_bounds,
        inexact_chunks=inexact_chunks,
    )


def _stats(task: BinTask, metadata: Any, source: Any) -> str:
    return spec_stats(task.stats, metadata, source)


class _Stopped(Exception):
    """The driver cancelled this bin while it ran (the time budget's grace period ended)."""


def _stoppable(tables: Iterable[Any], stop: Callable[[], bool] | None) -> Iterator[Any]:
    for t in tables:
        if stop is not None and stop():
            raise _Stopped
        yield t


class _LazySink:
    """The output, opened on the first write: a copy that falls back has written nothing and opened nothing."""

    def __init__(self, open_output: Callable[[], Any]) -> None:
        self._open = open_output
        self.raw: Any = None

    def write(self, data: Any) -> int:
        if self.raw is None:
            self.raw = self._open()
        return int(self.raw.write(data))

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()

    def abort(self) -> None:
        """A failed or fallen-back copy: what was opened is closed (``run_bin`` deletes a partial file)."""
        self.close()

    def fileno(self) -> int:
        """The output's file descriptor, everything written so far flushed to it (a local file only: an object
        store's writer raises ``io.UnsupportedOperation``), for copies made inside the kernel."""
        if self.raw is None:
            self.raw = self._open()
        fd = int(self.raw.fileno())
        self.raw.flush()
        return fd


def _copy_sink(task: BinTask, storage: Storage, local: bool) -> Any:
    """Where the row-group copy writes: on S3 an upload that copies large row groups inside the store
    (``delta/s3_copy.py``), elsewhere the store's output, opened on the first write."""
    from ..delta.object_store import ObjectStorage

    if not local and isinstance(storage, ObjectStorage):
        server = storage.open_copy_output(task.output, task.store.root)
        if server is not None:
            return server
    return _LazySink(lambda: storage.open_output(task.output))


def _copy_conform(task: BinTask, storage: Storage, target: Any) -> Callable[..., Any]:
    """The per-row-group step of the usual rewrite, for the row groups the copy re-encodes."""
    from ..delta.deletion_vectors import load_deleted_rows

    deleted: dict[int, Any] = {}

    def conform(table: Any, *, input_index: int, first_row: int) -> Any:
        f = task.inputs[input_index]
        if f.deletion_vector and input_index not in deleted:
            deleted[input_index] = load_deleted_rows(f.deletion_vector, root=task.store.root, storage=storage)
        fill = filler(task.row_tracking, f)
        return live_rows(table, first_row, target, deleted.get(input_index), fill, by_id=task.by_id)

    return conform


def _try_copy(task: BinTask, storage: Storage, local: bool, target: Any) -> tuple[Rewritten | None, CopyReport]:
    """The row-group copy (``tasks.parquet_copy``); None when the bin falls back to the usual rewrite."""
    from .parquet_copy import CopyInput, Reason, copy_compact

    started = time.perf_counter()
    inputs = [
        CopyInput(
            f.path, f.size, Reason("deletion_vectors", f"{f.path} has a deletion vector") if f.deletion_vector else None
        )
        for f in task.inputs
    ]
    if local:
        os.makedirs(os.path.dirname(task.output), exist_ok=True)
    sink = _copy_sink(task, storage, local)
    try:
        result = copy_compact(
            inputs,
            sink,
            schema=target,
            opener=storage.open_input,
            min_bytes=task.copy_min_bytes,
            compression=task.compression,
            row_group_bytes=task.row_group_bytes,
            conform=_copy_conform(task, storage, target),
            materialized=[task.row_tracking.row_id, task.row_tracking.commit_version] if task.row_tracking else (),
        )
    except BaseException:
        sink.abort()
        raise
    if result.copied:
        sink.close()
    else:
        sink.abort()
    reasons = tuple((r.kind, r.detail) for r in ((result.fallback,) if result.fallback else result.reencoded_because))
    report = CopyReport(
        result.row_groups_copied,
        result.bytes_copied,
        result.row_groups_reencoded,
        result.bytes_reencoded,
        result.fallback is not None,
        reasons,
    )
    if not result.copied:
        return None, report
    source: Any = task.output if local else (lambda: storage.open_input(task.output))
    stats = _stats(task, result.metadata(), source)
    now = int(time.time() * 1000)
    done = Rewritten(
        task.bin_id, result.size, result.rows, stats, now, worker_info(), time.perf_counter() - started, report
    )
    return done, report


#: The table's codec as Parquet's footer names it, for the codecs a joined chunk can keep (``lz4`` is not one:
#: Arrow writes LZ4_RAW where Spark writes Hadoop's LZ4).
_PARQUET_CODECS = {
    "snappy": "SNAPPY",
    "zstd": "ZSTD",
    "gzip": "GZIP",
    "none": "UNCOMPRESSED",
    "uncompressed": "UNCOMPRESSED",
}


def _merge_write(task: BinTask) -> Callable[[Any, Any], None]:
    """The usual rewrite's writer, for the columns a chunk merge re-encodes: one row group into ``buf``."""

    def write(table: Any, buf: Any) -> None:
        writer = _writer(buf, table.schema, task.compression, _dictionary([table], table.schema))
        try:
            writer.write_table(table, row_group_size=max(1, table.num_rows))
        finally:
            writer.close()

    return write


def _try_merge(task: BinTask, storage: Storage, target: Any) -> Rewritten | None:
    """The chunk merge (``tasks.chunk_merge``) of a local table's bin; None when the bin is rewritten the usual
    way (nothing written)."""
    from .chunk_merge import plan_merge, read_inputs, reference_footer, write_merge
    from .parquet_footer import footer_metadata

    started = time.perf_counter()
    reference = reference_footer(target)
    try:
        inputs = read_inputs([f.path for f in task.inputs], storage.read_bytes)
    except Exception:  # an unreadable input: the usual rewrite reads it again and says why, typed
        return None
    plan = plan_merge(
        inputs,
        footer_metadata(reference),
        codec=_PARQUET_CODECS[task.compression],
        materialized=[task.row_tracking.row_id, task.row_tracking.commit_version] if task.row_tracking else (),
    )
    if isinstance(plan, str):  # why the pages are not joined: the usual rewrite writes this bin
        return None
    sink = _LazySink(lambda: storage.open_output(task.output))
    try:
        merged = write_merge(plan, sink, target=target, reference=reference, write=_merge_write(task))
    finally:
        sink.close()
    storage.requests.count("PUT", 0, written=merged.size)  # its open counted the request, not the bytes
    stats = _stats(task, merged.metadata, task.output)  # a column the footer cannot answer for is read by path
    report = CopyReport(bytes_joined=merged.bytes_joined, columns_joined=merged.columns_joined)
    now, seconds = int(time.time() * 1000), time.perf_counter() - started
    return Rewritten(task.bin_id, merged.size, merged.rows, stats, now, worker_info(), seconds, report)


#: Inputs smaller than this on average are not worth a chunk merge's footer reads: their chunks fall under
#: ``chunk_merge.MIN_CHUNK_BYTES``, and the bin would be read twice.
_MERGE_MIN_FILE_BYTES = 16 * 1024


def _merges(task: BinTask) -> bool:
    """Whether a bin may join its inputs' pages: the switch is on, no input has deleted rows, its files are not
    tiny, and the whole bin fits in memory as one row group (its inputs are read whole)."""
    size = sum(f.size for f in task.inputs)
    return (
        task.merge_pages
        and not task.by_id  # columns matched by field id: the usual rewrite's conform
        and task.compression in _PARQUET_CODECS
        and not any(f.deletion_vector for f in task.inputs)
        and _MERGE_MIN_FILE_BYTES * len(task.inputs) <= size <= task.row_group_bytes
    )


def _rewrite(
    task: BinTask, storage: Storage, local: bool, stop: Callable[[], bool] | None, fetch: FetchPool | None
) -> Rewritten:
    started = time.perf_counter()
    target = arrow_schema(with_hidden_fields(task.fields, task.row_tracking))
    report = None
    if task.copy_min_bytes > 0:
        copied, report = _try_copy(task, storage, local, target)
        if copied is not None:
            return copied
    if report is None and local and _merges(task):  # an object store's inputs go through the fetch pool
        merged = _try_merge(task, storage, target)
        if merged is not None:
            return merged
    tables = read_live_tables(
        storage,
        task.store.root,
        task.inputs,
        target,
        local=local,
        by_id=task.by_id,
        row_tracking=task.row_tracking,
        fetch=fetch,
    )
    tables = _stoppable(tables, stop)
    if local:
        os.makedirs(os.path.dirname(task.output), exist_ok=True)
        rows, metadata = _write(tables, task.output, task, target)
        size = os.path.getsize(task.output)
        storage.requests.count("PUT", written=size)  # written by path (pyarrow's own file), counted as a store's
        source: Any = task.output
    else:
        sink = _Counting(storage.open_output(task.output))
        try:
            rows, metadata = _write(tables, sink, task, target)
        finally:
            sink.close()
        size = sink.written
        source = lambda: storage.open_input(task.output)  # noqa: E731 - read back only if a stat needs data
    stats = _stats(task, metadata, source)
    now = int(time.time() * 1000)
    return Rewritten(task.bin_id, size, rows, stats, now, worker_info(), time.perf_counter() - started, report)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_bin(
    task: BinTask,
    storage: Storage,
    *,
    local: bool,
    stop: Callable[[], bool] | None = None,
    fetch: FetchPool | None = None,
) -> Outcome:
    """Rewrite one bin; never raises for a bin that fails (the outcome says why, typed).

    ``stop``: asked between row groups; True abandons the bin (its partial file is deleted). ``fetch``: the
    process's pool for small inputs on an object store (``tasks.worker``), shared with its other bins.
    """
    if task.deadline is not None and time.time() >= task.deadline:
        return NotStarted(task.bin_id, "the time budget was spent before this bin started")
    try:
        outcome = _rewrite(task, storage, local, stop, fetch)
        if stop is not None and stop():  # cancelled while its last read or write ran: nothing of it may stay
            raise _Stopped
        return outcome
    except _Stopped:
        _discard(storage, task.output)
        return NotStarted(task.bin_id, "cancelled while it ran: the time budget's grace period ended")
    except NeedsSparkRewrite as exc:
        _discard(storage, task.output)
        return Fallback(task.bin_id, str(exc))
    except InputFileError as exc:
        _discard(storage, task.output)
        return Failed(task.bin_id, "data_file", "DataFileError", exc.reason, exc.path, trace=traceback.format_exc())
    except Exception as exc:
        _discard(storage, task.output)
        retryable = bool(getattr(exc, "retryable", False))
        kind, name, trace = _kind(exc), type(exc).__name__, traceback.format_exc()
        return Failed(task.bin_id, kind, name, _first_line(exc), None, retryable=retryable, trace=trace)


def _kind(exc: BaseException) -> FailureKind:
    from ..errors import StorageAccessError

    return "storage" if isinstance(exc, StorageAccessError) else "internal"


def _discard(storage: Storage, path: str) -> None:
    try:
        storage.delete(path)
    except Exception:  # the driver deletes every uncommitted output again after the run
        pass
