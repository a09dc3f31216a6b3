"""The shared pieces of predicate compilation (a leaf): compiled nodes, the scope, and the context a handler gets.

``predicate_compile`` handles the language's core (columns, literals, comparisons, boolean logic)
and ``predicate_functions`` the allowed functions; both compile sub-expressions through the
context, so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidPredicateError

__all__ = ["Context", "Handler", "Node", "Row", "Scope"]

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Scope:
    """Partition column types (lower-cased names -> our type names) and the session time zone."""

    types: Mapping[str, str]
    time_zone: str


@dataclass(frozen=True)
class Node:
    """A compiled expression: its evaluator over typed partition values, and its SQL type."""

    fn: Callable[[Row], Any]
    type: str


class Context:
    """What a handler gets: the scope, the predicate's text, and how to compile a sub-expression."""

    def __init__(
        self, scope: Scope, text: str, compile: Callable[[Any, Context], Node], functions: Sequence[str]
    ) -> None:
        self.scope = scope
        self.text = text
        self._compile = compile
        self._functions = functions

    def compile(self, e: Any) -> Node:
        return self._compile(e, self)

    def refuse(self, what: str) -> InvalidPredicateError:
        return InvalidPredicateError(
            f"WHERE predicate {self.text!r} uses {what}, which is not allowed. Predicates may use partition "
            "columns, literals, comparisons, AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL, LIKE, arithmetic and the "
            f"functions {', '.join(sorted(self._functions))}."
        )


#: Compiles one kind of expression.
Handler = Callable[[Any, Context], Node]
