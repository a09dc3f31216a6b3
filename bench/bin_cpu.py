"""Profile: the thread CPU per input file of a compaction's bins, rerun without Spark (issue 45).

Not a test and not part of ``make bench``: the measures behind docs/performance.md's "Per-file work in a
bin". ``--capture`` builds ``bench/run.py``'s tiny table (10 partitions x 500 files of 60 rows) with
delta-spark, compacts it with ``optimize`` and saves the ten bin tasks' messages as they reach the task side
(driver threads). Without it, the saved tasks are rerun in this process with ``tasks.worker.run_task``, one
thread, after one untimed round; each round's outputs (MD5 of the bytes, size, rows, stats JSON) must equal
the first round's, and ``--out`` writes them so two source trees can be compared byte for byte.

    PYTHONPATH=$PWD .venv/bin/python bench/bin_cpu.py --capture /tmp/bins
    PYTHONPATH=$PWD .venv/bin/python bench/bin_cpu.py --tasks /tmp/bins/tasks.json --rounds 7 --out /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def capture(folder: str) -> None:
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import run as bench_run  # bench/run.py: the same table

    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.engine.session import get_spark
    from dbt_delta_optimize.tasks import messages, worker

    spark = get_spark(work_dir=os.path.join(folder, "spark"), catalog="in-memory")
    spark.sparkContext.setLogLevel("FATAL")
    src, table = os.path.join(folder, "tiny-src"), os.path.join(folder, "tiny")
    if not os.path.exists(src):
        bench_run.build_table(spark, src, 10, 500, 300_000)
    shutil.rmtree(table, ignore_errors=True)
    shutil.copytree(src, table)
    captured: list[str] = []
    run_task = worker.run_task

    def keep(task: Any, stop: Any = None) -> Any:
        captured.append(messages.encode(task))
        return run_task(task, stop)

    worker.run_task = keep  # the task runner looks it up at each bin
    metrics = optimize(spark, table, task_runner="driver")  # threads: worker processes would not see the hook
    with open(os.path.join(folder, "tasks.json"), "w") as fh:
        json.dump(captured, fh)
    print(f"{metrics.num_files_removed} -> {metrics.num_files_added} files, {len(captured)} tasks saved")


def rerun(tasks_file: str, rounds: int, out: str | None) -> None:
    from dbt_delta_optimize.tasks import messages, worker

    with open(tasks_file) as fh:
        tasks = [messages.decode_task(t) for t in json.load(fh)]
    files = sum(len(t.inputs) for t in tasks)

    def one_round() -> tuple[float, list[Any]]:
        start = time.thread_time()
        outcomes = [worker.run_task(t) for t in tasks]
        spent = time.thread_time() - start
        digests = []
        for task, outcome in zip(tasks, outcomes):
            assert type(outcome).__name__ == "Rewritten", outcome
            with open(task.output, "rb") as fh:
                digests.append([hashlib.md5(fh.read()).hexdigest(), outcome.size, outcome.rows, outcome.stats])
            os.remove(task.output)
        return spent, digests

    _, first = one_round()
    times = []
    for _ in range(rounds):
        spent, digests = one_round()
        assert digests == first, "a round wrote other outputs than the first"
        times.append(spent)
    per_file = [t / files * 1e6 for t in times]
    print(f"{files} input files: {statistics.median(per_file):.1f} us CPU a file (median of {rounds} rounds; "
          f"min {min(per_file):.1f}, max {max(per_file):.1f}), load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    if out:
        with open(out, "w") as fh:
            json.dump(first, fh, indent=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture", metavar="FOLDER", help="build the tiny table here and save its bin tasks")
    ap.add_argument("--tasks", help="the tasks.json a capture saved")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", help="write the outputs' digests here (compare two source trees)")
    args = ap.parse_args()
    if args.capture:
        capture(args.capture)
    elif args.tasks:
        rerun(args.tasks, args.rounds, args.out)
    else:
        ap.error("--capture FOLDER or --tasks FILE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
