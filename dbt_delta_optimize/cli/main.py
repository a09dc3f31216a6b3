"""The ``dbt-delta-optimize`` command line.

Exit status: 0 success, 2 bad input (the message says what to fix), 1 any other failure.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .common import configure_logging
from .common import run as _run
from .common import size_option as _size
from .format import human_size

__all__ = ["main"]


class _Progress:
    """A rich progress bar on a terminal: bins done of total, and bytes rewritten; silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("optimizing"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("bins, {task.fields[bytes]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._bar.__enter__()
        return self

    def __call__(self, bins_done: int, bins_total: int, bytes_done: int, bytes_total: int) -> None:
        if self._bar is None:
            return
        text = f"{human_size(bytes_done)} of {human_size(bytes_total)}"
        if self._task is None:
            self._task = self._bar.add_task("optimize", total=bins_total, bytes=text)
        self._bar.update(self._task, completed=bins_done, bytes=text)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dbt-delta-optimize")
@click.option("--debug", is_flag=True, help="Show debug logs and the full cause chain of an error.")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int) -> None:
    """Compact and cluster Delta tables with delta-spark's semantics, committed safely."""
    ctx.obj = {"debug": debug}
    configure_logging(verbose, debug)


def _settings(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _print_plan(table: str, d: dict[str, Any], show_files: bool) -> None:
    click.echo(
        f"plan for {table} at version {d['readVersion']}: {d['numBins']} bin(s) in {d['partitions']} partition(s), "
        f"{d['filesToRewrite']} of {d['consideredFiles']} file(s), {human_size(d['bytesToRewrite'])}, "
        f"{d['numBatches']} commit(s)"
    )
    for p in d["partitionsToRewrite"]:
        click.echo(f"  {p['partition']}: {p['bins']} bin(s), {p['files']} files, {human_size(p['bytes'])}")
    if d.get("partitionsNotShown"):
        click.echo(f"  +{d['partitionsNotShown']} more partition(s)")
    if show_files:
        for b in d.get("bins", []):
            for path in b["paths"]:
                click.echo(f"    {path}")


def _print_metrics(m: dict[str, Any]) -> None:
    click.echo(
        f"optimized {m['path']}: {m['numFilesRemoved']} file(s) -> {m['numFilesAdded']} in {m['partitionsOptimized']} "
        f"partition(s), {m['numBins']} bin(s), {human_size(m['filesRemoved']['totalSize'])} -> "
        f"{human_size(m['filesAdded']['totalSize'])}, versions {m['committedVersions'] or 'none (nothing to do)'}, "
        f"{(m['endTimeMs'] - m['startTimeMs']) / 1000:.1f}s"
    )


@cli.command()
@click.argument("table")
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@click.option("--min-file-size", callback=_size, help="Files smaller than this are compacted (e.g. 128m, 1g).")
@click.option("--max-file-size", callback=_size, help="Target (maximum) size of a compacted file.")
@click.option("--max-threads", type=click.IntRange(min=1), help="Bins rewritten concurrently (default 15).")
@click.option("--batch-size", callback=_size, help="Commit every this many bytes of bins (default: one commit).")
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
    zorder_by: str | None,
    curve: str,
    full: bool,
    dry_run: bool,
    show_files: bool,
    as_json: bool,
) -> None:
    """OPTIMIZE TABLE (a path or a catalog name)."""
    from ..plan.config import OptimizeOptions

    options = OptimizeOptions(
        **_settings(
            min_file_size=min_file_size, max_file_size=max_file_size, max_threads=max_threads, batch_size=batch_size
        )
    )
    zcols = [c.strip() for c in zorder_by.split(",") if c.strip()] if zorder_by else None
    kwargs: dict[str, Any] = {
        "where": list(where),
        "zorder_by": zcols,
        "curve": curve,
        "full": full,
        "options": options,
    }
    if dry_run:
        from ..api import plan_optimize

        plan = _run(lambda: plan_optimize(None, table, **kwargs))
        summary = plan.summary(include_files=show_files)
        if as_json:
            click.echo(json.dumps(summary, indent=2, default=str))
        else:
            _print_plan(table, summary, show_files)
        return

    def go() -> Any:
        from ..api import optimize as run

        with _Progress(not as_json) as progress:
            return run(None, table, progress=progress, **kwargs)

    metrics = _run(go).to_dict()
    if as_json:
        click.echo(json.dumps(metrics, indent=2, default=str))
    else:
        _print_metrics(metrics)


@cli.command("auto-compact")
@click.argument("table")
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

    def go() -> Any:
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
        )

    result = _run(go)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    click.echo(
        f"auto-compact {result.table}: {result.status}: {result.reason} (decided in {result.decision_ms:.0f} ms)"
    )
    for p in result.considered:
        pv = ", ".join(f"{k}={v}" for k, v in p.partition.items()) or "(unpartitioned)"
        mark = "*" if p in result.chosen else " "
        click.echo(f" {mark} {pv}: {p.small_files} small of {p.files} files")
    if result.metrics is not None:
        m = result.metrics
        click.echo(
            f"compacted {m.num_files_removed} file(s) -> {m.num_files_added}, versions {list(m.committed_versions)}"
        )


@cli.command()
def jars() -> None:
    """Print Delta's jar files (comma-separated) for spark.jars, e.g. in a dbt-spark profile."""
    from ..engine.session import default_jars_dir, delta_jars

    found = delta_jars()
    if not found:
        click.echo(f"error: no Delta jars in {default_jars_dir()}; run `make setup` (or `make jars`).", err=True)
        sys.exit(1)
    click.echo(",".join(found))


@cli.command()
@click.argument("table")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info(table: str, as_json: bool) -> None:
    """Summarize TABLE's latest snapshot (read through deltalake; no Spark for paths)."""
    from ..delta.snapshot import summarize

    def go() -> Any:
        from ..delta.snapshot import load_snapshot
        from ..engine.session import get_spark, is_path, resolve_table

        location = table if is_path(table) else resolve_table(table, get_spark())
        return summarize(load_snapshot(location))

    summary = _run(go)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    _print_info(summary)


_MAX_ROWS = 50


def _print_info(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    p = summary["protocol"]
    features = sorted({*(p.get("readerFeatures") or ()), *(p.get("writerFeatures") or ())})
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{summary['location']}[/bold]")
    console.print(
        f"version {summary['version']} | {summary['numFiles']} files | {human_size(summary['sizeBytes'])} | "
        f"partitioned by {', '.join(summary['partitionColumns']) or 'nothing'} | "
        f"protocol {p['minReaderVersion']}/{p['minWriterVersion']}" + (f" ({', '.join(features)})" if features else "")
    )
    table = Table("partition", "files", "size", show_edge=False)
    parts = summary["partitions"]
    for row in parts[:_MAX_ROWS]:
        table.add_row(row["partition"], str(row["numFiles"]), human_size(row["sizeBytes"]))
    if len(parts) > _MAX_ROWS:
        table.add_row(f"+{len(parts) - _MAX_ROWS} more", "", "")
    console.print(table)


def _register_inspect_commands() -> None:
    from .inspect import inspect_commands

    for command in inspect_commands:
        cli.add_command(command)


_register_inspect_commands()


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="dbt-delta-optimize")


if __name__ == "__main__":  # pragma: no cover
    main()
