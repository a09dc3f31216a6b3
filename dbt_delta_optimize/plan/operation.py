"""What a plan does, as one typed value: compact, Z-order, liquid, purge or auto compaction.

The value decides what the commit records (delta-spark's ``OPTIMIZE`` or ``REORG`` and their
``operationParameters``), whether the rewrite clusters, and what the metrics report. Pure data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ..delta.file_table import RawKey
from .curve import ClusteringSpec

__all__ = [
    "OPTIMIZE",
    "REARRANGING_OPERATIONS",
    "REORG",
    "AutoCompact",
    "Compact",
    "Kind",
    "Liquid",
    "Operation",
    "Purge",
    "ZOrder",
]

#: The commit operation names of the commits that only rearrange data (every action dataChange=false): OPTIMIZE
#: (compaction, Z-order, liquid, auto compaction) and REORG (purge). The one place these names are written.
OPTIMIZE: Literal["OPTIMIZE"] = "OPTIMIZE"
REORG: Literal["REORG"] = "REORG"
REARRANGING_OPERATIONS = frozenset({OPTIMIZE, REORG})

Kind = Literal["compact", "zorder", "liquid", "purge", "auto"]


def _json(values: tuple[str, ...] | list[str]) -> str:
    return json.dumps(list(values), separators=(",", ":"))


class _Base:
    """What every operation answers; the defaults are a plain compaction's."""

    kind: ClassVar[Kind]
    commit_name: ClassVar[Literal["OPTIMIZE", "REORG"]] = OPTIMIZE

    @property
    def clustering(self) -> ClusteringSpec | None:
        """The clustering the rewrite applies (None: a compaction keeps the rows' order)."""
        return None

    @property
    def mode(self) -> Literal["compaction", "zorder"]:
        """delta-spark's two strategies: bin compaction, or clustering every file of a partition."""
        return "compaction" if self.clustering is None else "zorder"

    def commit_parameters(self, predicates: tuple[str, ...]) -> dict[str, Any]:
        """commitInfo.operationParameters as delta-spark writes them (Catalyst strings, compact JSON)."""
        return {"predicate": _json(predicates), "zOrderBy": "[]", "clusterBy": "[]", "auto": False}


@dataclass(frozen=True)
class Compact(_Base):
    """OPTIMIZE: bin compaction of the small files (and of files with many deleted rows)."""

    kind: ClassVar[Kind] = "compact"


@dataclass(frozen=True)
class ZOrder(_Base):
    """OPTIMIZE ... ZORDER BY: every file of a partition rewritten clustered along a curve."""

    kind: ClassVar[Kind] = "zorder"
    columns: tuple[str, ...]  #: as the caller wrote them (recorded as zOrderBy)
    spec: ClusteringSpec
    full: bool = False  #: also partitions already clustered by the same columns and curve

    @property
    def clustering(self) -> ClusteringSpec | None:
        return self.spec

    def commit_parameters(self, predicates: tuple[str, ...]) -> dict[str, Any]:
        return {**super().commit_parameters(predicates), "zOrderBy": _json(self.columns)}


@dataclass(frozen=True)
class Liquid(_Base):
    """OPTIMIZE of a clustered (CLUSTER BY) table: its files merged into ZCubes along a Hilbert curve."""

    kind: ClassVar[Kind] = "liquid"
    columns: tuple[str, ...]  #: the table's clustering columns (recorded as clusterBy)
    spec: ClusteringSpec
    full: bool = False  #: OPTIMIZE FULL: files clustered by other columns too (recorded as isFull)

    @property
    def clustering(self) -> ClusteringSpec | None:
        return self.spec

    def commit_parameters(self, predicates: tuple[str, ...]) -> dict[str, Any]:
        params = {**super().commit_parameters(predicates), "clusterBy": _json(self.columns)}
        return {**params, "isFull": self.full}  # delta-spark: isFull only for a clustered table


@dataclass(frozen=True)
class Purge(_Base):
    """REORG TABLE ... APPLY (PURGE): every file with deleted rows rewritten, single-file bins kept."""

    kind: ClassVar[Kind] = "purge"
    commit_name: ClassVar[Literal["OPTIMIZE", "REORG"]] = REORG

    def commit_parameters(self, predicates: tuple[str, ...]) -> dict[str, Any]:
        return {"predicate": _json(predicates), "applyPurge": True}  # DeltaOperations.Reorg


@dataclass(frozen=True)
class AutoCompact(_Base):
    """Auto compaction: OPTIMIZE with auto=true over the partitions the decision chose."""

    kind: ClassVar[Kind] = "auto"
    partitions: frozenset[RawKey] | None = None  #: the chosen raw partitions (None: the whole table)

    def commit_parameters(self, predicates: tuple[str, ...]) -> dict[str, Any]:
        return {**super().commit_parameters(predicates), "auto": True}


Operation = Compact | ZOrder | Liquid | Purge | AutoCompact
