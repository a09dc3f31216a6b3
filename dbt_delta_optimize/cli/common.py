"""What every CLI command shares: one error boundary (exit codes, one line, no stack), logging, sizes."""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any

import click

from ..errors import DeltaOptimizeError, InvalidArgumentError, exit_code

__all__ = ["configure_logging", "run", "size_option"]


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if isinstance(ctx.obj, dict) and "debug" in ctx.obj:
            return bool(ctx.obj["debug"])
        ctx = ctx.parent
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return line.removeprefix("Kernel error: ")


def run(fn: Callable[[], Any]) -> Any:
    """Run fn; an error becomes one ``error:`` line on stderr and exit 2 (bad input) or 1.

    No traceback, Java stack or library text beyond the first line of an unexpected error,
    unless ``--debug`` is given, which prints the whole cause chain.
    """
    try:
        return fn()
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except DeltaOptimizeError as exc:
        if _debug():
            traceback.print_exception(exc)
        click.echo(f"error: {exc}", err=True)
        sys.exit(exit_code(exc))
    except Exception as exc:  # unexpected: still one line on stderr, exit 1
        if _debug():
            traceback.print_exception(exc)
        click.echo(f"error: {type(exc).__name__}: {_first_line(exc)} (run with --debug for details)", err=True)
        sys.exit(1)


def configure_logging(verbose: int, debug: bool) -> None:
    """Warnings by default; -v for info, --debug (or -vv) for debug, through rich's handler."""
    from rich.logging import RichHandler

    level = logging.DEBUG if debug or verbose > 1 else logging.INFO if verbose else logging.WARNING
    handler = RichHandler(show_path=debug, rich_tracebacks=debug)
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """click callback: parse 128m / 1g / bytes, reporting the option name on error."""
    if value is None:
        return None
    from ..plan.config import parse_size

    try:
        return parse_size(value, key=f"--{(param.name or 'size').replace('_', '-')}")
    except InvalidArgumentError as exc:
        raise click.BadParameter(str(exc)) from None
