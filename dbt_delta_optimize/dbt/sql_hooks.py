"""The bodies of the hooks and run-operations when the work goes through dbt's SQL connection.

Each fills the same report (``outcome.Report``) as the session path (decision, status, files and bytes before and
after, metrics), plus ``engine: "sql"``, ``method`` (thrift, http, odbc), ``log_readable`` and the
validator's reports. The bridge catches what they raise, as it does on a session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..options import parse_size
from ..plan.autocompact import RUN_ON_ALL, RUN_ON_MODIFIED
from . import sql_statements as sql
from .hook import Decision, run_summary, table_skip
from .outcome import Report
from .settings import ModelSettings, OperationArgs
from .sql_engine import (
    SqlConnection,
    SqlTable,
    TableEntry,
    ignored_settings,
    statements_for_optimize,
    statements_for_purge,
    where_chunks,
)
from .vacuum_hook import vacuum_after_sql

__all__ = ["run_model", "run_optimize", "run_purge", "table_version"]

_RUN = (RUN_ON_MODIFIED, RUN_ON_ALL)
#: Without the log and a pre-hook version, the run's commits are looked for among this many latest ones.
_HISTORY_BACK = 200


def table_version(conn: SqlConnection, table: str, options: Mapping[str, str] | None) -> int:
    """The pre-hook's version: -1 when the table does not exist yet."""
    entry = SqlTable.lookup(conn, table)
    if entry is None or entry.format != "delta":
        return -1
    version = SqlTable.open(conn, table, entry, options).version()
    return -1 if version is None else version


def _open(
    conn: SqlConnection, record: Report, table: str, file_format: str | None, options: Mapping[str, str] | None
) -> SqlTable | None:
    """The table, or None after marking ``record`` skipped (non-Delta model, missing table)."""
    entry: TableEntry | None = None
    reason = table_skip(file_format)
    if reason is None:
        entry = SqlTable.lookup(conn, table)
        if entry is None:
            reason = f"skipped: Table '{table}' was not found"
        elif entry.format != "delta":
            reason = f"{table} is {table_skip(None, table_format=entry.format)}"
    if entry is None or reason is not None:
        record.update(decision="skipped", status="skipped", reason=reason)
        return None
    t = SqlTable.open(conn, table, entry, options)
    record.update(location=entry.location, log_readable=t.readable)
    record["files_before"], record["bytes_before"] = t.counts()
    return t


def _changed(metrics: Mapping[str, Any]) -> bool:
    keys = ("numFilesAdded", "numFilesRemoved", "numAddedFiles", "numRemovedFiles")
    return any((metrics.get(k) or 0) > 0 for k in keys)


def _finish(t: SqlTable, record: Report, before: int | None, wrote: bool) -> None:
    """Validate what the server committed (log readable) and count the files after."""
    if wrote:
        record["validation"] = t.validate(before)
        record["files_after"], record["bytes_after"] = t.counts()
    else:
        record["files_after"], record["bytes_after"] = record["files_before"], record["bytes_before"]


def _given(conn: SqlConnection, record: Report, table: str, s: ModelSettings, given: str | Mapping[str, str]) -> None:
    """The settings given, each marked applied or not, and the one warning naming every one SQL cannot honour.

    Through SQL the server's conf is not ours to read: only what was given is recorded (its source), and
    whether it applied (the sizes are set for the statement's duration; the rest needs a Spark session).
    """
    ignored = ignored_settings(s)
    if ignored:
        record["warning"] = (
            f"delta_optimize {table}: through dbt's {conn.method} connection these settings cannot apply and "
            f"were ignored: {', '.join(ignored)} (they need a Spark session: set the var delta_optimize_spark_remote)"
        )
    values: dict[str, Any] = {**s.options.overrides()}
    if s.min_num_files is not None:
        values["min_num_files"] = s.min_num_files
    names = {i.split("=", 1)[0] for i in ignored}
    record["settings"] = {
        k: {"value": v, "source": given if isinstance(given, str) else given.get(k, "meta"), "applied": k not in names}
        for k, v in values.items()
    }


# ----------------------------------------------------------------------------- OPTIMIZE
def _optimize(t: SqlTable, record: Report, where: Sequence[str], zorder_by: Sequence[str], s: ModelSettings) -> bool:
    plan = None
    if t.snapshot is not None:
        from ..api import plan_optimize

        plan = plan_optimize(
            None,
            t.location,
            where=list(where),
            zorder_by=list(zorder_by),
            min_file_size=s.options.min_file_size,
            max_file_size=s.options.max_file_size,
            storage_options=t.options,
        )
        if plan.is_noop:
            record.update(decision="optimize", status="nothingToDo", plan=plan.summary())
            return False
    statements = statements_for_optimize(t, where, zorder_by, plan)
    metrics = t.run(statements, _sizes(s))
    wrote = _changed(metrics)
    record.update(decision="optimize", status="optimized" if wrote else "nothingToDo", metrics=metrics)
    record["statements"] = len(statements)
    return wrote


def _ensure_clustered(t: SqlTable, record: Report, columns: tuple[str, ...]) -> None:
    """ALTER TABLE ... CLUSTER BY the model's columns when the server says it is not clustered by them yet."""
    current = [c.lower() for c in t.clustering_columns()]
    if current != [c.lower() for c in columns]:
        t.conn.rows(sql.alter_cluster_by(t.table, columns))
        record["clustered_by"] = list(columns)
        t.snapshot = SqlTable.open(t.conn, t.table, t.entry, t.options).snapshot  # the new clustering


# ----------------------------------------------------------------------------- auto compaction
def _auto_decision(t: SqlTable, since: int | None, s: ModelSettings, started: Any) -> tuple[dict[str, Any], Any]:
    """Our decision from the log (the same rules, and the same run's commits, as on a session); (result dict,
    config)."""
    from ..api import auto_compact

    r = auto_compact(
        None,
        t.location,
        since,
        run_started_at=started,
        enabled=True,
        min_file_size=s.options.min_file_size,
        max_file_size=s.options.max_file_size,
        min_num_files=s.min_num_files,
        storage_options=t.options,
        decide_only=True,
    )
    out = r.to_dict()
    if r.error:
        raise RuntimeError(r.error)
    out["partitions"] = None if r.status == RUN_ON_ALL else [dict(c.partition) for c in r.chosen]
    return out, r.config


def _estimated_decision(t: SqlTable, since: int | None, s: ModelSettings, started: Any) -> tuple[dict[str, Any], Any]:
    """Without the log: the run's commits and the skip rules on DESCRIBE HISTORY, the small-file rule on
    DESCRIBE DETAIL's totals."""
    from ..plan.autocompact import AutoCompactConfig, decide_counts, trigger_skip
    from ..plan.run_commits import run_commits, to_epoch_ms

    sizes = {
        "min_file_size": s.options.min_file_size,
        "max_file_size": s.options.max_file_size,
        "min_num_files": s.min_num_files,
    }
    config = AutoCompactConfig.resolve(None, {k: v for k, v in sizes.items() if v is not None})
    latest = t.version()
    last = latest if latest is not None else -1
    started_ms = to_epoch_ms(started)
    window = since if since is not None and since <= last else -1 if since is not None else None
    rows = t.history(window, last, back=_HISTORY_BACK if window is None and started_ms is not None else 1)
    run = run_commits(
        [(int(r.get("version") or 0), r) for r in rows], latest=last, since_version=since, started_ms=started_ms
    )
    counted = [(int(r.get("version") or 0), r) for r in rows if int(r.get("version") or 0) in run.versions]
    out: dict[str, Any] = {"sinceVersion": since, "triggeringVersions": list(run.versions)}
    out["runCommits"] = run.to_dict()
    skip = trigger_skip(since, counted, config)
    if skip is not None:
        return {**out, "status": skip[0], "reason": skip[1]}, config
    detail = t.detail()
    n, size = detail.num_files or 0, detail.size_in_bytes or 0
    small = n if n and size / n < config.small_file_threshold else 0
    d = decide_counts({(): small}, {(): n}, [()], [], config)
    reason = f"{d.reason}; estimated for the whole table from DESCRIBE DETAIL ({n} files, {size} bytes)"
    return {**out, "status": d.status, "reason": reason, "partitions": None}, config


def _auto(t: SqlTable, record: Report, since: int | None, s: ModelSettings, started: Any) -> bool:
    decide = _auto_decision if t.snapshot is not None else _estimated_decision
    decision, config = decide(t, since, s, started)
    partitions = decision.pop("partitions", None)
    record.update(decision=decision["status"], status=decision["status"], reason=decision["reason"])
    record["auto_compact"] = decision
    run_summary(record, decision)
    if decision["status"] not in _RUN:
        return False
    if t.snapshot is None or t.clustering_columns():
        statements = [sql.optimize(t.table)]  # a clustered table takes no WHERE; no log: the whole table
    else:
        snap = t.snapshot
        chunks = where_chunks(partitions, snap.partition_types, snap.partition_columns)
        statements = [sql.optimize(t.table, where=w) for w in chunks]
    metrics = t.run(statements, (config.small_file_threshold, config.max_file_size))
    decision["metrics"] = record["metrics"] = metrics
    run_summary(record, decision)
    if partitions is None:  # the whole table
        record["partitions_compacted"] = None
    return _changed(metrics)


# ----------------------------------------------------------------------------- entry points
def run_model(
    conn: SqlConnection,
    record: Report,
    table: str,
    file_format: str | None,
    s: ModelSettings,
    since: int | None,
    decision: Decision,
    *,
    started: Any = None,
) -> None:
    """Post-hook: the decided auto compaction, OPTIMIZE, or liquid clustering of one model's table, through SQL.

    The run's commits come from the same ``since`` (the pre-hook's version) and ``started`` (the run's start)
    as on a session (``plan.run_commits``)."""
    _given(conn, record, table, s, "meta")
    t = _open(conn, record, table, file_format, s.storage_options)
    if t is None:
        return
    before = t.version()
    if decision.work == "liquid":
        _ensure_clustered(t, record, s.liquid_clustered_by)
        wrote = _optimize(t, record, (), (), s)
    elif decision.work == "optimize":
        wrote = _optimize(t, record, s.where, s.zorder_by, s)
    else:
        wrote = _auto(t, record, since, s, started)
    _finish(t, record, before, wrote)
    if s.vacuum_lite_every is not None:
        vacuum_after_sql(conn, record, table, t.snapshot, s)


def run_optimize(conn: SqlConnection, record: Report, table: str, file_format: str | None, args: OperationArgs) -> None:
    """``run-operation optimize`` on one table through SQL (a plan only, with dry_run)."""
    t = _open(conn, record, table, file_format, args.storage_options)
    if t is None:
        return
    if args.dry_run:
        _dry_run(t, record, lambda plan: statements_for_optimize(t, args.where, args.zorder_by, plan), "optimize", args)
        return
    before = t.version()
    s = ModelSettings(mode="optimize", storage_options=args.storage_options, options=args.options)
    _given(conn, record, table, s, args.given)
    _finish(t, record, before, _optimize(t, record, args.where, args.zorder_by, s))


def run_purge(conn: SqlConnection, record: Report, table: str, file_format: str | None, args: OperationArgs) -> None:
    """``run-operation purge`` on one table: ``REORG TABLE ... APPLY (PURGE)`` through SQL."""
    t = _open(conn, record, table, file_format, args.storage_options)
    if t is None:
        return
    if args.dry_run:
        _dry_run(t, record, lambda plan: statements_for_purge(t, args.where, plan), "purge", args)
        return
    before = t.version()
    _given(conn, record, table, ModelSettings(options=args.options), args.given)
    plan = None
    if t.snapshot is not None:
        from ..purge import plan_purge

        plan = plan_purge(None, t.location, where=list(args.where), storage_options=t.options)
        if plan.is_noop:
            record.update(decision="purge", status="nothingToDo", plan=plan.summary())
            _finish(t, record, before, False)
            return
    statements = statements_for_purge(t, args.where, plan)
    metrics = t.run(statements)
    wrote = _changed(metrics)
    record.update(decision="purge", status="purged" if wrote else "nothingToDo", metrics=metrics)
    record["statements"] = len(statements)
    _finish(t, record, before, wrote)


def _dry_run(t: SqlTable, record: Report, statements: Any, mode: str, args: OperationArgs) -> None:
    """A plan (log readable) and the statements that would run; nothing is sent but DESCRIBE."""
    plan = None
    if t.snapshot is not None:
        if mode == "purge":
            from ..purge import plan_purge

            plan = plan_purge(None, t.location, where=list(args.where), storage_options=t.options)
        else:
            from ..api import plan_optimize

            plan = plan_optimize(
                None,
                t.location,
                where=list(args.where),
                zorder_by=list(args.zorder_by),
                storage_options=t.options,
            )
    summary: dict[str, Any] = plan.summary() if plan is not None else {}
    summary["statements"] = [] if plan is not None and plan.is_noop else statements(plan)
    record.update(decision="plan", status="planned", plan=summary)
    record["files_after"], record["bytes_after"] = record["files_before"], record["bytes_before"]


def _sizes(s: ModelSettings) -> tuple[int | None, int | None]:
    """The model's OPTIMIZE sizes in bytes (meta may give ``128m``), set for the statement's duration."""

    def size(key: str, value: int | str | None) -> int | None:
        return None if value is None else parse_size(value, key=f"meta.delta_optimize.{key}")

    return size("min_file_size", s.options.min_file_size), size("max_file_size", s.options.max_file_size)
