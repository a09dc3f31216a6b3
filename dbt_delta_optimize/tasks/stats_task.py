"""``analyze``'s task body: one data file's Delta stats, computed where the task runs.

The same function serves the driver's threads (a local master, or a path table without Spark) and a
Spark task on a cluster: the footer is read once (with the exactness flags pyarrow does not expose) and
the data only for the columns the footer cannot answer for (``inspect.stats``).
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

from .bin_task import spec_stats, worker_info
from .messages import Failed, FailureKind, StatsComputed, StatsSpec, StatsTask

if TYPE_CHECKING:
    from ..delta.storage import Storage

__all__ = ["file_stats", "run_stats"]


def _inexact_chunks(meta: Any) -> frozenset[tuple[int, int]]:
    """(row group, column) chunks whose min or max the writer marked truncated (arrow-rs does, by length)."""
    out = set()
    for r, rg in enumerate(meta.row_groups or ()):
        for c, chunk in enumerate(rg.columns or ()):
            st = chunk.meta_data.statistics if chunk.meta_data is not None else None
            if st is not None and (st.is_min_value_exact is False or st.is_max_value_exact is False):
                out.add((r, c))
    return frozenset(out)


def _pyarrow_only(fh: Any) -> tuple[Any, frozenset[tuple[int, int]]]:
    """The footer through pyarrow alone (an executor without thriftpy2), which hides the writer's exactness
    flags: a byte-array chunk's bounds are taken as exact only from parquet-mr/parquet-java (which never
    truncates footer statistics); the other writers' are read from the data."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(fh)
    if (meta.created_by or "").startswith(("parquet-mr", "parquet-java")):
        return meta, frozenset()
    binary = {"BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"}
    return meta, frozenset(
        (r, c)
        for r in range(meta.num_row_groups)
        for c in range(meta.num_columns)
        if meta.row_group(r).column(c).physical_type in binary
    )


def _footer(fh: Any, location: str) -> tuple[Any, frozenset[tuple[int, int]]]:
    """pyarrow's metadata of the file and the chunks whose min or max is not exact."""
    try:
        import thriftpy2  # noqa: F401  (decodes the footer's exactness flags)
    except ImportError:
        return _pyarrow_only(fh)
    from .parquet_footer import pyarrow_metadata, read_footer

    footer = read_footer(fh, location)
    return pyarrow_metadata(footer), _inexact_chunks(footer.meta)


def file_stats(storage: Storage, location: str, spec: StatsSpec, *, tight_bounds: bool) -> str:
    """One file's stats JSON exactly as delta-spark writes them (``tight_bounds`` False: a file with a DV)."""
    with storage.open_input(location) as fh:
        metadata, inexact = _footer(fh, location)
        return spec_stats(spec, metadata, fh, tight_bounds=tight_bounds, inexact_chunks=inexact)


def run_stats(task: StatsTask, storage: Storage) -> StatsComputed | Failed:
    """A Spark task's answer: the stats, or a typed failure naming the file (the driver keeps its old stats)."""
    from ..errors import DataFileError, StorageAccessError

    try:
        stats = file_stats(storage, task.location, task.stats, tight_bounds=task.tight_bounds)
        return StatsComputed(task.bin_id, stats, worker_info())
    except Exception as exc:
        kind: FailureKind = "storage" if isinstance(exc, StorageAccessError) else "data_file"
        if not isinstance(exc, (StorageAccessError, DataFileError, OSError, ValueError)):
            kind = "internal"
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return Failed(
            task.bin_id,
            kind,
            type(exc).__name__,
            message,
            task.location,
            retryable=bool(getattr(exc, "retryable", False)),
            trace=traceback.format_exc(),
        )
