"""Spark job entrypoint: the same OPTIMIZE run through ``spark-submit`` on a cluster.

    spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.0 \
        --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
        --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
        python/optimize_job.py TABLE [--where EXPR]... [--zorder-by a,b] [--min-file-size 128m] ...

Prints the metrics as one JSON line on stdout; exits 2 on bad input, 1 on other failures.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="optimize_job.py", description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("--where", action="append", default=[])
    parser.add_argument("--zorder-by", default=None)
    parser.add_argument("--min-file-size")
    parser.add_argument("--max-file-size")
    parser.add_argument("--max-threads", type=int)
    parser.add_argument("--batch-size")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.errors import (
        DeltaOptimizeError,
        InvalidArgumentError,
        TableNotFoundError,
        UnsupportedFeatureError,
    )

    overrides = {
        k: v
        for k, v in dict(
            min_file_size=args.min_file_size,
            max_file_size=args.max_file_size,
            max_threads=args.max_threads,
            batch_size=args.batch_size,
        ).items()
        if v is not None
    }
    zorder = [c.strip() for c in args.zorder_by.split(",") if c.strip()] if args.zorder_by else None
    spark = SparkSession.builder.appName("dbt-delta-optimize").getOrCreate()
    try:
        result = optimize(spark, args.table, args.where, zorder, dry_run=args.dry_run, **overrides)
    except DeltaOptimizeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (InvalidArgumentError, TableNotFoundError, UnsupportedFeatureError)) else 1
    print(json.dumps(result.to_dict(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
