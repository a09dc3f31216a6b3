"""The snapshot reader: what load_snapshot and the raw-log readers return, for tables of both engines."""

from __future__ import annotations

import datetime
import json
import os
from urllib.parse import unquote

import pyarrow as pa
import pytest

from dbt_delta_optimize.delta.snapshot import (
    latest_version,
    load_snapshot,
    partition_key,
    read_commit,
    read_commits,
)
from dbt_delta_optimize.errors import NotADeltaTableError, TableNotFoundError
from tests.helpers import rows_deltars, rows_spark

SPECIALS = ["a b/c%d", "x=y#z?:ü", "50% off", "plain"]


def _raw_live_adds(path: str, version: int | None = None) -> dict[str, dict]:
    """Live add actions by replaying every JSON commit (no checkpoints in these tables)."""
    live: dict[str, dict] = {}
    for _, actions in read_commits(path, 0, version):
        for a in actions:
            if "add" in a:
                live[unquote(a["add"]["path"])] = a["add"]
            elif "remove" in a:
                live.pop(unquote(a["remove"]["path"]), None)
    return live


def _assert_files_match_log(snap, version: int | None = None) -> None:
    raw = _raw_live_adds(snap.location, version)
    assert {unquote(f.path) for f in snap.files} == set(raw)
    for f in snap.files:
        r = raw[unquote(f.path)]
        assert f.path == r["path"], "the log's path string is kept verbatim"
        assert dict(f.partition_values) == r["partitionValues"], "raw partition-value strings"
        assert f.size == r["size"] == os.path.getsize(snap.file_path(f.path))
        assert f.modification_time == r["modificationTime"]
        assert f.stats == r.get("stats")
        assert dict(f.tags) == (r.get("tags") or {})
        assert f.data_change is r["dataChange"]
        assert f.deletion_vector is None


@pytest.mark.spark
def test_snapshot_of_spark_table_with_typed_special_partitions(spark, tmp_path):
    path = str(tmp_path / "spark_parts")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, s STRING, p_str STRING, p_int INT, p_date DATE) USING delta "
        "PARTITIONED BY (p_str, p_int, p_date) TBLPROPERTIES ('ddo.owner' = 'tests', 'delta.logRetentionDuration' = 'interval 60 days')"
    )
    rows = [
        (i, f"s{i}", p, n, datetime.date(2024, 1, 2))
        for i, (p, n) in enumerate(
            [(SPECIALS[0], 7), (SPECIALS[1], -1), (SPECIALS[2], None), (SPECIALS[3], 7), (None, 0), ("", 3)]
        )
    ]
    df = spark.createDataFrame(rows, "id long, s string, p_str string, p_int int, p_date date")
    df.coalesce(1).write.format("delta").mode("append").save(path)
    df.coalesce(1).write.format("delta").mode("append").save(path)

    snap = load_snapshot(path)
    assert snap.version == 2 == latest_version(path)
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 2)
    assert snap.protocol.reader_features is None and snap.protocol.writer_features is None
    meta_raw = read_commit(path, 0)[1]["metaData"]
    assert snap.metadata.id == meta_raw["id"]
    assert snap.partition_columns == ("p_str", "p_int", "p_date")
    assert snap.partition_types == {"p_str": "string", "p_int": "integer", "p_date": "date"}
    assert snap.configuration == {"ddo.owner": "tests", "delta.logRetentionDuration": "interval 60 days"}
    assert [f["name"] for f in snap.schema["fields"]] == ["id", "s", "p_str", "p_int", "p_date"]
    assert [f["name"] for f in snap.data_fields] == ["id", "s"]
    assert snap.location == os.path.realpath(path) and snap.log_dir == os.path.join(snap.location, "_delta_log")

    assert len(snap.files) == 12
    _assert_files_match_log(snap)
    values = {tuple(sorted(f.partition_values.items(), key=lambda kv: kv[0])) for f in snap.files}
    assert (("p_date", "2024-01-02"), ("p_int", "7"), ("p_str", "a b/c%d")) in values
    assert (("p_date", "2024-01-02"), ("p_int", None), ("p_str", "50% off")) in values
    assert (("p_date", "2024-01-02"), ("p_int", "0"), ("p_str", None)) in values
    assert sum(f.num_records for f in snap.files) == 12
    assert snap.total_size == sum(f.size for f in snap.files)
    for f in snap.files:  # the file really is where file_path says, and holds the partition's rows
        assert os.path.isfile(snap.file_path(f.path))
        assert f.parsed_stats["numRecords"] == 1 and f.tags == {}
    # "" is stored as null by delta-spark; partition_key folds "" and null alike.
    assert partition_key({"a": "", "b": "x"}, ["a", "b", "c"]) == (None, "x", None)
    keys = {partition_key(f.partition_values, snap.partition_columns) for f in snap.files}
    assert len(keys) == 6 and ("x=y#z?:ü", "-1", "2024-01-02") in keys

    # The snapshot at an older version, and the partition data both engines read from those paths.
    old = load_snapshot(path, version=1)
    assert old.version == 1 and len(old.files) == 6
    _assert_files_match_log(old, 1)
    assert rows_spark(spark, path, ["id", "p_str"]) == rows_deltars(path, ["id", "p_str"])


def test_snapshot_of_deltars_table_with_special_partitions(tmp_path):
    from deltalake import write_deltalake

    path = str(tmp_path / "rs_parts")
    t = pa.table(
        {
            "id": pa.array(range(len(SPECIALS) + 1), pa.int64()),
            "part": pa.array([*SPECIALS, None], pa.string()),
            "d": pa.array([datetime.date(2024, 5, 6)] * (len(SPECIALS) + 1), pa.date32()),
        }
    )
    write_deltalake(path, t, partition_by=["part", "d"], configuration={"delta.appendOnly": "false"})
    write_deltalake(path, t, partition_by=["part", "d"], mode="append")
    snap = load_snapshot(path)
    assert snap.version == 1
    assert snap.partition_columns == ("part", "d")
    assert snap.partition_types == {"part": "string", "d": "date"}
    assert snap.configuration.get("delta.appendOnly") == "false"
    assert len(snap.files) == 10
    _assert_files_match_log(snap)
    assert {f.partition_values["part"] for f in snap.files} == set(SPECIALS) | {None}
    assert {f.partition_values["d"] for f in snap.files} == {"2024-05-06"}
    for f in snap.files:
        assert os.path.isfile(snap.file_path(f.path)), f.path


def test_read_commits_and_versions(tmp_path):
    from deltalake import write_deltalake

    path = str(tmp_path / "commits")
    for i in range(3):
        write_deltalake(path, pa.table({"id": pa.array([i], pa.int64())}), mode="append")
    assert latest_version(path) == 2
    got = read_commits(path, 1, 2)
    assert [v for v, _ in got] == [1, 2]
    for v, actions in got:
        assert actions == read_commit(path, v)
        assert any("commitInfo" in a for a in actions)
        assert sum("add" in a for a in actions) == 1
    assert [v for v, _ in read_commits(path, 0)] == [0, 1, 2]
    assert read_commits(path, 3) == []
    assert "protocol" in {k for a in read_commit(path, 0) for k in a}
    with pytest.raises(TableNotFoundError, match="Version 7"):
        read_commit(path, 7)
    with pytest.raises(TableNotFoundError, match="Version 9"):
        load_snapshot(path, version=9)
    assert [len(load_snapshot(path, version=v).files) for v in range(3)] == [1, 2, 3]
    # file: URIs and trailing slashes name the same table
    assert load_snapshot(f"file://{path}").location == load_snapshot(path + "/").location == os.path.realpath(path)


@pytest.mark.spark
def test_removed_files_are_not_live(spark, tmp_path):
    path = str(tmp_path / "removed")
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "a")], "id long, part string").write.format("delta").partitionBy(
        "part"
    ).save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE part = 'a'")
    snap = load_snapshot(path)
    assert {f.partition_values["part"] for f in snap.files} == {"b"}
    _assert_files_match_log(snap)
    removed = {a["remove"]["path"] for a in read_commit(path, 1) if "remove" in a}
    assert removed and not removed & {f.path for f in snap.files}


def test_missing_path_is_table_not_found(tmp_path):
    missing = str(tmp_path / "nope" / "table")
    for call in (lambda: load_snapshot(missing), lambda: latest_version(missing)):
        with pytest.raises(TableNotFoundError) as ei:
            call()
        assert type(ei.value) is TableNotFoundError
        assert missing in str(ei.value) and "does not exist" in str(ei.value)


def test_plain_directory_is_not_a_delta_table(tmp_path):
    import pyarrow.parquet as pq

    plain = tmp_path / "plain"
    plain.mkdir()
    pq.write_table(pa.table({"id": [1]}), str(plain / "part-0.parquet"))
    for call in (lambda: load_snapshot(str(plain)), lambda: latest_version(str(plain))):
        with pytest.raises(NotADeltaTableError) as ei:
            call()
        msg = str(ei.value)
        assert str(plain) in msg and "not a Delta table" in msg and "_delta_log" in msg


def test_empty_log_is_not_a_delta_table(tmp_path):
    empty = tmp_path / "empty"
    (empty / "_delta_log").mkdir(parents=True)
    with pytest.raises(NotADeltaTableError, match="empty _delta_log"):
        latest_version(str(empty))
    with pytest.raises(NotADeltaTableError) as ei:
        load_snapshot(str(empty))
    assert str(empty) in str(ei.value)


def test_tags_and_stats_round_trip(tmp_path):
    """Tags and stats written by a commit come back verbatim from load_snapshot."""
    from deltalake import write_deltalake

    from dbt_delta_optimize.delta.actions import AddFile
    from dbt_delta_optimize.delta.commit import Transaction

    path = str(tmp_path / "tags")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}))
    snap = load_snapshot(path)
    src = snap.files[0]
    stats = json.dumps({"numRecords": 1, "minValues": {"id": 1}, "maxValues": {"id": 1}, "nullCount": {"id": 0}})
    import shutil

    dup = "copy with space.parquet"
    shutil.copy(snap.file_path(src.path), os.path.join(path, dup))
    add = AddFile(
        path="copy%20with%20space.parquet",
        partition_values={},
        size=src.size,
        modification_time=123,
        stats=stats,
        tags={"INSERTION_TIME": "1", "k": "v"},
    )
    Transaction(snap).commit([add], "WRITE", {"mode": "Append"})
    got = {f.path: f for f in load_snapshot(path).files}
    assert got[add.path] == add
    assert load_snapshot(path).file_path(add.path) == os.path.join(os.path.realpath(path), dup)
    assert sorted(r[0] for r in rows_deltars(path)) == [1, 1]


def test_a_load_parses_each_commit_once(tmp_path, monkeypatch):
    """The protocol and metadata, then the adds, come from the same commits: each is parsed once per load, and
    the parsed actions are not kept after it."""
    from deltalake import write_deltalake

    import dbt_delta_optimize.delta.file_table as file_table
    import dbt_delta_optimize.delta.lean_replay as lean_replay
    import dbt_delta_optimize.delta.log as log

    path = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(path, pa.table({"id": [i], "p": [str(i % 2)]}), partition_by=["p"], mode="append")
    parsed: list[int] = []
    real = log.parse_commit
    for module in (log, lean_replay, file_table):  # wherever it is called from
        monkeypatch.setattr(module, "parse_commit", lambda data, root, v: parsed.append(v) or real(data, root, v))
    snap = load_snapshot(path)
    assert sorted(parsed) == [0, 1, 2]
    assert len(snap.files) == 3 and snap.log_cache is not None and snap.log_cache._parsed is None
