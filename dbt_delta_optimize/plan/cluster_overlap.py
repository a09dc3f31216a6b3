"""How well a clustered table's files are clustered, from their min/max statistics (no data read).

For each clustered column, the mean number of files whose [min, max] range meets each file's range:
1.0 when ranges are disjoint (a point filter reads one file), the number of files when every file
spans everything. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..delta.snapshot import Snapshot
from .curve import COLUMNS_TAG
from .liquid import clustering_columns, is_clustered_table

__all__ = ["cluster_overlap", "clustered_columns", "parse_stats_json"]


def parse_stats_json(stats: str | None) -> tuple[int | None, dict[str, Any]]:
    """(numRecords, the parsed stats) of a file's stats string; (None, {}) when absent or unreadable."""
    if not stats:
        return None, {}
    try:
        parsed = json.loads(stats)
    except ValueError:
        return None, {}
    if not isinstance(parsed, dict):
        return None, {}
    n = parsed.get("numRecords")
    return (n if isinstance(n, int) and not isinstance(n, bool) else None), parsed


def _overlap_depth(ranges: Sequence[tuple[Any, Any]]) -> float:
    """Mean number of files whose [min, max] intersects each file's (1.0: disjoint ranges)."""
    from bisect import bisect_left, bisect_right

    lows = sorted(lo for lo, _ in ranges)
    highs = sorted(hi for _, hi in ranges)
    n = len(ranges)
    total = 0
    for lo, hi in ranges:
        total += n - (n - bisect_right(lows, hi)) - bisect_left(highs, lo)
    return total / n if n else 1.0


def clustered_columns(snapshot: Snapshot) -> list[str]:
    """Liquid clustering columns, else the columns files were Z-ordered by (our tag), else none."""
    if is_clustered_table(snapshot.protocol):
        cols = clustering_columns(snapshot)
        if cols:
            return cols
    tags = snapshot.file_table.column("tags")
    if not len(tags):
        return []
    import pyarrow as pa
    import pyarrow.compute as pc

    tagged = pc.map_lookup(tags, pa.scalar(COLUMNS_TAG, pa.string()), "first").drop_null().to_pylist()
    if not tagged:
        return []
    try:
        cols = json.loads(max(set(tagged)))
    except ValueError:
        return []
    return [str(c) for c in cols] if isinstance(cols, list) else []


def cluster_overlap(snapshot: Snapshot, columns: Sequence[str], stats: Sequence[str | None]) -> float | None:
    """The mean overlap depth of the clustered columns' [min, max] ranges across files (None: no stats)."""
    depths = []
    for col in columns:
        ranges = []
        for s in stats:
            _, parsed = parse_stats_json(s)
            lo, hi = (parsed.get("minValues") or {}).get(col), (parsed.get("maxValues") or {}).get(col)
            if lo is not None and hi is not None and type(lo) is type(hi) and not isinstance(lo, (dict, list)):
                ranges.append((lo, hi))
        if len(ranges) > 1 and len({type(lo) for lo, _ in ranges}) == 1:
            depths.append(_overlap_depth(ranges))
    return round(sum(depths) / len(depths), 3) if depths else None
