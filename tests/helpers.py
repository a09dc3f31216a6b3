"""Test helpers: read a table back through both reference engines and compare row for row."""

from __future__ import annotations

import datetime
import decimal
import os
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


def rows_deltars(path: str, columns: list[str] | None = None) -> list[tuple]:
    from deltalake import DeltaTable

    t = DeltaTable(path).to_pyarrow_table()
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


def data_files(path: str) -> set[str]:
    """Every file in the table directory outside _delta_log (relative paths)."""
    out = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for f in files:
            out.add(os.path.relpath(os.path.join(root, f), path))
    return out


def arrow_rewrite(inputs, output: str, fields: list[dict], *, row_tracking=None, by_id: bool = False):
    """Run one Arrow bin task on local files (what an executor runs), returning its outcome.

    ``inputs``: paths, or ``InputFile`` messages (for row tracking's baseRowId/defaultRowCommitVersion).
    """
    from dbt_delta_optimize.delta.storage import LocalStorage
    from dbt_delta_optimize.tasks.bin_task import run_bin
    from dbt_delta_optimize.tasks.messages import BinTask, InputFile, StatsSpec, StoreRef

    files = tuple(f if isinstance(f, InputFile) else InputFile(f, os.path.getsize(f)) for f in inputs)
    schema = {"type": "struct", "fields": list(fields)}
    task = BinTask(
        bin_id=0,
        store=StoreRef(os.path.dirname(output), {}),
        inputs=files,
        output=output,
        fields=tuple(fields),
        compression="snappy",
        by_id=by_id,
        row_tracking=row_tracking,
        stats=StatsSpec(schema, (), {}, None, "UTC"),
    )
    return run_bin(task, LocalStorage(), local=True)
