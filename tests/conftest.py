"""Shared fixtures: one embedded Spark session (with Delta's jars) per test process."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# delta-spark's VACUUM lists a table's files in spark.sql.sources.parallelPartitionDiscovery.parallelism
# partitions (10,000 by default): on a 2-core local master that is thousands of empty tasks and tens of
# seconds for a tiny test table. A handful of partitions lists the same files.
SMALL_LISTINGS = {"spark.sql.sources.parallelPartitionDiscovery.parallelism": "4"}


@pytest.fixture(scope="session")
def spark():
    from dbt_delta_optimize.engine.session import delta_jars, get_spark

    if not delta_jars() and os.environ.get("CI"):
        pytest.fail("Delta's jars are missing: run `make setup` (CI must never skip Spark tests).")
    work = tempfile.mkdtemp(prefix="ddo-spark-")
    session = get_spark(
        work_dir=work,
        master="local[2]",
        catalog="in-memory",
        conf={"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC", **SMALL_LISTINGS},
    )
    yield session
    session.stop()
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 for the whole session (a real S3 API, not a mock of our calls)."""
    from tests.servers import moto_s3

    with moto_s3() as server:
        yield server


@pytest.fixture(scope="session")
def azure_server():
    """Azurite's blob service on 127.0.0.1 for the whole session (fails, never skips, if not installed)."""
    from tests.servers import azurite

    try:
        with azurite() as server:
            yield server
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """A standalone Spark master + one worker (1g, 2 cores) whose executors' Python lacks this package."""
    from tests.servers import spark_standalone

    try:
        with spark_standalone(str(tmp_path_factory.mktemp("standalone"))) as cluster:
            yield cluster
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A Spark Connect server with Delta (local[2], 1g) whose Python workers lack this package."""
    from tests.servers import spark_connect_server

    try:
        with spark_connect_server(str(tmp_path_factory.mktemp("connect"))) as server:
            yield server
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def thrift_server(tmp_path_factory):
    """A Spark Thrift Server with Delta (local[2], 1g) on 127.0.0.1, in its own process group."""
    from tests.servers import spark_thrift_server

    try:
        with spark_thrift_server(str(tmp_path_factory.mktemp("thrift"))) as server:
            yield server
    except RuntimeError as exc:
        pytest.fail(str(exc))


def pytest_sessionfinish(session, exitstatus):
    """dbt worker processes (tests/dbt_project.py) that a module left running stop with the session."""
    import sys

    module = sys.modules.get("tests.dbt_project")
    if module is not None:
        module.DbtWorker.close_all()
