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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.debris import RunJournal
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
        dest, log_path, rel_dir = new_file_location(snap.location, b.partition_values, snap.partition_columns, name)
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

    def _input_df(self, b: Bin) -> DataFrame:
        paths = [self.snapshot.file_path(f.path) for f in b.files]
        if self._store is not None:
            from .store_io import read_store_files

            return read_store_files(self.engine, paths, self.snapshot.data_fields, self._store)
        return self.engine.read_parquet(paths, self.snapshot.data_fields)

    def _write(self, df: DataFrame, staging: str) -> None:
        """Each partition of ``df`` into one file under ``staging``: Spark's writer, or Arrow in tasks on a store."""
        if self._store is not None:
            from .store_io import write_store_files

            write_store_files(df, staging, self._store, self.engine.parquet_codec)
            return
        df.write.option("maxRecordsPerFile", 0).mode("errorifexists").parquet(staging)

    def _arrow(self, b: Bin) -> tuple[AddFile, ...] | None:
        """One Spark task streams the bin through Arrow into its final place; None means use Spark instead."""
        from .rewrite import rewrite_bin_task

        codec = self.engine.parquet_codec
        if codec not in ARROW_CODECS:
            return None
        suffix = "" if codec in ("none", "uncompressed") else f".{codec}"
        dest, log_path = self._place(b, f"part-00000-{uuid.uuid4()}.c000{suffix}.parquet")
        spec: dict[str, Any] = {
            "inputs": [self.snapshot.file_path(f.path) for f in b.files],
            "output": dest,
            "fields": self.snapshot.data_fields,
            "compression": codec,
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
        counts = [f.num_records for f in b.files]
        total_rows = sum(c for c in counts if c is not None) if all(c is not None for c in counts) else None
        df = cluster(self.engine.spark, self._input_df(b), approx, spec, total_rows)
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
        with self.engine.job_group(group, description):
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
