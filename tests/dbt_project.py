"""Driving integration_tests/ through real dbt, on any target, and comparing rows across engines.

Shared by the session, Thrift and Spark Connect runs of the project: one dbt subprocess per command,
the results file of the latest invocation, and row-for-row comparison of a table as deltalake
(delta-rs) reads it with what delta-spark reads (an embedded session or the server's own).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "integration_tests")
DBT = os.path.join(os.path.dirname(sys.executable), "dbt")


class DbtProject:
    """integration_tests/ run with ``target`` and its outputs (target path, logs) under ``work``."""

    def __init__(self, work: Path, target: str, env: Mapping[str, str]) -> None:
        self.work = work
        self.target = target
        e = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE",)}
        e.update(
            DBT_PROFILES_DIR=PROJECT,
            DBT_TARGET_PATH=str(work / "target"),
            DBT_LOG_PATH=str(work / "logs"),
            DBT_SEND_ANONYMOUS_USAGE_STATS="false",
            PYSPARK_PYTHON=sys.executable,
        )
        e.update(env)
        e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
        self.env = e

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        cmd = [DBT, *args]
        if args and args[0] not in ("deps", "clean"):
            cmd += ["--target", self.target]
        return subprocess.run(cmd, cwd=PROJECT, env=self.env, capture_output=True, text=True, timeout=900)

    def __call__(self, *args: str) -> str:
        proc = self._run(args)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"dbt {' '.join(args)} failed:\n{out[-5000:]}"
        return out

    def fails(self, *args: str) -> str:
        proc = self._run(args)
        assert proc.returncode != 0, f"dbt {' '.join(args)} should have failed"
        return proc.stdout + proc.stderr

    def results(self, target: str = "target") -> list[dict[str, Any]]:
        """The results file: the records of the latest invocation that wrote one, all of that invocation."""
        path = self.work / target / "delta_optimize_results.json"
        records = json.loads(path.read_text()) if path.exists() else []
        assert len({r["invocation_id"] for r in records}) <= 1, "records of an earlier invocation were kept"
        return records

    def by_table(self, target: str = "target") -> dict[str, dict[str, Any]]:
        return {r["table"]: r for r in self.results(target)}

    def invocation_id(self) -> str:
        return str(json.loads((self.work / "target" / "run_results.json").read_text())["metadata"]["invocation_id"])


def session_project(work: Path) -> DbtProject:
    """integration_tests/ on dbt-spark ``method: session`` (an embedded Spark with Delta), state under ``work``."""
    from dbt_delta_optimize.engine.session import delta_jars

    jars = delta_jars()
    assert jars, "Delta's jars are missing: run `make setup`"
    env = {
        "DBT_DELTA_OPTIMIZE_JARS": ",".join(jars),
        "DBT_DELTA_OPTIMIZE_WAREHOUSE": str(work / "wh"),
        "DBT_DELTA_OPTIMIZE_METASTORE": str(work / "metastore_db"),
    }
    project = DbtProject(work, "session", env)
    project("deps")
    return project


def seed_rows() -> list[dict[str, str]]:
    import csv

    with open(os.path.join(PROJECT, "seeds", "raw_events.csv"), newline="") as fh:
        return list(csv.DictReader(fh))


def merged_rows(seeds: Sequence[Mapping[str, str]], *, changed: int, others: int) -> list[tuple[Any, ...]]:
    """events_merge's rows: every third row carries the batch that last changed it (``changed``)."""
    rows = []
    for s in seeds:
        i, b = int(s["id"]), changed if int(s["id"]) % 3 == 0 else others
        rows.append((i, int(s["user_id"]), float(s["amount"]) + (b if i % 3 == 0 else 0), b))
    return normalized(rows)


def optimize_commits(path: str) -> list[dict[str, Any]]:
    return [h for h in DeltaTable(path).history() if h["operation"] == "OPTIMIZE"]


def files_per_partition(path: str) -> dict[Any, int]:
    import pyarrow as pa

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    out: dict[Any, int] = {}
    for k in (k for k in actions if k.startswith("partition.")):
        for v in actions[k]:
            out[v] = out.get(v, 0) + 1
    return out or {None: len(actions["path"])}


# ----------------------------------------------------------------------------- rows across engines
def _norm(value: Any) -> Any:
    """One comparable form for a value as deltalake, PySpark or PyHive return it (timestamps in UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == " ":
        try:
            return dt.datetime.fromisoformat(value).isoformat(sep=" ")
        except ValueError:
            return value
    if isinstance(value, (float, Decimal)):
        return round(float(value), 9)
    return value


def normalized(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_norm(v) for v in row) for row in rows), key=repr)


def deltalake_rows(path: str, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """The table's rows as delta-rs reads them (its SQL engine applies deletion vectors), in ``columns`` order."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all())
    names = list(columns or table.column_names)
    data = table.select(names).to_pydict()
    return normalized(zip(*(data[n] for n in names)))


def columns_of(path: str) -> list[str]:
    return [f.name for f in DeltaTable(path).schema().fields]


def spark_rows(spark: Any, path: str, columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """The table's rows as delta-spark reads them (timestamps formatted in the session's UTC, not Python's zone)."""
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(path)
    kinds = dict(frame.dtypes)
    names = list(columns or frame.columns)
    cols = [
        F.date_format(F.col(f"`{n}`"), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(n)
        if kinds[n].startswith("timestamp")
        else F.col(f"`{n}`")
        for n in names
    ]
    return normalized(tuple(r) for r in frame.select(*cols).collect())
