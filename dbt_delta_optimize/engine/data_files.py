"""Which input data file broke a rewrite, and why: missing, empty, not Parquet, or not the table's schema.

Called only after a bin's rewrite failed (Spark and Arrow report such failures as long stack
traces), so checking every input of the bin costs nothing on the happy path.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..delta.actions import AddFile
from ..delta.physical_layout import column_mismatch
from ..delta.snapshot import Snapshot
from ..errors import CorruptLogError, DataFileError

__all__ = ["diagnose_inputs", "lying_stats"]

_MAGIC = b"PAR1"


def _problem(snapshot: Snapshot, f: AddFile) -> str | None:
    import pyarrow.parquet as pq

    location = snapshot.file_path(f.path)
    try:
        info = snapshot.storage.stat(location)
    except FileNotFoundError:
        return "the file is missing"
    if info.size == 0:
        return "the file is empty"
    try:
        with snapshot.storage.open_input(location) as fh:
            head = fh.read(4)
            fh.seek(max(info.size - 4, 0))
            tail = fh.read(4)
            if head != _MAGIC or tail != _MAGIC:
                return "it is not a Parquet file (no PAR1 magic)"
            fh.seek(0)
            schema = pq.ParquetFile(fh).schema_arrow
    except Exception as exc:
        return f"its Parquet footer cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    names = set(schema.names)
    wanted = {field["name"].lower() for field in snapshot.physical_data_fields}
    if wanted and not wanted & {n.lower() for n in names}:
        return f"its columns {sorted(names)[:5]} are none of the table's ({sorted(wanted)[:5]}): schema mismatch"
    mismatch = column_mismatch(snapshot.physical_data_fields, schema)
    return None if mismatch is None else f"{mismatch}: schema mismatch"


def diagnose_inputs(snapshot: Snapshot, files: Sequence[AddFile]) -> DataFileError | None:
    """A DataFileError naming the first unreadable input, or None when every input looks sound."""
    for f in files:
        why = _problem(snapshot, f)
        if why is not None:
            return DataFileError(
                f"Cannot read data file {f.path!r} of '{snapshot.location}': {why}. Nothing was committed. "
                "Restore the file, or remove it from the table (e.g. RESTORE to an earlier version, or DELETE its rows).",
                path=f.path,
                reason=why,
            )
    return None


def lying_stats(snapshot: Snapshot, files: Sequence[AddFile]) -> CorruptLogError | None:
    """A CorruptLogError naming the first input whose stats claim another row count than its footer holds.

    Called only when the rows we wrote differ from what the inputs' stats add up to: either a bug
    (the commit is refused) or stats in the log that lie, which this tells apart.
    """
    import pyarrow.parquet as pq

    for f in files:
        claimed = f.num_records
        if claimed is None:
            continue
        with snapshot.storage.open_input(snapshot.file_path(f.path)) as fh:
            actual = pq.ParquetFile(fh).metadata.num_rows
        if actual != claimed:
            return CorruptLogError(
                f"The stats of data file {f.path!r} in the log of '{snapshot.location}' claim {claimed} rows, but the "
                f"file holds {actual}. Nothing was committed. The table's statistics are wrong (written by a faulty "
                "writer); recompute them (delta-spark: ANALYZE TABLE ... COMPUTE DELTA STATISTICS) and run again."
            )
    return None
