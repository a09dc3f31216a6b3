"""The writing commands: ``optimize`` (and its ``--dry-run`` plan) and ``auto-compact``.

Each command calls the operations layer (``ops``) in one place; its setting flags come from the one
declaration of options. Spark is started only by what needs it: a real OPTIMIZE, a compaction that
runs, or a catalog name to resolve; a plan of a table given by path is computed from its log alone,
through the same checks as the run, so a dry run refuses what the run would refuse.
"""

from __future__ import annotations

import sys
from typing import Any, cast

import click

from ..ops.effective import Kind
from ..options import AUTO_COMPACT_OPTIONS, OPTIMIZE_OPTIONS, OptimizeOptions, effective_dict
from .common import BoundaryCommand, owns_process, storage_option, storage_options
from .format import console, echo_json
from .progress import OptimizeProgress
from .report import print_auto_compact, print_metrics, print_plan
from .settings import given, optimize_options, setting_flags

__all__ = ["auto_compact_cmd", "optimize", "optimize_commands"]


def _settings(kind: Kind, options: OptimizeOptions | None = None, auto: Any = None) -> dict[str, Any]:
    """The settings in force and where each came from (flag, conf, default), for ``--json``.

    Read after the run, from the session it ran on (none started: the defaults it planned with).
    """
    from ..ops.effective import effective_settings
    from ..ops.pipeline import active_conf

    return {"settings": effective_dict(effective_settings(kind, active_conf(), options, auto, given="flag"))}


def _start_workers_early(table: str, options: OptimizeOptions) -> bool:
    """In the console script's own process, for a table on the local disk: fork the bin workers now, before the
    log is read (``bin_processes.prefork``: no thread runs yet), or else start the fork server they would fork
    from, while the log is read and the bins are planned. Either way the rewrite does not wait for their imports
    (docs/performance.md, "Issue 45, huge pages and forking the workers from the CLI"). True when workers were
    forked: the caller ends them if the run does not take them (``close_preforked``)."""
    from ..delta.storage import LocalStorage, storage_of
    from ..engine.session import embedded_parallelism, is_path

    if not owns_process() or options.task_runner not in (None, "auto") or not is_path(table):
        return False
    if not isinstance(storage_of(table), LocalStorage):  # processes are for local tables only (``pays``)
        return False
    from ..engine.bin_processes import prefork, start_fork_server

    _arrow_without_numpy()
    workers = (
        embedded_parallelism() if options.max_threads is None else min(embedded_parallelism(), options.max_threads)
    )
    if prefork(workers):
        return True
    start_fork_server()
    return False


def _arrow_without_numpy() -> None:
    """Load pyarrow without numpy in this process (``no_pandas.load_pyarrow_without_numpy``), unless the run is on
    Spark Connect (its Python client converts through numpy). numpy's import is 40-50 ms of a fresh run's serial
    start, before the log is read (docs/performance.md, "Issue 45, a driver without numpy"); the planner, the log
    reads and the checkpoint hand pyarrow no numpy object (``delta.arrow_arrays``), nor do the bins, which the
    workers forked from here run. numpy stays importable (a deletion vector's decoding uses it)."""
    import os

    from ..engine.session import REMOTE_ENV
    from ..no_pandas import load_pyarrow_without_numpy

    if not os.environ.get(REMOTE_ENV):
        load_pyarrow_without_numpy()


def _zorder_columns(zorder_by: str | None) -> list[str] | None:
    return [c.strip() for c in zorder_by.split(",") if c.strip()] if zorder_by else None


@click.command(cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@click.option("--zorder-by", help="Comma-separated columns to Z-order by (nested a.b and `quoted.names` allowed).")
@click.option(
    "--curve",
    type=click.Choice(["zorder", "hilbert"]),
    default="zorder",
    show_default=True,
    help="Space-filling curve for --zorder-by.",
)
@click.option("--full", is_flag=True, help="Re-cluster partitions already clustered by the same columns and curve.")
@setting_flags(OPTIMIZE_OPTIONS)
@click.option(
    "--dry-run", is_flag=True, help="Print the plan (partitions, bins, files, bytes); write nothing, no Spark."
)
@click.option("--files", "show_files", is_flag=True, help="With --dry-run: list every file the plan rewrites.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics (or the plan) as JSON.")
def optimize(
    table: str,
    where: tuple[str, ...],
    zorder_by: str | None,
    curve: str,
    full: bool,
    dry_run: bool,
    show_files: bool,
    as_json: bool,
    **settings: Any,
) -> None:
    """OPTIMIZE TABLE (a path or a catalog name)."""
    if show_files and not dry_run:
        raise click.UsageError("--files lists the files of a plan: use it with --dry-run.")
    args: dict[str, Any] = {
        "where": list(where),
        "zorder_by": _zorder_columns(zorder_by),
        "curve": cast(Any, curve),
        "full": full,
        "options": optimize_options(settings),
        "storage_options": storage_options(),
    }
    forked = not dry_run and _start_workers_early(table, args["options"])  # first: before any thread starts
    try:
        _optimize(table, args, dry_run=dry_run, show_files=show_files, as_json=as_json)
    finally:
        if forked:
            from ..engine.bin_processes import close_preforked

            close_preforked()


def _optimize(table: str, args: dict[str, Any], *, dry_run: bool, show_files: bool, as_json: bool) -> None:
    from ..ops.optimize import optimize as run
    from ..ops.optimize import plan_optimize

    if dry_run:
        plan = plan_optimize(None, table, **args)
        if as_json:
            echo_json({**plan.summary(include_files=show_files), **_settings("optimize", args["options"])})
        else:
            print_plan(table, plan, show_files)
        return
    bar = console(stderr=True) if not as_json and sys.stderr.isatty() else None
    with OptimizeProgress(bar) as progress:
        metrics = run(None, table, progress=progress, **args)
    if as_json:
        echo_json({**metrics.to_dict(), **_settings("optimize", args["options"])})
    else:
        print_metrics(metrics)
    if metrics.failed_bins:
        sys.exit(1)  # the other bins committed; the failures are in the output


@click.command("auto-compact", cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option(
    "--since-version",
    type=int,
    help="Table version before the write; the commits after it trigger (default: the latest commit).",
)
@setting_flags(AUTO_COMPACT_OPTIONS)
@click.option(
    "--enable/--respect-config", "force", default=None, help="Run even if the table does not enable auto compaction."
)
@click.option("--json", "as_json", is_flag=True, help="Print the decision and metrics as JSON.")
def auto_compact_cmd(table: str, since_version: int | None, force: bool | None, as_json: bool, **settings: Any) -> None:
    """Decide whether the last write to TABLE left enough small files, and compact them if so."""
    from ..ops.auto_compact import auto_compact

    result = auto_compact(
        None,
        table,
        since_version,
        enabled=True if force else None,
        throw_on_error=True,
        storage_options=storage_options(),
        **given(settings),
    )
    if as_json:
        echo_json({**result.to_dict(), **_settings("auto_compact", auto=given(settings))})
    else:
        print_auto_compact(result)


#: Every command of this module, for ``cli.add_command``.
optimize_commands = (optimize, auto_compact_cmd)
