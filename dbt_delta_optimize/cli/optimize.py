"""The writing commands: ``optimize`` (and its ``--dry-run`` plan) and ``auto-compact``.

Each command calls the public API in one place. Spark is started only by what needs it: a real
OPTIMIZE, a compaction that runs, or a catalog name to resolve; a plan of a table given by path
is computed from its log alone.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal, cast

import click

from .common import BoundaryCommand, storage_option, storage_options
from .common import size_option as _size
from .format import console, echo_json, human_size, make_table, partition_label, print_table
from .progress import OptimizeProgress

if TYPE_CHECKING:
    from ..plan.autocompact import AutoCompactResult
    from ..plan.config import OptimizeOptions
    from ..plan.metrics import OptimizeMetrics
    from ..plan.planner import OptimizePlan

__all__ = ["auto_compact_cmd", "optimize", "optimize_commands"]

Curve = Literal["zorder", "hilbert"]


def _zorder_columns(zorder_by: str | None) -> list[str] | None:
    return [c.strip() for c in zorder_by.split(",") if c.strip()] if zorder_by else None


def _plan(
    table: str, where: list[str], zorder_by: list[str] | None, curve: Curve, full: bool, options: OptimizeOptions
) -> OptimizePlan:
    """The dry run: the API's plan, from the log alone for a path (no Spark)."""
    from ..api import plan_optimize

    return plan_optimize(
        None,
        table,
        where=where,
        zorder_by=zorder_by,
        curve=curve,
        full=full,
        options=options,
        storage_options=storage_options(),
    )


def _optimize(
    table: str,
    where: list[str],
    zorder_by: list[str] | None,
    curve: Curve,
    full: bool,
    options: OptimizeOptions,
    progress: OptimizeProgress,
) -> OptimizeMetrics:
    """The real run (starts or reuses Spark)."""
    from ..api import optimize as run

    return run(
        None,
        table,
        where=where,
        zorder_by=zorder_by,
        curve=curve,
        full=full,
        options=options,
        progress=progress,
        storage_options=storage_options(),
    )


def _print_plan(table_name: str, plan: OptimizePlan, show_files: bool) -> None:
    d = plan.summary(include_files=show_files)
    click.echo(
        f"plan for {table_name} at version {d['readVersion']}: {d['numBins']} bin(s) in {d['partitions']} "
        f"partition(s), {d['filesToRewrite']} of {d['consideredFiles']} file(s), {human_size(d['bytesToRewrite'])}, "
        f"{d['numBatches']} commit(s)"
    )
    if not d["partitionsToRewrite"]:
        click.echo("nothing to rewrite")
        return
    rows = [[p["partition"], str(p["bins"]), str(p["files"]), human_size(p["bytes"])] for p in d["partitionsToRewrite"]]
    print_table(
        make_table("partition", "bins", "files", "size", right=("bins", "files", "size")), rows, what="partition"
    )
    if show_files:
        files = [[partition_label(b["partitionValues"]), path] for b in d["bins"] for path in b["paths"]]
        print_table(make_table("partition", "file to rewrite"), files, limit=sys.maxsize)


def _print_metrics(m: OptimizeMetrics) -> None:
    versions = ", ".join(map(str, m.committed_versions)) or "none (nothing to do)"
    click.echo(
        f"optimized {m.path}: {m.num_files_removed} file(s) -> {m.num_files_added} in {m.partitions_optimized} "
        f"partition(s), {m.num_bins} bin(s), {human_size(m.files_removed.total_size)} -> "
        f"{human_size(m.files_added.total_size)}, version(s) {versions}, "
        f"{(m.end_time_ms - m.start_time_ms) / 1000:.1f}s"
    )
    if m.partitions_skipped_already_clustered:
        click.echo(f"{m.partitions_skipped_already_clustered} partition(s) already clustered (use --full to redo)")
    if m.num_bins_left:
        click.echo(f"time budget spent: {m.num_bins_left} bin(s), {human_size(m.num_bytes_left)} left for the next run")
    for d in m.dropped_bins:
        click.echo(
            f"dropped {partition_label(d['partition'])}: {d['files']} file(s), changed by version "
            f"{d['winningVersion']} ({d['reason']})"
        )
    for f in m.failed_bins:
        click.echo(f"failed {partition_label(f['partition'])}: {f['files']} file(s): {f['error']}", err=True)


def _options(**values: Any) -> OptimizeOptions:
    from ..plan.config import OptimizeOptions

    return OptimizeOptions(**{k: v for k, v in values.items() if v is not None})


@click.command(cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@click.option("--min-file-size", callback=_size, help="Files smaller than this are compacted (e.g. 128m, 1g).")
@click.option("--max-file-size", callback=_size, help="Target (maximum) size of a compacted file.")
@click.option("--max-threads", type=click.IntRange(min=1), help="Bins rewritten concurrently (default 15).")
@click.option("--batch-size", callback=_size, help="Commit every this many bytes of bins (default: one commit).")
@click.option("--max-duration", help="Time budget (25s, 10m, 1h): no bin starts after it; what is done is committed.")
@click.option("--commit-every", help="Commit finished bins every N bins (e.g. 20) or every period (e.g. 5m).")
@click.option(
    "--max-failed-bins",
    type=click.IntRange(min=0),
    help="Bins that may fail (reported, exit 1) while the others commit (default 0: all or nothing).",
)
@click.option(
    "--order",
    type=click.Choice(["files-desc", "bytes-desc", "partition", "oldest-first"]),
    help="Which bins run first (default files-desc: the most small files first).",
)
@click.option("--zorder-by", help="Comma-separated columns to Z-order by (nested a.b and `quoted.names` allowed).")
@click.option(
    "--curve",
    type=click.Choice(["zorder", "hilbert"]),
    default="zorder",
    show_default=True,
    help="Space-filling curve for --zorder-by.",
)
@click.option("--full", is_flag=True, help="Re-cluster partitions already clustered by the same columns and curve.")
@click.option(
    "--dry-run", is_flag=True, help="Print the plan (partitions, bins, files, bytes); write nothing, no Spark."
)
@click.option("--files", "show_files", is_flag=True, help="With --dry-run: list every file the plan rewrites.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics (or the plan) as JSON.")
def optimize(
    table: str,
    where: tuple[str, ...],
    min_file_size: int | None,
    max_file_size: int | None,
    max_threads: int | None,
    batch_size: int | None,
    max_duration: str | None,
    commit_every: str | None,
    max_failed_bins: int | None,
    order: str | None,
    zorder_by: str | None,
    curve: str,
    full: bool,
    dry_run: bool,
    show_files: bool,
    as_json: bool,
) -> None:
    """OPTIMIZE TABLE (a path or a catalog name)."""
    options = _options(
        min_file_size=min_file_size,
        max_file_size=max_file_size,
        max_threads=max_threads,
        batch_size=batch_size,
        max_duration=max_duration,
        commit_every=commit_every,
        max_failed_bins=max_failed_bins,
        order=order,
    )
    args = (table, list(where), _zorder_columns(zorder_by), cast(Curve, curve), full, options)
    if dry_run:
        plan = _plan(*args)
        if as_json:
            echo_json(plan.summary(include_files=show_files))
        else:
            _print_plan(table, plan, show_files)
        return
    if show_files:
        raise click.UsageError("--files lists the files of a plan: use it with --dry-run.")
    bar = console(stderr=True) if not as_json and sys.stderr.isatty() else None
    with OptimizeProgress(bar) as progress:
        metrics = _optimize(*args, progress)
    if as_json:
        echo_json(metrics.to_dict())
    else:
        _print_metrics(metrics)
    if metrics.failed_bins:
        sys.exit(1)  # the other bins committed; the failures are in the output


def _auto_compact(
    table: str,
    since_version: int | None,
    force: bool | None,
    min_num_files: int | None,
    max_file_size: int | None,
    min_file_size: int | None,
) -> AutoCompactResult:
    from ..api import auto_compact

    return auto_compact(
        None,
        table,
        since_version,
        enabled=True if force else None,
        throw_on_error=True,
        min_num_files=min_num_files,
        max_file_size=max_file_size,
        min_file_size=min_file_size,
        storage_options=storage_options(),
    )


def _print_auto_compact(result: AutoCompactResult) -> None:
    click.echo(
        f"auto-compact {result.table}: {result.status}: {result.reason} (decided in {result.decision_ms:.0f} ms)"
    )
    if result.considered:
        rows = [
            [partition_label(p.partition), str(p.small_files), str(p.files), "yes" if p in result.chosen else ""]
            for p in result.considered
        ]
        out = make_table("partition", "small files", "files", "compacted", right=("small files", "files"))
        print_table(out, rows, what="partition")
    m = result.metrics
    if m is not None:
        versions = ", ".join(map(str, m.committed_versions)) or "none"
        click.echo(
            f"compacted {m.num_files_removed} file(s) -> {m.num_files_added}, {human_size(m.files_removed.total_size)}"
            f" -> {human_size(m.files_added.total_size)}, version(s) {versions}"
        )


@click.command("auto-compact", cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option(
    "--since-version",
    type=int,
    help="Table version before the write; the commits after it trigger (default: the latest commit).",
)
@click.option("--min-num-files", type=int, help="Small files a partition needs to qualify (default 50).")
@click.option("--max-file-size", callback=_size, help="Auto-compact target file size (default 128m).")
@click.option(
    "--min-file-size", callback=_size, help="Files smaller than this count as small (default: max-file-size / 2)."
)
@click.option(
    "--enable/--respect-config", "force", default=None, help="Run even if the table does not enable auto compaction."
)
@click.option("--json", "as_json", is_flag=True, help="Print the decision and metrics as JSON.")
def auto_compact_cmd(
    table: str,
    since_version: int | None,
    min_num_files: int | None,
    max_file_size: int | None,
    min_file_size: int | None,
    force: bool | None,
    as_json: bool,
) -> None:
    """Decide whether the last write to TABLE left enough small files, and compact them if so."""
    result = _auto_compact(table, since_version, force, min_num_files, max_file_size, min_file_size)
    if as_json:
        echo_json(result.to_dict())
    else:
        _print_auto_compact(result)


#: Every command of this module, for ``cli.add_command``.
optimize_commands = (optimize, auto_compact_cmd)
