"""Planning at scale: a dry run over a 1,000,000-file table against the deltalake snapshot floor.

Builds (once, cached under bench/results/) a log whose checkpoint holds N add actions in P
partitions and no data files, then measures in fresh subprocesses, alternating the order:
- floor: deltalake loads the snapshot and its add actions (``DeltaTable`` + ``get_add_actions``);
- ours: ``dbt-delta-optimize optimize TABLE --dry-run --json`` (snapshot, predicate, bins), no JVM;
- ours, auto compaction: the auto-compact decision over every partition (``health``-style dry run).
Prints median seconds and peak RSS of each, and the ratios ours/floor.

    .venv/bin/python bench/plan_scale.py [--files 1000000] [--partitions 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable

FLOOR = """
import sys, pyarrow as pa
from deltalake import DeltaTable
dt = DeltaTable(sys.argv[1])
t = pa.table(dt.get_add_actions(flatten=True))
print(t.num_rows)
"""

OURS = """
import sys
from dbt_delta_optimize.cli.main import main
main(["optimize", sys.argv[1], "--dry-run", "--json", "--min-file-size", "64m", "--max-file-size", "128m"])
"""


def build(path: str, files: int, partitions: int) -> None:
    """A table whose only state is a checkpoint at version 0 with ``files`` adds (no data files)."""
    from deltalake import DeltaTable

    log = os.path.join(path, "_delta_log")
    os.makedirs(log, exist_ok=True)
    rng = random.Random(7)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
    head = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "bench-plan-scale",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": 0,
            }
        },
        {"commitInfo": {"timestamp": 0, "operation": "WRITE", "operationParameters": {}}},
    ]
    with open(os.path.join(log, f"{0:020d}.json"), "w") as fh:
        for a in head:
            fh.write(json.dumps(a) + "\n")
        for i in range(files):
            part = i % partitions
            size = rng.choice((rng.randint(2_000, 60_000_000), rng.randint(60_000_000, 300_000_000)))
            add = {
                "path": f"part={part}/part-{i:07d}-c000.snappy.parquet",
                "partitionValues": {"part": str(part)},
                "size": size,
                "modificationTime": 1_700_000_000_000 + i,
                "dataChange": True,
                "stats": json.dumps(
                    {
                        "numRecords": size // 20,
                        "minValues": {"id": i},
                        "maxValues": {"id": i + 9},
                        "nullCount": {"id": 0},
                    }
                ),
            }
            fh.write(json.dumps({"add": add}) + "\n")
    DeltaTable(path).create_checkpoint()
    os.unlink(os.path.join(log, f"{0:020d}.json"))  # readers start from the checkpoint, as after log cleanup


def measure(code: str, table: str) -> tuple[float, float]:
    """Peak RSS of RUSAGE_CHILDREN is a high-water mark over all children: run each in its own parent."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], capture_output=True, text=True)\n"
        "dt = time.perf_counter() - t0\n"
        "if p.returncode: sys.stderr.write(p.stderr); sys.exit(p.returncode)\n"
        "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
    )
    proc = subprocess.run([PY, "-c", wrapper, code, table], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {proc.stderr[-3000:]}")
    seconds, mib = proc.stdout.split()
    return float(seconds), float(mib)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    table = os.path.join(HERE, "results", f"plan_scale_{args.files}_{args.partitions}")
    if not os.path.exists(os.path.join(table, "_delta_log", "_last_checkpoint")):
        t0 = time.perf_counter()
        build(table, args.files, args.partitions)
        print(f"built {table} in {time.perf_counter() - t0:.1f} s")
    results: dict[str, list[tuple[float, float]]] = {"floor": [], "ours": []}
    for i in range(args.repeats):
        order = ["floor", "ours"] if i % 2 == 0 else ["ours", "floor"]
        for name in order:
            results[name].append(measure(FLOOR if name == "floor" else OURS, table))
    med = {k: (statistics.median(s for s, _ in v), statistics.median(m for _, m in v)) for k, v in results.items()}
    print(f"{args.files:,} files in {args.partitions:,} partitions, median of {args.repeats}")
    print(f"{'case':<10} {'seconds':>9} {'peak MiB':>10}")
    for k, (s, m) in med.items():
        print(f"{k:<10} {s:>9.2f} {m:>10.0f}")
    (fs, fm), (os_, om) = med["floor"], med["ours"]
    print(f"ratio ours/floor: time {os_ / fs:.2f}x, peak memory {om / fm:.2f}x (target <= 2.5x)")


if __name__ == "__main__":
    main()
