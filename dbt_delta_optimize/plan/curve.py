"""Clustering specs, pure: which columns (validated against the schema and its stats), which curve,
delta-spark's multi-dimensional clustering settings, the curve math, and the AddFile tags that let a
later run skip partitions already clustered the same way. No Spark: planning uses this."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..delta.actions import AddFile
from ..errors import InvalidArgumentError, InvalidConfigError
from .config import ConfGetter, parse_bool

__all__ = [
    "COLUMNS_TAG",
    "CURVE_TAG",
    "MAX_HILBERT_COLUMNS",
    "ClusteringSpec",
    "Curve",
    "already_clustered",
    "clustering_spec",
    "hilbert_index",
    "interleave_bits",
    "parse_column",
    "range_bounds",
    "resolve_columns",
]

Curve = Literal["zorder", "hilbert"]
COLUMNS_TAG = "dbt_delta_optimize.clusteredBy"
CURVE_TAG = "dbt_delta_optimize.curve"
MAX_HILBERT_COLUMNS = 9


@dataclass(frozen=True)
class ClusteringSpec:
    """How a partition is clustered: resolved column paths, curve and delta-spark's MDC settings."""

    columns: tuple[tuple[str, ...], ...]
    curve: Curve = "zorder"
    num_ranges: int = 1000
    add_noise: bool = True
    sort_within_files: bool = False
    #: a liquid clustered table's own clustering: ZCube tags and clusteringProvider on the output
    liquid: bool = False

    def __post_init__(self) -> None:
        # Checked here so a bad spec fails before any partition is read (not inside a bin job).
        if not self.columns:
            raise InvalidArgumentError("Cannot cluster by zero columns.")
        if self.curve not in ("zorder", "hilbert"):
            raise InvalidArgumentError(f"curve must be 'zorder' or 'hilbert', got {self.curve!r}.")
        if self.num_ranges < 2:
            raise InvalidArgumentError(
                f"spark.databricks.io.skipping.mdc.rangeId.max must be > 1, got {self.num_ranges}."
            )
        if self.effective_curve == "hilbert" and len(self.columns) > MAX_HILBERT_COLUMNS:
            raise InvalidArgumentError(
                f"Hilbert clustering takes at most {MAX_HILBERT_COLUMNS} columns, got {len(self.columns)}; use curve='zorder'."
            )

    @property
    def column_names(self) -> list[str]:
        return [".".join(f"`{p}`" if "." in p else p for p in path) for path in self.columns]

    @property
    def effective_curve(self) -> Curve:
        """delta-spark: Hilbert over one column is Z-order (a plain range sort)."""
        return "zorder" if len(self.columns) == 1 else self.curve

    def tags(self) -> dict[str, str]:
        """The output files' tags; for liquid clustering a new ZCube each call (called once per bin)."""
        if self.liquid:  # delta-spark's ZCubeInfo.toAddFileTags
            return {
                "ZCUBE_ID": str(uuid.uuid4()),
                "ZCUBE_ZORDER_BY": json.dumps(self.column_names, separators=(",", ":")),
            }
        return {COLUMNS_TAG: json.dumps(self.column_names), CURVE_TAG: self.effective_curve}

    @property
    def bits(self) -> int:
        """Bits per range id: enough for ids in [0, num_ranges)."""
        return max(1, (self.num_ranges - 1).bit_length())  # ceil(log2(num_ranges)), exactly


def already_clustered(files: Iterable[AddFile], spec: ClusteringSpec) -> bool:
    """True if every live file of a partition was written clustered by the same columns and curve."""
    tags = spec.tags()
    files = list(files)
    return bool(files) and all(
        f.tags.get(COLUMNS_TAG) == tags[COLUMNS_TAG] and f.tags.get(CURVE_TAG) == tags[CURVE_TAG] for f in files
    )


# ------------------------------------------------------------------ column validation (pure)
def parse_column(name: str) -> tuple[str, ...]:
    """``a.b`` -> ("a", "b"); back-quoted parts keep their dots: ```flat.a``` -> ("flat.a",)."""
    parts: list[str] = []
    buf = ""
    i = 0
    quoted = False
    text = name.strip()
    if not text:
        raise InvalidArgumentError("Empty Z-order column name.")
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "`":
                if i + 1 < len(text) and text[i + 1] == "`":
                    buf += "`"
                    i += 1
                else:
                    quoted = False
            else:
                buf += ch
        elif ch == "`":
            quoted = True
        elif ch == ".":
            parts.append(buf)
            buf = ""
        else:
            buf += ch
        i += 1
    if quoted:
        raise InvalidArgumentError(f"Unbalanced back-quote in column name {name!r}.")
    parts.append(buf)
    if any(not p.strip() for p in parts):
        raise InvalidArgumentError(f"Invalid column name {name!r}.")
    return tuple(p.strip() for p in parts)


def _find(fields: Sequence[Mapping[str, Any]], path: tuple[str, ...]) -> tuple[tuple[str, ...], Any] | None:
    """Resolve a path case-insensitively; returns (canonical path, type)."""
    current = fields
    canon: list[str] = []
    t: Any = None
    for i, part in enumerate(path):
        match = next((f for f in current if f["name"].lower() == part.lower()), None)
        if match is None:
            return None
        canon.append(match["name"])
        t = match["type"]
        if i < len(path) - 1:
            if not (isinstance(t, dict) and t.get("type") == "struct"):
                return None
            current = t["fields"]
    return tuple(canon), t


def _stats_leaf_paths(
    schema: Mapping[str, Any], partition_columns: Sequence[str], configuration: Mapping[str, str]
) -> set[tuple[str, ...]]:
    from ..delta.stats_schema import StatsField, stats_columns

    out: set[tuple[str, ...]] = set()

    def walk(fields: Iterable[StatsField], prefix: tuple[str, ...]) -> None:
        for f in fields:
            if f.is_struct:
                walk(f.children or (), (*prefix, f.logical_name))
            elif f.has_min_max:
                out.add(tuple(p.lower() for p in (*prefix, f.logical_name)))

    walk(stats_columns(schema, partition_columns, configuration), ())
    return out


def resolve_columns(
    columns: Sequence[str],
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    *,
    check_stats: bool = True,
) -> tuple[tuple[str, ...], ...]:
    """Validate Z-order columns like delta-spark, listing every offending column in one error."""
    if not columns:
        raise InvalidArgumentError("Z-order needs at least one column.")
    parts = {p.lower() for p in partition_columns}
    data_fields = [f for f in schema["fields"] if f["name"].lower() not in parts]
    resolved: list[tuple[str, ...]] = []
    missing, partition, unsortable, no_stats = [], [], [], []
    for name in columns:
        path = parse_column(name)
        if len(path) == 1 and path[0].lower() in parts:
            partition.append(name)
            continue
        found = _find(data_fields, path)
        if found is None:
            missing.append(name)
            continue
        canon, t = found
        if not isinstance(t, str) or t in ("binary", "boolean", "variant") or t.startswith("geo"):
            unsortable.append(f"{name} ({t if isinstance(t, str) else t.get('type')})")
            continue
        resolved.append(canon)
    if check_stats and resolved:
        with_stats = _stats_leaf_paths(schema, partition_columns, configuration)
        no_stats = [".".join(p) for p in resolved if tuple(x.lower() for x in p) not in with_stats]
    problems = []
    if missing:
        problems.append(
            f"Z-order column(s) {', '.join(missing)} do not exist in data schema "
            f"[{', '.join(f['name'] for f in data_fields)}]"
        )
    if partition:
        problems.append(
            f"{', '.join(partition)} {'is a partition column' if len(partition) == 1 else 'are partition columns'}: "
            "Z-ordering can only be done on data columns (partitions are already separate files); use WHERE to pick partitions"
        )
    if unsortable:
        problems.append(f"cannot Z-order on {', '.join(unsortable)}: use numeric, string, date or timestamp columns")
    if no_stats:
        problems.append(
            f"Z-ordering on column(s) {', '.join(no_stats)} without collected statistics is useless for data skipping: "
            "raise delta.dataSkippingNumIndexedCols or list them in delta.dataSkippingStatsColumns, "
            "or set spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled=false"
        )
    if problems:
        raise InvalidArgumentError("; ".join(problems) + ". Nothing was written.")
    if len(set(resolved)) != len(resolved):
        raise InvalidArgumentError(f"Duplicate Z-order columns in {list(columns)}.")
    return tuple(resolved)


# ------------------------------------------------------------------ curve math (pure)
def range_bounds(sorted_values: Sequence[Any], num_ranges: int) -> list[Any]:
    """Upper bounds splitting a sorted sample into at most ``num_ranges`` ranges of equal weight.

    With fewer distinct values than ranges every distinct value gets its own id (dense ids),
    like Spark's RangePartitioner.
    """
    if num_ranges < 2:
        raise InvalidArgumentError(f"spark.databricks.io.skipping.mdc.rangeId.max must be > 1, got {num_ranges}.")
    distinct: list[Any] = []
    for v in sorted_values:
        if not distinct or v != distinct[-1]:
            distinct.append(v)
    if len(distinct) <= num_ranges:
        return distinct[:-1]
    n = len(sorted_values)
    bounds: list[Any] = []
    step = n / num_ranges
    target = step
    for i, v in enumerate(sorted_values):
        if i + 1 >= target and (not bounds or v > bounds[-1]):
            bounds.append(v)
            target += step
            if len(bounds) == num_ranges - 1:
                break
    return bounds


def interleave_bits(ids: Sequence[int], bits: int) -> int:
    """Z-value: bits of each id from most significant down, round robin over ids in order."""
    z = 0
    for b in range(bits - 1, -1, -1):
        for v in ids:
            z = (z << 1) | ((v >> b) & 1)
    return z


def hilbert_index(ids: Sequence[int], bits: int) -> int:
    """Hilbert curve index of a point (Skilling's transpose algorithm), as one integer."""
    x = list(ids)
    n = len(x)
    m = 1 << (bits - 1)
    q = m
    while q > 1:  # inverse undo
        p = q - 1
        for i in range(n):
            if x[i] & q:
                x[0] ^= p
            else:
                t = (x[0] ^ x[i]) & p
                x[0] ^= t
                x[i] ^= t
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t = 0
    q = m
    while q > 1:
        if x[n - 1] & q:
            t ^= q - 1
        q >>= 1
    for i in range(n):
        x[i] ^= t
    return interleave_bits(x, bits)


def _conf(get_conf: ConfGetter, key: str, default: str) -> str:
    return get_conf(key) or default


def clustering_spec(
    columns: Sequence[str],
    curve: str,
    *,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    get_conf: ConfGetter,
) -> ClusteringSpec:
    """Validate clustering columns and read delta-spark's multi-dimensional clustering confs."""
    if curve not in ("zorder", "hilbert"):
        raise InvalidConfigError(f"curve must be 'zorder' or 'hilbert', got {curve!r}.")
    check = parse_bool(
        _conf(get_conf, "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled", "true"),
        key="checkStatsCollection",
    )
    resolved = resolve_columns(columns, schema, partition_columns, configuration, check_stats=check)
    key = "spark.databricks.io.skipping.mdc.rangeId.max"
    try:
        num_ranges = int(_conf(get_conf, key, "1000"))
    except ValueError:
        raise InvalidConfigError(f"{key} must be a whole number > 1.") from None
    if num_ranges < 2:
        raise InvalidConfigError(f"{key} must be > 1, got {num_ranges}.")
    return ClusteringSpec(
        resolved,
        "hilbert" if curve == "hilbert" else "zorder",
        num_ranges=num_ranges,
        add_noise=parse_bool(_conf(get_conf, "spark.databricks.io.skipping.mdc.addNoise", "true"), key="mdc.addNoise"),
        sort_within_files=parse_bool(
            _conf(get_conf, "spark.databricks.io.skipping.mdc.sortWithinFiles", "false"), key="mdc.sortWithinFiles"
        ),
    )
