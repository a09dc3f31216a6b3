"""Which commits a write's run made: the input of the auto-compaction hook.

A dbt model's run may commit many times (a microbatch backfill commits once per batch, the first batch
of a new table as ``CREATE OR REPLACE TABLE AS SELECT``), and the post-hook runs once, after the last
commit. Every commit of the run is the hook's trigger, found from what is known, best first:

* ``pinned``: the version the pre-hook saw before the run (``-1``: there was no table yet, so every
  commit from version 0 on is the run's);
* ``started``: the commits stamped at or after the dbt invocation's start (``run_started_at``);
* ``latest``: neither is known: the latest commit only (a caller outside dbt's hooks).

Another writer's commit in that window is not the model's: the run writes through one engine, so a data
commit whose ``engineInfo`` differs from the one of the run's latest data commit is listed as not counted
and its partitions are not compacted for it. A writer on the very same engine cannot be told apart by
the log and is counted (compacting its partitions changes no row). Pure: the callers read the commits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Basis", "RunCommits", "commit_time_ms", "run_commits", "to_epoch_ms"]

#: How the run's first commit was found.
Basis = Literal["pinned", "started", "latest"]

#: Operations that rearrange files (OPTIMIZE, REORG): in the window, never a trigger (``trigger_skip``).
_REARRANGING = frozenset({"OPTIMIZE", "REORG"})


def to_epoch_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of a datetime (naive: UTC), an ISO string, or a number (ms); None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise TypeError(f"not a time: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1000)
    raise TypeError(f"not a time: {value!r}")


def commit_time_ms(info: Mapping[str, Any]) -> int | None:
    """A commit's time as its writer stamped it: ``inCommitTimestamp``, else ``timestamp`` (commitInfo or
    a ``DESCRIBE HISTORY`` row)."""
    for key in ("inCommitTimestamp", "timestamp"):
        try:
            ms = to_epoch_ms(info.get(key))
        except (TypeError, ValueError):
            ms = None
        if ms is not None:
            return ms
    return None


@dataclass(frozen=True)
class RunCommits:
    """The commits counted as the run's (ascending), how they were found, and those left out and why."""

    versions: tuple[int, ...]
    basis: Basis
    reason: str
    data_versions: tuple[int, ...] = ()  #: the counted commits that wrote data (not OPTIMIZE/REORG)
    not_counted: tuple[tuple[int, str], ...] = ()

    @property
    def batches(self) -> int:
        """The run's data commits: one per microbatch batch, one for any other write."""
        return len(self.data_versions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "versions": list(self.versions),
            "count": len(self.data_versions),
            "basis": self.basis,
            "reason": self.reason,
            "notCounted": [{"version": v, "reason": why} for v, why in self.not_counted],
        }


def _operation(info: Mapping[str, Any]) -> str:
    return str(info.get("operation") or "")


def _engine(info: Mapping[str, Any]) -> str:
    return str(info.get("engineInfo") or info.get("clientVersion") or "")


def _window(
    commits: Sequence[tuple[int, Mapping[str, Any]]], since_version: int | None, started_ms: int | None, latest: int
) -> tuple[list[tuple[int, Mapping[str, Any]]], Basis, str]:
    if since_version is not None and since_version <= latest:
        found = "no table" if since_version < 0 else f"version {since_version}"
        reason = f"the pre-hook found {found} before the run: every commit after it is the run's"
        return [c for c in commits if c[0] > since_version], "pinned", reason
    if since_version is not None:  # the pinned version is past the log's end: the table was made anew
        reason = f"the pre-hook's version {since_version} is past the latest {latest}: the table was recreated"
        return list(commits), "pinned", reason
    if started_ms is not None:
        start = dt.datetime.fromtimestamp(started_ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
        window = [c for c in commits if (commit_time_ms(c[1]) or 0) >= started_ms]
        if window:
            return window, "started", f"no pre-hook version: the commits stamped at or after the run's start {start}"
        latest_commit = [c for c in commits if c[0] == latest]
        reason = (
            f"no pre-hook version, and no commit is stamped at or after the run's start {start} (a clock ahead of "
            "the Spark driver's?): the latest commit is taken as the run's"
        )
        return latest_commit, "started", reason
    reason = "neither a pre-hook version nor the run's start is known: the latest commit"
    return [c for c in commits if c[0] == latest], "latest", reason


def run_commits(
    commits: Sequence[tuple[int, Mapping[str, Any]]],
    *,
    latest: int,
    since_version: int | None = None,
    started_ms: int | None = None,
) -> RunCommits:
    """The run's commits among ``commits`` (``(version, commitInfo)``, any order; the callers pass at least
    every commit after ``since_version``, or back to the first one stamped before ``started_ms``)."""
    ordered = sorted(commits, key=lambda c: c[0])
    window, basis, reason = _window(ordered, since_version, started_ms, latest)
    data = [(v, i) for v, i in window if _operation(i) not in _REARRANGING]
    engine = _engine(data[-1][1]) if data else ""
    not_counted: list[tuple[int, str]] = []
    for v, info in data:
        other = _engine(info)
        if engine and other and other != engine:
            not_counted.append((v, f"{_operation(info) or 'a commit'} by {other}, not by the run's engine {engine}"))
    left_out = {v for v, _ in not_counted}
    versions = tuple(v for v, _ in window if v not in left_out)
    data_versions = tuple(v for v, _ in data if v not in left_out)
    return RunCommits(versions, basis, reason, data_versions, tuple(not_counted))
