"""A snapshot's live add actions as Arrow columns, so a million files cost columns, not objects.

deltalake decides which files are live; this module reads their exact add actions (partition-value
strings, stats, tags, deletion vectors, row-tracking fields) from the newest checkpoint and the
commits after it as Arrow arrays, keeps the last add of each live path, and sorts by path. An
``AddFile`` is built only when somebody asks for one (``FileView``): planning works on the columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any, overload
from urllib.parse import unquote

from .actions import ADD, AddFile, DeletionVector
from .checkpoint_v2 import CheckpointFiles, checkpoint_files
from .log import LogListing, commit_path
from .storage import Storage

__all__ = ["FileTable", "FileView", "LogAdds", "RawKey", "build_file_table", "match_live", "read_log_adds"]

RawKey = tuple[str | None, ...]  #: raw partition values in partition-column order ("" read as null)
_NULL = "\x00null\x00"
#: Rows of a FileView converted to AddFiles at a time.
_CHUNK = 1024
_SEP = "\x00|\x00"


@cache
def _types() -> tuple[Any, Any]:
    """The Arrow types of a partition map and of an add action (the checkpoint's), built on first use."""
    import pyarrow as pa

    string_map = pa.map_(pa.string(), pa.string())
    dv = pa.struct(
        [
            ("storageType", pa.string()),
            ("pathOrInlineDv", pa.string()),
            ("offset", pa.int32()),
            ("sizeInBytes", pa.int32()),
            ("cardinality", pa.int64()),
        ]
    )
    add = pa.struct(
        [
            ("path", pa.string()),
            ("partitionValues", string_map),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            ("stats", pa.string()),
            ("tags", string_map),
            ("deletionVector", dv),
            ("baseRowId", pa.int64()),
            ("defaultRowCommitVersion", pa.int64()),
            ("clusteringProvider", pa.string()),
        ]
    )
    return string_map, add


def _conform(adds: Any) -> Any:
    """A struct array of adds (checkpoint or JSON) in ADD_TYPE's shape: missing fields null, others cast."""
    import pyarrow as pa

    _, add_type = _types()
    present = {adds.type.field(i).name for i in range(adds.type.num_fields)}
    children = []
    for wanted in add_type:
        if wanted.name in present:
            child = adds.field(wanted.name)
            children.append(child if child.type == wanted.type else child.cast(wanted.type))
        else:
            children.append(pa.nulls(len(adds), wanted.type))
    return pa.StructArray.from_arrays(children, fields=list(add_type))


def _checkpoint_parts(
    storage: Storage,
    path: str,
    fields: Sequence[str],
    shape: Callable[[Any], Any] | None = None,
    before: Callable[[int], None] | None = None,
) -> list[Any]:
    """The checkpoint's add actions (rows with a path) as structs of only ``fields`` (those present), one
    array per row group.

    Read one row group at a time, each filtered to its adds and ``shape``d (``_conform``) before the
    next is read, and never concatenated: the peak is the adds plus one row group, not several copies.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parts = []
    with storage.open_input(path) as fh:
        # ParquetFile.read_row_group, not pq.read_table: the dataset scanner behind read_table can leave reads
        # of this Python file in flight on Arrow's I/O threads after it returns, and they abort the process at
        # exit (apache/arrow#34314). ParquetFile's reads are synchronous.
        pf = pq.ParquetFile(fh)
        if before is not None:  # the footer says how large it is before a row is read
            before(pf.metadata.num_rows)
        if ADD not in pf.schema_arrow.names:  # a V2 top-level file or a sidecar of removes only
            empty = pa.StructArray.from_arrays([pa.array([], pa.string())], names=["path"])
            return [shape(empty) if shape is not None else empty]
        present = pf.schema_arrow.field(ADD).type
        names = [f for f in fields if present.get_field_index(f) >= 0]
        columns = [f"{ADD}.{f}" for f in names]  # the add struct with only these children
        for group in range(pf.num_row_groups):
            for adds in pf.read_row_group(group, columns=columns, use_threads=False).column(ADD).chunks:
                column = pa.StructArray.from_arrays(adds.flatten(), names=[f.name for f in adds.type])
                column = column.filter(pc.is_valid(column.field("path")))  # null rows: null leaves
                if len(column):
                    parts.append(shape(column) if shape is not None else column)
    if not parts:
        empty = pa.StructArray.from_arrays([pa.array([], pa.string())], names=["path"])
        return [shape(empty) if shape is not None else empty]
    return parts


def _checkpoint_column(storage: Storage, path: str, fields: Sequence[str]) -> Any:
    """``_checkpoint_parts`` as one array."""
    import pyarrow as pa

    parts = _checkpoint_parts(storage, path, fields)
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _inline_adds(where: CheckpointFiles, fields: Sequence[str]) -> Any | None:
    """Adds written inline in a V2 checkpoint's JSON top-level file, as structs of ``fields``."""
    import pyarrow as pa

    rows = [a[ADD] for a in where.json_actions if ADD in a]
    if not rows:
        return None
    _, add_type = _types()
    wanted = [f for f in add_type if f.name in fields]
    return pa.array([{f.name: r.get(f.name) for f in wanted} for r in rows], pa.struct(wanted))


def _checkpoint_adds(
    storage: Storage, root: str, names: Sequence[str], before: Callable[[int], None] | None = None
) -> list[Any]:
    """Every add of a checkpoint but its stats (the bulk of its bytes), which planning rarely reads."""
    _, add_type = _types()
    fields = [f.name for f in add_type if f.name != "stats"]
    where = checkpoint_files(storage, root, names)
    parts = [part for path in where.parquet for part in _checkpoint_parts(storage, path, fields, _conform, before)]
    inline = _inline_adds(where, fields)
    return parts if inline is None else [*parts, _conform(inline)]


def _checkpoint_stats(storage: Storage, root: str, names: Sequence[str]) -> list[Any]:
    """The stats strings of a checkpoint's adds, in the order of ``_checkpoint_adds``."""
    import pyarrow as pa

    where = checkpoint_files(storage, root, names)
    out = []
    for path in where.parquet:
        column = _checkpoint_column(storage, path, ["path", "stats"])
        has = column.type.get_field_index("stats") >= 0
        out.append(column.field("stats").cast(pa.string()) if has else pa.nulls(len(column), pa.string()))
    inline = _inline_adds(where, ["path", "stats"])
    if inline is not None:
        out.append(inline.field("stats"))
    return out


@dataclass
class _CommitReplay:
    """The adds and removes of the commits after a checkpoint, replayed in order."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    added_in: list[int] = field(default_factory=list)
    latest: dict[str, int] = field(default_factory=dict)  # path -> index in rows of its last add
    removed: set[str] = field(default_factory=set)

    def apply(self, version: int, line: bytes) -> None:
        action = json.loads(line)
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

        _, add_type = _types()
        return pa.array(self.rows, type=add_type), pa.array(self.added_in, pa.int64())


def _dv_id(dv: Any) -> str | None:
    """A raw deletionVector's unique id (None for no DV), as ``DeletionVector.unique_id``."""
    if not dv:
        return None
    base = f"{dv.get('storageType')}{dv.get('pathOrInlineDv')}"
    return base if dv.get("offset") is None else f"{base}@{dv['offset']}"


def _replay(storage: Storage, root: str, versions: Sequence[int]) -> _CommitReplay:
    replay = _CommitReplay()
    for v in versions:
        for line in storage.read_bytes(commit_path(root, v)).splitlines():
            if b'"add"' in line or b'"remove"' in line:
                replay.apply(v, line)
    return replay


def _decoded(paths: Any) -> Any:
    """URI-decoded paths (only computed in Python when some path has an escape)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pc.any(pc.match_substring(paths, "%")).as_py():
        return paths
    return pa.array([unquote(p) for p in paths.to_pylist()], pa.string())


@dataclass(frozen=True)
class FileTable:
    """Live add actions (one row per live file, sorted by path) and the version that added each."""

    adds: Any  # pyarrow.StructArray of ADD_TYPE
    versions: Any  # pyarrow.Int64Array
    _encoded: dict[tuple[str, ...], tuple[Any, list[RawKey]]] = field(default_factory=dict, compare=False, repr=False)
    #: Loads the stats column (in row order) on first use; None when ``adds`` holds the stats.
    stats_loader: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    _stats: list[Any] = field(default_factory=list, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.adds)

    @classmethod
    def from_files(cls, files: Sequence[AddFile], versions: Sequence[int] | int = 0) -> FileTable:
        """The table of some AddFiles (sorted by path), each added at ``versions`` (one each, or one for all).

        For the files the log replay could not match (the snapshot's slow path) and hand-built snapshots.
        """
        import pyarrow as pa

        _, add_type = _types()
        added_in = [versions] * len(files) if isinstance(versions, int) else list(versions)
        order = sorted(range(len(files)), key=lambda i: files[i].path)
        adds = pa.array([files[i].to_json() for i in order], type=add_type)
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
        if name == "stats" and self.stats_loader is not None:
            if not self._stats:
                self._stats.append(self.stats_loader())
            return self._stats[0]
        return self.adds.field(name)

    def partition_strings(self, columns: Sequence[str]) -> list[Any]:
        """One Arrow string array per partition column: each file's raw value ("" read as null)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        pv = self.adds.field("partitionValues")
        out = []
        for c in columns:
            flat = pc.map_lookup(pv, pa.scalar(c, pa.string()), "first") if len(pv) else pa.array([], pa.string())
            out.append(pc.if_else(pc.equal(flat, ""), pa.scalar(None, pa.string()), flat))
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
        import pyarrow.compute as pc

        if not columns or not len(self):
            return pa.array([0] * len(self), pa.int32()), [()]
        strings = [pc.fill_null(c, _NULL) for c in self.partition_strings(columns)]
        joined = strings[0] if len(strings) == 1 else pc.binary_join_element_wise(*strings, _SEP)
        encoded = pc.dictionary_encode(joined)
        keys: list[RawKey] = [
            tuple(None if v == _NULL else v for v in (text.split(_SEP) if len(strings) > 1 else [text]))
            for text in encoded.dictionary.to_pylist()
        ]
        return encoded.indices.cast(pa.int32()), keys

    def file(self, i: int) -> AddFile:
        return self.files([i])[0]

    def files(self, rows: Sequence[int]) -> list[AddFile]:
        """The AddFiles of some rows, converted from Arrow in one call (not a scalar access per field)."""
        import pyarrow as pa

        indices = pa.array(rows, pa.int64())
        records = self.adds.take(indices).to_pylist()
        stats = self.column("stats").take(indices).to_pylist() if self.stats_loader is not None else None
        out = []
        for k, row in enumerate(records):
            if stats is not None:
                row["stats"] = stats[k]
            row["partitionValues"] = dict(row.get("partitionValues") or [])
            row["tags"] = dict(row.get("tags") or [])
            dv = row.get("deletionVector")
            row["deletionVector"] = {k2: v for k2, v in dv.items() if v is not None} if dv else None
            out.append(AddFile.from_json({k2: v for k2, v in row.items() if v is not None}))
        return out

    def deletion_vector(self, i: int) -> DeletionVector | None:
        return self.file(i).deletion_vector


class FileView(Sequence[AddFile]):
    """Some rows of a FileTable as a sequence of AddFiles, built on access (and kept)."""

    def __init__(self, table: FileTable, rows: Sequence[int] | None = None, *, total_size: int | None = None) -> None:
        self.table = table
        self.rows = list(range(len(table))) if rows is None else rows if isinstance(rows, list) else list(rows)
        self._cache: dict[int, AddFile] = {}
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
        if row not in self._cache:  # the chunk around i, in one conversion
            start = i - i % _CHUNK
            chunk = self.rows[start : start + _CHUNK]
            self._cache.update(zip(chunk, self.table.files(chunk)))
        return self._cache[row]

    def __iter__(self) -> Iterator[AddFile]:
        for i in range(len(self.rows)):
            yield self[i]

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
    import pyarrow.compute as pc

    touched = pa.array([*replay.removed, *replay.latest], pa.string())
    cp_rows = pc.indices_nonzero(pc.invert(pc.is_in(checkpoint_paths, value_set=touched)))
    commit_rows = pa.array(sorted(checkpoint_size + i for i in replay.latest.values()), pa.uint64())
    return pa.concat_arrays([cp_rows, commit_rows]).cast(pa.int64())


def _matched_rows(paths: Any, live: Any) -> tuple[Any, list[str]]:
    """The slower check: find each live path among the adds, the last add of a path winning; and paths not found."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pc.count_distinct(paths).as_py() == len(paths):  # each path added once: match directly
        found = pc.index_in(live, value_set=paths)
        ok = pc.is_valid(found)
        rows = found.filter(ok).cast(pa.int64())
    else:  # re-added paths: the last add wins, so search the reversed list, whose first match is it
        reverse = pa.array(range(len(paths) - 1, -1, -1), pa.int64())
        found = pc.index_in(live, value_set=paths.take(reverse))
        ok = pc.is_valid(found)
        rows = reverse.take(found.filter(ok))
    missing = live.filter(pc.invert(ok)).to_pylist() if not pc.all(ok).as_py() else []
    return rows, missing


def _same_paths(ours: Any, live: Any, *, presorted: bool) -> bool:
    """Whether two path lists hold the same paths (``ours`` already sorted when ``presorted``)."""
    import pyarrow.compute as pc

    if len(ours) != len(live):
        return False
    if not presorted:
        ours = ours.take(pc.sort_indices(ours))
    return pc.all(pc.equal(ours, live.take(pc.sort_indices(live)))).as_py() is not False


def _sorted_by_path(paths: Any, rows: Any) -> Any:
    import pyarrow.compute as pc

    return rows.take(pc.sort_indices(paths.take(rows)))


@dataclass(frozen=True)
class LogAdds:
    """Every add action from the newest checkpoint at or before ``version`` and the commits after it.

    ``parts`` are the ADD_TYPE struct arrays: the checkpoint's (without stats, one per row group), then
    the commits'. They are never concatenated, and ``match_live`` consumes them (empties the list) as it
    builds the FileTable, one field at a time, so the adds are never held twice.
    """

    version: int
    parts: list[Any]
    versions: Any  # the version each add came from (the checkpoint's for its adds)
    checkpoint_size: int
    checkpoint: tuple[str, ...]  # the checkpoint's file names (for the stats, read on demand)
    replay: _CommitReplay


def read_log_adds(
    storage: Storage, root: str, version: int, listing: LogListing, before: Callable[[int], None] | None = None
) -> LogAdds:
    """Read the adds a snapshot at ``version`` is made of (the part that does not need deltalake's answer).

    ``before`` is called with the rows of each checkpoint part before its adds are read (it may wait).
    """
    import pyarrow as pa

    cp = listing.checkpoint_at_or_before(version)
    names = listing.checkpoints[cp] if cp is not None else ()
    parts = _checkpoint_adds(storage, root, names, before)
    part_versions = [pa.repeat(pa.scalar(cp, pa.int64()), len(p)) for p in parts]
    replay = _replay(storage, root, [v for v in listing.commits if (cp is None or v > cp) and v <= version])
    if replay.rows:
        commit_adds, added_in = replay.arrays()
        parts.append(commit_adds)
        part_versions.append(added_in)
    versions = pa.concat_arrays(part_versions) if parts else pa.array([], pa.int64())
    return LogAdds(version, parts, versions, len(versions) - len(replay.rows), tuple(names), replay)


def _consume_fields(parts: list[Any]) -> list[list[Any]]:
    """The parts' children, per field; ``parts`` is emptied, so each field's buffers are freed once taken."""
    _, add_type = _types()
    by_field = [[part.field(i) for part in parts] for i in range(add_type.num_fields)]
    parts.clear()
    return by_field


def _take(by_field: list[list[Any]], rows: Any) -> Any:
    """One StructArray of the ``rows`` of each field's chunks, built field by field and releasing each
    field's chunks as it goes (Arrow's take of a chunked struct array would first concatenate all of it)."""
    import pyarrow as pa

    _, add_type = _types()
    columns = []
    for i, field_type in enumerate(add_type):
        chunks, by_field[i] = by_field[i], []
        column = pa.chunked_array(chunks, field_type.type).take(rows)
        del chunks
        columns.append(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    return pa.StructArray.from_arrays(columns, fields=list(add_type))


def match_live(storage: Storage, root: str, log: LogAdds, live_paths: Any | None) -> tuple[FileTable, list[str]]:
    """The FileTable of ``live_paths`` (deltalake's, decoded or not); and live paths not found among the adds.
    With ``live_paths`` None our replay alone decides (``delta/lean_replay.py``: large tables).

    The replay of the commits over the checkpoint must give deltalake's live list (compared
    sorted); if it does not, each live path is looked up among all adds instead. ``log``'s parts are
    consumed (released while the FileTable is built): match a LogAdds once.
    """
    import pyarrow as pa

    _, add_type = _types()
    by_field = _consume_fields(log.parts)
    raw_paths = pa.chunked_array(by_field[add_type.get_field_index("path")], pa.string()).combine_chunks()
    rows = _sorted_by_path(raw_paths, _replayed_rows(log.checkpoint_size, raw_paths[: log.checkpoint_size], log.replay))
    missing: list[str] = []
    if live_paths is not None:
        paths, live = _decoded(raw_paths), _decoded(live_paths)
        if not _same_paths(paths.take(rows), live, presorted=paths is raw_paths):
            matched, missing = _matched_rows(paths, live)
            rows = _sorted_by_path(raw_paths, matched)
        del paths
    del raw_paths
    return _built(storage, root, log, by_field, rows), missing


def _built(storage: Storage, root: str, log: LogAdds, by_field: list[list[Any]], rows: Any) -> FileTable:
    import pyarrow as pa

    _, add_type = _types()
    loader = None
    if log.checkpoint:
        names = log.checkpoint
        stats = pa.chunked_array(by_field[add_type.get_field_index("stats")], pa.string())
        commit_stats = stats.slice(log.checkpoint_size).combine_chunks()  # the commits' only: a few rows

        def loader() -> Any:
            return pa.concat_arrays([*_checkpoint_stats(storage, root, names), commit_stats]).take(rows)

    return FileTable(_take(by_field, rows), log.versions.take(rows), stats_loader=loader)


def build_file_table(
    storage: Storage, root: str, version: int, listing: LogListing, live_paths: Any
) -> tuple[FileTable, list[str]]:
    """``read_log_adds`` then ``match_live``."""
    return match_live(storage, root, read_log_adds(storage, root, version, listing), live_paths)
