"""Compaction of the same S3 table (a moto server started here) by us and by delta-rs ``optimize.compact()``.

Two identical tables (P partitions x F small files, written by delta-rs) in one bucket; each engine
compacts one, in a fresh process (ours through the CLI, so the JVM start is included; also timed
with a warm session). Prints seconds and the ratio ours / delta-rs, and checks the rows.

    .venv/bin/python bench/s3_compact.py [--partitions 8] [--files 20] [--rows 2000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.servers import moto_s3

DELTA_RS = """
import sys, time
from deltalake import DeltaTable
t = time.perf_counter()
DeltaTable(sys.argv[1]).optimize.compact()
print(time.perf_counter() - t)
"""

WARM = """
import sys, time
from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.engine.session import get_spark
get_spark()
t = time.perf_counter()
optimize(None, sys.argv[1], min_file_size="256m", max_file_size="256m")
print(time.perf_counter() - t)
"""


def build(url: str, partitions: int, files: int, rows: int) -> None:
    for f in range(files):
        ids = list(range(f * rows, (f + 1) * rows))
        data = pa.table({"id": ids, "v": [str(i) * 3 for i in ids], "part": [i % partitions for i in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")


def rows(url: str) -> int:
    return DeltaTable(url).to_pyarrow_table().num_rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args()
    with moto_s3() as server:
        os.environ.update(server.env())
        bucket = server.new_bucket()
        urls = {name: f"s3://{bucket}/{name}" for name in ("ours", "ours_warm", "delta_rs")}
        for url in urls.values():
            build(url, args.partitions, args.files, args.rows)
        n = rows(urls["ours"])
        t = time.perf_counter()
        cli = [sys.executable, "-m", "dbt_delta_optimize.cli.main", "optimize", urls["ours"]]
        subprocess.run([*cli, "--min-file-size", "256m", "--max-file-size", "256m"], check=True, capture_output=True)
        ours = time.perf_counter() - t
        warm = float(
            subprocess.run(
                [sys.executable, "-c", WARM, urls["ours_warm"]], check=True, capture_output=True, text=True
            ).stdout.split()[-1]
        )
        t = time.perf_counter()
        inner = float(
            subprocess.run(
                [sys.executable, "-c", DELTA_RS, urls["delta_rs"]], check=True, capture_output=True, text=True
            ).stdout.split()[-1]
        )
        theirs = time.perf_counter() - t
        files = {k: len(DeltaTable(u).file_uris()) for k, u in urls.items()}
        same = all(rows(u) == n for u in urls.values())
    print(
        f"{args.partitions} partitions x {args.files} files, {n} rows on moto S3; files after: {files}; rows kept: {same}"
    )
    print(f"delta-rs optimize.compact(): {theirs:.2f}s process ({inner:.2f}s in the call)")
    print(f"ours, CLI process (JVM start included): {ours:.2f}s  ratio {ours / theirs:.2f}x")
    print(f"ours, warm session (the call only): {warm:.2f}s  ratio {warm / inner:.2f}x")


if __name__ == "__main__":
    main()
