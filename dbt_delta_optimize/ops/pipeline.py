"""The one path every operation takes: table -> storage -> snapshot -> protocol gate -> plan -> Spark -> execute.

Spark comes last, and only when it is needed: to resolve a catalog name, or to run bins that need it
(a new embedded session is deferred: bins in the driver's threads need no JVM at all). So a table
we refuse (an unsupported protocol, a corrupt log, a bad predicate or setting) is refused before any
JVM starts, and a dry run passes the same gate and refuses with the same message. A plan is made
from the conf of a session that is already there (the caller's or the running one), else from the
defaults and the local time zone; when Spark is then started to run it, it is planned again from
that session's conf, so the run is exactly what that session would plan.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Protocol as TypingProtocol

from ..delta.protocol import ensure_write_supported
from ..delta.snapshot import Snapshot
from ..options import ConfGetter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..engine.executor import ProgressCallback
    from ..engine.spark_engine import SparkEngine
    from ..plan.metrics import OptimizeMetrics
    from ..plan.planner import OptimizePlan

__all__ = [
    "Planner",
    "Session",
    "Settings",
    "Source",
    "Target",
    "active_conf",
    "execute",
    "external_paths_gate",
    "local_time_zone",
    "nothing_to_do",
    "open_snapshot",
    "plan_only",
    "run",
]

log = logging.getLogger(__name__)

TIME_ZONE_KEY = "spark.sql.session.timeZone"


def _no_conf(_key: str) -> str | None:
    return None


def local_time_zone() -> str:
    """The zone a new embedded JVM takes as its default (``TZ``, then the system's), else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        return tz
    try:
        with open("/etc/timezone", encoding="utf-8") as fh:
            name = fh.read().strip()
        if name:
            return name
    except OSError:
        pass
    link = os.path.realpath("/etc/localtime")
    marker = "/zoneinfo/"
    return link.split(marker, 1)[1] if marker in link else "UTC"


@dataclass(frozen=True)
class Settings:
    """Where a plan's settings come from: a session's conf (``exact``), or the defaults without one."""

    get_conf: ConfGetter
    time_zone: str
    exact: bool


class Session:
    """The Spark session of one call: the caller's, the running one, or a new one, started only on demand."""

    def __init__(self, spark: SparkSession | None, *, start: Callable[[], SparkSession] | None = None) -> None:
        self._spark = spark
        self._engine: SparkEngine | None = None
        #: how to get a session when one is needed (a front end's own, e.g. dbt's), instead of a new embedded one
        self._start = start

    def running(self) -> SparkSession | None:
        """The caller's session or the one already running in this process; never starts one.

        With a Spark Connect address (``SPARK_REMOTE``) the session is the server's, as ``get_spark`` decides:
        not there until connected.
        """
        from ..engine.session import REMOTE_ENV

        if self._spark is not None:
            return self._spark
        if "pyspark" not in sys.modules or os.environ.get(REMOTE_ENV):
            return None
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is None and SparkContext._active_spark_context is not None:  # dbt's threads have none active
            active = SparkSession.builder.getOrCreate()
        if active is not None:
            self._spark = active
        return active

    def conf(self) -> ConfGetter:
        """The conf of the session there is (never starts one); without one, nothing is set."""
        spark = self.running()
        if spark is None:
            return _no_conf
        from ..engine.session import conf_getter

        getter: ConfGetter = conf_getter(spark)
        return getter

    def settings(self) -> Settings:
        """The settings to plan with, from the session there is, else the defaults and the local time zone."""
        get_conf = self.conf()
        if get_conf is _no_conf:
            return Settings(_no_conf, local_time_zone(), exact=False)
        return Settings(get_conf, get_conf(TIME_ZONE_KEY) or "UTC", exact=True)

    def embedded(self) -> bool:
        """Whether the session would be a new embedded one: none given, none running, no Spark Connect address."""
        from ..engine.session import REMOTE_ENV

        return not os.environ.get(REMOTE_ENV) and self._start is None and self.running() is None

    def spark(self) -> SparkSession:
        """The session, started (or connected) if there is none yet."""
        if self._spark is None and self._start is not None:
            self._spark = self._start()
        if self._spark is None:
            from ..engine.session import get_spark

            self._spark = get_spark(None)
        return self._spark

    def task_engine(self, task_runner: str) -> SparkEngine | None:
        """The engine when tasks run as Spark jobs (a running cluster session, or ``spark``); None when they run
        in the driver's threads (``driver``, a local master, or ``auto`` without a running session)."""
        if task_runner == "driver" or (task_runner == "auto" and self.running() is None):
            return None
        engine = self.engine()
        return None if engine.runs_tasks_in_driver(task_runner) else engine

    def engine(self) -> SparkEngine:
        """The engine of the call. A new embedded session is deferred: bins in the driver's threads need no
        JVM, so it starts only if a bin needs Spark, with the settings it was planned with."""
        if self._engine is None:
            from ..engine.session import embedded_conf_is_default, embedded_parallelism
            from ..engine.spark_engine import SparkEngine

            if self.embedded() and embedded_conf_is_default():
                self._engine = SparkEngine.deferred(
                    self.spark, time_zone=local_time_zone(), parallelism=embedded_parallelism()
                )
            else:
                self._engine = SparkEngine(self.spark())
        return self._engine


def active_conf() -> ConfGetter:
    """The running Spark session's conf, if there is one (never starts Spark)."""
    return Session(None).conf()


@dataclass(frozen=True)
class Target:
    """A table as the caller named it (a path or a catalog name) and the storage options that reach it."""

    table: str
    storage_options: Mapping[str, str] | None = None

    def location(self, session: Session) -> str:
        """A path as given; a catalog name resolved through Spark (the only reason to start it this early)."""
        from ..engine.session import is_path, resolve_table

        if is_path(self.table):
            return self.table
        if session.embedded():  # a new session only to look the name up: not when its catalog cannot hold it
            from ..engine.session import catalog_start_reason

            reason = catalog_start_reason(self.table)
            log.warning("resolving '%s' in the catalog: starting Spark (%s)", self.table, reason)
        return resolve_table(self.table, session.spark())

    def open(self, session: Session) -> Snapshot:
        """The table's latest snapshot (the pipeline's source protocol; an opened ``Table`` has its own)."""
        return open_snapshot(self.location(session), self.storage_options)


class Source(TypingProtocol):
    """What an operation runs on: a ``Target`` to open, or an opened ``ops.table.Table``."""

    def open(self, session: Session) -> Snapshot: ...


def open_snapshot(location: str, storage_options: Mapping[str, str] | None) -> Snapshot:
    """The table's latest snapshot, read through its storage with the caller's storage options."""
    from ..delta.snapshot import load_snapshot
    from ..delta.storage import storage_of

    return load_snapshot(location, storage=storage_of(location, storage_options))


def gate(snapshot: Snapshot) -> None:
    """Refuse a table whose protocol we cannot honour, before anything is planned, started or written."""
    ensure_write_supported(snapshot.protocol, snapshot.metadata, table=snapshot.location)


#: Makes a plan from a snapshot and the settings to use (pure: no Spark).
Planner = Callable[[Snapshot, Settings], "OptimizePlan"]


def _gated(source: Source, session: Session) -> Snapshot:
    snapshot = source.open(session)
    gate(snapshot)
    return snapshot


def external_paths_gate(snapshot: Snapshot, plan: OptimizePlan) -> OptimizePlan:
    """Refuse live files outside the table root unless the plan's settings allow them; before any data is read."""
    from ..delta.snapshot import check_external_paths

    check_external_paths(snapshot, allow=plan.config.allow_external_paths)
    return plan


def plan_only(spark: SparkSession | None, target: Source, planner: Planner) -> OptimizePlan:
    """The dry run: the plan a run would make, through the same gate; nothing is written, no JVM for a path."""
    session = Session(spark)
    snapshot = _gated(target, session)
    return external_paths_gate(snapshot, planner(snapshot, session.settings()))


def run(
    spark: SparkSession | None,
    target: Source,
    planner: Planner,
    *,
    progress: ProgressCallback | None = None,
    started: float | None = None,
) -> OptimizeMetrics:
    """Refuse or plan without Spark, then run the plan on Spark and commit it.

    A plan with nothing to do needs no Spark when the session would be a new embedded one: its conf is
    the defaults the plan was made with, so the result is the one that session would give.
    """
    session = Session(spark)
    snapshot = _gated(target, session)
    snapshot.storage.requests.mark("plan")
    settings = session.settings()
    plan = external_paths_gate(snapshot, planner(snapshot, settings))  # fails here, before Spark starts
    if plan.is_noop and not settings.exact and session.embedded():
        return nothing_to_do(snapshot, plan, start_ms=int(time.time() * 1000))
    engine = session.engine()
    if not settings.exact and engine.started:  # planned without the session that now runs it: plan with its conf
        plan = external_paths_gate(snapshot, planner(snapshot, session.settings()))
    return execute(engine, snapshot, plan, progress=progress, started=started)


def nothing_to_do(snapshot: Snapshot, plan: OptimizePlan, *, start_ms: int) -> OptimizeMetrics:
    """A run with no bins, without Spark: what dead runs left is cleaned up, as a run does first."""
    from ..delta.debris import clean_debris
    from ..engine.session import embedded_parallelism
    from ..plan.metrics import RunOutcome, run_metrics

    cleaned = clean_debris(snapshot.storage, snapshot.location)
    if cleaned.removed:
        log.info("removed what earlier killed runs left in %s: %s", snapshot.location, cleaned.to_dict())
    return run_metrics(plan, snapshot, RunOutcome(), parallelism=embedded_parallelism(), tasks=0, start_ms=start_ms)


def execute(
    engine: SparkEngine,
    snapshot: Snapshot,
    plan: OptimizePlan,
    *,
    progress: ProgressCallback | None = None,
    started: float | None = None,
) -> OptimizeMetrics:
    """Run a plan's bins on Spark and commit them with our writer (``engine.executor``)."""
    from ..engine.executor import OptimizeExecutor

    return OptimizeExecutor(engine, snapshot, plan, progress=progress, started=started).optimize()
