"""Benchmark: compaction of files that already hold one large row group each.

Not a test. delta-rs writes >= 500 MB in a handful of files of one row group each (what Spark
jobs and delta-rs writers leave behind); the same table is then compacted into one file by
ours with the row-group copy (default threshold 32 MiB), ours with the copy off (every value
decoded and re-encoded), and delta-rs ``optimize.compact``. Each run works on its own copy of
the table (data files hard-linked: compaction only adds files), the order alternates over the
repeats, and the medians and ratios are printed.

    .venv/bin/python bench/row_group_copy.py                  # 10 files x 1.6M rows (~525 MB)
    .venv/bin/python bench/row_group_copy.py --files 8 --rows 1500000 --repeats 3
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GiB = 1024**3
KEY = "spark.dbt_delta_optimize.rowGroupCopyMinBytes"


def build_table(path: str, files: int, rows: int) -> None:
    """``files`` appends by delta-rs, each one file of one row group (random, hardly compressible payloads)."""
    import numpy as np
    import pyarrow as pa
    from deltalake import WriterProperties, write_deltalake

    rng = np.random.default_rng(7)
    props = WriterProperties(max_row_group_size=rows + 1, compression="SNAPPY")
    for k in range(files):
        ids = np.arange(k * rows, (k + 1) * rows, dtype=np.int64)
        payload = pa.array(rng.integers(0, 2**63 - 1, rows, dtype=np.int64)).cast(pa.string())
        table = pa.table(
            {
                "id": ids,
                "payload": payload,
                "score": rng.random(rows),
                "label": pa.array(ids % 100_000).cast(pa.string()),
                "day": pa.array((ids % 365).astype("int32")).cast(pa.date32()),
            }
        )
        write_deltalake(path, table, mode="append", writer_properties=props, target_file_size=4 * GiB)


def parquet_files(path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "*.parquet")))


def clone(src: str, dst: str) -> None:
    """The table's log copied, its data files hard-linked (no run changes an existing data file)."""
    shutil.copytree(os.path.join(src, "_delta_log"), os.path.join(dst, "_delta_log"))
    for f in parquet_files(src):
        os.link(f, os.path.join(dst, os.path.basename(f)))


def run_ours(spark, path: str, min_bytes: str) -> tuple[int, int]:
    from dbt_delta_optimize.api import optimize

    spark.conf.set(KEY, min_bytes)
    try:
        m = optimize(spark, path)
    finally:
        spark.conf.unset(KEY)
    return m.num_files_removed, m.num_files_added


def run_delta_rs(spark, path: str) -> tuple[int, int]:
    from deltalake import DeltaTable

    m = DeltaTable(path).optimize.compact(target_size=4 * GiB)
    return m["numFilesRemoved"], m["numFilesAdded"]


ENGINES = {
    "ours (copy)": lambda spark, p: run_ours(spark, p, MIN_BYTES[0]),
    "ours (copy off)": lambda spark, p: run_ours(spark, p, "0"),
    "delta-rs": run_delta_rs,
}
MIN_BYTES = ["32m"]  #: the copy's threshold (--min-bytes), the default rowGroupCopyMinBytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--rows", type=int, default=1_600_000, help="rows per file (one row group each)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-bytes", default="32m", help="rowGroupCopyMinBytes for ours (copy)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    args = ap.parse_args()
    MIN_BYTES[0] = args.min_bytes

    import pyarrow.parquet as pq

    from dbt_delta_optimize.engine.session import get_spark

    work = args.work or tempfile.mkdtemp(prefix="ddo-bench-rgcopy-")
    spark = get_spark(work_dir=os.path.join(work, "spark"), catalog="in-memory", conf={"spark.driver.memory": "4g"})
    spark.sparkContext.setLogLevel("FATAL")
    src = os.path.join(work, "src")
    t0 = time.time()
    build_table(src, args.files, args.rows)
    files = parquet_files(src)
    size = sum(os.path.getsize(f) for f in files)
    groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in files)
    print(f"built {len(files)} files, {groups} row groups, {size / 1e6:.0f} MB in {time.time() - t0:.0f}s", flush=True)
    warm = os.path.join(work, "warm")  # one warm-up run: JVM, imports, page cache
    clone(src, warm)
    run_ours(spark, warm, "0")
    shutil.rmtree(warm)

    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    for r in range(args.repeats):
        order = list(ENGINES) if r % 2 == 0 else list(reversed(ENGINES))
        for engine in order:
            dst = os.path.join(work, f"run-{r}-{engine.replace(' ', '_')}")
            clone(src, dst)
            t = time.perf_counter()
            removed, added = ENGINES[engine](spark, dst)
            dt = time.perf_counter() - t
            times[engine].append(dt)
            print(f"repeat {r} {engine:>16}: {dt:7.2f}s ({removed} -> {added} files)", flush=True)
            shutil.rmtree(dst, ignore_errors=True)
    med = {e: statistics.median(v) for e, v in times.items()}
    copy, off, rs = med["ours (copy)"], med["ours (copy off)"], med["delta-rs"]
    print("\n| files | size | ours (copy) | ours (copy off) | delta-rs | copy/delta-rs | copy/copy off |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {len(files)} | {size / 1e6:.0f} MB | {copy:.2f}s | {off:.2f}s | {rs:.2f}s | "
        f"{copy / rs:.2f} | {copy / off:.2f} |"
    )
    if args.json_out:
        import json

        with open(args.json_out, "w") as fh:
            json.dump(
                {"median_s": med, "times_s": times, "copy_vs_delta_rs": copy / rs, "copy_vs_reencode": copy / off},
                fh,
                indent=2,
            )
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
