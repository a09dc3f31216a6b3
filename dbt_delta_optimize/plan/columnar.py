"""The planner over a snapshot's columns: the same plan as ``planner.plan_optimize``, no object per file.

Files are numbered rows of the snapshot's FileTable (sorted by path). Partitions are encoded once
(their distinct raw values are few), candidates are picked from the size and deletion-vector
columns, and next-fit packing runs over row numbers. Bins hold ``FileView``s: an AddFile is built
only when the executor (or a caller) reads a bin's files. ``tests/test_planner_columnar.py`` checks
that both planners give the same plan.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from ..delta.actions import AddFile
from ..delta.file_table import FileTable, FileView, RawKey
from .config import OptimizeConfig
from .planner import Bin, Mode, Normalizer, OptimizePlan, bin_pack_by_size

__all__ = ["distinct_partitions", "plan_columnar"]


def distinct_partitions(table: FileTable, partition_columns: Sequence[str]) -> set[RawKey]:
    """The raw partition keys of a table's live files ("" read as null)."""
    return set(table.partition_codes(partition_columns)[1]) if len(table) else set()


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        n = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, int) else None


def _dv_candidates(table: FileTable, rows: Iterable[int], config: OptimizeConfig) -> set[int]:
    """Rows with too many deleted rows (``planner.too_many_deleted``): candidates however large, kept alone."""
    cardinality = table.column("deletionVector").field("cardinality").to_pylist()
    stats = None
    out = set()
    for r in rows:
        deleted = cardinality[r]
        if deleted is None:
            continue
        stats = stats if stats is not None else table.column("stats").to_pylist()
        n = _num_records(stats[r])  # physical rows: numRecords counts the deleted ones too
        if n is None or (deleted / n if n > 0 else 1.0) > config.max_deleted_rows_ratio:
            out.add(r)
    return out


def _candidate_mask(table: FileTable, considered: Any, config: OptimizeConfig, mode: Mode) -> tuple[Any, set[int]]:
    """Considered rows that are candidates (small files; for compaction also files with many deleted rows),
    and the rows with many deleted rows (a bin of one of them alone is still rewritten)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if mode != "compaction":
        return considered, set()
    small = pc.and_(considered, pc.less(table.column("size"), config.min_file_size))
    with_dv = pc.and_(considered, table.column("deletionVector").is_valid())
    if not pc.any(with_dv).as_py():
        return small, set()
    heavy = _dv_candidates(table, pc.indices_nonzero(with_dv).to_pylist(), config)
    mask = pa.array([r in heavy for r in range(len(table))], pa.bool_())
    return pc.or_(small, mask), heavy


def _sorted_candidates(table: FileTable, group_of_row: Any, mask: Any) -> tuple[list[int], list[int], list[int]]:
    """(group, size, row) of every candidate, sorted by group, then size, then path (rows are in path order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = pc.indices_nonzero(mask)
    cols = pa.table({"g": group_of_row.filter(mask), "size": table.column("size").filter(mask), "row": rows})
    order = pc.sort_indices(cols, sort_keys=[("g", "ascending"), ("size", "ascending"), ("row", "ascending")])
    cols = cols.take(order)
    return cols.column("g").to_pylist(), cols.column("size").to_pylist(), cols.column("row").to_pylist()


def _next_fit(
    sizes: list[int], rows: list[int], max_bin: int, keep_single: bool, heavy: set[int]
) -> list[tuple[list[int], int]]:
    """Next-fit packing of rows already sorted by size: (rows, bytes) of each bin kept (``planner.group_into_bins``)."""
    packed: list[tuple[list[int], int]] = []
    current: list[int] = []
    current_size = 0
    for size, r in zip(sizes, rows):
        if size + current_size > max_bin:
            packed.append((current, current_size))
            current, current_size = [r], size
        else:
            current.append(r)
            current_size += size
    if current:
        packed.append((current, current_size))
    return [(g, n) for g, n in packed if len(g) > 1 or (g and (keep_single or g[0] in heavy))]


def _groups(keys: list[RawKey], normalize: Normalizer | None) -> list[int]:
    """Each partition code's group number, groups numbered in the row planner's order (by repr)."""
    norm = normalize or (lambda k: k)
    normalized: list[Hashable] = [norm(k) for k in keys]
    number = {g: i for i, g in enumerate(sorted(set(normalized), key=repr))}
    return [number[g] for g in normalized]


def plan_columnar(
    table: FileTable,
    partition_columns: Sequence[str],
    config: OptimizeConfig,
    *,
    read_version: int,
    mode: Mode = "compaction",
    matched_partitions: Iterable[RawKey] | None = None,
    normalize: Normalizer | None = None,
    skip_partition: Callable[[Sequence[AddFile]], bool] | None = None,
) -> OptimizePlan:
    """``planner.plan_optimize`` over columns (same arguments, same plan)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes, keys = table.partition_codes(partition_columns)
    matched = None if matched_partitions is None else set(matched_partitions)
    kept_codes = [c for c, k in enumerate(keys) if matched is None or k in matched]
    considered = pc.is_in(codes, value_set=pa.array(kept_codes, pa.int32()))
    group_of_row = pa.array(_groups(keys, normalize), pa.int32()).take(codes)
    mask, heavy = _candidate_mask(table, considered, config, mode)
    groups, sizes, rows = _sorted_candidates(table, group_of_row, mask)
    max_bin = config.max_file_size if mode == "compaction" else 2**63 - 1
    bins: list[Bin] = []
    skipped: list[Mapping[str, str | None]] = []
    start = 0
    while start < len(rows):
        end = bisect_right(groups, groups[start], lo=start)
        first_row = min(rows[start:end])  # a group's values are those of its first file in path order
        values = dict(zip(partition_columns, keys[codes[first_row].as_py()]))
        if skip_partition is not None and skip_partition(FileView(table, rows[start:end])):
            skipped.append(values)
        else:
            keep = mode != "compaction"
            packed = _next_fit(sizes[start:end], rows[start:end], max_bin, keep, heavy)
            bins.extend(Bin(values, FileView(table, r, total_size=n)) for r, n in packed)
        start = end
    batches = bin_pack_by_size(bins, config.batch_size) if config.batch_size is not None else [tuple(bins)]
    return OptimizePlan(
        read_version=read_version,
        mode=mode,
        config=config,
        considered_files=FileView(table, pc.indices_nonzero(considered).to_pylist()),
        bins=tuple(bins),
        batches=tuple(batches),
        skipped_partitions=tuple(skipped),
    )
