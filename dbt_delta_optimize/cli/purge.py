"""``purge``: delta-spark's ``REORG TABLE ... APPLY (PURGE)`` (rewrite every file with deleted rows)."""

from __future__ import annotations

import sys

import click

from .common import BoundaryCommand, storage_option, storage_options
from .common import size_option as _size
from .format import echo_json
from .progress import OptimizeProgress

__all__ = ["purge_cmd", "purge_commands"]


@click.command("purge", cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@click.option("--max-file-size", callback=_size, help="Target (maximum) size of a rewritten file.")
@click.option("--max-threads", type=click.IntRange(min=1), help="Bins rewritten concurrently (default 15).")
@click.option("--dry-run", is_flag=True, help="Print the files with deleted rows that would be rewritten; no Spark.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics (or the plan) as JSON.")
def purge_cmd(
    table: str,
    where: tuple[str, ...],
    max_file_size: int | None,
    max_threads: int | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """REORG TABLE ... APPLY (PURGE): rewrite every file of TABLE that has deleted rows (deletion vectors)."""
    from ..plan.config import OptimizeOptions
    from ..purge import purge
    from .optimize import _print_metrics, _print_plan

    options = OptimizeOptions(max_file_size=max_file_size, max_threads=max_threads)
    if dry_run:
        plan = purge(None, table, where=list(where), dry_run=True, options=options, storage_options=storage_options())
        if as_json:
            echo_json(plan.summary(include_files=True))
        else:
            _print_plan(table, plan, True)
        return
    with OptimizeProgress(None) as progress:
        metrics = purge(
            None, table, where=list(where), options=options, progress=progress, storage_options=storage_options()
        )
    if as_json:
        echo_json(metrics.to_dict())
    else:
        _print_metrics(metrics)
        dv = metrics.deletion_vector_stats
        click.echo(
            f"purged {dv.num_deletion_vectors_removed} deletion vector(s), {dv.num_deletion_vector_rows_removed} "
            "deleted row(s) dropped"
            if dv is not None
            else "no file has deleted rows: nothing to purge"
        )
    if metrics.failed_bins:
        sys.exit(1)


#: Every command of this module, for ``cli.add_command``.
purge_commands = (purge_cmd,)
