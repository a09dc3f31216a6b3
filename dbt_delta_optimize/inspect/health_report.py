"""What a health report is: its verdicts and the frozen report (a leaf: ``health`` makes it, ``health_page`` draws it)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMPACT_RECOMMENDED",
    "HEALTHY",
    "HEALTHY_REWRITE_SHARE",
    "LAST_OPTIMIZE_LOOKBACK",
    "NEEDS_OPTIMIZE",
    "HealthReport",
    "Thresholds",
    "Verdict",
]

#: Verdicts. "compact recommended": auto compaction's own rule would fire (many tiny files), so the
#: cheap fix is a compaction with its thresholds; "needs optimize": OPTIMIZE has work auto compaction
#: would not do.
HEALTHY = "healthy"
COMPACT_RECOMMENDED = "compact recommended"
NEEDS_OPTIMIZE = "needs optimize"
#: Below this share of files to rewrite, OPTIMIZE's work is not worth a run on its own.
HEALTHY_REWRITE_SHARE = 0.10
#: Commits searched back for the last OPTIMIZE, so a long log cannot make the report slow.
LAST_OPTIMIZE_LOOKBACK = 1000


def _fresh(value: Any) -> Any:
    """A copy of JSON-shaped data (dicts, lists, tuples of scalars), as ``copy.deepcopy`` makes it but
    without its memo (a third of the time at a million files); anything else deep-copied."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: v if type(v) in _ATOMS else _fresh(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else _fresh(v) for v in value]
    if kind is tuple:
        return tuple(_fresh(v) for v in value)
    return copy.deepcopy(value)


_ATOMS = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class Thresholds:
    """The thresholds that decide "small", as OPTIMIZE and auto compaction resolve them.

    ``sources`` says where each came from ("argument", the session conf key, or "default"), because
    a threshold that silently came from a conf is the usual reason a report surprises.
    """

    optimize_min_file_size: int
    optimize_max_file_size: int
    auto_compact_min_file_size: int
    auto_compact_max_file_size: int
    auto_compact_min_num_files: int
    sources: Mapping[str, str]

    def to_dict(self) -> dict[str, int]:
        return {
            "optimizeMinFileSize": self.optimize_min_file_size,
            "optimizeMaxFileSize": self.optimize_max_file_size,
            "autoCompactMinFileSize": self.auto_compact_min_file_size,
            "autoCompactMaxFileSize": self.auto_compact_max_file_size,
            "autoCompactMinNumFiles": self.auto_compact_min_num_files,
        }


@dataclass(frozen=True)
class Verdict:
    """One word for the table's state, the numbers behind it, and the command that fixes it (if any)."""

    status: str
    reason: str
    command: str | None = None

    @property
    def healthy(self) -> bool:
        return self.status == HEALTHY

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "command": self.command}


@dataclass(frozen=True)
class HealthReport:
    """What ``health_report`` found. ``layout`` is the snapshot's numbers (JSON-shaped, camelCase keys).

    Frozen so a page and a JSON dump made from one report agree; ``to_dict`` returns fresh copies.
    """

    table: str
    version: int
    generated_at: str
    layout: Mapping[str, Any]
    thresholds: Thresholds
    verdict: Verdict
    protocol: Mapping[str, Any]
    auto_compact_enabled: bool
    last_optimize: Mapping[str, Any] | None
    optimize: Mapping[str, Any]
    auto_compact: Mapping[str, Any]
    compare: Mapping[str, Any] | None = None
    #: statistics coverage (``health_stats``): files and columns without stats, stale and costly stats
    statistics: Mapping[str, Any] | None = None
    #: what VACUUM would free (a log-based estimate, no listing) and when it last ran (``vacuum_state``)
    vacuum: Mapping[str, Any] | None = None
    #: the last N days from the log, day by day, and when retained bytes become reclaimable (``table_trends``)
    trends: Mapping[str, Any] | None = None

    def to_dict(self, *, copy: bool = True) -> dict[str, Any]:
        """The JSON form (``--json``): the layout keys plus thresholds, plans, verdict and protocol.

        ``copy=False``: the report's own nested dicts, not copies, for a caller that only reads them (the CLI
        printing them: a copy of a million-file report's plan took 0.2 s); they must not be changed.
        """
        fresh = _fresh if copy else (lambda v: v)

        def section(value: Mapping[str, Any] | None) -> Any:
            return fresh(dict(value)) if value is not None else None

        out: dict[str, Any] = section(self.layout)
        out.update(
            generatedAt=self.generated_at,
            verdict=self.verdict.to_dict(),
            protocol=section(self.protocol),
            autoCompactEnabled=self.auto_compact_enabled,
            lastOptimize=section(self.last_optimize),
            thresholds=self.thresholds.to_dict(),
            thresholdSources=dict(self.thresholds.sources),
            optimize=section(self.optimize),
            optimizeSource="plan_optimize",
            autoCompact=section(self.auto_compact),
            compare=section(self.compare),
            statistics=section(self.statistics),
            vacuum=section(self.vacuum),
            trends=section(self.trends),
        )
        return out
