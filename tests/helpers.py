"""Test helpers: read a table back through both reference engines and compare row for row."""

from __future__ import annotations

import datetime
import decimal
import html
import json
import os
import re
import shutil
import subprocess
from typing import Any


def _norm(v: Any) -> Any:
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def _key(row: tuple) -> tuple:
    return tuple((x is None, repr(x)) for x in row)


def rows_spark(spark, path: str, columns: list[str] | None = None) -> list[tuple]:
    df = spark.read.format("delta").load(path)
    cols = columns or sorted(df.columns)
    return sorted((tuple(_norm(r[c]) for c in cols) for r in df.select(*cols).collect()), key=_key)


def deltalake_table(
    path: str,
    *,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
    columns: list[str] | None = None,
    file_pruning_predicate: str | None = None,
) -> Any:
    """The table as deltalake reads it, as a pyarrow Table, through a path that never aborts the process at exit.

    ``DeltaTable.to_pyarrow_table()`` scans through a Python filesystem (``DeltaStorageHandler``): Arrow's
    I/O threads hold Python buffers after the scan returns and abort the interpreter's teardown now and then
    (delta-io/delta-rs#2184, apache/arrow#34314). So a local table is read by the same pyarrow dataset
    (deltalake's fragments, schema and casts: what pandas and polars read) over pyarrow's native local
    filesystem, single-threaded; a table that dataset refuses (deletion vectors, column mapping, V2
    checkpoints ...) or one on an object store is read by deltalake's own DataFusion scan (Rust threads only). ``file_pruning_predicate``
    (deltalake's SQL syntax, on partition columns) leaves whole files out, unread.
    """
    import pyarrow.fs as pafs
    from deltalake import DeltaTable
    from deltalake.table import SUPPORTED_READER_FEATURES  # what its pyarrow dataset reads

    dt = DeltaTable(path, version=version, storage_options=storage_options)
    local = "://" not in path or path.startswith("file:")
    if local and set(dt.protocol().reader_features or ()) <= SUPPORTED_READER_FEATURES:
        root = path.removeprefix("file://") if path.startswith("file://") else path
        filesystem = pafs.SubTreeFileSystem(os.path.abspath(root), pafs.LocalFileSystem())
        dataset = dt.to_pyarrow_dataset(filesystem=filesystem, file_pruning_predicate=file_pruning_predicate)
        table = dataset.to_table(columns=columns, use_threads=False)
        del dataset
        return table
    import pyarrow as pa

    return pa.RecordBatchReader.from_stream(dt.scan(columns=columns, predicate=file_pruning_predicate)).read_all()


def rows_deltars(path: str, columns: list[str] | None = None) -> list[tuple]:
    t = deltalake_table(path)
    cols = columns or sorted(t.column_names)
    data = t.select(cols).to_pylist()
    return sorted((tuple(_norm(r[c]) for c in cols) for r in data), key=_key)


def assert_same_rows(spark, path: str, expected: list[tuple], columns: list[str] | None = None) -> None:
    """Both engines must read exactly ``expected`` (as from rows_spark before the change)."""
    got_spark = rows_spark(spark, path, columns)
    assert got_spark == expected, "delta-spark reads different rows"
    got_rs = rows_deltars(path, columns)
    assert got_rs == expected, "delta-rs reads different rows"


def log_versions(path: str) -> list[int]:
    return sorted(
        int(n[:20]) for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".json") and n[:20].isdigit()
    )


def log_snapshot(path: str) -> dict[str, bytes]:
    """Every file under _delta_log with its bytes: compare before/after to prove nothing was written."""
    d = os.path.join(path, "_delta_log")
    out = {}
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        if os.path.isfile(p):
            with open(p, "rb") as fh:
                out[n] = fh.read()
    return out


def tasks_the_scheduler_runs(spark) -> int:
    """Tasks Spark's task scheduler counts as running (its own books, not the status listener's)."""
    running = spark.sparkContext._jsc.sc().taskScheduler().runningTasksByExecutors().values().iterator()
    total = 0
    while running.hasNext():
        total += int(running.next())
    return total


def data_files(path: str) -> set[str]:
    """Every file in the table directory outside _delta_log (relative paths)."""
    out = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for f in files:
            out.add(os.path.relpath(os.path.join(root, f), path))
    return out


def arrow_rewrite(inputs, output: str, fields: list[dict], *, row_tracking=None, by_id: bool = False, copy_min_bytes=0):
    """Run one Arrow bin task on local files (what an executor runs), returning its outcome.

    ``inputs``: paths, ``InputFile`` messages (row tracking's baseRowId/defaultRowCommitVersion, deletion
    vectors), or ``{"path", "deletionVector"}`` as logged.
    """
    from dbt_delta_optimize.delta.storage import LocalStorage
    from dbt_delta_optimize.tasks.bin_task import run_bin
    from dbt_delta_optimize.tasks.messages import BinTask, InputFile, StatsSpec, StoreRef

    def message(f):
        if isinstance(f, InputFile):
            return f
        if isinstance(f, dict):
            return InputFile(f["path"], os.path.getsize(f["path"]), f.get("deletionVector"))
        return InputFile(f, os.path.getsize(f))

    schema = {"type": "struct", "fields": list(fields)}
    task = BinTask(
        bin_id=0,
        store=StoreRef(os.path.dirname(output), {}),
        inputs=tuple(message(f) for f in inputs),
        output=output,
        fields=tuple(fields),
        compression="snappy",
        by_id=by_id,
        row_tracking=row_tracking,
        stats=StatsSpec(schema, (), {}, None, "UTC"),
        copy_min_bytes=copy_min_bytes,
    )
    return run_bin(task, LocalStorage(), local=True)


def rewrite_files(inputs, output: str, fields: list[dict], *, row_tracking=None, copy_min_bytes=0, copy_report=None):
    """The rows one Arrow bin task writes (tests of the row-group copy): its copy report goes to ``copy_report``.

    ``row_tracking``: ``{"row_id", "commit_version", "files": [[baseRowId, defaultRowCommitVersion], ...]}``.
    A bin Arrow cannot write raises ``NeedsSparkRewrite``; a failed one ``RuntimeError``.
    """
    from types import SimpleNamespace

    from dbt_delta_optimize.tasks.arrow_schema import NeedsSparkRewrite
    from dbt_delta_optimize.tasks.messages import Fallback, InputFile, Rewritten, RowTrackingColumns
    from dbt_delta_optimize.tasks.parquet_copy import Reason

    columns = None
    if row_tracking is not None:
        columns = RowTrackingColumns(row_tracking["row_id"], row_tracking["commit_version"])
        inputs = [InputFile(p, os.path.getsize(p), None, b, v) for p, (b, v) in zip(inputs, row_tracking["files"])]
    outcome = arrow_rewrite(inputs, output, fields, row_tracking=columns, copy_min_bytes=copy_min_bytes)
    if isinstance(outcome, Fallback):
        raise NeedsSparkRewrite(outcome.reason)
    if not isinstance(outcome, Rewritten):
        raise RuntimeError(outcome)
    if copy_report is not None and outcome.copy is not None:
        c = outcome.copy
        reasons = [Reason(kind, detail) for kind, detail in c.reasons]
        copy_report.append(
            SimpleNamespace(
                row_groups_copied=c.row_groups_copied,
                row_groups_reencoded=c.row_groups_reencoded,
                fallback=reasons[0] if c.fallback else None,
                reencoded_because=[] if c.fallback else reasons,
            )
        )
    return outcome.rows


def chromium() -> str:
    """The headless browser of the page tests (``make test`` installs it); a failure, never a skip, without it."""
    import pytest

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("chromium is missing: run `make test` (its browser target installs it)")
    return found


def browser_probe(page: str, script: str, tmp: str) -> Any:
    """What ``script`` (a JavaScript expression) evaluates to in a real headless browser, once ``page`` is laid out."""
    with open(page, encoding="utf-8") as fh:
        text = fh.read()
    probe = f"<script>document.body.setAttribute('data-probe', JSON.stringify({script}))</script>"
    probed = os.path.join(tmp, "probed-" + os.path.basename(page))
    with open(probed, "w", encoding="utf-8") as fh:
        fh.write(text.replace("</body>", probe + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom"]
    dom = subprocess.run([chromium(), *flags, f"file://{probed}"], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    raw = re.search(r'data-probe="([^"]*)"', dom.stdout)
    assert raw, dom.stdout[:2000]
    return json.loads(html.unescape(raw.group(1)))
