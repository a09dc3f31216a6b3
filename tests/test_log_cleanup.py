"""Log cleanup through our Storage (inspect/log_cleanup.py) and after our commit writer's checkpoint."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from dbt_delta_optimize.delta.storage import storage_for
from dbt_delta_optimize.errors import CorruptLogError
from dbt_delta_optimize.inspect.log_cleanup import clean_expired_logs

DAY = 86400
NOW_S = 200 * DAY
OLD_S = 100 * DAY


def _file(path: Path, data: bytes, t: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (t, t))


def _v2_log(root: Path) -> Path:
    """Commits 0..12, V2 JSON checkpoints at 5 and 10 naming sidecars a and b; c unreferenced, d young."""
    log = root / "_delta_log"
    for n in range(13):
        t = OLD_S + n if n < 12 else NOW_S
        _file(log / f"{n:020d}.json", b"{}\n", t)
        for cp, side in ((5, "a"), (10, "b")):
            if n == cp:
                action = {"sidecar": {"path": f"{side}.parquet", "sizeInBytes": 1, "modificationTime": 0}}
                _file(log / f"{n:020d}.checkpoint.{side}-uuid.json", json.dumps(action).encode() + b"\n", t + 0.5)
    _file(log / "_last_checkpoint", b'{"version": 10, "size": 1}', OLD_S + 10)
    for side in "abc":
        _file(log / "_sidecars" / f"{side}.parquet", b"s", OLD_S)
    _file(log / "_sidecars" / "d.parquet", b"s", NOW_S)
    return log


def test_v2_checkpoints_and_their_sidecars(tmp_path: Path) -> None:
    log = _v2_log(tmp_path)
    before = sorted(p.name for p in log.rglob("*"))
    storage = storage_for(str(tmp_path))
    dry = clean_expired_logs(storage, str(tmp_path), {}, v2_checkpoints=True, now_ms=NOW_S * 1000, dry_run=True)
    assert dry.files_deleted == 0 and sorted(p.name for p in log.rglob("*")) == before
    done = clean_expired_logs(storage, str(tmp_path), {}, v2_checkpoints=True, now_ms=NOW_S * 1000)
    assert done.files == dry.files and done.files_deleted == len(done.files) and done.bytes_deleted == dry.bytes
    # 0..9 and checkpoint 5 go (the group before checkpoint 10, which _last_checkpoint names, is all old)
    left = {p.name for p in log.iterdir() if p.is_file()}
    kept = {f"{n:020d}.json" for n in range(10, 13)} | {"_last_checkpoint", f"{10:020d}.checkpoint.b-uuid.json"}
    assert left == kept
    # a: its checkpoint went; c: never named; b: named by the kept checkpoint 10; d: young (maybe in progress)
    assert {p.name for p in (log / "_sidecars").iterdir()} == {"b.parquet", "d.parquet"}
    assert set(done.files) >= {"_sidecars/a.parquet", "_sidecars/c.parquet"}


def test_a_gap_is_refused_with_nothing_deleted(tmp_path: Path) -> None:
    log = _v2_log(tmp_path)
    (log / f"{7:020d}.json").unlink()
    before = sorted(p.name for p in log.rglob("*"))
    with pytest.raises(CorruptLogError, match="missing"):
        clean_expired_logs(storage_for(str(tmp_path)), str(tmp_path), {}, v2_checkpoints=True, now_ms=NOW_S * 1000)
    assert sorted(p.name for p in log.rglob("*")) == before


def test_cleanup_failure_never_fails_the_commit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from dbt_delta_optimize.delta.commit import Transaction
    from dbt_delta_optimize.delta.snapshot import load_snapshot

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1]}), configuration={"delta.checkpointInterval": "1"})
    calls: list[int] = []

    def boom(version: int) -> tuple[int, int]:
        calls.append(version)
        raise OSError("store down")

    txn = Transaction(load_snapshot(path), after_checkpoint=boom)
    with caplog.at_level(logging.WARNING):
        result = txn.commit([], "OPTIMIZE", {})
    assert result.version == 1 and result.checkpoint_version == 1 and calls == [1]
    assert result.log_files_deleted == 0
    assert "the commit stands" in caplog.text and "store down" in caplog.text


def test_a_bad_last_checkpoint_is_refused_with_nothing_deleted(tmp_path: Path) -> None:
    log = _v2_log(tmp_path)
    (log / "_last_checkpoint").write_bytes(b"not json")
    before = sorted(p.name for p in log.rglob("*"))
    with pytest.raises(CorruptLogError, match="not a checkpoint pointer"):
        clean_expired_logs(storage_for(str(tmp_path)), str(tmp_path), {}, now_ms=NOW_S * 1000)
    assert sorted(p.name for p in log.rglob("*")) == before


def test_on_s3_through_the_object_store(s3_server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same plan over obstore (moto): S3 keeps second-resolution times, so the groups are a second apart."""
    import time

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    url = f"s3://{s3_server.new_bucket()}/t"
    storage = storage_for(url, {})

    def put(name: str) -> None:
        storage.write_bytes(f"{url}/_delta_log/{name}", b"{}\n")

    for group in (
        ["0.json", "1.json"],
        ["2.checkpoint.parquet", "2.json", "3.json"],
        ["4.checkpoint.parquet", "4.json"],
    ):
        for name in group:
            n, _, ext = name.partition(".")
            put(f"{int(n):020d}.{ext}")
        time.sleep(1.1)
    storage.write_bytes(f"{url}/_delta_log/_last_checkpoint", b'{"version": 4, "size": 1}')
    later = int(time.time() * 1000) + 40 * DAY * 1000
    done = clean_expired_logs(storage, url, {}, now_ms=later)
    assert set(done.files) == {f"{n:020d}.json" for n in range(4)} | {f"{2:020d}.checkpoint.parquet"}
    left = {f.path for f in storage.walk(f"{url}/_delta_log", lambda _: False, by_prefix=False)}
    assert left == {"_last_checkpoint", f"{4:020d}.checkpoint.parquet", f"{4:020d}.json"}
