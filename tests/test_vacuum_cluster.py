"""VACUUM's cluster path: the listing by top-level prefix and the deletes by prefix as Spark jobs.

On the standalone cluster (executors run ``.venv-executor``, without this package: it is shipped), a
``spark-submit`` VACUUM leaves exactly the files that the driver path and delta-spark's ``VACUUM`` leave on
twin copies of a delta-spark table with tombstones, deletion vectors, change data, orphans and hidden
files: those tests are in ``tests/test_vacuum_spark.py``, to share its table. Here: the task bodies and
the delete batches, without Spark.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dbt_delta_optimize.delta.storage import LocalStorage
from dbt_delta_optimize.engine.task_runner import JobEnded
from dbt_delta_optimize.engine.vacuum_job import _Tally, delete_tasks
from dbt_delta_optimize.plan.vacuum import Candidate, VacuumPlan
from dbt_delta_optimize.tasks.messages import (
    DeletedFiles,
    DeleteTask,
    Failed,
    Fallback,
    ListedPrefix,
    ListTask,
    StoreRef,
    decode_outcome,
    decode_task,
    encode,
)
from dbt_delta_optimize.tasks.vacuum_task import list_prefix, listing_skip, run_delete, run_list

OLD = time.time() - 10 * 86400


def _tree(root: Path) -> None:
    for rel in ("p=a/x.parquet", "p=a/q=1/y.parquet", "p=b/z.parquet", "top.parquet", "_delta_log/0.json",
                ".hidden", "p=a/.x.parquet.crc", "_tmp/t.parquet", "_change_data/c.parquet"):  # fmt: skip
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"12345")
        os.utime(f, (OLD, OLD))


def test_prefix_tasks_list_what_the_driver_walk_lists(tmp_path):
    """The top level (driver) plus each prefix's task listing is the driver's walk, entry for entry."""
    _tree(tmp_path)
    storage, root, cols = LocalStorage(), str(tmp_path), ("p",)
    whole = set(storage.walk(root, listing_skip(cols)))
    top, folders = storage.list_top(root, listing_skip(cols))
    assert sorted(folders) == ["_change_data", "p=a", "p=b"]  # hidden names not entered, _change_data is
    parts = set(top)
    for i, prefix in enumerate(folders):
        task = decode_task(encode(ListTask(i, StoreRef(root), (prefix,), cols)))
        out = decode_outcome(encode(run_list(task, storage)))  # type: ignore[arg-type]
        assert isinstance(out, ListedPrefix) and out.bin_id == i
        parts |= {e for e in list_prefix(storage, root, prefix, cols)}
        assert {f[0] for f in out.files} == {e.path for e in list_prefix(storage, root, prefix, cols) if not e.is_dir}
    assert parts == whole and "p=a/q=1/y.parquet" in {e.path for e in parts} and ".hidden" not in parts
    # no partition columns: one task lists the whole table, as the driver's walk does
    assert set(list_prefix(storage, root, "", ())) == set(storage.walk(root, listing_skip(()), by_prefix=False))


def test_deletes_are_batched_by_prefix_with_their_sidecars(tmp_path):
    _tree(tmp_path)
    plan = VacuumPlan(
        files=tuple(Candidate(p, 5, "untracked file") for p in ("p=a/q=1/y.parquet", "p=a/x.parquet", "p=b/z.parquet", "top.parquet")),
        sidecars=("p=a/.x.parquet.crc",),
    )  # fmt: skip
    store = StoreRef(str(tmp_path))
    tasks = delete_tasks(store, plan, batch=1)
    assert [t.paths for t in tasks] == [
        ("p=a/q=1/y.parquet",),
        ("p=a/x.parquet",),
        ("p=b/z.parquet",),
        ("top.parquet",),
    ]
    assert [t.sidecars for t in tasks] == [("p=a/.x.parquet.crc",), (), (), ()]
    (one,) = [t for t in delete_tasks(store, plan, batch=1000) if t.paths[0].startswith("p=a/")]
    assert one.paths == ("p=a/q=1/y.parquet", "p=a/x.parquet") and one.sizes == (5, 5)
    out = decode_outcome(encode(run_delete(decode_task(encode(one)), LocalStorage())))  # type: ignore[arg-type]
    assert isinstance(out, DeletedFiles) and (out.files, out.bytes) == (2, 10)
    assert not (tmp_path / "p=a/x.parquet").exists() and not (tmp_path / "p=a/.x.parquet.crc").exists()
    assert (tmp_path / "p=b/z.parquet").exists()
    assert isinstance(decode_task(encode(DeleteTask(9, store, (), ()))), DeleteTask)


def test_forced_spark_runner_on_s3_opens_the_store_in_the_tasks(spark, s3_server, monkeypatch):
    """On an object store (moto S3) the tasks open the table's store from the options they are sent (the
    driver's credentials from its environment, which the Python workers started before them lack)."""
    from deltalake import DeltaTable

    from dbt_delta_optimize.ops.vacuum import vacuum
    from tests.test_vacuum import _table

    url = f"s3://{s3_server.new_bucket()}/t"
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    _table(url)
    kw = {"retain": "0h", "allow_short_retention": True}
    driver = vacuum(spark, url, dry_run=True, task_runner="driver", **kw)
    dry = vacuum(spark, url, dry_run=True, task_runner="spark", **kw)
    assert (driver.listed_by, dry.listed_by) == ("driver", "spark")
    assert dry.files == driver.files and len(dry.files) == 3 and dry.files_listed == driver.files_listed
    done = vacuum(spark, url, task_runner="spark", **kw)
    assert (done.files_deleted, done.listed_by, done.deleted_by) == (3, "spark", "spark")
    assert vacuum(spark, url, dry_run=True, task_runner="driver", **kw).files == ()
    assert DeltaTable(url).to_pyarrow_table().column("id").to_pylist() == [9]


def test_prefixes_and_batches_the_executors_cannot_take_are_done_in_the_driver(spark, tmp_path, monkeypatch, caplog):
    """Executors whose Python lacks a required module answer every task with a ``Fallback``: the prefixes are
    listed and the batches deleted in the driver (said in a warning and in the metrics), with the same result."""
    import shutil

    from dbt_delta_optimize.ops.vacuum import vacuum
    from dbt_delta_optimize.tasks import bootstrap
    from tests.test_vacuum import _files, _table

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _table(a)
    shutil.copytree(a, b)
    kw = {"retain": "0h", "allow_short_retention": True}
    ours = vacuum(spark, a, task_runner="driver", **kw)
    monkeypatch.setattr(bootstrap, "REQUIRED_MODULES", ("pyarrow", "ddo_no_such_module"))  # shipped by value
    with caplog.at_level("WARNING", logger="dbt_delta_optimize"):
        done = vacuum(spark, b, task_runner="spark", **kw)
    assert (done.listed_by, done.deleted_by) == ("driver", "driver")
    assert done.files_deleted == ours.files_deleted == 3 and _files(a) == _files(b)
    text = caplog.text
    assert "got no listing from the Spark job" in text and "got no outcome from the Spark job" in text, text
    assert text.count("cannot import ddo_no_such_module") == 2, text  # the executors' own reason, both times


def test_many_prefixes_share_tasks_and_each_is_listed_once(spark, tmp_path, monkeypatch, caplog):
    """Above ``FEW_PREFIXES`` top-level prefixes a task lists several (at most 4 tasks per core): every prefix is
    listed exactly once, and the plan is the driver's."""
    from dbt_delta_optimize.engine import vacuum_job
    from dbt_delta_optimize.ops.vacuum import vacuum
    from tests.test_vacuum import _table

    path = str(tmp_path / "t")
    _table(path)
    for i in range(30):  # debris of failed jobs in partitions the log never named
        f = tmp_path / "t" / f"p=x{i:02d}" / "orphan.parquet"
        f.parent.mkdir()
        f.write_bytes(b"x" * i)
        os.utime(f, (OLD, OLD))
    monkeypatch.setattr(vacuum_job, "FEW_PREFIXES", 4)
    kw = {"retain": "0h", "allow_short_retention": True, "dry_run": True}
    driver = vacuum(spark, path, task_runner="driver", **kw)
    with caplog.at_level("INFO", logger="dbt_delta_optimize.engine.vacuum_job"):
        done = vacuum(spark, path, task_runner="spark", **kw)
    assert done.listed_by == "spark" and done.files == driver.files and len(done.files) == 33
    messages = [r.getMessage() for r in caplog.records]
    listed = [m.split(" listed by ")[0].removeprefix("vacuum: ") for m in messages if " listed by " in m]
    prefixes = [p for line in listed for p in line.split(", ")]
    assert len(listed) == 4 * spark.sparkContext.defaultParallelism == 8, listed  # 32 prefixes, 8 tasks
    assert sorted(prefixes) == sorted(["p=a", "p=b", *(f"p=x{i:02d}" for i in range(30))])


def test_a_failed_task_counts_as_answered_and_the_last_reason_is_kept():
    """The listing and the deletes read a job's other events alike: a failed task is not redone in the driver
    (its failure is raised), and the warning for tasks without an answer gives the executors' reason."""
    tally = _Tally()
    tally.note(Fallback(1, "No module named 'pyarrow'"))
    tally.note(Failed(2, "storage", "OSError", "disk gone", "p=a/x.parquet", True))
    tally.note(JobEnded(None))
    assert tally.got == {2} and [f.bin_id for f in tally.failed] == [2] and tally.why == "No module named 'pyarrow'"
    error = RuntimeError("cancelled")
    tally.note(JobEnded(error))
    assert tally.why is error and _Tally().why == "the executors cannot run the task"
