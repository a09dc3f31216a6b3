"""``dbt run-operation vacuum`` through dbt's SQL connection (thrift, http, odbc): the server's own VACUUM.

The statement is ``VACUUM <table> [LITE] RETAIN n HOURS [DRY RUN]``. A retention shorter than the table's
``delta.deletedFileRetentionDuration`` (read from ``SHOW TBLPROPERTIES``) is refused here, as our own
``vacuum`` refuses it, unless ``allow_short_retention`` is given: the server's check may be off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidArgumentError, InvalidConfigError
from ..plan.vacuum import HOUR_MS, parse_interval_ms, parse_retain_ms, retention_problem
from .sql_engine import SqlConnection
from .sql_statements import table_name

__all__ = ["VacuumArgs", "vacuum_args", "vacuum_over_sql", "vacuum_statement"]

_DEFAULT_RETENTION = "interval 1 week"


@dataclass(frozen=True)
class VacuumArgs:
    """``run-operation vacuum``'s own arguments, checked."""

    retain_ms: int | None
    mode: Literal["full", "lite"]
    allow_short_retention: bool


def vacuum_args(retain: Any, mode: Any, allow_short_retention: Any) -> VacuumArgs:
    """The arguments as dbt passed them, checked (a clear error naming the fix)."""
    if mode not in ("full", "lite"):
        raise InvalidArgumentError(f"dbt_delta_optimize.vacuum: mode must be 'full' or 'lite', got {mode!r}.")
    if allow_short_retention not in (True, False):
        raise InvalidArgumentError(
            f"dbt_delta_optimize.vacuum: allow_short_retention must be true or false, got {allow_short_retention!r}."
        )
    retain_ms = None
    if retain is not None:
        try:
            retain_ms = parse_retain_ms(retain)
        except ValueError as exc:
            raise InvalidArgumentError(
                f"dbt_delta_optimize.vacuum: retain: {exc} Give a duration such as 168h, 7d or 0 (hours if no unit)."
            ) from None
    return VacuumArgs(retain_ms, mode, allow_short_retention is True)


def vacuum_statement(table: str, *, retain_ms: int, lite: bool, dry_run: bool) -> str:
    """``VACUUM t [LITE] RETAIN n HOURS [DRY RUN]`` (hours rounded up: never less than asked)."""
    hours = math.ceil(retain_ms / HOUR_MS)
    return f"VACUUM {table_name(table)}{' LITE' if lite else ''} RETAIN {hours} HOURS{' DRY RUN' if dry_run else ''}"


def _table_retention_ms(conn: SqlConnection, table: str) -> int:
    rows = conn.rows(f"SHOW TBLPROPERTIES {table_name(table)}")
    props = {str(r.get("key")): str(r.get("value")) for r in rows}
    text = props.get("delta.deletedFileRetentionDuration", _DEFAULT_RETENTION)
    try:
        return parse_interval_ms(text)
    except ValueError:
        raise InvalidConfigError(
            f"The table property delta.deletedFileRetentionDuration of {table} is {text!r}, not an interval such "
            "as 'interval 7 days'. Fix the property (ALTER TABLE ... SET TBLPROPERTIES). Nothing was deleted."
        ) from None


def vacuum_over_sql(
    conn: SqlConnection, record: dict[str, Any], table: str, args: VacuumArgs, *, dry_run: bool
) -> None:
    """Send the server's VACUUM for one table; the record gets the statement and, dry run, the files listed."""
    table_ms = _table_retention_ms(conn, table)
    problem = retention_problem(args.retain_ms, table_ms, allow_short=args.allow_short_retention)
    if problem is not None:
        raise InvalidArgumentError(f"{table}: {problem}")
    retain_ms = table_ms if args.retain_ms is None else args.retain_ms
    statement = vacuum_statement(table, retain_ms=retain_ms, lite=args.mode == "lite", dry_run=dry_run)
    rows = conn.rows(statement)
    found: list[str] = [str(next(iter(r.values()))) for r in rows if r]
    record.update(statement=statement, retentionMs=retain_ms, tableRetentionMs=table_ms)
    if dry_run:
        record.update(decision="plan", status="planned", plan={"filesDeleted": len(found), "files": found[:1000]})
    else:
        record.update(decision="vacuum", status="vacuumed", vacuum=_result(rows))


def _result(rows: list[dict[str, Any]]) -> Mapping[str, Any]:
    """delta-spark's VACUUM returns the table path (one row); keep it for the record."""
    return {"rows": [{k: str(v) for k, v in r.items()} for r in rows[:5]]}
