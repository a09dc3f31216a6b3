"""Auto compaction: after a write, compact the partitions it left with enough small files.

Decisions come from the table's log, not from per-process counters: the partitions the
triggering commits added files to, and in each the live files smaller than the auto-compact
``minFileSize``. Every process therefore reaches the same decision, restarts lose nothing,
and large compacted files never count toward the threshold (delta-spark's bugs #4045, #4487).
A file with a deletion vector counts by its live bytes (delta-spark's ``estLogicalFileSize``), and
the compaction then also rewrites the files of the chosen partitions with too many deleted rows.
Deciding to skip reads only the log (deltalake), never starts a Spark job.

Differences from delta-spark on purpose (tested):
- a partition never compacted before is not automatically eligible (#4043): a first write of
  3 files to a new partition does not compact, it needs ``minNumFiles`` small files;
- when more than ``maxNumModifiedPartitions`` qualify, the ones with most small files are
  chosen (deterministic), not a random subset.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.file_table import FileTable, FileView, RawKey
from ..options import AUTO_COMPACT_OPTIONS, PREFIX, ConfGetter, parse_bool, resolve_values

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot
    from .metrics import OptimizeMetrics
    from .run_commits import RunCommits

__all__ = [
    "AutoCompactConfig",
    "AutoCompactDecision",
    "AutoCompactResult",
    "PartitionCount",
    "auto_compact_enabled",
    "decide",
    "logical_size",
    "partition_counts",
    "partitions_of",
    "plan_auto_compact",
    "trigger_skip",
]

log = logging.getLogger(__name__)

#: Statuses, named like delta-spark's AC events where one exists.
DISABLED = "disabled"
SKIP_OWN_COMMIT = "skipOwnCommit"
SKIP_EMPTY_INGESTION = "skipEmptyIngestion"
SKIP_BLIND_APPEND = "skipBlindAppend"
SKIP_INSUFFICIENT_FILES = "skipInsufficientFiles"
RUN_ON_MODIFIED = "runOnModifiedPartitions"
RUN_ON_ALL = "runOnAllPartitions"
FAILED = "failed"


def trigger_skip(
    since_version: int | None, commits: Sequence[tuple[int, Mapping[str, Any]]], config: AutoCompactConfig
) -> tuple[str, str] | None:
    """delta-spark's skip rules on the triggering commits, ``(version, commitInfo)``, before a file is counted.

    Pure, and the one copy: the hook on a session reads the commitInfo from the log, the hook through SQL from
    ``DESCRIBE HISTORY`` (the same fields). None: the write qualifies for the small-file rule.
    """
    from .operation import REARRANGING_OPERATIONS

    if not commits:
        return SKIP_EMPTY_INGESTION, f"no commits after version {since_version}"
    data = [info for _, info in commits if str(info.get("operation")) not in REARRANGING_OPERATIONS]
    if not data:
        return SKIP_OWN_COMMIT, (
            "the triggering commits are OPTIMIZE commits: auto compaction never compacts its own output"
        )
    # delta-spark's isQualifiedForAutoCompact: nonBlindAppend only applies with modifiedPartitionsOnly.
    if config.non_blind_append and config.modified_partitions_only and all(i.get("isBlindAppend") for i in data):
        return SKIP_BLIND_APPEND, "autoCompact.nonBlindAppend.enabled is set and the write was a blind append"
    return None


def auto_compact_enabled(get_conf: ConfGetter, table_configuration: Mapping[str, str]) -> bool:
    """delta-spark's precedence: session conf, then legacy ``delta.autoOptimize``, then ``delta.autoOptimize.autoCompact``."""
    session = get_conf(PREFIX + "autoCompact.enabled")
    if session is not None:
        return parse_bool(session, key=PREFIX + "autoCompact.enabled")
    legacy = table_configuration.get("delta.autoOptimize")
    if legacy is not None and parse_bool(legacy, key="delta.autoOptimize"):
        return True
    prop = table_configuration.get("delta.autoOptimize.autoCompact")
    if prop is not None:
        return parse_bool(prop, key="delta.autoOptimize.autoCompact")
    return False


_DEFAULT = {o.name: o.default for o in AUTO_COMPACT_OPTIONS}


@dataclass(frozen=True)
class AutoCompactConfig:
    """Auto-compaction settings: one field per option of ``AUTO_COMPACT_OPTIONS`` (delta-spark's ``autoCompact.*``)."""

    max_file_size: int = _DEFAULT["max_file_size"]
    min_file_size: int | None = _DEFAULT["min_file_size"]  #: None: max_file_size / 2
    min_num_files: int = _DEFAULT["min_num_files"]
    modified_partitions_only: bool = _DEFAULT["modified_partitions_only"]
    non_blind_append: bool = _DEFAULT["non_blind_append"]
    max_num_modified_partitions: int = _DEFAULT["max_num_modified_partitions"]

    @property
    def small_file_threshold(self) -> int:
        return self.min_file_size if self.min_file_size is not None else self.max_file_size // 2

    @classmethod
    def resolve(
        cls, get_conf: ConfGetter | None = None, overrides: Mapping[str, Any] | None = None
    ) -> AutoCompactConfig:
        """Overrides > session conf > defaults, every value validated."""
        return cls(**resolve_values(AUTO_COMPACT_OPTIONS, get_conf, overrides, what="auto-compaction"))


@dataclass(frozen=True)
class PartitionCount:
    """One partition's file counts as the decision saw them."""

    partition: Mapping[str, Any]
    small_files: int
    files: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": {k: _jsonable(v) for k, v in self.partition.items()},
            "smallFiles": self.small_files,
            "files": self.files,
        }


def _jsonable(v: Any) -> Any:
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


@dataclass(frozen=True)
class AutoCompactDecision:
    status: str
    reason: str
    considered: tuple[PartitionCount, ...] = ()
    chosen: tuple[PartitionCount, ...] = ()

    @property
    def run(self) -> bool:
        return self.status in (RUN_ON_MODIFIED, RUN_ON_ALL)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "considered": [p.to_dict() for p in self.considered],
            "chosen": [p.to_dict() for p in self.chosen],
        }


@dataclass(frozen=True)
class AutoCompactResult:
    """What auto compaction decided and why, and the OPTIMIZE metrics when it ran."""

    table: str
    status: str
    reason: str
    since_version: int | None
    triggering_versions: tuple[int, ...]
    considered: tuple[PartitionCount, ...]
    chosen: tuple[PartitionCount, ...]
    metrics: OptimizeMetrics | None = None
    error: str | None = None
    decision_ms: float = 0.0
    duration_ms: float = 0.0
    config: AutoCompactConfig = field(default_factory=AutoCompactConfig)
    run: RunCommits | None = None  #: the write's commits the trigger came from, and why
    #: the requests the hook made to the store (its decision, and the compaction when it ran): ``delta/requests.py``
    requests: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.metrics is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "reason": self.reason,
            "sinceVersion": self.since_version,
            "triggeringVersions": list(self.triggering_versions),
            "runCommits": self.run.to_dict() if self.run is not None else None,
            "smallFileThreshold": self.config.small_file_threshold,
            "minNumFiles": self.config.min_num_files,
            "considered": [p.to_dict() for p in self.considered],
            "chosen": [p.to_dict() for p in self.chosen],
            "metrics": self.metrics.to_dict() if self.metrics is not None else None,
            "error": self.error,
            "decisionMs": round(self.decision_ms, 1),
            "durationMs": round(self.duration_ms, 1),
            "requests": dict(self.requests),
        }


def decide(
    files: Sequence[tuple[tuple[str | None, ...], int]],
    touched: Iterable[tuple[str | None, ...]],
    columns: Sequence[str],
    config: AutoCompactConfig,
) -> AutoCompactDecision:
    """Which partitions to compact, from (partition, size) of every live file. Pure.

    ``touched`` are the partitions the triggering commits added files to.
    """
    threshold = config.small_file_threshold
    small: dict[tuple[str | None, ...], int] = {}
    total: dict[tuple[str | None, ...], int] = {}
    for part, size in files:
        total[part] = total.get(part, 0) + 1
        if size < threshold:
            small[part] = small.get(part, 0) + 1
    return decide_counts(small, total, touched, columns, config)


def decide_counts(
    small: Mapping[tuple[str | None, ...], int],
    total: Mapping[tuple[str | None, ...], int],
    touched: Iterable[tuple[str | None, ...]],
    columns: Sequence[str],
    config: AutoCompactConfig,
) -> AutoCompactDecision:
    """``decide`` from per-partition counts: small files and all files of each partition. Pure."""
    threshold = config.small_file_threshold
    scope = set(touched) if config.modified_partitions_only else set(total)
    considered = sorted(
        (PartitionCount(dict(zip(columns, p)), small.get(p, 0), total.get(p, 0)) for p in scope if p in total),
        key=lambda c: (-c.small_files, repr(tuple(c.partition.values()))),
    )
    # A partition needs at least 2 small files to have anything to compact, whatever minNumFiles says.
    qualifying = [c for c in considered if c.small_files >= max(config.min_num_files, 2)]
    status = RUN_ON_MODIFIED if config.modified_partitions_only else RUN_ON_ALL
    if qualifying and not config.modified_partitions_only:
        # delta-spark's runOnAllPartitions: once one partition reaches minNumFiles, the whole table is
        # compacted (no predicate, no partition cap), so every partition with >= 2 small files is chosen.
        qualifying = [c for c in considered if c.small_files >= 2]
        return AutoCompactDecision(
            status,
            f"a partition has >= {config.min_num_files} files smaller than {threshold} bytes: compacting all "
            f"{len(qualifying)} partition(s) with small files",
            tuple(considered),
            tuple(qualifying),
        )
    if not qualifying:
        best = considered[0].small_files if considered else 0
        return AutoCompactDecision(
            SKIP_INSUFFICIENT_FILES,
            f"no {'modified ' if config.modified_partitions_only else ''}partition has {config.min_num_files} files "
            f"smaller than {threshold} bytes (most: {best})",
            tuple(considered),
        )
    chosen = qualifying[: config.max_num_modified_partitions]
    return AutoCompactDecision(
        status,
        f"{len(chosen)} partition(s) with >= {config.min_num_files} files smaller than {threshold} bytes"
        + (f" (capped from {len(qualifying)})" if len(qualifying) > len(chosen) else ""),
        tuple(considered),
        tuple(chosen),
    )


def plan_auto_compact(
    snapshot: Snapshot,
    *,
    min_file_size: int | None = None,
    max_file_size: int | None = None,
    min_num_files: int | None = None,
    get_conf: ConfGetter | None = None,
) -> AutoCompactDecision:
    """Dry run over every partition of a snapshot (no triggering write): what auto compaction would pick now."""
    settings: dict[str, Any] = {"modified_partitions_only": False}
    if min_num_files is not None:
        settings["min_num_files"] = min_num_files
    if max_file_size is not None:
        settings["max_file_size"] = max_file_size
    if min_file_size is not None:
        settings["min_file_size"] = min_file_size
    config = AutoCompactConfig.resolve(get_conf, settings)
    small, total = partition_counts(snapshot, config.small_file_threshold)
    return decide_counts(small, total, (), snapshot.partition_columns, config)


def logical_size(size: int, num_records: int | None, deleted: int | None) -> int:
    """delta-spark's ``estLogicalFileSize``: the bytes of the rows a deletion vector leaves live.

    Its auto-compaction counters count a file with many deleted rows as small by this size, so
    files with deletion vectors become candidates as they lose rows (``numRecords`` counts all rows).
    """
    if not deleted or not num_records or num_records <= 0:
        return size
    return int(size * max(0, num_records - deleted) / num_records)


def _sizes_by_live_bytes(table: FileTable) -> Any:
    """The size column, with files that have a deletion vector counted by their live bytes (``logical_size``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sizes = table.column("size")
    with_dv = table.column("deletionVector").is_valid()
    if not pc.any(with_dv).as_py():
        return sizes
    rows = pc.indices_nonzero(with_dv).to_pylist()
    deleted = table.column("deletionVector").field("cardinality").to_pylist()
    view = FileView(table, rows)
    live = {r: logical_size(f.size, f.num_records, deleted[r]) for r, f in zip(rows, view)}
    return pa.array([live.get(i, s) for i, s in enumerate(sizes.to_pylist())], pa.int64())


def partition_counts(snapshot: Snapshot, threshold: int) -> tuple[dict[RawKey, int], dict[RawKey, int]]:
    """Files smaller than ``threshold`` (by live bytes: ``logical_size``), and all files, per raw partition."""
    import pyarrow.compute as pc

    table = snapshot.file_table
    codes, keys = table.partition_codes(snapshot.physical_partition_columns)

    def counts(values: Any) -> dict[RawKey, int]:
        vc = pc.value_counts(values)
        return dict(zip((keys[c] for c in vc.field("values").to_pylist()), vc.field("counts").to_pylist()))

    return counts(codes.filter(pc.less(_sizes_by_live_bytes(table), threshold))), counts(codes)


def partitions_of(snapshot: Snapshot, paths: Collection[str]) -> set[RawKey]:
    """The raw partitions of the live files whose (decoded) path is in ``paths``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = snapshot.file_table
    codes, keys = table.partition_codes(snapshot.physical_partition_columns)
    hit = pc.is_in(table.decoded_paths(), value_set=pa.array(list(paths), pa.string()))
    return {keys[c] for c in pc.unique(codes.filter(hit)).to_pylist()}
