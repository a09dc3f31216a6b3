"""Output a scheduler can trust: the documented exit code every time, in fresh processes, on a loaded machine,
and one line on stderr (no traceback, executor log or Java stack) unless ``--debug``.

The CLI once aborted at exit now and then (SIGABRT, "terminate called without an active exception", exit
134) after printing the right error: an Arrow I/O thread still held a Python buffer of the log reader while
the interpreter tore down (apache/arrow#34314). It showed only under load, so the runs here happen while the
shared Spark session keeps both cores busy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.helpers import log_snapshot

pytestmark = pytest.mark.spark

SCRIPT = os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize")
#: The JDK prints this line itself when a JVM starts (Spark enables the vector incubator module).
JDK_LINE = "WARNING: Using incubator modules: jdk.incubator.vector"


def _table(path: str, appends: int = 3) -> str:
    for i in range(appends):
        ids = list(range(i * 10, i * 10 + 10))
        write_deltalake(
            path, pa.table({"id": ids, "part": [str(x % 2) for x in ids]}), partition_by=["part"], mode="append"
        )
    return path


def _refused(path: str) -> str:
    """A table whose newest commit turns on a reader feature no engine here supports (catalogOwned), after a
    checkpoint (whose Parquet our log reader reads beside deltalake: the reader that once aborted at exit)."""
    _table(path)
    DeltaTable(path).create_checkpoint()
    protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["catalogOwned"]}
    protocol["writerFeatures"] = ["catalogOwned"]
    with open(os.path.join(path, "_delta_log", f"{3:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1, "operation": "UPGRADE PROTOCOL"}}) + "\n")
        fh.write(json.dumps({"protocol": protocol}) + "\n")
    return path


def _env(tmp_path, **extra: str) -> dict[str, str]:
    """A process of its own: its own Spark work folder (metastore), no colours, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "SPARK_REMOTE"))}
    env.update(DBT_DELTA_OPTIMIZE_HOME=str(tmp_path / "home"), NO_COLOR="1", TERM="dumb", **extra)
    return env


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


@contextmanager
def _loaded(spark) -> Iterator[None]:
    """Keep the machine busy with Spark jobs (both cores) while inside."""
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            spark.range(0, 5_000_000, 1, 2).selectExpr("sum(id * 7 % 13)").collect()

    thread = threading.Thread(target=burn, name="load", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _outcomes(tmp_path) -> dict[str, tuple[list[str], dict[str, str], int, int]]:
    """outcome -> (arguments, environment, documented exit code, runs)."""
    env = _env(tmp_path)
    small = _table(str(tmp_path / "small"))
    done = _table(str(tmp_path / "done"), appends=1)  # one small file per partition: too few to compact
    refused = _refused(str(tmp_path / "refused"))
    unreachable = _env(
        tmp_path,
        AWS_ENDPOINT_URL="http://127.0.0.1:9",  # nothing listens on the discard port
        AWS_ACCESS_KEY_ID="k",
        AWS_SECRET_ACCESS_KEY="do-not-print-this-secret",
        AWS_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    return {
        "dry run": (["optimize", small, "--dry-run"], env, 0, 30),
        "nothing to do": (["auto-compact", done, "--enable"], env, 0, 30),  # decided from the log: no JVM
        "refused protocol": (["optimize", refused], env, 2, 30),
        "missing table": (["optimize", str(tmp_path / "nowhere")], env, 2, 30),
        "bad predicate": (["optimize", small, "--dry-run", "--where", "id = 1"], env, 2, 30),
        "unreachable store": (["optimize", "s3://bucket/t"], unreachable, 3, 30),
    }


@pytest.mark.slow
def test_every_outcome_exits_with_its_code_every_time_under_load(spark, tmp_path):
    """30 fresh processes per outcome (2 at a time) beside running Spark jobs: the documented code each time.

    A full compaction (files written and committed; its bins need no JVM) runs 30 times on fresh tables.
    """
    outcomes = _outcomes(tmp_path)
    compactions = [_table(str(tmp_path / f"compact{i}")) for i in range(30)]
    env = _env(tmp_path)
    jobs = [(name, args, job_env, code) for name, (args, job_env, code, runs) in outcomes.items() for _ in range(runs)]
    jobs += [("compaction", ["optimize", path], env, 0) for path in compactions]
    with _loaded(spark), ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda job: (job, _run(job[1], job[2])), jobs))
    seen: dict[str, Counter[int]] = {}
    for (name, _, _, _), proc in results:
        seen.setdefault(name, Counter())[proc.returncode] += 1
    wanted = {name: Counter({code: runs}) for name, (_, _, code, runs) in outcomes.items()}
    wanted["compaction"] = Counter({0: len(compactions)})
    assert seen == wanted
    for (name, _, _, code), proc in results:
        if code:  # an error: one line (and the JDK's own line where a JVM started), no secret
            lines = [line for line in proc.stderr.splitlines() if line != JDK_LINE]
            assert len(lines) == 1 and lines[0].startswith("error: "), (name, proc.stderr)
            assert "do-not-print-this-secret" not in proc.stderr
    for path in compactions:
        assert len(DeltaTable(path).file_uris()) == 2


def _broken(tmp_path, how: str) -> tuple[str, str]:
    """A table whose first data file is missing, not Parquet, or Parquet with another type for ``id``."""
    import pyarrow.parquet as pq

    path = _table(str(tmp_path / how))
    victim = sorted(DeltaTable(path).file_uris())[0]
    if how == "missing":
        os.unlink(victim)
    elif how == "corrupt":
        with open(victim, "wb") as fh:
            fh.write(b"not a parquet file\n" * 20)
    else:
        pq.write_table(pa.table({"id": [f"s{i}" for i in range(5)]}), victim)
    return path, os.path.basename(victim)


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_unreadable_data_file_is_one_line_without_stacks(tmp_path, how):
    """No Python traceback, Java stack or executor log line: the error, and at most the JDK's own line."""
    path, victim = _broken(tmp_path, how)
    before = log_snapshot(path)
    proc = _run(["optimize", path], _env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) <= 2 and all(line == JDK_LINE for line in lines[:-1]), proc.stderr
    assert lines[-1].startswith("error: Cannot read data file") and victim in lines[-1]
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr and " ERROR " not in proc.stderr
    assert log_snapshot(path) == before


@pytest.mark.parametrize("runner", ["driver", "spark"])
def test_debug_shows_the_task_side_too(tmp_path, runner):
    """--debug: the task's Python traceback (from the driver's thread or the Spark task that ran the bin) is
    there, then the one error line; without --debug it is not (test above)."""
    path, _ = _broken(tmp_path, "corrupt")
    proc = _run(["--debug", "optimize", path, "--task-runner", runner], _env(tmp_path))
    assert proc.returncode == 1
    task_side = proc.stderr[proc.stderr.find("failed in its task:") :]
    assert "failed in its task:" in proc.stderr and "Traceback (most recent call last)" in task_side, proc.stderr[
        -3000:
    ]
    # where in the task it failed: our reader's open of the file, by pyarrow's Parquet reader
    assert "tasks/inputs.py" in task_side and "in _parquet" in task_side and "reader.open(" in task_side
    assert proc.stderr.splitlines()[-1].startswith("error: Cannot read data file")


def test_schema_mismatch_names_the_file_and_the_column(spark, tmp_path):
    """A data file whose Parquet type for a column is not the table's: the file, the column and both types."""
    from dbt_delta_optimize.api import optimize
    from dbt_delta_optimize.errors import DataFileError, exit_code

    path, victim = _broken(tmp_path, "schema")
    before = log_snapshot(path)
    with pytest.raises(DataFileError) as info:
        optimize(spark, path)
    assert victim in str(info.value) and info.value.path.endswith(victim)
    assert "'id' is stored as string" in str(info.value) and "long" in str(info.value)
    assert "Py4J" not in str(info.value) and exit_code(info.value) == 1
    assert log_snapshot(path) == before
