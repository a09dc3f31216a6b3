"""The public operations' arguments, checked up front: a wrong type is an InvalidArgumentError, never a
TypeError later; settings given as keywords are folded into one ``OptimizeOptions`` and validated
before anything is read or started.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any, Literal, TypeVar, cast

from ..errors import InvalidArgumentError
from ..options import OPTIMIZE_OPTIONS, OptimizeOptions
from ..plan.config import OptimizeConfig

__all__ = [
    "Curve",
    "check_curve",
    "check_table",
    "check_where",
    "check_zorder",
    "keyword_settings",
    "merge_options",
    "settings_of",
]

Curve = Literal["zorder", "hilbert"]
F = TypeVar("F", bound=Callable[..., Any])

_SETTINGS = frozenset(f.name for f in fields(OptimizeOptions))


def check_table(table: object) -> str:
    if not isinstance(table, str) or not table.strip():
        raise InvalidArgumentError(f"table must be a path or a catalog name (a non-empty string), got {table!r}.")
    return table


def check_where(where: object) -> list[str]:
    predicates: Any = [where] if isinstance(where, str) else where if where is not None else []
    if not isinstance(predicates, (list, tuple)) or not all(isinstance(p, str) for p in predicates):
        raise InvalidArgumentError(f"where must be a string or a list of strings, got {where!r}.")
    return list(predicates)


def check_zorder(zorder_by: object) -> list[str]:
    if isinstance(zorder_by, str):
        raise InvalidArgumentError(
            f"zorder_by must be a list of column names, got the string {zorder_by!r}; write [{zorder_by!r}]."
        )
    if not isinstance(zorder_by, (list, tuple, type(None))):
        raise InvalidArgumentError(f"zorder_by must be a list of column names, got {zorder_by!r}.")
    columns = list(zorder_by) if zorder_by is not None else []
    if not all(isinstance(c, str) for c in columns):
        raise InvalidArgumentError(f"zorder_by must be a list of column names, got {zorder_by!r}.")
    return columns


def check_curve(curve: object) -> Curve:
    if curve in ("zorder", "hilbert"):
        return cast(Curve, curve)
    raise InvalidArgumentError(f"curve must be 'zorder' or 'hilbert', got {curve!r}.")


def merge_options(options: OptimizeOptions | None, given: dict[str, Any]) -> OptimizeOptions:
    """``options`` with the keyword settings given over it; invalid values fail here, before any session starts."""
    if options is not None and not isinstance(options, OptimizeOptions):
        raise InvalidArgumentError(f"options must be an OptimizeOptions, got {options!r}.")
    merged = replace(options or OptimizeOptions(), **given)
    OptimizeConfig.resolve(None, merged.overrides())
    return merged


def keyword_settings(fn: F) -> F:
    """Fold the keyword-only parameters of ``fn`` named after options into its ``options`` parameter.

    The public operations list every setting they take as an explicit, typed keyword (for users and
    type checkers); their bodies read only ``options``. An unknown keyword is Python's TypeError.
    Checked when decorating: each such parameter is a declared option, keyword-only, defaulting to None.
    """
    signature = inspect.signature(fn)
    names = [n for n in signature.parameters if n in _SETTINGS]
    declared = {o.name for o in OPTIMIZE_OPTIONS}
    for name in names:
        p = signature.parameters[name]
        if name not in declared or p.kind is not p.KEYWORD_ONLY or p.default is not None:
            raise TypeError(f"{fn.__qualname__}: {name} must be a keyword-only option defaulting to None")
    if "options" not in signature.parameters:
        raise TypeError(f"{fn.__qualname__} takes no options parameter")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        given = {n: v for n in names if (v := bound.arguments.pop(n, None)) is not None}
        bound.arguments["options"] = merge_options(bound.arguments.get("options"), given)
        return fn(*bound.args, **bound.kwargs)

    return cast(F, wrapper)


def settings_of(fn: Callable[..., Any]) -> Sequence[str]:
    """The option keywords of a public operation, in signature order (for tests and docs)."""
    return [n for n in inspect.signature(fn).parameters if n in _SETTINGS]
