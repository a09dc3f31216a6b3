"""What ``maintain``'s state file remembers across runs, for what a table's log cannot say: each run's predicted
and actual seconds per table, its request counts when the actions' metrics give them, and which tables were
deferred, so a table deferred run after run (starved: the budget always went to others) shows its streak.

Pure: a report's JSON in, a run's record out. The state file is the last report; its ``history`` holds the
records of the runs before it and its own (at most ``MAX_RUNS``). A state file written before the history
existed counts as one run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..options.values import metric_int

__all__ = ["MAX_RUNS", "deferral_streak", "history_of", "request_count", "run_record", "runs_of"]

#: Runs kept in the state file (four months of nightly runs).
MAX_RUNS = 120
#: Request-count metrics read as a total, in this order; else every integer metric named ``*request*`` is summed.
_REQUEST_TOTALS = ("numRequests", "requests", "storageRequests", "numStorageRequests", "totalRequests")
_REQUEST_RE = re.compile(r"request", re.IGNORECASE)


def request_count(metrics: Mapping[str, Any] | None) -> int | None:
    """A request count in metrics (a total by name, else the sum of ``*request*`` counts); None when there is none."""
    if not isinstance(metrics, Mapping):
        return None
    for key in _REQUEST_TOTALS:
        if (n := metric_int(metrics.get(key))) is not None:
            return n
    found = [n for k, v in metrics.items() if _REQUEST_RE.search(str(k)) and (n := metric_int(v)) is not None]
    return sum(found) if found else None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _table_record(t: Mapping[str, Any]) -> dict[str, Any]:
    ran = [a for a in t.get("ran") or [] if isinstance(a, Mapping)]
    cost = t.get("cost") if isinstance(t.get("cost"), Mapping) else {}
    out: dict[str, Any] = {"status": t.get("status")}
    if t.get("deferredReason"):
        out["deferredReason"] = t["deferredReason"]
    predicted = _number((cost or {}).get("seconds"))
    if predicted is not None and t.get("actions"):
        out["predictedSeconds"] = round(predicted, 3)
    timed = [a for a in ran if a.get("status") in ("done", "failed")]
    if timed:
        out["actualSeconds"] = round(sum(_number(a.get("seconds")) or 0.0 for a in timed), 3)
        out["ranPredictedSeconds"] = round(sum(_number(a.get("predictedSeconds")) or 0.0 for a in timed), 3)
        out["ran"] = [
            {
                "action": a.get("action"),
                "status": a.get("status"),
                "seconds": _number(a.get("seconds")),
                "predictedSeconds": _number(a.get("predictedSeconds")),
            }
            for a in timed
        ]
        counts = [n for a in timed if (n := request_count(a.get("metrics"))) is not None]
        if counts:
            out["requests"] = sum(counts)
    return out


def run_record(report: Mapping[str, Any]) -> dict[str, Any]:
    """One run as the history keeps it: when, and per table its status, predicted and actual seconds (in all and
    per action that ran), requests."""
    tables = [t for t in report.get("tables") or [] if isinstance(t, Mapping) and isinstance(t.get("table"), str)]
    return {
        "generatedAt": report.get("generatedAt"),
        "budgetSeconds": report.get("budgetSeconds"),
        "tables": {t["table"]: _table_record(t) for t in tables},
    }


def history_of(previous: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The runs a previous state file remembers, oldest first (its own included), at most ``MAX_RUNS - 1``."""
    if not isinstance(previous, Mapping):
        return []
    runs = previous.get("history")
    if isinstance(runs, list):
        kept = [dict(r) for r in runs if isinstance(r, Mapping) and isinstance(r.get("tables"), Mapping)]
        return kept[-(MAX_RUNS - 1) :]
    if previous.get("tables") and not previous.get("dryRun"):
        return [run_record(previous)]  # a state file from before the history: the report is one run
    return []


def deferral_streak(runs: Sequence[Mapping[str, Any]], table: str) -> int:
    """How many runs in a row, back from the newest, deferred ``table`` (it had work the budget did not reach)."""
    n = 0
    for run in reversed(runs):
        entry = (run.get("tables") or {}).get(table)
        if not isinstance(entry, Mapping) or entry.get("status") != "deferred":
            break
        n += 1
    return n


def runs_of(runs: Sequence[Mapping[str, Any]], table: str, since: str | None = None) -> list[dict[str, Any]]:
    """``table``'s entries of the runs at or after ``since`` (an ISO date or time), oldest first, with their time."""
    out = []
    for run in runs:
        when = run.get("generatedAt")
        entry = (run.get("tables") or {}).get(table)
        if not isinstance(entry, Mapping) or (since is not None and isinstance(when, str) and when[:10] < since[:10]):
            continue
        out.append({"generatedAt": when, **entry})
    return out
