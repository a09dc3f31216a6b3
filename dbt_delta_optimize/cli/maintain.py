"""``maintain``: rank tables by what maintenance would buy and run the most valuable work first within a budget."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from ..options import REPORT_OPTIONS
from .common import BoundaryCommand, storage_option, storage_options
from .format import echo_json, human_size, make_table, print_table
from .settings import option_named, setting_flags

if TYPE_CHECKING:
    from ..ops.maintain import MaintenanceReport

__all__ = ["maintain_cmd", "maintain_commands", "print_report"]


def _benefit_text(benefit: dict[str, Any]) -> str:
    parts = []
    if "smallFiles" in benefit:
        parts.append(f"{benefit['smallFiles']} small files -{benefit['filesRemoved']}")
    if "deletedRowRatio" in benefit:
        parts.append(f"{benefit['deletedRowRatio']:.0%} rows deleted")
    if "reclaimableBytes" in benefit:
        parts.append(f"{human_size(benefit['reclaimableBytes'])} reclaimable")
    if "filesWithoutStats" in benefit:
        parts.append(f"stats {benefit['statsCoverage']:.0%}")
    if benefit.get("clusterOverlap"):
        parts.append(f"overlap {benefit['clusterOverlap']}x")
    return ", ".join(parts) or "-"


def _streak_text(entry: dict[str, Any]) -> str:
    n = entry.get("deferredStreak") or 0
    return f", deferred {n} run(s) in a row" if n > 1 else ""


def _ran_text(entry: dict[str, Any]) -> str:
    ran = entry.get("ran") or []
    return ", ".join(f"{a['action']} {a['status']} {a['seconds']:.1f}s/{a['predictedSeconds']:.1f}s" for a in ran)


def print_report(report: MaintenanceReport) -> None:
    """The queue as a table (table, actions, benefit, cost, score, why); after a run, what ran (actual/predicted)."""
    d = report.to_dict()
    columns = ["#", "table", "actions", "benefit", "cost", "score", "status", "why"]
    if not report.dry_run:
        columns.insert(7, "ran (actual/predicted)")
    out = make_table(*columns, right=("#", "cost", "score"))
    rows = []
    for t in d["tables"]:
        cost = t.get("cost") or {}
        row = [
            str(t["rank"]),
            t["table"],
            ",".join(t["actions"]) or "-",
            _benefit_text(t.get("benefit") or {}),
            f"{cost['seconds']:.1f}s {human_size(cost['bytesRead'])}" if cost else "-",
            f"{t['score']:.4g}",
            t["status"] + (f" ({t['deferredReason']})" if t.get("deferredReason") else "") + _streak_text(t),
            t["reason"],
        ]
        if not report.dry_run:
            row.insert(7, _ran_text(t))
        rows.append(row)
    print_table(out, rows, what="table")
    s = d["summary"]
    budget = f" of a {report.budget:g}s budget" if report.budget is not None else ""
    click.echo(
        f"{len(d['tables'])} table(s): {s['planned']} planned, {s['done']} done, {s['deferred']} deferred, "
        f"{s['failed']} failed, {s['nothing to do']} with nothing to do; {report.wall_seconds:.1f}s{budget}"
    )
    for t in report.failed:
        click.echo(f"failed {t.table}: {t.error}", err=True)


def _previous(path: str | None) -> dict[str, Any] | None:
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path} is not a maintenance report ({exc})", param_hint="--state") from None
    return data if isinstance(data, dict) else None


@click.command("maintain", cls=BoundaryCommand)
@click.argument("tables", nargs=-1, required=True)
@storage_option
@click.option(
    "--budget", metavar="DURATION", help="Start no work after this long (25s, 20m, 1h); the rest is deferred."
)
@click.option("--max-tables", type=click.IntRange(min=1), help="At most this many tables get work (the worst first).")
@click.option("--only", metavar="ACTIONS", help="Actions to consider, comma-separated: optimize,purge,vacuum,analyze.")
@click.option("--workers", type=click.IntRange(min=1), help="Tables run at once (default: half the cores, at most 4).")
@click.option(
    "--state",
    type=click.Path(dir_okay=False),
    help="A JSON report: the previous run's (read: its actual seconds calibrate the predictions, its history of runs "
    "and deferrals carries on), then this one's.",
)
@click.option("--html", type=click.Path(dir_okay=False), help="Also write the project health page (one HTML file).")
@click.option("--dry-run", is_flag=True, help="Print the ranked queue only; nothing is written.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON ({'tables': [...]} in rank order).")
@setting_flags([option_named(REPORT_OPTIONS, "trend_days")])
def maintain_cmd(
    tables: tuple[str, ...],
    budget: str | None,
    max_tables: int | None,
    only: str | None,
    workers: int | None,
    state: str | None,
    html: str | None,
    dry_run: bool,
    as_json: bool,
    trend_days: int | None,
) -> None:
    """Rank TABLE... by what maintenance would buy (from their logs) and do the most valuable work first.

    Per table: purge and optimize, then statistics, then VACUUM, each through the single-table command's
    operation. Exit 0 when everything is done or deferred, 1 when a table failed.
    """
    from ..ops.maintain import maintain
    from ..ops.outputs import check_output

    if state and not dry_run:
        check_output(state, option="--state")
    if html:
        check_output(html, option="--html")
    report = maintain(
        None,
        list(tables),
        budget=budget,
        max_tables=max_tables,
        only=only,
        dry_run=dry_run,
        storage_options=storage_options(),
        workers=workers,
        previous=_previous(state),
        trend_days=trend_days,
    )
    if state and not dry_run:
        with open(state, "w", encoding="utf-8") as fh:
            json.dump(report.to_dict(), fh, indent=2)
    if html:
        from ..inspect.project_page import render_project_page

        render_project_page(report.to_dict(), html)
    if as_json:
        echo_json(report.to_dict())
    else:
        print_report(report)
    if report.exit_code:
        sys.exit(report.exit_code)


#: Every command of this module, for ``cli.add_command``.
maintain_commands = (maintain_cmd,)
