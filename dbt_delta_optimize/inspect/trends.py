"""A table's last N days, day by day, from one pass over its log's commits (no data file read, no replay per day).

The current snapshot's totals are exact (its live files). The commits of the window are applied once, oldest
first, as changes relative to the state before the window; that state is the current totals less every
change, so each day's numbers are that state plus the changes up to the day's end. A path's state before
the window comes from its first action in the window: a remove (the file was live, its size and stats on the
remove; a remove without stats whose add is older than the window counts as covered, as writers write stats by
default), or an add (a new file, unless it is a re-add: ``dataChange`` false in a commit that removes nothing,
as COMPUTE STATS writes, whose file lacked statistics before).

Tombstones: the bytes of removed files VACUUM has not deleted yet (the log's tombstones, the newest remove per
path, not live again), and when each becomes reclaimable (its ``deletionTimestamp`` plus the table's
``delta.deletedFileRetentionDuration``). A VACUUM (START's cutoff, at its END's time; or the last run from
``vacuum_state.last_vacuum``) deletes the tombstones removed before its cutoff. Deletion-vector files are not
counted. Maintenance seconds are what commits record (``executionTimeMs``, ``endTimeMs - startTimeMs``, a
VACUUM START to END span); requests, a request count in a commit's metrics when one is there.

Days are UTC; a day's state is the state at its end (today's: now).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from ..delta.actions import parse_stats
from ..errors import InvalidConfigError
from ..options import REPORT_OPTIONS
from ..options.values import metric_int
from ..plan.analyze import Leaf, coverage_of
from ..plan.maintenance import MAINTENANCE_OPERATIONS
from ..plan.maintenance_history import request_count

__all__ = [
    "DAY_MS",
    "LogCommit",
    "Totals",
    "TrendInputs",
    "Trends",
    "commit_requests",
    "commit_seconds",
    "daily_trends",
    "trend_window",
]

DAY_MS = 86_400_000
#: The longest window (ten years of days: a longer one is a typo, and costs a list per day).
MAX_TREND_DAYS = 3650


@dataclass(frozen=True)
class LogCommit:
    """One commit of the window: its version, its time (ms, in-commit timestamp or commitInfo's or the file's)."""

    version: int
    timestamp: int
    actions: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Totals:
    """The live files at one moment: count, bytes, files under the small-file threshold, files lacking stats."""

    files: int
    bytes: int
    small: int
    lacking: int

    def __add__(self, o: Totals) -> Totals:
        return Totals(self.files + o.files, self.bytes + o.bytes, self.small + o.small, self.lacking + o.lacking)

    def __sub__(self, o: Totals) -> Totals:
        return Totals(self.files - o.files, self.bytes - o.bytes, self.small - o.small, self.lacking - o.lacking)


_ZERO = Totals(0, 0, 0, 0)


@dataclass(frozen=True)
class TrendInputs:
    """What the log's pass needs besides the window's commits."""

    now_ms: int
    days: int
    current: Totals  #: the snapshot's live files
    small_below: int  #: a file smaller than this is small (optimize.minFileSize)
    retention_ms: int  #: the table's delta.deletedFileRetentionDuration
    leaves: Sequence[Leaf] = ()  #: the stats columns a file's stats must cover
    #: (path, size, deletionTimestamp) of the log's tombstones (checkpoint and commits), besides the window's removes
    tombstones: Sequence[tuple[str, int, int]] = ()
    live_paths: frozenset[str] = frozenset()  #: tombstoned paths (decoded) that are live now
    vacuums: Sequence[tuple[int, int]] = ()  #: (time, cutoff) of VACUUM runs the window's commits do not show
    since_ms: int | None = None  #: the state is known from this time on (None: the whole window)


@dataclass(frozen=True)
class Trends:
    """Daily points (oldest first) and the tombstones' reclaim schedule; ``to_dict`` is the JSON form."""

    days: int
    retention_ms: int
    daily: tuple[Mapping[str, Any], ...]
    upcoming: tuple[Mapping[str, Any], ...]  #: {date, bytes, files}: retained bytes that become reclaimable that day
    commits_read: int
    since: str | None
    has_requests: bool
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        last = self.daily[-1] if self.daily else {}
        nxt = self.upcoming[0] if self.upcoming else None
        return {
            "days": self.days,
            "from": self.daily[0]["date"] if self.daily else None,
            "to": last.get("date"),
            "knownSince": self.since,
            "retentionMs": self.retention_ms,
            "commitsRead": self.commits_read,
            "daily": [dict(d) for d in self.daily],
            "retainedBytes": last.get("retainedBytes"),
            "reclaimableBytes": last.get("reclaimableBytes"),
            "upcoming": [dict(u) for u in self.upcoming],
            "nextReclaim": dict(nxt) if nxt else None,
            "requestsKnown": self.has_requests,
            **self.extra,
        }


def trend_window(days: Any) -> int:
    """The trend window in days: ``days`` (a whole number from 1 to ``MAX_TREND_DAYS``) or ``trend_days``'s default."""
    option = next(o for o in REPORT_OPTIONS if o.name == "trend_days")
    if days is None:
        return int(option.default)
    n = int(option.parse(days))
    if n > MAX_TREND_DAYS:
        raise InvalidConfigError(f"trend_days must be at most {MAX_TREND_DAYS}, got {days!r}.")
    return n


# --------------------------------------------------------------------------- one commit's numbers


def _info(actions: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    return info if isinstance(info, Mapping) else {}


def _metrics(info: Mapping[str, Any]) -> Mapping[str, Any]:
    m = info.get("operationMetrics")
    return m if isinstance(m, Mapping) else {}


def commit_seconds(info: Mapping[str, Any]) -> float | None:
    """The seconds a commit's metrics record (executionTimeMs or delta-rs's execution_time_ms, else endTimeMs -
    startTimeMs); None if none."""
    metrics = _metrics(info)
    ms = metric_int(metrics.get("executionTimeMs"))
    ms = ms if ms is not None else metric_int(metrics.get("execution_time_ms"))  # delta-rs's name
    start, end = metric_int(metrics.get("startTimeMs")), metric_int(metrics.get("endTimeMs"))
    if ms is None and start is not None and end is not None and end >= start:
        ms = end - start
    return ms / 1000 if ms is not None and ms >= 0 else None


def commit_requests(metrics: Mapping[str, Any]) -> int | None:
    """A request count in a commit's operation metrics (``maintenance_history.request_count``); None if none."""
    return request_count(metrics)


def _retention_param(info: Mapping[str, Any]) -> int | None:
    params = info.get("operationParameters")
    params = params if isinstance(params, Mapping) else {}
    return metric_int(params.get("specifiedRetentionMillis", params.get("defaultRetentionMillis")))


# --------------------------------------------------------------------------- the files' pass
_State = tuple[int, bool] | None  #: a path's (size, stats cover the stats columns), None: not live


def _covered(stats: Any, leaves: Sequence[Leaf]) -> bool:
    if not stats or not isinstance(stats, str):
        return False
    return coverage_of(parse_stats(stats), leaves) is None


def _before(
    remove: Mapping[str, Any] | None, add: Mapping[str, Any] | None, reset: bool, op: Any, leaves: Any
) -> _State:
    """A path's state before the window, from its first action in it (see the module doc)."""
    if remove is not None:
        size = metric_int(remove.get("size")) or (metric_int(add.get("size")) if add is not None else None) or 0
        if "stats" in remove:
            return size, _covered(remove.get("stats"), leaves)
        return size, _covered(add.get("stats"), leaves) if add is not None else True
    if add is not None and reset:
        return metric_int(add.get("size")) or 0, False if op == "COMPUTE STATS" else _covered(add.get("stats"), leaves)
    return None


def _key(path: Any) -> str:
    text = str(path)
    return unquote(text) if "%" in text else text


class _Files:
    """The live files' change since the state before the window (files, bytes, small, lacking stats), and
    each touched path's state; plain integers, as a window can hold hundreds of thousands of actions."""

    def __init__(self, inputs: TrendInputs) -> None:
        self.inputs = inputs
        self.state: dict[str, _State] = {}
        self.counts = [0, 0, 0, 0]

    @property
    def change(self) -> Totals:
        return Totals(*self.counts)

    def _count(self, state: _State, sign: int) -> None:
        if state is not None:
            size, covered = state
            c = self.counts
            c[0] += sign
            c[1] += sign * size
            c[2] += sign * (size < self.inputs.small_below)
            c[3] += sign * (not covered)

    def apply(self, actions: Sequence[Mapping[str, Any]], op: Any) -> None:
        removes: dict[str, Mapping[str, Any]] = {}
        adds: dict[str, Mapping[str, Any]] = {}
        for a in actions:
            if (r := a.get("remove")) is not None and isinstance(r, Mapping) and "path" in r:
                removes[_key(r["path"])] = r
            elif (ad := a.get("add")) is not None and isinstance(ad, Mapping) and "path" in ad:
                adds[_key(ad["path"])] = ad
        leaves, state = self.inputs.leaves, self.state
        for path in removes.keys() | adds.keys():
            add = adds.get(path)
            if path in state:
                old = state[path]
            else:
                reset = not removes and add is not None and add.get("dataChange", True) is False
                old = _before(removes.get(path), add, reset, op, leaves)
            new: _State = (
                (metric_int(add.get("size")) or 0, _covered(add.get("stats"), leaves)) if add is not None else None
            )
            self._count(old, -1)
            self._count(new, 1)
            state[path] = new


# --------------------------------------------------------------------------- days
def _day_ends(now_ms: int, days: int, last_ts: int) -> tuple[list[str], list[int]]:
    first = now_ms // DAY_MS - (days - 1)
    dates = [
        datetime.date.fromordinal(datetime.date(1970, 1, 1).toordinal() + first + i).isoformat() for i in range(days)
    ]
    ends = [(first + i + 1) * DAY_MS for i in range(days)]
    ends[-1] = max(now_ms, last_ts)  # today: now (or the newest commit, if a clock ran ahead)
    return dates, ends


def _date(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).date().isoformat()


@dataclass
class _Day:
    change: Totals = _ZERO
    commits: int = 0
    maintenance: int = 0
    seconds: float = 0.0
    requests: int = 0
    has_requests: bool = False


def _walk(commits: Sequence[LogCommit], inputs: TrendInputs, ends: Sequence[int]) -> tuple[list[_Day], Totals, Any]:
    """One pass: each day's change since the state before the window, its commits, seconds and requests; the
    total change; and the VACUUM runs the commits show ((time, cutoff))."""
    files = _Files(inputs)
    days = [_Day() for _ in ends]
    vacuums: list[tuple[int, int]] = []
    removes: list[tuple[str, int, int]] = []
    start: tuple[int, int | None] | None = None
    d, last = 0, None
    for c in sorted(commits, key=lambda c: c.version):
        ts = c.timestamp if last is None else max(c.timestamp, last)  # timestamps never go back in version order
        last = ts
        while d < len(ends) - 1 and ends[d] < ts:
            days[d].change = files.change
            d += 1
        info = _info(c.actions)
        op = info.get("operation")
        files.apply(c.actions, op)
        for a in c.actions:
            if (r := a.get("remove")) is not None and isinstance(r, Mapping) and "path" in r:
                removes.append(
                    (str(r["path"]), metric_int(r.get("size")) or 0, metric_int(r.get("deletionTimestamp")) or ts)
                )
        day = days[d]
        day.commits += 1
        seconds = commit_seconds(info)
        if op == "VACUUM START":
            retention = _retention_param(info)
            start = (ts, ts - retention if retention is not None else None)
        elif op == "VACUUM END" and start is not None:
            params = info.get("operationParameters")
            status = params.get("status") if isinstance(params, Mapping) else None
            if start[1] is not None and status in (None, "COMPLETED"):
                vacuums.append((ts, start[1]))
            seconds = seconds if seconds is not None else max(0.0, (ts - start[0]) / 1000)
            start = None
        if op in MAINTENANCE_OPERATIONS:
            day.maintenance += 1
            day.seconds += seconds or 0.0
        if (n := commit_requests(_metrics(info))) is not None:
            day.requests += n
            day.has_requests = True
    for rest in days[d:]:
        rest.change = files.change
    return days, files.change, (vacuums, removes)


# --------------------------------------------------------------------------- tombstones
def _tombstones(inputs: TrendInputs, window_removes: Sequence[tuple[str, int, int]]) -> tuple[Any, Any]:
    """Per removed path not live now: (newest deletion time, size), as numpy arrays."""
    import numpy as np

    newest: dict[str, tuple[int, int]] = {}
    for path, size, ts in (*inputs.tombstones, *window_removes):
        key = unquote(path) if "%" in path else path
        if key in inputs.live_paths:
            continue
        had = newest.get(key)
        if had is None or ts > had[0]:
            newest[key] = (ts, size or (had[1] if had else 0))
    pairs = list(newest.values())
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def _vacuumed_at(deleted: Any, vacuums: Sequence[tuple[int, int]]) -> Any:
    """When each tombstone's file was deleted: the first VACUUM whose cutoff is after its removal (else never)."""
    import numpy as np

    at = np.full(len(deleted), np.iinfo(np.int64).max, np.int64)
    for when, cutoff in vacuums:
        at = np.where(deleted < cutoff, np.minimum(at, when), at)
    return at


def _upcoming(deleted: Any, sizes: Any, gone: Any, now: int, retention: int) -> list[dict[str, Any]]:
    """Retained now and not yet reclaimable: bytes and files per UTC date on which they become reclaimable."""
    waiting = (deleted <= now) & (gone > now) & (deleted + retention >= now)
    by: dict[str, list[int]] = {}
    for ts, size in zip((deleted[waiting] + retention).tolist(), sizes[waiting].tolist()):
        entry = by.setdefault(_date(ts), [0, 0])
        entry[0] += size
        entry[1] += 1
    return [{"date": k, "bytes": v[0], "files": v[1]} for k, v in sorted(by.items())]


# --------------------------------------------------------------------------- the trends
def daily_trends(commits: Sequence[LogCommit], inputs: TrendInputs) -> Trends:
    """The daily series of the window from its commits (ascending or not) and the inputs (see the module doc)."""
    if inputs.days < 1:
        raise ValueError(f"days must be >= 1, got {inputs.days}")
    last_ts = max((c.timestamp for c in commits), default=inputs.now_ms)
    dates, ends = _day_ends(inputs.now_ms, inputs.days, last_ts)
    days, total, (vacuums, removes) = _walk(commits, inputs, ends)
    before = inputs.current - total
    deleted, sizes = _tombstones(inputs, removes)
    gone = _vacuumed_at(deleted, [*inputs.vacuums, *vacuums])
    retention = inputs.retention_ms
    has_requests = any(day.has_requests for day in days)
    daily = []
    for date, end, day in zip(dates, ends, days):
        point: dict[str, Any] = {"date": date}
        known = inputs.since_ms is None or end >= inputs.since_ms
        if known:
            t = before + day.change
            files = max(0, t.files)
            alive = (deleted <= end) & (gone > end)
            point.update(
                files=files,
                bytes=max(0, t.bytes),
                smallFiles=max(0, t.small),
                statsCoverage=round(1.0 - max(0, t.lacking) / files, 4) if files else 1.0,
                retainedBytes=int(sizes[alive].sum()),
                retainedFiles=int(alive.sum()),
                reclaimableBytes=int(sizes[alive & (deleted + retention < end)].sum()),
            )
        else:
            point.update(files=None, bytes=None, smallFiles=None, statsCoverage=None)
            point.update(retainedBytes=None, retainedFiles=None, reclaimableBytes=None)
        point.update(commits=day.commits, maintenanceCommits=day.maintenance, maintenanceSeconds=round(day.seconds, 3))
        point["requests"] = day.requests if has_requests else None
        daily.append(point)
    return Trends(
        inputs.days,
        retention,
        tuple(daily),
        tuple(_upcoming(deleted, sizes, gone, ends[-1], retention)),
        len(commits),
        _date(inputs.since_ms) if inputs.since_ms is not None else None,
        has_requests,
    )
