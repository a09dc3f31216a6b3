"""A table's trends (``trends.daily_trends``) read from its snapshot: the window's commits, each read once.

The commits are read newest first through one ``LogReads`` (one listing; each commit's actions parsed once and
kept, so the tombstones' replay from the checkpoint reuses those it shares with the window) until the first
commit older than the window, which is not applied: the state after it held when the window began. When the log
holds no such commit (the table is younger than the window, or log retention cleaned older commits up, or the
``max_commits`` cap stopped the read), the days before the oldest commit read are unknown (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..delta.vacuum_log import LogReads, read_tombstones
from ..plan.analyze import named_leaves
from .trends import DAY_MS, LogCommit, Totals, TrendInputs, Trends, daily_trends
from .vacuum_state import last_vacuum, table_retention_ms

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = ["MAX_COMMITS", "commit_time", "table_trends", "window_commits"]

#: Commits read back at most (a table committing every minute has 43,200 in 30 days: the oldest days are then unknown).
MAX_COMMITS = 5000


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def commit_time(actions: Sequence[Mapping[str, Any]], mtime: int | None) -> int:
    """A commit's time: its in-commit timestamp, else commitInfo's timestamp, else its file's modification time."""
    info: Mapping[str, Any] = next((a["commitInfo"] for a in actions if isinstance(a.get("commitInfo"), Mapping)), {})
    found = _int(info.get("inCommitTimestamp")) or _int(info.get("timestamp"))
    return found if found is not None else (mtime or 0)


def window_commits(
    reads: LogReads, version: int, start_ms: int, max_commits: int = MAX_COMMITS
) -> tuple[list[LogCommit], int | None]:
    """The commits at or before ``version`` from ``start_ms`` on (newest first), and the time from which the state
    is known (None: the whole window, as a commit older than it was found)."""
    present = set(reads.listing().commits)
    mtimes = reads.commit_mtimes()
    out: list[LogCommit] = []
    for v in range(version, -1, -1):
        if v not in present or len(out) >= max_commits:
            break  # cleaned up by log retention, or the cap: the state before the oldest read is not known
        actions = reads.actions(v)
        ts = commit_time(actions, mtimes.get(v))
        if ts < start_ms:
            return out, None
        out.append(LogCommit(v, ts, actions))
    return out, (out[-1].timestamp if out else None)  # the oldest read: the state before it is not known


def _live_among(snapshot: Snapshot, paths: set[str]) -> frozenset[str]:
    """Which of ``paths`` (decoded) are live in the snapshot, compared in Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = snapshot.file_table
    if not paths or not len(table):
        return frozenset()
    decoded = table.decoded_paths()
    hits = decoded.filter(pc.is_in(decoded, value_set=pa.array(sorted(paths), pa.string())))
    return frozenset(hits.to_pylist())


def _small(snapshot: Snapshot, below: int) -> int:
    import numpy as np

    table = snapshot.file_table
    if not len(table):
        return 0
    return int(np.count_nonzero(table.column("size").to_numpy(zero_copy_only=False) < below))


def table_trends(
    snapshot: Snapshot,
    *,
    now_ms: int,
    days: int,
    small_below: int,
    lacking: int,
    max_commits: int = MAX_COMMITS,
    reads: LogReads | None = None,
    last_run: Mapping[str, Any] | Literal["read"] | None = "read",
) -> Trends:
    """``daily_trends`` of the snapshot's table over the ``days`` UTC days up to now.

    ``small_below``: the small-file threshold (optimize.minFileSize as the caller resolved it); ``lacking``: the
    live files whose stats do not cover the stats columns (what the caller's statistics coverage counted).
    ``reads`` (made with ``keep_actions``) and ``last_run`` (``vacuum_state.last_vacuum``'s answer): what the
    caller read of the log already; by default they are read here.
    """
    from urllib.parse import unquote

    if reads is None:
        cache = snapshot.log_cache  # a store's load: its listing gave the commits' times, its commits are kept
        if cache is not None and cache.listing.latest == snapshot.version and cache.stamps:
            reads = LogReads.over(cache, keep_actions=True)
        else:
            reads = LogReads(snapshot.storage, snapshot.location, keep_actions=True)
    start = (now_ms // DAY_MS - (days - 1)) * DAY_MS
    commits, since = window_commits(reads, snapshot.version, start, max_commits)
    dead = read_tombstones(reads, snapshot.version)
    window_removed = {
        str(a["remove"]["path"]) for c in commits for a in c.actions if isinstance(a.get("remove"), Mapping)
    }
    paths = {unquote(p) for p in ({t.path for t in dead} | window_removed)}
    last = last_vacuum(snapshot) if last_run == "read" else last_run
    vacuums = []
    if last is not None and isinstance(last.get("deletedBeforeMs"), int):
        vacuums.append((int(last["timestamp"]), int(last["deletedBeforeMs"])))
    inputs = TrendInputs(
        now_ms=now_ms,
        days=days,
        current=Totals(len(snapshot.file_table), snapshot.total_size, _small(snapshot, small_below), lacking),
        small_below=small_below,
        retention_ms=table_retention_ms(snapshot.configuration),
        leaves=[leaf for _, leaf in named_leaves(snapshot)],
        tombstones=[(t.path, t.size, t.deletion_timestamp) for t in dead],
        live_paths=_live_among(snapshot, paths),
        vacuums=vacuums,
        since_ms=since,
    )
    return daily_trends(commits, inputs)
