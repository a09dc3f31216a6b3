"""The health page: one self-contained HTML file from a ``HealthReport`` (no network resources).

The page is a jinja2 template (``templates/health.html.j2``) with autoescape on, because table
paths and partition values are untrusted input; the pictures are SVG documents built here and
inlined as base64 data URIs, with every text node escaped. Colours have one meaning each:
red = something to act on (files OPTIMIZE would rewrite, a change for the worse), green = healthy
or a change for the better, blue = this version's numbers, grey = the "before" version and axes.
Long lists end in a "+N more" row instead of stopping silently.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..plan.autocompact import RUN_ON_ALL, RUN_ON_MODIFIED
from ..plan.config import format_size
from ..plan.curve import COLUMNS_TAG
from .health_report import HEALTHY, LAST_OPTIMIZE_LOOKBACK
from .page_style import BLUE, GREY, RED, esc

if TYPE_CHECKING:
    import jinja2

    from .health_report import HealthReport

__all__ = ["MAX_BINS", "MAX_PARTITION_BARS", "MAX_PARTITION_ROWS", "histogram_svg", "render_html", "svg_data_uri"]

#: Rows drawn or listed before a "+N more" row.
MAX_PARTITION_BARS = 60
MAX_PARTITION_ROWS = 500
MAX_BINS = 200

_esc = esc


def _svg_open(width: int, height: int, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{_esc(title)}</text>',
    ]


def histogram_svg(
    series: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    title: str,
    *,
    value: str = "files",
    markers: Sequence[tuple[str, int]] = (),
    width: int = 720,
    height: int = 260,
) -> str:
    """Grouped bar chart of log2 histograms (one series per version), as a standalone SVG document.

    With two series the first is "before" (grey) and the second "after" (blue); one series is blue.
    ``markers`` (name, size) draw dashed reference lines, e.g. the small-file thresholds in force.
    """
    ks = sorted({b["log2"] for _, buckets in series for b in buckets})
    if ks:
        ks = list(range(ks[0], ks[-1] + 1))
    counts = [{b["log2"]: b[value] for b in buckets} for _, buckets in series]
    top = max([c.get(k, 0) for c in counts for k in ks] + [1])
    left, right, foot = 48, 12, 46
    head = 52 if len(series) > 1 else 34  # room for the legend under the title
    plot_w, plot_h = width - left - right, height - head - foot
    n_series = max(1, len(series))
    slot = plot_w / max(1, len(ks))
    bar = min(56.0, max(1.0, (slot * 0.8) / n_series))
    pad = (slot - bar * n_series) / 2  # centre each bucket's group of bars
    colors = [GREY, BLUE] if len(series) > 1 else [BLUE]
    parts = [
        *_svg_open(width, height, title),
        f'<line x1="{left}" y1="{head + plot_h}" x2="{width - right}" y2="{head + plot_h}" stroke="{GREY}"/>',
        f'<line x1="{left}" y1="{head}" x2="{left}" y2="{head + plot_h}" stroke="{GREY}"/>',
        f'<text x="{left - 4}" y="{head + 4}" text-anchor="end">{top}</text>',
        f'<text x="{left - 4}" y="{head + plot_h}" text-anchor="end">0</text>',
    ]
    for i, k in enumerate(ks):
        x0 = left + i * slot + pad
        for j, c in enumerate(counts):
            v = c.get(k, 0)
            h = plot_h * v / top
            x = x0 + j * bar
            parts.append(
                f'<rect x="{x:.1f}" y="{head + plot_h - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{colors[j % len(colors)]}"><title>{_esc(series[j][0])}: {v} {value} in '
                f"[{_esc(format_size(2**k))}, {_esc(format_size(2 ** (k + 1)))})</title></rect>"
            )
            if v:
                parts.append(
                    f'<text x="{x + bar / 2:.1f}" y="{head + plot_h - h - 3:.1f}" text-anchor="middle">{v}</text>'
                )
        if len(ks) <= 16 or i % 2 == 0:
            parts.append(
                f'<text x="{left + (i + 0.5) * slot:.1f}" y="{head + plot_h + 14}" text-anchor="middle">'
                f"{_esc(format_size(2**k))}</text>"
            )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle" fill="{GREY}">'
        f"file size (log2 buckets, lower bound); bar = number of {value}</text>"
    )
    if ks:
        parts += _marker_lines(markers, ks[0], len(ks), left, slot, head, plot_h)
    if len(series) > 1:
        for j, (name, _) in enumerate(series):
            x = left + j * 170
            parts.append(f'<rect x="{x}" y="27" width="10" height="10" fill="{colors[j % len(colors)]}"/>')
            parts.append(f'<text x="{x + 14}" y="36">{_esc(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _marker_lines(
    markers: Sequence[tuple[str, int]], first: int, n: int, left: float, slot: float, head: float, plot_h: float
) -> list[str]:
    """Dashed lines at sizes on the log2 axis (only those inside the drawn buckets), labelled by name."""
    import math

    out = []
    for i, (name, size) in enumerate(markers):
        pos = math.log2(size) - first if size > 0 else -1.0
        if not 0 <= pos <= n:
            continue
        x, y = left + pos * slot, head + 10 + 12 * i
        out += [
            f'<line x1="{x:.1f}" y1="{head}" x2="{x:.1f}" y2="{head + plot_h}" stroke="{GREY}" stroke-dasharray="4 3">'
            f"<title>{_esc(name)} = {_esc(format_size(size))}</title></line>",
            f'<text x="{x + 3:.1f}" y="{y:.1f}" fill="{GREY}">{_esc(name)}</text>',
        ]
    return out


def _partition_bars_svg(partitions: Sequence[Mapping[str, Any]], title: str, width: int = 720) -> str:
    """Horizontal bars per partition: files OPTIMIZE would rewrite (red) and the rest (blue).

    The partitions with most files to rewrite come first; past ``MAX_PARTITION_BARS`` a "+N more" row.
    """
    ranked = sorted(partitions, key=lambda p: (-p.get("filesToRewrite", 0), -p["numFiles"]))
    rows, more = ranked[:MAX_PARTITION_BARS], len(ranked) - MAX_PARTITION_BARS
    height = 40 + 18 * (max(1, len(rows)) + (1 if more > 0 else 0))
    top = max([p["numFiles"] for p in rows] + [1])
    left, right = 200, 60
    plot_w = width - left - right
    parts = _svg_open(width, height, title)
    for i, p in enumerate(rows):
        y = 28 + i * 18
        bad = p.get("filesToRewrite", 0)
        w_bad = plot_w * bad / top
        w_rest = plot_w * (p["numFiles"] - bad) / top
        label = p["partition"] if len(p["partition"]) <= 30 else p["partition"][:29] + "…"
        parts += [
            f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{_esc(label)}</text>',
            f'<rect x="{left}" y="{y}" width="{w_bad:.1f}" height="14" fill="{RED}">'
            f"<title>{bad} file(s) OPTIMIZE would rewrite</title></rect>",
            f'<rect x="{left + w_bad:.1f}" y="{y}" width="{w_rest:.1f}" height="14" fill="{BLUE}"/>',
            f'<text x="{left + w_bad + w_rest + 4:.1f}" y="{y + 11}">{p["numFiles"]}</text>',
        ]
    if more > 0:
        y = 28 + len(rows) * 18
        parts.append(f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">+{more} more partitions</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


# --------------------------------------------------------------------------- view model
def _size(n: Any) -> str:
    return format_size(n) if isinstance(n, (int, float)) else "-"


def _pv(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={'null' if v is None else v}" for k, v in values.items()) or "(unpartitioned)"


#: Summary rows: (name, value getter, text, which direction is better: -1 lower, +1 higher, 0 neither).
_SUMMARY: tuple[tuple[str, str, int], ...] = (
    ("files", "numFiles", -1),
    ("size", "sizeBytes", 0),
    ("partitions", "numPartitions", 0),
    ("average file size", "avgFileSize", 1),
    ("small files (optimize)", "smallFiles.optimize", -1),
    ("small files (auto compaction)", "smallFiles.autoCompact", -1),
)


def _get(r: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        r = r[part]
    return r


def _text(key: str, v: Any) -> str:
    if key == "sizeBytes":
        return f"{_size(v)} ({v} B)"
    if key == "avgFileSize":
        return _size(v)
    return str(v)


def _change(key: str, before: Any, after: Any, better: int) -> dict[str, str]:
    """The change's text and class: green when it went the better way, red the worse, none if neutral."""
    d = after - before
    cls = "" if not d or not better else ("good" if (d > 0) == (better > 0) else "bad")
    if key in ("sizeBytes", "avgFileSize"):
        text = ("-" if d < 0 else "+") + format_size(abs(d))
    else:
        text = f"{d:+d}"
    return {"text": text, "cls": cls}


def _summary(r: Mapping[str, Any], compare: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Rows of the summary table; small-file rows are red only when the verdict says they are a problem."""
    unhealthy = r["verdict"]["status"] != HEALTHY
    auto_runs = r["autoCompact"]["status"] in (RUN_ON_ALL, RUN_ON_MODIFIED)
    problem = {"smallFiles.optimize": unhealthy, "smallFiles.autoCompact": unhealthy and auto_runs}
    rows = []
    for name, key, better in _SUMMARY:
        after = _get(r, key)
        row: dict[str, Any] = {"name": name, "text": _text(key, after), "cls": "bad" if problem.get(key) else ""}
        if compare is not None:
            before = _get(compare, key)
            row["before"] = _text(key, before)
            row["change"] = _change(key, before, after, better)
        rows.append(row)
    return rows


def _histogram(r: Mapping[str, Any], compare: Mapping[str, Any] | None) -> dict[str, Any]:
    series = []
    if compare is not None:
        series.append((f"before (v{compare['version']})", compare["histogram"]))
        series.append((f"after (v{r['version']})", r["histogram"]))
    else:
        series.append((f"version {r['version']}", r["histogram"]))
    ks = sorted({b["log2"] for _, bs in series for b in bs})
    rows = [
        {
            "bucket": f"[{format_size(2**k)}, {format_size(2 ** (k + 1))})",
            "files": [next((b["files"] for b in bs if b["log2"] == k), 0) for _, bs in series],
        }
        for k in ks
    ]
    th = r["thresholds"]
    markers = [
        ("optimize.minFileSize", th["optimizeMinFileSize"]),
        ("autoCompact.minFileSize", th["autoCompactMinFileSize"]),
    ]
    images = [
        ("file-size histogram (files)", histogram_svg(series, "Files per size bucket", markers=markers)),
        ("file-size histogram (bytes)", histogram_svg(series, "Bytes per size bucket", value="bytes", markers=markers)),
    ]
    return {"names": [n for n, _ in series], "rows": rows, "images": [(a, svg_data_uri(s)) for a, s in images]}


def _partitions(r: Mapping[str, Any], compare: Mapping[str, Any] | None) -> dict[str, Any]:
    before = {p["partition"]: p for p in (compare or {}).get("partitions", [])}
    rows = []
    for p in r["partitions"][:MAX_PARTITION_ROWS]:
        z = p["zOrder"]
        b = before.get(p["partition"])
        rows.append(
            {
                "p": p,
                "before": (b["numFiles"] if b else 0) if compare is not None else None,
                "zorder": z["state"] + (f" ({', '.join(map(str, z['clusteredBy']))})" if z["clusteredBy"] else ""),
            }
        )
    image = None
    if r["partitions"]:
        svg = _partition_bars_svg(r["partitions"], "Files per partition (red: files OPTIMIZE would rewrite)")
        image = ("files per partition", svg_data_uri(svg))
    return {"rows": rows, "more": max(0, len(r["partitions"]) - MAX_PARTITION_ROWS), "image": image}


def _plan(r: Mapping[str, Any]) -> dict[str, Any]:
    plan = r["optimize"]
    bins = [{"pv": _pv(b["partitionValues"]), "files": b["files"], "size": _size(b["bytes"])} for b in plan["bins"]]
    ac = r["autoCompact"]
    chosen = [c["partition"] for c in ac["chosen"]]
    considered = [
        {"pv": _pv(c["partition"]), "small": c["smallFiles"], "files": c["files"], "chosen": c["partition"] in chosen}
        for c in ac["considered"][:MAX_BINS]
    ]
    return {
        "plan": plan,
        "bins": bins[:MAX_BINS],
        "more_bins": max(0, len(bins) - MAX_BINS),
        "ac": ac,
        "considered": considered,
        "more_considered": max(0, len(ac["considered"]) - MAX_BINS),
    }


def _thresholds(r: Mapping[str, Any]) -> list[dict[str, str]]:
    th, src = r["thresholds"], r.get("thresholdSources") or {}
    names = (
        ("optimize.minFileSize", "optimizeMinFileSize", "OPTIMIZE compacts files strictly smaller"),
        ("optimize.maxFileSize", "optimizeMaxFileSize", "OPTIMIZE's bin cap and target file size"),
        ("autoCompact.minFileSize", "autoCompactMinFileSize", "auto compaction counts files strictly smaller"),
        ("autoCompact.maxFileSize", "autoCompactMaxFileSize", "auto compaction's target file size"),
        ("autoCompact.minNumFiles", "autoCompactMinNumFiles", "small files a partition needs to be compacted"),
    )
    return [
        {
            "name": name,
            "value": str(th[key]) if key == "autoCompactMinNumFiles" else _size(th[key]),
            "source": src.get(key, ""),
            "why": why,
        }
        for name, key, why in names
        if key in th
    ]


def _environment() -> jinja2.Environment:
    """A fresh environment per page (no module-level cache, per ARCHITECTURE.md); autoescape always on."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("dbt_delta_optimize.inspect", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(report: HealthReport | Mapping[str, Any], path: str, compare: Mapping[str, Any] | None = None) -> str:
    """Write the report as one self-contained HTML page (pictures are inline base64 SVG); returns ``path``.

    ``compare`` (default: the report's own ``compare`` section) is shown as "before", the report as "after".
    """
    from .sparklines import trend_rows

    r: Mapping[str, Any] = report if isinstance(report, Mapping) else report.to_dict()
    compare = compare if compare is not None else r.get("compare")
    page = (
        _environment()
        .get_template("health.html.j2")
        .render(
            r=r,
            compare=compare,
            summary=_summary(r, compare),
            histogram=_histogram(r, compare),
            partitions=_partitions(r, compare),
            thresholds=_thresholds(r),
            zorder_tag=COLUMNS_TAG,
            lookback=LAST_OPTIMIZE_LOOKBACK,
            size=_size,
            trend=r.get("trends"),
            trend_rows=trend_rows(r.get("trends"), width=240),
            **_plan(r),
        )
    )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


#: Shared with the project page (``project_page``): one escaping, one SVG frame, one jinja2 environment.
svg_open, environment = _svg_open, _environment
