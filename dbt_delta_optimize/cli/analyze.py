"""``analyze``: compute per-file statistics exactly as delta-spark writes them (delta-spark's stats recompute)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..options import ANALYZE_OPTIONS
from .common import BoundaryCommand, storage_option, storage_options
from .format import echo_json
from .settings import setting_flags

__all__ = ["analyze_cmd", "analyze_commands"]


@click.command("analyze", cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option(
    "--columns",
    metavar="A,B",
    help="Only consider these stats columns when choosing files (the stats written cover all stats columns).",
)
@click.option("--all", "all_files", is_flag=True, help="Recompute every file's statistics, not only missing ones.")
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@setting_flags(ANALYZE_OPTIONS)
@click.option("--dry-run", is_flag=True, help="Print which files would get statistics; nothing is read or written.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def analyze_cmd(
    table: str,
    columns: str | None,
    all_files: bool,
    where: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    **settings: Any,
) -> None:
    """Compute the per-file statistics TABLE's files lack (or, with --all, every file's), exactly as
    delta-spark writes them, mostly from Parquet footers; committed as COMPUTE STATS. A path needs no Spark."""
    from ..ops.analyze import analyze

    metrics = analyze(
        None,
        table,
        columns=columns,
        all=all_files,
        where=list(where),
        dry_run=dry_run,
        storage_options=storage_options(),
        max_threads=settings.get("max_threads"),
        files_per_commit=settings.get("files_per_commit"),
        task_runner=settings.get("task_runner"),
    )
    if as_json:
        echo_json(metrics.to_dict())
    else:
        verb = "would compute" if dry_run else "computed"
        done = metrics.files_planned if dry_run else metrics.files_updated
        click.echo(
            f"{metrics.table}: {verb} statistics of {done} of {metrics.files_considered} file(s) "
            f"({', '.join(f'{n} {r}' for r, n in sorted(metrics.reasons.items())) or 'every file covered'})"
        )
        if metrics.versions:
            click.echo(f"committed COMPUTE STATS as version(s) {', '.join(map(str, metrics.versions))}")
        if metrics.files_dropped:
            click.echo(f"{metrics.files_dropped} file(s) changed concurrently: their statistics were dropped")
        for f in metrics.failed:
            click.echo(f"failed: {f.path}: {f.error}", err=True)
    if metrics.failed:
        sys.exit(1)


#: Every command of this module, for ``cli.add_command``.
analyze_commands = (analyze_cmd,)
