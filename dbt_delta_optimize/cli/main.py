"""The ``dbt-delta-optimize`` command line.

Exit status: 0 success, 2 bad input (the message says what to fix), 1 any other failure.
"""

from __future__ import annotations

import json
import sys

import click

from .common import run as _run
from .common import size_option as _size

__all__ = ["main"]


class _Progress:
    """A rich progress bar on a terminal (bins done of total, bytes); silent otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._bar = None
        self._task = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                DownloadColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._bar.__enter__()
        return self

    def __call__(self, bins_done: int, bins_total: int, bytes_done: int, bytes_total: int) -> None:
        if self._bar is None:
            return
        if self._task is None:
            self._task = self._bar.add_task("optimizing bins", total=bins_total)
        self._bar.update(self._task, completed=bins_done, description=f"bins ({bytes_done}/{bytes_total} bytes)")

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dbt-delta-optimize")
def cli() -> None:
    """Compact and cluster Delta tables with delta-spark's semantics, committed safely."""


@cli.command()
@click.argument("table")
@click.option("--where", "where", multiple=True, help="Partition predicate (Spark SQL); repeat to AND several.")
@click.option("--min-file-size", callback=_size, help="Files smaller than this are compacted (e.g. 128m, 1g).")
@click.option("--max-file-size", callback=_size, help="Target (maximum) size of a compacted file.")
@click.option("--max-threads", type=int, help="Bins rewritten concurrently (default 15).")
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
@click.option("--dry-run", is_flag=True, help="Print the plan (partitions, bins, files, bytes); write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics (or the plan) as JSON.")
def optimize(
    table, where, min_file_size, max_file_size, max_threads, batch_size, zorder_by, curve, full, dry_run, as_json
):
    """OPTIMIZE TABLE (a path or a catalog name)."""
    overrides = {
        k: v
        for k, v in dict(
            min_file_size=min_file_size, max_file_size=max_file_size, max_threads=max_threads, batch_size=batch_size
        ).items()
        if v is not None
    }
    zcols = [c.strip() for c in zorder_by.split(",") if c.strip()] if zorder_by else None

    def go():
        from ..api import optimize as run
        from ..plan.config import OptimizeConfig

        OptimizeConfig.resolve(None, overrides)  # bad values fail before Spark starts
        with _Progress(not as_json and not dry_run) as progress:
            return run(
                None, table, list(where), zcols, curve=curve, full=full, dry_run=dry_run, progress=progress, **overrides
            )

    result = _run(go)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    if dry_run:
        d = result.to_dict()
        click.echo(
            f"plan for {table} at version {d['readVersion']}: {d['numBins']} bin(s) in {d['partitions']} partition(s), "
            f"{d['filesToRewrite']} of {d['consideredFiles']} file(s), {d['bytesToRewrite']} bytes, "
            f"{d['numBatches']} commit(s)"
        )
        for b in d["bins"]:
            pv = ", ".join(f"{k}={v}" for k, v in b["partitionValues"].items()) or "(unpartitioned)"
            click.echo(f"  {pv}: {b['files']} files, {b['bytes']} bytes")
        return
    m = result.to_dict()
    click.echo(
        f"optimized {m['path']}: {m['numFilesRemoved']} file(s) -> {m['numFilesAdded']} in {m['partitionsOptimized']} "
        f"partition(s), {m['numBins']} bin(s), {m['filesRemoved']['totalSize']} -> {m['filesAdded']['totalSize']} bytes, "
        f"versions {m['committedVersions'] or 'none (nothing to do)'}, "
        f"{(m['endTimeMs'] - m['startTimeMs']) / 1000:.1f}s"
    )


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
def auto_compact_cmd(table, since_version, min_num_files, max_file_size, min_file_size, force, as_json):
    """Decide whether the last write to TABLE left enough small files, and compact them if so."""
    overrides = {
        k: v
        for k, v in dict(min_num_files=min_num_files, max_file_size=max_file_size, min_file_size=min_file_size).items()
        if v is not None
    }

    def go():
        from ..api import auto_compact

        return auto_compact(
            None, table, since_version, enabled=True if force else None, throw_on_error=True, **overrides
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
def jars():
    """Print Delta's jar files (comma-separated) for spark.jars, e.g. in a dbt-spark profile."""
    from ..engine.session import default_jars_dir, delta_jars

    found = delta_jars()
    if not found:
        click.echo(f"error: no Delta jars in {default_jars_dir()}; run `make setup` (or `make jars`).", err=True)
        sys.exit(1)
    click.echo(",".join(found))


@cli.command()
@click.argument("table")
@click.option("--json", "as_json", is_flag=True)
def info(table, as_json):
    """Summarize TABLE's latest snapshot (read through deltalake; no Spark for paths)."""

    def go():
        from ..delta.snapshot import load_snapshot
        from ..engine.session import get_spark, is_path, resolve_table

        location = table if is_path(table) else resolve_table(table, get_spark())
        return load_snapshot(location)

    snap = _run(go)
    from ..delta.snapshot import summarize

    summary = summarize(snap)
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"{summary['location']} version {summary['version']}: {summary['numFiles']} files, "
            f"{summary['sizeBytes']} bytes, partitioned by {summary['partitionColumns'] or 'nothing'}, "
            f"protocol {summary['protocol']['minReaderVersion']}/{summary['protocol']['minWriterVersion']}"
        )
        for p in summary["partitions"]:
            click.echo(f"  {p['partition']}: {p['numFiles']} files, {p['sizeBytes']} bytes")


def _register_inspect_commands() -> None:
    from .inspect import inspect_commands

    for command in inspect_commands:
        cli.add_command(command)


_register_inspect_commands()


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="dbt-delta-optimize")


if __name__ == "__main__":  # pragma: no cover
    main()
