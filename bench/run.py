"""Benchmark: our OPTIMIZE vs delta-spark's OPTIMIZE SQL vs deltalake's optimize.compact().

Not a test. Builds small-file tables, copies each per engine and repeat, times every engine in
this one process (delta-spark in the same Spark session as ours) after one untimed warm-up call of
each (a warm session: first-call imports and JIT are not counted), alternating the order over
repeats, and prints median wall times, the ratios ours/delta-spark and ours/delta-rs, and a raw
pyarrow read+write of the same bytes as the physical floor.

    .venv/bin/python bench/run.py                 # small (20 x 100 files), tiny (10 x 500 files of <= 8 KB)
                                                  # and large (>= 1 GB) cases
    .venv/bin/python bench/run.py --cases small --repeats 3
    .venv/bin/python bench/run.py --cases tiny,mid --repeats 5 --task-runners auto,driver --engines ours,delta-rs
                                                  # ours with its default (worker processes for many small
                                                  # local files) and with the driver's threads, vs delta-rs

Besides wall time, each call's CPU is measured: this process's, its bin worker processes' (reaped by
multiprocessing's fork server, so counted in the fork server's children's times) and the Spark JVM's,
from /proc (Linux). delta-rs runs in this process, so its CPU is all in the first.
"""

from __future__ import annotations

import argparse
import functools
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


def run_ours(spark, path, task_runner="auto"):
    from dbt_delta_optimize.api import optimize

    m = optimize(spark, path, task_runner=task_runner)
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


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int | None, children: bool) -> float:
    """CPU seconds of a process from /proc (with its reaped children's when ``children``); 0 if unknown."""
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / _TICK


def cpu_now(spark) -> tuple[float, float]:
    """(this process's CPU + its bin workers', the Spark JVM's CPU), in seconds so far."""
    from multiprocessing import forkserver

    own = time.process_time()
    workers = _proc_cpu(getattr(forkserver._forkserver, "_forkserver_pid", None), children=True)
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    jvm = _proc_cpu(getattr(proc, "pid", None), children=True)
    return own + workers, jvm


def bench_case(
    spark, work: str, name: str, partitions: int, files: int, rows: int, repeats: int, engines: dict
) -> dict:
    src = os.path.join(work, f"{name}-src")
    t0 = time.time()
    build_table(spark, src, partitions, files, rows)
    size = dir_size(src)
    n_files = len(glob.glob(os.path.join(src, "*=*", "*.parquet")))
    print(f"[{name}] built {n_files} files, {size / 1e6:.1f} MB in {time.time() - t0:.0f}s", flush=True)
    times: dict[str, list[float]] = {e: [] for e in engines}
    cpu: dict[str, list[float]] = {e: [] for e in engines}
    jvm: dict[str, list[float]] = {e: [] for e in engines}
    order = list(engines)
    for engine in order:  # warm session: every engine's first call (imports, JIT, pools) is not timed
        dst = os.path.join(work, f"{name}-{engine}-warmup")
        shutil.copytree(src, dst)
        t = time.perf_counter()
        engines[engine](spark, dst)
        print(f"[{name}] warm-up  {engine:>13}: {time.perf_counter() - t:7.2f}s (not counted)", flush=True)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.rmtree(dst + "_floor", ignore_errors=True)
    for r in range(repeats):
        seq = order if r % 2 == 0 else list(reversed(order))
        for engine in seq:
            dst = os.path.join(work, f"{name}-{engine}-{r}")
            shutil.copytree(src, dst)
            c0, j0 = cpu_now(spark)
            t = time.perf_counter()
            removed, added = engines[engine](spark, dst)
            dt = time.perf_counter() - t
            c1, j1 = cpu_now(spark)
            times[engine].append(dt)
            cpu[engine].append(c1 - c0)
            jvm[engine].append(j1 - j0)
            print(
                f"[{name}] repeat {r} {engine:>13}: {dt:7.2f}s, cpu {c1 - c0:5.2f}s + JVM {j1 - j0:5.2f}s "
                f"({removed} -> {added} files)",
                flush=True,
            )
            shutil.rmtree(dst, ignore_errors=True)
            shutil.rmtree(dst + "_floor", ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    med = {e: statistics.median(v) for e, v in times.items()}
    result = {
        "case": name,
        "files": n_files,
        "bytes": size,
        "partitions": partitions,
        "repeats": repeats,
        "median_s": med,
        "times_s": times,  #: per repeat, each repeat's engines back to back (bench/noise.py: the run's spread)
        "cpu_s": cpu,  #: per repeat: this process's CPU and its bin worker processes'
        "jvm_cpu_s": jvm,  #: per repeat: the Spark JVM's CPU
        "median_cpu_s": {e: statistics.median(v) for e, v in cpu.items()},
    }
    for ref, key in (("delta-spark", "delta_spark"), ("delta-rs", "delta_rs"), ("pyarrow-floor", "floor")):
        if "ours" in med and ref in med:
            result[f"ours_vs_{key}"] = med["ours"] / med[ref]
    if "ours" in med and "pyarrow-2proc" in med:
        result["ours_vs_2proc"] = med["ours"] / med["pyarrow-2proc"]
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="small,tiny,large", help="comma list of: small, tiny, mid, large")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--large-rows", type=int, default=20_000_000, help="rows of the large case (~1.08 GB at 20M)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma list of: {', '.join(ENGINES)}")
    ap.add_argument(
        "--task-runners",
        default="auto",
        help="ours with each of these task_runner settings (auto is 'ours', others 'ours-<runner>'): auto, driver",
    )
    args = ap.parse_args()
    engines = {e: ENGINES[e] for e in args.engines.split(",") if e != "ours"}
    if "ours" in args.engines.split(","):
        for runner in args.task_runners.split(","):
            engines["ours" if runner == "auto" else f"ours-{runner}"] = functools.partial(run_ours, task_runner=runner)
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
        results.append(bench_case(spark, work, name, parts, files, rows, args.repeats, engines))
    _POOL.close()
    _print_table(results, list(engines))
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


def _print_table(results: list[dict], engines: list[str]) -> None:
    """Medians of wall and CPU (this process and its bin workers) per engine, and each against delta-rs."""
    print("\n| case | files | size | " + " | ".join(f"{e} wall / cpu" for e in engines) + " |")
    print("|---|---|---|" + "---|" * len(engines))
    for r in results:
        m, c = r["median_s"], r["median_cpu_s"]
        cells = " | ".join(f"{m[e]:.2f}s / {c[e]:.2f}s" for e in engines)
        print(f"| {r['case']} | {r['files']} | {r['bytes'] / 1e6:.0f} MB | {cells} |")
    if not any("delta-rs" in r["median_s"] for r in results):
        return
    ours = [e for e in engines if e.startswith("ours")]
    print("\n| case | " + " | ".join(f"{e}/delta-rs wall (per repeat) / cpu" for e in ours) + " |")
    print("|---|" + "---|" * len(ours))
    for r in results:
        cells = []
        for e in ours:
            per = [a / b for a, b in zip(r["times_s"][e], r["times_s"]["delta-rs"])]
            cpu = r["median_cpu_s"][e] / r["median_cpu_s"]["delta-rs"]
            wall = r["median_s"][e] / r["median_s"]["delta-rs"]
            cells.append(f"{wall:.2f} ({min(per):.2f}-{max(per):.2f}) / {cpu:.2f}")
        print(f"| {r['case']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
