"""A bin's input files as its task message names them, taken from the file table's columns.

A plan's bin holds a ``FileView``: its AddFiles are built from Arrow on first access, with the stats,
tags and partition values of every file. A task needs only each file's location, size, deletion
vector and row-tracking fields, so these come from four columns instead. The AddFiles are still built,
later, for the bin's remove actions: by then the first bins are running (on 5,000 files of 5.5 KB the ten
messages take 17-30 ms, not 71-103; docs/performance.md, "Issue 45, the task messages and the commit's
per-file work").
"""

from __future__ import annotations

from collections.abc import Sequence

from ..delta.actions import AddFile
from ..delta.file_table import FileView
from ..delta.snapshot import Snapshot
from ..errors import CorruptLogError
from ..tasks.messages import InputFile

__all__ = ["bin_inputs", "input_file"]


def input_file(snapshot: Snapshot, f: AddFile, *, keep_ids: bool) -> InputFile:
    """What a task needs to read one input: location, size, deletion vector, row tracking fields."""
    if keep_ids and (f.base_row_id is None or f.default_row_commit_version is None):
        raise _no_row_ids(snapshot, f.path)
    return InputFile(
        path=snapshot.file_path(f.path),
        size=f.size,
        deletion_vector=f.deletion_vector.to_json() if f.deletion_vector is not None else None,
        base_row_id=f.base_row_id if keep_ids else None,
        default_row_commit_version=f.default_row_commit_version if keep_ids else None,
    )


def bin_inputs(snapshot: Snapshot, files: Sequence[AddFile], *, keep_ids: bool) -> tuple[InputFile, ...]:
    """``input_file`` of each file, read from the columns when ``files`` is a view of the file table.

    A file with a deletion vector is still made an AddFile (the vector's JSON is ``DeletionVector``'s).
    ``keep_ids``: the table materializes row ids; a file without them in the log is refused
    (CorruptLogError) before any bin starts, as the caller builds every message first.
    """
    if not isinstance(files, FileView):
        return tuple(input_file(snapshot, f, keep_ids=keep_ids) for f in files)
    table, rows = files.table, files.rows[:]
    paths = table.values_at("path", rows)
    sizes = table.values_at("size", rows)
    dvs = table.values_at("deletionVector", rows)
    ids = table.values_at("baseRowId", rows) if keep_ids else [None] * len(paths)
    versions = table.values_at("defaultRowCommitVersion", rows) if keep_ids else [None] * len(paths)
    if keep_ids:
        missing = next((p for p, i, v in zip(paths, ids, versions) if i is None or v is None), None)
        if missing is not None:
            raise _no_row_ids(snapshot, missing)
    location = snapshot.file_path
    return tuple(
        InputFile(path=location(p), size=s, base_row_id=i, default_row_commit_version=v)
        if dv is None
        else input_file(snapshot, files[k], keep_ids=keep_ids)
        for k, (p, s, dv, i, v) in enumerate(zip(paths, sizes, dvs, ids, versions))
    )


def _no_row_ids(snapshot: Snapshot, path: str) -> CorruptLogError:
    return CorruptLogError(
        f"{snapshot.location} has row tracking enabled but data file {path!r} has no "
        "baseRowId/defaultRowCommitVersion in the log, so its rows' ids cannot be kept. Nothing was "
        "written; backfill row tracking with delta-spark."
    )
