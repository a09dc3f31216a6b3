"""Helpers shared by the CLI modules: error handling with exit codes, size parsing."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ..errors import DeltaOptimizeError, InvalidArgumentError, TableNotFoundError, UnsupportedFeatureError

#: Errors that mean "fix your input" (exit 2); anything else is a failure (exit 1).
BAD_INPUT = (InvalidArgumentError, TableNotFoundError, UnsupportedFeatureError)


def run(fn: Callable[[], Any]) -> Any:
    """Run fn; our errors become one ``error:`` line on stderr and exit 2 (bad input) or 1."""
    try:
        return fn()
    except DeltaOptimizeError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, BAD_INPUT) else 1)
    except click.exceptions.Exit:
        raise
    except Exception as exc:  # unexpected: still one line on stderr, exit 1
        click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)


def size_option(ctx, param, value):
    """click callback: parse 128m / 1g / bytes, reporting the option name on error."""
    if value is None:
        return None
    from ..plan.config import parse_size

    try:
        return parse_size(value, key=f"--{param.name.replace('_', '-')}")
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None
