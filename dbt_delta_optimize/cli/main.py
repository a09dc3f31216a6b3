"""The ``dbt-delta-optimize`` command line: the group, its global options, and ``jars``.

Commands live in ``optimize`` (optimize, auto-compact), ``purge`` and ``inspect`` (info, validate, health,
history); all run inside the error boundary of ``common``. Exit status: 0 done or nothing to do, 1 partial
failure or a lost conflict, 2 bad input or an unsupported table (the message says what to fix), 3 retryable
(store or Spark Connect server unreachable); an error is one ``error:`` line on stderr.
"""

from __future__ import annotations

from typing import NoReturn

import click

from ..process_exit import exit_process, status_of
from .analyze import analyze_commands
from .common import (
    EXIT_CODES_HELP,
    BoundaryCommand,
    BoundaryGroup,
    CliState,
    configure_logging,
    use_remote,
)
from .format import echo_json
from .inspect import inspect_commands
from .maintain import maintain_commands
from .optimize import optimize_commands
from .purge import purge_commands
from .vacuum import vacuum_commands

__all__ = ["cli", "main"]


@click.group(cls=BoundaryGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
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


for _command in (
    *optimize_commands,
    *purge_commands,
    *inspect_commands,
    *maintain_commands,
    *analyze_commands,
    *vacuum_commands,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> NoReturn:
    """The console script's entry point: run the command, then end the process with its exit code."""
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
