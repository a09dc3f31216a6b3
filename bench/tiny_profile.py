"""Profile: what reading and writing one partition of small files costs in pyarrow alone (issue 36).

Not a test and not part of ``make bench``: the measures behind docs/performance.md's "Tiny files"
section. For one partition folder of a table (e.g. one that ``bench/run.py`` builds), it prints the
process CPU time (best of ``--repeats``, so Arrow's own threads count) of: reading each file the way
a bin does (whole file in memory, ``ParquetFile`` + ``read_row_group``), parsing only the footers, one
``pyarrow.dataset`` scan over the same files (one thread, Arrow's pool, a column as dictionary), and
writing the rows with the writer options a bin could choose.

    .venv/bin/python bench/tiny_profile.py /path/to/table/part=0 --columns id,payload,score,label,day
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import time
from collections.abc import Callable
from typing import Any


def best_cpu(label: str, fn: Callable[[], Any], repeats: int, files: int) -> Any:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        out = fn()
        best = min(best, time.process_time() - start)
    print(f"{label:55s} {best * 1000:8.1f} ms CPU  {best * 1e6 / files:7.1f} us/file", flush=True)
    return out


def main() -> int:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="one partition folder of small Parquet files")
    ap.add_argument("--columns", required=True, help="comma list of the columns the table uses")
    ap.add_argument("--dictionary", default="", help="comma list of columns to dictionary-encode (bins' choice)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.folder, "*.parquet")))
    cols = args.columns.split(",")
    dictionary = [c for c in args.dictionary.split(",") if c]
    n, r = len(files), args.repeats

    def per_file() -> Any:
        out = []
        for f in files:
            with open(f, "rb") as fh:
                pf = pq.ParquetFile(pa.BufferReader(fh.read()), coerce_int96_timestamp_unit="us")
            out.extend(pf.read_row_group(i, columns=cols, use_threads=False) for i in range(pf.num_row_groups))
        return pa.concat_tables(out)

    def footers() -> None:
        for f in files:
            with open(f, "rb") as fh:
                pq.ParquetFile(pa.BufferReader(fh.read()), coerce_int96_timestamp_unit="us")

    def scan(threads: bool, as_dictionary: list[str]) -> Callable[[], Any]:
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=as_dictionary))
        return lambda: ds.dataset(files, format=fmt).to_table(columns=cols, use_threads=threads)

    table = best_cpu("read each file (ParquetFile + read_row_group)", per_file, r, n)
    best_cpu("open each file and parse its footer only", footers, r, n)
    best_cpu("one dataset scan, 1 thread", scan(False, []), r, n)
    best_cpu("one dataset scan, Arrow's thread pool", scan(True, []), r, n)
    if dictionary:
        best_cpu(f"one dataset scan, {dictionary} as dictionary", scan(False, dictionary), r, n)
    joined = table.combine_chunks()
    print(f"{table.num_rows} rows, {table.nbytes / 1e6:.1f} MB in Arrow, {len(files)} files")

    def write(data: Any, **kw: Any) -> Callable[[], int]:
        def go() -> int:
            buf = io.BytesIO()
            pq.write_table(data, buf, coerce_timestamps="us", row_group_size=max(1, data.num_rows), **kw)
            return len(buf.getvalue())

        return go

    for label, data, kw in [
        ("write snappy, dictionary on every column", joined, {"compression": "snappy"}),
        (
            "write snappy, dictionary as chosen, joined chunks",
            joined,
            {"compression": "snappy", "use_dictionary": dictionary},
        ),
        (
            "write snappy, dictionary as chosen, chunk per file",
            table,
            {"compression": "snappy", "use_dictionary": dictionary},
        ),
        ("write snappy, no dictionary", joined, {"compression": "snappy", "use_dictionary": False}),
        (
            "write snappy, 4 MB pages",
            joined,
            {"compression": "snappy", "use_dictionary": dictionary, "data_page_size": 4 << 20},
        ),
        ("write zstd level 1", joined, {"compression": "zstd", "compression_level": 1, "use_dictionary": dictionary}),
        ("write uncompressed", joined, {"compression": None, "use_dictionary": dictionary}),
    ]:
        size = best_cpu(label, write(data, **kw), r, n)
        print(f"{'':55s} {size / 1e6:8.2f} MB written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
