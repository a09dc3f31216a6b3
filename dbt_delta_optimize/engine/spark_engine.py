"""The Spark engine object: one per call, handed to everything that runs Spark work.

It wraps a SparkSession and owns what used to be module-level state: the reference counts of
runtime confs set for the duration of a call (``scoped_defaults``). Bins are rewritten in
parallel threads on one session, so the first thread in sets a default the user has not set and
the last one out unsets it; a value the user set is never touched. Two calls on one session
each have their own engine: the second sees the first's value as set and leaves it alone, so an
overlap can only cost speed (a default unset early), never change results.

Classic sessions and Spark Connect sessions (``sc://``) are both served: jobs are grouped by a job
group (classic) or an operation tag (Connect), and py4j is only used where it is there. Before the
first Python task the package is shipped to the executors (``python_tasks``); ``task_runner`` runs
a batch of bin tasks as one job.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .python_tasks import SHIP_KEY, is_connect, needs_package, ship_package

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

__all__ = ["HUGE_METHOD_KEY", "LISTING_THRESHOLD_KEY", "SETTLE_SECONDS", "SparkEngine", "spark_error_summary"]

#: The JVM does not JIT-compile methods over 8000 bytes of bytecode; Spark's default limit for a
#: whole-stage-codegen method is 65535, so a large generated stage runs in the bytecode interpreter.
HUGE_METHOD_KEY = "spark.sql.codegen.hugeMethodLimit"
#: Above this many input paths Spark lists files with a distributed job (32 by default).
LISTING_THRESHOLD_KEY = "spark.sql.sources.parallelPartitionDiscovery.threshold"
#: Longest wait for a cancelled job's tasks to end: Spark kills a Python task's worker within about 4 s.
SETTLE_SECONDS = 30.0
_SETTLE_POLL_SECONDS = 0.02


class SparkEngine:
    """A Spark session plus the per-call state of the work we run on it.

    ``SparkEngine.deferred`` stands for the embedded session before it is started: bins that run in
    the driver's threads need no JVM, so it starts only when something needs Spark itself (a Spark
    rewrite, a clustered write, bins as Spark tasks). Until then it answers with what that session
    would say: the default conf, the local time zone, a local master with this machine's cores.
    """

    def __init__(
        self,
        spark: SparkSession | None,
        *,
        start: Callable[[], SparkSession] | None = None,
        time_zone: str | None = None,
        parallelism: int | None = None,
    ) -> None:
        if spark is None and start is None:
            raise ValueError("a SparkEngine needs a session, or a way to start one")
        self._spark = spark
        self._start = start
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()
        self._scoped: dict[str, tuple[int, bool]] = {}  # key -> (users, we set it)
        self.connect = spark is not None and is_connect(spark)  #: a Spark Connect session: no SparkContext, no py4j
        self._parallelism = parallelism
        self._time_zone = time_zone
        self._package_ready = False
        #: why the cluster's Python workers cannot run bin tasks (a missing module), once a job found out
        self.python_workers_problem: str | None = None

    @classmethod
    def deferred(cls, start: Callable[[], SparkSession], *, time_zone: str, parallelism: int) -> SparkEngine:
        """The embedded local session, started by ``start`` on first use; ``time_zone`` and ``parallelism``
        are what it will have (kept for the whole call, so every bin of a run sees the same values)."""
        return cls(None, start=start, time_zone=time_zone, parallelism=parallelism)

    @property
    def spark(self) -> SparkSession:
        """The session; a deferred engine starts it here, once (from whichever thread needs it first)."""
        if self._spark is None:
            with self._start_lock:
                if self._spark is None:
                    assert self._start is not None
                    log.info("starting the embedded Spark session (a bin needs Spark)")
                    self._spark = self._start()
        return self._spark

    def start(self) -> None:
        """Start a deferred session now (on the caller's thread, before bins need it); no-op otherwise."""
        self.spark  # noqa: B018 - the property starts it

    @property
    def started(self) -> bool:
        """Whether there is a session yet (always, unless the engine is deferred and nothing needed Spark)."""
        return self._spark is not None

    # ------------------------------------------------------------------ settings
    def conf(self, key: str) -> str | None:
        if self._spark is None:  # the embedded session, not started: nothing is set
            return None
        value = self._spark.conf.get(key, None)
        return value if value not in (None, "") else None

    @property
    def conf_getter(self) -> Callable[[str], str | None]:
        return self.conf

    @property
    def time_zone(self) -> str:
        if self._time_zone is not None:
            return self._time_zone
        return self.conf("spark.sql.session.timeZone") or "UTC"

    @property
    def parquet_codec(self) -> str:
        return (self.conf("spark.sql.parquet.compression.codec") or "snappy").lower()

    def runs_tasks_in_driver(self, task_runner: str) -> bool:
        """Whether bin tasks run in the driver's threads: ``task_runner`` auto (a classic session with a local
        master, whose executors are this machine's cores), ``driver`` or ``spark``."""
        if task_runner != "auto":
            return task_runner == "driver"
        if self._spark is None:  # the deferred embedded session has a local master
            return True
        return not self.connect and str(self._spark.sparkContext.master).startswith("local")

    @property
    def driver_threads(self) -> int:
        """Bins rewritten at once in the driver: the local master's cores."""
        return max(1, self.default_parallelism)

    @property
    def default_parallelism(self) -> int:
        """The cluster's default parallelism (Connect: the conf, else the partitions of a default range)."""
        if self._parallelism is None:
            if not self.connect:
                self._parallelism = int(self.spark.sparkContext.defaultParallelism)
            else:
                conf = self.conf("spark.default.parallelism")
                self._parallelism = int(conf) if conf else self._range_partitions()
        return self._parallelism

    def _range_partitions(self) -> int:
        """A range without a partition count gets the cluster's default parallelism: read from its physical
        plan (``Range (..., splits=N)``, one analyze call), or counted with a JVM-only job if the plan hides it.

        The job costs a shuffle on every Connect run, where nothing cheaper says how many cores there are.
        """
        from pyspark.sql import functions as F

        frame = self.spark.range(0, 1 << 16)
        explain = getattr(frame, "_explain_string", None)
        try:
            found = re.search(r"\bsplits=(\d+)", explain(mode="simple")) if explain is not None else None
        except Exception:  # an older client or server: count instead
            found = None
        if found is not None:
            return max(1, int(found.group(1)))
        return max(1, frame.select(F.spark_partition_id().alias("p")).distinct().count())

    #: Defaults no real setting has: Connect type-checks a default against the key (an int for int keys).
    _UNSET = ("\u0000unset", "-1234567891")

    def _explicitly_set(self, key: str) -> bool:
        if self.connect:  # a key nobody set reads as the default given here
            for marker in self._UNSET:
                try:
                    return bool(self.spark.conf.get(key, marker) != marker)
                except Exception:  # the marker is not of the key's type: try the next
                    continue
            return True
        try:
            session: Any = self.spark  # py4j handle: classic sessions only
            return bool(session._jsparkSession.sessionState().conf().contains(key))
        except Exception:  # no JVM handle: treat as set, so we never override it
            return True

    @contextmanager
    def scoped_defaults(self, confs: Mapping[str, str]) -> Iterator[None]:
        """Set runtime confs the user has not set, while inside; restore them when the last user leaves."""
        with self._lock:
            for key, value in confs.items():
                count, ours = self._scoped.get(key, (0, False))
                if count == 0:
                    ours = not self._explicitly_set(key)
                    if ours:
                        self.spark.conf.set(key, value)
                self._scoped[key] = (count + 1, ours)
        try:
            yield
        finally:
            with self._lock:
                for key in confs:
                    count, ours = self._scoped.pop(key)
                    if count > 1:
                        self._scoped[key] = (count - 1, ours)
                    elif ours:
                        self.spark.conf.unset(key)

    def jit_sized_codegen(self) -> Any:
        """Let Spark fall back to per-operator code for stages too big for the JIT, while inside.

        The curve expressions (range-id search, Hilbert levels) generate a stage just above the JVM's
        8000-byte JIT limit: interpreted, clustering ran 3-7x slower (measured at 2M rows).
        """
        return self.scoped_defaults({HUGE_METHOD_KEY: "8000"})

    # ------------------------------------------------------------------ jobs
    @contextmanager
    def job_group(self, group: str, description: str) -> Iterator[None]:
        """This thread's Spark work belongs to ``group`` while inside (a job group, or a Connect tag)."""
        if self.connect:
            self.spark.addTag(group)
            try:
                yield
            finally:
                self.spark.removeTag(group)
            return
        sc = self.spark.sparkContext
        sc.setJobGroup(group, description, interruptOnCancel=True)
        try:
            yield
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]

    def cancel(self, group: str) -> None:
        """Cancel the group's jobs (Connect: interrupt the operations tagged ``group``). On a classic session the
        jobs the group would start later are refused too (Spark 4's ``cancelJobGroupAndFutureJobs``): a thread
        between two jobs of a Spark rewrite does not start its next one. Spark kills the tasks afterwards, while
        the caller goes on: ``settle`` waits for them."""
        if self._spark is None:  # nothing ran on Spark: no job to cancel
            return
        if self.connect:
            self.spark.interruptTag(group)
            return
        sc: Any = self.spark.sparkContext  # py4j handle: classic sessions only
        try:
            sc._jsc.sc().cancelJobGroupAndFutureJobs(group)
        except Exception:  # Spark before 4.0: the active jobs only
            log.debug("cancelJobGroupAndFutureJobs is not there; cancelling the active jobs of %s", group)
            self.spark.sparkContext.cancelJobGroup(group)

    def settle(self, group: str, timeout: float = SETTLE_SECONDS) -> bool:
        """Wait until the group's jobs have ended and none of their tasks runs any more; True when so.

        A cancelled job (or one Spark failed) ends at once for its caller, while Spark is still killing its
        other tasks: they end, and Spark logs their end, afterwards. Whoever reports the outcome (the CLI's
        last line) or deletes the files those tasks write waits here first. Read from the status tracker
        (jobs of the group not yet known to it are not waited for); at ``timeout`` a warning, then False.
        On Spark Connect the client cannot see the server's tasks (nor their logs): True at once.
        """
        if self.connect or self._spark is None:
            return True
        until = time.monotonic() + timeout
        while True:
            try:
                busy = self._busy(group)
            except Exception:  # no status tracking (a stopped context): nothing to wait for
                log.debug("cannot read the status of job group %s", group, exc_info=True)
                return True
            if not busy:
                return True
            if time.monotonic() >= until:
                log.warning(
                    "%s of the cancelled job group %s still running after %.0fs; going on", busy, group, timeout
                )
                return False
            time.sleep(_SETTLE_POLL_SECONDS)

    def _busy(self, group: str) -> str:
        """What of the group still runs ('' when nothing): a job Spark has not ended, or tasks of an ended one."""
        tracker = self.spark.sparkContext.statusTracker()
        jobs = tasks = 0
        for job_id in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job_id)
            if info is None or info.status == "SUCCEEDED":  # a job succeeds once every task has
                continue
            if info.status != "FAILED":
                jobs += 1
                continue
            for stage_id in info.stageIds:
                stage = tracker.getStageInfo(stage_id)
                tasks += stage.numActiveTasks if stage else 0
        return f"{jobs} job(s)" if jobs else f"{tasks} task(s)" if tasks else ""

    def scheduled_tasks(self, group: str) -> int:
        """Tasks the group's jobs scheduled (best effort: 0 when status tracking is unavailable, as on Connect)."""
        if self.connect or self._spark is None:
            return 0
        try:
            tracker = self.spark.sparkContext.statusTracker()
            total = 0
            for job_id in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job_id)
                for stage_id in info.stageIds if info else ():
                    stage = tracker.getStageInfo(stage_id)
                    total += stage.numTasks if stage else 0
            return total
        except Exception:
            return 0

    def prepare_python_tasks(self) -> None:
        """Ship this package to the executors once, when they may not have it (``python_tasks``)."""
        with self._lock:
            if self._package_ready:
                return
            if needs_package(self.spark, self.conf(SHIP_KEY)):
                path = ship_package(self.spark)
                log.info("shipped %s to the executors", path)
            self._package_ready = True

    def read_parquet(self, paths: list[str], fields: list[dict[str, Any]]) -> DataFrame:
        """The files as one DataFrame with the table's data schema (missing columns read as null)."""
        from pyspark.sql.types import StructType

        schema = StructType.fromJson({"type": "struct", "fields": fields})
        # Local files: stat them on the driver; Spark's default lists >32 paths with a job (~0.5 s).
        local = all(p.startswith(("/", "file:")) for p in paths)
        with self.scoped_defaults({LISTING_THRESHOLD_KEY: str(max(32, len(paths) + 1))} if local else {}):
            df = self.spark.read.schema(schema).parquet(*paths)
        return df.select(*[f"`{f['name']}`" for f in fields])


def spark_error_summary(exc: BaseException) -> str:
    """One line for a failed Spark job: the JVM exception's own message rather than py4j's call site."""
    java = getattr(exc, "java_exception", None)
    text = ""
    if java is not None:
        try:
            text = f"{java.getClass().getSimpleName()}: {java.getMessage() or ''}"
        except Exception:  # the JVM is gone: fall back to the Python text
            text = ""
    text = (text or str(exc) or type(exc).__name__).strip()
    first = _python_error(text) or next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first or type(exc).__name__
    return first if len(first) <= 300 else first[:297] + "..."


def _python_error(text: str) -> str | None:
    """The exception line that ends a Python worker's traceback ("ModuleNotFoundError: No module named ..."),
    which PySpark puts after a first line that only says to see the stack trace below."""
    if "Traceback (most recent call last)" not in text:
        return None
    tail = text[text.rindex("Traceback (most recent call last)") :].splitlines()[1:]
    ends = [line.strip() for line in tail if line.strip() and not line[:1].isspace() and ": " in line]
    if not ends:
        return None
    return "Python worker: " + ends[-1].split(" SQLSTATE:")[0].strip()
