"""The Spark executor of the hooks: our engine on dbt's Spark session (or a Spark Connect one).

The post-hook opens the model's table once (``ops.table.open_table``): the decision, the plan and the
counts before all come from that one snapshot, and the table is read once more only after a write
(``Table.refresh``), for the counts after. The settings the model gave reach whichever operation runs
(auto compaction, OPTIMIZE, liquid clustering) as one ``OptimizeOptions``, and the record names the
settings in force and where each came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import NotADeltaTableError, TableNotFoundError
from ..ops.pipeline import Session
from ..ops.table import PinnedSnapshots, Table, open_pinned, open_table
from .hook import Decision, model_settings, run_summary, table_skip
from .outcome import Report
from .settings import ModelSettings
from .vacuum_hook import vacuum_after_spark

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..plan.autocompact import AutoCompactResult
    from ..plan.metrics import OptimizeMetrics

__all__ = ["Spark", "files_after", "open_delta", "optimized", "run_model"]

#: The Spark session of one call, started on first use (a skip never starts one).
Spark = Callable[[], Any]


def open_delta(
    record: Report,
    table: str,
    file_format: str | None,
    options: Mapping[str, str] | None,
    spark: Spark,
    *,
    pinned: PinnedSnapshots | None = None,
    since: int | None = None,
) -> Table | None:
    """The table opened once, or None after marking ``record`` skipped (non-Delta model, missing table).

    With ``pinned``: the snapshot the pre-hook kept at ``since`` in this process, moved on to the latest version
    (one listing and the new commits), when there is one."""
    reason = table_skip(file_format)
    if reason is not None:
        record.update(decision="skipped", status="skipped", reason=reason)
        return None
    session = Session(None, start=spark)
    try:
        if pinned is not None:
            handle = open_pinned(table, pinned, since, session=session, storage_options=options)
        else:
            handle = open_table(table, session=session, storage_options=options)
    except (NotADeltaTableError, TableNotFoundError) as exc:
        record.update(decision="skipped", status="skipped", reason=f"skipped: {exc}")
        return None
    record["location"] = handle.location
    record["files_before"], record["bytes_before"] = handle.counts()
    return handle


def _ensure_clustered(spark: Spark, record: Report, handle: Table, columns: tuple[str, ...]) -> Table:
    """ALTER TABLE ... CLUSTER BY the model's columns when the table is not clustered by them yet.

    dbt-spark creates tables without CLUSTER BY; delta-spark turns an unpartitioned table into a
    clustered one with ALTER TABLE CLUSTER BY (a metadata-only commit); OPTIMIZE then clusters it.
    The handle is read again only when it was altered.
    """
    from ..plan.liquid import clustering_columns, is_clustered_table

    snap = handle.snapshot
    current = clustering_columns(snap) if is_clustered_table(snap.protocol) else []
    if [c.lower() for c in current] == [c.lower() for c in columns]:
        return handle
    cols = ", ".join(".".join(f"`{p}`" for p in c.split(".")) for c in columns)
    spark().sql(f"ALTER TABLE {handle.name} CLUSTER BY ({cols})")
    record["clustered_by"] = list(columns)
    return handle.refresh()


def _optimize(
    spark: Spark, handle: Table, where: tuple[str, ...], zorder_by: tuple[str, ...], s: ModelSettings
) -> OptimizeMetrics:
    from ..ops.optimize import optimize

    return optimize(spark(), handle, where=list(where), zorder_by=list(zorder_by), curve=s.curve, options=s.options)


def _auto_compact(spark: Spark, handle: Table, since: int | None, s: ModelSettings, started: Any) -> AutoCompactResult:
    from ..ops.auto_compact import auto_compact

    return auto_compact(
        spark(),
        handle,
        since,
        run_started_at=started,
        enabled=True,
        min_file_size=s.options.min_file_size,
        max_file_size=s.options.max_file_size,
        min_num_files=s.min_num_files,
        options=s.options,
    )


def optimized(record: Report, m: OptimizeMetrics) -> bool:
    wrote = bool(m.committed_versions)
    record.update(decision="optimize", status="optimized" if wrote else "nothingToDo", metrics=m.to_dict())
    return wrote


def _auto_compacted(record: Report, r: AutoCompactResult) -> bool:
    record.update(decision=r.status, status=r.status, reason=r.reason, auto_compact=r.to_dict())
    run_summary(record, record["auto_compact"])
    if r.error:
        record["error"] = r.error
    return r.ran or bool(r.error)  # a failed run may have committed some batches


def files_after(record: Report, handle: Table, wrote: bool) -> None:
    """The counts after: the table read again only when something was committed."""
    if wrote:
        record["files_after"], record["bytes_after"] = handle.refresh().counts()
    else:  # nothing committed: the counts cannot have changed because of us
        record["files_after"], record["bytes_after"] = record["files_before"], record["bytes_before"]


def _conf(spark: Spark) -> Any:
    return Session(None, start=spark).conf()


def run_model(
    spark: Spark,
    record: Report,
    table: str,
    file_format: str | None,
    s: ModelSettings,
    since: int | None,
    decision: Decision,
    *,
    started: Any = None,
    pinned: PinnedSnapshots | None = None,
) -> None:
    """Carry out the decision on the table, opened once; the record names the settings in force.

    ``since``: the pre-hook's version (-1: no table before the run); ``started``: the run's start, which
    finds the run's commits when there is no pre-hook version (``plan.run_commits``); ``pinned``: the
    snapshots the pre-hooks of this process kept (the table is then moved on from its pre-hook's, not loaded)."""
    handle = open_delta(record, table, file_format, s.storage_options, spark, pinned=pinned, since=since)
    if handle is None:
        return
    get_conf = _conf(spark)
    record["settings"] = model_settings(decision, s, get_conf)
    if decision.work == "liquid":
        handle = _ensure_clustered(spark, record, handle, s.liquid_clustered_by)
        wrote = optimized(record, _optimize(spark, handle, (), (), s))
    elif decision.work == "optimize":
        wrote = optimized(record, _optimize(spark, handle, s.where, s.zorder_by, s))
    else:
        wrote = _auto_compacted(record, _auto_compact(spark, handle, since, s, started))
    files_after(record, handle, wrote)
    vacuum_after_spark(spark, record, handle.location, handle.snapshot, s, get_conf)
