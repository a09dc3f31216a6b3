"""Spark job entrypoint: the ``dbt-delta-optimize`` CLI run through ``spark-submit`` on a cluster.

    spark-submit --master spark://host:7077 \\
        --jars "$(dbt-delta-optimize jars)" \\
        --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
        --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
        python/optimize_job.py [optimize] TABLE [--where EXPR]... [--zorder-by a,b] [--curve hilbert] [--full]
                               [--min-file-size 128m] [--storage-option KEY=VALUE]... [any other optimize option]
    ... python/optimize_job.py auto-compact TABLE [--since-version V] [--min-num-files N] [--enable]
    ... python/optimize_job.py analyze TABLE [--columns a,b] [--all] [--where EXPR] [--dry-run]
    ... python/optimize_job.py vacuum TABLE [--retain 168h] [--mode full|lite] [--dry-run] [--allow-short-retention]
    ... python/optimize_job.py --remote sc://host:15002 optimize TABLE ...   # through Spark Connect

Every option of ``dbt-delta-optimize optimize``, ``auto-compact``, ``analyze`` and ``vacuum`` works (see ``--help``);
``-v``, ``--debug`` and ``--remote`` may stand anywhere. The session is the one spark-submit
configured (its master, jars and confs), or a Spark Connect session with ``--remote`` or
``$SPARK_REMOTE``. The driver needs this package installed (or in ``--py-files``); executors need
only pyarrow: the package is shipped to them. Prints the metrics (or the plan) as JSON on stdout;
exits 2 on bad input, 1 on other failures.
"""

from __future__ import annotations

import os
import sys

COMMANDS = ("optimize", "auto-compact", "analyze", "vacuum")
_GLOBAL_FLAGS = ("-v", "-vv", "--verbose", "--debug")


def cli_args(argv: list[str]) -> list[str]:
    """The CLI's arguments for the job's: global options first, ``optimize`` by default, ``--json`` added."""
    globals_: list[str] = []
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in _GLOBAL_FLAGS:
            globals_.append(arg)
        elif arg == "--remote":
            globals_ += [arg, next(it, "")]
        elif arg.startswith("--remote="):
            globals_.append(arg)
        else:
            rest.append(arg)
    if not rest or rest[0] not in (*COMMANDS, "--help", "-h"):
        rest.insert(0, "optimize")
    if "--json" not in rest and not {"--help", "-h"} & set(rest):
        rest.append("--json")
    return [*globals_, *rest]


def _remote(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--remote" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--remote="):
            return arg.split("=", 1)[1]
    return os.environ.get("SPARK_REMOTE")


def main(argv: list[str] | None = None) -> None:
    args = cli_args(list(sys.argv[1:] if argv is None else argv))
    if not _remote(args) and "--help" not in args:
        # The session spark-submit configured (master, jars, confs); the CLI then finds it running.
        from pyspark.sql import SparkSession

        SparkSession.builder.appName("dbt-delta-optimize").getOrCreate()
    from dbt_delta_optimize.cli.main import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main()
