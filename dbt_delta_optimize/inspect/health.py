"""Table health: how fragmented a table is, what to do about it, and why.

Read from one snapshot (no data is read): files and bytes per partition, small files against
the thresholds OPTIMIZE and auto compaction really apply (resolved as the planners resolve them),
a log2 file-size histogram, the Z-order state of each partition, OPTIMIZE's dry-run plan, the
protocol and the last OPTIMIZE commit, and a verdict with the command that fixes what it finds.
A second version (``compare_version``) gives a before/after view, e.g. around a compaction.
``render_html`` (in ``health_page``) turns the report into one self-contained page.
"""

from __future__ import annotations

import datetime
import json
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..errors import UnsupportedFeatureError
from ..options import AUTO_COMPACT_OPTIONS, OPTIMIZE_OPTIONS, ConfGetter, GiB, MiB, format_size
from ..plan.autocompact import RUN_ON_ALL, RUN_ON_MODIFIED, AutoCompactConfig
from ..plan.config import OptimizeConfig
from ..plan.curve import COLUMNS_TAG, CURVE_TAG
from .health_report import (
    COMPACT_RECOMMENDED,
    HEALTHY,
    HEALTHY_REWRITE_SHARE,
    LAST_OPTIMIZE_LOOKBACK,
    NEEDS_OPTIMIZE,
    HealthReport,
    Thresholds,
    Verdict,
)

if TYPE_CHECKING:
    from ..delta.snapshot import Snapshot

#: The declared defaults and conf keys of the thresholds a report uses.
_DEFAULTS = {
    **{f"optimize.{o.name}": o.default for o in OPTIMIZE_OPTIONS},
    **{f"auto_compact.{o.name}": o.default for o in AUTO_COMPACT_OPTIONS},
}
_CONF = {
    **{f"optimize.{o.name}": o.conf for o in OPTIMIZE_OPTIONS},
    **{f"auto_compact.{o.name}": o.conf for o in AUTO_COMPACT_OPTIONS},
}

__all__ = [
    "AUTO_COMPACT_MAX_FILE_SIZE",
    "COMPACT_RECOMMENDED",
    "HEALTHY",
    "HEALTHY_REWRITE_SHARE",
    "LAST_OPTIMIZE_LOOKBACK",
    "NEEDS_OPTIMIZE",
    "HealthReport",
    "Thresholds",
    "Verdict",
    "health_report",
    "histogram",
    "render_html",
    "verdict_for",
]

#: delta-spark's spark.databricks.delta.autoCompact.maxFileSize default; minFileSize defaults to half.
AUTO_COMPACT_MAX_FILE_SIZE: int = _DEFAULTS["auto_compact.max_file_size"]


# --------------------------------------------------------------------------- numbers
def histogram(sizes: Iterable[int]) -> list[dict[str, Any]]:
    """log2 buckets [2^k, 2^(k+1)) of file sizes, contiguous from the smallest to the largest file."""
    import numpy as np

    values = np.fromiter(sizes, np.int64)
    return _histogram_of(_Sorted(None, values), 0, len(values)) if len(values) else []


def _label(columns: Sequence[str], key: Sequence[str | None]) -> str:
    return ", ".join(f"{c}={'null' if v is None else v}" for c, v in zip(columns, key)) or "(unpartitioned)"


Tagged = tuple[str, str | None]  #: a clustered file's (columns tag, curve tag)


def _zorder_state(num_files: int, tagged: Sequence[Tagged]) -> dict[str, Any]:
    columns = sorted({c for c, _ in tagged})
    parsed = []
    for c in columns:
        try:
            parsed.append(json.loads(c))
        except ValueError:
            parsed.append(c)
    return {
        "state": "none" if not tagged else ("all" if len(tagged) == num_files else "some"),
        "taggedFiles": len(tagged),
        "clusteredBy": parsed,
        "curves": sorted({curve for _, curve in tagged if curve}),
    }


class _Sorted:
    """The live files' sizes sorted by partition code, then size (numpy), with each partition's bounds: the
    per-partition numbers come from slices, not from one Python list per partition."""

    def __init__(self, codes: Any | None, sizes: Any) -> None:
        """``codes`` None: one partition (the sizes sorted, no permutation kept)."""
        import numpy as np

        if codes is None:
            self.sizes = np.sort(sizes)
            self.codes = np.zeros(len(sizes), np.int64)
        else:
            # np.lexsort((sizes, codes)), in two stable sorts: radix sort for the codes when they fit 16 bits
            order = np.argsort(sizes, kind="stable")
            small = len(codes) and codes.min() >= 0 and codes.max() < 2**15
            by = codes[order].astype(np.int16) if small else codes[order]
            order = order[np.argsort(by, kind="stable")]
            self.codes, self.sizes = codes[order], sizes[order]
        cut = np.flatnonzero(np.diff(self.codes)) + 1
        self.starts = np.concatenate(([0], cut)) if len(self.codes) else np.zeros(0, np.int64)
        self.ends = np.concatenate((cut, [len(self.codes)])) if len(self.codes) else np.zeros(0, np.int64)
        # each size's bucket: floor(log2), 0 for sizes up to 1 (exact below 2**53 bytes)
        exponent = np.frexp(np.maximum(self.sizes, 1).astype(np.float64))[1] - 1
        self.buckets = exponent.astype(np.int64)
        self.cumulative = np.concatenate(([0], np.cumsum(self.sizes)))


def _histogram_of(sorted_: _Sorted, lo: int, hi: int) -> list[dict[str, Any]]:
    """``histogram`` of the files lo..hi of the sorted sizes (sorted, so each bucket is a range)."""
    import numpy as np

    buckets = sorted_.buckets[lo:hi]
    first, last = int(buckets[0]), int(buckets[-1])
    ks = np.arange(first, last + 2)
    edges = lo + np.searchsorted(buckets, ks)
    counts, sums = np.diff(edges), np.diff(sorted_.cumulative[edges])
    return [
        {
            "log2": k,
            "lower": 0 if k == 0 else 2**k,
            "upper": 2 ** (k + 1),
            "label": f"{format_size(2**k)}",
            "files": int(counts[i]),
            "bytes": int(sums[i]),
        }
        for i, k in enumerate(range(first, last + 1))
    ]


def _tagged(snapshot: Snapshot, codes: Any) -> dict[int, list[Tagged]]:
    """The clustering tags of the tagged files, per partition code (only tagged files become objects)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if snapshot.file_table.no_map_entries("tags"):
        return {}  # the checkpoint's statistics say no file is tagged: the column is not read
    tags = snapshot.file_table.column("tags")
    if not len(tags) or tags.null_count == len(tags):
        return {}
    of = [pc.map_lookup(tags, pa.scalar(t, pa.string()), "first") for t in (COLUMNS_TAG, CURVE_TAG)]
    rows = np.flatnonzero(of[0].is_valid().to_numpy(zero_copy_only=False))
    taken = [o.take(pa.array(rows)).to_pylist() for o in of]
    out: dict[int, list[Tagged]] = {}
    for row, columns, curve in zip(rows.tolist(), *taken):
        out.setdefault(int(codes[row]), []).append((columns, curve))
    return out


def _partition_entry(
    cols: Sequence[str],
    key: tuple[str | None, ...],
    span: tuple[_Sorted, int, int],
    tagged: list[Tagged],
    min_size: int,
    ac_min_size: int,
) -> dict[str, Any]:
    import numpy as np

    sorted_, lo, hi = span
    sizes = sorted_.sizes[lo:hi]
    total, n = int(sorted_.cumulative[hi] - sorted_.cumulative[lo]), hi - lo
    return {
        "partition": _label(cols, key),
        "partitionValues": dict(zip(cols, key)),
        "numFiles": n,
        "sizeBytes": total,
        "minFileSize": int(sizes[0]),
        "maxFileSize": int(sizes[-1]),
        "avgFileSize": total / n,
        "smallFiles": {
            "optimize": int(np.searchsorted(sizes, min_size)),
            "autoCompact": int(np.searchsorted(sizes, ac_min_size)),
        },
        "zOrder": _zorder_state(n, tagged),
        "histogram": _histogram_of(sorted_, lo, hi),
    }


def _layout(snapshot: Snapshot, min_size: int, ac_min_size: int) -> dict[str, Any]:
    """Everything about one snapshot that needs no planner: per partition files, sizes, small files, Z-order."""
    import numpy as np

    cols = snapshot.partition_columns
    table = snapshot.file_table
    codes, keys = table.partition_codes(snapshot.physical_partition_columns)
    codes = codes.to_numpy(zero_copy_only=False)
    sorted_ = _Sorted(codes, table.column("size").to_numpy(zero_copy_only=False))
    tagged = _tagged(snapshot, codes)
    spans = {
        keys[int(sorted_.codes[lo])]: (int(sorted_.codes[lo]), int(lo), int(hi))
        for lo, hi in zip(sorted_.starts, sorted_.ends)
    }
    partitions = [
        _partition_entry(cols, key, (sorted_, lo, hi), tagged.get(code, []), min_size, ac_min_size)
        for key, (code, lo, hi) in sorted(spans.items(), key=lambda kv: tuple((v is None, v or "") for v in kv[0]))
    ]
    whole = _Sorted(None, sorted_.sizes)  # every file, by size
    n, total = len(whole.sizes), int(whole.cumulative[-1])
    small = [int(np.searchsorted(whole.sizes, m)) for m in (min_size, ac_min_size)]
    states = [p["zOrder"]["state"] for p in partitions]
    return {
        "table": snapshot.location,
        "version": snapshot.version,
        "partitionColumns": list(cols),
        "numFiles": n,
        "sizeBytes": total,
        "numPartitions": len(partitions),
        "avgFileSize": (total / n) if n else 0,
        "smallFiles": {"optimize": small[0], "autoCompact": small[1]},
        "smallBytes": {"optimize": int(whole.cumulative[small[0]]), "autoCompact": int(whole.cumulative[small[1]])},
        "histogram": _histogram_of(whole, 0, n) if n else [],
        "zOrder": {s: states.count(s) for s in ("all", "some", "none")},
        "partitions": partitions,
    }


def _source(argument: Any, key: str, get_conf: ConfGetter | None) -> str:
    if argument is not None:
        return "argument"
    if get_conf is not None and get_conf(key) is not None:
        return key
    return "default"


def _resolve(
    get_conf: ConfGetter | None,
    *,
    min_file_size: int | str | None = None,
    max_file_size: int | str | None = None,
    auto_compact_min_file_size: int | str | None = None,
    auto_compact_max_file_size: int | str | None = None,
    auto_compact_min_num_files: int | None = None,
) -> tuple[Thresholds, OptimizeConfig]:
    """Explicit argument > session conf > delta-spark's default, through the planners' own resolvers."""
    opt_args = {"min_file_size": min_file_size, "max_file_size": max_file_size}
    ac_args = {
        "min_file_size": auto_compact_min_file_size,
        "max_file_size": auto_compact_max_file_size,
        "min_num_files": auto_compact_min_num_files,
    }
    opt = OptimizeConfig.resolve(get_conf, {k: v for k, v in opt_args.items() if v is not None})
    ac = AutoCompactConfig.resolve(get_conf, {k: v for k, v in ac_args.items() if v is not None})
    sources = {
        "optimizeMinFileSize": _source(min_file_size, _CONF["optimize.min_file_size"], get_conf),
        "optimizeMaxFileSize": _source(max_file_size, _CONF["optimize.max_file_size"], get_conf),
        "autoCompactMinFileSize": _source(auto_compact_min_file_size, _CONF["auto_compact.min_file_size"], get_conf),
        "autoCompactMaxFileSize": _source(auto_compact_max_file_size, _CONF["auto_compact.max_file_size"], get_conf),
        "autoCompactMinNumFiles": _source(auto_compact_min_num_files, _CONF["auto_compact.min_num_files"], get_conf),
    }
    if ac.min_file_size is None:
        sources["autoCompactMinFileSize"] = "autoCompact.maxFileSize / 2"
    th = Thresholds(
        opt.min_file_size, opt.max_file_size, ac.small_file_threshold, ac.max_file_size, ac.min_num_files, sources
    )
    return th, opt


def _protocol(snapshot: Snapshot) -> dict[str, Any]:
    """Versions, the features in use (legacy versions' implied ones included) and whether we can write it."""
    from ..delta.protocol import active_features, ensure_write_supported

    readers, writers = active_features(snapshot.protocol, snapshot.metadata)
    try:
        ensure_write_supported(snapshot.protocol, snapshot.metadata, table=snapshot.location)
        unsupported: list[str] = []
    except UnsupportedFeatureError as exc:
        unsupported = sorted(exc.features)
    return {
        "minReaderVersion": snapshot.protocol.min_reader_version,
        "minWriterVersion": snapshot.protocol.min_writer_version,
        "readerFeatures": sorted(readers),
        "writerFeatures": sorted(writers),
        "unsupportedFeatures": unsupported,
    }


def _size_arg(n: int) -> str:
    """A size as the CLI's --*-file-size options parse it, as short as exact."""
    for unit, size in (("g", GiB), ("m", MiB), ("k", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def optimize_command(table: str, *, min_file_size: int, max_file_size: int) -> str:
    """``dbt-delta-optimize optimize`` for ``table``, with the size flags that differ from the defaults."""
    parts = ["dbt-delta-optimize", "optimize", shlex.quote(table)]
    if min_file_size != _DEFAULTS["optimize.min_file_size"]:
        parts += ["--min-file-size", _size_arg(min_file_size)]
    if max_file_size != _DEFAULTS["optimize.max_file_size"]:
        parts += ["--max-file-size", _size_arg(max_file_size)]
    return " ".join(parts)


def verdict_for(
    layout: Mapping[str, Any],
    plan: Mapping[str, Any],
    auto: Mapping[str, Any],
    thresholds: Thresholds,
    unsupported: Sequence[str] = (),
) -> Verdict:
    """Healthy when OPTIMIZE would rewrite under ``HEALTHY_REWRITE_SHARE`` of the files; else which fix applies."""
    files, rewrite = layout["numFiles"], plan["filesToRewrite"]
    share = rewrite / files if files else 0.0
    table = layout["table"]
    if plan["numBins"] == 0 or share < HEALTHY_REWRITE_SHARE:
        return Verdict(
            HEALTHY,
            f"OPTIMIZE would rewrite {rewrite} of {files} file(s) ({share:.0%}, under "
            f"{HEALTHY_REWRITE_SHARE:.0%}); average file size {format_size(layout['avgFileSize'])}",
        )
    if auto["status"] in (RUN_ON_ALL, RUN_ON_MODIFIED):
        status = COMPACT_RECOMMENDED
        reason = (
            f"{len(auto['chosen'])} partition(s) have {thresholds.auto_compact_min_num_files}+ files under "
            f"autoCompact.minFileSize {format_size(thresholds.auto_compact_min_file_size)}: "
            f"{layout['smallFiles']['autoCompact']} of {files} file(s) are that small"
        )
        command = optimize_command(
            table,
            min_file_size=thresholds.auto_compact_min_file_size,
            max_file_size=thresholds.auto_compact_max_file_size,
        )
    else:
        status = NEEDS_OPTIMIZE
        reason = (
            f"OPTIMIZE would rewrite {rewrite} of {files} file(s) ({share:.0%}, {format_size(plan['bytesToRewrite'])}) "
            f"in {plan['numBins']} bin(s): {layout['smallFiles']['optimize']} file(s) under optimize.minFileSize "
            f"{format_size(thresholds.optimize_min_file_size)}; auto compaction would not run ({auto['status']})"
        )
        command = optimize_command(
            table, min_file_size=thresholds.optimize_min_file_size, max_file_size=thresholds.optimize_max_file_size
        )
    if unsupported:
        return Verdict(status, f"{reason}; our writer cannot rewrite it ({', '.join(unsupported)})", None)
    return Verdict(status, reason, command)


def _add_rewrite_counts(layout: dict[str, Any], plan: Mapping[str, Any]) -> None:
    """Per partition, the files OPTIMIZE's plan would rewrite (what the page colours as a problem)."""
    cols = layout["partitionColumns"]
    by_values: dict[tuple[str | None, ...], int] = {}
    for b in plan["bins"]:  # a label per partition, not per bin (100,000 bins at a million files)
        values = b["partitionValues"]
        key = tuple(values.get(c) for c in cols)
        by_values[key] = by_values.get(key, 0) + b["files"]
    counts: dict[str, int] = {}
    for key, files in by_values.items():
        label = _label(cols, key)
        counts[label] = counts.get(label, 0) + files
    for p in layout["partitions"]:
        p["filesToRewrite"] = counts.get(p["partition"], 0)


def health_report(
    table: str | Snapshot,
    *,
    get_conf: ConfGetter | None = None,
    compare_version: int | None = None,
    min_file_size: int | str | None = None,
    max_file_size: int | str | None = None,
    auto_compact_min_file_size: int | str | None = None,
    auto_compact_max_file_size: int | str | None = None,
    auto_compact_min_num_files: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    trend_days: int | None = None,
) -> HealthReport:
    """Health of ``table`` at its latest version (optionally with ``compare_version`` as "before").

    ``table``: a path, or a snapshot already loaded (``ops.table.Table.snapshot``: not read again).

    Thresholds: explicit argument > ``get_conf`` (a running Spark session's conf, when the caller has
    one) > delta-spark's defaults (optimize.minFileSize 1 GiB; autoCompact.minFileSize =
    autoCompact.maxFileSize / 2 = 64 MiB; autoCompact.minNumFiles 50). The plan is OPTIMIZE's own
    (``build_plan``), without Spark. ``trend_days`` (default 30, ``REPORT_OPTIONS``): the days of history
    the trends read from the log (``table_trends``).
    """
    from ..delta.snapshot import load_snapshot
    from ..delta.vacuum_log import LogReads
    from ..plan.autocompact import auto_compact_enabled, plan_auto_compact
    from ..plan.builder import build_plan
    from ..plan.predicate import select_partitions
    from .health_stats import statistics_coverage
    from .history import last_operation
    from .table_trends import table_trends
    from .trends import trend_window
    from .vacuum_state import vacuum_state

    days = trend_window(trend_days)  # bad input before anything is read
    th, config = _resolve(
        get_conf,
        min_file_size=min_file_size,
        max_file_size=max_file_size,
        auto_compact_min_file_size=auto_compact_min_file_size,
        auto_compact_max_file_size=auto_compact_max_file_size,
        auto_compact_min_num_files=auto_compact_min_num_files,
    )
    from ..delta.storage import storage_of

    snapshot = table if not isinstance(table, str) else load_snapshot(table, storage=storage_of(table, storage_options))
    # The statistics coverage is mostly Arrow (the checkpoint's stats read and parsed without the GIL): it
    # runs in a thread while the layout, the plans and VACUUM's estimate are worked out here (wall time, not
    # CPU time: at a million files it takes about as long as all of those together).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="health-statistics") as pool:
        statistics = pool.submit(statistics_coverage, snapshot)
        layout = _layout(snapshot, th.optimize_min_file_size, th.auto_compact_min_file_size)
        plan = build_plan(snapshot, config, selection=select_partitions(snapshot)).to_dict(include_paths=False)
        _add_rewrite_counts(layout, plan)
        auto = plan_auto_compact(
            snapshot,
            min_file_size=th.auto_compact_min_file_size,
            max_file_size=th.auto_compact_max_file_size,
            min_num_files=th.auto_compact_min_num_files,
        ).to_dict()
        protocol = _protocol(snapshot)
        compare = None
        if compare_version is not None:
            before = load_snapshot(snapshot.location, compare_version, storage=snapshot.storage)
            compare = _layout(before, th.optimize_min_file_size, th.auto_compact_min_file_size)
        now_ms = int(time.time() * 1000)
        reads = LogReads(snapshot.storage, snapshot.location, keep_actions=True)  # VACUUM's and the trends'
        vacuum = vacuum_state(snapshot, now_ms=now_ms, reads=reads)
        last_optimize = last_operation(
            snapshot.location,
            "OPTIMIZE",
            at_version=snapshot.version,
            limit=LAST_OPTIMIZE_LOOKBACK,
            storage=snapshot.storage,
        )
        stats = statistics.result()
        trends = table_trends(
            snapshot,
            now_ms=now_ms,
            days=days,
            small_below=th.optimize_min_file_size,
            lacking=stats["filesWithoutStats"] + stats["filesIncomplete"],
            reads=reads,
            last_run=vacuum.last_vacuum,
        )
        return HealthReport(
            table=snapshot.location,
            version=snapshot.version,
            generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            layout=layout,
            thresholds=th,
            verdict=verdict_for(layout, plan, auto, th, protocol["unsupportedFeatures"]),
            protocol=protocol,
            auto_compact_enabled=auto_compact_enabled(get_conf or (lambda _k: None), snapshot.configuration),
            last_optimize=last_optimize,
            optimize=plan,
            auto_compact=auto,
            compare=compare,
            statistics=stats,
            vacuum=vacuum.to_dict(),
            trends=trends.to_dict(),
        )


def render_html(report: HealthReport | Mapping[str, Any], path: str, compare: Mapping[str, Any] | None = None) -> str:
    """Write the report as one self-contained HTML page; returns ``path`` (see ``health_page``)."""
    from .health_page import render_html as _render

    return _render(report, path, compare)
