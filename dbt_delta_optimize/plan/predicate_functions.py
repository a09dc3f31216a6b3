"""The allow-listed pure functions and arithmetic of the predicate language, with Spark's semantics."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlglot import exp

from ..errors import InvalidPredicateError
from .predicate_nodes import Context, Handler, Node, Row
from .sql_values import INTEGRAL, NUMERIC, cast_value, common_type

__all__ = ["FUNCTIONS"]

_TYPES = {
    exp.DataType.Type.DATE: "date",
    exp.DataType.Type.TIMESTAMP: "timestamp",
    exp.DataType.Type.TIMESTAMPTZ: "timestamp",
    exp.DataType.Type.TIMESTAMPLTZ: "timestamp",
    exp.DataType.Type.TIMESTAMPNTZ: "timestamp_ntz",
    exp.DataType.Type.TINYINT: INTEGRAL,
    exp.DataType.Type.SMALLINT: INTEGRAL,
    exp.DataType.Type.INT: INTEGRAL,
    exp.DataType.Type.BIGINT: INTEGRAL,
    exp.DataType.Type.DOUBLE: "double",
    exp.DataType.Type.FLOAT: "double",
    exp.DataType.Type.DECIMAL: "decimal",
    exp.DataType.Type.BOOLEAN: "boolean",
    exp.DataType.Type.TEXT: "string",
    exp.DataType.Type.VARCHAR: "string",
    exp.DataType.Type.CHAR: "string",
}


def _cast(e: exp.Cast, ctx: Context) -> Node:
    to = e.args["to"]
    target = _TYPES.get(to.this)
    if target is None:
        raise ctx.refuse(f"a cast to {to.sql(dialect='spark')}")
    params = (38, 18)
    if target == "decimal":
        values = [int(p.this.this) for p in to.expressions] or [10, 0]
        params = (values[0], values[1] if len(values) > 1 else 0)
    inner = ctx.compile(e.this)
    tz = ctx.scope.time_zone
    return Node(lambda row: cast_value(inner.fn(row), inner.type, target, tz, params), target)


def _strptime(value: str, fmt: str) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(value, fmt)
    except ValueError:
        return None


def _to_date(e: exp.TsOrDsToDate, ctx: Context) -> Node:
    inner = ctx.compile(e.this)
    tz = ctx.scope.time_zone
    fmt_node = e.args.get("format")
    if fmt_node is None:
        return Node(lambda row: cast_value(inner.fn(row), inner.type, "date", tz), "date")
    fmt = str(fmt_node.this).replace("strict", "")

    def fn(row: Row) -> Any:
        value = cast_value(inner.fn(row), inner.type, "string", tz)
        parsed = _strptime(value, fmt) if value is not None else None
        return parsed.date() if parsed else None

    return Node(fn, "date")


def _to_timestamp(e: exp.StrToTime, ctx: Context) -> Node:
    inner = ctx.compile(e.this)
    tz = ctx.scope.time_zone
    fmt = str(e.args["format"].this).replace("strict", "")

    def fn(row: Row) -> Any:
        value = cast_value(inner.fn(row), inner.type, "string", tz)
        parsed = _strptime(value, fmt) if value is not None else None
        return cast_value(parsed.strftime("%Y-%m-%d %H:%M:%S"), "string", "timestamp", tz) if parsed else None

    return Node(fn, "timestamp")


def _date_part(part: str) -> Callable[[Any, Context], Node]:
    def handler(e: exp.Func, ctx: Context) -> Node:
        inner = ctx.compile(e.this)
        tz = ctx.scope.time_zone

        def fn(row: Row) -> Any:
            d = cast_value(inner.fn(row), inner.type, "date", tz)
            return None if d is None else getattr(d, part)

        return Node(fn, INTEGRAL)

    return handler


def _string_fn(op: Callable[[str], Any], result: str) -> Callable[[Any, Context], Node]:
    def handler(e: exp.Func, ctx: Context) -> Node:
        inner = ctx.compile(e.this)
        tz = ctx.scope.time_zone

        def fn(row: Row) -> Any:
            s = cast_value(inner.fn(row), inner.type, "string", tz)
            return None if s is None else op(s)

        return Node(fn, result)

    return handler


def _trim(e: exp.Trim, ctx: Context) -> Node:
    if e.args.get("expression") is not None or e.args.get("position"):
        raise ctx.refuse("TRIM with characters or a position")
    return _string_fn(lambda s: s.strip(" "), "string")(e, ctx)


def _substring(e: exp.Substring, ctx: Context) -> Node:
    inner = ctx.compile(e.this)
    start = ctx.compile(e.args["start"]) if e.args.get("start") else None
    length = ctx.compile(e.args["length"]) if e.args.get("length") else None
    tz = ctx.scope.time_zone

    def fn(row: Row) -> Any:
        s = cast_value(inner.fn(row), inner.type, "string", tz)
        pos = cast_value(start.fn(row), start.type, INTEGRAL, tz) if start else 1
        n = cast_value(length.fn(row), length.type, INTEGRAL, tz) if length else len(s or "")
        if s is None or pos is None or n is None:
            return None
        begin = pos - 1 if pos > 0 else (len(s) + pos if pos < 0 else 0)
        lo, hi = max(begin, 0), max(min(begin + n, len(s)), 0)
        return s[lo:hi] if hi > lo else ""

    return Node(fn, "string")


def _concat(e: exp.Concat, ctx: Context) -> Node:
    parts = [ctx.compile(x) for x in e.expressions]
    tz = ctx.scope.time_zone

    def fn(row: Row) -> Any:
        values = [cast_value(p.fn(row), p.type, "string", tz) for p in parts]
        return None if any(v is None for v in values) else "".join(values)

    return Node(fn, "string")


def _coalesce(e: exp.Coalesce, ctx: Context) -> Node:
    parts = [ctx.compile(x) for x in [e.this, *e.expressions]]
    target = parts[0].type
    for p in parts[1:]:
        target = common_type(target, p.type)
    tz = ctx.scope.time_zone

    def fn(row: Row) -> Any:
        for p in parts:
            v = p.fn(row)
            if v is not None:
                return cast_value(v, p.type, target, tz)
        return None

    return Node(fn, target)


def _numeric(node: Node, ctx: Context) -> Node:
    if node.type in NUMERIC or node.type == "null":
        return node
    if node.type == "string":
        tz = ctx.scope.time_zone
        return Node(lambda row: cast_value(node.fn(row), "string", "double", tz), "double")
    raise InvalidPredicateError(f"WHERE predicate {ctx.text!r}: arithmetic on a {node.type} is not supported.")


def _div(a: Any, b: Any) -> Any:
    return None if b == 0 else (Decimal(a) / Decimal(b) if isinstance(a, Decimal) else float(a) / float(b))


def _mod(a: Any, b: Any) -> Any:
    if b == 0:
        return None
    r = abs(a) % abs(b)  # Spark's % keeps the sign of the dividend
    return -r if a < 0 else r


_ARITH: dict[type[Any], Callable[[Any, Any], Any]] = {
    exp.Add: lambda a, b: a + b,
    exp.Sub: lambda a, b: a - b,
    exp.Mul: lambda a, b: a * b,
    exp.Div: _div,
    exp.Mod: _mod,
}


def _arith(e: exp.Binary, ctx: Context) -> Node:
    left, right = _numeric(ctx.compile(e.left), ctx), _numeric(ctx.compile(e.right), ctx)
    target = common_type(left.type, right.type)
    if isinstance(e, exp.Div) and target == INTEGRAL:
        target = "double"
    op, tz = _ARITH[type(e)], ctx.scope.time_zone

    def fn(row: Row) -> Any:
        a = cast_value(left.fn(row), left.type, target, tz)
        b = cast_value(right.fn(row), right.type, target, tz)
        return None if a is None or b is None else op(a, b)

    return Node(fn, target)


def _neg(e: exp.Neg, ctx: Context) -> Node:
    inner = _numeric(ctx.compile(e.this), ctx)
    return Node(lambda row: None if (v := inner.fn(row)) is None else -v, inner.type)


def _abs(e: exp.Abs, ctx: Context) -> Node:
    inner = _numeric(ctx.compile(e.this), ctx)
    return Node(lambda row: None if (v := inner.fn(row)) is None else abs(v), inner.type)


FUNCTIONS: dict[type[Any], Handler] = {
    exp.Cast: _cast,
    exp.TryCast: _cast,
    exp.TsOrDsToDate: _to_date,
    exp.StrToTime: _to_timestamp,
    exp.Year: _date_part("year"),
    exp.Month: _date_part("month"),
    exp.Day: _date_part("day"),
    exp.DayOfMonth: _date_part("day"),
    exp.Lower: _string_fn(str.lower, "string"),
    exp.Upper: _string_fn(str.upper, "string"),
    exp.Length: _string_fn(len, INTEGRAL),
    exp.Trim: _trim,
    exp.Substring: _substring,
    exp.Concat: _concat,
    exp.Coalesce: _coalesce,
    exp.Add: _arith,
    exp.Sub: _arith,
    exp.Mul: _arith,
    exp.Div: _arith,
    exp.Mod: _arith,
    exp.Neg: _neg,
    exp.Abs: _abs,
}
