"""The commit writer against the two reference engines.

Every rewrite here is made the way the executor makes one: read the files of a partition,
write ONE new Parquet file with the same rows (correct size and stats), then commit
AddFile(dataChange=false) + RemoveFiles as an OPTIMIZE through ``Transaction``.
Afterwards delta-spark and delta-rs must read exactly the same rows and see our commit.
"""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
import threading
import time
import uuid
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dbt_delta_optimize.delta.actions import AddFile, RemoveFile
from dbt_delta_optimize.delta.commit import CommitResult, Transaction, check_conflicts, engine_info
from dbt_delta_optimize.delta.snapshot import Snapshot, load_snapshot, read_commit
from dbt_delta_optimize.errors import (
    CommitConflictError,
    CommitFailedError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    InvalidConfigError,
    MetadataChangedError,
    ProtocolChangedError,
)
from tests.helpers import _key, log_snapshot, log_versions, rows_deltars, rows_spark

OPTIMIZE_PARAMS = {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": False}
SPECIAL = "a b/c%d"  # space, slash and percent: Hive-escaped directory, URI-encoded log path
COLS = ["id", "name", "part"]
SPARK_SCHEMA = "id long, name string, part string"
HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------- file helpers
def _stats(table: pa.Table) -> str:
    """Delta stats JSON for a data file (int64 and string columns get min/max)."""
    mins, maxs, nulls = {}, {}, {}
    for name in table.column_names:
        col = table.column(name)
        nulls[name] = col.null_count
        if col.null_count < len(col) and (pa.types.is_integer(col.type) or pa.types.is_string(col.type)):
            mm = pc.min_max(col)
            mins[name], maxs[name] = mm["min"].as_py(), mm["max"].as_py()
    return json.dumps(
        {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}, separators=(",", ":")
    )


def write_data_file(
    root: str,
    log_dir: str,
    table: pa.Table,
    partition_values: dict[str, str | None],
    *,
    data_change: bool,
    tags: dict[str, str] | None = None,
) -> AddFile:
    """Write ``table`` as one Parquet file under ``log_dir`` (log-encoded dir) and describe it as an AddFile."""
    name = f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    full = os.path.join(root, unquote(log_dir), name) if log_dir else os.path.join(root, name)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    pq.write_table(table, full, compression="snappy")
    st = os.stat(full)
    return AddFile(
        path=posixpath.join(log_dir, name) if log_dir else name,
        partition_values=partition_values,
        size=st.st_size,
        modification_time=int(st.st_mtime * 1000),
        data_change=data_change,
        stats=_stats(table),
        tags=tags or {},
    )


def _data_columns(snapshot: Snapshot) -> list[str]:
    return [f["name"] for f in snapshot.data_fields]


def compact(
    snapshot: Snapshot, files: list[AddFile], *, tags: dict[str, str] | None = None
) -> tuple[AddFile, list[RemoveFile], dict[str, int]]:
    """One new file with the rows of ``files`` (same partition), plus the removes and OPTIMIZE metrics."""
    assert files and len({tuple(sorted(f.partition_values.items())) for f in files}) == 1
    cols = _data_columns(snapshot)
    parts = [pq.read_table(snapshot.file_path(f.path)) for f in files]
    schema = pa.schema([parts[0].schema.field(c) for c in cols])
    merged = pa.concat_tables([p.select(cols).cast(schema) for p in parts])
    add = write_data_file(
        snapshot.location,
        posixpath.dirname(files[0].path),
        merged,
        dict(files[0].partition_values),
        data_change=False,
        tags=tags,
    )
    ts = int(time.time() * 1000)
    removes = [f.remove(ts) for f in files]
    sizes = sorted([add.size])
    metrics = {
        "numAddedFiles": 1,
        "numRemovedFiles": len(removes),
        "numAddedBytes": add.size,
        "numRemovedBytes": sum(f.size for f in files),
        "minFileSize": sizes[0],
        "p25FileSize": sizes[len(sizes) // 4],
        "p50FileSize": sizes[len(sizes) // 2],
        "p75FileSize": sizes[len(sizes) * 3 // 4],
        "maxFileSize": sizes[-1],
        "numDeletionVectorsRemoved": 0,
    }
    return add, removes, metrics


def in_partition(snapshot: Snapshot, **values: str | None) -> list[AddFile]:
    return [f for f in snapshot.files if all(f.partition_values.get(k) == v for k, v in values.items())]


def rewrite(
    snapshot: Snapshot, files: list[AddFile], **kw: Any
) -> tuple[CommitResult, AddFile, list[RemoveFile], dict]:
    add, removes, metrics = compact(snapshot, files, **kw)
    txn = Transaction(snapshot)
    txn.track_read(files)
    res = txn.commit([add, *removes], "OPTIMIZE", OPTIMIZE_PARAMS, metrics)
    return res, add, removes, metrics


def blind_append(snapshot: Snapshot, adds: list[AddFile]) -> CommitResult:
    return Transaction(snapshot).commit(adds, "WRITE", {"mode": "Append"}, {"numFiles": len(adds)})


def raw_lines(path: str, version: int) -> list[dict[str, Any]]:
    return read_commit(path, version)


def assert_optimize_commit_shape(
    path: str, result: CommitResult, before: Snapshot, add: AddFile, removes: list[RemoveFile], metrics: dict
) -> None:
    """The exact JSON shape of our OPTIMIZE commit (delta-spark's, see reference §1.8 and facts §6)."""
    actions = raw_lines(path, result.version)
    assert list(actions[0]) == ["commitInfo"], "commitInfo must be the first action"
    ci = actions[0]["commitInfo"]
    assert set(ci) == {
        "timestamp",
        "operation",
        "operationParameters",
        "readVersion",
        "isolationLevel",
        "isBlindAppend",
        "operationMetrics",
        "engineInfo",
        "txnId",
    }
    assert ci["operation"] == "OPTIMIZE"
    assert ci["operationParameters"] == OPTIMIZE_PARAMS and ci["operationParameters"]["auto"] is False
    assert ci["readVersion"] == before.version == result.read_version
    assert ci["isolationLevel"] == "SnapshotIsolation"
    assert ci["isBlindAppend"] is False
    assert ci["engineInfo"] == engine_info()
    assert isinstance(ci["timestamp"], int) and abs(ci["timestamp"] - time.time() * 1000) < 120_000
    uuid.UUID(ci["txnId"])
    assert all(isinstance(v, str) for v in ci["operationMetrics"].values()), "operationMetrics values must be strings"
    assert ci["operationMetrics"] == {k: str(v) for k, v in metrics.items()}

    adds = [a["add"] for a in actions[1:] if "add" in a]
    rms = [a["remove"] for a in actions[1:] if "remove" in a]
    assert len(adds) + len(rms) == len(actions) - 1, "only add/remove actions after commitInfo"
    assert adds == [add.to_json()]
    assert adds[0]["dataChange"] is False
    assert adds[0]["size"] == os.path.getsize(before.file_path(add.path))
    assert json.loads(adds[0]["stats"])["numRecords"] == sum(
        json.loads(f.stats)["numRecords"] for f in before.files if f.path in {r.path for r in removes}
    )
    originals = {f.path: f for f in before.files}
    assert sorted(r["path"] for r in rms) == sorted(r.path for r in removes)
    for r in rms:
        src = originals[r["path"]]
        assert r["dataChange"] is False
        assert isinstance(r["deletionTimestamp"], int) and r["deletionTimestamp"] > 0
        assert r["extendedFileMetadata"] is True
        assert r["partitionValues"] == dict(src.partition_values)
        assert r["size"] == src.size
        assert r["stats"] == src.stats
        if src.tags:
            assert r["tags"] == dict(src.tags)
        else:
            assert "tags" not in r


def assert_history(spark, path: str, result: CommitResult, metrics: dict) -> None:
    """delta-spark's DESCRIBE HISTORY and delta-rs's history() both show our commit."""
    h = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where(f"version = {result.version}").collect()
    assert len(h) == 1
    row = h[0]
    assert row.operation == "OPTIMIZE"
    assert row.engineInfo == engine_info()
    assert row.readVersion == result.read_version
    assert row.isolationLevel == "SnapshotIsolation"
    assert row.isBlindAppend is False
    assert dict(row.operationMetrics) == {k: str(v) for k, v in metrics.items()}
    assert dict(row.operationParameters) == {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": "false"}

    from deltalake import DeltaTable

    rs = DeltaTable(path).history(1)[0]
    assert rs["operation"] == "OPTIMIZE" and rs["version"] == result.version
    assert rs["engineInfo"] == engine_info()
    assert rs["operationMetrics"] == {k: str(v) for k, v in metrics.items()}


def spark_input_files(spark, path: str) -> set[str]:
    return {os.path.basename(unquote(f)) for f in spark.read.format("delta").load(path).inputFiles()}


def new_log_entries(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    for name, data in before.items():
        assert after.get(name) == data, f"log entry {name} was changed or removed"
    return set(after) - set(before)


def assert_no_tmp(path: str) -> None:
    leftovers = [n for n in os.listdir(os.path.join(path, "_delta_log")) if n.endswith(".tmp")]
    assert not leftovers, f"temporary commit files left behind: {leftovers}"


# --------------------------------------------------------------------------- table builders
def spark_table(spark, path: str, appends: int = 3, props: str = "") -> None:
    """Partitioned table made by delta-spark SQL; each append writes one file per partition."""
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, name STRING, part STRING) USING delta PARTITIONED BY (part) {props}"
    )
    for i in range(appends):
        rows = [(i, f"n{i}", SPECIAL), (100 + i, f"m{i}", "x"), (200 + i, None, "x")]
        spark.createDataFrame(rows, SPARK_SCHEMA).coalesce(1).write.format("delta").mode("append").save(path)


def deltars_table(path: str, appends: int = 3, configuration: dict[str, str] | None = None) -> None:
    from deltalake import write_deltalake

    for i in range(appends):
        t = pa.table(
            {
                "id": pa.array([i, 100 + i, 200 + i], pa.int64()),
                "name": pa.array([f"n{i}", f"m{i}", None], pa.string()),
                "part": pa.array([SPECIAL, "x", "x"], pa.string()),
            }
        )
        write_deltalake(path, t, partition_by=["part"], mode="append", configuration=configuration if i == 0 else None)


def one_row_files(root: str, log_dir: str, partition: dict[str, str | None], ids: list[int]) -> list[AddFile]:
    return [
        write_data_file(
            root,
            log_dir,
            pa.table({"id": pa.array([i], pa.int64()), "name": pa.array([f"r{i}"], pa.string())}),
            partition,
            data_change=True,
        )
        for i in ids
    ]


# =========================================================================== 1. rewrite commits
@pytest.mark.spark
def test_rewrite_on_delta_spark_table(spark, tmp_path):
    path = str(tmp_path / "spark_t")
    spark_table(spark, path)
    # One more file in the special partition committed by our writer, with tags, so the rewrite's
    # removes must carry tags over.
    snap = load_snapshot(path)
    special = in_partition(snap, part=SPECIAL)
    tagged = write_data_file(
        path,
        posixpath.dirname(special[0].path),
        pa.table({"id": pa.array([7], pa.int64()), "name": pa.array(["tagged"], pa.string())}),
        {"part": SPECIAL},
        data_change=True,
        tags={"INSERTION_TIME": "1700000000000000", "ddo.test": "yes"},
    )
    blind_append(snap, [tagged])

    expected = rows_spark(spark, path, COLS)
    before = load_snapshot(path)
    targets = in_partition(before, part=SPECIAL)
    assert len(targets) == 4 and any(f.tags for f in targets)

    res, add, removes, metrics = rewrite(before, targets)

    assert (res.version, res.read_version, res.rebased_over, res.attempts) == (
        before.version + 1,
        before.version,
        (),
        1,
    )
    assert res.checkpoint_version is None
    assert_optimize_commit_shape(path, res, before, add, removes, metrics)
    tagged_remove = next(r for r in raw_lines(path, res.version)[1:] if r.get("remove", {}).get("path") == tagged.path)
    assert tagged_remove["remove"]["tags"] == {"INSERTION_TIME": "1700000000000000", "ddo.test": "yes"}

    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected
    # delta-spark really reads the new file (and only it) for the partition; stats-based skipping is right.
    files = spark_input_files(spark, path)
    assert os.path.basename(add.path) in files
    assert not files & {os.path.basename(r.path) for r in removes}
    df = spark.read.format("delta").load(path)
    assert [r.id for r in df.where("id = 2").collect()] == [2]
    assert sorted(r.id for r in df.where(f"part = '{SPECIAL}' AND id >= 1").collect()) == [1, 2, 7]
    assert_history(spark, path, res, metrics)

    after = load_snapshot(path)
    assert after.version == res.version
    assert {f.path for f in after.files} == ({f.path for f in before.files} - {r.path for r in removes}) | {add.path}
    assert next(f for f in after.files if f.path == add.path) == add
    assert in_partition(after, part="x") == in_partition(before, part="x")


@pytest.mark.spark
def test_rewrite_on_deltars_table(spark, tmp_path):
    path = str(tmp_path / "rs_t")
    deltars_table(path)
    expected = rows_deltars(path, COLS)
    assert rows_spark(spark, path, COLS) == expected
    before = load_snapshot(path)
    assert before.version == 2 and before.partition_columns == ("part",)

    # Compact both partitions, one commit each: the second is on a stale snapshot and rebases.
    res1, add1, rm1, m1 = rewrite(before, in_partition(before, part="x"))
    assert_optimize_commit_shape(path, res1, before, add1, rm1, m1)
    res2, add2, _rm2, m2 = rewrite(before, in_partition(before, part=SPECIAL))
    assert res2.version == res1.version + 1 and res2.rebased_over == (res1.version,)
    assert res2.read_version == before.version
    assert read_commit(path, res2.version)[0]["commitInfo"]["readVersion"] == before.version

    assert rows_deltars(path, COLS) == expected
    assert rows_spark(spark, path, COLS) == expected
    assert_history(spark, path, res2, m2)
    after = load_snapshot(path)
    assert after.version == res2.version
    assert {f.path for f in after.files} == {add1.path, add2.path}
    assert {f.path: f.num_records for f in after.files} == {add1.path: 6, add2.path: 3}
    assert os.path.basename(add2.path) in spark_input_files(spark, path)


# =========================================================================== 2. racing writers
def _check_blind_append_race(path: str, v0: int, results: list[dict], added: list[AddFile]) -> None:
    n = len(added)
    versions = sorted(r["version"] for r in results)
    assert versions == list(range(v0 + 1, v0 + 1 + n)), "every version written exactly once, contiguous"
    for r in results:
        assert r["read_version"] == v0
        assert r["rebased_over"] == list(range(v0 + 1, r["version"])), "a loser rebases over every winner"
        assert r["attempts"] >= 1
    assert any(r["rebased_over"] for r in results), "the race produced no loser at all"
    # A stale snapshot makes every commit but the first rebase even when the writers run one after the other:
    # the writers' own versions prove they raced, interleaved rather than one writer's block after another's.
    mine: dict[int, list[int]] = {}
    for r in results:
        mine.setdefault(r["writer"], []).append(r["version"])
    assert len(mine) > 1 and any(
        min(a) < max(b) and min(b) < max(a) for i, a in mine.items() for j, b in mine.items() if i < j
    ), f"no two writers' versions interleave: they did not race ({mine})"
    assert log_versions(path) == list(range(0, v0 + 1 + n))
    txn_ids: list[str] = []
    added_paths: list[str] = []
    for v in range(v0 + 1, v0 + 1 + n):
        actions = read_commit(path, v)
        assert list(actions[0]) == ["commitInfo"] and len(actions) == 2
        txn_ids.append(actions[0]["commitInfo"]["txnId"])
        added_paths.append(actions[1]["add"]["path"])
    assert len(set(txn_ids)) == n, "a commit was written twice or overwritten"
    assert sorted(added_paths) == sorted(a.path for a in added), "every file added exactly once"
    assert_no_tmp(path)


def _race_table(tmp_path, name: str) -> str:
    from deltalake import write_deltalake

    path = str(tmp_path / name)
    write_deltalake(
        path, pa.table({"id": pa.array([-1], pa.int64()), "name": pa.array(["seed"], pa.string())}), mode="append"
    )
    return path


@pytest.mark.spark
def test_racing_blind_appends_threads(spark, tmp_path):
    path = _race_table(tmp_path, "race_threads")
    snap = load_snapshot(path)
    threads_n, per_thread = 4, 5
    files = one_row_files(path, "", {}, list(range(threads_n * per_thread)))
    barrier = threading.Barrier(threads_n)
    results: list[dict] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(writer: int, mine: list[AddFile]) -> None:
        barrier.wait()
        for f in mine:
            try:
                res = blind_append(snap, [f])  # always the stale snapshot: maximal contention
            except BaseException as exc:
                with lock:
                    errors.append(exc)
                continue
            with lock:
                results.append(
                    {
                        "writer": writer,
                        "version": res.version,
                        "read_version": res.read_version,
                        "attempts": res.attempts,
                        "rebased_over": list(res.rebased_over),
                    }
                )

    ts = [threading.Thread(target=work, args=(i, files[i::threads_n])) for i in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    _check_blind_append_race(path, snap.version, results, files)
    expected = sorted([(-1, "seed")] + [(i, f"r{i}") for i in range(threads_n * per_thread)], key=_key)
    assert rows_deltars(path, ["id", "name"]) == expected
    assert rows_spark(spark, path, ["id", "name"]) == expected
    assert len(load_snapshot(path).files) == threads_n * per_thread + 1


def _run_workers(tmp_path, path: str, jobs: list[dict]) -> list[list[dict]]:
    """Start one child per job, release them together, return each child's result lines."""
    go = str(tmp_path / f"go-{uuid.uuid4().hex}")
    procs = []
    for i, job in enumerate(jobs):
        job_file = tmp_path / f"job-{uuid.uuid4().hex}-{i}.json"
        job_file.write_text(json.dumps({"table": path, "go_file": go, **job}))
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.join(HERE, "commit_race_worker.py"), str(job_file)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:  # wait until every child has loaded its snapshot
        line = p.stdout.readline()
        assert json.loads(line or "{}").get("ready"), p.stderr.read()
    open(go, "w").close()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        out.append([json.loads(line) for line in stdout.splitlines() if line.strip()])
    return out


@pytest.mark.spark
def test_racing_blind_appends_processes(spark, tmp_path):
    path = _race_table(tmp_path, "race_procs")
    v0 = load_snapshot(path).version
    procs_n, per_proc = 3, 6
    files = one_row_files(path, "", {}, list(range(procs_n * per_proc)))
    jobs = [{"commits": [[{"add": f.to_json()}] for f in files[i::procs_n]]} for i in range(procs_n)]
    outs = _run_workers(tmp_path, path, jobs)
    results = [{**r, "writer": i} for i, out in enumerate(outs) for r in out]
    assert all("error" not in r for r in results), results
    assert len(results) == procs_n * per_proc
    _check_blind_append_race(path, v0, results, files)
    expected = sorted([(-1, "seed")] + [(i, f"r{i}") for i in range(procs_n * per_proc)], key=_key)
    assert rows_deltars(path, ["id", "name"]) == expected
    assert rows_spark(spark, path, ["id", "name"]) == expected


def _check_rewrite_race(
    spark, path: str, before: Snapshot, outcomes: list[dict], adds: list[AddFile], expected
) -> None:
    winners = [o for o in outcomes if "error" not in o]
    losers = [o for o in outcomes if "error" in o]
    assert len(winners) == 1, outcomes
    assert winners[0]["version"] == before.version + 1 and winners[0]["rebased_over"] == []
    assert len(losers) == len(adds) - 1
    for o in losers:
        assert o["error"] == "ConcurrentDeleteDeleteError", o
        assert o["winning_version"] == before.version + 1
        assert o["paths"]
    assert log_versions(path)[-1] == before.version + 1, "a loser wrote a version"
    assert_no_tmp(path)
    after = load_snapshot(path)
    winner_add = read_commit(path, before.version + 1)[1]["add"]["path"]
    assert winner_add in {a.path for a in adds}
    assert [f.path for f in in_partition(after, part="x")] == [winner_add]
    assert rows_deltars(path, COLS) == expected
    assert rows_spark(spark, path, COLS) == expected


@pytest.mark.spark
def test_racing_rewrites_of_same_files_threads(spark, tmp_path):
    path = str(tmp_path / "rw_threads")
    deltars_table(path)
    expected = rows_deltars(path, COLS)
    before = load_snapshot(path)
    targets = in_partition(before, part="x")
    n = 4
    prepared = [compact(before, targets) for _ in range(n)]
    barrier = threading.Barrier(n)
    outcomes: list[dict] = []
    lock = threading.Lock()

    def work(add, removes, metrics):
        txn = Transaction(before)
        txn.track_read(targets)
        barrier.wait()
        try:
            res = txn.commit([add, *removes], "OPTIMIZE", OPTIMIZE_PARAMS, metrics)
            out = {"version": res.version, "rebased_over": list(res.rebased_over)}
        except CommitConflictError as exc:
            out = {"error": type(exc).__name__, "winning_version": exc.winning_version, "paths": list(exc.paths)}
        with lock:
            outcomes.append(out)

    ts = [threading.Thread(target=work, args=p) for p in prepared]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    _check_rewrite_race(spark, path, before, outcomes, [p[0] for p in prepared], expected)


@pytest.mark.spark
def test_racing_rewrites_of_same_files_processes(spark, tmp_path):
    path = str(tmp_path / "rw_procs")
    deltars_table(path)
    expected = rows_deltars(path, COLS)
    before = load_snapshot(path)
    targets = in_partition(before, part="x")
    prepared = [compact(before, targets) for _ in range(3)]
    jobs = [
        {
            "operation": "OPTIMIZE",
            "parameters": OPTIMIZE_PARAMS,
            "commits": [[{"add": add.to_json()}, *({"remove": r.to_json()} for r in removes)]],
        }
        for add, removes, _ in prepared
    ]
    outcomes = [r for out in _run_workers(tmp_path, path, jobs) for r in out]
    _check_rewrite_race(spark, path, before, outcomes, [p[0] for p in prepared], expected)


# =========================================================================== 3. conflict matrix vs delta-spark
@pytest.fixture
def conflict_table(spark, tmp_path):
    """(path, snapshot N, prepared rewrite of partition 'x' not yet committed)."""
    path = str(tmp_path / "conflict")
    spark_table(spark, path, appends=2)
    snap = load_snapshot(path)
    targets = in_partition(snap, part="x")
    assert len(targets) == 2
    add, removes, metrics = compact(snap, targets)
    txn = Transaction(snap)
    txn.track_read(targets)
    return path, snap, txn, [add, *removes], metrics


@pytest.mark.spark
def test_conflict_concurrent_append_rebases(spark, conflict_table):
    path, snap, txn, actions, metrics = conflict_table
    spark.createDataFrame([(900, "late", "x"), (901, "late", SPECIAL)], SPARK_SCHEMA).write.format("delta").mode(
        "append"
    ).save(path)
    expected = rows_spark(spark, path, COLS)
    assert len(expected) == 8
    res = txn.commit(actions, "OPTIMIZE", OPTIMIZE_PARAMS, metrics)
    assert res.version == snap.version + 2 and res.rebased_over == (snap.version + 1,)
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected
    after = load_snapshot(path)
    spark_added = {a["add"]["path"] for a in read_commit(path, snap.version + 1) if "add" in a}
    assert spark_added <= {f.path for f in after.files}
    assert actions[0].path in {f.path for f in after.files}
    assert not {a.path for a in actions[1:]} & {f.path for f in after.files}


def _spark_delete(spark, path):
    spark.sql(f"DELETE FROM delta.`{path}` WHERE part = 'x'")


def _spark_replace_where(spark, path):
    spark.createDataFrame([(555, "replaced", "x")], SPARK_SCHEMA).write.format("delta").mode("overwrite").option(
        "replaceWhere", "part = 'x'"
    ).save(path)


def _spark_delete_one_row(spark, path):
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 100")


@pytest.mark.spark
@pytest.mark.parametrize("concurrent", [_spark_delete, _spark_replace_where, _spark_delete_one_row])
def test_conflict_concurrent_delete_of_read_file(spark, conflict_table, concurrent):
    path, snap, txn, actions, metrics = conflict_table
    log_before = log_snapshot(path)
    concurrent(spark, path)
    expected = rows_spark(spark, path, COLS)
    log_spark = log_snapshot(path)
    with pytest.raises(ConcurrentDeleteReadError) as ei:
        txn.commit(actions, "OPTIMIZE", OPTIMIZE_PARAMS, metrics)
    assert ei.value.winning_version == snap.version + 1
    assert ei.value.paths and set(ei.value.paths) <= {a.path for a in actions[1:]}
    assert "Nothing was committed" in str(ei.value)
    # Nothing of ours in the log: only delta-spark's version N+1 entries are new.
    log_after = log_snapshot(path)
    assert log_after == log_spark
    assert all(str(snap.version + 1).zfill(20) in n for n in new_log_entries(log_before, log_after))
    assert log_versions(path)[-1] == snap.version + 1
    assert_no_tmp(path)
    # No resurrection: both engines read delta-spark's result.
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected
    assert load_snapshot(path).version == snap.version + 1


def _spark_optimize(spark, path):
    spark.sql(f"OPTIMIZE delta.`{path}`")


def _deltars_optimize(spark, path):
    from deltalake import DeltaTable

    assert DeltaTable(path).optimize.compact()["numFilesRemoved"] > 0


@pytest.mark.spark
@pytest.mark.parametrize("concurrent", [_spark_optimize, _deltars_optimize], ids=["delta-spark", "delta-rs"])
def test_conflict_concurrent_optimize_is_delete_delete(spark, conflict_table, concurrent):
    """Another engine's OPTIMIZE compacted our files first: a delete-delete conflict, rows unchanged."""
    path, snap, txn, actions, metrics = conflict_table
    expected = rows_spark(spark, path, COLS)
    concurrent(spark, path)
    log_engine = log_snapshot(path)
    with pytest.raises(ConcurrentDeleteDeleteError) as ei:
        txn.commit(actions, "OPTIMIZE", OPTIMIZE_PARAMS, metrics)
    assert ei.value.winning_version == snap.version + 1
    assert set(ei.value.paths) == {a.path for a in actions[1:]}
    assert log_snapshot(path) == log_engine
    assert_no_tmp(path)
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected


@pytest.mark.spark
@pytest.mark.parametrize(
    "sql, error",
    [
        ("ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('ddo.test' = 'changed')", MetadataChangedError),
        ("ALTER TABLE delta.`{p}` ADD COLUMNS (extra STRING)", MetadataChangedError),
        # delta-spark writes metaData *before* protocol here: the protocol change must still win.
        ("ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('delta.minWriterVersion' = '3')", ProtocolChangedError),
        ("ALTER TABLE delta.`{p}` ADD CONSTRAINT id_pos CHECK (id >= 0)", ProtocolChangedError),
    ],
    ids=["set-property", "add-column", "protocol-upgrade", "add-constraint"],
)
def test_conflict_metadata_or_protocol_change(spark, conflict_table, sql, error):
    path, snap, txn, actions, metrics = conflict_table
    expected = rows_spark(spark, path, COLS)
    spark.sql(sql.format(p=path))
    log_spark = log_snapshot(path)
    with pytest.raises(error) as ei:
        txn.commit(actions, "OPTIMIZE", OPTIMIZE_PARAMS, metrics)
    assert type(ei.value) is error
    assert ei.value.winning_version == snap.version + 1
    assert log_snapshot(path) == log_spark
    assert_no_tmp(path)
    cols = COLS
    assert rows_spark(spark, path, cols) == expected
    assert rows_deltars(path, cols) == expected


# =========================================================================== unit-level commit behaviour
def _fake_log(tmp_path) -> str:
    from deltalake import write_deltalake

    path = str(tmp_path / "unit")
    write_deltalake(path, pa.table({"id": pa.array([1], pa.int64())}), mode="append")
    return path


def test_check_conflicts_classification(tmp_path):
    root = str(tmp_path)
    read = {"a/f1.parquet", "a/f2.parquet"}
    removed = {"a/f1.parquet"}

    def run(actions):
        check_conflicts(7, actions, read_paths=read, removed_paths=removed, root=root)

    run([{"commitInfo": {}}, {"add": {"path": "a/f9.parquet", "dataChange": True}}])  # appends never conflict
    run([{"remove": {"path": "a/other.parquet", "dataChange": True}}])  # a file we did not read
    with pytest.raises(ConcurrentDeleteReadError):  # a delete of a file we read but keep
        run([{"remove": {"path": "a/f2.parquet", "dataChange": True}}])
    with pytest.raises(ConcurrentDeleteReadError):  # a delete (dataChange=true) of a file we rewrite
        run([{"remove": {"path": "a/f1.parquet", "dataChange": True}}])
    with pytest.raises(ConcurrentDeleteDeleteError) as ei:  # another compaction of the file we rewrite
        run([{"remove": {"path": "a/f1.parquet", "dataChange": False}}])
    assert ei.value.paths == ("a/f1.parquet",) and ei.value.winning_version == 7
    with pytest.raises(ConcurrentDeleteReadError):  # absolute URI form of the same file still matches
        run([{"remove": {"path": f"file://{root}/a/f2.parquet", "dataChange": True}}])
    with pytest.raises(ConcurrentDeleteReadError):  # URI-encoded form
        run([{"remove": {"path": "a/f%32.parquet", "dataChange": True}}])
    with pytest.raises(ProtocolChangedError):
        run([{"metaData": {}}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 3}}])
    with pytest.raises(MetadataChangedError):
        run([{"metaData": {}}])
    # Domain metadata (delta-spark's checkIfDomainMetadataConflict): only a domain we write too conflicts,
    # and delta.rowTracking never does (the rebase assigns our row ids above the winner's mark).
    run([{"domainMetadata": {"domain": "x", "configuration": "{}", "removed": False}}])
    check_conflicts(
        7,
        [{"domainMetadata": {"domain": "delta.rowTracking", "configuration": '{"rowIdHighWaterMark":9}'}}],
        read_paths=read,
        removed_paths=removed,
        root=root,
        domains=("delta.rowTracking",),
    )
    with pytest.raises(MetadataChangedError, match=r"app\.x"):
        check_conflicts(
            7,
            [{"domainMetadata": {"domain": "app.x", "configuration": "{}"}}],
            read_paths=read,
            removed_paths=removed,
            root=root,
            domains=("app.x", "delta.rowTracking"),
        )


def test_encoded_paths_match_in_conflicts(tmp_path):
    root = str(tmp_path)
    with pytest.raises(ConcurrentDeleteReadError):
        check_conflicts(
            3,
            [{"remove": {"path": "part=a%20b%252Fc/f.parquet", "dataChange": True}}],
            read_paths={"part=a b%2Fc/f.parquet"},
            removed_paths=set(),
            root=root,
        )


def test_transaction_guards(tmp_path):
    path = _fake_log(tmp_path)
    snap = load_snapshot(path)
    with pytest.raises(InvalidConfigError):
        Transaction(snap, max_attempts=0)
    txn = Transaction(snap)
    f = one_row_files(path, "", {}, [5])
    res = txn.commit(f, "WRITE", {"mode": "Append"})
    assert res.version == 1
    ci = read_commit(path, 1)[0]["commitInfo"]
    assert ci["operationMetrics"] == {}
    with pytest.raises(CommitFailedError):
        txn.commit(f, "WRITE", {"mode": "Append"})
    assert log_versions(path) == [0, 1]


def test_gives_up_after_max_attempts(tmp_path):
    """A storage whose every put loses: the writer gives up with nothing written."""
    from dbt_delta_optimize.delta.storage import LocalStorage

    path = _fake_log(tmp_path)
    snap = load_snapshot(path)
    files = one_row_files(path, "", {}, [1])

    class Losing(LocalStorage):
        def __init__(self):
            super().__init__()
            self.v = snap.version

        def put_if_absent(self, p, data):  # someone else always wins this version first
            self.v += 1
            other = Transaction(load_snapshot(path), storage=LocalStorage())
            other.commit(one_row_files(path, "", {}, [100 + self.v]), "WRITE", {"mode": "Append"})
            return False

    with pytest.raises(CommitFailedError) as ei:
        Transaction(snap, storage=Losing(), max_attempts=3).commit(files, "WRITE", {"mode": "Append"})
    assert not isinstance(ei.value, CommitConflictError)
    assert "3 attempts" in str(ei.value)
    txn_paths = {a["add"]["path"] for v in log_versions(path) for a in read_commit(path, v) if "add" in a}
    assert files[0].path not in txn_paths


def test_put_if_absent_has_exactly_one_winner(tmp_path):
    from dbt_delta_optimize.delta.storage import LocalStorage

    target = str(tmp_path / "00000000000000000001.json")
    n = 8
    barrier = threading.Barrier(n)
    won: list[int] = []

    def put(i: int) -> None:
        barrier.wait()
        if LocalStorage().put_if_absent(target, f"writer {i}\n".encode() * 1000):
            won.append(i)

    ts = [threading.Thread(target=put, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(won) == 1
    with open(target, "rb") as fh:
        assert fh.read() == f"writer {won[0]}\n".encode() * 1000, "the winner's bytes, whole"
    assert os.listdir(tmp_path) == ["00000000000000000001.json"], "no temp files left"
    assert LocalStorage().put_if_absent(target, b"late") is False


def test_storage_for_routes_schemes():
    from dbt_delta_optimize.delta.object_store import ObjectStorage
    from dbt_delta_optimize.delta.storage import LocalStorage, storage_for
    from dbt_delta_optimize.errors import InvalidArgumentError

    assert isinstance(storage_for("/tmp/t"), LocalStorage) and isinstance(storage_for("file:///tmp/t"), LocalStorage)
    assert isinstance(storage_for("s3://bucket/table"), ObjectStorage)
    with pytest.raises(InvalidArgumentError, match="hdfs://"):
        storage_for("hdfs://nn/table")


# =========================================================================== 5. checkpoints
def _json_replay(path: str, version: int) -> dict[str, dict]:
    """Live raw add actions by replaying every JSON commit (the reference for checkpoint reads)."""
    live: dict[str, dict] = {}
    for v in range(version + 1):
        for a in read_commit(path, v):
            if "add" in a:
                live[unquote(a["add"]["path"])] = a["add"]
            elif "remove" in a:
                live.pop(unquote(a["remove"]["path"]), None)
    return live


def _assert_snapshot_matches_replay(snap: Snapshot, replay: dict[str, dict]) -> None:
    assert {unquote(f.path) for f in snap.files} == set(replay)
    for f in snap.files:
        raw = AddFile.from_json(replay[unquote(f.path)])
        assert f.path == raw.path
        assert dict(f.partition_values) == dict(raw.partition_values)
        assert dict(f.tags) == dict(raw.tags)
        assert f.size == raw.size and f.modification_time == raw.modification_time
        assert f.parsed_stats == raw.parsed_stats


@pytest.mark.spark
@pytest.mark.slow
def test_checkpoint_written_by_our_commit(spark, tmp_path):
    path = str(tmp_path / "cp")
    # v0 create, v1 and v2 delta-spark appends: with interval 3, version 3 is ours and must checkpoint.
    spark_table(spark, path, appends=2, props="TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    log_dir = os.path.join(path, "_delta_log")
    before = load_snapshot(path)
    assert before.version == 2 and before.configuration["delta.checkpointInterval"] == "3"
    expected = rows_spark(spark, path, COLS)

    res, add, _removes, _metrics = rewrite(before, in_partition(before, part="x"), tags={"ddo.cp": "kept"})
    assert res.version == 3 and res.checkpoint_version == 3
    assert os.path.exists(os.path.join(log_dir, f"{3:020d}.checkpoint.parquet"))
    with open(os.path.join(log_dir, "_last_checkpoint")) as fh:
        assert json.load(fh)["version"] == 3

    # A non-multiple commit writes no checkpoint.
    snap3 = load_snapshot(path)
    res4 = blind_append(snap3, one_row_files(path, posixpath.dirname(add.path), {"part": "x"}, [42]))
    assert res4.version == 4 and res4.checkpoint_version is None
    assert not os.path.exists(os.path.join(log_dir, f"{4:020d}.checkpoint.parquet"))
    expected = sorted([*expected, (42, "r42", "x")], key=_key)
    replay4 = _json_replay(path, 4)

    # Simulate log clean-up: every reader must now start from our checkpoint.
    for v in range(3):
        for n in (f"{v:020d}.json", f"{v:020d}.crc", f".{v:020d}.json.crc", f".{v:020d}.crc.crc"):
            if os.path.exists(os.path.join(log_dir, n)):
                os.unlink(os.path.join(log_dir, n))
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected
    snap4 = load_snapshot(path)
    assert snap4.version == 4
    _assert_snapshot_matches_replay(snap4, replay4)
    assert dict(next(f for f in snap4.files if f.path == add.path).tags) == {"ddo.cp": "kept"}

    # delta-spark appends on top of our checkpoint; v6 is delta-spark's own checkpoint.
    spark.createDataFrame([(300, "after", "x")], SPARK_SCHEMA).write.format("delta").mode("append").save(path)
    spark.createDataFrame([(301, "after", SPECIAL)], SPARK_SCHEMA).write.format("delta").mode("append").save(path)
    assert os.path.exists(os.path.join(log_dir, f"{6:020d}.checkpoint.parquet"))
    expected = sorted([*expected, (300, "after", "x"), (301, "after", SPECIAL)], key=_key)
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected
    replay6 = {**replay4}
    for v in (5, 6):
        replay6.update({unquote(a["add"]["path"]): a["add"] for a in read_commit(path, v) if "add" in a})
    snap6 = load_snapshot(path)
    assert snap6.version == 6
    _assert_snapshot_matches_replay(snap6, replay6)  # read through delta-spark's checkpoint parquet
    assert dict(next(f for f in snap6.files if f.path == add.path).tags) == {"ddo.cp": "kept"}

    # Our rewrite on top of delta-spark's checkpoint: removes still carry the checkpointed tags.
    res7, _add7, _removes7, _m7 = rewrite(snap6, in_partition(snap6, part="x"))
    assert res7.version == 7
    rm = next(a["remove"] for a in read_commit(path, 7)[1:] if a.get("remove", {}).get("path") == add.path)
    assert rm["tags"] == {"ddo.cp": "kept"} and rm["size"] == add.size and rm["partitionValues"] == {"part": "x"}
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected


@pytest.mark.spark
def test_checkpoint_on_deltars_table(spark, tmp_path, monkeypatch):
    import dbt_delta_optimize.delta.commit as commit_module

    parsed: list[int] = []  # our own commit is parsed again only for a checkpoint (not every commit)
    real_parse = commit_module.parse_commit
    monkeypatch.setattr(commit_module, "parse_commit", lambda d, r, v: parsed.append(v) or real_parse(d, r, v))
    path = str(tmp_path / "cp_rs")
    deltars_table(path, appends=3, configuration={"delta.checkpointInterval": "2"})
    expected = rows_deltars(path, COLS)
    before = load_snapshot(path)
    assert before.version == 2
    res_a, add_a, _, _ = rewrite(before, in_partition(before, part="x"))
    assert res_a.version == 3 and res_a.checkpoint_version is None and parsed == []
    res_b, add_b, _, _ = rewrite(load_snapshot(path), in_partition(load_snapshot(path), part=SPECIAL))
    assert res_b.version == 4 and res_b.checkpoint_version == 4 and parsed == [4]
    assert os.path.exists(os.path.join(path, "_delta_log", f"{4:020d}.checkpoint.parquet"))
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert rows_spark(spark, path, COLS) == expected
    assert rows_deltars(path, COLS) == expected
    snap = load_snapshot(path)
    _assert_snapshot_matches_replay(snap, _json_replay(path, 4))
    assert {f.path for f in snap.files} == {add_a.path, add_b.path}
