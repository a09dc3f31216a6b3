"""Shipping the package to executors and running one task, without a cluster (tests/test_cluster.py has those)."""

from __future__ import annotations

import os
import subprocess
import zipfile

import pytest

from dbt_delta_optimize.engine.python_tasks import needs_package, package_zip, run_task_frame, run_task_rdd
from dbt_delta_optimize.errors import InvalidConfigError, SparkConnectError
from tests.servers import EXECUTOR_PYTHON


def test_package_zip_is_built_once_per_content_and_imports_with_pyarrow_only(tmp_path):
    path = package_zip(str(tmp_path))
    assert package_zip(str(tmp_path)) == path and os.path.basename(path).startswith("dbt_delta_optimize-")
    names = zipfile.ZipFile(path).namelist()
    assert "dbt_delta_optimize/engine/rewrite.py" in names and not any("__pycache__" in n for n in names)
    assert os.listdir(tmp_path) == [os.path.basename(path)]  # no temporary file left
    # The executors' interpreter has pyarrow but not this package: from the zip the task code imports.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dbt_delta_optimize.engine.rewrite as r; print(r.__file__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [EXECUTOR_PYTHON, "-c", code, path], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert out.returncode == 0 and out.stdout.strip().startswith(path), out.stderr
    missing = subprocess.run(
        [EXECUTOR_PYTHON, "-c", "import dbt_delta_optimize"], env=env, capture_output=True, cwd=tmp_path
    )
    assert missing.returncode != 0  # the test cluster's executors really lack the package


@pytest.mark.spark
def test_both_task_paths_run_a_task_and_say_where(spark):
    for run in (run_task_rdd, run_task_frame):
        out = run(spark, os.path.basename, "/a/b.parquet")
        assert out["result"] == "b.parquet" and out["python"] and out["pid"] > 0
        assert out["package"].endswith("posixpath.py")  # the module the task function came from


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
