"""Shipping the package to executors and running bin tasks as one job, without a cluster (tests/test_cluster.py has those)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from dbt_delta_optimize.engine.python_tasks import needs_package, package_zip
from dbt_delta_optimize.errors import InvalidConfigError, SparkConnectError
from tests.servers import EXECUTOR_PYTHON


def test_package_zip_is_built_once_per_content_and_imports_with_pyarrow_only(tmp_path):
    path = package_zip(str(tmp_path))
    assert package_zip(str(tmp_path)) == path and os.path.basename(path).startswith("dbt_delta_optimize-")
    names = zipfile.ZipFile(path).namelist()
    assert "dbt_delta_optimize/tasks/bin_task.py" in names and not any("__pycache__" in n for n in names)
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary file left
    # The executors' interpreter has pyarrow but not this package: from the zip the task code imports.
    code = "import sys; sys.path.insert(0, sys.argv[1]); import dbt_delta_optimize.tasks.worker as r; print(r.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [EXECUTOR_PYTHON, "-c", code, path], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0 and out.stdout.strip().startswith(path), out.stderr
    missing = subprocess.run(
        [EXECUTOR_PYTHON, "-c", "import dbt_delta_optimize"], env=env, capture_output=True, cwd=tmp_path
    )
    assert missing.returncode != 0  # the test cluster's executors really lack the package


def _bin_task(tmp_path, bin_id: int, inputs: list[str]):
    from dbt_delta_optimize.tasks.messages import BinTask, InputFile, StatsSpec, StoreRef

    fields = ({"name": "id", "type": "long", "nullable": True, "metadata": {}},)
    return BinTask(
        bin_id=bin_id,
        store=StoreRef(str(tmp_path), {}),
        inputs=tuple(InputFile(p, os.path.getsize(p) if os.path.exists(p) else 1) for p in inputs),
        output=str(tmp_path / "out" / f"bin-{bin_id}.parquet"),
        fields=fields,
        compression="snappy",
        by_id=False,
        row_tracking=None,
        stats=StatsSpec({"type": "struct", "fields": list(fields)}, (), {}, None, "UTC"),
    )


@pytest.mark.spark
def test_one_job_runs_a_batch_of_bins_and_every_outcome_is_typed(spark, tmp_path):
    """Three bins, one Spark job: each answers as its task ends, a missing input is a typed failure naming it."""
    import queue

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dbt_delta_optimize.engine.spark_engine import SparkEngine
    from dbt_delta_optimize.engine.task_runner import JobEnded, start_task_job
    from dbt_delta_optimize.tasks.messages import Failed, Rewritten

    files = []
    for i in range(4):
        files.append(str(tmp_path / f"in-{i}.parquet"))
        pq.write_table(pa.table({"id": pa.array([i, i + 10], pa.int64())}), files[-1])
    missing = str(tmp_path / "gone.parquet")
    tasks = [
        _bin_task(tmp_path, 0, files[:2]),
        _bin_task(tmp_path, 1, [files[2], missing]),
        _bin_task(tmp_path, 2, files[2:]),
    ]
    engine = SparkEngine(spark)
    events: queue.Queue = queue.Queue()
    assert engine.runs_tasks_in_driver("auto") and not engine.runs_tasks_in_driver("spark")  # a local master
    job = start_task_job(engine, tasks, "ddo-test-job", "test", events, task_runner="spark")
    got = []
    while not got or not isinstance(got[-1], JobEnded):
        got.append(events.get(timeout=300))
    job.join()
    outcomes = {o.bin_id: o for o in got[:-1]}
    assert got[-1].error is None and sorted(outcomes) == [0, 1, 2]  # each bin answered once
    assert isinstance(outcomes[0], Rewritten) and outcomes[0].rows == 4 and outcomes[0].worker.pid > 0
    assert pq.read_table(tasks[0].output).column("id").to_pylist() == [0, 10, 1, 11]
    assert isinstance(outcomes[1], Failed) and outcomes[1].kind == "data_file" and outcomes[1].path == missing
    assert not os.path.exists(tasks[1].output)  # a failed bin leaves no file behind
    assert isinstance(outcomes[2], Rewritten) and '"numRecords":4' in outcomes[2].stats


#: The bootstrap as a worker runs it (pickled by value: its own source, no package), answering one message.
SHIPPED_BOOTSTRAP = (
    "import json, sys\n"
    "ns = {'__name__': 'shipped'}\n"
    "exec(open(sys.argv[1]).read(), ns)\n"
    "class Sink:\n    def add(self, v): pass\n"
    "print(json.dumps(list(ns['run_messages'](Sink(), iter([sys.argv[2]])))))\n"
)


def test_the_bootstrap_answers_with_a_fallback_where_the_package_cannot_be_imported(tmp_path):
    """The task function runs on a worker without this package (stdlib only) and says so in a typed outcome."""
    import json

    from dbt_delta_optimize.tasks import bootstrap
    from dbt_delta_optimize.tasks.messages import Fallback, decode_outcome, encode

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    text = encode(_bin_task(tmp_path, 7, []))
    out = subprocess.run(
        [EXECUTOR_PYTHON, "-c", SHIPPED_BOOTSTRAP, bootstrap.__file__, text],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    (answer,) = json.loads(out.stdout)
    outcome = decode_outcome(answer)
    assert isinstance(outcome, Fallback) and outcome.bin_id == 7
    assert "cannot import the Arrow rewriter" in outcome.reason and "dbt_delta_optimize" in outcome.reason


@pytest.mark.spark
def test_shipping_is_needed_only_off_the_local_interpreter(spark):
    assert needs_package(spark, None) is False  # local master, this interpreter: it has the package
    assert needs_package(spark, "true") is True and needs_package(spark, "FALSE") is False
    with pytest.raises(InvalidConfigError, match="shipPackage must be auto, true or false"):
        needs_package(spark, "sometimes")


def test_remote_addresses_fail_fast_with_one_clear_error():
    from dbt_delta_optimize.engine.session import get_spark

    with pytest.raises(SparkConnectError, match="not a Spark Connect address"):
        get_spark(remote="http://127.0.0.1:15002")
    with pytest.raises(SparkConnectError, match=r"cannot reach the Spark Connect server at sc://127\.0\.0\.1:9"):
        get_spark(remote="sc://127.0.0.1:9")
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # nothing switched this process to Connect


def test_dbt_server_methods_without_connect_skip_once_per_run(tmp_path, monkeypatch):
    from dbt_delta_optimize.dbt.bridge import Bridge
    from dbt_delta_optimize.dbt.connection import SparkTarget

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setattr(SparkTarget, "session", lambda self: pytest.fail("no local JVM for a server method"))
    b = Bridge()
    target = {"method": "thrift", "remote": None}
    first = b.run_model("s.a", {}, invocation_id="inv", target_path=str(tmp_path), spark_target=target)
    second = b.run_model("s.b", {}, invocation_id="inv", target_path=str(tmp_path), spark_target=target)
    op = b.run_operation("s.c", invocation_id="inv", target_path=str(tmp_path), spark_target={"method": "odbc"})
    assert first["status"] == second["status"] == op["status"] == "skipped"
    assert "SPARK_REMOTE=sc://" in first["line"] and "delta_optimize_spark_remote" in first["line"]
    assert first["quiet"] is False and second["quiet"] is True and op["quiet"] is True
    assert b.record_version("s.a", invocation_id="inv", target_path=str(tmp_path), spark_target=target) == ""
    assert SparkTarget.parse({"method": "http", "remote": "sc://h:1"}).usable
    monkeypatch.setenv("SPARK_REMOTE", "sc://h:2")
    assert SparkTarget.parse({"method": "thrift"}) == SparkTarget("thrift", "sc://h:2")


@pytest.mark.spark
def test_three_part_names_resolve_on_a_classic_session(spark, tmp_path):
    from dbt_delta_optimize.engine.session import resolve_table

    path = str(tmp_path / "t3")
    spark.range(3).write.format("delta").save(path)
    spark.sql(f"CREATE TABLE default.ddo_three_part USING delta LOCATION '{path}'")
    try:
        for name in (
            "spark_catalog.default.ddo_three_part",
            "default.ddo_three_part",
            "`spark_catalog`.default.ddo_three_part",
        ):
            assert resolve_table(name, spark).rstrip("/").endswith("t3"), name
    finally:
        spark.sql("DROP TABLE default.ddo_three_part")


def test_a_python_worker_error_is_summarised_by_its_exception_not_see_the_stack_trace_below():
    """What Spark Connect raises when its Python workers lack pyarrow (the text of a real server's error)."""
    from dbt_delta_optimize.engine.spark_engine import spark_error_summary

    text = (
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "/x/pyspark.zip/pyspark/worker.py", line 3602, in main\n'
        "    func, profiler, deserializer, serializer = read_udfs(\n"
        '  File "/x/pyspark.zip/pyspark/worker.py", line 2530, in read_udfs\n'
        "    import pyarrow as pa\n"
        "ModuleNotFoundError: No module named 'pyarrow'\n SQLSTATE: 38000"
    )
    assert spark_error_summary(RuntimeError(text)) == "Python worker: ModuleNotFoundError: No module named 'pyarrow'"
    assert spark_error_summary(RuntimeError("first line\nsecond")) == "first line"
    assert spark_error_summary(RuntimeError("")) == "RuntimeError"


def test_the_bootstrap_names_the_module_and_the_python_where_a_dependency_is_missing(tmp_path):
    """A worker with the package (shipped) but without pyarrow: one line with the module, the Python and the fix."""
    import json

    from dbt_delta_optimize.tasks import bootstrap
    from dbt_delta_optimize.tasks.messages import Fallback, decode_outcome, encode

    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    code = SHIPPED_BOOTSTRAP + "print(ns['probe_worker'](0))\n"
    root = os.path.dirname(os.path.dirname(os.path.abspath(bootstrap.__file__)))
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": os.path.dirname(root)}
    text = encode(_bin_task(tmp_path, 3, []))
    out = subprocess.run([python, "-c", code, bootstrap.__file__, text], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    answers, probe = out.stdout.strip().splitlines()
    (outcome,) = (decode_outcome(a) for a in json.loads(answers))
    assert isinstance(outcome, Fallback) and outcome.bin_id == 3
    assert outcome.reason.startswith(f"the Spark Python workers ({python}, Python ")
    assert (
        "cannot import pyarrow (ModuleNotFoundError: No module named 'pyarrow'); set PYSPARK_PYTHON" in outcome.reason
    )
    assert json.loads(probe) == {
        "python": python,
        "version": sys.version.split()[0],
        "missing": [["pyarrow", "ModuleNotFoundError: No module named 'pyarrow'"]],
    }
