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
from collections.abc import Callable, Iterable, Mapping, Sequence
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
        if args and args[0] not in ("deps", "clean", "retry"):  # retry takes the failed invocation's target
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


# ----------------------------------------------------------------------------- every commit of a run reaches the hook
#: integration_tests/models/matrix and snapshots/matrix (built with --vars '{ddo_matrix: true}', schema ddo_it_mx):
#: a table created by the run, microbatch with and without the pre-hook, append, merge, insert_overwrite, a snapshot.
MATRIX = ("mx_events", "mx_micro", "mx_micro_nopre", "mx_append", "mx_merge", "mx_overwrite", "mx_snapshot")
PartitionKey = tuple[tuple[str, Any], ...]


def _key(values: Mapping[str, Any] | None) -> PartitionKey:
    return tuple(sorted((k, None if v is None else str(v)) for k, v in (values or {}).items()))


def partition_files(path: str, version: int | None = None) -> dict[PartitionKey, int]:
    """Live files per partition (``()`` for an unpartitioned table) at ``version`` (default: the latest)."""
    import pyarrow as pa

    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    cols = sorted(k for k in actions if k.startswith("partition."))
    out: dict[PartitionKey, int] = {}
    for i in range(len(actions["path"])):
        key = _key({c[len("partition.") :]: actions[c][i] for c in cols})
        out[key] = out.get(key, 0) + 1
    return out


def _commit(path: str, version: int) -> list[dict[str, Any]]:
    with open(os.path.join(path, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def rows_at(path: str, version: int | None = None) -> list[tuple[Any, ...]]:
    import pyarrow as pa
    from deltalake import QueryBuilder

    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    data = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    names = sorted(data.column_names)
    return normalized(zip(*(data.column(n).to_pylist() for n in names)))


def check_run(path: str, before: int, record: Mapping[str, Any]) -> set[PartitionKey]:
    """The run that committed after version ``before`` (-1: it created the table), then its post-hook: every
    partition the run wrote that held >= 2 files after its last write is compacted to one file, no other
    partition changed, the rows are those of its last write, and the results entry lists the run's commits
    and the partitions compacted. Returns the partitions that qualified."""
    latest = DeltaTable(path).version()
    commits = {v: _commit(path, v) for v in range(before + 1, latest + 1)}
    ops = {v: next(a["commitInfo"] for a in acts if "commitInfo" in a)["operation"] for v, acts in commits.items()}
    data = [v for v, op in ops.items() if op != "OPTIMIZE"]
    optimize = [v for v, op in ops.items() if op == "OPTIMIZE"]
    assert data and all(o > max(data) for o in optimize), f"{path}: {ops}"
    end = max(data)
    written = {_key(a["add"].get("partitionValues")) for v in data for a in commits[v] if "add" in a}
    at_end = partition_files(path, end)
    qualifying = {p for p in written if at_end.get(p, 0) >= 2}
    compacted = {_key(a["remove"].get("partitionValues")) for v in optimize for a in commits[v] if "remove" in a}
    assert compacted == qualifying, f"{path}: compacted {compacted}, qualifying {qualifying}; {record}"
    after = partition_files(path)
    assert after == {p: 1 if p in qualifying else n for p, n in at_end.items()}, f"{path}: {at_end} -> {after}"
    assert rows_at(path, latest) == rows_at(path, end), f"{path}: the compaction changed the rows"
    assert record["run_versions"] == data and record["batches"] == len(data), (data, record)
    assert {_key(p) for p in record["partitions_compacted"]} == qualifying, record
    return qualifying


def _foreign_files(path: str, key: PartitionKey, files: int) -> None:
    """``files`` commits by another writer (deltalake), each one small file of rows copied within partition ``key``."""
    import pyarrow as pa
    from deltalake import write_deltalake

    rows = pa.table(DeltaTable(path).to_pyarrow_dataset().to_table())
    mask = [all(str(row[k]) == v for k, v in key) for row in rows.select([k for k, _ in key]).to_pylist()]
    sample = rows.filter(pa.array(mask)).slice(0, 3)
    for _ in range(files):
        write_deltalake(path, sample, mode="append")


def matrix_runs(project: DbtProject, path_of: Callable[[str], str]) -> None:
    """The hook's matrix through real dbt, two invocations (one `dbt build` each), every model checked by
    ``check_run``: a microbatch backfill of 4 day batches (with and without the pre-hook), every incremental
    strategy, a snapshot and a table created by the run; then an incremental run (microbatch: its lookback)
    after another writer added small files to a partition the run does not write."""
    today = dt.datetime.now(dt.timezone.utc).date()
    first_day = today - dt.timedelta(days=4)
    window = ["--event-time-start", str(first_day), "--event-time-end", str(today)]
    project("build", "-s", "tag:mx", *window, "--vars", "{ddo_matrix: true, batch: 0}")
    records = {r["table"].split(".")[-1]: r for r in project.results()}
    for name in MATRIX:
        assert check_run(path_of(name), -1, records[name]), f"{name}: nothing qualified when created"
    for name in ("mx_micro", "mx_micro_nopre"):
        assert records[name]["batches"] == 4 and records[name]["partitions_compacted"], records[name]
    assert records["mx_micro"]["auto_compact"]["sinceVersion"] == -1  # the pre-hook found no table
    assert records["mx_micro_nopre"]["auto_compact"]["runCommits"]["basis"] == "started"

    foreign = (("d", str(first_day)),)
    for name in ("mx_append", "mx_micro_nopre"):
        _foreign_files(path_of(name), foreign, 2)
    before = {name: DeltaTable(path_of(name)).version() for name in MATRIX}
    project("build", "-s", "tag:mx", "--vars", "{ddo_matrix: true, batch: 1}")
    records = {r["table"].split(".")[-1]: r for r in project.results()}
    for name in MATRIX:
        qualifying = check_run(path_of(name), before[name], records[name])
        if name not in ("mx_merge", "mx_snapshot"):  # their rewrites may leave a single file
            assert qualifying, f"{name}: nothing qualified in the incremental run"
    for name in ("mx_micro", "mx_micro_nopre"):  # lookback 1: yesterday's batch again, and today's
        assert records[name]["batches"] == 2, records[name]
    for name in ("mx_append", "mx_micro_nopre"):  # the other writer's partition is not the run's: left alone
        assert partition_files(path_of(name))[foreign] == 3


def microbatch_retry_and_full_refresh(project: DbtProject, path_of: Callable[[str], str]) -> None:
    """A microbatch run whose middle batch fails: the post-hook (after the last batch) compacts the batches that
    committed, `dbt retry` runs the failed one and its hooks compact it. Then `--full-refresh` of a microbatch
    model without the pre-hook: the batch replacing the table and every later one are the run's."""
    import pyarrow as pa
    from deltalake import write_deltalake

    today = dt.datetime.now(dt.timezone.utc).date()
    window = ["--event-time-start", str(today - dt.timedelta(days=4)), "--event-time-end", str(today)]
    gate = str(project.work / "mx_gate")
    write_deltalake(gate, pa.table({"x": [1]}), mode="overwrite")
    project.fails("run", "-s", "mx_micro_retry", *window, "--vars", f"{{ddo_matrix: true, mx_gate: '{gate}'}}")
    (record,) = project.results()
    path = path_of("mx_micro_retry")
    assert len(check_run(path, -1, record)) == 3 and record["batches"] == 3, record  # the failed one wrote nothing
    write_deltalake(gate, pa.table({"x": pa.array([], pa.int64())}), mode="overwrite")
    before = DeltaTable(path).version()
    project("retry")
    (record,) = project.results()
    assert check_run(path, before, record) and record["batches"] == 1, record
    assert sorted(partition_files(path).values()) == [1, 1, 1, 1]
    assert len(rows_at(path)) == 1600  # 4 days of 400 rows

    path = path_of("mx_micro_nopre")
    before = DeltaTable(path).version()
    project("run", "-s", "mx_micro_nopre", "--full-refresh", *window, "--vars", "{ddo_matrix: true}")
    (record,) = project.results()
    assert len(check_run(path, before, record)) == 4 and record["batches"] == 4, record
    assert record["auto_compact"]["runCommits"]["basis"] == "started"
    assert sorted(partition_files(path).values()) == [1, 1, 1, 1] and len(rows_at(path)) == 1600
