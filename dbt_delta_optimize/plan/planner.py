"""OPTIMIZE planning over a snapshot's live files (its FileTable): bins and batches. Pure Python, no Spark.

Mirrors delta-spark's OptimizeExecutor: candidate selection (size < minFileSize, or too many
deleted rows), grouping by normalized partition value, next-fit bin packing of files sorted by
size, dropping single-file bins for compaction, and batching bins into commits by bytes.

Files are numbered rows of the FileTable (sorted by path). Partitions are encoded once (their
distinct raw values are few), candidates are picked from the size and deletion-vector columns, and
next-fit packing runs over row numbers. Bins hold ``FileView``s: an AddFile is built only when the
executor (or a caller) reads a bin's files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import arrow_kernels as ak
from ..delta.actions import AddFile
from ..delta.arrow_arrays import runs
from ..delta.file_table import FileTable, FileView, RawKey, RowSlice
from .config import OptimizeConfig
from .curve import ClusteringSpec
from .operation import Operation

__all__ = [
    "Bin",
    "Mode",
    "Normalizer",
    "OptimizePlan",
    "Selected",
    "batches_of",
    "bin_pack_by_size",
    "next_fit",
    "select_bins",
]

Mode = Literal["compaction", "zorder"]
Normalizer = Callable[[RawKey], Hashable]


@dataclass(frozen=True, slots=True)
class Bin:
    """Files of one partition rewritten together into one file (or, for Z-order, into a range of files)."""

    partition_values: Mapping[str, str | None]
    files: Sequence[AddFile]  #: a tuple, or a FileView whose AddFiles are built on access

    @property
    def size(self) -> int:
        if isinstance(self.files, FileView):  # sums its size column once, or knows it from the planner
            return self.files.total_size
        return sum(f.size for f in self.files)

    @property
    def paths(self) -> list[str]:
        paths = getattr(self.files, "paths", None)
        return list(paths) if paths is not None else [f.path for f in self.files]

    def describe(self) -> str:
        parts = ",".join(f"{k}={v}" for k, v in self.partition_values.items())
        return f"{len(self.files)} files in partition ({parts})" if parts else f"{len(self.files)} files"


@dataclass(frozen=True)
class OptimizePlan:
    """Everything OPTIMIZE will do, decided before any data is read."""

    read_version: int
    operation: Operation  #: what the plan does: compact, Z-order, liquid, purge or auto compaction
    config: OptimizeConfig
    considered_files: Sequence[AddFile]
    bins: tuple[Bin, ...]
    batches: tuple[tuple[Bin, ...], ...]
    skipped_partitions: tuple[Mapping[str, str | None], ...] = field(default=())
    #: what the commit records: each predicate as delta-spark writes it
    predicates: tuple[str, ...] = ()

    @property
    def mode(self) -> Mode:
        return self.operation.mode

    @property
    def clustering(self) -> ClusteringSpec | None:
        """The clustering to apply (Z-order, Hilbert, liquid), or None for compaction."""
        return self.operation.clustering

    @property
    def commit_name(self) -> Literal["OPTIMIZE", "REORG"]:
        """The commit's operation: REORG for a purge, else OPTIMIZE."""
        return self.operation.commit_name

    def commit_parameters(self) -> dict[str, Any]:
        """commitInfo.operationParameters as delta-spark writes them for this operation."""
        return self.operation.commit_parameters(self.predicates)

    @property
    def num_files_to_rewrite(self) -> int:
        return sum(len(b.files) for b in self.bins)

    @property
    def files_to_rewrite(self) -> tuple[AddFile, ...]:
        return tuple(f for b in self.bins for f in b.files)

    @property
    def bytes_to_rewrite(self) -> int:
        return sum(b.size for b in self.bins)

    @property
    def partitions(self) -> int:
        distinct = {id(b.partition_values): b.partition_values for b in self.bins}.values()
        return len({tuple(sorted(v.items(), key=lambda kv: kv[0])) for v in distinct})

    @property
    def is_noop(self) -> bool:
        return not self.bins

    def __repr__(self) -> str:  # the dataclass repr would print every file
        return (
            f"OptimizePlan(read_version={self.read_version}, mode={self.mode!r}, bins={len(self.bins)}, "
            f"batches={len(self.batches)}, files={self.num_files_to_rewrite}, bytes={self.bytes_to_rewrite})"
        )

    def _totals(self) -> dict[str, Any]:
        return {
            "readVersion": self.read_version,
            "mode": self.mode,
            "consideredFiles": len(self.considered_files),
            "filesToRewrite": self.num_files_to_rewrite,
            "bytesToRewrite": self.bytes_to_rewrite,
            "partitions": self.partitions,
            "numBins": len(self.bins),
            "numBatches": len(self.batches) if self.config.batch_size is not None else 1,
            "skippedPartitions": [dict(p) for p in self.skipped_partitions],
        }

    def summary(self, *, include_files: bool = False) -> dict[str, Any]:
        """What ``--dry-run --json`` prints: totals and one entry per partition; file paths only on request."""
        per: dict[str, dict[str, Any]] = {}
        labels: dict[int, str] = {}  # bins of one partition often share one values mapping: label it once
        for b in self.bins:
            key = id(b.partition_values)
            if key not in labels:
                labels[key] = _partition_label(b.partition_values)
            entry = per.setdefault(labels[key], {"bins": 0, "files": 0, "bytes": 0})
            entry["bins"] += 1
            entry["files"] += len(b.files)
            entry["bytes"] += b.size
        out = self._totals()
        out["partitionsToRewrite"] = [{"partition": k, **v} for k, v in sorted(per.items())]
        if include_files:
            out["bins"] = self.to_dict()["bins"]
        return out

    def to_dict(self, *, include_paths: bool = True) -> dict[str, Any]:
        """A JSON-ready description, every bin (with its file paths unless ``include_paths`` is False)."""
        bins = [
            {"partitionValues": dict(b.partition_values), "files": len(b.files), "bytes": b.size} for b in self.bins
        ]
        if include_paths:
            for entry, b in zip(bins, self.bins):
                entry["paths"] = b.paths
        return {**self._totals(), "bins": bins}


def _partition_label(values: Mapping[str, str | None]) -> str:
    return ", ".join(f"{k}={'null' if v is None else v}" for k, v in values.items()) or "(unpartitioned)"


def bin_pack_by_size(bins: Sequence[Bin], max_batch_size: int) -> list[tuple[Bin, ...]]:
    """delta-spark's BinPackingUtils.binPackBySize: bins sorted by size, next-fit into batches."""
    batches: list[tuple[Bin, ...]] = []
    current: list[Bin] = []
    current_size = 0
    for b in sorted(bins, key=lambda b: b.size):
        if current and (current_size >= max_batch_size or current_size + b.size > max_batch_size):
            batches.append(tuple(current))
            current, current_size = [], 0
        current.append(b)
        current_size += b.size
    if current:
        batches.append(tuple(current))
    return batches


def next_fit(sizes: Sequence[int], rows: Sequence[int], max_bin: int) -> list[tuple[list[int], int]]:
    """delta-spark's groupFilesIntoBins packing: rows (sorted by size) next-fit into bins of at most
    ``max_bin`` bytes; (rows, bytes) of each bin. An oversized first file pushes an empty bin."""
    return [(list(rows[lo:hi]), n) for lo, hi, n in next_fit_bounds(sizes, max_bin)]


def next_fit_bounds(sizes: Sequence[int], max_bin: int) -> list[tuple[int, int, int]]:
    """``next_fit`` as (start, end, bytes) of each bin over ``sizes`` (no list of rows per bin)."""
    packed: list[tuple[int, int, int]] = []
    start = 0
    current_size = 0
    for i, size in enumerate(sizes):
        if size + current_size > max_bin:
            packed.append((start, i, current_size))
            start, current_size = i, size
        else:
            current_size += size
    if start < len(sizes):
        packed.append((start, len(sizes), current_size))
    return packed


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        n = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, int) else None


def _too_many_deleted(table: FileTable, rows: Iterable[int], config: OptimizeConfig) -> set[int]:
    """delta-spark's DV rule: rows with a DV and no numRecords (rewritten so the output gets stats), or
    deleted / physical rows above ``max_deleted_rows_ratio`` (numRecords counts the deleted rows too)."""
    rows = list(rows)
    cardinality = table.column("deletionVector").field("cardinality").to_pylist()
    with_dv = [r for r in rows if cardinality[r] is not None]
    stats = table.values_at("stats", with_dv) if with_dv else []  # read for these rows only
    out = set()
    for r, raw in zip(with_dv, stats):
        deleted = cardinality[r]
        n = _num_records(raw)
        if n is None or (deleted / n if n > 0 else 1.0) > config.max_deleted_rows_ratio:
            out.add(r)
    return out


def _candidate_mask(table: FileTable, considered: Any, config: OptimizeConfig, mode: Mode) -> tuple[Any, set[int]]:
    """Considered rows that are candidates: all of them to cluster; to compact, files strictly smaller than
    ``min_file_size`` and files with too many deleted rows (these are kept even alone in a bin)."""
    import pyarrow as pa

    if mode != "compaction":
        return considered, set()
    small = ak.and_(considered, ak.less(table.column("size"), config.min_file_size))
    if not table.has_deletion_vectors():
        return small, set()
    with_dv = ak.and_(considered, ak.is_valid(table.column("deletionVector")))
    if not ak.any_(with_dv).as_py():
        return small, set()
    heavy = _too_many_deleted(table, ak.indices_nonzero(with_dv).to_pylist(), config)
    mask = pa.array([r in heavy for r in range(len(table))], pa.bool_())
    return ak.or_(small, mask), heavy


def _sorted_candidates(table: FileTable, group_of_row: Any, mask: Any) -> tuple[Any, Any, Any]:
    """(group, size, row) of every candidate as Arrow arrays, sorted by group, then size, then path (rows
    are in path order): no Python object per file, and no numpy (``delta.arrow_arrays``)."""
    import pyarrow as pa

    candidates = pa.table(
        {
            "group": ak.filter_(group_of_row, mask),
            "size": ak.filter_(table.column("size"), mask),
            "row": ak.cast(ak.indices_nonzero(mask), pa.int64()),  # ascending: path order
        }
    )
    order = ak.sort_indices(candidates, [("group", "ascending"), ("size", "ascending"), ("row", "ascending")])
    ordered = ak.take(candidates, order)
    group, size, row = (ordered.column(name).combine_chunks() for name in ("group", "size", "row"))
    return group, size, row


def _groups(keys: list[RawKey], normalize: Normalizer | None) -> list[int]:
    """Each partition code's group number; groups numbered in the order of their normalized values' repr."""
    norm = normalize or (lambda k: k)
    normalized: list[Hashable] = [norm(k) for k in keys]
    number = {g: i for i, g in enumerate(sorted(set(normalized), key=repr))}
    return [number[g] for g in normalized]


@dataclass(frozen=True)
class Selected:
    """The planner's answer: the files considered, the bins to rewrite, and the partitions skipped."""

    considered: FileView
    bins: tuple[Bin, ...]
    skipped_partitions: tuple[Mapping[str, str | None], ...]


def batches_of(bins: tuple[Bin, ...], config: OptimizeConfig) -> tuple[tuple[Bin, ...], ...]:
    """One batch per commit: packed by ``batch_size`` bytes, else one batch of every bin."""
    if config.batch_size is None:
        return (bins,)
    return tuple(bin_pack_by_size(bins, config.batch_size))


def select_bins(
    table: FileTable,
    partition_columns: Sequence[str],
    config: OptimizeConfig,
    *,
    mode: Mode = "compaction",
    matched_partitions: Iterable[RawKey] | None = None,
    normalize: Normalizer | None = None,
    skip_partition: Callable[[Sequence[AddFile]], bool] | None = None,
) -> Selected:
    """The bins of an OPTIMIZE over ``table`` (a snapshot's live files).

    Args:
        matched_partitions: raw partition keys the WHERE predicates matched (None = all).
        normalize: maps a raw key to its typed value, so differently formatted but equal
            values (timestamps) share a bin; defaults to the raw key.
        skip_partition: for incremental Z-order, returns True for a partition that needs no rewrite.

    A bin keeps its partition's first file's raw values (as delta-spark does), except that "" is
    written as null: "" and null share a bin, and delta-spark reads a logged "" of a string column as ''
    but null as NULL, so keeping "" would turn the null rows into '' for it. A one-file bin is dropped
    for compaction (delta-spark), unless that file has too many deleted rows: it is rewritten alone here,
    where delta-spark leaves it (delta-io/delta#5781).
    """
    import pyarrow as pa

    codes, keys = table.partition_codes(partition_columns)
    matched = None if matched_partitions is None else set(matched_partitions)
    kept_codes = [c for c, k in enumerate(keys) if matched is None or k in matched]
    considered = ak.is_in(codes, pa.array(kept_codes, pa.int32()))
    group_of_row = ak.take(pa.array(_groups(keys, normalize), pa.int32()), codes)
    mask, heavy = _candidate_mask(table, considered, config, mode)
    groups, sizes, rows = _sorted_candidates(table, group_of_row, mask)
    max_bin = config.max_file_size if mode == "compaction" else 2**63 - 1
    keep_single = mode != "compaction"
    bins: list[Bin] = []
    skipped: list[Mapping[str, str | None]] = []
    for start, end in runs(groups):
        group_rows = rows.slice(start, end - start)  # a view: a bin's rows are a slice of it
        values = dict(zip(partition_columns, keys[codes[ak.min_(group_rows).as_py()].as_py()]))
        if skip_partition is not None and skip_partition(FileView(table, group_rows.to_pylist())):
            skipped.append(values)
            continue
        for lo, hi, n in next_fit_bounds(sizes.slice(start, end - start).to_pylist(), max_bin):
            if hi - lo > 1 or (hi > lo and (keep_single or group_rows[lo].as_py() in heavy)):
                bins.append(Bin(values, FileView(table, RowSlice(rows, start + lo, start + hi), total_size=n)))
    every = ak.all_(considered).as_py() is not False
    return Selected(
        FileView(table, None if every else _all_of(ak.indices_nonzero(considered))), tuple(bins), tuple(skipped)
    )


def _all_of(rows: Any) -> RowSlice:
    """Every row of an Arrow array of rows, as a sequence made into Python ints only when it is read."""
    return RowSlice(rows, 0, len(rows))
