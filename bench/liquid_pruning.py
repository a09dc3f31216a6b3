"""Benchmark: file pruning after our OPTIMIZE of a liquid clustered table vs delta-spark's OPTIMIZE.

Not a test. Builds one CLUSTER BY (x, y) table of small files (x, y ~ U(0, 1) independent, plus
a payload), copies it, and in one process (delta-spark in the same Spark session as ours) runs

    ours          dbt_delta_optimize.optimize(spark, path)   (clusters by the table's columns)
    delta-spark   OPTIMIZE delta.`path`

with the same target file size, then counts for a fixed, seeded set of selective range queries
on (x, y), on x only and on y only, the files a min/max-stats reader must open (the Delta log's
AddFile stats, as Spark's data skipping uses them). Prints both counts and ours/delta-spark.

    .venv/bin/python bench/liquid_pruning.py                    # 1M rows, 100 files
    .venv/bin/python bench/liquid_pruning.py --rows 4000000 --files 400 --out-files 32
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MiB = 1024**2
Box = tuple[float, float, float, float]


def build_table(spark, path: str, rows: int, files: int) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, x DOUBLE, y DOUBLE, payload STRING) USING delta "
        "CLUSTER BY (x, y) TBLPROPERTIES ('delta.enableRowTracking'='false')"
    )
    df = spark.range(0, rows).selectExpr("id", "rand(11) AS x", "rand(23) AS y", "uuid() AS payload")
    df.repartition(files).write.format("delta").mode("append").save(path)


def queries(n: int, seed: int = 42) -> dict[str, list[Box]]:
    """Per kind, ranges [a, a+w] x [b, b+h] with w, h in [0.02, 0.2]; one-column kinds leave the other open."""
    rnd = random.Random(seed)
    out: dict[str, list[Box]] = {"x and y": [], "x only": [], "y only": []}
    for _ in range(n):
        w, h = rnd.uniform(0.02, 0.2), rnd.uniform(0.02, 0.2)
        a, b = rnd.uniform(0, 1 - w), rnd.uniform(0, 1 - h)
        out["x and y"].append((a, a + w, b, b + h))
        out["x only"].append((a, a + w, 0.0, 1.0))
        out["y only"].append((0.0, 1.0, b, b + h))
    return out


def files_scanned(path: str, qs: list[Box]) -> tuple[int, int]:
    """(files whose [min, max] box from the AddFile stats meets a query, summed over queries; live files)."""
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    boxes = []
    for f in load_snapshot(path).files:
        stats = json.loads(f.stats or "{}")
        lo, hi = stats.get("minValues", {}), stats.get("maxValues", {})
        boxes.append((lo.get("x", 0.0), hi.get("x", 1.0), lo.get("y", 0.0), hi.get("y", 1.0)))
    hit = sum(
        1 for (x0, x1, y0, y1) in qs for (a0, a1, b0, b1) in boxes if a0 <= x1 and a1 >= x0 and b0 <= y1 and b1 >= y0
    )
    return hit, len(boxes)


def run_ours(spark, path: str, target: int) -> tuple[int, int]:
    from dbt_delta_optimize.api import optimize

    m = optimize(spark, path, max_file_size=target)
    return m.num_files_removed, m.num_files_added


def run_delta_spark(spark, path: str, target: int) -> tuple[int, int]:
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
    try:
        row = spark.sql(f"OPTIMIZE delta.`{path}`").collect()[0]
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.maxFileSize")
    return row.metrics.numFilesRemoved, row.metrics.numFilesAdded


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=100, help="small files to start from")
    ap.add_argument("--out-files", type=int, default=16, help="target output files: sets the file size")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()

    from deltalake import DeltaTable

    from dbt_delta_optimize.engine.session import get_spark

    work = args.work or tempfile.mkdtemp(prefix="ddo-bench-liquid-")
    spark = get_spark(work_dir=os.path.join(work, "spark"), catalog="in-memory", conf={"spark.driver.memory": "4g"})
    spark.sparkContext.setLogLevel("FATAL")
    src = os.path.join(work, "src")
    t0 = time.time()
    build_table(spark, src, args.rows, args.files)
    size = sum(DeltaTable(src).get_add_actions(flatten=True).column("size_bytes").to_pylist())
    target = max(1, size // args.out_files)
    qs = queries(args.queries)
    print(
        f"built {args.files} files, {size / MiB:.1f} MiB, {args.rows} rows in {time.time() - t0:.0f}s; "
        f"target file size {target / MiB:.2f} MiB",
        flush=True,
    )

    results: dict[str, dict[str, int]] = {}
    for engine, run in (("ours", run_ours), ("delta-spark", run_delta_spark)):
        dst = os.path.join(work, engine)
        shutil.copytree(src, dst)
        t = time.perf_counter()
        removed, added = run(spark, dst, target)
        took = time.perf_counter() - t
        results[engine] = {kind: files_scanned(dst, q)[0] for kind, q in qs.items()}
        results[engine]["files"] = files_scanned(dst, [])[1]
        print(f"{engine:>12}: {took:6.2f}s ({removed} -> {added} files)", flush=True)
    base = {kind: files_scanned(src, q)[0] for kind, q in qs.items()}
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)

    print(f"\nfiles opened by {args.queries} queries per kind (min/max stats); unclustered table: {base}\n")
    print("| query kind | ours | delta-spark | ours / delta-spark |")
    print("|---|---|---|---|")
    for kind in qs:
        o, d = results["ours"][kind], results["delta-spark"][kind]
        print(f"| {kind} | {o} | {d} | {o / d:.2f} |")
    print(f"| (output files) | {results['ours']['files']} | {results['delta-spark']['files']} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
