"""The maintenance queue: tables ranked by what their work buys per second, with the budget's per-table cap.

Pure: scores in, order out. The same scores give the same order (ties by name); tables with nothing to
do come last, in name order. Aging is in the score (``maintenance.estimate_table``): a table's score
grows with the days since its last maintenance, so a table with little to gain is not passed over
forever by tables that keep gaining more (the starvation users report of quota schedulers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .maintenance import MaintenanceConfig, TableScore

__all__ = ["QueueEntry", "calibration_factors", "queue_of", "table_cap"]


@dataclass(frozen=True)
class QueueEntry:
    """A table's place in the queue."""

    rank: int  #: 1 = run first
    score: TableScore

    @property
    def has_work(self) -> bool:
        return bool(self.score.actions)

    def to_dict(self) -> dict[str, Any]:
        s = self.score
        return {
            "table": s.table,
            "rank": self.rank,
            "actions": [a.action for a in s.actions],
            "score": round(s.score, 9),
            "benefit": s.benefit(),
            "cost": s.cost(),
            "reason": s.reason,
            "waitedDays": s.waited_days,
            "estimates": [a.to_dict() for a in s.actions],
        }


def queue_of(scores: Iterable[TableScore]) -> tuple[QueueEntry, ...]:
    """Tables with work by score (highest first), then those without; ties and the rest by name."""
    ordered = sorted(scores, key=lambda s: (not s.actions, -round(s.score, 12), s.table, s.location))
    return tuple(QueueEntry(i + 1, s) for i, s in enumerate(ordered))


def table_cap(budget: float | None, config: MaintenanceConfig | None = None) -> float | None:
    """The most seconds one table may take of ``budget`` (None: no budget, no cap)."""
    if budget is None:
        return None
    return budget * (config or MaintenanceConfig()).table_share


def calibration_factors(previous: Mapping[str, Any] | None, table: str) -> dict[str, float]:
    """actual / predicted seconds per action from a previous report's JSON: this table's runs, else the
    median over every table's (a table never run before borrows the project's)."""
    if not previous:
        return {}
    own: dict[str, list[float]] = {}
    every: dict[str, list[float]] = {}
    for entry in previous.get("tables") or []:
        for ran in entry.get("ran") or []:
            raw, actual = ran.get("predictedRawSeconds"), ran.get("seconds")
            if ran.get("status") != "done" or not raw or not isinstance(actual, (int, float)) or raw <= 0:
                continue
            factor = float(actual) / float(raw)
            every.setdefault(ran.get("action"), []).append(factor)
            if entry.get("table") == table:
                own.setdefault(ran.get("action"), []).append(factor)
    return {a: _median(own.get(a) or every[a]) for a in every}


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
