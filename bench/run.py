"""Benchmark: our OPTIMIZE vs delta-spark's OPTIMIZE SQL vs deltalake's optimize.compact().

Not a test. Builds small-file tables, copies each per engine and repeat, times every engine in
this one process (delta-spark in the same Spark session as ours) after one untimed warm-up call of
each (a warm session: first-call imports and JIT are not counted), alternating the order over
repeats, and prints median wall times, the ratios ours/delta-spark and ours/delta-rs, and a raw
pyarrow read+write of the same bytes as the physical floor.

    .venv/bin/python bench/run.py                 # small (20 x 100 files), tiny (10 x 500 files of <= 8 KB)
                                                  # and large (>= 1 GB) cases
    .venv/bin/python bench/run.py --cases small --repeats 3
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GiB = 1024**3


def build_table(spark, path: str, partitions: int, files_per_partition: int, rows: int) -> None:
    """A partitioned table with many small files, written by delta-spark."""
    (
        spark.range(0, rows)
        .selectExpr(
            "id",
            f"CAST(id % {partitions} AS INT) AS part",
            "uuid() AS payload",
            "rand(7) AS score",
            "CAST(id * 7 % 100000 AS STRING) AS label",
            "date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS day",
        )
        .repartition(files_per_partition, "id")
        .write.format("delta")
        .partitionBy("part")
        .save(path)
    )


def dir_size(path: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True))


def run_ours(spark, path):
    from dbt_delta_optimize.api import optimize

    m = optimize(spark, path)
    return m.num_files_removed, m.num_files_added


def run_delta_spark(spark, path):
    row = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]
    return row.metrics.numFilesRemoved, row.metrics.numFilesAdded


def run_delta_rs(spark, path):
    from deltalake import DeltaTable

    m = DeltaTable(path).optimize.compact(target_size=GiB)
    return m["numFilesRemoved"], m["numFilesAdded"]


def copy_partition(job: tuple[str, str]) -> None:
    """One bin of the floor: a partition's files read with pyarrow and written as one snappy file."""
    import pyarrow.parquet as pq

    d, out = job
    writer = None
    for fpath in sorted(glob.glob(os.path.join(d, "*.parquet"))):
        t = pq.read_table(fpath, use_threads=False)
        if writer is None:
            writer = pq.ParquetWriter(
                os.path.join(out, os.path.basename(d) + ".parquet"), t.schema, compression="snappy"
            )
        writer.write_table(t)
    if writer:
        writer.close()


def _floor_jobs(path: str) -> list[tuple[str, str]]:
    out = path + "_floor"
    os.makedirs(out, exist_ok=True)
    dirs = sorted(d for d in glob.glob(os.path.join(path, "*=*")) if os.path.isdir(d))
    return [(d, out) for d in dirs]


def run_arrow_floor(spark, path):
    """Every partition's files read with pyarrow and written as one file, 2 threads: no log, no Spark."""
    jobs = _floor_jobs(path)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(copy_partition, jobs))
    return len(glob.glob(os.path.join(path, "*=*", "*.parquet"))), len(jobs)


_POOL = None


def _warm() -> None:
    import pyarrow.parquet  # noqa: F401 - the floor's workers pay their imports before timing


def run_arrow_floor_2p(spark, path):
    """The same copy in 2 worker processes (started before timing): the floor of 2 cores, no GIL."""
    jobs = _floor_jobs(path)
    _POOL.map(copy_partition, jobs, chunksize=1)
    return len(glob.glob(os.path.join(path, "*=*", "*.parquet"))), len(jobs)


ENGINES = {
    "ours": run_ours,
    "delta-spark": run_delta_spark,
    "delta-rs": run_delta_rs,
    "pyarrow-floor": run_arrow_floor,
    "pyarrow-2proc": run_arrow_floor_2p,
}


def bench_case(spark, work: str, name: str, partitions: int, files: int, rows: int, repeats: int) -> dict:
    src = os.path.join(work, f"{name}-src")
    t0 = time.time()
    build_table(spark, src, partitions, files, rows)
    size = dir_size(src)
    n_files = len(glob.glob(os.path.join(src, "*=*", "*.parquet")))
    print(f"[{name}] built {n_files} files, {size / 1e6:.1f} MB in {time.time() - t0:.0f}s", flush=True)
    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    order = list(ENGINES)
    for engine in order:  # warm session: every engine's first call (imports, JIT, pools) is not timed
        dst = os.path.join(work, f"{name}-{engine}-warmup")
        shutil.copytree(src, dst)
        t = time.perf_counter()
        ENGINES[engine](spark, dst)
        print(f"[{name}] warm-up  {engine:>13}: {time.perf_counter() - t:7.2f}s (not counted)", flush=True)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.rmtree(dst + "_floor", ignore_errors=True)
    for r in range(repeats):
        seq = order if r % 2 == 0 else list(reversed(order))
        for engine in seq:
            dst = os.path.join(work, f"{name}-{engine}-{r}")
            shutil.copytree(src, dst)
            t = time.perf_counter()
            removed, added = ENGINES[engine](spark, dst)
            dt = time.perf_counter() - t
            times[engine].append(dt)
            print(f"[{name}] repeat {r} {engine:>13}: {dt:7.2f}s ({removed} -> {added} files)", flush=True)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.rmtree(dst + "_floor", ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    med = {e: statistics.median(v) for e, v in times.items()}
    return {
        "case": name,
        "files": n_files,
        "bytes": size,
        "partitions": partitions,
        "repeats": repeats,
        "median_s": med,
        "times_s": times,  #: per repeat, each repeat's engines back to back (bench/noise.py: the run's spread)
        "ours_vs_delta_spark": med["ours"] / med["delta-spark"],
        "ours_vs_delta_rs": med["ours"] / med["delta-rs"],
        "ours_vs_floor": med["ours"] / med["pyarrow-floor"],
        "ours_vs_2proc": med["ours"] / med["pyarrow-2proc"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="small,tiny,large", help="comma list of: small, tiny, mid, large")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--large-rows", type=int, default=20_000_000, help="rows of the large case (~1.08 GB at 20M)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    args = ap.parse_args()
    global _POOL
    import multiprocessing

    _POOL = multiprocessing.get_context("spawn").Pool(2, initializer=_warm)  # started before any timing

    from dbt_delta_optimize.engine.session import get_spark

    work = args.work or tempfile.mkdtemp(prefix="ddo-bench-")
    spark = get_spark(work_dir=os.path.join(work, "spark"), catalog="in-memory", conf={"spark.driver.memory": "8g"})
    spark.sparkContext.setLogLevel("FATAL")
    print(f"Spark {spark.version}, {spark.sparkContext.defaultParallelism} cores, work dir {work}", flush=True)
    results = []
    # tiny: 10 partitions x 500 files of 60 rows (about 5.5 KB each), the appends of dbt incremental models
    # mid: 6 partitions x 202 files of about 40 KB (1,212 files), the shape of issue 45's hidden warm-session case
    cases = {
        "small": (20, 100, 2_000_000),
        "tiny": (10, 500, 300_000),
        "mid": (6, 202, 797_000),
        "large": (20, 100, args.large_rows),
    }
    for name in args.cases.split(","):
        parts, files, rows = cases[name]
        results.append(bench_case(spark, work, name, parts, files, rows, args.repeats))
    _POOL.close()
    print(
        "\n| case | files | size | ours | delta-spark | delta-rs | pyarrow 2 threads | pyarrow 2 processes "
        "| ours/delta-spark | ours/delta-rs | ours/2 processes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        m = r["median_s"]
        print(
            f"| {r['case']} | {r['files']} | {r['bytes'] / 1e6:.0f} MB | {m['ours']:.2f}s | {m['delta-spark']:.2f}s | "
            f"{m['delta-rs']:.2f}s | {m['pyarrow-floor']:.2f}s | {m['pyarrow-2proc']:.2f}s | "
            f"{r['ours_vs_delta_spark']:.2f} | {r['ours_vs_delta_rs']:.2f} | {r['ours_vs_2proc']:.2f} |"
        )
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=2)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    out = os.path.join(ROOT, "bench", "results", f"compaction-{int(time.time())}.json")
    with open(out, "w") as fh:
        json.dump(results, fh, indent=2)
    print(f"\nresults written to {out}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
