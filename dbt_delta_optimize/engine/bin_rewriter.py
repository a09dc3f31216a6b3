"""Rewrite one bin into new files: Arrow in one Spark task, a Spark DataFrame write, or a clustered write.

Every new file goes into the folder its partition values give (``layout``), is announced in the
run's journal before it is written (so a killed run's files can be cleaned up), and gets stats
from its own Parquet footer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.column_mapping import mapping_mode, physical_column_path
from ..delta.debris import RunJournal
from ..delta.row_tracking import RowTracking
from ..delta.snapshot import Snapshot
from ..delta.storage import LocalStorage, join
from ..plan.planner import Bin, OptimizePlan
from .layout import new_file_location
from .spark_engine import SparkEngine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ARROW_CODECS", "BinResult", "BinRewriter"]

log = logging.getLogger(__name__)

ARROW_CODECS = frozenset({"snappy", "gzip", "zstd", "lz4", "brotli", "none", "uncompressed"})


@dataclass(frozen=True)
class BinResult:
    bin: Bin
    adds: tuple[AddFile, ...]
    removes: tuple[RemoveFile, ...]


@dataclass
class BinRewriter:
    """Rewrites the bins of one run (thread-safe: bins run in parallel threads)."""

    engine: SparkEngine
    snapshot: Snapshot
    plan: OptimizePlan
    journal: RunJournal
    operation_timestamp: int
    uncommitted: dict[int, list[str]] = field(default_factory=dict)  #: id(bin) -> files written, not committed
    lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ placement
    def _place(self, b: Bin, name: str) -> tuple[str, str]:
        """(location, log path) of a new file, announced in the journal before anything is written."""
        snap = self.snapshot
        dest, log_path, rel_dir = new_file_location(
            snap.location, b.partition_values, snap.physical_partition_columns, name
        )
        folder = join(snap.location, rel_dir) if rel_dir else snap.location
        created = [] if snap.storage.exists(folder) else [rel_dir]
        with self.lock:
            self.journal.intend([log_path], created)
            self.uncommitted.setdefault(id(b), []).append(dest)
        snap.storage.makedirs(folder)
        return dest, log_path

    def _add_file(self, b: Bin, dest: str, log_path: str, tags: Mapping[str, str] | None = None) -> AddFile:
        from ..inspect.stats import stats_from_file

        snap = self.snapshot
        info = snap.storage.stat(dest)
        local = isinstance(snap.storage, LocalStorage)
        with contextlib.nullcontext(dest) if local else snap.storage.open_input(dest) as source:
            stats = stats_from_file(
                source,
                snap.schema,
                snap.partition_columns,
                snap.configuration,
                protocol=snap.protocol,
                session_time_zone=self.engine.time_zone,
            )
        return AddFile(
            path=log_path,
            partition_values=dict(b.partition_values),
            size=info.size,
            modification_time=info.modification_time_ms,
            data_change=False,
            stats=stats,
            tags=tags or {},
        )

    # ------------------------------------------------------------------ the three ways
    @property
    def _store(self) -> dict[str, Any] | None:
        """The object store's root and options for code in Spark tasks; None for a local table."""
        storage = self.snapshot.storage
        if isinstance(storage, LocalStorage):
            return None
        from ..delta.object_store import task_options

        return {"base": self.snapshot.location, "options": task_options(self.snapshot.location, storage.options)}

    @cached_property
    def _row_tracking(self) -> RowTracking:
        snap = self.snapshot
        return RowTracking.of(snap.protocol, snap.metadata, table=snap.location)

    def _row_tracking_spec(self, b: Bin) -> dict[str, Any] | None:
        """Column names and each input's baseRowId/defaultRowCommitVersion, when row ids must be kept."""
        from .row_tracking_columns import row_tracking_spec

        return row_tracking_spec(self._row_tracking, b.files, self.snapshot.location)

    def _input_df(self, b: Bin) -> DataFrame:
        """The bin's live rows (deletion vectors applied by the Arrow reader on a store, else by Spark),
        with the hidden row-id columns filled when the table tracks rows."""
        from .live_rows import input_spec, read_live

        row_tracking = self._row_tracking_spec(b)
        fields = self.snapshot.physical_data_fields
        if self._store is not None:
            from .store_io import read_store_files

            items = [input_spec(self.snapshot, f) for f in b.files]
            return read_store_files(self.engine, items, fields, self._store, row_tracking, by_id=self._by_id)
        if any(f.deletion_vector is not None for f in b.files):
            return read_live(self.engine, self.snapshot, b.files, row_tracking)
        paths = [self.snapshot.file_path(f.path) for f in b.files]
        if row_tracking is not None:
            from .row_tracking_columns import read_with_row_tracking

            return read_with_row_tracking(self.engine, paths, fields, row_tracking)
        return self.engine.read_parquet(paths, fields)

    @property
    def _by_id(self) -> bool:
        """Column mapping's id mode: Parquet columns are matched by field id, not by name."""
        return mapping_mode(self.snapshot.configuration) == "id"

    @property
    def _written_fields(self) -> list[dict[str, Any]]:
        """The Parquet schema of new files: physical data fields, then the materialized row-tracking columns."""
        from .row_tracking_columns import row_tracking_fields

        fields = self.snapshot.physical_data_fields
        rt = self._row_tracking
        if not rt.materializes:
            return fields
        return [*fields, *row_tracking_fields(dict(zip(("row_id", "commit_version"), rt.columns)))]

    def _write(self, df: DataFrame, staging: str) -> None:
        """Each partition of ``df`` into one file under ``staging``: Spark's writer, or Arrow in tasks on a store."""
        if self._store is not None:
            from .store_io import write_store_files

            write_store_files(df, staging, self._store, self.engine.parquet_codec, self._written_fields)
            return
        from ..delta.physical_layout import spark_write_options

        layout = spark_write_options(self.snapshot.data_fields, self.snapshot.configuration)  # variant unshredded
        writer = df.write.option("maxRecordsPerFile", 0).options(**layout)
        writer.mode("error").parquet(staging)  # "error": Connect knows no alias

    def _arrow(self, b: Bin) -> tuple[AddFile, ...] | None:
        """One Spark task streams the bin through Arrow into its final place; None means use Spark instead."""
        from .rewrite import rewrite_bin_task

        codec = self.engine.parquet_codec
        if codec not in ARROW_CODECS:
            return None
        suffix = "" if codec in ("none", "uncompressed") else f".{codec}"
        dest, log_path = self._place(b, f"part-00000-{uuid.uuid4()}.c000{suffix}.parquet")
        from .live_rows import input_spec

        spec: dict[str, Any] = {
            "inputs": [input_spec(self.snapshot, f) for f in b.files],
            "root": self.snapshot.location,
            "output": dest,
            "fields": self.snapshot.physical_data_fields,
            "compression": codec,
            "row_tracking": self._row_tracking_spec(b),
            "by_id": self._by_id,
        }
        if self._store is not None:
            spec["store"] = self._store
        try:
            result = self.engine.run_task(rewrite_bin_task, spec)
        except Exception as exc:
            if "ModuleNotFoundError" not in str(exc):
                raise
            # Executors without pyarrow/this package: Spark can still do the rewrite.
            result = {"fallback": f"the Python workers cannot import the Arrow rewriter ({str(exc).splitlines()[-1]})"}
        if "fallback" in result:
            log.warning("rewriting %s with Spark instead of Arrow: %s", b.describe(), result["fallback"])
            return None
        return (self._add_file(b, dest, log_path),)

    def _clustered(self, b: Bin, staging: str) -> tuple[AddFile, ...]:
        """Z-order/Hilbert: range-partition the partition along the curve into max(1, bytes/maxFileSize) files."""
        from .clustering import cluster

        spec = self.plan.clustering
        assert spec is not None
        approx = max(1, b.size // self.plan.config.max_file_size)
        from .live_rows import live_row_count

        total_rows = live_row_count(b.files)
        # The curve is computed on the Parquet (physical) columns of the logical names the user gave.
        mode = mapping_mode(self.snapshot.configuration)
        physical = tuple(physical_column_path(self.snapshot.data_fields, p, mode) for p in spec.columns)
        df = cluster(self.engine.spark, self._input_df(b), approx, replace(spec, columns=physical), total_rows)
        with self.engine.jit_sized_codegen():
            self._write(df, staging)
        adds = self._collect_staged(b, staging, tags=spec.tags())
        if spec.liquid:  # delta-spark's ClusteringStrategy.tagAddFile
            adds = tuple(dataclasses.replace(a, clustering_provider="liquid") for a in adds)
        return adds

    def _spark(self, b: Bin, staging: str) -> tuple[AddFile, ...]:
        """delta-spark's way: read the bin as a DataFrame, coalesce(1) (or repartition(1)), write."""
        df = self._input_df(b)
        df = df.repartition(1) if self.plan.config.repartition_enabled else df.coalesce(1)
        self._write(df, staging)
        return self._collect_staged(b, staging)

    def _collect_staged(self, b: Bin, staging: str, tags: Mapping[str, str] | None = None) -> tuple[AddFile, ...]:
        storage = self.snapshot.storage
        names = [n for n in storage.list_dir(staging) if n.startswith("part-") and n.endswith(".parquet")]
        adds = []
        for n in names:
            dest, log_path = self._place(b, n)
            storage.rename(join(staging, n), dest)
            adds.append(self._add_file(b, dest, log_path, tags))
        return tuple(adds)

    # ------------------------------------------------------------------ entry
    def rewrite(self, b: Bin, group: str) -> BinResult:
        """Rewrite one bin; if it fails (or is cancelled), the files it wrote are deleted before raising."""
        try:
            return self._rewrite(b, group)
        except BaseException:
            self.discard([b])
            raise

    def _rewrite(self, b: Bin, group: str) -> BinResult:
        staging = join(self.journal.folder, uuid.uuid4().hex)
        description = f"{self.snapshot.location}<br/>Optimizing {b.describe()}"
        # Column mapping's id mode: Spark reads Parquet columns by field id, as delta-spark does.
        confs = {"spark.sql.parquet.fieldId.read.enabled": "true"} if self._by_id else {}
        with self.engine.job_group(group, description), self.engine.scoped_defaults(confs):
            adds: tuple[AddFile, ...] | None = None
            if self.plan.clustering is not None:
                adds = self._clustered(b, staging)
            elif self.plan.config.rewrite_engine == "arrow":
                adds = self._arrow(b)
            if adds is None:
                adds = self._spark(b, staging)
        removes = tuple(f.remove(self.operation_timestamp, data_change=False) for f in b.files)
        return BinResult(b, adds, removes)

    def discard(self, bins: Iterable[Bin]) -> None:
        """Delete the files these bins wrote (a failed, cancelled or dropped bin)."""
        with self.lock:
            paths = [p for b in bins for p in self.uncommitted.pop(id(b), [])]
        for path in paths:
            self.snapshot.storage.delete(path)

    def discard_uncommitted(self) -> None:
        """Delete every file written but not committed (after a failure)."""
        with self.lock:
            paths = [p for files in self.uncommitted.values() for p in files]
            self.uncommitted.clear()
        for path in paths:
            self.snapshot.storage.delete(path)

    def committed(self, bins: Iterable[Bin]) -> None:
        """These bins' files are in the table now: never delete them."""
        with self.lock:
            for b in bins:
                self.uncommitted.pop(id(b), None)
