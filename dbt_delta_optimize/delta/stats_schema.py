"""Which columns of a table get per-file statistics (PROTOCOL.md "Per-file Statistics").

delta-spark collects min/max/nullCount for the first ``delta.dataSkippingNumIndexedCols`` (32)
leaf columns, or exactly the columns named in ``delta.dataSkippingStatsColumns``. Planning
(Z-order column checks) and stats writing both need this, so it lives with the protocol.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConfigError

NUM_INDEXED_COLS_KEY = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS_KEY = "delta.dataSkippingStatsColumns"
STRING_PREFIX_KEY = "delta.dataSkippingStringPrefixLength"
COLUMN_MAPPING_MODE_KEY = "delta.columnMapping.mode"
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
DELETION_VECTORS_KEY = "delta.enableDeletionVectors"

DEFAULT_NUM_INDEXED_COLS = 32
#: Session default (spark.databricks.io.skipping.stringPrefixLength); the table property wins.
DEFAULT_STRING_PREFIX_LENGTH = 32
#: delta-spark's session conf (DeltaSQLConf.DATA_SKIPPING_STRING_PREFIX_LENGTH, default 32): the prefix
#: when the table sets no ``delta.dataSkippingStringPrefixLength`` (StatsCollectionUtils precedence).
SESSION_STRING_PREFIX_CONF = "spark.databricks.io.skipping.stringPrefixLength"

INTEGRAL_TYPES = frozenset({"byte", "short", "integer", "long"})
FLOATING_TYPES = frozenset({"float", "double"})
_TEMPORAL = frozenset({"date", "timestamp", "timestamp_ntz"})
ASCII_MAX = "\x7f"

# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatsField:
    """One column of the stats tree: a struct (``children`` set) or a leaf.

    ``name`` is the physical name: the key in the stats JSON and the Parquet column name.
    """

    name: str
    logical_name: str
    type: Any
    children: tuple[StatsField, ...] | None = None

    @property
    def is_struct(self) -> bool:
        return self.children is not None

    @property
    def has_min_max(self) -> bool:
        """delta-spark's SkippingEligibleDataType: numbers, decimals, string, date and timestamps."""
        return _min_max_eligible(self.type)

    @property
    def has_leaf_below(self) -> bool:
        return self.children is None or any(c.has_leaf_below for c in self.children)


def _min_max_eligible(t: Any) -> bool:
    if not isinstance(t, str):
        return False
    return t in INTEGRAL_TYPES or t in FLOATING_TYPES or t in _TEMPORAL or t == "string" or t.startswith("decimal")


def _is_struct_type(t: Any) -> bool:
    return isinstance(t, dict) and t.get("type") == "struct"


def _mapping_on(configuration: Mapping[str, str]) -> bool:
    return (configuration.get(COLUMN_MAPPING_MODE_KEY) or "none").lower() in ("name", "id")


def _to_stats_field(f: Mapping[str, Any], mapping: bool) -> StatsField:
    name = f["name"]
    physical = (f.get("metadata") or {}).get(PHYSICAL_NAME_KEY, name) if mapping else name
    t = f["type"]
    if _is_struct_type(t):
        return StatsField(physical, name, t, tuple(_to_stats_field(c, mapping) for c in t.get("fields", ())))
    return StatsField(physical, name, t)


_IDENT_RE = re.compile(r"\s*(?:`((?:[^`]|``)*)`|([^\s.,`]+))\s*")


def parse_stats_columns(text: str) -> list[tuple[str, ...]]:
    """Parse ``delta.dataSkippingStatsColumns``: comma list of (backtick-quotable) dotted names."""
    if not text.strip():
        return []
    out: list[tuple[str, ...]] = []
    pos, n = 0, len(text)
    while True:
        parts: list[str] = []
        while True:
            m = _IDENT_RE.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"Cannot parse {STATS_COLUMNS_KEY}={text!r} at position {pos}")
            parts.append(m.group(1).replace("``", "`") if m.group(1) is not None else m.group(2))
            pos = m.end()
            if pos < n and text[pos] == ".":
                pos += 1
                continue
            break
        out.append(tuple(parts))
        if pos >= n:
            return out
        if text[pos] != ",":
            raise ValueError(f"Cannot parse {STATS_COLUMNS_KEY}={text!r} at position {pos}")
        pos += 1


def _filter_schema(fields: Sequence[StatsField], paths: Sequence[tuple[str, ...]]) -> tuple[StatsField, ...]:
    """StatisticsCollection.filterSchema: keep the named fields (case-insensitive), in schema order.

    A struct named whole keeps all its leaves, unless it is also named with a sub-path: like
    delta-spark, only the sub-paths then count.
    """
    by_head: dict[str, list[tuple[str, ...]]] = {}
    for p in paths:
        by_head.setdefault(p[0], []).append(p[1:])
    out: list[StatsField] = []
    for f in fields:
        rests = by_head.get(f.logical_name.lower())
        if rests is None:
            continue
        if all(not r for r in rests):
            out.append(f)
        elif f.is_struct:
            out.append(
                StatsField(f.name, f.logical_name, f.type, _filter_schema(f.children or (), [r for r in rests if r]))
            )
    return tuple(out)


def _truncate_schema(fields: Sequence[StatsField], limit: int) -> tuple[tuple[StatsField, ...], int]:
    """StatisticsCollection.truncateSchema: the first ``limit`` leaves, depth first (arrays/maps are leaves)."""
    count, out = 0, []
    for f in fields:
        if count >= limit:
            break
        if f.is_struct:
            sub, n = _truncate_schema(f.children or (), limit - count)
            count += n
            out.append(StatsField(f.name, f.logical_name, f.type, sub))
        else:
            count += 1
            out.append(f)
    return tuple(out), count


def stats_columns(
    schema: Mapping[str, Any], partition_columns: Sequence[str], configuration: Mapping[str, str]
) -> tuple[StatsField, ...]:
    """The stats tree delta-spark collects for: ``dataSkippingStatsColumns`` if set, else the first
    ``dataSkippingNumIndexedCols`` (default 32, negative = all) leaves; partition columns never."""
    mapping = _mapping_on(configuration)
    parts = {p.lower() for p in partition_columns}
    fields = tuple(_to_stats_field(f, mapping) for f in schema.get("fields", ()) if f["name"].lower() not in parts)
    names = configuration.get(STATS_COLUMNS_KEY)
    if names is not None:
        paths = [tuple(p.lower() for p in path) for path in parse_stats_columns(names)]
        return _filter_schema(fields, paths)
    raw = configuration.get(NUM_INDEXED_COLS_KEY)
    limit = int(raw) if raw is not None and str(raw).strip() != "" else DEFAULT_NUM_INDEXED_COLS
    if limit < 0:
        return fields
    return _truncate_schema(fields, limit)[0]


def stats_leaves(
    fields: Sequence[StatsField], prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], StatsField]]:
    for f in fields:
        path = (*prefix, f.name)
        if f.is_struct:
            yield from stats_leaves(f.children or (), path)
        else:
            yield path, f


def session_string_prefix_length(
    configuration: Mapping[str, str], get_conf: Callable[[str], str | None] | None
) -> int | None:
    """The session's ``spark.databricks.io.skipping.stringPrefixLength`` when the table sets no prefix
    (delta-spark's ``getDataSkippingStringPrefixLength``: the table property, then the session conf);
    None: the table's (or the default 32) applies."""
    if get_conf is None or STRING_PREFIX_KEY in configuration:
        return None
    raw = get_conf(SESSION_STRING_PREFIX_CONF)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(
            f"{SESSION_STRING_PREFIX_CONF}={raw!r} is not an integer: set it to a whole number (delta-spark's "
            "default is 32) or unset it."
        ) from None


def configured_string_prefix_length(configuration: Mapping[str, str]) -> int:
    """``delta.dataSkippingStringPrefixLength``, else the session default (32)."""
    raw = configuration.get(STRING_PREFIX_KEY)
    return int(raw) if raw is not None and str(raw).strip() != "" else DEFAULT_STRING_PREFIX_LENGTH
