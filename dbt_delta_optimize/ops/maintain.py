"""``maintain``: rank every table by what maintenance would buy, then do the most valuable work first within a budget.

Each table is opened once (``open_table``) and scored from its log (``plan.maintenance``): no data is
read to rank. The queue runs worst first, a few tables at a time on a small thread pool; on each
table its actions run in order (purge, optimize, then statistics, then VACUUM) through the same
operations as the single-table commands (``maintain_runners``). No new work starts once the budget
is spent: what is left is reported as deferred, with its score. A table that fails is reported and
the others go on. The report shows predicted and actual seconds side by side.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import DeltaOptimizeError, InvalidArgumentError, exit_code
from ..inspect.maintenance_log import read_log_facts
from ..inspect.table_trends import table_trends
from ..inspect.trends import trend_window
from ..options import parse_duration
from ..plan.config import OptimizeConfig
from ..plan.maintenance import ACTIONS, Action, Calibration, TableScore, estimate_table
from ..plan.maintenance_history import deferral_streak, history_of, run_record, runs_of
from ..plan.maintenance_queue import QueueEntry, calibration_factors, queue_of, table_cap
from .maintain_runners import RUNNERS, ActionRequest, Runner
from .pipeline import Session
from .table import Table, open_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ActionOutcome", "MaintenanceReport", "TableOutcome", "check_only", "maintain"]

ActionStatus = Literal["done", "failed", "unavailable", "deferred"]
TableStatus = Literal["planned", "nothing to do", "done", "failed", "deferred", "unavailable"]


@dataclass(frozen=True)
class ActionOutcome:
    """One action as it ran (or why it did not), with its predicted and actual seconds."""

    action: str
    status: ActionStatus
    seconds: float
    predicted_seconds: float
    predicted_raw_seconds: float
    metrics: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "predictedSeconds": round(self.predicted_seconds, 3),
            "predictedRawSeconds": round(self.predicted_raw_seconds, 3),
            "error": self.error,
            "metrics": dict(self.metrics),
        }


@dataclass(frozen=True)
class TableOutcome:
    """A table's place in the queue and what happened to it."""

    table: str
    rank: int
    entry: QueueEntry | None  #: None: the table could not be opened or scored
    status: TableStatus
    ran: tuple[ActionOutcome, ...] = ()
    error: str | None = None
    error_code: int | None = None
    deferred_reason: str | None = None

    @property
    def score(self) -> TableScore | None:
        return self.entry.score if self.entry is not None else None

    def to_dict(self) -> dict[str, Any]:
        base = (
            self.entry.to_dict()
            if self.entry is not None
            else {"table": self.table, "rank": self.rank, "actions": [], "score": 0.0, "benefit": {}, "cost": {}}
        )
        base.update(
            rank=self.rank,
            status=self.status,
            error=self.error,
            deferredReason=self.deferred_reason,
            ran=[a.to_dict() for a in self.ran],
            actualSeconds=round(sum(a.seconds for a in self.ran), 3) if self.ran else None,
        )
        if self.entry is None:
            base["reason"] = f"failed: {self.error}"
        else:
            base["health"] = dict(self.entry.score.health)
        return base


@dataclass(frozen=True)
class MaintenanceReport:
    """Every table once, in rank order: the queue (dry run), or the queue and what ran."""

    tables: tuple[TableOutcome, ...]
    dry_run: bool
    budget: float | None
    max_tables: int | None
    only: tuple[str, ...]
    workers: int
    generated_at: str
    wall_seconds: float
    #: the runs the state file remembered before this one (``maintenance_history``), oldest first
    history: tuple[Mapping[str, Any], ...] = ()
    #: per table name, its trends from the log (``table_trends``), or {"error": ...} when the log could not say
    trends: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for t in self.tables if t.status == status)

    @property
    def failed(self) -> tuple[TableOutcome, ...]:
        return tuple(t for t in self.tables if t.status == "failed")

    @property
    def exit_code(self) -> int:
        """0 all done or deferred; 1 some failed; 2 every failure is bad input; 3 every failure is retryable."""
        codes = {t.error_code or 1 for t in self.failed}
        if not codes:
            return 0
        return codes.pop() if len(codes) == 1 and codes & {2, 3} else 1

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``--json``, the state file, the project page): the tables in rank order, each with its
        trends, its deferral streak and its runs in the trends' window; and ``history``, the runs remembered (this
        one included unless it is a dry run)."""
        tables = [t.to_dict() for t in self.tables]
        out = {
            "tables": tables,
            "dryRun": self.dry_run,
            "budgetSeconds": self.budget,
            "maxTables": self.max_tables,
            "only": list(self.only),
            "workers": self.workers,
            "generatedAt": self.generated_at,
            "wallSeconds": round(self.wall_seconds, 3),
            "summary": {s: self.count(s) for s in ("planned", "nothing to do", "done", "failed", "deferred")},
        }
        runs = [*self.history, run_record(out)] if not self.dry_run else list(self.history)
        for t in tables:
            trends = self.trends.get(t["table"])
            t["trends"] = dict(trends) if trends is not None else None
            t["deferredStreak"] = deferral_streak(runs, t["table"])
            t["runs"] = runs_of(runs, t["table"], (trends or {}).get("from"))
        out["history"] = runs
        return out


# --------------------------------------------------------------------------- arguments
def check_only(only: str | Sequence[str] | None) -> tuple[Action, ...] | None:
    """The actions to consider, from a list or a comma-separated string; None: every action."""
    if only is None:
        return None
    items = [p.strip().lower() for p in (only.split(",") if isinstance(only, str) else only) if p and p.strip()]
    bad = [i for i in items if i not in ACTIONS]
    if bad or not items:
        raise InvalidArgumentError(
            f"only must name actions among {', '.join(ACTIONS)}, got {', '.join(bad) or repr(only)}."
        )
    return tuple(a for a in ACTIONS if a in items)


def _check(budget: float | str | None, max_tables: int | None, workers: int | None) -> float | None:
    if max_tables is not None and (isinstance(max_tables, bool) or not isinstance(max_tables, int) or max_tables < 1):
        raise InvalidArgumentError(f"max_tables must be a whole number >= 1, got {max_tables!r}.")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidArgumentError(f"workers must be a whole number >= 1, got {workers!r}.")
    if budget is None:
        return None
    if isinstance(budget, (int, float)) and not isinstance(budget, bool) and 0 < budget <= 7 * 86400:
        return float(budget)  # seconds, below one too: a budget is the queue's, not a rewrite's
    return parse_duration(budget, key="budget")


def _unique(tables: Sequence[str | Table]) -> list[str | Table]:
    if isinstance(tables, (str, Table)) or not tables:
        raise InvalidArgumentError("tables must be a non-empty list of table paths, names or opened tables.")
    seen: set[str] = set()
    out: list[str | Table] = []
    for t in tables:
        key = t.name if isinstance(t, Table) else str(t)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def default_workers(spark: SparkSession | None) -> int:
    """Half the cores, at most 4; one when no Spark session is there yet (concurrent first starts would race)."""
    if spark is None:
        return 1
    return max(1, min(4, (os.cpu_count() or 1) // 2))


# --------------------------------------------------------------------------- scoring
#: Tables opened and scored at once: each is a few dependent round trips to its store (list the log, read
#: the commits and checkpoint), so a dry run over 50 tables on S3 is a few times one table's, not 50 times.
OPEN_THREADS = 16


def _open_width(names: Sequence[str | Table], session: SparkSession | None, workers: int) -> int:
    """Threads opening the tables: ``OPEN_THREADS``, unless a catalog name would start Spark from several
    threads at once (no session yet): then as many as the workers, at least two."""
    from ..engine.session import is_path

    if session is None and any(isinstance(t, str) and not is_path(t) for t in names):
        return max(workers, 2)
    return max(1, min(OPEN_THREADS, len(names)))


def _score(
    table: str | Table,
    spark: SparkSession | None,
    storage_options: Mapping[str, str] | None,
    now_ms: int,
    only: tuple[Action, ...] | None,
    previous: Mapping[str, Any] | None,
    trend_days: int,
) -> tuple[Table, TableScore, dict[str, Any]]:
    opened = open_table(table, spark=spark, storage_options=storage_options)
    facts = read_log_facts(opened.snapshot, now_ms=now_ms)
    factors = calibration_factors(previous, opened.name)
    calibration = Calibration(factors) if factors else None
    score = estimate_table(opened.name, opened.snapshot, facts, calibration=calibration, only=only)
    try:
        trends = table_trends(
            opened.snapshot,
            now_ms=now_ms,
            days=trend_days,
            small_below=OptimizeConfig().min_file_size,  # what estimate_table counts as small
            lacking=int(score.health.get("filesLackingStats") or 0),
        ).to_dict()
    except (DeltaOptimizeError, OSError, ValueError) as exc:  # the trends are a view: the table is still ranked
        trends = {"error": f"the log's history could not be read: {exc}"}
    return opened, score, trends


# --------------------------------------------------------------------------- running
@dataclass
class _Clock:
    budget: float | None
    cap: float | None
    started: float = field(default_factory=time.monotonic)

    started_any: bool = False

    def spent(self) -> bool:
        return self.budget is not None and time.monotonic() - self.started >= self.budget

    def why_not(self, predicted: float) -> str | None:
        """Why a table must not start now (None: it may): the budget is spent, or its predicted seconds (up
        to the per-table cap) exceed what is left. The first table of a run always starts, so a budget too
        small for the worst table still moves the queue on (aging brings every table to the front)."""
        if self.budget is None:
            return None
        left = self.budget - (time.monotonic() - self.started)
        if left <= 0:
            return "budget spent"
        need = min(predicted, self.cap) if self.cap is not None else predicted
        if self.started_any and need > left:
            return f"would not fit: predicted {need:.1f}s, {left:.1f}s of the budget left"
        self.started_any = True
        return None

    def allowance(self, table_started: float) -> float | None:
        """Seconds this table may still take: the cap from its start and what is left of the budget."""
        if self.budget is None:
            return None
        now = time.monotonic()
        left = self.budget - (now - self.started)
        return min(left, (self.cap or left) - (now - table_started))


def _run_action(runner: Runner | None, request: ActionRequest) -> ActionOutcome:
    est = request.estimate
    if runner is None:
        return ActionOutcome(est.action, "unavailable", 0.0, est.seconds, est.raw_seconds, error="no runner")
    began = time.monotonic()
    try:
        metrics = runner(request)
    except Exception as exc:  # reported on the table; the other tables go on
        return ActionOutcome(
            est.action, "failed", time.monotonic() - began, est.seconds, est.raw_seconds, {}, str(exc), exit_code(exc)
        )
    return ActionOutcome(est.action, "done", time.monotonic() - began, est.seconds, est.raw_seconds, metrics)


def _run_table(
    spark: SparkSession | None, table: Table, entry: QueueEntry, clock: _Clock, runners: Mapping[str, Runner]
) -> TableOutcome:
    began = time.monotonic()
    ran: list[ActionOutcome] = []
    for est in entry.score.actions:
        if clock.spent() or (ran and ran[-1].status == "failed"):
            ran.append(ActionOutcome(est.action, "deferred", 0.0, est.seconds, est.raw_seconds))
            continue
        outcome = _run_action(runners.get(est.action), ActionRequest(spark, table, est, clock.allowance(began)))
        if outcome.status == "done":
            try:
                table = table.refresh()
            except Exception as exc:  # the action ran; the next one cannot see the table
                outcome = ActionOutcome(
                    outcome.action,
                    "failed",
                    outcome.seconds,
                    est.seconds,
                    est.raw_seconds,
                    outcome.metrics,
                    f"reading the table after {est.action}: {exc}",
                    exit_code(exc),
                )
        ran.append(outcome)
    statuses = {a.status for a in ran}
    failed = next((a for a in ran if a.status == "failed"), None)
    status: TableStatus = (
        "failed"
        if failed
        else "deferred"
        if "deferred" in statuses
        else "done"
        if "done" in statuses
        else "unavailable"
    )
    reason = "budget spent" if status == "deferred" else None
    return TableOutcome(
        entry.score.table,
        entry.rank,
        entry,
        status,
        tuple(ran),
        failed.error if failed else None,
        failed.error_code if failed else None,
        reason,
    )


def _run_queue(
    spark: SparkSession | None,
    work: list[tuple[Table, QueueEntry]],
    clock: _Clock,
    workers: int,
    runners: Mapping[str, Runner],
) -> dict[str, TableOutcome]:
    """Worst first on ``workers`` threads (one: in the calling thread); a table starts only while the budget lasts."""
    done: dict[str, TableOutcome] = {}

    def defer(entry: QueueEntry, reason: str) -> None:
        name = entry.score.table
        done[name] = TableOutcome(name, entry.rank, entry, "deferred", deferred_reason=reason)

    if workers == 1:  # the caller's thread: a connection bound to it (dbt's) stays usable
        for table, entry in work:
            if (reason := clock.why_not(entry.score.seconds)) is not None:
                defer(entry, reason)
            else:
                done[entry.score.table] = _run_table(spark, table, entry, clock, runners)
        return done
    started: list[Future[TableOutcome]] = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="maintain") as pool:
        running: set[Future[TableOutcome]] = set()
        for table, entry in work:
            while len(running) >= workers:
                _, running = wait(running, return_when=FIRST_COMPLETED)
            if (reason := clock.why_not(entry.score.seconds)) is not None:
                defer(entry, reason)
                continue
            fut = pool.submit(_run_table, spark, table, entry, clock, runners)
            running.add(fut)
            started.append(fut)
    for fut in started:  # the pool is shut down: every future has its outcome
        outcome = fut.result()
        done[outcome.table] = outcome
    return done


def maintain(
    spark: SparkSession | None,
    tables: Sequence[str | Table],
    *,
    budget: float | str | None = None,
    max_tables: int | None = None,
    only: str | Sequence[str] | None = None,
    dry_run: bool = False,
    storage_options: Mapping[str, str] | None = None,
    workers: int | None = None,
    previous: Mapping[str, Any] | None = None,
    runners: Mapping[str, Runner] | None = None,
    trend_days: int | None = None,
) -> MaintenanceReport:
    """Score every table from its log, then run the most valuable maintenance first within ``budget``.

    Args:
        spark: session for the operations (None: the running one, else started when a rewrite needs it).
        tables: paths, catalog names or opened tables (each listed once).
        budget: seconds (a number, fractions allowed) or a duration (``25s``, ``20m``), counted from when the queue starts (after the read-only
            scoring); no table or action starts after it, a table predicted not to fit in what is left
            waits (except the run's first), and no table takes more than ``MaintenanceConfig.table_share``
            of it. None: no limit.
        max_tables: at most this many tables get work (the highest ranked).
        only: actions to consider (``optimize,purge,vacuum,analyze``); None: all.
        dry_run: rank and estimate only; nothing is written and no Spark is started for paths.
        workers: tables run at once (default: half the cores, at most 4, with a Spark session).
        previous: a previous report's JSON (``MaintenanceReport.to_dict``): its actual seconds calibrate
            this run's predictions; its ``history`` (runs, deferrals, predicted and actual seconds) carries on.
        runners: how each action runs (default ``maintain_runners.RUNNERS``: the ops operations); the dbt
            bridge's SQL path passes statements run through dbt's connection.
        trend_days: the days of each table's history its trends read from the log (default 30).

    Returns:
        MaintenanceReport: every table once, in rank order, with what ran and its metrics.
    """
    wanted = check_only(only)
    seconds = _check(budget, max_tables, workers)
    days = trend_window(trend_days)
    names = _unique(tables)
    began = time.monotonic()
    session = Session(spark).running() if not dry_run else spark
    pool_size = workers or default_workers(session)
    now_ms = int(time.time() * 1000)
    opened: dict[str, Table] = {}
    outcomes: list[TableOutcome] = []
    scores: list[TableScore] = []
    trends: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(
        max_workers=_open_width(names, session, pool_size), thread_name_prefix="maintain-open"
    ) as pool:
        futures = [(t, pool.submit(_score, t, session, storage_options, now_ms, wanted, previous, days)) for t in names]
    for t, fut in futures:
        name = t.name if isinstance(t, Table) else str(t)
        try:
            table, score, found = fut.result()
        except DeltaOptimizeError as exc:
            outcomes.append(TableOutcome(name, 0, None, "failed", error=str(exc), error_code=exit_code(exc)))
            continue
        if any(t.snapshot.location == table.snapshot.location for t in opened.values()):
            continue  # the same table under another name: listed once, as first given
        opened[score.table] = table
        trends[score.table] = found
        scores.append(score)
    queue = queue_of(scores)
    with_work = [e for e in queue if e.has_work]
    chosen = with_work[:max_tables] if max_tables is not None else with_work
    clock = _Clock(seconds, table_cap(seconds))  # the budget is for the work: it counts from the queue's start
    work = [(opened[e.score.table], e) for e in chosen]
    ran = {} if dry_run else _run_queue(session, work, clock, pool_size, RUNNERS if runners is None else runners)
    chosen_names = {e.score.table for e in chosen}
    for e in queue:
        name = e.score.table
        if name in ran:
            outcomes.append(ran[name])
        elif not e.has_work:
            outcomes.append(TableOutcome(name, e.rank, e, "nothing to do"))
        elif dry_run and name in chosen_names:
            outcomes.append(TableOutcome(name, e.rank, e, "planned"))
        else:
            outcomes.append(TableOutcome(name, e.rank, e, "deferred", deferred_reason="max tables"))
    ordered = sorted(outcomes, key=lambda o: (o.entry is None, o.rank, o.table))
    unopened = iter(range(len(queue) + 1, len(ordered) + 1))
    final = tuple(
        o if o.entry is not None else TableOutcome(o.table, next(unopened), None, o.status, (), o.error, o.error_code)
        for o in ordered
    )
    return MaintenanceReport(
        final,
        dry_run,
        seconds,
        max_tables,
        tuple(wanted or ACTIONS),
        pool_size,
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        time.monotonic() - began,
        tuple(history_of(previous)),
        trends,
    )
