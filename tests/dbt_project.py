"""Driving integration_tests/ through real dbt, on any target, and comparing rows across engines.

Shared by the session, Thrift and Spark Connect runs of the project: one long-lived dbt process per
project that runs its commands in turn (tests/dbt_worker.py: on method session they share one Spark JVM
instead of starting one per command; ``DDO_DBT_SUBPROCESS=1`` runs a ``dbt`` subprocess per command as
before), the results file of the latest invocation, and row-for-row comparison of a table as deltalake
(delta-rs) reads it with what delta-spark reads (an embedded session or the server's own).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import select
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

from deltalake import DeltaTable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = os.path.join(ROOT, "integration_tests")
DBT = os.path.join(os.path.dirname(sys.executable), "dbt")
WORKER = os.path.join(ROOT, "tests", "dbt_worker.py")
TIMEOUT = 900  # seconds for one dbt command


class DbtWorker:
    """A tests/dbt_worker.py process: dbt commands run one after another in one interpreter (and one JVM)."""

    live: ClassVar[list[DbtWorker]] = []  # closed at the end of the test session at the latest (tests/conftest.py)

    def __init__(self, env: Mapping[str, str], work: Path) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)  # each command's output is a file here (dbt creates it too)
        req_r, self._requests = os.pipe()
        self._replies, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, str(req_r), str(rep_w)],
            cwd=PROJECT,
            env=dict(env),
            pass_fds=(req_r, rep_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(req_r)
        os.close(rep_w)
        self._buffer = b""
        self.closed = False
        DbtWorker.live.append(self)

    def run(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
        fd, out = tempfile.mkstemp(prefix="dbt-", suffix=".log", dir=self.work)
        os.close(fd)
        os.write(self._requests, (json.dumps({"args": list(cmd), "out": out}) + "\n").encode())
        rc = int(json.loads(self._reply())["rc"])
        text = Path(out).read_text(errors="replace")
        os.unlink(out)
        return subprocess.CompletedProcess(["dbt", *cmd], rc, text, "")

    def _reply(self) -> str:
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._replies], [], [], TIMEOUT)
            chunk = os.read(self._replies, 4096) if ready else b""
            if not chunk:
                self.close()
                raise RuntimeError("the dbt worker died or timed out" if ready else "dbt command timed out")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        """EOF ends the worker's loop; its JVM stops with it (joined, or killed after a minute). Idempotent:
        a second call must not close descriptor numbers that the process has handed out again since."""
        if self.closed:
            return
        self.closed = True
        if self in DbtWorker.live:
            DbtWorker.live.remove(self)
        os.close(self._requests)
        os.close(self._replies)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @classmethod
    def close_all(cls) -> None:
        for worker in list(cls.live):
            worker.close()


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
        self._worker: DbtWorker | None = None

    def _run(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if args and args[0] not in ("deps", "clean"):
            cmd += ["--target", self.target]
        if os.environ.get("DDO_DBT_SUBPROCESS"):
            return subprocess.run(
                [DBT, *cmd], cwd=PROJECT, env=self.env, capture_output=True, text=True, timeout=TIMEOUT
            )
        if self._worker is None:
            self._worker = DbtWorker(self.env, self.work)
            weakref.finalize(self, self._worker.close)  # a project dropped without close() stops its worker too
        return self._worker.run(cmd)

    def close(self) -> None:
        """Stops the project's dbt process (and with it, on method session, its Spark JVM)."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None

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
