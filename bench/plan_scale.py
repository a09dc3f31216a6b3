"""Planning at scale: a dry run over a 1,000,000-file table against the deltalake snapshot floor.

Builds (once, cached under bench/results/) a log whose checkpoint holds N add actions in P partitions,
written directly with pyarrow in row groups, then one commit that removes 1,000 files and adds 500; no
data files. Then measures in fresh subprocesses, alternating the order:
- floor: deltalake loads the snapshot and its add actions (``DeltaTable`` + ``get_add_actions``);
- ours: ``dbt-delta-optimize optimize TABLE --dry-run --json`` (snapshot, predicate, bins), no JVM;
- before (``--before DIR``): the same dry run with another checkout on PYTHONPATH;
- health (``--health``): ``dbt-delta-optimize health TABLE --json``.
Prints median wall seconds, CPU seconds (user + system: robust to other load on the machine) and peak
RSS of each, and the ratios to the floor.

    .venv/bin/python bench/plan_scale.py [--files 1000000] [--partitions 1000] [--repeats 3]
    .venv/bin/python bench/plan_scale.py --files 5000000 --repeats 1 --before /work/main --health
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

import pyarrow.compute as pc

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


def _head(partitions: int) -> list[dict[str, object]]:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
    return [
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
    ]


def _template(work: str, partitions: int) -> tuple[object, object]:
    """The checkpoint schema deltalake writes, and its protocol + metaData rows (from a 1-file table)."""
    import glob

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    log = os.path.join(work, "_delta_log")
    os.makedirs(log, exist_ok=True)
    add = {"path": "part=0/x.parquet", "partitionValues": {"part": "0"}, "size": 1, "modificationTime": 0}
    with open(os.path.join(log, f"{0:020d}.json"), "w") as fh:
        for a in [*_head(partitions), {"add": {**add, "dataChange": True}}]:
            fh.write(json.dumps(a) + "\n")
    DeltaTable(work).create_checkpoint()
    table = pq.read_table(glob.glob(os.path.join(log, "*.checkpoint.parquet"))[0])
    head = table.filter(pc.or_(pc.is_valid(table.column("protocol")), pc.is_valid(table.column("metaData"))))
    schema = _nullable(table.schema)
    return schema, head.cast(schema)


def _nullable(schema: object) -> object:
    """The schema with every field nullable (a null ``remove`` struct cannot have non-null children)."""
    import pyarrow as pa

    def field(f: pa.Field) -> pa.Field:
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([field(c) for c in t])
        elif pa.types.is_map(t):
            t = pa.map_(t.key_type, field(t.item_field).type)
        elif pa.types.is_list(t):
            t = pa.list_(field(t.value_field))
        return pa.field(f.name, t, nullable=True)

    return pa.schema([field(f) for f in schema])  # type: ignore[attr-defined]


def _adds(schema: object, start: int, stop: int, partitions: int, rng: random.Random) -> object:
    """Checkpoint rows of the adds ``start``..``stop`` (only the ``add`` column set)."""
    import pyarrow as pa

    ids = range(start, stop)
    sizes = [rng.choice((rng.randint(2_000, 60_000_000), rng.randint(60_000_000, 300_000_000))) for _ in ids]
    add_type = schema.field("add").type  # type: ignore[attr-defined]
    adds = pa.array(
        [
            {
                "path": f"part={i % partitions}/part-{i:07d}-c000.snappy.parquet",
                "partitionValues": [("part", str(i % partitions))],
                "size": size,
                "modificationTime": 1_700_000_000_000 + i,
                "dataChange": False,
                "stats": f'{{"numRecords":{size // 20},"minValues":{{"id":{i}}},"maxValues":{{"id":{i + 9}}},'
                f'"nullCount":{{"id":0}}}}',
            }
            for i, size in zip(ids, sizes)
        ],
        add_type,
    )
    n = len(adds)
    columns = [adds if f.name == "add" else pa.nulls(n, f.type) for f in schema]  # type: ignore[attr-defined]
    return pa.Table.from_arrays(columns, schema=schema)


def build(path: str, files: int, partitions: int, *, batch: int = 200_000) -> None:
    """A table whose state is a checkpoint at version 0 with ``files`` adds, then one commit that removes
    1,000 of them and adds 500 (no data files: a dry run never reads them).

    The checkpoint is written directly with pyarrow, ``batch`` adds per row group (deltalake's own
    checkpoint writer would need the whole table in memory: about 5 GB at 5M files).
    """
    import shutil
    import tempfile

    import pyarrow.parquet as pq

    rng = random.Random(7)
    log = os.path.join(path, "_delta_log")
    os.makedirs(log, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        schema, head = _template(work, partitions)
    checkpoint = os.path.join(log, f"{0:020d}.checkpoint.parquet")
    with pq.ParquetWriter(checkpoint, schema, compression="snappy") as writer:  # type: ignore[arg-type]
        writer.write_table(head)  # type: ignore[arg-type]
        for start in range(0, files, batch):
            writer.write_table(_adds(schema, start, min(files, start + batch), partitions, rng))  # type: ignore[arg-type]
    rows = files + len(head)  # type: ignore[arg-type]
    with open(os.path.join(log, "_last_checkpoint"), "w") as fh:
        fh.write(json.dumps({"version": 0, "size": rows, "numOfAddFiles": files}))
    with open(os.path.join(log, f"{1:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1, "operation": "WRITE", "operationParameters": {}}}) + "\n")
        for i in range(0, min(files, 1000)):
            removed = f"part={i % partitions}/part-{i:07d}-c000.snappy.parquet"
            fh.write(json.dumps({"remove": {"path": removed, "deletionTimestamp": 1, "dataChange": True}}) + "\n")
        for i in range(files, files + 500):
            add = {
                "path": f"part={i % partitions}/part-{i:07d}-c000.snappy.parquet",
                "partitionValues": {"part": str(i % partitions)},
                "size": 1_000_000,
                "modificationTime": 1_700_000_000_000 + i,
                "dataChange": True,
                "stats": json.dumps({"numRecords": 50_000, "minValues": {"id": i}, "maxValues": {"id": i}}),
            }
            fh.write(json.dumps({"add": add}) + "\n")
    shutil.rmtree(os.path.join(path, "_tmp"), ignore_errors=True)


HEALTH = """
import sys
from dbt_delta_optimize.cli.main import main
main(["health", sys.argv[1], "--json"])
"""


def measure(code: str, table: str, pythonpath: str | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak MiB) of ``code`` in a fresh process.

    Peak RSS of RUSAGE_CHILDREN is a high-water mark over all children: run each in its own parent. CPU
    time (user + system) is robust to other load on a shared machine; wall time is not.
    """
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], capture_output=True, text=True)\n"
        "dt = time.perf_counter() - t0\n"
        "if p.returncode: sys.stderr.write(p.stderr); sys.exit(p.returncode)\n"
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(dt, r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)\n"
    )
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([PY, "-c", wrapper, code, table], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {proc.stderr[-3000:]}")
    seconds, cpu, mib = proc.stdout.split()
    return float(seconds), float(cpu), float(mib)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=1_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", help="also run the dry run with this checkout on PYTHONPATH (e.g. /work/main)")
    ap.add_argument("--health", action="store_true", help="also run `health --json` on the table")
    args = ap.parse_args()
    table = os.path.join(HERE, "results", f"plan_scale_{args.files}_{args.partitions}")
    if not os.path.exists(os.path.join(table, "_delta_log", "_last_checkpoint")):
        t0 = time.perf_counter()
        build(table, args.files, args.partitions)
        print(f"built {table} in {time.perf_counter() - t0:.1f} s")
    cases: dict[str, tuple[str, str | None]] = {"floor": (FLOOR, None), "ours": (OURS, None)}
    if args.before:
        cases["before"] = (OURS, args.before)
    if args.health:
        cases["health"] = (HEALTH, None)
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in cases}
    for i in range(args.repeats):
        order = list(cases) if i % 2 == 0 else list(reversed(cases))
        for name in order:
            results[name].append(measure(cases[name][0], table, cases[name][1]))
            print(
                f"repeat {i} {name:<8} wall {results[name][-1][0]:6.2f}s cpu {results[name][-1][1]:6.2f}s "
                f"peak {results[name][-1][2]:6.0f} MiB",
                flush=True,
            )
    med = {k: tuple(statistics.median(r[j] for r in v) for j in range(3)) for k, v in results.items()}
    print(f"{args.files:,} files in {args.partitions:,} partitions, median of {args.repeats}")
    print(f"{'case':<10} {'wall s':>8} {'CPU s':>8} {'peak MiB':>10} {'CPU/floor':>10} {'peak/floor':>11}")
    _, fc, fm = med["floor"]
    for k, (w, c, m) in med.items():
        print(f"{k:<10} {w:>8.2f} {c:>8.2f} {m:>10.0f} {c / fc:>10.2f} {m / fm:>11.2f}")


if __name__ == "__main__":
    main()
