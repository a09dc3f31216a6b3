"""A snapshot's live add actions as Arrow columns, so a million files cost columns, not objects.

deltalake decides which files are live; this module reads their exact add actions (partition-value
strings, stats, tags, deletion vectors, row-tracking fields) from the newest checkpoint and the
commits after it as Arrow arrays, keeps the last add of each live path, and sorts by path. An
``AddFile`` is built only when somebody asks for one (``FileView``): planning works on the columns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, overload
from urllib.parse import unquote

from .actions import ADD, AddFile, DeletionVector
from .log import LOG_DIR, LogListing, commit_path
from .storage import Storage, join

__all__ = ["FileTable", "FileView", "build_file_table"]


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
    for field in add_type:
        if field.name in present:
            child = adds.field(field.name)
            children.append(child if child.type == field.type else child.cast(field.type))
        else:
            children.append(pa.nulls(len(adds), field.type))
    return pa.StructArray.from_arrays(children, fields=list(add_type))


def _checkpoint_adds(storage: Storage, root: str, names: Sequence[str]) -> list[Any]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = []
    for name in names:
        if not name.endswith(".parquet"):
            continue
        with storage.open_input(join(root, LOG_DIR, name)) as fh:
            column = pq.read_table(fh, columns=[ADD]).column(ADD).combine_chunks()
        out.append(_conform(column.filter(pc.is_valid(column))))
    return out


def _commit_adds(storage: Storage, root: str, versions: Sequence[int]) -> tuple[list[Any], list[int]]:
    import pyarrow as pa

    _, add_type = _types()
    rows: list[dict[str, Any]] = []
    added_in: list[int] = []
    for v in versions:
        for line in storage.read_bytes(commit_path(root, v)).splitlines():
            if b'"add"' in line:
                action = json.loads(line)
                if ADD in action:
                    rows.append(action[ADD])
                    added_in.append(v)
    return ([pa.array(rows, type=add_type)] if rows else []), added_in


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

    def __len__(self) -> int:
        return len(self.adds)

    @cached_property
    def sizes(self) -> list[int]:
        return list(self.adds.field("size").to_pylist())

    @cached_property
    def paths(self) -> list[str]:
        return list(self.adds.field("path").to_pylist())

    def column(self, name: str) -> Any:
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

    def file(self, i: int) -> AddFile:
        row = self.adds[i].as_py()
        row["partitionValues"] = dict(row.get("partitionValues") or [])
        row["tags"] = dict(row.get("tags") or [])
        row["deletionVector"] = {k: v for k, v in (row.get("deletionVector") or {}).items() if v is not None} or None
        return AddFile.from_json({k: v for k, v in row.items() if v is not None})

    def deletion_vector(self, i: int) -> DeletionVector | None:
        return self.file(i).deletion_vector


class FileView(Sequence[AddFile]):
    """Some rows of a FileTable as a sequence of AddFiles, built on access (and kept)."""

    def __init__(self, table: FileTable, rows: Sequence[int] | None = None) -> None:
        self.table = table
        self.rows = list(range(len(table))) if rows is None else list(rows)
        self._cache: dict[int, AddFile] = {}

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> AddFile: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[AddFile]: ...

    def __getitem__(self, i: int | slice) -> AddFile | Sequence[AddFile]:
        if isinstance(i, slice):
            return FileView(self.table, self.rows[i])
        row = self.rows[i]
        if row not in self._cache:
            self._cache[row] = self.table.file(row)
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
        sizes = self.table.sizes
        return int(sum(int(sizes[r]) for r in self.rows))

    @property
    def paths(self) -> list[str]:
        paths = self.table.paths
        return [paths[r] for r in self.rows]


def build_file_table(
    storage: Storage, root: str, version: int, listing: LogListing, live_paths: Any
) -> tuple[FileTable, list[str]]:
    """The live adds of ``live_paths`` (deltalake's, decoded or not) at ``version``; and paths not found."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cp = listing.checkpoint_at_or_before(version)
    parts = _checkpoint_adds(storage, root, listing.checkpoints[cp]) if cp is not None else []
    part_versions = [pa.repeat(pa.scalar(cp, pa.int64()), len(p)) for p in parts]
    after = [v for v in listing.commits if (cp is None or v > cp) and v <= version]
    commit_parts, added_in = _commit_adds(storage, root, after)
    parts += commit_parts
    part_versions += [pa.array(added_in, pa.int64())] if added_in else []
    _, add_type = _types()
    if not parts:
        return FileTable(pa.array([], add_type), pa.array([], pa.int64())), list(live_paths.to_pylist())
    adds = pa.concat_arrays(parts)
    versions = pa.concat_arrays(part_versions)
    paths = _decoded(adds.field("path"))
    live = _decoded(live_paths)
    if pc.count_distinct(paths).as_py() == len(paths):  # each path added once: match directly
        found = pc.index_in(live, value_set=paths)
        ok = pc.is_valid(found)
        rows = found.filter(ok).cast(pa.int64())
    else:  # re-added paths: the last add wins, so search the reversed list, whose first match is it
        reverse = pa.array(range(len(adds) - 1, -1, -1), pa.int64())
        found = pc.index_in(live, value_set=paths.take(reverse))
        ok = pc.is_valid(found)
        rows = reverse.take(found.filter(ok))
    missing = live.filter(pc.invert(ok)).to_pylist() if not pc.all(ok).as_py() else []
    rows = rows.take(pc.sort_indices(adds.field("path").take(rows)))
    return FileTable(adds.take(rows), versions.take(rows)), missing
