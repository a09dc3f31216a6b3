"""The project health page: one self-contained HTML file, one row per table, from a maintenance report's JSON.

Same template system as the table health page (``health_page``: jinja2, autoescape on, inline SVG
charts as data URIs, the same colours: red to act on, green healthy, blue this run's numbers, grey the
prediction). Rows are the report's tables in rank order: verdict, size, small files, reclaimable
bytes, statistics coverage, last maintained, what ran with its predicted and actual seconds, and the store
requests it made (by kind, with the bytes read and written: ``delta/requests.py`` says what they cover); then the
table's last N days from its log as sparklines (``sparklines``), the bytes its tombstones retain and the date
they become reclaimable, how many runs in a row it was deferred (starvation), and the state file's runs:
actual against predicted seconds.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from ..plan.config import format_size
from .health_page import environment, histogram_svg, svg_data_uri, svg_open
from .page_style import BLUE, GREEN, GREY, RED, esc
from .sparklines import cost_sparkline, trend_rows

__all__ = ["MAX_BARS", "PAGE_TRENDS", "project_rows", "render_project_page"]

#: Tables drawn in a chart before a "+N more" line.
MAX_BARS = 60
#: The trends a table's row shows (the health page shows them all).
PAGE_TRENDS = ("files", "bytes", "smallFiles", "statsCoverage", "retainedBytes", "maintenanceSeconds", "requests")


def _tombstones(trends: Mapping[str, Any] | None) -> str:
    """What the tombstones retain, what is reclaimable now, and when the next bytes become reclaimable."""
    if not trends or trends.get("retainedBytes") is None:
        return "-"
    text = f"{format_size(trends['retainedBytes'])} retained, {format_size(trends['reclaimableBytes'] or 0)} reclaimable now"
    nxt = trends.get("nextReclaim")
    if nxt:
        text += f"; {format_size(nxt['bytes'])} reclaimable on {nxt['date']}"
    return text


def _when(ms: Any) -> str:
    if not isinstance(ms, (int, float)):
        return "never (in the log's last commits)"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="minutes")


def _verdict(t: Mapping[str, Any]) -> tuple[str, str]:
    """(word, css class): healthy, maintained (this run did its work), needs <actions>, or failed."""
    if t.get("status") == "failed":
        return "failed", "bad"
    if t.get("status") == "done":
        return "maintained", "good"
    if not t.get("actions"):
        return "healthy", "good"
    return "needs " + ", ".join(t["actions"]), "bad"


def _requests(ran: Sequence[Mapping[str, Any]]) -> str:
    """The store requests the actions made (their metrics' ``requests``), by kind, and the bytes read and written."""
    kinds: dict[str, int] = {}
    read = written = 0
    seen = False
    for a in ran:
        r = (a.get("metrics") or {}).get("requests") or {}
        seen = seen or bool(r)
        for kind, n in (r.get("byKind") or {}).items():
            kinds[kind] = kinds.get(kind, 0) + int(n)
        read += int(r.get("bytesRead", 0))
        written += int(r.get("bytesWritten", 0))
    if not seen:
        return "-"
    by_kind = ", ".join(f"{n} {k}" for k, n in kinds.items())
    return f"{sum(kinds.values())} ({by_kind}); {format_size(read)} read, {format_size(written)} written"


def project_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per table, in rank order, with every number the page shows (as text)."""
    rows = []
    for t in report.get("tables") or []:
        h = t.get("health") or {}
        verdict, css = _verdict(t)
        ran = t.get("ran") or []
        trends = t.get("trends") if isinstance(t.get("trends"), Mapping) else None
        rows.append(
            {
                "rank": t["rank"],
                "table": t["table"],
                "verdict": verdict,
                "css": css,
                "status": t.get("status", ""),
                "size": format_size(h["sizeBytes"]) if "sizeBytes" in h else "-",
                "files": h.get("numFiles", "-"),
                "smallFiles": h.get("smallFiles", "-"),
                "reclaimable": format_size(h["reclaimableBytes"]) if "reclaimableBytes" in h else "-",
                "statsCoverage": f"{h['statsCoverage']:.0%}" if "statsCoverage" in h else "-",
                "lastMaintained": _when(h.get("lastMaintained")),
                "score": f"{t.get('score', 0):.4g}",
                "reason": t.get("reason", ""),
                "ran": ", ".join(
                    f"{a['action']} {a['status']} ({a['seconds']:.1f}s, predicted {a['predictedSeconds']:.1f}s)"
                    for a in ran
                ),
                "trends": [r for r in trend_rows(trends, width=96) if r["key"] in PAGE_TRENDS],
                "trendError": (trends or {}).get("error", ""),
                "tombstones": _tombstones(trends),
                "streak": int(t.get("deferredStreak") or 0),
                "cost": cost_sparkline(t.get("runs") or [], width=96),
                "runs": len([r for r in t.get("runs") or [] if r.get("actualSeconds") is not None]),
                "requests": _requests(ran),
            }
        )
    return rows


def _bars_svg(items: Sequence[tuple[str, float, float | None]], title: str, unit: str, width: int = 760) -> str:
    """Horizontal bars per table: ``value`` in blue, and ``other`` (a prediction) in grey beside it when given."""
    rows, more = list(items[:MAX_BARS]), len(items) - MAX_BARS
    paired = any(o is not None for _, _, o in rows)
    step = 30 if paired else 18
    height = 40 + step * (max(1, len(rows)) + (1 if more > 0 else 0))
    top = max([v for _, v, _ in rows] + [o for _, _, o in rows if o is not None] + [1e-9])
    left, right = 240, 90
    plot_w = width - left - right
    parts = svg_open(width, height, title)
    for i, (label, value, other) in enumerate(rows):
        y = 28 + i * step
        short = label if len(label) <= 36 else "…" + label[-35:]
        w = plot_w * value / top
        parts += [
            f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{esc(short)}</text>',
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="12" fill="{BLUE}"><title>{value:.4g} {unit}</title></rect>',
            f'<text x="{left + w + 4:.1f}" y="{y + 10}">{value:.3g} {esc(unit)}</text>',
        ]
        if other is not None:
            wo = plot_w * other / top
            parts += [
                f'<rect x="{left}" y="{y + 13}" width="{wo:.1f}" height="12" fill="{GREY}">'
                f"<title>predicted {other:.4g} {unit}</title></rect>",
                f'<text x="{left + wo + 4:.1f}" y="{y + 23}">{other:.3g} predicted</text>',
            ]
    if more > 0:
        parts.append(f'<text x="{left - 6}" y="{28 + len(rows) * step + 11}" text-anchor="end">+{more} more</text>')
    parts.append("</svg>")
    return "".join(parts)


def _charts(report: Mapping[str, Any]) -> list[dict[str, str]]:
    tables = report.get("tables") or []
    scores = [(t["table"], float(t.get("score") or 0), None) for t in tables if t.get("actions")]
    buckets: dict[int, dict[str, int]] = {}
    for t in tables:
        for b in (t.get("health") or {}).get("fileSizeHistogram") or []:
            agg = buckets.setdefault(b["log2"], {"log2": b["log2"], "files": 0, "bytes": 0})
            agg["files"] += b["files"]
            agg["bytes"] += b["bytes"]
    hist = [{**b, "label": format_size(2 ** b["log2"])} for _, b in sorted(buckets.items())]
    charts = [
        {
            "id": "chart-scores",
            "alt": "score per table",
            "uri": svg_data_uri(_bars_svg(scores, "Score (rank order)", "")),
        },
        {
            "id": "chart-sizes",
            "alt": "file sizes across the project",
            "uri": svg_data_uri(histogram_svg([("files", hist)], "File sizes across every table")),
        },
    ]
    timed = [
        (f"{t['table']} {a['action']}", float(a["seconds"]), float(a["predictedSeconds"]))
        for t in tables
        for a in t.get("ran") or []
        if a.get("status") in ("done", "failed")
    ]
    if timed:
        svg = _bars_svg(timed, "Actual (blue) and predicted (grey) seconds", "s")
        charts.append({"id": "chart-cost", "alt": "actual and predicted seconds", "uri": svg_data_uri(svg)})
    return charts


def render_project_page(report: Mapping[str, Any], path: str) -> str:
    """Write the page for a maintenance report's JSON (``MaintenanceReport.to_dict``); returns ``path``."""
    rows = project_rows(report)
    summary = report.get("summary") or {}
    days = next((t["trends"]["days"] for t in report.get("tables") or [] if (t.get("trends") or {}).get("days")), None)
    page = (
        environment()
        .get_template("project.html.j2")
        .render(
            report=report,
            rows=rows,
            summary=summary,
            charts=_charts(report),
            healthy=sum(1 for r in rows if r["verdict"] == "healthy"),
            days=days,
            starved=sum(1 for r in rows if r["streak"] > 1),
            colours={"bad": RED, "good": GREEN, "data": BLUE, "predicted": GREY},
        )
    )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
