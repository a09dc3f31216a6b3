"""The dbt bridge: a dbt plugin that adds ``modules.delta_optimize`` to dbt's Jinja context.

dbt imports every top-level ``dbt_*`` module on each invocation and instantiates the classes in
its ``plugins`` list; ``initialize()`` then wraps ``dbt.context.base.get_context_modules`` (looked
up at call time by the ``modules`` context property) to add one namespace: the methods of one
``Bridge`` per process. They take and return plain data (dbt's Jinja is sandboxed) and find
dbt's own SparkSession with ``SparkSession.builder.getOrCreate()`` (method ``session``), a Spark
Connect session for the server methods when one is configured, or else dbt's own SQL connection
(thrift, http, odbc: ``sql_hooks``); ``connection.SparkTarget`` decides which.

The pre-hook hands the table version to the post-hook through a file under dbt's target path,
keyed by the invocation id (``target_files``), not through process state; the bridge object only
holds the lock that serialises writes to those files across dbt's threads.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as TypingProtocol

from dbt.plugins.manager import dbtPlugin

from . import sql_hooks, target_files
from .connection import SparkTarget
from .settings import ModelSettings, OperationArgs, parse_operation_args, parse_settings
from .sql_engine import SqlConnection

if TYPE_CHECKING:
    from ..plan.autocompact import AutoCompactResult
    from ..plan.metrics import OptimizeMetrics
    from ..plan.planner import OptimizePlan

__all__ = ["NAMESPACE", "RESULTS_FILE", "Bridge", "DeltaOptimizePlugin", "functions", "install"]

log = logging.getLogger(__name__)

NAMESPACE = "delta_optimize"
#: The Spark session of one call, started on first use (a skip never starts one).
Spark = Callable[[], Any]


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


class _Summarized(TypingProtocol):
    """What a dry run records: an OptimizePlan, or analyze's metrics."""

    def summary(self) -> dict[str, Any]: ...


RESULTS_FILE = target_files.RESULTS_FILE


def _files(location: str, options: Mapping[str, str] | None) -> tuple[int, int]:
    from ..delta.snapshot import file_counts
    from ..delta.storage import storage_for, table_uri

    return file_counts(location, storage=storage_for(table_uri(location), options))


def _table_location(table: str, spark: Spark) -> tuple[str | None, str | None]:
    """(location, None) for a Delta table; (None, note) for a missing or non-Delta one."""
    from ..engine.session import resolve_table
    from ..errors import NotADeltaTableError, TableNotFoundError

    try:
        location: str = resolve_table(table, spark())
        return location, None
    except (NotADeltaTableError, TableNotFoundError) as exc:
        return None, f"skipped: {exc}"


def _delta_location(
    record: dict[str, Any], table: str, file_format: str | None, options: Mapping[str, str] | None, spark: Spark
) -> str | None:
    """The table's location, or None after marking ``record`` skipped (non-Delta model, missing table)."""
    if file_format is not None and str(file_format).lower() != "delta":
        record.update(decision="skipped", status="skipped", reason=f"file_format is {file_format}, not delta")
        return None
    location, note = _table_location(table, spark)
    if location is None:
        record.update(decision="skipped", status="skipped", reason=note)
        return None
    record["location"] = location
    record["files_before"], record["bytes_before"] = _files(location, options)
    return location


def _ensure_clustered(
    spark: Spark,
    record: dict[str, Any],
    table: str,
    location: str,
    columns: tuple[str, ...],
    options: Mapping[str, str] | None,
) -> None:
    """ALTER TABLE ... CLUSTER BY the model's columns when the table is not clustered by them yet.

    dbt-spark creates tables without CLUSTER BY; delta-spark turns an unpartitioned table into a
    clustered one with ALTER TABLE CLUSTER BY (a metadata-only commit); OPTIMIZE then clusters it.
    """
    from ..ops.pipeline import open_snapshot
    from ..plan.liquid import clustering_columns, is_clustered_table

    snap = open_snapshot(location, options)
    current = clustering_columns(snap) if is_clustered_table(snap.protocol) else []
    if [c.lower() for c in current] != [c.lower() for c in columns]:
        cols = ", ".join(".".join(f"`{p}`" for p in c.split(".")) for c in columns)
        spark().sql(f"ALTER TABLE {table} CLUSTER BY ({cols})")
        record["clustered_by"] = list(columns)


# ----------------------------------------------------------------------------- the API, called in one place each
def _optimize(
    spark: Spark, location: str, where: tuple[str, ...], zorder_by: tuple[str, ...], s: ModelSettings
) -> OptimizeMetrics:
    from ..ops.optimize import optimize

    return optimize(
        spark(),
        location,
        where=list(where),
        zorder_by=list(zorder_by),
        curve=s.curve,
        options=s.options,
        storage_options=s.storage_options,
    )


def _plan(
    spark: Spark, location: str, where: tuple[str, ...], zorder_by: tuple[str, ...], options: Mapping[str, str] | None
) -> OptimizePlan:
    from ..ops.optimize import plan_optimize

    return plan_optimize(spark(), location, where=list(where), zorder_by=list(zorder_by), storage_options=options)


def _auto_compact(spark: Spark, location: str, since: int | None, s: ModelSettings) -> AutoCompactResult:
    from ..ops.auto_compact import auto_compact

    return auto_compact(
        spark(),
        location,
        since if since is not None and since >= 0 else None,
        enabled=True,
        min_file_size=s.options.min_file_size,
        max_file_size=s.options.max_file_size,
        min_num_files=s.min_num_files,
        storage_options=s.storage_options,
    )


# ----------------------------------------------------------------------------- records
def _optimized(record: dict[str, Any], m: OptimizeMetrics) -> bool:
    wrote = bool(m.committed_versions)
    record.update(decision="optimize", status="optimized" if wrote else "nothingToDo", metrics=m.to_dict())
    return wrote


def _auto_compacted(record: dict[str, Any], r: AutoCompactResult) -> bool:
    record.update(decision=r.status, status=r.status, reason=r.reason, auto_compact=r.to_dict())
    if r.error:
        record["error"] = r.error
    return r.ran or bool(r.error)  # a failed run may have committed some batches


def _files_after(record: dict[str, Any], location: str, wrote: bool, options: Mapping[str, str] | None) -> None:
    if wrote:
        record["files_after"], record["bytes_after"] = _files(location, options)
    else:  # nothing committed: the counts cannot have changed because of us
        record["files_after"], record["bytes_after"] = record["files_before"], record["bytes_before"]


def _line(record: dict[str, Any]) -> str:
    """The one line the macros log: table, decision, files and bytes before -> after, seconds."""
    fb, fa = record.get("files_before"), record.get("files_after")
    files = f"files {fb} -> {fa}" if fb is not None and fa is not None else "files -"
    bb, ba = record.get("bytes_before"), record.get("bytes_after")
    size = f", bytes {bb} -> {ba}" if bb is not None and ba is not None else ""
    note = f" ({record['reason']})" if record.get("status") == "skipped" and record.get("reason") else ""
    error = f" ERROR {record['error']}" if record.get("error") else ""
    decision = record.get("decision", record.get("status"))
    engine = _ENGINE_LABELS.get(str(record.get("engine")))
    via = f" via {engine.format(method=record.get('method'))}" if engine and decision != "skipped" else ""
    return f"delta_optimize {record['table']}: {decision}{via}, {files}{size}, {record['seconds']}s{note}{error}"


#: how the log line names the engine that did the work (the results file has ``engine`` and ``method``)
_ENGINE_LABELS = {"spark": "spark", "connect": "spark connect", "sql": "sql ({method})"}


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
        """Pre-hook: save the table's version before the model writes (auto compaction looks after it)."""
        from ..delta.snapshot import latest_version
        from ..delta.storage import storage_for, table_uri

        try:
            target = SparkTarget.parse(spark_target)
            options = parse_operation_args(None, None, False, storage_options).storage_options
            if target.engine == "sql":
                version = sql_hooks.table_version(target.sql_connection(), table, options)
            else:
                location, _ = _table_location(table, target.session) if target.usable else (None, None)
                storage = storage_for(table_uri(location), options) if location else None
                version = latest_version(location, storage=storage) if location else -1
        except Exception as exc:  # the model must not fail because the pre-hook could not look
            log.debug("pre-hook of %s could not read the table version: %s", table, exc)
            version = -1
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
    ) -> dict[str, Any]:
        """Post-hook body: auto compaction (default) or a full OPTIMIZE of one model's table, per its settings.

        Never raises for a failed compaction: the result carries ``status`` ``failed`` and ``error``,
        and the macro decides (on_error) whether the model fails. The cost when nothing qualifies is
        kept to a catalog lookup and two log reads (the hook runs after every model).
        """
        t0 = time.perf_counter()
        files = self.files(invocation_id, target_path)
        record: dict[str, Any] = {"table": table, "model": model, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        try:
            since = files.pop_version(table)
            s = parse_settings(settings)
            if s.storage_options is None and storage_options is not None:  # the project-wide var
                s = replace(s, storage_options=parse_operation_args(None, None, False, storage_options).storage_options)
            record.update(mode=s.mode, on_error=s.on_error)
            if s.skip or s.mode == "never":
                record.update(decision="skipped", status="skipped", reason="meta.delta_optimize skip/never")
            else:
                target = self._target(spark_target, record, files.invocation_id)
                if target is not None and target.engine == "sql":
                    conn = target.sql_connection()
                    sql_hooks.run_model(conn, record, table, file_format, s, since)
                elif target is not None:
                    self._model(functools.cache(target.session), record, table, file_format, s, since)
        except Exception as exc:  # the model must not fail because compaction did (unless on_error: fail)
            _failed(record, exc)
        return self._finish(files, record, t0)

    @staticmethod
    def _model(
        spark: Spark, record: dict[str, Any], table: str, file_format: str | None, s: ModelSettings, since: int | None
    ) -> None:
        location = _delta_location(record, table, file_format, s.storage_options, spark)
        if location is None:
            return
        if s.liquid_clustered_by:
            _ensure_clustered(spark, record, table, location, s.liquid_clustered_by, s.storage_options)
            wrote = _optimized(record, _optimize(spark, location, (), (), s))
        elif s.mode == "optimize":
            wrote = _optimized(record, _optimize(spark, location, s.where, s.zorder_by, s))
        else:
            wrote = _auto_compacted(record, _auto_compact(spark, location, since, s))
        _files_after(record, location, wrote, s.storage_options)

    def run_operation(
        self,
        table: str,
        *,
        where: Any = None,
        zorder_by: Any = None,
        dry_run: Any = False,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> dict[str, Any]:
        """``dbt run-operation optimize`` body for one table: a full OPTIMIZE (or its plan, with dry_run)."""

        def plan(spark: Spark, location: str, args: OperationArgs) -> OptimizePlan:
            return _plan(spark, location, args.where, args.zorder_by, args.storage_options)

        def run(spark: Spark, location: str, args: OperationArgs, record: dict[str, Any]) -> bool:
            settings = ModelSettings(storage_options=args.storage_options)
            return _optimized(record, _optimize(spark, location, args.where, args.zorder_by, settings))

        raw = (where, zorder_by, dry_run, storage_options)
        request = _Request("optimize", table, raw, model, file_format, sql_hooks.run_optimize)
        return self._table_operation(request, invocation_id, target_path, spark_target, plan, run)

    def run_purge(
        self,
        table: str,
        *,
        where: Any = None,
        dry_run: Any = False,
        model: str | None = None,
        file_format: str | None = None,
        invocation_id: str | None = None,
        target_path: str | None = None,
        storage_options: Any = None,
        spark_target: Any = None,
    ) -> dict[str, Any]:
        """``dbt run-operation purge`` body for one table: REORG ... APPLY (PURGE) (or its plan, with dry_run)."""
        from ..ops.purge import purge

        def plan(spark: Spark, location: str, args: OperationArgs) -> OptimizePlan:
            return purge(spark(), location, where=list(args.where), dry_run=True, storage_options=args.storage_options)

        def run(spark: Spark, location: str, args: OperationArgs, record: dict[str, Any]) -> bool:
            wrote = _optimized(
                record, purge(spark(), location, where=list(args.where), storage_options=args.storage_options)
            )
            record.update(decision="purge", status="purged" if wrote else "nothingToDo")
            return wrote

        raw = (where, None, dry_run, storage_options)
        request = _Request("purge", table, raw, model, file_format, sql_hooks.run_purge)
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
        from ..ops.analyze import AnalyzeMetrics, analyze

        if all not in (True, False):
            raise ValueError(f"dbt_delta_optimize.analyze: all must be true or false, got {all!r}")

        def metrics(spark: Spark, location: str, args: OperationArgs, dry: bool) -> AnalyzeMetrics:
            kw = {"columns": columns, "all": all is True, "where": list(args.where), "dry_run": dry}
            return analyze(spark(), location, storage_options=args.storage_options, **kw)

        def plan(spark: Spark, location: str, args: OperationArgs) -> _Summarized:
            return metrics(spark, location, args, True)

        def run(spark: Spark, location: str, args: OperationArgs, record: dict[str, Any]) -> bool:
            m = metrics(spark, location, args, False)
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
        request = _Request("analyze", table, raw, model, file_format, over_sql)
        return self._table_operation(request, invocation_id, target_path, spark_target, plan, run)

    def _table_operation(
        self,
        request: _Request,
        invocation_id: str | None,
        target_path: str | None,
        spark_target: Any,
        plan: Callable[[Spark, str, OperationArgs], _Summarized],
        run: Callable[[Spark, str, OperationArgs, dict[str, Any]], bool],
    ) -> dict[str, Any]:
        """One ``run-operation`` on one table: arguments checked, table located, then ``plan`` or ``run``."""
        t0 = time.perf_counter()
        files = self.files(invocation_id, target_path)
        dry_run = request.raw_args[2]
        record: dict[str, Any] = {"table": request.table, "model": request.model, "mode": request.mode}
        record["dry_run"] = dry_run is True
        try:
            args = parse_operation_args(*request.raw_args)
            options = args.storage_options
            target = self._target(spark_target, record, files.invocation_id)
            spark = functools.cache(target.session) if target is not None and target.uses_session else None
            location = (
                None if spark is None else _delta_location(record, request.table, request.file_format, options, spark)
            )
            if target is not None and target.engine == "sql":
                conn = target.sql_connection()
                request.sql_body(conn, record, request.table, request.file_format, args)
            elif location is None or spark is None:
                pass
            elif args.dry_run:
                record.update(decision="plan", status="planned", plan=plan(spark, location, args).summary())
                _files_after(record, location, False, options)
            else:
                _files_after(record, location, run(spark, location, args, record), options)
        except Exception as exc:
            _failed(record, exc)
            record["decision"] = "failed"
        return self._finish(files, record, t0)

    @staticmethod
    def _finish(files: target_files.InvocationFiles, record: dict[str, Any], t0: float) -> dict[str, Any]:
        record["seconds"] = round(time.perf_counter() - t0, 2)
        if record.get("error") and record.get("status") != "failed":
            record["status"] = "failed"
        record["line"] = _line(record)
        try:
            files.append_result(record)
        except OSError as exc:  # reporting must not break the run
            log.warning("could not write %s: %s", RESULTS_FILE, exc)
        out: dict[str, Any] = json.loads(json.dumps(record, default=str))
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
            "run_analyze": self.run_analyze,
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
