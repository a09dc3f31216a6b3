"""``dbt run-operation maintain`` and its ``on-run-end`` form: ``ops.maintain`` over the project's Delta tables.

The macro hands over the selected nodes (models and snapshots; views and ephemerals are left out in
Jinja) as plain data. Here a non-Delta node (file_format, or a table whose location holds no Delta log)
and a table not built yet are skipped with a note; the rest go to ``maintain`` by catalog name on dbt's
Spark session. The report is written to ``target/delta_maintenance.json``; the previous one there
calibrates this run's cost predictions.

Over thrift, http and odbc (no Spark session) the SQL path does what SQL can: tables are found with
``DESCRIBE TABLE EXTENDED``, scored from their logs where the dbt host can read them, and the work runs
as statements on dbt's connection, in dbt's thread: ``REORG TABLE ... APPLY (PURGE)``, ``OPTIMIZE``
(``ZORDER BY`` the files' columns) and ``VACUUM`` (the server's own retention check). It cannot compute
statistics (open-source delta-spark has no statement for it) nor hold a rewrite to the per-table cap:
the report's ``notes`` say so, and such actions are "unavailable".
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidArgumentError, NotADeltaTableError, TableNotFoundError
from ..ops.outputs import check_output
from .connection import SparkTarget
from .settings import parse_operation_args
from .target_files import TARGET_PATH_OPTION
from .target_files import target_path as resolve_target_path

__all__ = ["REPORT_FILE", "run_maintain"]

log = logging.getLogger(__name__)

REPORT_FILE = "delta_maintenance.json"


def _nodes(tables: Any) -> list[dict[str, Any]]:
    if not isinstance(tables, Sequence) or isinstance(tables, (str, bytes)):
        raise InvalidArgumentError(f"tables must be a list of {{table, model, file_format}}, got {tables!r}.")
    out = []
    for t in tables:
        if not isinstance(t, Mapping) or not isinstance(t.get("table"), str):
            raise InvalidArgumentError(f"each table must be a mapping with a 'table' name, got {t!r}.")
        out.append(dict(t))
    return out


def _int_or_none(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be a whole number, got {value!r}.")
    return int(value)


def _read_previous(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _delta_nodes(spark: Any, nodes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Delta tables to maintain, skipped nodes with a reason)."""
    from ..engine.session import resolve_table

    keep, skipped = [], []
    for n in nodes:
        fmt = n.get("file_format")
        if fmt is not None and str(fmt).lower() != "delta":
            skipped.append({**n, "reason": f"file_format is {fmt}, not delta"})
            continue
        try:
            resolve_table(n["table"], spark)
        except (NotADeltaTableError, TableNotFoundError) as exc:
            skipped.append({**n, "reason": f"skipped: {exc}"})
            continue
        keep.append(n)
    return keep, skipped


#: What the SQL path cannot do, said once per report.
SQL_NOTES = (
    "analyze: open-source delta-spark has no SQL statement that computes statistics for existing files; "
    "use dbt-spark's method session (or a Spark Connect address) for it",
    "the per-table share of the budget cannot stop a statement the server runs: only new work stops at the budget",
)


def _sql_runners(conn: Any, names: Mapping[str, str]) -> dict[str, Any]:
    """Runners that send each action's statement through dbt's connection (``names``: location -> table)."""
    from . import sql_statements as sql

    def runner(action: str, statement: Any) -> Any:
        def run(request: Any) -> dict[str, Any]:
            text = statement(names[request.table.name], request.estimate, request.table)
            rows = conn.rows(text)
            return {"engine": "sql", "statement": text, "rows": json.loads(json.dumps(rows[:20], default=str))}

        return run

    def zorder(table: str, est: Any, handle: Any) -> str:
        from ..plan.liquid import is_clustered_table

        cols = est.benefit.get("clusteredBy") or ()
        return sql.optimize(table, zorder_by=() if is_clustered_table(handle.snapshot.protocol) else tuple(cols))

    return {
        "purge": runner("purge", lambda t, e, h: sql.purge(t)),
        "optimize": runner("optimize", zorder),
        "vacuum": runner("vacuum", lambda t, e, h: f"VACUUM {sql.table_name(t)}"),
    }


def _over_sql(
    target: SparkTarget,
    nodes: list[dict[str, Any]],
    options: Mapping[str, str] | None,
    path: str,
    budget: Any,
    max_tables: Any,
    only: Any,
    dry_run: Any,
) -> dict[str, Any]:
    """The SQL path: tables found through dbt's connection, scored from their logs, run as statements."""
    from ..ops.maintain import maintain
    from .sql_engine import SqlTable

    conn = target.sql_connection()
    keep: dict[str, dict[str, Any]] = {}
    skipped = []
    for n in nodes:
        fmt = n.get("file_format")
        entry = None if fmt is not None and str(fmt).lower() != "delta" else SqlTable.lookup(conn, n["table"])
        if entry is None or entry.format != "delta" or not entry.location:
            what = f"file_format is {fmt}" if entry is None and fmt else "not a Delta table (or not built yet)"
            skipped.append({**n, "reason": what})
        else:
            keep[entry.location] = n
    if not keep:
        return {"tables": [], "skipped": skipped, "notes": list(SQL_NOTES)}
    report = maintain(
        None,
        list(keep),
        budget=budget,
        max_tables=_int_or_none("max_tables", max_tables),
        only=only,
        dry_run=dry_run,
        storage_options=options,
        workers=1,  # dbt's connection belongs to this thread
        previous=_read_previous(path),
        runners=_sql_runners(conn, {loc: n["table"] for loc, n in keep.items()}),
    ).to_dict()
    for t in report["tables"]:
        node = keep.get(t["table"], {})
        t["location"], t["table"], t["model"] = t["table"], node.get("table", t["table"]), node.get("model")
    return {**report, "skipped": skipped, "notes": list(SQL_NOTES), "engine": "sql"}


def _lines(report: Mapping[str, Any], skipped: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = []
    for t in report.get("tables") or []:
        ran = ", ".join(f"{a['action']} {a['status']} {a['seconds']}s" for a in t.get("ran") or [])
        lines.append(
            f"delta_maintain #{t['rank']} {t['table']}: {t['status']}"
            + (f" ({t['deferredReason']})" if t.get("deferredReason") else "")
            + f", actions {','.join(t['actions']) or '-'}, score {t['score']:.4g}"
            + (f", ran {ran}" if ran else "")
            + f": {t['reason']}"
        )
    lines += [f"delta_maintain {s['table']}: skipped: {s['reason']}" for s in skipped]
    return lines


def _write(path: str, report: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2, default=str)
    os.replace(tmp, path)


def run_maintain(
    tables: Any,
    *,
    budget: Any = None,
    max_tables: Any = None,
    only: Any = None,
    dry_run: Any = False,
    workers: Any = None,
    target_path: str | None = None,
    storage_options: Any = None,
    spark_target: Any = None,
) -> dict[str, Any]:
    """Maintain the given nodes' tables; returns the report (plus ``lines`` to log and ``error`` if it failed).

    Never raises: bad arguments and failures come back as ``error`` (the macro raises a compiler error
    for them), so the report file is written whatever happens.
    """
    path = os.path.join(resolve_target_path(target_path), REPORT_FILE)
    out: dict[str, Any] = {"tables": [], "skipped": [], "error": None}
    try:
        check_output(path, option=TARGET_PATH_OPTION, make_folder=True)
        nodes = _nodes(tables)
        options = parse_operation_args(None, None, dry_run, storage_options).storage_options
        target = SparkTarget.parse(spark_target)
        if target.engine == "sql":
            out.update(_over_sql(target, nodes, options, path, budget, max_tables, only, dry_run))
        elif not target.uses_session:
            out["skipped"] = [{**n, "reason": target.skip_reason()} for n in nodes]
        else:
            from ..ops.maintain import maintain

            spark = target.session()
            keep, out["skipped"] = _delta_nodes(spark, nodes)
            report = (
                maintain(
                    spark,
                    [n["table"] for n in keep],
                    budget=budget,
                    max_tables=_int_or_none("max_tables", max_tables),
                    only=only,
                    dry_run=dry_run,
                    storage_options=options,
                    workers=_int_or_none("workers", workers),
                    previous=_read_previous(path),
                ).to_dict()
                if keep
                else {"tables": []}
            )
            models = {n["table"]: n.get("model") for n in keep}
            for t in report.get("tables") or []:
                t["model"] = models.get(t["table"])
            out.update(report)
    except Exception as exc:  # reported to the macro, which fails the operation with this message
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["lines"] = _lines(out, out["skipped"])
    if out["error"] is None:  # a failed call keeps the previous report (its timings calibrate the next run)
        try:
            _write(path, {k: v for k, v in out.items() if k != "lines"})
        except OSError as exc:
            log.warning("could not write %s: %s", path, exc)
    result: dict[str, Any] = json.loads(json.dumps(out, default=str))
    return result
