"""The ``dbt-delta-optimize`` command line: the group, its global options, and ``jars``.

Commands live in ``optimize`` (optimize, auto-compact), ``purge``, ``inspect`` (info, validate, health,
history), ``maintain``, ``analyze`` and ``vacuum`` (``COMMAND_MODULES``, loaded when used); all run inside the error boundary of ``common``. Exit status: 0 done or nothing to do, 1 partial
failure or a lost conflict, 2 bad input or an unsupported table (the message says what to fix), 3 retryable
(store or Spark Connect server unreachable); an error is one ``error:`` line on stderr.
"""

from __future__ import annotations

import importlib
from typing import NoReturn

import click

from ..no_pandas import block as block_pandas
from ..no_pandas import no_huge_pages, one_blas_thread
from ..process_exit import exit_process, status_of
from .common import (
    EXIT_CODES_HELP,
    BoundaryCommand,
    BoundaryGroup,
    CliState,
    configure_logging,
    owns_process,
    use_remote,
)
from .format import echo_json

__all__ = ["COMMAND_MODULES", "cli", "main"]

#: Where each command lives: a module of this package (its ``<module>_commands`` tuple) and the names of
#: the commands in it. A command's module is imported only when that command runs (or ``--help`` lists
#: them all): a fresh ``vacuum`` does not compile the other commands and what they import.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "optimize": ("optimize", "auto-compact"),
    "purge": ("purge",),
    "inspect": ("info", "validate", "health", "history"),
    "maintain": ("maintain",),
    "analyze": ("analyze",),
    "vacuum": ("vacuum",),
}


class LazyGroup(BoundaryGroup):
    """The group whose commands (but ``jars``) are loaded from ``COMMAND_MODULES`` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *(n for names in COMMAND_MODULES.values() for n in names)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module = next((m for m, names in COMMAND_MODULES.items() if cmd_name in names), None)
            if module is not None:
                loaded = importlib.import_module(f".{module}", __package__)
                for command in getattr(loaded, f"{module}_commands"):
                    self.add_command(command)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="dbt-delta-optimize")
@click.option("--debug", is_flag=True, help="Debug logs, and the full cause chain of an error.")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option(
    "--remote",
    metavar="sc://HOST:PORT",
    help="Run on a Spark Connect server instead of an embedded Spark (default: $SPARK_REMOTE).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int, remote: str | None) -> None:
    """Compact and cluster Delta tables with delta-spark's semantics, committed safely."""
    ctx.obj = CliState(debug=debug, verbose=verbose)
    ctx.call_on_close(configure_logging(verbose, debug))
    if remote:
        ctx.call_on_close(use_remote(remote))


@cli.command(cls=BoundaryCommand)
@click.option("--json", "as_json", is_flag=True, help="Print the jar paths as JSON.")
def jars(as_json: bool) -> None:
    """Print Delta's jar files (comma-separated) for spark.jars, e.g. in a dbt-spark profile.

    After a plain ``pip install`` they are downloaded once from Maven Central (checksums verified)
    into ``~/.cache/dbt-delta-optimize/jars`` ($DBT_DELTA_OPTIMIZE_HOME); later calls read that cache.
    """
    from ..engine.jars import resolve_jars
    from ..engine.session import delta_jars

    found = delta_jars() or resolve_jars()
    if as_json:
        echo_json({"jars": found})
    else:
        click.echo(",".join(found))


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script's entry point: run the command, then end the process with its exit code."""
    owns_process(True)
    one_blas_thread()
    no_huge_pages()
    block_pandas()  # our own process: pyarrow's conversions need no pandas (no_pandas)
    try:
        cli.main(args=argv, prog_name="dbt-delta-optimize")
        code = 0
    except SystemExit as exc:
        code = status_of(exc)
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        code = 130
    exit_process(code)


if __name__ == "__main__":  # pragma: no cover
    main()
