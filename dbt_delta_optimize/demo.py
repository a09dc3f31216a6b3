"""`make demo`: build a small-file Delta table with delta-spark, then compact it with our executor.

Prints the snapshot as our deltalake-based reader sees it before and after, and checks that
both engines read the same rows afterwards.
"""

from __future__ import annotations

import os
import shutil
import sys
import time


def _print_summary(title: str, summary: dict) -> None:
    print(f"\n== {title}: version {summary['version']}, {summary['numFiles']} files, {summary['sizeBytes']:,} bytes")
    for p in summary["partitions"]:
        print(f"   {p['partition']:<24} {p['numFiles']:>4} files {p['sizeBytes']:>10,} bytes")


def main(argv: list[str] | None = None) -> int:
    from . import __version__
    from .executor import optimize
    from .snapshot import load_snapshot, summarize
    from .spark import get_spark

    root = os.path.abspath(os.environ.get("DEMO_DIR", ".delta_optimize/demo"))
    shutil.rmtree(root, ignore_errors=True)
    table = os.path.join(root, "events")
    print(f"dbt-delta-optimize {__version__} demo: table at {table}")
    t0 = time.time()
    spark = get_spark(work_dir=os.path.join(root, "spark"), catalog="in-memory", master="local[2]")
    print(f"embedded Spark {spark.version} with Delta started in {time.time() - t0:.1f}s")
    for batch in range(12):  # a dozen small appends, like an incremental model run a dozen times
        (
            spark.range(batch * 2000, (batch + 1) * 2000)
            .selectExpr("id", "date_add(DATE'2024-01-01', CAST(id % 6 AS INT)) AS event_date", "id % 97 AS user_id", "uuid() AS payload")
            .repartition(3)
            .write.format("delta")
            .mode("append")
            .partitionBy("event_date")
            .save(table)
        )
    rows_before = spark.read.format("delta").load(table).count()
    _print_summary("before (written by delta-spark)", summarize(load_snapshot(table)))

    metrics = optimize(spark, table)
    m = metrics.to_dict()
    after = load_snapshot(table)
    _print_summary("after dbt-delta-optimize OPTIMIZE", summarize(after))
    print(
        f"\nOPTIMIZE: {m['numFilesRemoved']} files -> {m['numFilesAdded']} in {m['partitionsOptimized']} partitions, "
        f"{m['numBins']} bins, committed as version(s) {m['committedVersions']}, {(m['endTimeMs'] - m['startTimeMs']) / 1000:.1f}s"
    )
    from deltalake import DeltaTable

    rows_spark = spark.read.format("delta").load(table).count()
    rows_rs = DeltaTable(table).to_pyarrow_table().num_rows
    print(f"rows: before {rows_before}, after via delta-spark {rows_spark}, via delta-rs {rows_rs}")
    hist = spark.sql(f"DESCRIBE HISTORY delta.`{table}` LIMIT 1").collect()[0]
    print(f"delta-spark history: version {hist['version']} {hist['operation']} by {hist['engineInfo']}")
    ok = rows_before == rows_spark == rows_rs
    print("demo OK" if ok else "demo FAILED: row counts differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
