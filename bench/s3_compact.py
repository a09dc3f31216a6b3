"""Compaction of the same S3 table (a moto server started here) by us and by delta-rs ``optimize.compact()``.

Identical tables (P partitions x F small files, written by delta-rs) in one bucket, one per engine
and repeat. Both engines run in this process, warm (our Spark session started before any timing),
in alternating order; medians are printed with the ratio ours / delta-rs, and every table's rows are
checked. One more run of our CLI in a fresh process shows the whole command's cost (its imports; a
compaction starts no JVM).

    .venv/bin/python bench/s3_compact.py [--partitions 8] [--files 20] [--rows 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.servers import moto_s3


def build(url: str, partitions: int, files: int, rows: int) -> None:
    for f in range(files):
        ids = list(range(f * rows, (f + 1) * rows))
        data = pa.table({"id": ids, "v": [str(i) * 3 for i in ids], "part": [i % partitions for i in ids]})
        write_deltalake(url, data, partition_by=["part"], mode="append")


def row_count(url: str) -> int:
    """Rows as deltalake's own scan reads them (Rust threads only: nothing left behind at exit)."""
    return pa.RecordBatchReader.from_stream(DeltaTable(url).scan(columns=["id"])).read_all().num_rows


def ours(url: str) -> float:
    from dbt_delta_optimize.api import optimize

    t = time.perf_counter()
    optimize(None, url, min_file_size="256m", max_file_size="256m")
    return time.perf_counter() - t


def delta_rs(url: str) -> float:
    t = time.perf_counter()
    DeltaTable(url).optimize.compact()
    return time.perf_counter() - t


def cli_cold(url: str) -> float:
    t = time.perf_counter()
    cli = [sys.executable, "-m", "dbt_delta_optimize.cli.main", "optimize", url]
    subprocess.run([*cli, "--min-file-size", "256m", "--max-file-size", "256m"], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    args = ap.parse_args()
    engines = {"ours": ours, "delta-rs": delta_rs}
    with moto_s3() as server:
        os.environ.update(server.env())
        bucket = server.new_bucket()
        from dbt_delta_optimize.engine.session import get_spark

        get_spark().sparkContext.setLogLevel("FATAL")
        times: dict[str, list[float]] = {e: [] for e in engines}
        expected = args.files * args.rows
        for r in range(args.repeats):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                url = f"s3://{bucket}/{name}-{r}"
                build(url, args.partitions, args.files, args.rows)
                times[name].append(engines[name](url))
                files, rows = len(DeltaTable(url).file_uris()), row_count(url)
                assert files == args.partitions and rows == expected, (name, files, rows)
                print(f"repeat {r} {name:>8}: {times[name][-1]:.2f}s", flush=True)
        url = f"s3://{bucket}/cli"
        build(url, args.partitions, args.files, args.rows)
        cold = cli_cold(url)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "table": f"{args.partitions} partitions x {args.files} files, {expected} rows",
        "median_s": med,
        "times_s": times,  #: per repeat (bench/noise.py: the run's spread)
        "warm_vs_delta_rs": med["ours"] / med["delta-rs"],
        "cli_cold_s": cold,
        "cli_cold_vs_delta_rs": cold / med["delta-rs"],
    }
    print(f"\n{out['table']} on moto S3, medians of {args.repeats}")
    print(f"delta-rs optimize.compact(): {med['delta-rs']:.2f}s")
    print(f"ours, warm session: {med['ours']:.2f}s  ratio {out['warm_vs_delta_rs']:.2f}x")
    print(f"ours, CLI in a fresh process: {cold:.2f}s  ratio {out['cli_cold_vs_delta_rs']:.2f}x")
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
