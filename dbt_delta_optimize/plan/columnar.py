"""The planner over a snapshot's columns: the same plan as ``planner.plan_optimize``, no object per file.

Files are numbered rows of the snapshot's FileTable (sorted by path). Partitions are encoded once
(their distinct raw values are few), candidates are picked from the size and deletion-vector
columns, and next-fit packing runs over row numbers. Bins hold ``FileView``s: an AddFile is built
only when the executor (or a caller) reads a bin's files. ``tests/test_planner_columnar.py`` checks
that both planners give the same plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from ..delta.actions import AddFile
from ..delta.file_table import FileTable, FileView
from .config import OptimizeConfig
from .planner import Bin, Mode, Normalizer, OptimizePlan, RawKey, bin_pack_by_size

__all__ = ["distinct_partitions", "plan_columnar"]


_NULL = "\x00null\x00"
_SEP = "\x00|\x00"


def _row_keys(table: FileTable, partition_columns: Sequence[str]) -> tuple[list[int], list[RawKey]]:
    """Each row's partition as a number, and the raw key of each number (dictionary-encoded by Arrow)."""
    import pyarrow.compute as pc

    if not partition_columns:
        return [0] * len(table), [()]
    columns = [pc.fill_null(c, _NULL) for c in table.partition_strings(partition_columns)]
    joined = columns[0] if len(columns) == 1 else pc.binary_join_element_wise(*columns, _SEP)
    encoded = pc.dictionary_encode(joined)
    keys: list[RawKey] = [
        tuple(None if v == _NULL else v for v in (text.split(_SEP) if len(columns) > 1 else [text]))
        for text in encoded.dictionary.to_pylist()
    ]
    return encoded.indices.to_pylist(), keys


def distinct_partitions(table: FileTable, partition_columns: Sequence[str]) -> set[RawKey]:
    """The raw partition keys of a table's live files ("" read as null)."""
    return set(_row_keys(table, partition_columns)[1]) if len(table) else set()


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        n = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, int) else None


def _dv_candidates(table: FileTable, rows: Iterable[int], config: OptimizeConfig) -> set[int]:
    """Rows whose deletion vector makes them candidates however large (delta-spark's DV rule)."""
    cardinality = table.column("deletionVector").field("cardinality").to_pylist()
    stats = None
    out = set()
    for r in rows:
        deleted = cardinality[r]
        if deleted is None:
            continue
        stats = stats if stats is not None else table.column("stats").to_pylist()
        n = _num_records(stats[r])
        if n is None or (n + deleted and deleted / (n + deleted) > config.max_deleted_rows_ratio):
            out.add(r)
    return out


def _candidates(table: FileTable, considered: list[int], config: OptimizeConfig, mode: Mode) -> list[int]:
    if mode != "compaction":
        return considered
    sizes = table.sizes
    small = [r for r in considered if sizes[r] < config.min_file_size]
    has_dv = table.column("deletionVector").is_valid()
    if not any(has_dv.to_pylist()):
        return small
    extra = _dv_candidates(table, (r for r in considered if sizes[r] >= config.min_file_size), config)
    return sorted({*small, *extra})


def _next_fit(rows: list[int], sizes: list[int], max_bin: int, keep_single: bool) -> list[list[int]]:
    packed: list[list[int]] = []
    current: list[int] = []
    current_size = 0
    for r in sorted(rows, key=lambda r: (sizes[r], r)):  # by size, then path (rows are in path order)
        if sizes[r] + current_size > max_bin:
            packed.append(current)
            current, current_size = [r], sizes[r]
        else:
            current.append(r)
            current_size += sizes[r]
    if current:
        packed.append(current)
    return [g for g in packed if len(g) > 1 or (keep_single and g)]


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
    codes, keys = _row_keys(table, partition_columns)
    matched = None if matched_partitions is None else set(matched_partitions)
    keep = [matched is None or k in matched for k in keys]
    considered = [r for r, c in enumerate(codes) if keep[c]]
    norm = normalize or (lambda k: k)
    group_of_code: list[Hashable] = [norm(k) for k in keys]
    groups: dict[Hashable, list[int]] = {}
    first_code: dict[Hashable, int] = {}
    for r in _candidates(table, considered, config, mode):
        g = group_of_code[codes[r]]
        groups.setdefault(g, []).append(r)
        first_code.setdefault(g, codes[r])
    max_bin = config.max_file_size if mode == "compaction" else 2**63 - 1
    bins: list[Bin] = []
    skipped: list[Mapping[str, str | None]] = []
    for g in sorted(groups, key=repr):
        values = dict(zip(partition_columns, keys[first_code[g]]))
        if skip_partition is not None and skip_partition(FileView(table, groups[g])):
            skipped.append(values)
            continue
        for rows in _next_fit(groups[g], table.sizes, max_bin, keep_single=(mode != "compaction")):
            bins.append(Bin(values, FileView(table, rows)))
    batches = bin_pack_by_size(bins, config.batch_size) if config.batch_size is not None else [tuple(bins)]
    return OptimizePlan(
        read_version=read_version,
        mode=mode,
        config=config,
        considered_files=FileView(table, considered),
        bins=tuple(bins),
        batches=tuple(batches),
        skipped_partitions=tuple(skipped),
    )
