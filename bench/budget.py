"""Time budget and concurrent DML at the issue's scale (not a test: wall-clock numbers belong here).

1. A delta-rs table of 150 partitions x 4 small files; ``optimize --max-duration 25s --max-threads 1``
   as a fresh CLI process (JVM start included): its wall time, bins done and left; then a plain
   follow-up run, and the rows checked against the original with delta-rs.
2. 60 partitions; a delta-rs DELETE in partitions 0 and 59 lands while optimize (one thread)
   rewrites them: partitions compacted in our commit after the DELETE, and the rows against the
   table right after the DELETE.

    .venv/bin/python bench/budget.py [--partitions 150] [--budget 25s]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

CLI = [sys.executable, "-m", "dbt_delta_optimize.cli.main"]


def build(path: str, partitions: int, files: int) -> None:
    for f in range(files):
        ids = [p * 1000 + f for p in range(partitions)]
        write_deltalake(
            path, pa.table({"id": ids, "part": list(range(partitions))}), partition_by=["part"], mode="append"
        )


def rows(path: str) -> list[tuple[int, int]]:
    t = DeltaTable(path).to_pyarrow_table()
    return sorted(zip(t.column("id").to_pylist(), t.column("part").to_pylist()))


def budget_run(work: str, partitions: int, budget: str) -> None:
    p = os.path.join(work, "budget")
    build(p, partitions, 4)
    before = rows(p)
    t0 = time.perf_counter()
    out = subprocess.run(
        [*CLI, "optimize", p, "--max-duration", budget, "--max-threads", "1", "--json"], capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    m = json.loads(out.stdout)
    print(
        f"budget {budget}: exit {out.returncode}, {wall:.1f}s wall, {m['numBins']} bin(s) committed in "
        f"{len(m['committedVersions'])} commit(s), {m['numBinsLeft']} left; rows unchanged: {rows(p) == before}"
    )
    t0 = time.perf_counter()
    out = subprocess.run([*CLI, "optimize", p, "--json"], capture_output=True, text=True)
    m = json.loads(out.stdout)
    print(
        f"follow-up: exit {out.returncode}, {time.perf_counter() - t0:.1f}s, {m['numBins']} bin(s), "
        f"{m['numBinsLeft']} left; rows unchanged: {rows(p) == before}"
    )


DELETE_RUN = """
import json, sys
from deltalake import DeltaTable
from dbt_delta_optimize.api import optimize
p = sys.argv[1]
def delete(done, total, *_):
    if done == total:
        DeltaTable(p).delete("part = 0 OR part = 59")
m = optimize(None, p, max_threads=1, progress=delete)
print(json.dumps(m.to_dict()))
"""


def delete_run(work: str) -> None:
    p = os.path.join(work, "dml")
    build(p, 60, 2)
    expected = [r for r in rows(p) if r[1] not in (0, 59)]
    out = subprocess.run([sys.executable, "-c", DELETE_RUN, p], capture_output=True, text=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    history = DeltaTable(p).history(2)
    print(
        f"concurrent DELETE: exit {out.returncode}, {m['numBins']} partition(s) compacted in version "
        f"{m['committedVersions']} after {history[1]['operation']}, dropped "
        f"{sorted(d['partition']['part'] for d in m['droppedBins'])}; rows = table after the DELETE: "
        f"{rows(p) == expected}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=150)
    ap.add_argument("--budget", default="25s")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ddo-budget-")
    try:
        budget_run(work, args.partitions, args.budget)
        delete_run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
