"""Row tracking, domain metadata and in-commit timestamps (#16), delta-spark 4.4 as the oracle.

Unit tests write small logs by hand (the commit writer needs no data files); the Spark tests
optimize tables delta-spark created and read every row's (id, _metadata.row_id,
_metadata.row_commit_version) back with delta-spark, before and after.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import time
from typing import Any

import pytest

from dbt_delta_optimize.api import optimize
from dbt_delta_optimize.delta.actions import AddFile
from dbt_delta_optimize.delta.commit import Transaction
from dbt_delta_optimize.delta.snapshot import load_snapshot, read_commit
from dbt_delta_optimize.inspect.validate import validate_commit
from dbt_delta_optimize.inspect.validate_row_tracking import ROW_TRACKING_CODES
from tests.helpers import log_versions, rows_deltars

ROW_ID_COL = "_row-id-col-test"
VERSION_COL = "_row-commit-version-col-test"
DAY_MS = 86_400_000


# =========================================================================== hand-written logs
def _write(root: str, version: int, *actions: dict[str, Any]) -> None:
    os.makedirs(os.path.join(root, "_delta_log"), exist_ok=True)
    with open(os.path.join(root, "_delta_log", f"{version:020d}.json"), "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def _add(path: str, rows: int, base: int | None, version: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "path": path,
        "partitionValues": {},
        "size": 100,
        "modificationTime": 1,
        "dataChange": True,
        "stats": json.dumps({"numRecords": rows}),
    }
    if base is not None:
        body |= {"baseRowId": base, "defaultRowCommitVersion": version}
    return {"add": body}


def _mark(n: int) -> dict[str, Any]:
    return {
        "domainMetadata": {
            "domain": "delta.rowTracking",
            "configuration": json.dumps(
                {"rowIdHighWaterMark": n, "domainName": "delta.rowTracking"}, separators=(",", ":")
            ),
            "removed": False,
        }
    }


def _info(ict: int | None, op: str = "WRITE") -> dict[str, Any]:
    return {"commitInfo": {**({"inCommitTimestamp": ict} if ict else {}), "timestamp": ict or 1, "operation": op}}


def _table(root: str, ict0: int) -> None:
    """Version 0: row tracking and in-commit timestamps on, one file of 10 rows (ids 0..9), mark 9."""
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    _write(
        root,
        0,
        _info(ict0, "CREATE TABLE"),
        {
            "protocol": {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["rowTracking", "domainMetadata", "inCommitTimestamp"],
            }
        },
        {
            "metaData": {
                "id": "t",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {
                    "delta.enableRowTracking": "true",
                    "delta.rowTracking.materializedRowIdColumnName": ROW_ID_COL,
                    "delta.rowTracking.materializedRowCommitVersionColumnName": VERSION_COL,
                    "delta.enableInCommitTimestamps": "true",
                },
                "createdTime": 1,
            }
        },
        _add("f0.parquet", 10, 0, 0),
        _mark(9),
    )


def _compaction(root: str) -> list[Any]:
    snap = load_snapshot(root)
    new = AddFile("new.parquet", {}, 50, 2, data_change=False, stats=json.dumps({"numRecords": 10}))
    return [new, snap.files[0].remove(3)]


def _commit(root: str, actions: list[Any], snapshot=None):
    txn = Transaction(snapshot or load_snapshot(root))
    return txn.commit(actions, "OPTIMIZE", {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": False})


def test_new_files_get_fresh_row_ids_commit_version_mark_and_ict(tmp_path):
    root = str(tmp_path)
    ict0 = int(time.time() * 1000) + DAY_MS  # a commit "from the future": ours must still come after it
    _table(root, ict0)
    result = _commit(root, _compaction(root))
    raw = read_commit(root, result.version)
    assert list(raw[0]) == ["commitInfo"], "commitInfo is the first action"
    info = raw[0]["commitInfo"]
    assert info["inCommitTimestamp"] == ict0 + 1 and next(iter(info)) == "inCommitTimestamp"
    assert info["tags"] == {"delta.rowTracking.preserved": "true"}
    add = next(a["add"] for a in raw if "add" in a)
    assert (add["baseRowId"], add["defaultRowCommitVersion"]) == (10, 1), "above mark 9, this commit's version"
    remove = next(a["remove"] for a in raw if "remove" in a)
    assert (remove["baseRowId"], remove["defaultRowCommitVersion"]) == (0, 0), "removes keep the file's values"
    assert raw[-1] == _mark(19)
    assert load_snapshot(root).domains["delta.rowTracking"].config["rowIdHighWaterMark"] == 19


def test_rebase_over_an_append_reassigns_row_ids_version_and_ict(tmp_path):
    root = str(tmp_path)
    ict0 = int(time.time() * 1000) + DAY_MS
    _table(root, ict0)
    snapshot = load_snapshot(root)
    actions = _compaction(root)
    # A concurrent append wins version 1 (ids 10..14, mark 14) with a later timestamp, and an
    # application domain: not one we write, so no conflict.
    app = {"domainMetadata": {"domain": "app.owner", "configuration": "{}", "removed": False}}
    _write(root, 1, _info(ict0 + 500), _add("g.parquet", 5, 10, 1), _mark(14), app)
    result = _commit(root, actions, snapshot)
    assert (result.version, result.rebased_over) == (2, (1,))
    raw = read_commit(root, 2)
    assert raw[0]["commitInfo"]["inCommitTimestamp"] == ict0 + 501
    add = next(a["add"] for a in raw if "add" in a)
    assert (add["baseRowId"], add["defaultRowCommitVersion"]) == (15, 2)
    assert raw[-1] == _mark(24)
    live = load_snapshot(root)
    spans = sorted((f.base_row_id, f.base_row_id + (f.num_records or 0) - 1) for f in live.files)
    assert spans == [(10, 14), (15, 24)], "row ids unique across the append and our rewrite"
    assert set(live.domains) == {"delta.rowTracking", "app.owner"}, "other domains carried through"
    codes = validate_commit(root, 2, check_footers=False).codes  # no data files here: only the log's invariants
    assert not set(codes) & set(ROW_TRACKING_CODES), codes


def _mutated_report(tmp_path, mutate) -> set[str]:
    root = str(tmp_path)
    _table(root, int(time.time() * 1000))
    result = _commit(root, _compaction(root))
    path = os.path.join(root, "_delta_log", f"{result.version:020d}.json")
    with open(path) as fh:
        actions = [json.loads(line) for line in fh]
    mutate(actions)
    with open(path, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    report = validate_commit(root, result.version, check_footers=False)
    return {c for c in report.codes if c in ROW_TRACKING_CODES}


def _add_of(actions):
    return next(a["add"] for a in actions if "add" in a)


MUTATIONS = {
    "row_id_missing": lambda acts: _add_of(acts).pop("baseRowId"),
    "row_id_not_fresh": lambda acts: _add_of(acts).update(baseRowId=5),
    "row_commit_version_mismatch": lambda acts: _add_of(acts).update(defaultRowCommitVersion=0),
    "row_id_high_water_mark": lambda acts: acts.pop(),
    "remove_row_id_mismatch": lambda acts: next(a["remove"] for a in acts if "remove" in a).update(baseRowId=3),
    "commit_info_not_first": lambda acts: acts.append(acts.pop(0)),
    "in_commit_timestamp_invalid": lambda acts: acts[0]["commitInfo"].update(inCommitTimestamp=1),
}


@pytest.mark.parametrize("code", ROW_TRACKING_CODES)
def test_validation_finds_broken_row_tracking(tmp_path, code):
    found = _mutated_report(tmp_path, MUTATIONS[code])
    assert code in found, found


def test_validation_passes_our_commit(tmp_path):
    assert _mutated_report(tmp_path, lambda acts: None) == set()


@pytest.mark.parametrize(
    "config, base, tagged",
    [
        ({"delta.enableRowTracking": "false"}, 10, False),  # supported only: fresh ids, nothing to preserve
        ({"delta.enableRowTracking": "false", "delta.rowTrackingSuspended": "true"}, None, False),
    ],
)
def test_supported_but_not_enabled_and_suspended(tmp_path, config, base, tagged):
    root = str(tmp_path)
    _table(root, int(time.time() * 1000))
    meta = read_commit(root, 0)
    next(a for a in meta if "metaData" in a)["metaData"]["configuration"].update(config)
    _write(root, 0, *meta)
    raw = read_commit(root, _commit(root, _compaction(root)).version)
    add = next(a["add"] for a in raw if "add" in a)
    assert add.get("baseRowId") == base
    assert ("tags" in raw[0]["commitInfo"]) is tagged
    assert any("domainMetadata" in a for a in raw) is (base is not None)


def test_arrow_rewrite_fills_row_ids_across_row_groups(tmp_path):
    """Positions continue across row groups; materialized values win over generated ones."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dbt_delta_optimize.tasks.messages import InputFile, Rewritten, RowTrackingColumns
    from tests.helpers import arrow_rewrite

    first, second = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    pq.write_table(pa.table({"id": list(range(5))}), first, row_group_size=2)  # 3 row groups
    materialized = pa.table({"id": [7, 8], ROW_ID_COL: [None, 99], VERSION_COL: [3, None]})
    pq.write_table(materialized, second)
    inputs = [
        InputFile(first, os.path.getsize(first), None, 100, 1),
        InputFile(second, os.path.getsize(second), None, 200, 2),
    ]
    fields = [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]
    out = str(tmp_path / "out" / "c.parquet")
    outcome = arrow_rewrite(inputs, out, fields, row_tracking=RowTrackingColumns(ROW_ID_COL, VERSION_COL))
    assert isinstance(outcome, Rewritten) and outcome.rows == 7
    t = pq.read_table(out)
    assert t.column_names == ["id", ROW_ID_COL, VERSION_COL]
    assert t.column(ROW_ID_COL).to_pylist() == [100, 101, 102, 103, 104, 200, 99]
    assert t.column(VERSION_COL).to_pylist() == [1, 1, 1, 1, 1, 3, 2]


# =========================================================================== delta-spark tables
def _triples(spark, path: str) -> list[tuple]:
    q = f"SELECT id, _metadata.row_id, _metadata.row_commit_version FROM delta.`{path}`"
    return sorted(tuple(r) for r in spark.sql(q).collect())


@pytest.fixture(scope="module")
def row_tracking_template(spark, tmp_path_factory):
    """Row tracking on, 2 partitions, 3 inserts, then an UPDATE (materialized values, differing versions)."""
    p = str(tmp_path_factory.mktemp("rt") / "t")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, x STRING, part INT) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.enableRowTracking'='true', 'delta.checkpointInterval'='5')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{p}` VALUES ({i}, 'a', 0), ({i + 10}, 'b', 1), ({i + 20}, 'c', 0)")
    spark.sql(f"UPDATE delta.`{p}` SET x = 'u' WHERE id IN (1, 11)")
    return p


@pytest.fixture
def rt_table(row_tracking_template, tmp_path):
    p = str(tmp_path / "t")
    shutil.copytree(row_tracking_template, p)
    return p


def _run_ours(spark, path: str, how: str) -> int:
    if how == "cli-zorder":
        from click.testing import CliRunner

        from dbt_delta_optimize.cli.main import cli

        r = CliRunner().invoke(cli, ["optimize", path, "--zorder-by", "x", "--json"], catch_exceptions=False)
        assert r.exit_code == 0, r.stderr
        return int(json.loads(r.stdout)["committedVersions"][-1])
    m = optimize(spark, path, rewrite_engine=how)
    return m.committed_versions[-1]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("how", ["arrow", "spark", "cli-zorder"])
def test_optimize_keeps_row_ids_and_commit_versions(spark, rt_table, how):
    before = _triples(spark, rt_table)
    assert len({r[2] for r in before}) > 1, "rows come from several commits"
    mark_before = load_snapshot(rt_table).domains["delta.rowTracking"].config["rowIdHighWaterMark"]
    version = _run_ours(spark, rt_table, how)
    assert _triples(spark, rt_table) == before
    raw = read_commit(rt_table, version)
    adds = [a["add"] for a in raw if "add" in a]
    assert adds and all(a["defaultRowCommitVersion"] == version for a in adds)
    assert min(a["baseRowId"] for a in adds) == mark_before + 1
    assert raw[0]["commitInfo"]["tags"] == {"delta.rowTracking.preserved": "true"}
    assert validate_commit(rt_table, version).ok
    assert sorted(r[0] for r in before) == sorted(r[0] for r in rows_deltars(rt_table, ["id"]))
    # Our commit is version 5: our checkpoint (delta/checkpoint_v1.py) keeps baseRowIds and the mark.
    assert version == 5 and os.path.exists(os.path.join(rt_table, "_delta_log", f"{version:020d}.checkpoint.parquet"))
    assert load_snapshot(rt_table).domains["delta.rowTracking"].config["rowIdHighWaterMark"] >= mark_before + len(
        before
    )
    # delta-spark's own OPTIMIZE afterwards keeps them too, and a new row gets a fresh id.
    spark.sql(f"OPTIMIZE delta.`{rt_table}` ZORDER BY (id)").collect()
    assert _triples(spark, rt_table) == before
    spark.sql(f"INSERT INTO delta.`{rt_table}` VALUES (100, 'n', 1)")
    ids = [r[1] for r in _triples(spark, rt_table)]
    assert len(ids) == len(set(ids)) == len(before) + 1


@pytest.mark.spark
@pytest.mark.slow
def test_concurrent_append_before_our_commit_keeps_row_ids_unique(spark, rt_table):
    before = _triples(spark, rt_table)
    appended: list[int] = []

    def append_once(*_: int) -> None:  # runs after a bin is rewritten, before the commit
        if not appended:
            spark.sql(f"INSERT INTO delta.`{rt_table}` VALUES (500, 'w', 0), (501, 'w', 1)")
            appended.append(log_versions(rt_table)[-1])

    m = optimize(spark, rt_table, progress=append_once, max_threads=1)
    version = m.committed_versions[-1]
    assert version == appended[0] + 1, "our commit rebased over the append"
    after = _triples(spark, rt_table)
    assert [r for r in after if r[0] < 500] == before
    ids = [r[1] for r in after]
    assert len(ids) == len(set(ids)) == len(before) + 2
    append_mark = json.loads(
        next(a for a in read_commit(rt_table, appended[0]) if "domainMetadata" in a)["domainMetadata"]["configuration"]
    )["rowIdHighWaterMark"]
    adds = [a["add"] for a in read_commit(rt_table, version) if "add" in a]
    assert min(a["baseRowId"] for a in adds) == append_mark + 1
    assert all(a["defaultRowCommitVersion"] == version for a in adds)
    assert validate_commit(rt_table, version).ok


@pytest.mark.spark
@pytest.mark.slow
def test_in_commit_timestamps_history_and_time_travel(spark, tmp_path):
    """ICT enabled after two commits (enablement version/timestamp set), our OPTIMIZE in the middle."""
    from deltalake import DeltaTable

    p = str(tmp_path / "ict")
    spark.sql(f"CREATE TABLE delta.`{p}` (id BIGINT, x STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (1, 'a'), (2, 'b')")
    spark.sql(f"ALTER TABLE delta.`{p}` SET TBLPROPERTIES ('delta.enableInCommitTimestamps'='true')")
    for i in range(3, 5):
        spark.sql(f"INSERT INTO delta.`{p}` VALUES ({i}, 'c')")
    config = load_snapshot(p).configuration
    assert "delta.inCommitTimestampEnablementVersion" in config
    rows_before = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM delta.`{p}`").collect())
    previous_ict = read_commit(p, log_versions(p)[-1])[0]["commitInfo"]["inCommitTimestamp"]

    version = optimize(spark, p).committed_versions[-1]
    raw = read_commit(p, version)
    assert list(raw[0]) == ["commitInfo"]
    ours = raw[0]["commitInfo"]["inCommitTimestamp"]
    assert ours > previous_ict
    assert validate_commit(p, version).ok
    spark.sql(f"INSERT INTO delta.`{p}` VALUES (9, 'z')")

    history = spark.sql(f"DESCRIBE HISTORY delta.`{p}`").select("version", "timestamp").collect()
    stamps = [r["timestamp"] for r in sorted(history, key=lambda r: r["version"])]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps), "history timestamps strictly increase"
    at_ours = datetime.datetime.fromtimestamp(ours / 1000, datetime.timezone.utc)
    assert next(r["timestamp"] for r in history if r["version"] == version).replace(
        tzinfo=datetime.timezone.utc
    ) == at_ours.replace(tzinfo=None).replace(tzinfo=datetime.timezone.utc)
    # Time travel by timestamp: at our commit's time the later insert is not there, in both engines.
    iso = at_ours.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    travelled = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM delta.`{p}` TIMESTAMP AS OF '{iso}'").collect())
    assert travelled == rows_before
    # deltalake 1.6 resolves a timestamp by commit files' modification times (it does not read
    # in-commit timestamps), so our commit is found at its file's time there.
    commit_file = os.path.join(p, "_delta_log", f"{version:020d}.json")
    at_file = datetime.datetime.fromtimestamp(os.path.getmtime(commit_file), datetime.timezone.utc)
    dt = DeltaTable(p)
    dt.load_as_version(max(at_ours, at_file))
    assert dt.version() == version
    # Just before both our commit's time and its file's: the file's mtime has the disk's coarse clock
    # (ext4 stamps by the kernel tick), so it can lie a few ms before our in-commit timestamp.
    before_ours = min(at_ours, at_file) - datetime.timedelta(milliseconds=1)
    previous_file = os.path.join(p, "_delta_log", f"{version - 1:020d}.json")
    assert os.path.getmtime(previous_file) <= before_ours.timestamp()
    dt.load_as_version(before_ours)
    assert dt.version() == version - 1
    from dbt_delta_optimize.inspect.history import history as our_history

    ours_entries = sorted(our_history(p, 10), key=lambda e: e["version"])
    ours_stamps = [
        e["timestamp"] for e in ours_entries if e["version"] >= int(config["delta.inCommitTimestampEnablementVersion"])
    ]
    assert ours_stamps == sorted(ours_stamps) and ours in ours_stamps


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("how", ["arrow", "spark"])
def test_row_ids_survive_with_deletion_vectors(spark, tmp_path, how):
    """Row ids come from physical positions: the rows a DV deletes are dropped only after ids are filled."""
    p = str(tmp_path / "rt_dv")
    spark.sql(
        f"CREATE TABLE delta.`{p}` (id BIGINT, x STRING) USING delta "
        "TBLPROPERTIES ('delta.enableRowTracking'='true', 'delta.enableDeletionVectors'='true')"
    )
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{p}` SELECT id + {i * 100}, 'v' FROM range(0, 40)")
    spark.sql(f"DELETE FROM delta.`{p}` WHERE id % 7 = 3")
    spark.sql(f"UPDATE delta.`{p}` SET x = 'u' WHERE id % 11 = 5")
    assert any(f.deletion_vector is not None for f in load_snapshot(p).files), "the DML left deletion vectors"
    before = _triples(spark, p)
    version = optimize(spark, p, rewrite_engine=how).committed_versions[-1]
    assert _triples(spark, p) == before
    after = load_snapshot(p)
    assert all(f.deletion_vector is None for f in after.files)
    assert validate_commit(p, version).ok


def _copy_tree(src, src_root: str, dst, dst_root: str, names: list[str]) -> None:
    from dbt_delta_optimize.delta.storage import join

    for name in names:
        dst.write_bytes(join(dst_root, name), src.read_bytes(join(src_root, name)))


@pytest.mark.spark
@pytest.mark.slow
def test_row_ids_kept_on_an_object_store(spark, rt_table, s3_server, monkeypatch, tmp_path):
    """The store paths (Arrow task reading the store, Z-order read by tasks): the table goes to moto S3,
    is optimized there, and comes back for delta-spark to read its row ids."""
    from dbt_delta_optimize.delta.storage import LocalStorage, storage_for

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    before = _triples(spark, rt_table)
    bucket = f"s3://{s3_server.new_bucket()}"
    local, store = LocalStorage(), storage_for(bucket)
    names = [
        os.path.relpath(os.path.join(d, f), rt_table)
        for d, _, files in os.walk(rt_table)
        for f in files
        if not f.endswith(".crc")
    ]
    for name, kwargs in (("compacted", {}), ("zordered", {"zorder_by": ["x"]})):
        url = f"{bucket}/{name}"
        _copy_tree(local, rt_table, store, url, names)
        version = optimize(spark, url, **kwargs).committed_versions[-1]
        assert validate_commit(url, version).ok
        back = str(tmp_path / name)
        snap = load_snapshot(url)
        log = [f"_delta_log/{n}" for n in store.list_dir(f"{url}/_delta_log")]
        _copy_tree(store, url, local, back, log + [f.path for f in snap.files])
        assert _triples(spark, back) == before, name
