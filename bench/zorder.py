"""Benchmark: our Z-order / Hilbert OPTIMIZE vs delta-spark's OPTIMIZE ZORDER BY vs deltalake's z_order().

Not a test. Builds one small-file table of two uncorrelated uniform columns (x, y) plus a payload,
copies it per engine and repeat, and in this one process (delta-spark in the same Spark session
as ours) times

    ours-zorder     dbt_delta_optimize.optimize(..., zorder_by=["x", "y"])
    ours-hilbert    the same with curve="hilbert"
    delta-spark     OPTIMIZE delta.`path` ZORDER BY (x, y)
    delta-rs        deltalake.DeltaTable(path).optimize.z_order(["x", "y"])

all with the same target file size, alternating the order over repeats. It prints median wall
times, the ratios ours/delta-spark and ours/delta-rs, and the pruning figure of each result: the
files a min/max-stats reader must open for a fixed, seeded set of range queries on (x, y).

    .venv/bin/python bench/zorder.py                      # 2M rows, 200 files, unpartitioned
    .venv/bin/python bench/zorder.py --rows 4000000 --partitions 20 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MiB = 1024**2


def build_table(spark, path: str, rows: int, files: int, partitions: int) -> None:
    """x, y ~ U(0, 1) independent, id, a 36-character payload; ``files`` files (per partition if partitioned)."""
    df = spark.range(0, rows).selectExpr(
        "id",
        "rand(11) AS x",
        "rand(23) AS y",
        "uuid() AS payload",
        *([f"CAST(id % {partitions} AS INT) AS part"] if partitions else []),
    )
    if partitions:
        df.repartition(files, "id").write.format("delta").partitionBy("part").save(path)
    else:
        df.repartition(files).write.format("delta").save(path)


def data_bytes(path: str) -> tuple[int, int]:
    import pyarrow as pa
    from deltalake import DeltaTable

    t = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return t.num_rows, sum(t.column("size_bytes").to_pylist())


def queries(n: int = 100, seed: int = 42) -> list[tuple[float, float, float, float]]:
    """Fixed range queries x in [a, a+w], y in [b, b+h], w and h in [0.02, 0.2]."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        w, h = rnd.uniform(0.02, 0.2), rnd.uniform(0.02, 0.2)
        a, b = rnd.uniform(0, 1 - w), rnd.uniform(0, 1 - h)
        out.append((a, a + w, b, b + h))
    return out


def files_scanned(path: str, qs) -> tuple[int, int]:
    """(files whose [min, max] box on (x, y) from the AddFile stats meets a query, summed over queries; live files)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    t = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    boxes = list(zip(t["min.x"], t["max.x"], t["min.y"], t["max.y"]))
    hit = sum(
        1 for (x0, x1, y0, y1) in qs for (a0, a1, b0, b1) in boxes if a0 <= x1 and a1 >= x0 and b0 <= y1 and b1 >= y0
    )
    return hit, len(boxes)


def run_ours(curve):
    def run(spark, path, target):
        from dbt_delta_optimize.api import optimize

        m = optimize(spark, path, zorder_by=["x", "y"], curve=curve, max_file_size=target)
        return m.num_files_removed, m.num_files_added

    return run


def run_delta_spark(spark, path, target):
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
    try:
        row = spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY (x, y)").collect()[0]
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.maxFileSize")
    return row.metrics.numFilesRemoved, row.metrics.numFilesAdded


def run_delta_rs(spark, path, target):
    from deltalake import DeltaTable

    m = DeltaTable(path).optimize.z_order(["x", "y"], target_size=target)
    return m["numFilesRemoved"], m["numFilesAdded"]


ENGINES = {
    "ours-zorder": run_ours("zorder"),
    "ours-hilbert": run_ours("hilbert"),
    "delta-spark": run_delta_spark,
    "delta-rs": run_delta_rs,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=200, help="small files to start from (per table)")
    ap.add_argument("--partitions", type=int, default=0, help="0 = unpartitioned")
    ap.add_argument("--out-files", type=int, default=16, help="target output files (per partition): sets the file size")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()

    from dbt_delta_optimize.engine.session import get_spark

    work = args.work or tempfile.mkdtemp(prefix="ddo-bench-zorder-")
    spark = get_spark(work_dir=os.path.join(work, "spark"), catalog="in-memory", conf={"spark.driver.memory": "8g"})
    spark.sparkContext.setLogLevel("FATAL")
    cores = spark.sparkContext.defaultParallelism
    print(f"Spark {spark.version}, {cores} cores, work dir {work}", flush=True)

    src = os.path.join(work, "src")
    t0 = time.time()
    build_table(spark, src, args.rows, args.files, args.partitions)
    n_files, size = data_bytes(src)
    per_partition = size // max(1, args.partitions)
    target = max(1, per_partition // args.out_files)
    qs = queries(args.queries)
    base_scanned, _ = files_scanned(src, qs)
    print(
        f"built {n_files} files, {size / MiB:.1f} MiB, {args.rows} rows, "
        f"{args.partitions or 'no'} partitions in {time.time() - t0:.0f}s; target file size {target / MiB:.2f} MiB; "
        f"unclustered: {base_scanned} files scanned by {len(qs)} queries",
        flush=True,
    )

    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    scanned: dict[str, list[int]] = {e: [] for e in ENGINES}
    out_files: dict[str, list[int]] = {e: [] for e in ENGINES}
    order = list(ENGINES)
    for r in range(args.repeats):
        seq = order if r % 2 == 0 else list(reversed(order))
        for engine in seq:
            dst = os.path.join(work, f"{engine}-{r}")
            shutil.copytree(src, dst)
            t = time.perf_counter()
            removed, added = ENGINES[engine](spark, dst, target)
            dt = time.perf_counter() - t
            hit, live = files_scanned(dst, qs)
            times[engine].append(dt)
            scanned[engine].append(hit)
            out_files[engine].append(live)
            print(f"repeat {r} {engine:>12}: {dt:7.2f}s ({removed} -> {added} files), {hit} files scanned", flush=True)
            shutil.rmtree(dst, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)

    med = {e: statistics.median(v) for e, v in times.items()}
    print(
        f"\n{args.rows} rows, {n_files} input files ({size / MiB:.0f} MiB), {args.partitions or 'unpartitioned'}, "
        f"target {target / MiB:.2f} MiB, {args.repeats} repeats, {cores} cores; "
        f"files scanned by {len(qs)} range queries (unclustered: {base_scanned})\n"
    )
    print("| engine | median time | vs delta-spark | vs delta-rs | output files | files scanned (median, min-max) |")
    print("|---|---|---|---|---|---|")
    for e in ENGINES:
        s = scanned[e]
        print(
            f"| {e} | {med[e]:.2f}s | {med[e] / med['delta-spark']:.2f} | {med[e] / med['delta-rs']:.2f} | "
            f"{statistics.median(out_files[e]):.0f} | {statistics.median(s):.0f} ({min(s)}-{max(s)}) |"
        )
    result = {
        "rows": args.rows,
        "input_files": n_files,
        "bytes": size,
        "partitions": args.partitions,
        "target_file_size": target,
        "repeats": args.repeats,
        "cores": cores,
        "queries": len(qs),
        "unclustered_files_scanned": base_scanned,
        "times_s": times,
        "median_s": med,
        "files_scanned": scanned,
        "output_files": out_files,
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    out = os.path.join(ROOT, "bench", "results", f"zorder-{int(time.time())}.json")
    with open(out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(f"\nresults written to {out}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
