"""Benchmark: how long auto compaction takes to decide NOT to compact, on a 10,000-file table.

Not a test; asserts nothing. Auto compaction runs after every write, so a skip must be cheap and
must never start Spark. This builds a table of 10,000 tiny real Parquet files (written by
pyarrow) by hand: 100 commits x 100 files over 50 partitions, with per-file stats
(numRecords/min/max/nullCount) and a checkpoint at version 99 (``DeltaTable.create_checkpoint``).

- versions 0..98 add 100 files each, round-robin over partitions p00..p46 (about 210 files each);
- version 99 (the trigger) adds 100 files to p47, p48, p49 (34/33/33 files: < minNumFiles=50);
- version 100 is an OPTIMIZE commit (compacts p47), added after the first two paths are timed,
  for the skipOwnCommit path.

Then, in this process (pyspark is never imported), it times ``auto_compact(None, path,
since_version=...)`` over --repeats calls for three skip paths and prints median / p95 / max ms:

- skipInsufficientFiles: ``since_version=98, enabled=True`` (the write at v99, default minNumFiles=50);
- disabled: ``since_version=98`` with no auto-compact property or conf;
- skipOwnCommit: ``since_version=99, enabled=True`` (the trigger is the OPTIMIZE at v100).

    .venv/bin/python bench/autocompact_skip.py [--repeats 20] [--path DIR] [--keep]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

COMMITS = 100
FILES_PER_COMMIT = 100
PARTITIONS = 50
OLD_PARTITIONS = 47  # p00..p46 take versions 0..98; p47..p49 only the trigger at v99
ROWS_PER_FILE = 4

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "string", "nullable": True, "metadata": {}},
        {"name": "part", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def _parquet(first_id: int) -> tuple[bytes, dict]:
    """One tiny real Parquet file (id, value) and its Delta stats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = list(range(first_id, first_id + ROWS_PER_FILE))
    values = [f"v{i}" for i in ids]
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "value": values}), buf, compression="snappy")
    stats = {
        "numRecords": ROWS_PER_FILE,
        "minValues": {"id": ids[0], "value": min(values)},
        "maxValues": {"id": ids[-1], "value": max(values)},
        "nullCount": {"id": 0, "value": 0},
    }
    return buf.getvalue(), stats


def _write_commit(log_dir: str, version: int, actions: list[dict]) -> None:
    with open(os.path.join(log_dir, f"{version:020d}.json"), "w") as fh:
        fh.write("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))


def build(path: str) -> dict:
    """Write the table; returns a summary (files, versions, build seconds)."""
    t0 = time.perf_counter()
    log_dir = os.path.join(path, "_delta_log")
    os.makedirs(log_dir)
    # One real Parquet payload per partition, copied into each of its files (the content is never
    # read by a skip decision; sizes in the log are the real sizes).
    payloads = {f"p{i:02d}": _parquet(i * 1000) for i in range(PARTITIONS)}
    for part in payloads:
        os.makedirs(os.path.join(path, f"part={part}"))
    now = int(time.time() * 1000)
    live: dict[str, list[dict]] = {}
    n_files = 0
    for v in range(COMMITS):
        if v < COMMITS - 1:
            parts = [f"p{(v * FILES_PER_COMMIT + k) % OLD_PARTITIONS:02d}" for k in range(FILES_PER_COMMIT)]
        else:
            parts = [f"p{OLD_PARTITIONS + k % (PARTITIONS - OLD_PARTITIONS):02d}" for k in range(FILES_PER_COMMIT)]
        actions: list[dict] = [
            {
                "commitInfo": {
                    "timestamp": now + v,
                    "operation": "WRITE",
                    "operationParameters": {"mode": "Append", "partitionBy": json.dumps(["part"])},
                    "isBlindAppend": True,
                    "engineInfo": "bench/autocompact_skip.py",
                }
            }
        ]
        if v == 0:
            actions.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
            actions.append(
                {
                    "metaData": {
                        "id": str(uuid.uuid4()),
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": json.dumps(SCHEMA),
                        "partitionColumns": ["part"],
                        "configuration": {},
                        "createdTime": now,
                    }
                }
            )
        for part in parts:
            data, stats = payloads[part]
            rel = f"part={part}/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
            with open(os.path.join(path, rel), "wb") as fh:
                fh.write(data)
            add = {
                "path": rel,
                "partitionValues": {"part": part},
                "size": len(data),
                "modificationTime": now + v,
                "dataChange": True,
                "stats": json.dumps(stats, separators=(",", ":")),
            }
            live.setdefault(part, []).append(add)
            actions.append({"add": add})
            n_files += 1
        _write_commit(log_dir, v, actions)

    from deltalake import DeltaTable

    DeltaTable(path).create_checkpoint()  # at version 99
    return {"live_files": n_files, "versions": COMMITS, "build_s": round(time.perf_counter() - t0, 1), "live": live}


def add_optimize_commit(path: str, live: dict[str, list[dict]]) -> None:
    """Version 100: an OPTIMIZE commit (the shape ours writes) compacting p47 into one file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    victims = live["p47"]
    rows = ROWS_PER_FILE * len(victims)
    rel = f"part=p47/part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    ids = [i for _ in victims for i in range(47000, 47000 + ROWS_PER_FILE)]
    pq.write_table(
        pa.table({"id": pa.array(ids, pa.int64()), "value": [f"v{i}" for i in ids]}), os.path.join(path, rel)
    )
    size = os.path.getsize(os.path.join(path, rel))
    stats = {
        "numRecords": rows,
        "minValues": {"id": min(ids), "value": "v47000"},
        "maxValues": {"id": max(ids), "value": "v47003"},
        "nullCount": {"id": 0, "value": 0},
    }
    ts = int(time.time() * 1000)
    actions = [
        {
            "commitInfo": {
                "timestamp": ts,
                "operation": "OPTIMIZE",
                "operationParameters": {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": True},
                "isBlindAppend": False,
            }
        },
        {
            "add": {
                "path": rel,
                "partitionValues": {"part": "p47"},
                "size": size,
                "modificationTime": ts,
                "dataChange": False,
                "stats": json.dumps(stats),
            }
        },
    ]
    for a in victims:
        actions.append(
            {
                "remove": {
                    "path": a["path"],
                    "deletionTimestamp": ts,
                    "dataChange": False,
                    "extendedFileMetadata": True,
                    "partitionValues": a["partitionValues"],
                    "size": a["size"],
                }
            }
        )
    _write_commit(os.path.join(path, "_delta_log"), COMMITS, actions)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, round(q * (len(xs) - 1))))
    return xs[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--path", help="build the table here (must not exist); default: a temp dir")
    ap.add_argument("--keep", action="store_true", help="keep the table")
    args = ap.parse_args()

    tmp = None
    if args.path:
        path = args.path
    else:
        tmp = tempfile.mkdtemp(prefix="ac-skip-bench-")
        path = os.path.join(tmp, "t")
    try:
        summary = build(path)
        live = summary.pop("live")
        print(f"table {path}: {summary}, checkpoint at version {COMMITS - 1}")

        t0 = time.perf_counter()
        from dbt_delta_optimize.api import auto_compact

        import_ms = (time.perf_counter() - t0) * 1000
        cases = [
            ("skipInsufficientFiles", dict(since_version=COMMITS - 2, enabled=True)),
            ("disabled", dict(since_version=COMMITS - 2)),
            ("skipOwnCommit", dict(since_version=COMMITS - 1, enabled=True)),
        ]
        first = None
        print(f"import dbt_delta_optimize.plan.autocompact: {import_ms:.0f} ms")
        print(
            f"{'path':<24}{'status':<24}{'first ms':>9}{'median ms':>11}{'p95 ms':>9}{'max ms':>9}  (n={args.repeats}, wall clock per call)"
        )
        for name, kw in cases:
            if name == "skipOwnCommit":
                add_optimize_commit(path, live)
            times, status, reason = [], None, ""
            for i in range(args.repeats + 1):
                t = time.perf_counter()
                r = auto_compact(None, path, **kw)
                ms = (time.perf_counter() - t) * 1000
                status, reason = r.status, r.reason
                if i == 0:
                    first = ms
                else:
                    times.append(ms)
            print(
                f"{name:<24}{status:<24}{first:>9.1f}{statistics.median(times):>11.1f}{_pct(times, 0.95):>9.1f}{max(times):>9.1f}"
            )
            if status != name:
                print(f"  !! expected {name}, got {status}: {reason}")
            else:
                print(f"  {reason}")
        print(f"pyspark imported: {'pyspark' in sys.modules}")
    finally:
        if tmp and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif args.keep:
            print(f"kept {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
