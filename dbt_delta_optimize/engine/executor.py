"""OptimizeExecutor: runs an OptimizePlan on Spark and commits it with our Delta writer.

Spark appears only here, where data is read and written: each bin is one Spark job (up to
maxThreads at once) that rewrites the bin's files into one Parquet file. Stats come from the
written footers, and all adds/removes of a batch are one dataChange=false OPTIMIZE commit.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.commit import CommitResult, Transaction
from ..delta.protocol import ensure_write_supported
from ..delta.snapshot import Snapshot, load_snapshot
from ..errors import MetadataChangedError, ProtocolChangedError
from ..plan.config import OptimizeConfig
from ..plan.metrics import (
    DeletionVectorStats,
    FileSizeMetrics,
    OptimizeMetrics,
    ZOrderFileStats,
    ZOrderStats,
    operation_metrics,
)
from ..plan.planner import Bin, OptimizePlan, plan_optimize

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BinResult", "OptimizeExecutor", "ProgressCallback"]

log = logging.getLogger(__name__)

STAGING_DIR = "_delta_optimize_staging"
ProgressCallback = Callable[[int, int, int, int], None]  # bins done, bins total, bytes done, bytes total


@dataclass(frozen=True)
class BinResult:
    bin: Bin
    adds: tuple[AddFile, ...]
    removes: tuple[RemoveFile, ...]


@dataclass
class _RunState:
    """Mutable bookkeeping of one run (files written but not yet committed are deleted on failure)."""

    uncommitted: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class OptimizeExecutor:
    """delta-spark's OptimizeExecutor, in Python: plan, rewrite bins in parallel, commit per batch."""

    def __init__(
        self,
        spark: SparkSession,
        snapshot: Snapshot,
        partition_predicates: Sequence[str] = (),
        zorder_by_columns: Sequence[str] = (),
        context: OptimizeConfig | None = None,
        *,
        is_auto_compact: bool = False,
        progress: ProgressCallback | None = None,
        curve: str = "zorder",
        full: bool = False,
        partitions: Iterable[tuple] | None = None,
    ) -> None:
        ensure_write_supported(snapshot.protocol, snapshot.metadata, table=snapshot.location)
        self.clustering = _clustering_spec(spark, snapshot, zorder_by_columns, curve) if zorder_by_columns else None
        self.full = full
        #: raw partition keys to restrict to (auto compaction), on top of the predicates
        self.partitions = None if partitions is None else frozenset(partitions)
        self.spark = spark
        self.snapshot = snapshot
        self.partition_predicates = tuple(partition_predicates)
        self.zorder_by_columns = tuple(zorder_by_columns)
        self.config = context or OptimizeConfig()
        self.is_auto_compact = is_auto_compact
        self.progress = progress
        self.operation_timestamp = int(time.time() * 1000)
        self._predicate_sql: tuple[str, ...] = ()
        self._time_zone = spark.conf.get("spark.sql.session.timeZone") or "UTC"
        self._predicate_strings: tuple[str, ...] = ()
        self._plan: OptimizePlan | None = None

    # ---------------------------------------------------------------- planning
    def plan(self) -> OptimizePlan:
        """Decide bins and batches (runs one tiny Spark query over partition values, reads no data)."""
        if self._plan is None:
            from .spark_predicate import select_partitions

            snap = self.snapshot
            selection = select_partitions(self.spark, snap, self.partition_predicates)
            self._predicate_sql = selection.predicate_sql
            self._predicate_strings = selection.predicate_strings or selection.predicate_sql
            matched = selection.matched
            if self.partitions is not None:
                matched = self.partitions if matched is None else matched & self.partitions
                if snap.partition_columns:  # delta-spark: no predicate for an unpartitioned table
                    self._predicate_strings += (_partitions_predicate(self.partitions, snap),)
            self._plan = plan_optimize(
                snap.files,
                snap.partition_columns,
                self.config,
                read_version=snap.version,
                mode="zorder" if self.clustering else "compaction",
                matched_partitions=matched,
                normalize=lambda k: selection.normalized.get(k, k),
                skip_partition=self._already_clustered if self.clustering and not self.full else None,
            )
        return self._plan

    def _already_clustered(self, files: Sequence[AddFile]) -> bool:
        from .clustering import already_clustered

        return already_clustered(files, self.clustering)

    # ---------------------------------------------------------------- running
    def optimize(self) -> OptimizeMetrics:
        start_ms = int(time.time() * 1000)
        plan = self.plan()
        sc = self.spark.sparkContext
        group = f"dbt-delta-optimize-{uuid.uuid4().hex[:12]}"
        state = _RunState()
        results: list[BinResult] = []
        committed: list[CommitResult] = []
        bins_total = len(plan.bins)
        bytes_total = plan.bytes_to_rewrite
        done = {"bins": 0, "bytes": 0}
        staging_root = os.path.join(self.snapshot.location, STAGING_DIR, group)
        try:
            for batch in plan.batches:
                if not batch:
                    continue
                batch_results = self._run_batch(batch, group, staging_root, state, done, bins_total, bytes_total)
                adds = [a for r in batch_results for a in r.adds]
                removes = [rm for r in batch_results for rm in r.removes]
                if not adds and not removes:
                    continue
                committed.append(self._commit(batch, adds, removes))
                with state.lock:
                    state.uncommitted.clear()
                results.extend(batch_results)
        except BaseException:
            for path in state.uncommitted:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            raise
        finally:
            shutil.rmtree(staging_root, ignore_errors=True)
            parent = os.path.dirname(staging_root)
            if os.path.isdir(parent) and not os.listdir(parent):
                os.rmdir(parent)
        return self._metrics(plan, results, committed, start_ms, self._scheduled_tasks(sc, group))

    def _run_batch(self, batch, group, staging_root, state, done, bins_total, bytes_total) -> list[BinResult]:
        sc = self.spark.sparkContext
        workers = max(1, min(self.config.max_threads, len(batch)))
        results: list[BinResult] = []
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="OptimizeJob") as pool:
            futures = {
                pool.submit(self._rewrite_bin, b, group, os.path.join(staging_root, uuid.uuid4().hex), state): b
                for b in batch
            }
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in finished:
                    exc = fut.exception()
                    if exc is not None:
                        for p in pending:
                            p.cancel()
                        sc.cancelJobGroup(group)
                        wait(pending)
                        raise exc
                    r = fut.result()
                    results.append(r)
                    done["bins"] += 1
                    done["bytes"] += r.bin.size
                    if self.progress:
                        self.progress(done["bins"], bins_total, done["bytes"], bytes_total)
        return results

    def _input_df(self, b: Bin) -> DataFrame:
        from pyspark.sql.types import StructType

        snap = self.snapshot
        schema = StructType.fromJson({"type": "struct", "fields": snap.data_fields})
        paths = [snap.file_path(f.path) for f in b.files]
        from .session import LISTING_THRESHOLD_KEY, scoped_defaults

        # Local files: stat them on the driver; Spark's default lists >32 paths with a job (~0.5 s).
        local = all(p.startswith(("/", "file:")) for p in paths)
        with scoped_defaults(self.spark, {LISTING_THRESHOLD_KEY: str(max(32, len(paths) + 1))} if local else {}):
            df = self.spark.read.schema(schema).parquet(*paths)
        return df.select(*[f"`{f['name']}`" for f in snap.data_fields])

    def _rewrite_bin(self, b: Bin, group: str, staging: str, state: _RunState) -> BinResult:
        sc = self.spark.sparkContext
        sc.setJobGroup(group, f"{self.snapshot.location}<br/>Optimizing {b.describe()}", interruptOnCancel=True)
        try:
            adds = None
            if self.clustering is not None:
                adds = self._rewrite_bin_clustered(b, staging, state)
            elif self.config.rewrite_engine == "arrow":
                adds = self._rewrite_bin_arrow(b, state)
            if adds is None:
                adds = self._rewrite_bin_spark(b, staging, state)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        removes = tuple(f.remove(self.operation_timestamp, data_change=False) for f in b.files)
        return BinResult(b, adds, removes)

    def _codec(self) -> str:
        return (self.spark.conf.get("spark.sql.parquet.compression.codec", "snappy") or "snappy").lower()

    def _rewrite_bin_arrow(self, b: Bin, state: _RunState) -> tuple[AddFile, ...] | None:
        """One Spark task streams the bin through Arrow into its final place; None means use Spark instead."""
        from .rewrite import rewrite_bin_task

        codec = self._codec()
        if codec not in _ARROW_CODECS:
            return None
        suffix = "" if codec in ("none", "uncompressed") else f".{codec}"
        name = f"part-00000-{uuid.uuid4()}.c000{suffix}.parquet"
        dest, log_path = self._target(b, name)
        with state.lock:
            state.uncommitted.append(dest)
        spec = {
            "inputs": [self.snapshot.file_path(f.path) for f in b.files],
            "output": dest,
            "fields": self.snapshot.data_fields,
            "compression": codec,
        }
        try:
            result = self.spark.sparkContext.parallelize([spec], 1).map(rewrite_bin_task).collect()[0]
        except Exception as exc:
            if "ModuleNotFoundError" not in str(exc):
                raise
            # Executors without pyarrow/this package: Spark can still do the rewrite.
            result = {"fallback": f"the Python workers cannot import the Arrow rewriter ({str(exc).splitlines()[-1]})"}
        if "fallback" in result:
            log.warning("rewriting %s with Spark instead of Arrow: %s", b.describe(), result["fallback"])
            return None
        return (self._add_file(b, dest, log_path),)

    def _rewrite_bin_clustered(self, b: Bin, staging: str, state: _RunState) -> tuple[AddFile, ...]:
        """Z-order/Hilbert: range-partition the whole partition along the curve into max(1, bytes/maxFileSize) files."""
        from .clustering import cluster
        from .session import jit_sized_codegen

        approx = max(1, b.size // self.config.max_file_size)
        counts = [f.num_records for f in b.files]
        total_rows = sum(counts) if all(c is not None for c in counts) else None
        df = cluster(self.spark, self._input_df(b), approx, self.clustering, total_rows)
        with jit_sized_codegen(self.spark):
            df.write.option("maxRecordsPerFile", 0).mode("errorifexists").parquet(staging)
        return self._collect_staged(b, staging, state, tags=self.clustering.tags())

    def _rewrite_bin_spark(self, b: Bin, staging: str, state: _RunState) -> tuple[AddFile, ...]:
        """delta-spark's way: read the bin as a DataFrame, coalesce(1) (or repartition(1)), write."""
        df = self._input_df(b)
        df = df.repartition(1) if self.config.repartition_enabled else df.coalesce(1)
        df.write.option("maxRecordsPerFile", 0).mode("errorifexists").parquet(staging)
        return self._collect_staged(b, staging, state)

    def _collect_staged(
        self, b: Bin, staging: str, state: _RunState, tags: Mapping[str, str] | None = None
    ) -> tuple[AddFile, ...]:
        adds = []
        for n in sorted(n for n in os.listdir(staging) if n.startswith("part-") and n.endswith(".parquet")):
            dest, log_path = self._target(b, n)
            with state.lock:
                state.uncommitted.append(dest)
            os.replace(os.path.join(staging, n), dest)
            adds.append(self._add_file(b, dest, log_path, tags))
        return tuple(adds)

    def _target(self, b: Bin, name: str) -> tuple[str, str]:
        """(absolute destination, path as written in the log) for a new file of this bin's partition."""
        snap = self.snapshot
        first = b.files[0].path
        if "://" in first or first.startswith("file:") or first.startswith("/"):
            rel_dir = _hive_dir(b.partition_values, snap.partition_columns)
            log_dir = _encode_path(rel_dir)
        else:
            log_dir = posixpath.dirname(first)
            rel_dir = posixpath.dirname(_unquote(first))
        dest = os.path.join(snap.location, rel_dir, name) if rel_dir else os.path.join(snap.location, name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        return dest, (posixpath.join(log_dir, name) if log_dir else name)

    def _add_file(self, b: Bin, dest: str, log_path: str, tags: Mapping[str, str] | None = None) -> AddFile:
        from ..inspect.stats import stats_from_file

        snap = self.snapshot
        st = os.stat(dest)
        return AddFile(
            path=log_path,
            partition_values=dict(b.partition_values),
            size=st.st_size,
            modification_time=int(st.st_mtime * 1000),
            data_change=False,
            stats=stats_from_file(
                dest,
                snap.schema,
                snap.partition_columns,
                snap.configuration,
                protocol=snap.protocol,
                session_time_zone=self._time_zone,
            ),
            tags=tags or {},
        )

    # ---------------------------------------------------------------- commit
    def operation_parameters(self) -> dict[str, Any]:
        return {
            # As delta-spark writes them: each predicate's Catalyst toString, compact JSON (Jackson).
            "predicate": json.dumps(list(self._predicate_strings), separators=(",", ":")),
            "zOrderBy": json.dumps(list(self.zorder_by_columns), separators=(",", ":")),
            "clusterBy": "[]",
            "auto": self.is_auto_compact,
        }

    def _commit(self, batch: Sequence[Bin], adds: list[AddFile], removes: list[RemoveFile]) -> CommitResult:
        """Commit one batch; on a metadata/protocol conflict, retry if every compacted file is still live."""
        files_read = [f for b in batch for f in b.files]
        opm = operation_metrics(
            [a.size for a in adds],
            [r.size or 0 for r in removes],
            sum(1 for f in files_read if f.deletion_vector is not None),
        )
        actions = [*adds, *removes]
        snapshot = self.snapshot
        attempts = 0
        while True:
            if self.config.validate_commits:
                from ..inspect.validate import validate_actions

                validate_actions(snapshot, adds, removes).raise_if_invalid()
            txn = Transaction(snapshot, max_attempts=self.config.max_commit_attempts)
            txn.track_read(files_read)
            try:
                result = txn.commit(actions, "OPTIMIZE", self.operation_parameters(), opm)
            except (MetadataChangedError, ProtocolChangedError) as exc:
                attempts += 1
                if attempts >= self.config.max_commit_attempts:
                    raise
                latest = load_snapshot(snapshot.location)
                ensure_write_supported(latest.protocol, latest.metadata, table=latest.location)
                live = {f.key for f in latest.files}
                gone = [f.path for f in files_read if f.key not in live]
                if gone or latest.partition_columns != snapshot.partition_columns:
                    log.warning("Aborting the compaction: %d compacted file(s) changed: %s", len(gone), gone[:5])
                    raise
                log.info("Retrying commit after checking for semantic conflicts (%s)", exc)
                snapshot = latest
                continue
            if self.config.validate_commits:
                self._check_landed(result.version)
            return result

    def _check_landed(self, version: int) -> None:
        """Re-read the commit that just landed; a finding here is a bug, reported with the way back."""
        from ..errors import ValidationError
        from ..inspect.validate import validate_commit

        report = validate_commit(self.snapshot.location, version)
        if not report.ok:
            raise ValidationError(
                f"OPTIMIZE commit {version} of {self.snapshot.location} failed validation after landing: "
                f"{report.describe()}\nThis is a bug in dbt-delta-optimize, please report it. The table's rows are "
                f"unchanged by a valid OPTIMIZE; to be safe, RESTORE TABLE delta.`{self.snapshot.location}` "
                f"TO VERSION AS OF {version - 1}."
            )

    # ---------------------------------------------------------------- metrics
    @staticmethod
    def _scheduled_tasks(sc, group: str) -> int:
        try:
            tracker = sc.statusTracker()
            total = 0
            for job_id in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job_id)
                for stage_id in info.stageIds if info else ():
                    stage = tracker.getStageInfo(stage_id)
                    total += stage.numTasks if stage else 0
            return total
        except Exception:  # status tracking is best effort
            return 0

    def _metrics(
        self, plan: OptimizePlan, results: list[BinResult], committed: list[CommitResult], start_ms: int, tasks: int
    ) -> OptimizeMetrics:
        added = [a.size for r in results for a in r.adds]
        removed = [rm.size or 0 for r in results for rm in r.removes]
        kept_bins = [r.bin for r in results]
        partitions = {tuple(sorted(b.partition_values.items())) for b in kept_bins}
        snap = self.snapshot
        n_cols = len(snap.schema["fields"])
        try:
            indexed = int(snap.configuration.get("delta.dataSkippingNumIndexedCols", "32"))
        except ValueError:
            indexed = 32
        with_stats = n_cols if indexed < 0 else min(indexed, n_cols)
        dv_files = [f for b in kept_bins for f in b.files if f.deletion_vector is not None]
        zstats = None
        if plan.mode == "zorder":
            other = ZOrderFileStats(len(removed), sum(removed))
            zstats = ZOrderStats("all", ZOrderFileStats(0, 0), other, 0, other, len(partitions))
        num_batches = len(committed) if self.config.batch_size is not None else 1
        return OptimizeMetrics(
            num_files_added=len(added),
            num_files_removed=len(removed),
            files_added=FileSizeMetrics.of(added),
            files_removed=FileSizeMetrics.of(removed),
            partitions_optimized=len(partitions),
            z_order_stats=zstats,
            num_bins=len(kept_bins),
            num_batches=num_batches,
            total_considered_files=len(plan.considered_files),
            total_files_skipped=len(plan.considered_files) - len(removed),
            preserve_insertion_order=False,
            num_files_skipped_to_reduce_write_amplification=0,
            num_bytes_skipped_to_reduce_write_amplification=0,
            start_time_ms=start_ms,
            end_time_ms=int(time.time() * 1000),
            total_cluster_parallelism=self.spark.sparkContext.defaultParallelism,
            total_scheduled_tasks=tasks,
            auto_compact_parallelism_stats=None,
            deletion_vector_stats=(
                DeletionVectorStats(len(dv_files), sum(f.deletion_vector.cardinality for f in dv_files))
                if dv_files
                else None
            ),
            num_table_columns=n_cols,
            num_table_columns_with_stats=with_stats,
            path=snap.location,
            committed_versions=tuple(c.version for c in committed),
            partitions_skipped_already_clustered=len(plan.skipped_partitions),
        )


def _partitions_predicate(keys: Iterable[tuple], snapshot: Snapshot) -> str:
    """delta-spark's auto-compaction predicate: OR of ANDs of ``col <=> CAST('v' AS type)``."""
    cols = snapshot.partition_columns
    types = snapshot.partition_types
    if not cols:
        return "true"

    def lit(v):
        return "NULL" if v is None else "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"

    terms = [
        "(" + " AND ".join(f"(`{c}` <=> CAST({lit(v)} AS {types[c]}))" for c, v in zip(cols, key)) + ")"
        for key in sorted(keys, key=repr)
    ]
    return " OR ".join(terms) if terms else "false"


_ARROW_CODECS = {"snappy", "gzip", "zstd", "lz4", "brotli", "none", "uncompressed"}


def _clustering_spec(spark, snapshot: Snapshot, columns: Sequence[str], curve: str):
    """Validate Z-order columns and read delta-spark's multi-dimensional clustering confs."""
    from ..errors import InvalidConfigError
    from ..plan.config import parse_bool
    from .clustering import ClusteringSpec, resolve_columns

    if curve not in ("zorder", "hilbert"):
        raise InvalidConfigError(f"curve must be 'zorder' or 'hilbert', got {curve!r}.")

    def conf(key: str, default: str) -> str:
        return spark.conf.get(key, None) or default

    check = parse_bool(
        conf("spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled", "true"), key="checkStatsCollection"
    )
    resolved = resolve_columns(
        columns, snapshot.schema, snapshot.partition_columns, snapshot.configuration, check_stats=check
    )
    key = "spark.databricks.io.skipping.mdc.rangeId.max"
    try:
        num_ranges = int(conf(key, "1000"))
    except ValueError:
        raise InvalidConfigError(f"{key} must be a whole number > 1.") from None
    if num_ranges < 2:
        raise InvalidConfigError(f"{key} must be > 1, got {num_ranges}.")
    return ClusteringSpec(
        resolved,
        curve,  # type: ignore[arg-type]
        num_ranges=num_ranges,
        add_noise=parse_bool(conf("spark.databricks.io.skipping.mdc.addNoise", "true"), key="mdc.addNoise"),
        sort_within_files=parse_bool(
            conf("spark.databricks.io.skipping.mdc.sortWithinFiles", "false"), key="mdc.sortWithinFiles"
        ),
    )


# ---------------------------------------------------------------- paths
_HIVE_ESCAPE = set("\"#%'*/:=?\\{[]^") | {chr(c) for c in range(0x01, 0x20)} | {chr(0x7F)}


def _hive_escape(value: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _HIVE_ESCAPE else ch for ch in value)


def _hive_dir(values: Mapping[str, str | None], columns: Sequence[str]) -> str:
    parts = []
    for c in columns:
        v = values.get(c)
        parts.append(f"{_hive_escape(c)}={'__HIVE_DEFAULT_PARTITION__' if v in (None, '') else _hive_escape(v)}")
    return "/".join(parts)


def _encode_path(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/=!$&'()*+,;:@-._~")


def _unquote(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)
