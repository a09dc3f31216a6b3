"""Read-only CLI commands: ``validate``, ``health`` and ``history``.

Standalone click commands, registered on the main group with ``cli.add_command(...)``. None of
them needs Spark for a table given as a path (a catalog name starts the session to resolve it).
Exit status: 0 success (and, for validate, a clean commit), 1 findings or an unexpected failure,
2 bad input (missing table or version, invalid argument).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .common import run as _run
from .common import size_option as _size
from .format import human_size

__all__ = ["health", "history", "inspect_commands", "validate"]


def _location(table: str) -> str:
    """A path as is; a catalog name through the Spark session (started only then)."""
    from ..engine.session import get_spark, is_path, resolve_table

    return table if is_path(table) else resolve_table(table, get_spark())


@click.command()
@click.argument("table")
@click.option("--version", "version", type=click.IntRange(min=0), help="Commit to check (default: the latest).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def validate(table: str, version: int | None, as_json: bool) -> None:
    """Validate a data-rearranging commit (OPTIMIZE) of TABLE: exit 0 if clean, 1 with findings."""
    from ..inspect.validate import validate_commit

    report = _run(lambda: validate_commit(_location(table), version))
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.describe())
    sys.exit(0 if report.ok else 1)


@click.command()
@click.argument("table")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, writable=True), help="Also write an HTML page here."
)
@click.option("--compare-version", type=click.IntRange(min=0), help="Show this version as 'before' next to the latest.")
@click.option(
    "--min-file-size", callback=_size, help="Small-file threshold of OPTIMIZE (default 1g or the session conf)."
)
def health(
    table: str, as_json: bool, html_path: str | None, compare_version: int | None, min_file_size: int | None
) -> None:
    """Health of TABLE: files and small files per partition, size histogram, Z-order state, OPTIMIZE plan."""
    from ..inspect.health import health_report, render_html

    report = _run(lambda: health_report(_location(table), compare_version=compare_version, min_file_size=min_file_size))
    if html_path:
        _run(lambda: render_html(report, html_path))
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
        return

    def line(r: dict[str, Any], label: str) -> str:
        return (
            f"{label}version {r['version']}: {r['numFiles']} files, {human_size(r['sizeBytes'])} in "
            f"{r['numPartitions']} partition(s); small files: {r['smallFiles']['optimize']} (optimize), "
            f"{r['smallFiles']['autoCompact']} (auto compaction)"
        )

    click.echo(f"{report['table']}")
    if report["compare"] is not None:
        click.echo(line(report["compare"], "before: "))
        click.echo(line(report, "after:  "))
    else:
        click.echo(line(report, ""))
    for p in report["partitions"]:
        click.echo(
            f"  {p['partition']}: {p['numFiles']} files, {human_size(p['sizeBytes'])}, "
            f"{p['smallFiles']['optimize']} small, Z-order {p['zOrder']['state']}"
        )
    plan = report["optimize"]
    click.echo(
        f"optimize would rewrite {plan['filesToRewrite']} of {plan['consideredFiles']} file(s) "
        f"({human_size(plan['bytesToRewrite'])}) in {plan['numBins']} bin(s)"
    )
    if html_path:
        click.echo(f"wrote {html_path}")


@click.command()
@click.argument("table")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Number of commits.")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
def history(table: str, limit: int, as_json: bool) -> None:
    """Recent commits of TABLE (newest first), OPTIMIZE metrics of every engine in one shape."""
    from ..inspect.history import history as load_history

    entries = _run(lambda: load_history(_location(table), limit))
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    for e in entries:
        extra = []
        if e["operation"] == "OPTIMIZE":
            extra.append(f"auto={str(e['auto']).lower()}")
            if e["zOrderBy"]:
                extra.append(f"zOrderBy={','.join(e['zOrderBy'])}")
            elif e["zOrder"]:
                extra.append("zOrder")
            if e["predicate"]:
                extra.append(f"where {' AND '.join(e['predicate'])}")
        click.echo(
            f"{e['version']:>6}  {e['time'] or '-':<29}  {e['operation']!s:<12} {e['engine']:<18} "
            f"-{e['filesRemoved']} +{e['filesAdded']} files, -{e['bytesRemoved']} +{e['bytesAdded']} bytes"
            + (f"  {' '.join(extra)}" if extra else "")
        )


#: Every command of this module, for ``for c in inspect_commands: cli.add_command(c)``.
inspect_commands = (validate, health, history)
