"""Read-only CLI commands: ``info``, ``validate``, ``health`` and ``history``.

None of them needs Spark for a table given as a path (a catalog name starts the session to
resolve it). Each calls the core in one place (``_summary``, ``_validate``, ``_health``,
``_history``) and renders the dict it returns: as JSON with ``--json``, else as text and tables.
Exit status: 0 success (and, for validate, a clean commit), 1 findings or an unexpected failure,
2 bad input (missing table or version, invalid argument).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from ..options import OPTIMIZE_OPTIONS, REPORT_OPTIONS
from .common import BoundaryCommand, storage_option, storage_options, table_storage
from .format import echo_json, human_size, make_table, print_table
from .settings import option_named, setting_flags

if TYPE_CHECKING:
    from ..inspect.findings import ValidationReport
    from ..inspect.health import HealthReport

__all__ = ["health", "history", "info", "inspect_commands", "validate"]


# ----------------------------------------------------------------------------- info
def _summary(table_name: str) -> dict[str, Any]:
    from ..delta.snapshot import load_snapshot, summarize

    loc, storage = table_storage(table_name)
    return summarize(load_snapshot(loc, storage=storage))


def _protocol_text(p: dict[str, Any]) -> str:
    text = f"reader {p['minReaderVersion']}, writer {p['minWriterVersion']}"
    features = sorted({*(p.get("readerFeatures") or ()), *(p.get("writerFeatures") or ())})
    return text + (f"; features: {', '.join(features)}" if features else "; no table features")


def _print_info(s: dict[str, Any]) -> None:
    head = make_table("", "")
    head.show_header = False
    rows = [
        ["table", str(s["location"])],
        ["version", str(s["version"])],
        ["protocol", _protocol_text(s["protocol"])],
        ["partitioned by", ", ".join(s["partitionColumns"]) or "nothing"],
        ["columns", str(s["numColumns"])],
        ["files", f"{s['numFiles']} ({human_size(s['sizeBytes'])})"],
    ]
    if s["configuration"]:
        rows.append(["properties", ", ".join(f"{k}={v}" for k, v in sorted(s["configuration"].items()))])
    print_table(head, rows)
    parts = s["partitions"]
    if s["partitionColumns"] and parts:
        rows = [[p["partition"], str(p["numFiles"]), human_size(p["sizeBytes"])] for p in parts]
        print_table(make_table("partition", "files", "size", right=("files", "size")), rows, what="partition")


@click.command(cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info(table: str, as_json: bool) -> None:
    """Summarize TABLE's latest snapshot: version, protocol, partitions, files (no Spark for paths)."""
    summary = _summary(table)
    if as_json:
        echo_json(summary)
    else:
        _print_info(summary)


# ----------------------------------------------------------------------------- validate
def _validate(table_name: str, version: int | None) -> ValidationReport:
    from ..inspect.validate import validate_commit

    loc, storage = table_storage(table_name)
    return validate_commit(loc, version, storage=storage)


@click.command(cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--version", "version", type=click.IntRange(min=0), help="Commit to check (default: the latest).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def validate(table: str, version: int | None, as_json: bool) -> None:
    """Validate a data-rearranging commit (OPTIMIZE) of TABLE: exit 0 if clean, 1 with findings."""
    report = _validate(table, version)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.describe())
    sys.exit(0 if report.ok else 1)


# ----------------------------------------------------------------------------- health
def _health(
    table_name: str, compare_version: int | None, min_file_size: int | None, trend_days: int | None
) -> HealthReport:
    from ..ops.inspect import table_health

    return table_health(
        table_name,
        compare_version=compare_version,
        min_file_size=min_file_size,
        storage_options=storage_options(),
        trend_days=trend_days,
    )


def _write_html(report: HealthReport, path: str) -> None:
    from ..inspect.health import render_html

    render_html(report, path)


def _state_line(r: dict[str, Any], label: str) -> str:
    small = r["smallFiles"]
    return (
        f"{label}version {r['version']}: {r['numFiles']} files, {human_size(r['sizeBytes'])} in "
        f"{r['numPartitions']} partition(s); small files: {small['optimize']} (optimize), "
        f"{small['autoCompact']} (auto compaction)"
    )


def _print_vacuum(v: dict[str, Any] | None) -> None:
    if not v:
        return
    last = v["lastVacuum"]
    when = f"last run {last['time']} ({last['source']})" if last else "no run found"
    click.echo(
        f"vacuum: {human_size(v['reclaimableBytes'] + v['reclaimableDvBytes'])} in {v['reclaimableFiles']} file(s) "
        f"and {v['reclaimableDvFiles']} deletion vector file(s) past the retention ({v['retentionMs'] // 3_600_000}h), "
        f"estimated from the log (unlisted orphans not counted); {when}"
    )


def _trend_text(daily: list[dict[str, Any]], key: str, size: bool = False) -> str | None:
    known = [d[key] for d in daily if d.get(key) is not None]
    if not known:
        return None
    first, last = known[0], known[-1]
    show = human_size if size else (lambda v: f"{v:.0%}" if isinstance(v, float) else str(v))
    return f"{show(first)} -> {show(last)}"


def _print_trends(t: dict[str, Any] | None) -> None:
    """One line of trends (first known day -> today) and one of the retained bytes and when they are freed."""
    if not t or not t.get("daily"):
        return
    daily = t["daily"]
    parts = [
        f"{name} {text}"
        for name, key, size in (
            ("files", "files", False),
            ("bytes", "bytes", True),
            ("small files", "smallFiles", False),
            ("stats coverage", "statsCoverage", False),
        )
        if (text := _trend_text(daily, key, size)) is not None
    ]
    seconds = sum(d["maintenanceSeconds"] for d in daily)
    parts.append(f"maintenance {sum(d['maintenanceCommits'] for d in daily)} commit(s), {seconds:.1f}s logged")
    if t.get("requestsKnown"):
        parts.append(f"{sum(d['requests'] or 0 for d in daily)} request(s)")
    click.echo(f"trends ({t['from']} to {t['to']}): " + ", ".join(parts))
    nxt = t.get("nextReclaim")
    retained = t.get("retainedBytes")
    if retained is not None:
        text = f"tombstones retain {human_size(retained)}, {human_size(t['reclaimableBytes'] or 0)} reclaimable now"
        if nxt:
            text += f"; {human_size(nxt['bytes'])} reclaimable on {nxt['date']}"
        click.echo(text)


def _print_health(report: dict[str, Any]) -> None:
    click.echo(report["table"])
    verdict = report["verdict"]
    click.echo(f"verdict: {verdict['status']}: {verdict['reason']}")
    if verdict["command"]:
        click.echo(f"recommended: {verdict['command']}")
    st = report.get("statistics")
    if st:
        click.echo(
            f"statistics: {st['filesWithoutStats']} file(s) without stats, {st['filesIncomplete']} not covering "
            f"the stats columns, {len(st['staleColumns'])} stale column(s), {st['avgStatsBytes']} bytes per file"
        )
        if st["recommendation"]:
            click.echo(f"recommended for statistics: {st['recommendation']}")
    _print_vacuum(report.get("vacuum"))
    _print_trends(report.get("trends"))
    if report.get("compare") is not None:
        click.echo(_state_line(report["compare"], "before: "))
        click.echo(_state_line(report, "after:  "))
    else:
        click.echo(_state_line(report, ""))
    rows = [
        [
            p["partition"],
            str(p["numFiles"]),
            human_size(p["sizeBytes"]),
            str(p["smallFiles"]["optimize"]),
            str(p["smallFiles"]["autoCompact"]),
            p["zOrder"]["state"],
        ]
        for p in report["partitions"]
    ]
    columns = ("partition", "files", "size", "small (optimize)", "small (auto compaction)", "Z-order")
    print_table(make_table(*columns, right=columns[1:5]), rows, what="partition")
    plan = report["optimize"]
    click.echo(
        f"optimize would rewrite {plan['filesToRewrite']} of {plan['consideredFiles']} file(s) "
        f"({human_size(plan['bytesToRewrite'])}) in {plan['numBins']} bin(s)"
    )
    auto = report.get("autoCompact")
    if isinstance(auto, dict) and auto.get("status"):
        click.echo(f"auto compaction would decide {auto['status']}: {auto.get('reason', '')}")


@click.command(cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, writable=True), help="Also write an HTML page here."
)
@click.option("--compare-version", type=click.IntRange(min=0), help="Show this version as 'before' next to the latest.")
@setting_flags([option_named(OPTIMIZE_OPTIONS, "min_file_size"), option_named(REPORT_OPTIONS, "trend_days")])
def health(
    table: str,
    as_json: bool,
    html_path: str | None,
    compare_version: int | None,
    min_file_size: int | None,
    trend_days: int | None,
) -> None:
    """Health of TABLE: a verdict and the command that fixes it, small files per partition, OPTIMIZE plan, and
    the last --trend-days days from its log."""
    if html_path:
        from ..ops.outputs import check_output

        check_output(html_path, option="--html")
    report = _health(table, compare_version, min_file_size, trend_days)
    if html_path:
        _write_html(report, html_path)
    if as_json:
        echo_json(report.to_dict(copy=False))
        return
    _print_health(report.to_dict(copy=False))
    if html_path:
        click.echo(f"wrote {html_path}")


# ----------------------------------------------------------------------------- history
def _history(table_name: str, limit: int) -> list[dict[str, Any]]:
    from ..ops.inspect import table_history

    return table_history(table_name, limit, storage_options=storage_options())


def _details(e: dict[str, Any]) -> str:
    if e.get("vacuum"):
        return " ".join(f"{k}={v}" for k, v in e["vacuum"].items())
    if e["operation"] != "OPTIMIZE":
        return ""
    extra = [f"auto={str(e['auto']).lower()}"]
    if e["zOrderBy"]:
        extra.append(f"zOrderBy={','.join(e['zOrderBy'])}")
    elif e["zOrder"]:
        extra.append("zOrder")
    if e["predicate"]:
        extra.append(f"where {' AND '.join(e['predicate'])}")
    return " ".join(extra)


def _history_row(e: dict[str, Any]) -> list[str]:
    return [
        str(e["version"]),
        e["time"] or "-",
        str(e["operation"] or "-"),
        str(e["engine"]),
        f"-{e['filesRemoved']} +{e['filesAdded']}",
        f"-{human_size(e['bytesRemoved'])} +{human_size(e['bytesAdded'])}",
        _details(e),
    ]


@click.command(cls=BoundaryCommand)
@click.argument("table")
@storage_option
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Number of commits.")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
def history(table: str, limit: int, as_json: bool) -> None:
    """Recent commits of TABLE (newest first), OPTIMIZE metrics of every engine in one shape."""
    entries = _history(table, limit)
    if as_json:
        echo_json(entries)
        return
    columns = ("version", "time", "operation", "engine", "files", "bytes", "details")
    print_table(make_table(*columns, right=("version",)), [_history_row(e) for e in entries], limit=sys.maxsize)


#: Every command of this module, for ``for c in inspect_commands: cli.add_command(c)``.
inspect_commands = (info, validate, health, history)
