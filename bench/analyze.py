"""Benchmark: ``analyze --all`` on a table of >= 1 GB vs reading the same files in full with pyarrow.

Not a test; asserts nothing. delta-spark writes the table (its defaults: parquet-java, INT96 timestamps)
with ``dataSkippingNumIndexedCols = 0``, so its files carry no column stats; then Spark is stopped and,
alternating over --repeats runs, ``analyze(None, path, all=True)`` (footers, plus the data of the columns
a footer cannot answer for: here the INT96 timestamp) and a full pyarrow read of every data file
(``pq.read_table``, all columns, pyarrow's threads) are timed. Prints the medians and the ratio
(issue target <= 0.25, goal <= 0.1) and writes them as JSON with --json.

    .venv/bin/python bench/analyze.py [--rows 24000000] [--files 16] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(path: str, work: str, rows: int, files: int) -> None:
    from dbt_delta_optimize.engine.session import get_spark

    spark = get_spark(
        work_dir=os.path.join(work, "spark"),
        master="local[2]",
        catalog="in-memory",
        conf={"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "4g"},
    )
    try:
        spark.sql(
            f"CREATE TABLE delta.`{path}` (id BIGINT, x DOUBLE, y DOUBLE, s STRING, k INT, d DATE, ts TIMESTAMP) "
            "USING delta TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '0')"
        )
        spark.range(rows).selectExpr(
            "id",
            "rand(1) AS x",
            "randn(2) AS y",
            "substr(sha2(cast(id AS STRING), 256), 1, 24) AS s",
            "cast(rand(3) * 1000000 AS INT) AS k",
            "date_add(DATE'2000-01-01', cast(id % 9000 AS INT)) AS d",
            "timestamp_micros(1600000000000000 + cast(rand(4) * 1e14 AS BIGINT)) AS ts",
        ).repartition(files).write.format("delta").mode("append").save(path)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.dataSkippingNumIndexedCols' = '32')")
    finally:
        spark.stop()


def data_files(path: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".parquet"))


def time_analyze(path: str) -> float:
    from dbt_delta_optimize.ops.analyze import analyze

    t0 = time.perf_counter()
    m = analyze(None, path, all=True)
    elapsed = time.perf_counter() - t0
    assert m.files_updated == m.files_planned and m.ok, m
    return elapsed


def time_read(files: list[str]) -> float:
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    rows = 0
    for f in files:
        rows += pq.read_table(f).num_rows
    elapsed = time.perf_counter() - t0
    assert rows > 0
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=24_000_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ddo-analyze-bench-")
    try:
        path = os.path.join(work, "t")
        t0 = time.perf_counter()
        build(path, work, args.rows, args.files)
        files = data_files(path)
        size = sum(os.path.getsize(f) for f in files)
        print(
            f"table: {len(files)} files, {size / 1e9:.2f} GB, {args.rows:,} rows (built in {time.perf_counter() - t0:.0f}s)"
        )
        ours: list[float] = []
        read: list[float] = []
        loads: list[float] = []  #: the 1-minute load average after each run (the machine may be shared)
        for i in range(args.repeats):  # alternating order, so neither side always has the warmer cache
            if i % 2 == 0:
                read.append(time_read(files))
                ours.append(time_analyze(path))
            else:
                ours.append(time_analyze(path))
                read.append(time_read(files))
            loads.append(os.getloadavg()[0])
            print(
                f"run {i + 1}: analyze --all {ours[-1]:.2f}s, full pyarrow read {read[-1]:.2f}s "
                f"(load average {loads[-1]:.1f})",
                flush=True,
            )
        result = {
            "files": len(files),
            "bytes": size,
            "rows": args.rows,
            "analyze_s": statistics.median(ours),
            "full_read_s": statistics.median(read),
            "load_averages": loads,
        }
        result["analyze_vs_full_read"] = result["analyze_s"] / result["full_read_s"]
        print(
            f"median: analyze --all {result['analyze_s']:.2f}s, full read {result['full_read_s']:.2f}s, "
            f"ratio {result['analyze_vs_full_read']:.3f} (target <= 0.25, goal <= 0.1)"
        )
        if args.json_out:
            with open(args.json_out, "w") as fh:
                json.dump(result, fh, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
