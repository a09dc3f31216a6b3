"""Spark SQL's value semantics for partition predicates, in Python: casts, coercion, comparison.

Partition values are strings in the log; Spark casts them to the column's type and compares with
its (non-ANSI, as dbt-spark runs it) rules: a failed cast is NULL, a string compared with a number
is cast to that number's type (to double against a decimal), with a date to a date, with a
timestamp to a timestamp. These functions implement that for the types a partition column can have.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo

from ..errors import InvalidPredicateError

__all__ = ["INTEGRAL", "NUMERIC", "cast_value", "common_type", "delta_type", "sql_compare"]

#: Our type names: string, integral, decimal, double, boolean, date, timestamp, timestamp_ntz, binary, null.
INTEGRAL = "integral"
NUMERIC = ("integral", "decimal", "double")
_NUM_RANK = {"integral": 0, "decimal": 1, "double": 2}
_INT_RE = re.compile(r"^[+-]?\d+(\.\d*)?$")
_DATE_RE = re.compile(r"^([+-]?\d{4,})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T].*)?)?)?$")
_TS_RE = re.compile(
    r"^([+-]?\d{4,})(?:-(\d{1,2})(?:-(\d{1,2})"
    r"(?:[ T](\d{1,2})(?::(\d{1,2})(?::(\d{1,2})(?:\.(\d{0,9}))?)?)?)?)?)?"
    r"\s*(Z|UTC|[+-]\d{1,2}(?::?\d{2})?)?$"
)
_LIMITS = {"byte": 7, "short": 15, "integer": 31, "long": 63}


def delta_type(name: str) -> str:
    """Our type name of a Delta primitive type ("long" -> integral, "decimal(10,2)" -> decimal, ...)."""
    if name in _LIMITS:
        return INTEGRAL
    if name in ("double", "float"):
        return "double"
    if name.startswith("decimal"):
        return "decimal"
    if name in ("string", "boolean", "date", "timestamp", "timestamp_ntz", "binary"):
        return name
    raise InvalidPredicateError(f"partition columns of type {name} are not supported in WHERE predicates")


def _to_int(s: str) -> int | None:
    s = s.strip()
    if not _INT_RE.match(s):
        return None
    n = int(s.split(".")[0])
    return n if -(2**63) <= n < 2**63 else None


def _to_double(s: str) -> float | None:
    s = s.strip()
    special = {"nan": float("nan"), "infinity": float("inf"), "-infinity": float("-inf"), "+infinity": float("inf")}
    if s.lower() in special:
        return special[s.lower()]
    try:
        return float(s) if re.match(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?$", s) else None
    except ValueError:
        return None


def _to_decimal(s: str, precision: int = 38, scale: int = 18) -> Decimal | None:
    try:
        d = Decimal(s.strip())
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    q = d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    return q if len(q.as_tuple().digits) - max(0, -int(q.as_tuple().exponent) - scale) <= precision else None


def _to_bool(s: str) -> bool | None:
    v = s.strip().lower()
    if v in ("t", "true", "y", "yes", "1"):
        return True
    if v in ("f", "false", "n", "no", "0"):
        return False
    return None


def _to_date(s: str) -> dt.date | None:
    m = _DATE_RE.match(s.strip())
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1))
    except ValueError:
        return None


def _zone(text: str | None, session: str) -> dt.tzinfo:
    if text is None:
        return ZoneInfo(session)
    if text in ("Z", "UTC"):
        return dt.timezone.utc
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours, minutes = (int(digits[:-2]), int(digits[-2:])) if len(digits) > 2 else (int(digits), 0)
    return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))


def _to_timestamp(s: str, tz: str, *, ntz: bool = False) -> dt.datetime | None:
    m = _TS_RE.match(s.strip())
    if not m:
        return None
    parts = [int(g) if g else 0 for g in m.groups()[:6]]
    micros = int((m.group(7) or "0").ljust(6, "0")[:6])
    try:
        naive = dt.datetime(parts[0], parts[1] or 1, parts[2] or 1, parts[3], parts[4], parts[5], micros)
    except ValueError:
        return None
    if ntz:
        return naive
    return naive.replace(tzinfo=_zone(m.group(8), tz)).astimezone(dt.timezone.utc)


def _date_to_ts(d: dt.date, tz: str) -> dt.datetime:
    return dt.datetime(d.year, d.month, d.day, tzinfo=ZoneInfo(tz)).astimezone(dt.timezone.utc)


def _from_string(v: str, to: str, tz: str, params: tuple[int, int]) -> Any:
    casts: dict[str, Callable[[], Any]] = {
        "string": lambda: v,
        INTEGRAL: lambda: _to_int(v),
        "double": lambda: _to_double(v),
        "decimal": lambda: _to_decimal(v, *params),
        "boolean": lambda: _to_bool(v),
        "date": lambda: _to_date(v),
        "timestamp": lambda: _to_timestamp(v, tz),
        "timestamp_ntz": lambda: _to_timestamp(v, tz, ntz=True),
        "binary": lambda: v.encode(),
    }
    return casts[to]()


def _to_string(v: Any, frm: str) -> str:
    if frm == "boolean":
        return "true" if v else "false"
    if frm == "timestamp":
        text: str = v.strftime("%Y-%m-%d %H:%M:%S") + (f".{v.microsecond:06d}".rstrip("0") if v.microsecond else "")
        return text
    return str(v)


def cast_value(v: Any, frm: str, to: str, tz: str = "UTC", params: tuple[int, int] = (38, 18)) -> Any:
    """CAST(v AS to) with Spark's non-ANSI rules: a value that does not convert is NULL."""
    if v is None or frm == to:
        return v
    if frm == "string":
        return _from_string(v, to, tz, params)
    if to == "string":
        return _to_string(v, frm)
    if frm in NUMERIC and to in NUMERIC:
        if to == INTEGRAL:
            return int(v)
        return float(v) if to == "double" else _to_decimal(str(v), *params)
    if frm == "date" and to == "timestamp":
        return _date_to_ts(v, tz)
    if frm in ("timestamp", "timestamp_ntz") and to == "date":
        local = v.astimezone(ZoneInfo(tz)) if frm == "timestamp" else v
        return local.date()
    if frm == "boolean" and to in NUMERIC:
        return cast_value(int(v), INTEGRAL, to, tz, params)
    return None


def common_type(a: str, b: str) -> str:
    """The type both sides of a comparison are cast to (Spark's findCommonTypeForBinaryComparison)."""
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    if a in NUMERIC and b in NUMERIC:
        if {a, b} == {"decimal", "double"}:
            return "double"
        return a if _NUM_RANK[a] >= _NUM_RANK[b] else b
    if "string" in (a, b):
        other = b if a == "string" else a
        return "double" if other == "decimal" else other
    if {a, b} == {"date", "timestamp"}:
        return "timestamp"
    raise InvalidPredicateError(f"cannot compare a {a} with a {b} (data type mismatch)")


def sql_compare(a: Any, b: Any) -> int | None:
    """-1, 0, 1, or None when either side is NULL (NaN equals NaN and is the largest, as in Spark)."""
    if a is None or b is None:
        return None
    if isinstance(a, float) and isinstance(b, float) and (a != a or b != b):
        return (a != a) - (b != b)
    result: int = (a > b) - (a < b)
    return result
