"""Values rendered exactly as delta-spark writes them in stats JSON: Java float/double strings,
dates and timestamps, strings truncated to the stats prefix by UTF-16 units."""

from __future__ import annotations

import datetime
import math
import re
import struct
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import TYPE_CHECKING, Any

from ..delta.stats_schema import ASCII_MAX, DELETION_VECTORS_KEY, FLOATING_TYPES, INTEGRAL_TYPES

if TYPE_CHECKING:
    from ..delta.actions import Protocol


_UTF8_MAX = "\U0010ffff"  # Character.MAX_CODE_POINT, delta-spark's max-string tie-breaker

# Spark < 3.0 "legacy" hybrid-calendar files: values before the Gregorian switch are rebased.
LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")
GREGORIAN_START_DAYS = -141427  # 1582-10-15
GREGORIAN_START_MICROS = GREGORIAN_START_DAYS * 86_400_000_000
# Writers (FileMetaData.created_by) whose float/double statistics include NaN as the largest value.
NAN_AWARE_WRITERS = ("parquet-mr", "parquet-java")


# --------------------------------------------------------------------------------------------
# Which columns get stats


def has_tight_bounds(protocol: Protocol | None, configuration: Mapping[str, str]) -> bool:
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
            return _from_units(u[:cur]) + ASCII_MAX
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


def json_string(s: str) -> str:
    return '"' + s.translate(_ESCAPES) + '"'


def f32(x: float) -> float:
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


def _shortest_digits(x: float, single: bool) -> tuple[str, int]:
    """(digits, exponent), x ~= d.ddd * 10**exponent, chosen as JDK >= 19 Double/Float.toString does:
    the shortest decimal that reads back as x, and when that has one digit, the closest of 1-2 digits."""
    if single:
        s = f"{x:.8e}"
        for p in range(1, 10):
            s = f"{x:.{p - 1}e}"
            if f32(float(s)) == x:
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
        if (f32(back) if single else back) == x and abs(two - exact) < abs(Decimal(f"{digits}e{exp}") - exact):
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


def decimal_scale(t: str) -> int | None:
    m = re.match(r"^decimal\(\s*\d+\s*,\s*(-?\d+)\s*\)$", t)
    return int(m.group(1)) if m else None


def render_value(value: Any, t: str, time_zone: str) -> str:
    if t in INTEGRAL_TYPES:
        return str(int(value))
    if t in FLOATING_TYPES:
        return _json_float(float(value), single=(t == "float"))
    if t == "string":
        return json_string(value)
    if t == "date":
        return json_string(format_date(int(value)))
    if t == "timestamp":
        return json_string(format_timestamp(int(value), time_zone))
    if t == "timestamp_ntz":
        return json_string(format_timestamp_ntz(int(value)))
    if t.startswith("decimal"):
        return str(value)  # Decimal.__str__ follows the same rules as Java's BigDecimal.toString
    raise TypeError(f"no min/max rendering for type {t!r}")


# --------------------------------------------------------------------------------------------
