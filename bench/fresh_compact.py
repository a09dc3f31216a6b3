"""Compaction in fresh processes: our CLI's ``optimize`` against delta-rs's ``compact()``, issue 45's own bars.

Not a test. ``bench/run.py`` times both engines in one warm session; a user runs one command in a new process,
which pays the interpreter, the imports and (ours) the worker processes' start. This script builds the tables
once with delta-spark (``run.build_table``) in a process of its own, so that no JVM runs while the engines are
timed, then times each engine as a process of its own on a fresh copy of the table: ``dbt-delta-optimize
optimize PATH``, and ``python -c "DeltaTable(PATH).optimize.compact(target_size=1 GiB)"`` (our default target),
alternating which goes first. Wall time is the subprocess's, from start to exit. Every run must succeed, and
both engines must leave the same number of files and rows.

    .venv/bin/python bench/fresh_compact.py --cases tiny,small --repeats 5   # issue 45: <= 0.9 and <= 0.6
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

#: name: (partitions, files per partition, rows), as bench/run.py builds them
CASES = {
    "tiny": (10, 500, 300_000),
    "small": (20, 100, 2_000_000),
    "mid": (6, 202, 797_000),
}

DELTA_RS = (
    "import sys\n"
    "from deltalake import DeltaTable\n"
    "m = DeltaTable(sys.argv[1]).optimize.compact(target_size=1 << 30)\n"
    "print(m['numFilesRemoved'], m['numFilesAdded'])\n"
)

COUNT = (
    "import sys\n"
    "from deltalake import DeltaTable\n"
    "t = DeltaTable(sys.argv[1])\n"
    "print(len(t.file_uris()), t.to_pyarrow_dataset().count_rows())\n"
)


def _cli() -> list[str]:
    """Our console script, as a user runs it (next to this interpreter), else the module's main."""
    script = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "dbt_delta_optimize.cli.main"]


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return elapsed


def _state(path: str) -> tuple[int, int]:
    """(live files, rows) as delta-rs reads them after a run."""
    out = subprocess.run([sys.executable, "-c", COUNT, path], capture_output=True, text=True, check=True)
    files, rows = out.stdout.split()
    return int(files), int(rows)


def _engines() -> dict[str, Callable[[str], list[str]]]:
    return {
        "ours": lambda path: [*_cli(), "optimize", path],
        "delta-rs": lambda path: [sys.executable, "-c", DELTA_RS, path],
    }


def bench_case(src: str, work: str, name: str, repeats: int) -> dict:
    engines = _engines()
    times: dict[str, list[float]] = {e: [] for e in engines}
    states: dict[str, set[tuple[int, int]]] = {e: set() for e in engines}
    for r in range(repeats):
        order = list(engines) if r % 2 == 0 else list(reversed(engines))
        for engine in order:
            dst = os.path.join(work, f"{name}-{engine}-{r}")
            shutil.copytree(src, dst)
            os.sync()
            times[engine].append(_timed(engines[engine](dst)))
            states[engine].add(_state(dst))
            print(f"[{name}] repeat {r} {engine:>8}: {times[engine][-1]:6.2f}s", flush=True)
            shutil.rmtree(dst, ignore_errors=True)
    if len(states["ours"] | states["delta-rs"]) != 1:
        raise SystemExit(f"[{name}] the engines left different tables (files, rows): {states}")
    med = {e: statistics.median(v) for e, v in times.items()}
    return {
        "case": name,
        "repeats": repeats,
        "files_rows_after": sorted(states["ours"])[0],
        "median_s": med,
        "times_s": times,  #: per repeat, the engines back to back (bench/noise.py: the run's spread)
        "ours_vs_delta_rs": med["ours"] / med["delta-rs"],
    }


def build(work: str, names: list[str]) -> None:
    """Each case's table under ``work``, written by delta-spark (``--build``: a process of its own, so that no
    JVM is left running while the engines are timed)."""
    from run import build_table

    from dbt_delta_optimize.engine.session import get_spark

    spark = get_spark(work_dir=os.path.join(work, "spark"), catalog="in-memory")
    spark.sparkContext.setLogLevel("FATAL")
    spark.conf.set("spark.databricks.delta.optimizeWrite.enabled", "false")
    for name in names:
        build_table(spark, _source(work, name), *CASES[name])
    spark.stop()


def _source(work: str, name: str) -> str:
    return os.path.join(work, f"{name}-src")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="tiny,small", help=f"comma list of: {', '.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    ap.add_argument("--build", metavar="DIR", default=None, help=argparse.SUPPRESS)  # the tables only, into DIR
    args = ap.parse_args()
    names = args.cases.split(",")
    if args.build:
        build(args.build, names)
        return 0
    compileall.compile_dir(os.path.join(ROOT, "dbt_delta_optimize"), quiet=1)  # as a wheel's install leaves it
    with tempfile.TemporaryDirectory(prefix="ddo-fresh-bench-") as work:
        subprocess.run([sys.executable, __file__, "--cases", args.cases, "--build", work], check=True)
        results = [bench_case(_source(work, n), work, n, args.repeats) for n in names]
    for r in results:
        med = r["median_s"]
        print(
            f"{r['case']:>6}: ours {med['ours']:.2f}s, delta-rs {med['delta-rs']:.2f}s, ratio {r['ours_vs_delta_rs']:.2f}"
        )
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
