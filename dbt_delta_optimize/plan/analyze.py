"""Which files ``analyze`` recomputes statistics for: pure planning over a snapshot's live files.

delta-spark's ``StatisticsCollection.recompute`` takes a partition predicate and recomputes every
matching file. We do the same with ``all_files``; by default only the files whose statistics are
missing or do not cover the table's stats columns (``delta.dataSkippingNumIndexedCols`` /
``delta.dataSkippingStatsColumns``, physical names under column mapping) are taken, which is what a
table written with ``dataSkippingNumIndexedCols = 0``, by a converter, or before a stats column was
added needs. The stats JSON we then write is always the whole of delta-spark's for the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..delta.actions import AddFile, parse_stats
from ..delta.stats_schema import StatsField, stats_columns, stats_leaves
from ..errors import InvalidArgumentError
from ..options import ANALYZE_OPTIONS
from .predicate import PartitionSelection, SnapshotLike

__all__ = [
    "FILES_PER_COMMIT",
    "AnalyzePlan",
    "AnalyzeSnapshot",
    "Reason",
    "analyze_parameters",
    "coverage",
    "coverage_of",
    "named_leaves",
    "plan_analyze",
    "required_leaves",
]

#: Files whose new stats one commit carries (a large table's backfill lands in several commits): the
#: ``files_per_commit`` setting's default, declared in options.py.
FILES_PER_COMMIT: int = next(o.default for o in ANALYZE_OPTIONS if o.name == "files_per_commit")

Reason = Literal["missing", "incomplete", "all"]
Leaf = tuple[tuple[str, ...], StatsField]


class AnalyzeSnapshot(SnapshotLike, Protocol):
    """What planning needs of a snapshot beyond partition selection."""

    @property
    def schema(self) -> dict[str, Any]: ...

    @property
    def configuration(self) -> Mapping[str, str]: ...

    @property
    def version(self) -> int: ...

    @property
    def location(self) -> str: ...


def _has(tree: Any, path: tuple[str, ...]) -> bool:
    # dict, not Mapping: parsed JSON is made of dicts, and the ABC check was most of a million files' time
    for name in path:
        if not isinstance(tree, dict) or name not in tree:
            return False
        tree = tree[name]
    return not isinstance(tree, dict)


def _value(tree: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        tree = tree.get(name) if isinstance(tree, dict) else None
    return tree


def _leaf_covered(stats: Mapping[str, Any], path: tuple[str, ...], f: StatsField) -> bool:
    """nullCount always; min and max for types delta-spark bounds, unless every value is null (then
    delta-spark writes none)."""
    if not _has(stats.get("nullCount"), path):
        return False
    if not f.has_min_max:
        return True
    if _has(stats.get("minValues"), path) and _has(stats.get("maxValues"), path):
        return True
    return bool(_value(stats.get("nullCount"), path) == stats.get("numRecords"))


def coverage(stats: str | None, leaves: Sequence[Leaf]) -> Reason | None:
    """Why a file's stats need recomputing for ``leaves`` (None: they cover them)."""
    return coverage_of(parse_stats(stats), leaves)


def coverage_of(parsed: Mapping[str, Any] | None, leaves: Sequence[Leaf]) -> Reason | None:
    """``coverage`` of stats already parsed (``parse_stats``)."""
    if parsed is None or not isinstance(parsed.get("numRecords"), int):
        return "missing"
    return None if all(_leaf_covered(parsed, p, f) for p, f in leaves) else "incomplete"


def _walk(fields: Sequence[StatsField], prefix: tuple[StatsField, ...] = ()) -> list[tuple[str, Leaf]]:
    out: list[tuple[str, Leaf]] = []
    for f in fields:
        chain = (*prefix, f)
        if f.is_struct:
            out.extend(_walk(f.children or (), chain))
        else:
            logical = ".".join(c.logical_name for c in chain)
            out.append((logical, (tuple(c.name for c in chain), f)))
    return out


def named_leaves(snapshot: AnalyzeSnapshot) -> list[tuple[str, Leaf]]:
    """Each stats leaf with its logical dotted name (what ``delta.dataSkippingStatsColumns`` lists)."""
    return _walk(stats_columns(snapshot.schema, snapshot.partition_columns, snapshot.configuration))


def required_leaves(snapshot: AnalyzeSnapshot, columns: Sequence[str] | None = None) -> tuple[Leaf, ...]:
    """The stats leaves (physical path, field) a file's stats must cover; ``columns`` (logical names,
    dotted for nested fields) narrows them, and must name stats columns."""
    named = [(name.lower(), leaf) for name, leaf in named_leaves(snapshot)]
    if not columns:
        return tuple(leaf for _, leaf in named)
    out: list[Leaf] = []
    for column in columns:
        want = column.strip().strip("`").lower()
        hits = [leaf for name, leaf in named if name == want or name.startswith(want + ".")]
        if not hits:
            raise InvalidArgumentError(
                f"Column {column!r} of {snapshot.location} gets no statistics: it is not among the table's stats "
                f"columns ({', '.join(n for n, _ in named) or 'none'}). Add it to the table property "
                "delta.dataSkippingStatsColumns (or raise delta.dataSkippingNumIndexedCols), then run analyze."
            )
        out.extend(h for h in hits if h not in out)
    return tuple(out)


def all_leaves(snapshot: AnalyzeSnapshot) -> tuple[Leaf, ...]:
    return tuple(stats_leaves(stats_columns(snapshot.schema, snapshot.partition_columns, snapshot.configuration)))


@dataclass(frozen=True)
class AnalyzePlan:
    """The files to recompute stats for, in commit batches, and what the commit records."""

    table: str
    read_version: int
    files: tuple[AddFile, ...]
    reasons: Mapping[str, Reason]  #: path -> why
    stats_columns: tuple[str, ...]  #: the physical leaf paths delta-spark collects for, dotted
    predicates: tuple[str, ...]  #: as delta-spark records them (Catalyst strings); () for every partition
    files_considered: int
    files_per_commit: int = FILES_PER_COMMIT

    @property
    def batches(self) -> tuple[tuple[AddFile, ...], ...]:
        n = max(self.files_per_commit, 1)
        return tuple(self.files[i : i + n] for i in range(0, len(self.files), n))

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.reasons.values():
            counts[r] = counts.get(r, 0) + 1
        return {
            "table": self.table,
            "readVersion": self.read_version,
            "filesConsidered": self.files_considered,
            "files": len(self.files),
            "bytes": self.bytes,
            "reasons": counts,
            "commits": len(self.batches),
            "statsColumns": list(self.stats_columns),
            "predicate": list(self.predicates),
            "paths": [f.path for f in self.files[:100]],
        }


def analyze_parameters(predicates: Sequence[str]) -> dict[str, Any]:
    """commitInfo.operationParameters of DeltaOperations.ComputeStats: the predicates as a JSON list of
    Catalyst strings, ``["true"]`` (recompute's default ``Literal(true)``) without one."""
    return {"predicate": json.dumps(list(predicates) or ["true"], separators=(",", ":"))}


def _selected_rows(snapshot: AnalyzeSnapshot, selection: PartitionSelection | None) -> list[int]:
    table = snapshot.file_table
    if selection is None or selection.matched is None:
        return list(range(len(table)))
    codes, keys = table.partition_codes(snapshot.physical_partition_columns)
    wanted = {i for i, k in enumerate(keys) if k in selection.matched}
    return [row for row, code in enumerate(codes.to_pylist()) if code in wanted]


def plan_analyze(
    snapshot: AnalyzeSnapshot,
    *,
    all_files: bool = False,
    selection: PartitionSelection | None = None,
    columns: Sequence[str] | None = None,
    files_per_commit: int = FILES_PER_COMMIT,
) -> AnalyzePlan:
    """The files of the selected partitions whose stats are missing or do not cover the stats columns
    (narrowed to ``columns``), or every one of them with ``all_files``."""
    if files_per_commit < 1:
        raise InvalidArgumentError(f"files_per_commit must be >= 1, got {files_per_commit}.")
    leaves = required_leaves(snapshot, columns)
    rows = _selected_rows(snapshot, selection)
    table = snapshot.file_table
    stats = table.column("stats").to_pylist() if len(table) else []
    reasons: dict[str, Reason] = {}
    chosen: list[int] = []
    for row in rows:
        reason: Reason | None = "all" if all_files else coverage(stats[row], leaves)
        if reason is not None:
            chosen.append(row)
            reasons[table.paths[row]] = reason
    files = tuple(table.files(chosen)) if chosen else ()
    return AnalyzePlan(
        table=snapshot.location,
        read_version=snapshot.version,
        files=files,
        reasons=reasons,
        stats_columns=tuple(".".join(p) for p, _ in all_leaves(snapshot)),
        predicates=(selection.predicate_strings or selection.predicate_sql) if selection is not None else (),
        files_considered=len(rows),
        files_per_commit=files_per_commit,
    )
