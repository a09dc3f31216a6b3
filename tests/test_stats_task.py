"""analyze's task body (``tasks/stats_task.py``): the message round-trips as a Spark task gets it, and an
executor without thriftpy2 (footer through pyarrow only) computes the same stats as the driver."""

from __future__ import annotations

import builtins
import json

import pyarrow as pa
from deltalake import write_deltalake

from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.tasks import stats_task
from dbt_delta_optimize.tasks.messages import StatsComputed, StatsSpec, StatsTask, StoreRef, decode_outcome, encode
from dbt_delta_optimize.tasks.stats_task import file_stats
from dbt_delta_optimize.tasks.worker import run_text


def test_stats_task_message_and_pyarrow_only_footer(tmp_path, monkeypatch):
    p = str(tmp_path / "t")
    long = ["é" * 40 + f"{i:03d}" + "z" * 30 for i in range(50)]  # delta-rs truncates (inexact) at 64 bytes
    write_deltalake(p, pa.table({"id": pa.array(range(50), pa.int64()), "s": long}))
    snap = load_snapshot(p)
    (f,) = snap.file_table.files([0])
    spec = StatsSpec(snap.schema, (), dict(snap.configuration), snap.protocol.to_json(), "UTC")
    location = snap.file_path(f.path)
    driver = file_stats(snap.storage, location, spec, tight_bounds=True)
    st = json.loads(driver)
    assert st["maxValues"]["s"].startswith("é" * 32) and st["minValues"]["id"] == 0 and st["numRecords"] == 50

    out = decode_outcome(run_text(encode(StatsTask(7, StoreRef(p, {}), location, spec, True))))
    assert isinstance(out, StatsComputed) and out.bin_id == 7 and out.stats == driver

    real_import = builtins.__import__

    def no_thriftpy2(name, *args, **kwargs):
        if name.startswith("thriftpy2"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_thriftpy2)
    with open(location, "rb") as fh:  # the pyarrow-only footer: delta-rs's string bounds are read from the data
        assert stats_task._footer(fh, location)[1] == {(0, 1)}
    assert file_stats(snap.storage, location, spec, tight_bounds=True) == driver
