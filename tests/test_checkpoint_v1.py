"""Our own checkpoint after our commit (``delta/checkpoint_v1.py``): written from the snapshot and the commits
since, never by loading the table again, and equal to the log's replay.

Each table is optimized so that our commit lands on a checkpoint version; the checkpoint must be ours (the
Parquet footer names pyarrow, not deltalake's parquet-rs), hold exactly what a replay of every JSON commit
holds (live adds with every field, unexpired tombstones, protocol, metaData, txn, domain metadata), and be
enough on its own: delta-spark and deltalake read the table from it alone, the earlier commits deleted, row
for row (with row ids and row commit versions where row tracking is on).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from dbt_delta_optimize.cli.main import cli
from dbt_delta_optimize.delta.actions import AddFile
from dbt_delta_optimize.delta.commit import Transaction as OurTransaction
from dbt_delta_optimize.delta.snapshot import load_snapshot, read_commit
from dbt_delta_optimize.delta.storage import LocalStorage
from tests.helpers import _key, _norm, rows_spark

SPECIAL = "a b%c=d"


def _optimize(path: str, *extra: str) -> dict[str, Any]:
    r = CliRunner().invoke(cli, ["optimize", path, *extra, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.stdout))


def _checkpoint(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.checkpoint.parquet")


def _ours(path: str, version: int) -> bool:
    """Whether the checkpoint at ``version`` was written by us (pyarrow), not by deltalake (parquet-rs)."""
    return str(pq.ParquetFile(_checkpoint(path, version)).metadata.created_by).startswith("parquet-cpp-arrow")


def _clean(value: Any) -> Any:
    """A log value as JSON has it: maps read from Parquet as dicts, null fields and empty maps dropped."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
        value = dict(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None and v != {} and v != []}
    return value


def _fkey(action: dict[str, Any]) -> tuple[str, str | None]:
    dv = action.get("deletionVector")
    dv_id = None if not dv else f"{dv['storageType']}{dv['pathOrInlineDv']}@{dv.get('offset')}"
    return unquote(action["path"]), dv_id


def _replay(path: str, version: int) -> dict[str, Any]:
    """delta-spark's InMemoryLogReplay over every JSON commit up to ``version`` (the reference)."""
    state: dict[str, Any] = {"add": {}, "remove": {}, "txn": {}, "domainMetadata": {}}
    for v in range(version + 1):
        for a in read_commit(path, v):
            if "add" in a:
                state["add"][_fkey(a["add"])] = a["add"]
                state["remove"].pop(_fkey(a["add"]), None)
            elif "remove" in a:
                state["add"].pop(_fkey(a["remove"]), None)
                state["remove"][_fkey(a["remove"])] = a["remove"]
            elif "txn" in a:
                state["txn"][a["txn"]["appId"]] = a["txn"]
            elif "domainMetadata" in a:
                dm = a["domainMetadata"]
                if dm.get("removed"):
                    state["domainMetadata"].pop(dm["domain"], None)
                else:
                    state["domainMetadata"][dm["domain"]] = dm
            elif "protocol" in a or "metaData" in a:
                state.update(a)
    return state


def _checkpoint_actions(path: str, version: int) -> dict[str, Any]:
    rows = pq.read_table(_checkpoint(path, version)).to_pylist()
    out: dict[str, Any] = {"add": {}, "remove": {}, "txn": {}, "domainMetadata": {}}
    for row in rows:
        kinds = [k for k, v in row.items() if v is not None]
        assert len(kinds) == 1, row  # one action per row
        kind, action = kinds[0], row[kinds[0]]
        if kind in ("add", "remove"):
            assert action["dataChange"] is False  # as delta-spark's checkpoint
            out[kind][_fkey(action)] = action
        elif kind == "txn":
            out["txn"][action["appId"]] = action
        elif kind == "domainMetadata":
            out["domainMetadata"][action["domain"]] = action
        else:
            assert kind not in out, f"two {kind} rows"
            out[kind] = action
    return out


def assert_checkpoint_is_the_replay(path: str, version: int) -> dict[str, Any]:
    """Our checkpoint at ``version`` holds exactly the replay's actions (tombstones: all of them are recent)."""
    want, got = _replay(path, version), _checkpoint_actions(path, version)
    assert set(got["add"]) == set(want["add"])
    for key, add in want["add"].items():
        ours = _clean({k: v for k, v in got["add"][key].items() if k != "dataChange"})
        assert ours == _clean({k: v for k, v in add.items() if k != "dataChange"}), key
    assert set(got["remove"]) == set(want["remove"])
    for key, rm in want["remove"].items():
        theirs = {k: v for k, v in rm.items() if k not in ("dataChange", "stats", "tags")}
        assert _clean({k: v for k, v in got["remove"][key].items() if k != "dataChange"}) == _clean(theirs), key
    assert _clean(got["protocol"]) == _clean(want["protocol"])
    meta = {**want["metaData"], "format": want["metaData"].get("format") or {"provider": "parquet"}}
    assert _clean(got["metaData"]) == _clean(meta)
    assert {k: _clean(v) for k, v in got["txn"].items()} == {k: _clean(v) for k, v in want["txn"].items()}
    assert {k: _clean(v) for k, v in got["domainMetadata"].items()} == {
        k: _clean(v) for k, v in want["domainMetadata"].items()
    }
    with open(os.path.join(path, "_delta_log", "_last_checkpoint")) as fh:
        last = json.load(fh)
    assert last["version"] == version and last["numOfAddFiles"] == len(want["add"])
    assert last["size"] == pq.ParquetFile(_checkpoint(path, version)).metadata.num_rows
    assert last["sizeInBytes"] == os.path.getsize(_checkpoint(path, version))
    return got


def checkpoint_only_copy(src: str, dst: str, version: int) -> str:
    """A copy whose log starts at our checkpoint, as log cleanup leaves it: every file of the versions before
    ``version`` gone (commits, checksums, older checkpoints), so only the checkpoint says what they did."""
    shutil.copytree(src, dst)
    log = os.path.join(dst, "_delta_log")
    for name in os.listdir(log):
        head = name.lstrip(".")[:20]
        if head.isdigit() and int(head) < version:
            os.remove(os.path.join(log, name))
    return dst


def _deltalake_rows(path: str) -> list[tuple]:
    from deltalake import QueryBuilder

    data = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all())
    cols = sorted(data.column_names)
    return sorted((tuple(_norm(r[c]) for c in cols) for r in data.select(cols).to_pylist()), key=_key)


# ------------------------------------------------------------------------------------ deltalake tables
def _deltars_table(path: str) -> None:
    """9 appends over three partitions (one named with URI-special characters), a txn, a checkpoint by
    deltalake at 4, a DELETE (tombstones): our optimize is version 10, a checkpoint version."""
    for i in range(9):
        data = pa.table({"id": [i, i + 100, i + 200], "part": ["x", "y", SPECIAL]})
        props = CommitProperties(app_transactions=[Transaction("app-1", i, 1000 + i)]) if i % 4 == 1 else None
        conf = {"delta.checkpointInterval": "10"} if i == 0 else None
        write_deltalake(path, data, partition_by=["part"], mode="append", configuration=conf, commit_properties=props)
        if i == 4:
            DeltaTable(path).create_checkpoint()
    DeltaTable(path).delete("id = 103")


def test_our_checkpoint_on_a_deltalake_table_is_the_replay_and_deltalake_s_equal(tmp_path):
    p = str(tmp_path / "t")
    _deltars_table(p)
    assert DeltaTable(p).version() == 9
    before = _deltalake_rows(p)
    out = _optimize(p)
    assert out["committedVersions"] == [10]
    assert _ours(p, 10), "our checkpoint, not deltalake's"
    got = assert_checkpoint_is_the_replay(p, 10)
    assert got["txn"]["app-1"]["version"] == 5 and len(got["remove"]) > 20

    # deltalake's own checkpoint of the same version holds the same actions
    q = str(tmp_path / "theirs")
    shutil.copytree(p, q)
    os.remove(_checkpoint(q, 10))
    os.remove(os.path.join(q, "_delta_log", "_last_checkpoint"))
    DeltaTable(q).create_checkpoint()
    assert not _ours(q, 10)
    theirs = _checkpoint_actions_loose(q, 10)
    assert set(theirs["add"]) == set(got["add"]) and set(theirs["remove"]) == set(got["remove"])
    for key, add in theirs["add"].items():
        assert _clean({k: v for k, v in got["add"][key].items() if k != "dataChange"}) == _clean(
            {k: v for k, v in add.items() if k != "dataChange"}
        )

    # the checkpoint alone: deltalake and our own readers (both of their paths) read the same table
    only = checkpoint_only_copy(p, str(tmp_path / "only"), 10)
    assert _deltalake_rows(only) == before
    full, lean = load_snapshot(p), load_snapshot(only)
    assert lean.version == 10 and sorted(lean.files, key=lambda f: f.path) == sorted(full.files, key=lambda f: f.path)
    # and writers go on from it: our next optimize and deltalake's append
    write_deltalake(only, pa.table({"id": [999], "part": ["x"]}), mode="append")
    assert _deltalake_rows(only) == sorted([*before, (999, "x")], key=_key)


def _checkpoint_actions_loose(path: str, version: int) -> dict[str, Any]:
    """deltalake's checkpoint rows by kind (it keeps dataChange as logged)."""
    out: dict[str, Any] = {"add": {}, "remove": {}}
    for row in pq.read_table(_checkpoint(path, version)).to_pylist():
        for kind in ("add", "remove"):
            if row.get(kind) is not None:
                out[kind][_fkey(row[kind])] = row[kind]
    return out


def test_expired_tombstones_and_txns_are_left_out(tmp_path):
    p = str(tmp_path / "t")
    _deltars_table(p)
    # a short retention: the DELETE's tombstones (and the appends' txn, last updated in 1970) have expired
    dt = DeltaTable(p)
    dt.alter.set_table_properties(
        {
            "delta.deletedFileRetentionDuration": "interval 1 second",
            "delta.setTransactionRetentionDuration": "interval 1 day",
        }
    )
    assert dt.version() == 10
    time.sleep(1.2)
    for i in range(9):
        write_deltalake(p, pa.table({"id": [300 + i], "part": ["x"]}), mode="append")
    out = _optimize(p, "--where", "part = 'x'")
    assert out["committedVersions"] == [20] and _ours(p, 20)
    got = _checkpoint_actions(p, 20)
    want = _replay(p, 20)
    deleted = max(a["remove"]["deletionTimestamp"] for a in read_commit(p, 9) if "remove" in a)
    recent = {k for k, r in want["remove"].items() if r["deletionTimestamp"] > deleted}
    assert recent and set(got["remove"]) == recent  # the DELETE's tombstones expired, our optimize's did not
    assert got["txn"] == {} and set(got["add"]) == set(want["add"])


# ------------------------------------------------------------------------------------ a lost commit
def test_a_lost_commit_reads_only_the_winners_commits(tmp_path):
    """The winners are read concurrently (one GET each and one for the version after them), never listed or
    probed with a HEAD; the commit lands after them and its checkpoint holds their files too."""
    p = str(tmp_path / "t")
    _deltars_table(p)
    snap = load_snapshot(p)  # version 9
    winners: list[int] = []

    class Racing(LocalStorage):
        def __init__(self) -> None:
            super().__init__()
            self.reads: list[str] = []
            self.probes = 0

        def put_if_absent(self, path: str, data: bytes) -> bool:
            if not winners:  # two other writers win versions 10 and 11 first
                for i in range(2):
                    write_deltalake(p, pa.table({"id": [700 + i], "part": ["y"]}), mode="append")
                    winners.append(DeltaTable(p).version())
            return super().put_if_absent(path, data)

        def read_bytes(self, path: str) -> bytes:
            self.reads.append(os.path.basename(path))
            return super().read_bytes(path)

        def exists(self, path: str) -> bool:
            self.probes += 1
            return super().exists(path)

        def list_dir(self, path: str):  # type: ignore[no-untyped-def]
            raise AssertionError("a lost commit lists nothing")

    storage = Racing()
    live = [f for f in snap.files if f.partition_values.get("part") == "x"]
    merged = AddFile(
        path=f"part=x/merged-{os.getpid()}.parquet",
        partition_values={"part": "x"},
        size=1,
        modification_time=1,
        data_change=False,
    )
    # a metadata-only commit of a (fake) merged file is enough here: nothing reads its data
    txn = OurTransaction(snap, storage=storage)
    txn.track_read(live)
    res = txn.commit([merged], "WRITE", {"mode": "Append"})
    assert winners == [10, 11] and res.version == 12 and res.rebased_over == (10, 11)
    assert sorted(storage.reads) == [f"{10:020d}.json", f"{11:020d}.json", f"{12:020d}.json"]
    assert storage.probes == 0
    # (version 12 was read as the probe after the winners, then written by us: the next probe found it absent)
    assert os.path.exists(os.path.join(p, "_delta_log", f"{12:020d}.json"))


def test_a_commit_after_winners_on_a_checkpoint_version_holds_their_files(tmp_path):
    p = str(tmp_path / "t")
    _deltars_table(p)
    write_deltalake(p, pa.table({"id": [800], "part": ["y"]}), mode="append")  # version 10: deltalake's checkpoint?
    snap = load_snapshot(p)
    assert snap.version == 10
    for i in range(8):
        write_deltalake(p, pa.table({"id": [900 + i], "part": [SPECIAL]}), mode="append")  # winners 11..18
    added = AddFile(path="part=x/ours.parquet", partition_values={"part": "x"}, size=1, modification_time=1)
    res = OurTransaction(snap).commit([added], "WRITE", {"mode": "Append"})
    assert res.version == 19 and res.rebased_over == tuple(range(11, 19))
    assert not os.path.exists(_checkpoint(p, 19))  # not a checkpoint version: nothing written
    more = OurTransaction(load_snapshot(p)).commit(
        [AddFile(path="part=x/ours2.parquet", partition_values={"part": "x"}, size=1, modification_time=1)],
        "WRITE",
        {"mode": "Append"},
    )
    assert more.version == 20 and more.checkpoint_version == 20 and _ours(p, 20)
    assert_checkpoint_is_the_replay(p, 20)


def test_a_rebased_commit_on_a_checkpoint_version_writes_the_winners_state(tmp_path):
    p = str(tmp_path / "t")
    _deltars_table(p)  # version 9
    snap = load_snapshot(p)
    DeltaTable(p).delete("id = 204")  # a winner at 10 removes a file we did not read
    write_deltalake(p, pa.table({"id": [801], "part": ["y"]}), mode="append")  # 11
    for i in range(8):
        write_deltalake(p, pa.table({"id": [900 + i], "part": ["y"]}), mode="append")  # 12..19
    added = AddFile(path="part=x/ours.parquet", partition_values={"part": "x"}, size=1, modification_time=1)
    res = OurTransaction(snap).commit([added], "WRITE", {"mode": "Append"})
    assert res.version == 20 and res.checkpoint_version == 20 and _ours(p, 20)
    assert_checkpoint_is_the_replay(p, 20)


# ------------------------------------------------------------------------------------ delta-spark tables
def _triples(spark, path: str) -> list[tuple]:
    q = f"SELECT id, name, part, _metadata.row_id, _metadata.row_commit_version FROM delta.`{path}`"
    return sorted(tuple(r) for r in spark.sql(q).collect())


@pytest.mark.spark
@pytest.mark.slow
def test_our_checkpoint_of_a_delta_spark_table_with_dvs_row_tracking_and_column_mapping(spark, tmp_path):
    """Deletion vectors, row tracking, column mapping (name), partitions, a txn: delta-spark checkpoints at 3,
    our optimize of one partition commits 6 (the other partition keeps its DVs) and checkpoints it."""
    p = str(tmp_path / "t")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, name STRING, part STRING) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.enableDeletionVectors'='true', 'delta.enableRowTracking'='true', "
        "'delta.columnMapping.mode'='name', 'delta.checkpointInterval'='3')"
    )
    for i in range(2):
        spark.sql(
            f"INSERT INTO delta.`{p}` SELECT /*+ REPARTITION(2) */ id, CAST(id AS STRING), "
            f"IF(id % 2 = 0, 'a', '{SPECIAL}') FROM range({i * 40}, {i * 40 + 40})"
        )
    df = spark.sql("SELECT id, CAST(id AS STRING) AS name, 'a' AS part FROM range(500, 510)")
    df.write.format("delta").option("txnAppId", "app-x").option("txnVersion", 7).mode("append").save(p)  # 3
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 5 = 0")  # 4: deletion vectors in both partitions
    spark.sql(f"UPDATE delta.`{p}` SET name = concat(name, '-u') WHERE id % 7 = 1")  # 5
    assert os.path.exists(_checkpoint(p, 3)) and not _ours(p, 3)
    before = _triples(spark, p)
    assert len({r[4] for r in before}) > 1

    out = _optimize(p, "--where", "part = 'a'")
    assert out["committedVersions"] == [6] and _ours(p, 6)
    got = assert_checkpoint_is_the_replay(p, 6)
    assert got["txn"]["app-x"]["version"] == 7
    assert "delta.rowTracking" in got["domainMetadata"]
    assert any(a.get("deletionVector") for a in got["add"].values()), "the other partition's DVs are live"
    assert all(a.get("baseRowId") is not None for a in got["add"].values())
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert _triples(spark, p) == before

    only = checkpoint_only_copy(p, str(tmp_path / "only"), 6)
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert _triples(spark, only) == before
    assert sorted((r[0], r[1], r[2]) for r in before) == sorted(
        (r[0], r[1], r[2]) for r in (tuple(x) for x in _deltalake_rows(only))
    )
    # delta-spark writes on from our checkpoint: a new row gets a fresh row id
    spark.sql(f"INSERT INTO delta.`{only}` VALUES (9999, 'n', 'a')")
    ids = [r[3] for r in _triples(spark, only)]
    assert len(ids) == len(set(ids)) == len(before) + 1
    assert rows_spark(spark, only, ["id"]) == sorted([(r[0],) for r in before] + [(9999,)], key=_key)


def test_a_later_batch_of_one_run_checkpoints_from_the_same_snapshot(tmp_path):
    """Two commits of one run on one snapshot (``commit_every``): the second, on a checkpoint version, takes
    the first from the run's log cache (not the store) and checkpoints both."""
    p = str(tmp_path / "t")
    _deltars_table(p)
    for i in range(9):
        write_deltalake(p, pa.table({"id": [600 + i], "part": ["y"]}), mode="append")
    snap = load_snapshot(p)
    assert snap.version == 18
    x = [f for f in snap.files if f.partition_values.get("part") == "x"]
    first = OurTransaction(snap)
    first.track_read(x[:2])
    now = int(time.time() * 1000)
    a = first.commit([x[0].remove(now), x[1].remove(now)], "DELETE", {})
    assert a.version == 19 and a.checkpoint_version is None

    class NoReads(LocalStorage):
        def read_bytes(self, path: str) -> bytes:
            raise AssertionError(f"read {path}: the run's own commit is in its log cache")

    second = OurTransaction(snap, storage=NoReads(), ours=[19])
    second.track_read(x[2:3])
    b = second.commit([x[2].remove(now)], "DELETE", {})
    assert b.version == 20 and b.rebased_over == (19,) and b.checkpoint_version == 20 and _ours(p, 20)
    got = assert_checkpoint_is_the_replay(p, 20)
    assert {x[0].path, x[1].path, x[2].path} <= {k[0] for k in got["remove"]}
