"""Z-order and Hilbert clustering: column validation, curve keys, and incremental skipping.

As in delta-spark, each clustering column is mapped to a sampled range id in [0, numRanges)
(nulls to 0), the ids are combined along a space-filling curve, and each partition is
range-partitioned on (key, noise byte) into max(1, bytes / maxFileSize) files. Differences on
purpose: one sampling job covers every column (delta-spark runs one per column), the range id
is a Spark expression (a balanced comparison tree over the sampled bounds, no Python UDF),
Hilbert is offered for 2-9 columns, and files we write are tagged so a later run can skip
partitions that are already clustered the same way (delta-spark's Z-order is not incremental).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping, Sequence

from .actions import AddFile
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "CURVE_TAG",
    "COLUMNS_TAG",
    "ClusteringSpec",
    "Curve",
    "add_curve_keys",
    "already_clustered",
    "cluster",
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
_SAMPLE_POINTS_PER_RANGE = 100  # Spark's rangeExchange.sampleSizePerPartition default
_MAX_SAMPLE = 1_000_000


@dataclass(frozen=True)
class ClusteringSpec:
    """How a partition is clustered: resolved column paths, curve and delta-spark's MDC settings."""

    columns: tuple[tuple[str, ...], ...]
    curve: Curve = "zorder"
    num_ranges: int = 1000
    add_noise: bool = True
    sort_within_files: bool = False

    def __post_init__(self) -> None:
        # Checked here so a bad spec fails before any partition is read (not inside a bin job).
        if not self.columns:
            raise InvalidArgumentError("Cannot cluster by zero columns.")
        if self.curve not in ("zorder", "hilbert"):
            raise InvalidArgumentError(f"curve must be 'zorder' or 'hilbert', got {self.curve!r}.")
        if self.num_ranges < 2:
            raise InvalidArgumentError(f"spark.databricks.io.skipping.mdc.rangeId.max must be > 1, got {self.num_ranges}.")
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
        return {COLUMNS_TAG: json.dumps(self.column_names), CURVE_TAG: self.effective_curve}

    @property
    def bits(self) -> int:
        """Bits per range id: enough for ids in [0, num_ranges)."""
        return max(1, math.ceil(math.log2(self.num_ranges)))


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


def _stats_leaf_paths(schema, partition_columns, configuration) -> set[tuple[str, ...]]:
    from .stats import stats_columns

    out: set[tuple[str, ...]] = set()

    def walk(fields, prefix):
        for f in fields:
            if f.is_struct:
                walk(f.children or (), prefix + (f.logical_name,))
            elif f.has_min_max:
                out.add(tuple(p.lower() for p in prefix + (f.logical_name,)))

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


# ------------------------------------------------------------------ Spark side
def _col_sql(path: tuple[str, ...]) -> str:
    return ".".join("`" + p.replace("`", "``") + "`" for p in path)


def _col(path: tuple[str, ...]) -> "Column":
    from pyspark.sql import functions as F

    return F.col(_col_sql(path))


def _sort_key_sql(path: tuple[str, ...], dtype: Any) -> str:
    """An orderable SQL expression with plain literals: dates and timestamps become integers."""
    c = _col_sql(path)
    if dtype == "date":
        return f"unix_date({c})"
    if dtype == "timestamp":
        return f"unix_micros({c})"
    if dtype == "timestamp_ntz":
        return f"unix_micros(CAST({c} AS TIMESTAMP))"
    return c


def _literal(value: Any) -> str:
    import decimal

    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"{value}L"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return f"CAST('{value}' AS DOUBLE)"
        return f"{value!r}D"
    if isinstance(value, decimal.Decimal):
        return f"{value}BD"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise InvalidArgumentError(f"cannot cluster on values of type {type(value).__name__}")


def _bucket_sql(key: str, bounds: Sequence[Any]) -> str:
    """Range id of ``key``: a binary search over the sorted bounds (log2(n) steps a row).

    Written as an ``aggregate`` over a constant bounds array, so the expression stays small
    whatever the number of ranges (a CASE tree of 1000 leaves is slow to compile and run).
    """
    n = len(bounds)
    steps = max(1, math.ceil(math.log2(n + 1)))
    arr = "array(" + ", ".join(_literal(b) for b in bounds) + ")"
    # Lambda variables shadow columns of the same name, so they must not collide with user
    # columns referenced by ``key`` (a data column named ``a`` or ``i`` broke the expression).
    s = "__ddo_bs"
    mid = f"shiftright({s}.lo + {s}.hi, 1)"
    return (
        f"aggregate(sequence(1, {steps}), named_struct('lo', 0, 'hi', {n}), ({s}, __ddo_bi) -> "
        f"IF({s}.lo >= {s}.hi, {s}, IF({key} <= element_at({arr}, {mid} + 1), "
        f"named_struct('lo', {s}.lo, 'hi', {mid}), named_struct('lo', {mid} + 1, 'hi', {s}.hi))), {s} -> {s}.lo)"
    )


def _sort_keys(df: "DataFrame", spec: ClusteringSpec) -> list[str]:
    keys = []
    for path in spec.columns:
        dtype = df.select(_col(path)).schema.fields[0].dataType.typeName()
        keys.append(_sort_key_sql(path, dtype))
    return keys


def _sample(df: "DataFrame", keys: Sequence[str], spec: ClusteringSpec, total_rows: int | None) -> list[list[Any]]:
    """One sampling job for every column (delta-spark runs one per column)."""
    target = min(_MAX_SAMPLE, _SAMPLE_POINTS_PER_RANGE * spec.num_ranges)
    sampled = df.selectExpr(*[f"{k} AS c{i}" for i, k in enumerate(keys)])
    if total_rows is None:
        # Files without numRecords stats: count first (cheap, from Parquet footers), otherwise the
        # whole partition would be collected to the driver instead of a sample.
        total_rows = df.count()
    if total_rows > target:
        sampled = sampled.sample(withReplacement=False, fraction=min(1.0, 1.2 * target / total_rows), seed=17)
    rows = sampled.collect()
    out = []
    for i in range(len(keys)):
        values = [r[i] for r in rows if r[i] is not None]
        values = [v for v in values if not (isinstance(v, float) and v != v)]  # NaN sorts last: keep it in the top range
        out.append(sorted(values))
    return out


def _hilbert_columns(df: "DataFrame", id_names: Sequence[str], bits: int) -> tuple["DataFrame", list[str]]:
    """Add transposed Hilbert coordinates as int columns (their interleaved bits are the Hilbert index)."""
    from pyspark.sql import functions as F

    n = len(id_names)
    steps = (bits - 1) * n
    x0, xi = "element_at(x, 1)", f"element_at(x, (k % {n}) + 1)"
    q = f"shiftleft(1, {bits - 1} - div(k, {n}))"
    p = f"({q} - 1)"
    cond = f"(({xi} & {q}) != 0)"
    t = f"(({x0} ^ {xi}) & {p})"
    init = "array(" + ", ".join(f"CAST(`{c}` AS INT)" for c in id_names) + ")"
    undo = (
        f"aggregate(sequence(0, {steps - 1}), {init}, (x, k) -> transform(x, (v, j) -> "
        f"CASE WHEN j = 0 THEN (CASE WHEN {cond} THEN {x0} ^ {p} ELSE {x0} ^ {t} END) "
        f"WHEN j = (k % {n}) THEN (CASE WHEN {cond} THEN v ELSE v ^ {t} END) ELSE v END))"
        if steps > 0
        else init
    )
    df = df.withColumn("__ddo_hu", F.expr(undo))
    df = df.withColumn("__ddo_hg", F.expr("transform(__ddo_hu, (v, j) -> aggregate(slice(__ddo_hu, 1, j + 1), 0, (a, e) -> a ^ e))"))
    fold = (
        f"aggregate(sequence(1, {max(1, bits - 1)}), 0, (a, s) -> CASE WHEN s < {bits} AND "
        f"(element_at(__ddo_hg, {n}) & shiftleft(1, s)) != 0 THEN a ^ (shiftleft(1, s) - 1) ELSE a END)"
    )
    df = df.withColumn("__ddo_ht", F.expr(fold))
    names = [f"__ddo_h{i}" for i in range(n)]
    for i, name in enumerate(names):
        df = df.withColumn(name, F.expr(f"element_at(__ddo_hg, {i + 1}) ^ __ddo_ht"))
    return df.drop("__ddo_hu", "__ddo_hg", "__ddo_ht"), names


def add_curve_keys(df: "DataFrame", id_names: Sequence[str], spec: ClusteringSpec) -> tuple["DataFrame", list[str]]:
    """Append the curve key of the int range-id columns ``id_names`` as 62-bit long columns.

    The key bits are the curve's index bits, most significant first, split into chunks of 62 so
    any number of columns orders correctly when the chunks are compared left to right.
    """
    from pyspark.sql import functions as F

    names = list(id_names)
    bits = spec.bits
    if spec.effective_curve == "hilbert":
        if len(names) > MAX_HILBERT_COLUMNS:
            raise InvalidArgumentError(
                f"Hilbert clustering takes at most {MAX_HILBERT_COLUMNS} columns, got {len(names)}; use curve='zorder'."
            )
        df, names = _hilbert_columns(df, names, bits)
    seq = [(i, b) for b in range(bits - 1, -1, -1) for i in range(len(names))]
    key_names = []
    for k, start in enumerate(range(0, len(seq), 62)):
        expr = F.lit(0).cast("long")
        for i, b in seq[start : start + 62]:
            expr = F.shiftleft(expr, 1).bitwiseOR(F.shiftright(F.col(names[i]), b).bitwiseAND(1).cast("long"))
        key_names.append(f"__ddo_key{k}")
        df = df.withColumn(key_names[-1], expr)
    if names != list(id_names):
        df = df.drop(*names)
    return df, key_names


def cluster(
    spark: "SparkSession", df: "DataFrame", approx_num_files: int, spec: ClusteringSpec, total_rows: int | None = None
) -> "DataFrame":
    """Range-partition ``df`` along the curve into about ``approx_num_files`` partitions (one shuffle)."""
    from pyspark.sql import functions as F

    keys = _sort_keys(df, spec)
    samples = _sample(df, keys, spec, total_rows)
    id_names = [f"__ddo_id{i}" for i in range(len(spec.columns))]
    data_cols = list(df.columns)
    with_ids = df
    for i, (key, values) in enumerate(zip(keys, samples)):
        bounds = range_bounds(values, spec.num_ranges)
        rid = f"CASE WHEN {key} IS NULL THEN 0 ELSE {_bucket_sql(key, bounds)} END" if bounds else "0"
        with_ids = with_ids.withColumn(id_names[i], F.expr(rid).cast("int"))
    keyed, key_names = add_curve_keys(with_ids, id_names, spec)
    keyed = keyed.select(*[_col((c,)) for c in data_cols], *[F.col(n) for n in key_names])
    order = [F.col(n) for n in key_names]
    if spec.add_noise:
        keyed = keyed.withColumn("__ddo_noise", (F.rand() * 255 - 128).cast("byte"))
        out = keyed.repartitionByRange(max(1, approx_num_files), *order, F.col("__ddo_noise")).drop("__ddo_noise")
    else:
        out = keyed.repartitionByRange(max(1, approx_num_files), *order)
    if spec.sort_within_files:
        out = out.sortWithinPartitions(*order)
    return out.drop(*key_names)
