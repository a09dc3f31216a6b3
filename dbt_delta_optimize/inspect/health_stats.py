"""Statistics coverage for the health report: which files and columns lack the stats data skipping needs,
which stats are stale after a change of the stats columns, and which cost log bytes for little use.

Files lacking stats for the table's stats columns are what ``analyze`` fixes (the same rule as its plan,
``plan.analyze.coverage``). Stats of a column no longer among the stats columns (stale) are harmless but
bloat the log; a string column whose max is cut at the prefix in most files (long free text) prunes
little, and dropping it from ``delta.dataSkippingStatsColumns`` shrinks every later add.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..delta.stats_schema import STATS_COLUMNS_KEY, configured_string_prefix_length
from ..plan.analyze import named_leaves
from .stats_arrow import Counts, count_arrow, count_python

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = ["LARGE_STATS_BYTES", "statistics_coverage"]

#: Stats bytes per file above which dropping useless stats columns is recommended.
LARGE_STATS_BYTES = 2048
#: Share of files whose string max is truncated for the column to count as free text.
FREE_TEXT_SHARE = 0.5


def _recommendation(table: str, out: Mapping[str, Any], keep: list[str]) -> str | None:
    if out["filesWithoutStats"] or out["filesIncomplete"]:
        return f"dbt-delta-optimize analyze {table}"
    if out["avgStatsBytes"] > LARGE_STATS_BYTES and out["freeTextColumns"]:
        return f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{STATS_COLUMNS_KEY}' = '{','.join(keep)}')"
    return None


def statistics_coverage(snapshot: Snapshot) -> dict[str, Any]:
    """Coverage of the live files' stats against the table's stats columns, and what to do about it."""
    named = named_leaves(snapshot)
    leaves = [leaf for _, leaf in named]
    prefix = configured_string_prefix_length(snapshot.configuration)
    table = snapshot.file_table
    counts = Counts()
    # One checkpoint row group at a time (not the whole column): through Arrow's JSON reader, or each
    # file's stats parsed with json.loads where Arrow could read a chunk differently.
    for column in table.iter_column("stats") if len(table) else ():
        for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else (column,):
            got = count_arrow(chunk, leaves, prefix)
            counts.add(got if got is not None else count_python(chunk.to_pylist(), leaves, prefix))
    pa.default_memory_pool().release_unused()  # the parsed chunks' pages, before the report's later peaks
    missing, incomplete, stats_bytes = counts.missing, counts.incomplete, counts.stats_bytes
    lacking, stale, truncated = counts.lacking, counts.stale, counts.truncated
    n = len(table)
    free_text = sorted(".".join(p) for p, c in truncated.items() if n and c / n >= FREE_TEXT_SHARE)
    out: dict[str, Any] = {
        "numFiles": n,
        "statsColumns": [".".join(p) for p, _ in leaves],
        "filesWithoutStats": missing,
        "filesIncomplete": incomplete,
        "columnsWithoutStats": {".".join(p): c for p, c in sorted(lacking.items())},
        "staleColumns": {".".join(p): c for p, c in sorted(stale.items())},
        "freeTextColumns": free_text,
        "statsBytes": stats_bytes,
        "avgStatsBytes": stats_bytes // n if n else 0,
    }
    keep = [name for name, (p, _) in named if ".".join(p) not in free_text]
    out["recommendation"] = _recommendation(snapshot.location, out, keep)
    return out
