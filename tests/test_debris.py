"""Cleanup after killed runs: only files our manifests name and nobody committed, only our temp files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
from deltalake import write_deltalake

from dbt_delta_optimize.delta.debris import STAGING_DIR, RunJournal, RunManifest, clean_debris, find_debris
from dbt_delta_optimize.delta.storage import LocalStorage


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _table(tmp_path) -> str:
    p = str(tmp_path / "t")
    write_deltalake(p, pa.table({"id": [1, 2], "part": ["a", "b"]}), partition_by=["part"])
    return p


def _touch(root: str, rel: str, data: bytes = b"x") -> None:
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    with open(os.path.join(root, rel), "wb") as fh:
        fh.write(data)


def _commit_add(root: str, version: int, rel: str) -> None:
    add = {"path": rel, "partitionValues": {"part": "a"}, "size": 1, "modificationTime": 1, "dataChange": False}
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "w") as fh:
        fh.write(json.dumps({"commitInfo": {"operation": "OPTIMIZE"}}) + "\n" + json.dumps({"add": add}) + "\n")


def _dead_run(storage, root: str, files: list[str], dirs: list[str] = ()) -> RunJournal:
    journal = RunJournal(storage, root, read_version=0)
    journal._manifest = RunManifest(journal.run_id, journal.manifest.host, _dead_pid(), journal.manifest.started_ms, 0)
    journal.intend(files, dirs)
    return journal


def test_dead_run_leaves_nothing_but_what_it_committed(tmp_path):
    root, storage = _table(tmp_path), LocalStorage()
    committed, orphan, fresh_dir_file = (
        "part=a/part-0-committed.parquet",
        "part=a/part-1-orphan.parquet",
        "part=new/f.parquet",
    )
    journal = _dead_run(storage, root, [committed, orphan, fresh_dir_file], ["part=new"])
    for rel in (committed, orphan, fresh_dir_file):
        _touch(root, rel)
    _touch(root, f"{STAGING_DIR}/{journal.run_id}/spark/part-00000.parquet")
    _commit_add(root, 1, committed)
    foreign = "part=a/someone-elses.parquet"
    _touch(root, foreign)

    found = find_debris(storage, root)
    assert found.data_files == (orphan, fresh_dir_file) and found.runs == (journal.run_id,)
    result = clean_debris(storage, root)
    assert result.folders == ("part=new",)
    assert os.path.exists(os.path.join(root, committed)) and os.path.exists(os.path.join(root, foreign))
    assert not os.path.exists(os.path.join(root, orphan)) and not os.path.exists(os.path.join(root, "part=new"))
    assert not os.path.exists(os.path.join(root, STAGING_DIR))
    assert clean_debris(storage, root).removed == 0, "a second cleanup finds nothing"


def test_live_run_is_left_alone(tmp_path):
    root, storage = _table(tmp_path), LocalStorage()
    journal = RunJournal(storage, root, read_version=0)  # this process: alive
    journal.intend(["part=a/in-flight.parquet"])
    _touch(root, "part=a/in-flight.parquet")
    result = clean_debris(storage, root)
    assert result.removed == 0 and result.live_runs == (journal.run_id,)
    assert os.path.exists(os.path.join(root, "part=a/in-flight.parquet"))
    journal.close()
    assert not os.path.exists(os.path.join(root, STAGING_DIR))


def test_old_run_is_dead_even_if_its_pid_is_alive(tmp_path):
    root, storage = _table(tmp_path), LocalStorage()
    journal = RunJournal(storage, root, read_version=0)
    journal.intend(["part=b/old.parquet"])
    _touch(root, "part=b/old.parquet")
    later = journal.manifest.started_ms + 7 * 3600 * 1000
    assert find_debris(storage, root, now_ms=later).data_files == ("part=b/old.parquet",)
    assert find_debris(storage, root, now_ms=later, max_age_ms=10 * 3600 * 1000).data_files == ()


def test_only_our_stale_log_temp_files_are_removed(tmp_path):
    root, storage = _table(tmp_path), LocalStorage()
    log = os.path.join(root, "_delta_log")
    ours_old, ours_new = ".00000000000000000001.json.ddo-abc123.tmp", ".00000000000000000002.json.ddo-def456.tmp"
    theirs = ".00000000000000000001.json.5f0b8c1e-0000-0000-0000-000000000000.tmp"  # delta-spark's HDFS log store
    for name in (ours_old, ours_new, theirs):
        _touch(log, name)
    old = time.time() - 3600
    os.utime(os.path.join(log, ours_old), (old, old))
    os.utime(os.path.join(log, theirs), (old, old))
    assert clean_debris(storage, root).log_temp_files == (ours_old,)
    assert sorted(n for n in os.listdir(log) if n.endswith(".tmp")) == sorted([ours_new, theirs])


def test_put_if_absent_temp_files_carry_our_marker(tmp_path):
    storage = LocalStorage()
    target = str(tmp_path / "00000000000000000000.json")
    seen = []
    real_link = os.link

    def spy(src, dst):
        seen.append(os.path.basename(src))
        return real_link(src, dst)

    os.link = spy
    try:
        assert storage.put_if_absent(target, b"{}")
    finally:
        os.link = real_link
    assert seen and seen[0].startswith(".00000000000000000000.json.ddo-") and seen[0].endswith(".tmp")


def test_cut_short_manifest_folder_is_removed(tmp_path):
    root, storage = _table(tmp_path), LocalStorage()
    _touch(root, f"{STAGING_DIR}/deadbeef/manifest.json", b'{"runId": "dead')
    result = clean_debris(storage, root)
    assert result.runs == ("deadbeef",) and not os.path.exists(os.path.join(root, STAGING_DIR))
