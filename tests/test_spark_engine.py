"""The deferred embedded engine: what it answers before Spark starts, and that it starts Spark once."""

from __future__ import annotations

import threading

from dbt_delta_optimize.engine.spark_engine import SparkEngine


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
    import pytest

    with pytest.raises(ValueError, match="needs a session"):
        SparkEngine(None)
