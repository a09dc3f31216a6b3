"""Arrow's compute kernels called by name, without importing ``pyarrow.compute``.

``pyarrow.compute`` builds a documented Python wrapper for each of its ~300 kernels as it loads: 25-32 ms of a
fresh process, on the serial path before its first bin (docs/performance.md, "Issue 45, kernels without
pyarrow.compute"). A fresh OPTIMIZE calls about twenty kernels: the log's file table, the planner and the bins
call them here, through ``pyarrow._compute.call_function`` as those wrappers do, with the same defaults.
Arrays' own ``take``, ``filter`` and ``cast`` load ``pyarrow.compute`` on their first call, so that code calls
these instead. Elsewhere (clustering, auto compaction, Spark) ``pyarrow.compute`` is fine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "add",
    "all_",
    "and_",
    "any_",
    "binary_join_element_wise",
    "cast",
    "coalesce",
    "count_distinct",
    "cumulative_sum",
    "dictionary_encode",
    "equal",
    "fill_null",
    "filter_",
    "if_else",
    "index",
    "index_in",
    "indices_nonzero",
    "invert",
    "is_in",
    "is_nan",
    "is_valid",
    "less",
    "map_lookup",
    "match_substring",
    "match_substring_regex",
    "min_",
    "min_max",
    "not_equal",
    "or_",
    "sort_indices",
    "starts_with",
    "subtract",
    "sum_",
    "take",
]


def _kernels() -> Any:
    """``pyarrow._compute``, the extension whose names ``pyarrow.compute`` re-exports (``call_function`` and the
    options classes); ``pyarrow.compute`` itself should a pyarrow ever move them."""
    try:
        import pyarrow._compute as kernels
    except ImportError:  # pragma: no cover - every pyarrow we support has it
        import pyarrow.compute as kernels
    return kernels


def _call(name: str, args: Sequence[Any], options: Any = None) -> Any:
    return _kernels().call_function(name, list(args), options)


def _like(value: Any, data: Any) -> Any:
    """A Python value as a scalar of ``data``'s type. Left to Arrow, the type of a bare Python value is inferred,
    and the first inference imports dateutil (2-4 ms of a fresh process)."""
    import pyarrow as pa

    if isinstance(value, (pa.Array, pa.ChunkedArray, pa.Scalar)):
        return value
    return pa.scalar(value, type=data.type)


def take(data: Any, indices: Any) -> Any:
    """``pc.take`` (bounds checked), for an array, a chunked array or a table."""
    return _call("take", (data, indices))


def filter_(data: Any, mask: Any) -> Any:
    """``pc.filter``: the rows where ``mask`` is true (a null drops its row)."""
    return _call("filter", (data, mask))


def cast(data: Any, target_type: Any) -> Any:
    """``pc.cast``, safe (an overflow or a lossy cast raises)."""
    return _call("cast", (data,), _kernels().CastOptions.safe(target_type))


def sort_indices(data: Any, sort_keys: Sequence[tuple[str, str]] = ()) -> Any:
    """``pc.sort_indices``: ascending for an array, by ``sort_keys`` for a table; nulls last."""
    return _call("sort_indices", (data,), _kernels().SortOptions(sort_keys) if sort_keys else None)


def is_in(values: Any, value_set: Any) -> Any:
    """``pc.is_in`` (a null matches a null in ``value_set``)."""
    return _call("is_in", (values,), _kernels().SetLookupOptions(value_set))


def index_in(values: Any, value_set: Any) -> Any:
    """``pc.index_in``: each value's position in ``value_set``, null where it is not there."""
    return _call("index_in", (values,), _kernels().SetLookupOptions(value_set))


def _matching(name: str, strings: Any, pattern: str) -> Any:
    return _call(name, (strings,), _kernels().MatchSubstringOptions(pattern))


def starts_with(strings: Any, pattern: str) -> Any:
    return _matching("starts_with", strings, pattern)


def match_substring(strings: Any, pattern: str) -> Any:
    return _matching("match_substring", strings, pattern)


def match_substring_regex(strings: Any, pattern: str) -> Any:
    return _matching("match_substring_regex", strings, pattern)


def fill_null(values: Any, fill_value: Any) -> Any:
    """``pc.fill_null`` with a Python value: each null replaced by ``fill_value``, of the values' type."""
    import pyarrow as pa

    return _call("coalesce", (values, pa.scalar(fill_value, type=values.type)))


def binary_join_element_wise(*strings_and_separator: Any) -> Any:
    """``pc.binary_join_element_wise``: the strings of each row joined by the last argument (a null gives null)."""
    *strings, separator = strings_and_separator
    return _call("binary_join_element_wise", (*strings, _like(separator, strings[0])))


def map_lookup(maps: Any, query_key: Any, occurrence: str) -> Any:
    """``pc.map_lookup``: each map's item for ``query_key`` (``occurrence``: "first", "last" or "all")."""
    return _call("map_lookup", (maps,), _kernels().MapLookupOptions(query_key, occurrence))


def coalesce(*values: Any) -> Any:
    """``pc.coalesce``: each row's first non-null value."""
    return _call("coalesce", values)


def index(data: Any, value: Any) -> Any:
    """``pc.index``: the position of the first ``value`` (a Python value of the data's type), -1 if none."""
    import pyarrow as pa

    return _call("index", (data,), _kernels().IndexOptions(pa.scalar(value, type=data.type)))


def cumulative_sum(data: Any) -> Any:
    """``pc.cumulative_sum`` from zero (overflow wraps, as there)."""
    return _call("cumulative_sum", (data,))


def add(x: Any, y: Any) -> Any:
    return _call("add", (x, _like(y, x)))


def count_distinct(data: Any) -> Any:
    """``pc.count_distinct`` of the valid values (a scalar)."""
    return _call("count_distinct", (data,))


def min_max(data: Any) -> Any:
    """``pc.min_max`` skipping nulls (a struct scalar)."""
    return _call("min_max", (data,))


def min_(data: Any) -> Any:
    return _call("min", (data,))


def any_(data: Any) -> Any:
    """``pc.any``, nulls skipped: a boolean scalar, null when there is no valid value."""
    return _call("any", (data,))


def all_(data: Any) -> Any:
    """``pc.all``, nulls skipped: a boolean scalar, null when there is no valid value."""
    return _call("all", (data,))


def sum_(data: Any) -> Any:
    """``pc.sum``, nulls skipped: a scalar, null when there is no valid value."""
    return _call("sum", (data,))


def dictionary_encode(data: Any) -> Any:
    """``pc.dictionary_encode``, a null kept as a null index."""
    return _call("dictionary_encode", (data,))


def is_valid(data: Any) -> Any:
    return _call("is_valid", (data,))


def is_nan(data: Any) -> Any:
    return _call("is_nan", (data,))


def indices_nonzero(data: Any) -> Any:
    return _call("indices_nonzero", (data,))


def invert(data: Any) -> Any:
    return _call("invert", (data,))


def if_else(cond: Any, left: Any, right: Any) -> Any:
    return _call("if_else", (cond, left, right))


def subtract(x: Any, y: Any) -> Any:
    return _call("subtract", (x, _like(y, x)))


def and_(x: Any, y: Any) -> Any:
    return _call("and", (x, y))


def or_(x: Any, y: Any) -> Any:
    return _call("or", (x, y))


def equal(x: Any, y: Any) -> Any:
    return _call("equal", (x, _like(y, x)))


def not_equal(x: Any, y: Any) -> Any:
    return _call("not_equal", (x, _like(y, x)))


def less(x: Any, y: Any) -> Any:
    return _call("less", (x, _like(y, x)))
