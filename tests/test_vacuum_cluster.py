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
from dbt_delta_optimize.engine.vacuum_job import delete_tasks
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
