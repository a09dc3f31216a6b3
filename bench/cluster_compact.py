"""Benchmark: the same compaction on the embedded local session, a standalone cluster and Spark Connect.

Not a test. Builds one small-file table (deltalake), copies it per engine and repeat, and runs
``optimize`` through each: the CLI on an embedded ``local[2]`` session (bins in the driver's threads, and
again with ``--task-runner spark``: bins as Spark tasks, the path a cluster takes), ``spark-submit
python/optimize_job.py`` on a standalone master + worker (2 cores, executors on ``.venv-executor``,
which lacks this package: it is shipped), and the CLI with ``--remote`` on a Spark Connect server
(``local[2]``, the same executor venv). Prints the median optimize time (the metrics' start to end,
so JVM start-up is not counted), the whole command's wall time, and the ratios to both local runs.

    .venv/bin/python bench/cluster_compact.py [--partitions 4] [--files 25] [--rows 20000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.servers import (  # noqa: E402 - after the path is set
    EXECUTOR_PYTHON,
    delta_confs,
    spark_connect_server,
    spark_home,
    spark_standalone,
)

CLI = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")


def build(path: str, partitions: int, files: int, rows: int) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    n = rows // files
    for i in range(files):
        ids = range(i * n, (i + 1) * n)
        write_deltalake(
            path,
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "payload": pa.array([f"row-{k:012d}-{k * 7919 % 100003}" for k in ids]),
                    "score": pa.array([(k * 104729) % 1000 / 7 for k in ids], pa.float64()),
                    "p": pa.array([f"p{k % partitions}" for k in ids]),
                }
            ),
            partition_by=["p"],
            mode="append",
        )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "MASTER")}
    env.update(PYTHONPATH=ROOT, SPARK_HOME=spark_home())
    return env


def _metrics(out: str) -> dict:
    lines = out.splitlines()
    start = lines.index("{")
    return json.loads("\n".join(lines[start : lines.index("}", start) + 1]))


def run(cmd: list[str]) -> tuple[float, float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    m = _metrics(proc.stdout)
    if "instead of Arrow" in proc.stdout + proc.stderr:
        raise SystemExit("a bin fell back to the Spark rewrite")
    return (m["endTimeMs"] - m["startTimeMs"]) / 1000, wall, m


def engines(master: str, remote: str) -> dict[str, list[str]]:
    submit = [
        os.path.join(spark_home(), "bin", "spark-submit"),
        *("--master", master, "--driver-memory", "512m", "--executor-memory", "1g"),
        *("--conf", "spark.cores.max=2", "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN"),
        *(
            "--conf",
            f"spark.pyspark.python={EXECUTOR_PYTHON}",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
        ),
        *delta_confs(),
        os.path.join(ROOT, "python", "optimize_job.py"),
    ]
    return {
        "local[2] (embedded)": [CLI, "optimize", "--json"],  # bins in the driver's threads (task_runner auto)
        "local[2], bins as Spark tasks": [CLI, "optimize", "--task-runner", "spark", "--json"],
        "standalone (spark-submit)": submit,
        "Spark Connect": [CLI, "--remote", remote, "optimize", "--json"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files", type=int, default=100, help="files written (each spans every partition)")
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", dest="json_out", default=None, help="also write the results to this file")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ddo-bench-cluster-")
    try:
        source = os.path.join(work, "source")
        build(source, args.partitions, args.files, args.rows)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(source) for f in fs)
        print(f"{args.files * args.partitions} files, {size / 2**20:.1f} MiB, {args.partitions} partitions", flush=True)
        times: dict[str, list[tuple[float, float]]] = {}
        with (
            spark_standalone(os.path.join(work, "standalone")) as cluster,
            spark_connect_server(os.path.join(work, "connect")) as server,
        ):
            cmds = engines(cluster.master, server.url)
            for r in range(args.repeats):
                order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
                for name in order:
                    table = os.path.join(work, f"t-{r}-{len(times.get(name, []))}-{abs(hash(name))}")
                    shutil.copytree(source, table)
                    cmd = [*cmds[name], table]
                    if name.startswith("standalone"):
                        cmd.append("--json")
                    opt, wall, m = run(cmd)
                    assert m["numFilesAdded"] == args.partitions, m
                    times.setdefault(name, []).append((opt, wall))
                    print(f"  {name}: optimize {opt:.2f} s, command {wall:.2f} s", flush=True)
        base = statistics.median(t for t, _ in times["local[2] (embedded)"])
        tasks = statistics.median(t for t, _ in times["local[2], bins as Spark tasks"])
        print("\n| engine | median optimize | median command | optimize vs local | vs local, Spark tasks |")
        print("|---|---|---|---|---|")
        out = {}
        for name, values in times.items():
            opt = statistics.median(t for t, _ in values)
            wall = statistics.median(w for _, w in values)
            out[name] = {"optimize_s": opt, "command_s": wall, "vs_local": opt / base, "vs_local_tasks": opt / tasks}
            out[name]["times_s"] = [t for t, _ in values]  #: per repeat (bench/noise.py: the run's spread)
            print(f"| {name} | {opt:.2f} s | {wall:.2f} s | {opt / base:.2f} | {opt / tasks:.2f} |")
        if args.json_out:
            with open(args.json_out, "w") as fh:
                json.dump(out, fh, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
