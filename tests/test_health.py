"""Health report: numbers checked against delta-rs's own view of the snapshot (get_add_actions), the
plan against OPTIMIZE's dry run, and the HTML page's pictures decoded back to SVG."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shlex
import shutil
import xml.etree.ElementTree as ET
from collections import defaultdict
from html.parser import HTMLParser

import click
import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.cli.inspect import health, history, validate
from dbt_delta_optimize.cli.optimize import optimize as optimize_cmd
from dbt_delta_optimize.errors import InvalidConfigError, TableNotFoundError
from dbt_delta_optimize.inspect import health_page
from dbt_delta_optimize.inspect.health import HealthReport, histogram, render_html
from dbt_delta_optimize.inspect.health import health_report as _health_report
from dbt_delta_optimize.plan.config import format_size
from dbt_delta_optimize.plan.curve import COLUMNS_TAG, CURVE_TAG

CLI = click.Group(commands=[validate, health, history])
SVG = "{http://www.w3.org/2000/svg}svg"
IMG_RE = re.compile(r'<img alt="([^"]*)" src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)">')


def health_report(*args, **kwargs) -> dict:
    """The report's JSON form (what --json prints), which most checks read."""
    report = _health_report(*args, **kwargs)
    assert isinstance(report, HealthReport)
    return report.to_dict()


def run_cli(*args: str):
    return CliRunner().invoke(CLI, list(args), catch_exceptions=False)


def _rows(part: str, n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "part": [part] * n, "payload": [f"{part}-{i:08d}-{(i * 7919) % 100003}" for i in ids]})


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """delta-rs table: part=a 4 small + 1 larger file, part=b 2 small, part=c 1 larger (versions 0..7)."""
    p = str(tmp_path_factory.mktemp("health") / "t")
    for i in range(4):
        write_deltalake(p, _rows("a", 5, i * 5), partition_by=["part"], mode="append")
    write_deltalake(p, _rows("a", 3000, 100), partition_by=["part"], mode="append")
    for i in range(2):
        write_deltalake(p, _rows("b", 5, i * 5), partition_by=["part"], mode="append")
    write_deltalake(p, _rows("c", 3000), partition_by=["part"], mode="append")
    return p


@pytest.fixture
def table(template, tmp_path):
    p = str(tmp_path / "t")
    shutil.copytree(template, p)
    return p


def expected_layout(path: str, version: int | None = None) -> dict[str, list[int]]:
    """Partition label -> file sizes, from delta-rs (not from our snapshot reader)."""
    t = pa.table(DeltaTable(path, version=version).get_add_actions(flatten=True)).to_pylist()
    out: dict[str, list[int]] = defaultdict(list)
    for row in t:
        out[f"part={row['partition.part']}"].append(row["size_bytes"])
    return dict(out)


def sizes_threshold(path: str) -> int:
    """A threshold between the small and the larger files."""
    sizes = sorted(s for v in expected_layout(path).values() for s in v)
    assert sizes[-1] > 4 * sizes[0]
    return (sizes[0] + sizes[-1]) // 2


def check_numbers(report: dict, layout: dict[str, list[int]], small: int, ac_small: int) -> None:
    assert report["numFiles"] == sum(len(v) for v in layout.values())
    assert report["sizeBytes"] == sum(sum(v) for v in layout.values())
    assert report["numPartitions"] == len(layout)
    assert report["smallFiles"] == {
        "optimize": sum(1 for v in layout.values() for s in v if s < small),
        "autoCompact": sum(1 for v in layout.values() for s in v if s < ac_small),
    }
    got = {p["partition"]: p for p in report["partitions"]}
    assert set(got) == set(layout)
    for label, sizes in layout.items():
        p = got[label]
        assert (p["numFiles"], p["sizeBytes"], p["minFileSize"], p["maxFileSize"]) == (
            len(sizes),
            sum(sizes),
            min(sizes),
            max(sizes),
        )
        assert p["smallFiles"] == {
            "optimize": sum(s < small for s in sizes),
            "autoCompact": sum(s < ac_small for s in sizes),
        }
        assert sum(b["files"] for b in p["histogram"]) == len(sizes)
    all_sizes = [s for v in layout.values() for s in v]
    hist = report["histogram"]
    assert sum(b["files"] for b in hist) == len(all_sizes) and sum(b["bytes"] for b in hist) == sum(all_sizes)
    for s in all_sizes:
        (b,) = [b for b in hist if b["lower"] <= s < b["upper"]]
        assert b["files"] >= 1
    assert [b["log2"] for b in hist] == list(range(hist[0]["log2"], hist[-1]["log2"] + 1))


def decoded_images(page: str) -> list[tuple[str, ET.Element]]:
    out = []
    for alt, b64 in IMG_RE.findall(page):
        root = ET.fromstring(base64.b64decode(b64, validate=True).decode("utf-8"))
        assert root.tag == SVG
        out.append((alt, root))
    return out


def bar_values(svg: ET.Element, series: str) -> int:
    """Sum of the bar values a histogram picture shows for one series (from the bars' tooltips)."""
    total = 0
    for title in svg.iter("{http://www.w3.org/2000/svg}title"):
        m = re.match(rf"{re.escape(series)}: (\d+) ", title.text or "")
        if m:
            total += int(m.group(1))
    return total


# --------------------------------------------------------------------------- tests
def test_histogram_buckets():
    h = histogram([1000, 1023, 1024, 5000])
    assert [(b["log2"], b["files"]) for b in h] == [(9, 2), (10, 1), (11, 0), (12, 1)]
    assert h[0]["lower"] == 512 and h[0]["upper"] == 1024
    assert histogram([]) == []
    assert histogram([0, 1])[0]["files"] == 2


@pytest.mark.parametrize("which", ["tiny", "middle", "huge"])
def test_numbers_match_the_snapshot(table, which):
    layout = expected_layout(table)
    small = {"tiny": 1, "middle": sizes_threshold(table), "huge": 10**9}[which]
    ac_small = 3 * small // 4 or 1
    r = health_report(table, min_file_size=small, auto_compact_min_file_size=ac_small)
    assert (r["table"], r["version"], r["partitionColumns"]) == (table, 7, ["part"])
    assert r["thresholds"]["optimizeMinFileSize"] == small and r["thresholds"]["autoCompactMinFileSize"] == ac_small
    check_numbers(r, layout, small, ac_small)
    assert r["compare"] is None
    # auto compaction's dry run counts the same small files per partition as the report
    ac = {tuple(c["partition"].values()): c["smallFiles"] for c in r["autoCompact"]["considered"]}
    assert ac == {(part.split("=", 1)[1],): sum(s < ac_small for s in sizes) for part, sizes in layout.items()}
    assert r["autoCompact"]["status"] == "skipInsufficientFiles" and r["autoCompact"]["chosen"] == []  # 50 needed
    json.dumps(r)


def test_default_thresholds_are_delta_sparks(table):
    r = health_report(table)
    assert r["thresholds"] == {
        "optimizeMinFileSize": 1024**3,
        "optimizeMaxFileSize": 1024**3,
        "autoCompactMinFileSize": 64 * 1024**2,
        "autoCompactMaxFileSize": 128 * 1024**2,
        "autoCompactMinNumFiles": 50,
    }
    assert set(r["thresholdSources"].values()) <= {"default", "autoCompact.maxFileSize / 2"}
    assert r["smallFiles"] == {"optimize": 8, "autoCompact": 8}
    # OPTIMIZE would compact every partition with more than one file: a (5 files) and b (2).
    plan = r["optimize"]
    assert (plan["numBins"], plan["filesToRewrite"], plan["partitions"]) == (2, 7, 2)
    assert r["optimizeSource"] == "plan_optimize"
    r = health_report(table, auto_compact_max_file_size="1k")
    assert r["thresholds"]["autoCompactMinFileSize"] == 512


def _plan_key(plan: dict) -> set:
    return {(json.dumps(b["partitionValues"], sort_keys=True), b["files"], b["bytes"]) for b in plan["bins"]}


def test_plan_is_optimizes_dry_run(spark, table):
    from dbt_delta_optimize.api import optimize

    small = sizes_threshold(table)
    dry = optimize(spark, table, dry_run=True, min_file_size=small).to_dict(
        include_paths=False
    )  # health lists bins, not their paths
    from dbt_delta_optimize.engine.session import conf_getter

    with_spark = health_report(table, get_conf=conf_getter(spark), min_file_size=small)
    without = health_report(table, min_file_size=small)
    assert with_spark["optimize"] == dry and with_spark["optimizeSource"] == "plan_optimize"
    assert _plan_key(without["optimize"]) == _plan_key(dry)
    assert (dry["numBins"], dry["filesToRewrite"]) == (2, 6)  # a's 4 small files, b's 2; not a's larger one

    spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(small))
    spark.conf.set("spark.databricks.delta.autoCompact.maxFileSize", "4096")
    try:
        r = health_report(table, get_conf=conf_getter(spark))
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.minFileSize")
        spark.conf.unset("spark.databricks.delta.autoCompact.maxFileSize")
    assert r["thresholds"]["optimizeMinFileSize"] == small
    assert r["thresholds"]["autoCompactMinFileSize"] == 2048 and r["thresholds"]["autoCompactMaxFileSize"] == 4096
    assert r["thresholdSources"]["optimizeMinFileSize"] == "spark.databricks.delta.optimize.minFileSize"
    check_numbers(r, expected_layout(table), small, 2048)
    assert r["optimize"] == dry


def _tag(path: str, paths: set[str]) -> None:
    """Tag the add actions of ``paths`` as Z-ordered by our writer (edits the log in place)."""
    log = os.path.join(path, "_delta_log")
    for name in sorted(os.listdir(log)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(log, name)) as fh:
            actions = [json.loads(line) for line in fh if line.strip()]
        for a in actions:
            if "add" in a and a["add"]["path"] in paths:
                a["add"]["tags"] = {COLUMNS_TAG: json.dumps(["id"]), CURVE_TAG: "zorder"}
        with open(os.path.join(log, name), "w") as fh:
            fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def test_zorder_state_per_partition(table):
    files = pa.table(DeltaTable(table).get_add_actions(flatten=True)).to_pylist()
    by_part = defaultdict(list)
    for f in files:
        by_part[f["partition.part"]].append(f["path"])
    _tag(table, {by_part["c"][0], by_part["a"][0]})
    r = health_report(table)
    z = {p["partition"]: p["zOrder"] for p in r["partitions"]}
    assert z["part=c"] == {"state": "all", "taggedFiles": 1, "clusteredBy": [["id"]], "curves": ["zorder"]}
    assert z["part=a"]["state"] == "some" and z["part=a"]["taggedFiles"] == 1
    assert z["part=b"] == {"state": "none", "taggedFiles": 0, "clusteredBy": [], "curves": []}
    assert r["zOrder"] == {"all": 1, "some": 1, "none": 1}


def test_html_page_pictures_decode_and_show_the_numbers(table, tmp_path):
    small = sizes_threshold(table)
    r = health_report(table, min_file_size=small)
    out = render_html(r, str(tmp_path / "health.html"))
    with open(out, encoding="utf-8") as fh:
        page = fh.read()
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained
    images = decoded_images(page)
    assert len(images) == 3 and len(IMG_RE.findall(page)) == page.count("<img ")
    (files_svg,) = [svg for alt, svg in images if alt == "file-size histogram (files)"]
    (bytes_svg,) = [svg for alt, svg in images if alt == "file-size histogram (bytes)"]
    assert bar_values(files_svg, f"version {r['version']}") == r["numFiles"]
    assert bar_values(bytes_svg, f"version {r['version']}") == r["sizeBytes"]
    for p in r["partitions"]:
        assert f"<td>{p['partition']}</td><td>{p['numFiles']}</td>" in page
    assert f'<td>small files (optimize)</td><td class="bad">{r["smallFiles"]["optimize"]}</td>' in page
    assert f"{r['autoCompact']['status']}: " in page  # auto compaction's dry run
    for c in r["autoCompact"]["considered"]:
        pv = ", ".join(f"{k}={v}" for k, v in c["partition"].items())
        assert f"<td>{pv}</td><td>{c['smallFiles']}</td><td>{c['files']}</td>" in page


def test_compare_version_shows_before_and_after(table, tmp_path):
    before_layout = expected_layout(table)
    DeltaTable(table).optimize.compact()
    after_layout = expected_layout(table)
    assert after_layout != before_layout
    small = sizes_threshold(table)
    r = health_report(table, compare_version=7, min_file_size=small, auto_compact_min_file_size=small)
    assert r["version"] == 8 and r["compare"]["version"] == 7
    check_numbers(r, after_layout, small, small)
    check_numbers(r["compare"], before_layout, small, small)
    with open(render_html(r, str(tmp_path / "cmp.html")), encoding="utf-8") as fh:
        page = fh.read()
    assert "before (version 7)" in page and "after (version 8)" in page
    (files_svg,) = [svg for alt, svg in decoded_images(page) if alt == "file-size histogram (files)"]
    assert bar_values(files_svg, "before (v7)") == r["compare"]["numFiles"] == 8
    assert bar_values(files_svg, "after (v8)") == r["numFiles"]
    delta = r["numFiles"] - 8
    assert f'<td>files</td><td>8</td><td>{r["numFiles"]}</td><td class="good">{delta:+d}</td>' in page

    res = run_cli("health", table, "--compare-version", "7", "--html", str(tmp_path / "cli.html"))
    assert res.exit_code == 0, res.output
    assert "before: version 7: 8 files" in res.stdout and f"after:  version 8: {r['numFiles']} files" in res.stdout
    assert decoded_images((tmp_path / "cli.html").read_text(encoding="utf-8"))


def test_cli_health_json_and_errors(table, tmp_path):
    res = run_cli("health", table, "--json", "--min-file-size", "2k")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    expected = health_report(table, min_file_size=2048)
    d.pop("generatedAt"), expected.pop("generatedAt")
    assert d == json.loads(json.dumps(expected))
    res = run_cli("health", table)
    assert res.exit_code == 0 and "optimize would rewrite 7 of 8" in res.stdout
    assert "verdict: needs optimize: OPTIMIZE would rewrite 7 of 8 file(s) (88%" in res.stdout
    assert f"recommended: dbt-delta-optimize optimize {table}\n" in res.stdout
    assert re.search(r"^part=a\s+5\s", res.stdout, re.M), res.stdout  # partition, files, ...
    res = run_cli("health", str(tmp_path / "missing"))
    assert res.exit_code == 2 and res.stderr.startswith("error:")
    res = run_cli("health", table, "--compare-version", "99")
    assert res.exit_code == 2 and "error:" in res.stderr
    with pytest.raises(TableNotFoundError):
        _health_report(str(tmp_path / "missing"))


# --------------------------------------------------------------------------- report object, verdict, page
class StrictHTML(HTMLParser):
    """Fails on any unclosed, stray or misnested element (the page closes every non-void tag)."""

    VOID = frozenset({"meta", "img", "br", "hr", "link", "input"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        names = [a for a, _ in attrs]
        assert len(names) == len(set(names)), (tag, attrs)
        self.tags.append(tag)
        self.urls += [v for a, v in attrs if a in ("src", "href")]
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        raise AssertionError(f"self-closing <{tag}/> in HTML")

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        if self.stack[-1:] != ["style"]:
            self.text.append(data)


def parse_page(page: str) -> StrictHTML:
    assert page.startswith("<!DOCTYPE html>")
    parser = StrictHTML()
    parser.feed(page)
    parser.close()
    assert parser.stack == [], parser.stack
    assert "script" not in parser.tags
    assert all(u.startswith("data:image/svg+xml;base64,") for u in parser.urls), parser.urls  # self-contained
    return parser


def render(report, path) -> str:
    """Render the page to ``path`` and return its text."""
    with open(render_html(report, str(path)), encoding="utf-8") as fh:
        return fh.read()


def page_text(page: str) -> str:
    """The page's visible text, one space between text nodes (so table cells read "name value")."""
    return " ".join(" ".join(parse_page(page).text).split())


def test_report_is_a_frozen_dataclass_with_todays_keys(table):
    report = _health_report(table, min_file_size=sizes_threshold(table))
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.version = 3  # type: ignore[misc]
    d = report.to_dict()
    old = {"table", "version", "partitionColumns", "numFiles", "sizeBytes", "numPartitions", "avgFileSize"}
    old |= {"smallFiles", "smallBytes", "histogram", "zOrder", "partitions", "generatedAt", "thresholds"}
    old |= {"optimize", "optimizeSource", "autoCompact", "compare"}
    new = {"verdict", "protocol", "lastOptimize", "thresholdSources", "autoCompactEnabled", "statistics", "vacuum"}
    new |= {"trends"}
    assert set(d) == old | new
    assert (report.table, report.version, d["version"]) == (table, 7, 7)
    d["partitions"].clear(), d["verdict"].clear()  # copies: the report itself is unchanged
    assert report.to_dict()["partitions"] and report.verdict.status == "needs optimize"
    json.dumps(report.to_dict())


def test_verdicts_give_numbers_and_a_command_that_parses(table, tmp_path):
    small = sizes_threshold(table)
    healthy = health_report(table, min_file_size=1)
    assert healthy["verdict"]["status"] == "healthy" and healthy["verdict"]["command"] is None
    assert "rewrite 0 of 8 file(s) (0%" in healthy["verdict"]["reason"]

    r = health_report(table, min_file_size=small)
    v = r["verdict"]
    assert v["status"] == "needs optimize"
    assert "rewrite 6 of 8 file(s) (75%" in v["reason"] and "skipInsufficientFiles" in v["reason"]
    assert shlex.split(v["command"]) == ["dbt-delta-optimize", "optimize", table, "--min-file-size", str(small)]
    # the recommended command runs: its dry run plans exactly what the report says OPTIMIZE would do
    res = CliRunner().invoke(optimize_cmd, [*shlex.split(v["command"])[2:], "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    dry = json.loads(res.stdout)
    assert (
        (dry["numBins"], dry["filesToRewrite"]) == (r["optimize"]["numBins"], r["optimize"]["filesToRewrite"]) == (2, 6)
    )

    # auto compaction's own rule fires (2 small files suffice): compact with its thresholds
    c = health_report(table, min_file_size=small, auto_compact_min_file_size="2k", auto_compact_min_num_files=2)
    assert c["autoCompact"]["status"] == "runOnAllPartitions"
    assert c["verdict"]["status"] == "compact recommended" and "have 2+ files under" in c["verdict"]["reason"]
    assert shlex.split(c["verdict"]["command"])[2:] == [table, "--min-file-size", "2k", "--max-file-size", "128m"]
    assert c["thresholdSources"]["autoCompactMinNumFiles"] == "argument"
    assert c["thresholds"]["autoCompactMinNumFiles"] == 2
    page = render(c, tmp_path / "c.html")
    assert '<td>small files (auto compaction)</td><td class="bad">' in page
    assert "Auto compaction is off for this table" in page_text(page)


def test_threshold_sources_follow_the_planners_resolution(table):
    conf = {"spark.databricks.delta.autoCompact.minNumFiles": "7", "spark.databricks.delta.optimize.maxFileSize": "2g"}
    r = health_report(table, get_conf=conf.get, min_file_size="1m")
    assert r["thresholds"]["autoCompactMinNumFiles"] == 7 and r["thresholds"]["optimizeMaxFileSize"] == 2 * 1024**3
    assert r["thresholdSources"] == {
        "optimizeMinFileSize": "argument",
        "optimizeMaxFileSize": "spark.databricks.delta.optimize.maxFileSize",
        "autoCompactMinFileSize": "autoCompact.maxFileSize / 2",
        "autoCompactMaxFileSize": "default",
        "autoCompactMinNumFiles": "spark.databricks.delta.autoCompact.minNumFiles",
    }
    with pytest.raises(InvalidConfigError):
        health_report(table, get_conf={"spark.databricks.delta.autoCompact.minNumFiles": "x"}.get)


def test_protocol_and_last_optimize_from_the_log(table, tmp_path):
    r = health_report(table)
    proto = DeltaTable(table).protocol()
    assert (r["protocol"]["minReaderVersion"], r["protocol"]["minWriterVersion"]) == (
        proto.min_reader_version,
        proto.min_writer_version,
    )
    assert r["protocol"]["unsupportedFeatures"] == [] and r["lastOptimize"] is None
    assert "last OPTIMIZE none in the last 1000 commits" in page_text(render(r, tmp_path / "none.html"))
    metrics = DeltaTable(table).optimize.compact()
    r = health_report(table)
    o = r["lastOptimize"]
    assert (o["version"], o["operation"], o["engine"]) == (8, "OPTIMIZE", "delta-rs")
    assert (o["filesRemoved"], o["filesAdded"]) == (metrics["numFilesRemoved"], metrics["numFilesAdded"])
    write_deltalake(table, _rows("c", 5, 9000), partition_by=["part"], mode="append")  # a later commit
    assert health_report(table)["lastOptimize"]["version"] == 8
    page = page_text(render(r, tmp_path / "p.html"))
    assert f"version 8, {o['time']}, delta-rs: removed {o['filesRemoved']} file(s), added {o['filesAdded']}" in page
    assert f"reader {proto.min_reader_version}, writer {proto.min_writer_version}" in page


def test_page_shows_verdict_thresholds_and_parses_strictly(table, tmp_path):
    small = sizes_threshold(table)
    report = _health_report(table, min_file_size=small)
    page = render(report, tmp_path / "h.html")
    text = page_text(page)
    v = report.verdict
    assert f"Verdict: {v.status}" in text and v.reason in text and f"Recommended: {v.command}" in text
    assert '<div id="verdict" class="verdict bad">' in page
    assert f"optimize.minFileSize {format_size(small)} argument" in text
    assert "autoCompact.minFileSize 64.0 MiB autoCompact.maxFileSize / 2" in text
    assert "autoCompact.minNumFiles 50 default" in text
    # red means "act on it": the small-file row is red here, and nowhere on a healthy table's page
    assert '<td>small files (optimize)</td><td class="bad">' in page
    assert "<td>small files (auto compaction)</td><td>" in page  # auto compaction would not run: not red
    ok = render(_health_report(table, min_file_size=1), tmp_path / "ok.html")
    parse_page(ok)
    assert 'class="bad"' not in ok and '<div id="verdict" class="verdict good">' in ok
    assert "Recommended:" not in ok


def test_bigger_average_file_is_good_not_red(table, tmp_path):
    DeltaTable(table).optimize.compact()
    r = health_report(table, compare_version=7, min_file_size=1)
    page = render(r, tmp_path / "c.html")
    parse_page(page)
    avg = re.search(r"<tr><td>average file size</td><td>[^<]*</td><td>[^<]*</td><td( class=\"(\w+)\")?>\+", page)
    assert avg and avg.group(2) == "good", page
    assert r["avgFileSize"] > r["compare"]["avgFileSize"]
    assert re.search(r"<td>size</td><td>[^<]*</td><td>[^<]*</td><td>[+-][^<]*B</td>", page)  # size: no colour


def test_more_rows_instead_of_silent_truncation(table, tmp_path, monkeypatch):
    r = health_report(table, min_file_size=sizes_threshold(table))
    monkeypatch.setattr(health_page, "MAX_BINS", 1)
    monkeypatch.setattr(health_page, "MAX_PARTITION_BARS", 2)
    monkeypatch.setattr(health_page, "MAX_PARTITION_ROWS", 1)
    page = render(r, tmp_path / "m.html")
    text = page_text(page)
    assert r["optimize"]["numBins"] == 2 and "+1 more bins" in text
    assert len(r["autoCompact"]["considered"]) == 3 and "+2 more partitions" in text  # auto compaction table
    assert text.count("+2 more partitions") == 2  # and the partitions table (3 rows, 1 shown)
    (bars,) = [svg for alt, svg in decoded_images(page) if alt == "files per partition"]
    labels = [t.text for t in bars.iter("{http://www.w3.org/2000/svg}text")]
    assert labels[-1] == "+1 more partitions"
    # the partitions drawn are the ones with most files to rewrite (a: 4, b: 2; c: none)
    assert [x for x in labels if x.startswith("part=")] == ["part=a", "part=b"]


def test_untrusted_partition_values_and_paths_are_escaped(tmp_path):
    evil = '<script>alert("x")</script>'
    p = str(tmp_path / "t<i>&")
    for _ in range(2):
        write_deltalake(p, _rows(evil, 3), partition_by=["part"], mode="append")
    write_deltalake(p, _rows("ok", 3), partition_by=["part"], mode="append")
    report = _health_report(p)
    assert {q["partitionValues"]["part"] for q in report.to_dict()["partitions"]} == {evil, "ok"}
    page = render(report, tmp_path / "e.html")
    assert "<script" not in page
    assert "<i>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page and "t&lt;i&gt;&amp;" in page
    text = page_text(page)  # strict parse, and the text reads back unescaped
    assert f"part={evil}" in text and "t<i>&" in text
    for _alt, svg in decoded_images(page):  # every picture is well-formed XML despite the label
        assert svg.tag == SVG
    (bars,) = [svg for alt, svg in decoded_images(page) if alt == "files per partition"]
    # the label (cut to 30 characters) reads back as the raw value, so it was escaped exactly once
    assert any((t.text or "").startswith("part=<script>alert(") for t in bars.iter("{http://www.w3.org/2000/svg}text"))


def test_no_command_for_a_table_our_writer_cannot_rewrite(tmp_path):
    p = str(tmp_path / "future")
    write_deltalake(p, _rows("a", 3))
    write_deltalake(p, _rows("a", 3, 3), mode="append")
    protocol = {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly", "futureFeature"]}
    with open(os.path.join(p, "_delta_log", f"{2:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "SET TBLPROPERTIES"}}) + "\n")
        fh.write(json.dumps({"protocol": protocol}) + "\n")
    report = _health_report(p)
    assert "futureFeature" in report.protocol["unsupportedFeatures"]
    assert report.verdict.status == "needs optimize" and report.verdict.command is None
    assert "our writer cannot rewrite it (futureFeature" in report.verdict.reason
    text = page_text(render(report, tmp_path / "future.html"))
    assert "not rewritable by this writer futureFeature" in text and "Recommended:" not in text


def test_empty_table_is_healthy_and_renders(tmp_path):
    p = str(tmp_path / "empty")
    write_deltalake(p, pa.table({"id": pa.array([], pa.int64())}))
    report = _health_report(p)
    assert (report.verdict.status, report.layout["numFiles"], report.optimize["numBins"]) == ("healthy", 0, 0)
    text = page_text(render(report, tmp_path / "e.html"))
    assert "Verdict: healthy" in text and "OPTIMIZE would rewrite 0 of 0 file(s)" in text


def test_histogram_marks_the_thresholds_in_force(table, tmp_path):
    small = sizes_threshold(table)
    r = health_report(table, min_file_size=small, auto_compact_min_file_size=10**9)
    (files_svg,) = [svg for alt, svg in decoded_images(render(r, tmp_path / "t.html")) if alt.endswith("(files)")]
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for line in files_svg.iter(f"{ns}line") for t in line.iter(f"{ns}title")]
    # the OPTIMIZE threshold lies between the files and is drawn; 1e9 bytes is far right of them: not drawn
    assert titles == [f"optimize.minFileSize = {format_size(small)}"]
