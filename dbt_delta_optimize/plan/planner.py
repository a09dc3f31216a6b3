"""OPTIMIZE planning: snapshot files in, bins and batches out. Pure Python, no Spark.

Mirrors delta-spark's OptimizeExecutor: candidate selection (size < minFileSize, or too many
deleted rows), grouping by normalized partition value, next-fit bin packing of files sorted by
size, dropping single-file bins for compaction, and batching bins into commits by bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..delta.actions import AddFile
from ..delta.file_table import FileView
from ..delta.file_table import RawKey as RawKey
from .config import OptimizeConfig
from .curve import ClusteringSpec

__all__ = [
    "Bin",
    "Mode",
    "OptimizePlan",
    "bin_pack_by_size",
    "deleted_ratio",
    "group_into_bins",
    "plan_optimize",
    "raw_partition_key",
    "should_compact",
    "too_many_deleted",
]

Mode = Literal["compaction", "zorder"]
Normalizer = Callable[[RawKey], Hashable]


def raw_partition_key(file: AddFile, partition_columns: Sequence[str]) -> RawKey:
    """The file's partition values in column order, "" folded into null as delta-spark does."""
    return tuple((file.partition_values.get(c) or None) for c in partition_columns)


@dataclass(frozen=True)
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
    mode: Mode
    config: OptimizeConfig
    considered_files: Sequence[AddFile]
    bins: tuple[Bin, ...]
    batches: tuple[tuple[Bin, ...], ...]
    skipped_partitions: tuple[Mapping[str, str | None], ...] = field(default=())
    #: what the commit records: each predicate as delta-spark writes it, the Z-order columns as given
    predicates: tuple[str, ...] = ()
    zorder_by: tuple[str, ...] = ()
    #: the clustering to apply (Z-order/Hilbert), or None for compaction
    clustering: ClusteringSpec | None = None
    is_auto_compact: bool = False
    #: "REORG" for a purge (REORG TABLE ... APPLY (PURGE)): every file with deleted rows is rewritten
    operation: Literal["OPTIMIZE", "REORG"] = "OPTIMIZE"
    #: a clustered (liquid) table's clustering columns, recorded as clusterBy; with isFull (OPTIMIZE FULL)
    cluster_by: tuple[str, ...] = ()
    is_full: bool = False

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


def deleted_ratio(file: AddFile) -> float | None:
    """Deleted rows over physical rows (stats' numRecords counts every row in the file); None without stats."""
    dv = file.deletion_vector
    if dv is None:
        return 0.0
    n = file.num_records
    if n is None:
        return None
    return dv.cardinality / n if n > 0 else 1.0


def too_many_deleted(file: AddFile, config: OptimizeConfig) -> bool:
    """delta-spark's DV rule: a DV and no numRecords (rewrite so the output gets stats), or ratio > max."""
    if file.deletion_vector is None:
        return False
    ratio = deleted_ratio(file)
    return ratio is None or ratio > config.max_deleted_rows_ratio


def should_compact(file: AddFile, config: OptimizeConfig) -> bool:
    """delta-spark's compaction filter: small (strict <), or too many deleted rows in its DV."""
    return file.size < config.min_file_size or too_many_deleted(file, config)


def group_into_bins(
    files_by_partition: Iterable[tuple[Mapping[str, str | None], Sequence[AddFile]]],
    *,
    max_bin_size: int,
    keep_single_file_bins: bool,
    keep_single: Callable[[AddFile], bool] | None = None,
) -> list[Bin]:
    """Next-fit packing of each partition's files, sorted by size ascending (path breaks ties).

    A one-file bin is dropped (delta-spark), unless ``keep_single_file_bins`` or ``keep_single``
    says that file must be rewritten alone: a lone file with too many deleted rows is rewritten
    here, where delta-spark leaves it (delta-io/delta#5781).
    """
    bins: list[Bin] = []
    for values, files in files_by_partition:
        current: list[AddFile] = []
        current_size = 0
        packed: list[list[AddFile]] = []
        for f in sorted(files, key=lambda f: (f.size, f.path)):
            if f.size + current_size > max_bin_size:
                packed.append(current)  # may be empty (oversized first file); dropped below
                current, current_size = [f], f.size
            else:
                current.append(f)
                current_size += f.size
        if current:
            packed.append(current)
        for group in packed:
            single_kept = len(group) == 1 and (
                keep_single_file_bins or (keep_single is not None and keep_single(group[0]))
            )
            if len(group) > 1 or single_kept:
                bins.append(Bin(values, tuple(group)))
    return bins


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


def plan_optimize(
    files: Sequence[AddFile],
    partition_columns: Sequence[str],
    config: OptimizeConfig,
    *,
    read_version: int,
    mode: Mode = "compaction",
    matched_partitions: Iterable[RawKey] | None = None,
    normalize: Normalizer | None = None,
    skip_partition: Callable[[Sequence[AddFile]], bool] | None = None,
) -> OptimizePlan:
    """Plan an OPTIMIZE over ``files`` (a snapshot's live files).

    Args:
        matched_partitions: raw partition keys the WHERE predicates matched (None = all).
        normalize: maps a raw key to its typed value, so differently formatted but equal
            values (timestamps) share a bin; defaults to the raw key.
        skip_partition: for incremental Z-order, returns True for a partition that needs no rewrite.
    """
    matched = None if matched_partitions is None else set(matched_partitions)
    considered = tuple(f for f in files if matched is None or raw_partition_key(f, partition_columns) in matched)
    if mode == "compaction":
        candidates = [f for f in considered if should_compact(f, config)]
        max_bin = config.max_file_size
    else:
        candidates = list(considered)
        max_bin = 2**63 - 1
    norm = normalize or (lambda k: k)
    groups: dict[Hashable, list[AddFile]] = {}
    first_values: dict[Hashable, Mapping[str, str | None]] = {}
    for f in candidates:
        key = norm(raw_partition_key(f, partition_columns))
        groups.setdefault(key, []).append(f)
        # The bin keeps the first file's raw values (as delta-spark does), except that "" is written
        # as null: "" and null share a bin here, and delta-spark reads a logged "" of a string column
        # as '' but null as NULL, so keeping "" would turn the null rows into '' for it (delta-spark's
        # own OPTIMIZE also writes such a partition back as null).
        first_values.setdefault(key, {c: (v if v != "" else None) for c, v in f.partition_values.items()})
    ordered = sorted(groups, key=lambda k: repr(k))
    skipped: list[Mapping[str, str | None]] = []
    per_partition = []
    for k in ordered:
        if skip_partition is not None and skip_partition(groups[k]):
            skipped.append(first_values[k])
            continue
        per_partition.append((first_values[k], groups[k]))
    bins = group_into_bins(
        per_partition,
        max_bin_size=max_bin,
        keep_single_file_bins=(mode != "compaction"),
        keep_single=lambda f: too_many_deleted(f, config),
    )
    if config.batch_size is not None:
        batches = bin_pack_by_size(bins, config.batch_size)
    else:
        batches = [tuple(bins)]
    return OptimizePlan(
        read_version=read_version,
        mode=mode,
        config=config,
        considered_files=considered,
        bins=tuple(bins),
        batches=tuple(batches),
        skipped_partitions=tuple(skipped),
    )
