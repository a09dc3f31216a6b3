"""VACUUM's front ends beyond the command, without Spark: the model key ``vacuum_lite_every`` (parsed, and the
post-hook's decision and run on a path), the health report's log-based estimate and last run (checked against
a dry run), and ``history``'s VACUUM START / END entries."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import write_deltalake

from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.dbt.outcome import Outcome
from dbt_delta_optimize.dbt.settings import parse_settings
from dbt_delta_optimize.dbt.vacuum_hook import due, history_last_vacuum, vacuum_after_spark
from dbt_delta_optimize.delta.snapshot import load_snapshot
from dbt_delta_optimize.errors import InvalidConfigError
from dbt_delta_optimize.inspect.health import health_report, render_html
from dbt_delta_optimize.inspect.history import history
from dbt_delta_optimize.inspect.vacuum_state import last_vacuum, vacuum_state
from dbt_delta_optimize.ops.vacuum import vacuum

DAY = 86_400_000


def _table(path: str, retention: str = "interval 0 hours") -> None:
    config = {"delta.deletedFileRetentionDuration": retention}
    for i in range(3):
        write_deltalake(path, pa.table({"id": [i]}), mode="append", configuration=config)
    write_deltalake(path, pa.table({"id": [9]}), mode="overwrite")  # three tombstones


def test_the_model_key_is_an_interval_and_off_by_default():
    assert parse_settings({}).vacuum_lite_every is None
    assert parse_settings({"vacuum_lite_every": "7d"}).vacuum_lite_every == 7 * DAY
    assert parse_settings({"vacuum_lite_every": "12h"}).vacuum_lite_every == DAY // 2
    assert parse_settings({"vacuum_lite_every": 2}).vacuum_lite_every == DAY // 12  # a number is hours
    for bad in ("soon", "0d", "-1d", True):
        with pytest.raises(InvalidConfigError, match=r"meta\.delta_optimize\.vacuum_lite_every"):
            parse_settings({"vacuum_lite_every": bad})


def test_due_when_never_run_or_older_than_the_interval():
    now = 10 * DAY
    assert due(DAY, None, now)
    assert due(DAY, {"timestamp": now - DAY}, now) and not due(DAY, {"timestamp": now - DAY + 1}, now)
    rows = [
        {"version": 7, "operation": "WRITE", "timestamp": datetime.datetime(2026, 1, 2)},
        {"version": 5, "operation": "VACUUM END", "timestamp": "2026-01-01 10:00:00"},
    ]
    found = history_last_vacuum(rows)
    assert found is not None and found["version"] == 5
    assert found["timestamp"] == int(datetime.datetime(2026, 1, 1, 10).timestamp() * 1000)
    assert history_last_vacuum(rows[:1]) is None


def test_the_post_hook_runs_lite_vacuum_when_due_and_not_again_within_the_interval(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    settings = parse_settings({"vacuum_lite_every": "7d"})
    record: dict = {"table": "t", "status": "nothingToDo"}
    vacuum_after_spark(None, record, path, load_snapshot(path), settings, None)
    entry = record["vacuum_lite"]
    assert entry["due"] and entry["ran"] and entry["lastVacuum"] is None and "error" not in record
    assert entry["metrics"]["mode"] == "lite" and entry["metrics"]["filesDeleted"] == 3  # retention 0 hours
    assert entry["metrics"]["endCommit"] is not None
    assert "vacuum lite deleted 3 files" in Outcome.of(record, 0.1).line()
    assert Outcome.of(record, 0.1).to_dict()["vacuum_lite"]["ran"] is True
    again: dict = {"table": "t"}
    vacuum_after_spark(None, again, path, load_snapshot(path), settings, None)
    assert again["vacuum_lite"]["due"] is False and again["vacuum_lite"]["ran"] is False
    assert entry["everySource"] == "meta"
    conf = {"spark.dbt_delta_optimize.vacuum.liteEvery": "1w"}.get  # the session's conf, when no meta key
    from_conf: dict = {"table": "t"}
    vacuum_after_spark(None, from_conf, path, load_snapshot(path), parse_settings({}), conf)
    assert from_conf["vacuum_lite"]["everyMs"] == 7 * DAY and from_conf["vacuum_lite"]["everySource"] == "conf"
    off: dict = {"table": "t"}
    vacuum_after_spark(None, off, path, load_snapshot(path), parse_settings({}), None)
    assert "vacuum_lite" not in off  # off by default
    assert again["vacuum_lite"]["lastVacuum"]["source"] == "_last_vacuum_info"  # one stat answers the hook
    time.sleep(0.01)
    later: dict = {"table": "t"}
    vacuum_after_spark(None, later, path, load_snapshot(path), dataclasses.replace(settings, vacuum_lite_every=5), None)
    assert later["vacuum_lite"]["due"] and later["vacuum_lite"]["ran"]  # the interval (5 ms) has passed


def test_the_post_hook_never_shortens_the_table_retention(tmp_path):
    path = str(tmp_path / "t")
    _table(path, retention="interval 7 days")
    record: dict = {"table": "t"}
    vacuum_after_spark(None, record, path, load_snapshot(path), parse_settings({"vacuum_lite_every": "1h"}), None)
    metrics = record["vacuum_lite"]["metrics"]
    assert record["vacuum_lite"]["ran"] and metrics["retentionMs"] == 7 * DAY and metrics["filesDeleted"] == 0


def test_health_estimates_what_vacuum_frees_from_the_log_and_when_it_last_ran(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    orphan = Path(path, "orphan.parquet")
    orphan.write_bytes(b"x" * 10)
    old = time.time() - 10 * 86400
    os.utime(orphan, (old, old))
    planned = vacuum(None, path, dry_run=True)
    state = vacuum_state(load_snapshot(path), now_ms=int(time.time() * 1000))
    tombstones = [c for c in planned.files if c.path != "orphan.parquet"]
    assert len(planned.files) == 4 and state.files == len(tombstones) == 3  # the orphan needs a listing
    assert state.bytes == sum(c.size for c in tombstones) > 0 and state.last_vacuum is None

    done = vacuum(None, path, mode="lite")
    report = health_report(path).to_dict()["vacuum"]
    assert report["reclaimableFiles"] == 0 and report["reclaimableBytes"] == 0
    assert report["lastVacuum"]["version"] == done.end_commit and report["lastVacuum"]["status"] == "COMPLETED"
    out = CliRunner().invoke(cli, ["health", path])
    assert out.exit_code == 0 and "vacuum: 0 B in 0 file(s)" in out.output and "VACUUM END commit" in out.output
    page = Path(render_html(health_report(path), str(tmp_path / "h.html"))).read_text()
    assert 'id="last-vacuum"' in page and "COMPLETED" in page and "not counted" in page


def test_last_vacuum_without_logging_is_when_last_vacuum_info_was_written(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    vacuum(None, path, vacuum_logging=False)
    found = last_vacuum(load_snapshot(path))
    assert found is not None and found["source"] == "_last_vacuum_info" and found["version"] is None
    assert abs(found["timestamp"] - time.time() * 1000) < 60_000


def test_history_shows_vacuum_start_and_end_with_their_metrics(tmp_path):
    path = str(tmp_path / "t")
    _table(path)
    m = vacuum(None, path)
    entries = {e["version"]: e for e in history(path, 3)}
    start, end = entries[m.start_commit], entries[m.end_commit]
    assert start["operation"] == "VACUUM START" and end["operation"] == "VACUUM END"
    assert start["vacuum"]["numFilesToDelete"] == 3 and start["vacuum"]["sizeOfDataToDelete"] == m.bytes_deleted
    assert end["vacuum"] == {"numDeletedFiles": 3, "numVacuumedDirectories": 0, "status": "COMPLETED"}
    assert entries[m.start_commit - 1]["vacuum"] is None
    out = CliRunner().invoke(cli, ["history", path, "--limit", "2"])
    assert out.exit_code == 0 and "numDeletedFiles=3" in out.output and "status=COMPLETED" in out.output
    as_json = json.loads(CliRunner().invoke(cli, ["history", path, "--limit", "1", "--json"]).output)
    assert as_json[0]["vacuum"]["status"] == "COMPLETED"


class _Conn:
    """dbt's SQL connection as the SQL executor uses it: records the statements, answers history and properties."""

    def __init__(self, history: list[dict]) -> None:
        self.sent: list[str] = []
        self.history = history

    def rows(self, statement: str) -> list[dict]:
        self.sent.append(statement)
        if statement.startswith("DESCRIBE HISTORY"):
            return self.history
        if statement.startswith("SHOW TBLPROPERTIES"):
            return [{"key": "delta.deletedFileRetentionDuration", "value": "interval 2 days"}]
        return [{"path": "/wh/t"}]


def test_over_sql_the_hook_sends_vacuum_lite_at_the_tables_retention_only_when_due():
    from dbt_delta_optimize.dbt.vacuum_hook import vacuum_after_sql

    settings = parse_settings({"vacuum_lite_every": "1d"})
    old = {"version": 3, "operation": "VACUUM END", "timestamp": datetime.datetime.now() - datetime.timedelta(days=2)}
    conn, record = _Conn([{"version": 4, "operation": "WRITE", "timestamp": datetime.datetime.now()}, old]), {}
    vacuum_after_sql(conn, record, "s.t", None, settings)  # type: ignore[arg-type]
    assert conn.sent == [
        "DESCRIBE HISTORY `s`.`t` LIMIT 1000",
        "SHOW TBLPROPERTIES `s`.`t`",
        "VACUUM `s`.`t` LITE RETAIN 48 HOURS",  # the table's retention, never shorter
    ]
    assert record["vacuum_lite"]["ran"] and record["vacuum_lite"]["lastVacuum"]["version"] == 3
    recent = {**old, "timestamp": datetime.datetime.now() - datetime.timedelta(hours=1)}
    conn, record = _Conn([recent]), {}
    vacuum_after_sql(conn, record, "s.t", None, settings)  # type: ignore[arg-type]
    assert len(conn.sent) == 1 and record["vacuum_lite"]["due"] is False and not record["vacuum_lite"]["ran"]


def _z85(data: bytes) -> str:
    chars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = []
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i : i + 4], "big")
        out.append("".join(chars[(n // 85**k) % 85] for k in range(4, -1, -1)))
    return "".join(out)


def test_health_estimate_skips_what_live_files_still_use_as_a_dry_run_does(tmp_path):
    """A removed path added again, a DV swapped on a live file (old DV freed, new kept), a tombstone with an
    absolute path, and a young tombstone: the estimate, which reads live files only in Arrow, equals the dry
    run's expired tombstones and unused DVs."""
    import uuid

    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    old = int(time.time() * 1000) - 10 * DAY
    dvs = {k: uuid.uuid4() for k in ("old", "new")}
    for k, u in dvs.items():
        Path(root, f"deletion_vector_{u}.bin").write_bytes(b"d" * (7 if k == "old" else 9))
    for name in ("a.parquet", "b.parquet", "c.parquet", "d.parquet", "e.parquet", "young.parquet"):
        Path(root, name).write_bytes(b"x" * 11)
    for f in root.iterdir():
        os.utime(f, (old / 1000, old / 1000))  # files older than the retention (VACUUM's other condition)

    def dv(k: str) -> dict[str, object]:
        return {
            "storageType": "u",
            "pathOrInlineDv": _z85(dvs[k].bytes),
            "offset": 1,
            "sizeInBytes": 7,
            "cardinality": 1,
        }

    def add(path: str, d: str | None = None) -> dict[str, object]:
        a: dict[str, object] = {
            "path": path,
            "partitionValues": {},
            "size": 11,
            "modificationTime": old,
            "dataChange": True,
        }
        return {"add": a | ({"deletionVector": dv(d)} if d else {})}

    def rm(path: str, ts: int, d: str | None = None) -> dict[str, object]:
        r: dict[str, object] = {"path": path, "deletionTimestamp": ts, "dataChange": True, "size": 11}
        return {"remove": r | ({"deletionVector": dv(d)} if d else {})}

    schema = json.dumps(
        {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    )
    commits = [
        [
            {
                "protocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["deletionVectors"],
                    "writerFeatures": ["deletionVectors"],
                }
            },
            {
                "metaData": {
                    "id": "x",
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": schema,
                    "partitionColumns": [],
                    "configuration": {},
                    "createdTime": old,
                }
            },
            add("a.parquet"),
            add("b.parquet"),
            add("c.parquet", "old"),
            add("young.parquet"),
            add(f"file://{root}/d.parquet"),
            add("e.parquet", "new"),
        ],
        [
            rm("a.parquet", old),
            rm("b.parquet", old),
            rm(f"file://{root}/d.parquet", old),
            rm("c.parquet", old, "old"),
            rm("e.parquet", old, "new"),  # its DV file also holds c's new DV: kept
            add("c.parquet", "new"),
        ],
        [add("a.parquet"), rm("young.parquet", int(time.time() * 1000))],
    ]
    for v, actions in enumerate(commits):
        lines = [{"commitInfo": {"timestamp": old + v, "operation": "WRITE"}}, *actions]
        Path(root, "_delta_log", f"{v:020d}.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        os.utime(Path(root, "_delta_log", f"{v:020d}.json"), (old / 1000, old / 1000))

    planned = vacuum(None, str(root), dry_run=True)
    state = vacuum_state(load_snapshot(str(root)), now_ms=int(time.time() * 1000))
    freed = sorted(c.path for c in planned.files)
    assert freed == [
        "b.parquet",
        "d.parquet",
        f"deletion_vector_{dvs['old']}.bin",
        "e.parquet",
    ]  # a is live again, c keeps its new DV
    assert (state.files, state.bytes, state.dv_files, state.dv_bytes) == (3, 33, 1, 7)
