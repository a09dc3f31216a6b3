"""VACUUM without Spark: the CLI in a fresh process (refusal, dry run), the concurrent-commit guard, a writer
racing vacuum, and object stores (moto S3, Azurite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dbt_delta_optimize.delta.actions import AddFile
from dbt_delta_optimize.delta.commit import Transaction
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.delta.storage import LocalStorage
from dbt_delta_optimize.ops.table import Table, open_table
from dbt_delta_optimize.ops.vacuum import vacuum

OLD = time.time() - 10 * 86400


def _table(path: str, *, batches: int = 3, storage_options: dict[str, str] | None = None) -> None:
    for i in range(batches):
        data = pa.table({"id": [i], "p": ["a" if i % 2 else "b"]})
        write_deltalake(path, data, partition_by=["p"], mode="append", storage_options=storage_options)
    write_deltalake(path, pa.table({"id": [9], "p": ["a"]}), partition_by=["p"], mode="overwrite",
                    storage_options=storage_options)  # fmt: skip


def _files(root: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, n), root)
        for d, _, names in os.walk(root)
        for n in names
        if not os.path.relpath(d, root).startswith("_delta_log")
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    cmd = [os.path.join(os.path.dirname(sys.executable), "dbt-delta-optimize"), "vacuum", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_cli_short_retention_is_exit_2_with_nothing_deleted(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    before = _files(path)
    version = DeltaTable(path).version()
    done = _cli(path, "--retain", "0h")
    assert done.returncode == 2, done.stderr
    assert "--allow-short-retention" in done.stderr and "Traceback" not in done.stderr
    assert _files(path) == before and DeltaTable(path).version() == version
    negative = _cli(path, "--retain", "-1h", "--allow-short-retention")
    assert negative.returncode == 2 and "less than 0 hours" in negative.stderr


def test_cli_dry_run_lists_files_with_bytes_and_deletes_nothing(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    before = _files(path)
    done = _cli(path, "--retain", "0h", "--allow-short-retention", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert _files(path) == before
    listed = {f["path"]: f["bytes"] for f in out["files"]}
    live = {p for p in DeltaTable(path).file_uris()}
    assert len(listed) == 3 and all(os.path.getsize(os.path.join(path, p)) == b for p, b in listed.items())
    assert not any(os.path.join(path, p) in live for p in listed)
    assert out["dryRun"] is True and out["filesDeleted"] == 3
    # and the real run deletes exactly those
    done = _cli(path, "--retain", "0h", "--allow-short-retention", "--json")
    assert done.returncode == 0, done.stderr
    assert before - _files(path) == set(listed)
    assert DeltaTable(path).to_pyarrow_table().column("id").to_pylist() == [9]


def test_default_retention_keeps_young_files_and_deletes_an_old_orphan(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    orphan = Path(path, "p=a", "orphan.parquet")
    orphan.write_bytes(b"x")
    os.utime(orphan, (OLD, OLD))
    before = _files(path)
    metrics = vacuum(None, path)
    assert before - _files(path) == {"p=a/orphan.parquet"}
    assert metrics.files_deleted == 1


class _Restoring(LocalStorage):
    """A store whose listing lets a concurrent writer re-add a tombstoned file while vacuum plans (a RESTORE)."""

    def __init__(self, restore: AddFile) -> None:
        super().__init__()
        object.__setattr__(self, "_restore", restore)

    def walk(self, path, skip, *, by_prefix=True):  # type: ignore[no-untyped-def]
        if not path.endswith("_delta_log"):  # the table's listing, not the log's
            snapshot = load_snapshot(path, storage=LocalStorage())
            Transaction(snapshot).commit([self._restore], "RESTORE", {})  # type: ignore[attr-defined]
        yield from super().walk(path, skip, by_prefix=by_prefix)


def test_a_file_a_concurrent_commit_made_live_again_is_not_deleted(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    first = pa.table(DeltaTable(path, version=0).get_add_actions(flatten=True)).to_pylist()[0]
    restore = AddFile(path=first["path"], size=first["size_bytes"], partition_values={"p": "b"},
                      modification_time=first["modification_time"], data_change=True)  # fmt: skip
    storage = _Restoring(restore)
    handle = Table(path, path, None, load_snapshot(path, storage=storage))
    metrics = vacuum(None, handle, retain="0h", allow_short_retention=True)
    assert metrics.kept_by_concurrent_commits == 1
    assert os.path.exists(os.path.join(path, first["path"]))
    ids = sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist())
    assert ids == [0, 9]  # the restored file is readable


def test_a_writer_racing_vacuum_never_loses_a_file_a_retained_version_needs(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            i = 100
            while not stop.is_set():
                write_deltalake(path, pa.table({"id": [i], "p": ["a"]}), partition_by=["p"], mode="append")
                i += 1
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(5):
            vacuum(None, path, retain="1h", allow_short_retention=True)
    finally:
        stop.set()
        t.join()
    assert not errors
    latest = DeltaTable(path).version()
    for v in range(latest + 1):  # every version still reads: nothing a retained version needs is gone
        DeltaTable(path, version=v).to_pyarrow_table()


@pytest.mark.parametrize("store", ["s3", "azure"])
def test_object_store_vacuum_deletes_tombstones_in_batches(store, request, monkeypatch):
    if store == "s3":
        server = request.getfixturevalue("s3_server")
        url = f"s3://{server.new_bucket()}/t"
    else:
        server = request.getfixturevalue("azure_server")
        url = f"az://{server.new_container()}/t"
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    _table(url)
    table = open_table(url)
    dry = vacuum(None, table, retain="0h", allow_short_retention=True, dry_run=True)
    assert dry.files_deleted == 3
    metrics = vacuum(None, url, retain="0h", allow_short_retention=True)
    assert metrics.files_deleted == 3
    again = vacuum(None, url, retain="0h", allow_short_retention=True, dry_run=True)
    assert again.files_deleted == 0
    assert DeltaTable(url).to_pyarrow_table().column("id").to_pylist() == [9]
    vacuum(None, url, retain="0h", mode="lite", allow_short_retention=True)  # files already gone: no error
    assert DeltaTable(url).to_pyarrow_table().column("id").to_pylist() == [9]


def test_lite_vacuum_on_s3_lists_the_log_once_and_probes_no_folder(s3_server, monkeypatch):
    """Every listing is a round trip (and a scan of the bucket on some servers): the log's listing gives the
    commits' timestamps too, and the concurrent-commit guard reads the next commit instead of HEAD + LIST."""
    from dbt_delta_optimize.delta.object_store import ObjectStorage

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_server.new_bucket()}/t"
    _table(url)
    calls: list[tuple[str, str]] = []
    for name in ("list_top", "list_dir", "walk", "exists", "stat"):
        original = getattr(ObjectStorage, name)

        def counted(self, path, *args, _name=name, _original=original, **kwargs):
            calls.append((_name, path.rsplit("/t/", 1)[-1]))
            return _original(self, path, *args, **kwargs)

        monkeypatch.setattr(ObjectStorage, name, counted)
    metrics = vacuum(None, url, retain="0h", mode="lite", allow_short_retention=True)
    assert metrics.files_deleted == 3
    assert calls == [("list_top", "_delta_log")]
    assert DeltaTable(url).to_pyarrow_table().column("id").to_pylist() == [9]


def test_our_replay_of_the_file_actions_finds_deltalakes_live_files(tmp_path):
    from urllib.parse import unquote

    from dbt_delta_optimize.delta.vacuum_log import LogReads, read_state

    path = str(tmp_path / "t")
    _table(path, batches=4)
    DeltaTable(path).create_checkpoint()
    write_deltalake(path, pa.table({"id": [5, 6], "p": ["b", "c d"]}), partition_by=["p"], mode="append")
    DeltaTable(path).delete("id = 5")
    storage = LocalStorage()
    dt = DeltaTable(path)
    live, dead = read_state(LogReads(storage, path), dt.version())
    ours = {unquote(f.path) for f in live}
    theirs = {unquote(p) for p in pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist()}
    assert ours == theirs and len(ours) == 2
    assert {unquote(t.path) for t in dead} & ours == set() and all(t.deletion_timestamp > 0 for t in dead)
