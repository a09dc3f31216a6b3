"""Auto compaction: after a write, compact the partitions it left with enough small files.

Decisions come from the table's log, not from per-process counters: the partitions the
triggering commits added files to, and in each the live files smaller than the auto-compact
``minFileSize``. Every process therefore reaches the same decision, restarts lose nothing,
and large compacted files never count toward the threshold (delta-spark's bugs #4045, #4487).
Deciding to skip reads only the log (deltalake), never starts a Spark job.

Differences from delta-spark on purpose (tested):
- a partition never compacted before is not automatically eligible (#4043): a first write of
  3 files to a new partition does not compact, it needs ``minNumFiles`` small files;
- when more than ``maxNumModifiedPartitions`` qualify, the ones with most small files are
  chosen (deterministic), not a random subset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..errors import DeltaOptimizeError, InvalidConfigError
from .config import PREFIX, ConfGetter, MiB, parse_bool, parse_size

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..delta.snapshot import Snapshot
    from .metrics import OptimizeMetrics

__all__ = [
    "AutoCompactConfig",
    "AutoCompactDecision",
    "AutoCompactResult",
    "PartitionCount",
    "auto_compact",
    "auto_compact_enabled",
    "decide",
    "plan_auto_compact",
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


def _int(value: Any, key: str, minimum: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}.") from None
    if n < minimum:
        raise InvalidConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}.")
    return n


@dataclass(frozen=True)
class AutoCompactConfig:
    """Auto-compaction settings under delta-spark's keys (``spark.databricks.delta.autoCompact.*``)."""

    max_file_size: int = 128 * MiB
    min_file_size: int | None = None  #: None: max_file_size / 2
    min_num_files: int = 50
    modified_partitions_only: bool = True
    non_blind_append: bool = False
    max_num_modified_partitions: int = 128

    @property
    def small_file_threshold(self) -> int:
        return self.min_file_size if self.min_file_size is not None else self.max_file_size // 2

    @classmethod
    def resolve(
        cls, get_conf: ConfGetter | None = None, overrides: Mapping[str, Any] | None = None
    ) -> AutoCompactConfig:
        get_conf = get_conf or (lambda _k: None)
        o = dict(overrides or {})
        keys = {
            "max_file_size": ("autoCompact.maxFileSize", lambda v, k: parse_size(v, key=k)),
            "min_file_size": ("autoCompact.minFileSize", lambda v, k: parse_size(v, key=k)),
            "min_num_files": ("autoCompact.minNumFiles", lambda v, k: _int(v, k, 0)),
            "modified_partitions_only": (
                "autoCompact.modifiedPartitionsOnly.enabled",
                lambda v, k: parse_bool(v, key=k),
            ),
            "non_blind_append": ("autoCompact.nonBlindAppend.enabled", lambda v, k: parse_bool(v, key=k)),
            "max_num_modified_partitions": ("autoCompact.maxNumModifiedPartitions", lambda v, k: _int(v, k, 1)),
        }
        unknown = set(o) - set(keys)
        if unknown:
            raise InvalidConfigError(
                f"Unknown auto-compaction setting(s): {', '.join(sorted(unknown))}. Valid: {', '.join(keys)}."
            )
        values = {}
        for name, (key, parse) in keys.items():
            raw, source = o.get(name), name
            if raw is None:
                raw, source = get_conf(PREFIX + key), PREFIX + key
            if raw is not None:
                values[name] = parse(raw, source)
        cfg = cls(**values)
        if cfg.max_file_size <= 0:
            raise InvalidConfigError("autoCompact.maxFileSize must be greater than 0.")
        return cfg


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
            "smallFileThreshold": self.config.small_file_threshold,
            "minNumFiles": self.config.min_num_files,
            "considered": [p.to_dict() for p in self.considered],
            "chosen": [p.to_dict() for p in self.chosen],
            "metrics": self.metrics.to_dict() if self.metrics is not None else None,
            "error": self.error,
            "decisionMs": round(self.decision_ms, 1),
            "durationMs": round(self.duration_ms, 1),
        }


def decide(
    files: Sequence[tuple[Hashable, int]],
    touched: Iterable[Hashable],
    columns: Sequence[str],
    config: AutoCompactConfig,
) -> AutoCompactDecision:
    """Which partitions to compact, from (partition, size) of every live file. Pure.

    ``touched`` are the partitions the triggering commits added files to.
    """
    threshold = config.small_file_threshold
    small: dict[Hashable, int] = {}
    total: dict[Hashable, int] = {}
    for part, size in files:
        total[part] = total.get(part, 0) + 1
        if size < threshold:
            small[part] = small.get(part, 0) + 1
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
    snapshot: Snapshot, *, min_file_size: int | None = None, max_file_size: int | None = None, **overrides: Any
) -> AutoCompactDecision:
    """Dry run over every partition of a snapshot (no triggering write): what auto compaction would pick now."""
    from .planner import raw_partition_key

    settings = {"modified_partitions_only": False, **overrides}
    if max_file_size is not None:
        settings["max_file_size"] = max_file_size
    if min_file_size is not None:
        settings["min_file_size"] = min_file_size
    config = AutoCompactConfig.resolve(None, settings)
    cols = snapshot.partition_columns
    files = [(raw_partition_key(f, cols), f.size) for f in snapshot.files]
    return decide(files, (), cols, config)


def _triggering(location: str, since_version: int | None, latest: int) -> list[tuple[int, list[dict]]]:
    from ..delta.snapshot import read_commit

    start = latest if since_version is None else since_version + 1
    return [(v, read_commit(location, v)) for v in range(max(start, 0), latest + 1)]


def _active_conf() -> ConfGetter:
    """The running Spark session's conf, if there is one (never starts Spark)."""
    import sys

    if "pyspark" not in sys.modules:
        return lambda _k: None
    from pyspark.sql import SparkSession

    from ..engine.session import conf_getter

    active = SparkSession.getActiveSession()
    if active is None:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is None:
            return lambda _k: None
        active = SparkSession.builder.getOrCreate()
    return conf_getter(active)


def auto_compact(
    spark: SparkSession | None,
    table: str,
    since_version: int | None = None,
    *,
    enabled: bool | None = None,
    throw_on_error: bool | None = None,
    **overrides: Any,
) -> AutoCompactResult:
    """Run the auto-compaction hook for the write(s) after ``since_version`` (default: the latest commit).

    Args:
        spark: session for the compaction itself; None uses the running one, else an embedded one.
            It is only started when a compaction actually runs.
        table: path or catalog name (a name needs a session to resolve).
        since_version: the table version before the write; the commits after it are the trigger.
        enabled: force on/off (the dbt layer passes model settings); None follows delta-spark's confs.
        throw_on_error: raise instead of returning the error in the result; None reads
            ``spark.databricks.delta.postCommitHook.throwOnError`` (default false).
        **overrides: max_file_size, min_file_size, min_num_files, modified_partitions_only,
            non_blind_append, max_num_modified_partitions.
    """
    from ..delta.snapshot import latest_version
    from ..engine.session import conf_getter, is_path, resolve_table

    t0 = time.perf_counter()
    get_conf = _active_conf() if spark is None else conf_getter(spark)
    config = AutoCompactConfig.resolve(get_conf, overrides)
    raw_throw = get_conf(PREFIX + "postCommitHook.throwOnError")
    throw = (
        throw_on_error
        if throw_on_error is not None
        else (parse_bool(raw_throw, key="postCommitHook.throwOnError") if raw_throw else False)
    )
    location = table
    triggering: tuple[int, ...] = ()
    decision: AutoCompactDecision | None = None  # kept for the failure result: which partitions were tried

    def result(status: str, reason: str, decision: AutoCompactDecision | None = None, **kw: Any) -> AutoCompactResult:
        now = (time.perf_counter() - t0) * 1000
        return AutoCompactResult(
            table=location,
            status=status,
            reason=reason,
            since_version=since_version,
            triggering_versions=triggering,
            considered=decision.considered if decision else (),
            chosen=decision.chosen if decision else (),
            decision_ms=kw.pop("decision_ms", now),
            duration_ms=now,
            config=config,
            **kw,
        )

    try:
        if not is_path(table):
            from ..engine.session import get_spark

            spark = get_spark(spark)
        location = resolve_table(table, spark)
        import pyarrow as pa
        from deltalake import DeltaTable

        latest = latest_version(location)
        dt = DeltaTable(location)
        meta = dt.metadata()
        is_on = enabled if enabled is not None else auto_compact_enabled(get_conf, dict(meta.configuration))
        if not is_on:
            return result(
                DISABLED,
                "auto compaction is not enabled (spark.databricks.delta.autoCompact.enabled or table property delta.autoOptimize.autoCompact)",
            )
        commits = _triggering(location, since_version, latest)
        triggering = tuple(v for v, _ in commits)
        info = {v: next((a["commitInfo"] for a in acts if "commitInfo" in a), {}) for v, acts in commits}
        data_commits = [(v, acts) for v, acts in commits if info[v].get("operation") not in ("OPTIMIZE", "REORG")]
        if not data_commits:
            if not commits:
                return result(SKIP_EMPTY_INGESTION, f"no commits after version {since_version}")
            return result(
                SKIP_OWN_COMMIT,
                "the triggering commits are OPTIMIZE commits: auto compaction never compacts its own output",
            )
        # delta-spark's isQualifiedForAutoCompact: nonBlindAppend only applies with modifiedPartitionsOnly.
        if (
            config.non_blind_append
            and config.modified_partitions_only
            and all(info[v].get("isBlindAppend") for v, _ in data_commits)
        ):
            return result(
                SKIP_BLIND_APPEND, "autoCompact.nonBlindAppend.enabled is set and the write was a blind append"
            )
        added = {unquote(a["add"]["path"]) for _, acts in data_commits for a in acts if "add" in a}
        if not added:
            return result(SKIP_EMPTY_INGESTION, "the triggering commits added no data files")
        columns = list(meta.partition_columns)
        actions = pa.table(dt.get_add_actions(flatten=True))
        paths = actions.column("path").to_pylist()
        sizes = actions.column("size_bytes").to_pylist()
        part_cols = [actions.column(f"partition.{c}").to_pylist() for c in columns]
        keys = list(zip(*part_cols)) if columns else [()] * len(paths)
        touched = {k for p, k in zip(paths, keys) if unquote(p) in added}
        decision = decide(list(zip(keys, sizes)), touched, columns, config)
        decision_ms = (time.perf_counter() - t0) * 1000
        if not decision.run:
            return result(decision.status, decision.reason, decision, decision_ms=decision_ms)
        if decision.status == RUN_ON_ALL:
            chosen_paths = None  # the whole table, as delta-spark (no partition predicate)
        else:
            chosen = {tuple(c.partition[col] for col in columns) for c in decision.chosen}
            chosen_paths = {unquote(p) for p, k in zip(paths, keys) if k in chosen}
        metrics = _run(spark, location, chosen_paths, config)
        return result(decision.status, decision.reason, decision, metrics=metrics, decision_ms=decision_ms)
    except DeltaOptimizeError as exc:
        if throw:
            raise
        log.warning("auto compaction of %s failed: %s", location, exc)
        return result(FAILED, f"auto compaction failed: {exc}", decision, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        if throw:
            raise
        log.warning("auto compaction of %s failed: %s", location, exc, exc_info=True)
        return result(
            FAILED,
            f"auto compaction failed: {type(exc).__name__}: {exc}",
            decision,
            error=f"{type(exc).__name__}: {exc}",
        )


def _run(
    spark: SparkSession | None, location: str, chosen_paths: set[str] | None, config: AutoCompactConfig
) -> OptimizeMetrics:
    """Compact the chosen partitions (None: all) of the latest snapshot with the auto-compact sizes, as OPTIMIZE auto=true."""
    from ..delta.snapshot import load_snapshot
    from ..engine.executor import OptimizeExecutor
    from ..engine.session import conf_getter, get_spark
    from .config import OptimizeConfig
    from .planner import raw_partition_key

    spark = get_spark(spark)
    snapshot = load_snapshot(location)
    raw_keys = (
        None
        if chosen_paths is None
        else {
            raw_partition_key(f, snapshot.partition_columns) for f in snapshot.files if unquote(f.path) in chosen_paths
        }
    )
    opt = OptimizeConfig.resolve(
        conf_getter(spark), {"min_file_size": config.small_file_threshold, "max_file_size": config.max_file_size}
    )
    executor = OptimizeExecutor(spark, snapshot, (), (), opt, is_auto_compact=True, partitions=raw_keys)
    return executor.optimize()
