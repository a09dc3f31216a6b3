"""``make bench``: every benchmark in one run, its ratios against the reference engines, and the change since the
last recorded figures.

Each benchmark is a script of this folder that measures our engine and the reference engines in the same
run (medians, alternating order) and writes its figures as JSON; this runner collects the ratios, checks them
against the issue targets, and compares them with ``bench/baseline.json``: a ratio worse than recorded by more
than the run-to-run noise this run measured itself (``bench/noise.py``: max(10%, 1.5 x the relative spread of
the per-repeat ratios)) is printed as REGRESSED. ``--record`` makes this run the new baseline; ``--docs FILE`` (repeatable:
docs/performance.md) rewrites the rows this run measured in the table between ``<!-- bench:start -->`` and
``<!-- bench:end -->`` in FILE; the other rows, and the note of where they come from, stay.

    .venv/bin/python bench/suite.py                    # everything (about 25 minutes on 2 cores)
    .venv/bin/python bench/suite.py --only local,s3    # some of it
    .venv/bin/python bench/suite.py --only latency     # object stores behind a 0 and 20 ms delay line
    .venv/bin/python bench/suite.py --only imports     # each CLI command's imports in a fresh process (a minute)
    .venv/bin/python bench/suite.py --only fresh       # compaction in fresh processes, CLI vs delta-rs (4 minutes)
    .venv/bin/python bench/suite.py --only maintain_latency   # maintain --dry-run over 50 tables vs 1 at 20 ms
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from noise import ratios, regressed, relative_spread, tolerance

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASELINE = os.path.join(HERE, "baseline.json")
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


@dataclass(frozen=True)
class Metric:
    """One ratio (lower is better) taken from a benchmark's JSON, with the target an issue set for it."""

    key: str
    bench: str
    label: str
    value: Callable[[Any], float]
    target: float | None
    #: the per-repeat ratios behind ``value`` (their spread is this run's noise); None: not measured
    samples: Callable[[Any], list[float]] | None = None


def _case(results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(r for r in results if r["case"] == name)


def _per_repeat(ours: str, reference: str, case: str | None = None) -> Callable[[Any], list[float]]:
    """Per-repeat ratios ours / reference from a benchmark's ``times_s`` (of one ``case`` of bench/run.py)."""

    def pick(r: Any) -> list[float]:
        times = (_case(r, case) if case else r)["times_s"]
        return ratios(times[ours], times[reference])

    return pick


def _latency(store: str, op: str, key: str, rtt_ms: float = 20.0) -> Callable[[Any], float]:
    """A figure of one case of bench/latency.py (a store, an operation, a round trip)."""

    def pick(r: Any) -> float:
        c = next(c for c in r["cases"] if (c["store"], c["op"], c["rtt_ms"]) == (store, op, rtt_ms))
        return float(c["ours"][key] if key in ("requests", "critical_path") else c[key])

    return pick


def _per_repeat_engines(ours: str, reference: str) -> Callable[[Any], list[float]]:
    """Per-repeat ratios of bench/cluster_compact.py, whose ``times_s`` are per engine."""
    return lambda r: ratios(r[ours]["times_s"], r[reference]["times_s"])


METRICS = [
    Metric(
        "local_small_vs_delta_rs",
        "local",
        "2,000 files / 114 MB, ours / delta-rs compact",
        lambda r: _case(r, "small")["ours_vs_delta_rs"],
        0.5,
        _per_repeat("ours", "delta-rs", "small"),
    ),
    Metric(
        "local_small_vs_delta_spark",
        "local",
        "2,000 files / 114 MB, ours / delta-spark OPTIMIZE",
        lambda r: _case(r, "small")["ours_vs_delta_spark"],
        0.15,
        _per_repeat("ours", "delta-spark", "small"),
    ),
    Metric(
        "local_large_vs_delta_rs",
        "local",
        "2,000 files / 1 GB, ours / delta-rs compact",
        lambda r: _case(r, "large")["ours_vs_delta_rs"],
        0.7,
        _per_repeat("ours", "delta-rs", "large"),
    ),
    Metric(
        "local_large_vs_2proc",
        "local",
        "2,000 files / 1 GB, ours / 2-process pyarrow floor",
        lambda r: _case(r, "large")["ours_vs_2proc"],
        1.2,
        _per_repeat("ours", "pyarrow-2proc", "large"),
    ),
    Metric(
        "s3_warm_vs_delta_rs",
        "s3",
        "S3 (moto) 8 x 20 files, warm, ours / delta-rs",
        lambda r: r["warm_vs_delta_rs"],
        1.0,
        _per_repeat("ours", "delta-rs"),
    ),
    Metric(
        "s3_cli_vs_delta_rs",
        "s3",
        "S3 (moto), CLI in a fresh process, ours / delta-rs",
        lambda r: r["cli_cold_vs_delta_rs"],
        None,
        lambda r: [r["cli_cold_s"] / t for t in r["times_s"]["delta-rs"]],
    ),
    Metric(
        "connect_vs_local_tasks",
        "cluster",
        "Spark Connect / local session, both running bins as Spark tasks",
        lambda r: r["Spark Connect"]["vs_local_tasks"],
        1.2,
        _per_repeat_engines("Spark Connect", "local[2], bins as Spark tasks"),
    ),
    Metric(
        "connect_vs_local",
        "cluster",
        "Spark Connect / local session (its bins in the driver's threads)",
        lambda r: r["Spark Connect"]["vs_local"],
        None,
        _per_repeat_engines("Spark Connect", "local[2] (embedded)"),
    ),
    Metric(
        "standalone_vs_local",
        "cluster",
        "standalone cluster / local session",
        lambda r: r["standalone (spark-submit)"]["vs_local"],
        None,
        _per_repeat_engines("standalone (spark-submit)", "local[2] (embedded)"),
    ),
    Metric(
        "dbt_hook_overhead",
        "dbt_hook",
        "dbt run with a compacting post-hook / without",
        lambda r: 1 + r["compaction runs"]["overhead_pct"] / 100,
        1.05,
        lambda r: ratios(r["compaction runs"]["times_s"]["with"], r["compaction runs"]["times_s"]["without"]),
    ),
    Metric(
        "copy_vs_delta_rs",
        "row_group_copy",
        "large row groups, ours (copy) / delta-rs",
        lambda r: r["copy_vs_delta_rs"],
        0.3,
        _per_repeat("ours (copy)", "delta-rs"),
    ),
    Metric(
        "copy_vs_reencode",
        "row_group_copy",
        "large row groups, ours (copy) / ours (re-encode)",
        lambda r: r["copy_vs_reencode"],
        0.3,
        _per_repeat("ours (copy)", "ours (copy off)"),
    ),
    Metric(
        "analyze_vs_full_read",
        "analyze",
        "analyze --all on >= 1 GB / reading the same files in full with pyarrow",
        lambda r: r["analyze_vs_full_read"],
        0.25,
    ),
    Metric(
        "vacuum_vs_delta_rs",
        "vacuum",
        "VACUUM of 10,000 tombstoned files, ours / delta-rs, both full (time inside fresh processes)",
        lambda r: _case(r, "local")["inside_vs_delta_rs"],
        0.7,
    ),
    Metric(
        "vacuum_cli_vs_delta_rs",
        "vacuum",
        "VACUUM of 10,000 tombstoned files, our CLI / delta-rs full, fresh processes",
        lambda r: _case(r, "local")["cli_vs_delta_rs"],
        1.0,
    ),
    *(
        Metric(
            f"vacuum_cli_{mode}_vs_delta_rs_{theirs}",
            "vacuum",
            f"VACUUM of 10,000 files compacted in 100 partitions, our CLI --mode {mode} / delta-rs "
            f"{'vacuum(full=True)' if theirs == 'full' else 'default vacuum'}, fresh processes (issue 45)",
            lambda r, o=ours, t=theirs: _case(r, "local")[f"fresh_{o}_vs_delta_rs_{t}"],
            target,
            _per_repeat(f"{ours}_fresh", f"delta_rs_{theirs}_fresh", "local"),
        )
        for mode, ours in (("full", "ours_cli"), ("lite", "ours_cli_lite"))
        for theirs, target in (("full", 0.8), ("default", 1.0))
    ),
    Metric(
        "vacuum_vs_delta_spark",
        "vacuum",
        "VACUUM of 10,000 tombstoned files, ours / delta-spark (warm session)",
        lambda r: _case(r, "local")["inside_vs_delta_spark"],
        0.2,
    ),
    Metric(
        "vacuum_s3_vs_delta_rs",
        "vacuum",
        "VACUUM of 5,000 tombstoned files on S3 (moto), ours / delta-rs, both full",
        lambda r: _case(r, "s3")["inside_vs_delta_rs"],
        0.7,
    ),
    Metric(
        "vacuum_lite_vs_delta_rs",
        "vacuum",
        "VACUUM of 10,000 tombstoned files, ours lite / delta-rs default (both read the log)",
        lambda r: _case(r, "local")["lite_inside_vs_delta_rs_default"],
        0.7,
    ),
    Metric(
        "s3_copy_bytes_share",
        "s3_server_copy",
        "S3 (moto) 8 x 64 MiB row groups, bytes through the process / input bytes",
        lambda r: r["share"]["inside the store"],
        0.1,
        lambda r: [n / r["input_bytes"] for n in r["bytes_through"]["inside the store"]],
    ),
    Metric(
        "local_tiny_vs_delta_rs",
        "local",
        "5,000 files of <= 8 KB (10 partitions), ours / delta-rs compact",
        lambda r: _case(r, "tiny")["ours_vs_delta_rs"],
        0.5,
        _per_repeat("ours", "delta-rs", "tiny"),
    ),
    *(
        Metric(
            f"fresh_{case}_vs_delta_rs",
            "fresh",
            f"{label}, optimize CLI / delta-rs compact, fresh processes (issue 45)",
            lambda r, c=case: _case(r, c)["ours_vs_delta_rs"],
            target,
            _per_repeat("ours", "delta-rs", case),
        )
        for case, label, target in (
            ("tiny", "5,000 files of 5.5 KB (10 partitions)", 0.9),
            ("small", "2,000 files of 57 KB (20 partitions)", 0.6),
        )
    ),
    Metric(
        "latency_s3_optimize_vs_delta_rs",
        "latency",
        "S3 (moto) at a 20 ms round trip, optimize CLI / delta-rs compact, fresh processes",
        _latency("s3", "optimize", "ours_vs_delta_rs"),
        0.1,
    ),
    Metric(
        "latency_s3_optimize_requests_per_file",
        "latency",
        "S3 (moto) at a 20 ms round trip, optimize CLI: requests per input file (not a ratio)",
        _latency("s3", "optimize", "requests_per_input_file"),
        1.1,
    ),
    Metric(
        "latency_s3_vacuum_vs_delta_rs",
        "latency",
        "S3 (moto) at a 20 ms round trip, vacuum --retain 0h CLI / delta-rs vacuum(full=True)",
        _latency("s3", "vacuum", "ours_vs_delta_rs"),
        0.5,
    ),
    Metric(
        "latency_s3_hook_requests",
        "latency",
        "S3 (moto) at a 20 ms round trip, auto-compact's decision on 8 commits: requests (not a ratio)",
        _latency("s3", "hook", "requests"),
        11,
    ),
    Metric(
        "latency_s3_posthook_round_trips",
        "latency",
        "S3 (moto) at a 20 ms round trip, a skipping post-hook after its pre-hook: round trips (not a ratio)",
        _latency("s3", "posthook", "critical_path"),
        3,
    ),
    Metric(
        "maintain_s3_50_vs_1",
        "maintain_latency",
        "S3 (moto) at a 20 ms round trip, maintain --dry-run over 50 tables / over 1, fresh processes",
        lambda r: next(c for c in r["cases"] if (c["store"], c["rtt_ms"]) == ("s3", 20.0))["many_vs_one"],
        5.0,
        lambda r: next(c for c in r["cases"] if (c["store"], c["rtt_ms"]) == ("s3", 20.0))["per_repeat"],
    ),
    Metric(
        "latency_s3_optimize_vs_delta_rs_0ms",
        "latency",
        "S3 (moto), no added latency, optimize CLI / delta-rs compact, fresh processes",
        _latency("s3", "optimize", "ours_vs_delta_rs", 0.0),
        None,
    ),
    Metric(
        "latency_azure_optimize_vs_delta_rs",
        "latency",
        "Azure (Azurite) at a 20 ms round trip, optimize CLI / delta-rs compact, fresh processes",
        _latency("azure", "optimize", "ours_vs_delta_rs"),
        0.1,
    ),
    Metric(
        "latency_azure_vacuum_vs_delta_rs",
        "latency",
        "Azure (Azurite) at a 20 ms round trip, vacuum --retain 0h CLI / delta-rs vacuum(full=True)",
        _latency("azure", "vacuum", "ours_vs_delta_rs"),
        0.5,
    ),
    Metric(
        "s3_copy_time_vs_through",
        "s3_server_copy",
        "S3 (moto) 8 x 64 MiB row groups, copy inside the store / through the process (time)",
        lambda r: r["median_s"]["inside the store"] / r["median_s"]["through the process"],
        None,
        _per_repeat("inside the store", "through the process"),
    ),
]


def _imports(case: str) -> Callable[[Any], float]:
    """A case of bench/imports.py: its imports in a fresh process / a fresh ``import deltalake``'s."""
    return lambda r: r["cases"][case]["vs_deltalake"]


def _imports_samples(case: str) -> Callable[[Any], list[float]]:
    return lambda r: r["cases"][case]["vs_deltalake_samples"]


#: bench/imports.py's cases: (case, label, target). A command runs on a small local table with a Parquet checkpoint
#: (dry runs where the command has one). vacuum's target is 60% of its figure before issue 45 (5.3 and 5.6 at load
#: average 6.7 and 7.6, 2026-11-27); numpy, which pyarrow imports, stands between it and that target.
IMPORT_CASES = (
    ("vacuum", "vacuum --dry-run (checkpointed table)", 3.3),
    ("vacuum_json_log", "vacuum --dry-run (JSON-only log)", None),
    ("vacuum_lite", "vacuum --mode lite --dry-run", None),
    ("optimize", "optimize --dry-run", None),
    ("purge", "purge --dry-run", None),
    ("analyze", "analyze --dry-run", None),
    ("info", "info", None),
    ("history", "history", None),
    ("health", "health --json", None),
    ("validate", "validate", None),
    ("maintain", "maintain --dry-run", None),
    ("help", "--help (every command listed)", None),
    ("auto_compact_help", "auto-compact --help", None),
    ("jars_help", "jars --help", None),
)

METRICS += [
    Metric(
        "imports_package_ms",
        "imports",
        "import dbt_delta_optimize, ms of its own imports in a fresh process (not a ratio)",
        lambda r: r["package_own_ms"],
        20.0,
        lambda r: r["package_own_ms_samples"],
    ),
    *(
        Metric(
            f"imports_{case}_vs_deltalake",
            "imports",
            f"CLI {label}: a fresh process's imports / a fresh import deltalake's",
            _imports(case),
            target,
            _imports_samples(case),
        )
        for case, label, target in IMPORT_CASES
    ),
]

BENCHES: dict[str, list[str]] = {
    "local": ["run.py", "--cases", "small,tiny,large", "--repeats", "3"],
    "s3": ["s3_compact.py", "--repeats", "3"],
    "fresh": ["fresh_compact.py", "--cases", "tiny,small", "--repeats", "5"],
    "cluster": ["cluster_compact.py", "--repeats", "3"],
    "dbt_hook": ["dbt_hook.py", "--repeats", "3"],
    "row_group_copy": ["row_group_copy.py", "--repeats", "3"],
    "analyze": ["analyze.py", "--repeats", "3"],
    "vacuum": [
        "vacuum.py",
        "--files",
        "10000",
        "--partitions",
        "100",
        "--s3-files",
        "5000",
        "--repeats",
        "5",
        "--spark",
    ],
    "s3_server_copy": ["s3_server_copy.py", "--repeats", "3", "--azure"],
    "latency": ["latency.py", "--rtt-ms", "0,20", "--files", "50"],
    "imports": ["imports.py", "--repeats", "5"],
    "maintain_latency": ["maintain_latency.py", "--tables", "50", "--rtt-ms", "20", "--repeats", "3"],
}


def run_bench(name: str, work: str) -> Any:
    script, *args = BENCHES[name]
    if not os.path.exists(os.path.join(HERE, script)):
        print(f"[{name}] {script} is not here: skipped", flush=True)
        return None
    out = os.path.join(work, f"{name}.json")
    print(f"\n[{name}] {script} {' '.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), *args, "--json", out], cwd=ROOT)
    if proc.returncode != 0 or not os.path.exists(out):
        print(f"[{name}] failed with exit code {proc.returncode}", flush=True)
        return None
    with open(out) as fh:
        return json.load(fh)


def collect(results: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Each metric's ratio, and the relative spread of its per-repeat ratios (this run's noise)."""
    values, spreads = {}, {}
    for m in METRICS:
        if results.get(m.bench) is None:
            continue
        try:
            values[m.key] = float(m.value(results[m.bench]))
        except (KeyError, StopIteration, TypeError) as exc:
            print(f"{m.key}: not in {m.bench}'s results ({exc})")
            continue
        try:
            spreads[m.key] = relative_spread(m.samples(results[m.bench])) if m.samples else 0.0
        except (KeyError, StopIteration, TypeError, ZeroDivisionError) as exc:  # an older script: no repeats
            print(f"{m.key}: no per-repeat times in {m.bench}'s results ({exc}); noise taken as 0")
            spreads[m.key] = 0.0
    return values, spreads


def is_regressed(key: str, values: dict[str, float], spreads: dict[str, float], recorded: dict[str, Any]) -> bool:
    old = recorded.get("metrics", {}).get(key)
    return key in values and regressed(
        values[key], old, spreads.get(key, 0.0), recorded.get("spreads", {}).get(key, 0.0)
    )


def table(values: dict[str, float], spreads: dict[str, float], recorded: dict[str, Any]) -> list[str]:
    lines = ["| measure | ratio | spread | target | recorded | change (flagged beyond) |", "|---|---|---|---|---|---|"]
    for m in METRICS:
        if m.key not in values:
            continue
        v, spread = values[m.key], spreads.get(m.key, 0.0)
        target = "" if m.target is None else f"≤ {m.target:.2f} {'met' if v <= m.target else 'NOT MET'}"
        old = recorded.get("metrics", {}).get(m.key)
        change = ""
        if old:
            allowed = tolerance(spread, recorded.get("spreads", {}).get(m.key, 0.0))
            change = f"{100 * (v / old - 1):+.0f}% (+{100 * allowed:.0f}%)"
            change += " REGRESSED" if is_regressed(m.key, values, spreads, recorded) else ""
        recorded_text = "" if old is None else f"{old:.2f}"
        lines.append(f"| {m.label} | {v:.2f} | {100 * spread:.0f}% | {target} | {recorded_text} | {change} |")
    return lines


def docs_table(values: dict[str, float]) -> list[str]:
    """The figures as the docs show them: each ratio and its target."""
    lines = ["| measure | ratio | target |", "|---|---|---|"]
    for m in METRICS:
        if m.key in values:
            v = values[m.key]
            target = "" if m.target is None else f"≤ {m.target:.2f} {'met' if v <= m.target else 'NOT MET'}"
            lines.append(f"| {m.label} | {v:.2f} | {target} |")
    return lines


def _label(row: str) -> str:
    """The measure of a docs table row (its first cell)."""
    return row.strip().strip("|").split("|", 1)[0].strip()


def merged_rows(old: list[str], new: list[str]) -> list[str]:
    """The docs table after a run: this run's rows (``docs_table``), and every row of the old table for a measure
    it did not measure, kept as it was; in ``METRICS`` order, rows of no known measure last."""
    fresh = {_label(r): r for r in new[2:]}
    kept = {_label(r): r for r in old if r.startswith("|") and _label(r) not in ("measure", "---")}
    order = [m.label for m in METRICS]
    rows = [fresh.get(label) or kept[label] for label in order if label in fresh or label in kept]
    rows += [r for label, r in kept.items() if label not in order]
    return new[:2] + rows


_LEAD = re.compile(r"The (?P<benches>[\w, ]+) lines measured by `make bench` on \S+ \(2 cores, alternating order\)\. ?")


def _older(note: str, measured: Sequence[str]) -> str:
    """The block's note without the leads of earlier runs whose benchmarks this run measured again."""
    while (m := _LEAD.match(note)) and set(m["benches"].split(", ")) <= set(measured):
        note = note[m.end() :]
    return note


def write_docs(path: str, lines: list[str], when: str, measured: Sequence[str]) -> None:
    """Rewrite ``path``'s bench block: the rows of this run (``measured``: its benchmarks) replace theirs; the
    other rows, and the block's note of where they come from, stay."""
    with open(path) as fh:
        text = fh.read()
    if START not in text or END not in text:
        raise SystemExit(f"{path} has no {START} ... {END} block")
    head, rest = text.split(START, 1)
    block, tail = rest.split(END, 1)
    old = [line for line in block.strip().splitlines() if line.strip()]
    note = _older(next((line for line in old if not line.startswith("|")), ""), measured)
    rows = merged_rows(old, lines)
    kept = len(rows) > len(lines)
    lead = f"The {', '.join(measured)} lines measured by `make bench` on {when} (2 cores, alternating order)."
    body = "\n".join([f"{lead} {note}" if kept and note else lead, "", *rows])
    with open(path, "w") as fh:
        fh.write(f"{head}{START}\n{body}\n{END}{tail}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(BENCHES), help=f"comma list of: {', '.join(BENCHES)}")
    ap.add_argument("--record", action="store_true", help="make this run's figures the recorded baseline")
    ap.add_argument(
        "--docs", action="append", default=[], help="rewrite the bench block of this markdown file (repeatable)"
    )
    args = ap.parse_args()
    recorded: dict[str, Any] = {}
    if os.path.exists(BASELINE):
        with open(BASELINE) as fh:
            recorded = json.load(fh)
    with tempfile.TemporaryDirectory(prefix="ddo-suite-") as work:
        results = {name: run_bench(name, work) for name in args.only.split(",") if name}
    values, spreads = collect(results)
    lines = table(values, spreads, recorded)
    print("\n" + "\n".join(lines))
    flagged = [m.key for m in METRICS if is_regressed(m.key, values, spreads, recorded)]
    if flagged:
        print(f"\nREGRESSED against bench/baseline.json, beyond this run's noise: {', '.join(flagged)}")
    when = datetime.date.today().isoformat()
    merged = {**recorded.get("metrics", {}), **values}
    merged_spreads = {**recorded.get("spreads", {}), **spreads}
    for path in args.docs:
        write_docs(path, docs_table(values), when, [name for name, r in results.items() if r is not None])
    if args.record:
        with open(BASELINE, "w") as fh:
            json.dump(
                {
                    "recorded": when,
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                    "metrics": merged,
                    "spreads": merged_spreads,
                },
                fh,
                indent=2,
            )
            fh.write("\n")
        print(f"recorded in {BASELINE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
