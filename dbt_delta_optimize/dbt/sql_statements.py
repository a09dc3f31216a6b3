"""The SQL the hooks send through a dbt connection (thrift, http, odbc), built by strict quoting only.

Table names, column names and partition values are untrusted (a model's config, a table's log), so
nothing is pasted into a statement: identifiers are back-quoted with ``\\``` doubled, string
literals escape ``\\`` and ``'`` and write ``$`` as ``\\u0024`` (a Thrift server runs Hive's variable
substitution over the text before parsing it, and ``${env:...}`` in a literal would otherwise be
replaced by the server's environment), partition types come from an allow-list, and a user's WHERE
is the canonical SQL our predicate parser regenerates from its safe language. Pure: no connection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from ..errors import InvalidArgumentError
from ..plan.curve import parse_column

__all__ = [
    "alter_cluster_by",
    "describe_detail",
    "describe_extended",
    "describe_history",
    "get_conf",
    "optimize",
    "partitions_predicate",
    "purge",
    "quote_identifier",
    "quote_name",
    "restore_conf",
    "set_conf",
    "string_literal",
    "table_name",
]

#: Delta partition column types (primitive only) and their SQL names.
_TYPES = re.compile(
    r"(string|boolean|byte|tinyint|short|smallint|integer|int|long|bigint|float|double|date|timestamp|"
    r"timestamp_ntz|binary|decimal\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\))",
    re.IGNORECASE,
)
_CONF_KEY = re.compile(r"spark\.[A-Za-z0-9_.]+")


def _check_text(kind: str, text: str) -> str:
    if "${" in text or "\x00" in text:
        raise InvalidArgumentError(
            f"The {kind} {text!r} contains '${{' or a NUL character, which a Spark SQL server would rewrite "
            "(variable substitution) or reject: rename it to use it through a SQL connection."
        )
    return text


def quote_identifier(name: str) -> str:
    """One identifier, back-quoted (```a``b``` for a`b)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"An empty identifier cannot be quoted (got {name!r}).")
    return "`" + _check_text("name", name).replace("`", "``") + "`"


def quote_name(parts: Sequence[str]) -> str:
    return ".".join(quote_identifier(p) for p in parts)


def table_name(table: str) -> str:
    """``schema.table`` or ``catalog.schema.table`` (back-quoted parts may hold dots), quoted part by part."""
    parts = parse_column(table)
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise InvalidArgumentError(f"{table!r} is not a table name (schema.table or catalog.schema.table).")
    return quote_name(parts)


def column_name(column: str) -> str:
    """A column, nested ``a.b`` or back-quoted, quoted part by part."""
    return quote_name(parse_column(column))


def string_literal(value: str) -> str:
    """A Spark SQL string literal holding exactly ``value`` (escaped; no ``${`` reaches the server)."""
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "$" or ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def sql_type(type_name: str) -> str:
    """A partition column's type, from the allow-list (a table's log is untrusted)."""
    if not isinstance(type_name, str) or not _TYPES.fullmatch(type_name.strip()):
        raise InvalidArgumentError(f"Partition type {type_name!r} cannot be used in a SQL predicate.")
    return re.sub(r"\s+", "", type_name.strip()).upper()


def _text(value: Any) -> str:
    """A partition value as the string Spark casts to its type (raw log strings pass unchanged)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (str, int, float, Decimal, date)):
        return str(value)
    raise InvalidArgumentError(f"Partition value {value!r} ({type(value).__name__}) cannot be used in a SQL predicate.")


def partitions_predicate(
    partitions: Iterable[Mapping[str, Any]], columns: Sequence[str], types: Mapping[str, str]
) -> str:
    """OR of ANDs of ``col <=> CAST('value' AS type)`` (delta-spark's auto-compaction predicate), one per partition."""
    terms = []
    for values in partitions:
        parts = []
        for column in columns:
            value = values.get(column)
            literal = "NULL" if value is None else string_literal(_text(value))
            parts.append(f"{quote_identifier(column)} <=> CAST({literal} AS {sql_type(types[column])})")
        terms.append("(" + " AND ".join(parts) + ")")
    if not terms:
        raise InvalidArgumentError("No partition was chosen: there is nothing to put in a WHERE clause.")
    return " OR ".join(sorted(set(terms)))


def _where(predicates: Sequence[str]) -> str:
    for p in predicates:
        _check_text("WHERE predicate", p)
    return " WHERE " + " AND ".join(f"({p})" for p in predicates) if predicates else ""


def optimize(table: str, *, where: Sequence[str] = (), zorder_by: Sequence[str] = ()) -> str:
    """``OPTIMIZE t [WHERE ...] [ZORDER BY (...)]``; ``where`` holds canonical predicates or our partition ORs."""
    zorder = f" ZORDER BY ({', '.join(column_name(c) for c in zorder_by)})" if zorder_by else ""
    return f"OPTIMIZE {table_name(table)}{_where(where)}{zorder}"


def purge(table: str, *, where: Sequence[str] = ()) -> str:
    """``REORG TABLE t [WHERE ...] APPLY (PURGE)``."""
    return f"REORG TABLE {table_name(table)}{_where(where)} APPLY (PURGE)"


def alter_cluster_by(table: str, columns: Sequence[str]) -> str:
    return f"ALTER TABLE {table_name(table)} CLUSTER BY ({', '.join(column_name(c) for c in columns)})"


def describe_detail(table: str) -> str:
    return f"DESCRIBE DETAIL {table_name(table)}"


def describe_extended(table: str) -> str:
    return f"DESCRIBE TABLE EXTENDED {table_name(table)}"


def describe_history(table: str, limit: int) -> str:
    return f"DESCRIBE HISTORY {table_name(table)} LIMIT {max(1, int(limit))}"


def _conf_key(key: str) -> str:
    if not _CONF_KEY.fullmatch(key):
        raise InvalidArgumentError(f"{key!r} is not a Spark conf key.")
    return key


def get_conf(key: str) -> str:
    return f"SET {_conf_key(key)}"


def set_conf(key: str, value: int) -> str:
    """``SET key=value`` for our numeric settings (sizes); a value is an int, never text."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{key} takes a whole number here, got {value!r}.")
    return f"SET {_conf_key(key)}={value}"


def restore_conf(key: str, previous: str | None) -> str:
    """Put a conf back: ``SET key=previous`` for a size-like value, else ``RESET key`` (it was unset)."""
    if previous is not None and re.fullmatch(r"[0-9]+[A-Za-z]{0,3}", previous):
        return f"SET {_conf_key(key)}={previous}"
    return f"RESET {_conf_key(key)}"
