"""The hooks over a SQL-only dbt connection (thrift, http, odbc): our decision, the server's OPTIMIZE.

Without a Spark session the work runs on the server through dbt's connection (``adapter.execute``):
``OPTIMIZE t [WHERE <the partitions our planner chose>] [ZORDER BY (...)]``, plain ``OPTIMIZE`` for a
liquid table, ``REORG TABLE t ... APPLY (PURGE)`` for a purge. The decision is ours:

* where the dbt host can read the table's location (``DESCRIBE DETAIL``) with the model's storage
  settings, our log reader and planner decide (the same auto-compaction and skip rules as on a
  session), and afterwards our validator checks every commit the statement made;
* where it cannot (HDFS, a disk of the server's, no credentials here), ``DESCRIBE DETAIL`` and
  ``DESCRIBE HISTORY`` decide: the skip rules on the triggering commits, and the table's file count and
  average size for the small-file rule (one estimate for the whole table, which is then compacted whole).

Our compaction sizes reach the server as ``spark.databricks.delta.optimize.{min,max}FileSize`` for the
statement (restored afterwards). Settings a SQL statement cannot carry are named in one warning.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..errors import DeltaOptimizeError, InvalidArgumentError, ValidationError
from . import sql_statements as sql
from .settings import ModelSettings

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot
    from ..plan.planner import OptimizePlan

__all__ = ["SQL_SETTINGS", "ServerStatementError", "SqlConnection", "SqlTable", "ignored_settings", "server_message"]

log = logging.getLogger(__name__)

_MIN_SIZE = "spark.databricks.delta.optimize.minFileSize"
_MAX_SIZE = "spark.databricks.delta.optimize.maxFileSize"
#: partitions per statement (each statement is one commit); a longer OR would strain the server's parser
_CHUNK = 500
#: the model settings a SQL statement carries; every other one is named in the warning when it is set
SQL_SETTINGS = frozenset(
    {
        "mode",
        "where",
        "zorder_by",
        "min_file_size",
        "max_file_size",
        "min_num_files",
        "on_error",
        "skip",
        "storage_options",
        "liquid_clustered_by",
        "vacuum_lite_every",
    }
)


def ignored_settings(s: ModelSettings) -> list[str]:
    """``key=value`` of every setting that is set and cannot apply through SQL (Hilbert, a time budget, ...)."""
    defaults = ModelSettings()
    model = [
        f"{f.name}={getattr(s, f.name)}"
        for f in fields(ModelSettings)
        if f.name not in SQL_SETTINGS and f.name != "options" and getattr(s, f.name) != getattr(defaults, f.name)
    ]
    optimize = [f"{k}={v}" for k, v in s.options.overrides().items() if k not in SQL_SETTINGS]
    return model + optimize


class SqlConnection:
    """dbt's connection, through the Jinja ``adapter``: statements run on the thread's connection."""

    def __init__(self, adapter: Any, method: str, *, read_log: bool = True) -> None:
        self._adapter = adapter
        self.method = method
        #: False: decide from DESCRIBE DETAIL even where the dbt host could read the log
        self.read_log = read_log

    def rows(self, statement: str) -> list[dict[str, Any]]:
        """Run one statement; its rows as dicts (column name -> value). A refusal is one short line."""
        log.debug("delta_optimize runs through dbt's %s connection: %s", self.method, statement)
        try:
            _, table = self._adapter.execute(statement, auto_begin=False, fetch=True)
        except Exception as exc:
            raise ServerStatementError(
                f"the server refused {statement.split(' WHERE ')[0][:200]}: {server_message(exc)}"
            ) from exc
        names = list(table.column_names)
        return [dict(zip(names, row)) for row in table.rows]

    @contextmanager
    def sizes(self, min_size: int | None, max_size: int | None) -> Iterator[None]:
        """Our compaction sizes as the session's OPTIMIZE confs for the statements inside, restored after."""
        wanted = [(k, v) for k, v in ((_MIN_SIZE, min_size), (_MAX_SIZE, max_size)) if v is not None]
        previous = {k: self._current(k) for k, _ in wanted}
        try:
            for key, value in wanted:
                self.rows(sql.set_conf(key, value))
            yield
        finally:
            for key, _ in wanted:
                self.rows(sql.restore_conf(key, previous[key]))

    def _current(self, key: str) -> str | None:
        rows = self.rows(sql.get_conf(key))
        value = str(rows[0].get("value")) if rows and rows[0].get("value") is not None else None
        return None if value in (None, "<undefined>") else value


class ServerStatementError(DeltaOptimizeError):
    """A statement sent through dbt's connection failed on the server (its message, without the Java stack)."""


def server_message(exc: BaseException) -> str:
    """The server's own message in one line: the error class and text, no stack, no wrapper noise."""
    text = str(exc)
    marker = "Error running query: "
    if marker in text:
        text = text[text.index(marker) + len(marker) :]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    first = next((ln for ln in lines if ln not in ("Runtime Error", "Database Error")), text.strip())
    first = re.sub(r"(?:[a-z][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error): ", "", first)
    first = re.sub(r"^(\[[A-Z_.]+\]) \1", r"\1", first)
    return first[:500]


def _list(value: Any) -> tuple[str, ...]:
    """An array column as it comes back over Thrift (a JSON string) or ODBC (a list)."""
    if value is None:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            return (value,)
    return tuple(str(v) for v in value)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _missing(exc: Exception) -> bool:
    text = str(exc.__cause__ or exc)
    return any(s in text for s in ("TABLE_OR_VIEW_NOT_FOUND", "Table or view not found", "not found", "NOT_FOUND"))


@dataclass(frozen=True)
class TableEntry:
    """``DESCRIBE TABLE EXTENDED``: the catalog's entry (cheap: the server replays no log for it)."""

    format: str
    location: str
    columns: Mapping[str, str]  #: column name -> type

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> TableEntry:
        columns: dict[str, str] = {}
        details: dict[str, str] = {}
        section = "columns"
        for row in rows:
            name, value = str(row.get("col_name") or "").strip(), str(row.get("data_type") or "").strip()
            if name == "# Detailed Table Information":
                section = "details"
            elif not name or name.startswith("#"):
                section = "other" if section == "columns" else section
            elif section == "columns":
                columns.setdefault(name, value)
            elif section == "details":
                details[name] = value
        kind = details.get("Type", "").upper()
        fmt = "view" if kind == "VIEW" else details.get("Provider", "").lower()
        return cls(format=fmt, location=details.get("Location", ""), columns=columns)


@dataclass(frozen=True)
class TableDetail:
    """``DESCRIBE DETAIL``'s row: the server's view of the table's state (it replays the log for it)."""

    id: str | None
    partition_columns: tuple[str, ...]
    clustering_columns: tuple[str, ...]
    num_files: int | None
    size_in_bytes: int | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TableDetail:
        return cls(
            id=str(row["id"]) if row.get("id") else None,
            partition_columns=_list(row.get("partitionColumns")),
            clustering_columns=_list(row.get("clusteringColumns")),
            num_files=_int(row.get("numFiles")),
            size_in_bytes=_int(row.get("sizeInBytes")),
        )


@dataclass
class SqlTable:
    """One table reached through dbt's connection, with its log when the dbt host can read it."""

    conn: SqlConnection
    table: str
    options: Mapping[str, str] | None
    entry: TableEntry
    snapshot: Snapshot | None  #: None: the location cannot be read from here (decide from DESCRIBE DETAIL)

    @classmethod
    def lookup(cls, conn: SqlConnection, table: str) -> TableEntry | None:
        """The catalog's entry of ``table``, or None when the server does not know it."""
        try:
            rows = conn.rows(sql.describe_extended(table))
        except Exception as exc:
            if _missing(exc):
                return None
            raise
        return TableEntry.from_rows(rows) if rows else None

    @classmethod
    def open(cls, conn: SqlConnection, table: str, entry: TableEntry, options: Mapping[str, str] | None) -> SqlTable:
        return cls(conn, table, options, entry, _readable_snapshot(entry, options) if conn.read_log else None)

    @property
    def location(self) -> str:
        return self.entry.location

    @property
    def readable(self) -> bool:
        return self.snapshot is not None

    @property
    def storage(self) -> Any:
        from ..delta.storage import storage_of

        return storage_of(self.location, self.options)

    def detail(self) -> TableDetail:
        """``DESCRIBE DETAIL`` now (slow on a large table: only when the log cannot be read here)."""
        rows = self.conn.rows(sql.describe_detail(self.table))
        return TableDetail.from_row(rows[0] if rows else {})

    def clustering_columns(self) -> tuple[str, ...]:
        """A liquid table's clustering columns (from the log where readable)."""
        if self.snapshot is not None:
            from ..plan.liquid import clustering_columns, is_clustered_table

            return tuple(clustering_columns(self.snapshot)) if is_clustered_table(self.snapshot.protocol) else ()
        return self.detail().clustering_columns

    def counts(self) -> tuple[int | None, int | None]:
        """(files, bytes) now: from the log where readable, else from the server."""
        if self.snapshot is not None:
            from ..delta.snapshot import file_counts

            return file_counts(self.location, storage=self.storage)
        detail = self.detail()
        return detail.num_files, detail.size_in_bytes

    def version(self) -> int | None:
        """The table's latest version: from the log where readable, else ``DESCRIBE HISTORY``."""
        if self.snapshot is not None:
            from ..delta.snapshot import latest_version

            return latest_version(self.location, storage=self.storage)
        rows = self.conn.rows(sql.describe_history(self.table, 1))
        return _int(rows[0].get("version")) if rows else None

    def history(self, since: int | None, latest: int, *, back: int = 1) -> list[Mapping[str, Any]]:
        """``DESCRIBE HISTORY`` rows after ``since`` (None: the latest ``back`` commits), newest first."""
        start = latest - max(back, 1) + 1 if since is None else since + 1
        if start > latest:
            return []
        rows = self.conn.rows(sql.describe_history(self.table, latest - start + 1))
        return [r for r in rows if (_int(r.get("version")) or -1) >= start]

    # ------------------------------------------------------------------ statements
    def run(self, statements: Sequence[str], sizes: tuple[int | None, int | None] = (None, None)) -> dict[str, Any]:
        """Run OPTIMIZE / REORG statements (with our sizes); the server's metrics, summed over the statements."""
        totals: dict[str, Any] = {}
        with self.conn.sizes(*sizes):
            for statement in statements:
                for row in self.conn.rows(statement):
                    _add_metrics(totals, row.get("metrics"))
        return totals

    def validate(self, before: int | None) -> list[dict[str, Any]]:
        """Our validator over every data-rearranging commit after ``before`` (the log must be readable)."""
        if self.snapshot is None or before is None:
            return []
        from ..delta.snapshot import latest_version, read_commit
        from ..inspect.validate import REARRANGING_OPERATIONS, validate_commit

        storage = self.storage
        location = self.location
        reports = []
        for version in range(before + 1, latest_version(location, storage=storage) + 1):
            info: Mapping[str, Any] = next(
                (a["commitInfo"] for a in read_commit(location, version, storage=storage) if "commitInfo" in a), {}
            )
            if info.get("operation") not in REARRANGING_OPERATIONS:
                continue
            report = validate_commit(location, version, storage=storage)
            reports.append({"version": version, "ok": report.ok, "codes": list(report.codes)})
            if not report.ok:
                raise ValidationError(
                    f"the server's {info.get('operation')} commit {version} of {self.table} failed validation: "
                    f"{', '.join(report.codes)} (dbt-delta-optimize validate {location} --version {version})"
                )
        return reports


def _add_metrics(totals: dict[str, Any], raw: Any) -> None:
    if raw is None:
        return
    try:
        metrics = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except (TypeError, ValueError):
        return
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key.startswith(("num", "total")):
            totals[key] = totals.get(key, 0) + value
        elif key not in totals:
            totals[key] = value


def _readable_snapshot(entry: TableEntry, options: Mapping[str, str] | None) -> Snapshot | None:
    """The table's snapshot when the dbt host reads its location (the same columns as the catalog's), else None."""
    from ..delta.snapshot import load_snapshot
    from ..delta.storage import storage_of

    try:
        snapshot = load_snapshot(entry.location, storage=storage_of(entry.location, options))
    except (DeltaOptimizeError, OSError, ValueError) as exc:
        log.info(
            "delta_optimize: %s is not readable from the dbt host (%s); using DESCRIBE DETAIL", entry.location, exc
        )
        return None
    names = [str(f.get("name", "")).lower() for f in snapshot.schema.get("fields", [])]
    if entry.columns and names != [c.lower() for c in entry.columns]:
        log.info("delta_optimize: %s on the dbt host holds another table (columns %s)", entry.location, names)
        return None
    return snapshot


# ----------------------------------------------------------------------------- from plans to WHERE clauses
def plan_partitions(plan: OptimizePlan, snapshot: Snapshot) -> list[dict[str, str | None]] | None:
    """The partitions a plan rewrites, by logical column name (None: every partition, no WHERE needed)."""
    from ..plan.predicate import select_partitions

    columns = snapshot.partition_columns
    if not columns:
        return None
    physical = dict(zip(snapshot.physical_partition_columns, columns))
    chosen = {tuple(sorted((physical.get(k, k), v) for k, v in b.partition_values.items())): None for b in plan.bins}
    if len(chosen) >= len(select_partitions(snapshot, ()).normalized):  # every partition: no WHERE needed
        return None
    return [dict(key) for key in chosen]


def where_chunks(
    partitions: Sequence[Mapping[str, Any]] | None, snapshot_or_types: Mapping[str, str], columns: Sequence[str]
) -> list[tuple[str, ...]]:
    """One WHERE (as a predicate tuple) per statement: () for the whole table, else chunks of partitions."""
    if partitions is None or not columns:
        return [()]
    return [
        (sql.partitions_predicate(partitions[i : i + _CHUNK], columns, snapshot_or_types),)
        for i in range(0, len(partitions), _CHUNK)
    ]


def canonical_where(where: Sequence[str], partition_columns: Sequence[str], types: Mapping[str, str]) -> list[str]:
    """A user's predicates, checked by our safe language and regenerated as canonical SQL."""
    from ..plan.predicate import parse_predicates

    return parse_predicates(list(where), list(partition_columns), dict(types))


def refuse_liquid_args(t: SqlTable, clustering: Sequence[str], where: Sequence[str], zorder_by: Sequence[str]) -> None:
    """delta-spark refuses WHERE and ZORDER BY on a clustered table; say so before sending anything."""
    if clustering and (where or zorder_by):
        raise InvalidArgumentError(
            f"{t.table} is a liquid clustered table (CLUSTER BY {', '.join(clustering)}): OPTIMIZE takes neither "
            "WHERE nor ZORDER BY there. Remove them."
        )


def _partition_columns(t: SqlTable) -> tuple[str, ...]:
    return t.snapshot.partition_columns if t.snapshot is not None else t.detail().partition_columns


def statements_for_optimize(
    t: SqlTable, where: Sequence[str], zorder_by: Sequence[str], plan: OptimizePlan | None
) -> list[str]:
    """The OPTIMIZE statements for a plan (log readable) or for the user's WHERE as it stands (not readable)."""
    clustering = t.clustering_columns()
    refuse_liquid_args(t, clustering, where, zorder_by)
    if clustering:
        return [sql.optimize(t.table)]
    if plan is not None and t.snapshot is not None:
        partitions = plan_partitions(plan, t.snapshot)
        chunks = where_chunks(partitions, t.snapshot.partition_types, t.snapshot.partition_columns)
        return [sql.optimize(t.table, where=w, zorder_by=zorder_by) for w in chunks]
    predicates = canonical_where(where, _partition_columns(t), t.entry.columns) if where else []
    return [sql.optimize(t.table, where=predicates, zorder_by=zorder_by)]


def statements_for_purge(t: SqlTable, where: Sequence[str], plan: OptimizePlan | None) -> list[str]:
    if plan is not None and t.snapshot is not None:
        partitions = plan_partitions(plan, t.snapshot)
        chunks = where_chunks(partitions, t.snapshot.partition_types, t.snapshot.partition_columns)
        return [sql.purge(t.table, where=w) for w in chunks]
    predicates = canonical_where(where, _partition_columns(t), t.entry.columns) if where else []
    return [sql.purge(t.table, where=predicates)]
