"""Compile a sqlglot tree of the safe predicate language into a typed Python evaluator.

Each node handler returns a ``Node``: a closure over the row of typed partition values and the
node's SQL type. Handlers exist only for the allowed language; any other node is refused with
its name, so nothing outside the language can ever be evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp

from ..errors import InvalidPredicateError
from .predicate_functions import FUNCTIONS
from .predicate_nodes import Context, Handler, Node, Row, Scope
from .sql_values import INTEGRAL, cast_value, common_type, sql_compare

__all__ = ["Compiled", "Node", "Scope", "compile_predicate", "parse_predicate"]


@dataclass(frozen=True)
class Compiled:
    """One validated predicate: canonical SQL, delta-spark's recorded form, and its evaluator."""

    sql: str
    catalyst: str
    evaluate: Callable[[Row], Any]


def _doubled_quotes_as_escapes(text: str) -> str:
    """Spark reads ``'a''b'`` as the string a'b; sqlglot's Spark dialect reads two literals. Make it ``'a\\'b'``."""
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote and quote != "`" and ch == "\\":
            out.append(text[i : i + 2])
            i += 2
            continue
        if quote and ch == quote and text[i + 1 : i + 2] == quote:
            out.append("\\" + quote)
            i += 2
            continue
        if ch in "'\"`" and (not quote or ch == quote):
            quote = "" if quote else ch
        out.append(ch)
        i += 1
    return "".join(out)


def parse_predicate(text: str) -> Any:
    try:
        tree = sqlglot.parse_one(_doubled_quotes_as_escapes(text), read="spark")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidPredicateError(
            f"Cannot parse WHERE predicate {text!r}: {first}. Write a Spark SQL condition on partition columns."
        ) from None
    if tree is None:
        raise InvalidPredicateError(f"Cannot parse WHERE predicate {text!r}.")
    return tree


def compile_predicate(tree: exp.Expression, text: str, scope: Scope) -> Compiled:
    ctx = Context(scope, text, _compile, _FUNCTION_NAMES)
    _refuse_subqueries(tree, text)
    _check_columns(tree, scope, text)
    node = _compile(tree, ctx)
    return Compiled(tree.sql(dialect="spark"), _catalyst(tree), node.fn)


def _refuse_subqueries(tree: exp.Expression, text: str) -> None:
    if any(isinstance(n, (exp.Subquery, exp.Select, exp.Exists, exp.Query)) for n in tree.walk()):
        raise InvalidPredicateError(
            f"WHERE predicate {text!r} contains a subquery; only conditions on partition columns are allowed."
        )


def _check_columns(tree: exp.Expression, scope: Scope, text: str) -> None:
    for col in tree.find_all(exp.Column):
        name = ".".join(p.name for p in col.parts)
        if col.table or name.lower() not in scope.types:
            raise InvalidPredicateError(
                f"Predicate references non-partition column '{name}'. "
                f"Only the partition columns may be referenced: [{', '.join(scope.types)}]."
            )


# ----------------------------------------------------------------------------- leaves
def _column(e: exp.Column, ctx: Context) -> Node:
    key = e.name.lower()
    return Node(lambda row: row.get(key), ctx.scope.types[key])


def _literal(e: exp.Literal, ctx: Context) -> Node:
    if e.is_string:
        value = e.this
        return Node(lambda _r: value, "string")
    text = e.this
    if re.fullmatch(r"\d+", text):
        n = int(text)
        return Node(lambda _r: n, INTEGRAL)
    if re.fullmatch(r"(\d+\.\d*|\.\d+)", text):
        d = Decimal(text)
        return Node(lambda _r: d, "decimal")
    f = float(text.rstrip("dD"))
    return Node(lambda _r: f, "double")


def _boolean(e: exp.Boolean, ctx: Context) -> Node:
    value = bool(e.this)
    return Node(lambda _r: value, "boolean")


def _null(e: exp.Null, ctx: Context) -> Node:
    return Node(lambda _r: None, "null")


def _paren(e: exp.Paren, ctx: Context) -> Node:
    return _compile(e.this, ctx)


# ----------------------------------------------------------------------------- logic
def _connective(absorbing: bool) -> Handler:
    """SQL's three-valued AND (``absorbing`` False) or OR (True): the absorbing value wins, else unknown
    wins, and the right side is evaluated only when the left does not decide."""

    def handler(e: exp.And | exp.Or, ctx: Context) -> Node:
        left, right = _bool_operand(e.left, ctx), _bool_operand(e.right, ctx)

        def fn(row: Row) -> Any:
            a = left.fn(row)
            if a is absorbing:
                return absorbing
            b = right.fn(row)
            if b is absorbing:
                return absorbing
            return None if a is None or b is None else not absorbing

        return Node(fn, "boolean")

    return handler


_and = _connective(False)
_or = _connective(True)


def _not(e: exp.Not, ctx: Context) -> Node:
    inner = _bool_operand(e.this, ctx)

    def fn(row: Row) -> Any:
        v = inner.fn(row)
        return None if v is None else not v

    return Node(fn, "boolean")


def _bool_operand(e: Any, ctx: Context) -> Node:
    node = _compile(e, ctx)
    if node.type not in ("boolean", "null"):
        if node.type == "string":
            tz = ctx.scope.time_zone
            return Node(lambda row: cast_value(node.fn(row), "string", "boolean", tz), "boolean")
        raise InvalidPredicateError(f"WHERE predicate {ctx.text!r}: a {node.type} is not a condition.")
    return node


# ----------------------------------------------------------------------------- comparisons
def coerce(a: Node, b: Node, ctx: Context) -> tuple[Callable[[Row], Any], Callable[[Row], Any], str]:
    """Both sides cast to their common comparison type."""
    try:
        target = common_type(a.type, b.type)
    except InvalidPredicateError as exc:
        raise InvalidPredicateError(f"WHERE predicate {ctx.text!r}: {exc}") from None
    tz = ctx.scope.time_zone

    def cast(n: Node) -> Callable[[Row], Any]:
        if n.type in (target, "null"):
            return n.fn
        return lambda row: cast_value(n.fn(row), n.type, target, tz)

    return cast(a), cast(b), target


_OPS: dict[type[Any], Callable[[int], bool]] = {
    exp.EQ: lambda c: c == 0,
    exp.NEQ: lambda c: c != 0,
    exp.GT: lambda c: c > 0,
    exp.GTE: lambda c: c >= 0,
    exp.LT: lambda c: c < 0,
    exp.LTE: lambda c: c <= 0,
}


def _comparison(e: exp.Binary, ctx: Context) -> Node:
    left, right, _ = coerce(_compile(e.left, ctx), _compile(e.right, ctx), ctx)
    test = _OPS[type(e)]

    def fn(row: Row) -> Any:
        c = sql_compare(left(row), right(row))
        return None if c is None else test(c)

    return Node(fn, "boolean")


def _null_safe_eq(e: exp.NullSafeEQ, ctx: Context) -> Node:
    left, right, _ = coerce(_compile(e.left, ctx), _compile(e.right, ctx), ctx)

    def fn(row: Row) -> Any:
        a, b = left(row), right(row)
        return (a is None and b is None) or (a is not None and b is not None and sql_compare(a, b) == 0)

    return Node(fn, "boolean")


def _in(e: exp.In, ctx: Context) -> Node:
    if e.args.get("query") or e.args.get("unnest") or e.args.get("field"):
        raise ctx.refuse("a subquery in IN")
    subject = _compile(e.this, ctx)
    pairs = [coerce(subject, _compile(x, ctx), ctx) for x in e.expressions]

    def fn(row: Row) -> Any:
        unknown = False
        for left, right, _ in pairs:
            c = sql_compare(left(row), right(row))
            if c == 0:
                return True
            unknown = unknown or c is None
        return None if unknown else False

    return Node(fn, "boolean")


def _between(e: exp.Between, ctx: Context) -> Node:
    ge = exp.GTE(this=e.this, expression=e.args["low"])
    le = exp.LTE(this=e.this.copy(), expression=e.args["high"])
    return _and(exp.And(this=ge, expression=le), ctx)


def _is(e: exp.Is, ctx: Context) -> Node:
    if not isinstance(e.expression, exp.Null):
        raise ctx.refuse(f"IS {e.expression.sql(dialect='spark')}")
    inner = _compile(e.this, ctx)
    return Node(lambda row: inner.fn(row) is None, "boolean")


def _like_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _like(e: exp.Like | exp.ILike, ctx: Context) -> Node:
    subject = _compile(e.this, ctx)
    pattern_node = _compile(e.expression, ctx)
    fold = isinstance(e, exp.ILike)
    tz = ctx.scope.time_zone

    def fn(row: Row) -> Any:
        value = cast_value(subject.fn(row), subject.type, "string", tz)
        pattern = cast_value(pattern_node.fn(row), pattern_node.type, "string", tz)
        if value is None or pattern is None:
            return None
        if fold:
            value, pattern = value.lower(), pattern.lower()
        return _like_regex(pattern).fullmatch(value) is not None

    return Node(fn, "boolean")


# ----------------------------------------------------------------------------- the rest
def _compile(e: Any, ctx: Context) -> Node:
    handler = _HANDLERS.get(type(e)) or FUNCTIONS.get(type(e))
    if handler is None:
        raise ctx.refuse(_describe(e))
    node = handler(e, ctx)
    if not e.args.get("negate"):
        return node
    return Node(lambda row: None if (v := node.fn(row)) is None else not v, "boolean")  # NOT LIKE, NOT ILIKE


def _describe(e: Any) -> str:
    if isinstance(e, exp.Anonymous):
        return f"the function {e.name}()"
    if isinstance(e, exp.Func):
        return f"the function {e.sql_name()}()"
    return f"{type(e).__name__} ({e.sql(dialect='spark')})"


_HANDLERS: dict[type[Any], Handler] = {
    exp.Column: _column,
    exp.Literal: _literal,
    exp.Boolean: _boolean,
    exp.Null: _null,
    exp.Paren: _paren,
    exp.And: _and,
    exp.Or: _or,
    exp.Not: _not,
    exp.EQ: _comparison,
    exp.NEQ: _comparison,
    exp.GT: _comparison,
    exp.GTE: _comparison,
    exp.LT: _comparison,
    exp.LTE: _comparison,
    exp.NullSafeEQ: _null_safe_eq,
    exp.In: _in,
    exp.Between: _between,
    exp.Is: _is,
    exp.Like: _like,
    exp.ILike: _like,
}

_FUNCTION_NAMES = (
    "cast",
    "date",
    "to_date",
    "to_timestamp",
    "year",
    "month",
    "day",
    "dayofmonth",
    "lower",
    "upper",
    "substring",
    "concat",
    "coalesce",
    "trim",
    "length",
    "abs",
)


# ----------------------------------------------------------------------------- delta-spark's recorded form
def _catalyst_value(e: Any) -> str:
    if isinstance(e, exp.Column):
        name = e.name
        return f"'{name}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"'`{name}`"
    if isinstance(e, exp.Literal):
        return str(e.this)
    if isinstance(e, exp.Null):
        return "null"
    if isinstance(e, exp.Boolean):
        return "true" if e.this else "false"
    return _catalyst(e)


_CATALYST_OPS: dict[type[Any], str] = {
    exp.EQ: "=",
    exp.NEQ: "NOT",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.NullSafeEQ: "<=>",
}


def _catalyst(e: Any) -> str:
    """Catalyst's ``toString`` of the parsed predicate, as delta-spark records it (common forms)."""
    if isinstance(e, exp.Paren):
        return _catalyst(e.this)
    if isinstance(e, (exp.And, exp.Or)):
        op = "AND" if isinstance(e, exp.And) else "OR"
        return f"({_catalyst(e.left)} {op} {_catalyst(e.right)})"
    if isinstance(e, exp.NEQ):
        return f"NOT ({_catalyst_value(e.left)} = {_catalyst_value(e.right)})"
    if type(e) in _CATALYST_OPS:
        return f"({_catalyst_value(e.left)} {_CATALYST_OPS[type(e)]} {_catalyst_value(e.right)})"
    if isinstance(e, exp.Not):
        return f"NOT {_catalyst(e.this)}"
    if isinstance(e, exp.In):
        return f"{_catalyst_value(e.this)} IN ({','.join(_catalyst_value(x) for x in e.expressions)})"
    if isinstance(e, exp.Is):
        return f"isnull({_catalyst_value(e.this)})"
    if isinstance(e, (exp.Column, exp.Literal, exp.Null, exp.Boolean)):
        return _catalyst_value(e)
    return str(e.sql(dialect="spark"))
