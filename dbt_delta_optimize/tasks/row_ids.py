"""Row tracking in Arrow: each rewritten row keeps its stable row id and row commit version.

A rewritten row lands in a new file with a new baseRowId, so its default row id (baseRowId + row
position) would change. As delta-spark's ``RowTracking.preserveRowTrackingColumns`` does for
OPTIMIZE, the rewrite writes every row's stable values into the table's hidden columns: the value
already materialized in the input when not null, else the input's ``baseRowId`` + the row's
physical position in that file, and its ``defaultRowCommitVersion``.
"""

from __future__ import annotations

from typing import Any

from .. import arrow_kernels as ak

__all__ = ["fill_row_tracking", "positions_from"]


def positions_from(start: int, count: int) -> Any:
    """Physical positions start..start+count-1 as an int64 array (vectorised, no Python loop)."""
    import pyarrow as pa

    ones = pa.repeat(pa.scalar(1, pa.int64()), count)
    return ak.add(ak.cumulative_sum(ones), pa.scalar(start - 1, pa.int64()))


def fill_row_tracking(
    table: Any, positions: Any, base_row_id: int, default_commit_version: int, row_id: str, commit_version: str
) -> Any:
    """``table`` (already holding the hidden columns, null where not materialized) with every null filled.

    ``positions``: each row's physical position in its input file (an int64 array, one per row).
    """
    import pyarrow as pa

    def generated(name: str) -> Any:
        if name == row_id:
            return ak.add(positions, pa.scalar(base_row_id, pa.int64()))
        return pa.repeat(pa.scalar(default_commit_version, pa.int64()), table.num_rows)

    for name in (row_id, commit_version):
        i = table.schema.get_field_index(name)
        column = table.column(i)
        if column.null_count:  # all materialized already (a file we rewrote before): nothing to fill
            table = table.set_column(i, table.schema.field(i), ak.coalesce(column, generated(name)))
    return table
