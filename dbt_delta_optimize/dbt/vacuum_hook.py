"""The post-hook's LITE VACUUM (``meta.delta_optimize.vacuum_lite_every``), for both executors.

After the model's write (and its compaction), a LITE VACUUM at the table's own retention runs when the
last VACUUM (``inspect.vacuum_state.last_vacuum``: the newest VACUUM END commit, else when
``_last_vacuum_info`` was written) is older than the model's interval. LITE reads the log only, so the
check and the run cost no listing. The retention is never shorter than the table's: the hook has no way
to ask for less. The record's ``vacuum_lite`` entry says whether it was due, when the last run was and what
this one did; a failed VACUUM is the record's error (``on_error`` decides), the compaction's record stays.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..options import VACUUM_MODEL_OPTIONS, ConfGetter, Effective, resolve_effective
from .outcome import Report
from .settings import ModelSettings

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot
    from .sql_engine import SqlConnection

__all__ = ["due", "history_last_vacuum", "interval", "vacuum_after_spark", "vacuum_after_sql"]

#: DESCRIBE HISTORY rows read for the last VACUUM END when the dbt host cannot read the log.
HISTORY_LIMIT = 1000


def due(every_ms: int, last: Mapping[str, Any] | None, now_ms: int) -> bool:
    """Whether the interval has passed since the last VACUUM (never vacuumed: due)."""
    if last is None or not isinstance(last.get("timestamp"), int):
        return True
    return now_ms - int(last["timestamp"]) >= every_ms


def interval(s: ModelSettings, get_conf: ConfGetter | None) -> Effective:
    """The model's ``vacuum_lite_every`` (parsed already, in ms) over the session's conf
    (``spark.dbt_delta_optimize.vacuum.liteEvery``), else off."""
    if s.vacuum_lite_every is not None:
        return Effective("vacuum_lite_every", s.vacuum_lite_every, "meta")
    (found,) = resolve_effective(VACUUM_MODEL_OPTIONS, get_conf, None, what="vacuum_lite_every")
    return found


def _check(record: Report, every: Effective, last: Mapping[str, Any] | None, now_ms: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"mode": "lite", "everyMs": every.value, "everySource": every.source}
    entry["lastVacuum"] = dict(last) if last else None
    entry["due"] = due(int(every.value), last, now_ms)
    entry["ran"] = False
    record["vacuum_lite"] = entry
    return entry


def _failed(record: Report, entry: dict[str, Any], exc: Exception) -> None:
    entry["error"] = f"{type(exc).__name__}: {exc}"
    if not record.get("error"):
        record["error"] = f"vacuum: {entry['error']}"


def vacuum_after_spark(
    spark: Callable[[], Any] | None,
    record: Report,
    location: str,
    snapshot: Snapshot,
    s: ModelSettings,
    get_conf: ConfGetter | None,
) -> None:
    """The session path: our ``vacuum`` in lite mode on the table's location (the log read again)."""
    from ..inspect.vacuum_state import last_vacuum
    from ..ops.vacuum import vacuum

    every = interval(s, get_conf)
    if every.value is None:
        return
    now = int(time.time() * 1000)
    entry = _check(record, every, last_vacuum(snapshot, since_ms=now - every.value), now)
    if not entry["due"]:
        return
    try:
        m = vacuum(spark() if spark is not None else None, location, mode="lite", storage_options=s.storage_options)
    except Exception as exc:
        _failed(record, entry, exc)
        return
    entry.update(ran=True, metrics=m.to_dict(include_files=False))


def _ms(value: Any) -> int | None:
    """A DESCRIBE HISTORY timestamp (a datetime, or its text, in the server's time zone) in ms."""
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    return int(value.timestamp() * 1000) if isinstance(value, datetime.datetime) else None


def history_last_vacuum(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest VACUUM END of DESCRIBE HISTORY's rows (newest first), as ``last_vacuum`` shapes it."""
    for row in rows:
        if str(row.get("operation")) == "VACUUM END":
            ts = _ms(row.get("timestamp"))
            if ts is not None:
                return {"version": row.get("version"), "timestamp": ts, "source": "DESCRIBE HISTORY"}
    return None


def vacuum_after_sql(
    conn: SqlConnection, record: Report, table: str, snapshot: Snapshot | None, s: ModelSettings
) -> None:
    """The SQL path: ``VACUUM <table> LITE RETAIN <table's retention> HOURS`` through dbt's connection.

    The server's conf is not ours to read: only the model's key turns it on.
    """
    from ..inspect.vacuum_state import last_vacuum
    from .sql_statements import table_name
    from .sql_vacuum import VacuumArgs, vacuum_over_sql

    every = interval(s, None)
    if every.value is None:
        return
    now = int(time.time() * 1000)
    try:
        if snapshot is not None:
            last = last_vacuum(snapshot, since_ms=now - every.value)
        else:
            last = history_last_vacuum(conn.rows(f"DESCRIBE HISTORY {table_name(table)} LIMIT {HISTORY_LIMIT}"))
    except Exception as exc:
        entry = _check(record, every, None, now)
        _failed(record, entry, exc)
        return
    entry = _check(record, every, last, now)
    if not entry["due"]:
        return
    done: dict[str, Any] = {}
    try:
        vacuum_over_sql(conn, done, table, VacuumArgs(None, "lite", False), dry_run=False)
    except Exception as exc:
        _failed(record, entry, exc)
        return
    entry.update(ran=True, statement=done.get("statement"), retentionMs=done.get("retentionMs"))
