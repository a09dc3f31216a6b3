"""The commands' setting flags, made from the one declaration of options (``dbt_delta_optimize.options``).

Each option becomes its flag (``--max-threads``), typed by its kind: sizes are parsed as Spark parses
them (the error names the flag), counts and ratios are ranges, choices are click choices, booleans a
``--x/--no-x`` pair; the help text is the declaration's, with its default. A flag not given is None,
so the session conf and then the default apply, as in the API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from ..errors import InvalidArgumentError
from ..options import OptimizeOptions, Option

__all__ = ["given", "optimize_options", "option_help", "option_named", "setting_flags"]

F = TypeVar("F", bound=Callable[..., Any])


def option_help(option: Option) -> str:
    """The declaration's help, with its default (click lists a choice's values itself)."""
    return f"{option.help} [default: {option.default_text()}]"


def _size(option: Option) -> Callable[[click.Context, click.Parameter, str | None], int | None]:
    """A size flag is parsed as Spark parses sizes, the error naming the flag."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
        if value is None:
            return None
        try:
            return int(option.parse(value, key=option.flag))
        except InvalidArgumentError as exc:
            raise click.BadParameter(str(exc)) from None

    return callback


def _flag(option: Option) -> Callable[[F], F]:
    common: dict[str, Any] = {"help": option_help(option), "default": None}
    if option.kind == "flag":
        name = option.flag[2:]
        return click.option(f"--{name}/--no-{name}", option.name, **common)
    if option.kind == "count":
        return click.option(option.flag, option.name, type=click.IntRange(min=option.minimum), **common)
    if option.kind == "ratio":
        return click.option(option.flag, option.name, type=click.FloatRange(0.0, 1.0), **common)
    if option.kind == "choice":
        return click.option(option.flag, option.name, type=click.Choice(option.choices), **common)
    if option.kind == "size":
        return click.option(option.flag, option.name, callback=_size(option), metavar="SIZE", **common)
    # durations: the text as given; the API parses it (an error names the setting, exit 2)
    metavar = "DURATION" if option.kind == "duration" else "N|DURATION"
    return click.option(option.flag, option.name, metavar=metavar, **common)


def option_named(options: Sequence[Option], name: str) -> Option:
    return next(o for o in options if o.name == name)


def setting_flags(options: Sequence[Option]) -> Callable[[F], F]:
    """Add one flag per option to a command (in the declaration's order)."""

    def decorate(fn: F) -> F:
        for option in reversed(options):  # click lists options in the order their decorators are applied
            fn = _flag(option)(fn)
        return fn

    return decorate


def given(values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a command was given (flags not given are left to the session conf and defaults)."""
    return {k: v for k, v in values.items() if v is not None}


def optimize_options(values: Mapping[str, Any]) -> OptimizeOptions:
    """The OPTIMIZE settings a command was given, as the API's one value."""
    return OptimizeOptions(**given(values))
