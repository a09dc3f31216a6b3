"""What every CLI command shares: one error boundary, logging, where a table is, and how the process ends.

The boundary is built into the command class: every command of the group runs through
``run``, and the group turns click's own usage errors into the same one line. An error is one
``error: ...`` line on stderr and the exit code of its kind (``errors.exit_code``): 3 retryable
(store or server unreachable), 2 bad input or unsupported table, 1 any other failure. Without
``--debug`` no traceback, Java stack or library text beyond the first line of a message is printed;
with it, the whole cause chain comes first. The console script ends through ``process_exit.exit_process``.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from ..errors import DeltaOptimizeError, exit_code

__all__ = [
    "EXIT_CODES_HELP",
    "BoundaryCommand",
    "BoundaryGroup",
    "CliState",
    "configure_logging",
    "location",
    "one_line",
    "owns_process",
    "run",
    "use_remote",
]

#: The exit codes, as ``--help`` states them (``errors.exit_code`` decides them).
EXIT_CODES_HELP = (
    "Exit codes: 0 done, or nothing to do; 1 partial failure (some bins failed, the rest committed), a lost "
    "conflict or another failure; 2 bad input or an unsupported table (will not succeed as is); 3 retryable: "
    "the object store or the Spark Connect server could not be reached, throttled or timed out."
)

#: The loggers the CLI configures: ours, and the chatty ones of the Spark client.
_OUR_LOGGER = "dbt_delta_optimize"
_QUIET_LOGGERS = ("py4j", "pyspark")


#: Set by the console script's ``main``, which ends the process after its one command.
_OWNS_PROCESS = [False]


def owns_process(now: bool | None = None) -> bool:
    """Whether the command runs in a process of its own (the console script), after setting it if ``now`` is given:
    a process-wide choice (pyarrow loaded without numpy for a VACUUM) is made only then, never in a caller's."""
    if now is not None:
        _OWNS_PROCESS[0] = now
    return _OWNS_PROCESS[0]


@dataclass(frozen=True)
class CliState:
    """The group's global options, handed to every command through ``ctx.obj``."""

    debug: bool = False
    verbose: int = 0


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(CliState) if ctx is not None else None
    return state is not None and state.debug


def one_line(exc: BaseException) -> str:
    """The first line of a message, without deltalake's ``Kernel error:`` noise."""
    text = str(exc).replace("Kernel error: ", "").strip()
    first = text.splitlines()[0].strip() if text else ""
    return first or type(exc).__name__


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def run(fn: Callable[[], Any]) -> Any:
    """Run fn; an error becomes one ``error:`` line on stderr and the exit code of its kind (3, 2 or 1).

    Unexpected exceptions name their type and the first line of their message (a Java stack
    or a library's multi-line text stops there); ``--debug`` prints the whole cause chain first.
    """
    try:
        return fn()
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except DeltaOptimizeError as exc:
        debug = _debug()
        if debug:
            traceback.print_exception(exc)
        more = "" if debug or "\n" not in str(exc).strip() else " (run with --debug for details)"
        _fail(one_line(exc) + more, exit_code(exc))
    except Exception as exc:  # unexpected: still one line on stderr, exit 1
        debug = _debug()
        if debug:
            traceback.print_exception(exc)
        hint = "" if debug else " (run with --debug for details)"
        _fail(f"{type(exc).__name__}: {one_line(exc)}{hint}", exit_code(exc))


class BoundaryCommand(click.Command):
    """A command whose callback runs inside the error boundary (``run``); its --help ends with the exit codes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        super().__init__(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        return run(lambda: super(BoundaryCommand, self).invoke(ctx))


class BoundaryGroup(click.Group):
    """The CLI's group: its commands are BoundaryCommands, and usage errors are one line too."""

    command_class = BoundaryCommand

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(exc.format_message() + hint, exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            _fail("aborted", 1)
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


class _DropTracebacks(logging.Filter):
    """Without --debug, log records keep their message but lose the traceback they carry."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


class _LazyRichHandler(logging.Handler):
    """rich's handler, made at the first record: importing rich is a tenth of a short command's start
    (a VACUUM that logs no warning never pays it)."""

    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug
        self.inner: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.inner is None:
            from rich.logging import RichHandler

            from .format import console

            self.inner = RichHandler(console=console(stderr=True), show_path=self.debug, rich_tracebacks=self.debug)
        self.inner.emit(record)


def configure_logging(verbose: int, debug: bool) -> Callable[[], None]:
    """Warnings by default; -v info, -vv or --debug debug, through rich's handler on stderr.

    Only our package's logger gets the handler (and py4j/pyspark a level), so running the CLI
    in process leaves the host's logging alone; the returned function restores what was there.
    """
    level = logging.DEBUG if debug or verbose > 1 else logging.INFO if verbose else logging.WARNING
    ours = logging.getLogger(_OUR_LOGGER)
    touched = [ours, *(logging.getLogger(n) for n in _QUIET_LOGGERS)]
    saved = [(lg, lg.level, lg.propagate, list(lg.handlers)) for lg in touched]
    handler = _LazyRichHandler(debug)
    if not debug:
        handler.addFilter(_DropTracebacks())
    ours.handlers = [handler]
    ours.setLevel(level)
    ours.propagate = False
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(level if debug else max(level, logging.WARNING))

    def restore() -> None:
        for lg, lvl, propagate, handlers in saved:
            lg.setLevel(lvl)
            lg.propagate = propagate
            lg.handlers = handlers

    return restore


def location(table: str) -> str:
    """A path as is; a catalog name through the Spark session (started only then)."""
    from ..ops.table import locate

    return locate(table)[0]


def _parse_storage_options(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    options: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item.split('=')[0]!r}=...", param=param)
        options[key.strip()] = value
    ctx.meta["storage_options"] = options


def storage_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--storage-option KEY=VALUE`` (repeatable): object-store settings under deltalake's keys."""
    return click.option(
        "--storage-option",
        "storage_option",
        multiple=True,
        expose_value=False,
        callback=_parse_storage_options,
        help="Object-store setting under deltalake's key, e.g. AWS_ENDPOINT_URL=http://... (repeatable).",
    )(fn)


def storage_options() -> dict[str, str]:
    """The command's ``--storage-option`` settings (empty: the cloud's environment variables only)."""
    return dict(click.get_current_context().meta.get("storage_options", {}))


def table_storage(table: str) -> tuple[str, Any]:
    """(location, storage) of a table argument, with the command's storage options."""
    from ..ops.table import locate

    return locate(table, storage_options=storage_options())


def use_remote(url: str) -> Callable[[], None]:
    """Every Spark session of this command is a Spark Connect session to ``url`` (``SPARK_REMOTE``).

    The address is checked up front; the returned function restores the environment (for in-process runs).
    """
    from ..engine.session import REMOTE_ENV
    from ..errors import SparkConnectError

    if not url.startswith("sc://"):
        raise click.BadParameter(
            str(SparkConnectError(f"'{url}' is not a Spark Connect address: write sc://host:port."))
        )
    saved = os.environ.get(REMOTE_ENV)
    os.environ[REMOTE_ENV] = url

    def restore() -> None:
        if saved is None:
            os.environ.pop(REMOTE_ENV, None)
        else:
            os.environ[REMOTE_ENV] = saved

    return restore
