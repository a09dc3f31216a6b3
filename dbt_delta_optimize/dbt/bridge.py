"""The dbt bridge: a dbt plugin that adds ``modules.delta_optimize`` to dbt's Jinja context.

dbt imports every top-level ``dbt_*`` module on each invocation and instantiates the classes in
its ``plugins`` list; ``initialize()`` then wraps ``dbt.context.base.get_context_modules`` (looked
up at call time by the ``modules`` context property) to add one namespace: the methods of one
``Bridge`` per process. They take and return plain data (dbt's Jinja is sandboxed) and find
dbt's own SparkSession with ``SparkSession.builder.getOrCreate()`` (method ``session``), a Spark
Connect session for the server methods when one is configured, or else dbt's own SQL connection
(thrift, http, odbc: ``sql_hooks``); ``connection.SparkTarget`` decides which.

The pre-hook hands the table version to the post-hook through a file under dbt's target path,
keyed by the invocation id (``target_files``), not through process state; the bridge object holds
the lock that serialises writes to those files across dbt's threads, and, for a table on an object
store, the snapshot its pre-hook loaded (``ops.table.PinnedSnapshots``): the post-hook in the same
process moves it on (one listing from the pinned version, the new commits) instead of loading it again.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from dbt.plugins.manager import dbtPlugin

from ..ops.effective import Kind as SettingsKind
from ..ops.table import PinnedSnapshots, pin_version
from . import spark_hooks, sql_hooks, target_files
from .connection import SparkTarget
from .hook import decide, table_skip
from .maintain_bridge import run_maintain
from .outcome import Outcome, Report
from .settings import OperationArgs, parse_operation_args, parse_settings
from .spark_hooks import Spark, files_after, open_delta, optimized
from .sql_engine import SqlConnection

if TYPE_CHECKING:
    from ..ops.table import Table
    from ..plan.planner import OptimizePlan

__all__ = ["NAMESPACE", "RESULTS_FILE", "Bridge", "DeltaOptimizePlugin", "functions", "install"]

log = logging.getLogger(__name__)

NAMESPACE = "delta_optimize"


@dataclass(frozen=True)
class _Request:
    """One ``run-operation`` call on one table, its arguments as dbt passed them (checked later)."""

    mode: str
    table: str
    raw_args: tuple[Any, Any, Any, Any]  #: where, zorder_by, dry_run, storage_options
    model: str | None
    file_format: str | None
    #: the body of this operation through dbt's SQL connection (no Spark session)
    sql_body: Callable[[SqlConnection, dict[str, Any], str, str | None, OperationArgs], None]
    settings: Any = None  #: run-operation's ``settings`` argument (OPTIMIZE settings)
    meta: Any = None  #: the selected model's ``meta.delta_optimize``
    #: which operation's settings the record names (``ops.effective``); None: it takes no OPTIMIZE settings
    settings_kind: SettingsKind | None = "optimize"


class _Summarized(TypingProtocol):
    """What a dry run records: an OptimizePlan, or analyze's metrics."""

    def summary(self) -> dict[str, Any]: ...


RESULTS_FILE = target_files.RESULTS_FILE


def _plan(spark: Spark, handle: Table, args: OperationArgs) -> OptimizePlan:
    from ..ops.optimize import plan_optimize

    return plan_optimize(spark(), handle, where=list(args.where), zorder_by=list(args.zorder_by), options=args.options)


# ----------------------------------------------------------------------------- records
def _operation_settings(kind: SettingsKind, spark: Spark, args: OperationArgs) -> dict[str, dict[str, Any]]:
    """The settings a run-operation runs with, and where each came from (args, meta, conf, default)."""
    from ..ops.effective import effective_settings
    from ..ops.pipeline import Session
    from ..options import effective_dict

    return effective_dict(effective_settings(kind, Session(spark()).conf(), args.options, given=args.given))


def _plan_or_run(
    spark: Spark,
    handle: Table,
    args: OperationArgs,
    record: dict[str, Any],
    plan: Callable[[Spark, Table, OperationArgs], _Summarized],
    run: Callable[[Spark, Table, OperationArgs, dict[str, Any]], bool],
) -> None:
    if args.dry_run:
        record.update(decision="plan", status="planned", plan=plan(spark, handle, args).summary())
        files_after(record, handle, False)
    else:
        files_after(record, handle, run(spark, handle, args, record))


def _failed(record: dict[str, Any], exc: Exception) -> None:
    record.update(status="failed", decision=record.get("decision", "failed"), error=f"{type(exc).__name__}: {exc}")


class Bridge:
    """The functions dbt's macros call, as ``modules.delta_optimize``; one per dbt process.

    Each call takes the invocation's ``invocation_id`` and ``target_path`` (the macros pass
    ``invocation_id`` and ``flags.TARGET_PATH``); without them, dbt's own are looked up.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._told: set[str] = set()  #: invocations already told why the hooks skip (one line per run)
        #: the snapshots the pre-hooks loaded (object stores), for their post-hooks in this process
        self._pinned = PinnedSnapshots()

    def _target(self, spark_target: Any, record: dict[str, Any], invocation: str) -> SparkTarget | None:
        """What this call runs on (``record`` notes the engine), or None after marking ``record`` skipped.

        None means a server method without a Spark Connect address or a dbt connection (a caller
        outside the macros): the reason is logged once per invocation; later records are ``quiet``.
        """
        target = SparkTarget.parse(spark_target)
        if target.usable:
            record.update(engine=target.engine, method=target.method)
            return target
        with self._lock:
            quiet = invocation in self._told
            self._told.add(invocation)
        record.update(decision="skipped", status="skipped", reason=target.skip_reason(), quiet=quiet)
        return None

    def files(self, invocation_id: str | None = None, target_path: str | None = None) -> target_files.InvocationFiles:
        """The results and pre-hook files of an invocation (this process's lock guards them)."""
        return target_files.InvocationFiles(
            target_files.target_path(target_path), target_files.invocation_id(invocation_id), self._lock
        )

    def record_version(
        self,
        table: str,
        *,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> str:
        """Pre-hook: save the table's version before the model writes (auto compaction looks after it).

        A table that does not exist yet is saved as -1 ("before version 0": every commit of the run is its
        trigger, the table-creating one included). When the version cannot be read nothing is saved: the
        post-hook then finds the run's commits from the run's start (``plan.run_commits``). On an object
        store the table's snapshot is loaded and kept for the post-hook (``ops.table.pin_version``).
        """
        try:
            target = SparkTarget.parse(spark_target)
            options = parse_operation_args(None, None, False, storage_options).storage_options
            if target.engine == "sql":
                version = sql_hooks.table_version(target.sql_connection(), table, options)
            elif target.usable:
                version = pin_version(table, self._pinned, spark=target.session(), storage_options=options)
            else:
                return ""
        except Exception as exc:  # the model must not fail because the pre-hook could not look
            log.debug("pre-hook of %s could not read the table version: %s", table, exc)
            return ""
        try:
            self.files(invocation_id, target_path).save_version(table, version)
        except OSError as exc:
            log.warning("could not write %s: %s", target_files.VERSIONS_FILE, exc)
        return ""

    def run_model(
        self,
        table: str,
        settings: Any = None,
        *,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
        run_started_at: Any = None,
    ) -> dict[str, Any]:
        """Post-hook body: auto compaction (default) or a full OPTIMIZE of one model's table, per its settings.

        Auto compaction considers every commit the model's run made (all batches of a microbatch run, the
        table-creating one): those after the pre-hook's version, else those stamped since
        ``run_started_at`` (the macros pass dbt's), else the latest one (``plan.run_commits``).

        Never raises for a failed compaction: the result carries ``status`` ``failed`` and ``error``,
        and the macro decides (on_error) whether the model fails. The cost when nothing qualifies is
        kept to a catalog lookup and one load of the log (the hook runs after every model); after a pre-hook
        in this process, to one listing from its version and the new commits read at once.
        """
        t0 = time.perf_counter()
        files = self.files(invocation_id, target_path)
        record: dict[str, Any] = {"table": table, "model": model, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        try:
            files.check_writable()
            since = files.pop_version(table)
            s = parse_settings(settings)
            if s.storage_options is None and storage_options is not None:  # the project-wide var
                s = replace(s, storage_options=parse_operation_args(None, None, False, storage_options).storage_options)
            record.update(mode=s.mode, on_error=s.on_error)
            decision = decide(s)
            if decision.work == "skip":
                record.update(decision="skipped", status="skipped", reason=decision.reason)
            else:
                target = self._target(spark_target, record, files.invocation_id)
                if target is not None and target.engine == "sql":
                    conn = target.sql_connection()
                    sql_hooks.run_model(conn, record, table, file_format, s, since, decision, started=run_started_at)
                elif target is not None:
                    spark = functools.cache(target.session)
                    spark_hooks.run_model(
                        spark,
                        record,
                        table,
                        file_format,
                        s,
                        since,
                        decision,
                        started=run_started_at,
                        pinned=self._pinned,
                    )
        except Exception as exc:  # the model must not fail because compaction did (unless on_error: fail)
            _failed(record, exc)
        return self._finish(files, record, t0)

    def run_operation(
        self,
        table: str,
        *,
        where: Any = None,
        zorder_by: Any = None,
        dry_run: Any = False,
        settings: Any = None,
        meta: Any = None,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> dict[str, Any]:
        """``dbt run-operation optimize`` body for one table: a full OPTIMIZE (or its plan, with dry_run).

        ``settings`` (OPTIMIZE settings) win over the selected model's ``meta`` keys.
        """

        def run(spark: Spark, handle: Table, args: OperationArgs, record: dict[str, Any]) -> bool:
            from ..ops.optimize import optimize

            where, zorder_by = list(args.where), list(args.zorder_by)
            return optimized(record, optimize(spark(), handle, where=where, zorder_by=zorder_by, options=args.options))

        raw = (where, zorder_by, dry_run, storage_options)
        request = _Request("optimize", table, raw, model, file_format, sql_hooks.run_optimize, settings, meta)
        return self._table_operation(request, invocation_id, target_path, spark_target, _plan, run)

    def run_purge(
        self,
        table: str,
        *,
        where: Any = None,
        dry_run: Any = False,
        settings: Any = None,
        meta: Any = None,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> dict[str, Any]:
        """``dbt run-operation purge`` body for one table: REORG ... APPLY (PURGE) (or its plan, with dry_run)."""
        from ..ops.purge import purge

        def plan(spark: Spark, handle: Table, args: OperationArgs) -> OptimizePlan:
            return purge(spark(), handle, where=list(args.where), dry_run=True, options=args.options)

        def run(spark: Spark, handle: Table, args: OperationArgs, record: dict[str, Any]) -> bool:
            wrote = optimized(record, purge(spark(), handle, where=list(args.where), options=args.options))
            record.update(decision="purge", status="purged" if wrote else "nothingToDo")
            return wrote

        raw = (where, None, dry_run, storage_options)
        request = _Request("purge", table, raw, model, file_format, sql_hooks.run_purge, settings, meta, "purge")
        return self._table_operation(request, invocation_id, target_path, spark_target, plan, run)

    def run_analyze(
        self,
        table: str,
        *,
        columns: Any = None,
        all: Any = False,
        where: Any = None,
        dry_run: Any = False,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> dict[str, Any]:
        """``dbt run-operation analyze`` body for one table: per-file statistics as delta-spark writes them.

        Over dbt's SQL connection (thrift, http, odbc) it is not available: open-source Spark has no SQL
        for it; the record says so (logged once per invocation).
        """
        from ..errors import InvalidArgumentError
        from ..ops.analyze import AnalyzeMetrics, analyze

        if all not in (True, False):
            raise InvalidArgumentError(f"dbt_delta_optimize.analyze: all must be true or false, got {all!r}.")

        def metrics(spark: Spark, handle: Table, args: OperationArgs, dry: bool) -> AnalyzeMetrics:
            return analyze(spark(), handle, columns=columns, all=all is True, where=list(args.where), dry_run=dry)

        def plan(spark: Spark, handle: Table, args: OperationArgs) -> _Summarized:
            return metrics(spark, handle, args, True)

        def run(spark: Spark, handle: Table, args: OperationArgs, record: dict[str, Any]) -> bool:
            m = metrics(spark, handle, args, False)
            record.update(decision="analyze", status="analyzed" if m.versions else "nothingToDo", analyze=m.to_dict())
            if m.failed:
                record["error"] = f"{len(m.failed)} file(s) failed: {m.failed[0].path}: {m.failed[0].error}"
            return bool(m.versions)

        def over_sql(
            conn: SqlConnection, record: dict[str, Any], table: str, file_format: str | None, args: OperationArgs
        ) -> None:
            with self._lock:
                quiet = f"analyze:{invocation_id}" in self._told
                self._told.add(f"analyze:{invocation_id}")
            reason = (
                "analyze is not available over dbt's SQL connection (thrift, http, odbc): open-source Spark has no "
                "SQL command that computes Delta statistics. Run `dbt-delta-optimize analyze TABLE`, or use the "
                "session or Spark Connect method."
            )
            record.update(decision="skipped", status="skipped", reason=reason, quiet=quiet)

        raw = (where, None, dry_run, storage_options)
        request = _Request("analyze", table, raw, model, file_format, over_sql, settings_kind=None)
        return self._table_operation(request, invocation_id, target_path, spark_target, plan, run)

    def run_vacuum(
        self,
        table: str,
        *,
        retain: Any = None,
        mode: Any = "full",
        dry_run: Any = False,
        allow_short_retention: Any = False,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> dict[str, Any]:
        """``dbt run-operation vacuum`` body for one table: our VACUUM (a dry run lists the files), or over
        dbt's SQL connection the server's ``VACUUM ... RETAIN n HOURS [DRY RUN]``."""
        from ..ops.vacuum import VacuumMetrics, vacuum
        from .sql_vacuum import vacuum_args, vacuum_over_sql

        checked = vacuum_args(retain, mode, allow_short_retention)

        def metrics(spark: Spark, handle: Table, dry: bool) -> VacuumMetrics:
            return vacuum(
                spark(),
                handle,
                retain=None if checked.retain_ms is None else checked.retain_ms / 3_600_000,
                mode=checked.mode,
                dry_run=dry,
                allow_short_retention=checked.allow_short_retention,
            )

        def plan(spark: Spark, handle: Table, args: OperationArgs) -> _Summarized:
            return metrics(spark, handle, True)

        def run(spark: Spark, handle: Table, args: OperationArgs, record: dict[str, Any]) -> bool:
            m = metrics(spark, handle, False)
            record.update(decision="vacuum", status="vacuumed", vacuum=m.to_dict())
            return False  # the table's files are unchanged (only unreferenced ones were deleted)

        def over_sql(
            conn: SqlConnection, record: dict[str, Any], table: str, file_format: str | None, args: OperationArgs
        ) -> None:
            reason = table_skip(file_format)
            if reason is not None:
                record.update(decision="skipped", status="skipped", reason=reason)
                return
            vacuum_over_sql(conn, record, table, checked, dry_run=args.dry_run)

        raw = (None, None, dry_run, storage_options)
        request = _Request("vacuum", table, raw, model, file_format, over_sql, settings_kind=None)
        return self._table_operation(request, invocation_id, target_path, spark_target, plan, run)

    def _table_operation(
        self,
        request: _Request,
        invocation_id: str | None,
        target_path: str | None,
        spark_target: Any,
        plan: Callable[[Spark, Table, OperationArgs], _Summarized],
        run: Callable[[Spark, Table, OperationArgs, dict[str, Any]], bool],
    ) -> dict[str, Any]:
        """One ``run-operation`` on one table: arguments checked, table opened once, then ``plan`` or ``run``.

        A new operation (vacuum, analyze ...) is a ``_Request`` naming its SQL body, and a ``plan`` and a
        ``run`` that take the opened table; the record, the settings in force and the counts are made here.
        """
        t0 = time.perf_counter()
        files = self.files(invocation_id, target_path)
        dry_run = request.raw_args[2]
        record: dict[str, Any] = {"table": request.table, "model": request.model, "mode": request.mode}
        record["dry_run"] = dry_run is True
        try:
            files.check_writable()
            args = parse_operation_args(*request.raw_args, request.settings, request.meta)
            target = self._target(spark_target, record, files.invocation_id)
            if target is not None and target.engine == "sql":
                conn = target.sql_connection()
                request.sql_body(conn, record, request.table, request.file_format, args)
            elif target is not None and target.uses_session:
                spark = functools.cache(target.session)
                handle = open_delta(record, request.table, request.file_format, args.storage_options, spark)
                if handle is not None:
                    if request.settings_kind is not None:
                        record["settings"] = _operation_settings(request.settings_kind, spark, args)
                    _plan_or_run(spark, handle, args, record, plan, run)
        except Exception as exc:
            _failed(record, exc)
            record["decision"] = "failed"
        return self._finish(files, record, t0)

    @staticmethod
    def _finish(files: target_files.InvocationFiles, record: Report, t0: float) -> dict[str, Any]:
        """The call's frozen ``Outcome``, made once from what the executors reported; the file and line from it."""
        entry = Outcome.of(record, time.perf_counter() - t0).to_dict()
        try:
            files.append_result(entry)
        except OSError as exc:  # reporting must not break the run
            log.warning("could not write %s: %s", RESULTS_FILE, exc)
        out: dict[str, Any] = json.loads(json.dumps(entry, default=str))
        return out

    @staticmethod
    def describe_engine(spark_target: Any = None) -> dict[str, Any]:
        """What the hooks will run on (``run-operation delta_optimize_engine``): method, engine, one line."""
        target = SparkTarget.parse(spark_target)
        return {"method": target.method, "engine": target.engine, "line": f"delta_optimize: {target.describe()}"}

    def functions(self) -> dict[str, Any]:
        """The whitelisted namespace exposed as ``modules.delta_optimize``."""
        return {
            "describe_engine": self.describe_engine,
            "record_version": self.record_version,
            "run_model": self.run_model,
            "run_operation": self.run_operation,
            "run_purge": self.run_purge,
            "run_maintain": run_maintain,
            "run_analyze": self.run_analyze,
            "run_vacuum": self.run_vacuum,
        }


def functions() -> dict[str, Any]:
    """The namespace of a new Bridge (dbt uses the one ``install`` made)."""
    return Bridge().functions()


def install() -> None:
    """Wrap dbt's ``get_context_modules`` once (idempotent) so Jinja sees ``modules.delta_optimize``.

    The wrapper holds the process's one Bridge, so every node of every thread shares its lock.
    """
    import dbt.context.base as base

    current = base.get_context_modules
    if getattr(current, "_delta_optimize", None) is not None:
        return
    bridge = Bridge()

    def get_context_modules() -> dict[str, Any]:
        modules = current()
        modules[NAMESPACE] = bridge.functions()
        return modules

    get_context_modules._delta_optimize = bridge  # type: ignore[attr-defined]
    base.get_context_modules = get_context_modules


class DeltaOptimizePlugin(dbtPlugin):
    """Registers ``modules.delta_optimize`` for this package's macros."""

    def initialize(self) -> None:
        install()
