"""A snapshot's live add actions as Arrow columns, so a million files cost columns, not objects.

Our replay (``lean_replay``, or deltalake's load as its fallback) decides which files are live; this module
reads their exact add actions (partition-value strings, stats, tags, deletion vectors, row-tracking fields)
from the newest checkpoint and the commits after it as Arrow arrays, keeps the last add of each live path,
and sorts by path. An ``AddFile`` is built only when somebody asks for one (``FileView``): planning works on
the columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, overload
from urllib.parse import unquote

from .. import arrow_kernels as ak
from .actions import ADD, AddFile, DeletionVector
from .arrow_arrays import repeated_int64
from .checkpoint_adds import LazyFields, add_type, checkpoint_adds, lean_type
from .log import LogCache, LogListing, commit_path, in_order, parse_commit, read_threads
from .storage import Storage

__all__ = ["FileTable", "FileView", "LogAdds", "RawKey", "RowSlice", "build_file_table", "match_live", "read_log_adds"]

RawKey = tuple[str | None, ...]  #: raw partition values in partition-column order ("" read as null)
_NULL = "\x00null\x00"
#: Rows of a FileView converted to AddFiles at a time.
_CHUNK = 1024
_SEP = "\x00|\x00"


@dataclass
class _CommitReplay:
    """The adds and removes of the commits after a checkpoint, replayed in order."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    added_in: list[int] = field(default_factory=list)
    latest: dict[str, int] = field(default_factory=dict)  # path -> index in rows of its last add
    removed: set[str] = field(default_factory=set)

    def apply(self, version: int, action: dict[str, Any]) -> None:
        if ADD in action:
            path = action[ADD]["path"]
            self.latest[path] = len(self.rows)
            self.removed.discard(path)
            self.rows.append(action[ADD])
            self.added_in.append(version)
        elif "remove" in action:
            remove = action["remove"]
            path = remove["path"]
            last = self.latest.get(path)
            # A DELETE that adds a deletion vector writes add(path, new DV) and remove(path, old DV) in
            # one commit: a remove retires only the add with its own DV (the log's key is path + DV).
            if last is not None and _dv_id(self.rows[last].get("deletionVector")) != _dv_id(
                remove.get("deletionVector")
            ):
                return
            self.removed.add(path)
            self.latest.pop(path, None)

    def arrays(self) -> tuple[Any, Any]:
        """Every add seen (as ADD_TYPE structs) and the version that added it."""
        import pyarrow as pa

        return pa.array(self.rows, type=add_type()), pa.array(self.added_in, pa.int64())


def _dv_id(dv: Any) -> str | None:
    """A raw deletionVector's unique id (None for no DV), as ``DeletionVector.unique_id``."""
    if not dv:
        return None
    base = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    return base if dv.get("offset") is None else f"{base}@{dv['offset']}"


def _replay(storage: Storage, root: str, versions: Sequence[int], cache: LogCache | None = None) -> _CommitReplay:
    """The commits replayed in version order, read concurrently (``log.in_order``), kept in ``cache``."""
    replay = _CommitReplay()
    read = (lambda v: storage.read_bytes(commit_path(root, v))) if cache is None else cache.read
    parse = (lambda v, data: parse_commit(data, root, v)) if cache is None else cache.parsed
    for v, data in zip(versions, in_order(read, versions, threads=read_threads(storage))):
        for action in parse(v, data):  # one orjson call per commit, not one json.loads per line
            replay.apply(v, action)
    return replay


def _decoded(paths: Any) -> Any:
    """URI-decoded paths (only computed in Python when some path has an escape)."""
    import pyarrow as pa

    if not ak.any_(ak.match_substring(paths, "%")).as_py():
        return paths
    return pa.array([unquote(p) for p in paths.to_pylist()], pa.string())


@dataclass(frozen=True)
class FileTable:
    """Live add actions (one row per live file, sorted by path) and the version that added each."""

    adds: Any  # pyarrow.StructArray of ADD_TYPE
    versions: Any  # pyarrow.Int64Array
    _encoded: dict[tuple[str, ...], tuple[Any, list[RawKey]]] = field(default_factory=dict, compare=False, repr=False)
    #: Reads the fields ``adds`` does not hold (stats, tags, times, row tracking) on demand; None when
    #: ``adds`` holds every field (a table made from AddFiles).
    lazy: LazyFields | None = field(default=None, compare=False, repr=False)
    #: Fields null in every row, not held (a table without deletion vectors holds no column of them).
    null_fields: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    _loaded: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.adds)

    @classmethod
    def from_files(cls, files: Sequence[AddFile], versions: Sequence[int] | int = 0) -> FileTable:
        """The table of some AddFiles (sorted by path), each added at ``versions`` (one each, or one for all).

        For the files the log replay could not match (the snapshot's slow path) and hand-built snapshots.
        """
        import pyarrow as pa

        added_in = [versions] * len(files) if isinstance(versions, int) else list(versions)
        order = sorted(range(len(files)), key=lambda i: files[i].path)
        adds = pa.array([files[i].to_json() for i in order], type=add_type())
        return cls(adds, pa.array([added_in[i] for i in order], pa.int64()))

    @cached_property
    def sizes(self) -> list[int]:
        return list(self.adds.field("size").to_pylist())

    @cached_property
    def paths(self) -> list[str]:
        return list(self.adds.field("path").to_pylist())

    def decoded_paths(self) -> Any:
        """The paths, URI-decoded (as deltalake and the file system name them)."""
        return _decoded(self.adds.field("path"))

    def column(self, name: str) -> Any:
        """One field of every live add, in row order (read from the log on first use if not held)."""
        if self.adds.type.get_field_index(name) >= 0:
            return self.adds.field(name)
        if name in self.null_fields:
            import pyarrow as pa

            return pa.nulls(len(self), add_type().field(name).type)
        if name not in self._loaded:
            self._load([name])
        return self._loaded[name]

    def iter_column(self, name: str) -> Iterator[Any]:
        """Every row's value of one field, as Arrow arrays in an order of their own: read one checkpoint
        row group at a time when the table does not hold the field (no whole column in memory)."""
        if (
            self.lazy is None
            or name in self._loaded
            or name in self.null_fields
            or self.adds.type.get_field_index(name) >= 0
        ):
            yield self.column(name)
            return
        for part in self.lazy.iter_read([name]):
            yield part.field(name)

    def values_at(self, name: str, rows: Sequence[int]) -> list[Any]:
        """One field of some rows as Python values: read for those rows only when the table does not hold it."""
        import pyarrow as pa

        indices = pa.array(rows, pa.int64())
        if name in self.null_fields:
            return [None] * len(indices)
        if self.adds.type.get_field_index(name) >= 0 or self.lazy is None or name in self._loaded:
            return list(ak.take(self.column(name), indices).to_pylist())
        return list(self.lazy.read([name], indices).field(name).to_pylist())

    def has_deletion_vectors(self) -> bool:
        """Whether some live file has a deletion vector (no column is built to say no)."""
        return "deletionVector" not in self.null_fields and self.column("deletionVector").null_count < len(self)

    def no_map_entries(self, name: str) -> bool:
        """Whether no live file has an entry in map field ``name`` (``tags``), known without reading the field
        (the checkpoint's statistics, ``LazyFields.no_map_entries``); False when not known so."""
        if self.lazy is None or name in self._loaded or name not in self._missing():
            return False
        return bool(self.lazy.no_map_entries(name))

    def _missing(self) -> list[str]:
        """The fields read on demand (not held, not known null)."""
        held = {f.name for f in self.adds.type} | self.null_fields
        return [f.name for f in add_type() if f.name not in held] if self.lazy is not None else []

    def _load(self, names: Sequence[str]) -> None:
        if self.lazy is None:
            raise KeyError(names[0])
        read = self.lazy.read(names)
        for name in names:
            self._loaded[name] = read.field(name)

    def partition_strings(self, columns: Sequence[str]) -> list[Any]:
        """One Arrow string array per partition column: each file's raw value ("" read as null)."""
        import pyarrow as pa

        pv = self.adds.field("partitionValues")
        out = []
        uniform = _uniform_maps(pv, columns)
        for i, c in enumerate(columns):
            if uniform is not None:
                flat = uniform[i]
            else:
                flat = ak.map_lookup(pv, pa.scalar(c, pa.string()), "first") if len(pv) else pa.array([], pa.string())
            out.append(ak.if_else(ak.equal(flat, ""), pa.scalar(None, pa.string()), flat))
        return out

    def partition_keys(self, columns: Sequence[str]) -> set[RawKey]:
        """The distinct raw partition keys of the live files ("" read as null)."""
        return set(self.partition_codes(columns)[1]) if len(self) else set()

    def partition_codes(self, columns: Sequence[str]) -> tuple[Any, list[RawKey]]:
        """Each row's partition as a number (an Arrow int32 array) and the raw key of each number.

        Dictionary-encoded by Arrow, once per column list: a million rows hold a few thousand keys.
        """
        key = tuple(columns)
        if key not in self._encoded:
            self._encoded[key] = self._encode(key)
        return self._encoded[key]

    def _encode(self, columns: tuple[str, ...]) -> tuple[Any, list[RawKey]]:
        import pyarrow as pa

        if not columns or not len(self):
            return pa.array([0] * len(self), pa.int32()), [()]
        strings = [ak.fill_null(c, _NULL) for c in self.partition_strings(columns)]
        joined = strings[0] if len(strings) == 1 else ak.binary_join_element_wise(*strings, _SEP)
        encoded = ak.dictionary_encode(joined)
        keys: list[RawKey] = [
            tuple(None if v == _NULL else v for v in (text.split(_SEP) if len(strings) > 1 else [text]))
            for text in encoded.dictionary.to_pylist()
        ]
        return ak.cast(encoded.indices, pa.int32()), keys

    def file(self, i: int) -> AddFile:
        return self.files([i])[0]

    def files(self, rows: Sequence[int]) -> list[AddFile]:
        """The AddFiles of some rows, converted from Arrow a column at a time (no dict per row, no scalar per field):
        3.3 us a file against 6.2 through a dict per row (docs/performance.md, "Issue 45, a driver without numpy")."""
        import pyarrow as pa

        indices = pa.array(rows, pa.int64())
        taken = ak.take(self.adds, indices)
        columns = {f.name: taken.field(f.name).to_pylist() for f in taken.type}
        missing = self._missing()
        if [m for m in missing if m not in self._loaded]:  # all of them for every row, once
            self._load([m for m in missing if m not in self._loaded])
        columns.update({m: ak.take(self._loaded[m], indices).to_pylist() for m in missing})
        nulls = [None] * len(indices)  # a field known null in every row (``null_fields``)
        return [AddFile.from_row(*values) for values in zip(*(columns.get(f.name, nulls) for f in add_type()))]

    def deletion_vector(self, i: int) -> DeletionVector | None:
        return self.file(i).deletion_vector


def _uniform_maps(pv: Any, columns: Sequence[str]) -> list[Any] | None:
    """Each column's values when every row's map holds exactly ``columns``, in that order, and no null map
    (what writers do): its items read in strides, no lookup per row. None otherwise."""
    import pyarrow as pa

    k = len(columns)
    if not k or not len(pv) or pv.null_count or len(pv.keys) != k * len(pv):
        return None
    offsets = pv.offsets
    if ak.any_(ak.not_equal(ak.subtract(offsets[1:], offsets[:-1]), k)).as_py():
        return None
    base = offsets[0].as_py()
    keys, items = pv.keys.slice(base, k * len(pv)), pv.items.slice(base, k * len(pv))
    out = []
    for i, c in enumerate(columns):
        where = pa.array(range(i, k * len(pv), k), pa.int64()) if k > 1 else None
        key, item = (keys, items) if where is None else (ak.take(keys, where), ak.take(items, where))
        if ak.any_(ak.not_equal(key, c)).as_py() is not False:
            return None
        out.append(item)
    return out


class RowSlice(Sequence[int]):
    """``base[lo:hi]`` of an Arrow array of rows, made into Python ints once, when first read: a plan holds one
    per bin, and a large table's rows are not held as Python ints until a bin runs."""

    __slots__ = ("_rows", "base", "hi", "lo")

    def __init__(self, base: Any, lo: int, hi: int) -> None:
        self.base, self.lo, self.hi = base, lo, hi
        self._rows: list[int] | None = None

    def _list(self) -> list[int]:
        if self._rows is None:
            self._rows = self.base.slice(self.lo, self.hi - self.lo).to_pylist()
        return self._rows

    def __len__(self) -> int:
        return self.hi - self.lo

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...

    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        return self._list()[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._list())


def _is_numpy(rows: Any) -> bool:
    return type(rows).__module__ == "numpy"


class FileView(Sequence[AddFile]):
    """Some rows of a FileTable as a sequence of AddFiles, built on access (and kept)."""

    __slots__ = ("_cache", "_total_size", "rows", "table")

    def __init__(self, table: FileTable, rows: Sequence[int] | None = None, *, total_size: int | None = None) -> None:
        self.table = table
        # all rows as a range, and a RowSlice (or numpy array) as it is: no Python int per file until read
        self.rows: Sequence[int] = (
            range(len(table))
            if rows is None
            else rows
            if isinstance(rows, (list, range, RowSlice)) or _is_numpy(rows)
            else list(rows)
        )
        self._cache: dict[int, AddFile] | None = None  # made on first access (a plan holds many views)
        self._total_size = total_size  # the planner knows it already; else summed on first use

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> AddFile: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[AddFile]: ...

    def __getitem__(self, i: int | slice) -> AddFile | Sequence[AddFile]:
        if isinstance(i, slice):
            return FileView(self.table, self.rows[i])
        if i < 0:
            i += len(self.rows)
        row = self.rows[i]
        if self._cache is None:
            self._cache = {}
        if row not in self._cache:  # the chunk around i, in one conversion
            start = i - i % _CHUNK
            chunk = self.rows[start : start + _CHUNK]
            self._cache.update(zip(chunk, self.table.files(chunk)))
        return self._cache[row]

    def __iter__(self) -> Iterator[AddFile]:
        """A chunk at a time: each converted once (``__getitem__``), then read from the cache in row order."""
        for start in range(0, len(self.rows), _CHUNK):
            self[start]  # converts the chunk that starts here, unless done before
            cache = self._cache if self._cache is not None else {}
            yield from (cache[row] for row in self.rows[start : start + _CHUNK])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self.rows))

    @property
    def total_size(self) -> int:
        if self._total_size is None:
            sizes = self.table.sizes
            self._total_size = sum(sizes[r] for r in self.rows)
        return self._total_size

    @property
    def paths(self) -> list[str]:
        paths = self.table.paths
        return [paths[r] for r in self.rows]


def _replayed_rows(checkpoint_size: int, checkpoint_paths: Any, replay: _CommitReplay) -> Any:
    """Rows (of checkpoint adds, then commit adds) live after the replay: a checkpoint holds one add per path."""
    import pyarrow as pa

    touched = pa.array([*replay.removed, *replay.latest], pa.string())
    cp_rows = ak.indices_nonzero(ak.invert(ak.is_in(checkpoint_paths, touched)))
    commit_rows = pa.array(sorted(checkpoint_size + i for i in replay.latest.values()), pa.uint64())
    return ak.cast(pa.concat_arrays([cp_rows, commit_rows]), pa.int64())


def _replayed_sorted(checkpoint_size: int, paths: Any, replay: _CommitReplay) -> Any:
    """``_replayed_rows`` in path order, by sorting every add's path in place (no copy of the live paths)."""
    import pyarrow as pa

    touched = pa.array([*replay.removed, *replay.latest], pa.string())
    kept = ak.invert(ak.is_in(paths[:checkpoint_size], touched))
    latest = set(replay.latest.values())
    commits = pa.array([i in latest for i in range(len(paths) - checkpoint_size)], pa.bool_())
    live = pa.chunked_array([*kept.chunks, commits], pa.bool_()).combine_chunks()
    order = ak.sort_indices(paths)  # paths of one live add each are distinct: the order is total
    return ak.cast(ak.filter_(order, ak.take(live, order)), pa.int64())


def _matched_rows(paths: Any, live: Any) -> tuple[Any, list[str]]:
    """The slower check: find each live path among the adds, the last add of a path winning; and paths not found."""
    import pyarrow as pa

    if ak.count_distinct(paths).as_py() == len(paths):  # each path added once: match directly
        found = ak.index_in(live, paths)
        ok = ak.is_valid(found)
        rows = ak.cast(ak.filter_(found, ok), pa.int64())
    else:  # re-added paths: the last add wins, so search the reversed list, whose first match is it
        reverse = pa.array(range(len(paths) - 1, -1, -1), pa.int64())
        found = ak.index_in(live, ak.take(paths, reverse))
        ok = ak.is_valid(found)
        rows = ak.take(reverse, ak.filter_(found, ok))
    missing = ak.filter_(live, ak.invert(ok)).to_pylist() if not ak.all_(ok).as_py() else []
    return rows, missing


def _same_paths(ours: Any, live: Any, *, presorted: bool) -> bool:
    """Whether two path lists hold the same paths (``ours`` already sorted when ``presorted``)."""
    if len(ours) != len(live):
        return False
    if not presorted:
        ours = ak.take(ours, ak.sort_indices(ours))
    return ak.all_(ak.equal(ours, ak.take(live, ak.sort_indices(live)))).as_py() is not False


def _sorted_by_path(paths: Any, rows: Any) -> Any:
    return ak.take(rows, ak.sort_indices(ak.take(paths, rows)))


@dataclass(frozen=True)
class LogAdds:
    """Every add action from the newest checkpoint at or before ``version`` and the commits after it.

    ``parts`` are struct arrays of ``LEAN_FIELDS`` only: the checkpoint's (one per row group), then the
    commits'. They are never concatenated, and ``match_live`` consumes them (empties the list) as it
    builds the FileTable, one field at a time, so the adds are never held twice. The other fields are
    read again when asked for (``LazyFields``).
    """

    version: int
    parts: list[Any]
    versions: Any  # the version each add came from (the checkpoint's for its adds)
    checkpoint_size: int
    checkpoint: tuple[str, ...]  # the checkpoint's file names (for the other fields, read on demand)
    replay: _CommitReplay
    commit_adds: Any = None  # every field of the commits' adds (a few rows), in replay order


def read_log_adds(
    storage: Storage,
    root: str,
    version: int,
    listing: LogListing,
    before: Callable[[int], None] | None = None,
    *,
    cache: LogCache | None = None,
) -> LogAdds:
    """Read the adds a snapshot at ``version`` is made of (the part that does not need deltalake's answer).

    ``before`` is called with the rows of each checkpoint part before its adds are read (it may wait);
    ``cache`` keeps the commits' bytes for the run's later readers (and gives those already read).
    """
    import pyarrow as pa

    cp = listing.checkpoint_at_or_before(version)
    names = listing.checkpoints[cp] if cp is not None else ()
    parts = checkpoint_adds(storage, root, names, before=before)
    part_versions = [repeated_int64(cp, len(p)) for p in parts] if cp is not None else []
    replay = _replay(storage, root, [v for v in listing.commits if (cp is None or v > cp) and v <= version], cache)
    commit_adds, added_in = replay.arrays()
    if replay.rows:
        lean = lean_type()
        parts.append(pa.StructArray.from_arrays([commit_adds.field(f.name) for f in lean], fields=list(lean)))
        part_versions.append(added_in)
    versions = pa.concat_arrays(part_versions) if parts else pa.array([], pa.int64())
    return LogAdds(version, parts, versions, len(versions) - len(replay.rows), tuple(names), replay, commit_adds)


def _consume_fields(parts: list[Any]) -> list[list[Any]]:
    """The parts' children, per field; ``parts`` is emptied, so each field's buffers are freed once taken."""
    by_field = [[part.field(i) for part in parts] for i in range(lean_type().num_fields)]
    parts.clear()
    return by_field


#: Fields left out of a FileTable when null in every row.
_MAY_BE_DROPPED = frozenset({"deletionVector"})


def _take(by_field: list[list[Any]], rows: Any) -> tuple[Any, frozenset[str]]:
    """One StructArray of the ``rows`` of each field's chunks, built field by field and releasing each
    field's chunks as it goes (Arrow's take of a chunked struct array would first concatenate all of it)."""
    import pyarrow as pa

    lean = lean_type()
    pool = pa.default_memory_pool()
    columns: dict[str, Any] = {}
    null = set()
    # Fields that may be dropped first (their chunks freed at once), the largest (path) last.
    for i in sorted(range(len(by_field)), key=lambda i: (lean[i].name not in _MAY_BE_DROPPED, lean[i].name == "path")):
        field_type = lean[i]
        chunks, by_field[i] = by_field[i], []
        if field_type.name in _MAY_BE_DROPPED and all(c.null_count == len(c) for c in chunks):
            null.add(field_type.name)  # no deletion vector anywhere: no column of nulls (about 24 B a file)
            continue
        # Concatenated here, the chunks freed, then taken: Arrow's take of a chunked array would hold the
        # chunks, their concatenation and the result at once.
        whole = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks) if chunks else pa.array([], field_type.type)
        del chunks
        pool.release_unused()  # the chunks' memory back to the system, not kept for small allocations
        columns[field_type.name] = ak.take(whole, rows)
        del whole
        pool.release_unused()
    fields = [f for f in lean if f.name in columns]
    return pa.StructArray.from_arrays([columns[f.name] for f in fields], fields=fields), frozenset(null)


def match_live(storage: Storage, root: str, log: LogAdds, live_paths: Any | None) -> tuple[FileTable, list[str]]:
    """The FileTable of ``live_paths`` (deltalake's, decoded or not); and live paths not found among the adds.
    With ``live_paths`` None our replay alone decides (``delta/lean_replay.py``: large tables).

    The replay of the commits over the checkpoint must give deltalake's live list (compared
    sorted); if it does not, each live path is looked up among all adds instead. ``log``'s parts are
    consumed (released while the FileTable is built): match a LogAdds once.
    """
    import pyarrow as pa

    by_field = _consume_fields(log.parts)
    raw_paths = pa.chunked_array(by_field[lean_type().get_field_index("path")], pa.string())  # not copied
    missing: list[str] = []
    if live_paths is None:
        rows = _replayed_sorted(log.checkpoint_size, raw_paths, log.replay)
    else:
        raw_paths = raw_paths.combine_chunks()
        rows = _sorted_by_path(
            raw_paths, _replayed_rows(log.checkpoint_size, raw_paths[: log.checkpoint_size], log.replay)
        )
        paths, live = _decoded(raw_paths), _decoded(live_paths)
        if not _same_paths(ak.take(paths, rows), live, presorted=paths is raw_paths):
            matched, missing = _matched_rows(paths, live)
            rows = _sorted_by_path(raw_paths, matched)
        del paths
    del raw_paths
    return _built(storage, root, log, by_field, rows), missing


def _built(storage: Storage, root: str, log: LogAdds, by_field: list[list[Any]], rows: Any) -> FileTable:
    lazy = LazyFields(storage, root, log.checkpoint, log.checkpoint_size, log.commit_adds, rows)
    adds, null = _take(by_field, rows)
    return FileTable(adds, ak.take(log.versions, rows), lazy=lazy, null_fields=null)


def build_file_table(
    storage: Storage, root: str, version: int, listing: LogListing, live_paths: Any
) -> tuple[FileTable, list[str]]:
    """``read_log_adds`` then ``match_live``."""
    return match_live(storage, root, read_log_adds(storage, root, version, listing), live_paths)
