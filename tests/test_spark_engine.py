"""The deferred embedded engine: what it answers before Spark starts, and that it starts Spark once."""

from __future__ import annotations

import threading
import time

import pytest

from dbt_delta_optimize.engine.spark_engine import SparkEngine
from tests.helpers import tasks_the_scheduler_runs


class _Conf:
    def get(self, key, default=None):
        return {"spark.sql.parquet.compression.codec": "zstd"}.get(key, default)


class _Session:
    """Stands for the session ``start`` returns; only its runtime conf is read here."""

    conf = _Conf()


def test_a_deferred_engine_answers_without_starting_and_starts_once():
    calls = []
    gate = threading.Event()

    def start():
        gate.wait(5)  # every thread below asks while the first start is still under way
        calls.append(threading.current_thread().name)
        return _Session()

    engine = SparkEngine.deferred(start, time_zone="Europe/Paris", parallelism=6)
    assert not engine.started
    assert (engine.time_zone, engine.parquet_codec, engine.default_parallelism, engine.driver_threads) == (
        "Europe/Paris",
        "snappy",
        6,
        6,
    )
    assert engine.runs_tasks_in_driver("auto") and engine.runs_tasks_in_driver("driver")
    assert not engine.runs_tasks_in_driver("spark")
    assert engine.conf("spark.databricks.delta.optimize.maxFileSize") is None
    engine.cancel("group")  # nothing ran on Spark: nothing to cancel, nothing started
    assert engine.scheduled_tasks("group") == 0 and not engine.started and calls == []

    sessions = []
    threads = [threading.Thread(target=lambda: sessions.append(engine.spark)) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(s) for s in sessions}) == 1 and engine.started
    assert engine.parquet_codec == "zstd"  # the started session's conf from now on
    assert engine.time_zone == "Europe/Paris"  # kept for the whole call, as planned


def test_an_engine_needs_a_session_or_a_way_to_start_one():
    with pytest.raises(ValueError, match="needs a session"):
        SparkEngine(None)


def _sleep_in_task(_rows):
    import time

    time.sleep(600)
    return iter(())


@pytest.mark.spark
def test_settle_waits_for_a_cancelled_jobs_tasks_and_later_jobs_of_the_group_are_refused(spark):
    """A cancelled job ends for its caller while Spark is still killing its tasks (a Python task's worker is
    killed seconds later): ``settle`` returns once the scheduler runs none of them, and a job the cancelled
    group starts afterwards is refused instead of running (a Spark rewrite between two of its jobs)."""
    import uuid

    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    engine = SparkEngine(spark)
    group = f"test-settle-{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []

    def job() -> None:
        with engine.job_group(group, "two tasks that sleep"):
            try:
                spark.sparkContext.parallelize([0, 1], 2).mapPartitions(_sleep_in_task).collect()
            except BaseException as exc:  # cancelled
                errors.append(exc)

    thread = threading.Thread(target=job)
    thread.start()
    until = time.monotonic() + 300
    while tasks_the_scheduler_runs(spark) < 2 and time.monotonic() < until:  # both tasks are running
        time.sleep(0.05)
    assert tasks_the_scheduler_runs(spark) == 2
    engine.cancel(group)
    thread.join()
    assert errors and engine.settle(group)
    assert tasks_the_scheduler_runs(spark) == 0
    with pytest.raises((Py4JJavaError, PySparkException), match="cancel"):
        with engine.job_group(group, "started after the cancel"):
            spark.sparkContext.parallelize([0], 1).count()
    assert engine.settle("no-such-group")  # nothing ran in it: nothing to wait for
