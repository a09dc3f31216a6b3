"""Checks of one add action's stats JSON: its shape, min <= max, nullCount <= numRecords."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from ..delta.actions import parse_stats
from ..delta.stats_schema import FLOATING_TYPES, INTEGRAL_TYPES
from .findings import Finding

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

__all__ = ["check_stats", "norm_partition_value", "parse_ts", "stats_types"]

_TS = {"timestamp", "timestamp_ntz"}


def parse_ts(value: str) -> datetime.datetime | None:
    s = value.strip().replace(" ", "T", 1)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    try:
        return datetime.datetime.fromisoformat(s)
    except ValueError:
        return None


def norm_partition_value(value: str | None, typ: str) -> Any:
    """Typed value of a partition string, so "1" == "01" for ints and "" == null (delta-spark's rule)."""
    if value is None or value == "":
        return None
    try:
        if typ in INTEGRAL_TYPES:
            return ("i", int(value))
        if typ in FLOATING_TYPES:
            return ("f", float(value))
        if typ.startswith("decimal"):
            return ("d", Decimal(value).normalize())
        if typ == "boolean":
            return ("b", value.strip().lower())
        if typ in _TS:
            ts = parse_ts(value)
            if ts is not None:
                if ts.tzinfo is not None:
                    ts = ts.astimezone(datetime.timezone.utc).replace(tzinfo=None)
                return ("t", ts)
    except (ValueError, InvalidOperation):
        pass
    return ("s", value)


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _min_gt_max(lo: Any, hi: Any, typ: str | None) -> bool:
    """True only when ``lo > hi`` for sure (NaN, truncated strings and odd encodings never flag)."""
    if lo is None or hi is None or isinstance(lo, bool) or isinstance(hi, bool):
        return False
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return lo > hi  # NaN compares False
    if isinstance(lo, str) and isinstance(hi, str):
        if typ in _TS or (typ is None and parse_ts(lo) is not None and "T" in lo):
            a, b = parse_ts(lo), parse_ts(hi)
            if a is not None and b is not None and (a.tzinfo is None) == (b.tzinfo is None):
                return a > b
            return False
        if typ is not None and (typ in INTEGRAL_TYPES or typ in FLOATING_TYPES or typ.startswith("decimal")):
            try:
                return Decimal(lo) > Decimal(hi)
            except InvalidOperation:
                return False
        # Strings: Spark orders by UTF-8 bytes (code points), delta-spark truncates in UTF-16 units.
        return lo > hi and _utf16_key(lo) > _utf16_key(hi)
    if (isinstance(lo, (int, float)) and isinstance(hi, str)) or (isinstance(lo, str) and isinstance(hi, (int, float))):
        try:
            return Decimal(str(lo)) > Decimal(str(hi))
        except InvalidOperation:
            return False
    return False


def stats_types(snapshot: Snapshot | None) -> dict[tuple[str, ...], str]:
    """Stats-JSON leaf path (physical names) -> Delta type name, from the table schema."""
    if snapshot is None:
        return {}
    from ..delta.stats_schema import stats_columns

    out: dict[tuple[str, ...], str] = {}

    def walk(fields: Iterable[Any], prefix: tuple[str, ...]) -> None:
        for f in fields:
            if f.is_struct:
                walk(f.children or (), (*prefix, f.name))
            elif isinstance(f.type, str):
                out[(*prefix, f.name)] = f.type

    try:
        walk(stats_columns(snapshot.schema, snapshot.partition_columns, snapshot.configuration), ())
    except Exception:  # an odd schema only loses type hints
        return {}
    return out


def _shape(parsed: dict[str, Any], path: str, findings: list[Finding]) -> int | None:
    """Check the top-level shape (fixing what later checks read); returns a usable numRecords."""
    n = parsed.get("numRecords")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        findings.append(Finding("stats_unparsable", f"numRecords is not a non-negative integer: {n!r}", path))
        n = None
    for key in ("minValues", "maxValues", "nullCount"):
        if key in parsed and parsed[key] is not None and not isinstance(parsed[key], dict):
            findings.append(Finding("stats_unparsable", f"{key} is not an object: {parsed[key]!r}", path))
            parsed[key] = None
    if "tightBounds" in parsed and not isinstance(parsed["tightBounds"], bool):
        findings.append(Finding("stats_unparsable", f"tightBounds is not a boolean: {parsed['tightBounds']!r}", path))
    return n


def _bounds(
    lo: Mapping[str, Any],
    hi: Mapping[str, Any],
    prefix: tuple[str, ...],
    ctx: tuple[str, Mapping[tuple[str, ...], str], list[Finding]],
) -> None:
    path, types, findings = ctx
    for k in lo.keys() & hi.keys():
        a, b, p = lo[k], hi[k], (*prefix, k)
        if isinstance(a, dict) and isinstance(b, dict):
            _bounds(a, b, p, ctx)
        elif isinstance(a, dict) or isinstance(b, dict):
            findings.append(
                Finding("stats_unparsable", f"minValues/maxValues disagree on the shape of {'.'.join(p)}", path)
            )
        elif _min_gt_max(a, b, types.get(p)):
            findings.append(Finding("stats_min_gt_max", f"column {'.'.join(p)}: min {a!r} > max {b!r}", path))


def _nulls(
    counts: Mapping[str, Any], prefix: tuple[str, ...], n: int | None, path: str, findings: list[Finding]
) -> None:
    for k, v in counts.items():
        p = (*prefix, k)
        if isinstance(v, dict):
            _nulls(v, p, n, path, findings)
        elif v is None:
            continue
        elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
            findings.append(Finding("stats_unparsable", f"nullCount of {'.'.join(p)} is not a count: {v!r}", path))
        elif n is not None and v > n:
            msg = f"column {'.'.join(p)}: nullCount {v} > numRecords {n}"
            findings.append(Finding("stats_null_count_gt_records", msg, path))


def check_stats(path: str, stats: str | None, types: Mapping[tuple[str, ...], str]) -> tuple[list[Finding], int | None]:
    """Findings for one add's stats JSON, and its numRecords (None when absent or unusable)."""
    if stats is None:
        return [], None
    parsed = parse_stats(stats)
    if parsed is None:
        return [Finding("stats_unparsable", f"stats are not a JSON object: {stats[:80]!r}", path)], None
    findings: list[Finding] = []
    n = _shape(parsed, path, findings)
    if parsed.get("minValues") and parsed.get("maxValues"):
        _bounds(parsed["minValues"], parsed["maxValues"], (), (path, types, findings))
    if parsed.get("nullCount"):
        _nulls(parsed["nullCount"], (), n, path, findings)
    return findings, n
