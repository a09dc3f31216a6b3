"""AddFile statistics for a Parquet file we wrote, equal to what delta-spark 4.4 writes.

delta-spark computes a file's stats while writing it (``StatisticsCollection.statsCollector``:
``count(*)``, ``min``/``max`` per stats column with string truncation, ``sum(isNull)`` null counts,
serialised by ``to_json``). Our executor writes compacted files itself, so it rebuilds the same
JSON from the written file's Parquet footer, without a Spark job.

The footer cannot answer everything: Spark writes no statistics for INT96 timestamps (its default
timestamp encoding) nor for chunks whose min+max exceed 4 KiB, column-chunk null counts of an
array/map leaf mix null arrays with empty ones and null elements, and writers other than
parquet-java (pyarrow's parquet-cpp) leave NaN out of float/double bounds, where Spark's max is NaN. ``stats_from_parquet`` (footer
only) leaves such values out, which data skipping reads as "unknown"; ``stats_from_file`` reads just
those columns' data to fill them in, so its output matches delta-spark.

Known differences, both numeric no-ops (readers parse the same values):
* ``-0.0`` vs ``0.0``: Spark keeps whichever zero came first in row order; a footer only knows the
  sign of its min/max, so footer-derived zero bounds may differ in sign (the data path is exact).
* floats/doubles are printed with the shortest-repr rule of JDK >= 19 ``Float/Double.toString``;
  JDK 17's FloatingDecimal sometimes prints more digits for the same value (``1.9999999999999998E23``
  for ``2.0E23``, ``-1.68127662E15`` for float ``-1.6812766E15``; mostly huge integral magnitudes).
  Both parse to the same double/float32.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from ..delta.actions import Protocol

__all__ = [
    "DEFAULT_NUM_INDEXED_COLS",
    "DEFAULT_STRING_PREFIX_LENGTH",
    "StatsField",
    "configured_string_prefix_length",
    "format_date",
    "format_timestamp",
    "format_timestamp_ntz",
    "java_float_string",
    "parse_stats_columns",
    "stats_columns",
    "stats_from_file",
    "stats_from_parquet",
    "truncate_max_string",
    "truncate_min_string",
]

log = logging.getLogger(__name__)

NUM_INDEXED_COLS_KEY = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS_KEY = "delta.dataSkippingStatsColumns"
STRING_PREFIX_KEY = "delta.dataSkippingStringPrefixLength"
COLUMN_MAPPING_MODE_KEY = "delta.columnMapping.mode"
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
DELETION_VECTORS_KEY = "delta.enableDeletionVectors"

DEFAULT_NUM_INDEXED_COLS = 32
#: Session default (spark.databricks.io.skipping.stringPrefixLength); the table property wins.
DEFAULT_STRING_PREFIX_LENGTH = 32

_INTEGRAL = frozenset({"byte", "short", "integer", "long"})
_FLOATING = frozenset({"float", "double"})
_TEMPORAL = frozenset({"date", "timestamp", "timestamp_ntz"})
_ASCII_MAX = "\x7f"
_UTF8_MAX = "\U0010ffff"  # Character.MAX_CODE_POINT, delta-spark's max-string tie-breaker

# Spark < 3.0 "legacy" hybrid-calendar files: values before the Gregorian switch are rebased.
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
_GREGORIAN_START_DAYS = -141427  # 1582-10-15
_GREGORIAN_START_MICROS = _GREGORIAN_START_DAYS * 86_400_000_000
# Writers (FileMetaData.created_by) whose float/double statistics include NaN as the largest value.
_NAN_AWARE_WRITERS = ("parquet-mr", "parquet-java")


# --------------------------------------------------------------------------------------------
# Which columns get stats
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
    return t in _INTEGRAL or t in _FLOATING or t in _TEMPORAL or t == "string" or t.startswith("decimal")


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


def _leaves(fields: Sequence[StatsField], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], StatsField]]:
    for f in fields:
        path = (*prefix, f.name)
        if f.is_struct:
            yield from _leaves(f.children or (), path)
        else:
            yield path, f


def configured_string_prefix_length(configuration: Mapping[str, str]) -> int:
    """``delta.dataSkippingStringPrefixLength``, else the session default (32)."""
    raw = configuration.get(STRING_PREFIX_KEY)
    return int(raw) if raw is not None and str(raw).strip() != "" else DEFAULT_STRING_PREFIX_LENGTH


def _tight_bounds(protocol: Protocol | None, configuration: Mapping[str, str]) -> bool:
    """delta-spark adds ``tightBounds: true`` when the protocol supports deletion vectors."""
    if protocol is not None:
        return "deletionVectors" in (protocol.writer_features or ())
    return (configuration.get(DELETION_VECTORS_KEY) or "").lower() == "true"


# --------------------------------------------------------------------------------------------
# String truncation (StatisticsCollection.truncateMinStringAgg / truncateMaxStringAgg)
# --------------------------------------------------------------------------------------------


def _utf16_units(s: str) -> list[int]:
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units.append(0xD800 + (cp >> 10))
            units.append(0xDC00 + (cp & 0x3FF))
        else:
            units.append(cp)
    return units


def _from_units(units: Sequence[int]) -> str:
    return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "surrogatepass")


def truncate_min_string(s: str, prefix: int) -> str:
    """Spark ``substring(min, 0, prefix)``: the first ``prefix`` code points."""
    return s[: max(prefix, 0)]


def truncate_max_string(s: str, prefix: int) -> str | None:
    """delta-spark's truncateMaxStringAgg, on Java (UTF-16) string lengths.

    Keeps a surrogate-safe prefix and appends a tie-breaker (U+007F if the next char is below it,
    else U+10FFFF) so the result is >= every value; skips over U+10FFFF chars; gives up (None) past
    twice the prefix length.
    """
    if 2 * len(s) <= prefix:  # at most 2 UTF-16 units per code point: cannot exceed the prefix
        return s
    u = _utf16_units(s)
    if len(u) <= prefix:
        return s
    if prefix <= 0:
        return None
    cur = prefix + 1 if 0xD800 <= u[prefix - 1] <= 0xDBFF and 0xDC00 <= u[prefix] <= 0xDFFF else prefix
    limit = 2 * prefix
    while cur <= limit:
        if cur >= len(u):
            return s
        if cur + 1 < len(u) and u[cur] == 0xDBFF and u[cur + 1] == 0xDFFF:
            cur += 2
        elif u[cur] < 0x7F:
            return _from_units(u[:cur]) + _ASCII_MAX
        else:
            return _from_units(u[:cur]) + _UTF8_MAX
    return None


# --------------------------------------------------------------------------------------------
# JSON rendering as Spark's to_json (Jackson) does it
# --------------------------------------------------------------------------------------------

_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
_ESCAPES = {i: _SHORT_ESCAPES.get(i, f"\\u{i:04X}") for i in range(0x20)}
_ESCAPES[ord('"')] = '\\"'
_ESCAPES[ord("\\")] = "\\\\"


def _json_string(s: str) -> str:
    return '"' + s.translate(_ESCAPES) + '"'


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _shortest_digits(x: float, single: bool) -> tuple[str, int]:
    """(digits, exponent), x ~= d.ddd * 10**exponent, chosen as JDK >= 19 Double/Float.toString does:
    the shortest decimal that reads back as x, and when that has one digit, the closest of 1-2 digits."""
    if single:
        s = f"{x:.8e}"
        for p in range(1, 10):
            s = f"{x:.{p - 1}e}"
            if _f32(float(s)) == x:
                break
        mant, e = s.split("e")
        digits, exp = mant.replace(".", ""), int(e)
    else:
        _, dt, de = Decimal(repr(x)).as_tuple()
        digits, exp = "".join(map(str, dt)), int(de) + len(dt) - 1
    digits = digits.rstrip("0") or "0"
    if len(digits) == 1:
        exact = Decimal(x)
        with localcontext() as ctx:
            ctx.prec = 2
            ctx.rounding = ROUND_HALF_EVEN
            two = +exact
        back = float(two)
        if (_f32(back) if single else back) == x and abs(two - exact) < abs(Decimal(f"{digits}e{exp}") - exact):
            _, tdt, tde = two.as_tuple()
            return "".join(map(str, tdt)).rstrip("0") or "0", int(tde) + len(tdt) - 1
    return digits, exp


def java_float_string(x: float, single: bool = False) -> str:
    """Java ``Double.toString`` (``Float.toString`` when ``single``) of a finite value."""
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, exp = _shortest_digits(abs(x), single)
    if -3 <= exp < 7:
        if exp >= 0:
            whole = digits[: exp + 1].ljust(exp + 1, "0")
            frac = digits[exp + 1 :] or "0"
        else:
            whole, frac = "0", "0" * (-exp - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def _json_float(x: float, single: bool) -> str:
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    return java_float_string(x, single)


def _civil(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) of a day number since 1970-01-01, any year."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if m <= 2 else 0), m, d


def _year(y: int) -> str:
    """java.time 'uuuu' as Spark prints it: 4 digits, '+' past 9999, '-' before year 0."""
    if y > 9999:
        return f"+{y}"
    return f"-{-y:04d}" if y < 0 else f"{y:04d}"


def format_date(days: int) -> str:
    y, m, d = _civil(days)
    return f"{_year(y)}-{m:02d}-{d:02d}"


def _format_local_millis(millis: int) -> str:
    days, ms = divmod(millis, 86_400_000)
    secs, frac = divmod(ms, 1000)
    return f"{format_date(days)}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{frac:03d}"


_FIXED_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$")


def _offset_seconds(micros: int, time_zone: str) -> int:
    tz = time_zone.strip()
    if tz.upper() in ("UTC", "GMT", "Z", "ETC/UTC", "ETC/GMT", "UCT", "ZULU", "UNIVERSAL"):
        return 0
    m = _FIXED_OFFSET_RE.match(tz)
    if m:
        secs = int(m.group(2)) * 3600 + int(m.group(3) or 0) * 60 + int(m.group(4) or 0)
        return -secs if m.group(1) == "-" else secs
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(tz)
    lo = datetime.datetime(1, 1, 2, tzinfo=datetime.timezone.utc)
    hi = datetime.datetime(9999, 12, 30, tzinfo=datetime.timezone.utc)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    try:
        instant = epoch + datetime.timedelta(microseconds=micros)
    except OverflowError:
        instant = lo if micros < 0 else hi
    instant = min(max(instant, lo), hi)
    off = instant.astimezone(zone).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _format_offset(secs: int) -> str:
    """java.time 'XXX': Z, or +HH:MM (+HH:MM:SS when the offset has seconds)."""
    if secs == 0:
        return "Z"
    sign = "-" if secs < 0 else "+"
    secs = abs(secs)
    out = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}"
    return out + f":{secs % 60:02d}" if secs % 60 else out


def format_timestamp(micros: int, time_zone: str = "UTC") -> str:
    """Spark to_json's ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX`` in the session time zone (truncated to millis)."""
    off = _offset_seconds(micros, time_zone)
    return _format_local_millis((micros + off * 1_000_000) // 1000) + _format_offset(off)


def format_timestamp_ntz(micros: int) -> str:
    """Spark to_json's timestamp_ntz format: ``yyyy-MM-dd'T'HH:mm:ss.SSS``."""
    return _format_local_millis(micros // 1000)


def _decimal_scale(t: str) -> int | None:
    m = re.match(r"^decimal\(\s*\d+\s*,\s*(-?\d+)\s*\)$", t)
    return int(m.group(1)) if m else None


def _render_value(value: Any, t: str, time_zone: str) -> str:
    if t in _INTEGRAL:
        return str(int(value))
    if t in _FLOATING:
        return _json_float(float(value), single=(t == "float"))
    if t == "string":
        return _json_string(value)
    if t == "date":
        return _json_string(format_date(int(value)))
    if t == "timestamp":
        return _json_string(format_timestamp(int(value), time_zone))
    if t == "timestamp_ntz":
        return _json_string(format_timestamp_ntz(int(value)))
    if t.startswith("decimal"):
        return str(value)  # Decimal.__str__ follows the same rules as Java's BigDecimal.toString
    raise TypeError(f"no min/max rendering for type {t!r}")


# --------------------------------------------------------------------------------------------
# Reading the footer
# --------------------------------------------------------------------------------------------


@dataclass
class _LeafStats:
    """What we know of one stats leaf; ``None`` values are unknown until data fills them in."""

    path: tuple[str, ...]
    field: StatsField
    target: tuple[str, ...] | None  # resolved path of the column in the file; None if missing
    null_count: int | None = None
    min: Any = None
    max: Any = None
    min_max_known: bool = True  # False: some chunk lacked min/max while having values
    all_null: bool = False  # no non-null value in the file: min/max are null (omitted)
    zero_ambiguous: bool = False  # a float bound is a zero whose sign depends on row order


@dataclass
class _FileColumns:
    """Parquet leaf columns by path: non-repeated primitive leaves, and the leaf indices under each
    array/map/struct (a Delta leaf may be a Parquet group: arrays, maps, variant)."""

    leaves: dict[tuple[str, ...], int] = field(default_factory=dict)
    groups: dict[tuple[str, ...], list[int]] = field(default_factory=dict)

    def resolve(self, path: tuple[str, ...]) -> tuple[str, ...] | None:
        """Exact path, else the unique case-insensitive match (Spark resolves names that way)."""
        if path in self.leaves or path in self.groups:
            return path
        low = tuple(p.lower() for p in path)
        hits = [p for p in (*self.leaves, *self.groups) if tuple(x.lower() for x in p) == low]
        return hits[0] if len(hits) == 1 else None


def _file_columns(metadata: pq.FileMetaData) -> _FileColumns:
    import pyarrow as pa

    out = _FileColumns()
    idx = 0

    def storage(t: pa.DataType) -> pa.DataType:
        return t.storage_type if isinstance(t, pa.ExtensionType) else t

    def is_list(t: pa.DataType) -> bool:
        return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)

    def count(t: pa.DataType) -> int:
        t = storage(t)
        if pa.types.is_struct(t):
            return sum(count(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_map(t):
            return count(t.key_type) + count(t.item_type)
        if is_list(t):
            return count(t.value_type)
        return 1

    def walk(f: pa.Field, path: tuple[str, ...]) -> None:
        nonlocal idx
        t = storage(f.type)
        n = count(t)
        if pa.types.is_struct(t) or pa.types.is_map(t) or is_list(t):
            out.groups[path] = list(range(idx, idx + n))
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), (*path, t.field(i).name))
            return
        if n == 1 and not (pa.types.is_map(t) or is_list(t)):
            out.leaves[path] = idx
        idx += n

    arrow = metadata.schema.to_arrow_schema()
    for f in arrow:
        walk(f, (f.name,))
    if idx != metadata.num_columns:  # should not happen; fall back to Parquet's dotted paths
        out = _FileColumns()
        for i in range(metadata.num_columns):
            col = metadata.schema.column(i)
            parts = tuple(col.path.split("."))
            if col.max_repetition_level == 0:
                out.leaves[parts] = i
            for k in range(1, len(parts)):
                out.groups.setdefault(parts[:k], []).append(i)
    return out


def _chunk_null_count(row_group: Any, col: int) -> int | None:
    st = row_group.column(col).statistics
    if st is None or not st.has_null_count:
        return None
    return int(st.null_count)


def _spark_gt(a: Any, b: Any) -> bool:
    """a > b in Spark's ordering: NaN above everything, -0.0 == 0.0."""
    if isinstance(a, float) or isinstance(b, float):
        an, bn = math.isnan(a), math.isnan(b)
        if an or bn:
            return an and not bn
    return a > b


def _decode_raw(raw: Any, col: Any, t: str, legacy: bool) -> Any:
    """A footer min/max (physical value) as the Python value we render for Delta type ``t``."""
    physical = col.physical_type
    if t == "string":
        return bytes(raw).decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    if t.startswith("decimal"):
        if isinstance(raw, (bytes, bytearray)):
            unscaled = int.from_bytes(raw, "big", signed=True)
        else:
            unscaled = int(raw)
        file_scale = col.scale if col.scale is not None and col.scale >= 0 else 0
        want = _decimal_scale(t)
        if want is not None and want > file_scale:
            unscaled *= 10 ** (want - file_scale)
            file_scale = want
        sign = 1 if unscaled < 0 else 0
        return Decimal((sign, tuple(int(d) for d in str(abs(unscaled))), -file_scale))
    if t in ("timestamp", "timestamp_ntz"):
        if physical != "INT64":
            raise _Unknown
        lt = json.loads(col.logical_type.to_json()) if col.logical_type is not None else {}
        unit = lt.get("timeUnit") if lt.get("Type") == "Timestamp" else None
        if unit is None:
            unit = {"TIMESTAMP_MILLIS": "milliseconds", "TIMESTAMP_MICROS": "microseconds"}.get(str(col.converted_type))
        v = int(raw)
        if unit == "milliseconds":
            v *= 1000
        elif unit == "nanoseconds":
            v //= 1000
        elif unit != "microseconds":
            raise _Unknown
        if legacy and v < _GREGORIAN_START_MICROS:
            raise _Unknown
        return v
    if t == "date":
        v = int(raw)
        if legacy and v < _GREGORIAN_START_DAYS:
            raise _Unknown
        return v
    if t in _INTEGRAL:
        return int(raw)
    if t in _FLOATING:
        v = float(raw)
        return _f32(v) if t == "float" else v
    raise _Unknown


class _Unknown(Exception):
    """A footer value we cannot translate faithfully."""


def _collect(metadata: pq.FileMetaData, fields: Sequence[StatsField]) -> tuple[int, list[_LeafStats]]:
    """Footer pass: numRecords and whatever each stats leaf's column chunks tell."""
    num_rows = int(metadata.num_rows)
    cols = _file_columns(metadata)
    legacy = any(k in (metadata.metadata or {}) for k in _LEGACY_KEYS)
    # parquet-java (Spark's writer) orders NaN above everything in float/double min/max, like Spark;
    # parquet-cpp (pyarrow) and others leave NaN out, so their max may hide a NaN: never trust it.
    nan_in_bounds = (metadata.created_by or "").startswith(_NAN_AWARE_WRITERS)
    row_groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    out: list[_LeafStats] = []
    for path, f in _leaves(fields):
        target = cols.resolve(path)
        leaf = _LeafStats(path, f, target)
        out.append(leaf)
        if target is None:
            # Not in the file (schema evolution): delta-spark counts every row as null, no min/max.
            leaf.null_count = num_rows
            leaf.all_null = True
            continue
        if num_rows == 0:
            leaf.all_null = True  # Spark's min/max and sum() over no rows are all null
            continue
        if target not in cols.leaves:  # array, map, variant...: a group of Parquet columns; null count only
            # A null array/map writes a null into every one of its leaf columns, so a leaf with no
            # nulls at all proves there is no null array. Otherwise the count needs the data.
            for c in cols.groups[target]:
                if all(_chunk_null_count(rg, c) == 0 for rg in row_groups):
                    leaf.null_count = 0
                    break
            continue
        col_idx = cols.leaves[target]
        col_schema = metadata.schema.column(col_idx)
        counts = [_chunk_null_count(rg, col_idx) for rg in row_groups]
        leaf.null_count = sum(counts) if all(c is not None for c in counts) else None  # type: ignore[arg-type]
        if not f.has_min_max:
            continue
        t = f.type
        if t in _FLOATING and not nan_in_bounds:
            leaf.min_max_known = False
            continue
        lo: Any = None
        hi: Any = None
        known = True
        rg_bounds: list[tuple[Any, Any]] = []
        for rg in row_groups:
            st = rg.column(col_idx).statistics
            rows = rg.num_rows
            if st is not None and st.has_min_max:
                try:
                    a = _decode_raw(st.min_raw, col_schema, t, legacy)
                    b = _decode_raw(st.max_raw, col_schema, t, legacy)
                except _Unknown:
                    known = False
                    break
                if t == "string":  # compare as UTF-8 bytes, like Spark and Parquet
                    a_key, b_key = bytes(st.min_raw), bytes(st.max_raw)
                    if lo is None or a_key < lo[0]:
                        lo = (a_key, a)
                    if hi is None or b_key > hi[0]:
                        hi = (b_key, b)
                else:
                    rg_bounds.append((a, b))
                    if lo is None or _spark_gt(lo, a):
                        lo = a
                    if hi is None or _spark_gt(b, hi):
                        hi = b
                continue
            if st is not None and st.has_null_count and st.null_count == rows:
                continue  # all null in this chunk: nothing to contribute
            known = False  # values present but no min/max in the footer
            break
        if not known:
            leaf.min_max_known = False
            continue
        if t == "string":
            lo = lo[1] if lo is not None else None
            hi = hi[1] if hi is not None else None
        if t in _FLOATING and (lo == 0 or hi == 0):
            lo, hi, leaf.zero_ambiguous = _zero_bounds(lo, hi, rg_bounds)
        leaf.min, leaf.max = lo, hi
        leaf.all_null = lo is None
    return num_rows, out


def _neg_zero(v: float) -> bool:
    return v == 0 and math.copysign(1.0, v) < 0


def _zero_bounds(lo: float, hi: float, rg_bounds: list[tuple[float, float]]) -> tuple[float, float, bool]:
    """Signs of zero bounds. Spark keeps the first zero in row order (-0.0 == 0.0 for it) while
    Parquet orders -0.0 < 0.0, so the footer fixes the sign only when one kind of zero is absent."""
    ambiguous = False
    if lo == 0:  # nothing negative: a -0.0 exists iff some chunk's min is -0.0
        if not any(_neg_zero(a) for a, _ in rg_bounds):
            lo = 0.0
        elif all(_neg_zero(b) for _, b in rg_bounds):
            lo = -0.0  # every chunk holds only -0.0 (and nulls)
        else:
            ambiguous = True
    if hi == 0:  # nothing positive or NaN: a +0.0 exists iff some chunk's max is +0.0
        if all(_neg_zero(b) or b < 0 for _, b in rg_bounds):
            hi = -0.0
        elif all(a == 0 and not _neg_zero(a) for a, _ in rg_bounds):
            hi = 0.0  # every chunk holds only +0.0
        else:
            ambiguous = True
    return lo, hi, ambiguous


# --------------------------------------------------------------------------------------------
# Filling gaps from the data
# --------------------------------------------------------------------------------------------


def _navigate(chunk: Any, names: Sequence[str]) -> Any:
    """Child array at ``names`` below a struct array, with ancestors' nulls applied."""
    import pyarrow as pa

    arr = chunk
    for name in names:
        t = arr.type
        i = t.get_field_index(name)
        if i < 0:
            low = [j for j in range(t.num_fields) if t.field(j).name.lower() == name.lower()]
            i = low[0]
        arr = arr.flatten()[i] if isinstance(arr, pa.StructArray) else arr.field(i)
    return arr


def _first_zero(values: Any) -> float:
    """The first zero in row order: Spark keeps the earliest of tied (-0.0 == 0.0) values."""
    import pyarrow.compute as pc

    for chunk in values.chunks:
        i = pc.index(chunk, 0.0).as_py()
        if i is not None and i >= 0:
            return float(chunk[i].as_py())
    return 0.0


def _data_min_max(values: Any, t: str) -> tuple[Any, Any]:
    """Spark's min/max of a column read back from the file."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if values.null_count == len(values):
        return None, None
    if t in _FLOATING:
        values = values.cast(pa.float64())
        nan = pc.is_nan(values)
        has_nan = bool(pc.any(nan).as_py())
        rest = values.filter(pc.invert(pc.fill_null(nan, False)))
        mm = pc.min_max(rest)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None:
            return math.nan, math.nan
        if lo == 0:
            lo = _first_zero(values)
        if has_nan:
            hi = math.nan
        elif hi == 0:
            hi = _first_zero(values)
        return lo, hi
    if t in ("timestamp", "timestamp_ntz"):
        if not pa.types.is_timestamp(values.type) or values.type.unit != "us":
            values = values.cast(pa.timestamp("us", getattr(values.type, "tz", None)))  # also date -> ntz
        values = values.cast(pa.int64())
    elif t == "date":
        values = values.cast(pa.int32())
    elif t == "string" and not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        values = values.cast(pa.string())
    mm = pc.min_max(values)
    return mm["min"].as_py(), mm["max"].as_py()


def _fill_from_data(path: str, metadata: pq.FileMetaData, leaves: list[_LeafStats]) -> None:
    """Read only the columns the footer could not answer for, and compute what delta-spark would."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    todo = [
        leaf
        for leaf in leaves
        if leaf.target is not None
        and (leaf.null_count is None or leaf.zero_ambiguous or (leaf.field.has_min_max and not leaf.min_max_known))
    ]
    if not todo or metadata.num_rows == 0:
        return
    pf = pq.ParquetFile(path, coerce_int96_timestamp_unit="us")
    tops = sorted({leaf.target[0] for leaf in todo if leaf.target})
    table = pf.read(columns=tops)
    for leaf in todo:
        assert leaf.target is not None
        try:
            column = table.column(leaf.target[0])
            values = pa.chunked_array([_navigate(c, leaf.target[1:]) for c in column.chunks])
            if leaf.null_count is None:
                leaf.null_count = values.null_count
            if leaf.field.has_min_max and (leaf.zero_ambiguous or not leaf.min_max_known):
                leaf.min, leaf.max = _data_min_max(values, leaf.field.type)
                leaf.min_max_known = True
                leaf.zero_ambiguous = False
                leaf.all_null = leaf.min is None
        except (pa.ArrowException, KeyError, IndexError, TypeError, ValueError) as exc:
            # Unexpected layout: leave the value out (unknown), which is always safe for readers.
            log.warning("stats: cannot read %s from %s (%s); leaving it out", ".".join(leaf.target), path, exc)


# --------------------------------------------------------------------------------------------
# Assembling the JSON
# --------------------------------------------------------------------------------------------


def _render(
    num_rows: int,
    fields: Sequence[StatsField],
    leaves: list[_LeafStats],
    *,
    prefix: int,
    time_zone: str,
    tight_bounds: bool,
) -> str:
    by_path = {leaf.path: leaf for leaf in leaves}

    def has_bounds(f: StatsField, path: tuple[str, ...]) -> bool:
        """delta-spark only aggregates min/max over eligible columns present in the file; a struct
        with none of those is left out of minValues/maxValues (not even ``{}``)."""
        if f.is_struct:
            return any(has_bounds(c, (*path, c.name)) for c in f.children or ())
        return f.has_min_max and by_path[path].target is not None

    def value_of(leaf: _LeafStats, which: str) -> str | None:
        if not leaf.field.has_min_max or not leaf.min_max_known or leaf.all_null:
            return None
        v = leaf.min if which == "min" else leaf.max
        if v is None:
            return None
        t = leaf.field.type
        if t == "string":
            v = truncate_min_string(v, prefix) if which == "min" else truncate_max_string(v, prefix)
            if v is None:
                return None
        return _render_value(v, t, time_zone)

    def obj(fs: Sequence[StatsField], parent: tuple[str, ...], which: str) -> str:
        parts = []
        for f in fs:
            path = (*parent, f.name)
            if f.is_struct:
                keep = has_bounds(f, path) if which != "null" else f.has_leaf_below
                if keep:
                    parts.append(f"{_json_string(f.name)}:{obj(f.children or (), path, which)}")
                continue
            leaf = by_path[path]
            if which == "null":
                rendered = None if leaf.null_count is None else str(int(leaf.null_count))
            elif f.has_min_max:
                rendered = value_of(leaf, which)
            else:
                continue
            if rendered is not None:
                parts.append(f"{_json_string(f.name)}:{rendered}")
        return "{" + ",".join(parts) + "}"

    out = [f'"numRecords":{num_rows}']
    if any(has_bounds(f, (f.name,)) for f in fields):
        out.append(f'"minValues":{obj(fields, (), "min")}')
        out.append(f'"maxValues":{obj(fields, (), "max")}')
    if any(f.has_leaf_below for f in fields):
        out.append(f'"nullCount":{obj(fields, (), "null")}')
    if tight_bounds:
        out.append('"tightBounds":true')
    return "{" + ",".join(out) + "}"


def _stats(
    metadata: pq.FileMetaData,
    path: str | None,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    protocol: Protocol | None,
    session_time_zone: str,
    string_prefix_length: int | None,
) -> str:
    fields = stats_columns(schema, partition_columns, configuration)
    prefix = (
        string_prefix_length if string_prefix_length is not None else configured_string_prefix_length(configuration)
    )
    num_rows, leaves = _collect(metadata, fields)
    if path is not None:
        _fill_from_data(path, metadata, leaves)
    return _render(
        num_rows,
        fields,
        leaves,
        prefix=prefix,
        time_zone=session_time_zone,
        tight_bounds=_tight_bounds(protocol, configuration),
    )


def stats_from_parquet(
    metadata: pq.FileMetaData,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    *,
    protocol: Protocol | None = None,
    session_time_zone: str = "UTC",
    string_prefix_length: int | None = None,
) -> str:
    """Stats JSON from the footer alone; values the footer cannot give are left out (= unknown).

    ``protocol`` decides ``tightBounds`` (deletion-vector tables); without it the table property
    ``delta.enableDeletionVectors`` does. ``session_time_zone`` is Spark's session zone, which
    delta-spark's to_json uses for timestamp bounds. ``string_prefix_length`` overrides the table
    property / session default (``spark.databricks.io.skipping.stringPrefixLength``).
    """
    return _stats(
        metadata, None, schema, partition_columns, configuration, protocol, session_time_zone, string_prefix_length
    )


def stats_from_file(
    path: str,
    schema: Mapping[str, Any],
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
    *,
    protocol: Protocol | None = None,
    session_time_zone: str = "UTC",
    string_prefix_length: int | None = None,
    read_data: bool = True,
) -> str:
    """Stats JSON for a local Parquet file: its footer, plus (``read_data``) the data of only those
    columns the footer cannot answer for (INT96 timestamps, oversized strings, null arrays/maps)."""
    import pyarrow.parquet as pq

    metadata = pq.read_metadata(path)
    return _stats(
        metadata,
        path if read_data else None,
        schema,
        partition_columns,
        configuration,
        protocol,
        session_time_zone,
        string_prefix_length,
    )
