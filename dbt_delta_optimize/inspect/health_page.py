"""The health page: one self-contained HTML file from a ``HealthReport`` (inline SVG pictures, no assets)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..plan.config import format_size
from ..plan.curve import COLUMNS_TAG

if TYPE_CHECKING:
    from .health import HealthReport

__all__ = ["histogram_svg", "render_html", "svg_data_uri"]


# --------------------------------------------------------------------------- pictures
_BLUE, _ORANGE, _GREY = "#3b6ea8", "#e08a2c", "#666"


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def histogram_svg(
    series: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    title: str,
    *,
    value: str = "files",
    width: int = 720,
    height: int = 260,
) -> str:
    """Grouped bar chart of log2 histograms (one series per version), as a standalone SVG document."""
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
    colors = [_BLUE, _ORANGE, "#5a9e4b", "#9b59b6"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{_esc(title)}</text>',
        f'<line x1="{left}" y1="{head + plot_h}" x2="{width - right}" y2="{head + plot_h}" stroke="{_GREY}"/>',
        f'<line x1="{left}" y1="{head}" x2="{left}" y2="{head + plot_h}" stroke="{_GREY}"/>',
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
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 8}" text-anchor="middle" fill="{_GREY}">'
        f"file size (log2 buckets, lower bound); bar = number of {value}</text>"
    )
    if len(series) > 1:
        for j, (name, _) in enumerate(series):
            x = left + j * 170
            parts.append(f'<rect x="{x}" y="27" width="10" height="10" fill="{colors[j % len(colors)]}"/>')
            parts.append(f'<text x="{x + 14}" y="36">{_esc(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _partition_bars_svg(partitions: Sequence[Mapping[str, Any]], title: str, width: int = 720) -> str:
    """Horizontal bars per partition: files, split into small (optimize candidates) and the rest."""
    rows = list(partitions)[:60]
    height = 40 + 18 * max(1, len(rows))
    top = max([p["numFiles"] for p in rows] + [1])
    left, right = 200, 60
    plot_w = width - left - right
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" font-size="13" font-weight="bold">{_esc(title)}</text>',
    ]
    for i, p in enumerate(rows):
        y = 28 + i * 18
        small = p["smallFiles"]["optimize"]
        w_small = plot_w * small / top
        w_rest = plot_w * (p["numFiles"] - small) / top
        label = p["partition"] if len(p["partition"]) <= 30 else p["partition"][:29] + "…"
        parts += [
            f'<text x="{left - 6}" y="{y + 11}" text-anchor="end">{_esc(label)}</text>',
            f'<rect x="{left}" y="{y}" width="{w_small:.1f}" height="14" fill="{_ORANGE}"><title>{small} small files</title></rect>',
            f'<rect x="{left + w_small:.1f}" y="{y}" width="{w_rest:.1f}" height="14" fill="{_BLUE}"/>',
            f'<text x="{left + w_small + w_rest + 4:.1f}" y="{y + 11}">{p["numFiles"]}</text>',
        ]
    parts.append("</svg>")
    return "".join(parts)


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _img(svg: str, alt: str) -> str:
    return f'<img alt="{_esc(alt)}" src="{svg_data_uri(svg)}">'


# --------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 16px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f2f2f2}
.delta-neg{color:#2a7a2a}.delta-pos{color:#a82a2a}
code{background:#f5f5f5;padding:1px 3px}
"""


def _size(n: Any) -> str:
    return format_size(n) if isinstance(n, (int, float)) else "-"


def _summary_rows(r: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    return [
        ("files", r["numFiles"], str(r["numFiles"])),
        ("size", r["sizeBytes"], f"{_size(r['sizeBytes'])} ({r['sizeBytes']} B)"),
        ("partitions", r["numPartitions"], str(r["numPartitions"])),
        ("average file size", r["avgFileSize"], _size(r["avgFileSize"])),
        ("small files (optimize)", r["smallFiles"]["optimize"], str(r["smallFiles"]["optimize"])),
        ("small files (auto compaction)", r["smallFiles"]["autoCompact"], str(r["smallFiles"]["autoCompact"])),
    ]


def _delta_cell(before: Any, after: Any) -> str:
    try:
        d = after - before
    except TypeError:
        return "<td></td>"
    cls = "delta-neg" if d < 0 else ("delta-pos" if d > 0 else "")
    text = f"{d:+.0f}" if isinstance(d, float) else f"{d:+d}"
    return f'<td class="{cls}">{text}</td>'


def _summary_html(report: Mapping[str, Any], compare: Mapping[str, Any] | None, th: Mapping[str, Any]) -> list[str]:
    """The summary table (before/after when comparing) and the thresholds line."""
    out: list[str] = []
    if compare is not None:
        out.append(
            f'<table id="summary"><tr><th></th><th>before (version {compare["version"]})</th>'
            f"<th>after (version {report['version']})</th><th>change</th></tr>"
        )
        for (name, bv, btxt), (_, av, atxt) in zip(_summary_rows(compare), _summary_rows(report)):
            out.append(f"<tr><td>{_esc(name)}</td><td>{_esc(btxt)}</td><td>{_esc(atxt)}</td>{_delta_cell(bv, av)}</tr>")
    else:
        out.append('<table id="summary"><tr><th></th><th>value</th></tr>')
        for name, _, txt in _summary_rows(report):
            out.append(f"<tr><td>{_esc(name)}</td><td>{_esc(txt)}</td></tr>")
    out.append("</table>")
    if th:
        out.append(
            "<p>Thresholds: optimize.minFileSize "
            f"<b>{_esc(_size(th.get('optimizeMinFileSize')))}</b>, optimize.maxFileSize "
            f"<b>{_esc(_size(th.get('optimizeMaxFileSize')))}</b>, autoCompact.minFileSize "
            f"<b>{_esc(_size(th.get('autoCompactMinFileSize')))}</b>, autoCompact.maxFileSize "
            f"<b>{_esc(_size(th.get('autoCompactMaxFileSize')))}</b> (small = strictly below minFileSize).</p>"
        )
    return out


def render_html(report: HealthReport | Mapping[str, Any], path: str, compare: Mapping[str, Any] | None = None) -> str:
    """Write the report as one self-contained HTML page (pictures are inline base64 SVG); returns ``path``.

    ``compare`` (default: the report's own ``compare`` section) is shown as "before", the report as "after".
    """
    report = report if isinstance(report, Mapping) else report.to_dict()
    compare = compare if compare is not None else report.get("compare")
    th = report.get("thresholds") or {}
    title = f"Delta table health: {report['table']}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f"<p>version <b>{report['version']}</b>, partitioned by "
        f"<code>{_esc(', '.join(report['partitionColumns']) or 'nothing')}</code>; generated {_esc(report.get('generatedAt', ''))}</p>",
        "<h2>Summary</h2>",
    ]
    out += _summary_html(report, compare, th)

    out.append("<h2>File sizes</h2>")
    series = []
    if compare is not None:
        series.append((f"before (v{compare['version']})", compare["histogram"]))
        series.append((f"after (v{report['version']})", report["histogram"]))
    else:
        series.append((f"version {report['version']}", report["histogram"]))
    out.append(_img(histogram_svg(series, "Files per size bucket"), "file-size histogram (files)"))
    out.append(_img(histogram_svg(series, "Bytes per size bucket", value="bytes"), "file-size histogram (bytes)"))
    out.append('<table id="histogram"><tr><th>bucket</th>')
    out += [f"<th>{_esc(name)} files</th>" for name, _ in series]
    out.append("</tr>")
    ks = sorted({b["log2"] for _, bs in series for b in bs})
    for k in ks:
        cells = "".join(f"<td>{next((b['files'] for b in bs if b['log2'] == k), 0)}</td>" for _, bs in series)
        out.append(f"<tr><td>[{_esc(format_size(2**k))}, {_esc(format_size(2 ** (k + 1)))})</td>{cells}</tr>")
    out.append("</table>")

    out.append("<h2>Partitions</h2>")
    if report["partitions"]:
        out.append(
            _img(
                _partition_bars_svg(report["partitions"], "Files per partition (orange: small files)"),
                "files per partition",
            )
        )
    before_parts = {p["partition"]: p for p in (compare or {}).get("partitions", [])}
    head = "<tr><th>partition</th>"
    if compare is not None:
        head += "<th>files before</th>"
    head += "<th>files</th><th>size</th><th>avg file</th><th>small (optimize)</th><th>small (auto compaction)</th><th>Z-order</th></tr>"
    out.append(f'<table id="partitions">{head}')
    for p in report["partitions"]:
        z = p["zOrder"]
        zt = z["state"] + (f" ({', '.join(map(str, z['clusteredBy']))})" if z["clusteredBy"] else "")
        before_cell = ""
        if compare is not None:
            b = before_parts.get(p["partition"])
            before_cell = f"<td>{b['numFiles'] if b else 0}</td>"
        out.append(
            f"<tr><td>{_esc(p['partition'])}</td>{before_cell}<td>{p['numFiles']}</td><td>{_esc(_size(p['sizeBytes']))}</td>"
            f"<td>{_esc(_size(p['avgFileSize']))}</td><td>{p['smallFiles']['optimize']}</td>"
            f"<td>{p['smallFiles']['autoCompact']}</td><td>{_esc(zt)}</td></tr>"
        )
    out.append("</table>")
    zc = report.get("zOrder") or {}
    out.append(
        f"<p>Z-order state: {zc.get('all', 0)} partition(s) fully clustered, {zc.get('some', 0)} partly, "
        f"{zc.get('none', 0)} not clustered (from the <code>{_esc(COLUMNS_TAG)}</code> file tags).</p>"
    )

    plan = report.get("optimize")
    out.append("<h2>What OPTIMIZE would do now</h2>")
    if plan:
        out.append(
            f"<p>{plan['numBins']} bin(s) in {plan['partitions']} partition(s): rewrite {plan['filesToRewrite']} of "
            f"{plan['consideredFiles']} file(s), {_esc(_size(plan['bytesToRewrite']))} "
            f"(source: {_esc(report.get('optimizeSource', ''))}).</p>"
        )
        if plan["bins"]:
            out.append('<table id="plan"><tr><th>partition</th><th>files</th><th>bytes</th></tr>')
            for b in plan["bins"][:200]:
                pv = (
                    ", ".join(f"{k}={'null' if v is None else v}" for k, v in b["partitionValues"].items())
                    or "(unpartitioned)"
                )
                out.append(f"<tr><td>{_esc(pv)}</td><td>{b['files']}</td><td>{_esc(_size(b['bytes']))}</td></tr>")
            out.append("</table>")
    out.append("<h2>What auto compaction would do</h2>")
    ac = report.get("autoCompact")
    if ac is None:
        out.append("<p><i>Not computed.</i></p>")
    else:
        out.append(f"<p>{_esc(ac['status'])}: {_esc(ac['reason'])}</p>")
        out.append(
            '<table id="autocompact"><tr><th>partition</th><th>small files</th><th>files</th><th>chosen</th></tr>'
        )
        chosen = [c["partition"] for c in ac["chosen"]]
        for c in ac["considered"][:200]:
            pv = ", ".join(f"{k}={'null' if v is None else v}" for k, v in c["partition"].items()) or "(unpartitioned)"
            mark = "yes" if c["partition"] in chosen else ""
            out.append(f"<tr><td>{_esc(pv)}</td><td>{c['smallFiles']}</td><td>{c['files']}</td><td>{mark}</td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(out))
    return path
