"""The least pyarrow can do for a compaction, on this machine's cores (issue 36's floors).

Not a test and not part of ``make bench``: the measure behind docs/performance.md's "Floors" section.
Each partition folder of a table is one job: every file read whole into memory, opened with
``ParquetFile`` and its row groups read (what a bin does), the rows joined and written as one snappy
file without dictionaries. The jobs run in worker processes started before timing (no interpreter lock
between them). There is no log, no plan, no Delta statistics, no validation and no commit, so a
compaction that writes a Delta table cannot be faster than this.

    .venv/bin/python bench/floor.py /path/to/table --processes 2 --repeats 5
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time


def _warm() -> None:
    import pyarrow.parquet  # noqa: F401 - the workers pay their imports before timing


def compact_folder(job: tuple[str, str]) -> int:
    """One partition's files read and written as one file; the number of files read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, out = job
    tables = []
    files = sorted(glob.glob(os.path.join(folder, "*.parquet")))
    for path in files:
        with open(path, "rb") as fh:
            pf = pq.ParquetFile(pa.BufferReader(fh.read()))
        tables.extend(pf.read_row_group(i, use_threads=False) for i in range(pf.num_row_groups))
    if tables:
        pq.write_table(pa.concat_tables(tables).combine_chunks(), out, compression="snappy", use_dictionary=False)
    return len(files)


def jobs(table: str, out: str) -> list[tuple[str, str]]:
    folders = sorted(d for d in glob.glob(os.path.join(table, "*=*")) if os.path.isdir(d)) or [table]
    return [(d, os.path.join(out, f"{i}.parquet")) for i, d in enumerate(folders)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", help="Delta table folders (partitioned or not)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    pool = multiprocessing.get_context("spawn").Pool(args.processes, initializer=_warm)
    out = tempfile.mkdtemp(prefix="ddo-floor-")
    try:
        for table in args.tables:
            times, files = [], 0
            for r in range(args.repeats + 1):  # the first round warms the page cache and the workers
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                start = time.perf_counter()
                files = sum(pool.map(compact_folder, jobs(table, out), chunksize=1))
                if r:
                    times.append(time.perf_counter() - start)
            print(
                f"{table}: {files} files, {args.processes} processes, median {statistics.median(times):.3f}s "
                f"(runs {', '.join(f'{t:.3f}' for t in times)})",
                flush=True,
            )
    finally:
        pool.close()
        pool.join()
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
