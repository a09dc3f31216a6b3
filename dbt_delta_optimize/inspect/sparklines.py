"""Small inline SVG sparklines of a table's daily trends, for the health and project pages (no JavaScript).

Each is one ``<svg class="spark">`` element written into the page (so a browser test can find and measure it;
every element closed explicitly, as the pages' strict HTML check wants),
with a ``<title>`` giving every day's value, the last value as a dot, and unknown days (None) as gaps. Text is
escaped; the result is ``markupsafe.Markup`` so the template's autoescape leaves the element alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from markupsafe import Markup

from ..plan.config import format_size
from .page_style import BLUE, GREY, RED, esc

__all__ = ["METRICS", "cost_sparkline", "fmt_metric", "sparkline", "trend_rows"]

#: The trends drawn: (key in a daily point, label, how a value reads, which way is worse: +1 up, -1 down, 0 neither)
METRICS: tuple[tuple[str, str, str, int], ...] = (
    ("files", "files", "count", 1),
    ("bytes", "bytes", "size", 0),
    ("smallFiles", "small files", "count", 1),
    ("statsCoverage", "stats coverage", "share", -1),
    ("retainedBytes", "retained by tombstones", "size", 1),
    ("reclaimableBytes", "reclaimable now", "size", 1),
    ("maintenanceSeconds", "maintenance seconds", "seconds", 0),
    ("requests", "requests", "count", 0),
)


def fmt_metric(kind: str, v: Any) -> str:
    if v is None:
        return "-"
    if kind == "size":
        return format_size(v)
    if kind == "share":
        return f"{v:.0%}"
    if kind == "seconds":
        return f"{v:.1f}s"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _segments(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    out: list[list[tuple[int, float]]] = []
    run: list[tuple[int, float]] = []
    for i, v in enumerate(values):
        if v is None:
            if run:
                out.append(run)
            run = []
        else:
            run.append((i, float(v)))
    if run:
        out.append(run)
    return out


def sparkline(
    values: Sequence[float | None],
    *,
    metric: str,
    title: str,
    dates: Sequence[str] = (),
    fmt: Callable[[Any], str] = str,
    colour: str = BLUE,
    width: int = 120,
    height: int = 26,
    behind: Sequence[float | None] = (),
) -> Markup:
    """One sparkline of ``values`` (oldest first; None: unknown), scaled to its own min and max; ``behind`` (same
    length, e.g. the predictions) drawn in grey on the same scale."""
    known = [float(v) for v in (*values, *behind) if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)
    span = hi - lo or 1.0
    pad = 3
    step = (width - 2 * pad) / max(1, len(values) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        if hi == lo:  # a flat series sits in the middle (at the bottom it would read as zero)
            return pad + i * step, height / 2
        return pad + i * step, height - pad - (v - lo) / span * (height - 2 * pad)

    days = ", ".join(f"{d}: {fmt(v)}" for d, v in zip(dates, values)) if dates else ""
    parts = [
        f'<svg class="spark" data-metric="{esc(metric)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
        f"<title>{esc(title)}{': ' + esc(days) if days else ''}</title>",
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="{GREY}" stroke-width="0.5"></line>',
    ]
    for run in _segments(behind):
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in run))
        parts.append(
            f'<polyline class="behind" points="{points}" fill="none" stroke="{GREY}" stroke-width="1"></polyline>'
        )
    for run in _segments(values):
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in run))
        if len(run) == 1:
            x, y = xy(*run[0])
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.5" fill="{colour}"></circle>')
        else:
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"></polyline>')
    if any(v is not None for v in values):
        i = max(i for i, v in enumerate(values) if v is not None)
        x, y = xy(i, float(values[i]))  # type: ignore[arg-type]
        parts.append(f'<circle class="last" cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="{colour}"></circle>')
    parts.append("</svg>")
    return Markup("".join(parts))


def _worse(kind_worse: int, first: Any, last: Any) -> bool:
    if first is None or last is None or not kind_worse:
        return False
    return bool((last - first) * kind_worse > 0)


def trend_rows(trends: Mapping[str, Any] | None, *, width: int = 120) -> list[dict[str, Any]]:
    """Per metric: label, sparkline, first and last known values (as text), min, max, and whether it got worse
    (red). Requests only when the log records them."""
    if not trends or not trends.get("daily"):
        return []
    daily = trends["daily"]
    dates = [d["date"] for d in daily]
    rows = []
    for key, label, kind, worse in METRICS:
        values = [d.get(key) for d in daily]
        known = [v for v in values if v is not None]
        if key == "requests" and not trends.get("requestsKnown"):
            continue
        first, last = (known[0], known[-1]) if known else (None, None)
        bad = _worse(worse, first, last)
        rows.append(
            {
                "key": key,
                "label": label,
                "svg": sparkline(
                    values,
                    metric=key,
                    title=f"{label}, last {len(daily)} days",
                    dates=dates,
                    fmt=partial(fmt_metric, kind),
                    colour=RED if bad else BLUE,
                    width=width,
                ),
                "first": fmt_metric(kind, first),
                "last": fmt_metric(kind, last),
                "min": fmt_metric(kind, min(known) if known else None),
                "max": fmt_metric(kind, max(known) if known else None),
                "cls": "bad" if bad else "",
            }
        )
    return rows


def cost_sparkline(runs: Sequence[Mapping[str, Any]], *, width: int = 120) -> Markup | None:
    """Actual seconds (blue) against predicted (grey) of the runs that did work on a table (the state file's
    history); None when none did."""
    timed = [r for r in runs if r.get("actualSeconds") is not None]
    if not timed:
        return None
    actual = [float(r["actualSeconds"]) for r in timed]
    predicted = [float(r.get("ranPredictedSeconds") or 0.0) for r in timed]
    stamps = [str(r.get("generatedAt") or "")[:16] for r in timed]
    text = ", ".join(f"{s}: {a:.1f}s (predicted {p:.1f}s)" for s, a, p in zip(stamps, actual, predicted))
    return sparkline(
        actual,
        metric="maintainSeconds",
        title=f"maintain runs, actual (blue) against predicted (grey) seconds: {text}",
        width=width,
        behind=predicted,
    )
