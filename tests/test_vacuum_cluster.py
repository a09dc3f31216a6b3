"""VACUUM's cluster path: the listing by top-level prefix and the deletes by prefix as Spark jobs.

On the standalone cluster (executors run ``.venv-executor``, without this package: it is shipped), a
``spark-submit`` VACUUM leaves exactly the files that the driver path and delta-spark's ``VACUUM`` leave on
twin copies of a delta-spark table with tombstones, deletion vectors, change data, orphans and hidden
files (``tests/test_vacuum_spark.py``'s table). The task bodies and the delete batches are also checked
without Spark, and the forced ``spark`` runner on the local master in this process.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dbt_delta_optimize.delta.storage import LocalStorage
from dbt_delta_optimize.engine.vacuum_job import delete_tasks
from dbt_delta_optimize.ops.vacuum import vacuum
from dbt_delta_optimize.plan.vacuum import Candidate, VacuumPlan
from dbt_delta_optimize.tasks.messages import (
    DeletedFiles,
    DeleteTask,
    ListedPrefix,
    ListTask,
    StoreRef,
    decode_outcome,
    decode_task,
    encode,
)
from dbt_delta_optimize.tasks.vacuum_task import list_prefix, listing_skip, run_delete, run_list
from tests.servers import EXECUTOR_PYTHON
from tests.test_cluster import job_json, submit
from tests.test_vacuum_spark import OLD, _files, _spark_vacuum, table  # noqa: F401  (the module's table fixture)


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
        task = decode_task(encode(ListTask(i, StoreRef(root), prefix, cols)))
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


def _twin(src: str, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def test_forced_spark_runner_lists_and_deletes_as_spark_jobs(spark, table, tmp_path, monkeypatch):  # noqa: F811
    """``task_runner="spark"`` on the local master: real Spark jobs (seen by the status tracker), the same plan
    and the same files left as the driver's threads."""
    from dbt_delta_optimize.engine.spark_engine import SparkEngine

    groups: list[str] = []
    original = SparkEngine.job_group

    def spy(self, group, description):  # type: ignore[no-untyped-def]
        groups.append(group)
        return original(self, group, description)

    monkeypatch.setattr(SparkEngine, "job_group", spy)
    a, b = _twin(table, tmp_path / "driver"), _twin(table, tmp_path / "spark")
    ours = vacuum(spark, a, retain="0h", allow_short_retention=True, task_runner="driver")
    assert (ours.listed_by, ours.deleted_by) == ("driver", "driver") and not groups
    dry = vacuum(spark, b, retain="0h", allow_short_retention=True, dry_run=True, task_runner="spark")
    assert dry.listed_by == "spark" and dry.files == ours.files and dry.files_listed == ours.files_listed
    done = vacuum(spark, b, retain="0h", allow_short_retention=True, task_runner="spark")
    assert (done.listed_by, done.deleted_by) == ("spark", "spark")
    assert (done.files_deleted, done.bytes_deleted, done.folders_deleted) == (
        ours.files_deleted,
        ours.bytes_deleted,
        ours.folders_deleted,
    )
    assert done.files_deleted > 0 and _files(b) == _files(a)
    tracker = spark.sparkContext.statusTracker()
    assert [g.split("-")[2] for g in groups] == ["list", "list", "delete"]
    for g in groups:
        jobs = tracker.getJobIdsForGroup(g)
        assert jobs and all(tracker.getJobInfo(j).status == "SUCCEEDED" for j in jobs), g


@pytest.mark.slow
def test_standalone_cluster_vacuum_leaves_what_the_driver_and_delta_spark_leave(
    standalone_cluster,
    spark,
    table,  # noqa: F811
    tmp_path,
):
    """spark-submit's VACUUM lists and deletes on the executors (which lack the package: it is shipped)."""
    a, b, c = (_twin(table, tmp_path / n) for n in ("delta_spark", "cluster", "driver"))
    before = _files(b)
    _spark_vacuum(spark, a, "RETAIN 0 HOURS")
    local = vacuum(None, c, retain="0h", allow_short_retention=True)  # the local session: the driver's threads
    proc = submit(standalone_cluster, "-v", "vacuum", b, "--retain", "0h", "--allow-short-retention", "--json")
    metrics = job_json(proc.stdout)

    assert (metrics["listedBy"], metrics["deletedBy"]) == ("spark", "spark"), metrics
    assert (local.listed_by, local.deleted_by) == ("driver", "driver")
    assert _files(b) == _files(a) == _files(c) and _files(b) != before
    assert metrics["filesDeleted"] == local.files_deleted > 0 and metrics["bytesDeleted"] == local.bytes_deleted
    assert metrics["filesListed"] == local.files_listed and metrics["foldersDeleted"] == local.folders_deleted
    out = " ".join(proc.stdout.split())  # rich wraps the CLI's log lines
    # one task per top-level prefix (the two partitions and _change_data), each on the executors' Python
    listed = [x for x in out.split("vacuum: ")[1:] if " listed by " in x]
    assert sorted(x.split(" listed by ")[0] for x in listed) == ["_change_data", "_p=a", "_p=b"], out[-3000:]
    assert all(x.split(" listed by ")[1].startswith(EXECUTOR_PYTHON) for x in listed), out[-3000:]
    assert "got no listing from the Spark job" not in out and "got no outcome" not in out
    assert ".zip/dbt_delta_optimize/__init__.py" in out  # the package this run shipped
    ops = [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{b}` LIMIT 2").collect()]
    assert ops == ["VACUUM END", "VACUUM START"]
    assert json.loads(json.dumps(metrics))["readVersion"] == local.read_version
