"""What maintenance would buy a table, and what it would cost: estimated from the log alone (no data read).

One snapshot and the facts read from its log (tombstones, recent commits: ``LogFacts``) in, one
``TableScore`` out: per action (purge, optimize, analyze, vacuum) a benefit in readable units
(small files, files removed, bytes rewritten, deleted-row ratio, reclaimable bytes, files without
statistics, clustered-range overlap) and a cost (bytes to read and write, files, seconds). The
compaction estimate is OPTIMIZE's own candidate selection and bin packing (``planner.select_bins``),
so "small" means here what it means to ``optimize``. Ranking, aging and the budget are in
``maintenance_queue``. Pure: unit-tested in milliseconds.

Benefit and cost meet in one unit so tables can be compared: the benefit is the seconds a full scan
of the table would save (files not opened, dead rows not read, files a filter could skip) plus a
weight for storage given back; the cost is the seconds the work is predicted to take.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..delta.snapshot import Snapshot
from ..options import MiB
from .cluster_overlap import cluster_overlap, clustered_columns, parse_stats_json
from .config import OptimizeConfig
from .planner import select_bins

__all__ = [
    "ACTIONS",
    "MAINTENANCE_OPERATIONS",
    "Action",
    "ActionEstimate",
    "Calibration",
    "CommitSummary",
    "LogFacts",
    "MaintenanceConfig",
    "TableScore",
    "Tombstone",
    "estimate_table",
    "parse_interval",
    "retention_ms",
]

Action = Literal["purge", "optimize", "analyze", "vacuum"]
#: Every action, in the order they run on one table: rewrite first (its output has stats and leaves
#: tombstones), then statistics for what was not rewritten, then VACUUM.
ACTIONS: tuple[Action, ...] = ("purge", "optimize", "analyze", "vacuum")
#: Commit operations that count as maintenance (for aging: the time since the last one).
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE", "REORG", "VACUUM START", "VACUUM END", "COMPUTE STATS", "ANALYZE"})
#: delta-spark's delta.deletedFileRetentionDuration default (one week).
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
_UNITS_MS = {
    "week": 7 * 86_400_000,
    "day": 86_400_000,
    "hour": 3_600_000,
    "minute": 60_000,
    "second": 1000,
    "millisecond": 1,
    "microsecond": 0.001,
}


@dataclass(frozen=True)
class MaintenanceConfig:
    """The model's constants: what a scan pays per file and byte, what the work costs, and how tables age.

    Defaults are round numbers for one local executor; the per-table calibration (``Calibration``)
    corrects the cost side from real runs.
    """

    scan_bytes_per_second: float = 256 * MiB  #: a query reading the table
    file_open_seconds: float = 0.01  #: a query opening one more file (request, footer)
    skip_share: float = 0.5  #: share of a file's bytes a filter could skip with its statistics
    reclaim_seconds_per_gib: float = 1.0  #: weight of one GiB of storage given back, in scan-seconds
    #: rewrite throughput and per-file cost: a least-squares fit over 50 compactions on one local core
    #: (bench/maintain_rank.py: 36 ms overhead, 12 MB/s of input read and written, 3.6 ms per file)
    read_bytes_per_second: float = 32 * MiB  #: rewrite input
    write_bytes_per_second: float = 16 * MiB  #: rewrite output (re-encoded and compressed)
    seconds_per_file: float = 0.004  #: per input file of a rewrite, per file VACUUM lists or deletes
    overhead_seconds: Mapping[str, float] = field(
        default_factory=lambda: {"purge": 0.05, "optimize": 0.05, "analyze": 0.05, "vacuum": 0.05}
    )
    min_purge_ratio: float = 0.05  #: purge only when at least this share of the DV files' rows is deleted
    min_overlap: float = 2.0  #: re-cluster only when a clustered value lies in this many files on average
    aging_days: float = 7.0  #: the score doubles after this many days without maintenance
    table_share: float = 0.5  #: no table may take more than this share of the budget


@dataclass(frozen=True)
class Tombstone:
    """A remove action: the file, its size (if logged) and when it was removed (ms)."""

    path: str
    size: int | None
    deletion_timestamp: int | None


@dataclass(frozen=True)
class CommitSummary:
    """One commit as aging and calibration need it."""

    version: int
    timestamp: int | None  #: ms (commitInfo.inCommitTimestamp or timestamp)
    operation: str | None
    bytes_read: int = 0  #: OPTIMIZE/REORG: numRemovedBytes
    bytes_written: int = 0  #: numAddedBytes
    duration_ms: int | None = None  #: when the commitInfo records it (executionTimeMs, endTimeMs - startTimeMs)
    #: VACUUM START: its time less the retention it ran with (the tombstones removed before it were deleted)
    vacuum_cutoff_ms: int | None = None


@dataclass(frozen=True)
class LogFacts:
    """What the log says beyond the live files: tombstones, recent commits (newest first), and now."""

    now_ms: int
    tombstones: tuple[Tombstone, ...] = ()
    commits: tuple[CommitSummary, ...] = ()


@dataclass(frozen=True)
class Calibration:
    """Observed actual / predicted seconds per action (from a previous run's results), applied to the cost."""

    factors: Mapping[str, float] = field(default_factory=dict)
    source: str = "previous run"


@dataclass(frozen=True)
class ActionEstimate:
    """One action on one table: what it buys (readable units and scan-seconds) and what it costs."""

    action: Action
    benefit: Mapping[str, Any]  #: readable: smallFiles, filesRemoved, reclaimableBytes ...
    value: float  #: benefit in scan-seconds
    bytes_read: int
    bytes_written: int
    files: int
    raw_seconds: float  #: the model's prediction before calibration
    seconds: float  #: predicted, calibrated
    calibration: str  #: "default", "log" or "previous run"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "benefit": dict(self.benefit),
            "value": round(self.value, 6),
            "cost": {
                "bytesRead": self.bytes_read,
                "bytesWritten": self.bytes_written,
                "files": self.files,
                "seconds": round(self.seconds, 3),
                "rawSeconds": round(self.raw_seconds, 3),
                "calibration": self.calibration,
            },
            "reason": self.reason,
        }


@dataclass(frozen=True)
class TableScore:
    """A table's estimates (only actions worth running), its health numbers and its score."""

    table: str
    location: str
    version: int
    actions: tuple[ActionEstimate, ...]
    health: Mapping[str, Any]  #: sizeBytes, numFiles, smallFiles, reclaimableBytes, statsCoverage, lastMaintained...
    waited_days: float
    score: float

    @property
    def value(self) -> float:
        return sum(a.value for a in self.actions)

    @property
    def seconds(self) -> float:
        return sum(a.seconds for a in self.actions)

    @property
    def reason(self) -> str:
        if not self.actions:
            return "nothing to do: " + str(
                self.health.get("summary", "compact, statistics present, nothing to reclaim")
            )
        return "; ".join(a.reason for a in self.actions)

    def benefit(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scanSecondsSaved": round(self.value, 6)}
        for a in self.actions:
            out.update(a.benefit)
        return out

    def cost(self) -> dict[str, Any]:
        return {
            "bytesRead": sum(a.bytes_read for a in self.actions),
            "bytesWritten": sum(a.bytes_written for a in self.actions),
            "files": sum(a.files for a in self.actions),
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------- retention
def parse_interval(text: str) -> int | None:
    """Milliseconds of a Delta interval (``interval 1 weeks``, ``168 hours``, ``interval 0 seconds``); None if unreadable."""
    words = text.strip().lower().split()
    if words and words[0] == "interval":
        words = words[1:]
    if not words or len(words) % 2:
        return None
    total = 0.0
    for number, unit in zip(words[::2], words[1::2]):
        base = unit[:-1] if unit.endswith("s") else unit
        if base not in _UNITS_MS or not re.fullmatch(r"\d+(\.\d+)?", number):
            return None
        total += float(number) * _UNITS_MS[base]
    return int(total)


def retention_ms(configuration: Mapping[str, str]) -> int:
    """The table's delta.deletedFileRetentionDuration (default one week)."""
    raw = configuration.get("delta.deletedFileRetentionDuration")
    parsed = parse_interval(raw) if raw else None
    return DEFAULT_RETENTION_MS if parsed is None else parsed


# --------------------------------------------------------------------------- per action
def _cost(
    action: Action,
    config: MaintenanceConfig,
    calibration: tuple[float, str],
    *,
    read: int,
    write: int,
    files: int,
) -> tuple[float, float, str]:
    """(raw seconds, calibrated seconds, source): overhead + bytes / throughput + files x per-file cost."""
    raw = (
        config.overhead_seconds.get(action, 1.0)
        + read / config.read_bytes_per_second
        + write / config.write_bytes_per_second
        + files * config.seconds_per_file
    )
    factor, source = calibration
    return raw, raw * factor, source


def _stats_rows(snapshot: Snapshot) -> list[str | None]:
    return list(snapshot.file_table.column("stats").to_pylist()) if len(snapshot.file_table) else []


def _compaction(snapshot: Snapshot, opt: OptimizeConfig, config: MaintenanceConfig, cal: tuple[float, str]) -> Any:
    """OPTIMIZE's own bins over the snapshot: files removed and bytes rewritten; small files per partition."""
    table = snapshot.file_table
    columns = snapshot.physical_partition_columns
    selected = select_bins(table, columns, opt, mode="compaction")
    files_in = sum(len(b.files) for b in selected.bins)
    if not files_in:
        return None
    rewrite = sum(b.size for b in selected.bins)
    removed = files_in - len(selected.bins)
    per_partition: dict[str, int] = {}
    for b in selected.bins:
        label = ", ".join(f"{k}={v}" for k, v in b.partition_values.items()) or "(unpartitioned)"
        per_partition[label] = per_partition.get(label, 0) + len(b.files)
    raw, seconds, source = _cost("optimize", config, cal, read=rewrite, write=rewrite, files=files_in)
    value = removed * config.file_open_seconds
    worst = max(per_partition.items(), key=lambda kv: (kv[1], kv[0]))
    return ActionEstimate(
        "optimize",
        {
            "smallFiles": files_in,
            "smallFilesPerPartition": dict(sorted(per_partition.items())),
            "filesRemoved": removed,
            "bytesRewritten": rewrite,
        },
        value,
        rewrite,
        rewrite,
        files_in,
        raw,
        seconds,
        source,
        f"{files_in} small files in {len(per_partition)} partition(s) (most: {worst[1]} in {worst[0]}) "
        f"-> {len(selected.bins)} file(s)",
    )


def _purge(snapshot: Snapshot, config: MaintenanceConfig, cal: tuple[float, str]) -> ActionEstimate | None:
    """Deleted-row ratio of the files with deletion vectors (DV cardinality against numRecords)."""
    table = snapshot.file_table
    if not len(table):
        return None
    cardinality = table.column("deletionVector").field("cardinality").to_pylist()
    rows = [i for i, c in enumerate(cardinality) if c]
    if not rows:
        return None
    stats = _stats_rows(snapshot)
    sizes = table.sizes
    deleted = total = dead_bytes = dv_bytes = 0
    for r in rows:
        n, _ = parse_stats_json(stats[r])
        dv_bytes += sizes[r]
        deleted += cardinality[r]
        if n:
            total += n
            dead_bytes += sizes[r] * min(1.0, cardinality[r] / n)
    ratio = deleted / total if total else 1.0
    if ratio < config.min_purge_ratio:
        return None
    live = dv_bytes - dead_bytes
    raw, seconds, source = _cost("purge", config, cal, read=dv_bytes, write=int(live), files=len(rows))
    value = dead_bytes / config.scan_bytes_per_second + len(rows) * config.file_open_seconds
    return ActionEstimate(
        "purge",
        {"deletedRowRatio": round(ratio, 4), "deletedRows": deleted, "filesWithDeletedRows": len(rows)},
        value,
        dv_bytes,
        int(live),
        len(rows),
        raw,
        seconds,
        source,
        f"{ratio:.0%} of the rows of {len(rows)} file(s) with deletion vectors are deleted",
    )


def _leaf_tops(fields: Sequence[Mapping[str, Any]]) -> list[str]:
    """The top-level name of each leaf column, in schema order (what numIndexedCols counts)."""
    out: list[str] = []
    for f in fields:
        t = f.get("type")
        n = len(_leaf_tops(t["fields"])) if isinstance(t, Mapping) and t.get("type") == "struct" else 1
        out.extend([f["name"]] * n)
    return out


def indexed_columns(snapshot: Snapshot) -> list[str]:
    """Top-level (physical) columns delta-spark collects statistics on: dataSkippingStatsColumns, else the
    first dataSkippingNumIndexedCols (32; -1 all) leaf columns of the data schema."""
    conf = snapshot.configuration
    fields = snapshot.physical_data_fields
    named = conf.get("delta.dataSkippingStatsColumns")
    if named:
        wanted = {c.strip().strip("`").split(".")[0] for c in named.split(",") if c.strip()}
        logical = {f["name"]: p["name"] for f, p in zip(snapshot.data_fields, fields)}
        return sorted(logical.get(c, c) for c in wanted)
    try:
        n = int(conf.get("delta.dataSkippingNumIndexedCols", "32"))
    except ValueError:
        n = 32
    tops = _leaf_tops(fields)
    chosen = tops if n < 0 else tops[:n]
    return list(dict.fromkeys(chosen))


def _stats_state(snapshot: Snapshot) -> tuple[list[int], list[int], list[str | None]]:
    """Rows without statistics (no numRecords), rows whose statistics miss an indexed column, and the stats."""
    stats = _stats_rows(snapshot)
    wanted = indexed_columns(snapshot)
    missing: list[int] = []
    partial: list[int] = []
    for i, s in enumerate(stats):
        n, parsed = parse_stats_json(s)
        if n is None:
            missing.append(i)
            continue
        counted = parsed.get("nullCount")
        if n > 0 and wanted and not (isinstance(counted, Mapping) and all(c in counted for c in wanted)):
            partial.append(i)
    return missing, partial, stats


def _analyze(
    snapshot: Snapshot, config: MaintenanceConfig, cal: tuple[float, str], state: tuple[list[int], list[int]]
) -> ActionEstimate | None:
    missing, partial = state
    rows = missing + partial
    if not rows:
        return None
    sizes = snapshot.file_table.sizes
    read = sum(sizes[r] for r in rows)
    raw, seconds, source = _cost("analyze", config, cal, read=read, write=0, files=len(rows))
    value = len(rows) * config.file_open_seconds + read * config.skip_share / config.scan_bytes_per_second
    n = len(snapshot.file_table)
    return ActionEstimate(
        "analyze",
        {"filesWithoutStats": len(missing), "filesWithPartialStats": len(partial), "statsCoverage": _coverage(n, rows)},
        value,
        read,
        0,
        len(rows),
        raw,
        seconds,
        source,
        f"{len(missing)} of {n} file(s) have no statistics"
        + (f", {len(partial)} lack some indexed columns" if partial else ""),
    )


def _coverage(files: int, lacking: Sequence[int]) -> float:
    return round(1.0 - len(lacking) / files, 4) if files else 1.0


def _last_vacuum_ms(facts: LogFacts) -> int | None:
    return next((c.timestamp for c in facts.commits if c.operation in ("VACUUM END", "VACUUM START")), None)


def reclaimable(snapshot: Snapshot, facts: LogFacts) -> tuple[int, int]:
    """(files, bytes) of tombstones older than the table's retention, not live again, and not older than
    the last logged VACUUM's own horizon (those it deleted already: its START's time less the retention it
    ran with, else its time less the table's retention)."""
    horizon = facts.now_ms - retention_ms(snapshot.configuration)
    last = _last_vacuum_ms(facts)
    done = last - retention_ms(snapshot.configuration) if last is not None else None
    start = next((c for c in facts.commits if c.operation == "VACUUM START"), None)
    if start is not None and start.vacuum_cutoff_ms is not None:
        done = start.vacuum_cutoff_ms  # the retention the last run used (RETAIN 0 HOURS deletes every tombstone)
    live = set(snapshot.file_table.paths)
    seen: set[str] = set()
    files = size = 0
    for t in facts.tombstones:
        ts = t.deletion_timestamp
        if t.path in seen or t.path in live or ts is None or ts >= horizon or (done is not None and ts < done):
            continue
        seen.add(t.path)
        files += 1
        size += t.size or 0
    return files, size


def _vacuum(snapshot: Snapshot, facts: LogFacts, config: MaintenanceConfig, cal: tuple[float, str]) -> Any:
    files, size = reclaimable(snapshot, facts)
    if not files:
        return None
    listed = len(snapshot.file_table) + files
    raw, seconds, source = _cost("vacuum", config, cal, read=0, write=0, files=listed)
    value = size / 2**30 * config.reclaim_seconds_per_gib + files * config.file_open_seconds / 10
    days = retention_ms(snapshot.configuration) / 86_400_000
    return ActionEstimate(
        "vacuum",
        {"reclaimableFiles": files, "reclaimableBytes": size},
        value,
        0,
        0,
        listed,
        raw,
        seconds,
        source,
        f"{files} removed file(s) ({size} bytes) older than the {days:g}-day retention",
    )


# --------------------------------------------------------------------------- clustering
def _clustering(snapshot: Snapshot, config: MaintenanceConfig, stats: Sequence[str | None]) -> tuple[Any, float]:
    """(benefit entries, scan-seconds) of re-clustering: a point filter reads ``depth`` files instead of one."""
    columns = clustered_columns(snapshot)
    if not columns:
        return {}, 0.0
    depth = cluster_overlap(snapshot, columns, stats)
    if depth is None or depth < config.min_overlap:
        return {"clusteredBy": columns, "clusterOverlap": depth}, 0.0
    n = len(snapshot.file_table)
    avg = snapshot.total_size / n if n else 0
    value = (depth - 1) * (config.file_open_seconds + avg * config.skip_share / config.scan_bytes_per_second)
    return {"clusteredBy": columns, "clusterOverlap": depth}, value


def _with_clustering(opt: ActionEstimate | None, extra: Mapping[str, Any], value: float) -> ActionEstimate | None:
    if opt is None or not extra:
        return opt
    overlap = extra.get("clusterOverlap")
    reason = opt.reason + (f"; clustered ranges overlap {overlap}x" if value else "")
    return ActionEstimate(
        opt.action,
        {**opt.benefit, **extra},
        opt.value + value,
        opt.bytes_read,
        opt.bytes_written,
        opt.files,
        opt.raw_seconds,
        opt.seconds,
        opt.calibration,
        reason,
    )


# --------------------------------------------------------------------------- calibration and aging
def _log_throughput(facts: LogFacts) -> float | None:
    """Bytes per second of this table's past rewrites whose commitInfo records a duration."""
    timed = [c for c in facts.commits if c.operation in ("OPTIMIZE", "REORG") and c.duration_ms and c.bytes_read]
    if not timed:
        return None
    moved = sum(c.bytes_read + c.bytes_written for c in timed)
    return moved / (sum(c.duration_ms or 0 for c in timed) / 1000)


def _calibrations(
    facts: LogFacts, config: MaintenanceConfig, calibration: Calibration | None
) -> tuple[MaintenanceConfig, dict[str, tuple[float, str]]]:
    """The config with the log's throughput (if any) and each action's correction factor and its source."""
    source = "default"
    rate = _log_throughput(facts)
    if rate:
        # one observed rate for read + write: split like the defaults (read twice as fast as write)
        config = replace(config, read_bytes_per_second=rate * 2, write_bytes_per_second=rate)
        source = "log"
    factors = dict(calibration.factors) if calibration is not None else {}
    out: dict[str, tuple[float, str]] = {}
    for a in ACTIONS:
        f = factors.get(a)
        out[a] = (min(5.0, max(0.2, f)), calibration.source) if f and calibration is not None else (1.0, source)
    return config, out


def last_maintained(facts: LogFacts) -> int | None:
    return next((c.timestamp for c in facts.commits if c.operation in MAINTENANCE_OPERATIONS and c.timestamp), None)


def _waited_days(facts: LogFacts) -> float:
    """Days since the last maintenance commit; never maintained: since the oldest commit the log still holds."""
    since = last_maintained(facts)
    if since is None:
        stamps = [c.timestamp for c in facts.commits if c.timestamp is not None]
        since = min(stamps) if stamps else facts.now_ms
    return max(0.0, (facts.now_ms - since) / 86_400_000)


# --------------------------------------------------------------------------- the table
def _log2_counts(sizes: Sequence[int]) -> list[dict[str, int]]:
    """Files and bytes per log2 size bucket [2^k, 2^(k+1)) (the health page's histogram shape)."""
    counts: dict[int, list[int]] = {}
    for s in sizes:
        counts.setdefault(max(0, s.bit_length() - 1), []).append(s)
    return [{"log2": k, "files": len(v), "bytes": sum(v)} for k, v in sorted(counts.items())]


def estimate_table(
    name: str,
    snapshot: Snapshot,
    facts: LogFacts,
    *,
    optimize_config: OptimizeConfig | None = None,
    config: MaintenanceConfig | None = None,
    calibration: Calibration | None = None,
    only: Sequence[Action] | None = None,
) -> TableScore:
    """Every worthwhile action on one table, its health numbers, and its score (value / seconds, aged)."""
    base = config or MaintenanceConfig()
    model, cal = _calibrations(facts, base, calibration)
    opt_config = optimize_config or OptimizeConfig()
    missing, partial, stats = _stats_state(snapshot)
    extra, cluster_value = _clustering(snapshot, model, stats)
    purge = _purge(snapshot, model, cal["purge"]) if only is None or "purge" in only else None
    # a purge runs first and leaves no deleted rows: compaction then rewrites only small files
    compact_config = replace(opt_config, max_deleted_rows_ratio=1.0) if purge is not None else opt_config
    candidates = {
        "purge": purge,
        "optimize": _with_clustering(
            _compaction(snapshot, compact_config, model, cal["optimize"]), extra, cluster_value
        ),
        "analyze": _analyze(snapshot, model, cal["analyze"], (missing, partial)),
        "vacuum": _vacuum(snapshot, facts, model, cal["vacuum"]),
    }
    wanted = set(only) if only is not None else set(ACTIONS)
    actions = tuple(e for a in ACTIONS if a in wanted and (e := candidates[a]) is not None)
    files, size = reclaimable(snapshot, facts)
    n = len(snapshot.file_table)
    small = sum(1 for s in snapshot.file_table.sizes if s < opt_config.min_file_size)
    health = {
        "sizeBytes": snapshot.total_size,
        "numFiles": n,
        "smallFiles": small,
        "reclaimableFiles": files,
        "reclaimableBytes": size,
        "statsCoverage": _coverage(n, missing + partial),
        "filesLackingStats": len(missing) + len(partial),
        "lastMaintained": last_maintained(facts),
        "clusterOverlap": extra.get("clusterOverlap"),
        "fileSizeHistogram": _log2_counts(snapshot.file_table.sizes),
    }
    waited = _waited_days(facts)
    seconds = sum(a.seconds for a in actions)
    ratio = sum(a.value for a in actions) / seconds if seconds > 0 else 0.0
    score = ratio * (1.0 + waited / base.aging_days) if actions else 0.0
    return TableScore(name, snapshot.location, snapshot.version, actions, health, round(waited, 4), score)
