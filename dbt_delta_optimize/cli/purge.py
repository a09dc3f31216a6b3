"""``purge``: delta-spark's ``REORG TABLE ... APPLY (PURGE)`` (rewrite every file with deleted rows)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..options import OPTIMIZE_OPTIONS, PURGE_FIXED
from .common import BoundaryCommand, storage_option, storage_options
from .format import echo_json
from .progress import OptimizeProgress
from .report import print_metrics, print_plan
from .settings import optimize_options, setting_flags

__all__ = ["purge_cmd", "purge_commands"]

#: A purge takes every OPTIMIZE setting but those it fixes.
PURGE_OPTIONS = tuple(o for o in OPTIMIZE_OPTIONS if o.name not in PURGE_FIXED)


@click.command("purge", cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@setting_flags(PURGE_OPTIONS)
@click.option("--dry-run", is_flag=True, help="Print the files with deleted rows that would be rewritten; no Spark.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics (or the plan) as JSON.")
def purge_cmd(table: str, where: tuple[str, ...], dry_run: bool, as_json: bool, **settings: Any) -> None:
    """REORG TABLE ... APPLY (PURGE): rewrite every file of TABLE that has deleted rows (deletion vectors)."""
    from ..ops.purge import purge

    options = optimize_options(settings)
    if dry_run:
        plan = purge(None, table, where=list(where), dry_run=True, options=options, storage_options=storage_options())
        if as_json:
            echo_json(plan.summary(include_files=True))
        else:
            print_plan(table, plan, True)
        return
    with OptimizeProgress(None) as progress:
        metrics = purge(
            None, table, where=list(where), options=options, progress=progress, storage_options=storage_options()
        )
    if as_json:
        echo_json(metrics.to_dict())
    else:
        print_metrics(metrics)
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
