"""Benchmark: the cost of keeping row ids in the Arrow rewrite (materialized row tracking columns).

Not a test; asserts nothing. Writes --files Parquet files of --rows rows each (pyarrow, 4 columns,
half the files with the hidden row id / commit version columns partly materialized, as delta-spark
leaves them after an UPDATE), then times ``rewrite_files`` of all of them into one file, without
and with the row tracking spec, alternating over --repeats runs, and prints the medians and the ratio.

    .venv/bin/python bench/row_tracking_rewrite.py [--files 20] [--rows 200000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq
from dbt_delta_optimize.engine.rewrite import rewrite_files

ROW_ID, VERSION = "_row-id-col-bench", "_row-commit-version-col-bench"
FIELDS = [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "x", "type": "double", "nullable": True, "metadata": {}},
    {"name": "s", "type": "string", "nullable": True, "metadata": {}},
    {"name": "d", "type": "date", "nullable": True, "metadata": {}},
]


def _inputs(folder: str, files: int, rows: int) -> list[str]:
    paths = []
    for i in range(files):
        ids = pa.array(range(i * rows, (i + 1) * rows), pa.int64())
        cols = {
            "id": ids,
            "x": pa.array([v * 0.5 for v in range(rows)]),
            "s": pa.array([f"v{v % 1000}" for v in range(rows)]),
            "d": pa.array([v % 20000 for v in range(rows)], pa.int32()).cast(pa.date32()),
        }
        if i % 2:
            cols[ROW_ID] = pa.array([v if v % 3 == 0 else None for v in range(rows)], pa.int64())
            cols[VERSION] = pa.array([7 if v % 3 == 0 else None for v in range(rows)], pa.int64())
        path = os.path.join(folder, f"in-{i}.parquet")
        pq.write_table(pa.table(cols), path)
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddo-rt-bench-") as folder:
        inputs = _inputs(folder, args.files, args.rows)
        spec = {"row_id": ROW_ID, "commit_version": VERSION, "files": [[i * 10**9, i] for i in range(args.files)]}
        times: dict[str, list[float]] = {"plain": [], "row tracking": []}
        for r in range(args.repeats):
            for name, rt in (("plain", None), ("row tracking", spec)):
                out = os.path.join(folder, f"out-{r}-{name.replace(' ', '-')}.parquet")
                start = time.perf_counter()
                rewrite_files(inputs, out, FIELDS, row_tracking=rt)
                times[name].append(time.perf_counter() - start)
                os.unlink(out)
        plain, tracked = (statistics.median(times[k]) for k in ("plain", "row tracking"))
        total = args.files * args.rows
        print(f"{args.files} files x {args.rows} rows ({total} rows), median of {args.repeats}:")
        print(f"  Arrow rewrite, plain:        {plain:.3f} s")
        print(f"  Arrow rewrite, row tracking: {tracked:.3f} s")
        print(f"  ratio row tracking / plain:  {tracked / plain:.2f}x")


if __name__ == "__main__":
    main()
