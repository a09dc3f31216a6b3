"""A bin's input files read inside a task: opened cheaply, conformed, live rows only, errors naming the file.

Small files (what dbt models leave) are read whole in one request and parsed from memory: on an
object store that is one GET per file instead of a footer read plus a range read per column, and
the next files are fetched concurrently while the current one is decoded. Larger files are read
through a buffered ranged reader. A file that is missing, empty, not Parquet, or holds none of the
table's columns raises ``InputFileError`` naming it, so the driver can say which file is broken
without reading anything again.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from ..arrow_kernels import filter_
from .arrow_schema import NeedsSparkRewrite, conform
from .fetch_pool import FetchPool
from .messages import InputFile, RowTrackingColumns
from .row_ids import fill_row_tracking, positions_from

if TYPE_CHECKING:
    from ..delta.storage import Storage

__all__ = ["InputFileError", "filler", "live_row_groups", "live_rows", "open_inputs", "read_live_tables"]

#: Files up to this size are read whole, in one request.
WHOLE_FILE_BYTES = 32 * 1024 * 1024
_MAGIC = b"PAR1"
#: Footer keys Spark writes when values use the legacy hybrid calendar (must be rebased by Spark).
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


class InputFileError(Exception):
    """An input data file cannot be read: missing, empty, not Parquet, or not the table's schema."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _reason(exc: BaseException, head: bytes | None = None, tail: bytes | None = None) -> str:
    """Why a file could not be read, in words: missing, empty, not Parquet at all, or a damaged Parquet file."""
    if isinstance(exc, FileNotFoundError):
        return "the file is missing"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if head is not None and tail is not None:
        if not head and not tail:
            return "the file is empty"
        if head[:4] != _MAGIC or tail[-4:] != _MAGIC:
            return f"it is not a Parquet file (no PAR1 magic; {text})"
    if "magic bytes" in text or "size is 0" in text or "Parquet file size" in text:
        return f"it is not a Parquet file ({text})"
    return f"it cannot be read as Parquet ({text})"


def _ends(source: Any) -> tuple[bytes | None, bytes | None]:
    """The first and last four bytes of a source (bytes in memory, or a local path), for a diagnosis."""
    try:
        if isinstance(source, str):
            with open(source, "rb") as fh:
                head = fh.read(4)
                fh.seek(max(os.path.getsize(source) - 4, 0))
                return head, fh.read(4)
        if isinstance(source, bytes):
            return source[:4], source[-4:]
    except Exception:  # no diagnosis: the reader's own message stays
        pass
    return None, None


def _parquet(source: Any, path: str, options: Mapping[str, Any]) -> Any:
    """A ``pyarrow.parquet.ParquetReader`` over ``source``: the file's bytes, a local path or a binary file.

    Bytes in memory (every small file) get the bare reader ``ParquetFile`` wraps, opened with the options
    ``ParquetFile`` would pass (``_Opener``): the wrapper's Python (resolving a filesystem, a map of every
    column path) is about 5 us of a 5.5 KB file's 100 in pyarrow (docs/performance.md, "Per-file work in a
    bin"). A path or a file object (large files) is opened by ``ParquetFile`` as before, pre-buffered.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if isinstance(source, bytes):
            reader = pq.ParquetReader()
            # pre_buffer plans and caches ranged reads ahead: nothing to gain on bytes already in memory, and
            # about 10 us of a 5.5 KB file's 100 in pyarrow (docs/performance.md, "Tiny files (round 3)").
            reader.open(pa.BufferReader(source), coerce_int96_timestamp_unit="us", pre_buffer=False, **options)
        else:
            reader = pq.ParquetFile(source, coerce_int96_timestamp_unit="us", pre_buffer=True).reader
    except Exception as exc:
        raise InputFileError(path, _reason(exc, *_ends(source))) from exc
    meta = reader.metadata.metadata
    if meta and not meta.keys().isdisjoint(_LEGACY_KEYS):
        raise NeedsSparkRewrite(f"{os.path.basename(path)} uses Spark's legacy hybrid calendar")
    return reader


class _Opener:
    """What ``ParquetFile`` passes to its reader beyond our own options, in the pyarrow installed (its defaults:
    ``arrow_extensions_enabled`` is False before pyarrow 21 and True since), worked out once per bin."""

    def __init__(self) -> None:
        import inspect

        import pyarrow.parquet as pq

        defaults = inspect.signature(pq.ParquetFile.__init__).parameters
        self.options = {
            name: defaults[name].default
            for name in ("page_checksum_verification", "arrow_extensions_enabled")
            if name in defaults
        }

    def __call__(self, source: Any, path: str) -> Any:
        return _parquet(source, path, self.options)


def _whole(storage: Storage, path: str) -> bytes:
    try:
        return storage.read_bytes(path)
    except FileNotFoundError as exc:
        raise InputFileError(path, "the file is missing") from exc


def open_inputs(
    storage: Storage, inputs: Sequence[InputFile], *, local: bool, fetch: FetchPool | None = None
) -> Iterator[tuple[InputFile, Any, Any]]:
    """Each input with its ``pyarrow.parquet.ParquetReader`` (``_parquet``) and what it was opened from, in order.

    Local files are read whole (one read call) when small, else opened by path. On an object store
    small files are fetched ahead concurrently on ``fetch`` (the process's pool, shared by its bins:
    ``tasks.fetch_pool``), up to its threads and within its byte window; without one, on a pool of
    this call's own.
    """
    opener = _Opener()
    if local:
        for f in inputs:
            source: Any = _whole(storage, f.path) if f.size <= WHOLE_FILE_BYTES else f.path
            yield f, opener(source, f.path), source
        return
    pool = fetch if fetch is not None else FetchPool()
    ahead: deque[tuple[InputFile, Future[bytes] | None, int]] = deque()
    pending = iter(inputs)
    following = next(pending, None)
    try:
        while True:
            while following is not None and len(ahead) < pool.threads:
                small = following.size <= WHOLE_FILE_BYTES
                if small and not pool.reserve(following.size, must=not ahead):
                    break  # the window is full: decode what is here, then fetch on
                fut = pool.submit(_whole, storage, following.path) if small else None
                ahead.append((following, fut, following.size if small else 0))
                following = next(pending, None)
            if not ahead:
                return
            f, fut, reserved = ahead.popleft()
            try:
                opened = _open_fetched(storage, f, fut, opener)
            finally:
                pool.release(reserved)
            yield opened
    finally:
        for _, fut, reserved in ahead:  # a bin that stopped early: its fetches ahead go, and their bytes with them
            if fut is not None:
                fut.cancel()
                fut.add_done_callback(partial(_release, pool, reserved))
        if fetch is None:
            pool.shutdown()


def _release(pool: FetchPool, size: int, _: Future[bytes]) -> None:
    pool.release(size)


def _open_fetched(
    storage: Storage, f: InputFile, fut: Future[bytes] | None, opener: _Opener
) -> tuple[InputFile, Any, Any]:
    if fut is not None:
        data = fut.result()
        return f, opener(data, f.path), data
    try:
        handle = storage.open_input(f.path)
    except FileNotFoundError as exc:
        raise InputFileError(f.path, "the file is missing") from exc
    return f, opener(handle, f.path), None


class _TargetColumns:
    """What every file of a bin is checked against, worked out once per bin rather than once per file."""

    def __init__(self, target: Any) -> None:
        # Without column mapping a file must hold some of the table's columns (with it, a file may hold
        # only columns dropped since, all read as null).
        self.mapped = any((f.metadata or {}).get(b"PARQUET:field_id") for f in target)
        self.lower = {n.lower() for n in target.names}
        self._read: dict[tuple[str, ...], list[str] | None] = {}
        self._disjoint: dict[tuple[str, ...], bool] = {}
        self._flat: dict[tuple[str, ...], list[int]] = {}

    def disjoint(self, names: tuple[str, ...]) -> bool:
        """Whether a file holds none of the table's columns (asked once per distinct list of names)."""
        if names not in self._disjoint:
            self._disjoint[names] = not self.mapped and bool(self.lower) and not self.lower & {n.lower() for n in names}
        return self._disjoint[names]

    def to_read(self, names: tuple[str, ...]) -> list[str] | None:
        """The file's columns the table uses (None: all), so a column it does not use is not decoded.

        Files that also hold the partition columns, or columns dropped since, are common; with column
        mapping the file's names are physical ones, matched later by id, so everything is read.
        """
        if names not in self._read:
            used = [n for n in names if n.lower() in self.lower]
            self._read[names] = None if self.mapped or len(used) == len(names) else used
        return self._read[names]

    def indices(self, reader: Any, names: tuple[str, ...]) -> list[int] | None:
        """The file's leaf columns to decode (None: all): the leaves of ``to_read(names)``, each name's leaves
        in file order, as ``ParquetFile.read_row_group(columns=...)`` finds them.

        When every column of the file is one leaf (as many leaves as top-level names) and no name read holds a
        dot, a name's leaves are the positions of that name: worked out once per list of names. Other files
        map their column paths as ``ParquetFile`` does (a name matches the leaves under it, and a dotted
        name also the nested fields it spells).
        """
        read = self.to_read(names)
        if read is None:
            return None
        if reader.metadata.num_columns == len(names):
            flat = self._flat.get(names)
            if flat is None and not any("." in n for n in read):
                flat = self._flat[names] = [i for n in read for i, name in enumerate(names) if name == n]
            if flat is not None:
                return flat
        return _leaves(reader.column_paths, read)


def _leaves(column_paths: Sequence[Sequence[str]], read: Sequence[str]) -> list[int]:
    """``ParquetFile``'s own lookup: every leaf under each dotted prefix of its path, then the names' leaves."""
    under: dict[str, list[int]] = {}
    for i, path in enumerate(column_paths):
        key = path[0]
        under.setdefault(key, []).append(i)
        for part in path[1:]:
            key = f"{key}.{part}"
            under.setdefault(key, []).append(i)
    return [i for n in read for i in under.get(n, ())]


def live_row_groups(
    reader: Any,
    path: str,
    target: Any,
    deleted: Any,
    fill: Callable[[Any, int], Any] | None = None,
    *,
    by_id: bool = False,
    source: Any = None,
    columns: _TargetColumns | None = None,
) -> Iterator[Any]:
    """A file's row groups (``reader``: its ``pyarrow.parquet.ParquetReader``, from ``open_inputs``) in the table
    schema, without the rows its deletion vector deletes (by position).

    ``fill`` (the row tracking step) sees each row group with its physical start position, before the
    deleted rows are dropped, so row ids come from physical positions as the protocol defines them.
    ``columns``: the bin's shared view of ``target``.
    """
    columns = columns or _TargetColumns(target)
    names = tuple(reader.schema_arrow.names)
    if columns.disjoint(names) and reader.metadata.num_rows:
        raise InputFileError(
            path,
            f"its columns {sorted(names)[:5]} are none of the table's ({sorted(target.names)[:5]}): schema mismatch",
        )
    start = 0
    indices = columns.indices(reader, names)
    for rg in range(reader.num_row_groups):
        try:
            raw = reader.read_row_group(rg, column_indices=indices, use_threads=False)
        except Exception as exc:
            raise InputFileError(path, _reason(exc, *_ends(source))) from exc
        yield live_rows(raw, start, target, deleted, fill, by_id=by_id)
        start += raw.num_rows


def live_rows(
    raw: Any, start: int, target: Any, deleted: Any, fill: Callable[[Any, int], Any] | None, *, by_id: bool
) -> Any:
    """One row group (its first row at physical position ``start``) in the table schema, row ids filled,
    deleted rows dropped: the step every rewrite takes per row group."""
    t = conform(raw, target, by_id=by_id)
    if fill is not None:
        t = fill(t, start)
    keep = deleted.keep(start, t.num_rows) if deleted is not None else None
    return t if keep is None else filter_(t, keep)


def filler(row_tracking: RowTrackingColumns | None, f: InputFile) -> Callable[[Any, int], Any] | None:
    """The row tracking step for input ``f`` (None when the table keeps no row ids)."""
    if row_tracking is None:
        return None
    base, version = f.base_row_id, f.default_row_commit_version
    if base is None or version is None:
        raise ValueError(f"{f.path}: row tracking needs baseRowId and defaultRowCommitVersion")
    return lambda table, start: fill_row_tracking(
        table, positions_from(start, table.num_rows), base, version, row_tracking.row_id, row_tracking.commit_version
    )


def read_live_tables(
    storage: Storage,
    root: str,
    inputs: Sequence[InputFile],
    target: Any,
    *,
    local: bool,
    by_id: bool,
    row_tracking: RowTrackingColumns | None,
    fetch: FetchPool | None = None,
) -> Iterator[Any]:
    """Every input's live rows, conformed to ``target``, as Arrow tables in input order (``fetch``: the
    process's pool for object-store fetches, see ``open_inputs``)."""
    from ..delta.deletion_vectors import load_deleted_rows

    columns = _TargetColumns(target)
    for f, reader, source in open_inputs(storage, inputs, local=local, fetch=fetch):
        deleted = load_deleted_rows(f.deletion_vector, root=root, storage=storage) if f.deletion_vector else None
        fill = filler(row_tracking, f)
        yield from live_row_groups(reader, f.path, target, deleted, fill, by_id=by_id, source=source, columns=columns)
