"""A checkpoint's add actions read as Arrow columns: a projection of the add struct, one row group at a time.

Planning needs only a few fields of each add (``LEAN_FIELDS``); the rest (stats above all, then tags,
times and row-tracking fields) are read again from the checkpoint when somebody asks for them, and only
for the rows asked (``LazyFields``), so a million-file snapshot holds its paths, sizes and partition values,
not every add action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from .. import arrow_kernels as ak
from .actions import ADD
from .arrow_arrays import bounds
from .checkpoint_v2 import CheckpointFiles, checkpoint_files
from .storage import Storage

__all__ = ["LEAN_FIELDS", "LazyFields", "add_type", "checkpoint_adds", "conform", "lean_type"]

#: The fields of each add a snapshot holds: what planning reads (the others are loaded on demand).
LEAN_FIELDS = ("path", "partitionValues", "size", "deletionVector")


@cache
def add_type() -> Any:
    """The Arrow type of an add action (the checkpoint's), built on first use."""
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
    return pa.struct(
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


def sub_type(fields: Sequence[str]) -> Any:
    """The add type with only ``fields`` (in the add's field order)."""
    import pyarrow as pa

    full = add_type()
    return pa.struct([f for f in full if f.name in fields])


@cache
def lean_type() -> Any:
    return sub_type(LEAN_FIELDS)


def conform(adds: Any, target: Any | None = None) -> Any:
    """A struct array of adds (checkpoint or JSON) in ``target``'s shape (the add type by default):
    missing fields null, others cast."""
    import pyarrow as pa

    target = add_type() if target is None else target
    present = {adds.type.field(i).name for i in range(adds.type.num_fields)}
    children = []
    for wanted in target:
        if wanted.name in present:
            child = adds.field(wanted.name)
            children.append(child if child.type == wanted.type else ak.cast(child, wanted.type))
        else:
            children.append(pa.nulls(len(adds), wanted.type))
    return pa.StructArray.from_arrays(children, fields=list(target))


def _empty(shape: Callable[[Any], Any] | None) -> Any:
    import pyarrow as pa

    empty = pa.StructArray.from_arrays([pa.array([], pa.string())], names=["path"])
    return shape(empty) if shape is not None else empty


def checkpoint_parts(
    storage: Storage,
    path: str,
    fields: Sequence[str],
    shape: Callable[[Any], Any] | None = None,
    before: Callable[[int], None] | None = None,
) -> list[Any]:
    """The checkpoint's add actions (rows with a path) as structs of only ``fields`` (those present), one
    array per row group.

    Read one row group at a time, each filtered to its adds and ``shape``d before the next is read, and
    never concatenated: the peak is the adds plus one row group, not several copies.
    """
    return list(iter_parts(storage, path, fields, shape, before)) or [_empty(shape)]


def iter_parts(
    storage: Storage,
    path: str,
    fields: Sequence[str],
    shape: Callable[[Any], Any] | None = None,
    before: Callable[[int], None] | None = None,
) -> Iterator[Any]:
    """``checkpoint_parts`` one row group at a time (no empty part)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with storage.open_input(path) as fh:
        # ParquetFile.read_row_group, not pq.read_table: the dataset scanner behind read_table can leave reads
        # of this Python file in flight on Arrow's I/O threads after it returns, and they abort the process at
        # exit (apache/arrow#34314). ParquetFile's reads are synchronous.
        pf = pq.ParquetFile(fh)
        if before is not None:  # the footer says how large it is before a row is read
            before(pf.metadata.num_rows)
        if ADD not in pf.schema_arrow.names:  # a V2 top-level file or a sidecar of removes only
            return
        present = pf.schema_arrow.field(ADD).type
        names = [f for f in ("path", *fields) if present.get_field_index(f) >= 0]
        columns = [f"{ADD}.{f}" for f in dict.fromkeys(names)]  # the add struct with only these children
        for group in range(pf.num_row_groups):
            for adds in pf.read_row_group(group, columns=columns, use_threads=False).column(ADD).chunks:
                column = pa.StructArray.from_arrays(adds.flatten(), names=[f.name for f in adds.type])
                if column.field("path").null_count:  # rows of other actions: null leaves (no copy when none)
                    column = ak.filter_(column, ak.is_valid(column.field("path")))
                if len(column):
                    yield shape(column) if shape is not None else column


def inline_adds(where: CheckpointFiles, fields: Sequence[str]) -> Any | None:
    """Adds written inline in a V2 checkpoint's JSON top-level file, as structs of ``fields``."""
    import pyarrow as pa

    rows = [a[ADD] for a in where.json_actions if ADD in a]
    if not rows:
        return None
    wanted = sub_type(fields)
    return pa.array([{f.name: r.get(f.name) for f in wanted} for r in rows], wanted)


def checkpoint_adds(
    storage: Storage,
    root: str,
    names: Sequence[str],
    fields: Sequence[str] = LEAN_FIELDS,
    before: Callable[[int], None] | None = None,
) -> list[Any]:
    """A checkpoint's adds as ``fields`` only, one array per row group (then the V2 inline adds)."""
    target = sub_type(fields)
    where = checkpoint_files(storage, root, names)
    parts = [
        part
        for path in where.parquet
        for part in checkpoint_parts(storage, path, fields, lambda a: conform(a, target), before)
    ]
    inline = inline_adds(where, fields)
    return parts if inline is None else [*parts, conform(inline, target)]


@dataclass(frozen=True)
class LazyFields:
    """The fields of a snapshot's adds it does not hold, read again from the checkpoint on demand.

    ``rows`` maps each FileTable row to its position among the checkpoint's adds (in reading order), then
    the commits' (``commit_adds``, every field, a few rows). A read goes one row group at a time and keeps
    only the positions asked for.
    """

    storage: Storage
    root: str
    checkpoint: tuple[str, ...]
    checkpoint_size: int
    commit_adds: Any  # StructArray of the add type: the commits' adds, in replay order
    rows: Any  # Int64Array: the source position of each FileTable row

    def read(self, fields: Sequence[str], rows: Any | None = None) -> Any:
        """A StructArray of ``fields`` for FileTable ``rows`` (all rows when None), in that order."""
        import pyarrow as pa

        target = sub_type(fields)
        wanted = self.rows if rows is None else ak.take(self.rows, rows)
        order = ak.sort_indices(wanted)  # stable; Arrow's kernels, not numpy's (``delta.arrow_arrays``)
        ordered = ak.take(wanted, order)
        pieces = []
        start = 0
        for part in self._parts(fields, target, ordered):
            lo, hi = bounds(ordered, start, start + len(part))
            if hi > lo:
                pieces.append(ak.take(part, ak.subtract(ordered.slice(lo, hi - lo), pa.scalar(start, pa.int64()))))
            start += len(part)
        values = pa.concat_arrays(pieces) if pieces else pa.array([], target)
        return ak.take(values, ak.sort_indices(order))  # the inverse of the permutation ``order``

    def iter_read(self, fields: Sequence[str]) -> Iterator[Any]:
        """``read`` of every row, one checkpoint row group at a time, in the log's order (not the table's):
        for a pass over every value (health's stats) without the whole column in memory."""
        import pyarrow as pa

        target = sub_type(fields)
        ordered = ak.take(self.rows, ak.sort_indices(self.rows))
        start = 0
        for part in self._parts(fields, target, ordered):
            lo, hi = bounds(ordered, start, start + len(part))
            if hi > lo and hi - lo == len(part):  # every row of the part (positions are distinct): no copy
                yield part
            elif hi > lo:
                yield ak.take(part, ak.subtract(ordered.slice(lo, hi - lo), pa.scalar(start, pa.int64())))
            start += len(part)

    def no_map_entries(self, name: str) -> bool:
        """Whether no add holds an entry in map field ``name`` (``tags``), proven without reading a row: each
        checkpoint row group's statistics count a null key in every row, and no inline or commit add has one.
        False when the statistics do not say (then read the field)."""
        import pyarrow.parquet as pq

        from .checkpoint_v2 import all_null

        def empty(adds: Any) -> bool:  # no entry between the first and last offset (null maps hold none)
            if adds.type.get_field_index(name) < 0 or not len(adds):
                return True
            offsets = adds.field(name).offsets
            return bool(offsets[0].as_py() == offsets[len(offsets) - 1].as_py())

        where = checkpoint_files(self.storage, self.root, self.checkpoint)
        for path in where.parquet:
            with self.storage.open_input(path) as fh:
                meta = pq.ParquetFile(fh).metadata
                leaf = f"{ADD}.{name}.key_value.key"
                if not all(all_null(meta.row_group(g), leaf) for g in range(meta.num_row_groups)):
                    return False
        inline = inline_adds(where, [name])
        return (inline is None or empty(inline)) and empty(self.commit_adds)

    def _parts(self, fields: Sequence[str], target: Any, ordered: Any) -> Any:
        """Checkpoint parts (one row group at a time; skipped when no row asked lies in it), then the commits'."""
        if len(ordered) and ordered[0].as_py() < self.checkpoint_size:
            yield from self._checkpoint_parts(fields, target)
        else:
            yield _Skipped(self.checkpoint_size)
        yield conform(self.commit_adds, target)

    def _checkpoint_parts(self, fields: Sequence[str], target: Any) -> Any:
        where = checkpoint_files(self.storage, self.root, self.checkpoint)
        for path in where.parquet:
            yield from iter_parts(self.storage, path, fields, lambda a: conform(a, target))
        inline = inline_adds(where, fields)
        if inline is not None:
            yield conform(inline, target)


class _Skipped:
    """Stands for checkpoint rows none of which was asked for (only its length is used)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n
