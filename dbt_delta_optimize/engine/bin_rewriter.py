"""Rewrite bins into new files: Arrow tasks (one Spark job per batch), a Spark DataFrame write, or a clustered write.

Every new file goes into the folder its partition values give (``layout``) and is announced in the
run's journal before it is written (so a killed run's files can be cleaned up). Arrow tasks get a
typed ``BinTask`` and answer with the new file's size and stats; the Spark paths stage their
files, which are then moved into place and read for stats here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..delta.actions import AddFile, RemoveFile
from ..delta.column_mapping import mapping_mode, physical_column_path
from ..delta.debris import RunJournal
from ..delta.row_tracking import RowTracking
from ..delta.snapshot import Snapshot
from ..delta.stats_schema import session_string_prefix_length
from ..delta.storage import LocalStorage, join
from ..plan.planner import Bin, OptimizePlan
from ..tasks.arrow_schema import NeedsSparkRewrite, arrow_schema, with_hidden_fields
from ..tasks.messages import BinTask, CopyReport, InputFile, Rewritten, RowTrackingColumns, StatsSpec, StoreRef
from .input_files import bin_inputs
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
    copy: CopyReport | None = None  #: what the row-group copy did (Arrow bins with a large enough input)


@dataclass(frozen=True)
class _Placed:
    """A new file announced in the journal: where it is written, and its path in the log."""

    location: str
    log_path: str


@dataclass
class BinRewriter:
    """Rewrites the bins of one run (thread-safe: Spark-path bins run in parallel threads)."""

    engine: SparkEngine
    snapshot: Snapshot
    plan: OptimizePlan
    journal: RunJournal
    operation_timestamp: int
    uncommitted: dict[int, list[str]] = field(default_factory=dict)  #: id(bin) -> files written, not committed
    lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ placement
    def _place_all(self, placements: Sequence[tuple[Bin, str]]) -> list[_Placed]:
        """Announce new files (bin, file name) in the journal with one write, and make their folders."""
        snap = self.snapshot
        out: list[_Placed] = []
        folders: dict[str, str] = {}
        for b, name in placements:
            dest, log_path, rel_dir = new_file_location(
                snap.location, b.partition_values, snap.physical_partition_columns, name
            )
            folders.setdefault(rel_dir, join(snap.location, rel_dir) if rel_dir else snap.location)
            out.append(_Placed(dest, log_path))
        # Folders this run creates, for the clean-up of a killed run; an object store has none (no request).
        created = [rel for rel, folder in folders.items() if self._local and rel and not snap.storage.exists(folder)]
        with self.lock:
            self.journal.intend([p.log_path for p in out], created)
            for (b, _), p in zip(placements, out):
                self.uncommitted.setdefault(id(b), []).append(p.location)
        for folder in folders.values():
            snap.storage.makedirs(folder)
        return out

    def _place(self, b: Bin, name: str) -> tuple[str, str]:
        placed = self._place_all([(b, name)])[0]
        return placed.location, placed.log_path

    def _add_file(self, b: Bin, dest: str, log_path: str, tags: Mapping[str, str] | None = None) -> AddFile:
        """The AddFile of a file a Spark write produced: its size and stats read from storage."""
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
                string_prefix_length=self._stats_spec.string_prefix_length,
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

    # ------------------------------------------------------------------ what tasks get
    @property
    def _local(self) -> bool:
        return isinstance(self.snapshot.storage, LocalStorage)

    @cached_property
    def store(self) -> StoreRef:
        """The table root and the options code in Spark tasks needs to open it."""
        storage = self.snapshot.storage
        if self._local:
            return StoreRef(self.snapshot.location, {})
        from ..delta.object_store import task_options

        return StoreRef(self.snapshot.location, task_options(self.snapshot.location, storage.options))

    @property
    def _store(self) -> dict[str, Any] | None:
        """The store as the Spark-path readers and writers take it; None for a local table."""
        if self._local:
            return None
        return {"base": self.store.root, "options": dict(self.store.options)}

    @cached_property
    def _row_tracking(self) -> RowTracking:
        snap = self.snapshot
        return RowTracking.of(snap.protocol, snap.metadata, table=snap.location)

    @cached_property
    def row_tracking_columns(self) -> RowTrackingColumns | None:
        """The hidden columns rewrites fill, when the table keeps row ids (materializes them)."""
        rt = self._row_tracking
        if not rt.materializes:
            return None
        row_id, commit_version = rt.columns
        return RowTrackingColumns(row_id, commit_version)

    @cached_property
    def _stats_spec(self) -> StatsSpec:
        snap = self.snapshot
        return StatsSpec(
            schema=snap.schema,
            partition_columns=tuple(snap.partition_columns),
            configuration=dict(snap.configuration),
            protocol=snap.protocol.to_json(),
            time_zone=self.engine.time_zone,
            string_prefix_length=session_string_prefix_length(snap.configuration, self.engine.conf),
        )

    @property
    def _by_id(self) -> bool:
        """Column mapping's id mode: Parquet columns are matched by field id, not by name."""
        return mapping_mode(self.snapshot.configuration) == "id"

    @cached_property
    def _arrow_reason(self) -> str | None:
        """Why no bin of this run can take the Arrow task path (None: they can)."""
        codec = self.engine.parquet_codec
        if codec not in ARROW_CODECS:
            return f"the Parquet codec {codec} is not one Arrow writes"
        try:
            arrow_schema(with_hidden_fields(self.snapshot.physical_data_fields, self.row_tracking_columns))
        except NeedsSparkRewrite as exc:
            return str(exc)
        return None

    def takes_arrow(self, b: Bin) -> bool:
        """Whether a bin is rewritten by an Arrow task (else by a Spark DataFrame job)."""
        if self.plan.clustering is not None or self.plan.config.rewrite_engine != "arrow":
            return False
        return self._arrow_reason is None

    def _copy_min_bytes(self, inputs: Sequence[InputFile]) -> int:
        """The threshold for a bin, or 0 when no input is that large (its task then reads no footer twice)."""
        threshold = self.plan.config.row_group_copy_min_bytes
        return threshold if threshold > 0 and any(f.size >= threshold for f in inputs) else 0

    def tasks(self, bins: Sequence[Bin], deadline: float | None) -> list[BinTask]:
        """One task message per bin (``bin_id`` = index), their outputs announced in one journal write.

        ``deadline``: epoch seconds after which a task does not start its bin (the time budget).
        """
        keep_ids = self.row_tracking_columns is not None
        inputs = [bin_inputs(self.snapshot, b.files, keep_ids=keep_ids) for b in bins]  # refuses before writing
        codec = self.engine.parquet_codec
        suffix = "" if codec in ("none", "uncompressed") else f".{codec}"
        placed = self._place_all([(b, f"part-00000-{uuid.uuid4()}.c000{suffix}.parquet") for b in bins])
        fields = tuple(self.snapshot.physical_data_fields)
        return [
            BinTask(
                bin_id=i,
                store=self.store,
                inputs=files,
                output=p.location,
                fields=fields,
                compression=codec,
                by_id=self._by_id,
                row_tracking=self.row_tracking_columns,
                stats=self._stats_spec,
                deadline=deadline,
                copy_min_bytes=self._copy_min_bytes(files),
                merge_pages=self.plan.config.row_group_copy_min_bytes > 0,
            )
            for i, (files, p) in enumerate(zip(inputs, placed))
        ]

    def result(self, b: Bin, task: BinTask, outcome: Rewritten) -> BinResult:
        """The actions of a bin an Arrow task rewrote (nothing is read back: the task sent size and stats)."""
        log.info(
            "bin %s rewritten in %.2fs by %s on %s (pid %s), package from %s",
            task.bin_id,
            outcome.seconds,
            outcome.worker.python,
            outcome.worker.host,
            outcome.worker.pid,
            outcome.worker.package,
        )
        _, log_path, _ = new_file_location(
            self.snapshot.location,
            b.partition_values,
            self.snapshot.physical_partition_columns,
            task.output.rsplit("/", 1)[-1],
        )
        add = AddFile(
            path=log_path,
            partition_values=dict(b.partition_values),
            size=outcome.size,
            modification_time=outcome.modification_time,
            data_change=False,
            stats=outcome.stats,
        )
        return self._result(b, (add,), outcome.copy)

    def _result(self, b: Bin, adds: tuple[AddFile, ...], copy: CopyReport | None = None) -> BinResult:
        removes = tuple(f.remove(self.operation_timestamp, data_change=False) for f in b.files)
        for f, r in zip(b.files, removes):  # the commit's per-file work, done while the other bins run
            _ = r.reads_back, f.num_records  # its line in the commit, read back as the landed check will; its rows
        return BinResult(b, adds, removes, copy)

    # ------------------------------------------------------------------ the Spark paths
    def _row_tracking_spec(self, b: Bin) -> dict[str, Any] | None:
        """Column names and each input's baseRowId/defaultRowCommitVersion, when row ids must be kept."""
        from .row_tracking_columns import row_tracking_spec

        return row_tracking_spec(self._row_tracking, b.files, self.snapshot.location)

    def _input_df(self, b: Bin) -> DataFrame:
        """The bin's live rows (deletion vectors applied by the Arrow reader on a store, else by Spark),
        with the hidden row-id columns filled when the table tracks rows."""
        from .live_rows import read_live

        row_tracking = self._row_tracking_spec(b)
        fields = self.snapshot.physical_data_fields
        if self._store is not None:
            from .store_io import read_store_files

            items = bin_inputs(self.snapshot, b.files, keep_ids=self.row_tracking_columns is not None)
            return read_store_files(
                self.engine, items, fields, self.store, self.row_tracking_columns, by_id=self._by_id
            )
        if any(f.deletion_vector is not None for f in b.files):
            return read_live(self.engine, self.snapshot, b.files, row_tracking)
        paths = [self.snapshot.file_path(f.path) for f in b.files]
        if row_tracking is not None:
            from .row_tracking_columns import read_with_row_tracking

            return read_with_row_tracking(self.engine, paths, fields, row_tracking)
        return self.engine.read_parquet(paths, fields)

    @property
    def _written_fields(self) -> list[dict[str, Any]]:
        """The Parquet schema of new files: physical data fields, then the materialized row-tracking columns."""
        return [dict(f) for f in with_hidden_fields(self.snapshot.physical_data_fields, self.row_tracking_columns)]

    def _write(self, df: DataFrame, staging: str) -> None:
        """Each partition of ``df`` into one file under ``staging``: Spark's writer, or Arrow in tasks on a store."""
        if self._store is not None:
            from .store_io import write_store_files

            write_store_files(df, staging, self.store, self.engine.parquet_codec, self._written_fields)
            return
        from ..delta.physical_layout import spark_write_options

        layout = spark_write_options(self.snapshot.data_fields, self.snapshot.configuration)  # variant unshredded
        writer = df.write.option("maxRecordsPerFile", 0).options(**layout)
        writer.mode("error").parquet(staging)  # "error": Connect knows no alias

    def _clustered(self, b: Bin, staging: str) -> tuple[AddFile, ...]:
        """Z-order/Hilbert: range-partition the partition along the curve into max(1, bytes/maxFileSize) files."""
        from .clustering import cluster
        from .live_rows import live_row_count

        spec = self.plan.clustering
        assert spec is not None
        approx = max(1, b.size // self.plan.config.max_file_size)
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

    def rewrite_with_spark(self, b: Bin, group: str) -> BinResult:
        """Rewrite one bin with a Spark job; if it fails (or is cancelled), its files are deleted before raising."""
        try:
            return self._rewrite_with_spark(b, group)
        except BaseException:
            self.discard([b])
            raise

    def _rewrite_with_spark(self, b: Bin, group: str) -> BinResult:
        started = time.perf_counter()
        self.engine.prepare_python_tasks()  # its reads and writes are Python tasks too (once per session)
        staging = join(self.journal.folder, uuid.uuid4().hex)
        description = f"{self.snapshot.location}<br/>Optimizing {b.describe()}"
        # Column mapping's id mode: Spark reads Parquet columns by field id, as delta-spark does.
        confs = {"spark.sql.parquet.fieldId.read.enabled": "true"} if self._by_id else {}
        with self.engine.job_group(group, description), self.engine.scoped_defaults(confs):
            adds = self._clustered(b, staging) if self.plan.clustering is not None else self._spark(b, staging)
        log.info("bin %s rewritten by Spark in %.2fs", b.describe(), time.perf_counter() - started)
        return self._result(b, adds)

    # ------------------------------------------------------------------ cleaning up
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
