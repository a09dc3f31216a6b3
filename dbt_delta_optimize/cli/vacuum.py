"""``vacuum``: delta-spark's ``VACUUM [LITE|FULL] [RETAIN n HOURS] [DRY RUN]`` (no JVM for a path)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from ..no_pandas import numpy_hidden
from ..options import VACUUM_OPTIONS, format_size
from .common import BoundaryCommand, owns_process, storage_option, storage_options
from .format import echo_json
from .settings import setting_flags

__all__ = ["vacuum_cmd", "vacuum_commands"]


def _progress(done: int, total: int) -> None:
    if total > 5000:
        click.echo(f"deleted {done}/{total} files", err=True)


def _without_spark(table: str, task_runner: str | None) -> bool:
    """A VACUUM of a path with no Spark session: not a catalog name, not ``--task-runner spark``, no Spark Connect
    (Spark's Python client needs numpy). A path has a slash, as ``ops.vacuum`` decides it."""
    import os

    return "/" in table and task_runner != "spark" and not os.environ.get("SPARK_REMOTE")


@contextmanager
def _arrow_without_numpy(spark_free: bool) -> Iterator[None]:
    """pyarrow imports numpy whenever it is installed (most of pyarrow's import), yet a VACUUM without Spark reads
    a checkpoint's columns as Python lists and never touches numpy. In a process of its own, such a VACUUM loads
    pyarrow without numpy, which pyarrow supports since 16: ``import numpy`` fails while the command runs. A
    caller's process (the API, dbt, a test) keeps its numpy, and pyarrow loaded before is left as it is."""
    if not spark_free or not owns_process() or "pyarrow" in sys.modules or "numpy" in sys.modules:
        yield
        return
    with numpy_hidden():
        yield


@click.command("vacuum", cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option(
    "--retain",
    metavar="DURATION",
    help="Keep files a version of the last DURATION needs: 168h, 7d, 0h (hours if no unit). "
    "[default: the table's delta.deletedFileRetentionDuration, 7 days]",
)
@click.option(
    "--mode",
    type=click.Choice(["full", "lite"]),
    default="full",
    show_default=True,
    help="full lists the table's folders; lite reads only the log since the last vacuum.",
)
@setting_flags(VACUUM_OPTIONS)
@click.option("--dry-run", is_flag=True, help="List the files that would be deleted, with bytes; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics (and, dry run, the files) as JSON.")
def vacuum_cmd(table: str, retain: str | None, mode: str, dry_run: bool, as_json: bool, **settings: Any) -> None:
    """VACUUM: delete the files of TABLE that no version inside the retention needs (delta-spark's rules)."""
    from ..ops.vacuum import vacuum

    with _arrow_without_numpy(_without_spark(table, settings.get("task_runner"))):
        metrics = vacuum(
            None,
            table,
            retain=retain,
            mode="lite" if mode == "lite" else "full",
            dry_run=dry_run,
            allow_short_retention=settings.get("allow_short_retention"),
            vacuum_logging=settings.get("vacuum_logging"),
            clean_logs=settings.get("clean_logs"),
            task_runner=settings.get("task_runner"),
            storage_options=storage_options(),
            progress=None if as_json else _progress,
        )
    if as_json:
        echo_json(metrics.to_dict())
        return
    if dry_run:
        for c in metrics.files:
            click.echo(f"{c.path}\t{c.size}\t{c.reason}")
    verb = "would delete" if dry_run else "deleted"
    click.echo(
        f"{metrics.table}: {verb} {metrics.files_deleted} file(s), {format_size(metrics.bytes_deleted)}, "
        f"and {metrics.folders_deleted} empty folder(s) ({metrics.mode}, retention "
        f"{metrics.retention_ms / 3_600_000:g}h, {metrics.duration_s:.2f}s)"
    )
    logs = metrics.log_cleanup
    if logs is not None:
        if dry_run:
            for name in logs.files:
                click.echo(f"_delta_log/{name}\t\texpired log")
        click.echo(f"{metrics.table}: {verb} {len(logs.files)} expired log file(s), {format_size(logs.bytes)}")
    sys.stdout.flush()


#: Every command of this module, for ``cli.add_command``.
vacuum_commands = (vacuum_cmd,)
